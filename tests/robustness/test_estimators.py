"""Fault injection for the estimators and sensitivity consumers (issue 17, items 1 and 8).

`FaultyDecay` is y' = -k y, y(0) = y0, whose solve fails (NaN vector field, reported as a
failed solve) for k in the open interval (FAIL_LO, FAIL_HI), and whose output is not
differentiable in y0 at y0 = Y0_KINK (there the Jacobian is NaN although the simulation
succeeds). The data come from k = 1, y0 = 2, so every start with k > FAIL_HI must cross or
stop at the failed region. No method may report a point of the failed region, a non-finite
loss or a non-finite estimate as its answer, and every start that cannot be used is refused
with a message that says why (failed solve with its status, overflow, NaN Jacobian).
"""

import math

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.algorithm import run
from jcalib.data import Measurements
from jcalib.estimation import (
    FailedStartError,
    differential_evolution,
    gauss_newton,
    least_squares_trf,
    levenberg_marquardt_batch,
    multistart,
    parameter_covariance,
    profile_likelihood,
    scipy_minimize,
)
from jcalib.estimation.failures import honest_outcome
from jcalib.estimation.global_search import differential_evolution_algorithm
from jcalib.filters.ekf import propagate_state, run_ekf
from jcalib.model import AbstractModel, Experiment, SimulationError
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import CalibrationProblem
from jcalib.sensitivity import identifiability, output_sensitivities, sobol_indices

TS = np.linspace(0.25, 3.0, 12)
FAIL_LO, FAIL_HI = 1.5, 4.0
Y0_KINK = 3.5
THETA_TRUE = np.array([1.0, 2.0])
FAR_START = [6.0, 2.0]  # k above the failed region, the truth below it


class FaultyDecay(AbstractModel):
    def vector_field(self, t, y, theta):
        k = theta[0]
        failed = (k > FAIL_LO) & (k < FAIL_HI)
        return jnp.where(failed, jnp.nan, -k * y)

    def initial_state(self, theta):
        return theta[1:2]

    def observe(self, t, y, theta):
        # 0 * sqrt(|y0 - kink|): no effect on the value, derivative 0 * inf = NaN at the kink
        return y + 0.0 * jnp.sqrt(jnp.abs(theta[1] - Y0_KINK))


def faulty_model() -> FaultyDecay:
    space = ParameterSpace([Parameter("k", 1.0, 0.1, 10.0, log_scale=True),
                            Parameter("y0", 2.0, 0.5, 5.0)])
    return FaultyDecay(
        parameters=space, output_names=("y",), state_names=("y",), experiment=Experiment(TS, t0=0.0),
        solver=dfx.Tsit5(), controller=dfx.PIDController(rtol=1e-8, atol=1e-10),
        adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=256)


def in_failed_region(theta) -> bool:
    return FAIL_LO < float(theta[0]) < FAIL_HI


@pytest.fixture(scope="module")
def problem():
    y = THETA_TRUE[1] * np.exp(-THETA_TRUE[0] * TS)
    return CalibrationProblem(faulty_model(), Measurements(TS, y[:, None], output_names=("y",)),
                              weighting="absolute")


@pytest.fixture(scope="module")
def overflow_problem(problem):
    """Absolute weighting with one datum of 1e300: the simulation succeeds, the loss overflows."""
    y = np.asarray(problem.measurements.values).copy()
    y[3, 0] = 1e300
    return CalibrationProblem(problem.model, Measurements(TS, y, output_names=("y",)), weighting="absolute")


def assert_honest(result):
    """The answer is finite and outside the failed region, or the run says it failed."""
    if result.converged or math.isfinite(result.loss):
        assert math.isfinite(result.loss), result.reason
        assert np.all(np.isfinite(result.theta)), result.reason
        assert not in_failed_region(result.theta), (result.theta, result.reason)
    else:
        assert "fail" in result.reason


# --- a start that cannot be used is refused with the reason ------------------------------------
START_ROWS = [
    # (problem, theta0, message fragment)
    ("problem", [2.5, 2.0], r"the simulation at theta0 = \{'k': 2\.5, 'y0': 2\.0\} failed \(MAX_STEPS: "
                            r"maximum number of solver steps reached\); choose another"),
    ("problem", [1.0, Y0_KINK], r"the Jacobian at theta0 = \{'k': 1\.0, 'y0': 3\.5\} has \d+ NaN or inf entries "
                                r"although the simulation succeeded"),
    ("overflow_problem", [1.0, 2.0], r"the loss overflows \(inf\) at theta0 = \{'k': 1\.0, 'y0': 2\.0\} although "
                                     r"the simulation succeeded: residuals up to 1e\+300; rescale the data \(other "
                                     r"units\) or use weighting='relative' or 'sigma'"),
]


