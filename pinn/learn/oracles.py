"""Oracles: what labels the frames a committee is unsure of, in pinn's QM/MM convention (docs/qmmm.md).

- :class:`PySCFOracle`: the QM region by PySCF in the MM point charges (``pyscf.qmmm``), Hartree-Fock or a
  density functional, with the region's charge and spin; forces on the QM atoms and on the MM atoms by PySCF's
  analytic gradients (the MM atoms': the region's pull on their charges).  A frame without an MM part is the
  region in vacuum.
- :class:`ASEOracle`: any ASE calculator (EMT, tblite's GFN2-xTB, a pretrained model's calculator), for frames
  without an MM part: the whole frame's energy and forces (distilling a bigger model into a pinn model).
- :class:`CommandOracle`: a command of the site's, e.g. ``sbatch --wait label.sh {in} {out}``: pinn writes the
  frames to ``{in}`` (extended XYZ in the convention), the command labels them and writes ``{out}``, and pinn
  reads the labels back, checking that each is of its frame.

Every oracle's :meth:`~Oracle.label` returns :class:`Labels`: the frames labelled (copies with the energy and
forces in a ``SinglePointCalculator`` and in ``info``/``arrays``, as ``pinn convert`` and ``load_ase`` read them)
and the frames set aside, each with its index and the reason (an SCF that does not converge, a non-finite value,
a command that fails or times out, a label of another frame).  Nothing is retried or dropped silently.
"""
import dataclasses
import logging
import os
import shlex
import subprocess
import tempfile
import time
from typing import List, Tuple

import numpy as np

log = logging.getLogger("pinn")

#: the keys the labels are written under in an extended XYZ file (``info`` and ``arrays``)
ENERGY_KEY, FORCES_KEY = "energy", "forces"


@dataclasses.dataclass
class Labels:
    """What an oracle made of a list of frames.

    Attributes:
        labelled: ``[(index, atoms)]``: each labelled frame (a copy, the energy in eV and the forces in eV/Å on
            every atom in its calculator), with its index in the list given.
        failed: ``[(index, reason)]``: the frames set aside.
        seconds: the wall time of the labelling.
    """
    labelled: List[Tuple[int, object]]
    failed: List[Tuple[int, str]]
    seconds: float = 0.0

    def describe(self):
        """One line: how many labelled and set aside, and the first reason."""
        text = f"{len(self.labelled)} frame(s) labelled in {self.seconds:.1f} s"
        if self.failed:
            index, reason = self.failed[0]
            text += f"; {len(self.failed)} set aside (frame {index}: {reason})"
        return text


def labelled_frame(atoms, energy, forces):
    """A copy of ``atoms`` holding ``energy`` (eV) and ``forces`` ([n, 3] eV/Å) as its calculator's results.

    Raises:
        ValueError: a non-finite energy or force, or forces of another shape.
    """
    from ase.calculators.singlepoint import SinglePointCalculator
    forces = np.asarray(forces, np.float64)
    if forces.shape != (len(atoms), 3):
        raise ValueError(f"forces of shape {forces.shape} for {len(atoms)} atoms")
    if not np.isfinite(energy) or not np.isfinite(forces).all():
        raise ValueError("the label holds non-finite values (NaN or inf)")
    frame = atoms.copy()
    frame.calc = SinglePointCalculator(frame, energy=float(energy), forces=forces)
    return frame


class Oracle:
    """An oracle: labels frames one by one (:meth:`label_frame`), setting aside those it cannot label."""

    #: what to call it in logs
    name = "oracle"

    def label_frame(self, atoms):
        """(energy eV, forces [n, 3] eV/Å) of one frame; raises what makes it unlabelled."""
        raise NotImplementedError

    def label(self, frames):
        """Label ``frames`` (a list of ``ase.Atoms``).

        Returns:
            :class:`Labels`.

        Raises:
            TypeError: one ``Atoms`` instead of a list of them.
        """
        frames = _frame_list(frames)
        start = time.monotonic()
        labelled, failed = [], []
        for index, atoms in enumerate(frames):
            try:
                energy, forces = self.label_frame(atoms)
                labelled.append((index, labelled_frame(atoms, energy, forces)))
            except (ValueError, RuntimeError, ArithmeticError) as error:
                reason = f"{type(error).__name__}: {error}" if not isinstance(error, ValueError) else str(error)
                failed.append((index, reason))
                log.warning("%s: frame %d set aside: %s", self.name, index, reason)
        return Labels(labelled, failed, time.monotonic() - start)


