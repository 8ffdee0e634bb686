"""The package's shape: pinn's folders are the layers of docs/architecture.md, for every import, and there is no
cycle.

Every import statement of ``pinn/`` counts, those inside functions too, and so do the
modules that a package's lazy namespace (``_EXPORTS``) or the table of old names
(``MOVED``) import by name.  The table of layers is read from docs/architecture.md, so
the page and the tree cannot drift apart.
"""
import ast
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository
PACKAGE = os.path.join(ROOT, "pinn")
DOC = os.path.join(ROOT, "docs", "architecture.md")

#: what the kernels and the readers may import besides the standard library and pinn's core (the readers: ASE
#: for its table of elements), so that they run without TensorFlow
THIRD_PARTY = {"kernels": {"numpy", "numba"}, "readers": {"numpy", "ase"}}
#: the modules of each group (``pkg.*``: every module below pkg)
TF_FREE = {"kernels": ["pinn.engines.numba", "pinn.engines.numba.*", "pinn.io.verlet_filter"],
           "readers": ["pinn.io.readers", "pinn.io.readers.*", "pinn.io.ase_files", "pinn.io.qmmm_atoms",
                       "pinn.io.errors"]}


def package_modules():
    """{module name: file path} of every module of pinn/."""
    modules = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                modules[module[:-len(".__init__")] if module.endswith(".__init__") else module] = path
    return modules


def layer_table():
    """[(layer, [folders])] from docs/architecture.md, lowest layer first: a folder is ``pinn.X`` for
    ``pinn/X/`` (with everything below it) or for a module ``pinn/X.py`` directly in pinn/."""
    with open(DOC) as f:
        text = f.read()
    section = text.split("| layer | folders |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in section.strip().splitlines()[1:] if line.startswith("|")]
    return [(cells[0], re.findall(r"`([\w.]+)`", cells[1]))
            for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)]


def folder_of(module):
    """The folder node of a module: ``pinn.io`` for ``pinn.io.readers.trr``; ``pinn`` for the package's face."""
    return ".".join(module.split(".")[:2])


def layer_of(module, table):
    """(index, name) of the layer of the module's folder, or None where the page places no such folder."""
    folder = folder_of(module)
    for index, (name, folders) in enumerate(table):
        if folder in folders:
            return index, name
    return None


def imports_of(module, path, modules):
    """(pinn modules, top-level third-party or stdlib names) imported by a module."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    internal, external = set(), set()

    def add(name):
        if name == "pinn" or name.startswith("pinn."):
            while name not in modules:  # an attribute of a module (pinn.io.load_ase) is that module
                name = name.rsplit(".", 1)[0]
            internal.add(name)
        else:
            external.add(name.split(".")[0])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("_EXPORTS", "MOVED")
                                                   for t in node.targets):
            for value in ast.literal_eval(node.value).values():
                add(value)
    internal.discard(module)
    return internal, external


@pytest.fixture(scope="module")
def graph():
    modules = package_modules()
    return modules, {m: imports_of(m, p, modules) for m, p in modules.items()}


def test_every_folder_has_a_layer(graph):
    modules, _ = graph
    table = layer_table()
    assert table[0][0] == "core"
    placed = [folder for _, folders in table for folder in folders]
    assert len(placed) == len(set(placed)), f"a folder on two rows: {placed}"
    unplaced = sorted({folder_of(m) for m in modules if m != "pinn" and layer_of(m, table) is None})
    assert not unplaced, f"folders that docs/architecture.md does not place in a layer: {unplaced}"


def test_folders_import_only_lower_layers(graph):
    """A folder imports its own modules and the folders of lower rows, inside functions too: folders of one row
    do not import each other.  pinn/__init__.py, the package's face, is the one module outside the rows."""
    modules, edges = graph
    table = layer_table()
    wrong = set()
    for module, (internal, _) in sorted(edges.items()):
        if module == "pinn":
            continue
        own = layer_of(module, table)
        for target in sorted(internal):
            theirs = layer_of(target, table)
            if folder_of(target) != folder_of(module) and theirs is not None and theirs[0] >= own[0]:
                wrong.add(f"{folder_of(module)} ({own[1]}) imports {folder_of(target)} ({theirs[1]}): "
                          f"{module} -> {target}")
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle(graph):
    _, edges = graph
    internal = {m: deps for m, (deps, _) in edges.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in internal.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(internal):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def kept_to(module, group):
    """Whether ``module`` belongs to the ``group`` of :data:`TF_FREE`."""
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in TF_FREE[group])


