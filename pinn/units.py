"""Unit conversion factors into the package's units (Å, eV, eV/Å, e).

Multiply a value in the named unit by the factor to get the internal unit.
Derived from CODATA 2018 via ASE's unit table so every reader agrees.
"""
from ase import units as _ase

#: 1 nm in Å
NM = 10.0
#: 1 bohr in Å
BOHR = _ase.Bohr
#: 1 Hartree in eV
HARTREE = _ase.Hartree
#: 1 kJ/mol in eV
KJ_PER_MOL = _ase.kJ / _ase.mol
#: 1 kcal/mol in eV
KCAL_PER_MOL = _ase.kcal / _ase.mol
#: 1 kJ/mol/nm in eV/Å
KJ_PER_MOL_NM = KJ_PER_MOL / NM
#: 1 Hartree/bohr in eV/Å
HARTREE_PER_BOHR = HARTREE / BOHR
#: 1 GPa in eV/Å³
GPA = _ase.GPa
#: 1 bar in eV/Å³
BAR = _ase.bar
#: 1 debye in e·Å
DEBYE = _ase.Debye
#: Coulomb's constant e²/(4πε₀) in eV·Å/e² (the value pinn's electrostatics use: 14.399645)
COULOMB = 14.399645
