"""The ``pinn`` command (:mod:`pinn.cli.commands`, one module per command).  The commands parse their
arguments and call the library: a run file and its data pipeline are :mod:`pinn.training.run_file`, a model
file's export :mod:`pinn.models.export`, a model directory's report :mod:`pinn.training.report`.
Nothing outside this package imports it (``tests/project/test_architecture.py``)."""


def main(argv=None):
    """Entry point of the ``pinn`` command (see :func:`pinn.cli.commands.main`)."""
    from pinn.cli.commands import main as run
    return run(argv)
