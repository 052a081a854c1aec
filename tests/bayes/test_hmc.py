"""HMC and NUTS through `jcalib.bayes.hmc.sample` and `jcalib.bayes.nuts.sample`: a correlated
2-D Gaussian with known moments (tolerances from the MCSE), Laplace whitening as the default metric, failed solves as
divergences never accepted, the strategies and adaptation pieces, a four-substance reaction
smoke run and bad inputs."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.algorithm import run, vmap_chains
from jcalib.bayes import DenseMetric, Laplace, Prescaled, SamplingWarning, adaptation, hmc, nuts
from jcalib.bayes.result import PosteriorResult
from jcalib.problems import CalibrationProblem
from tests.bayes.problems import CutLinearModel, gaussian_problem
from tests.helpers import interrupt_run

MEAN = np.array([1.0, -2.0])
COV = np.array([[1.0, 1.8], [1.8, 4.0]])  # correlation 0.9
N_CHAINS, N_STEPS, WARMUP = 4, 1000, 200


GAUSSIAN = gaussian_problem(MEAN, COV)  # the posterior is N(MEAN, COV)
HALF_FAILING = gaussian_problem(np.zeros(2), np.eye(2), model_cls=CutLinearModel)  # solves fail for x0 > 0.5


SAMPLERS = {"hmc": hmc.sample, "nuts": nuts.sample}


def _gaussian(x):
    d = x - jnp.asarray(MEAN)
    return -0.5 * d @ jnp.asarray(np.linalg.inv(COV)) @ d


@pytest.fixture(scope="module", params=["hmc", "nuts"])
def gaussian_run(request):
    result = SAMPLERS[request.param](jax.random.key(0), GAUSSIAN, np.zeros(2), N_STEPS, n_chains=N_CHAINS,
                                     warmup=WARMUP)
    return request.param, result


@pytest.mark.slow
def test_moments_of_a_correlated_gaussian(gaussian_run):
    kernel, result = gaussian_run
    assert isinstance(result, PosteriorResult) and result.samples.shape == (N_CHAINS, N_STEPS, 2)
    assert result.method.startswith(kernel)
    np.testing.assert_array_less(np.abs(result.mean - MEAN), 5 * result.mcse_mean)
    np.testing.assert_array_less(np.abs(result.sd - np.sqrt(np.diag(COV))), 5 * result.mcse_sd)
    corr = np.corrcoef(result.flat_samples(), rowvar=False)[0, 1]
    assert abs(corr - 0.9) < 0.02, corr  # sd of a sample correlation ~ (1 - ρ²)/√ESS ≈ 0.003
    assert np.all(result.rhat < 1.05) and np.all(result.ess_bulk > 1000), (result.rhat, result.ess_bulk)
    assert result.warnings == ()
    np.testing.assert_array_equal(result.extra["divergences"], 0)


@pytest.mark.slow
def test_laplace_whitening_is_the_default_metric(gaussian_run):
    kernel, result = gaussian_run
    assert result.extra["metric"] == "Laplace" and result.extra["kernel"] == kernel
    np.testing.assert_allclose(result.extra["inverse_mass_matrix"], COV, rtol=1e-6)
    # the warm-up reaches the target acceptance 0.8 (4 chains x 1000 draws: sd of the mean < 0.01)
    assert abs(np.mean(result.extra["mean_acceptance_probability"]) - 0.8) < 0.05
    assert result.n_logdensity_evaluations > N_CHAINS * (N_STEPS + WARMUP)  # ≥ 1 leapfrog step per transition


@pytest.mark.slow
def test_same_key_same_draws_and_dense_metric_is_laplace_here():
    kwargs = dict(n_chains=2, warmup=20)
    a = nuts.sample(jax.random.key(4), GAUSSIAN, np.zeros(2), 50, **kwargs)
    b = nuts.sample(jax.random.key(4), GAUSSIAN, np.zeros(2), 50, preconditioner=Laplace(), **kwargs)
    c = nuts.sample(jax.random.key(4), GAUSSIAN, np.zeros(2), 50, preconditioner=DenseMetric(COV), **kwargs)
    d = nuts.sample(jax.random.key(5), GAUSSIAN, np.zeros(2), 50, **kwargs)
    chunked = nuts.sample(jax.random.key(4), GAUSSIAN, np.zeros(2), 50, chunk_size=15, **kwargs)
    np.testing.assert_array_equal(a.samples, b.samples)
    np.testing.assert_array_equal(chunked.samples, a.samples)  # chunking does not change the draws
    np.testing.assert_allclose(c.samples, a.samples, atol=1e-4)  # Laplace = COV up to finite differences
    assert not np.allclose(d.samples, a.samples)


def test_sampling_warnings_as_for_mala():
    """Issue 17's warnings come with every kernel: 2 x 20 draws cannot reach a bulk ESS of 100."""
    with pytest.warns(SamplingWarning, match="bulk ESS below 100"):
        result = hmc.sample(jax.random.key(6), GAUSSIAN, np.zeros(2), 20, n_chains=2,
                            preconditioner=DenseMetric(COV))
    assert any("bulk ESS below 100" in message for message in result.warnings)
    assert result.to_dict()["warnings"] == list(result.warnings)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["hmc", "nuts"])
