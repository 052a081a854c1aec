"""Building blocks of jcalib's networks: MLPs, LSTM/GRU sequence encoders, a fast 1-D convolution and scalers.

Networks are flax nnx modules built with ``rngs=nnx.Rngs(key)`` (the key given to ``fit``) and run in float32 (inputs
are cast, so float64 callers need no conversion).
Scalers are frozen pytrees holding their statistics, so they are saved with the weights
(``to_dict`` / ``from_dict``) and a reloaded network reproduces its predictions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float

__all__ = ["CELLS", "MLP", "MinMaxScaler", "SequenceEncoder", "Standardizer", "patch_conv1d"]

CELLS = ("lstm", "gru")


class MLP(nnx.Module):
    """Fully connected network: ``in_features -> hidden[0] -> ... -> out_features``, the
    activation after every hidden layer, a linear output layer.

    Example:
        >>> net = MLP(3, (64, 64), 2, rngs=nnx.Rngs(0))
        >>> net(jnp.ones((5, 3))).shape
        (5, 2)
    """

    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int, *,
                 activation: Callable[[Array], Array] = nnx.relu, rngs: nnx.Rngs) -> None:
        sizes = [int(in_features), *(int(h) for h in hidden), int(out_features)]
        if min(sizes) < 1:
            raise ValueError(f"MLP: layer sizes must be positive; got {sizes}")
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.activation = activation

    def __call__(self, x: Float[ArrayLike, "... in_features"]) -> Float[Array, "... out_features"]:
        x = jnp.asarray(x, jnp.float32)  # networks run in float32 (DESIGN.md), whatever the caller's dtype
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


class SequenceEncoder(nnx.Module):
    """Stacked LSTM or GRU layers over time; returns the last layer's final hidden state.

    Input ``(..., n_times, in_features)``, output ``(..., hidden_features)``.

    Example:
        >>> enc = SequenceEncoder(2, 16, cell="gru", n_layers=2, rngs=nnx.Rngs(0))
        >>> enc(jnp.ones((4, 50, 2))).shape
        (4, 16)
    """

    def __init__(self, in_features: int, hidden_features: int, *, cell: str = "lstm", n_layers: int = 1,
                 rngs: nnx.Rngs):
        if cell not in CELLS:
            raise ValueError(f"SequenceEncoder: cell must be one of {CELLS}; got {cell!r}")
        if n_layers < 1 or hidden_features < 1:
            raise ValueError("SequenceEncoder: n_layers and hidden_features must be positive")
        if cell == "lstm":  # forget gates start open (bias 1), as Keras does (Jozefowicz et al. 2015)
            make = functools.partial(nnx.OptimizedLSTMCell, bias_init=_unit_forget_bias)
        else:
            make = nnx.GRUCell
        sizes = [int(in_features)] + [int(hidden_features)] * n_layers
        self.cells = nnx.List([make(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.cell = cell
        self.hidden_features = int(hidden_features)

    def __call__(self, x: Float[Array, "... n_times in_features"]) -> Float[Array, "... hidden_features"]:
        batch = x.shape[:-2]
        seq = jnp.moveaxis(jnp.asarray(x, jnp.float32), -2, 0)  # time-major for the scan
        for cell in self.cells:
            zeros = jnp.zeros((*batch, self.hidden_features), seq.dtype)
            carry = (zeros, zeros) if self.cell == "lstm" else zeros
            carry, seq = jax.lax.scan(lambda c, xt, cell=cell: cell(c, xt), carry, seq)
        return seq[-1]


def _unit_forget_bias(key, shape, dtype=jnp.float32):
    """The bias of an LSTM cell's four gates (i, f, g, o, as `flax.nnx.OptimizedLSTMCell` splits
    them): 1 for the forget gate, 0 elsewhere. With a zero bias the forget gates start half closed
    and the cell forgets the start of a 50-step series; on the BayesFlow benchmark (LSTM(64), 10
    epochs) jcalib's loss ended at 0.72 where the `bayesflow` library's, with Keras's unit forget
    bias, ended at 0.06."""
    del key
    hidden = shape[-1] // 4
    return jnp.zeros(shape, dtype).at[..., hidden:2 * hidden].set(1.0)


def patch_conv1d(lhs: Array, rhs: Array, window_strides: Sequence[int], padding, lhs_dilation=None,
                 rhs_dilation=None, dimension_numbers=None, feature_group_count: int = 1, precision=None,
                 preferred_element_type=None, out_sharding=None, **kwargs) -> Array:
    """`jax.lax.conv_general_dilated` for a 1-D convolution as one matrix product of strided patches.

    A drop-in ``conv_general_dilated`` for `flax.nnx.Conv`
    (``nnx.Conv(..., conv_general_dilated=patch_conv1d)``): the same layer, weights and outputs
    (to float32 round-off), computed as ``k`` strided slices of the padded input stacked into
    patches ``(batch, n_out, k * in_features)`` and multiplied by the kernel reshaped to
    ``(k * in_features, out_features)`` ("im2col"). Its gradient is a matrix product and ``k``
    padded slices. Why: on XLA's CPU backend the gradient of `lax.conv_general_dilated` is
    an order of magnitude slower inside a `jax.lax.scan` than in a jitted call of its own, and
    `jcalib.nn.training.fit` runs each epoch as one scan over its minibatches (BayesFlow's
    ``"conv"`` summary network; measured in the CHANGELOG's 0.1.0 notes). Padding follows
    `lax.padtype_to_pads` (``"SAME"``, ``"VALID"`` or explicit pairs), as in
    `lax.conv_general_dilated`.

    Only the case ``nnx.Conv`` produces for a 1-D layer is computed this way: one spatial axis
    with the ``("NWC", "WIO", "NWC")`` layout, no dilation, one feature group; any other call
    (or one with ``out_sharding``) goes to `lax.conv_general_dilated` unchanged.

    Example:
        >>> conv = nnx.Conv(2, 8, 5, strides=2, conv_general_dilated=patch_conv1d, rngs=nnx.Rngs(0))
        >>> conv(jnp.ones((4, 50, 2), dtype=jnp.float32)).shape
        (4, 25, 8)
    """
    strides = tuple(window_strides)
    plain = (lhs.ndim == 3 and rhs.ndim == 3 and dimension_numbers is not None
             and jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
             == jax.lax.conv_dimension_numbers(lhs.shape, rhs.shape, ("NWC", "WIO", "NWC"))
             and tuple(lhs_dilation or (1,)) == (1,) and tuple(rhs_dilation or (1,)) == (1,)
             and feature_group_count == 1 and out_sharding is None and not kwargs)
    if plain:
        pads = (jax.lax.padtype_to_pads((lhs.shape[1],), (rhs.shape[0],), strides, padding)
                if isinstance(padding, str) else [tuple(int(p) for p in pair) for pair in padding])
        # lax allows negative padding (cropping), which jnp.pad does not, and inputs shorter than the kernel
        plain = len(pads) == 1 and min(pads[0]) >= 0 and lhs.shape[1] + sum(pads[0]) >= rhs.shape[0]
    if not plain:
        extra = {} if out_sharding is None else {"out_sharding": out_sharding}
        return jax.lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                            dimension_numbers, feature_group_count, precision=precision,
                                            preferred_element_type=preferred_element_type, **extra, **kwargs)
    k, stride = rhs.shape[0], strides[0]
    (low, high), = pads
    x = jnp.pad(lhs, ((0, 0), (low, high), (0, 0)))
    n_out = (x.shape[1] - k) // stride + 1
    patches = jnp.concatenate([x[:, j:j + (n_out - 1) * stride + 1:stride, :] for j in range(k)], axis=-1)
    return jnp.matmul(patches, rhs.reshape(k * rhs.shape[1], rhs.shape[2]), precision=precision,
                      preferred_element_type=preferred_element_type)


class Standardizer(eqx.Module):
    """z = (x - mean) / std per feature (statistics over the sample axes): the one standardiser of
    jcalib (the PELS-VAE's outputs, the amortized posterior's parameters and observations, the
    identification workflow's training elements).

    Example:
        >>> scaler = Standardizer.fit(jnp.array([[1.0, 5.0], [3.0, 5.0]]))
        >>> scaler.mean.tolist(), scaler.std.tolist()  # the constant feature keeps std 1
        ([2.0, 5.0], [1.0, 1.0])
    """

    mean: Float[Array, "..."]
    std: Float[Array, "..."]

    @classmethod
    def fit(cls, x: Float[ArrayLike, "n ..."], axis: int | Sequence[int] = 0, rtol: float = 1e-8,
            dtype=jnp.float32) -> Standardizer:
        """Mean and (population) standard deviation of ``x`` over ``axis``.

        Args:
            x: samples, finite.
            axis: the sample axes.
            rtol: a feature whose standard deviation is at most ``rtol * max(1, |mean|)`` does not
                vary beyond round-off: it gets std 1 (only centred), never a division by ~0.
            dtype: dtype of the stored statistics (computed in float64): float32 at a network's
                boundary, float64 (with x64 on) for statistics used in float64 arithmetic.

        Raises:
            ValueError: empty ``x`` or NaN/inf in it.
        """
        x = np.asarray(x, dtype=np.float64)
        _check_finite(x, "Standardizer.fit")
        mean, std = x.mean(axis=axis), x.std(axis=axis)
        std = np.where(std > rtol * np.maximum(1.0, np.abs(mean)), std, 1.0)
        return cls(jnp.asarray(mean, dtype), jnp.asarray(std, dtype))

    def __call__(self, x):
        return (x - _lead(self.mean, x)) / _lead(self.std, x)

    def inverse(self, z):
        return z * _lead(self.std, z) + _lead(self.mean, z)

    def to_dict(self) -> dict:
        return {"kind": "standard", "mean": np.asarray(self.mean), "std": np.asarray(self.std)}

    @classmethod
    def from_dict(cls, d: Mapping) -> Standardizer:
        return cls(jnp.asarray(d["mean"], jnp.float32), jnp.asarray(d["std"], jnp.float32))


class MinMaxScaler(eqx.Module):
    """z = (x - low) / (high - low) per feature: the training data map to [0, 1]
    (min-max normalisation from the training data, IMPU paper)."""

    low: Float[Array, "..."]
    high: Float[Array, "..."]

    @classmethod
    def fit(cls, x: Float[ArrayLike, "n ..."], axis: int | Sequence[int] = 0) -> MinMaxScaler:
        """Range of ``x`` over ``axis`` (constant features get a range of 1)."""
        x = np.asarray(x, dtype=np.float64)
        _check_finite(x, "MinMaxScaler.fit")
        low, high = x.min(axis=axis), x.max(axis=axis)
        return cls(jnp.asarray(low, jnp.float32), jnp.asarray(np.where(high > low, high, low + 1.0), jnp.float32))

    def __call__(self, x):
        return (x - _lead(self.low, x)) / _lead(self.high - self.low, x)

    def inverse(self, z):
        return z * _lead(self.high - self.low, z) + _lead(self.low, z)

    def outside(self, x, margin: float = 0.0):
        """Per sample (leading axis): whether any feature leaves [low, high] widened by
        ``margin`` times the range."""
        z = self(x)
        bad = (z < -margin) | (z > 1.0 + margin)
        return jnp.any(bad.reshape(bad.shape[0], -1), axis=1) if bad.ndim > self.low.ndim else jnp.any(bad)

    def to_dict(self) -> dict:
        return {"kind": "minmax", "low": np.asarray(self.low), "high": np.asarray(self.high)}

    @classmethod
    def from_dict(cls, d: Mapping) -> MinMaxScaler:
        return cls(jnp.asarray(d["low"], jnp.float32), jnp.asarray(d["high"], jnp.float32))


def _lead(stat: Array, x) -> Array:
    """``stat`` with leading unit axes to broadcast against ``x`` (explicit rank promotion)."""
    return jnp.reshape(stat, (1,) * (jnp.ndim(x) - stat.ndim) + stat.shape)


def _check_finite(x: np.ndarray, where: str) -> None:
    if x.size == 0:
        raise ValueError(f"{where}: no data")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{where}: data contain NaN or inf")
