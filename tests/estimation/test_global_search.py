"""Global search: differential evolution in JAX, multistart, scipy baselines, bounds."""

import json

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.algorithm import run
from jcalib.estimation.global_search import differential_evolution, differential_evolution_algorithm, scipy_minimize
from jcalib.estimation.least_squares import least_squares_trf, levenberg_marquardt_batch
from jcalib.estimation.multistart import multistart, sample_starts
from jcalib.estimation.result import EstimationResult, MultistartResult
from jcalib.model import AbstractModel, Experiment
from jcalib.parameters import Parameter, ParameterSpace


# --- analytic and two-minimum references ---------------------------------------------------
def rastrigin(x):
    """Global minimum 0 at x = 0; the nearest local minima (one coordinate at ±0.995) are ≈ 0.995."""
    return 10.0 * x.shape[0] + jnp.sum(x**2 - 10.0 * jnp.cos(2.0 * jnp.pi * x))


RASTRIGIN_BOUNDS = (-5.12 * np.ones(4), 5.12 * np.ones(4))


class Oscillator(AbstractModel):
    """x'' = -ω² x, x(0) = 0, x'(0) = a ω, so x(t) = a sin(ω t): a frequency fit whose loss in ω
    has a deep global minimum at the true ω and shallow local minima elsewhere."""

    def vector_field(self, t, y, theta):
        return jnp.stack([y[1], -theta[0] ** 2 * y[0]])

    def initial_state(self, theta):
        return jnp.stack([jnp.zeros_like(theta[0]), theta[1] * theta[0]])

    def observe(self, t, y, theta):
        return y[:1]


OMEGA_TRUE, A_TRUE, OMEGA_BAD_START = 2.5, 1.0, 1.0


def _oscillator_problem(space):
    ts = np.linspace(0.25, 10.0, 40)
    model = Oscillator(parameters=space, output_names=("x",), state_names=("x", "v"),
                       experiment=Experiment(ts, t0=0.0, t1=10.0), solver=dfx.Tsit5(),
                       controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
                       adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=4096)
    values = A_TRUE * np.sin(OMEGA_TRUE * ts)[:, None]  # the exact solution
    return jcalib.CalibrationProblem(model, jcalib.Measurements(ts, values, output_names=("x",)),
                                     weighting="absolute")


OSCILLATOR_SPACE = ParameterSpace([Parameter("omega", 2.0, 0.5, 3.5, "1/s"), Parameter("a", 1.0, 0.1, 2.0)])


@pytest.fixture(scope="module")
def oscillator_problem():
    return _oscillator_problem(OSCILLATOR_SPACE)


@pytest.fixture(scope="module")
def problem_outside(model, theta):
    """four_substance_reactions data with kab = 2e-3, above its upper bound 1e-3."""
    truth = np.asarray(theta).copy()
    truth[0] = 2e-3
    values = np.asarray(model.with_bounds_check(False).simulate(jnp.asarray(truth)))
    data = jcalib.Measurements(np.asarray(model.ts), values, output_names=model.output_names)
    return jcalib.CalibrationProblem(model, data)


@pytest.fixture(scope="module")
def noisy_problem(model, theta):
    """1 % multiplicative noise, stored without sigma (one pytree structure for every
    four_substance problem here, so the vmapped LM compiles once)."""
    values = jcalib.synthetic_measurements(jax.random.key(0), model, theta, sigma=0.01).values
    data = jcalib.Measurements(np.asarray(model.ts), values, output_names=model.output_names)
    return jcalib.CalibrationProblem(model, data)


def run_de(key, loss_fn, bounds, n_steps=1000, chunk_size=10, population_size=60, **options):
    """Differential evolution on a raw loss: the builder driven by `jcalib.algorithm.run`."""
    lower, upper = (jnp.asarray(b) for b in bounds)
    de = differential_evolution_algorithm(loss_fn, lower, upper, population_size, **options)
    key_init, key_run = jax.random.split(key)
    out = run(key_run, de, de.init(key_init), n_steps, chunk_size=chunk_size, stop=lambda state: state.converged)
    return out, np.asarray(out.state.best(lower, upper))


