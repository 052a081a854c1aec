"""Laplace preconditioning where it can go wrong (issue 35 §1.10): a start that is not a mode and a
flat direction are said (a SamplingWarning) instead of clamped silently, and on parameters with
infinite bounds the largest sd comes from the prior's ranges, not from 1e4 × the curvature."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.bayes import SamplingWarning, hmc
from jcalib.bayes.adaptation import laplace_covariance, prior_ranges
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import Normal
from tests.bayes.problems import linear_problem


def test_a_start_that_is_not_a_mode_is_said():
    """log π = -(x0² - 1)² - x1²/2 at 0: a saddle (curvature +4 along x0)."""
    def logdensity(x):
        return -((x[0] ** 2 - 1.0) ** 2) - 0.5 * x[1] ** 2

    with pytest.warns(SamplingWarning, match="not concave at the point in 1 of 2 directions, so the point is not an "
                                             r"interior mode \(a start away from the optimum, or an optimum on a"):
        cov = laplace_covariance(logdensity, jnp.zeros(2), bounds=(-np.full(2, 5.0), np.full(2, 5.0)))
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), [1.0, 1.0], rtol=1e-6)  # capped at a tenth of the width 10


def test_a_flat_direction_is_said():
    def logdensity(x):
        return -0.5 * x[0] ** 2 - 1e-12 * x[1] ** 2

    with pytest.warns(SamplingWarning, match="1 of 2 directions are flatter than max_sd = 2"):
        cov = laplace_covariance(logdensity, jnp.zeros(2), bounds=(-np.full(2, 10.0), np.full(2, 10.0)))
    np.testing.assert_allclose(np.diag(cov), [1.0, 4.0], rtol=1e-6)


def test_infinite_bounds_take_the_scale_from_the_prior():
    """y = c + ε (4 data, σ = 0.5) with d absent from the data: d is identified by its prior only,
    Normal(1, 0.5), whose sd 0.5 exceeds the cap, a tenth of the mean prior range (2 IQR: 0.337); it
    is capped there and said. Before, the cap on an infinite box was 1e4 × the curvature's sd."""
    space = ParameterSpace([Parameter("c", 0.0, -math.inf, math.inf), Parameter("d", 1.0, -math.inf, math.inf)])
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    problem = linear_problem(a, np.array([1.0, 1.2, 0.8, 1.1]), 0.5, space, prior={"c": Normal(0.0, 2.0),
                                                                                  "d": Normal(1.0, 0.5)})
    ranges = prior_ranges(problem)
    np.testing.assert_allclose(ranges, 4 * 0.6744897501960817 * np.array([2.0, 0.5]), rtol=1e-9)
    with pytest.warns(SamplingWarning, match=f"1 of 2 directions are flatter than max_sd = {ranges.mean() / 10:.3g}"):
        result = hmc.sample(jax.random.key(0), problem, None, 20, n_chains=2, warmup=10)
    cov = np.asarray(result.extra["inverse_mass_matrix"])
    assert np.sqrt(np.linalg.eigvalsh(cov)).max() <= ranges.mean() / 10 * (1 + 1e-9)
