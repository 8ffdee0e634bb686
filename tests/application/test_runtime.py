"""pinn's process-wide TensorFlow settings (pinn.runtime), checked in fresh processes."""
import os
import subprocess
import sys

import pytest

from pinn.runtime import LOG_LEVEL_VAR, quiet_tensorflow

PROBE = """
import os, sys
if sys.argv[1] == "pinn":
    import pinn
import tensorflow as tf
x = tf.ones([256, 256]) * 2.0
try:
    info = tf.config.experimental.get_memory_info('CPU:0')
    print('pooled', info['peak'] > 0, os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))
except ValueError:
    print('malloc', os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))
"""


def _probe(value, importing="pinn"):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = value
    out = subprocess.run([sys.executable, "-c", PROBE, importing], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_import_pinn_pools_tensorflow_cpu_memory():
    """Importing pinn before TensorFlow runs anything gives TensorFlow the pooled (BFC) CPU allocator,
    whose statistics only it keeps."""
    assert _probe(None) == ["pooled", "True", "true"]


@pytest.mark.parametrize("value", ["false", "0"])
def test_users_setting_is_kept(value):
    """A user's setting stays, and TensorFlow's allocator is then what it is without pinn (whether
    TensorFlow reports CPU statistics without the pool differs between machines)."""
    with_pinn = _probe(value)
    assert with_pinn[-1] == value
    assert with_pinn == _probe(value, importing="tensorflow only")


def test_quiet_tensorflow_keeps_the_users_level(monkeypatch):
    """pinn's default hides TensorFlow's C++ INFO, WARNING and ERROR lines; a level the user set is kept; verbose
    shows all."""
    monkeypatch.delenv(LOG_LEVEL_VAR, raising=False)
    assert quiet_tensorflow() == "3" and os.environ[LOG_LEVEL_VAR] == "3"
    monkeypatch.setenv(LOG_LEVEL_VAR, "0")
    assert quiet_tensorflow() == "0" and os.environ[LOG_LEVEL_VAR] == "0"
    monkeypatch.setenv(LOG_LEVEL_VAR, "3")
    assert quiet_tensorflow(verbose=True) == "0" and os.environ[LOG_LEVEL_VAR] == "0"


def test_import_pinn_leaves_tensorflow_logging_alone():
    """Library users keep TensorFlow's own logging: only the pinn command and the input scripts quieten it."""
    env = {k: v for k, v in os.environ.items() if k != LOG_LEVEL_VAR}
    out = subprocess.run([sys.executable, "-c", "import os, pinn, pinn.io, pinn.models; "
                          f"print(os.environ.get({LOG_LEVEL_VAR!r}))"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["None"], out.stderr[-2000:]