@pytest.fixture(scope="module")
def de_rastrigin():
    return run_de(jax.random.key(0), rastrigin, RASTRIGIN_BOUNDS)


# --- differential evolution ----------------------------------------------------------------
@pytest.mark.slow
def test_de_finds_the_global_minimum_of_rastrigin_4d(de_rastrigin):
    # tolerance: the nearest local minimum has loss 0.995, so 1e-6 separates the basins
    out, best = de_rastrigin
    assert out.status == "converged" and bool(out.state.converged)
    assert float(rastrigin(jnp.asarray(best))) < 1e-6
    np.testing.assert_allclose(best, 0.0, atol=1e-4)
    assert int(out.state.generation) == out.n_steps == len(out.trace.best_loss) < 1000
    assert np.all(np.diff(np.asarray(out.trace.best_loss)) <= 0)  # greedy selection keeps the best


@pytest.mark.slow
def test_de_rand1bin_finds_the_global_minimum_of_rastrigin_4d():
    out, best = run_de(jax.random.key(1), rastrigin, RASTRIGIN_BOUNDS, strategy="rand1bin")
    assert float(rastrigin(jnp.asarray(best))) < 1e-6 and out.status == "converged"


@pytest.mark.slow
def test_de_is_deterministic_and_chunking_does_not_change_it(de_rastrigin):
    """The key of generation i is fold_in(key, i): one compiled chunk, chunks of 7 or a
    Python loop give the same generations, and they stop at the same one."""
    out, best = de_rastrigin
    for chunk_size in (None, 7):
        again, again_best = run_de(jax.random.key(0), rastrigin, RASTRIGIN_BOUNDS, chunk_size=chunk_size)
        np.testing.assert_array_equal(again_best, best)
        np.testing.assert_array_equal(again.trace.best_loss, out.trace.best_loss)
        assert again.n_steps == out.n_steps and again.status == "converged"
    other, _ = run_de(jax.random.key(1), rastrigin, RASTRIGIN_BOUNDS, n_steps=5)
    assert other.n_steps == 5 and other.status == "completed"
    assert not np.array_equal(other.trace.best_loss, out.trace.best_loss[:5])


@pytest.mark.slow
def test_de_stays_within_the_bounds(de_rastrigin):
    out, _ = de_rastrigin
    assert np.all((np.asarray(out.trace.best) >= 0) & (np.asarray(out.trace.best) <= 1))  # the unit cube
    assert np.all((np.asarray(out.state.population) >= 0) & (np.asarray(out.state.population) <= 1))


def test_de_in_batches_equals_one_vmap_and_a_callback_error_stops_it_between_batches():
    """``batch_size`` does not change the search; it lets a host callback that raises (a
    benchmark's budget) stop the population's simulation: 40 members, batches of 8, an error at
    the 20th loss value: at most 3 batches (24 members) are entered. (One vmap has entered most
    of the 40 by then, in an order the runtime chooses.)"""
    whole = run_de(jax.random.key(3), rastrigin, RASTRIGIN_BOUNDS, n_steps=5, population_size=40)[1]
    batched = run_de(jax.random.key(3), rastrigin, RASTRIGIN_BOUNDS, n_steps=5, population_size=40, batch_size=8)[1]
    np.testing.assert_allclose(batched, whole, rtol=1e-12)
    seen = {"entered": 0, "left": 0}

    def leave(_):
        seen["left"] += 1
        if seen["left"] == 20:
            raise RuntimeError("budget spent")

    def loss(x):
        jax.debug.callback(lambda _: seen.__setitem__("entered", seen["entered"] + 1), x)
        value = rastrigin(x)
        jax.debug.callback(leave, value)
        return value

    de = differential_evolution_algorithm(loss, -np.ones(2), np.ones(2), 40, batch_size=8)
    with pytest.raises(Exception, match="budget spent"):
        jax.block_until_ready(jax.jit(de.init)(jax.random.key(0)))
    assert seen["left"] >= 20 and seen["entered"] <= 24


