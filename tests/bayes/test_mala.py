"""Prescaled MALA: analytic linear-Gaussian posteriors, detailed balance, equality with
blackjax in rescaled coordinates, rejections of -inf/NaN regions, the prescaling rule,
results (save/load, dict, ArviZ) and bad inputs."""

import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.algorithm import run, vmap_chains
from jcalib.bayes import Prescaled, mala
from jcalib.bayes.result import PosteriorResult
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import Normal
from tests.bayes.problems import gaussian_problem, linear_problem

# --- linear-Gaussian reference: y = A θ + ε, ε ~ N(0, σ² I) ------------------------------------
N_OBS, SIGMA = 30, 0.5
THETA_TRUE = np.array([1.0, -2.0, 40.0])
SCALES = np.array([1.0, 1.0, 100.0])  # the third parameter is ~100x less constrained
N_CHAINS, N_STEPS, WARMUP = 4, 3000, 300


def _design():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(N_OBS, 3))
    a[:, 1] += 0.6 * a[:, 0]  # correlated posterior
    a[:, 2] /= SCALES[2]
    y = a @ THETA_TRUE + SIGMA * rng.normal(size=N_OBS)
    return a, y


A, Y = _design()
_POST_SD = SIGMA * np.sqrt(np.diag(np.linalg.inv(A.T @ A)))
LOWER, UPPER = THETA_TRUE - 200 * _POST_SD, THETA_TRUE + 200 * _POST_SD  # wide uniform box
PRIOR_MEAN, PRIOR_SD = THETA_TRUE + 2 * _POST_SD, 1.5 * _POST_SD


def _analytic(prior: str):
    precision = A.T @ A / SIGMA**2
    shift = A.T @ Y / SIGMA**2
    if prior == "gaussian":
        precision = precision + np.diag(1 / PRIOR_SD**2)
        shift = shift + PRIOR_MEAN / PRIOR_SD**2
    cov = np.linalg.inv(precision)
    return cov @ shift, cov


SPACE = ParameterSpace([Parameter(n, float(t), float(lo), float(hi))
                        for n, t, lo, hi in zip("abc", THETA_TRUE, LOWER, UPPER)])


def _problem(prior: str):
    """y = A θ + ε with a uniform box prior or Normal priors (the box cuts no prior mass)."""
    spec = "uniform" if prior == "uniform" else {n: Normal(float(m), float(s))
                                                  for n, m, s in zip("abc", PRIOR_MEAN, PRIOR_SD)}
    return linear_problem(A, Y, SIGMA, SPACE, prior=spec)


@pytest.fixture(scope="module", params=["uniform", "gaussian"])
def linear_run(request):
    prior = request.param
    result = mala.sample(jax.random.key(11), _problem(prior), THETA_TRUE, N_STEPS, n_chains=N_CHAINS,
                         warmup=WARMUP, preconditioner=Prescaled(0.01))
    return prior, result


@pytest.mark.slow
def test_linear_gaussian_mean_and_covariance(linear_run):
    """Posterior mean, sd and covariances agree with the analytic ones within ~5 MCSE."""
    prior, result = linear_run
    mean, cov = _analytic(prior)
    assert np.all(result.rhat < 1.05)
    assert np.all(result.ess_bulk > 300)
    np.testing.assert_array_less(np.abs(result.mean - mean), 5 * result.mcse_mean)
    np.testing.assert_array_less(np.abs(result.sd - np.sqrt(np.diag(cov))), 5 * result.mcse_sd)
    flat = result.flat_samples()
    sample_cov = np.cov(flat, rowvar=False)
    ess = result.ess_bulk
    for i in range(3):
        for j in range(i):
            # sd of a sample covariance: sqrt((Σii Σjj + Σij²) / n_eff)
            se = math.sqrt((cov[i, i] * cov[j, j] + cov[i, j] ** 2) / min(ess[i], ess[j]))
            assert abs(sample_cov[i, j] - cov[i, j]) < 5 * se, (i, j, sample_cov[i, j], cov[i, j], se)
    # the warm-up reaches the target acceptance (0.6), the paper's 50-70 % window
    assert 0.45 < result.acceptance < 0.75
    # prescaling: P scales like the posterior variance (third parameter ~100² larger)
    assert result.step_sizes[2] / result.step_sizes[0] > 100


