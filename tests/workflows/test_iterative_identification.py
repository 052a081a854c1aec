"""Algorithm 3 of Zhang & Mikelsons (2023) on a small problem with a weak parameter.

The model ``y(t) = a exp(-b t) + w c sin(4 pi t)`` (32 times on [0, 2], w = 0.01) has two
strong parameters and a weak one: over the prior box, ``a`` and ``b`` move the output by
O(1), ``c`` by at most 1 %, so its averaged first-order Sobol' index is ~1e-4 and one
network for all three parameters (at these small sizes) learns ``a`` and ``b`` but leaves
``c`` near its prior. Once ``a`` and ``b`` are fixed, the generated data vary through ``c``
alone and a network of the same size identifies it. The test sample follows the paper's
protocol (``regenerate_observation``: the observation of a later step is the generator's
output at the truth with the identified parameters at their estimates); the data come from
the model itself (``generator="model"``), noise-free, as in the paper.
"""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.data import Measurements
from jcalib.model import AbstractSimulator, Experiment
from jcalib.nn.bayesflow import BayesFlowConfig
from jcalib.nn.data import simulate_training_set
from jcalib.nn.training import TrainingConfig
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.plotting import plot_identification, plot_identification_recovery
from jcalib.workflows.iterative_identification import (
    IdentificationConfig,
    IdentificationResult,
    iterative_identification,
    one_shot_identification,
)

WEIGHT = 0.01  # the weak parameter's share of the output
TRUTH = np.array([1.1, 1.3, 0.7])


class WeakParameterModel(AbstractSimulator):
    """``y(t) = a exp(-b t) + w c sin(4 pi t)``: a simulator of its own for `simulate_batch`."""

    experiment: Experiment
    weight: float = eqx.field(static=True)
    parameters: ParameterSpace = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, weight=WEIGHT, n_times=32):
        self.experiment = Experiment(np.linspace(0.0, 2.0, n_times), name="weak")
        self.weight = weight
        self.parameters = ParameterSpace([Parameter("a", 1.0, 0.5, 1.5), Parameter("b", 1.0, 0.5, 2.0),
                                          Parameter("c", 0.5, 0.0, 1.0)])
        self.output_names = ("y",)

    @property
    def ts(self):
        return self.experiment.ts

    def simulate_with_status(self, theta):
        t = self.experiment.ts
        y = theta[0] * jnp.exp(-theta[1] * t) + self.weight * theta[2] * jnp.sin(4.0 * jnp.pi * t)
        return y[:, None], jnp.asarray(0, dtype=jnp.int32)


def small_config(**changes) -> IdentificationConfig:
    posterior = BayesFlowConfig(summary="gru", summary_size=8, summary_hidden=16, n_blocks=2,
                                coupling_hidden=(32, 32),
                                training=TrainingConfig(epochs=40, batch_size=32, learning_rate=3e-3, progress=False))
    settings = dict(posterior=posterior, generator="model", n_sobol=32, n_samples=500, n_val_samples=50,
                    regenerate_observation=True, progress=False)
    return IdentificationConfig(**settings | changes)


@pytest.fixture(scope="module")
def problem():
    model = WeakParameterModel()
    return model, np.asarray(model.simulate(jnp.asarray(TRUTH)))


def pools(model, n_train, n_val):
    """Step-1 training and validation data: uniform draws over the prior box, simulated."""
    return (simulate_training_set(jax.random.key(10), model, n_train),
            simulate_training_set(jax.random.key(11), model, n_val))


@pytest.fixture(scope="module")
def results(problem):
    model, observation = problem
    config = small_config()
    data = pools(model, 256, 200)
    iterative = iterative_identification(jax.random.key(0), model, observation, *data, truth=TRUTH, config=config)
    one_shot = one_shot_identification(jax.random.key(0), model, observation, *data, truth=TRUTH, config=config)
    return iterative, one_shot