def test_failed_solves_are_divergences_never_accepted(kernel):
    """A standard normal whose 'solve' fails for x0 > 0.5: the target is truncated there."""
    result = SAMPLERS[kernel](jax.random.key(2), HALF_FAILING, np.zeros(2), 1500, n_chains=2, warmup=200,
                              preconditioner=DenseMetric(np.eye(2)))
    x = result.flat_samples()
    assert np.all(np.isfinite(result.logdensity)) and np.all(x[:, 0] <= 0.5)
    assert np.sum(result.extra["divergences"]) > 0
    # mean of N(0, 1) truncated to x < 0.5: -φ(0.5)/Φ(0.5)
    phi, big_phi = math.exp(-0.125) / math.sqrt(2 * math.pi), 0.5 * (1 + math.erf(0.5 / math.sqrt(2)))
    assert abs(result.mean[0] + phi / big_phi) < 5 * result.mcse_mean[0]
    assert abs(result.mean[1]) < 5 * result.mcse_mean[1]


@pytest.mark.slow
def test_prescaled_metric_and_explicit_step():
    result = hmc.sample(jax.random.key(1), GAUSSIAN, np.zeros(2), 200, n_chains=2,
                        preconditioner=Prescaled(0.0001), step_sizes=0.3)
    assert result.extra["metric"] == "Prescaled" and result.extra["step_size"] == 0.3
    np.testing.assert_allclose(result.extra["inverse_mass_matrix"], result.extra["step_sizes_prescaled"])
    assert np.all(np.isfinite(result.samples))


@pytest.mark.slow
@pytest.mark.parametrize("build", [hmc.hmc_algorithm, nuts.nuts_algorithm])
def test_algorithms_on_a_raw_log_density(build):
    """The builders are `Algorithm`s for any log density: `run` gives the Gaussian's moments."""
    chains = vmap_chains(build(_gaussian, 0.8, COV))
    out = run(jax.random.key(8), chains, chains.init(jnp.zeros((4, 2))), 600,
              trace_fn=lambda state, info: state.position)
    draws = np.asarray(out.trace)[100:].reshape(-1, 2)
    assert out.status == "completed" and out.trace.shape == (600, 4, 2)
    # 2000 draws, ESS per draw about 1 for whitened HMC/NUTS: 5 sd of the mean is 5 sqrt(4 / 2000) < 0.25
    np.testing.assert_allclose(draws.mean(axis=0), MEAN, atol=0.25)
    np.testing.assert_allclose(np.cov(draws, rowvar=False), COV, rtol=0.2, atol=0.2)


def test_dual_averaging_finds_the_step_of_the_target_acceptance():
    """Acceptance exp(-s) for a factor s: dual averaging settles at s̄ = -log(target)."""
    def body(da, _):
        return adaptation.dual_averaging_update(da, 0.6, jnp.exp(-jnp.exp(da.log_x))), None

    da, _ = jax.lax.scan(body, adaptation.dual_averaging_init(jnp.float64), length=3000)
    assert float(jnp.exp(da.log_x_avg)) == pytest.approx(-math.log(0.6), rel=0.02)


@pytest.fixture(scope="module")
def reactions():
    model = jcalib.models.get("four_substance_reactions", observe="ABCD")
    data = jcalib.synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, sigma=0.05)
    return model, CalibrationProblem(model, data, weighting="relative")


