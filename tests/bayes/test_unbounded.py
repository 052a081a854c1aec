"""Sampling without artificial bounds (issue 18 §6): the prescaled MALA's step sizes come from
the prior (`prior_prescaling`), not from a box. Parameters on (-inf, inf) and (0, inf) with
proper priors recover analytic posteriors (a linear-Gaussian model with Normal priors; a
positive rate with a log-normal prior, by quadrature), the default uniform prior on finite
bounds keeps the paper's numbers, and draws whose solve fails never enter the scale."""

import math

import equinox as eqx
import jax
import numpy as np
import pytest
from scipy import stats

from jcalib.bayes import Prescaled, mala, prior_prescaling
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import LogNormal, Normal
from tests.bayes.problems import CutLinearModel, gaussian_problem, linear_problem

N_CHAINS, N_STEPS, WARMUP = 4, 2000, 300

# y = A θ + ε on the real line, Normal priors: the posterior is Gaussian
A = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
Y, SIGMA = np.array([1.2, -0.4, 0.9, 1.5]), 0.5
PRIOR_MEAN, PRIOR_SD = np.array([0.0, 1.0]), np.array([2.0, 0.5])
REAL_LINE = ParameterSpace([Parameter("c", 0.0, -math.inf, math.inf), Parameter("d", 1.0, -math.inf, math.inf)])


def _real_line_problem(model_cls=None):
    priors = {n: Normal(float(m), float(s)) for n, m, s in zip("cd", PRIOR_MEAN, PRIOR_SD)}
    kwargs = {} if model_cls is None else {"model_cls": model_cls}
    return linear_problem(A, Y, SIGMA, REAL_LINE, prior=priors, **kwargs)


def _analytic():
    precision = A.T @ A / SIGMA**2 + np.diag(1 / PRIOR_SD**2)
    cov = np.linalg.inv(precision)
    return cov @ (A.T @ Y / SIGMA**2 + PRIOR_MEAN / PRIOR_SD**2), cov


def test_default_uniform_prior_keeps_the_papers_numbers():
    """On finite bounds with the default prior, prior_prescaling is `prescaling` on the box."""
    problem = gaussian_problem(np.array([0.5, -1.0]), np.diag([0.04, 1.0]), half_width=10.0)
    pre = prior_prescaling(jax.random.key(3), problem, fraction=0.02)
    box = (problem.space.lower_internal, problem.space.upper_internal)
    paper = mala.prescaling(jax.random.key(3), problem.log_posterior, box, fraction=0.02)
    np.testing.assert_array_equal(pre.step_sizes, paper.step_sizes)
    np.testing.assert_array_equal(pre.draws, paper.draws)
    assert pre.scale_from == ("box", "box") and int(pre.n_valid) == 100


def test_real_line_parameters_recover_the_gaussian_posterior():
    problem = _real_line_problem()
    pre = prior_prescaling(jax.random.key(0), problem, fraction=0.02)
    assert pre.scale_from == ("prior", "prior")
    # range = 2 IQR of the Normal prior = 2 (2 × 0.6745) sd
    np.testing.assert_allclose(pre.tau, 0.02 * 4 * stats.norm.ppf(0.75) * PRIOR_SD, rtol=1e-12)
    result = mala.sample(jax.random.key(1), problem, None, N_STEPS, n_chains=N_CHAINS, warmup=WARMUP)
    mean, cov = _analytic()
    assert np.all(result.rhat < 1.05) and result.extra["scale_from"] == ["prior", "prior"]
    np.testing.assert_array_less(np.abs(result.mean - mean), 5 * result.mcse_mean)
    np.testing.assert_array_less(np.abs(result.sd - np.sqrt(np.diag(cov))), 5 * result.mcse_sd)


@pytest.mark.slow
def test_positive_rate_recovers_the_quadrature_posterior():
    """k on (0, inf), log scale, LogNormal(log 1.5, 0.5) prior, y_j = k a_j + ε: posterior mean
    and sd of k by quadrature over z = log k."""
    a, k_true, sigma = np.array([1.0, 2.0, 3.0]), 2.0, 0.5
    y = k_true * a + sigma * np.array([0.3, -0.8, 0.5])
    space = ParameterSpace([Parameter("k", 1.0, 0.0, math.inf, log_scale=True)])
    problem = linear_problem(a[:, None], y, sigma, space, prior={"k": LogNormal(math.log(1.5), 0.5)})
    z = np.linspace(-3.0, 3.0, 60001)
    k = np.exp(z)
    log_post = (-0.5 * np.sum((y[None, :] - k[:, None] * a[None, :]) ** 2, axis=1) / sigma**2
                + stats.norm.logpdf(z, math.log(1.5), 0.5))  # log-normal prior of k = normal prior of z
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mean = np.sum(w * k)
    sd = math.sqrt(np.sum(w * (k - mean) ** 2))
    result = mala.sample(jax.random.key(2), problem, None, N_STEPS, n_chains=N_CHAINS, warmup=WARMUP,
                         preconditioner=Prescaled(0.02))
    assert result.extra["scale_from"] == ["prior"] and result.log_scale == (True,)
    assert np.all(result.rhat < 1.05) and np.all(result.samples > 0)
    assert abs(result.mean[0] - mean) < 5 * result.mcse_mean[0], (result.mean, mean)
    assert abs(result.sd[0] - sd) < 5 * result.mcse_sd[0], (result.sd, sd)


def test_failed_draws_do_not_enter_the_scale():
    """Draws from the prior where the solve fails (c > 0.5) get weight 0."""
    problem = _real_line_problem(CutLinearModel)
    pre = prior_prescaling(jax.random.key(0), problem)
    draws, weights = np.asarray(pre.draws), np.asarray(pre.weights)
    assert 10 < int(pre.n_valid) < 90
    assert np.all(weights[draws[:, 0] > 0.5] == 0) and np.all(np.isfinite(pre.step_sizes))
    assert np.all(np.asarray(pre.step_sizes) > 0)


def test_bad_input():
    problem = _real_line_problem()
    flat = eqx.tree_at(lambda p: p.prior, problem, None)  # no proper prior (CalibrationProblem refuses one)
    with pytest.raises(ValueError, match="'c' has infinite bounds \\[-inf, inf\\] and no proper prior"):
        prior_prescaling(jax.random.key(0), flat)
    with pytest.raises(ValueError, match="prior_prescaling: problem must be a CalibrationProblem; got function"):
        prior_prescaling(jax.random.key(0), problem.log_posterior.__func__)
    with pytest.raises(ValueError, match="prior_prescaling: fraction must be positive and finite"):
        prior_prescaling(jax.random.key(0), problem, fraction=-1.0)
