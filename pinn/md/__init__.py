"""pinn potentials inside MD engines: i-PI (:mod:`pinn.md.ipi`; in i-PI's own process,
:mod:`pinn.md.ipi_driver`), LAMMPS (:mod:`pinn.md.lammps`) and OpenMM (:mod:`pinn.md.openmm`); and
MD on ASE's integrators with a committee's stop where its members disagree (:mod:`pinn.md.ase_md`,
``pinn md``).

Each takes what :func:`pinn.get_calc` takes — a model directory, a model file of ``pinn export``
(:mod:`pinn.files.model_file`), a committee — or a calculator made by it.
"""
