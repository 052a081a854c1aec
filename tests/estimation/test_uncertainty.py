"""Gauss-Newton covariance and profile likelihood against exact linear least squares."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.data import Measurements
from jcalib.estimation.gauss_newton import gauss_newton
from jcalib.estimation.uncertainty import parameter_covariance, profile_likelihood
from tests.estimation.linear_case import design, linear_problem


@pytest.fixture(scope="module")
def linear():
    problem, y = linear_problem(seed=3)
    a = design()
    ols = np.linalg.solve(a.T @ a, a.T @ y)
    rss = float(np.sum((y - a @ ols) ** 2))
    return problem, y, a, ols, rss, gauss_newton(problem, [0.0, 0.0, 0.0])


def test_covariance_equals_ols_covariance(linear):
    problem, y, a, ols, rss, result = linear
    cov = parameter_covariance(problem, result)
    s2 = rss / (y.size - 3)
    expected = s2 * np.linalg.inv(a.T @ a)
    np.testing.assert_allclose(cov.covariance, expected, rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(cov.std, np.sqrt(np.diag(expected)), rtol=1e-8)
    np.testing.assert_allclose(cov.sigma, np.sqrt(s2), rtol=1e-8)
    assert cov.sigma_source == "estimated" and not cov.singular and cov.n_directions == 3
    d = np.sqrt(np.diag(expected))
    np.testing.assert_allclose(cov.correlation, expected / np.outer(d, d), rtol=1e-8, atol=1e-12)
    given = parameter_covariance(problem, result.theta, sigma=0.05)
    np.testing.assert_allclose(given.covariance, 0.05**2 * np.linalg.inv(a.T @ a), rtol=1e-8)
    assert given.sigma_source == "given"
    lo, hi = cov.confidence_intervals(0.95)["b"]
    np.testing.assert_allclose([lo, hi], ols[1] + np.array([-1, 1]) * 1.959963984540054 * d[1],
                               rtol=1e-8)
    json.dumps(cov.to_dict())


def test_profile_of_linear_problem_is_the_analytic_parabola(linear):
    problem, y, a, ols, rss, result = linear
    profile = profile_likelihood(problem, result, "c", 9)
    c_cc = np.linalg.inv(a.T @ a)[2, 2]
    expected = (rss + (profile.values - ols[2]) ** 2 / c_cc) / y.size
    np.testing.assert_allclose(profile.loss, expected, rtol=1e-9)
    assert profile.converged.all()
    np.testing.assert_allclose(profile.values[[0, -1]], ols[2] + np.array([-3, 3]) * profile.std_internal * 1,
                               rtol=1e-9)
    # -2 delta log L is exactly the covariance's quadratic form: (dc/sd)^2 on a +-3 sd grid
    np.testing.assert_allclose(profile.delta_chi2, profile.quadratic(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(profile.delta_chi2, np.linspace(-3, 3, 9) ** 2, rtol=1e-6, atol=1e-9)
    # the other parameters are re-optimised: the conditional OLS solution
    i = 4
    b_fixed = np.linalg.lstsq(a[:, :2], y - a[:, 2] * profile.values[i], rcond=None)[0]
    np.testing.assert_allclose(profile.theta[i, :2], b_fixed, rtol=1e-8)
    json.dumps(profile.to_dict())


@pytest.mark.slow
def test_profile_interval_matches_wald_on_fine_grid(linear):
    problem, _, _, _, _, result = linear
    profile = profile_likelihood(problem, result, "a", values=np.linspace(0.7, 1.4, 57))
    lo, hi = profile.confidence_interval(0.95)
    wald = parameter_covariance(problem, result).confidence_intervals(0.95)["a"]
    np.testing.assert_allclose([lo, hi], wald, rtol=2e-3)


@pytest.fixture(scope="module")
def four_substance_a_only():
    model = jcalib.models.get("four_substance_reactions", observe="A")
    theta = np.array([1e-4, 1e-5, 5e-5])
    y = np.asarray(model.simulate(jnp.asarray(theta)))
    rng = np.random.default_rng(0)
    data = Measurements(model.ts, y * (1 + 0.01 * rng.standard_normal(y.shape)),
                        output_names=model.output_names)
    problem = jcalib.CalibrationProblem(model, data)
    return problem, gauss_newton(problem, [1e-3, 1e-4, 1e-4])


def test_singular_jacobian_uses_pseudo_inverse_and_says_so(four_substance_a_only):
    problem, result = four_substance_a_only
    cov = parameter_covariance(problem, result)
    assert cov.singular and cov.n_directions == 2
    assert "pseudo-inverse" in cov.note
    (dropped,) = cov.dropped_directions
    assert abs(dropped["kab"]) < 1e-3 and abs(dropped["kac"]) > 0.1 and abs(dropped["kad"]) > 0.1
    # delta method for log-scale parameters: sd(theta) = theta sd(log theta)
    np.testing.assert_allclose(cov.std, result.theta * cov.std_internal, rtol=1e-12)
    assert np.all(np.isfinite(cov.std))


@pytest.mark.parametrize("kwargs, match", [
    ({"sigma": -1.0}, "sigma must be positive and finite"),
    ({"rcond": 1.0}, r"rcond must be in \[0, 1\)"),
    ({"n_directions": 0}, r"n_directions must be None or an integer in \[1, n_free=3\]"),
])
def test_covariance_bad_arguments(linear, kwargs, match):
    problem, *_, result = linear
    with pytest.raises(ValueError, match=match):
        parameter_covariance(problem, result, **kwargs)


def test_covariance_result_of_another_problem(linear):
    problem, *_, result = linear
    with pytest.raises(ValueError, match="the result is for parameters .* pass the problem that"):
        parameter_covariance(problem.fix({"a": 1.0}), result)
    with pytest.raises(ValueError, match="estimate is outside the bounds"):
        parameter_covariance(problem, [20.0, 0.0, 0.0])


def test_profile_bad_arguments(linear):
    problem, *_, result = linear
    with pytest.raises(ValueError, match="'d' is not a free parameter; free: 'a', 'b', 'c'"):
        profile_likelihood(problem, result, "d")
    with pytest.raises(ValueError, match="n_points must be an integer >= 3"):
        profile_likelihood(problem, result, "a", 2)
    with pytest.raises(ValueError, match=r"values of 'a' must lie within its bounds \[-10, 10\]"):
        profile_likelihood(problem, result, "a", values=[0.0, 11.0])


def test_plots(linear):
    import matplotlib.pyplot as plt

    from jcalib.plotting import plot_fit, plot_profile, plot_residuals

    problem, *_, result = linear
    profile = profile_likelihood(problem, result, "c", 5)  # "c": the compile of the profile test
    for fig in (plot_fit(problem, result, n_dense=None), plot_residuals(problem, result),
                plot_profile(profile)):
        assert fig.axes
        plt.close(fig)
    fig = plot_residuals(problem, result)
    ax = fig.axes[0]
    plotted = np.concatenate([line.get_ydata() for line in ax.lines[:2]])
    np.testing.assert_allclose(np.sort(plotted), np.sort(np.asarray(problem.residuals(result.theta_internal))))
    plt.close(fig)
