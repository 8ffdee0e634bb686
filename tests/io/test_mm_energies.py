"""The MM force field's energies of a GROMACS run (pinn.io.mm_energies): from the .edr GROMACS wrote (through
pyedr) and from the .xvg of `gmx energy`, real files of gmx_d (tests/data/gromacs/make_energy_fixtures.sh, run
again here when GROMACS is installed); bad files named in one line."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from pinn import units
from pinn.io.errors import DataError
from pinn.io.mm_energies import read_mm_energies
from pinn.io.readers.xvg import read_xvg

GMX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gromacs")
EDR, XVG = os.path.join(GMX, "nacl_energy.edr"), os.path.join(GMX, "nacl_energy.xvg")


def _written_now(tmp_path):
    """(edr, xvg) of a fresh gmx_d run when GROMACS is installed, else the committed ones."""
    if not shutil.which("gmx_d"):
        return EDR, XVG
    subprocess.run(["bash", os.path.join(GMX, "make_energy_fixtures.sh"), str(tmp_path)], check=True,
                   capture_output=True)
    return str(tmp_path / "nacl_energy.edr"), str(tmp_path / "nacl_energy.xvg")


def test_edr_and_xvg_give_the_same_energies_in_ev(tmp_path):
    """Seven steps of 0.5 fs from step 10: times 5.0-8.0 fs (in ps), the Potential in eV from both files."""
    pytest.importorskip("pyedr", reason="pyedr not installed")
    for edr, xvg in ((EDR, XVG), _written_now(tmp_path)):
        times, energies = read_mm_energies(edr)
        np.testing.assert_allclose(times, 0.0005 * np.arange(10, 17), atol=1e-12)
        xvg_times, xvg_energies = read_mm_energies(xvg)
        np.testing.assert_allclose(xvg_times, times, atol=1e-9)
        np.testing.assert_allclose(xvg_energies, energies, atol=1e-7)  # the xvg's 6 decimals of kJ/mol
        _, series, label = read_xvg(xvg)
        assert label == "(kJ/mol)" and list(series) == ["Potential"]
        np.testing.assert_allclose(energies, series["Potential"] * units.KJ_PER_MOL, rtol=1e-9)


def test_bad_mm_energy_files_are_named(tmp_path):
    text = open(XVG).read()
    last = text.count("\n") + 1  # the line a text appended to the file lands on
    cases = {
        "other.xvg": (text.replace('legend "Potential"', 'legend "Kinetic En."'),
                      ": no 'Potential' series (it has ['Kinetic En.']); write it with `echo Potential | gmx "
                      "energy -f ener.edr -o other.xvg`"),
        "units.xvg": (text.replace('"(kJ/mol)"', '"(kcal/mol)"'), ": its y axis is '(kcal/mol)', not kJ/mol (gmx "
                                                                  "energy's unit)"),
        "words.xvg": (text + "0.0085 oops\n", f", line {last}: not a line of numbers: '0.0085 oops'"),
        "short.xvg": (text + "0.0085\n", f", line {last}: 1 columns, the lines before have 2"),
        "energy.txt": (text, ": MM energies come from a GROMACS .edr or the .xvg of gmx energy"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(DataError) as caught:
            read_mm_energies(str(path))
        assert str(caught.value) == f"{path}{message}"
    with pytest.raises(DataError, match="no such file"):
        read_mm_energies(str(tmp_path / "missing.edr"))
