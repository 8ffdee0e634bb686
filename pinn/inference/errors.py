"""A model's errors on labelled data, from the sums an evaluation adds up: MAE and RMSE, and
upstream PiNN's names for them."""
import numpy as np

#: per-atom rows kept for parity plots (a random subset of larger evaluations)
MAX_PARITY_ROWS = 20000


def errors_from_sums(sums):
    """MAE and RMSE from error sums.

    Args:
        sums: dict metric (``'E'``, ``'F'``, ``'S'``) → (Σ|err|, Σerr², count).

    Returns:
        dict ``'E_MAE'``, ``'E_RMSE'``, ... (units of the metric) for metrics with a count.
    """
    out = {}
    for key, (abs_sum, sq_sum, count) in sums.items():
        if count:
            out[f"{key}_MAE"] = float(abs_sum / count)
            out[f"{key}_RMSE"] = float(np.sqrt(sq_sum / count))
    return out


def with_upstream_names(result, scales=None):
    """``result`` (a dict of metrics) with each ``<Q>_MAE`` / ``<Q>_RMSE`` also under upstream PiNN's
    name ``METRICS/<Q>_MAE`` / ``METRICS/<Q>_RMSE``, in upstream's training units (in place; returned).

    Args:
        result: the metrics, pinn's names and units (eV, eV/Å, e·Å, ...).
        scales: quantity ``<Q>`` → factor of upstream's value (the model's
            :meth:`~pinn.physics.base.Model.upstream_metric_scales`: ``e_scale`` for E, F, S,
            ``d_scale`` for D); 1 for the others.
    """
    scales = scales or {}
    for key, value in list(result.items()):
        if key.endswith(("_MAE", "_RMSE")):
            quantity = key.rsplit("_", 1)[0]
            result[f"METRICS/{key}"] = value * scales[quantity] if quantity in scales else value
    return result
