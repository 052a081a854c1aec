"""least_squares_trf and levenberg_marquardt_batch on four_substance_reactions."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

import jcalib
from jcalib.algorithm import Algorithm, run, vmap_chains
from jcalib.estimation.least_squares import (
    MultistartResult,
    least_squares_trf,
    levenberg_marquardt_algorithm,
    levenberg_marquardt_batch,
)
from jcalib.estimation.result import EstimationResult

KAB_OUTSIDE = 2e-3  # true kab of the "outside" data: twice the upper bound 1e-3


@pytest.fixture(scope="module")
def problem(model, theta, clean):
    """Noise-free data at the nominal parameters, relative weighting, all three free."""
    data = jcalib.Measurements(np.asarray(model.ts), clean, output_names=model.output_names)
    return jcalib.CalibrationProblem(model, data)


@pytest.fixture(scope="module")
def problem_outside(model, theta):
    """Data simulated with kab above its upper bound: the box optimum has kab on the bound."""
    truth = np.asarray(theta).copy()
    truth[0] = KAB_OUTSIDE
    values = np.asarray(model.with_bounds_check(False).simulate(jnp.asarray(truth)))
    data = jcalib.Measurements(np.asarray(model.ts), values, output_names=model.output_names)
    return jcalib.CalibrationProblem(model, data)


@pytest.fixture(scope="module")
def noisy_problem(model, theta):
    """1 % multiplicative noise; stored without sigma, so every four_substance problem of these
    tests has one pytree structure and the vmapped LM program compiles once per batch size."""
    values = jcalib.synthetic_measurements(jax.random.key(0), model, theta, sigma=0.01).values
    data = jcalib.Measurements(np.asarray(model.ts), values, output_names=model.output_names)
    return jcalib.CalibrationProblem(model, data)


@pytest.fixture(scope="module")
def trf_10x(problem, theta):
    return least_squares_trf(problem, np.asarray(theta) / 10.0)


def assert_inside(problem, thetas):
    thetas = np.atleast_2d(np.asarray(thetas))
    space = problem.space
    assert np.all(thetas >= space.lower) and np.all(thetas <= space.upper), thetas


# --- trust-region reflective -----------------------------------------------------------------
def test_trf_recovers_true_parameters_from_a_start_10x_off(trf_10x, theta):
    result = trf_10x
    assert isinstance(result, EstimationResult)
    assert result.method == "trf" and result.converged, result.reason
    np.testing.assert_allclose(result.theta, np.asarray(theta), rtol=1e-6)
    assert result.loss < 1e-20
    assert result.names == ("kab", "kac", "kad")


def test_trf_counts_simulations_and_jacobians_separately(trf_10x):
    result = trf_10x
    # one Jacobian at the start and after every accepted step
    assert result.n_jacobians == len(result.history["loss"]) == result.n_steps + 1
    assert result.n_simulations >= result.n_jacobians
    assert result.extra["nfev"] <= result.n_simulations <= result.extra["nfev"] + 1
    assert result.extra["n_failed_solves"] == 0
    assert result.singular_values.shape == (3,)
    assert result.condition_number == pytest.approx(result.singular_values[0] / result.singular_values[-1])
    json.dumps(result.to_dict())


def test_trf_loss_history_decreases(trf_10x):
    losses = np.asarray(trf_10x.history["loss"])
    assert np.all(np.diff(losses) <= 1e-12 * losses[:-1])


def test_trf_respects_bounds_when_the_optimum_lies_outside(problem_outside, theta):
    result = least_squares_trf(problem_outside, np.asarray(theta))
    upper = problem_outside.space.upper
    assert result.theta[0] == pytest.approx(upper[0], rel=1e-9)
    assert result.extra["max_bound_violation"] == 0.0
    assert_inside(problem_outside, result.theta)
    assert_inside(problem_outside, result.history["theta"])


def test_trf_finite_difference_baseline_counts_every_simulation(problem, theta):
    result = least_squares_trf(problem, np.asarray(theta) / 3.0, jac="2-point")
    assert result.n_jacobians == 0
    assert result.n_steps == result.extra["njev"] - 1 > 0
    # every 2-point Jacobian costs n_free simulations on top of scipy's nfev
    assert result.n_simulations >= result.extra["nfev"] + problem.n_free
    np.testing.assert_allclose(result.theta, np.asarray(theta), rtol=1e-5)


def test_trf_accepts_a_dict_start(problem, theta):
    result = least_squares_trf(problem, {"kab": 3e-5}, max_steps=3)
    assert result.history["theta"][0][0] == pytest.approx(3e-5)


@pytest.mark.parametrize("theta0, match", [
    ([5e-3, 1e-5, 5e-5], r"least_squares_trf: theta0 is outside the bounds: kab = 0\.005 is above the upper bound"),
    ([1e-4, 1e-5], r"theta0 must have shape \(n_free,\) = \(3,\)"),
    ([np.nan, 1e-5, 5e-5], r"theta0 must be finite"),
    ({"kda": 1.0}, r"theta0 names \['kda'\] that are not free parameters"),
])
def test_trf_bad_start_raises(problem, theta0, match):
    with pytest.raises(ValueError, match=match):
        least_squares_trf(problem, theta0)


def test_trf_unknown_jacobian_raises(problem):
    with pytest.raises(ValueError, match=r"jac must be one of \('autodiff', '2-point', '3-point'\)"):
        least_squares_trf(problem, jac="fd")


def test_trf_plateau_stop_ends_the_full_run_at_the_first_step_the_rule_holds(noisy_problem, theta):
    start = np.asarray(theta) / 10.0
    full = least_squares_trf(noisy_problem, start)
    window, rtol = 2, 0.1  # the loss falls to the noise floor in 5 steps, then by 5 % in the 6th
    stopped = least_squares_trf(noisy_problem, start, plateau_window=window, plateau_rtol=rtol)
    losses = np.asarray(full.history["loss"])
    # the first accepted step k >= window with loss[k - window] - loss[k] <= rtol loss[k - window]
    holds = [k for k in range(window, losses.size) if losses[k - window] - losses[k] <= rtol * losses[k - window]]
    assert holds and holds[0] < full.n_steps  # the plateau comes before scipy's own stop on this problem
    k = holds[0]
    assert stopped.n_steps == k and stopped.converged and stopped.extra["status"] == 5
    assert stopped.reason.startswith(f"converged: plateau: the last {window} accepted steps")
    # the same iterates as the full run up to the stop (scipy is deterministic), and the estimate is the k-th
    np.testing.assert_array_equal(stopped.history["loss"], losses[: k + 1])
    np.testing.assert_array_equal(stopped.theta_internal, noisy_problem.to_internal(
        jnp.asarray(full.history["theta"][k])))
    assert stopped.loss == losses[k] >= full.loss
    # one Jacobian at the start and after every accepted step, the stop point's included (its singular values)
    assert stopped.n_jacobians == k + 1 < full.n_jacobians and stopped.singular_values.shape == (3,)
    assert stopped.n_simulations < full.n_simulations


def test_trf_absolute_plateau_stops_at_the_first_small_cost_decrease(noisy_problem, theta):
    """plateau_window=1, plateau_rtol=0, plateau_atol=a (Fides's stop): the first accepted step
    that lowered the cost 0.5 sum(r^2) by at most a."""
    start = np.asarray(theta) / 10.0
    full = least_squares_trf(noisy_problem, start)
    losses = np.asarray(full.history["loss"])
    n_residuals = np.asarray(noisy_problem.residuals(noisy_problem.to_internal(jnp.asarray(start)))).size
    drops = 0.5 * n_residuals * -np.diff(losses)  # cost decrease of accepted step k (k = 1, 2, ...)
    atol = float(np.sort(drops)[len(drops) // 2])  # a threshold some step before the end meets
    stopped = least_squares_trf(noisy_problem, start, plateau_window=1, plateau_rtol=0.0, plateau_atol=atol)
    k = int(np.flatnonzero(drops <= atol)[0]) + 1
    assert k < full.n_steps and stopped.n_steps == k and stopped.converged and stopped.extra["status"] == 5
    assert "the cost by" in stopped.reason and f"plateau_atol = {atol:g}" in stopped.reason
    np.testing.assert_array_equal(stopped.history["loss"], losses[: k + 1])


@pytest.mark.parametrize("options, match", [
    ({"plateau_window": 0}, r"plateau_window must be a positive integer \(accepted steps\) or None; got 0"),
    ({"plateau_window": 1, "plateau_atol": -1.0}, r"plateau_atol must be a finite number >= 0 \(cost units\); "
                                                  r"got -1.0"),
    ({"plateau_window": 1, "plateau_atol": np.nan}, r"plateau_atol must be a finite number >= 0"),
    ({"plateau_window": 3, "jac": "2-point"}, r"plateau_window needs jac='autodiff'"),
    ({"plateau_window": 3, "plateau_rtol": 1.5}, r"plateau_rtol must be a number in \[0, 1\); got 1.5"),
])
def test_trf_bad_plateau_options_raise(problem, options, match):
    with pytest.raises(ValueError, match=match):
        least_squares_trf(problem, **options)


@pytest.mark.slow
def test_trf_failed_solve_at_the_start_raises(problem):
    failing = jcalib.CalibrationProblem(problem.model.with_solver(max_steps=2), problem.measurements)
    with pytest.raises(ValueError, match=r"least_squares_trf: the simulation at theta0 = .* failed \(MAX_STEPS: "
                                         r"maximum number of solver steps reached\)"):
        least_squares_trf(failing)


# --- Levenberg-Marquardt, vmapped ----------------------------------------------------------
@pytest.fixture(scope="module")
def starts(problem):
    return np.asarray(problem.space.sample(jax.random.key(7), 4, "lhs"))


@pytest.fixture(scope="module")
def lm_batch(problem_outside, starts):
    return levenberg_marquardt_batch(problem_outside, starts)


@pytest.mark.slow
def test_lm_batch_vmap_equals_loop(noisy_problem, starts):
    batched = levenberg_marquardt_batch(noisy_problem, starts)
    looped = levenberg_marquardt_batch(noisy_problem, starts, chunk_size=1)
    assert looped.extra["chunk_size"] == 1 and batched.extra["chunk_size"] == 4
    # Batched and single solves round differently (batched linear algebra), so they agree to
    # the solver's tolerance (rtol=1e-8 on the transformed u), not bitwise. Near the optimum
    # the trust-region ratio is rounding noise, so the number of *rejected* steps before the
    # Cauchy test passes can differ; the accepted steps agree.
    for a, b in zip(batched.results, looped.results):
        assert a.converged and b.converged, (a.reason, b.reason)
        np.testing.assert_allclose(a.theta_internal, b.theta_internal, rtol=1e-8)
        assert a.loss == pytest.approx(b.loss, rel=1e-12)
        assert abs(a.extra["n_accepted_steps"] - b.extra["n_accepted_steps"]) <= 1
    # within a batch the starts are independent: a start gives bitwise the same result
    # whatever its batch-mates are
    alone = levenberg_marquardt_batch(noisy_problem, np.tile(starts[1], (4, 1))).results[0]
    np.testing.assert_array_equal(alone.theta_internal, batched.results[1].theta_internal)
    assert alone.n_steps == batched.results[1].n_steps


@pytest.mark.slow
def test_lm_batch_pads_the_last_chunk(noisy_problem, starts):
    five = np.concatenate([starts, starts[:1]])
    chunked = levenberg_marquardt_batch(noisy_problem, five, chunk_size=4)  # 4 + 1 padded to 4
    whole = levenberg_marquardt_batch(noisy_problem, starts)
    assert chunked.n_starts == 5 and chunked.starts.shape == (5, 3)
    for a, b in zip(chunked.results[:4], whole.results):
        np.testing.assert_array_equal(a.theta_internal, b.theta_internal)
    np.testing.assert_array_equal(chunked.results[4].theta_internal, whole.results[0].theta_internal)


@pytest.mark.slow
def test_lm_batch_finds_the_box_optimum_within_bounds(problem_outside, lm_batch, theta):
    assert isinstance(lm_batch, MultistartResult) and lm_batch.n_starts == 4
    reference = least_squares_trf(problem_outside, np.asarray(theta))
    best = lm_batch.best
    assert best.method == "lm" and best.converged, best.reason
    assert best.loss == pytest.approx(reference.loss, rel=1e-6)
    np.testing.assert_allclose(best.theta, reference.theta, rtol=1e-4)
    for result in lm_batch.results:
        assert_inside(problem_outside, result.theta)
    assert_inside(problem_outside, lm_batch.starts)


@pytest.mark.slow
def test_lm_batch_summary(lm_batch):
    losses = lm_batch.losses
    assert np.array_equal(lm_batch.sorted_losses, np.sort(losses))
    assert lm_batch.best_index == int(np.argmin(losses))
    assert lm_batch.n_simulations == sum(r.n_simulations for r in lm_batch.results) > 0
    assert lm_batch.n_jacobians == lm_batch.n_simulations  # one linearisation per step
    assert lm_batch.extra["max_steps_taken"] == max(r.n_steps for r in lm_batch.results)
    summary = json.loads(json.dumps(lm_batch.to_dict()))
    assert len(summary["results"]) == 4 and "results" not in lm_batch.to_dict(include_results=False)


def test_lm_batch_start_outside_bounds_raises(problem):
    theta0 = np.array([[1e-4, 1e-5, 5e-5], [1e-4, 1e-5, 5e-4]])
    with pytest.raises(ValueError, match=r"levenberg_marquardt_batch: theta0\[1\] is outside the bounds: "
                                         r"kad = 0\.0005 is above the upper bound of \[1e-06, 0\.0001\]"):
        levenberg_marquardt_batch(problem, theta0)


def test_lm_batch_bad_arguments_raise(problem, theta):
    with pytest.raises(ValueError, match=r"theta0 must be \(n_starts, n_free=3\); got shape \(3,\)"):
        levenberg_marquardt_batch(problem, np.asarray(theta))
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        levenberg_marquardt_batch(problem, np.asarray(theta)[None], max_steps=0)
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        levenberg_marquardt_batch(problem, np.asarray(theta)[None], chunk_size=0)


@pytest.mark.slow
def test_lm_batch_failed_solves_get_infinite_loss(problem, starts):
    failing = jcalib.CalibrationProblem(problem.model.with_solver(max_steps=2), problem.measurements)
    result = levenberg_marquardt_batch(failing, starts[:2])
    for r in result.results:
        assert r.loss == np.inf and not r.converged and "failed (MAX_STEPS" in r.reason


@pytest.mark.slow
def test_lm_algorithm_driven_by_run_is_optimistix_least_squares():
    """`levenberg_marquardt_algorithm` driven by `jcalib.algorithm.run` takes optimistix's own
    iterates: Rosenbrock's residuals from (-1.2, 1), the same point, step count and residual
    as ``optx.least_squares``; vmapped over two starts, each start stops on its own."""
    def residual_fn(u):
        return jnp.stack([1.0 - u[0], 10.0 * (u[1] - u[0] ** 2)])

    algorithm = levenberg_marquardt_algorithm(residual_fn, 2, rtol=1e-8, atol=1e-10)
    assert isinstance(algorithm, Algorithm) and not algorithm.stochastic
    starts = jnp.array([[-1.2, 1.0], [0.5, 0.5]])
    batch = vmap_chains(algorithm)
    out = run(None, batch, batch.init(starts), 200, stop=lambda s: jnp.all(s.done))
    assert out.status == "converged" and out.n_steps == int(jnp.max(out.state.n_steps))
    solver = optx.LevenbergMarquardt(rtol=1e-8, atol=1e-10)
    for i in range(2):
        sol = optx.least_squares(lambda u, args: residual_fn(u), solver, starts[i], max_steps=200)
        np.testing.assert_allclose(out.state.u[i], sol.value, rtol=1e-14, atol=1e-15)
        assert int(out.state.n_steps[i]) == int(sol.stats["num_steps"])
        np.testing.assert_allclose(out.state.solver_state.f_info.residual[i], sol.state.f_info.residual, atol=1e-15)
    assert int(out.state.n_steps[0]) != int(out.state.n_steps[1])  # the faster start was frozen
    np.testing.assert_allclose(out.state.u, 1.0, rtol=1e-8)


def test_trf_stop_rules_are_the_library_s():
    """`trf_stop_options`: scipy's tests add nothing; Fides's default is a one-step plateau of
    the cost at fatol + frtol |f| (fides 0.8.0: 1e-8 each); an unknown rule is refused."""
    from jcalib.estimation import STOP_RULES, trf_stop_options

    assert STOP_RULES == ("scipy", "fides")
    assert trf_stop_options("scipy", 123.0) == {}
    assert trf_stop_options("fides", -250.0) == {"plateau_window": 1, "plateau_rtol": 0.0,
                                                 "plateau_atol": 1e-8 + 1e-8 * 250.0}
    with pytest.raises(ValueError, match="stop must be one of"):
        trf_stop_options("pypesto")
