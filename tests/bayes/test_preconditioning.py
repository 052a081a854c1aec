"""The preconditioner strategies: the Laplace covariance of a Gaussian posterior (analytic), the
floor on flat directions, use through sample(preconditioner=Laplace()) and the short forms
("laplace", a matrix, None) giving the same chains as the objects."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.bayes import DenseMetric, Laplace, Prescaled, laplace_covariance, mala
from tests.bayes.problems import gaussian_problem
from tests.bayes.test_mala import RIDGE_COV, _analytic, _problem

RIDGE = gaussian_problem(np.zeros(2), RIDGE_COV)  # the posterior is N(0, RIDGE_COV), box ± 1000


@pytest.mark.parametrize("prior", ["uniform", "gaussian"])
def test_equals_the_analytic_posterior_covariance(prior):
    mean, cov = _analytic(prior)
    got = laplace_covariance(_problem(prior).log_posterior, jnp.asarray(mean), bounds=(mean - 100.0, mean + 100.0))
    np.testing.assert_allclose(got, cov, rtol=1e-6, atol=1e-12 * np.abs(cov).max())


def test_flat_directions_get_the_largest_allowed_sd():
    def flat(x):  # depends on x0 + x1 only: x0 - x1 is flat
        return -0.5 * (x[0] + x[1]) ** 2 / 0.01

    cov = laplace_covariance(flat, jnp.zeros(2), bounds=(-jnp.ones(2) * 5, jnp.ones(2) * 5))
    v_flat, v_data = np.array([1.0, -1.0]) / np.sqrt(2), np.array([1.0, 1.0]) / np.sqrt(2)
    assert v_flat @ cov @ v_flat == pytest.approx(1.0**2, rel=1e-6)  # max_sd = width/10 = 1
    assert v_data @ cov @ v_data == pytest.approx(0.01 / 2, rel=1e-6)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_sample_with_the_laplace_preconditioner():
    result = mala.sample(jax.random.key(3), RIDGE, None, 1000, n_chains=2, warmup=200, preconditioner="laplace")
    np.testing.assert_allclose(result.extra["preconditioner"], RIDGE_COV, rtol=1e-5)
    assert np.all(result.ess_bulk > 500)


@pytest.mark.slow
def test_short_forms_are_the_strategy_objects():
    kwargs = dict(n_chains=2, warmup=20)
    laplace = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner=Laplace(), **kwargs)
    short = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner="laplace", **kwargs)
    np.testing.assert_array_equal(laplace.samples, short.samples)
    dense = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner=DenseMetric(RIDGE_COV), **kwargs)
    matrix = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner=RIDGE_COV, **kwargs)
    np.testing.assert_array_equal(dense.samples, matrix.samples)
    prescaled = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner=Prescaled(1e-3), **kwargs)
    default = mala.sample(jax.random.key(3), RIDGE, None, 50, **kwargs)
    paper = mala.sample(jax.random.key(3), RIDGE, None, 50, preconditioner=Prescaled(0.02), **kwargs)
    np.testing.assert_array_equal(default.samples, paper.samples)
    np.testing.assert_allclose(prescaled.extra["tau"], 1e-3 * 2e3)
    assert (laplace.extra["metric"], dense.extra["metric"], default.extra["metric"]) == (
        "Laplace", "DenseMetric", "Prescaled")
    assert not np.allclose(prescaled.samples, dense.samples)


def test_laplace_settings_reach_the_covariance():
    """max_sd floors the flat direction of `flat` (test above) at the given sd."""
    def flat(x):
        return -0.5 * (x[0] + x[1]) ** 2 / 0.01

    cov = Laplace(max_sd=0.5).covariance(flat, jnp.zeros(2))
    v_flat = np.array([1.0, -1.0]) / np.sqrt(2)
    assert v_flat @ cov @ v_flat == pytest.approx(0.25, rel=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="not finite"):
        laplace_covariance(lambda x: -0.5 * x @ x + jnp.sqrt(5e-5 - x[0]), jnp.zeros(2))  # NaN at x0 = +h
    with pytest.raises(ValueError, match="1-D"):
        laplace_covariance(lambda x: -0.5 * jnp.sum(x**2), jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match="'laplace'"):
        mala.sample(jax.random.key(0), RIDGE, None, 10, preconditioner="hessian")
