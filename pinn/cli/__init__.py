"""The ``pinn`` command (:mod:`pinn.cli.commands`), its YAML run files (:mod:`pinn.cli.runconfig`)
and the training report (:mod:`pinn.cli.report`)."""


def main(argv=None):
    """Entry point of the ``pinn`` command (see :func:`pinn.cli.commands.main`)."""
    from pinn.cli.commands import main as run
    return run(argv)