class PySCFOracle(Oracle):
    """The QM region by PySCF in the MM point charges.

    Args:
        method: ``'HF'`` (Hartree-Fock) or a density functional PySCF knows (e.g. ``'B3LYP'``, ``'PBE'``).
        basis: PySCF's basis name (e.g. ``'6-31g'``, ``'def2-svp'``).
        charge: the region's charge (e); ``None``: each frame's ``info["charge"]`` (pinn's convention; 0 when
            absent).
        spin: the number of unpaired electrons (PySCF's ``spin``, 2S); 0: restricted, else unrestricted.
        conv_tol: the SCF's energy tolerance (Hartree).
        max_cycle: the SCF's iterations.

    Raises:
        ImportError: PySCF is not installed (``pip install pyscf``).
        ValueError: a negative ``spin``.
    """

    name = "PySCF"

    def __init__(self, method="HF", basis="6-31g", charge=None, spin=0, conv_tol=1e-9, max_cycle=100):
        import pyscf  # noqa: F401 (refused now, not at the first frame)
        if int(spin) < 0:
            raise ValueError(f"PySCFOracle: spin is the number of unpaired electrons (>= 0), got {spin!r}")
        self.method = str(method)
        self.basis = basis
        self.charge = charge
        self.spin = int(spin)
        self.conv_tol = float(conv_tol)
        self.max_cycle = int(max_cycle)

    def label_frame(self, atoms):
        """The region's energy in the MM charges (eV; PySCF's total energy: electrons and QM nuclei in the MM
        charges' field, without the MM charges among themselves) and the forces on every atom (eV/Å).

        Raises:
            ValueError: a bad QM/MM frame (naming the problem); RuntimeError: the SCF did not converge, or the
                region's electrons do not fit its charge and spin.
        """
        from ase.units import Bohr, Hartree
        from pyscf import dft, gto, scf
        from pyscf.qmmm import itrf

        from pinn import keys as K
        from pinn.io.qmmm_atoms import qmmm_arrays
        arrays = qmmm_arrays(atoms, "the frame")
        qm = arrays[K.QM] if arrays else np.ones(len(atoms), bool)
        charge = (arrays.get(K.QM_CHARGE, atoms.info.get("charge", 0)) if self.charge is None else self.charge)
        if float(charge) != round(float(charge)):
            raise ValueError(f"the region's charge {charge} e is not a whole number (PySCF)")
        coords = atoms.positions
        try:
            mol = gto.M(atom=[(int(z), tuple(r)) for z, r in zip(atoms.numbers[qm], coords[qm])], basis=self.basis,
                        unit="Angstrom", charge=int(round(float(charge))), spin=self.spin, verbose=0)
        except RuntimeError as error:
            raise RuntimeError(f"PySCF refused the region: {error}") from None
        hf = self.method.upper() == "HF"
        if hf:
            method = scf.RHF(mol) if self.spin == 0 else scf.UHF(mol)
        else:
            method = dft.RKS(mol) if self.spin == 0 else dft.UKS(mol)
            method.xc = self.method
        mm = ~qm
        if mm.any():
            method = itrf.mm_charge(method, coords[mm], arrays[K.MM_CHARGE][mm], unit="Angstrom")
        method.conv_tol = self.conv_tol
        method.max_cycle = self.max_cycle
        energy = method.kernel()
        if not method.converged:
            raise RuntimeError(f"PySCF's SCF ({self.method}/{self.basis}) did not converge in {self.max_cycle} "
                               "cycles")
        gradient = method.nuc_grad_method()
        forces = np.zeros((len(atoms), 3))
        forces[qm] = -gradient.kernel()
        if mm.any():
            density = method.make_rdm1()
            if density.ndim == 3:  # unrestricted: the α and β densities; the charges feel their sum
                density = density.sum(axis=0)
            forces[mm] = -(gradient.grad_hcore_mm(density) + gradient.grad_nuc_mm())
        return float(energy) * Hartree, forces * (Hartree / Bohr)