@pytest.mark.slow
def test_result_fields_and_best(linear_run):
    _, result = linear_run
    assert result.samples.shape == (N_CHAINS, N_STEPS, 3)
    assert result.names == ("a", "b", "c")
    np.testing.assert_array_equal(result.samples, result.samples_internal)  # identity map
    assert result.logdensity.shape == (N_CHAINS, N_STEPS)
    assert result.best_logdensity == pytest.approx(np.max(result.logdensity))
    assert np.all(np.isfinite(result.logdensity))
    assert result.quantiles.shape == (3, 3)
    assert np.all(result.quantiles[0] < result.quantiles[1]) and np.all(result.quantiles[1] < result.quantiles[2])
    np.testing.assert_allclose(result.interval(0.9), result.quantiles[[0, 2]])
    # the 100 prescaling draws, the starts, then warm-up and sampling steps
    assert result.n_logdensity_evaluations == N_CHAINS * (1 + WARMUP + N_STEPS) + 100
    assert result.extra["status"] == "completed"
    np.testing.assert_array_equal(result.extra["invalid_proposal_rate"], 0.0)
    # a ratio of the reported numbers, not a speed check
    np.testing.assert_allclose(result.ess_per_second, result.ess_bulk / result.wall_time_s)


def test_result_to_dict_save_load_inference_data(linear_run, tmp_path):
    _, result = linear_run
    d = result.to_dict()
    json.dumps(d, allow_nan=False)
    assert set(d["summary"]) == {"a", "b", "c"} and d["n_draws"] == N_STEPS
    path = tmp_path / "posterior.npz"
    result.save(path)
    loaded = PosteriorResult.load(path)
    for name in ("samples", "samples_internal", "logdensity", "acceptance_rate", "step_sizes", "mean", "sd",
                 "quantiles", "ess_bulk", "rhat", "mcse_mean", "best"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(result, name))
    assert loaded.names == result.names and loaded.log_scale == result.log_scale
    assert loaded.to_dict() == d
    idata = result.to_inference_data()
    assert set(idata.posterior.data_vars) == {"a", "b", "c"}
    assert idata.posterior["a"].shape == (N_CHAINS, N_STEPS)
    np.testing.assert_array_equal(idata.sample_stats["lp"].values, result.logdensity)
    nc = tmp_path / "posterior.nc"
    idata.to_netcdf(str(nc))  # h5netcdf backend is installed
    assert nc.stat().st_size > 0


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(ValueError, match="no metadata entry"):
        PosteriorResult.load(path)


# --- kernel identities -------------------------------------------------------------------------
def _banana(x):
    """A non-Gaussian density with finite gradients everywhere."""
    return -0.5 * (x[0] ** 2 + 4.0 * (x[1] - 0.5 * x[0] ** 2) ** 2 + 0.25 * x[2] ** 2)


def test_detailed_balance_identity():
    """π(x) q(y|x) α(x,y) = π(y) q(x|y) α(y,x) (eq. A7) on random pairs and step sizes."""
    keys = jax.random.split(jax.random.key(4), 3)
    xs = 1.5 * jax.random.normal(keys[0], (200, 3))
    ys = xs + jax.random.normal(keys[1], (200, 3))
    p = jnp.exp(jax.random.normal(keys[2], (3,)))

    def both(x, y):
        sx, sy = mala._init_state(_banana, x), mala._init_state(_banana, y)
        forward = sx.logdensity + mala.proposal_log_density(sx, y, p) + mala.log_acceptance_ratio(sx, sy, p)
        backward = sy.logdensity + mala.proposal_log_density(sy, x, p) + mala.log_acceptance_ratio(sy, sx, p)
        return forward, backward, mala.log_acceptance_ratio(sx, sy, p)

    forward, backward, log_alpha = jax.jit(jax.vmap(both))(xs, ys)
    np.testing.assert_allclose(forward, backward, rtol=1e-12, atol=1e-10)
    assert 0 < np.mean(np.asarray(log_alpha) == 0) < 1  # both branches of the min are exercised


