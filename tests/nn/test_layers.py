"""Layers and scalers: the sequence encoder against flax's RNN, scaler round trips."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcalib.nn import MLP, MinMaxScaler, SequenceEncoder, Standardizer
from jcalib.nn.layers import patch_conv1d


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sequence_encoder_matches_flax_rnn(cell):
    enc = SequenceEncoder(3, 8, cell=cell, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (5, 20, 3), dtype=jnp.float32)
    reference = nnx.RNN(enc.cells[0])(x, rngs=nnx.Rngs(2))[:, -1]  # flax scans the same cell
    np.testing.assert_allclose(np.asarray(enc(x)), np.asarray(reference), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(enc(x[2])), np.asarray(enc(x)[2]), rtol=1e-5, atol=1e-6)  # unbatched


@pytest.mark.slow
def test_stacked_encoder_and_mlp_shapes_and_jit():
    enc = SequenceEncoder(2, 16, n_layers=2, rngs=nnx.Rngs(0))
    x = jnp.ones((4, 30, 2))
    assert enc(x).shape == (4, 16)
    np.testing.assert_allclose(np.asarray(nnx.jit(lambda m, x: m(x))(enc, x)), np.asarray(enc(x)), rtol=1e-6)
    net = MLP(3, (8,), 2, rngs=nnx.Rngs(0))
    assert net(jnp.ones((7, 3))).shape == (7, 2) and net(jnp.ones(3)).shape == (2,)
    with pytest.raises(ValueError, match="cell"):
        SequenceEncoder(2, 4, cell="rnn", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="positive"):
        MLP(3, (0,), 2, rngs=nnx.Rngs(0))


@pytest.mark.slow
@pytest.mark.parametrize("n_times, kernel, stride, padding", [(50, 5, 2, "SAME"), (25, 3, 2, "SAME"), (7, 3, 1, "SAME"),
                                                                (50, 5, 3, "VALID"), (9, 4, 2, ((2, 1),)),
                                                                (1, 5, 2, "SAME")])
def test_patch_conv1d_equals_lax_convolution(n_times, kernel, stride, padding):
    """nnx.Conv through patch_conv1d: the same weights (same initialisation, so saved networks
    load unchanged), outputs and gradients as through lax.conv_general_dilated."""
    reference = nnx.Conv(3, 6, kernel, strides=stride, padding=padding, rngs=nnx.Rngs(0))
    patched = nnx.Conv(3, 6, kernel, strides=stride, padding=padding, conv_general_dilated=patch_conv1d,
                       rngs=nnx.Rngs(0))
    params, patched_params = nnx.state(reference, nnx.Param), nnx.state(patched, nnx.Param)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), params, patched_params))
    x = jax.random.normal(jax.random.key(1), (4, n_times, 3), dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(patched(x)), np.asarray(reference(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(patched(x[1])), np.asarray(reference(x[1])), rtol=1e-5, atol=1e-5)

    def loss(module, x):
        return jnp.sum(jnp.sin(module(x)))

    grad_ref, grad_x_ref = nnx.grad(loss, argnums=(0, 1))(reference, x)
    grad, grad_x = nnx.grad(loss, argnums=(0, 1))(patched, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4),
                 nnx.state(grad), nnx.state(grad_ref))
    np.testing.assert_allclose(np.asarray(grad_x), np.asarray(grad_x_ref), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: patch_conv1d(x, patched.kernel[...], (stride,), padding,
                                                                          dimension_numbers=("NWC", "WIO", "NWC")))(x)),
                               np.asarray(patched(x) - patched.bias[...].reshape(1, 1, -1)), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_patch_conv1d_hands_other_convolutions_to_lax():
    """Dilated, grouped, negatively padded (cropping) or 2-D convolutions (not computed as
    patches) give lax's result."""
    x = jax.random.normal(jax.random.key(2), (2, 12, 4), dtype=jnp.float32)
    for options in ({"kernel_dilation": 2}, {"feature_group_count": 2}, {"input_dilation": 2, "padding": ((1, 1),)},
                    {"padding": ((-1, 2),)}):
        reference = nnx.Conv(4, 6, 3, strides=2, rngs=nnx.Rngs(0), **options)
        patched = nnx.Conv(4, 6, 3, strides=2, conv_general_dilated=patch_conv1d, rngs=nnx.Rngs(0), **options)
        np.testing.assert_allclose(np.asarray(patched(x)), np.asarray(reference(x)), rtol=1e-5, atol=1e-5)
    image = jax.random.normal(jax.random.key(3), (2, 8, 8, 3), dtype=jnp.float32)
    reference = nnx.Conv(3, 5, (3, 3), strides=2, rngs=nnx.Rngs(0))
    patched = nnx.Conv(3, 5, (3, 3), strides=2, conv_general_dilated=patch_conv1d, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(np.asarray(patched(image)), np.asarray(reference(image)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scaler_type", [Standardizer, MinMaxScaler])
def test_scalers_round_trip(scaler_type):
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 5.0, size=(100, 4)).astype(np.float32)
    x[:, 2] = 7.0  # a constant feature must not divide by zero
    scaler = scaler_type.fit(x)
    z = np.asarray(scaler(x))
    assert np.all(np.isfinite(z))
    if scaler_type is Standardizer:
        np.testing.assert_allclose(z[:, [0, 1, 3]].mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(z[:, [0, 1, 3]].std(0), 1, rtol=1e-4)
    else:
        np.testing.assert_allclose(z[:, [0, 1, 3]].min(0), 0, atol=1e-6)
        np.testing.assert_allclose(z[:, [0, 1, 3]].max(0), 1, atol=1e-6)
        assert not np.any(np.asarray(scaler.outside(x)))
        assert np.asarray(scaler.outside(x + 100.0)).all()
    np.testing.assert_allclose(np.asarray(scaler.inverse(scaler(x))), x, rtol=1e-5, atol=1e-4)
    again = scaler_type.from_dict(scaler.to_dict())
    np.testing.assert_array_equal(np.asarray(again(x)), z)
    with pytest.raises(ValueError, match="NaN"):
        scaler_type.fit(np.array([[1.0], [np.nan]]))


def test_standardizer_constant_features_and_dtype():
    """A feature that varies only by round-off relative to its magnitude is centred, not rescaled
    (``rtol``); the statistics are stored in the requested dtype, computed in float64."""
    rng = np.random.default_rng(0)
    x = np.stack([rng.normal(3.0, 2.0, 50), 1e6 + 1e-4 * rng.standard_normal(50), np.full(50, -7.0)], axis=1)
    scaler = Standardizer.fit(x, rtol=1e-9, dtype=jnp.float64)
    assert scaler.mean.dtype == scaler.std.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(scaler.mean), x.mean(axis=0), rtol=1e-15)
    np.testing.assert_array_equal(np.asarray(scaler.std), [x[:, 0].std(), 1.0, 1.0])
    loose = Standardizer.fit(x, rtol=1e-12, dtype=jnp.float64)  # 1e-4 spread > 1e-12 * 1e6: rescaled
    np.testing.assert_allclose(np.asarray(loose.std)[1], x[:, 1].std(), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(scaler.inverse(scaler(jnp.asarray(x)))), x, rtol=1e-14)
    assert Standardizer.fit(x).mean.dtype == jnp.float32
