"""pinn.training.report: learning curves, parity plots and summary of a run, checked down to the pixels."""
import re

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from pinn.training import report
from pinn.training.metrics import append_metrics, write_eval_predictions

BEST_STEP = 4000


def errors(step, direction, offset):
    """Synthetic figures of one record: they fall (``direction=-1``) or rise (``+1``) with the step."""
    g = np.exp(direction * step / 1500)
    return {"loss": 10 * g + offset, "E_MAE": 0.5 * g + offset / 10, "E_RMSE": 0.7 * g + offset / 10,
            "F_MAE": 0.2 * g + offset / 10, "F_RMSE": 0.3 * g + offset / 10}


def write_run(model_dir, direction=-1, last=5000):
    """metrics.jsonl of a run: train records every 100 steps, eval records every 1000 steps, the best at
    :data:`BEST_STEP`."""
    for step in range(100, last + 1, 100):
        append_metrics(model_dir, {"kind": "train", "step": step, "epoch": step / 400, "time": 1e9 + step,
                                   "lr": 1e-3 * 0.5 ** (step / 1000), "structures_per_s": 700.0 + step / 100,
                                   **errors(step, direction, 0.1)})
        if step % 1000 == 0:
            append_metrics(model_dir, {"kind": "eval", "step": step, "epoch": step / 400, "time": 1e9 + step,
                                       "best": step == BEST_STEP, **errors(step, direction, 0.2)})


def write_predictions(model_dir, quality, seed=0):
    """eval_predictions.npz with energies, forces and charges; ``quality`` ``'good'``: small errors,
    ``'bad'``: predictions unrelated to the references."""
    rng = np.random.RandomState(seed)
    n_atoms = rng.randint(2, 40, 300)
    energy = n_atoms * rng.uniform(-4.0, -2.0, 300)
    forces = rng.normal(0.0, 1.0, (1000, 3))
    charges = rng.normal(0.0, 0.3, 800)
    if quality == "good":
        predicted = (energy + n_atoms * rng.normal(0.0, 1e-3, 300), forces + rng.normal(0.0, 0.02, forces.shape),
                     charges + rng.normal(0.0, 0.005, charges.shape))
    else:
        predicted = (n_atoms * rng.permutation(energy / n_atoms), rng.permutation(forces.ravel()).reshape(forces.shape),
                     rng.permutation(charges))
    write_eval_predictions(model_dir, {"step": 5000, "n_atoms": n_atoms, "energy_ref": energy,
                                       "energy_pred": predicted[0], "forces_ref": forces,
                                       "forces_pred": predicted[1], "charges_ref": charges,
                                       "charges_pred": predicted[2]})
    return n_atoms, energy, predicted[0]


def read_png(path):
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and 400 < image.shape[1] <= 1400
    assert image[..., :3].std() > 0.05, "a blank image"
    return image[..., :3]


def color_mask(image, color, tolerance=0.08):
    """Pixels of ``image`` within ``tolerance`` of ``color`` in every channel."""
    return np.abs(image - np.array(to_rgb(color))).max(axis=-1) < tolerance


def axes_boxes(fig, shape):
    """Inside of each axes of ``fig`` as (top row, bottom row, left column, right column) of its PNG."""
    fig.canvas.draw()
    assert shape[:2] == (round(fig.bbox.height), round(fig.bbox.width)), "figure and PNG differ in layout"
    boxes = []
    for ax in fig.axes:
        box = ax.get_window_extent()
        boxes.append((int(fig.bbox.height - box.y1) + 3, int(fig.bbox.height - box.y0) - 3,
                      int(box.x0) + 3, int(box.x1) - 3))
    return boxes


def panel(image, fig, title):
    """The pixels inside the axes titled ``title``."""
    titles = [ax.get_title() for ax in fig.axes]
    top, bottom, left, right = axes_boxes(fig, image.shape)[titles.index(title)]
    return image[top:bottom, left:right]


@pytest.mark.parametrize("direction", [-1, 1])
def test_learning_curves_show_the_trend(tmp_path, direction):
    write_run(tmp_path, direction)
    out = report.write_report(tmp_path)
    assert out["learning_curves"] == str(tmp_path / "report" / "learning_curves.png")
    image = read_png(out["learning_curves"])
    fig = report.learning_curves_figure(*report.load_curves(tmp_path))
    assert [ax.get_title() for ax in fig.axes] == ["loss", "energy error", "forces error", "learning rate"]
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    energy = panel(image, fig, "energy error")
    train = color_mask(energy, report.TRAIN_COLOR)
    assert train.sum() > 200
    assert color_mask(energy, report.EVAL_COLOR).sum() > 100
    assert color_mask(energy, report.BEST_COLOR).sum() > 50
    rows, columns = np.nonzero(train)
    third = energy.shape[1] / 3
    left, right = rows[columns < third].mean(), rows[columns > 2 * third].mean()
    # rows grow downwards: a falling curve has its left part higher (smaller rows) than its right part
    assert (left < right - 30) if direction < 0 else (left > right + 30)
    assert not color_mask(panel(image, fig, "learning rate"), report.EVAL_COLOR).any(), "lr is logged by train only"


