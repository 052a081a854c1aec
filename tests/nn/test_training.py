"""The shared training loop: fitting, early stopping with best-weights restore, schedules,
checkpoints (exact reload, resume after an interruption) and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcalib.nn import MLP, Standardizer, TrainingConfig, fit, load_model, save_model

X = np.linspace(-3.0, 3.0, 256, dtype=np.float32)[:, None]
TRAIN = {"x": X, "y": np.sin(X)}
KEY = jax.random.key(0)
VAL = {"x": X[3::8] + 0.01, "y": np.sin(X[3::8] + 0.01)}


def mse(key, model, batch):
    err = model(batch["x"]) - batch["y"]
    return jnp.mean(err**2), {"mae": jnp.mean(jnp.abs(err))}


def _net(seed=0):
    return MLP(1, (32, 32), 1, rngs=nnx.Rngs(seed))


@pytest.fixture(scope="module")
def sine_fit():
    config = TrainingConfig(epochs=300, batch_size=32, learning_rate=3e-3, schedule="multistep",
                            milestones=(150, 250), decay=0.3, progress=False)
    return config, fit(KEY, _net(), mse, TRAIN, VAL, config)


@pytest.mark.slow
def test_mlp_fits_a_sine(sine_fit):
    _, result = sine_fit
    val_mse = float(mse(None, result.model, VAL)[0])
    assert val_mse < 1e-3, val_mse
    assert val_mse == pytest.approx(result.best_loss, rel=1e-5)  # the best weights are the ones returned
    h = result.history
    assert len(h["train_loss"]) == len(h["val_mae"]) == result.n_epochs == 300
    assert h["train_loss"][-1] < 0.01 * h["train_loss"][0]
    assert result.samples_per_second > 0


@pytest.mark.slow
def test_multistep_schedule_in_the_history(sine_fit):
    config, result = sine_fit
    lr = np.asarray(result.history["learning_rate"])
    np.testing.assert_allclose(lr[[0, 149, 150, 249, 250, 299]],
                               3e-3 * np.array([1, 1, 0.3, 0.3, 0.09, 0.09]), rtol=1e-6)


def test_exponential_schedule():
    config = TrainingConfig(epochs=3, batch_size=64, schedule="exponential", decay=0.5, progress=False)
    result = fit(KEY, _net(), mse, TRAIN, config=config)
    np.testing.assert_allclose(result.history["learning_rate"], 1e-3 * np.array([1, 0.5, 0.25]), rtol=1e-6)
    assert "val_loss" not in result.history  # no validation data: the training loss is monitored


def test_early_stopping_restores_the_best_epoch():
    """Validation target 0: the untrained net (outputs near 0) is best early, fitting the
    sine makes it worse; training stops after `patience` epochs and returns the best weights."""
    val = {"x": X[::4], "y": np.zeros_like(X[::4])}
    config = TrainingConfig(epochs=200, batch_size=32, learning_rate=3e-3, patience=5, progress=False)
    result = fit(KEY, _net(), mse, TRAIN, val, config)
    assert result.stopped_early and result.n_epochs == result.best_epoch + 5 < 200
    assert result.best_loss == min(result.history["val_loss"])
    assert result.history["val_loss"][-1] > result.best_loss
    assert float(mse(None, result.model, val)[0]) == pytest.approx(result.best_loss, rel=1e-5)


def test_saved_model_reproduces_predictions_exactly(sine_fit, tmp_path):
    _, result = sine_fit
    scaler = Standardizer.fit(X)
    save_model(tmp_path / "net.msgpack", result.model, extra={"x_scaler": scaler.to_dict(), "hidden": (32, 32)})
    fresh = _net(seed=7)  # other initial weights
    extra = load_model(tmp_path / "net.msgpack", fresh)
    np.testing.assert_array_equal(np.asarray(fresh(X)), np.asarray(result.model(X)))
    again = Standardizer.from_dict(extra["x_scaler"])
    np.testing.assert_array_equal(np.asarray(again(X)), np.asarray(scaler(X)))
    assert list(extra["hidden"]) == [32, 32]
    with pytest.raises(ValueError, match="do not match the model"):
        load_model(tmp_path / "net.msgpack", MLP(1, (32, 32, 32), 1, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="has shape"):
        load_model(tmp_path / "net.msgpack", MLP(1, (16, 32), 1, rngs=nnx.Rngs(0)))
    (tmp_path / "junk").write_bytes(b"not msgpack")
    with pytest.raises(ValueError, match="not a jcalib"):
        load_model(tmp_path / "junk", fresh)


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path):
    """A run stopped after 6 of 12 epochs (its checkpoint written each epoch) and resumed
    ends with exactly the weights, optimizer state and history of an uninterrupted run."""
    config = TrainingConfig(epochs=12, batch_size=32, learning_rate=3e-3, schedule="exponential", decay=0.9,
                            progress=False)
    whole = fit(KEY, _net(), mse, TRAIN, VAL, config, checkpoint=tmp_path / "whole.msgpack")
    first = fit(KEY, _net(), mse, TRAIN, VAL, TrainingConfig(**{**config.to_dict(), "epochs": 6}),
                checkpoint=tmp_path / "part.msgpack", extra={"note": "normalisation here"})
    assert first.n_epochs == 6 and first.resumed_from is None
    resumed = fit(KEY, _net(seed=3), mse, TRAIN, VAL, config, checkpoint=tmp_path / "part.msgpack")
    assert resumed.resumed_from == 6 and resumed.n_epochs == 12
    np.testing.assert_array_equal(np.asarray(resumed.model(X)), np.asarray(whole.model(X)))
    assert resumed.history["val_loss"] == whole.history["val_loss"]
    assert not list(tmp_path.glob("*.tmp"))  # checkpoints are written atomically
    other = TrainingConfig(**{**config.to_dict(), "learning_rate": 1e-2})
    with pytest.raises(ValueError, match="another configuration"):
        fit(KEY, _net(), mse, TRAIN, VAL, other, checkpoint=tmp_path / "part.msgpack")
    with pytest.raises(ValueError, match="written for other training data"):  # the key is part of the run
        fit(jax.random.key(1), _net(), mse, TRAIN, VAL, config, checkpoint=tmp_path / "part.msgpack")


@pytest.mark.parametrize("train, val, message", [
    ({"x": X, "y": np.sin(X)[:-1]}, None, "same leading"),
    ({"x": np.where(X > 2.9, np.nan, X), "y": np.sin(X)}, None, "NaN or inf"),
    (TRAIN, {"x": X}, "layout"),
    ({}, None, "no arrays"),
])
def test_bad_data(train, val, message):
    with pytest.raises(ValueError, match=message):
        fit(KEY, _net(), mse, train, val, TrainingConfig(epochs=1, progress=False))


@pytest.mark.parametrize("kwargs, message", [
    ({"epochs": 0}, "epochs"), ({"schedule": "cosine"}, "schedule"), ({"decay": 1.5}, "decay"),
    ({"milestones": (5, 3)}, "milestones"), ({"patience": 0}, "patience"), ({"learning_rate": -1.0}, "learning_rate"),
])
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**kwargs)


def test_diverging_loss_is_reported():
    config = TrainingConfig(epochs=2, learning_rate=1e3, progress=False)
    bad = {"x": X * 1e30, "y": np.sin(X)}
    with pytest.raises(ValueError, match="not finite"):
        fit(KEY, _net(), mse, bad, config=config)


def test_the_key_decides_the_run_and_must_be_a_key():
    config = TrainingConfig(epochs=2, batch_size=32, progress=False)
    a = fit(KEY, _net(), mse, TRAIN, config=config)
    b = fit(KEY, _net(), mse, TRAIN, config=config)
    c = fit(jax.random.key(1), _net(), mse, TRAIN, config=config)
    assert a.history["train_loss"] == b.history["train_loss"] != c.history["train_loss"]
    with pytest.raises(ValueError, match=r"fit: key must be a jax.random key \(jax.random.key\(seed\)\); got int"):
        fit(0, _net(), mse, TRAIN, config=config)


def test_a_key_of_the_old_raw_kind_is_wrapped_and_others_refused():
    config = TrainingConfig(epochs=1, batch_size=32, progress=False)
    raw = fit(jax.random.PRNGKey(0), _net(), mse, TRAIN, config=config)  # legacy uint32 key data
    typed = fit(jax.random.wrap_key_data(jax.random.PRNGKey(0)), _net(), mse, TRAIN, config=config)
    assert raw.history["train_loss"] == typed.history["train_loss"]
    with pytest.raises(ValueError, match=r"fit: key must be a jax.random key \(jax.random.key\(seed\)\); got an array "
                                         r"of dtype float32"):
        fit(jnp.zeros(2, jnp.float32), _net(), mse, TRAIN, config=config)
