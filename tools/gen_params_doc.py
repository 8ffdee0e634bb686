"""Write docs/params.md from the params schema (pinn.params, pinn.networks, pinn.models, pinn.params.training_options).

Usage:  python tools/gen_params_doc.py [--check]

Without arguments it (re)writes docs/params.md.  With ``--check`` it writes
nothing and exits 1 if docs/params.md differs from what it would write (the
test suite runs this, so a schema change without a regenerated page fails).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the checkout's pinn, even when it is not installed

from pinn.networks import NETWORKS  # noqa: E402
from pinn.parallel.worlds import PARAMS as PARALLEL_PARAMS  # noqa: E402
from pinn.params import TOP_LEVEL, model_schema  # noqa: E402
from pinn.physics.registry import MODELS  # noqa: E402
from pinn.schema import describe  # noqa: E402
from pinn.training.run_file import DATA_PARAMS, TRAIN_PARAMS  # noqa: E402

OUT = os.path.join(ROOT, "docs", "params.md")

INTRO = """# Params reference

*Generated from the schema by `tools/gen_params_doc.py`; do not edit by hand
(run `python tools/gen_params_doc.py` after changing an option).*

A model is configured by one nested dict:

```python
params = {
    'model_dir': 'model',                 # required
    'network': {'name': 'PiNet',          # required: 'PiNet', 'PiNet2', 'BPNN' or 'LJ'
                'params': {'atom_types': [1, 6, 8], 'rc': 4.5}},
    'model': {'name': 'potential_model',  # the default
              'params': {'use_force': True}},
    'precision': 'float32',               # the default
    'seed': 0,                            # the default
}
model = potential_model(params)
```

Network names are case-insensitive (`'pinet'`, `'pinet2'`, `'bpnn'`, `'behler_parrinello'`, `'lj'`
are accepted) and are stored in their canonical spelling.

**Upstream PiNN's flat form** is accepted and normalised to the nested form before it is
checked:

```python
{'model_dir': 'model', 'network': 'pinet', 'network_params': {...}, 'model_params': {...}}
# becomes
{'model_dir': 'model', 'network': {'name': 'PiNet', 'params': {...}},
 'model': {'name': 'potential_model', 'params': {...}}}
```

**Validation.** `potential_model(params)` (or `pinn.params.resolve(params)` on its own)
checks every key before anything is built and fills in every default. An unknown,
missing or ill-typed key raises `pinn.params.ParamsError` (a `ValueError`) whose message
starts with the key path; an unknown key, network name or model name is followed by the
nearest allowed one when there is one (case ignored), for example:

```
model.params.use_force: expected bool, got str ('yes')
model.params.learnin_rate: unknown key; did you mean `learning_rate`? allowed keys: ['accumulate_batches', ...]
network.params.rc: must be positive (got -1.0)
network.name: 'PiNett' is not one of ['BPNN', 'LJ', 'PiNet', 'PiNet2']; did you mean `PiNet`?
network.name: 'schnet' is not one of ['BPNN', 'LJ', 'PiNet', 'PiNet2']
params.model_dir: required key is missing (directory for checkpoints, params.yml and logs)
model.params.learning_rate: expected float, got str ('1e-2'); YAML reads an exponent without a dot or a sign as text: write e.g. 1.0e-3, 1.0e+3
```

A `float` option also accepts an int, a `list` option also accepts a tuple, and `True`
/ `False` are refused where a number is expected. In a YAML file (a run file, `params.yml`)
write numbers in exponent form with a dot and a signed exponent, `1.0e-3`: YAML 1.1, which
PyYAML reads, takes `1e-3` for text.

**params.yml.** The resolved params, every default included, are written to
`model_dir/params.yml` when the model is created. `potential_model('model')` and
`pinn.get_calc('model')` rebuild the model from that file and the latest checkpoint.
Creating a model with params whose `network` section differs from the one stored in
`model_dir` raises a `ValueError`; the `model` section may change between runs (for
example a new learning rate to continue training), and the new values are written.

The tables below list every option: `key`, accepted types, default and meaning.
"""


def render():
    parts = [INTRO, "## Top level\n", describe(TOP_LEVEL),
             "\n## `parallel_params`\n", "Used when `parallel` is True; see [parallel training](parallel.md).\n",
             describe(PARALLEL_PARAMS)]
    for name, cls in NETWORKS.items():
        parts += [f"\n## `network.params` for `{name}`\n", describe(cls.PARAMS)]
    for name in MODELS:
        parts += [f"\n## `model.params` for `{name}`\n", describe(model_schema(name))]
    parts += ["\n## Run files: `data`\n", "Sections of a YAML run file for `pinn train` only; see the "
              "[command line](cli.md).\n", describe(DATA_PARAMS),
              "\n## Run files: `train`\n", describe(TRAIN_PARAMS)]
    return "\n".join(parts) + "\n"


def main(argv):
    text = render()
    if "--check" in argv:
        current = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if current != text:
            print(f"{OUT} is out of date: run python tools/gen_params_doc.py", file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
