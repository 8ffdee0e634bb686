"""The documentation site: ``mkdocs build --strict`` succeeds and has the API reference.

Strict mode turns every warning into an error: a broken link or anchor between
pages, a page missing from the nav (``validation.nav.omitted_files: warn`` in
``mkdocs.yml``), a ``::: pinn.xxx`` directive naming an object that does not
exist, or a docstring griffe cannot parse.  The API pages are rendered from the
docstrings by mkdocstrings, which reads the sources statically (no TensorFlow
import), so the build takes a few seconds.
"""
import ast
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]  # tests/<stage>/ -> the repository
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"

#: API page (under docs/api/) -> objects it must document: (identifier, source file, name in it)
API_OBJECTS = {
    "io": [("pinn.io.mimic.load_mimic", "pinn/io/mimic.py", "load_mimic"),
           ("pinn.io.ase_data.load_ase", "pinn/io/ase_data.py", "load_ase"),
           ("pinn.io.numpy_data.load_numpy", "pinn/io/numpy_data.py", "load_numpy"),
           ("pinn.io.distribute.distribute_data", "pinn/io/distribute.py", "distribute_data"),
           ("pinn.io.batch.sparse_batch", "pinn/io/batch.py", "sparse_batch"),
           ("pinn.io.batch.add_neighbors", "pinn/io/batch.py", "add_neighbors"),
           ("pinn.io.tfrecord.write_tfrecord", "pinn/io/tfrecord.py", "write_tfrecord"),
           ("pinn.io.tfrecord.load_tfrecord", "pinn/io/tfrecord.py", "load_tfrecord"),
           ("pinn.io.formats.load_ds", "pinn/io/formats.py", "load_ds"),
           ("pinn.io.base.list_loader", "pinn/io/base.py", "list_loader"),
           ("pinn.io.qm9.load_qm9", "pinn/io/qm9.py", "load_qm9"),
           ("pinn.io.ani.load_ani", "pinn/io/ani.py", "load_ani"),
           ("pinn.io.cp2k.load_cp2k", "pinn/io/cp2k.py", "load_cp2k"),
           ("pinn.io.deepmd.load_deepmd", "pinn/io/deepmd.py", "load_deepmd"),
           ("pinn.io.runner.load_runner", "pinn/io/runner.py", "load_runner"),
           ("pinn.io.qm7b.load_qm7b", "pinn/io/qm7b.py", "load_qm7b")],
    "io-files": [("pinn.io.readers.trr.TRRFile", "pinn/io/readers/trr.py", "TRRFile"),
                 ("pinn.io.readers.mpt.read_mpt", "pinn/io/readers/mpt.py", "read_mpt"),
                 ("pinn.io.readers.energies.read_energies", "pinn/io/readers/energies.py", "read_energies"),
                 ("pinn.io.readers.ndx.read_ndx", "pinn/io/readers/ndx.py", "read_ndx"),
                 ("pinn.io.readers.qm9_xyz.read_qm9", "pinn/io/readers/qm9_xyz.py", "read_qm9"),
                 ("pinn.io.readers.runner_data.read_runner_frame", "pinn/io/readers/runner_data.py", "read_runner_frame"),
                 ("pinn.io.readers.deepmd_system.DeepmdSystem", "pinn/io/readers/deepmd_system.py", "DeepmdSystem"),
                 ("pinn.io.readers.cp2k_files.scan_cp2k_output", "pinn/io/readers/cp2k_files.py", "scan_cp2k_output"),
                 ("pinn.io.readers.qm7b_xyz.read_qm7b", "pinn/io/readers/qm7b_xyz.py", "read_qm7b")],
    "models": [("pinn.models.potential_model", "pinn/models/__init__.py", "potential_model"),
               ("pinn.physics.potential.PotentialModel", "pinn/physics/potential.py", "PotentialModel"),
               ("pinn.models.dipole_model", "pinn/models/__init__.py", "dipole_model"),
               ("pinn.physics.dipole.DipoleModel", "pinn/physics/dipole.py", "DipoleModel"),
               ("pinn.physics.dipole.ACDipoleModel", "pinn/physics/dipole.py", "ACDipoleModel"),
               ("pinn.physics.dipole_variants.BCRDipoleModel", "pinn/physics/dipole_variants.py", "BCRDipoleModel"),
               ("pinn.physics.dipole_variants.ADDipoleModel", "pinn/physics/dipole_variants.py", "ADDipoleModel"),
               ("pinn.physics.dipole_variants.ADOSDipoleModel", "pinn/physics/dipole_variants.py", "ADOSDipoleModel")],
    "trainer": [("pinn.training.trainer.Trainer", "pinn/training/trainer.py", "Trainer"),
                ("pinn.training.schedule.LearningRate", "pinn/training/schedule.py", "LearningRate"),
                ("pinn.training.ema.WeightAverage", "pinn/training/ema.py", "WeightAverage")],
    "report": [("pinn.training.report.write_report", "pinn/training/report.py", "write_report")],
    "cli": [("pinn.cli.commands.main", "pinn/cli/commands.py", "main"),
            ("pinn.training.run_file.run_training", "pinn/training/run_file.py", "run_training")],
    "parallel": [("pinn.parallel.worlds.init", "pinn/parallel/worlds.py", "init")],
    "networks": [("pinn.networks.pinet.PiNet", "pinn/networks/pinet.py", "PiNet"),
                 ("pinn.networks.pinet2.PiNet2", "pinn/networks/pinet2.py", "PiNet2"),
                 ("pinn.networks.equivariant.PIXLayer", "pinn/networks/equivariant.py", "PIXLayer"),
                 ("pinn.networks.bpnn.BPNN", "pinn/networks/bpnn.py", "BPNN"),
                 ("pinn.networks.lj.LJ", "pinn/networks/lj.py", "LJ")],
    "calculator": [("pinn.calculator.get_calc", "pinn/calculator.py", "get_calc"),
                   ("pinn.calculator.PiNNCalc", "pinn/calculator.py", "PiNNCalc"),
                   ("pinn.engines.md.FastPiNet", "pinn/engines/md.py", "FastPiNet"),
                   ("pinn.committee.CommitteeCalc", "pinn/committee.py", "CommitteeCalc")],
    "params": [("pinn.params.resolution.resolve", "pinn/params/resolution.py", "resolve")],
    "metrics": [("pinn.training.metrics.read_metrics", "pinn/training/metrics.py", "read_metrics")],
    "demo": [("pinn.demo.make_alloy_dataset", "pinn/demo.py", "make_alloy_dataset")],
    "units": [("pinn.units.HARTREE", None, None)],
    "keys": [("pinn.keys.ELEMS", None, None)],
}


