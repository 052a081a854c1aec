"""Samplers and priors that go wrong say so (issue 17): stalled or unmixed MALA runs carry
`SamplingWarning`s, MALA never accepts a proposal where the log density or its gradient
fails, and priors cut by the bounds give a `PriorTruncationWarning` with the lost mass."""

import warnings

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jcalib.algorithm import run as run_algorithm
from jcalib.algorithm import vmap_chains
from jcalib.bayes import adaptation, mala
from jcalib.bayes.diagnostics import SamplingWarning, sampling_warnings
from jcalib.bayes.result import PosteriorResult
from jcalib.data import Measurements
from jcalib.model import AbstractModel, Experiment
from jcalib.models.four_substance_reactions import four_substance_reactions
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.likelihoods import AbsoluteGaussian
from jcalib.probability.priors import (
    HalfNormal,
    LogNormal,
    Normal,
    PriorTruncationWarning,
    bind_priors,
    truncation_fraction,
)
from jcalib.problems import CalibrationProblem
from tests.bayes.problems import gaussian_problem

SCALES = np.array([1.0, 2.0])  # the healthy target: independent N(0, 1) and N(0, 4)


GAUSSIAN = gaussian_problem(np.zeros(2), np.diag(SCALES**2))  # the posterior is N(0, diag(SCALES²))


def run(**kwargs):
    """`mala.sample` on `GAUSSIAN`, SamplingWarnings recorded rather than raised."""
    settings = {"n_chains": 2, "step_sizes": jnp.asarray([0.8, 3.0]), "theta0": np.zeros(2)}
    settings.update(kwargs)
    theta0 = settings.pop("theta0")
    n_steps = settings.pop("n_steps")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SamplingWarning)
        result = mala.sample(jax.random.key(settings.pop("seed", 0)), GAUSSIAN, theta0, n_steps, **settings)
    emitted = tuple(str(w.message) for w in caught if issubclass(w.category, SamplingWarning))
    return result, emitted


