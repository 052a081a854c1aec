"""jcalib.estimation.trust_region against Fides itself (fides 0.8.0, run in the test on the same
objective): the same points tried, iteration by iteration, the same result and exit flag; and the
pieces against their definitions (the trust-region subproblem, jit/vmap)."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.algorithm import run, vmap_chains
from jcalib.estimation import multistart
from jcalib.estimation.trust_region import (
    NOMINAL_ITERATIONS,
    TrustRegionOptions,
    _least_squares,
    _one_lane_cheaper,
    _run_lanes,
    _solve_nd,
    scipy_stop_options,
    trust_region_algorithm,
    trust_region_batch,
)
from jcalib.problems import CalibrationProblem

fides = pytest.importorskip("fides")


def _rosenbrock(x, xp=jnp):
    """Extended Rosenbrock residuals, ``(2 (n - 1),)``: ``10 (x_{i+1} - x_i^2)`` and ``1 - x_i``."""
    return xp.concatenate([10 * (x[1:] - x[:-1] ** 2), 1 - x[:-1]])


def _exponentials(x, xp=jnp):
    """A fit that keeps large residuals at its optimum (two decays against data no two decays
    reproduce), where ``J^T J`` is a poor Hessian and Fides's hybrid scheme switches to BFGS."""
    t = xp.linspace(0.0, 4.0, 12)
    data = xp.asarray([2.0, 0.4, 1.7, 0.3, 1.1, 0.9, 0.2, 0.8, 0.1, 0.6, 0.05, 0.3])
    return x[0] * xp.exp(-x[1] * t) + x[2] * xp.exp(-x[3] * t) - data


def _objective(residuals):
    def objective(x):
        r, j = residuals(x), jax.jacfwd(residuals)(x)
        return 0.5 * r @ r, j.T @ r, j.T @ j
    return objective


def _fides(residuals, lower, upper, x0, switch_iteration):
    """Fides on the same objective (numpy): every point it evaluates and its result."""
    objective = jax.jit(_objective(residuals))
    points = []

    def fun(x):
        points.append(np.array(x))
        f, g, h = objective(jnp.asarray(x))
        return float(f), np.asarray(g), np.asarray(h)

    opt = fides.Optimizer(fun, ub=np.asarray(upper, float), lb=np.asarray(lower, float), verbose=logging.ERROR,
                          hessian_update=fides.HybridFixed(switch_iteration=switch_iteration))
    opt.minimize(np.asarray(x0, float))
    return opt, np.array(points[1:])


CASES = {  # residuals, lower, upper, x0 (and the switch to BFGS after 20 iterations without a radius update)
    "rosenbrock, no bound active": (_rosenbrock, [-2.0, -2.0], [2.0, 2.0], [-1.2, 1.0]),
    "rosenbrock, optimum on a bound": (_rosenbrock, [-2.0, -2.0], [2.0, 0.5], [-1.2, 0.3]),
    "rosenbrock, two bounds": (_rosenbrock, [-2.0, -2.0], [0.5, 0.2], [-1.5, -1.0]),
    "rosenbrock 6-D, bounds cross the valley": (_rosenbrock, [-2.0] * 6, [2.0, 0.7, 2.0, 0.9, 2.0, 2.0],
                                                [-1.0, 0.5, -0.5, 0.2, 1.5, -1.0]),
    "large residuals": (_exponentials, [0.0, 0.0, 0.0, 0.0], [10.0, 10.0, 10.0, 10.0],
                                      [1.0, 0.1, 1.0, 3.0]),
}