def test_kernel_uses_the_acceptance_probability():
    """The kernel's proposal and acceptance probability are those of eqs. A17 and A15."""
    p = jnp.array([0.3, 0.05, 2.0])
    algorithm = mala.mala_algorithm(_banana, p)
    state = algorithm.init(jnp.array([0.5, -0.2, 1.0]))
    step = jax.jit(algorithm.step)
    for i in range(20):
        key = jax.random.key(i)
        new_state, info = step(key, state)
        noise = jax.random.normal(jax.random.split(key)[0], (3,), dtype=jnp.float64)
        y = state.position + p * state.logdensity_grad + jnp.sqrt(2 * p) * noise
        log_alpha = mala.log_acceptance_ratio(state, mala._init_state(_banana, y), p)
        np.testing.assert_allclose(info.acceptance_rate, jnp.exp(log_alpha), rtol=1e-12)
        expected = y if bool(info.is_accepted) else state.position
        np.testing.assert_allclose(new_state.position, expected, rtol=1e-14)
        state = new_state


def test_proposal_moments_on_a_linear_log_density():
    """For log π = bᵀθ every proposal is accepted (α = 1) and θ' ~ N(θ + P b, 2P)."""
    b = jnp.array([1.0, -3.0])
    p = jnp.array([0.2, 0.01])
    algorithm = mala.mala_algorithm(lambda x: jnp.dot(b, x), p)
    state = algorithm.init(jnp.array([1.0, 2.0]))
    n = 20000
    new, info = jax.jit(jax.vmap(algorithm.step, in_axes=(0, None)))(jax.random.split(jax.random.key(0), n), state)
    assert bool(jnp.all(info.is_accepted))
    mean = np.asarray(state.position + p * b)
    sd = np.sqrt(2 * np.asarray(p))
    np.testing.assert_array_less(np.abs(np.mean(new.position, axis=0) - mean), 5 * sd / math.sqrt(n))
    np.testing.assert_allclose(np.std(new.position, axis=0), sd, rtol=5 * math.sqrt(0.5 / n))


def test_prescaled_kernel_equals_blackjax_in_rescaled_coordinates():
    p = jnp.array([0.3, 0.05, 2.0])

    def run(algorithm):
        def body(state, key):
            state, info = algorithm.step(key, state)
            return state, (state.position, info.is_accepted, info.acceptance_rate)

        return jax.lax.scan(body, algorithm.init(jnp.array([0.5, -0.2, 1.0])),
                            jax.random.split(jax.random.key(7), 300))[1]

    ours, theirs = run(mala.mala_algorithm(_banana, p)), run(mala.mala_algorithm(_banana, p, backend="blackjax"))
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert 0.2 < float(np.mean(ours[1])) < 0.95
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_sample_backends_agree_and_chunks_do_not_change_draws():
    problem = _problem("uniform")
    kwargs = dict(n_chains=2, step_sizes=np.asarray(0.3 * _POST_SD**2), burn_in=10, thin=2)
    ours = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, **kwargs)
    theirs = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, backend="blackjax", **kwargs)
    # round-off of θ = √p u differs between the two and is amplified along the chain
    np.testing.assert_allclose(ours.samples, theirs.samples, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(ours.acceptance_rate, theirs.acceptance_rate)
    chunked = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, chunk_size=30, progress=True, **kwargs)
    np.testing.assert_array_equal(chunked.samples, ours.samples)
    np.testing.assert_array_equal(chunked.acceptance_rate, ours.acceptance_rate)
    again = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, **kwargs)
    np.testing.assert_array_equal(again.samples, ours.samples)
    other = mala.sample(jax.random.key(2), problem, THETA_TRUE, 200, **kwargs)
    assert not np.array_equal(other.samples, ours.samples)
    assert ours.samples.shape == (2, 100, 3) and ours.thin == 2 and ours.burn_in == 10
    assert 0.1 < ours.acceptance < 0.99