@pytest.mark.parametrize("group", sorted(TF_FREE))
def test_kernels_and_readers_import_little(graph, group):
    """The kernels import NumPy and Numba only, the readers NumPy and ASE's element table (and the standard
    library); of pinn, the core folders and their own group."""
    modules, edges = graph
    table = layer_table()
    core = set(table[0][1])
    allowed = THIRD_PARTY[group] | set(sys.stdlib_module_names) | {"__future__"}
    wrong = {}
    for module, (internal, external) in edges.items():
        if not kept_to(module, group):
            continue
        beyond = sorted(external - allowed) + sorted(t for t in internal
                                                     if folder_of(t) not in core and not kept_to(t, group))
        if beyond:
            wrong[module] = beyond
    assert not wrong, f"{group} import more than {sorted(THIRD_PARTY[group])} and pinn's core: {wrong}"


def test_the_check_finds_a_violation(tmp_path):
    """The import reader sees imports inside functions and resolves ``from pinn import x``."""
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    from pinn.training import trainer\n    from pinn import keys as K\n")
    modules = {"pinn.training.trainer": "", "pinn.keys": "", "pinn.training": "", "pinn": ""}
    internal, _ = imports_of("pinn.io.readers.x", str(path), modules)
    assert internal == {"pinn.training.trainer", "pinn.keys"}
    table = layer_table()
    assert layer_of("pinn.training.trainer", table)[0] > layer_of("pinn.io.readers.x", table)[0]
    assert layer_of("pinn.keys", table)[0] < layer_of("pinn.io.readers.x", table)[0]


#: the folders of the repository besides pinn/ whose Python files must not import the command either
NOT_THE_COMMAND = ("benchmarks", "tools", "inputs", "scripts")


def command_imports(module, path, modules):
    """The modules of pinn/cli (the ``pinn`` command) that a file imports, inside functions too."""
    internal, _ = imports_of(module, path, modules)
    return sorted(target for target in internal if folder_of(target) == "pinn.cli")


