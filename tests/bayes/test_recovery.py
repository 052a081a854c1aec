"""Recovery metrics against hand computations: coverage of exact intervals ≈ 0.95 within its
MCSE, R²/RMSE/NRMSE/ER by hand, contraction of a known posterior, prior variances, bad input."""

import numpy as np
import pytest

from jcalib.bayes.recovery import recovery_metrics, relative_errors, space_prior_variance
from jcalib.parameters import Parameter, ParameterSpace

SPACE = ParameterSpace([Parameter("a", 0.0, -4.0, 4.0), Parameter("k", 1.0, 0.1, 10.0, log_scale=True)])


def test_exact_posterior_intervals_cover_at_their_level():
    rng = np.random.default_rng(0)
    n = 2000
    theta = rng.standard_normal((n, 1))  # prior N(0, 1), x ~ N(θ, 1): posterior N(x/2, 1/2)
    x = theta + rng.standard_normal((n, 1))
    draws = x[:, None, :] / 2 + np.sqrt(0.5) * rng.standard_normal((n, 400, 1))
    result = recovery_metrics(theta, draws, prior_variance=1.0)
    mcse = float(result.coverage_mcse[0])
    assert mcse == pytest.approx(np.sqrt(0.95 * 0.05 / n))
    assert abs(float(result.coverage[0]) - 0.95) < 4 * mcse + 0.005  # + quantiles of 400 draws
    assert float(result.contraction[0]) == pytest.approx(0.5, abs=0.02)  # 1 - 0.5 / 1
    gaussian = recovery_metrics(theta, means=x / 2, sds=np.full((n, 1), np.sqrt(0.5)), prior_variance=1.0)
    assert abs(float(gaussian.coverage[0]) - 0.95) < 4 * mcse
    assert float(gaussian.contraction[0]) == pytest.approx(0.5, rel=1e-12)
    np.testing.assert_allclose(gaussian.z_scores, (x / 2 - theta) / np.sqrt(0.5))


def test_metrics_by_hand():
    truths = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 4.0], [-2.0, 8.0]])
    means = np.array([[1.5, 1.0], [2.0, 3.0], [2.0, 4.0], [-2.0, 6.0]])
    sds = np.array([[0.5, 1.0], [0.5, 1.0], [0.5, 1.0], [0.5, 1.0]])
    r = recovery_metrics(truths, means=means, sds=sds, space=SPACE)
    err = means - truths
    np.testing.assert_allclose(r.rmse, np.sqrt(np.mean(err**2, 0)))
    np.testing.assert_allclose(r.r2, 1 - np.sum(err**2, 0) / np.sum((truths - truths.mean(0)) ** 2, 0))
    np.testing.assert_allclose(r.nrmse, r.rmse / np.array([8.0, 9.9]))
    np.testing.assert_allclose(r.relative_error, [np.mean([0.5, 0, 1 / 3, 0]), np.mean([0, 0.5, 0, 0.25])])
    np.testing.assert_allclose(r.sd_normalised, [0.5 / 8.0, 1.0 / 9.9])
    np.testing.assert_allclose(r.prior_variance, space_prior_variance(SPACE))
    np.testing.assert_allclose(r.contraction, 1 - sds[0] ** 2 / space_prior_variance(SPACE))
    half = 1.959963984540054 * sds  # normal intervals without draws
    np.testing.assert_allclose(r.coverage, np.mean(np.abs(truths - means) <= half, 0))
    assert r.to_dict()["names"] == ["a", "k"] and r.names == ("a", "k")


def test_space_prior_variance_matches_sampling():
    samples = np.asarray(SPACE.sample(__import__("jax").random.key(0), 200000))
    np.testing.assert_allclose(space_prior_variance(SPACE), samples.var(0), rtol=0.02)
    assert space_prior_variance(SPACE)[0] == pytest.approx(64 / 12)


def test_bad_input():
    t = np.zeros((5, 2))
    with pytest.raises(ValueError, match="pass draws, or both means and sds"):
        recovery_metrics(t, means=t)
    with pytest.raises(ValueError, match="either draws or means and sds, not both"):
        recovery_metrics(t, np.zeros((5, 3, 2)), means=t, sds=t)
    with pytest.raises(ValueError, match=r"draws must have shape \(n_sims=5, n_draws >= 2, n_params=2\)"):
        recovery_metrics(t, np.zeros((4, 3, 2)))
    with pytest.raises(ValueError, match="standard deviations must be positive"):
        recovery_metrics(t, means=t, sds=t)
    with pytest.raises(ValueError, match="truths contains NaN"):
        recovery_metrics(np.full((5, 2), np.nan), means=t, sds=t + 1)
    with pytest.raises(ValueError, match="level must lie in"):
        recovery_metrics(t, means=t, sds=t + 1, level=1.5)
    with pytest.raises(ValueError, match="prior variances must be positive"):
        recovery_metrics(t, means=t, sds=t + 1)  # constant truths: no variance


def test_relative_errors_are_the_one_definition():
    """Signed (estimate - truth) / truth, NaN at a zero truth; recovery_metrics' ER, IMPU's eq. 18
    metrics and the digital twin's parameter errors all use it."""
    from jcalib.nn.data import network_metrics

    truths = np.array([[2.0, -4.0], [0.5, 8.0], [1.0, 0.0]])
    estimates = np.array([[2.5, -3.0], [0.4, 8.0], [1.0, 1.0]])
    expected = np.array([[0.25, -0.25], [-0.2, 0.0], [0.0, np.nan]])
    np.testing.assert_allclose(relative_errors(truths, estimates), expected, rtol=1e-15)
    result = recovery_metrics(truths, means=estimates, sds=np.ones_like(truths))
    np.testing.assert_allclose(result.relative_error, [(0.25 + 0.2 + 0.0) / 3, np.nan], rtol=1e-15)
    metrics = network_metrics(truths[:2], estimates[:2], ("a", "b"))
    np.testing.assert_allclose(metrics.relative_errors, expected[:2], rtol=1e-15)
