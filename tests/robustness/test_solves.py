"""Failed solves, invalid and out-of-bounds parameters, input horizons (issue 17, items 1-4).

Rows: a failed solve gives NaN derivatives (model, problem, grad of loss and log
likelihood, reverse mode); NaN/inf theta gives INVALID_INPUT, a parameter outside its bounds
OUT_OF_BOUNDS (the same eagerly, under jit and under vmap), eager `simulate`/`jacobian`
raise; `with_bounds_check(False)` and ``simulate_batch(check_bounds=False)`` simulate
anyway; fixed values outside the bounds stay usable in a problem; times beyond a model's
input table are refused with a message naming the input horizon.
"""

import re

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.data import Measurements
from jcalib.model import Experiment, SolveStatus, simulate_batch
from jcalib.parameters import Parameter
from jcalib.problems import CalibrationProblem, with_initial_state_parameters
from jcalib.sensitivity.local import output_sensitivities

NOMINAL = np.array([1e-4, 1e-5, 5e-5])  # four_substance_reactions: kab, kac, kad
HORIZON = 1814400.0  # thermal_office_r7c4: 1008 x 1800 s


@pytest.fixture(scope="module")
def failing():
    """four_substance_reactions with a step budget too small for any solve (MAX_STEPS)."""
    return jcalib.models.get("four_substance_reactions").with_solver(max_steps=30)


@pytest.fixture(scope="module")
def data(model):
    return jcalib.synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, sigma=0.01)


@pytest.fixture(scope="module")
def failing_problem(failing, data):
    return CalibrationProblem(failing, data, fixed={"kad": 5e-5})


@pytest.fixture(scope="module")
def problem(model, data):
    return CalibrationProblem(model, data, fixed={"kad": 5e-5})


@pytest.fixture(scope="module")
def office():
    return jcalib.models.get("thermal_office_r7c4")


# --- 1. derivatives of a failed solve are NaN, never zero ------------------------------------
FAILED_DERIVATIVES = {
    "model.jacobian (forward)": lambda m, p: m.jacobian(jnp.asarray(NOMINAL)),
    "jax.grad of simulate (reverse)": lambda m, p: jax.grad(lambda t: jnp.sum(m.simulate(t)))(jnp.asarray(NOMINAL)),
    "sensitivity.output_sensitivities": lambda m, p: output_sensitivities(m, NOMINAL, scaling="absolute"),
    "problem.jacobian": lambda m, p: p.jacobian(p.initial_internal()),
    "jax.grad of problem.loss": lambda m, p: jax.grad(lambda z: p.loss(z))(p.initial_internal()),
    "jax.grad of problem.log_likelihood": lambda m, p: jax.grad(lambda z: p.log_likelihood(z))(p.initial_internal()),
}


@pytest.mark.slow
def test_failing_model_fails(failing, failing_problem):
    y, status = failing.simulate_with_status(jnp.asarray(NOMINAL))
    assert int(status) == SolveStatus.MAX_STEPS
    assert np.all(np.isnan(y))
    assert float(failing_problem.log_likelihood(failing_problem.initial_internal())) == -np.inf


@pytest.mark.slow
@pytest.mark.parametrize("what", list(FAILED_DERIVATIVES))
def test_failed_solve_derivative_is_nan(what, failing, failing_problem):
    derivative = np.asarray(FAILED_DERIVATIVES[what](failing, failing_problem))
    assert derivative.size > 0
    assert np.all(np.isnan(derivative)), f"{what}: {derivative}"


@pytest.mark.slow
@pytest.mark.parametrize("what", list(FAILED_DERIVATIVES))
def test_successful_solve_derivative_is_finite(what, model, problem):
    derivative = np.asarray(FAILED_DERIVATIVES[what](model, problem))
    assert np.all(np.isfinite(derivative)) and np.any(derivative != 0)


def test_successful_jacobian_matches_finite_differences(model):
    theta = jnp.asarray(NOMINAL)
    jac = np.asarray(model.jacobian(theta))
    for j in range(3):
        h = 1e-6 * NOMINAL[j]
        plus = np.asarray(model.simulate(theta.at[j].add(h)))
        minus = np.asarray(model.simulate(theta.at[j].add(-h)))
        fd = (plus - minus) / (2 * h)
        # solver tolerance rtol 1e-8 over a step of 1e-6: FD error ~1e-8 / 1e-6 relative
        np.testing.assert_allclose(jac[..., j], fd, rtol=1e-4, atol=1e-4 * np.abs(fd).max())


def test_invalid_input_derivative_is_nan(model):
    jac = jax.jacfwd(model.forward_mode().simulate)(jnp.asarray(NOMINAL).at[0].set(jnp.nan))
    assert np.all(np.isnan(np.asarray(jac)))


