"""pinn potentials inside MD engines: i-PI (:mod:`pinn.md.ipi`) and LAMMPS (:mod:`pinn.md.lammps`).

Each takes what :func:`pinn.get_calc` takes — a model directory, a model file of ``pinn export``
(:mod:`pinn.files.model_file`), a committee — or a calculator made by it.
"""