def outside_files():
    """{module name: path} of the Python files of :data:`NOT_THE_COMMAND`."""
    files = {}
    for top in NOT_THE_COMMAND:
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    files[os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")] = path
    return files


def test_nothing_imports_the_command(graph, tmp_path):
    """The ``pinn`` command parses its arguments and calls the library, and nothing imports it: no module of
    pinn/ outside pinn/cli, no file of benchmarks/, tools/, inputs/ or scripts/ (what they need of a run file,
    an export, a report, is the library's: ``pinn.training.run_file``, ``pinn.models.export``,
    ``pinn.training.report``), not even the table of old names (``pinn.moved``).  Tests of the command import
    it; a benchmark of a command runs it as a process."""
    modules, edges = graph
    wrong = {module: sorted(t for t in internal if folder_of(t) == "pinn.cli")
             for module, (internal, _) in edges.items() if folder_of(module) != "pinn.cli"}
    wrong.update({module: command_imports(module, path, modules) for module, path in outside_files().items()})
    wrong = {module: targets for module, targets in wrong.items() if targets}
    assert not wrong, f"imports of the pinn command (pinn.cli) outside it: {wrong}"
    path = tmp_path / "bench.py"  # the check sees an import inside a function, and `from pinn.cli import x`
    path.write_text("def f():\n    from pinn.cli.export import export_model\n    from pinn.cli import main\n")
    assert command_imports("benchmarks.bench", str(path), modules) == ["pinn.cli", "pinn.cli.export"]


PUBLIC_NAMES = ["pinn.io.load_ase", "pinn.io.load_mimic", "pinn.io.distribute_data", "pinn.io.sparse_batch",
                "pinn.io.add_neighbors", "pinn.io.load_numpy", "pinn.io.list_loader", "pinn.io.load_tfrecord",
                "pinn.models.potential_model", "pinn.models.dipole_model", "pinn.models.get_model",
                "pinn.get_calc", "pinn.calculator.get_calc", "pinn.calculator.PiNNCalc", "pinn.networks.PiNet",
                "pinn.networks.BPNN", "pinn.params.resolve", "pinn.params.ParamsError", "pinn.parallel.init",
                "pinn.parallel.parallelize_model", "pinn.demo.make_mimic_demo", "pinn.cli.main"]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_names_import_where_users_find_them(name):
    import importlib
    module, attribute = name.rsplit(".", 1)
    assert callable(getattr(importlib.import_module(module), attribute))


def test_old_module_names_import_with_a_warning():
    """Scripts written for pinn < 0.10 (``pinn.trainer``, ``pinn.io.trr``, ...) still run."""
    import importlib
    import warnings

    import pinn  # noqa: F401 (installs the finder of the old names)
    from pinn.moved import MOVED
    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert any(new in str(w.message) for w in caught), old


def test_every_part_of_the_trainer_is_on_the_page():
    """docs/architecture.md's table of the Trainer's parts names every module of pinn/training (so the page
    shows the parts the code has), and names no module that is gone."""
    with open(DOC) as f:
        section = f.read().split("## The Trainer and its parts", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`training/(\w+)\.py`", section))
    modules = {name[:-3] for name in os.listdir(os.path.join(PACKAGE, "training"))
               if name.endswith(".py") and name not in ("__init__.py", "trainer.py")}
    assert named == modules, f"not on the page: {sorted(modules - named)}; gone: {sorted(named - modules)}"


def test_the_embedding_is_compared_by_name_in_one_module():
    """The kinds of embedding are asked what they can do (pinn.physics.embedding_kinds); their names are compared
    (==, !=, in) in that module alone."""
    from pinn.physics.embedding_kinds import KINDS
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "pinn")
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("physics", "embedding_kinds.py")):
                continue
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Compare):
                    values = [node.left, *node.comparators]
                    values += [e for v in values if isinstance(v, (ast.Tuple, ast.List, ast.Set)) for e in v.elts]
                    if any(isinstance(v, ast.Constant) and v.value in KINDS for v in values):
                        found.append(f"{os.path.relpath(path, root)}:{node.lineno}")
    assert not found, f"an embedding's name compared outside pinn/physics/embedding_kinds.py: {found}"


def test_inference_sits_below_training_and_imports_none_of_it(graph, tmp_path):
    """The inference layer (pinn.inference: the checkpoint reader, the weight average's slots, the evaluator, the
    handle) sits below training on the page, and none of its modules imports pinn.training, inside functions
    neither; the check sees such an import."""
    modules, edges = graph
    table = layer_table()
    assert layer_of("pinn.inference.handle", table)[0] < layer_of("pinn.training.trainer", table)[0]
    wrong = {module: sorted(t for t in internal if folder_of(t) == "pinn.training")
             for module, (internal, _) in edges.items() if folder_of(module) == "pinn.inference"}
    assert not {m: t for m, t in wrong.items() if t}, f"inference imports training: {wrong}"
    assert {folder_of(m) for m in modules} >= {"pinn.inference"}
    path = tmp_path / "reader.py"
    path.write_text("def f():\n    from pinn.training.ema import WeightAverage\n")
    internal, _ = imports_of("pinn.inference.reader", str(path), modules)
    assert any(layer_of(t, table)[0] >= layer_of("pinn.inference.reader", table)[0] for t in internal)
