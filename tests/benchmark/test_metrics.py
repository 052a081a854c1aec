"""jcalib.benchmark.metrics against values computed by hand on tiny records."""

import numpy as np
import pytest

from jcalib.benchmark import (
    average_runtime,
    c2st,
    c2st_marginals,
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
    one_stuck = samples.copy()
    one_stuck[1, :, 0] = 0.3  # one chain never moved in the first parameter
    assert sampler_metrics(one_stuck, 1, 1.0)["ess_min"] == 0.0


@pytest.mark.parametrize("delta", [0.0, 1.0, 2.0, 3.0])
def test_c2st_reaches_the_bayes_accuracy_of_two_gaussians(delta):
    """Unit-variance Gaussians ``delta`` apart: no classifier beats ``Phi(delta / 2)``; k-NN on
    1,000 draws each comes within 0.03 of it (the accuracy's sd is about 0.011)."""
    from scipy.stats import norm

    rng = np.random.default_rng(int(delta))
    accuracy = c2st(None, rng.normal(size=(1000, 2)) + [delta, 0.0], rng.normal(size=(1000, 2)))
    assert accuracy == pytest.approx(norm.cdf(delta / 2), abs=0.03)


def test_c2st_marginals_thin_autocorrelated_chains_before_testing():
    """AR(1) chains (rho 0.99) whose stationary law is the reference's: all draws, the neighbours
    in the chain give the classifier away; thinned to the effective size, it cannot tell."""
    rng = np.random.default_rng(0)
    rho, n = 0.99, 20000
    noise = rng.normal(size=(4, n, 2)) * np.sqrt(1 - rho ** 2)
    chains = np.empty((4, n, 2))
    chains[:, 0] = rng.normal(size=(4, 2))
    for i in range(1, n):
        chains[:, i] = rho * chains[:, i - 1] + noise[:, i]
    reference = rng.normal(size=(4000, 2))
    assert c2st(None, chains[:, -500:].reshape(-1, 2), reference[:2000]) > 0.58  # not thinned: told apart
    accuracy = c2st_marginals(None, chains, reference)
    assert accuracy.shape == (1,) and abs(accuracy[0] - 0.5) < 0.05
    walk = np.cumsum(rng.normal(size=(4, 1000, 2)), axis=1)  # a random walk: a handful of independent draws
    assert np.isnan(c2st_marginals(None, walk, reference)).all()  # too few to test, not an error
    three = c2st_marginals(None, rng.normal(size=(2, 2000, 3)) + [0.0, 0.0, 3.0], rng.normal(size=(2000, 3)))
    np.testing.assert_allclose(three, [0.5, 0.93, 0.93], atol=0.05)  # pairs (0, 1), (0, 2), (1, 2)


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
    (lambda: c2st(None, np.zeros((20, 2)), np.zeros((20, 3))), "same d"),
    (lambda: c2st(None, np.zeros((5, 1)), np.zeros((20, 1))), "at least 10"),
    (lambda: c2st(None, np.full((20, 1), np.nan), np.zeros((20, 1))), "finite"),
    (lambda: c2st_marginals(None, np.zeros((20, 2)), np.zeros((20, 2))), "n_chains, n_draws, n_params"),
    (lambda: c2st(None, np.zeros((20, 1)), np.zeros((20, 1)), n_folds=1), "n_folds must be an integer >= 2"),
    (lambda: c2st(None, np.zeros((20, 1)), np.zeros((20, 1)), neighbours=4), "neighbours must be an odd integer"),
    (lambda: c2st(None, np.zeros((20, 1)), np.zeros((20, 1)), neighbours=0), "neighbours must be an odd integer"),
])
def test_bad_records_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
