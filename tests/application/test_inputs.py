"""The input scripts in inputs/ run as they stand, without TensorFlow's start-up lines, and a single-process run
never imports Horovod."""
import ast
import glob
import os
import subprocess
import sys

from chatter import tensorflow_chatter, user_env
from launching import without_modules

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/<stage>/ -> the repository


def _run(args, cwd, input_script=True):
    """Run a script as a user would (no TF_CPP_MIN_LOG_LEVEL set): it succeeds and, an input script, TensorFlow
    keeps quiet."""
    env = user_env(PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    if input_script:
        assert tensorflow_chatter(out.stdout + out.stderr) == [], out.stderr
    return out.stdout + out.stderr


def test_every_input_script_quietens_tensorflow_before_importing_it():
    """Each script in inputs/ calls pinn.runtime.quiet_tensorflow() before any import that may bring in TensorFlow
    (every pinn module but pinn.runtime), so TF_CPP_MIN_LOG_LEVEL is in place when TensorFlow reads it."""
    scripts = sorted(glob.glob(os.path.join(ROOT, "inputs", "*.py")))
    assert len(scripts) >= 4
    for script in scripts:
        body = ast.parse(open(script).read()).body
        calls = [i for i, node in enumerate(body) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                 and getattr(node.value.func, "id", None) == "quiet_tensorflow"]
        heavy = [i for i, node in enumerate(body) if isinstance(node, (ast.Import, ast.ImportFrom))
                 and any(name.split(".")[0] in ("pinn", "tensorflow") and name != "pinn.runtime"
                         for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]))]
        assert calls and heavy and calls[0] < heavy[0], f"{script}: call quiet_tensorflow() before importing pinn"


def test_train_then_md(alloy_xyz, tmp_path):
    log = _run([os.path.join(ROOT, "inputs", "train_ase.py"), alloy_xyz, "model", "40"], tmp_path)
    assert "validation: E_MAE" in log and "(step 40)" in log
    log = _run([os.path.join(ROOT, "inputs", "md_ase.py"), "model", "100"], tmp_path)
    assert "NVE 100 steps of 108 atoms" in log
    assert "Warning" not in log, log  # ASE's DeprecationWarning of MaxwellBoltzmannDistribution before 0.17.0


def test_dipole_input_then_calculator(tmp_path):
    from pinn.demo import make_dipole_dataset
    # 32 training structures, batches of 16: 2 steps (each new batch size an XLA compilation, seconds each)
    data = make_dipole_dataset(str(tmp_path / "water.xyz"), n_frames=40, seed=0)
    log = _run([os.path.join(ROOT, "inputs", "train_dipole.py"), data, "model", "1"], tmp_path)
    assert "validation: D_MAE" in log and "(step 2, 1 rank(s))" in log
    import ase.io
    from pinn import get_calc
    atoms = ase.io.read(data, 0)
    atoms.calc = get_calc(str(tmp_path / "model"))
    assert atoms.get_dipole_moment().shape == (3,) and abs(atoms.get_charges().sum()) < 1e-5


def test_yaml_params_example_with_pinn_train(alloy_xyz, tmp_path):
    """inputs/params_example.yml as shipped (its paths point at ../demo from its own directory)."""
    import shutil
    (tmp_path / "inputs").mkdir()
    (tmp_path / "demo").mkdir()
    shutil.copy(os.path.join(ROOT, "inputs", "params_example.yml"), tmp_path / "inputs")
    shutil.copy(alloy_xyz, tmp_path / "demo" / "alloy.xyz")
    pinn = os.path.join(os.path.dirname(sys.executable), "pinn")
    env = user_env(PYTHONPATH=ROOT)
    out = subprocess.run([pinn, "train", "inputs/params_example.yml", "--max-steps", "30"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert tensorflow_chatter(out.stdout + out.stderr) == [], out.stderr  # nor XLA's compilation lines
    assert "forces" in out.stdout and "eV/Å" in out.stdout  # the final metrics table
    assert (tmp_path / "demo" / "yaml-model" / "ckpt-30.index").exists()


def test_single_process_does_not_import_horovod(alloy_xyz, tmp_path):
    script = (
        "import sys\n"
        "from pinn.io import load_ase, sparse_batch\n"
        "from pinn.models import potential_model\n"
        f"m = potential_model({{'model_dir': 'm', 'network': {{'name': 'LJ', 'params': {{'atom_types': [29, 79]}}}}}})\n"
        f"m.train(lambda: load_ase({alloy_xyz!r}).repeat().apply(sparse_batch(4)), 3)\n"
        "import pinn\n"
        "pinn.get_calc('m')\n"
        "assert not any(k.startswith('horovod') for k in sys.modules), 'horovod was imported'\n"
    )
    _run(["-c", script], tmp_path, input_script=False)


def test_mimic_input_script_alone_without_horovod_or_mpi4py(tmp_path):
    """The quick start's training script (params['parallel'] = True) as one lone process where neither Horovod
    nor mpi4py is installed (Python 3.12 without MPI; PINN_NO_HOROVOD=1 on 3.11): it trains as one process
    and says so, where it stopped with "parallel training without Horovod needs mpi4py" before 0.17.0."""
    env = user_env(PYTHONPATH=os.pathsep.join([ROOT, without_modules(tmp_path, "horovod", "mpi4py")]))
    script = os.path.join(ROOT, "inputs", "train_mimic_parallel.py")
    out = subprocess.run([sys.executable, script, "data", "model", "5"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-4000:]
    assert "this is the only process and neither Horovod nor mpi4py is installed: training as one process" in output
    assert "Traceback" not in output and "step 5/5" in output
    assert (tmp_path / "model" / "checkpoint").exists()
