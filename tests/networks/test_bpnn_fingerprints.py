"""BPNN's fingerprint range (upstream's ``pinn train --init`` with ``fp_scale``): the network's own method."""
import numpy as np

from physics import alloy_cell, ethanol


def test_fingerprint_range_maps_the_data_onto_minus_one_to_one(rng):
    from pinn.io import load_ase, sparse_batch
    from pinn.networks import BPNN
    frames = [ethanol(rng) for _ in range(3)] + [alloy_cell(rng) for _ in range(2)]
    batches = load_ase(frames, shuffle=False).apply(sparse_batch(2))
    spec = {"atom_types": [1, 6, 8, 29, 79], "rc": 4.0, "nn_spec": [8]}
    fp_range = BPNN(dict(spec), dtype="float64").fingerprint_range(batches)
    scaled = BPNN(dict(spec, fp_scale=True, fp_range=fp_range), dtype="float64")
    assert len(fp_range) == len(scaled.params["sf_spec"])
    columns = np.concatenate([scaled.fingerprints(scaled.preprocess(b)).numpy() for b in batches])
    assert columns.min() >= -1 - 1e-12 and columns.max() <= 1 + 1e-12
    varying = np.ptp(columns, axis=0) > 0
    assert varying.any()
    np.testing.assert_allclose(columns[:, varying].min(0), -1, atol=1e-12)
    np.testing.assert_allclose(columns[:, varying].max(0), 1, atol=1e-12)
