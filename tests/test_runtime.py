"""pinn's process-wide TensorFlow settings (pinn.runtime), checked in fresh processes, and training
numbers under them."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from ase.build import bulk, molecule

from pinn import keys as K
from pinn.io.batch import batch_from_atoms

from physics import make_model

PROBE = """
import pinn, os
import tensorflow as tf
x = tf.ones([256, 256]) * 2.0
try:
    info = tf.config.experimental.get_memory_info('CPU:0')
    print('pooled', info['peak'] > 0, os.environ['TF_CPU_ALLOCATOR_USE_BFC'])
except ValueError:
    print('malloc', os.environ['TF_CPU_ALLOCATOR_USE_BFC'])
"""


def _probe(value):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if value is not None:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_import_pinn_pools_tensorflow_cpu_memory():
    """Importing pinn before TensorFlow runs anything gives TensorFlow the pooled (BFC) CPU allocator,
    whose statistics only it keeps."""
    assert _probe(None) == ["pooled", "True", "true"]


@pytest.mark.parametrize("value", ["false", "0"])
def test_users_setting_is_kept(value):
    assert _probe(value) == ["malloc", value]


def test_compiled_float32_training_gradients_equal_uncompiled_ones():
    """In a process that imported pinn first (pooled allocator), the XLA-compiled loss gradient of a
    float32 PiNet equals TensorFlow's uncompiled one to float32 rounding."""
    rng = np.random.RandomState(0)
    cell = bulk("Cu", "fcc", a=3.7, cubic=True) * (2, 1, 1)
    cell.positions += rng.normal(0, 0.1, cell.positions.shape)
    ethanol = molecule("CH3CH2OH")
    net = {"atom_types": [1, 6, 8, 29], "rc": 4.0, "depth": 2, "pp_nodes": [16, 16], "pi_nodes": [16, 16],
           "ii_nodes": [16, 16], "out_nodes": [16, 16]}
    model = make_model("PiNet", net, precision="float32")
    model.params.update(use_force=True)
    batch = batch_from_atoms([cell, ethanol], 4.0, "float32")
    batch[K.E_DATA] = rng.normal(size=2).astype(np.float32)
    batch[K.F_DATA] = rng.normal(size=(len(batch[K.ELEMS]), 3)).astype(np.float32)
    batch = {k: tf.constant(v) for k, v in batch.items()}

    def gradients(b):
        with tf.GradientTape() as tape:
            pred = model.predict(b, forces=True, stress=False)
            sums = model.loss_sums(b, pred)
            loss = sums["energy"] + 10.0 * sums["forces"]
        return tape.gradient(loss, model.trainable_variables)

    plain = tf.function(gradients)(batch)
    compiled = tf.function(gradients, jit_compile=True)(batch)
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in plain)
    for g_plain, g_xla in zip(plain, compiled):
        np.testing.assert_allclose(g_xla.numpy(), g_plain.numpy(), rtol=0, atol=2e-5 * scale)
    # and the compiled gradient is not trivially small: the comparison means something
    assert scale > 1e-3
