"""Likelihoods, sampled noise levels and initial states as parameters (Lotka-Volterra)."""

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
from scipy import stats

import jcalib
from jcalib.data import Measurements
from jcalib.probability.likelihoods import AbsoluteGaussian, LogNormalLikelihood, RelativeGaussian
from jcalib.probability.priors import HalfNormal
from jcalib.problems import (
    CalibrationProblem,
    initial_state_from_parameters,
    with_initial_state_parameters,
)
from tests.bayes import lotka_volterra as lv

SIGMA = np.array([0.03, 0.05, 0.02, 0.04])  # per output A, B, C, D


@pytest.fixture(scope="module")
def lognormal_data(model, clean):
    """Multiplicative log-normal noise X = F exp(σ ε) on the four-substance outputs."""
    eps = np.random.default_rng(3).standard_normal(clean.shape)
    return Measurements(model.ts, clean * np.exp(SIGMA * eps), output_names=model.output_names)


@pytest.fixture(scope="module")
def sampled(model, lognormal_data):
    """σ of every output sampled, half-normal prior on sigma_A, log-uniform on the rest."""
    return CalibrationProblem(model, lognormal_data, likelihood="lognormal", noise_parameters=True,
                              prior={"sigma_A": HalfNormal(0.1)})


@pytest.fixture(scope="module")
def z_model(theta):
    """The rates at the truth (internal coordinates), where the simulation is `clean`."""
    return jnp.log(theta)


@pytest.mark.parametrize("likelihood", [AbsoluteGaussian, RelativeGaussian, LogNormalLikelihood])
def test_log_density_matches_scipy(likelihood):
    rng = np.random.default_rng(0)
    x, f = rng.uniform(0.5, 2.0, 30), rng.uniform(0.5, 2.0, 30)
    sigma = rng.uniform(0.05, 0.3, 30)
    got = np.asarray(likelihood().log_density(jnp.asarray(x), jnp.asarray(f), jnp.asarray(sigma)))
    expected = {
        AbsoluteGaussian: stats.norm.logpdf(x, loc=f, scale=sigma),
        RelativeGaussian: stats.norm.logpdf(f, loc=x, scale=sigma * np.abs(x)),  # F ~ N(X, (σX)²)
        LogNormalLikelihood: stats.lognorm.logpdf(x, s=sigma, scale=f),
    }[likelihood]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # the paper's form: one σ for all entries gives -R_X n / (2σ²) + const (Wulkow 2021 §2.3)
    if likelihood is RelativeGaussian:
        r_x = np.mean(((x - f) / x) ** 2)
        s = 0.1
        total = float(jnp.sum(likelihood().log_density(jnp.asarray(x), jnp.asarray(f),
                                                       jnp.full(30, s))))
        const = -np.sum(np.log(s * x)) - 15 * np.log(2 * np.pi)
        np.testing.assert_allclose(total, -r_x * 30 / (2 * s**2) + const, rtol=1e-12)


def test_problem_lognormal_fixed_sigma(model, lognormal_data, z_model, clean):
    """Problem-level log likelihood with σ fixed per output by the likelihood."""
    p = CalibrationProblem(model, lognormal_data, likelihood=LogNormalLikelihood(sigma=SIGMA))
    assert p.likelihood.name == "lognormal" and p.n_noise == 0
    x = np.asarray(lognormal_data.values)
    expected = stats.lognorm.logpdf(x, s=SIGMA[None, :], scale=clean).sum()
    np.testing.assert_allclose(float(p.log_likelihood(z_model)), expected, rtol=1e-12)


def test_default_likelihood_follows_weighting(model, lognormal_data):
    assert isinstance(CalibrationProblem(model, lognormal_data).likelihood, RelativeGaussian)
    absolute = CalibrationProblem(model, lognormal_data, weighting="absolute")
    assert isinstance(absolute.likelihood, AbsoluteGaussian)
    named = CalibrationProblem(model, lognormal_data, likelihood="absolute_gaussian")
    assert isinstance(named.likelihood, AbsoluteGaussian) and named.weighting == "relative"


