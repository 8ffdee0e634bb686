"""``pinn ipi``: serve a potential to an i-PI server (:mod:`pinn.md.ipi`).

``pinn ipi MODEL --structure init.xyz (--unix NAME | --host HOST --port PORT) [--engine E] [--drive first]``
"""


def add_parser(commands, common):
    """Add ``pinn ipi`` to the ``pinn`` command's subparsers."""
    ipi = commands.add_parser("ipi", parents=[common], help="serve a potential to an i-PI server (i-PI client)",
                              description=__doc__.split("\n\n")[0])
    ipi.add_argument("model", help="a model directory, a model file of pinn export, or a committee")
    ipi.add_argument("--structure", required=True, help="a file with the atoms in i-PI's order (e.g. the file of "
                     "i-PI's <initialize>): their elements")
    where = ipi.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix", metavar="NAME", help="i-PI's <address> of a mode='unix' socket (/tmp/ipi_NAME)")
    where.add_argument("--port", type=int, help="the port of a mode='inet' socket (with --host)")
    ipi.add_argument("--host", default="localhost", help="with --port: i-PI's host (default localhost)")
    ipi.add_argument("--engine", default="auto", choices=["auto", "numba", "tensorflow"], help="as get_calc's")
    ipi.add_argument("--drive", choices=["mean", "first"], help="for a committee: as get_calc's")


def run(args):
    """``pinn ipi``; returns the exit status."""
    from pinn.md.ipi import serve_ipi
    options = {"engine": args.engine, **({"drive": args.drive} if args.drive else {})}
    done = serve_ipi(args.model, args.structure, unixsocket=args.unix, host=args.host, port=args.port, **options)
    print(f"pinn ipi: i-PI ended the run after {done['calls']} structures in {done['seconds']:.1f} s")
    return 0
