"""Regenerate the .mpt fixtures of this directory with MiMiCPy 0.2.1 (the writer MiMiC users run).

    pip install mimicpy==0.2.1 'pandas<3'
    python tests/data/mimic/make_mpt.py

mixed.top has repeated (SOL twice) and renamed (WAT = SOL) molecule types and a
two-residue molecule; argon.top is the 32-atom system of the training test.
The water.mpt of tests/data/gromacs is written by tests/data/gromacs/make_fixtures.sh.
"""
import os

from mimicpy import Mpt

HERE = os.path.dirname(os.path.abspath(__file__))

for name in ("mixed", "argon"):
    Mpt.from_file(os.path.join(HERE, f"{name}.top")).write(os.path.join(HERE, f"{name}.mpt"))
    print("wrote", os.path.join(HERE, f"{name}.mpt"))
