"""Modules that moved (in pinn 0.10 and since), importable under their old names (with a DeprecationWarning).

0.10 grouped the package into stage folders (``docs/architecture.md``).  A script that
imports ``pinn.trainer`` or ``pinn.io.trr`` gets the module at its new place; the warning
names it.
"""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module name → new module name
MOVED = {
    "pinn.trainer": "pinn.training.trainer",
    "pinn.schedule": "pinn.training.schedule",
    "pinn.ema": "pinn.training.ema",
    "pinn.guards": "pinn.training.guards",
    "pinn.progress": "pinn.training.progress",
    "pinn.recorder": "pinn.training.recorder",
    "pinn.metrics": "pinn.training.metrics",
    "pinn.padding": "pinn.io.padding",
    "pinn.neighbors": "pinn.io.neighbors",
    "pinn.io.trr": "pinn.io.readers.trr",
    "pinn.io.mpt": "pinn.io.readers.mpt",
    "pinn.io.energies": "pinn.io.readers.energies",
    "pinn.io.ndx": "pinn.io.readers.ndx",
    "pinn.io.cpmd": "pinn.io.readers.cpmd",
    "pinn.exported": "pinn.engines.exported",
    "pinn.host_optimizer": "pinn.engines.host_optimizer",
    "pinn.verlet_filter": "pinn.io.verlet_filter",
    "pinn.report": "pinn.training.report",
    "pinn.runconfig": "pinn.training.run_file",
    # pinn 0.19: the numba training engine's module named for what it computes
    "pinn.engines.training": "pinn.engines.gradients",
    # pinn 0.19: params, their schema and upstream's sections in one package
    "pinn.upstream_params": "pinn.params.upstream",
    # pinn 0.19: readers named for the files they read, apart from the loaders' (upstream's) names
    "pinn.io.readers.qm9": "pinn.io.readers.qm9_xyz",
    "pinn.io.readers.runner": "pinn.io.readers.runner_data",
    "pinn.io.readers.deepmd": "pinn.io.readers.deepmd_system",
    "pinn.io.readers.cp2k": "pinn.io.readers.cp2k_files",
    "pinn.io.readers.qm7b": "pinn.io.readers.qm7b_xyz",
    # pinn 0.20: at most eight modules directly in pinn/ (process settings together; MD set-up with the engines)
    "pinn.logs": "pinn.runtime.logs",
    "pinn.lazy": "pinn.runtime.lazy",
    "pinn.velocities": "pinn.md.velocities",
    # pinn 0.30: folders that are layers (docs/architecture.md)
    "pinn.params.schema": "pinn.schema",
    "pinn.parallel.ranks": "pinn.runtime.ranks",
    "pinn.engines.numba.verlet_filter": "pinn.io.verlet_filter",
    "pinn.engines.velocities": "pinn.md.velocities",
    "pinn.training.options": "pinn.params.training_options",
    "pinn.training.inference": "pinn.inference.handle",
    # pinn 0.30: inference below training (pinn.models.restored keeps RestoredModel and handle_of)
    "pinn.models.inference": "pinn.inference.handle",
    # pinn 0.30: the run file and its data pipeline below the command (nothing imports pinn.cli)
    "pinn.cli.runconfig": "pinn.training.run_file",
    # pinn 0.30: a model directory's report below the command
    "pinn.cli.report": "pinn.training.report",
}

#: pinn 0.30: the Model classes below training (pinn.physics); pinn.models keeps upstream's model functions
PHYSICS = ("base", "potential", "potential_params", "dipole", "dipole_params", "dipole_variants", "polarizability",
           "polarizability_params", "response_kernels", "embedding", "energy_offsets", "loss_weights", "registry")
MOVED.update({f"pinn.models.{name}": f"pinn.physics.{name}" for name in PHYSICS})

#: the version that moved a module, where it is not 0.10
MOVED_IN = {name: "0.19" for name in ("pinn.engines.training", "pinn.upstream_params",
                                      "pinn.io.readers.qm9", "pinn.io.readers.runner", "pinn.io.readers.deepmd",
                                      "pinn.io.readers.cp2k", "pinn.io.readers.qm7b")}
MOVED_IN.update({name: "0.20" for name in ("pinn.logs", "pinn.lazy", "pinn.velocities")})
MOVED_IN.update({name: "0.30" for name in ("pinn.params.schema", "pinn.parallel.ranks",
                                           "pinn.engines.numba.verlet_filter", "pinn.engines.velocities",
                                           "pinn.training.options", "pinn.training.inference",
                                           "pinn.cli.runconfig", "pinn.runconfig")})
MOVED_IN.update({f"pinn.models.{name}": "0.30" for name in PHYSICS})


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`MOVED` and loads them as the modules at the new place."""

    def find_spec(self, name, path=None, target=None):
        if name in MOVED:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} is now {new} (pinn {MOVED_IN.get(spec.name, '0.10')}); import it from there",
                      DeprecationWarning,
                      stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        """The module at the new place is already executed."""


def install():
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
