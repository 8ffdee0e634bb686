"""The active-learning loop end to end (pinn.demo.active_learning_demo), on EMT copper made here:

a committee of 3 trained on cold configurations (300 K) runs MD at 1000 K, where it has seen
nothing; the 20 configurations where its members disagree most are labelled with EMT and the
committee trains again from where it was (warm start) on the old and the new frames.  On the
explored configurations the deviation and the true force error both drop, and on held-back hot
configurations each atom's force deviation ranks its true error (Spearman's ρ > 0.1).
"""
import pytest

from pinn.demo import active_learning_demo, spearman


@pytest.fixture(scope="module")
def round_(tmp_path_factory):
    return active_learning_demo(str(tmp_path_factory.mktemp("active")))


def test_labelling_where_the_committee_disagrees_lowers_deviation_and_error(round_):
    print(round_)
    assert round_["explored_deviation_gen1"] < 0.5 * round_["explored_deviation_gen0"]
    # the error drops less and less evenly than the deviation (0.57x, 0.47x, 0.45x for seeds 0-2 on
    # Python 3.11; 0.85x for seed 0 on TensorFlow 2.21, whose MD goes elsewhere): that it drops is the claim
    assert round_["explored_error_gen1"] < round_["explored_error_gen0"]


def test_the_deviation_ranks_the_true_error_on_held_back_atoms(round_):
    """Each atom's force deviation ranks its force error (640 atoms of 20 held-back frames at 1000 K: ρ 0.24
    for seed 0, where ρ > 0.1 is 2.5 standard errors above no ranking).  The frames' maxima alone (20
    samples) rank weakly and unevenly: ρ 0.38, 0.06, 0.13 for seeds 0-2 at 0.21.0, -0.08 for seed 0 at
    0.30.0; they are measured (bench_active_learning.py), not asserted."""
    assert round_["spearman_atoms"] > 0.1


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 − 6·Σd²/(n(n²−1)), Σd² = 2
