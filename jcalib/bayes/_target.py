"""What every sampler in `jcalib.bayes` shares: evaluating the target log π(θ) with failed
solves mapped to a rejection, and turning the arguments of `sample` (a problem and its start)
into checked arrays. Private: the public entry points are
`jcalib.bayes.mala.sample` and the algorithm builders."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jcalib.parameters import ParameterSpace
from jcalib.problems import AbstractProblem
from jcalib.starts import start_internal


def _evaluate(logdensity_fn: Callable, position: Float[Array, " n"]) -> tuple[Array, Array, Array]:
    """log π and ∇log π with invalid values (NaN, ±inf value, non-finite gradient) replaced:
    ``(-inf, 0, False)``; otherwise ``(value, grad, True)``."""
    value, grad = jax.value_and_grad(logdensity_fn)(position)
    valid = jnp.isfinite(value) & jnp.all(jnp.isfinite(grad))
    return (jnp.where(valid, value, -jnp.inf), jnp.where(valid, grad, jnp.zeros_like(grad)), valid)


@eqx.filter_jit
def _evaluate_batch(logdensity_fn, positions):
    return jax.vmap(lambda x: _evaluate(logdensity_fn, x))(positions)


def _check_start(valid) -> None:
    bad = ~np.asarray(valid)
    if np.any(bad):
        raise ValueError(
            f"sample: the log density or its gradient is not finite at theta0 (chain(s) "
            f"{np.flatnonzero(bad).tolist()}); start inside the support, e.g. at the nominal values "
            "(theta0=None) or an estimate"
        )


def _problem_log_posterior(problem: AbstractProblem, theta_internal):
    return problem.log_posterior(theta_internal)


def problem_logdensity(problem: AbstractProblem):
    """``problem.log_posterior`` as a pytree callable (a new problem of the same structure
    does not recompile the samplers)."""
    return jax.tree_util.Partial(_problem_log_posterior, problem)


def problem_starts(problem: AbstractProblem, theta0, coordinates: str, n_chains: int | None,
                   where: str) -> Array:
    """The starts in internal coordinates, float64 ``(n_chains, n_free)`` (``(1, n_free)`` or
    as given when ``n_chains`` is None), from ``theta0`` as `jcalib.starts.start_internal` reads
    it (one start for all chains, or one per chain: ``(n_chains, n_free)``)."""
    z = np.atleast_2d(start_internal(problem, theta0, coordinates=coordinates, where=where, rows="n_chains"))
    if n_chains is not None:
        if z.shape[0] == 1:
            z = np.broadcast_to(z, (int(n_chains), problem.n_free))
        elif z.shape[0] != n_chains:
            raise ValueError(f"{where}: theta0 has {z.shape[0]} rows but n_chains={n_chains}; pass one start "
                             "or one per chain")
    return jnp.asarray(z)


def _resolve_bounds(bounds, space, where: str) -> tuple[np.ndarray, np.ndarray]:
    if bounds is None:
        bounds = space
    if bounds is None:
        raise ValueError(
            f"{where}: a log density function needs bounds=(lower, upper) in internal coordinates "
            "(or a ParameterSpace) for the prescaling draws and ranges"
        )
    if isinstance(bounds, ParameterSpace):
        lower, upper = bounds.lower_internal, bounds.upper_internal
    else:
        try:
            lower, upper = (np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in bounds)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: bounds must be (lower, upper) or a ParameterSpace; got {bounds!r}") from None
    if lower.ndim != 1 or lower.shape != upper.shape:
        raise ValueError(f"{where}: bounds must be two 1-D arrays of one shape; got {lower.shape} and {upper.shape}")
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
        raise ValueError(
            f"{where}: bounds need finite lower < upper; got lower={lower.tolist()}, upper={upper.tolist()}")
    return lower, upper


def _positive(value, n: int, where: str, label: str) -> np.ndarray:
    """A positive finite scalar or ``(n,)`` array as a float64 ``(n,)`` array."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {label} must be positive numbers; got {value!r}") from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{where}: {label} must be a scalar or have shape ({n},); got shape {arr.shape}")
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{where}: {label} must be positive and finite; got {arr.tolist()}")
    return arr
