"""What every sampler in `jcalib.bayes` shares: evaluating the target log π(θ) with failed
solves mapped to a rejection, and turning the arguments of `sample` (a problem or a log density,
bounds, names, the start) into checked arrays. Private: the public entry points are
`jcalib.bayes.mala.sample` and `jcalib.bayes.hmc`."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jcalib.parameters import ParameterSpace
from jcalib.problem import CalibrationProblem


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
            f"sample: the log density or its gradient is not finite at theta0_internal (chain(s) "
            f"{np.flatnonzero(bad).tolist()}); start inside the support, e.g. at problem.initial_internal() or "
            "an estimate"
        )


def _problem_log_posterior(problem: CalibrationProblem, theta_internal):
    return problem.log_posterior(theta_internal)


def _resolve_target(target, to_physical, where: str):
    """(logdensity_fn, ParameterSpace or None) from a problem, a problem's bound method or a
    function (+ an optional ParameterSpace ``to_physical``)."""
    space = to_physical if isinstance(to_physical, ParameterSpace) else None
    if isinstance(target, CalibrationProblem):
        fn = jax.tree_util.Partial(_problem_log_posterior, target)
        return fn, space if space is not None else target.space
    if not callable(target):
        raise ValueError(
            f"{where}: expected a CalibrationProblem or a log density function; got {type(target).__name__}")
    owner = getattr(target, "__self__", None)
    if space is None and to_physical is None and isinstance(owner, CalibrationProblem):
        space = owner.space
    if to_physical is not None and space is None and not callable(to_physical):
        raise ValueError(
            f"{where}: to_physical must be a ParameterSpace or a function; got {type(to_physical).__name__}")
    return target, space


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


def _resolve_names(names, space, n: int) -> tuple[str, ...]:
    if names is None:
        return space.names if space is not None else tuple(f"x{i}" for i in range(n))
    names = (names,) if isinstance(names, str) else tuple(str(x) for x in names)
    if len(names) != n or len(set(names)) != n:
        raise ValueError(f"sample: names must be {n} distinct strings, one per parameter; got {names!r}")
    return names


def _physical_fn(to_physical, space):
    if to_physical is not None and not isinstance(to_physical, ParameterSpace):
        return jax.jit(lambda z: jax.vmap(jax.vmap(to_physical))(z))
    if space is not None:
        return space.to_physical
    return lambda z: z
