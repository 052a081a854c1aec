"""Global search: differential evolution in JAX, multistart, scipy baselines, bounds."""

import json

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.estimation.global_search import (
    MultistartResult,
    differential_evolution,
    multistart,
    sample_starts,
    scipy_minimize,
)
from jcalib.estimation.least_squares import least_squares_trf, levenberg_marquardt_batch
from jcalib.estimation.result import EstimationResult
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


@pytest.fixture(scope="module")
def oscillator_problem():
    space = ParameterSpace([Parameter("omega", 2.0, 0.5, 3.5, "1/s"), Parameter("a", 1.0, 0.1, 2.0)])
    ts = np.linspace(0.25, 10.0, 40)
    model = Oscillator(parameters=space, output_names=("x",), state_names=("x", "v"),
                       experiment=Experiment(ts, t0=0.0, t1=10.0), solver=dfx.Tsit5(),
                       controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
                       adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=4096)
    values = A_TRUE * np.sin(OMEGA_TRUE * ts)[:, None]  # the exact solution
    return jcalib.CalibrationProblem(model, jcalib.Measurements(ts, values, output_names=("x",)),
                                     weighting="absolute")


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


@pytest.fixture(scope="module")
def de_rastrigin():
    return differential_evolution(jax.random.key(0), rastrigin, bounds=RASTRIGIN_BOUNDS)


# --- differential evolution ----------------------------------------------------------------
def test_de_finds_the_global_minimum_of_rastrigin_4d(de_rastrigin):
    # tolerance: the nearest local minimum has loss 0.995, so 1e-6 separates the basins
    result = de_rastrigin
    assert isinstance(result, EstimationResult) and result.method == "de"
    assert result.converged, result.reason
    assert result.loss < 1e-6
    np.testing.assert_allclose(result.theta, 0.0, atol=1e-4)
    assert result.names == ("x0", "x1", "x2", "x3")
    assert result.n_simulations == 60 * (1 + result.n_iterations)
    assert len(result.history["best_loss"]) == result.n_iterations
    assert np.all(np.diff(result.history["best_loss"]) <= 0)  # greedy selection keeps the best
    json.dumps(result.to_dict())


@pytest.mark.slow
def test_de_rand1bin_finds_the_global_minimum_of_rastrigin_4d():
    result = differential_evolution(jax.random.key(1), rastrigin, bounds=RASTRIGIN_BOUNDS,
                                    strategy="rand1bin")
    assert result.loss < 1e-6 and result.converged


def test_de_is_deterministic(de_rastrigin):
    again = differential_evolution(jax.random.key(0), rastrigin, bounds=RASTRIGIN_BOUNDS)
    np.testing.assert_array_equal(again.theta, de_rastrigin.theta)
    assert again.history["best_loss"] == de_rastrigin.history["best_loss"]
    assert again.n_iterations == de_rastrigin.n_iterations
    other = differential_evolution(jax.random.key(1), rastrigin, bounds=RASTRIGIN_BOUNDS,
                                   max_generations=5)
    assert other.history["best_loss"] != de_rastrigin.history["best_loss"][:5]


def test_de_stays_within_the_bounds(de_rastrigin):
    best = np.asarray(de_rastrigin.history["best_theta"])
    assert np.all(np.abs(best) <= 5.12)


@pytest.fixture(scope="module")
def two_minima(oscillator_problem):
    """TRF from a bad start, and DE, on the frequency fit."""
    local = least_squares_trf(oscillator_problem, [OMEGA_BAD_START, 1.0])
    de = differential_evolution(jax.random.key(0), oscillator_problem)
    return local, de


def test_local_method_from_a_bad_start_ends_in_a_wrong_minimum(two_minima):
    local, _ = two_minima
    assert local.converged, local.reason  # a genuine local minimum, not a budget stop
    assert abs(local.estimate["omega"] - OMEGA_TRUE) > 0.5
    assert local.loss > 0.1


def test_de_finds_the_global_minimum_of_the_frequency_fit(two_minima, oscillator_problem):
    local, de = two_minima
    assert de.converged, de.reason
    assert de.estimate["omega"] == pytest.approx(OMEGA_TRUE, abs=1e-4)
    assert de.estimate["a"] == pytest.approx(A_TRUE, abs=1e-3)
    assert de.loss < 1e-8 < local.loss
    assert de.n_simulations == 30 * (1 + de.n_iterations) and de.n_jacobians == 0
    assert np.all(np.asarray(de.history["best_theta"]) >= oscillator_problem.space.lower)
    assert np.all(np.asarray(de.history["best_theta"]) <= oscillator_problem.space.upper)