def test_sampled_sigma_description(sampled):
    assert sampled.free_names == ("kab", "kac", "kad", "sigma_A", "sigma_B", "sigma_C", "sigma_D")
    assert sampled.model_free_names == ("kab", "kac", "kad")
    assert (sampled.n_free, sampled.n_model_free, sampled.n_noise) == (7, 3, 4)
    assert sampled.space.names == sampled.free_names
    assert bool(np.all(sampled.space.log_scale[3:]))
    assert sampled.space["sigma_B"].lower == 1e-3 and sampled.space["sigma_B"].upper == 1.0
    z = sampled.initial_internal()
    assert z.shape == (7,)
    assert list(sampled.estimate_dict(z))[3:] == ["sigma_A", "sigma_B", "sigma_C", "sigma_D"]
    assert sampled.theta_full(z).shape == (3,)


@pytest.mark.slow
def test_sampled_sigma_likelihood_and_prior(sampled, lognormal_data, z_model, clean):
    sigma = np.array([0.02, 0.07, 0.03, 0.05])
    z = jnp.concatenate([z_model, jnp.log(jnp.asarray(sigma))])
    f = clean
    x = np.asarray(lognormal_data.values)
    ll = stats.lognorm.logpdf(x, s=sigma[None, :], scale=f).sum()  # normaliser -Σ log σ included
    np.testing.assert_allclose(float(sampled.log_likelihood(z)), ll, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(sampled.sigma_of(z)), np.tile(sigma, 22), rtol=1e-14)
    # prior: log-uniform box on the rates, half-normal (truncated to [1e-3, 1], in log σ:
    # + log σ) on sigma_A, log-uniform (uniform in log σ) on the other σ
    rates = sampled.model.parameters
    lp_rates = -np.sum(np.log(rates.upper_internal - rates.lower_internal))
    mass = stats.halfnorm.cdf(1.0, scale=0.1) - stats.halfnorm.cdf(1e-3, scale=0.1)
    lp_a = stats.halfnorm.logpdf(sigma[0], scale=0.1) + np.log(sigma[0]) - np.log(mass)
    lp_rest = -3 * np.log(np.log(1.0 / 1e-3))
    np.testing.assert_allclose(float(sampled.log_prior(z)), lp_rates + lp_a + lp_rest, rtol=1e-12)
    np.testing.assert_allclose(float(sampled.log_posterior(z)), ll + lp_rates + lp_a + lp_rest,
                               rtol=1e-12)
    # a σ outside its bounds: -inf (finite gradients: see the Lotka-Volterra test)
    z_out = z.at[4].set(jnp.log(2.0))
    assert float(sampled.log_posterior(z_out)) == -np.inf


def test_sigma_maximum_likelihood_is_rms(sampled, lognormal_data, z_model, clean):
    """Given θ, log L(σ_j) = -n_j/2 · m_j/σ_j² - n_j log σ_j + const, maximal at σ_j² = m_j,
    the mean squared log residual of output j."""
    f = clean
    x = np.asarray(lognormal_data.values)
    rms = np.sqrt(np.mean(np.log(x / f) ** 2, axis=0))
    n_j = x.shape[0]

    def ll(sigma):
        return float(sampled.log_likelihood(jnp.concatenate([z_model, jnp.log(jnp.asarray(sigma))])))

    best = ll(rms)
    for j in range(4):
        for factor in (0.8, 1.05, 1.3):
            s = rms.copy()
            s[j] *= factor
            analytic = -0.5 * n_j * (1 / factor**2 - 1) - n_j * np.log(factor)
            np.testing.assert_allclose(ll(s) - best, analytic, rtol=1e-9, atol=1e-9)
            assert ll(s) < best


