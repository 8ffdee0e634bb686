"""``pinn version``: the installed pinn version (as upstream PiNN's ``pinn version``)."""


def add_parser(commands, common):
    """Add ``pinn version`` to the ``pinn`` command's subparsers."""
    commands.add_parser("version", parents=[common],
                        help="the installed pinn version (as upstream PiNN's `pinn version`)")


def run(args):
    """``pinn version``; returns the exit status."""
    from pinn import __version__
    print(f"pinn version: {__version__}")
    return 0