def test_de_polish_finishes_with_trf(oscillator_problem):
    result = differential_evolution(jax.random.key(0), oscillator_problem, max_generations=40, polish=True)
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
    with pytest.raises(ValueError, match=r"a loss function needs bounds=\(lower, upper\)"):
        differential_evolution(jax.random.key(0), rastrigin)
    with pytest.raises(ValueError, match="bounds are taken from the problem's parameters"):
        differential_evolution(jax.random.key(0), oscillator_problem, bounds=RASTRIGIN_BOUNDS)
    with pytest.raises(ValueError, match=r"bounds need finite lower < upper"):
        differential_evolution(jax.random.key(0), rastrigin, bounds=(np.ones(2), np.zeros(2)))
    with pytest.raises(ValueError, match=r"strategy must be one of \('rand1bin', 'best1bin'\); got 'rand2'"):
        differential_evolution(jax.random.key(0), rastrigin, bounds=RASTRIGIN_BOUNDS, strategy="rand2")
    with pytest.raises(ValueError, match="population_size must be an integer >= 5; got 3"):
        differential_evolution(jax.random.key(0), rastrigin, bounds=RASTRIGIN_BOUNDS, population_size=3)
    with pytest.raises(ValueError, match="expected a CalibrationProblem or a loss function; got int"):
        differential_evolution(jax.random.key(0), 3)


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
    with pytest.raises(ValueError, match=r"start_distribution must be one of \('aka2023', 'lhs', 'uniform'\)"):
        multistart(jax.random.key(0), noisy_problem, 4, start_distribution="normal")
    with pytest.raises(ValueError, match=r"method must be one of \('lm', 'trf'\); got 'bfgs'"):
        multistart(jax.random.key(0), noisy_problem, 4, method="bfgs")
    with pytest.raises(ValueError, match="n_starts must be a positive integer; got 0"):
        multistart(jax.random.key(0), noisy_problem, 0)
    with pytest.raises(ValueError, match=r"multistart: theta0 lies outside the bounds: kab = 0\.1 not in"):
        multistart(jax.random.key(0), noisy_problem, 4, theta0={"kab": 0.1})


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
    kwargs = {"key": jax.random.key(0), "max_nfev": 10} if method == "scipy-de" else {}
    result = scipy_minimize(noisy_problem, np.asarray(theta) / 3.0, method, **kwargs)
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
        scipy_minimize(noisy_problem, method="bfgs")
    with pytest.raises(ValueError, match=r"method='scipy-de' is stochastic; pass key=jax.random.key\(seed\)"):
        scipy_minimize(noisy_problem, method="scipy-de")
    with pytest.raises(ValueError, match=r"scipy_minimize: theta0 lies outside the bounds: kac = 1\.0 not in"):
        scipy_minimize(noisy_problem, [1e-4, 1.0, 5e-5])


def test_scipy_de_is_deterministic(noisy_problem):
    a = scipy_minimize(noisy_problem, method="scipy-de", key=jax.random.key(3), max_nfev=3)
    b = scipy_minimize(noisy_problem, method="scipy-de", key=jax.random.key(3), max_nfev=3)
    np.testing.assert_array_equal(a.theta, b.theta)


# --- bounds, every method ------------------------------------------------------------------
def test_no_method_leaves_the_bounds(problem_outside, theta):
    """The box optimum has kab on its upper bound; every estimate and history stays inside.
    (DE's bounds are checked on the frequency fit and Rastrigin above, saving a compile.)"""
    space = problem_outside.space
    theta0 = np.asarray(theta)
    results = [
        least_squares_trf(problem_outside, theta0),
        *levenberg_marquardt_batch(problem_outside, np.tile(theta0, (4, 1))).results,
        *(scipy_minimize(problem_outside, theta0, m) for m in ("slsqp", "nelder-mead", "powell")),
        scipy_minimize(problem_outside, theta0, "scipy-de", key=jax.random.key(0), max_nfev=2),
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
