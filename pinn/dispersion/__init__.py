"""D3 dispersion beside a model: DFT-D3 from the ``dftd3`` package (s-dftd3) summed with a pinn calculator.

Most DFT labels are either D3-free or D3-corrected.  A model trained on D3-free labels (or on labels
with D3 taken out, :func:`subtract_d3` and ``pinn convert --subtract-d3``) is used with the D3 term
beside it: ``get_calc(model, dispersion="d3bj", functional="PBE")`` returns a
:class:`DispersionCorrected`, ASE's :class:`~ase.calculators.mixing.SumCalculator` of the model's
calculator and :class:`D3Term`, whose energy, forces, stress and per-atom energies are the sums of the
two parts.  With a committee, its deviations are the committee's own (the D3 term is the same for
every member) and each member's energy, forces and stress get the D3 term added.

Units: eV, Å, eV/Å, eV/Å³ (ASE's), as for every pinn calculator.  The ``dftd3`` package is optional
(``pip install dftd3`` or ``pip install 'pinn[d3]'``); without it these functions raise an ImportError
that says so.
"""
from pinn.dispersion.d3 import DAMPINGS, D3Term, DispersionCorrected, check_d3, with_dispersion
from pinn.dispersion.labels import d3_parts, subtract_d3

__all__ = ["DAMPINGS", "D3Term", "DispersionCorrected", "check_d3", "d3_parts", "subtract_d3", "with_dispersion"]
