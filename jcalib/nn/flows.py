"""Conditional affine coupling flow: the invertible network (cINN) of BayesFlow.

``CouplingFlow`` maps parameters ``θ`` to a latent ``z`` under a condition (the summary of
the data, Zhang & Mikelsons 2023, Fig. 1 and eqs. 4-5)::

    z = f(θ; c),   p(θ | c) = N(z | 0, I) |det ∂z/∂θ|

with a chain of ``n_blocks`` blocks, each (in the forward direction θ -> z)

1. optional **ActNorm**: ``y = (x - b) exp(-s)`` per dimension with learned ``b, s``
   (identity at construction; `CouplingFlow.initialize_actnorm` sets them from a batch so
   each block's input has zero mean and unit variance, as in Glow; no batch statistics
   are used afterwards, so inference is deterministic);
2. a fixed **permutation** of the dimensions (drawn from ``permutation_key``) followed by a split into halves
   ``(x1, x2)``, realised as a mask (``x1`` = the first ``n_params // 2`` permuted
   dimensions). Masking with the permuted split is the same map as permuting, splitting
   and permuting back, without moving data;
3. two **affine coupling** steps (the "GLOW coupling" of Ardizzone et al. / BayesFlow,
   which transforms both halves in one block)::

       x2 <- x2 exp(s2(x1, c)) + t2(x1, c)
       x1 <- x1 exp(s1(x2, c)) + t1(x2, c)

   where ``(s, t)`` come from an MLP of the unchanged half and the context ``c``, and the
   log-scale is soft-clamped, ``s = clamp (2/π) atan(s_raw / clamp)`` (Ardizzone et al.
   2019; BayesFlow's ``soft_clamping``), so ``|s| < clamp`` and ``exp(s)`` stays within
   ``[e^-clamp, e^clamp]``: no overflow early in training. The output layer of every MLP
   starts at zero, so a fresh flow is the identity and a fresh posterior is the base.

With ``n_params = 1`` the half ``x1`` is empty: each block has one affine step of ``θ``
conditioned on the context alone. The flow is then an affine map of ``z`` for a given
context, i.e. a Gaussian posterior (exact for linear-Gaussian problems, an approximation
otherwise).

Implementation: the coupling steps are ``distrax.MaskedCoupling`` bijectors with a
``distrax.ScalarAffine`` inner bijector (masked-out entries keep their value and add no
log-determinant); ActNorm is a ``distrax.Block(distrax.ScalarAffine)``. The MLPs are
jcalib's `MLP` (flax nnx, float32). All shapes broadcast over leading batch axes, so the
methods are jittable and vmappable.

Example:
    >>> flow = CouplingFlow(2, 3, n_blocks=2, hidden=(16,), rngs=nnx.Rngs(0))
    >>> theta, context = jnp.ones((5, 2)), jnp.zeros((5, 3))
    >>> z, log_det = flow.forward(theta, context)
    >>> z.shape, log_det.shape
    ((5, 2), (5,))
    >>> flow.sample(jax.random.key(0), jnp.zeros(3), 7).shape
    (7, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jcalib.nn.layers import MLP

__all__ = ["ActNorm", "AffineCoupling", "CouplingFlow", "soft_clamp"]

_LOG_2PI = math.log(2.0 * math.pi)


def soft_clamp(s: Array, clamp: float) -> Array:
    """``clamp (2/π) atan(s / clamp)``: odd, slope ``2/π`` at 0, bounded by ``±clamp``."""
    return (2.0 * clamp / math.pi) * jnp.arctan(s / clamp)


class ActNorm(nnx.Module):
    """Per-dimension affine normalisation ``y = (x - bias) exp(-log_scale)`` (learned)."""

    def __init__(self, n_params: int):
        self.bias = nnx.Param(jnp.zeros(n_params, jnp.float32))
        self.log_scale = nnx.Param(jnp.zeros(n_params, jnp.float32))

    def bijector(self) -> distrax.Bijector:
        # x -> (x - b) e^{-s}  ==  ScalarAffine(shift=-b e^{-s}, log_scale=-s)
        s = self.log_scale[...]
        return distrax.Block(distrax.ScalarAffine(shift=-self.bias[...] * jnp.exp(-s), log_scale=-s), 1)


class AffineCoupling(nnx.Module):
    """One masked affine coupling step: entries where ``mask`` is True condition (and stay),
    the others are scaled and shifted by an MLP of the conditioning entries and the context."""

    def __init__(self, mask: np.ndarray, n_context: int, hidden: Sequence[int], clamp: float, *,
                 activation: Callable[[Array], Array], rngs: nnx.Rngs) -> None:
        n_params = int(mask.size)
        self.mask = tuple(bool(m) for m in np.asarray(mask))  # static (a tuple), not a traced variable
        self.clamp = float(clamp)
        self.net = MLP(n_params + n_context, hidden, 2 * n_params, activation=activation, rngs=rngs)
        last = self.net.layers[-1]  # zero output layer: the step starts as the identity
        last.kernel[...] = jnp.zeros_like(last.kernel[...])
        last.bias[...] = jnp.zeros_like(last.bias[...])

    def bijector(self, context: Float[Array, "... n_context"]) -> distrax.Bijector:
        clamp = self.clamp

        def conditioner(masked_x):
            out = self.net(jnp.concatenate([masked_x, context], axis=-1))
            shift, log_scale = jnp.split(out, 2, axis=-1)
            return shift, soft_clamp(log_scale, clamp)

        return distrax.MaskedCoupling(
            np.asarray(self.mask, dtype=bool), conditioner,
            lambda params: distrax.ScalarAffine(shift=params[0], log_scale=params[1]))


class CouplingFlow(nnx.Module):
    """Conditional normalising flow of affine coupling blocks with a standard-normal base.

    Args:
        n_params: dimension of ``θ`` (>= 1).
        n_context: dimension of the condition (the summary of the data, >= 1).
        n_blocks: coupling blocks (each: [ActNorm], permutation, two coupling steps).
        hidden: hidden layer widths of every coupling MLP.
        clamp: bound of the soft-clamped log-scales (1.9 as in BayesFlow / FrEIA).
        actnorm: put an `ActNorm` in front of every block.
        permutation_key: a ``jax.random`` key of the fixed permutations (the same key, the same
            flow; None: ``jax.random.key(0)``). They are not weights: a saved flow keeps this key.
        activation: activation of the coupling MLPs.
        rngs: initial weights.
    """

    def __init__(self, n_params: int, n_context: int, *, n_blocks: int = 6, hidden: Sequence[int] = (128, 128),
                 clamp: float = 1.9, actnorm: bool = False, permutation_key: PRNGKeyArray | None = None,
                 activation: Callable[[Array], Array] = nnx.silu, rngs: nnx.Rngs) -> None:
        for name, value, low in (("n_params", n_params, 1), ("n_context", n_context, 1), ("n_blocks", n_blocks, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"CouplingFlow: {name} must be an integer >= {low}; got {value!r}")
        if not (np.isfinite(clamp) and clamp > 0):
            raise ValueError(f"CouplingFlow: clamp must be positive and finite; got {clamp!r}")
        self.n_params, self.n_context, self.n_blocks = int(n_params), int(n_context), int(n_blocks)
        permutation_key = jax.random.key(0) if permutation_key is None else permutation_key
        rng = np.random.default_rng(int(jax.random.randint(permutation_key, (), 0, 2**31 - 1)))
        n_first = self.n_params // 2
        couplings = []
        for _ in range(self.n_blocks):
            first = np.zeros(self.n_params, dtype=bool)
            first[rng.permutation(self.n_params)[:n_first]] = True  # x1: condition of the first step
            steps = [AffineCoupling(first, self.n_context, hidden, clamp, activation=activation, rngs=rngs)]
            if n_first > 0:  # second step transforms x1 given the new x2 (absent in 1-D)
                steps.append(AffineCoupling(~first, self.n_context, hidden, clamp, activation=activation, rngs=rngs))
            couplings.append(nnx.List(steps))
        self.couplings = nnx.List(couplings)
        self.actnorms = nnx.List([ActNorm(self.n_params) for _ in range(self.n_blocks)]) if actnorm else None

    # --- bijection ----------------------------------------------------------------------------
    def _check(self, theta, context, what: str):
        theta = jnp.asarray(theta, jnp.float32)
        context = jnp.asarray(context, jnp.float32)
        if theta.ndim < 1 or theta.shape[-1] != self.n_params:
            raise ValueError(f"CouplingFlow.{what}: the input must have shape (..., n_params={self.n_params}); "
                             f"got {theta.shape}")
        if context.ndim < 1 or context.shape[-1] != self.n_context:
            raise ValueError(f"CouplingFlow.{what}: context must have shape (..., n_context={self.n_context}); "
                             f"got {context.shape}")
        if context.shape[:-1] != theta.shape[:-1]:
            try:
                batch = jnp.broadcast_shapes(context.shape[:-1], theta.shape[:-1])
            except ValueError:
                raise ValueError(f"CouplingFlow.{what}: the batch axes of the input {theta.shape[:-1]} and of "
                                 f"context {context.shape[:-1]} do not broadcast") from None
            theta = jnp.broadcast_to(theta, (*batch, self.n_params))
            context = jnp.broadcast_to(context, (*batch, self.n_context))
        return theta, context

    def forward(self, theta: Float[ArrayLike, "... n_params"], context: Float[ArrayLike, "... n_context"]
                ) -> tuple[Float[Array, "... n_params"], Float[Array, "..."]]:
        """``z = f(θ; c)`` and ``log|det ∂z/∂θ|`` (batch axes of ``θ`` and ``c`` broadcast)."""
        x, context = self._check(theta, context, "forward")
        log_det = jnp.zeros(x.shape[:-1], jnp.float32)
        for b in range(self.n_blocks):
            if self.actnorms is not None:
                x, ld = self.actnorms[b].bijector().forward_and_log_det(x)
                log_det = log_det + ld
            for step in self.couplings[b]:
                x, ld = step.bijector(context).forward_and_log_det(x)
                log_det = log_det + ld
        return x, log_det

    def inverse(self, z: Float[ArrayLike, "... n_params"], context: Float[ArrayLike, "... n_context"]
                ) -> tuple[Float[Array, "... n_params"], Float[Array, "..."]]:
        """``θ = f⁻¹(z; c)`` and ``log|det ∂θ/∂z|``."""
        x, context = self._check(z, context, "inverse")
        log_det = jnp.zeros(x.shape[:-1], jnp.float32)
        for b in reversed(range(self.n_blocks)):
            for step in reversed(self.couplings[b]):
                x, ld = step.bijector(context).inverse_and_log_det(x)
                log_det = log_det + ld
            if self.actnorms is not None:
                x, ld = self.actnorms[b].bijector().inverse_and_log_det(x)
                log_det = log_det + ld
        return x, log_det

    def log_prob(self, theta: Float[ArrayLike, "... n_params"], context: Float[ArrayLike, "... n_context"]
                 ) -> Float[Array, "..."]:
        """``log p(θ | c) = log N(f(θ; c) | 0, I) + log|det ∂z/∂θ|`` (eq. 5)."""
        z, log_det = self.forward(theta, context)
        return -0.5 * jnp.sum(z**2, axis=-1) - 0.5 * self.n_params * _LOG_2PI + log_det

    def sample(self, key: PRNGKeyArray, context: Float[ArrayLike, "... n_context"], n: int
               ) -> Float[Array, "... n n_params"]:
        """``n`` draws ``θ = f⁻¹(z; c)``, ``z ~ N(0, I)``.

        Args:
            key: a ``jax.random`` key.
            context: ``(n_context,)`` -> draws ``(n, n_params)``; ``(n_obs, n_context)`` ->
                ``(n_obs, n, n_params)``, row ``i`` drawn with ``jax.random.split(key, n_obs)[i]``
                (so it equals ``sample(keys[i], context[i], n)``).
            n: draws per context.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"CouplingFlow.sample: n must be a positive integer; got {n!r}")
        context = jnp.asarray(context, jnp.float32)
        if context.ndim == 2:
            return jax.vmap(lambda k, c: self.sample(k, c, n))(jax.random.split(key, context.shape[0]), context)
        if context.ndim != 1 or context.shape[0] != self.n_context:
            raise ValueError(f"CouplingFlow.sample: context must have shape (n_context={self.n_context},) or "
                             f"(n_obs, n_context); got {context.shape}")
        z = jax.random.normal(key, (int(n), self.n_params), jnp.float32)
        return self.inverse(z, jnp.broadcast_to(context, (int(n), self.n_context)))[0]

    # --- ActNorm data initialisation ----------------------------------------------------------
    def initialize_actnorm(self, theta: Float[ArrayLike, "n n_params"], context: Float[ArrayLike, "n n_context"],
                           min_std: float = 1e-6) -> None:
        """Set every ActNorm from a batch (in place, Glow's data-dependent initialisation):
        block by block, the block's input gets zero mean and unit variance per dimension.
        A no-op without ActNorm."""
        if self.actnorms is None:
            return
        x, context = self._check(theta, context, "initialize_actnorm")
        for b in range(self.n_blocks):
            mean, std = jnp.mean(x, axis=0), jnp.std(x, axis=0)
            self.actnorms[b].bias[...] = mean
            self.actnorms[b].log_scale[...] = jnp.log(jnp.maximum(std, min_std))
            x = self.actnorms[b].bijector().forward(x)
            for step in self.couplings[b]:
                x = step.bijector(context).forward(x)
