"""Experiments of one structure solved together: padded grids, stacked pytrees, one mapped call.

`jcalib.problems.JointProblem` (experiments with their own measurements) and
`jcalib.io.petab` (PEtab conditions) both group simulations whose arrays have the same shapes,
pad their time grids to the group's longest by repeating the last time, stack them along a
new leading axis and evaluate the group in one compiled call: one ``vmap``, or
``jax.lax.map`` in batches (stiff lanes of a ``vmap`` run in lockstep until the slowest
finishes, so on CPUs one after the other in a compiled loop can be faster).

Example:
    >>> import jax.numpy as jnp
    >>> padded(np.array([0.0, 1.0]), 4).tolist()
    [0.0, 1.0, 1.0, 1.0]
    >>> trees = [{"a": jnp.asarray(1.0), "b": jnp.zeros(2)}, {"a": jnp.asarray(2.0), "b": jnp.ones(2)}]
    >>> map_stacked(lambda x: x["a"] + x["b"].sum(), stack(trees), batch_size=None).tolist()
    [1.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

__all__ = ["map_stacked", "padded", "stack"]


def padded(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` (``(m, ...)``, ``m >= 1``) grown to ``n`` rows by repeating its last row."""
    a = np.asarray(a)
    return np.concatenate([a, np.repeat(a[-1:], n - a.shape[0], axis=0)])


def stack(trees: Sequence[PyTree]) -> PyTree:
    """Pytrees of one structure as one: array leaves stacked along a new leading axis, the
    other leaves (and static fields) those of the first tree."""
    arrays = [eqx.filter(t, eqx.is_array) for t in trees]
    static = eqx.filter(trees[0], eqx.is_array, inverse=True)
    return eqx.combine(jax.tree.map(lambda *leaves: jnp.stack(leaves), *arrays), static)


def map_stacked(fn: Callable[[PyTree], PyTree], stacked: PyTree, batch_size: int | None) -> PyTree:
    """``fn`` of each member of a `stack`: one ``vmap`` over all of them (``batch_size``
    None), or ``jax.lax.map`` in vmapped batches of ``batch_size`` (1: one after the other).
    Outputs are stacked along the leading axis."""
    if batch_size is None:
        return eqx.filter_vmap(fn)(stacked)
    dynamic, static = eqx.partition(stacked, eqx.is_array)
    sequential = batch_size == 1  # lax.map's own loop, without a vmap of one
    return jax.lax.map(lambda d: fn(eqx.combine(d, static)), dynamic, batch_size=None if sequential else batch_size)