@pytest.fixture(scope="module")
def two_minima(oscillator_problem):
    """TRF from a bad start, and DE, on the frequency fit."""
    local = least_squares_trf(oscillator_problem, [OMEGA_BAD_START, 1.0])
    de = differential_evolution(jax.random.key(0), oscillator_problem)
    return local, de


@pytest.mark.slow
def test_local_method_from_a_bad_start_ends_in_a_wrong_minimum(two_minima):
    local, _ = two_minima
    assert local.converged, local.reason  # a genuine local minimum, not a budget stop
    assert abs(local.estimate["omega"] - OMEGA_TRUE) > 0.5
    assert local.loss > 0.1


@pytest.mark.slow
def test_de_finds_the_global_minimum_of_the_frequency_fit(two_minima, oscillator_problem):
    local, de = two_minima
    assert de.converged, de.reason
    assert de.estimate["omega"] == pytest.approx(OMEGA_TRUE, abs=1e-4)
    assert de.estimate["a"] == pytest.approx(A_TRUE, abs=1e-3)
    assert de.loss < 1e-8 < local.loss
    assert de.n_simulations == 30 * (1 + de.n_steps) and de.n_jacobians == 0
    assert len(de.history["best_loss"]) == de.n_steps < 1000
    assert np.all(np.asarray(de.history["best_theta"]) >= oscillator_problem.space.lower)
    assert np.all(np.asarray(de.history["best_theta"]) <= oscillator_problem.space.upper)


@pytest.mark.slow
def test_de_polish_finishes_with_trf(oscillator_problem):
    result = differential_evolution(jax.random.key(0), oscillator_problem, max_steps=40, polish=True)
    assert result.method == "de+trf" and result.converged, result.reason
    assert result.loss <= result.extra["de_loss"]
    assert result.n_jacobians == result.extra["polish"]["n_jacobians"] > 0
    generations = len(result.history["best_loss"])
    assert result.n_simulations == 30 * (1 + generations) + result.extra["polish"]["n_simulations"]
    assert result.estimate["omega"] == pytest.approx(OMEGA_TRUE, abs=1e-8)


def test_multistart_aka2023_from_the_bad_start_finds_the_global_minimum(oscillator_problem):
    result = multistart(jax.random.key(2), oscillator_problem, 8, method="trf",
                        theta0={"omega": OMEGA_BAD_START})
    assert isinstance(result, MultistartResult) and result.method == "trf"
    assert result.starts[0] == pytest.approx([OMEGA_BAD_START, 1.0])  # θ_init is the first start
    assert result.results[0].loss > 0.1  # ... and ends in the wrong minimum
    assert result.best.estimate["omega"] == pytest.approx(OMEGA_TRUE, abs=1e-6)
    assert np.array_equal(result.sorted_losses, np.sort(result.losses))
    assert result.n_simulations == sum(r.n_simulations for r in result.results)


def test_de_errors(oscillator_problem):
    with pytest.raises(ValueError, match=r"differential_evolution: problem must be a CalibrationProblem; got "
                                         r"function \(for a loss function use differential_evolution_algorithm"):
        differential_evolution(jax.random.key(0), rastrigin)
    with pytest.raises(ValueError, match=r"the box needs finite lower < upper; got lower=\[1.0, 1.0\]"):
        differential_evolution_algorithm(rastrigin, np.ones(2), np.zeros(2), 10)
    with pytest.raises(ValueError, match=r"the box needs finite lower < upper; got lower=\[-inf, 0.0\]"):
        differential_evolution_algorithm(rastrigin, np.array([-np.inf, 0.0]), np.ones(2), 10)
    with pytest.raises(ValueError, match=r"the box \(lower, upper\) must be two 1-D arrays of one shape"):
        differential_evolution_algorithm(rastrigin, np.zeros(2), np.ones(3), 10)
    with pytest.raises(ValueError, match=r"strategy must be one of \('rand1bin', 'best1bin'\); got 'rand2'"):
        differential_evolution(jax.random.key(0), oscillator_problem, strategy="rand2")
    with pytest.raises(ValueError, match=r"init must be 'lhs', 'uniform' or 'sobol'; got 'grid'"):
        differential_evolution(jax.random.key(0), oscillator_problem, init="grid")
    with pytest.raises(ValueError, match="population_size must be an integer >= 5; got 3"):
        differential_evolution(jax.random.key(0), oscillator_problem, population_size=3)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1 or None; got 0"):
        differential_evolution(jax.random.key(0), oscillator_problem, batch_size=0)
    with pytest.raises(ValueError, match="max_steps must be a positive integer; got 0"):
        differential_evolution(jax.random.key(0), oscillator_problem, max_steps=0)
    with pytest.raises(ValueError, match=r"recombination must lie in \[0, 1\]; got 1.5"):
        differential_evolution(jax.random.key(0), oscillator_problem, recombination=1.5)


