"""Amortized posteriors that go wrong say so (issue 17 follow-ups): draws outside the parameter
bounds are rejected and redrawn (sbi's "leakage"), with a warning and the acceptance; data
outside the training range is flagged (and refused by the identification workflow unless
allowed); the training range survives save/load."""

import functools
import warnings

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jcalib.model import AbstractModel, Experiment, FunctionSimulator
from jcalib.nn import training
from jcalib.nn.bayesflow import (
    AmortizedPosterior,
    BayesFlowConfig,
    OutsideTrainingRangeWarning,
    PosteriorLeakageWarning,
    outside_training_range,
)
from jcalib.nn.data import simulate_training_set
from jcalib.nn.training import TrainingConfig
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.workflows.iterative_identification import (
    IdentificationConfig,
    iterative_identification,
    one_shot_identification,
)

SPACE = ParameterSpace([Parameter("a", 0.0, -3.0, 3.0)])
DESCRIPTION = FunctionSimulator(lambda theta: jnp.broadcast_to(theta, (4, 1)), SPACE, ts=jnp.arange(4.0))


@pytest.fixture(scope="module")
def data():
    thetas = np.clip(np.asarray(jax.random.normal(jax.random.key(0), (256, 1))), -3.0, 3.0)
    xs = thetas[:, None, :] + 0.5 * np.asarray(jax.random.normal(jax.random.key(1), (256, 4, 1)))
    return thetas, xs


@pytest.fixture(scope="module")
def posterior(data):
    config = BayesFlowConfig(summary="mlp", summary_size=4, summary_hidden=16, n_blocks=2, coupling_hidden=(16,),
                             training=TrainingConfig(epochs=2, progress=False))
    return AmortizedPosterior(DESCRIPTION, config).fit(jax.random.key(2), *data)


def pools(model):
    """Tiny step-1 training and validation sets of ``model``."""
    return simulate_training_set(jax.random.key(3), model, 8), simulate_training_set(jax.random.key(4), model, 4)


def faked(posterior, scale, observations=None):
    """A copy of ``posterior`` whose network draws N(0, scale²) (known leakage outside [-3, 3]);
    with ``observations`` (n_obs, n_times, n_outputs), ``scale`` holds one value per observation,
    found by its first entry (the sampler redraws for a subset of the observations)."""
    fake = object.__new__(AmortizedPosterior)  # the trained network's state, another sampler

    def sample(key, x, n):
        if observations is None:
            return scale * jax.random.normal(key, (*x.shape[:-2], n, 1), jnp.float64)
        which = jnp.argmin(jnp.abs(x[:, :1, 0] - jnp.asarray(observations)[None, :, 0, 0]), axis=1)
        return jnp.asarray(scale)[which, None, None] * jax.random.normal(key, (x.shape[0], n, 1), jnp.float64)

    fake._set(**{k: v for k, v in vars(posterior).items() if k != "_frozen"})
    fake._set(_fns={"sample": sample})
    return fake._freeze()


def record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, caught


# --- 1. leakage: draws outside the bounds are rejected and redrawn ---------------------------------
@pytest.mark.slow
def test_draws_outside_the_bounds_are_rejected_with_a_warning(posterior, data):
    fake = faked(posterior, 6.0)  # P(|6 z| <= 3) = P(|z| <= 0.5) = 38.3 %
    (draws, info), caught = record(lambda: fake.sample(jax.random.key(3), data[1][:3], 2000, return_info=True))
    draws = np.asarray(draws)
    assert draws.shape == (3, 2000, 1)
    assert np.all(np.abs(draws) <= 3.0)
    assert np.all(np.abs(info.acceptance - 0.383) < 5 * np.sqrt(0.383 * 0.617 / 2000))  # 5 MC standard errors
    assert not np.any(info.outside_training_range)
    leak = [w for w in caught if issubclass(w.category, PosteriorLeakageWarning)]
    assert len(leak) == 1
    assert "of the posterior draws fell outside the parameter bounds and were rejected" in str(leak[0].message)
    assert "the network may be under-trained" in str(leak[0].message)
    # the accepted draws are the N(0, 36) draws restricted to [-3, 3]: their sd is that of a truncated normal
    sd = 6.0 * stats.truncnorm(-0.5, 0.5).std()  # 1.703
    assert abs(draws.std() - sd) < 5 * sd / np.sqrt(2 * draws.size)  # 5 MC standard errors of an sd
    # estimate averages only draws inside the bounds
    (mean, _), _ = record(lambda: fake.estimate(jax.random.key(3), data[1][0], 2000))
    assert abs(float(mean[0])) < 5 * sd / np.sqrt(2000)