class ASEOracle(Oracle):
    """Any ASE calculator, for frames without an MM part.

    Args:
        calculator: an ASE calculator giving energy (eV) and forces (eV/Å).
        name: what to call it in logs (default: the calculator's class).
    """

    def __init__(self, calculator, name=None):
        self.calculator = calculator
        self.name = name or type(calculator).__name__

    def label_frame(self, atoms):
        """The whole frame's energy and forces.

        Raises:
            ValueError: a frame with an MM part (its QM/MM label needs a QM/MM code: :class:`PySCFOracle` or a
                :class:`CommandOracle`).
        """
        if "qm" in atoms.arrays and not np.asarray(atoms.arrays["qm"]).astype(bool).all():
            raise ValueError(f"{self.name} labels frames without an MM part; this one has "
                             f"{int((~np.asarray(atoms.arrays['qm']).astype(bool)).sum())} MM atoms")
        frame = atoms.copy()
        frame.calc = self.calculator
        return frame.get_potential_energy(), frame.get_forces()


class CommandOracle(Oracle):
    """A command that labels a file of frames: the site's QM/MM code, run as the site runs it.

    Args:
        command: the command line, with ``{in}`` (the frames pinn writes, extended XYZ in the QM/MM convention,
            each frame's ``index`` in its info) and ``{out}`` (the labelled frames the command writes: extended
            XYZ, each frame's energy in eV and forces in eV/Å, in the input's order or with its ``index``);
            split as a shell would (``shlex``), run without a shell.
        timeout_s: seconds the command may run (``None``: no limit); past it, it is killed and its frames are
            set aside.
        workdir: where the files go (a folder per call is made in it); ``None``: a temporary folder, removed.
        tolerance: Å; a label whose positions differ from its frame's by more is refused (another frame).
        output: ``'extxyz'`` (``{out}`` a file, as above) or ``'mimic'``: ``{out}`` a folder holding, for frame K,
            ``frame-K/``, the files of a MiMiC single point (:mod:`pinn.io.mimic_single_point`), read back with
            :func:`pinn.io.load_mimic` (float32: positions to about 1e-5 Å).

    Raises:
        ValueError: a command without ``{in}`` or ``{out}``, an unknown ``output``.
    """

    name = "command"
    #: what ``{out}`` is
    OUTPUTS = ("extxyz", "mimic")

    def __init__(self, command, timeout_s=None, workdir=None, tolerance=1e-4, output="extxyz"):
        text = command if isinstance(command, str) else " ".join(shlex.quote(str(p)) for p in command)
        if "{in}" not in text or "{out}" not in text:
            raise ValueError(f"CommandOracle: the command must name {{in}} and {{out}} (the frames and the labels), "
                             f"got {text!r}")
        if output not in self.OUTPUTS:
            raise ValueError(f"CommandOracle: output must be one of {self.OUTPUTS}, got {output!r}")
        self.output = output
        # what {out} is and how its labels are read, chosen once
        self._out_name, self._labels = {"extxyz": ("labels.xyz", self._extxyz_labels),
                                        "mimic": ("labels", self._mimic_labels)}[output]
        self.command = text
        self.timeout_s = timeout_s
        self.workdir = workdir
        self.tolerance = float(tolerance)
        self.calls = 0

    def label(self, frames):
        """Write ``frames``, run the command once for all of them, read the labels back (see the class).

        Returns:
            :class:`Labels`: on a failed or timed-out command every frame set aside with its reason.
        """
        from pinn.io import ase_files
        frames = _frame_list(frames)
        start = time.monotonic()
        self.calls += 1
        with _folder(self.workdir, self.calls) as folder:
            given = os.path.join(folder, "frames.xyz")
            wanted = os.path.join(folder, self._out_name)
            written = []
            for index, atoms in enumerate(frames):
                frame = atoms.copy()
                frame.calc = None
                frame.info["index"] = index
                written.append(frame)
            ase_files.write(given, written, format="extxyz")
            argv = [part.replace("{in}", given).replace("{out}", wanted) for part in shlex.split(self.command)]
            problem = self._run(argv, folder)
            if problem is None and not os.path.exists(wanted):
                problem = f"the command wrote no {wanted}"
            if problem is not None:
                log.warning("command oracle: %s; its %d frame(s) set aside", problem, len(frames))
                return Labels([], [(k, problem) for k in range(len(frames))], time.monotonic() - start)
            labelled, failed = self._matched(frames, self._labels(frames, wanted))
        for index, reason in failed:
            log.warning("command oracle: frame %d set aside: %s", index, reason)
        return Labels(labelled, failed, time.monotonic() - start)

    def _run(self, argv, folder):
        """Run the command; ``None``, or what went wrong (its exit status and last line, or the timeout)."""
        try:
            done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return f"the command {argv[0]} ran past timeout_s = {self.timeout_s:g} s and was stopped"
        except OSError as error:
            return f"the command {argv[0]} could not run ({error})"
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()
            return f"the command {argv[0]} exited with status {done.returncode}" + (f": {last[-1]}" if last else "")
        return None

    def _extxyz_labels(self, frames, path):
        """Each frame's label in the extended XYZ file ``path`` (by its ``index``, else its place), or why none."""
        from pinn.io import ase_files
        try:
            labels = ase_files.read(path, index=":")
        except Exception as error:  # noqa: BLE001 - ASE raises many kinds for a bad file
            return [f"{path} is not an extended XYZ file of labels ({type(error).__name__}: {error})"] * len(frames)
        by_index = {int(label.info.get("index", order)): label for order, label in enumerate(labels)}
        return [by_index.get(index, f"{path} holds no label of this frame") for index in range(len(frames))]

    def _mimic_labels(self, frames, folder):
        """Each frame's label in its MiMiC single point ``folder/frame-K``, or why none."""
        from pinn.io.errors import DataError
        from pinn.io.mimic_single_point import read_mimic_single_point
        labels = []
        for index, atoms in enumerate(frames):
            place = os.path.join(folder, f"frame-{index}")
            if not os.path.isdir(place):
                labels.append(f"{place}: no MiMiC single point of this frame")
                continue
            try:
                labels.append(read_mimic_single_point(place, qm_charge=float(atoms.info.get("charge", 0.0))))
            except (DataError, ValueError, OSError) as error:
                labels.append(f"{place}: {error}")
        return labels

    def _matched(self, frames, labels):
        """(labelled, failed) of ``frames`` and their ``labels`` (each an ``Atoms`` or why there is none): a label
        of other atoms or positions, or of non-finite values, is set aside."""
        labelled, failed = [], []
        for index, (atoms, label) in enumerate(zip(frames, labels)):
            problem = label if isinstance(label, str) else self._mismatch(atoms, label)
            if problem is None:
                try:
                    labelled.append((index, labelled_frame(atoms, *_energy_and_forces(label))))
                    continue
                except ValueError as error:
                    problem = str(error)
            failed.append((index, problem))
        return labelled, failed

    def _mismatch(self, atoms, label):
        if len(label) != len(atoms) or not np.array_equal(label.numbers, atoms.numbers):
            return f"its label has other atoms ({len(label)} atoms)"
        shift = float(np.abs(label.positions - atoms.positions).max()) if len(atoms) else 0.0
        if shift > self.tolerance:
            return f"its label's positions differ from the frame's by {shift:.3g} Å (another frame?)"
        return None