def test_estimator_paths(sampled, z_model, lognormal_data, clean):
    z = jnp.concatenate([z_model, jnp.zeros(4) - 3.0])
    with pytest.raises(ValueError, match=r"jacobian: this problem samples the noise levels "
                                         r"'sigma_A', 'sigma_B', 'sigma_C', 'sigma_D'.*"
                                         r"without_noise_parameters"):
        sampled.jacobian(z)
    # residuals and loss take the full vector and ignore σ
    x = np.asarray(lognormal_data.values)
    np.testing.assert_allclose(float(sampled.loss(z)), np.mean(((x - clean) / x) ** 2), rtol=1e-12)
    point = sampled.without_noise_parameters(sigma=SIGMA)
    assert point.free_names == ("kab", "kac", "kad") and point.n_noise == 0
    assert point.likelihood.sigma == tuple(SIGMA) and point.sigma_available
    # fix() keeps the noise parameters and their priors
    fixed = sampled.fix({"kad": 5e-5})
    assert fixed.free_names == ("kab", "kac", "sigma_A", "sigma_B", "sigma_C", "sigma_D")
    assert isinstance(fixed.noise_prior.as_dict()["sigma_A"], HalfNormal)
    with pytest.raises(ValueError, match=r"fix\(\): 'sigma_A' is a sampled noise level"):
        sampled.fix({"sigma_A": 0.1})


def test_partial_noise_parameters(model, lognormal_data, z_model):
    """σ sampled for A only; the other outputs take the likelihood's fixed σ."""
    p = CalibrationProblem(model, lognormal_data, likelihood=LogNormalLikelihood(sigma=SIGMA),
                           noise_parameters={"A": (0.01, 0.5)})
    assert p.noise_names == ("sigma_A",) and p.space["sigma_A"].upper == 0.5
    z = jnp.concatenate([z_model, jnp.log(jnp.asarray([0.1]))])
    expected = np.tile(np.array([0.1, *SIGMA[1:]]), 22)
    np.testing.assert_allclose(np.asarray(p.sigma_of(z)), expected, rtol=1e-14)
    no_sigma = CalibrationProblem(model, lognormal_data, likelihood="lognormal",
                                  noise_parameters=["A"])
    with pytest.raises(ValueError, match="log_posterior: measurements.sigma is None.*"
                                         "noise_parameters=True"):
        no_sigma.log_posterior(z)


def test_noise_level_without_bounds(model, lognormal_data, z_model):
    """σ on (0, inf) (issue 18 §6): log σ unbounded, a proper prior needed, none invented."""
    with pytest.raises(ValueError, match=r"prior: 'sigma_A' has no prior and its default .* is improper"):
        CalibrationProblem(model, lognormal_data, likelihood="lognormal", noise_parameters={"A": (0.1, 0.0, np.inf)})
    p = CalibrationProblem(model, lognormal_data, likelihood=LogNormalLikelihood(sigma=SIGMA),
                           noise_parameters={"A": (0.1, 0.0, np.inf)}, prior={"sigma_A": HalfNormal(0.1)})
    assert p.space["sigma_A"].transform == "log" and p.space.upper_internal[-1] == np.inf
    z = jnp.concatenate([z_model, jnp.log(jnp.asarray([0.05]))])
    prior_z = float(p.log_prior(z)) - float(p.log_prior(jnp.concatenate([z_model, jnp.log(jnp.asarray([0.1]))])))
    # only sigma_A's term changes: log halfnorm(σ; 0.1) + log σ (the Jacobian), untruncated
    expected = (stats.halfnorm(scale=0.1).logpdf(0.05) + np.log(0.05)
                - stats.halfnorm(scale=0.1).logpdf(0.1) - np.log(0.1))
    np.testing.assert_allclose(prior_z, expected, rtol=1e-12)


