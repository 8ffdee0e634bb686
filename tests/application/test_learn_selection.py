"""The selection of frames to label: the band, the count, the spacing, the order."""
from pinn.learn.selection import select_frames


def test_frames_in_the_band_by_deviation_spaced_and_in_step_order():
    steps = [0, 10, 20, 30, 40, 50, 60, 70]
    devi = [0.01, 0.20, 0.25, 0.50, 0.12, 0.22, 0.05, 0.30]
    # band [0.05, 0.3): 10, 20, 40, 50, 60; by deviation 20 (0.25), 50 (0.22), 10 (0.20: 10 steps from 20) ...
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=3, min_spacing=15)] == [20, 50]
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=2, min_spacing=0)] == [20, 50]
    assert [steps[k] for k in select_frames(steps, devi, 0.05, 0.3, max_frames=9, min_spacing=10)] == \
        [10, 20, 40, 50, 60]
    assert select_frames(steps, devi, 0.6, 0.9, max_frames=3, min_spacing=0) == []


def test_a_loop_that_accepts_no_step_stops_saying_why(tmp_path):
    """stop.stalled_rounds: rounds that end where they started (their exploration.json) end the loop, naming what to
    change; a round that moves on resets the count."""
    import json

    import yaml

    from pinn.learn.loop import LearningLoop
    (tmp_path / "start.xyz").write_text("")
    config = {"workdir": "loop", "initial": {"data": "start.xyz"},
              "committee": {"params": {}}, "explorer": {"start": "start.xyz"}, "oracle": {"ase": "emt"},
              "stop": {"rounds": 100, "stalled_rounds": 2}}
    (tmp_path / "learn.yml").write_text(yaml.safe_dump(config))
    loop = LearningLoop.__new__(LearningLoop)  # the stop rule alone: no system, no oracle
    from pinn.learn.config import read_learn_file
    loop.config = read_learn_file(tmp_path / "learn.yml")
    loop.workdir = loop.config["workdir"]
    from pinn.learn.loop import LoopState
    loop.state = LoopState(loop.workdir)
    for round_, time_ps in enumerate([0.5, 0.5, 0.5], 1):
        (tmp_path / "loop" / f"round-{round_}").mkdir(parents=True)
        (tmp_path / "loop" / f"round-{round_}" / "exploration.json").write_text(json.dumps({"time_ps": time_ps}))
    loop.state.round = 2
    assert loop._stop_reason(loop.config["stop"], started=float("inf")) is None  # round 1 moved, round 2 not
    loop.state.round = 3
    assert "the last 2 rounds accepted no MD step" in loop._stop_reason(loop.config["stop"], started=float("inf"))
