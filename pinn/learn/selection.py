"""Which frames of an exploration go to the oracle: a deviation band, at most k a round, spaced in steps."""
import numpy as np


def select_frames(steps, deviations, low, high, max_frames, min_spacing):
    """The frames to label among an exploration's records.

    Args:
        steps: [n] the MD step of each record.
        deviations: [n] its committee deviation (eV/Å; ``max_devi_f_qm``).
        low, high: the band (eV/Å): a record is a candidate when ``low <= deviation < high`` (below the band the
            committee knows the frame; above it the frame lies too far from the data to learn from yet).
        max_frames: at most this many.
        min_spacing: chosen frames lie at least this many steps apart (correlated neighbours carry little more).

    Returns:
        the chosen records' indices, in step order: the candidates by decreasing deviation, each kept when it
        lies ``min_spacing`` steps or more from every one kept before.
    """
    steps = np.asarray(steps, np.int64)
    deviations = np.asarray(deviations, np.float64)
    candidates = np.flatnonzero((deviations >= low) & (deviations < high))
    order = candidates[np.argsort(-deviations[candidates], kind="stable")]
    chosen = []
    for index in order:
        if len(chosen) >= max_frames:
            break
        if all(abs(int(steps[index]) - int(steps[other])) >= min_spacing for other in chosen):
            chosen.append(int(index))
    return sorted(chosen, key=lambda k: int(steps[k]))