def test_likelihood_errors(model, lognormal_data, clean):
    zero = clean.copy()
    zero[3, 2] = 0.0
    with pytest.raises(ValueError, match=r"likelihood='lognormal' needs positive measured values, "
                                         r"but X = 0.0 at t=20.0, output 'C'"):
        CalibrationProblem(model, Measurements(model.ts, zero), weighting="absolute",
                           likelihood="lognormal")
    with pytest.raises(ValueError, match=r"likelihood must be one of .*'lognormal'.*got 'poisson'"):
        CalibrationProblem(model, lognormal_data, likelihood="poisson")
    with pytest.raises(ValueError, match="LogNormalLikelihood: sigma must be positive and finite"):
        LogNormalLikelihood(sigma=[0.1, -1.0])
    with pytest.raises(ValueError, match="likelihood.sigma has 2 values but there are 4 outputs"):
        CalibrationProblem(model, lognormal_data, likelihood=LogNormalLikelihood(sigma=[0.1, 0.2]))
    with pytest.raises(ValueError, match="noise_parameters: unknown output 'E'; outputs: 'A'"):
        CalibrationProblem(model, lognormal_data, noise_parameters=["A", "E"])
    with pytest.raises(ValueError, match=r"noise_parameters: bounds of 'A' must satisfy 0 <= lower "
                                         r"< upper <= inf \(σ is sampled in log coordinates; 0 and inf leave "
                                         r"it unbounded\); got lower=-1.0"):
        CalibrationProblem(model, lognormal_data, noise_parameters={"A": (1.0, -1.0, 2.0)})
    with pytest.raises(ValueError, match=r"noise_parameters: bounds of 'A' are open \(\[0.0, inf\]\), so their "
                                         r"geometric mean cannot be the nominal σ; pass \{'A': \(nominal, 0.0, "
                                         r"inf\)\}"):
        CalibrationProblem(model, lognormal_data, noise_parameters={"A": (0.0, np.inf)})
    with pytest.raises(ValueError, match=r"noise_parameters: bounds of 'A' must be \(lower, upper\)"):
        CalibrationProblem(model, lognormal_data, noise_parameters={"A": (0.1,)})
    with pytest.raises(ValueError, match="noise_parameters: duplicate outputs"):
        CalibrationProblem(model, lognormal_data, noise_parameters=["A", "A"])
    with pytest.raises(ValueError, match="prior: unknown parameter 'sigma_E'"):
        CalibrationProblem(model, lognormal_data, noise_parameters=True,
                           prior={"sigma_E": HalfNormal(1.0)})


# --- a user-defined model: Lotka-Volterra with unknown initial populations and noise ----------
TRUTH = {"alpha": 0.55, "beta": 0.028, "gamma": 0.80, "delta": 0.024, "prey0": 33.9,
         "predator0": 5.9}  # near the posterior mode for the Hudson's Bay table
LV_SIGMA = np.array([0.1, 0.15])


@pytest.fixture(scope="module")
def lv_truth():
    return np.array(list(TRUTH.values()))


@pytest.fixture(scope="module")
def lv_synthetic(lv_truth):
    """Counts simulated at TRUTH with log-normal noise, then the user's problem on them."""
    clean = lv.lotka_volterra_problem(lv.YEARS, lv.COUNTS).model.simulate(jnp.asarray(lv_truth))
    eps = np.random.default_rng(11).standard_normal(lv.COUNTS.shape)
    counts = np.asarray(clean) * np.exp(LV_SIGMA * eps)
    return lv.lotka_volterra_problem(lv.YEARS, counts)


def test_lotka_volterra_setup_is_short():
    """The whole user setup (model class, parameters, data, priors, likelihood, sampled σ)
    takes under 30 lines of code."""
    source = inspect.getsource(lv)
    block = source.split("# --- setup (user code starts) ---")[1].split("# --- setup (user code ends)")[0]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) < 30, len(lines)


def test_lotka_volterra_on_the_table():
    problem = lv.lotka_volterra_problem(lv.YEARS, lv.COUNTS)
    assert problem.free_names == ("alpha", "beta", "gamma", "delta", "prey0", "predator0",
                                  "sigma_prey", "sigma_predator")
    z = problem.to_internal(jnp.asarray([0.55, 0.028, 0.8, 0.024, 33.9, 5.9, 0.25, 0.25]))
    assert np.isfinite(float(problem.log_posterior(z)))


