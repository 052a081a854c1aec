"""AmortizedPosterior (BayesFlow) on a Gaussian-linear simulator with an analytic posterior:
posterior means and sds, SBC, exact save/load, batch consistency, online training, the
physical-density correction of log-scale parameters and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcalib.bayes.sbc import run_sbc
from jcalib.model import FunctionSimulator
from jcalib.nn import training
from jcalib.nn.bayesflow import SUMMARIES, AmortizedPosterior, BayesFlowConfig, PosteriorNetwork, bayesflow_loss
from jcalib.nn.training import TrainingConfig
from jcalib.parameters import Parameter, ParameterSpace
from tests.helpers import LinearModel

D, T, M = 2, 4, 2  # parameters, 'times', outputs: x = A θ + σ ε reshaped to (T, M)
SIGMA = 0.8
A = np.random.default_rng(0).normal(size=(T * M, D)) * 0.5
SPACE = ParameterSpace([Parameter(f"p{j}", 0.0, -10.0, 10.0) for j in range(D)])  # wide: N(0, 1) prior inside
COV = np.linalg.inv(np.eye(D) + A.T @ A / SIGMA**2)  # analytic posterior covariance (prior N(0, I))
DESCRIPTION = LinearModel(A.reshape(T, M, D), space=SPACE)  # the space and data shape (x = A θ)
N_TRAIN = 65536  # the amortization error of the mean falls with the training set (see below)


def simulate(key, n):
    """θ ~ N(0, I) (the prior), x ~ N(A θ, σ² I)."""
    k1, k2 = jax.random.split(key)
    theta = np.asarray(jax.random.normal(k1, (n, D)))
    x = theta @ A.T + SIGMA * np.asarray(jax.random.normal(k2, (n, T * M)))
    return theta, x.reshape(n, T, M)


def analytic(x):
    """Posterior means (n, D) and sds (D,) of the conjugate Gaussian model."""
    return (COV @ A.T @ x.reshape(-1, T * M).T / SIGMA**2).T, np.sqrt(np.diag(COV))


def quick_config(**changes):
    settings = dict(summary="lstm", summary_size=8, summary_hidden=32, n_blocks=2, coupling_hidden=(32, 32),
                    training=TrainingConfig(epochs=30, batch_size=256, learning_rate=3e-3, schedule="exponential",
                                            decay=0.9, progress=False))
    return BayesFlowConfig(**(settings | changes))


@pytest.fixture(scope="module")
def trained():
    train = simulate(jax.random.key(1), N_TRAIN)
    val = simulate(jax.random.key(2), 512)
    return AmortizedPosterior(DESCRIPTION, quick_config()).fit(jax.random.key(4), *train, val=val)


@pytest.fixture(scope="module")
def test_set():
    return simulate(jax.random.key(3), 200)


@pytest.mark.slow
def test_matches_the_analytic_posterior(trained, test_set):
    _, xs = test_set
    mu, sd = analytic(xs)
    mean, spread = trained.estimate(jax.random.key(4), xs, 4000)
    mean, spread = np.asarray(mean), np.asarray(spread)
    mean_error = np.sqrt(np.mean(((mean - mu) / sd) ** 2, axis=0))  # RMS over 200 observations, in posterior sds
    sd_error = np.sqrt(np.mean((spread / sd - 1.0) ** 2, axis=0))  # RMS relative error of the sd
    print("posterior mean error / sd:", mean_error, "sd relative error:", sd_error)
    # Monte Carlo error of 4000 draws: 0.016 sd for the mean, 1.1 % for the sd. The mean's error is
    # the network's amortization error and falls with the training set: 0.18 / 0.22 posterior sd
    # with 4,096 samples, 0.13 / 0.10 with 16,384, 0.067 / 0.060 with 65,536 (three data seeds:
    # 0.058-0.076); the sd error 1.4-1.8 %.
    assert np.all(sd_error < 0.10)
    assert np.all(mean_error < 0.10)
    # far better than the prior (mean 0, sd 1): the posterior contracts as analytically
    assert np.all(np.sqrt(np.mean(mu**2, axis=0)) / sd > 4 * mean_error)
    # the density too: log q(θ|x) against the analytic log posterior at the true θ
    theta = test_set[0]
    from scipy.stats import multivariate_normal
    exact = np.array([multivariate_normal(mu[i], COV).logpdf(theta[i]) for i in range(len(theta))])
    assert abs(float(np.mean(np.asarray(trained.log_prob(theta, xs)) - exact))) < 0.1


@pytest.mark.slow
def test_sbc_ranks_are_uniform(trained, test_set):
    result = run_sbc(jax.random.key(5), trained, *test_set, n_draws=99)
    print("SBC p-values", result.p_values)
    assert result.names == SPACE.names
    assert np.all(result.p_values > 0.01)
    assert np.all(result.in_band)


@pytest.mark.slow
def test_save_load_reproduces_draws(trained, test_set, tmp_path):
    path = tmp_path / "posterior.msgpack"
    trained.save(path)
    loaded = AmortizedPosterior.load(path)
    xs = test_set[1][:3]
    key = jax.random.key(6)
    np.testing.assert_array_equal(loaded.sample(key, xs, 50), trained.sample(key, xs, 50))
    np.testing.assert_array_equal(loaded.log_prob(test_set[0][:3], xs), trained.log_prob(test_set[0][:3], xs))
    assert loaded.config == trained.config and loaded.space == trained.space and loaded.n_train == N_TRAIN
    assert loaded.training is None and trained.training.n_epochs == 30
    with pytest.raises(ValueError, match="not a BayesFlow posterior file"):
        p = tmp_path / "other.msgpack"
        training.save_model(p, trained.network, {"format": "something-else"})
        AmortizedPosterior.load(p)


@pytest.mark.slow
def test_batch_and_single_draws_agree(trained, test_set):
    xs = test_set[1][:4]
    key = jax.random.key(7)
    batch = trained.sample(key, xs, 20)
    assert batch.shape == (4, 20, D) and batch.dtype == jnp.float64
    single = trained.sample(jax.random.split(key, 4)[1], xs[1], 20)
    assert single.shape == (20, D)
    np.testing.assert_allclose(batch[1], single, rtol=1e-6, atol=1e-6)
    mean, sd = trained.estimate(key, xs, 20)
    np.testing.assert_allclose(mean, np.mean(batch, axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sd, np.std(np.asarray(batch), axis=1, ddof=1), rtol=1e-10)
    lp = trained.log_prob(batch, xs)  # (n_obs, k, n_params) against (n_obs, ...)
    assert lp.shape == (4, 20)
    np.testing.assert_allclose(lp[1], trained.log_prob(batch[1], xs[1]), rtol=1e-5)


@pytest.mark.slow
def test_fit_online_draws_fresh_data_every_epoch(tmp_path):
    model = LinearModel(A.reshape(T, M, D), space=SPACE.replace("p0", lower=-3.0, upper=3.0))  # x = A θ
    config = quick_config(summary="mlp", n_blocks=1, training=TrainingConfig(epochs=3, batch_size=64,
                                                                             progress=False))
    posterior = AmortizedPosterior(model, config).fit_online(  # a prior other than the space's: a callable
        jax.random.key(0), n_per_epoch=128, n_val=64, noise=SIGMA, checkpoint=tmp_path / "ckpt",
        sampler=lambda k, n: jnp.clip(jax.random.normal(k, (n, D)), -3.0, 3.0))
    history = posterior.training.history
    assert posterior.n_train == 128 and posterior.training.n_epochs == 3
    assert len(history["data_time_s"]) == 3 and len(history["val_loss"]) == 3
    assert (tmp_path / "ckpt").exists()
    untrained = AmortizedPosterior(model, config)
    with pytest.raises(ValueError, match="n_per_epoch must be an integer >= 2; got 1"):
        untrained.fit_online(jax.random.key(0), n_per_epoch=1, n_val=0)
    with pytest.raises(ValueError, match=r"AmortizedPosterior: simulator must be a jcalib simulator .*"
                                         r"got ParameterSpace"):
        AmortizedPosterior(model.parameters, config)
    with pytest.raises(ValueError, match="noise must be None, a callable .* or non-negative"):
        untrained.fit_online(jax.random.key(0), n_per_epoch=8, n_val=0, noise=-1.0)
    with pytest.raises(ValueError, match=r"AmortizedPosterior.fit_online: 8 samples lie outside the parameter bounds"):
        untrained.fit_online(jax.random.key(0), n_per_epoch=8, n_val=0, sampler=lambda k, n: jnp.full((n, D), 5.0))


@pytest.mark.slow
def test_training_fit_accepts_an_epoch_callable():
    net = PosteriorNetwork(1, 3, 1, quick_config(summary="mlp", n_blocks=1), rngs=nnx.Rngs(0))

    def data(epoch):
        theta = np.full((16, 1), float(epoch), np.float32)
        return {"theta": theta, "x": np.repeat(theta[:, :, None], 3, axis=1)}

    calls = []
    result = training.fit(jax.random.key(0), net, bayesflow_loss, lambda e: calls.append(e) or data(e),
                          config=TrainingConfig(epochs=3, batch_size=8, progress=False))
    assert calls == [1, 2, 3] and result.n_epochs == 3
    with pytest.raises(ValueError, match="another layout or size at epoch 2"):
        training.fit(jax.random.key(0), net, bayesflow_loss,
                     lambda e: data(e) if e == 1 else {"theta": data(e)["theta"][:8], "x": data(e)["x"][:8]},
                     config=TrainingConfig(epochs=2, batch_size=8, progress=False))


@pytest.mark.slow
def test_summary_kinds():
    config = quick_config()
    for summary in SUMMARIES[1:]:  # the LSTM is trained above
        net = PosteriorNetwork(2, 5, 3, quick_config(summary=summary), rngs=nnx.Rngs(0))
        assert net.summarize(jnp.ones((4, 5, 3))).shape == (4, config.summary_size)
        assert net.summarize(jnp.ones((5, 3))).shape == (config.summary_size,)


@pytest.mark.slow
def test_log_scale_parameters_get_the_physical_density():
    space = ParameterSpace([Parameter("k", 1.0, 0.01, 100.0, log_scale=True), Parameter("c", 0.0, -1.0, 1.0)])
    thetas = np.asarray(space.sample(jax.random.key(0), 64))
    xs = np.stack([np.log(thetas[:, :1]) * np.linspace(0, 1, 5), np.repeat(thetas[:, 1:], 5, axis=1)], axis=-1)
    config = quick_config(summary="mlp", actnorm=True, training=TrainingConfig(epochs=1, batch_size=32,
                                                                               progress=False))
    description = FunctionSimulator(lambda th: jnp.zeros((5, 2)), space, ts=np.arange(5.0))
    posterior = AmortizedPosterior(description, config).fit(jax.random.key(0), thetas, xs)
    draws = posterior.sample(jax.random.key(1), xs[0], 8)
    assert draws.shape == (8, 2) and bool(jnp.all(draws[:, 0] > 0))
    physical = posterior.log_prob(thetas[:4], xs[0])
    internal = posterior.log_prob(thetas[:4], xs[0], coordinates="internal")
    np.testing.assert_allclose(physical, internal - np.log(thetas[:4, 0]), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="log-scale parameters must be positive"):
        posterior.log_prob(-thetas[:1], xs[0])


@pytest.mark.slow
def test_bad_input(trained, test_set):
    theta, xs = test_set
    with pytest.raises(ValueError, match="summary must be one of .* got 'transformer'"):
        BayesFlowConfig(summary="transformer")
    with pytest.raises(ValueError, match="n_blocks must be a positive integer; got 0"):
        BayesFlowConfig(n_blocks=0)
    with pytest.raises(ValueError, match="coupling_hidden must be a non-empty tuple"):
        BayesFlowConfig(coupling_hidden=())
    with pytest.raises(ValueError, match="AmortizedPosterior: not trained yet"):
        AmortizedPosterior(DESCRIPTION).sample(jax.random.key(0), xs[0], 3)
    with pytest.raises(ValueError, match="config must be a BayesFlowConfig"):
        AmortizedPosterior(DESCRIPTION, {"summary": "lstm"})
    with pytest.raises(ValueError, match=r"x must have shape \(n_times, n_outputs\) = \(4, 2\)"):
        trained.sample(jax.random.key(0), xs[0, :3], 3)
    with pytest.raises(ValueError, match="x contains NaN"):
        trained.estimate(jax.random.key(0), np.full((4, 2), np.nan), 3)
    with pytest.raises(ValueError, match="n must be a positive integer; got 0"):
        trained.sample(jax.random.key(0), xs[0], 0)
    with pytest.raises(ValueError, match=r"coordinates must be one of \('physical', 'internal'\); got 'unit'"):
        trained.log_prob(theta[0], xs[0], coordinates="unit")
    with pytest.raises(ValueError, match=r"theta must have shape \(n_obs=3, \[k,\] 2\)"):
        trained.log_prob(theta[:2], xs[:3])
    fresh = AmortizedPosterior(DESCRIPTION, quick_config())
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"trajectories must have shape \(n, n_times, n_outputs\) with n = 200"):
        fresh.fit(key, theta, xs[:10])
    bad = xs.copy()
    bad[7, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"trajectories have NaN or inf in samples \[7\]"):
        fresh.fit(key, theta, bad)
    outside = theta.copy()
    outside[3, 1] = 11.0
    with pytest.raises(ValueError, match=r"1 samples lie outside the parameter bounds, first: row 3, p1 = 11.0 not in"):
        fresh.fit(key, outside, xs)
    with pytest.raises(ValueError, match="val must be a"):
        fresh.fit(key, theta, xs, val=theta)
    with pytest.raises(ValueError, match="AmortizedPosterior.fit: trajectories have 2 times, the model 4"):
        fresh.fit(key, theta, xs[:, :2])
    with pytest.raises(AttributeError, match="AmortizedPosterior is immutable"):
        trained.network = None


@pytest.mark.slow
def test_evaluate_gives_the_recovery_of_the_posterior_means(trained, test_set):
    theta, xs = test_set[0][:50], test_set[1][:50]
    metrics = trained.evaluate(jax.random.key(8), theta, xs, n_draws=200)
    mean, _ = trained.estimate(jax.random.key(8), xs, 200)
    np.testing.assert_array_equal(np.asarray(metrics.prediction), np.asarray(mean))
    np.testing.assert_allclose(metrics.rmse, np.sqrt(np.mean((np.asarray(mean) - theta) ** 2, axis=0)))
    assert metrics.names == SPACE.names and metrics.n_test == 50
    np.testing.assert_array_equal(np.asarray(metrics.scale), [20.0, 20.0])  # the bounds' width
    # the posterior mean is closer to the truth than the prior mean 0
    assert np.all(metrics.rmse < np.sqrt(np.mean(theta**2, axis=0)))
