"""PELS-VAE on rigid_double_beam (quick size): test error against the training-set size, the
generation path against the encoder path, the surrogate in simulate_batch, sobol_indices and
a calibration problem, exact save/load, jit/vmap consistency and bad input."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.estimation.global_search import differential_evolution
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig, Surrogate
from jcalib.nn.training import TrainingConfig
from jcalib.sensitivity.sobol import sobol_indices

STRIDE = 8  # every 8th of the 256 observation times: 32 steps keep the LSTM cheap on a CPU
N_TRAIN, N_VAL, N_TEST = 512, 128, 256
SOBOL_N = 64  # Saltelli base samples: 64 (4 + 2) = 384 evaluations
CHUNK = SOBOL_N * 6  # simulate_batch chunk of the data, shared with the model's Sobol run (one compile)
STEPS = 2000  # optimiser steps of every quick training run, whatever the training-set size


def quick_config(n_train: int) -> PELSVAEConfig:
    """Small networks; the same number of Adam steps for every training-set size, a
    multi-step schedule (decay 0.2 at 60 % and 85 % of the epochs)."""
    batch_size = 8 if n_train <= 32 else 64
    epochs = STEPS // (n_train // batch_size)
    return PELSVAEConfig(latent_size=8, hidden_size=32, training=TrainingConfig(
        epochs=epochs, batch_size=batch_size, learning_rate=3e-3, schedule="multistep",
        milestones=(int(0.6 * epochs), int(0.85 * epochs)), decay=0.2, progress=False))


@pytest.fixture(scope="module")
def beam():
    model = jcalib.models.get("rigid_double_beam")
    return model.with_times(np.asarray(model.ts)[STRIDE - 1 :: STRIDE])


@pytest.fixture(scope="module")
def data(beam):
    space = beam.parameters
    keys = jax.random.split(jax.random.key(0), 3)
    thetas = np.concatenate([np.asarray(space.sample(keys[0], N_TRAIN, "lhs")),
                             np.asarray(space.sample(keys[1], N_VAL)), np.asarray(space.sample(keys[2], N_TEST))])
    xs = jcalib.simulate_batch(beam, thetas, chunk_size=CHUNK)
    split = np.cumsum([N_TRAIN, N_VAL])
    return {name: (th, x) for name, th, x in zip(("train", "val", "test"), np.split(thetas, split),
                                                   np.split(xs, split))}


@pytest.fixture(scope="module")
def trained(beam, data):
    """PELS-VAEs trained on the first 32 and on all 512 training samples (same validation set)."""
    th, x = data["train"]
    return {n: PELSVAE(beam, quick_config(n)).fit(jax.random.key(n), th[:n], x[:n], val=data["val"])
            for n in (32, 512)}


@pytest.fixture(scope="module")
def errors(trained, data):
    return {n: {path: vae.evaluate(*data["test"], path=path) for path in ("generate", "reconstruct")}
            for n, vae in trained.items()}


@pytest.fixture(scope="module")
def surrogate(trained):
    return trained[512].surrogate


@pytest.mark.slow
def test_test_error_falls_with_the_training_set(errors, data):
    small, large = errors[32]["generate"], errors[512]["generate"]
    print({n: (e["generate"].scaled_mae, e["reconstruct"].scaled_mae) for n, e in errors.items()})
    # measured (4 seeds): scaled MAE 0.23-0.27 with 32 samples, 0.054-0.060 with 512
    assert np.mean(large.scaled_mae) < 0.5 * np.mean(small.scaled_mae)
    assert np.all(large.mae < small.mae)
    assert large.names == ("y1", "y2") and not np.any(np.asarray(large.outside))
    # far better than predicting the mean training trajectory (scaled MAE 0.5)
    x_train, (_, x_test) = data["train"][1], data["test"]
    baseline = np.mean(np.abs(x_test - x_train.mean(axis=0)).mean(axis=(0, 1)) / x_train.std(axis=(0, 1)))
    assert np.mean(large.scaled_mae) < 0.25 * baseline


@pytest.mark.slow
def test_generation_path_is_within_twice_the_encoder_path(errors):
    # measured: generate / reconstruct = 1.0-1.25 (the latent holds KL ~ 4-9 nats at beta = 1e-3)
    for e in errors.values():
        assert np.mean(e["generate"].mae) <= 2.0 * np.mean(e["reconstruct"].mae)


@pytest.mark.slow
def test_training_history_and_summary(trained):
    vae = trained[512]
    h = vae.training.history
    for name in ("train_loss", "val_loss", "val_reconstruction", "val_kl", "val_student", "val_generation"):
        assert np.all(np.isfinite(h[name])), name
    assert h["train_loss"][-1] < 0.1 * h["train_loss"][0]
    lr = h["learning_rate"]
    assert lr[0] == pytest.approx(3e-3) and lr[-1] == pytest.approx(3e-3 * 0.2**2)
    d = vae.to_dict()
    assert d["n_train"] == 512 and d["parameters"] == ["d1", "d2", "k1", "k2"] and d["n_times"] == 256 // STRIDE
    assert d["config"]["training"]["milestones"] == list(quick_config(512).training.milestones)
    assert d["training"]["n_epochs"] == quick_config(512).training.epochs


@pytest.mark.slow
def test_parts_have_the_documented_shapes(surrogate, data):
    th, x = data["test"][0][:5], data["test"][1][:5]
    mu, sigma = surrogate.encode(x, th)
    mu_re, sigma_re = surrogate.regress(th)
    assert mu.shape == sigma.shape == mu_re.shape == sigma_re.shape == (5, 8)
    assert np.all(np.asarray(sigma) > 0) and np.all(np.asarray(sigma_re) > 0)
    decoded = surrogate.decode(mu_re, th)
    assert decoded.shape == (5, 256 // STRIDE, 2) and decoded.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(surrogate.generate(None, th, n_passes=0)), np.asarray(decoded))
    # a key draws other noise; with the fixed noise, generate is deterministic
    np.testing.assert_array_equal(np.asarray(surrogate.generate(None, th)), np.asarray(surrogate.generate(None, th)))
    other = np.asarray(surrogate.generate(jax.random.key(5), th))
    assert np.all(np.isfinite(other)) and not np.array_equal(other, np.asarray(surrogate.generate(None, th)))


@pytest.mark.slow
def test_surrogate_in_simulate_batch(surrogate, data):
    th = data["test"][0]
    values, status = jcalib.simulate_batch(surrogate, th, return_status=True)
    assert values.shape == (N_TEST, 256 // STRIDE, 2) and values.dtype == np.float64
    assert np.all(status == jcalib.SolveStatus.SUCCESS)
    np.testing.assert_allclose(values, np.asarray(surrogate.generate(None, th)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(surrogate.simulate_batch(th[:7]), values[:7], rtol=1e-5, atol=1e-6)
    one = surrogate.simulate(jnp.asarray(th[0]))
    assert one.shape == (256 // STRIDE, 2) and one.dtype == jnp.float64


@pytest.mark.slow
def test_surrogate_sobol_indices_match_the_model(beam, surrogate):
    key = jax.random.key(3)  # the same design for both
    on_model = sobol_indices(key, beam, None, SOBOL_N, chunk_size=CHUNK)
    on_surrogate = sobol_indices(key, surrogate, None, SOBOL_N)
    s_model = np.asarray(on_model.averaged_first_order)
    s_surrogate = np.asarray(on_surrogate.averaged_first_order)
    print(s_model, s_surrogate)
    assert on_surrogate.first_order.shape == (4, 256 // STRIDE, 2)
    assert np.argmax(s_surrogate) == np.argmax(s_model)
    np.testing.assert_allclose(s_surrogate, s_model, atol=0.1)


@pytest.mark.slow
def test_calibration_problem_and_differential_evolution_on_the_surrogate(beam, surrogate, data):
    th = data["test"][0][0]
    measurements = jcalib.Measurements(beam.ts, np.asarray(beam.simulate(jnp.asarray(th))),
                                       output_names=beam.output_names)
    problem = jcalib.CalibrationProblem(surrogate, measurements, weighting="absolute")
    z = problem.to_internal(jnp.asarray(th))
    assert np.isfinite(float(problem.loss(z)))
    assert np.all(np.isfinite(np.asarray(problem.jacobian(z))))
    result = differential_evolution(jax.random.key(0), problem, population_size=16, max_steps=5)
    assert np.isfinite(result.loss) and np.all(np.asarray(surrogate.inside(jnp.asarray(result.theta))))


@pytest.mark.slow
def test_save_and_load_reproduce_predictions_exactly(trained, data, tmp_path):
    vae = trained[512]
    path = tmp_path / "pelsvae.msgpack"
    vae.save(path)
    again = PELSVAE.load(path)
    th, x = data["test"][0][:16], data["test"][1][:16]
    np.testing.assert_array_equal(np.asarray(again.generate(None, th)), np.asarray(vae.generate(None, th)))
    np.testing.assert_array_equal(np.asarray(again.encode(x, th)[0]), np.asarray(vae.encode(x, th)[0]))
    assert again.config == vae.config and again.n_train == 512 and again.training is None
    assert again.surrogate.parameters == vae.surrogate.parameters
    assert again.surrogate.output_names == vae.surrogate.output_names
    np.testing.assert_array_equal(np.asarray(again.surrogate.ts), np.asarray(vae.surrogate.ts))
    with pytest.raises(ValueError, match="not a"):
        (tmp_path / "junk.msgpack").write_bytes(b"junk")
        PELSVAE.load(tmp_path / "junk.msgpack")


@pytest.mark.slow
def test_generate_jit_and_vmap_consistency(surrogate, data):
    th = jnp.asarray(data["test"][0][:32])
    eager = np.asarray(surrogate.generate(None, th))
    # a Surrogate holds arrays, so (as for models) it is jitted with equinox or as an argument
    np.testing.assert_allclose(np.asarray(eqx.filter_jit(surrogate.generate)(None, th)), eager, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda s, t: s.generate(None, t))(surrogate, th)), eager,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.vmap(lambda t: surrogate.generate(None, t))(th)), eager, rtol=1e-5,
                               atol=1e-6)
    simulate = jax.jit(lambda s, t: s.simulate(t))
    np.testing.assert_allclose(np.asarray(simulate(surrogate, th[3])), eager[3], rtol=1e-5, atol=1e-6)
    jac = surrogate.jacobian(th[0])
    assert jac.shape == (256 // STRIDE, 2, 4) and np.all(np.isfinite(np.asarray(jac)))


@pytest.mark.slow
def test_outside_the_training_box(surrogate, beam):
    space = beam.parameters
    theta = jnp.asarray(space.nominal).at[2].set(1.5 * space.upper[2])  # k1 beyond its upper bound
    on_bound = theta.at[2].set(space.upper[2])
    y, status = surrogate.simulate_with_status(theta)  # default outside="nan": like a failed solve
    assert np.all(np.isnan(np.asarray(y))) and int(status) == jcalib.SolveStatus.SOLVER_FAILED
    assert np.all(np.isfinite(np.asarray(surrogate.simulate(on_bound))))
    clip = dataclasses.replace(surrogate, outside="clip")
    np.testing.assert_array_equal(np.asarray(clip.simulate(theta)), np.asarray(clip.simulate(on_bound)))
    extrapolate = dataclasses.replace(surrogate, outside="extrapolate")
    y = np.asarray(extrapolate.simulate(theta))
    assert np.all(np.isfinite(y)) and not np.allclose(y, np.asarray(clip.simulate(theta)))
    with pytest.raises(ValueError, match="outside the bounds"):
        jcalib.simulate_batch(surrogate, np.asarray(theta)[None])
    values, status = jcalib.simulate_batch(surrogate, np.stack([np.asarray(theta), np.asarray(on_bound)]),
                                           check_bounds=False, throw=False, return_status=True)
    assert np.all(np.isnan(values[0])) and np.all(np.isfinite(values[1]))
    assert status.tolist() == [jcalib.SolveStatus.SOLVER_FAILED, jcalib.SolveStatus.SUCCESS]
    with pytest.raises(ValueError, match="outside must be one of"):
        dataclasses.replace(surrogate, outside="wrap")


@pytest.mark.slow
def test_bad_input(surrogate, beam, data):
    th, x = data["train"][0][:40], data["train"][1][:40]
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\) with n_params=4"):
        surrogate.simulate(jnp.ones(3))
    with pytest.raises(ValueError, match=r"theta must have shape \(\.\.\., n_params\)"):
        surrogate.generate(None, np.ones((5, 3)))
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., n_times, n_outputs\)"):
        surrogate.encode(np.ones((5, 10, 2)), th[:5])
    with pytest.raises(ValueError, match="training times"):
        surrogate.with_times(np.linspace(0.0, 1.0, 5))
    with pytest.raises(ValueError, match=r"PELSVAE: not trained yet; call PELSVAE\(simulator, config\).fit"):
        PELSVAE(beam).generate(None, th)
    with pytest.raises(ValueError, match="latent_size must be a positive integer"):
        PELSVAEConfig(latent_size=0)
    with pytest.raises(ValueError, match="beta"):
        PELSVAEConfig(beta=-1.0)
    vae = PELSVAE(beam, quick_config(32))
    key = jax.random.key(0)
    bad = x.copy()
    bad[3, 5, 1] = np.nan
    with pytest.raises(ValueError, match=r"trajectories have NaN or inf in samples \[3\]"):
        vae.fit(key, th, bad)
    outside = th.copy()
    outside[2, 0] = 10.0
    with pytest.raises(ValueError, match="outside the parameter bounds.*row 2, d1 = 10.0"):
        vae.fit(key, outside, x)
    with pytest.raises(ValueError, match=r"thetas must have shape \(n, n_params\)"):
        vae.fit(key, th[:, :3], x)
    with pytest.raises(ValueError, match=r"trajectories must have shape \(n, n_times, n_outputs\) with n = 40"):
        vae.fit(key, th, x[:30])
    with pytest.raises(ValueError, match="trajectories have 16 times, the model 32"):
        vae.fit(key, th, x[:, ::2])
    with pytest.raises(ValueError, match="val must be a"):
        vae.fit(key, th, x, val=th)
    with pytest.raises(ValueError, match=r"PELSVAE: simulator must be a jcalib simulator.*got dict"):
        PELSVAE({"d1": (0.0, 1.0)})
    with pytest.raises(ValueError, match="config must be a PELSVAEConfig; got dict"):
        PELSVAE(beam, {})
    with pytest.raises(ValueError, match="path must be 'generate' or 'reconstruct'"):
        PELSVAE(beam).evaluate(th, x, path="encode")


@pytest.mark.slow
def test_fit_without_a_model_and_the_lifecycle(beam, data):
    """Trajectories from elsewhere: a FunctionSimulator describes the space, times and outputs;
    fit returns a new immutable network and leaves the untrained one as it was."""
    th, x = data["train"][0][:64], data["train"][1][:64]
    config = dataclasses.replace(quick_config(512), training=TrainingConfig(epochs=2, batch_size=32, progress=False))
    description = jcalib.FunctionSimulator(lambda t: jnp.zeros((32, 2)), beam.parameters, ("a", "b"),
                                           ts=np.arange(32.0))
    untrained = PELSVAE(description, config)
    vae = untrained.fit(jax.random.key(0), th, x)
    s = vae.surrogate
    assert isinstance(s, Surrogate) and s.output_names == ("a", "b") and untrained.training is None
    assert vae.training.n_epochs == 2 and vae is not untrained
    np.testing.assert_array_equal(np.asarray(s.ts), np.arange(32.0))
    assert vae.generate(None, th[:2]).shape == (2, 32, 2)
    with pytest.raises(AttributeError, match="PELSVAE is immutable: fit"):
        vae.config = config
    again = untrained.fit(jax.random.key(0), th, x)  # the same key, the same network
    np.testing.assert_array_equal(np.asarray(again.generate(None, th[:3])), np.asarray(vae.generate(None, th[:3])))
    other = untrained.fit(jax.random.key(1), th, x)
    assert not np.array_equal(np.asarray(other.generate(None, th[:3])), np.asarray(vae.generate(None, th[:3])))