@pytest.mark.slow
@pytest.mark.parametrize("estimator, where", [(gauss_newton, "gauss_newton"),
                                              (least_squares_trf, "least_squares_trf")])
@pytest.mark.parametrize("which, theta0, match", START_ROWS)
def test_unusable_start_is_refused_with_the_reason(request, estimator, where, which, theta0, match):
    with pytest.raises(FailedStartError, match=f"^{where}: {match}"):
        estimator(request.getfixturevalue(which), theta0)


def test_failed_start_error_is_a_value_error():
    assert issubclass(FailedStartError, ValueError)


# --- iterations step around the failed region ---------------------------------------------------
@pytest.mark.slow
def test_gauss_newton_steps_around_the_failed_region(problem):
    result = gauss_newton(problem, FAR_START)
    assert_honest(result)


def test_trf_steps_around_the_failed_region(problem):
    result = least_squares_trf(problem, FAR_START)
    assert result.extra["n_failed_solves"] > 0  # the failed region was hit and rejected
    assert_honest(result)


@pytest.mark.slow
def test_lm_multistart_reports_failed_starts_and_never_picks_one(problem):
    starts = np.array([FAR_START, [2.5, 2.0], [0.5, 1.0], [1.0, Y0_KINK]])
    result = levenberg_marquardt_batch(problem, starts)
    for r in result.results:
        assert_honest(r)
    failed = result.results[1]
    assert not failed.converged and failed.loss == math.inf
    assert "the simulation at theta0[1] = {'k': 2.5, 'y0': 2.0} failed (MAX_STEPS" in failed.reason
    assert result.extra["n_failed_starts"] >= 1
    assert math.isfinite(result.best.loss) and not in_failed_region(result.best.theta)


def test_trf_multistart_records_a_failed_start(problem):
    result = multistart(jax.random.key(0), problem, 2, "trf", "aka2023", theta0=[2.5, 2.0], max_steps=5)
    first = result.results[0]  # aka2023: the first start is theta0, inside the failed region
    assert first.loss == math.inf and not first.converged and "MAX_STEPS" in first.reason
    for r in result.results:
        assert_honest(r)


@pytest.mark.slow
def test_differential_evolution_never_returns_a_failed_member(problem):
    result = differential_evolution(jax.random.key(1), problem, population_size=10, max_steps=10,
                                    chunk_size=10)
    assert_honest(result)
    assert math.isfinite(result.loss)


def test_differential_evolution_algorithm_with_every_member_failing_never_converges():
    """A NaN loss is stored as inf; a population without a finite loss never counts as converged."""
    de = differential_evolution_algorithm(lambda x: jnp.sum(x) * jnp.nan, -np.ones(2), np.ones(2), 5)
    key_init, key_run = jax.random.split(jax.random.key(0))
    out = run(key_run, de, de.init(key_init), 2, stop=lambda state: state.converged)
    assert out.status == "completed" and not bool(out.state.converged)
    assert np.all(np.isinf(np.asarray(out.state.losses))) and np.all(np.asarray(out.trace.n_replaced) == 5)


@pytest.mark.slow
def test_profile_likelihood_leaves_a_gap_at_failed_grid_points(problem):
    fit = gauss_newton(problem, [1.2, 2.0])
    profile = profile_likelihood(problem, fit, "k", values=[0.8, 1.0, 2.0], max_steps=10)
    assert np.isnan(profile.loss[2]) and not profile.converged[2]
    assert np.all(np.isfinite(profile.loss[:2])) and np.all(profile.converged[:2])


# --- overflow is its own failure, never success ------------------------------------------------
def test_trf_multistart_on_an_overflowing_loss_reports_failure(overflow_problem):
    result = multistart(jax.random.key(0), overflow_problem, 2, "trf", "lhs")
    assert result.extra["n_failed_starts"] == 2
    assert not result.best.converged and result.best.loss == math.inf
    assert "the loss overflows (inf)" in result.extra["failure"]


@pytest.mark.slow
def test_lm_batch_on_an_overflowing_loss_reports_overflow(overflow_problem):
    result = levenberg_marquardt_batch(overflow_problem, np.array([[1.0, 2.0]]))
    r = result.results[0]
    assert not r.converged and r.loss == math.inf
    assert "the loss overflows (inf) at theta0[0]" in r.reason and "residuals up to 1e+300" in r.reason


def test_scipy_minimize_on_an_overflowing_loss_is_not_success(overflow_problem):
    result = scipy_minimize(None, overflow_problem, [1.0, 2.0], "nelder-mead", max_steps=20)
    assert not result.converged and result.loss == math.inf
    assert "the loss overflows (inf)" in result.reason


