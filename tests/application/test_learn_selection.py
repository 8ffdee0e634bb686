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
