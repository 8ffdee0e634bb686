"""Check the measured figures of README.md and docs/*.md against the raw lines in benchmarks/results/.

A figure is tagged as measured by an HTML comment right after the paragraph, list item or table
row that shows it (invisible on the rendered page):

    ... these defaults reach 6.3–6.8 meV/Å after 125 000 steps ...
    <!-- measured: 0.15.0-time-to-accuracy.jsonl: 6.3 6.5 6.8 814 -->

Each number the comment lists (separated by spaces; thousands not grouped: ``125000`` for the
page's ``125 000``) must

1. appear in the block just above the comment (its lines back to the previous blank line or
   comment), as the page writes it (thousands may be grouped with a space: ``125 000``), and
2. equal a number of a raw line in the named file(s) of ``benchmarks/results/`` rounded (half
   up) to the decimals the page shows, as it is or after one of the unit changes in
   :data:`UNIT_CHANGES`.

So a figure on a page cannot drift from its raw line unnoticed, and a tag cannot name a file that
does not hold the figure.  ``tests/project/test_figures.py`` runs the check on every page.

Usage:  python tools/check_figures.py      (prints each problem; exit status 1 if there is any)
"""
import json
import os
import re
import sys
from decimal import ROUND_HALF_UP, Decimal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
#: factors a raw value may be multiplied by to reach the page's unit: eV→meV, meV→eV, fraction→%,
#: s→min, MB→GB (and the identity)
UNIT_CHANGES = (1.0, 1000.0, 0.001, 100.0, 1.0 / 60.0, 1.0 / 1024.0)
TAG = re.compile(r"<!--\s*measured:\s*(?P<files>[^:]+?)\s*:\s*(?P<numbers>[^>]*?)\s*-->")
#: a number as pages write it: optional sign, thousands grouped by a space or thin space, decimals
NUMBER = re.compile(r"(?<![\w.])[-−]?\d{1,3}(?:[ \u2009\u202f]\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.])[-−]?\d+(?:\.\d+)?")


def page_numbers(text):
    """The numbers written in ``text``, as floats (grouped thousands joined)."""
    return [float(re.sub(r"[ \u2009\u202f]", "", m.group()).replace("−", "-")) for m in NUMBER.finditer(text)]


def raw_numbers(path):
    """Every number (int or float, at any depth; booleans not) of every JSON line of ``path``."""
    values = []

    def walk(value):
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            values.append(float(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    with open(path) as f:
        for line in f:
            if line.strip():
                walk(json.loads(line))
    return values


def decimals(token):
    """Decimals written in the number ``token`` ('6.30' → 2)."""
    return len(token.split(".")[1]) if "." in token else 0


def matches(token, raw):
    """Whether the page's number ``token`` is a raw value rounded to the decimals it shows (after a unit change)."""
    shown, step = Decimal(token), Decimal(1).scaleb(-decimals(token))
    return any(Decimal(repr(value * factor)).quantize(step, rounding=ROUND_HALF_UP) == shown
               for value in raw for factor in UNIT_CHANGES)


def check_page(path, results=RESULTS):
    """Problems of the tags of one Markdown page: list of 'file:line: text'."""
    problems = []
    with open(path) as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        for tag in TAG.finditer(line):
            if line[:tag.start()].count("`") % 2:  # inside inline code: a page showing the syntax
                continue
            block = []
            for previous in reversed(lines[:number - 1]):
                if not previous.strip() or "<!--" in previous:
                    break
                block.insert(0, previous)
            block.append(line[:tag.start()])
            shown = page_numbers("\n".join(block))
            raw = []
            for name in tag.group("files").split(","):
                raw_path = os.path.join(results, name.strip())
                if not os.path.exists(raw_path):
                    problems.append(f"{path}:{number}: no raw file benchmarks/results/{name.strip()}")
                    continue
                raw += raw_numbers(raw_path)
            tokens = tag.group("numbers").split()
            if not tokens:
                problems.append(f"{path}:{number}: the tag lists no figures")
            for token in tokens:
                try:
                    value = float(token)
                except ValueError:
                    problems.append(f"{path}:{number}: {token!r} in the tag is not a number")
                    continue
                if not any(abs(value - s) < 1e-9 for s in shown):
                    problems.append(f"{path}:{number}: {token} is tagged but the text above does not show it")
                elif raw and not matches(token, raw):
                    problems.append(f"{path}:{number}: {token} is in no raw line of {tag.group('files').strip()}")
    return problems


def pages(root=ROOT):
    """README.md and every Markdown page under docs/."""
    found = [os.path.join(root, "README.md")]
    for directory, _, names in os.walk(os.path.join(root, "docs")):
        found += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".md")]
    return found


def main():
    problems = [p for page in pages() for p in check_page(page)]
    for problem in problems:
        print(os.path.relpath(problem, ROOT) if problem.startswith(ROOT) else problem)
    tagged = sum(1 for page in pages() for line in open(page) for tag in TAG.finditer(line)
                 if not line[:tag.start()].count("`") % 2)
    print(f"check_figures: {tagged} tag(s) on {len(pages())} page(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
