"""``pinn eval``: the errors of a trained model on data (a table, or JSON), through the inference loader
(:func:`pinn.inference.handle.load_for_inference`); ``--per-atom``: the predictions as extended XYZ
(:mod:`pinn.cli.predictions`)."""
import json
import os

from pinn.cli.arguments import positive_int


def add_parser(commands, common):
    """Add ``pinn eval`` to the ``pinn`` command's subparsers."""
    evaluate = commands.add_parser("eval", parents=[common], help="errors of a trained model on data",
                                   description="Evaluate a model directory on data (ASE-readable files or .tfr "
                                   "caches): MAE and RMSE of every labelled quantity.")
    evaluate.add_argument("model_dir")
    evaluate.add_argument("data", nargs="+", help="ASE-readable files or .tfr caches")
    evaluate.add_argument("--checkpoint", default="last", help="'last' (default), 'best' or a checkpoint path")
    evaluate.add_argument("--batch-size", type=positive_int, default=32)
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("--per-atom", metavar="OUT.xyz", help="also write every structure with the model's "
                          "energy, forces, per-atom energies (and stress) to this extended XYZ file (a potential "
                          "model without an embedding)")


def run(args):
    """``pinn eval``; returns the exit status."""
    from pinn.cli.predictions import refuse_per_atom, write_predictions
    from pinn.cli.train_command import metrics_table
    from pinn.io import sparse_batch
    from pinn.inference.handle import load_for_inference
    from pinn.physics.embedding_kinds import embedding_of
    from pinn.training.run_file import load_structures, region_for_model
    if not os.path.isdir(args.model_dir):
        raise FileNotFoundError(f"{args.model_dir}: no such model directory")
    model = load_for_inference(args.model_dir, checkpoint=None if args.checkpoint == "last" else args.checkpoint)
    dataset = region_for_model(load_structures(args.data), ", ".join(args.data),
                               embedding=embedding_of(model.params["model"]["params"]))
    if args.per_atom:
        refuse_per_atom(model.model, args.model_dir)
    metrics = model.evaluate(lambda: dataset.apply(sparse_batch(args.batch_size)))
    written = {}
    if args.per_atom:
        count = write_predictions(model.predict(lambda: dataset.apply(sparse_batch(args.batch_size))), args.per_atom)
        written = {"per_atom": args.per_atom, "per_atom_structures": count}
    if args.json:
        print(json.dumps({**metrics, "checkpoint": model.checkpoint, **written}))
    else:
        averaged = " (averaged weights)" if model.averaged else ""
        print(f"model {args.model_dir}: checkpoint {os.path.basename(model.checkpoint)}, step {metrics['global_step']}"
              f"{averaged}\ndata: {', '.join(args.data)}\n")
        print(metrics_table(metrics))
        if written:
            print(f"\n{written['per_atom_structures']} structures with the model's energy, forces and per-atom "
                  f"energies: {args.per_atom}")
    return 0
