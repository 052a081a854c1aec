"""jcalib.benchmark.metrics against values computed by hand on tiny records."""

import numpy as np
import pytest

from jcalib.benchmark import (
    average_runtime,
    coco_targets,
    data_profile,
    fraction_within,
    performance_profile,
    runtime_ecdf,
    runtimes_to_targets,
    sampler_metrics,
)

INF = np.inf
RUNTIMES = np.array([[1.0, 2.0, 4.0],     # 4 problems x 3 methods; best 1
                     [10.0, 5.0, INF],    # best 5
                     [3.0, 3.0, 6.0],     # best 3, a tie
                     [INF, INF, INF]])    # solved by none


def test_performance_profile_of_three_methods_on_four_problems():
    # ratios to the best: [1, 2, 4], [2, 1, inf], [1, 1, 2], [inf, inf, inf]
    expected = [[0.5, 0.5, 0.0],     # tau = 1
                [0.75, 0.75, 0.25],  # tau = 2
                [0.75, 0.75, 0.5]]   # tau = 4
    np.testing.assert_array_equal(performance_profile(RUNTIMES, [1.0, 2.0, 4.0]), expected)


def test_data_profile_divides_by_n_plus_one():
    n = [1, 4, 2, 3]  # runtime / (n + 1): [0.5, 1, 2], [2, 1, inf], [1, 1, 2], inf
    expected = [[0.5, 0.75, 0.0],   # alpha = 1
                [0.75, 0.75, 0.5]]  # alpha = 2
    np.testing.assert_array_equal(data_profile(RUNTIMES, n, [1.0, 2.0]), expected)
    # by n alone (the mistake the normalisation avoids), method 1 would solve problem 1 at alpha = 1 only
    assert data_profile(RUNTIMES[:1], [1], [0.5])[0, 0] == 1.0


def test_average_runtime_counts_failed_runs_in_full():
    assert average_runtime([100.0, INF, 300.0, INF], [500.0, 1000.0, 400.0, 2000.0]) == (100 + 300 + 1000 + 2000) / 2
    assert average_runtime([INF, INF], [5.0, 5.0]) == INF


def test_runtimes_to_targets_take_the_best_value_so_far():
    costs, values = [1.0, 3.0, 6.0, 10.0], [5.0, 7.0, 2.0, 2.5]  # best so far 5, 5, 2, 2
    np.testing.assert_array_equal(runtimes_to_targets(costs, values, [6.0, 5.0, 3.0, 2.0, 1.0]),
                                  [1.0, 1.0, 6.0, 6.0, INF])
    np.testing.assert_array_equal(runtimes_to_targets([1.0, 2.0], [np.nan, 1.0], [1.0, 0.5]), [2.0, INF])


def test_runtime_ecdf_and_targets():
    runtimes = [[1.0, 5.0, INF], [2.0, 2.0, 8.0]]
    np.testing.assert_allclose(runtime_ecdf(runtimes, [0, 1, 2, 5, 10]), np.array([0, 1, 3, 4, 5]) / 6)
    targets = coco_targets(-3.0)
    assert targets.shape == (51,) and targets[0] == pytest.approx(97.0) and targets[-1] == pytest.approx(-3 + 1e-8)
    assert np.all(np.diff(targets) < 0)  # easiest first
    assert fraction_within([10.0, 10.04, 11.9, 14.0, 20.0], 10.0) == {0.05: 0.4, 2.0: 0.6, 5.0: 0.8}
    assert fraction_within([10.0, -np.inf, np.nan], 10.0, [1.0]) == {1.0: 1 / 3}  # a value not finite is not within


def test_sampler_metrics_against_hand_computed_moments():
    from jcalib.bayes.diagnostics import ess

    rng = np.random.default_rng(0)
    samples = rng.normal(size=(2, 200, 2)) * [1.0, 2.0] + [0.0, 1.0]
    flat = samples.reshape(-1, 2)
    m = sampler_metrics(samples, n_gradients=4000, seconds=2.0, reference_mean=[0.5, 1.0], reference_sd=[1.0, 4.0])
    assert m["ess_min"] == pytest.approx(ess(samples).min())
    assert m["ess_per_gradient"] == pytest.approx(m["ess_min"] / 4000) and m["ess_per_second"] == m["ess_min"] / 2
    z = (flat.mean(axis=0) - [0.5, 1.0]) / [1.0, 4.0]
    assert m["mean_error"] == pytest.approx(np.abs(z).max()) and m["bias2"] == pytest.approx(np.mean(z ** 2))
    sd = flat.std(axis=0, ddof=1)
    assert m["sd_error"] == pytest.approx(max(abs(sd[0] - 1.0), abs(sd[1] - 4.0) / 4.0))
    assert m["sd_error"] == pytest.approx(abs(sd[1] - 4.0) / 4.0)  # the second parameter's sd is half the reference
    assert 0.99 < m["rhat_max"] < 1.02 and "mean_error" not in sampler_metrics(samples, 1, 1.0)


@pytest.mark.parametrize("call, match", [
    (lambda: performance_profile([1.0, 2.0], [1.0]), "2-D"),
    (lambda: performance_profile([[1.0, np.nan]], [1.0]), ">= 0 or inf"),
    (lambda: data_profile([[1.0, -1.0]], [1], [1.0]), ">= 0 or inf"),
    (lambda: data_profile([[1.0, 2.0]], [1, 2], [1.0]), "one parameter count"),
    (lambda: average_runtime([1.0], [1.0, 2.0]), "one spent cost per run"),
    (lambda: runtimes_to_targets([2.0, 1.0], [1.0, 1.0], [1.0]), "cumulative"),
    (lambda: performance_profile([[1.0, 2.0]], [0.5]), "taus must be finite numbers >= 1"),
    (lambda: runtime_ecdf([[1.0]], [np.nan]), "budgets must be finite"),
    (lambda: average_runtime([10.0, INF], [5.0, 100.0]), "more cost than it spent"),
    (lambda: fraction_within([1.0], np.nan), "best must be a finite value"),
    (lambda: fraction_within([1.0], 1.0, [-1.0]), "tolerances must be finite numbers >= 0"),
    (lambda: sampler_metrics(np.ones((1, 5, 1)), None, 1.0), "costs positive"),
    (lambda: sampler_metrics(np.ones((1, 5, 1)), 1, 1.0, [0.0]), "both reference_mean and reference_sd"),
    (lambda: fraction_within([[1.0]], 1.0), "one value per start"),
    (lambda: sampler_metrics(np.zeros((2, 5)), 1, 1.0), "n_chains, n_draws, n_params"),
    (lambda: sampler_metrics(np.ones((1, 5, 1)), 0, 1.0), "costs positive"),
    (lambda: sampler_metrics(np.ones((1, 5, 1)), 1, 1.0, [0.0], [0.0]), "sd > 0"),
])
def test_bad_records_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
