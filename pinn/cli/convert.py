"""``pinn convert``: data (ASE-readable files, a format of ``-f``, or MiMiC runs) written as TFRecord caches,
optionally split (``--split``, or upstream PiNN's ``-o 'train:8,eval:2'``) and with D3 dispersion taken out of
the labels (``--subtract-d3``, :mod:`pinn.dispersion`)."""
from pinn.cli.arguments import positive_int

#: the formats whose labels are in eV, Å (pinn's units), from which `pinn convert --subtract-d3` takes D3 out
D3_FORMATS = ("ase", "deepmd", "cp2k")
#: what `pinn convert -f` takes (pinn.io.formats.LOADERS, without importing the loaders)
LOADER_FORMATS = ("tfr", "pinn", "ase", "runner", "qm9", "ani", "cp2k", "deepmd", "qm7b")


def add_parser(commands, common):
    """Add ``pinn convert`` to the ``pinn`` command's subparsers."""
    convert = commands.add_parser("convert", parents=[common], help="write data to TFRecord caches",
                                  description="Read structures (any ASE-readable file, a format of -f, or MiMiC "
                                  "files with --mpt/--trr/--energies) and write OUTPUT.tfr, or OUTPUT.<part>.tfr per "
                                  "part of --split, each with its spec OUTPUT.yml / OUTPUT.<part>.yml; `pinn train` "
                                  "and load_tfrecord read them.")
    convert.add_argument("inputs", nargs="*", help="input files (ASE-readable, or of the format -f)")
    convert.add_argument("-o", "--output", default="dataset",
                         help="output name without .tfr (default 'dataset'); or upstream PiNN's 'name:ratio,...' "
                              "(e.g. 'train:8,eval:2'), which splits and writes name.tfr for each part")
    convert.add_argument("-f", "--format", default="auto", choices=["auto", *sorted(LOADER_FORMATS)],
                         help="format of the inputs (default auto: .yml/.tfr TFRecords, .data RuNNer, else ASE)")
    convert.add_argument("--split", help="parts and ratios, e.g. train=8,eval=2")
    convert.add_argument("--shuffle", dest="shuffle", action="store_true", default=True,
                         help="shuffle the structures before splitting (the default)")
    convert.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="keep the inputs' order")
    convert.add_argument("--batch", type=positive_int, help="write sparse batches of this many structures")
    convert.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
    convert.add_argument("--mpt", nargs="+", help="MiMiC topology file(s)")
    convert.add_argument("--trr", nargs="+", help="GROMACS trr file(s), one per run")
    convert.add_argument("--energies", nargs="+", help="CPMD ENERGIES file(s), one per run")
    convert.add_argument("--precision", choices=("float32", "float64"), default="float32")
    convert.add_argument("--subtract-d3", metavar="FUNCTIONAL",
                         help="take D3 dispersion (for this DFT functional, e.g. PBE) out of the energy, force and "
                              "stress labels, for a model used with get_calc(..., dispersion=, functional=); "
                              "needs the dftd3 package")
    convert.add_argument("--d3-damping", default="d3bj", metavar="NAME",
                         help="with --subtract-d3: the damping, d3bj (default), d3zero, d3bjm, d3zerom or d3op")


def _ratio_pairs(text, separator, error):
    """``{name: ratio}`` of ``'name<separator>ratio,...'``; ``ValueError(error)`` for an empty name, a ratio
    that is not a positive number, or a name given twice."""
    pairs = {}
    for part in text.split(","):
        name, _, ratio = part.rpartition(separator)
        try:
            value = float(ratio)
        except ValueError:
            value = -1
        name = name.strip()
        if not name or value <= 0 or name in pairs:
            raise ValueError(error)
        pairs[name] = value
    return pairs


def _parse_split(text):
    """``--split train=8,eval=2``: {part: ratio}."""
    return _ratio_pairs(text, "=", f"--split: expected name=ratio pairs such as train=8,eval=2, got {text!r}")


