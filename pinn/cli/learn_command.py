"""``pinn learn RUN.yml``: learning during ML/MM MD (:mod:`pinn.learn.loop`): a committee explores, an oracle
labels the frames it is unsure of, the committee is retrained, and the run goes on; started again, it resumes
after its last finished stage."""


def add_parser(commands, common):
    """Add ``pinn learn`` to the ``pinn`` command's subparsers."""
    learn = commands.add_parser("learn", parents=[common], help="learn during ML/MM MD: explore, label, retrain",
                                description=__doc__)
    learn.add_argument("run_file", help="the loop's run file (docs/learning.md)")


def run(args):
    """``pinn learn``; returns the exit status."""
    from pinn.learn.loop import learn
    print(f"pinn learn: {learn(args.run_file)}")
    return 0
