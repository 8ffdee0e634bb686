"""A training run's time budget (train.max_time, pinn train --max-time): the forms it is given in, the Slurm job's
end, the schedule laid over it, a run that ends inside it and a resume that counts the time spent.  Its 2-rank
test (every rank stops at the same step) is in tests/parallel/test_parallel_stops.py."""
import numpy as np
import pytest
import tensorflow as tf
import yaml

from pinn.schema import ParamsError
from pinn.training.budget import SLURM, RunClock, parse_max_time, reserve_of, slurm_seconds_left

from settings import small_net


def test_max_time_is_seconds_or_a_time_with_its_unit_or_slurm():
    assert parse_max_time(90) == 90.0
    assert parse_max_time("90s") == 90.0
    assert parse_max_time("15m") == 900.0
    assert parse_max_time("1.5h") == 5400.0
    assert parse_max_time(" 2 h ") == 7200.0
    assert parse_max_time("Slurm") == SLURM
    for bad in ("15 minutes", "-5m", "0", True, "1e3s", ""):
        with pytest.raises(ParamsError, match="train.max_time"):
            parse_max_time(bad)


def test_max_time_slurm_reads_the_jobs_end():
    """SLURM_JOB_END_TIME (Slurm >= 21.08) first, then squeue's %e for SLURM_JOB_ID (local time); outside a job
    or for a job without an end, a message naming the key."""
    assert slurm_seconds_left({"SLURM_JOB_END_TIME": "1000600"}, now=1000000.0) == 600.0
    import time
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(2000000000))
    asked = []
    left = slurm_seconds_left({"SLURM_JOB_ID": "42"}, now=1999999000.0, squeue=lambda job: asked.append(job) or end)
    assert left == 1000.0 and asked == ["42"]
    with pytest.raises(ParamsError, match="not in a Slurm job"):
        slurm_seconds_left({}, now=0.0)
    with pytest.raises(ParamsError, match="job 42 has no end time"):
        slurm_seconds_left({"SLURM_JOB_ID": "42"}, now=0.0, squeue=lambda job: "UNLIMITED\n")


def _run_file(tmp_path, alloy_xyz, name, **train):
    params = {"model_dir": str(tmp_path / name), "seed": 3, "precision": "float64",
              "network": {"name": "PiNet", "params": small_net([29, 79])},
              "model": {"name": "potential_model", "params": {
                  "use_force": True, "learning_rate": 3e-3, "lr_schedule": "cosine", "lr_warmup_steps": 2,
                  "log_every_n_steps": 5, "save_checkpoint_steps": 5, "progress_bar": "off", "engine": "tensorflow",
                  "jit": False}},
              "data": {"train": alloy_xyz, "batch_size": 4, "cache": "memory"}, "train": train}
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


class StepClock:
    """A clock that runs ``dt`` seconds a training step: the budget's projection is exact from the first step."""

    def __init__(self, dt):
        self.dt = dt
        self.model = None

    def __call__(self):
        return 0.0 if self.model is None else self.dt * float(self.model.step.numpy())