# --- 1. stalled and unmixed samplers say so ---------------------------------------------------
SAMPLER_ROWS = [
    # (label, settings, fragments expected in the warnings, fragments that must not appear)
    ("stalled: steps far too large, no warm-up",
     {"n_steps": 200, "step_sizes": 1e3},
     ["acceptance below 5 % in chain 0 (0.0 %), chain 1 (0.0 %)", "warmup=500",
      "R-hat above 1.05 (or undefined) for x0 (nan), x1 (nan)",
      "bulk ESS below 100 for x0 (nan), x1 (nan)"], []),  # a chain that never moved has no ESS (not n_draws)
    ("stalled single chain: no R-hat warning",
     {"n_steps": 200, "step_sizes": 1e3, "n_chains": 1},
     ["acceptance below 5 % in chain 0 (0.0 %)", "bulk ESS below 100 for x0 (nan)"], ["R-hat"]),
    ("chains stuck apart: tiny steps from distant starts",
     {"n_steps": 200, "step_sizes": 1e-8, "theta0": np.array([[-3.0, 3.0], [3.0, -3.0]])},
     ["R-hat above 1.05 (or undefined) for x0 (", "x1 (", "bulk ESS below 100 for x0 (",
      "preconditioner=Laplace()"], ["acceptance below"]),
    ("too few draws", {"n_steps": 20}, ["bulk ESS below 100 for x0 ("], ["acceptance below"]),
    ("healthy Gaussian run", {"n_steps": 1000}, [], ["sampling:"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("label,settings,expected,absent", SAMPLER_ROWS, ids=[r[0] for r in SAMPLER_ROWS])
def test_sampler_warnings(label, settings, expected, absent):
    result, emitted = run(**settings)
    assert result.warnings == emitted  # recorded and emitted alike
    assert list(result.warnings) == result.extra["warnings"] == result.to_dict()["warnings"]
    text = "\n".join(result.warnings)
    for fragment in expected:
        assert fragment in text, (fragment, text)
    for fragment in absent:
        assert fragment not in text, (fragment, text)
    assert all("\n" not in m for m in result.warnings)
    if not expected:  # the healthy run really is healthy
        assert result.acceptance > 0.5 and np.all(result.rhat < 1.05) and np.all(result.ess_bulk > 100)


def test_warnings_survive_save_and_load(tmp_path):
    result, _ = run(n_steps=200, step_sizes=1e3)
    assert result.warnings
    result.save(tmp_path / "r.npz")
    assert PosteriorResult.load(tmp_path / "r.npz").warnings == result.warnings


WARNING_ROWS = [
    # (acceptance per chain, R-hat, bulk ESS, expected messages (fragments), count)
    ([0.6, 0.04], [1.0, 1.0], [400.0, 400.0], ["acceptance below 5 % in chain 1 (4.0 %)"], 1),
    ([0.6, 0.6], [1.2, 1.0], [400.0, 400.0], ["R-hat above 1.05 (or undefined) for a (1.2)"], 1),
    ([0.6], [1.2, 1.0], [400.0, 400.0], [], 0),  # one chain: R-hat not checked
    ([0.6, 0.6], [1.0, 1.0], [400.0, 99.5], ["bulk ESS below 100 for b (99.5)"], 1),
    ([0.6, 0.6], [1.0, np.nan], [np.nan, 400.0], ["for b (nan)", "for a (nan)"], 2),
    ([0.05, 0.05], [1.05, 1.05], [100.0, 100.0], [], 0),  # at the thresholds: healthy
]


@pytest.mark.parametrize("acceptance,rhat,ess,fragments,count", WARNING_ROWS)
def test_sampling_warnings_thresholds(acceptance, rhat, ess, fragments, count):
    messages = sampling_warnings(["a", "b"], np.asarray(acceptance), np.asarray(rhat), np.asarray(ess))
    assert len(messages) == count
    for fragment in fragments:
        assert any(fragment in m for m in messages), (fragment, messages)


# --- 2. MALA never accepts a failed proposal --------------------------------------------------
FAIL_AT = 1.0  # the failed region: x0 > 1, inside the sampled region of N(0, I)


@jax.custom_jvp
def _nan_gradient_beyond(x0):
    return jnp.zeros_like(x0)


@_nan_gradient_beyond.defjvp
def _nan_gradient_beyond_jvp(primals, tangents):
    (x0,), (dx0,) = primals, tangents
    return jnp.zeros_like(x0), jnp.where(x0 > FAIL_AT, jnp.nan, 0.0) * dx0


def _failing(kind):
    def logdensity(x):
        value = -0.5 * jnp.sum(x**2)
        bad = x[0] > FAIL_AT
        if kind == "nan value":
            return jnp.where(bad, jnp.nan, value)
        if kind == "-inf value":
            return jnp.where(bad, -jnp.inf, value)
        if kind == "+inf value":
            return jnp.where(bad, jnp.inf, value)
        return value + _nan_gradient_beyond(x[0])  # "nan gradient": finite value, NaN derivative

    return logdensity


FAULT_ROWS = [
    ("nan value", "jcalib", 0),
    ("-inf value", "jcalib", 0),
    ("+inf value", "jcalib", 0),
    ("nan gradient", "jcalib", 0),
    ("nan value", "jcalib", 300),  # dual averaging sees the failures as rejections, never NaN
    ("+inf value", "blackjax", 0),
    ("nan gradient", "blackjax", 0),
]


@pytest.mark.slow
@pytest.mark.parametrize("kind,backend,warmup", FAULT_ROWS)
def test_mala_rejects_failed_proposals(kind, backend, warmup):
    """A raw log density: `mala_algorithm` (after a dual-averaging warm-up) driven by `run`."""
    logdensity, n_chains = _failing(kind), 4
    states = jax.vmap(mala.mala_algorithm(logdensity, 0.6).init)(jnp.zeros((n_chains, 2)))
    factor = 1.0
    if warmup:
        kernel = mala.build_kernel(logdensity)
        warm = adaptation.dual_averaging_algorithm(mala.mala_algorithm(logdensity, 0.6).init,
                                                   lambda key, state, f: kernel(key, state, 0.6 * f * jnp.ones(2)),
                                                   warmup, 0.6)
        state = run_algorithm(jax.random.key(4), warm, warm.init(jnp.zeros((n_chains, 2))), warmup,
                              trace_fn=lambda state, info: None).state
        states, factor = state.states, float(jnp.exp(state.da.log_x_avg))
    assert np.isfinite(float(factor))
    chains = vmap_chains(mala.mala_algorithm(logdensity, 0.6 * float(factor), backend=backend))
    out = run_algorithm(jax.random.key(3), chains, states, 2000,
                        trace_fn=lambda state, info: (state.position, state.logdensity, info))
    position, logdensity_trace, info = out.trace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        result = PosteriorResult.from_chains(np.swapaxes(np.asarray(position), 0, 1),
                                             np.swapaxes(np.asarray(logdensity_trace), 0, 1),
                                             np.asarray(info.is_accepted).mean(axis=0))
    draws = result.flat_samples()
    assert np.all(np.isfinite(draws)) and np.all(np.isfinite(result.logdensity))
    assert draws[:, 0].max() <= FAIL_AT  # no draw in the failed region
    assert result.acceptance > 0.3  # the chains still move
    if backend == "jcalib":
        assert np.all(1.0 - np.asarray(info.is_valid).mean(axis=0) > 0.01)  # the region was proposed
    # where it succeeds the target is N(0, I) cut at x0 = 1: the truncated normal's mean
    truth = np.array([stats.truncnorm(-np.inf, FAIL_AT).mean(), 0.0])
    np.testing.assert_array_less(np.abs(result.mean - truth), 5 * result.mcse_mean)


K_FAIL = 0.32  # the decay model's vector field is NaN for k > K_FAIL (just above the truth)


class _FailingDecay(AbstractModel):
    """dy/dt = -k y, whose right-hand side is NaN for k > K_FAIL (a failed solve there)."""

    def vector_field(self, t, y, theta):
        return jnp.where(theta[0] > K_FAIL, jnp.nan, -theta[0] * y)

    def initial_state(self, theta):
        return jnp.ones(1, dtype=theta.dtype)

    def observe(self, t, y, theta):
        return y


@pytest.mark.slow
def test_mala_on_a_model_that_fails_on_part_of_the_box():
    ts = np.array([1.0, 2.0, 4.0])
    model = _FailingDecay(
        parameters=ParameterSpace([Parameter("k", 0.3, 0.05, 1.0)]), output_names=("y",), state_names=("y",),
        experiment=Experiment(ts, t0=0.0), solver=dfx.Tsit5(), controller=dfx.PIDController(rtol=1e-8, atol=1e-8),
        adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=64)
    data = Measurements(ts, np.exp(-0.3 * ts)[:, None], output_names=("y",))
    problem = CalibrationProblem(model, data, likelihood=AbsoluteGaussian(sigma=0.02))
    assert not np.isfinite(float(problem.log_posterior(jnp.asarray([0.5]))))  # the failed region
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        result = mala.sample(jax.random.key(0), problem, np.array([0.3]), 300, n_chains=2, warmup=100)
    draws = result.flat_samples()[:, 0]
    assert np.all(np.isfinite(draws)) and draws.max() <= K_FAIL and draws.min() >= 0.05
    assert result.acceptance > 0.1
    assert np.all(np.asarray(result.extra["invalid_proposal_rate"]) > 0)  # it did propose k > K_FAIL


# --- 3. priors cut by the bounds say how much -------------------------------------------------
def _percent(fraction):
    return f"{100 * fraction:.1f} %"


TRUNCATION_ROWS = [
    # (prior, parameter, reference fraction outside the bounds (scipy), expected fragment)
    (LogNormal(-1.0, 1.0), Parameter("s", 0.1, 1e-3, 1.0, log_scale=True),
     stats.lognorm(s=1.0, scale=np.exp(-1.0)).cdf(1e-3) + stats.lognorm(s=1.0, scale=np.exp(-1.0)).sf(1.0),
     "LogNormal prior on 's': 15.9 % of its mass lies outside the bounds [0.001, 1.0]"),
    (Normal(0.0, 1.0), Parameter("x", 0.0, -1.0, 1.0), 2 * stats.norm.sf(1.0),
     "Normal prior on 'x': 31.7 % of its mass"),
    (Normal(2.0, 1.0), Parameter("x", 0.5, 0.0, 1.0), 1 - (stats.norm.cdf(-1.0) - stats.norm.cdf(-2.0)),
     "Normal prior on 'x': the mean 2.0 lies outside the bounds [0.0, 1.0], so 86.4 % of its mass"),
    (HalfNormal(2.0), Parameter("x", 1.0, 0.0, 3.0), stats.halfnorm(scale=2.0).sf(3.0),
     "HalfNormal prior on 'x': 13.4 % of its mass"),
]


@pytest.mark.parametrize("prior,parameter,reference,fragment", TRUNCATION_ROWS)
def test_prior_truncation_warning(prior, parameter, reference, fragment):
    assert truncation_fraction(prior, parameter) == pytest.approx(reference, rel=1e-9)
    assert _percent(reference) in fragment
    with pytest.warns(PriorTruncationWarning, match="widen the bounds") as caught:
        bind_priors({parameter.name: prior}, ParameterSpace([parameter]))
    assert fragment in str(caught[0].message)


@pytest.mark.parametrize("prior,parameter", [
    (Normal(0.0, 1.0), Parameter("x", 0.0, -3.0, 3.0)),  # 0.27 % outside: below the 1 % threshold
    (LogNormal(-1.0, 0.5), Parameter("s", 0.1, 1e-3, 10.0, log_scale=True)),
])
def test_no_truncation_warning_for_small_cuts(prior, parameter):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorTruncationWarning)
        bind_priors({parameter.name: prior}, ParameterSpace([parameter]))
    assert truncation_fraction(prior, parameter) < 0.01


@pytest.mark.unwrapped  # checks the warning's stack level, which the shape check's wrappers change
def test_noise_prior_cut_by_default_noise_bounds():
    """The issue's case: default noise bounds (1e-3, 1) cut 16 % of a LogNormal(-1, 1) prior
    on σ; the warning comes at problem construction and names σ and the percentage."""
    model = four_substance_reactions(observe="A")
    ts = np.asarray(model.ts)
    data = Measurements(ts, np.ones((ts.size, 1)), output_names=("A",))
    dist = stats.lognorm(s=1.0, scale=np.exp(-1.0))
    reference = _percent(dist.cdf(1e-3) + dist.sf(1.0))
    assert reference == "15.9 %"
    with pytest.warns(PriorTruncationWarning, match=rf"LogNormal prior on 'sigma_A': {reference} of its mass lies "
                                                    r"outside the bounds \[0.001, 1.0\].*noise_parameters") as caught:
        CalibrationProblem(model, data, likelihood="relative", noise_parameters=True,
                           prior={"sigma_A": LogNormal(-1.0, 1.0)})
    assert caught[0].filename == __file__  # attributed to the caller, not to jcalib


def test_truncation_advice_fits_the_bounds_and_is_not_repeated():
    """Issue 35 §1.11: a Normal prior on a parameter of (0, inf) is truncated to its half-line as
    Stan does; the warning says so instead of advising wider bounds; a problem derived from one
    that warned (its `fix`) does not warn again."""
    message = r"Normal prior on 'x': 30.9 % of its mass lies outside the half-line \[0.0, inf\] .*use LogNormal"
    with pytest.warns(PriorTruncationWarning, match=message):
        bind_priors({"x": Normal(0.5, 1.0)}, ParameterSpace([Parameter("x", 1.0, 0.0, np.inf)]))
    model = four_substance_reactions(observe="A")
    ts = np.asarray(model.ts)
    data = Measurements(ts, np.ones((ts.size, 1)), sigma=np.full((ts.size, 1), 0.1), output_names=("A",))
    with pytest.warns(PriorTruncationWarning) as caught:
        problem = CalibrationProblem(model, data, weighting="sigma", prior={"kab": Normal(1e-4, 1e-3)})
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorTruncationWarning)
        problem.fix({"kad": 5e-5})


def test_the_advice_is_what_the_run_did_not_do():
    """Issue 35 §1.11: no 'warmup=500' to a run that had 500, no Laplace to a Laplace run; the
    command line passes its own flags."""
    from jcalib.bayes.diagnostics import sampling_advice, sampling_warnings

    assert sampling_advice() == ("warmup=500 (adapts the step sizes)",
                                 "preconditioner=Laplace() (whitens a correlated posterior)", "more draws (n_steps)")
    assert sampling_advice(warmup=800, metric="Laplace") == ("a warmup longer than 800", "more draws (n_steps)")
    assert sampling_advice(warmup=100, metric="DenseMetric") == ("warmup=500 (adapts the step sizes)",
                                                                  "more draws (n_steps)")
    stalled = sampling_warnings(["k"], np.zeros(2), np.array([1.0]), np.array([400.0]),
                                ("--warmup 500", "more draws (--steps)"))
    assert stalled[0].endswith("use --warmup 500 or more draws (--steps)")
    assert sampling_warnings(["k"], np.zeros(2), np.array([1.0]), np.array([400.0]), ("more draws (--steps)",)
                             )[0].endswith("use more draws (--steps)")