@pytest.mark.slow
def test_the_warning_counts_all_draws_and_info_gives_each_observation(posterior, data):
    fake = faked(posterior, np.array([6.0] + [0.5] * 9), data[1][:10])  # one leaky observation of 10
    network, rows = fake._fns["sample"], []
    fake._fns["sample"] = lambda key, x, n: rows.append(x.shape[0]) or network(key, x, n)
    (draws, info), caught = record(lambda: fake.sample(jax.random.key(3), data[1][:10], 2000, return_info=True))
    assert rows[0] == 10 and set(rows[1:]) == {1}  # later rounds redraw the short observation only
    assert np.all(np.abs(np.asarray(draws)) <= 3.0)
    assert abs(info.acceptance[0] - 0.383) < 5 * np.sqrt(0.383 * 0.617 / 2000) and np.all(info.acceptance[1:] == 1)
    assert not [w for w in caught if issubclass(w.category, PosteriorLeakageWarning)]  # 94 % of all draws inside


def test_no_draws_inside_the_bounds_is_an_error(posterior, data):
    fake = faked(posterior, 1.0)
    fake._fns["sample"] = lambda key, x, n: 5.0 + jnp.zeros((n, 1), jnp.float64)  # the cache, not an attribute
    with pytest.raises(ValueError, match=r"only 0 of 10 draws fell inside the parameter bounds after 50 rounds "
                                         r"\(acceptance 0.00%\); the network is under-trained"):
        fake.sample(jax.random.key(0), data[1][0], 10)


def test_a_healthy_network_is_unchanged_and_quiet(posterior, data):
    fake = faked(posterior, 0.5)  # all draws inside: exactly the network's draws, acceptance 1, no warning
    (draws, info), caught = record(lambda: fake.sample(jax.random.key(4), data[1][0], 100, return_info=True))
    np.testing.assert_array_equal(np.asarray(draws), 0.5 * np.asarray(jax.random.normal(jax.random.key(4), (100, 1))))
    assert float(info.acceptance) == 1.0
    assert not [w for w in caught if issubclass(w.category, (PosteriorLeakageWarning, OutsideTrainingRangeWarning))]


def test_real_network_draws_stay_inside_the_bounds(posterior, data):
    (draws, info), _ = record(lambda: posterior.sample(jax.random.key(5), data[1][:4], 500, return_info=True))
    assert np.all((np.asarray(draws) >= -3.0) & (np.asarray(draws) <= 3.0))
    assert info.acceptance.shape == (4,) and np.all((info.acceptance > 0) & (info.acceptance <= 1))


# --- 2. data outside the training range is flagged ------------------------------------------------
def test_the_training_range_is_kept_and_flags_far_data(posterior, data):
    xs = data[1]
    np.testing.assert_array_equal(posterior._stats["x_min"], xs.min(axis=(0, 1)))
    np.testing.assert_array_equal(posterior._stats["x_max"], xs.max(axis=(0, 1)))
    huge = xs[0].copy()
    huge[1, 0] = 1e300
    flags = posterior.outside_training_range(np.stack([xs[0], xs[0] * 1e10, huge, xs[1]]))
    assert flags.tolist() == [False, True, True, False]
    assert not np.any(posterior.outside_training_range(xs))  # the training data itself


def test_margin_is_ten_percent_of_the_range():
    lo, hi = np.array([0.0]), np.array([10.0])
    x = np.zeros((2, 1))
    assert outside_training_range(x + np.array([[10.9]]), lo, hi).item() is False
    assert outside_training_range(x + np.array([[11.1]]), lo, hi).item() is True
    assert outside_training_range(x + np.array([[-1.1]]), lo, hi).item() is True
    assert outside_training_range(x + np.array([[np.nan]]), lo, hi).item() is True