# --- 2./3. status codes for NaN and out-of-bounds theta: eager, jit and vmap agree ----------
STATUS_ROWS = [  # (changes to the nominal theta, expected status)
    ({}, SolveStatus.SUCCESS),
    ({0: np.nan}, SolveStatus.INVALID_INPUT),
    ({1: np.inf}, SolveStatus.INVALID_INPUT),
    ({2: -np.inf}, SolveStatus.INVALID_INPUT),
    ({0: -1e-4}, SolveStatus.OUT_OF_BOUNDS),
    ({2: 2e-4}, SolveStatus.OUT_OF_BOUNDS),
    ({0: -1e-4, 1: np.nan}, SolveStatus.INVALID_INPUT),  # NaN wins over out-of-bounds
    ({0: 1e-6, 2: 1e-4}, SolveStatus.SUCCESS),  # on the bounds is inside
    ({0: float(np.exp(np.log(1e-3)))}, SolveStatus.SUCCESS),  # 1.0000000000000002e-3: round-off
    ({0: 1e-3 * (1 + 1e-9)}, SolveStatus.OUT_OF_BOUNDS),  # beyond round-off
]


def _theta(changes):
    theta = NOMINAL.copy()
    for i, v in changes.items():
        theta[i] = v
    return theta


@pytest.fixture(scope="module")
def status_table(model):
    thetas = jnp.asarray(np.stack([_theta(c) for c, _ in STATUS_ROWS]))
    eager = [model.simulate_with_status(t) for t in thetas]
    jitted = _jit_statuses(model, thetas)
    vmapped = jax.jit(jax.vmap(model.simulate_with_status))(thetas)
    return eager, jitted, vmapped


def _jit_statuses(model, thetas):
    fn = jax.jit(lambda t: model.simulate_with_status(t))
    return [fn(t) for t in thetas]


@pytest.mark.parametrize("row", range(len(STATUS_ROWS)))
def test_status_code(row, status_table):
    expected = STATUS_ROWS[row][1]
    eager, jitted, (ys, statuses) = status_table
    codes = [int(eager[row][1]), int(jitted[row][1]), int(statuses[row])]
    assert codes == [expected] * 3
    for y in (eager[row][0], jitted[row][0], ys[row]):
        if expected == SolveStatus.SUCCESS:
            assert np.all(np.isfinite(np.asarray(y)))
        else:
            assert np.all(np.isnan(np.asarray(y)))
    np.testing.assert_array_equal(np.asarray(eager[row][0]), np.asarray(ys[row]))


@pytest.mark.parametrize("code, fragment", [
    (SolveStatus.INVALID_INPUT, "theta has NaN or inf"),
    (SolveStatus.OUT_OF_BOUNDS, "outside its bounds"),
    (SolveStatus.MAX_STEPS, "maximum number of solver steps"),
])
def test_status_description(code, fragment):
    assert fragment in SolveStatus.describe(code)


EAGER_ERRORS = [  # (method, changes, message fragment)
    ("simulate", {0: -1e-4}, "simulate: kab = -0.0001 lies outside its bounds [1e-06, 0.001]; "
                             "pass model.with_bounds_check(False) to simulate anyway"),
    ("simulate", {2: 2e-4}, "simulate: kad = 0.0002 lies outside its bounds [1e-06, 0.0001]"),
    ("simulate", {0: np.nan}, "simulate: theta has NaN or inf (kab = nan)"),
    ("simulate", {1: np.inf}, "simulate: theta has NaN or inf (kac = inf)"),
    ("jacobian", {0: -1e-4}, "jacobian: kab = -0.0001 lies outside its bounds"),
    ("jacobian", {2: np.nan}, "jacobian: theta has NaN or inf (kad = nan)"),
    ("output_sensitivities", {0: -1e-4}, "output_sensitivities: kab = -0.0001 lies outside its bounds"),
    ("output_sensitivities", {1: np.nan}, "output_sensitivities: theta has NaN or inf (kac = nan)"),
]


@pytest.mark.parametrize("method, changes, fragment", EAGER_ERRORS)
def test_eager_call_refuses_bad_theta(method, changes, fragment, model):
    call = (lambda t: output_sensitivities(model, t)) if method == "output_sensitivities" else getattr(model, method)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        call(jnp.asarray(_theta(changes)))


def test_problem_on_the_bound_in_internal_coordinates_is_inside(problem):
    """An estimator that clips onto the internal box gets exp(log(upper)) > upper by an ulp."""
    z = problem.initial_internal().at[0].set(float(np.log(1e-3)))
    assert float(problem.to_physical(z)[0]) > 1e-3
    assert np.all(np.isfinite(np.asarray(problem.residuals(z))))


def test_traced_simulate_gives_nan_not_error(model):
    y = jax.jit(lambda t: model.simulate(t))(jnp.asarray(_theta({0: -1e-4})))
    assert np.all(np.isnan(np.asarray(y)))


