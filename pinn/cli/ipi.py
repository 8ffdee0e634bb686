"""``pinn ipi``: a potential for i-PI (:mod:`pinn.md.ipi`), as a client of its socket or inside its process.

``pinn ipi MODEL --structure init.xyz (--unix NAME | --host HOST --port PORT | --ffdirect NAME) [--pbc yes|no]
[--engine E] [--drive first]``
"""


def add_parser(commands, common):
    """Add ``pinn ipi`` to the ``pinn`` command's subparsers."""
    ipi = commands.add_parser("ipi", parents=[common], help="a potential for i-PI: serve its socket, or print "
                              "the <ffdirect> that runs it in i-PI's process", description=__doc__.split("\n\n")[0])
    ipi.add_argument("model", help="a model directory, a model file of pinn export, or a committee")
    ipi.add_argument("--structure", required=True, help="a file with the atoms in i-PI's order (e.g. the file of "
                     "i-PI's <initialize>): their elements, and whether they are periodic")
    where = ipi.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix", metavar="NAME", help="serve i-PI's <ffsocket mode='unix'> of this <address> "
                       "(/tmp/ipi_NAME)")
    where.add_argument("--port", type=int, help="serve the port of a mode='inet' socket (with --host)")
    where.add_argument("--ffdirect", metavar="NAME", help="print the <ffdirect name='NAME'> element of i-PI's "
                       "input that runs the potential in i-PI's own process (no socket), and exit")
    ipi.add_argument("--host", default="localhost", help="with --port: i-PI's host (default localhost)")
    ipi.add_argument("--pbc", choices=["yes", "no"], help="periodic in i-PI's cell, or not (a molecule); default: "
                     "the structure's, and periodic for a file in i-PI's xyz format")
    ipi.add_argument("--engine", default="auto", choices=["auto", "numba", "tensorflow"], help="as get_calc's")
    ipi.add_argument("--drive", choices=["mean", "first"], help="for a committee: as get_calc's")


def run(args):
    """``pinn ipi``; returns the exit status."""
    from pinn.md.ipi import ffdirect_element, serve_ipi
    pbc = None if args.pbc is None else args.pbc == "yes"
    if args.ffdirect:
        print(ffdirect_element(args.model, args.structure, name=args.ffdirect, pbc=pbc,
                               engine=None if args.engine == "auto" else args.engine, drive=args.drive))
        return 0
    options = {"engine": args.engine, **({"drive": args.drive} if args.drive else {})}
    done = serve_ipi(args.model, args.structure, unixsocket=args.unix, host=args.host, port=args.port, pbc=pbc,
                     **options)
    print(f"pinn ipi: i-PI ended the run after {done['calls']} structures in {done['seconds']:.1f} s")
    return 0