def test_sample_warns_and_flags_data_outside_the_training_range(posterior, data):
    fake = faked(posterior, 0.5)
    (_, info), caught = record(lambda: fake.sample(jax.random.key(0), data[1][0] * 1e10, 10, return_info=True))
    assert bool(info.outside_training_range)
    far = [w for w in caught if issubclass(w.category, OutsideTrainingRangeWarning)]
    assert len(far) == 1 and "the observation lies outside the range of the training trajectories" in str(
        far[0].message)
    _, caught = record(lambda: fake.estimate(jax.random.key(0), np.stack([data[1][0], data[1][0] * 1e10]), 10))
    assert any("1 of 2 observations lie outside the range" in str(w.message) for w in caught)


def test_the_training_range_survives_save_and_load(posterior, tmp_path, data):
    path = tmp_path / "p.msgpack"
    posterior.save(path)
    loaded = AmortizedPosterior.load(path)
    np.testing.assert_array_equal(loaded._stats["x_max"], posterior._stats["x_max"])
    assert loaded.outside_training_range(data[1][0] * 1e10).item() is True
    (a, _), (b, _) = (record(lambda p=p: p.sample(jax.random.key(1), data[1][0], 50)) for p in (posterior, loaded))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_file_without_the_training_range_is_refused(posterior, tmp_path):
    path = tmp_path / "old.msgpack"
    extra = {k: v for k, v in posterior._extra().items() if k not in ("x_min", "x_max")}
    training.save_model(path, posterior.network, extra)
    with pytest.raises(ValueError, match=r"old.msgpack: a BayesFlow posterior file of an older jcalib \(without the "
                                         r"training data's range or the flow's permutation\); train the network again"):
        AmortizedPosterior.load(path)


# --- 2b. the identification workflow refuses data outside the training range ----------------------
class Decay(AbstractModel):
    """y' = -y, y(0) = a in [1, 2], observed at 8 times in [0, 1]."""

    def vector_field(self, t, y, theta):
        return -y

    def initial_state(self, theta):
        return theta[0:1]

    def observe(self, t, y, theta):
        return y


@functools.cache
def decay_model() -> Decay:
    return Decay(parameters=ParameterSpace([Parameter("a", 1.5, 1.0, 2.0)]), output_names=("y",), state_names=("y",),
                 experiment=Experiment(np.linspace(0.0, 1.0, 8), t0=0.0), solver=dfx.Tsit5(),
                 controller=dfx.PIDController(rtol=1e-8, atol=1e-10), adjoint=dfx.RecursiveCheckpointAdjoint(),
                 dt0=None, max_steps=256)


@pytest.mark.slow
@pytest.mark.parametrize("scale, entry", [(1e10, None), (1.0, 1e300), (10.0, None)])
def test_identification_refuses_data_outside_the_training_range(scale, entry):
    model = decay_model()
    observation = np.asarray(model.simulate(jnp.asarray([1.5]))) * scale
    if entry is not None:
        observation[3, 0] = entry
    config = IdentificationConfig(generator="model", progress=False)
    for workflow in (iterative_identification, one_shot_identification):
        with pytest.raises(ValueError, match=r"the observation lies outside the range of the training trajectories: "
                                             r"output 'y' has values in .*allow_outside_training_range=True"):
            workflow(jax.random.key(0), model, observation, *pools(model), config=config)


@pytest.mark.slow
def test_identification_runs_on_data_outside_the_range_when_allowed():
    model = decay_model()
    observation = np.asarray(model.simulate(jnp.asarray([1.5]))) * 1e10
    config = IdentificationConfig(generator="model", progress=False, allow_outside_training_range=True)
    # past the range check: the next check (a surrogate with generator='model') is the one that fires
    with pytest.raises(ValueError, match="a surrogate was passed but config.generator is 'model'"):
        iterative_identification(jax.random.key(0), model, observation, *pools(model), surrogate=object(),
                                 config=config)
    with pytest.raises(ValueError, match="allow_outside_training_range must be True or False; got 'yes'"):
        IdentificationConfig(allow_outside_training_range="yes")


@pytest.mark.slow
def test_identification_accepts_data_inside_the_range():
    model = decay_model()
    observation = np.asarray(model.simulate(jnp.asarray([1.5])))
    config = IdentificationConfig(generator="model", progress=False)
    with pytest.raises(ValueError, match="a surrogate was passed but config.generator is 'model'"):
        iterative_identification(jax.random.key(0), model, observation, *pools(model), surrogate=object(),
                                 config=config)