# --- opt-out: deliberate extrapolation ------------------------------------------------------
def test_with_bounds_check_false_simulates(model):
    theta = jnp.asarray(_theta({2: 2e-4}))  # kad above its upper bound
    free = model.with_bounds_check(False)
    assert model.check_bounds and not free.check_bounds
    y, status = free.simulate_with_status(theta)
    assert int(status) == SolveStatus.SUCCESS and np.all(np.isfinite(np.asarray(y)))
    np.testing.assert_array_equal(np.asarray(free.simulate(theta)), np.asarray(y))
    assert np.all(np.isfinite(np.asarray(free.jacobian(theta))))
    # invariant D/C = kad/kac holds at the extrapolated value: it is a real solve
    np.testing.assert_allclose(np.asarray(y)[1:, 3] / np.asarray(y)[1:, 2], 2e-4 / 1e-5, rtol=1e-6)
    assert free.with_bounds_check(True).check_bounds


def test_with_bounds_check_needs_a_bool(model):
    with pytest.raises(ValueError, match=r"with_bounds_check\(\): enabled must be True or False; got 'no'"):
        model.with_bounds_check("no")


def test_simulate_batch_check_bounds(model):
    thetas = np.stack([NOMINAL, _theta({2: 2e-4})])
    with pytest.raises(ValueError, match=r"1 samples lie outside the bounds.*pass check_bounds=False"):
        simulate_batch(model, thetas)
    values, status = simulate_batch(model, thetas, check_bounds=False, return_status=True)
    assert status.tolist() == [SolveStatus.SUCCESS] * 2
    assert np.all(np.isfinite(values))


def test_initial_state_parameters_keep_the_bounds_policy(model):
    wrapped = with_initial_state_parameters(model, [Parameter("A0", 10.0, 5.0, 20.0)])
    assert wrapped.check_bounds
    theta = jnp.asarray(np.append(NOMINAL, 30.0))
    assert int(wrapped.simulate_with_status(theta)[1]) == SolveStatus.OUT_OF_BOUNDS
    assert int(wrapped.with_bounds_check(False).simulate_with_status(theta)[1]) == SolveStatus.SUCCESS


# --- problems: fixed values may lie outside the bounds, free ones may not --------------------
@pytest.mark.slow
def test_problem_fixed_value_outside_bounds(model, data):
    problem = CalibrationProblem(model, data, fixed={"kad": 0.0})
    assert problem.fixed == {"kad": 0.0}
    kad = problem.model.parameters["kad"]
    assert (kad.lower, kad.upper, kad.log_scale) == (0.0, 1e-4, False)
    assert problem.model.parameters.subset(["kab", "kac"]) == model.parameters.subset(["kab", "kac"])
    z = problem.initial_internal()
    assert np.all(np.isfinite(np.asarray(problem.residuals(z))))
    assert np.all(np.isfinite(np.asarray(problem.jacobian(z))))
    assert np.all(np.isfinite(np.asarray(problem.model.simulate(problem.theta_full(z)))))


@pytest.mark.parametrize("what", ["simulate", "residuals", "loss", "jacobian", "grad"])
def test_problem_free_value_outside_bounds_is_nan(what, problem):
    z = problem.initial_internal().at[0].set(jnp.log(2e-3))  # kab above 1e-3
    if what == "grad":
        def fn(zz):
            return jax.grad(lambda q: problem.loss(q))(zz)
    else:
        fn = getattr(problem, what)
    assert np.all(np.isnan(np.asarray(fn(z))))


# --- 4. input horizon -----------------------------------------------------------------------
def test_input_horizon_values(office):
    assert office.input_horizon == HORIZON
    for name in ("four_substance_reactions", "rigid_double_beam", "roll_plane"):
        assert jcalib.models.get(name).input_horizon is None


def _measurements(ts):
    return Measurements(ts, np.full((len(ts), 1), 21.0), output_names=("T_Air",))


HORIZON_ROWS = [  # (name, call, message fragment)
    ("with_times", lambda m: m.with_times([1800.0, HORIZON, 2 * HORIZON]),
     "with_times: the experiment runs to t = 3628800, beyond the input horizon 1814400"),
    ("with_times one second late", lambda m: m.with_times([HORIZON + 1.0]),
     "input horizon 1814400"),
    ("with_experiment", lambda m: m.with_experiment(Experiment([1800.0], t0=0.0, t1=HORIZON + 1800.0)),
     "with_experiment: the experiment runs to t = 1816200, beyond the input horizon 1814400"),
    ("CalibrationProblem", lambda m: CalibrationProblem(m, _measurements([1800.0, 2 * HORIZON]),
                                                        weighting="absolute"),
     "CalibrationProblem: cannot observe the model at the measurement times: with_times: the "
     "experiment runs to t = 3628800, beyond the input horizon 1814400"),
    ("initial-state wrapper", lambda m: with_initial_state_parameters(
        m, [Parameter("T_Air0", 21.0, 15.0, 25.0)]).with_times([2 * HORIZON]),
     "beyond the input horizon 1814400"),
]