@pytest.mark.slow
def test_all_parameters_recovered(results):
    iterative, _ = results
    assert iterative.names == ("a", "b", "c")
    assert set(sum(iterative.groups, ())) == {"a", "b", "c"}
    assert all(step.selection_reason != "max_steps" for step in iterative.steps)  # no cap by default
    # stated accuracy: every estimate within 2 % of its truth (measured: 0.2-0.9 %), c within 0.02 (2 % of its range)
    assert np.all(iterative.relative_error < 2.0), iterative.summary()
    assert abs(iterative.estimate[2] - TRUTH[2]) < 0.02, iterative.summary()
    assert iterative.n_covered >= 2, iterative.summary()
    assert iterative.mean_relative_error == pytest.approx(float(np.mean(iterative.relative_error)))
    # the weak parameter is identified after the strong ones, by a network that learned it
    steps = {name: k for k, group in enumerate(iterative.groups) for name in group}
    assert steps["c"] > max(steps["a"], steps["b"])
    last = iterative.steps[steps["c"]]
    assert last.validation["c"]["r2"] > 0.95
    assert set(last.fixed) == {"a", "b"}
    assert last.generator == "model"


@pytest.mark.slow
def test_better_than_one_shot(results):
    iterative, one_shot = results
    error_iterative = abs(iterative.estimate[2] - TRUTH[2])
    error_one_shot = abs(one_shot.estimate[2] - TRUTH[2])
    # one network for all three leaves c at its prior (validation R² measured -0.06, posterior sd 0.31 of
    # the range); the iterative workflow identifies it (R² ~1, sd 0.008 of the range)
    r2_one_shot = one_shot.steps[0].validation["c"]["r2"]
    r2_iterative = next(s.validation["c"]["r2"] for s in iterative.steps if "c" in s.kept)
    assert r2_one_shot < 0.6 < 0.95 < r2_iterative
    assert iterative.normalized_sd[2] < 0.25 * one_shot.normalized_sd[2]
    assert error_iterative < 0.5 * error_one_shot or error_iterative < 0.01
    assert iterative.mean_relative_error < one_shot.mean_relative_error


@pytest.mark.slow
def test_first_step_follows_algorithm_1(results):
    iterative, _ = results
    first = iterative.steps[0]
    assert first.selection_reason == "sobol" and first.generator == "model" and first.fixed == {}
    # c's averaged first-order index is far below a's and b's: Algorithm 1 leaves it out
    assert "c" not in first.candidates
    assert first.selection.sorted_names[-1] == "c"
    s = np.asarray(first.selection.sorted_indices)
    assert s[-1] < 0.01 * s[0]
    # the kept parameters passed the trial (or are the fallback)
    for name in first.kept:
        assert first.trial_r2.get(name, 1.0) >= 0.7 or first.fallback
    assert first.n_generated == 32 * (3 + 2)  # the Sobol' design of 3 parameters, no regenerated data


@pytest.mark.slow
def test_result_records_and_json(results, tmp_path):
    iterative, one_shot = results
    assert one_shot.method == "one-shot" and len(one_shot.steps) == 1 and one_shot.groups == (("a", "b", "c"),)
    for result in results:
        assert np.all(result.lower <= result.estimate) and np.all(result.estimate <= result.upper)
        np.testing.assert_allclose(result.normalized_sd, result.sd / (result.bounds[:, 1] - result.bounds[:, 0]))
        assert np.isfinite(result.output_mae)
        assert result.durations["total_s"] >= result.durations["steps_s"] > 0
    assert iterative.output_mae < 0.01  # the model at the estimate vs the observation (measured 0.002)
    # the output check, then the Sobol' designs, regenerated sets and observations (the step-1 data are the caller's)
    n_regenerated = sum(s.n_generated for s in iterative.steps)
    assert iterative.n_model_simulations == 1 + n_regenerated + len(iterative.steps) - 1
    path = tmp_path / "result.json"
    iterative.save(path)
    saved = json.loads(path.read_text())
    assert saved == json.loads(json.dumps(iterative.to_dict()))
    assert saved["parameters"]["c"]["step"] == len(iterative.steps)
    assert saved["n_covered"] == iterative.n_covered
    assert "a" in iterative.summary() and "mean ER" in iterative.summary()
    assert plot_identification(iterative).axes and plot_identification_recovery(iterative).axes


def test_measurements_are_accepted(problem):
    model, observation = problem
    ok = Measurements(np.asarray(model.ts), observation, output_names=("y",))
    from jcalib.workflows.iterative_identification import _observation

    np.testing.assert_array_equal(_observation(model, ok, "test"), observation)