class _TolerantLoader(yaml.SafeLoader):
    """SafeLoader that reads tags such as ``!!python/name:...`` as plain values."""


def _ignore_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_TolerantLoader.add_multi_constructor("!", _ignore_tag)
_TolerantLoader.add_multi_constructor("tag:yaml.org,2002:python/", _ignore_tag)


def _config():
    with open(CONFIG, encoding="utf-8") as f:
        return yaml.load(f, Loader=_TolerantLoader)


def _nav_pages(nav):
    """Every page path in a nav tree (external links left out)."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            pages.extend(_nav_pages(value))
        elif "://" not in value:
            pages.append(value)
    return pages


def _words(text):
    return re.findall(r"\w+", text)


def _page_text(path):
    """Visible text of a built page's article, tags stripped and entities decoded."""
    source = path.read_text(encoding="utf-8")
    article = re.search(r"<article\b.*?</article>", source, re.S)
    assert article, f"{path}: no <article> element"
    return html.unescape(re.sub(r"<[^>]+>", " ", article.group(0)))


def _summary(source_file, name):
    """First line of the docstring of top-level ``name`` in ``source_file`` (read statically)."""
    tree = ast.parse((ROOT / source_file).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            doc = ast.get_docstring(node)
            assert doc, f"{source_file}: {name} has no docstring"
            # the site drops the Sphinx role prefix (tools/mkdocs_hooks.py): ":func:`x`" shows as "x"
            return re.sub(r":(?:func|class|mod|meth|attr|data|exc|obj):", "", doc.strip().splitlines()[0])
    raise AssertionError(f"{source_file}: no top-level {name}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return site_dir


def test_config_is_strict_with_api_reference():
    config = _config()
    assert config["strict"] is True
    sections = [next(iter(entry)) for entry in config["nav"] if isinstance(entry, dict)]
    assert "API reference" in sections
    assert "api/index.md" in _nav_pages(config["nav"])


def test_every_page_is_in_the_nav():
    nav = _nav_pages(_config()["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    missing = [p for p in pages if p not in nav]
    assert not missing, f"pages in docs/ but not in the nav of mkdocs.yml: {missing}"
    absent = [p for p in nav if not (DOCS / p).is_file()]
    assert not absent, f"nav entries without a page in docs/: {absent}"
    duplicated = sorted({p for p in nav if nav.count(p) > 1})
    assert not duplicated, f"pages listed twice in the nav: {duplicated}"


def test_every_api_page_is_tested():
    pages = {p.stem for p in (DOCS / "api").glob("*.md")} - {"index"}
    assert pages == set(API_OBJECTS)


def test_strict_build_has_api_pages(site):
    assert (site / "index.html").is_file()
    assert (site / "api" / "index.html").is_file()
    index = _page_text(site / "api" / "index.html")
    for page in API_OBJECTS:
        assert (site / "api" / page / "index.html").is_file(), f"api/{page}.md was not built"
        assert f'href="{page}/"' in (site / "api" / "index.html").read_text(encoding="utf-8"), \
            f"api/index.md does not link to {page}.md"
    assert "API reference" in index


@pytest.mark.parametrize("page", sorted(API_OBJECTS))
def test_api_page_renders_docstrings(site, page):
    path = site / "api" / page / "index.html"
    source = path.read_text(encoding="utf-8")
    words = " ".join(_words(_page_text(path)))
    for identifier, source_file, name in API_OBJECTS[page]:
        assert f'id="{identifier}"' in source, f"api/{page}: no rendered entry for {identifier}"
        if source_file is not None:
            summary = " ".join(_words(_summary(source_file, name)))
            assert summary in words, f"api/{page}: docstring of {identifier} not rendered ({summary!r})"
    # mkdocstrings renders parameter tables from Google-style "Args:" sections
    if page == "io":
        assert "position_tolerance" in words and "Raises" in words