@pytest.mark.slow  # ~25 s of compiles; make test covers NUTS on this posterior in tests/cli/test_cli_kernels.py
def test_nuts_on_the_reaction_posterior(reactions):
    """Smoke run on an ODE posterior: a PosteriorResult with names, ESS and R-hat."""
    model, problem = reactions
    start = problem.to_internal(jnp.asarray(model.parameters.nominal))
    result = nuts.sample(jax.random.key(3), problem, start, 60, coordinates="internal", n_chains=2, warmup=40)
    assert result.names == ("kab", "kac", "kad") and result.samples.shape == (2, 60, 3)
    assert np.all(np.isfinite(result.samples)) and np.all(np.isfinite(result.ess_bulk))
    assert np.all(np.isfinite(result.rhat)) and result.extra["kernel"] == "nuts"
    lo, hi = result.interval(0.999)
    nominal = np.asarray(model.parameters.nominal)
    assert np.all((lo < nominal) & (nominal < hi)), (lo, nominal, hi)


@pytest.mark.parametrize("kernel, kwargs, message", [
    ("hmc", dict(step_sizes=-1.0), "step_sizes is the leapfrog step"),
    ("hmc", dict(step_sizes=np.ones(2)), "one positive number; got array"),
    ("nuts", dict(preconditioner="hessian"), "preconditioner must be Prescaled(fraction), DenseMetric"),
    ("nuts", dict(preconditioner=DenseMetric(np.eye(3))), "preconditioner must have shape (2, 2)"),
    ("nuts", dict(preconditioner=DenseMetric(-np.eye(2))), "positive definite"),
])
def test_bad_input(kernel, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SAMPLERS[kernel](jax.random.key(0), GAUSSIAN, np.zeros(2), 10, n_chains=2, **kwargs)


def test_bad_start_and_strategies():
    with pytest.raises(ValueError, match="not finite at theta0"):
        nuts.sample(jax.random.key(0), HALF_FAILING, np.array([2.0, 0.0]), 10, n_chains=2,
                    preconditioner=DenseMetric(np.eye(2)))
    with pytest.raises(ValueError, match=re.escape("hmc_algorithm: step_size must be a positive number; got 0.0")):
        hmc.hmc_algorithm(_gaussian, 0.0, np.ones(2))
    with pytest.raises(ValueError, match=re.escape("Prescaled: fraction must be positive and finite")):
        Prescaled(0.0)
    with pytest.raises(ValueError, match=re.escape("Prescaled: fraction must be positive and finite")):
        Prescaled("big")
    with pytest.raises(ValueError, match=re.escape(r"Laplace: rel_step must lie in (0, 1); got 2")):
        Laplace(rel_step=2)
    with pytest.raises(ValueError, match=re.escape("Laplace: max_sd must be a positive number or None")):
        Laplace(max_sd=-1.0)


def test_interrupted_sampling_keeps_the_finished_chunks(monkeypatch):
    """`sample` reports run's status: Ctrl-C in the sampling phase keeps the finished chunks (the
    same draws as the full run); during the burn-in or warm-up there is nothing to keep."""
    kwargs = dict(n_chains=2, preconditioner=DenseMetric(COV), chunk_size=10)
    with pytest.warns(SamplingWarning):  # 2 x 40 draws: bulk ESS below 100
        full = hmc.sample(jax.random.key(7), GAUSSIAN, np.zeros(2), 40, burn_in=10, **kwargs)
    interrupt_run(monkeypatch, 4)  # chunks of 10 steps: burn-in, then 2 of sampling, then Ctrl-C
    with pytest.warns(SamplingWarning):
        cut = hmc.sample(jax.random.key(7), GAUSSIAN, np.zeros(2), 40, burn_in=10, **kwargs)
    assert full.extra["status"] == "completed" and cut.extra["status"] == "interrupted"
    assert cut.n_draws == 20 and full.n_draws == 40
    np.testing.assert_array_equal(cut.samples, full.samples[:, :20])
    for settings in (dict(burn_in=10), dict(warmup=10)):
        interrupt_run(monkeypatch, 1)
        with pytest.raises(KeyboardInterrupt, match="interrupted during the warm-up or burn-in"):
            hmc.sample(jax.random.key(7), GAUSSIAN, np.zeros(2), 40, **settings, **kwargs)