@pytest.mark.parametrize("kwargs, message", [
    (dict(observation=np.zeros((31, 1))), r"observation must have shape \(n_times, n_outputs\) = \(32, 1\)"),
    (dict(observation=np.full((32, 1), np.nan)), "observation contains NaN"),
    (dict(truth=[1.0, 1.0]), r"truth must have shape \(3,\)"),
    (dict(truth=[1.0, 1.0, 2.0]), r"outside: \['c'\]"),
    (dict(truth={"a": 1.0}), "truth must name every parameter"),
    (dict(config=IdentificationConfig(regenerate_observation=True)), "needs its truth"),
    (dict(data=(np.ones((4, 2)), np.ones((4, 32, 1)))), r"data thetas must have shape \(n, 3\)"),
    (dict(data=(np.ones((4, 3)), np.ones((4, 31, 1)))), r"data trajectories must have shape \(4, 32, 1\)"),
    (dict(data=(np.full((4, 3), 9.0), np.ones((4, 32, 1)))), "outside the parameter bounds"),
    (dict(data=None), r"data must be a \(thetas, trajectories\) pair \(a TrainingSet of "
                      r"jcalib.nn.simulate_training_set\); got NoneType"),
    (dict(config="fast"), "config must be an IdentificationConfig"),
])
def test_bad_input(problem, kwargs, message):
    model, observation = problem
    data, val = pools(model, 4, 4)
    kwargs = {"observation": observation, "data": data, "val": val,
              "config": small_config(regenerate_observation=False)} | kwargs
    obs, data, val = kwargs.pop("observation"), kwargs.pop("data"), kwargs.pop("val")
    with pytest.raises(ValueError, match=message):
        iterative_identification(jax.random.key(0), model, obs, data, val, **kwargs)


def test_bad_measurements(problem):
    model, observation = problem
    shifted = Measurements(np.asarray(model.ts) + 1.0, observation)
    with pytest.raises(ValueError, match="use model.with_times"):
        iterative_identification(jax.random.key(0), model, shifted, *pools(model, 4, 4), config=small_config())
    mask = np.ones((32, 1), bool)
    mask[3] = False
    gappy = Measurements(np.asarray(model.ts), observation, mask=mask)
    with pytest.raises(ValueError, match="miss 1 entries"):
        iterative_identification(jax.random.key(0), model, gappy, *pools(model, 4, 4), config=small_config())


def test_non_simulators_are_refused(problem):
    model, observation = problem
    data = (np.tile(TRUTH, (4, 1)), np.tile(observation, (4, 1, 1)))
    with pytest.raises(ValueError, match=r"iterative_identification: model must be a jcalib simulator \(an "
                                         r"AbstractModel, .*got function; wrap a plain function"):
        iterative_identification(jax.random.key(0), lambda theta: theta, observation, data, data,
                                 config=small_config(regenerate_observation=False))
    with pytest.raises(ValueError, match=r"one_shot_identification: model must be a jcalib simulator .*got dict"):
        one_shot_identification(jax.random.key(0), {"parameters": model.parameters}, observation, data, data,
                                config=small_config(regenerate_observation=False))
    with pytest.raises(ValueError, match=r"iterative_identification: surrogate must be a trained PELSVAE or a jcalib "
                                         r"simulator \(its Surrogate: any jcalib.AbstractSimulator\); got object"):
        iterative_identification(jax.random.key(0), model, observation, data, data, surrogate=object(),
                                 config=small_config(generator="surrogate", regenerate_observation=False))


def test_surrogate_with_model_generator_is_refused(problem):
    model, observation = problem
    with pytest.raises(ValueError, match="config.generator is 'model'"):
        iterative_identification(jax.random.key(0), model, observation, *pools(model, 4, 4), surrogate=object(),
                                 config=small_config(regenerate_observation=False))


@pytest.mark.parametrize("changes, message", [
    (dict(generator="vae"), "generator must be one of"),
    (dict(r2_threshold=1.5), "r2_threshold must be a number <= 1"),
    (dict(level=1.0), r"level must lie in \(0, 1\)"),
    (dict(delta=0.0), "delta must be a positive number"),
    (dict(n_sobol=1), "n_sobol must be an integer >= 2"),
    (dict(max_steps=0), "max_steps must be an integer >= 1"),
    (dict(trial_epochs=0), "trial_epochs must be an integer >= 1"),
    (dict(noise_sigma=-1.0), "noise_sigma must be None, a positive number"),
    (dict(posterior="lstm"), "posterior must be a BayesFlowConfig"),
])
def test_bad_config(changes, message):
    with pytest.raises(ValueError, match=message):
        IdentificationConfig(**changes)


def test_trial_epochs_default_to_a_quarter():
    config = small_config()
    assert config.trial.training.epochs == 10
    assert small_config(trial_epochs=3).trial.training.epochs == 3
    assert config.trial.n_blocks == config.posterior.n_blocks