def _frame_list(frames):
    """``frames`` as a list; one ``Atoms`` refused (it would be read as its atoms)."""
    from ase import Atoms
    if isinstance(frames, Atoms):
        raise TypeError("an oracle labels a list of frames: pass [atoms]")
    return list(frames)


def _energy_and_forces(label):
    """The energy and forces an extended XYZ frame holds (its calculator's, else ``info``/``arrays``)."""
    from ase.calculators.calculator import PropertyNotImplementedError
    try:
        return label.get_potential_energy(), label.get_forces()
    except (RuntimeError, PropertyNotImplementedError, AttributeError):
        pass
    if ENERGY_KEY not in label.info or FORCES_KEY not in label.arrays:
        raise ValueError("its label holds no energy and forces")
    return float(label.info[ENERGY_KEY]), np.asarray(label.arrays[FORCES_KEY], np.float64)


class _folder:
    """A folder for one command call: ``workdir/call-N`` (kept), or a temporary one (removed)."""

    def __init__(self, workdir, call):
        self.workdir = workdir
        self.call = call
        self._temporary = None

    def __enter__(self):
        if self.workdir is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="pinn-oracle-")
            return self._temporary.name
        path = os.path.join(os.fspath(self.workdir), f"call-{self.call}")
        os.makedirs(path, exist_ok=True)
        return path

    def __exit__(self, *exc):
        if self._temporary is not None:
            self._temporary.cleanup()
        return False
