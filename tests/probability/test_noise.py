"""`jcalib.probability.add_noise`, the one noise-adding function, and the places that call it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.data import synthetic_measurements
from jcalib.nn.data import _noise_fn
from jcalib.probability import NOISE_MODELS, AbsoluteGaussian, RelativeGaussian, add_noise
from jcalib.probability.likelihoods import LogNormalLikelihood
from jcalib.workflows.iterative_identification import _noisy

KEY = jax.random.key(7)
VALUES = np.linspace(0.5, 3.0, 24).reshape(2, 4, 3)  # (batch, n_times, n_outputs)
SIGMA = np.array([0.01, 0.1, 0.3])  # one per output


def _eps(key, shape):
    """The standard normal draws every caller used before issue 18 (float64, the key as given)."""
    return np.asarray(jax.random.normal(key, shape, dtype=jnp.float64))


@pytest.mark.parametrize("noise, formula", [
    ("additive", lambda f, s, e: f + s * e),
    ("multiplicative", lambda f, s, e: f * (1.0 + s * e)),
    ("lognormal", lambda f, s, e: f * np.exp(s * e)),
])
def test_noise_models_are_their_formulas(noise, formula):
    eps = _eps(KEY, VALUES.shape)
    for sigma in (0.2, SIGMA, np.full(VALUES.shape[1:], 0.05)):  # scalar, per output, per entry
        got = np.asarray(add_noise(KEY, VALUES, sigma, noise))
        np.testing.assert_allclose(got, formula(VALUES, np.broadcast_to(sigma, VALUES.shape), eps), rtol=1e-14)
    assert not np.allclose(np.asarray(add_noise(jax.random.key(8), VALUES, SIGMA, noise)),
                           np.asarray(add_noise(KEY, VALUES, SIGMA, noise)))


def test_jit_and_vmap_agree():
    fn = jax.jit(lambda k, f, s: add_noise(k, f, s, "multiplicative"))
    np.testing.assert_array_equal(np.asarray(fn(KEY, VALUES, SIGMA)),
                                  np.asarray(add_noise(KEY, VALUES, SIGMA, "multiplicative")))
    keys = jax.random.split(KEY, 2)
    # NumPy in, NumPy out (mutable, as the IMPU scripts use it); traced: JAX
    assert isinstance(add_noise(KEY, VALUES, SIGMA), np.ndarray)
    assert isinstance(add_noise(KEY, jnp.asarray(VALUES), SIGMA), jax.Array)
    np.testing.assert_array_equal(np.asarray(jax.vmap(lambda k: add_noise(k, VALUES[0], SIGMA))(keys)[1]),
                                  add_noise(keys[1], VALUES[0], SIGMA))
    batched = jax.vmap(lambda k, f: add_noise(k, f, SIGMA))(keys, VALUES)
    np.testing.assert_array_equal(np.asarray(batched),
                                  np.stack([np.asarray(add_noise(k, f, SIGMA)) for k, f in zip(keys, VALUES)]))


def test_likelihoods_draw_through_add_noise():
    sigma = jnp.broadcast_to(jnp.asarray(SIGMA), VALUES.shape)
    for likelihood, noise in ((AbsoluteGaussian(), "additive"), (RelativeGaussian(), "multiplicative"),
                              (LogNormalLikelihood(), "lognormal")):
        np.testing.assert_array_equal(np.asarray(likelihood.add_noise(KEY, jnp.asarray(VALUES), sigma)),
                                      np.asarray(add_noise(KEY, VALUES, SIGMA, noise)))


def test_callers_keep_their_draws(model, theta, clean):
    """synthetic_measurements, simulate_training_set's noise and the identification workflow's
    noise give the draws they gave before they called add_noise."""
    clean = np.asarray(clean)
    for noise, old in (("multiplicative", clean * (1.0 + 0.05 * _eps(KEY, clean.shape))),
                       ("additive", clean + 0.05 * _eps(KEY, clean.shape))):
        data = synthetic_measurements(KEY, model, theta, 0.05, noise=noise)
        np.testing.assert_allclose(np.asarray(data.values), old, rtol=1e-14)
    old = VALUES + SIGMA * _eps(KEY, VALUES.shape)
    np.testing.assert_array_equal(_noise_fn(SIGMA, "additive", 3, "test")(KEY, VALUES), old)
    np.testing.assert_array_equal(_noisy(KEY, VALUES, SIGMA), old)
    assert isinstance(_noisy(KEY, VALUES, SIGMA), np.ndarray)


def test_errors():
    with pytest.raises(ValueError, match=r"add_noise: noise must be one of \('additive', 'multiplicative', "
                                         r"'lognormal'\); got 'relative'"):
        add_noise(KEY, VALUES, SIGMA, "relative")
    with pytest.raises(ValueError, match=r"add_noise: sigma of shape \(2,\) does not broadcast to the values' shape "
                                         r"\(2, 4, 3\); give a scalar, one per output or one per entry"):
        add_noise(KEY, VALUES, [0.1, 0.2])
    assert NOISE_MODELS == ("additive", "multiplicative", "lognormal")
