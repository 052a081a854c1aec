"""Per-parameter priors: scipy densities, normalisation in internal coordinates, support checks."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import (
    GaussianPrior,
    HalfNormal,
    LogNormal,
    LogUniform,
    Normal,
    Uniform,
    bind_priors,
    default_prior,
)
from jcalib.problems import CalibrationProblem

# (prior, parameter, equivalent untruncated scipy distribution)
CASES = [
    (Uniform(), Parameter("p", 1.0, 0.5, 4.0), stats.uniform(0.5, 3.5)),
    (Uniform(1.0, 2.0), Parameter("p", 1.0, 0.1, 10.0, log_scale=True), stats.uniform(1.0, 1.0)),
    (LogUniform(), Parameter("p", 0.1, 1e-3, 10.0, log_scale=True), stats.loguniform(1e-3, 10.0)),
    (LogUniform(0.2, 4.0), Parameter("p", 1.0, 0.1, 5.0), stats.loguniform(0.2, 4.0)),
    (Normal(1.0, 0.5), Parameter("p", 1.0, 0.0, 3.0), stats.norm(1.0, 0.5)),
    (Normal(2.0, 1.5), Parameter("p", 1.0, 0.1, 10.0, log_scale=True), stats.norm(2.0, 1.5)),
    (LogNormal(0.0, 0.7), Parameter("p", 1.0, 0.05, 20.0, log_scale=True),
     stats.lognorm(s=0.7, scale=1.0)),
    (LogNormal(0.5, 0.4), Parameter("p", 1.0, 0.0, 5.0), stats.lognorm(s=0.4, scale=math.exp(0.5))),
    (HalfNormal(0.3), Parameter("p", 0.1, 1e-3, 2.0, log_scale=True), stats.halfnorm(scale=0.3)),
    (HalfNormal(1.0), Parameter("p", 0.5, 0.0, 3.0), stats.halfnorm(scale=1.0)),
]
IDS = [f"{type(c[0]).__name__}-{'log' if c[1].log_scale else 'lin'}" for c in CASES]


@pytest.mark.parametrize(("prior", "parameter", "dist"), CASES, ids=IDS)
def test_prior_density(prior, parameter, dist):
    space = ParameterSpace([parameter])
    bound = bind_priors({"p": prior}, space)
    lo, hi = parameter.lower, parameter.upper
    # physical units: the untruncated density is scipy's, the joint one truncated to the bounds
    theta = np.linspace(lo, hi, 41)[1:-1]
    single = bound.priors[0]
    np.testing.assert_allclose(np.asarray(single.log_prob(jnp.asarray(theta))), dist.logpdf(theta),
                               rtol=1e-11, atol=1e-11)
    mass = dist.cdf(hi) - dist.cdf(lo)
    truncated = np.array([float(bound.log_prob(jnp.asarray([t]))) for t in theta[::8]])
    np.testing.assert_allclose(truncated, dist.logpdf(theta[::8]) - np.log(mass), rtol=1e-11,
                               atol=1e-11)
    # internal coordinates: a probability density over the box (log-Jacobian included)
    z_lo, z_hi = space.lower_internal[0], space.upper_internal[0]
    density = jax.jit(lambda z: jnp.exp(bound.log_prob_internal(z[None])))
    points = None
    if isinstance(prior, (Uniform, LogUniform)) and prior.low is not None:  # kinks of the support
        points = [float(v) for v in space.to_internal(jnp.asarray([[prior.low], [prior.high]]))[:, 0]]
    total, err = integrate.quad(lambda z: float(density(jnp.asarray(z))), z_lo, z_hi,
                                points=points, limit=200, epsabs=1e-11, epsrel=1e-10)
    np.testing.assert_allclose(total, 1.0, rtol=1e-7)
    # outside the box: -inf with a finite gradient
    outside = jnp.asarray([z_hi + 1.0])
    assert float(bound.log_prob_internal(outside)) == -np.inf
    assert np.isfinite(float(jax.grad(lambda z: bound.log_prob_internal(z))(outside)[0]))


def test_default_prior_is_internal_uniform():
    log_param = Parameter("k", 1e-3, 1e-5, 1e-1, log_scale=True)
    lin_param = Parameter("x", 1.0, 0.0, 2.0)
    assert isinstance(default_prior(log_param), LogUniform)
    assert isinstance(default_prior(lin_param), Uniform)
    bound = bind_priors({}, ParameterSpace([log_param, lin_param]))
    z = jnp.asarray([math.log(1e-3), 1.0])
    np.testing.assert_allclose(float(bound.log_prob_internal(z)),
                               -math.log(math.log(1e4)) - math.log(2.0), rtol=1e-13)


def test_problem_with_prior_dict(model, clean):
    from jcalib.data import Measurements

    data = Measurements(model.ts, clean, sigma=0.02, output_names=model.output_names)
    priors = {"kab": LogNormal(math.log(1e-4), 1.0), "kac": Normal(2e-5, 3e-5)}
    p = CalibrationProblem(model, data, prior=priors)
    z = jnp.log(jnp.asarray([2e-4, 3e-5, 4e-5]))
    space = model.parameters
    lp_kab = (stats.norm.logpdf(float(z[0]), math.log(1e-4), 1.0)  # Normal in z = log kab
              - np.log(stats.lognorm.cdf(1e-3, 1.0, scale=1e-4)
                       - stats.lognorm.cdf(1e-6, 1.0, scale=1e-4)))
    lp_rest = (stats.norm.logpdf(3e-5, 2e-5, 3e-5) + float(z[1])  # + log-Jacobian of exp
               - np.log(stats.norm.cdf(1e-4, 2e-5, 3e-5) - stats.norm.cdf(1e-6, 2e-5, 3e-5))
               - np.log(space.upper_internal[2] - space.lower_internal[2]))  # kad: default
    lp = lp_kab + lp_rest
    np.testing.assert_allclose(float(p.log_prior(z)), lp, rtol=1e-12)
    assert np.isfinite(float(p.log_posterior(z)))
    outside = z.at[1].set(math.log(1e-3))  # kac above its upper bound
    assert float(p.log_prior(outside)) == -np.inf
    assert float(p.log_posterior(outside)) == -np.inf
    # fix() keeps the priors of the remaining parameters; names of fixed ones are ignored
    fixed = p.fix({"kab": 1e-4})
    assert fixed.prior.names == ("kac", "kad")
    assert isinstance(fixed.prior.as_dict()["kac"], Normal)
    np.testing.assert_allclose(float(fixed.log_prior(z[1:])), lp_rest, rtol=1e-12)
    again = CalibrationProblem(model, data, prior=priors, fixed={"kab": 1e-4})
    assert again.prior.names == ("kac", "kad")
    # the older forms still work
    assert CalibrationProblem(model, data, prior="uniform").prior is None
    assert isinstance(CalibrationProblem(model, data, prior=GaussianPrior(np.zeros(3), 1.0)).prior,
                      GaussianPrior)


def test_support_checks():
    negative = ParameterSpace([Parameter("x", 0.0, -1.0, 2.0)])
    with pytest.raises(ValueError, match=r"LogNormal prior on 'x': the distribution lives on values "
                                         r">= 0, but the bounds \[-1.0, 2.0\] include negative"):
        bind_priors({"x": LogNormal(0.0, 1.0)}, negative)
    with pytest.raises(ValueError, match=r"HalfNormal prior on 'x'.*include negative values"):
        bind_priors({"x": HalfNormal(1.0)}, negative)
    with pytest.raises(ValueError, match=r"Uniform prior on 'x': \[0.0, 20.0\] is not inside the "
                                         r"parameter bounds \[-1.0, 2.0\]"):
        bind_priors({"x": Uniform(0.0, 20.0)}, negative)
    zero = ParameterSpace([Parameter("x", 0.5, 0.0, 1.0)])
    with pytest.raises(ValueError, match="LogUniform prior on 'x': needs positive values, but the "
                                         "lower bound is 0.0"):
        bind_priors({"x": LogUniform()}, zero)
    with pytest.warns(UserWarning, match=r"Normal prior on 'x': the mean 1.5 lies outside the "
                                         r"bounds \[0.0, 1.0\]"):
        bind_priors({"x": Normal(1.5, 0.5)}, zero)
    with pytest.raises(ValueError, match=r"the Normal prior on 'x' has \(almost\) no mass inside"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        bind_priors({"x": Normal(100.0, 1.0)}, zero)
    with pytest.raises(ValueError, match="prior: unknown parameter 'y'; known: 'x'"):
        bind_priors({"y": Normal(0.0, 1.0)}, zero)
    with pytest.raises(ValueError, match="prior: the prior of 'x' must be a jcalib.probability prior"):
        bind_priors({"x": stats.norm(0, 1)}, zero)
    with pytest.raises(ValueError, match="prior: expected a {name: prior} dict; got list"):
        bind_priors([Normal(0.0, 1.0)], zero)


def test_constructor_errors():
    with pytest.raises(ValueError, match="Normal: std must be positive and finite; got -1.0"):
        Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="Normal: mean must be finite; got nan"):
        Normal(float("nan"), 1.0)
    with pytest.raises(ValueError, match="LogNormal: sigma must be positive and finite"):
        LogNormal(0.0, 0.0)
    with pytest.raises(ValueError, match="HalfNormal: scale must be positive and finite"):
        HalfNormal(-2.0)
    with pytest.raises(ValueError, match="Uniform: low < high required; got low=2.0, high=1.0"):
        Uniform(2.0, 1.0)
    with pytest.raises(ValueError, match="LogUniform: low must be positive and finite; got 0.0"):
        LogUniform(0.0, 1.0)
    with pytest.raises(ValueError, match="Uniform.log_prob: low and high are unset"):
        Uniform().log_prob(jnp.asarray(1.0))


def test_problem_prior_errors(model, clean):
    from jcalib.data import Measurements

    data = Measurements(model.ts, clean, sigma=0.02)
    with pytest.raises(ValueError, match="prior: unknown parameter 'kxy'; known: 'kab', 'kac', "
                                         "'kad'"):
        CalibrationProblem(model, data, prior={"kxy": Normal(0.0, 1.0)})
    with pytest.raises(ValueError, match=r"prior must be 'uniform' or a GaussianPrior; got int; "
                                         r"or pass a \{name: prior\} dict"):
        CalibrationProblem(model, data, prior=3)


# --- infinite bounds (issue 18 §6): no truncation on an infinite side ------------------------
INF = np.inf
OPEN_CASES = [
    (Normal(2.0, 1.5), Parameter("p", 2.0, 1.0, INF), stats.norm(2.0, 1.5)),                  # log(θ - 1)
    (Normal(-1.0, 2.0), Parameter("p", -1.0, -INF, 0.5), stats.norm(-1.0, 2.0)),              # -log(0.5 - θ)
    (Normal(0.3, 1.0), Parameter("p", 0.0, -INF, INF), stats.norm(0.3, 1.0)),                 # identity
    (Normal(2.0, 1.5), Parameter("p", 2.0, 1.0, INF, log_scale=True), stats.norm(2.0, 1.5)),  # log θ on [0, inf)
    (LogNormal(0.0, 0.7), Parameter("p", 1.0, 0.0, INF, log_scale=True), stats.lognorm(s=0.7)),
    (LogNormal(0.0, 0.7), Parameter("p", 1.0, 0.0, INF), stats.lognorm(s=0.7)),               # log(θ - 0)
    (HalfNormal(0.3), Parameter("p", 0.1, 0.0, INF, log_scale=True), stats.halfnorm(scale=0.3)),
]
OPEN_IDS = [f"{type(c[0]).__name__}-{c[1].transform}-{c[1].lower}-{c[1].upper}" for c in OPEN_CASES]


@pytest.mark.parametrize(("prior", "parameter", "dist"), OPEN_CASES, ids=OPEN_IDS)
def test_prior_density_with_infinite_bounds(prior, parameter, dist):
    space = ParameterSpace([parameter])
    bound = bind_priors({"p": prior}, space)
    mass = dist.cdf(parameter.upper) - dist.cdf(parameter.lower)  # 1 when both sides are open
    # physical units: scipy's density, renormalised only for a finite side
    z_lo, z_hi = space.lower_internal[0], space.upper_internal[0]
    z = jnp.linspace(-2.0, 2.0, 5) if np.isinf(z_lo) else z_lo + jnp.linspace(0.1, 3.0, 5)  # inside
    theta = np.asarray(space.to_physical(z[:, None]))[:, 0]
    physical = np.array([float(bound.log_prob(jnp.asarray([t]))) for t in theta])
    np.testing.assert_allclose(physical, dist.logpdf(theta) - np.log(mass), rtol=1e-11, atol=1e-11)
    # internal coordinates: scipy's density times |dθ/dz| (by autodiff of the map) ...
    dtheta_dz = np.array([float(jax.grad(lambda v: space.to_physical(v[None])[0])(zi)) for zi in z])
    internal = np.array([float(bound.log_prob_internal(zi[None])) for zi in z])
    np.testing.assert_allclose(internal, dist.logpdf(theta) - np.log(mass) + np.log(np.abs(dtheta_dz)),
                               rtol=1e-10, atol=1e-10)
    # ... and a probability density on the whole internal range
    density = jax.jit(lambda v: jnp.exp(bound.log_prob_internal(v[None])))
    total, _ = integrate.quad(lambda v: float(density(jnp.asarray(v))), z_lo, z_hi, limit=200,
                              epsabs=1e-11, epsrel=1e-10)
    np.testing.assert_allclose(total, 1.0, rtol=1e-7)
    assert float(bound.log_mass[0]) == pytest.approx(np.log(mass), abs=1e-12)


def test_uniform_priors_on_infinite_bounds_are_refused():
    space = ParameterSpace([Parameter("rate", 0.3, 0.0, INF, log_scale=True), Parameter("loc", 0.0, -INF, INF)])
    with pytest.raises(ValueError, match=r"LogUniform prior on 'rate': loguniform on \[0.0, inf\] \(the "
                                         r"parameter's bounds \[0.0, inf\]\) is improper \(it does not "
                                         r"normalise\); give 'rate' a proper prior, e.g. prior=\{'rate': "
                                         r"Normal\(mean, std\)\}"):
        bind_priors({"rate": LogUniform(), "loc": Normal(0.0, 1.0)}, space)
    with pytest.raises(ValueError, match=r"Uniform prior on 'loc': uniform on \[-inf, inf\].*is improper"):
        bind_priors({"rate": HalfNormal(1.0), "loc": Uniform()}, space)
    with pytest.raises(ValueError, match=r"prior: 'loc' has no prior and its default \(uniform in the internal "
                                         r"coordinate on the bounds \[-inf, inf\]\) is improper, that "
                                         r"coordinate being unbounded; give it a proper prior"):
        bind_priors({"rate": HalfNormal(1.0)}, space)
    log_from_zero = ParameterSpace([Parameter("rate", 0.3, 0.0, 1.0, log_scale=True)])  # log θ down to -inf
    with pytest.raises(ValueError, match=r"prior: 'rate' has no prior and its default .* on the bounds "
                                         r"\[0.0, 1.0\]\) is improper"):
        bind_priors({}, log_from_zero)
    # finite limits inside infinite bounds are proper
    bound = bind_priors({"rate": LogUniform(0.1, 1.0), "loc": Uniform(-1.0, 1.0)}, space)
    assert float(bound.log_prob(jnp.asarray([0.5, 2.0]))) == -np.inf
    np.testing.assert_allclose(float(bound.log_prob(jnp.asarray([0.5, 0.0]))),
                               -np.log(0.5 * np.log(10.0)) - np.log(2.0), rtol=1e-12)