def test_box_methods_refuse_an_infinite_bound():
    """DE and the multistart starts draw from the box: a parameter on (0.1, inf) is refused."""
    problem = _oscillator_problem(OSCILLATOR_SPACE.replace("a", upper=np.inf))
    with pytest.raises(ValueError, match=r"differential_evolution needs finite bounds.* parameter 'a' has "
                                         r"bounds \[0.1, inf\]"):
        differential_evolution(jax.random.key(0), problem)
    with pytest.raises(ValueError, match=r"sample_starts needs finite bounds.* parameter 'a'"):
        sample_starts(jax.random.key(0), problem, 4)
    with pytest.raises(ValueError, match=r"sample_starts needs finite bounds.* parameter 'a'"):
        multistart(jax.random.key(0), problem, 4, start_distribution="lhs")


# --- multistart and its starts -------------------------------------------------------------
def test_sample_starts_aka2023(noisy_problem):
    starts = sample_starts(jax.random.key(0), noisy_problem, 64, "aka2023")
    space = noisy_problem.space
    assert starts.shape == (64, 3)
    np.testing.assert_allclose(starts[0], space.nominal)  # θ_init first (Aka 2023, Table 2)
    assert np.all(starts >= space.lower) and np.all(starts <= space.upper)
    assert len(np.unique(starts[:, 0])) == 64
    again = sample_starts(jax.random.key(0), noisy_problem, 64, "aka2023")
    np.testing.assert_array_equal(starts, again)


@pytest.mark.parametrize("distribution", ["lhs", "uniform"])
def test_sample_starts_fill_the_box(noisy_problem, distribution):
    starts = sample_starts(jax.random.key(0), noisy_problem, 16, distribution)
    space = noisy_problem.space
    assert starts.shape == (16, 3)
    assert np.all(starts >= space.lower) and np.all(starts <= space.upper)


def test_multistart_errors(noisy_problem):
    with pytest.raises(ValueError, match=r"start_distribution must be one of \('aka2023', 'lhs', 'sobol', 'uniform'\)"):
        multistart(jax.random.key(0), noisy_problem, 4, start_distribution="normal")
    with pytest.raises(ValueError, match=r"method must be one of \('lm', 'fides', 'trf'\); got 'bfgs'"):
        multistart(jax.random.key(0), noisy_problem, 4, method="bfgs")
    with pytest.raises(ValueError, match="n_starts must be a positive integer; got 0"):
        multistart(jax.random.key(0), noisy_problem, 0)
    with pytest.raises(ValueError, match=r"multistart: theta0 is outside the bounds: kab = 0\.1 is (below|above)"):
        multistart(jax.random.key(0), noisy_problem, 4, theta0={"kab": 0.1})


@pytest.mark.slow
def test_multistart_lm_is_vmapped_and_deterministic(noisy_problem):
    first = multistart(jax.random.key(5), noisy_problem, 4, method="lm")
    again = multistart(jax.random.key(5), noisy_problem, 4, method="lm")
    assert first.method == "lm" and first.start_distribution == "aka2023"
    np.testing.assert_array_equal(first.starts, again.starts)
    np.testing.assert_array_equal(first.best.theta, again.best.theta)
    reference = least_squares_trf(noisy_problem)
    assert first.best.loss == pytest.approx(reference.loss, rel=1e-8)
    assert first.n_simulations == sum(r.n_simulations for r in first.results)