@pytest.mark.parametrize("name, call, fragment", HORIZON_ROWS, ids=[r[0] for r in HORIZON_ROWS])
def test_times_beyond_input_horizon_refused(name, call, fragment, office):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        call(office)


def test_times_up_to_the_horizon_accepted(office):
    assert float(office.with_times([1800.0, HORIZON]).experiment.t1) == HORIZON
    problem = CalibrationProblem(office, _measurements([1800.0, HORIZON]), weighting="absolute")
    assert problem.n_observed == 2


def test_inputs_never_extrapolate(office):
    last = np.asarray(office.inputs(HORIZON))
    np.testing.assert_array_equal(last, np.asarray(office.input_table[-1]))
    for t in (HORIZON + 900.0, 2 * HORIZON):
        np.testing.assert_array_equal(np.asarray(office.inputs(t)), last)
    np.testing.assert_array_equal(np.asarray(office.inputs(-900.0)), np.asarray(office.inputs(0.0)))


SOLVER_ROWS = [  # (settings, message fragment): with_solver checks every value it is given
    ({"max_steps": 0}, "max_steps must be a positive integer (the solver's step budget, e.g. 10_000); got 0"),
    ({"max_steps": -1}, "max_steps must be a positive integer (the solver's step budget, e.g. 10_000); got -1"),
    ({"max_steps": 2.5}, "max_steps must be a positive integer (the solver's step budget, e.g. 10_000); got 2.5"),
    ({"max_steps": True}, "max_steps must be a positive integer (the solver's step budget, e.g. 10_000); got True"),
    ({"solver": "Tsit5"}, "solver must be a diffrax solver instance such as dfx.Tsit5(); got 'Tsit5' (str)"),
    ({"solver": dfx.Tsit5}, "solver must be a diffrax solver instance such as dfx.Tsit5(); got the class Tsit5"),
    ({"dt0": -1.0}, "dt0 must be None (the controller chooses the first step) or a positive finite number; got -1.0"),
    ({"dt0": float("inf")}, "dt0 must be None (the controller chooses the first step) or a positive finite number; "
                            "got inf"),
    ({"controller": dfx.Tsit5()}, "controller must be a diffrax step-size controller instance such as "
                                  "dfx.PIDController(rtol=1e-8, atol=1e-10); got Tsit5() (Tsit5)"),
    ({"controller": "pid"}, "controller must be a diffrax step-size controller instance"),
    ({"adjoint": dfx.Tsit5()}, "adjoint must be a diffrax adjoint instance such as dfx.RecursiveCheckpointAdjoint(); "
                               "got Tsit5() (Tsit5)"),
]


@pytest.mark.parametrize("settings, fragment", SOLVER_ROWS, ids=[repr(s) for s, _ in SOLVER_ROWS])
def test_with_solver_refuses_bad_values(settings, fragment, model):
    with pytest.raises(ValueError, match="^with_solver\\(\\): " + re.escape(fragment)):
        model.with_solver(**settings)


def test_with_solver_accepts_good_values(model):
    changed = model.with_solver(solver=dfx.Kvaerno5(), controller=dfx.PIDController(rtol=1e-6, atol=1e-8),
                                adjoint=dfx.ForwardMode(), dt0=0.5, max_steps=np.int64(500))
    assert isinstance(changed.solver, dfx.Kvaerno5) and changed.dt0 == 0.5 and changed.max_steps == 500
    assert model.with_solver(dt0=None).dt0 is None


def test_synthetic_measurements_take_a_dict_of_parameter_values(model):
    key = jax.random.key(0)
    by_name = jcalib.synthetic_measurements(key, model, {"kab": 2e-4}, sigma=0.05)
    by_vector = jcalib.synthetic_measurements(key, model, np.array([2e-4, *model.parameters.nominal[1:]]), sigma=0.05)
    np.testing.assert_array_equal(by_name.values, by_vector.values)  # the others at nominal


@pytest.mark.parametrize("theta, fragment", [
    ({"kxy": 1e-4}, "synthetic_measurements: theta: unknown parameter 'kxy'; known: 'kab', 'kac', 'kad'"),
    ([1e-4, 1e-5], r"synthetic_measurements: theta must have shape \(n_params,\) with n_params=3"),
])
def test_synthetic_measurements_refuse_bad_theta(theta, fragment, model):
    with pytest.raises(ValueError, match=fragment):
        jcalib.synthetic_measurements(jax.random.key(0), model, theta, sigma=0.05)
