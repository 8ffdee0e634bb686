"""Installation script for pinn.

TensorFlow is an extra so that CPU and GPU users pick their own build:
``pip install -e .[cpu]`` (tensorflow-cpu) or ``pip install -e .[gpu]``
(tensorflow with CUDA).  Horovod is built separately by ``tools/env.sh``
(it must be compiled against the installed TensorFlow).
"""
from setuptools import find_packages, setup

TF_VERSION = "2.15.1"

setup(
    name="pinn",
    version="0.14.0",
    description="PiNN-style neural-network interatomic potentials for QM/MM data, "
                "trained on many GPUs with Horovod",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.9,<3.12",
    packages=find_packages(include=["pinn", "pinn.*"]),
    install_requires=["numpy<2", "ase>=3.22", "pyyaml>=5", "matplotlib>=3.5", "numba>=0.59"],
    extras_require={
        "cpu": [f"tensorflow-cpu=={TF_VERSION}"],
        "gpu": [f"tensorflow[and-cuda]=={TF_VERSION}"],
        # the per-step exchange of MPI-launched parallel jobs (pinn.parallel.mpi_host)
        "mpi": ["mpi4py>=3.1"],
        # pinn.io.load_ani reads the ANI-1 data set's HDF5 files
        "ani": ["h5py>=3"],
        # MDAnalysis(+Tests) and mimicpy 0.2.1 are independent oracles for the trr and .mpt readers
        "test": [f"tensorflow-cpu=={TF_VERSION}", "pytest>=7", "pytest-timeout", "pytest-xdist>=3",
                 "MDAnalysis==2.11.0",
                 "MDAnalysisTests==2.11.0", "mimicpy==0.2.1", "pandas<3", "h5py>=3",
                 # the documentation site, built in strict mode by tests/test_docs.py
                 "mkdocs>=1.6,<2", "mkdocs-material>=9,<10", "mkdocstrings[python]>=0.24"],
    },
    entry_points={"console_scripts": ["pinn=pinn.cli:main"]},
)
