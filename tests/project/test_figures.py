"""Measured figures on the pages (README.md, docs/) come from raw lines in benchmarks/results/
(tools/check_figures.py)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository
sys.path.insert(0, os.path.join(ROOT, "tools"))
import check_figures  # noqa: E402


def test_every_tagged_figure_is_in_its_raw_line():
    problems = [p for page in check_figures.pages() for p in check_figures.check_page(page)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_a_figure_that_drifted(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "run.jsonl").write_text(json.dumps({"F_MAE_meV_per_A": 6.34, "wall_s": 814.4, "nested": {"E": 0.0113},
                                                   "steps": 125000, "flag": True}) + "\n")
    page = tmp_path / "page.md"
    page.write_text("Reaches 6.3 meV/Å (energy 11.3 meV) after 125 000 steps in 814.4 s; then 6.4.\n"
                    "<!-- measured: run.jsonl: 6.3 11.3 125000 814.4 6.4 7.0 -->\n"
                    "\n"
                    "Another: 1 figure.\n"
                    "<!-- measured: missing.jsonl: 1 -->\n")
    problems = check_figures.check_page(str(page), results=str(results))
    assert problems == [f"{page}:2: 6.4 is in no raw line of run.jsonl",
                        f"{page}:2: 7.0 is tagged but the text above does not show it",
                        f"{page}:5: no raw file benchmarks/results/missing.jsonl"], problems