@pytest.mark.slow
def test_algorithm_chunks_do_not_change_draws():
    """`mala_algorithm` driven by `jcalib.algorithm.run`: the same draws in one chunk or many."""
    chains = vmap_chains(mala.mala_algorithm(_banana, jnp.array([0.3, 0.05, 2.0])))
    states = chains.init(jnp.zeros((2, 3)))

    def positions(**kwargs):
        return run(jax.random.key(3), chains, states, 60, trace_fn=lambda s, i: s.position, **kwargs).trace

    whole = positions()
    np.testing.assert_array_equal(positions(chunk_size=7), whole)
    np.testing.assert_array_equal(positions(chunk_size=4, thin=2), whole[1::2])
    assert whole.shape == (60, 2, 3) and not np.array_equal(whole[0, 0], whole[0, 1])


@pytest.mark.slow
def test_diagonal_preconditioner_gives_the_prescaled_chain():
    """C = diag(p) with h = 1 is the prescaled proposal, draw for draw (module doc)."""
    problem = _problem("uniform")
    p = np.asarray(0.3 * _POST_SD**2)
    ours = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, n_chains=2, step_sizes=p)
    dense = mala.sample(jax.random.key(1), problem, THETA_TRUE, 200, n_chains=2, step_sizes=1.0,
                        preconditioner=np.diag(p))
    np.testing.assert_allclose(dense.samples, ours.samples, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(dense.acceptance_rate, ours.acceptance_rate)
    np.testing.assert_allclose(dense.step_sizes, p, rtol=1e-12)
    assert dense.method.startswith("preconditioned-mala")


@pytest.mark.slow
def test_dense_preconditioner_on_the_linear_gaussian(linear_run):
    """With the posterior covariance as C the chain follows the correlations: the analytic
    moments within ~5 MCSE and a far larger ESS per draw than the diagonal sampler."""
    prior, diagonal = linear_run
    mean, cov = _analytic(prior)
    result = mala.sample(jax.random.key(12), _problem(prior), THETA_TRUE, 1000, n_chains=N_CHAINS, warmup=WARMUP,
                         preconditioner=cov)
    assert np.all(result.rhat < 1.05)
    np.testing.assert_array_less(np.abs(result.mean - mean), 5 * result.mcse_mean)
    np.testing.assert_array_less(np.abs(result.sd - np.sqrt(np.diag(cov))), 5 * result.mcse_sd)
    per_draw = result.ess_bulk / (result.n_chains * result.n_draws)
    per_draw_diagonal = diagonal.ess_bulk / (diagonal.n_chains * diagonal.n_draws)
    assert np.all(per_draw > 0.2) and np.all(per_draw > per_draw_diagonal), (per_draw, per_draw_diagonal)
    assert 0.45 < result.acceptance < 0.75
    np.testing.assert_allclose(result.extra["preconditioner"], cov, rtol=1e-12)


RIDGE_COV = np.array([[1.0, 9.95], [9.95, 100.0]])  # correlation 0.995 and scales 1 and 10


@pytest.mark.slow
def test_dense_preconditioner_follows_a_ridge():
    """A diagonal P must take steps of the ridge's width (about 0.1 sd along it); the dense
    preconditioner moves along it: > 20x the ESS of the (warmed-up) diagonal sampler."""
    ridge = gaussian_problem(np.zeros(2), RIDGE_COV)  # box ± 1000
    kwargs = dict(n_chains=4, warmup=300)
    diagonal = mala.sample(jax.random.key(1), ridge, None, 2000, preconditioner=Prescaled(0.001), **kwargs)
    dense = mala.sample(jax.random.key(1), ridge, None, 2000, preconditioner=RIDGE_COV, **kwargs)
    assert np.all(dense.ess_bulk > 20 * diagonal.ess_bulk), (dense.ess_bulk, diagonal.ess_bulk)
    np.testing.assert_array_less(np.abs(dense.mean), 5 * dense.mcse_mean)
    np.testing.assert_allclose(np.cov(dense.flat_samples(), rowvar=False), RIDGE_COV, rtol=0.1)


@pytest.mark.parametrize("matrix, step, message", [
    (np.eye(2), "prescaled", "shape (3, 3)"),
    (np.array([[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]), "prescaled", "symmetric"),
    (np.diag([1.0, -1.0, 1.0]), "prescaled", "positive definite"),
    (np.eye(3), np.ones(3), "one positive number h"),
    (np.eye(3), "adaptive", "'prescaled' or a positive number"),
])
def test_preconditioner_bad_input(matrix, step, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mala.sample(jax.random.key(0), _problem("uniform"), THETA_TRUE, 10, preconditioner=matrix, step_sizes=step)


# --- the prescaling rule (Appendix A.2) ----------------------------------------------------------
def test_prescaling_solves_the_step_length_equation():
    """P_ii mean|∂_i S| + 2 √(P_ii/π) = τ_i (eq. A23) with posterior weights (eq. A22)."""
    lower, upper = np.array([-1.0, -10.0, -100.0]), np.array([1.0, 10.0, 100.0])
    pre = mala.prescaling(jax.random.key(0), _banana, (lower, upper), fraction=0.02)
    np.testing.assert_allclose(pre.tau, 0.02 * (upper - lower))
    lhs = pre.step_sizes * pre.mean_abs_grad + 2 * np.sqrt(pre.step_sizes / np.pi)
    np.testing.assert_allclose(lhs, pre.tau, rtol=1e-12)
    # weights ∝ π(θ_k) and the weighted mean of |∇ log π| (= |∇ S|)
    values, grads = jax.vmap(jax.value_and_grad(_banana))(pre.draws)
    w = np.exp(values - np.max(values))
    np.testing.assert_allclose(pre.weights, w / w.sum(), rtol=1e-10)
    np.testing.assert_allclose(pre.mean_abs_grad, (w[:, None] * np.abs(grads)).sum(0) / w.sum(), rtol=1e-10)
    assert pre.draws.shape == (100, 3) and int(pre.n_valid) == 100
    draws = np.asarray(pre.draws)
    assert np.all((draws >= lower) & (draws <= upper))
    np.testing.assert_array_equal(mala.step_sizes(jax.random.key(0), _banana, (lower, upper), fraction=0.02),
                                  pre.step_sizes)


def test_prescaling_flat_density_and_equivariance():
    """Zero gradient: P = π τ²/4; scaling a coordinate by c scales P_ii by c²."""
    pre = mala.prescaling(jax.random.key(0), lambda x: 0.0 * jnp.sum(x), (-jnp.ones(2), jnp.ones(2)), fraction=0.1)
    np.testing.assert_allclose(pre.step_sizes, np.pi * 0.2**2 / 4, rtol=1e-12)
    c = jnp.array([1.0, 50.0])
    base = mala.prescaling(jax.random.key(3), _banana, (-2 * jnp.ones(3), 2 * jnp.ones(3)))
    scaled = mala.prescaling(jax.random.key(3), lambda z: _banana(z / jnp.append(c, 1.0)),
                             (-2 * jnp.append(c, 1.0), 2 * jnp.append(c, 1.0)))
    np.testing.assert_allclose(scaled.step_sizes, base.step_sizes * jnp.append(c, 1.0) ** 2, rtol=1e-9)


def test_prescaling_around_a_center_and_invalid_draws():
    center = jnp.array([0.2, 0.1, 0.0])
    pre = mala.prescaling(jax.random.key(0), _banana, (-10 * jnp.ones(3), 10 * jnp.ones(3)), center=center,
                          spread=0.01)
    np.testing.assert_allclose(np.mean(pre.draws, axis=0), center, atol=0.1)
    with pytest.raises(ValueError, match="not finite at any"):
        mala.prescaling(jax.random.key(0), lambda x: -jnp.inf * jnp.sum(x**2) - jnp.inf,
                        (-jnp.ones(2), jnp.ones(2)))
    # draws where the density is -inf get weight 0 (half the box is outside the support)
    pre = mala.prescaling(jax.random.key(0), lambda x: jnp.where(x[0] > 0, -0.5 * jnp.sum(x**2), -jnp.inf),
                          (-jnp.ones(2), jnp.ones(2)))
    assert 20 < int(pre.n_valid) < 80
    assert np.all(np.asarray(pre.weights)[np.asarray(pre.draws[:, 0]) <= 0] == 0)


# --- rejections: -inf / NaN regions never reach the chain ----------------------------------------
@jax.custom_jvp
def _nan_gradient_beyond(x):
    """0 everywhere, with a NaN derivative where x[0] > 0.5 (a finite value, a broken gradient)."""
    return 0.0 * x[0]


@_nan_gradient_beyond.defjvp
def _nan_gradient_beyond_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _nan_gradient_beyond(x), jnp.where(x[0] > 0.5, jnp.nan, 0.0) * t[0]


def _run_chains(logdensity_fn, x0, n_steps, step_sizes, n_chains=2, key=5, backend="jcalib"):
    """Two chains of `mala_algorithm` from ``x0`` driven by `run`, as a `PosteriorResult`."""
    chains = vmap_chains(mala.mala_algorithm(logdensity_fn, step_sizes, backend=backend))
    out = run(jax.random.key(key), chains, chains.init(jnp.tile(x0, (n_chains, 1))), n_steps,
              trace_fn=lambda state, info: (state.position, state.logdensity, info.is_accepted))
    position, logdensity, accepted = (np.swapaxes(np.asarray(x), 0, 1) for x in out.trace)
    return PosteriorResult.from_chains(position, logdensity, accepted.mean(axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nan_value", "nan_gradient", "minus_inf"])
def test_chain_next_to_a_bad_region_keeps_running(kind):
    def logdensity(x):
        base = -0.5 * jnp.sum(x**2)
        if kind == "nan_value":
            return jnp.where(x[0] > 0.5, jnp.nan, base)
        if kind == "nan_gradient":
            return base + _nan_gradient_beyond(x)
        return jnp.where(x[0] > 0.5, -jnp.inf, base)

    result = _run_chains(logdensity, jnp.array([0.45, 0.0]), 1500, 0.3)
    assert np.all(np.isfinite(result.samples)) and np.all(np.isfinite(result.logdensity))
    assert np.all(result.samples[..., 0] <= 0.5)
    assert 0.1 < result.acceptance < 0.9
    # the truncated standard normal: E[x1] = 0 is untouched by the cut in x0
    assert abs(result.mean[1]) < 5 * result.mcse_mean[1]


def test_kernel_reports_invalid_proposals():
    algorithm = mala.mala_algorithm(lambda x: jnp.where(x[0] > 0.0, jnp.nan, -0.5 * jnp.sum(x**2)),
                                    jnp.full(2, 4.0))
    state = algorithm.init(jnp.array([-0.1, 0.0]))
    _, info = jax.jit(jax.vmap(algorithm.step, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 500), state)
    invalid = ~np.asarray(info.is_valid)
    assert 0.2 < invalid.mean() < 0.8
    assert np.all(np.asarray(info.acceptance_rate)[invalid] == 0) and not np.any(np.asarray(info.is_accepted)[invalid])


# --- bad inputs -------------------------------------------------------------------------------
def test_bad_inputs():
    problem = _problem("uniform")
    x0, p = THETA_TRUE, np.ones(3)
    with pytest.raises(ValueError, match="theta0 must be float64"):
        mala.sample(jax.random.key(0), problem, jnp.zeros(3, dtype=jnp.float32), 10, step_sizes=p)
    with pytest.raises(ValueError, match="theta0 is outside the bounds"):
        mala.sample(jax.random.key(0), problem, UPPER + 1.0, 10, step_sizes=p)
    with pytest.raises(ValueError, match="n_steps=3 keeps no draw with thin=5"):
        mala.sample(jax.random.key(0), problem, x0, 3, thin=5, step_sizes=p)
    with pytest.raises(ValueError, match="n_chains must be a positive integer"):
        mala.sample(jax.random.key(0), problem, x0, 10, n_chains=0, step_sizes=p)
    with pytest.raises(ValueError, match="burn_in must be a non-negative integer"):
        mala.sample(jax.random.key(0), problem, x0, 10, burn_in=-1, step_sizes=p)
    with pytest.raises(ValueError, match=re.escape("theta0 has 3 rows but n_chains=4")):
        mala.sample(jax.random.key(0), problem, np.tile(x0, (3, 1)), 10, step_sizes=p)
    with pytest.raises(ValueError, match=re.escape("theta0 must have shape (3,) or (n_chains, 3)")):
        mala.sample(jax.random.key(0), problem, np.zeros(2), 10, step_sizes=p)
    with pytest.raises(ValueError, match=re.escape("theta0 names ['z'] that are not free parameters")):
        mala.sample(jax.random.key(0), problem, {"a": 1.0, "z": 2.0}, 10, step_sizes=p)
    with pytest.raises(ValueError, match=re.escape("coordinates must be one of ('physical', 'internal'); got 'log'")):
        mala.sample(jax.random.key(0), problem, x0, 10, coordinates="log")
    with pytest.raises(ValueError, match="step_sizes must be positive and finite"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes=jnp.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"step_sizes must be a scalar or have shape \(3,\)"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes=jnp.ones(2))
    with pytest.raises(ValueError, match="step_sizes must be 'prescaled'"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes="auto")
    with pytest.raises(ValueError, match="bounds need finite lower < upper"):
        mala.prescaling(jax.random.key(0), _banana, (jnp.ones(3), jnp.zeros(3)))
    with pytest.raises(ValueError, match="fraction must be positive and finite"):
        mala.sample(jax.random.key(0), problem, x0, 10, preconditioner=Prescaled(0.0))
    with pytest.raises(ValueError, match="fraction must be positive and finite"):
        mala.prescaling(jax.random.key(0), _banana, (-jnp.ones(3), jnp.ones(3)), fraction=np.array([0.1, 0.0, 0.1]))
    with pytest.raises(ValueError, match=r"target_acceptance must lie in \(0, 1\)"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes=p, warmup=10, target_acceptance=1.2)
    with pytest.raises(ValueError, match="backend must be one of"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes=p, backend="numpyro")
    with pytest.raises(ValueError, match="mala_algorithm: backend must be one of"):
        mala.mala_algorithm(_banana, p, backend="numpyro")
    with pytest.raises(ValueError, match="mala_algorithm: step_sizes must be positive and finite"):
        mala.mala_algorithm(_banana, np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        mala.sample(jax.random.key(0), problem, x0, 10, step_sizes=p, chunk_size=0)
    with pytest.raises(ValueError, match="problem must be a CalibrationProblem; got function .*mala_algorithm"):
        mala.sample(jax.random.key(0), _banana, x0, 10, step_sizes=p)
    with pytest.raises(ValueError, match=r"center must have shape \(3,\)"):
        mala.prescaling(jax.random.key(0), _banana, (-jnp.ones(3), jnp.ones(3)), center=jnp.zeros(2))
    with pytest.raises(ValueError, match="n_draws must be a positive integer"):
        mala.prescaling(jax.random.key(0), _banana, (-jnp.ones(3), jnp.ones(3)), n_draws=0)
    with pytest.raises(ValueError, match="spread must be a positive number"):
        mala.prescaling(jax.random.key(0), _banana, (-jnp.ones(3), jnp.ones(3)), spread=-1.0)
    with pytest.raises(ValueError, match=r"prescaling: bounds must be \(lower, upper\) in internal coordinates"):
        mala.prescaling(jax.random.key(0), _banana, None)
    with pytest.raises(ValueError, match="prescaling: logdensity_fn must be a function .* use prior_prescaling"):
        mala.prescaling(jax.random.key(0), problem, (-jnp.ones(3), jnp.ones(3)))
    with pytest.raises(ValueError, match="bounds must be two 1-D arrays of one shape"):
        mala.prescaling(jax.random.key(0), _banana, (jnp.zeros(3), jnp.ones(2)))
    with pytest.raises(ValueError, match=r"interval: prob must lie in \(0, 1\)"):
        PosteriorResult.from_chains(np.zeros((1, 5, 1)) + np.arange(5)[None, :, None], np.zeros((1, 5)),
                                    np.ones(1)).interval(1.5)
    with pytest.raises(ValueError, match="logdensity must have shape"):
        PosteriorResult.from_chains(np.zeros((2, 5, 1)), np.zeros((2, 4)), np.ones(2))


def test_float64_required():
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="MALA runs in float64"):
            mala.sample(jax.random.key(0), None, np.zeros(3), 10, step_sizes=1.0)
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.mark.slow
def test_starts_and_physical_values_from_the_problem():
    """theta0: None (nominal), physical values, a mapping or internal values give the same
    chain; samples are mapped to physical values by the problem's space."""
    space = ParameterSpace([Parameter("k", 1.0, 0.01, 100.0, "1/s", log_scale=True),
                            Parameter("c", 0.0, -5.0, 5.0)])
    problem = linear_problem(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([1.5, 0.5]), 1.0, space)
    kwargs = dict(n_chains=2, preconditioner=Prescaled(0.05))
    result = mala.sample(jax.random.key(0), problem, None, 200, **kwargs)
    np.testing.assert_allclose(result.samples[..., 0], np.exp(result.samples_internal[..., 0]), rtol=1e-14)
    np.testing.assert_array_equal(result.samples[..., 1], result.samples_internal[..., 1])
    assert result.names == ("k", "c") and result.units == ("1/s", "") and result.log_scale == (True, False)
    for theta0, coordinates in [(np.array([1.0, 0.0]), "physical"), ({"c": 0.0, "k": 1.0}, "physical"),
                                (np.zeros(2), "internal")]:
        again = mala.sample(jax.random.key(0), problem, theta0, 200, coordinates=coordinates, **kwargs)
        np.testing.assert_array_equal(again.samples, result.samples)


@pytest.mark.unwrapped  # counts entries of a compiled function's cache, which the shape check wraps
def test_sample_compiles_its_loop_once():
    """A later `sample` on the same problem, or on a new problem of the same structure, reuses the
    compiled sampling loop (the kernel, warm-up and trace functions are pytrees of module-level
    functions)."""
    from jcalib import algorithm

    kwargs = dict(n_chains=2, step_sizes=np.asarray(0.3 * _POST_SD**2), warmup=7)
    problem = _problem("uniform")
    size = algorithm._scan_chunk._cached._cache_size
    before = size()
    first = mala.sample(jax.random.key(1), problem, THETA_TRUE, 20, **kwargs)
    compiled = size()
    assert compiled == before + 1
    again = mala.sample(jax.random.key(2), problem, THETA_TRUE, 20, **kwargs)
    rebuilt = mala.sample(jax.random.key(1), _problem("uniform"), THETA_TRUE, 20, **kwargs)
    assert size() == compiled
    assert not np.array_equal(again.samples, first.samples)
    np.testing.assert_array_equal(rebuilt.samples, first.samples)