def test_resumed_run_keeps_last_record_of_each_step(tmp_path):
    write_run(tmp_path, last=1000)
    for step in range(500, 1501, 100):  # restarted from the checkpoint of step 400
        append_metrics(tmp_path, {"kind": "train", "step": step, "lr": 1e-4, "loss": 1000.0 + step})
    train, evals = report.load_curves(tmp_path)
    assert [r["step"] for r in train] == list(range(100, 1501, 100))
    assert train[3]["loss"] == pytest.approx(errors(400, -1, 0.1)["loss"]) and train[4]["loss"] == 1500.0
    assert [r["step"] for r in evals] == [1000]
    text = report.write_report(tmp_path)["text"]
    assert "steps trained: 1500" in text and "15 train, 1 eval" in text


def test_negative_values_keep_a_linear_axis(tmp_path):
    for step in (100, 200, 300):
        append_metrics(tmp_path, {"kind": "train", "step": step, "loss": 1.0 - step / 100})
    fig = report.learning_curves_figure(*report.load_curves(tmp_path))
    assert [ax.get_yscale() for ax in fig.axes] == ["linear"]


def parity_spread(image, fig, title):
    """Mean distance from the diagonal (in axes widths) of the parity-colour pixels of a panel."""
    pixels = panel(image, fig, title)
    rows, columns = np.nonzero(color_mask(pixels, report.PARITY_COLOR))
    assert len(rows) > 100
    x = columns / pixels.shape[1]
    y = 1 - rows / pixels.shape[0]
    return np.abs(x - y).mean()


@pytest.mark.parametrize("quality", ["good", "bad"])
def test_parity_points_lie_on_the_diagonal_only_when_predictions_are_good(tmp_path, quality):
    write_run(tmp_path)
    n_atoms, energy, predicted = write_predictions(tmp_path, quality)
    out = report.write_report(tmp_path, tmp_path / "out")
    assert out["parity"] == str(tmp_path / "out" / "parity.png")
    image = read_png(out["parity"])
    fig = report.parity_figure(report.parity_sets(report.read_eval_predictions(tmp_path)))
    assert [ax.get_title() for ax in fig.axes] == ["energy per atom", "forces components", "charges"]
    for title in ("energy per atom", "forces components", "charges"):
        spread = parity_spread(image, fig, title)
        assert spread < 0.05 if quality == "good" else spread > 0.12, (title, spread)
    ax = fig.axes[0]
    assert "(meV/atom)" in ax.get_xlabel() and "(meV/atom)" in ax.get_ylabel()
    assert "(eV/Å)" in fig.axes[1].get_xlabel() and "(e)" in fig.axes[2].get_ylabel()
    error = (predicted - energy) / n_atoms * 1e3
    text = ax.texts[0].get_text()
    assert f"MAE {np.abs(error).mean():.3g} meV/atom" in text
    assert f"RMSE {np.sqrt(np.mean(error ** 2)):.3g} meV/atom" in text


def table_row(text, label):
    line = next(line for line in text.splitlines() if line.startswith(label + " "))
    return line[len(label):].split()


def test_summary_has_final_and_best_metrics_with_units(tmp_path):
    write_run(tmp_path)
    write_predictions(tmp_path, "good")
    out = report.write_report(tmp_path)
    text = (tmp_path / "report" / "summary.txt").read_text()
    assert text == out["text"]
    assert "steps trained: 5000 (epoch 12.5)" in text and "50 train, 5 eval" in text
    assert re.search(r"train \(step 5000\)\s+eval \(step 5000\)\s+best eval \(step 4000\)", text)
    for label, key, unit in [("energy RMSE", "E_RMSE", "eV"), ("forces MAE", "F_MAE", "eV/Å"), ("loss", "loss", "-")]:
        cells = table_row(text, label)
        assert cells[0] == unit
        expected = [errors(5000, -1, 0.1)[key], errors(5000, -1, 0.2)[key], errors(BEST_STEP, -1, 0.2)[key]]
        assert [float(c) for c in cells[1:]] == pytest.approx(expected, rel=1e-3)
    assert f"last learning rate: {1e-3 * 0.5 ** 5:.4g}" in text
    assert "throughput: 750 structures/s" in text
    assert "at step 5000" in text
    for name in ("learning_curves.png", "parity.png", "summary.txt"):
        assert str(tmp_path / "report" / name) in text


def test_missing_metrics_names_the_directory(tmp_path):
    model_dir = tmp_path / "untrained"
    model_dir.mkdir()
    with pytest.raises(ValueError, match=re.escape(str(model_dir)) + ".*not been trained"):
        report.write_report(model_dir)
    assert not (model_dir / "report").exists()


def test_without_predictions_no_parity_and_the_summary_says_why(tmp_path):
    write_run(tmp_path)
    out = report.write_report(tmp_path)
    assert out["parity"] is None and not (tmp_path / "report" / "parity.png").exists()
    assert (tmp_path / "report" / "learning_curves.png").exists()
    assert f"no eval_predictions.npz in {tmp_path}" in out["text"] and "eval_every_n_steps" in out["text"]
    assert "parity.png" not in out["text"]
