"""Start points: the one parser of ``theta0`` that every estimator and sampler uses.

One meaning everywhere: None is the nominal values; a ``{name: value}`` mapping sets the free
parameters it names, the others keep their nominal values; an array is ordered as
``problem.free_names``; all of them in ``coordinates`` (``"physical"``, the default, or
``"internal"``, the problem's unbounded-where-possible coordinates). A start must be finite and
inside the bounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

__all__ = ["COORDINATES", "check_free", "start_internal"]

COORDINATES = ("physical", "internal")


def start_internal(problem, theta0, *, coordinates: str = "physical", where: str, what: str = "theta0",
                   rows: str | None = None) -> Float[np.ndarray, "*n_rows n_free"]:
    """``theta0`` validated and in internal coordinates, float64 ``(n_free,)``, or ``(n_rows,
    n_free)`` when ``rows`` names a leading axis (e.g. ``"n_chains"``) and ``theta0`` has one.

    ``problem``: any jcalib problem (``free_names``, ``space``); ``where``/``what`` name the
    caller and the argument in messages.

    Raises:
        ValueError: unknown ``coordinates``; a problem without free parameters (`check_free`);
            a name that is not a free parameter; a shape other
            than ``(n_free,)`` (or ``(n_rows, n_free)``); floating values that are not float64;
            NaN or inf; a start outside the bounds (the message names the parameter, its value,
            the bounds and the coordinates).

    """
    if coordinates not in COORDINATES:
        raise ValueError(f"{where}: coordinates must be one of {COORDINATES}; got {coordinates!r}")
    check_free(problem, where)
    internal = coordinates == "internal"
    space, names = problem.space, problem.free_names
    nominal = np.asarray(space.nominal, dtype=np.float64)
    if internal:
        nominal = np.asarray(space.to_internal(jnp.asarray(nominal)), dtype=np.float64)
    if theta0 is None:
        theta = nominal
    elif isinstance(theta0, Mapping):
        theta = _from_mapping(theta0, names, nominal, where, what)
    else:
        theta = _from_array(theta0, len(names), names, where, what, rows)
    if not np.all(np.isfinite(theta)):
        raise ValueError(f"{where}: {what} must be finite; got {theta.tolist()} (ordered as {', '.join(names)})")
    lower, upper = (space.lower_internal, space.upper_internal) if internal else (space.lower, space.upper)
    for row, values in enumerate(np.atleast_2d(theta)):
        _check_inside(values, lower, upper, names, where, what if theta.ndim == 1 else f"{what}[{row}]",
                      coordinates)
    z = theta if internal else np.asarray(space.to_internal(jnp.asarray(theta)), dtype=np.float64)
    return np.clip(z, space.lower_internal, space.upper_internal)  # round-off of the maps at a bound


def check_free(problem, where: str) -> None:
    """Refuse a problem without free parameters (every parameter fixed, or a model without any,
    e.g. an SBML model or a PEtab problem with nothing to estimate): it can be simulated and its
    log-likelihood evaluated (at ``theta_internal`` of shape ``(0,)``), but not estimated."""
    if not problem.free_names:
        raise ValueError(f"{where}: the problem has no free parameter (nothing to estimate); simulate it or "
                         "evaluate its log-likelihood at an empty theta instead")


def _from_mapping(theta0: Mapping, names, nominal: np.ndarray, where: str, what: str) -> np.ndarray:
    unknown = [name for name in theta0 if name not in names]
    if unknown:
        raise ValueError(f"{where}: {what} names {unknown} that are not free parameters; free: "
                         f"{', '.join(repr(n) for n in names)} (the ones not named keep their nominal values)")
    theta = nominal.copy()
    for name, value in theta0.items():
        theta[names.index(name)] = float(value)
    return theta


def _from_array(theta0, n: int, names, where: str, what: str, rows: str | None) -> np.ndarray:
    dtype = getattr(theta0, "dtype", None)
    if dtype is not None and np.issubdtype(np.dtype(dtype), np.floating) and np.dtype(dtype) != np.float64:
        raise ValueError(f"{where}: {what} must be float64 (got {dtype}); simulations and their derivatives need "
                         "double precision: call jax.config.update('jax_enable_x64', True) before creating arrays")
    theta = np.array(theta0, dtype=np.float64)
    ndims = (1, 2) if rows else (1,)
    if theta.ndim not in ndims or theta.shape[-1] != n:
        shape = f"({n},) or ({rows}, {n})" if rows else f"(n_free,) = ({n},)"
        raise ValueError(f"{where}: {what} must have shape {shape}, ordered as {', '.join(names)}; got shape "
                         f"{theta.shape}")
    return theta


def _check_inside(theta, lower, upper, names, where: str, what: str, coordinates: str) -> None:
    outside = np.flatnonzero((theta < lower) | (theta > upper))
    if outside.size:
        i = int(outside[0])
        side = "below the lower" if theta[i] < lower[i] else "above the upper"
        raise ValueError(
            f"{where}: {what} is outside the bounds: {names[i]} = {theta[i]:g} is {side} bound of "
            f"[{lower[i]:g}, {upper[i]:g}] ({coordinates} coordinates); move it inside the bounds or widen them "
            "(model.parameters.replace(name, lower=..., upper=...))"
        )
