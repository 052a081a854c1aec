"""jcalib.benchmark.cost: the counts match known call counts (eager, compiled, in loops, vmapped,
differentiated), the numbers are the problem's own, and budgets stop a run exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.benchmark import CostCounter, CountedProblem, get_problem
from jcalib.estimation.least_squares import least_squares_trf
from jcalib.problems import residual_offset

PROBLEM = get_problem("rosenbrock-4").build()
COUNTED = CountedProblem(PROBLEM)
Z = PROBLEM.to_internal(jnp.array([0.5, -0.3, 0.8, 1.2]))
N_FREE, N_OBSERVED = PROBLEM.n_free, PROBLEM.n_observed


def _loop(n: int):
    """``n`` log-likelihood evaluations in one compiled loop."""
    return jax.jit(lambda z: jax.lax.fori_loop(0, n, lambda i, s: s + COUNTED.log_likelihood(z + 1e-3 * i), 0.0))


def test_each_kind_of_call_is_counted_as_often_as_it_is_made():
    with CostCounter(n_free=N_FREE) as counter:
        for _ in range(7):
            COUNTED.log_likelihood(Z)
        assert counter.counts["objective"] == 7
        _loop(5)(Z).block_until_ready()
        assert counter.counts["objective"] == 12
        for _ in range(3):
            jax.grad(lambda z: COUNTED.log_likelihood(z))(Z)
        assert (counter.counts["objective"], counter.counts["gradients"]) == (15, 3)
        COUNTED.jacobian(Z)
        jax.jacfwd(lambda z: COUNTED.forward_mode().residuals(z))(Z)
        jax.vmap(lambda z: COUNTED.log_posterior(z))(jnp.stack([Z, Z, Z]))
        COUNTED.loss(Z)
        jax.vmap(COUNTED.jacobian)(jnp.stack([Z, Z]))  # each lane's Jacobian
    expected = {"objective": 18, "residuals": 2, "gradients": 3, "jvps": 4 * N_FREE, "vjps": 0, "jacobians": 3,
                "jacobian_entries": 3 * N_OBSERVED * N_FREE, "simulations": 0, "solver_steps": 0}
    assert counter.counts == expected
    assert counter.cost()["evaluations"] == 18 + 2 + 3 and counter.cost()["gradients"] == 3 + 4


def test_simulations_are_counted_per_lane_and_stopped_by_an_evaluations_budget():
    from jcalib.benchmark import CountedSimulator
    from jcalib.nn.data import simulate_training_set

    simulator = CountedSimulator(PROBLEM.model)
    thetas = jnp.stack([jnp.full(N_FREE, 0.1 * i) for i in range(6)])
    with CostCounter(n_free=N_FREE) as counter:
        out = jax.jit(jax.vmap(simulator.simulate))(thetas)
        simulate_training_set(jax.random.key(0), simulator, 9)
    np.testing.assert_array_equal(out, jax.jit(jax.vmap(PROBLEM.model.simulate))(thetas))  # the simulator's own
    assert counter.counts["simulations"] == 15 and counter.cost()["evaluations"] == 15
    with CostCounter({"evaluations": 4}, n_free=N_FREE) as counter, pytest.raises(Exception, match="budget"):
        jax.vmap(simulator.simulate)(thetas).block_until_ready()
    assert counter.exhausted == "evaluations" and counter.counts["simulations"] == 4


def test_the_counted_problem_gives_the_problem_s_own_numbers():
    forward = COUNTED.forward_mode()
    with CostCounter():
        pairs = [(COUNTED.log_likelihood(Z), PROBLEM.log_likelihood(Z)),
                 (jax.grad(lambda z: COUNTED.log_posterior(z))(Z), jax.grad(lambda z: PROBLEM.log_posterior(z))(Z)),
                 (COUNTED.jacobian(Z), PROBLEM.jacobian(Z)),
                 (jax.jacfwd(lambda z: forward.residuals(z))(Z), jax.jacfwd(lambda z: PROBLEM.residuals(z))(Z)),
                 (jax.jacrev(lambda z: COUNTED.residuals(z))(Z), jax.jacfwd(lambda z: PROBLEM.residuals(z))(Z))]
    for counted, plain in pairs:
        np.testing.assert_allclose(np.asarray(counted), np.asarray(plain), rtol=1e-14, atol=1e-14)


def test_the_counts_agree_with_what_trf_reports_of_itself():
    with CostCounter(n_free=N_FREE) as counter:
        result = least_squares_trf(COUNTED, Z, coordinates="internal")
    assert counter.counts["jacobians"] == result.n_jacobians > 0
    assert counter.counts["residuals"] == result.n_simulations > 0


@pytest.mark.parametrize("unit, limit", [("evaluations", 5), ("gradients", 3)])
def test_a_budget_stops_the_run_at_its_limit_and_nothing_after_it_is_counted(unit, limit):
    value_and_grad = jax.jit(jax.value_and_grad(lambda z: COUNTED.log_likelihood(z)))
    with CostCounter({unit: limit}, n_free=N_FREE) as counter, pytest.raises(Exception, match="budget"):
        for i in range(20):
            value_and_grad(Z + 0.01 * i)[0].block_until_ready() if unit == "gradients" else _loop(20)(Z)
    assert counter.exhausted == unit
    assert counter.cost()[unit] == limit  # every evaluation up to the limit, none after it
    assert counter.trace[-1][0 if unit == "evaluations" else 1] <= limit


def test_the_trace_holds_each_improvement_as_a_negative_log_likelihood():
    points = [Z, Z + 0.2, Z - 0.01, PROBLEM.to_internal(jnp.ones(4))]
    offset = residual_offset(PROBLEM, points)
    with CostCounter(offset=offset, n_free=N_FREE) as counter:
        for z in points:
            COUNTED.residuals(z)
    nll = [-float(PROBLEM.log_likelihood(z)) for z in points]
    best = np.minimum.accumulate(nll)
    improved = [i for i in range(len(nll)) if i == 0 or best[i] < best[i - 1]]
    assert [t[0] for t in counter.trace] == [i + 1.0 for i in improved]
    np.testing.assert_allclose([t[3] for t in counter.trace], [nll[i] for i in improved], rtol=1e-12)


def test_a_method_asking_for_the_nominal_values_gets_the_run_s_start():
    """A PEtab problem's nominal values are its published optimum: a benchmarked method must not see them."""
    counted = CountedProblem(PROBLEM, Z)
    np.testing.assert_array_equal(counted.initial_internal(), Z)
    np.testing.assert_array_equal(counted.forward_mode().initial_internal(), Z)
    np.testing.assert_array_equal(COUNTED.initial_internal(), PROBLEM.initial_internal())