def _parse_upstream_outputs(text):
    """Upstream PiNN's ``-o 'train:8,eval:2'``: {output name: ratio}; ``None`` for a plain output name.

    Raises:
        ValueError: a name with ':' or ',' that is not such a list (never taken as a file name).
    """
    if ":" not in text and "," not in text:
        return None
    return _ratio_pairs(text, ":", f"-o {text!r}: an output name, or upstream PiNN's name:ratio pairs such as "
                                   "'train:8,eval:2' (distinct names, positive ratios)")


def run(args):
    """``pinn convert``; returns the exit status."""
    from pinn.io import load_ase, load_mimic, write_tfrecord
    from pinn.runtime.logs import setup_logging
    setup_logging()
    split = _parse_split(args.split) if args.split else False
    named = _parse_upstream_outputs(args.output)  # upstream PiNN's -o 'train:8,eval:2'
    if named:
        if args.split:
            raise ValueError(f"-o {args.output!r} (upstream PiNN's name:ratio form) already splits: leave out --split")
        split = named
    mimic = [args.mpt, args.trr, args.energies]
    if args.subtract_d3:
        from pinn.dispersion import check_d3
        check_d3(args.d3_damping, args.subtract_d3)  # before any data are read
    elif args.d3_damping != "d3bj":
        raise ValueError(f"--d3-damping {args.d3_damping}: goes with --subtract-d3 FUNCTIONAL")
    if any(mimic):
        if not all(mimic):
            raise ValueError("MiMiC data need --mpt, --trr and --energies together")
        if args.subtract_d3:
            raise ValueError("--subtract-d3: MiMiC frames are QM/MM; D3 of the whole frame is not the QM "
                             "region's (take it out in CPMD's output instead)")
        if args.inputs:
            raise ValueError("give ASE-readable files or MiMiC files (--mpt/--trr/--energies), not both")
        if args.format != "auto":
            raise ValueError(f"-f {args.format}: MiMiC files (--mpt/--trr/--energies) have their own reader")
        mpt = args.mpt * len(args.trr) if len(args.mpt) == 1 else args.mpt
        data = load_mimic(mpt, args.trr, args.energies, split=split, seed=args.seed, shuffle=args.shuffle)
    else:
        if not args.inputs:
            raise ValueError("no input files (give ASE-readable files or --mpt/--trr/--energies)")
        from pinn.io.formats import format_of, load_ds
        fmt = format_of(args.inputs) if args.format == "auto" else args.format
        if args.subtract_d3 and fmt not in D3_FORMATS:
            raise ValueError(f"--subtract-d3: the {fmt} format's labels are not in eV (upstream PiNN's units); "
                             f"D3 can be taken out of {', '.join(D3_FORMATS)} data")
        if fmt == "ase":  # the frames of every file, pooled
            data = load_ase(args.inputs, split=split, seed=args.seed, shuffle=args.shuffle)
        else:
            inputs = args.inputs[0] if len(args.inputs) == 1 else args.inputs
            data = load_ds(inputs, fmt=fmt, splits=split or None, shuffle=args.shuffle, seed=args.seed)
    parts = data if isinstance(data, dict) else {None: data}
    for name, dataset in _flatten(parts):
        if args.subtract_d3:
            from pinn.dispersion import subtract_d3
            dataset = subtract_d3(dataset, args.d3_damping, args.subtract_d3, source=", ".join(args.inputs))
        if args.precision == "float64":
            import tensorflow as tf
            dataset = dataset.map(lambda s: {k: tf.cast(v, tf.float64) if v.dtype.is_floating else v
                                             for k, v in s.items()})
        if args.batch:
            from pinn.io import sparse_batch
            dataset = dataset.apply(sparse_batch(args.batch))
        path = f"{name}.tfr" if named else f"{args.output}.{name}.tfr" if name else f"{args.output}.tfr"
        count = write_tfrecord(path, dataset)
        print(f"{path}: {count} {'batches' if args.batch else 'structures'}")
    return 0


def _flatten(parts, prefix=""):
    for name, value in parts.items():
        full = f"{prefix}{name}" if name is not None else None
        if isinstance(value, dict):
            yield from _flatten(value, f"{full}.")
        else:
            yield full, value