def test_a_schedule_over_a_budget_is_the_schedule_over_the_steps_it_gave(tmp_path, alloy_xyz, monkeypatch):
    """A run given max_time on a clock of 1 s a step ends at the step its budget gives (less the reserve for
    the run's end), and its weights are those of a run given that step as max_steps: the cosine was laid over the
    same length, step by step (its length is projected from the second step on, within the 2 warm-up steps)."""
    from pinn.training import state as state_module
    from pinn.training.run_file import run_training
    clock = StepClock(1.0)
    made = []

    class Clocked(RunClock):
        def __init__(self):
            super().__init__(clock)
            made.append(self)

    monkeypatch.setattr(state_module, "RunClock", Clocked)
    from pinn.training.trainer import Trainer
    train = Trainer.train

    def train_on_the_clock(model, *args, **kwargs):
        clock.model = model
        return train(model, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train", train_on_the_clock)
    budget = 12.0  # s: the steps end by 12 - reserve_of(12) = 9.64 s, 9 steps of 1 s
    budgeted, _ = run_training(_run_file(tmp_path, alloy_xyz, "budgeted", max_time=budget))
    expected = int(np.floor((budget - reserve_of(budget)) / 1.0))
    assert int(budgeted.step.numpy()) == expected == 9
    assert budgeted.learning_rate.follows_budget()
    clock.model = None
    stepped, _ = run_training(_run_file(tmp_path, alloy_xyz, "stepped", max_steps=expected))
    assert not stepped.learning_rate.follows_budget()
    for step in (0, 2, 5, 8, 9):
        assert float(budgeted.learning_rate(tf.constant(step, tf.int64))) == \
            float(stepped.learning_rate(tf.constant(step, tf.int64)))
    for a, b in zip(budgeted.model.trainable_variables, stepped.model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    reader = tf.train.load_checkpoint(str(tmp_path / "budgeted" / f"ckpt-{expected}"))
    assert reader.get_tensor("elapsed_s/.ATTRIBUTES/VARIABLE_VALUE") == pytest.approx(expected * 1.0)


def test_a_budget_ends_the_run_inside_it_and_a_resume_counts_the_time_spent(tmp_path, alloy_xyz, caplog):
    """On the real clock: a run of max_time 10 s ends inside it (its last checkpoint's elapsed_s), with max_steps
    far away; started again with max_time 20 s, it counts the time spent and trains only in what is left; started
    again with the first budget, nothing is left to train; max_steps reached first ends a budgeted run there."""
    import logging

    from pinn.training.run_file import run_training
    path = _run_file(tmp_path, alloy_xyz, "real", max_steps=10 ** 6, max_time="10s")
    with caplog.at_level(logging.INFO, logger="pinn"):
        first, _ = run_training(path)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "real")) or
                                      str(tmp_path / "real" / f"ckpt-{int(first.step.numpy())}"))
    spent = reader.get_tensor("elapsed_s/.ATTRIBUTES/VARIABLE_VALUE")
    steps = int(first.step.numpy())
    assert 1 < steps < 10 ** 6 and spent <= 10.0, (steps, spent)
    assert "time budget: steps ended at step %d" % steps in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pinn"):
        second, _ = run_training(path, max_time="20s")
    assert "s spent before" in caplog.text
    more = int(second.step.numpy()) - steps
    assert 0 < more, caplog.text[-2000:]
    spent_again = tf.train.load_checkpoint(str(tmp_path / "real" / f"ckpt-{int(second.step.numpy())}")).get_tensor(
        "elapsed_s/.ATTRIBUTES/VARIABLE_VALUE")
    assert spent < spent_again <= 20.0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pinn"):
        third, _ = run_training(path, max_time="10s")
    assert int(third.step.numpy()) == int(second.step.numpy()) and "is spent: nothing to train" in caplog.text
    capped, _ = run_training(_run_file(tmp_path, alloy_xyz, "capped", max_steps=7, max_time="1h"))
    assert int(capped.step.numpy()) == 7


def test_a_run_file_without_a_length_or_with_a_bad_time_is_refused(tmp_path, alloy_xyz):
    from pinn.training.run_file import read_config
    with pytest.raises(ParamsError, match="give max_steps, max_epochs or max_time"):
        read_config(_run_file(tmp_path, alloy_xyz, "none"))
    with pytest.raises(ParamsError, match=r"train.max_time.*'15 minutes' is not a time"):
        read_config(_run_file(tmp_path, alloy_xyz, "bad", max_time="15 minutes"))
    assert read_config(_run_file(tmp_path, alloy_xyz, "good", max_time="15m"))[2]["max_time"] == "15m"


def test_the_prepared_input_runs_without_the_autotuning_thread():
    """The training and evaluation input (prepared_input) has tf.data's autotuning model off: with it, deleting an
    iterator that had lived some seconds waited for the model's thread to wake, up to 10 s after the last step in
    about one run of three (benchmarks/results/0.30.0-dev-end-delay.jsonl), time a budget cannot see coming."""
    from pinn.inference.inputs import prepared_input
    from pinn.io import sparse_batch

    class Network:
        rc = 3.0
    structures = tf.data.Dataset.from_tensor_slices({"elems": np.ones((4, 2), np.int32),
                                                     "coord": np.random.RandomState(0).rand(4, 2, 3) * 2,
                                                     "e_data": np.zeros(4, np.float32)})
    dataset = prepared_input(lambda: structures.apply(sparse_batch(2)), Network())
    assert dataset.options().autotune.enabled is False
    assert sum(1 for _ in dataset) == 2


def test_a_first_step_that_takes_much_of_the_budget_is_warned_about():
    """The first step (tracing, compiling the Numba kernels on a fresh installation) is timed from the hook's start:
    past FIRST_STEP_SHARE of the budget the run says so, with the seconds and the share; below it nothing is said."""
    import logging
    from types import SimpleNamespace

    from pinn.parallel.serial import SerialWorld
    from pinn.training.budget import FIRST_STEP_SHARE, BudgetHook, TimeBudget

    def first_step_messages(first_step_s, budget_s=100.0):
        now = [5.0]
        said = []
        budget = TimeBudget(budget_s, RunClock(lambda: now[0]))
        schedule = SimpleNamespace(follows_budget=lambda: False)
        hook = BudgetHook(budget, SerialWorld(), SimpleNamespace(max_steps=10 ** 6), 0, 10 ** 6, schedule,
                          lambda level, message, *args: said.append((level, message % args)))
        now[0] += first_step_s
        hook.on_step_end(SimpleNamespace(step=1))
        return [text for level, text in said if level == logging.WARNING]

    assert FIRST_STEP_SHARE == 0.2
    warned = first_step_messages(45.0)
    assert len(warned) == 1 and "the first step took 45 s, 45 % of the 100 s budget" in warned[0], warned
    assert "with the Numba engine on a fresh installation, compiles its kernels" in warned[0]
    assert first_step_messages(19.0) == []
