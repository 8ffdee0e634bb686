"""Thermal velocities for the start of MD: ASE's ``thermalize_momenta`` (ASE 3.29+; its
``MaxwellBoltzmannDistribution`` now warns that it is deprecated) or, on older ASE, the function it replaces."""


def thermalize(atoms, temperature_K, rng=None):
    """Set ``atoms``' momenta to a Maxwell–Boltzmann distribution at ``temperature_K`` (K), drawn by this
    process alone (ASE would otherwise share rank 0's numbers over MPI's world, see :mod:`pinn.io.ase_files`).

    Args:
        atoms: ``ase.Atoms``; its momenta are set (in ASE's units).
        temperature_K: temperature, K.
        rng: a NumPy random generator (``np.random.RandomState(seed)``), or None for NumPy's global one.
    """
    from pinn.io.ase_files import per_process
    try:
        from ase.md.velocitydistribution import thermalize_momenta
    except ImportError:  # ASE < 3.29
        from ase.md.velocitydistribution import MaxwellBoltzmannDistribution as thermalize_momenta
    with per_process():
        thermalize_momenta(atoms, temperature_K=temperature_K, rng=rng)