# --- covariance at a failed point --------------------------------------------------------------
@pytest.mark.parametrize("estimate, match", [
    ([2.5, 2.0], r"parameter_covariance: the simulation at the estimate = \{'k': 2\.5, 'y0': 2\.0\} failed "
                 r"\(MAX_STEPS"),
    ([1.0, Y0_KINK], r"parameter_covariance: the Jacobian at the estimate = \{'k': 1\.0, 'y0': 3\.5\} has \d+ "
                     r"NaN or inf entries although the simulation succeeded"),
])
def test_covariance_refuses_a_failed_point(problem, estimate, match):
    with pytest.raises(ValueError, match=match):
        parameter_covariance(problem, estimate)


# --- the last line of defence ------------------------------------------------------------------
@pytest.mark.parametrize("converged, loss, theta, expected, fragment", [
    (True, 0.5, [1.0, 2.0], True, "ok"),
    (True, math.inf, [1.0, 2.0], False, "the loss is inf"),
    (True, math.nan, [1.0, 2.0], False, "the loss is nan"),
    (True, 0.5, [math.nan, 2.0], False, "the estimate is not finite"),
    (False, 0.5, [1.0, 2.0], False, "ok"),
])
def test_honest_outcome(converged, loss, theta, expected, fragment):
    ok, reason = honest_outcome(converged, "ok", loss, theta)
    assert ok is expected and fragment in reason


# --- sensitivity consumers: a failed solve is a failure, never a flat direction -----------------
FAILED = [2.5, 2.0]
KINK = [1.0, Y0_KINK]


@pytest.mark.parametrize("scaling", ["absolute", "relative"])
def test_output_sensitivities_of_a_failed_solve_are_nan_not_zero(scaling):
    s = np.asarray(output_sensitivities(faulty_model(), jnp.asarray(FAILED), scaling=scaling))
    assert s.shape == (TS.size, 1, 2) and np.all(np.isnan(s))


@pytest.mark.slow
@pytest.mark.parametrize("source, theta, match", [
    ("problem", FAILED, r"identifiability: the residual Jacobian has NaN or inf entries at theta = "
                        r"\{'k': 2\.5, 'y0': 2\.0\}: the simulation failed there \(MAX_STEPS: maximum number of "
                        r"solver steps reached\); a failed solve has no sensitivities"),
    ("data-free problem", KINK, r"identifiability: the residual Jacobian has NaN or inf entries at theta = "
                                r"\{'k': 1\.0, 'y0': 3\.5\}: the simulation succeeded \(status SUCCESS\) but its "
                                r"derivatives are NaN"),
])
def test_identifiability_refuses_a_failed_solve_with_its_status(problem, source, theta, match):
    target = problem if source == "problem" else CalibrationProblem.from_simulation(faulty_model())
    with pytest.raises(ValueError, match=match):
        identifiability(target, jnp.asarray(theta))


def test_sobol_refuses_failed_samples_instead_of_dropping_them():
    with pytest.raises(SimulationError, match=r"sobol_indices: \d+ of 32 simulations failed "
                                              r"\(\{'maximum number of solver steps reached': \d+\}\)"):
        sobol_indices(jax.random.key(0), faulty_model(), None, 8, n_bootstrap=2)


def test_ekf_transition_jacobian_of_a_failed_solve_is_nan():
    model = faulty_model()
    jac = jax.jacfwd(lambda x: propagate_state(model, x, jnp.asarray(FAILED), 0.0, 1.0))(jnp.ones(1))
    assert np.all(np.isnan(np.asarray(jac)))


def test_ekf_stops_at_a_failed_propagation(problem):
    model = faulty_model()
    kwargs = dict(theta0=np.array(FAILED), R=np.eye(1) * 1e-4)
    with pytest.raises(SimulationError, match=r"run_ekf: the filter step at t = 0\.25 gave non-finite numbers"):
        run_ekf(model, problem.measurements, **kwargs)
    result = run_ekf(model, problem.measurements, throw=False, **kwargs)
    assert not result.success


@pytest.mark.slow
def test_differential_evolution_on_an_overflowing_loss_stops_at_once(overflow_problem):
    # every member's loss overflows: no generation can help, so DE stops before the first one
    result = differential_evolution(jax.random.key(0), overflow_problem, population_size=10, max_steps=1000)
    assert result.n_steps == 0 and result.n_simulations == 10
    assert not result.converged and result.loss == math.inf
    assert result.reason.startswith("failed: every member of the population has a non-finite loss at the start "
                                    "(10 members), so no generation was run; differential_evolution: the loss "
                                    "overflows (inf) at the best member"), result.reason
    assert "residuals up to 1e+300" in result.reason
