"""`jcalib.estimation.multistart`: the stop rules reach TRF unchanged (the Fides rule scaled by the
log-likelihood at the nominal values unless given), the final log-likelihoods of the starts, and the
checks of method and stop rule. The multistart's search itself is tested in test_global_search.py."""

import math

import jax
import numpy as np
import pytest

from jcalib.data import Measurements
from jcalib.estimation import (
    LLH_TOLERANCE,
    clusters,
    final_log_likelihoods,
    least_squares_trf,
    multistart,
    sample_starts,
)
from jcalib.estimation.least_squares import trf_stop_options
from jcalib.estimation.multistart import check_method
from jcalib.estimation.result import EstimationResult, multistart_result
from jcalib.problems import CalibrationProblem
from tests.estimation.linear_case import THETA_TRUE, TS, design, linear_model


@pytest.fixture(scope="module")
def problem():
    """The linear case with known noise (so it has a log-likelihood)."""
    y = (design() @ THETA_TRUE).reshape(TS.size, 2) + 0.05 * np.random.default_rng(1).standard_normal((TS.size, 2))
    data = Measurements(TS, y, sigma=np.full_like(y, 0.05), output_names=("y1", "y2"))
    return CalibrationProblem(linear_model(), data, weighting="sigma")


def test_fides_stop_reaches_trf_scaled_by_the_nominal_log_likelihood(problem):
    """Each start's result is the one `least_squares_trf` gives with `trf_stop_options("fides", |f|)`,
    |f| = -log-likelihood at the nominal values by default, or the given ``objective_scale``."""
    key = jax.random.key(3)
    llh_nominal = float(problem.log_likelihood(problem.initial_internal()))
    by_default = multistart(key, problem, 3, "trf", "uniform", stop="fides")
    scaled = multistart(key, problem, 3, "trf", "uniform", stop="fides", objective_scale=1e6)
    starts = sample_starts(key, problem, 3, "uniform")
    for k, theta0 in enumerate(starts):
        direct = least_squares_trf(problem, theta0, **trf_stop_options("fides", llh_nominal))
        np.testing.assert_array_equal(by_default.results[k].theta_internal, direct.theta_internal)
        assert by_default.results[k].n_steps == direct.n_steps
        loose = least_squares_trf(problem, theta0, **trf_stop_options("fides", 1e6))
        np.testing.assert_array_equal(scaled.results[k].theta_internal, loose.theta_internal)
    assert any("plateau" in r.reason for r in scaled.results)  # 1e-2 of cost: the rule fired


def test_final_log_likelihoods(problem):
    """The log-likelihood at each start's end, -inf for a start that could not be used; the
    best start reaches the least-squares optimum's log-likelihood within the tolerance."""
    ms = multistart(jax.random.key(0), problem, 2, "trf", "uniform")
    llh = final_log_likelihoods(problem, ms)
    expected = [float(problem.log_likelihood(r.theta_internal)) for r in ms.results]
    np.testing.assert_array_equal(llh, expected)
    a = design()
    y = np.asarray(problem.measurements.values).reshape(-1)
    optimum = np.linalg.lstsq(a, y, rcond=None)[0]
    llh_optimum = float(problem.log_likelihood(problem.to_internal(optimum)))
    assert np.all(llh >= llh_optimum - LLH_TOLERANCE)
    failed = EstimationResult(method="trf", names=problem.free_names, theta=np.zeros(3), theta_internal=np.zeros(3),
                              loss=math.inf, singular_values=np.zeros(0), condition_number=math.nan,
                              n_essential_directions=3, n_steps=0, n_simulations=1, n_jacobians=0,
                              wall_time_s=0.0, converged=False, reason="failed: test")
    mixed = multistart_result("trf", "uniform", problem, np.zeros((2, 3)), [ms.results[0], failed], 0.0)
    llh_mixed = final_log_likelihoods(problem, mixed)
    assert sorted(llh_mixed.tolist()) == [-math.inf, llh[0]]


@pytest.mark.parametrize("method, stop, message", [
    ("newton", "scipy", "method must be one of ('lm', 'fides', 'trf'); got 'newton'"),
    ("trf", "nope", "stop must be None or one of ('scipy', 'fides'); got 'nope'"),
    ("lm", "fides", "stop='fides' is a rule of the Fides and TRF methods; Levenberg-Marquardt ('lm') stops by its "
                    "own tests (stop=None)"),
    ("lm", "scipy", "stop='scipy' is a rule of the Fides and TRF methods"),
])
def test_bad_method_or_stop(problem, method, stop, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_method(method, stop)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        multistart(jax.random.key(0), problem, 2, method, "uniform", stop=stop)


def test_given_starts_are_fitted_as_given(problem):
    """``starts=``: each start's result is the local method's from that start, the result says
    "given"; starts of the wrong shape or outside the bounds are refused."""
    starts = sample_starts(jax.random.key(7), problem, 2, "uniform")
    ms = multistart(None, problem, 2, "trf", starts=starts)
    assert ms.start_distribution == "given"
    np.testing.assert_array_equal(ms.starts, starts)
    for k, theta0 in enumerate(starts):
        np.testing.assert_array_equal(ms.results[k].theta_internal, least_squares_trf(problem, theta0).theta_internal)
    with pytest.raises(ValueError, match=r"starts must be \(n_starts=3, n_free=3\); got shape \(2, 3\)"):
        multistart(None, problem, 3, "trf", starts=starts)
    outside = starts.copy()
    outside[1, 0] = problem.space.upper[0] + 1.0
    with pytest.raises(ValueError, match="bound"):
        multistart(None, problem, 2, "trf", starts=outside)


def test_sobol_starts_are_the_spaces_scrambled_sobol_points(problem):
    key = jax.random.key(4)
    starts = sample_starts(key, problem, 8, "sobol")
    np.testing.assert_array_equal(starts, np.asarray(problem.space.sample(key, 8, "sobol")))
    assert np.all((starts >= problem.space.lower) & (starts <= problem.space.upper))


def test_clusters_count_how_often_each_optimum_was_found():
    values = [5.0, 1.0, 1.08, np.inf, 1.16, 5.05, 1.3, np.nan]
    found = clusters(values, 0.1)
    assert [(c["value"], c["n_starts"], c["starts"]) for c in found] == [(1.0, 3, [1, 2, 4]), (1.3, 1, [6]),
                                                                         (5.0, 2, [0, 5])]
    assert clusters([np.inf, np.nan]) == []
    with pytest.raises(ValueError, match="one per start"):
        clusters(np.zeros((2, 2)))
