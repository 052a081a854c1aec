"""CalibrationProblem on four_substance_reactions: residuals, jacobian, likelihood, priors."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jcalib.data import Measurements, synthetic_measurements
from jcalib.probability import GaussianPrior
from jcalib.problems import CalibrationProblem
from tests.helpers import central_differences

SIGMA = 0.02


@pytest.fixture(scope="module")
def exact(model, clean):
    """Noise-free data with a relative noise level attached."""
    return Measurements(model.ts, clean, sigma=SIGMA, output_names=model.output_names)


@pytest.fixture(scope="module")
def noisy(model, theta):
    return synthetic_measurements(jax.random.key(7), model, theta, SIGMA)


@pytest.fixture(scope="module")
def problem(model, noisy):
    return CalibrationProblem(model, noisy)


@pytest.fixture(scope="module")
def z_off(problem, theta):
    """Internal coordinates away from the truth (and inside the bounds)."""
    return problem.to_internal(theta) + jnp.asarray([0.3, -0.2, 0.1])


def test_description(problem, model, theta):
    assert problem.free_names == ("kab", "kac", "kad")
    assert (problem.n_free, problem.n_observed) == (3, 88)
    assert problem.fixed == {}
    z = problem.initial_internal()
    np.testing.assert_allclose(np.asarray(z), np.log(np.asarray(theta)), rtol=1e-15)
    np.testing.assert_allclose(np.asarray(problem.to_physical(z)), np.asarray(theta), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(problem.theta_full(z)), np.asarray(theta), rtol=1e-14)
    est = problem.estimate_dict(z)
    assert list(est) == ["kab", "kac", "kad"]
    np.testing.assert_allclose(est["kad"], 5e-5, rtol=1e-14)


def test_residuals_zero_at_truth(model, exact, theta):
    """Noise-free data (absolute weighting: see test_retimes_model_to_measurement_times)."""
    p = CalibrationProblem(model, exact)
    r = np.asarray(p.residuals(p.to_internal(theta)))
    assert r.shape == (88,)
    np.testing.assert_allclose(r, 0.0, atol=1e-12)
    assert float(p.loss(p.to_internal(theta))) < 1e-24


def test_loss_is_wulkow_rx(problem, noisy, z_off):
    f = np.asarray(problem.simulate(z_off))
    x = np.asarray(noisy.values)
    r_x = np.sum(((x - f) / x) ** 2) / x.size  # 1/(mT) sum ((X - F)/X)^2
    np.testing.assert_allclose(float(problem.loss(z_off)), r_x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(problem.residuals(z_off)), ((x - f) / x).reshape(-1),
                               rtol=1e-12)


def test_jacobian_matches_finite_differences(problem, z_off):
    jac = np.asarray(problem.jacobian(z_off))
    assert jac.shape == (88, 3)
    residuals = jax.jit(lambda z: problem.residuals(z))
    fd = central_differences(lambda z: residuals(jnp.asarray(z)), np.asarray(z_off))
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-5 * np.abs(fd).max())


@pytest.mark.slow
def test_jit_and_vmap_consistency(problem, z_off):
    zs = z_off[None, :] + jnp.asarray(np.linspace(-0.2, 0.2, 12).reshape(4, 3))
    for name in ("residuals", "log_posterior"):  # log_posterior covers prior and likelihood
        fn = getattr(problem, name)
        eager = np.stack([np.asarray(fn(z)) for z in zs])
        jitted = np.asarray(eqx.filter_jit(fn)(zs[0]))
        batched = np.asarray(jax.jit(jax.vmap(lambda z, fn=fn: fn(z)))(zs))
        np.testing.assert_allclose(jitted, eager[0], rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(batched, eager, rtol=1e-12, err_msg=name)
    jacs = np.asarray(jax.jit(jax.vmap(lambda z: problem.jacobian(z)))(zs[:2]))
    np.testing.assert_allclose(jacs[1], np.asarray(problem.jacobian(zs[1])), rtol=1e-12)


def test_log_likelihood_absolute_and_sigma_match_scipy(model, theta, z_off):
    data = synthetic_measurements(jax.random.key(11), model, theta, np.array([0.05, 0.01, 0.01, 0.02]),
                                  noise="additive")
    absolute = CalibrationProblem(model, data, weighting="absolute")
    f = np.asarray(absolute.simulate(z_off))
    sigma = np.asarray(data.sigma_full())
    expected = stats.norm.logpdf(np.asarray(data.values), loc=f, scale=sigma).sum()
    np.testing.assert_allclose(float(absolute.log_likelihood(z_off)), expected, rtol=1e-12)
    weighted = CalibrationProblem(model, data, weighting="sigma")
    np.testing.assert_allclose(float(weighted.log_likelihood(z_off)), expected, rtol=1e-12)


def test_log_likelihood_relative(problem, noisy, z_off):
    f = np.asarray(problem.simulate(z_off))
    x = np.asarray(noisy.values)
    n = x.size
    # exp(-R_X n / (2 sigma^2)), normalised as a density of F given X: N(X, (sigma X)^2)
    r_x = np.mean(((x - f) / x) ** 2)
    expected = -r_x * n / (2 * SIGMA**2) - np.sum(np.log(SIGMA * np.abs(x))) - n / 2 * np.log(2 * np.pi)
    np.testing.assert_allclose(float(problem.log_likelihood(z_off)), expected, rtol=1e-12)
    np.testing.assert_allclose(expected, stats.norm.logpdf(f, loc=x, scale=SIGMA * np.abs(x)).sum(),
                               rtol=1e-12)


@pytest.mark.slow
def test_uniform_prior_and_posterior_support(problem, z_off):
    space = problem.space
    width = space.upper_internal - space.lower_internal
    np.testing.assert_allclose(float(problem.log_prior(z_off)), -np.sum(np.log(width)), rtol=1e-14)
    np.testing.assert_allclose(float(problem.log_posterior(z_off)),
                               float(problem.log_prior(z_off) + problem.log_likelihood(z_off)),
                               rtol=1e-14)
    outside = jnp.asarray(space.upper_internal) + jnp.asarray([0.0, 0.0, 30.0])  # kad = 1e9 upper
    assert float(problem.log_prior(outside)) == -np.inf
    assert float(problem.log_posterior(outside)) == -np.inf
    # the gradient of the log posterior stays finite inside and outside
    grad = jax.jit(jax.grad(lambda z: problem.log_posterior(z)))
    assert np.all(np.isfinite(np.asarray(grad(z_off))))
    assert np.all(np.isfinite(np.asarray(grad(outside))))


@pytest.mark.slow
def test_failed_solve_gives_minus_inf(model, noisy, z_off):
    starved = CalibrationProblem(model.with_solver(max_steps=4), noisy)
    assert np.all(np.isnan(np.asarray(starved.residuals(z_off))))
    assert float(starved.log_likelihood(z_off)) == -np.inf
    assert float(starved.log_posterior(z_off)) == -np.inf


def test_gaussian_prior(model, noisy, z_off):
    mean = {"kab": -9.0, "kac": -11.0, "kad": -10.0}
    std = {"kab": 1.0, "kac": 2.0, "kad": 0.5}
    p = CalibrationProblem(model, noisy, prior=GaussianPrior(mean, std))
    expected = stats.norm.logpdf(np.asarray(z_off), loc=list(mean.values()),
                                 scale=list(std.values())).sum()
    np.testing.assert_allclose(float(p.log_prior(z_off)), expected, rtol=1e-12)
    np.testing.assert_allclose(float(p.log_posterior(z_off)),
                               expected + float(p.log_likelihood(z_off)), rtol=1e-12)
    # arrays in the order of free_names; scalar std
    p_arr = CalibrationProblem(model, noisy, prior=GaussianPrior(np.array([-9.0, -11.0, -10.0]), 1.0))
    np.testing.assert_allclose(float(p_arr.log_prior(z_off)),
                               stats.norm.logpdf(np.asarray(z_off), [-9.0, -11.0, -10.0]).sum(),
                               rtol=1e-12)
    # after fix() the prior follows the remaining names
    fixed = p.fix({"kac": 1e-5})
    assert fixed.prior.names == ("kab", "kad")
    z2 = z_off[jnp.asarray([0, 2])]
    expected2 = stats.norm.logpdf(np.asarray(z2), [-9.0, -10.0], [1.0, 0.5]).sum()
    np.testing.assert_allclose(float(fixed.log_prior(z2)), expected2, rtol=1e-12)
    with pytest.raises(ValueError, match=r"GaussianPrior has 2 entries but there are 3 free"):
        CalibrationProblem(model, noisy, prior=GaussianPrior(np.zeros(2), 1.0))
    with pytest.raises(ValueError, match=r"no entry for the free parameter\(s\) 'kad'"):
        CalibrationProblem(model, noisy, prior=GaussianPrior({"kab": 0.0, "kac": 0.0}, 1.0))
    with pytest.raises(ValueError, match="prior: unknown parameter 'kxy'"):
        CalibrationProblem(model, noisy, prior=GaussianPrior({"kxy": 0.0}, 1.0))
    with pytest.raises(ValueError, match="std must be positive and finite"):
        GaussianPrior(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="mean and std must name the same parameters"):
        GaussianPrior({"kab": 0.0}, {"kac": 1.0})


def test_fix(problem, z_off, model, noisy):
    kad = float(jnp.exp(z_off[2]))
    fixed = problem.fix({"kad": kad})
    assert fixed.free_names == ("kab", "kac") and fixed.n_free == 2
    assert fixed.fixed == {"kad": kad}
    np.testing.assert_allclose(float(fixed.loss(z_off[:2])), float(problem.loss(z_off)), rtol=1e-12)
    assert fixed.jacobian(z_off[:2]).shape == (88, 2)
    # fixed values may lie outside the bounds (kad = 0 switches the reaction off)
    off = CalibrationProblem(model, noisy, fixed={"kad": 0.0})
    assert off.free_names == ("kab", "kac")
    theta_full = np.asarray(off.theta_full(z_off[:2]))
    assert theta_full[2] == 0.0
    assert np.all(np.asarray(off.simulate(z_off[:2]))[:, 3] == 0.0)  # no D formed
    # an explicit free list: the others keep their nominal values, in the given order
    sub = CalibrationProblem(model, noisy, free=["kac", "kab"])
    assert sub.free_names == ("kac", "kab") and sub.fixed == {"kad": 5e-5}
    with pytest.raises(ValueError, match=r"fix\(\): unknown parameter 'kda'; known: 'kab', 'kac', 'kad'"):
        problem.fix({"kda": 1.0})
    with pytest.raises(ValueError, match=r"fix\(\): fixing 'kab', 'kac' leaves no free parameter"):
        fixed.fix({"kab": 1e-4, "kac": 1e-5})


def test_masked_entries_are_ignored(model, theta, clean):
    mask = np.ones(clean.shape, dtype=bool)
    mask[[2, 5, 9], [0, 3, 1]] = False
    values = np.where(mask, clean, np.nan)
    data = Measurements(model.ts, values, mask=mask, sigma=SIGMA)
    p = CalibrationProblem(model, data)
    z = p.to_internal(theta)
    r = np.asarray(p.residuals(z))
    assert r.shape == (85,) and p.n_observed == 85
    np.testing.assert_allclose(r, 0.0, atol=1e-12)
    z_off = z + 0.1
    f = np.asarray(p.simulate(z_off))
    np.testing.assert_allclose(np.asarray(p.residuals(z_off)),
                               ((clean - f) / clean)[mask], rtol=1e-12)
    assert np.isfinite(float(p.log_posterior(z_off)))
    # masked entries may also be zero under relative weighting
    p0 = CalibrationProblem(model, Measurements(model.ts, np.where(mask, clean, 0.0), mask=mask))
    assert p0.n_observed == 85


def test_retimes_model_to_measurement_times(model, theta):
    ts = np.array([10.0, 100.0, 1000.0])
    reference = np.asarray(model.with_times(ts).simulate(theta))
    data = Measurements(ts, reference, output_names=model.output_names)
    p = CalibrationProblem(model, data, weighting="absolute")
    np.testing.assert_array_equal(np.asarray(p.model.ts), ts)
    assert p.n_observed == 12
    np.testing.assert_allclose(np.asarray(p.residuals(p.to_internal(theta))), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="cannot observe the model at the measurement times"):
        CalibrationProblem(model, Measurements([-5.0, 1.0], np.ones((2, 4))))


def test_construction_errors(model, noisy, clean):
    with pytest.raises(ValueError, match=r"CalibrationProblem: model must be a jcalib simulator \(an AbstractModel, a "
                                         r"PELS-VAE Surrogate or a FunctionSimulator.*got function; wrap a plain "
                                         r"function as jcalib.FunctionSimulator\(fn, space\)"):
        CalibrationProblem(lambda theta: theta, noisy)
    with pytest.raises(ValueError, match=r"weighting must be one of \('relative', 'absolute', "
                                         r"'sigma'\); got 'log'"):
        CalibrationProblem(model, noisy, weighting="log")
    with pytest.raises(ValueError, match="measurements have 1 outputs but the model has 4"):
        CalibrationProblem(model, Measurements(model.ts, clean[:, :1]))
    renamed = Measurements(model.ts, clean, output_names=("A", "B", "D", "C"))
    with pytest.raises(ValueError, match=r"measurement output names \('A', 'B', 'D', 'C'\) do not "
                                         r"match model.output_names"):
        CalibrationProblem(model, renamed)
    with pytest.raises(ValueError, match="fixed: unknown parameter 'kda'; known: 'kab', 'kac', 'kad'"):
        CalibrationProblem(model, noisy, fixed={"kda": 1.0})
    with pytest.raises(ValueError, match="free: unknown parameter 'kda'; known: 'kab', 'kac', 'kad'"):
        CalibrationProblem(model, noisy, free=["kab", "kda"])
    with pytest.raises(ValueError, match=r"parameter\(s\) 'kab' both free and fixed"):
        CalibrationProblem(model, noisy, free=["kab"], fixed={"kab": 1e-4})
    with pytest.raises(ValueError, match=r"free: duplicate names 'kab'"):
        CalibrationProblem(model, noisy, free=["kab", "kab"])
    with pytest.raises(ValueError, match="no free parameters"):
        CalibrationProblem(model, noisy, fixed={"kab": 1e-4, "kac": 1e-5, "kad": 5e-5})
    with pytest.raises(ValueError, match="no free parameters"):
        CalibrationProblem(model, noisy, free=[])
    with pytest.raises(ValueError, match="fixed: the value of 'kad' must be finite; got nan"):
        CalibrationProblem(model, noisy, fixed={"kad": float("nan")})
    no_sigma = Measurements(model.ts, clean)
    with pytest.raises(ValueError, match="weighting='sigma' needs measurements.sigma"):
        CalibrationProblem(model, no_sigma, weighting="sigma")
    zeros = clean.copy()
    zeros[0, 1] = 0.0
    with pytest.raises(ValueError, match=r"weighting='relative' divides by the measured values, "
                                         r"but X = 0 at t=5.0, output 'B'"):
        CalibrationProblem(model, Measurements(model.ts, zeros))
    with pytest.raises(ValueError, match="prior must be 'uniform' or a GaussianPrior; got 'flat'"):
        CalibrationProblem(model, noisy, prior="flat")
    with pytest.raises(ValueError, match="measurements must be a Measurements; got ndarray"):
        CalibrationProblem(model, clean)


def test_runtime_errors(model, clean, problem):
    no_sigma = CalibrationProblem(model, Measurements(model.ts, clean))
    z = no_sigma.initial_internal()
    assert float(no_sigma.loss(z)) >= 0.0  # fine without sigma
    with pytest.raises(ValueError, match="log_likelihood: measurements.sigma is None"):
        no_sigma.log_likelihood(z)
    with pytest.raises(ValueError, match=r"theta_internal must have shape \(n_params,\) with "
                                         r"n_params=3"):
        problem.residuals(jnp.zeros(2))
    with pytest.raises(ValueError, match="theta_internal must be float64"):
        problem.loss(jnp.zeros(3, dtype=jnp.float32))


# --- parameters without artificial bounds (issue 18 §6) -------------------------------------
@pytest.fixture(scope="module")
def open_problem():
    """The linear case y = A θ (tests/estimation/linear_case.py) with θ = (a, b, c) on
    (-inf, inf), (0, inf) log-scale and (-1, inf) linear, then c on (0.01, inf) log-scale
    (internal box [log 0.01, inf)): no parameter has a finite box."""
    import dataclasses
    import math

    import diffrax as dfx

    from jcalib.model import Experiment
    from jcalib.parameters import Parameter, ParameterSpace
    from tests.estimation.linear_case import TS, LinearModel, design

    space = ParameterSpace([Parameter("a", 0.0, -math.inf, math.inf),
                            Parameter("b", 1.0, 0.0, math.inf, log_scale=True),
                            Parameter("c", 0.0, -1.0, math.inf)])
    model = LinearModel(parameters=space, output_names=("y1", "y2"), state_names=("y1", "y2"),
                        experiment=Experiment(TS, t0=0.0), solver=dfx.Tsit5(),
                        controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                        adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=4096)
    rng = np.random.default_rng(3)
    y = (design() @ np.array([1.0, 0.5, 0.3])).reshape(TS.size, 2) + 0.05 * rng.standard_normal((TS.size, 2))
    data = Measurements(TS, y, sigma=0.05, output_names=("y1", "y2"))
    problem = CalibrationProblem(model, data, weighting="absolute")
    least_squares = np.linalg.lstsq(design(), y.reshape(-1), rcond=None)[0]
    assert least_squares[1] > 0 and least_squares[2] > 0.01  # inside the open bounds
    half_open = ParameterSpace([*space.parameters[:2], Parameter("c", 0.1, 0.01, math.inf, log_scale=True)])
    other = CalibrationProblem(dataclasses.replace(model, parameters=half_open), data, weighting="absolute")
    return problem, other, least_squares


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gauss_newton", "least_squares_trf"])
def test_infinite_bounds_estimate_the_least_squares_answer(open_problem, method):
    from jcalib import estimation

    problem, half_open, least_squares = open_problem
    np.testing.assert_array_equal(problem.space.lower_internal, [-np.inf] * 3)
    np.testing.assert_array_equal(half_open.space.upper_internal, [np.inf] * 3)
    for p in (problem, half_open):
        result = getattr(estimation, method)(p)
        assert result.converged, result.reason
        np.testing.assert_allclose(result.theta, least_squares, rtol=1e-6, atol=1e-8)


def test_infinite_bounds_priors_and_bounds_check(open_problem):
    from jcalib.probability import HalfNormal, Normal

    problem, _, least_squares = open_problem
    z = problem.to_internal(jnp.asarray(least_squares))
    with pytest.raises(ValueError, match=r"log_prior: the default prior='uniform' \(uniform in internal "
                                         r"coordinates on the bounds\) is improper for 'a', whose bounds "
                                         r"\[-inf, inf\] leave its internal coordinate unbounded; pass a proper "
                                         r"prior for it"):
        problem.log_posterior(z)
    priors = {"a": Normal(1.0, 2.0), "b": HalfNormal(1.0), "c": Normal(0.0, 1.0)}
    proper = CalibrationProblem(problem.model, problem.measurements, weighting="absolute", prior=priors)
    theta = np.asarray(least_squares)
    expected = (stats.norm(1.0, 2.0).logpdf(theta[0]) + stats.halfnorm().logpdf(theta[1]) + np.log(theta[1])
                + stats.norm(0.0, 1.0).logpdf(theta[2]) - np.log(stats.norm(0.0, 1.0).sf(-1.0))
                + np.log(theta[2] + 1.0))  # log-Jacobians of log θ_b and log(θ_c + 1)
    np.testing.assert_allclose(float(proper.log_prior(z)), expected, rtol=1e-12)
    assert np.isfinite(float(proper.log_posterior(z)))
    # the issue-17 bounds check still refuses values outside the (half-open) bounds
    with pytest.raises(ValueError, match=r"c = -2 lies outside its bounds \[-1, inf\]"):
        problem.model.simulate(jnp.asarray([0.0, 1.0, -2.0]))


@pytest.mark.slow
def test_infinite_bounds_sensitivity_scalings(open_problem):
    # dz/dθ of every transform: |dJ/dθ| (physical units) equals central differences of the loss
    from jcalib.sensitivity import j_sensitivity
    from tests.helpers import central_differences

    problem, _, least_squares = open_problem
    theta = np.asarray(least_squares) + np.array([0.1, 0.05, -0.05])

    def loss_of(t):
        return float(problem.loss(problem.to_internal(jnp.asarray(t))))

    np.testing.assert_allclose(j_sensitivity(problem, jnp.asarray(theta)), np.abs(central_differences(loss_of, theta)),
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"j_sensitivity\(scaling='range'\) needs finite bounds, but parameter 'a' "
                                         r"has bounds \[-inf, inf\]"):
        j_sensitivity(problem, jnp.asarray(theta), scaling="range")


@pytest.mark.slow
def test_infinite_bounds_covariance_is_the_linear_one(open_problem):
    # y = Aθ: σ² (AᵀA)⁻¹ in physical units, whatever the internal maps (log θ_b, log(θ_c + 1));
    # the delta method uses each map's dθ/dz, and the Wald intervals stay inside the open bounds
    from jcalib.estimation import parameter_covariance
    from tests.estimation.linear_case import design

    problem, _, least_squares = open_problem
    cov = parameter_covariance(problem, jnp.asarray(least_squares), sigma=0.05)
    np.testing.assert_allclose(cov.covariance, 0.05**2 * np.linalg.inv(design().T @ design()), rtol=1e-6)
    intervals = cov.confidence_intervals(0.999999)
    assert intervals["b"][0] > 0 and intervals["c"][0] > -1
    np.testing.assert_allclose(np.log(intervals["c"][1] + 1) - np.log(least_squares[2] + 1),
                               np.log(least_squares[2] + 1) - np.log(intervals["c"][0] + 1), rtol=1e-12)


@pytest.mark.slow
def test_from_simulation_is_a_data_free_problem():
    # y1 = a + b t, y2 = b t + c t²/2 (tests/estimation/linear_case.py): at θ = (0, 0, 1) y1 is 0
    # everywhere, so relative weighting keeps only y2; residuals vanish at θ
    from tests.estimation.linear_case import TS, linear_model

    model = linear_model()
    theta = np.array([0.0, 0.0, 1.0])
    relative = CalibrationProblem.from_simulation(model, theta)
    assert relative.n_observed == TS.size and relative.weighting == "relative"
    np.testing.assert_allclose(np.asarray(relative.measurements.values)[:, 1], 0.5 * TS**2, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(relative.residuals(relative.to_internal(jnp.asarray(theta)))), 0.0,
                               atol=1e-9)
    absolute = CalibrationProblem.from_simulation(model, theta, weighting="sigma", sigma=[0.1, 0.2])
    assert absolute.n_observed == 2 * TS.size
    np.testing.assert_allclose(np.asarray(absolute.sigma_observed), np.tile([0.1, 0.2], TS.size))
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\)"):
        CalibrationProblem.from_simulation(model, theta[:2])
    from tests.robustness.test_estimators import FAILED, faulty_model

    with pytest.raises(ValueError, match=r"CalibrationProblem.from_simulation: the simulation at theta = \{'k': 2.5, "
                                         r"'y0': 2.0\} failed or gave NaN/inf; choose another theta or fix the solve"):
        CalibrationProblem.from_simulation(faulty_model(), np.asarray(FAILED))