def test_compile_events_are_counted_as_their_union(monkeypatch):
    """Nested and overlapping compile events (tracing inside lowering inside compiling) count once;
    a fake clock, so nothing here depends on timing."""
    import jcalib.benchmark.cost as cost

    clock = [10.0]
    monkeypatch.setattr(cost.time, "perf_counter", lambda: clock[0])
    counter = CostCounter()
    counter._wall0 = 0.0
    counter.add_compile(4.0)  # [6, 10]
    counter.add_compile(1.0)  # [9, 10], inside it
    clock[0] = 12.0
    counter.add_compile(3.0)  # [9, 12], overlapping: the union is [6, 12]
    assert counter.compile_s == 6.0


def test_a_ctrl_c_in_a_callback_is_remembered_as_one():
    with CostCounter() as counter:
        def interrupt(*_):
            raise KeyboardInterrupt
        original = counter._record
        counter._record = interrupt
        with pytest.raises(Exception, match="KeyboardInterrupt"):  # JAX's runtime error, naming it
            _loop(3)(Z).block_until_ready()
        counter._record = original
    assert counter.interrupted


def test_solver_steps_are_the_solver_s_own_count():
    """Each evaluation of an ODE problem counts its solve's steps, as diffrax reports them; the
    same problem evaluated outside a counted one reports nothing."""
    problem = get_problem("linear-gaussian-ode").build()
    z = problem.initial_internal()
    steps = int(problem.model.solve(problem.to_physical(z)).stats["num_steps"])
    assert steps >= 1
    with CostCounter(n_free=problem.n_free) as counter:
        problem.log_likelihood(z)  # not counted
        CountedProblem(problem).log_likelihood(z)
        jax.grad(CountedProblem(problem).log_likelihood)(z)
        CountedProblem(problem).jacobian(z)
    assert counter.counts["solver_steps"] == 3 * steps and counter.counts["objective"] == 2


def test_the_trace_s_seconds_never_go_back():
    """Seconds are wall time less the estimated counting time, which can outgrow the time passed
    (callbacks faster than the estimate): the trace keeps them cumulative."""
    with CostCounter(n_free=N_FREE) as counter:
        counter.record("objective", np.array([-5.0]))
        counter._dispatch_s = 1e3  # the estimate now exceeds all the time passed
        counter.record("objective", np.array([-1.0]))
    seconds = [entry[2] for entry in counter.trace]
    assert len(seconds) == 2 and seconds == sorted(seconds)  # by construction: the same on any machine


def test_counters_do_not_nest_and_bad_budgets_are_refused():
    with CostCounter(), pytest.raises(RuntimeError, match="another counter is active"):
        CostCounter().__enter__()
    for budget in ({"steps": 3}, {"evaluations": 0}, {"seconds": float("nan")}, [("evaluations", 3)]):
        with pytest.raises(ValueError, match="budget must be"):
            CostCounter(budget)
