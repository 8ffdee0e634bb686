"""Write docs/params.md from the params schema (pinn.params, networks, models).

Usage: python tools/gen_params_doc.py [--check]   (--check: exit 1 if the page is out of date)
"""
import os
import sys

from pinn.models import MODELS
from pinn.networks import NETWORKS
from pinn.params import TOP_LEVEL, describe

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "params.md")

INTRO = """# Params reference

*Generated from the schema by `tools/gen_params_doc.py`; do not edit by hand.*

A model is configured by one dict (in an input script) or the same structure in YAML:

```python
params = {'model_dir': 'model', 'precision': 'float32', 'seed': 0,
          'network': {'name': 'PiNet', 'params': {...}},
          'model': {'name': 'potential_model', 'params': {...}}}
```

Every key is validated before anything runs: an unknown or ill-typed key raises
`pinn.params.ParamsError` naming the key path and what is allowed, e.g.
`model.params.use_forces: unknown key; allowed keys: [...]`. Upstream PiNN's flat form
(`'network': 'pinet'`, `'network_params': {...}`, `'model_params': {...}`) is accepted and
normalised. The resolved params, with every default filled in, are written to
`model_dir/params.yml`, and `potential_model('model_dir')` rebuilds the model from it.
"""


def render():
    parts = [INTRO, "## Top level\n", describe(TOP_LEVEL)]
    for name, cls in NETWORKS.items():
        parts += [f"\n## network.params for `{name}`\n", describe(cls.PARAMS)]
    for name, cls in MODELS.items():
        parts += [f"\n## model.params for `{name}`\n", describe(cls.PARAMS)]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        current = open(OUT).read() if os.path.exists(OUT) else ""
        sys.exit(0 if current == text else 1)
    with open(OUT, "w") as f:
        f.write(text)