@pytest.mark.slow
def test_lotka_volterra_posterior(lv_synthetic, lv_truth):
    problem = lv_synthetic
    truth = np.concatenate([lv_truth, LV_SIGMA])
    z_true = problem.to_internal(jnp.asarray(truth))
    # the initial populations reach the model through the state convention
    y0 = initial_state_from_parameters(problem.model, jnp.asarray(lv_truth), jnp.ones(2))
    np.testing.assert_array_equal(np.asarray(y0), [33.9, 5.9])
    np.testing.assert_allclose(np.asarray(problem.simulate(z_true))[0], [33.9, 5.9], rtol=1e-12)
    assert np.isfinite(float(problem.log_posterior(z_true)))
    outside = z_true.at[4].set(jnp.log(500.0))  # prey0 above its upper bound 200
    assert float(problem.log_posterior(outside)) == -np.inf
    # the initial populations and noise levels, from 30 % off and twice the noise, by
    # maximising the log posterior with the rates fixed (L-BFGS-B, jax gradients)
    sub = problem.fix({k: TRUTH[k] for k in ("alpha", "beta", "gamma", "delta")})
    assert sub.free_names == ("prey0", "predator0", "sigma_prey", "sigma_predator")
    sub_value_and_grad = jax.jit(jax.value_and_grad(lambda z: sub.log_posterior(z)))
    value, grad = sub_value_and_grad(z_true[4:])
    assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))
    value_out, grad_out = sub_value_and_grad(outside[4:])
    assert float(value_out) == -np.inf and np.all(np.isfinite(np.asarray(grad_out)))
    start = sub.to_internal(jnp.asarray([33.9 * 1.3, 5.9 * 0.7, *(2 * LV_SIGMA)]))
    n_obs = sub.n_observed

    def neg(z):
        v, g = sub_value_and_grad(jnp.asarray(z))
        return -float(v) / n_obs, -np.asarray(g) / n_obs

    space = sub.space
    bounds = list(zip(space.lower_internal, space.upper_internal))
    fit = scipy.optimize.minimize(neg, np.asarray(start), jac=True, method="L-BFGS-B",
                                  bounds=bounds, options={"maxiter": 200})
    estimate = sub.estimate_dict(jnp.asarray(fit.x))
    assert -fit.fun * n_obs > float(value)
    for name in ("prey0", "predator0"):
        assert math.isclose(estimate[name], TRUTH[name], rel_tol=0.15), (name, estimate)
    np.testing.assert_allclose([estimate["sigma_prey"], estimate["sigma_predator"]], LV_SIGMA,
                               rtol=0.4)


def test_initial_state_from_parameters_errors(lv_synthetic, lv_truth):
    with pytest.raises(ValueError, match=r"y0 must have shape \(n_states,\) = \(2,\)"):
        initial_state_from_parameters(lv_synthetic.model, jnp.asarray(lv_truth), jnp.ones(3))


def test_with_initial_state_parameters(model, theta, clean):
    """Any model (here a built-in one) gets estimable initial states by the same convention."""
    wrapped = with_initial_state_parameters(model, [jcalib.Parameter("A0", 10.0, 5.0, 20.0)])
    assert wrapped.parameters.names == ("kab", "kac", "kad", "A0")
    reference = jcalib.models.get("four_substance_reactions", a0=8.0)
    th = jnp.concatenate([theta, jnp.asarray([8.0])])
    np.testing.assert_allclose(np.asarray(wrapped.simulate(th)), np.asarray(reference.simulate(theta)),
                               rtol=1e-12)
    p = CalibrationProblem(wrapped, Measurements(model.ts, clean, sigma=0.01), free=["A0", "kab"])
    assert p.free_names == ("A0", "kab")
    np.testing.assert_allclose(np.asarray(p.theta_full(jnp.asarray([8.0, np.log(2e-4)]))),
                               [2e-4, 1e-5, 5e-5, 8.0], rtol=1e-14)
    with pytest.raises(ValueError, match=r"'X0' does not name an initial state; use '<state>0' with "
                                         r"a state from \('A', 'B', 'C', 'D'\)"):
        with_initial_state_parameters(model, [jcalib.Parameter("X0", 1.0, 0.0, 2.0)])
    with pytest.raises(ValueError, match="duplicate parameter names"):
        with_initial_state_parameters(model, [jcalib.Parameter("B0", 0.0, 0.0, 1.0)] * 2)


def test_jcalib_exports_still_import():
    assert jcalib.CalibrationProblem is CalibrationProblem