# --- scipy baselines -----------------------------------------------------------------------
@pytest.mark.parametrize("method", ["slsqp", "nelder-mead", "powell", "scipy-de"])
def test_scipy_baselines_return_estimation_results_with_call_counts(noisy_problem, theta, method):
    key, kwargs = (jax.random.key(0), {"max_steps": 10}) if method == "scipy-de" else (None, {})
    result = scipy_minimize(key, noisy_problem, np.asarray(theta) / 3.0, method, **kwargs)
    reference = least_squares_trf(noisy_problem)
    assert isinstance(result, EstimationResult) and result.method == method
    assert result.n_simulations >= result.extra["nfev"] > 0
    assert result.n_simulations == len(result.history["best_loss"])
    assert (result.n_jacobians > 0) == (method == "slsqp")
    assert result.extra["max_bound_violation"] == 0.0
    tolerance = 0.2 if method == "scipy-de" else 0.05  # DE: 10 generations only
    assert result.loss == pytest.approx(reference.loss, rel=tolerance)
    json.dumps(result.to_dict())


def test_scipy_minimize_errors(noisy_problem):
    with pytest.raises(ValueError, match=r"method must be one of \('slsqp', 'nelder-mead', 'powell', 'scipy-de'\)"):
        scipy_minimize(None, noisy_problem, method="bfgs")
    with pytest.raises(ValueError, match=r"method='scipy-de' is stochastic; pass a jax.random key as the first"):
        scipy_minimize(None, noisy_problem, method="scipy-de")
    with pytest.raises(ValueError, match=r"scipy_minimize: theta0 is outside the bounds: kac = 1 is (below|above)"):
        scipy_minimize(None, noisy_problem, [1e-4, 1.0, 5e-5])


def test_scipy_de_is_deterministic(noisy_problem):
    a = scipy_minimize(jax.random.key(3), noisy_problem, method="scipy-de", max_steps=3)
    b = scipy_minimize(jax.random.key(3), noisy_problem, method="scipy-de", max_steps=3)
    np.testing.assert_array_equal(a.theta, b.theta)


# --- bounds, every method ------------------------------------------------------------------
@pytest.mark.slow
def test_no_method_leaves_the_bounds(problem_outside, theta):
    """The box optimum has kab on its upper bound; every estimate and history stays inside.
    (DE's bounds are checked on the frequency fit and Rastrigin above, saving a compile.)"""
    space = problem_outside.space
    theta0 = np.asarray(theta)
    results = [
        least_squares_trf(problem_outside, theta0),
        *levenberg_marquardt_batch(problem_outside, np.tile(theta0, (4, 1))).results,
        *(scipy_minimize(None, problem_outside, theta0, m) for m in ("slsqp", "nelder-mead", "powell")),
        scipy_minimize(jax.random.key(0), problem_outside, theta0, "scipy-de", max_steps=2),
    ]
    for r in results:
        assert np.all(r.theta >= space.lower) and np.all(r.theta <= space.upper), (r.method, r.theta)
        z = r.theta_internal
        assert np.all(z >= space.lower_internal) and np.all(z <= space.upper_internal), r.method
        assert r.extra.get("max_bound_violation", 0.0) == 0.0, r.method
        for key in ("theta", "best_theta"):
            if key in r.history:
                h = np.asarray(r.history[key])
                assert np.all(h >= space.lower) and np.all(h <= space.upper), (r.method, key)
    assert results[0].theta[0] == pytest.approx(space.upper[0], rel=1e-9)


# --- plot ----------------------------------------------------------------------------------
def test_plot_multistart_waterfall(oscillator_problem):
    from jcalib.plotting import plot_multistart_waterfall

    result = multistart(jax.random.key(2), oscillator_problem, 5, method="trf", start_distribution="lhs")
    fig = plot_multistart_waterfall(result)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), result.sorted_losses)
