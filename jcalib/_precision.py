"""The float64 check shared by the entry points of simulation-based methods."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array


def as_float64(value, where: str, what: str) -> Array:
    """``value`` as a JAX array, refused unless it is float64.

    Raises:
        ValueError: another dtype; the message names ``where`` and ``what`` and the fix.
    """
    arr = jnp.asarray(value)
    if arr.dtype != jnp.float64:
        raise ValueError(
            f"{where}: {what} must be float64 (got {arr.dtype}); simulations and their derivatives need double "
            "precision: call jax.config.update('jax_enable_x64', True) before creating arrays, and pass "
            "floating-point values"
        )
    return arr