@pytest.mark.parametrize("switch_iteration", [20, 2])
@pytest.mark.parametrize("case", CASES)
def test_the_iteration_is_fides_s(case, switch_iteration):
    """Also with the switch to BFGS after two iterations without a radius update (which none of
    the cases reaches with Fides's 20)."""
    residuals, lower, upper, x0 = CASES[case]
    opt, points = _fides(residuals, lower, upper, x0, switch_iteration)
    algorithm = trust_region_algorithm(_objective(residuals), jnp.asarray(lower), jnp.asarray(upper),
                                       TrustRegionOptions(switch_iteration=switch_iteration))
    out = run(None, algorithm, algorithm.init(jnp.asarray(x0)), 1000, stop=lambda s: s.done)
    trial = np.asarray(out.trace.trial)
    assert trial.shape == points.shape  # as many points tried, one per iteration
    np.testing.assert_allclose(trial, points, rtol=1e-8, atol=1e-10)
    assert int(out.state.exitflag) == int(opt.exitflag) and int(out.state.iteration) == opt.iteration
    np.testing.assert_allclose(out.state.x_min, opt.x_min, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(float(out.state.f_min), opt.fval_min, rtol=1e-8, atol=1e-14)
    assert bool(out.state.switched) == opt.hessian_update._switched


@pytest.mark.slow  # 9-16 s of compiling; moved out of make test to keep it under 10 min (2026-12-02)
def test_the_subproblem_solution_is_the_constrained_minimum():
    """Inside, on the boundary (positive definite and indefinite) and the hard case, against a
    fine search over the disc."""
    angles = np.linspace(0, 2 * np.pi, 20001)
    for b, g, delta in [(np.diag([2.0, 1.0]), np.array([1.0, 1.0]), 10.0),
                        (np.diag([2.0, 1.0]), np.array([4.0, 2.0]), 1.0),
                        (np.array([[1.0, 2.0], [2.0, -3.0]]), np.array([0.5, -1.0]), 0.7),
                        (np.diag([-1.0, 2.0]), np.array([0.0, 1.0]), 2.0)]:
        s = np.asarray(_solve_nd(jnp.asarray(b), jnp.asarray(g), delta))
        q = 0.5 * s @ b @ s + g @ s
        assert np.linalg.norm(s) <= delta * (1 + 1e-9)
        radii = np.linspace(0, delta, 401)[:, None, None]
        disc = radii * np.stack([np.cos(angles), np.sin(angles)], axis=-1)[None]
        grid = 0.5 * np.einsum("...i,ij,...j->...", disc, b, disc) + disc @ g
        assert q <= grid.min() + 1e-9


ROSENBROCK_STARTS = np.array([[-1.2, 0.3], [1.5, -1.5], [0.0, 0.0], [-0.5, 0.4], [1.9, 0.1]])


@pytest.fixture(scope="module")
def rosenbrock_batch():
    """Fides's method on the Rosenbrock residuals with the bound x1 <= 0.5: the algorithm, its
    vmapped ``init`` and ``step`` jitted (shared by the lane tests) and the final states of one
    vmapped run from every start of `ROSENBROCK_STARTS`."""
    algorithm = trust_region_algorithm(_objective(_rosenbrock), jnp.array([-2.0, -2.0]), jnp.array([2.0, 0.5]))
    batch = vmap_chains(algorithm)
    out = run(None, batch, batch.init(jnp.asarray(ROSENBROCK_STARTS)), 200, stop=lambda s: jnp.all(s.done))
    return algorithm, jax.jit(batch.init), jax.jit(batch.step), out.state


def test_a_vmapped_batch_gives_each_start_its_own_run(rosenbrock_batch):
    algorithm, init, step, batched = rosenbrock_batch
    starts = ROSENBROCK_STARTS[:3]
    # two lanes, a lane whose start stopped taking the next one (`trust_region_batch(lanes=2)`)
    x_min, _, flags, iterations, _, fims = _run_lanes(init, step, starts, 2, 200)[0]
    gram = jax.jit(lambda x: jax.jacfwd(_rosenbrock)(x).T @ jax.jacfwd(_rosenbrock)(x))
    for i, x0 in enumerate(starts):
        alone = run(None, algorithm, algorithm.init(jnp.asarray(x0)), 200, stop=lambda s: s.done)
        np.testing.assert_allclose(batched.x_min[i], alone.state.x_min, rtol=1e-12)
        assert int(batched.iteration[i]) == int(alone.state.iteration) == iterations[i]
        np.testing.assert_allclose(x_min[i], alone.state.x_min, rtol=1e-12)
        assert flags[i] == int(alone.state.exitflag) > 0
        np.testing.assert_allclose(fims[i], gram(x_min[i]), rtol=1e-12)  # J^T J at the best point, for the result
    assert len(set(iterations)) > 1  # the starts stop at different iterations


def test_one_lane_is_timed_only_where_the_run_outweighs_a_compilation_and_taken_where_cheaper():
    """The rest of the run, 16 starts of ``NOMINAL_ITERATIONS`` at 0.02 s each in the lanes, is
    weighed against a compilation; one lane is timed only where the run is longer, and taken
    where its CPU time per iteration is lower."""
    timed = []

    def one_lane(cpu):
        return lambda: timed.append(cpu) or cpu

    run_s = 16 * NOMINAL_ITERATIONS * 0.02
    assert not _one_lane_cheaper(16, 0.02, run_s + 1.0, one_lane(0.001)) and timed == []
    assert _one_lane_cheaper(16, 0.02, run_s - 1.0, one_lane(0.01)) and timed == [0.01]
    assert not _one_lane_cheaper(16, 0.02, run_s - 1.0, one_lane(0.03)) and timed == [0.01, 0.03]


@pytest.mark.parametrize("switch", [True, False])
def test_starts_measured_alone_or_moved_to_one_lane_mid_run_end_as_in_one_batch(monkeypatch, rosenbrock_batch,
                                                                               switch):
    """Three lanes over five Rosenbrock starts; after two measured iterations each running start
    is stepped alone (the measurement), then the run goes on in one lane (``switch``) or in the
    lanes: the running starts go on from where they were, the others begin later, and every start
    ends where it ends in one vmapped run (each start's own run, above), after as many iterations."""
    import jcalib.estimation.trust_region as tr

    monkeypatch.setattr(tr, "MEASURED_ITERATIONS", 2)
    monkeypatch.setattr(tr, "_one_lane_cheaper",
                        lambda n_left, lanes_cpu, compile_s, one_lane_cpu: one_lane_cpu() >= 0 and switch)
    _, init, step, batched = rosenbrock_batch
    (x_min, _, flags, iterations, *_), interrupted, lanes = _run_lanes(init, step, ROSENBROCK_STARTS, 3, 200,
                                                                      one_lane=True)
    assert not interrupted and lanes == (1 if switch else 3)
    np.testing.assert_allclose(x_min, batched.x_min, rtol=1e-12)
    np.testing.assert_array_equal(iterations, batched.iteration)
    np.testing.assert_array_equal(flags, batched.exitflag)
    assert np.all(flags > 0) and iterations.min() > 3  # every start still ran when measured


def test_a_point_that_cannot_be_evaluated_shrinks_the_region_and_a_bad_start_stops_at_once():
    def objective(x):  # not finite right of x = 0.5
        f, g, h = _objective(_rosenbrock)(x)
        return jnp.where(x[0] > 0.5, jnp.nan, f), g, h

    algorithm = trust_region_algorithm(objective, jnp.array([-2.0, -2.0]), jnp.array([2.0, 2.0]),
                                       TrustRegionOptions(delta_init=10.0))
    out = run(None, algorithm, algorithm.init(jnp.array([-1.2, 1.0])), 300, stop=lambda s: s.done)
    assert np.isfinite(float(out.state.f_min)) and float(out.state.x_min[0]) <= 0.5
    assert not np.all(np.asarray(out.trace.accepted))  # the NaN trials were refused
    bad = algorithm.init(jnp.array([1.0, 1.0]))
    assert int(bad.exitflag) == -3 and bool(bad.done)
    outside = algorithm.init(jnp.array([0.0, 3.0]))
    assert int(outside.exitflag) == -4 and float(outside.f_min) == np.inf


@pytest.fixture(scope="module")
def bounded_linear():
    """The linear case with the bound c <= 0.1 below the unbounded optimum (c = 0.3), and the
    bounded least-squares solution (scipy's lsq_linear)."""
    import dataclasses

    from scipy.optimize import lsq_linear

    from tests.estimation.linear_case import design, linear_problem

    unbounded, y = linear_problem()
    model = unbounded.model
    model = dataclasses.replace(model, parameters=model.parameters.replace("c", upper=0.1))
    problem = CalibrationProblem(model, unbounded.measurements, weighting="absolute")
    lower, upper = model.parameters.lower, model.parameters.upper
    return problem, lsq_linear(design(), y, bounds=(lower, upper), tol=1e-14).x


@pytest.mark.slow  # 16-19 s of compiling; the fast tier reaches a bound on Rosenbrock (against Fides, above)
def test_a_multistart_reaches_an_optimum_on_a_bound(bounded_linear):
    """The sine transform of the vmapped Levenberg-Marquardt reaches a bound only asymptotically
    (Boehm 2014: 0 of 24); Fides's reflective steps reach it, here from every start, with Fides's
    own iterations and exit flag (two starts end on the radius test at the optimum, as in Fides)."""
    problem, reference = bounded_linear
    result = multistart(jax.random.key(0), problem, 4, "fides", "uniform")
    assert result.method == "fides" and result.extra["status"] == "completed"
    objective = jax.jit(_least_squares(problem.forward_mode(), 0.0))
    for theta0, r in zip(result.starts, result.results):
        np.testing.assert_allclose(r.theta, reference, rtol=1e-9, atol=1e-9)
        opt = fides.Optimizer(lambda x: tuple(f(a) for f, a in zip((float, np.asarray, np.asarray),
                                                                  objective(jnp.asarray(x)))),
                              ub=problem.space.upper_internal, lb=problem.space.lower_internal,
                              verbose=logging.ERROR, hessian_update=fides.HybridFixed())
        opt.minimize(problem.to_internal(jnp.asarray(theta0)))
        assert (r.extra["exitflag"], r.n_steps) == (int(opt.exitflag), opt.iteration)
        assert r.converged == (opt.exitflag > 0) and r.n_simulations == r.n_steps + 1 == r.n_jacobians
    assert reference[2] == pytest.approx(0.1)  # the bound is active
    by_scipy = multistart(jax.random.key(0), problem, 4, "fides", "uniform", stop="scipy")  # scipy's tests
    assert by_scipy.extra["objective_offset"] == 0.0  # ftol is relative to the cost |r|^2 / 2
    for r in by_scipy.results:
        assert r.converged and r.extra["exitflag"] in (1, 2, 3)
        np.testing.assert_allclose(r.theta, reference, rtol=1e-7, atol=1e-7)


def test_the_batch_refuses_bad_starts_and_budgets(bounded_linear):
    problem, _ = bounded_linear
    with pytest.raises(ValueError, match="n_starts"):
        trust_region_batch(problem, np.zeros(3))
    with pytest.raises(ValueError, match="max_steps"):
        trust_region_batch(problem, np.zeros((1, 3)), max_steps=0)
    with pytest.raises(ValueError, match="lanes"):
        trust_region_batch(problem, np.zeros((1, 3)), lanes=0)
    with pytest.raises(ValueError, match="outside|bounds"):
        trust_region_batch(problem, np.array([[0.0, 0.0, 5.0]]))
    with pytest.raises(ValueError, match="stop must be one of"):
        trust_region_batch(problem, np.zeros((1, 3)), stop="plateau")


@pytest.mark.parametrize("rule, flag", [("ftol", 1), ("xtol", 2), ("gtol", 3)])
def test_scipy_s_tests_stop_the_run_where_scipy_s_definitions_first_hold(rule, flag):
    """`scipy_stop_options` with one of scipy's tests on (tolerance 1e-4, the others off), on the
    Rosenbrock residuals with the optimum on a bound (the Coleman-Li scaling then matters): the run
    stops with that test's exit flag at the first iteration where scipy's own definition holds
    (``scipy.optimize._lsq``'s ``check_termination`` and ``CL_scaling_vector``), and not before."""
    from scipy.optimize._lsq.common import CL_scaling_vector

    residuals, lower, upper, x0 = CASES["rosenbrock, optimum on a bound"]
    lower, upper = np.asarray(lower), np.asarray(upper)
    tolerances = {"ftol": 0.0, "xtol": 0.0, "gtol": 0.0} | {rule: 1e-4}
    objective = jax.jit(_objective(residuals))
    algorithm = trust_region_algorithm(objective, lower, upper, scipy_stop_options(**tolerances))
    state = algorithm.init(jnp.asarray(x0))
    out = run(None, algorithm, state, 1000, stop=lambda s: s.done)
    assert int(out.state.exitflag) == flag
    x, f = np.asarray(state.x), float(state.f)
    holds = []
    for k, (trial, ratio, accepted) in enumerate(zip(*(np.asarray(a) for a in (out.trace.trial, out.trace.ratio,
                                                                               out.trace.accepted)))):
        f_new, g_new, _ = (np.asarray(v) for v in objective(jnp.asarray(trial)))
        g = np.asarray(objective(jnp.asarray(x))[1])
        step = (trial - x) / np.sqrt(np.abs(CL_scaling_vector(x, g, lower, upper)[0]))  # Fides's scaled step
        holds.append({"ftol": ratio > 0.25 and f - f_new < 1e-4 * f,
                      "xtol": k > 0 and np.linalg.norm(step) < 1e-4 * (1e-4 + np.linalg.norm(x)),
                      "gtol": np.max(np.abs(CL_scaling_vector(trial, g_new, lower, upper)[0] * g_new)) < 1e-4}[rule])
        if accepted:
            x, f = trial, float(f_new)
    assert holds[-1] and not any(holds[:-1]) and len(holds) > 5


def test_the_objective_is_the_negative_log_likelihood_only_where_the_residuals_are_the_likelihood_s():
    """``c`` of ``f = |r|^2 / 2 + c``: the constant of a problem whose residuals are divided by its
    noise level; 0 for the same data fitted by absolute residuals (not divided by sigma = 0.5),
    where a ``c`` taken at one start would differ at every other (and the result would depend on
    the order of the starts)."""
    from jcalib.benchmark import get_problem

    weighted = get_problem("gaussian-2").build()
    starts = np.asarray(weighted.space.sample(jax.random.key(0), 3, "uniform"))
    result = trust_region_batch(weighted, starts, lanes=1)
    z = jnp.asarray(starts[1])
    r = np.asarray(weighted.residuals(z))
    assert result.extra["objective_offset"] == pytest.approx(-float(weighted.log_likelihood(z)) - 0.5 * r @ r,
                                                              rel=1e-12)
    absolute = CalibrationProblem(weighted.model, weighted.measurements, weighting="absolute")
    by_order = [trust_region_batch(absolute, starts[order], lanes=1) for order in ([0, 1, 2], [2, 1, 0])]
    assert by_order[0].extra["objective_offset"] == by_order[1].extra["objective_offset"] == 0.0
    for i, j in enumerate([2, 1, 0]):
        assert by_order[0].results[i].loss == by_order[1].results[j].loss
        assert by_order[0].results[i].n_steps == by_order[1].results[j].n_steps