def test_no_step_cap_by_default_as_in_the_papers_algorithm_3():
    assert IdentificationConfig().max_steps is None and small_config().to_dict()["max_steps"] is None
    assert small_config(max_steps=4).to_dict()["max_steps"] == 4


@pytest.mark.slow  # ~10 s of compilation for a one-epoch network
def test_max_steps_guard_identifies_the_rest_at_once(problem):
    model, observation = problem
    config = small_config(max_steps=1, posterior=BayesFlowConfig(
        summary="mlp", summary_size=4, summary_hidden=8, n_blocks=1, coupling_hidden=(8,),
        training=TrainingConfig(epochs=1, batch_size=32, progress=False)), n_samples=20, n_val_samples=4)
    result = iterative_identification(jax.random.key(1), model, observation, *pools(model, 64, 16), truth=TRUTH,
                                      config=config)
    (step,) = result.steps
    assert step.selection_reason == "max_steps" and step.kept == ("a", "b", "c") and step.trial_r2 == {}
    assert isinstance(result, IdentificationResult) and np.all(np.isfinite(result.estimate))


@pytest.mark.slow  # ~2 min: a PELS-VAE generates the data of later steps, as in the paper
def test_surrogate_generator(problem):
    from jcalib.nn.pelsvae import PELSVAEConfig

    model, observation = problem
    surrogate = PELSVAEConfig(latent_size=4, hidden_size=32, n_passes=4, training=TrainingConfig(
        epochs=150, batch_size=32, learning_rate=3e-3, progress=False))
    result = iterative_identification(jax.random.key(0), model, observation, *pools(model, 512, 200), truth=TRUTH,
                                      config=small_config(generator="surrogate", surrogate=surrogate))
    assert [s.generator for s in result.steps][1:] == ["surrogate"] * (len(result.steps) - 1)
    assert result.n_surrogate_evaluations > 0
    assert np.all(result.relative_error[:2] < 2.0), result.summary()


class _LeakyPosterior:
    """A stand-in for a barely trained trial network: its bounded sampler gives up (as
    `AmortizedPosterior.sample` does below 2 % acceptance); its unbounded draws are known."""

    def __init__(self, draws, message="only 3 of 10 draws fell inside the parameter bounds after 50 rounds"):
        self.draws, self.message = np.asarray(draws), message

    def estimate(self, key, xs, n):
        raise ValueError(f"AmortizedPosterior.sample: {self.message}")

    def sample(self, key, xs, n):
        raise ValueError(f"AmortizedPosterior.sample: {self.message}")

    def _fn(self, name):
        assert name == "sample"
        return lambda key, xs, n: jnp.asarray(self.draws[:, :n])


def test_trial_means_fall_back_to_unbounded_draws():
    """Issue 19: a 14-candidate trial trained for 7 epochs could not keep its draws in the box for
    one validation trajectory and the whole identification ended with an error; the trial's R²
    now comes from the unbounded draws' means instead. Other errors still propagate."""
    from jcalib.workflows.iterative_identification import _trial_means

    draws = np.stack([np.full((4, 2), [1.0, 2.0]), np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]])])
    means = _trial_means(_LeakyPosterior(draws), jax.random.key(0), np.zeros((2, 5, 1)), 4)
    np.testing.assert_allclose(means, [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="NaN in x"):
        _trial_means(_LeakyPosterior(draws, "NaN in x"), jax.random.key(0), np.zeros((2, 5, 1)), 4)


def test_formal_draws_fall_back_to_unbounded_draws_with_a_warning():
    """Issue 19: one validation trajectory whose narrow posterior sat just outside a bound ended a
    1 h run in its first step; the formal network's draws there are now its unbounded ones, with
    a warning naming the step. Other errors still propagate."""
    from jcalib.workflows.iterative_identification import _draws

    draws = np.arange(16.0).reshape(2, 4, 2)
    with pytest.warns(UserWarning, match="step 3: the validation set: .*unbounded draws"):
        out = _draws(_LeakyPosterior(draws), jax.random.key(0), np.zeros((2, 5, 1)), 4, "step 3: the validation set")
    np.testing.assert_array_equal(out, draws)
    with pytest.raises(ValueError, match="NaN in x"):
        _draws(_LeakyPosterior(draws, "NaN in x"), jax.random.key(0), np.zeros((2, 5, 1)), 4, "step 1")
