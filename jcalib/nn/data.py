"""Training data of jcalib's networks: the one input check of parameter samples and simulated
trajectories that `PELSVAE`, `AmortizedPosterior` and `InverseMapping` share."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Float

from jcalib.parameters import ParameterSpace

__all__ = ["check_training_data"]


def check_training_data(
    space: ParameterSpace,
    thetas: Float[ArrayLike, "n n_params"],
    xs: Float[ArrayLike, "n n_times n_outputs"],
    where: str,
    *,
    what: str = "xs",
    n_times: int | None = None,
    output_names: Sequence[str] | None = None,
    check_bounds: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 NumPy copies of ``(thetas, xs)`` after checking shapes, finiteness and the bounds.

    Args:
        space: the parameter space of ``thetas``.
        thetas: physical parameter samples ``(n, n_params)``.
        xs: the simulated (or measured) trajectories at those samples ``(n, n_times, n_outputs)``.
        where: the caller for the messages, e.g. ``"PELSVAE.fit"``.
        what: the caller's name of ``xs`` in the messages (``"trajectories"``, ``"signals"``).
        n_times: the number of times the network expects, or None for any.
        output_names: the outputs the network expects, or None for any number.
        check_bounds: refuse samples outside the space's bounds (the training box).

    Returns:
        ``(thetas, xs)`` as float64 NumPy arrays.

    Raises:
        ValueError: a shape that does not match; NaN or inf (failed simulations must be dropped
            first); with ``check_bounds``, samples outside the bounds.
    """
    thetas = np.asarray(thetas, dtype=np.float64)
    xs = np.asarray(xs, dtype=np.float64)
    space.check_shape(thetas, f"{where}: thetas", batched=True)
    n = thetas.shape[0]
    if xs.ndim != 3 or xs.shape[0] != n:
        raise ValueError(f"{where}: {what} must have shape (n, n_times, n_outputs) with n = {n} (the rows of "
                         f"thetas); got {xs.shape}")
    if n_times is not None and xs.shape[1] != n_times:
        raise ValueError(f"{where}: {what} have {xs.shape[1]} times, the model {n_times}")
    if output_names is not None and xs.shape[2] != len(output_names):
        raise ValueError(f"{where}: {what} have {xs.shape[2]} outputs, expected {len(output_names)} "
                         f"({', '.join(output_names)})")
    bad = np.flatnonzero(~np.all(np.isfinite(thetas), axis=1))
    if bad.size:
        raise ValueError(f"{where}: thetas has NaN or inf in rows {bad[:10].tolist()}")
    bad = np.flatnonzero(~np.all(np.isfinite(xs.reshape(n, -1)), axis=1))
    if bad.size:
        raise ValueError(f"{where}: {what} have NaN or inf in samples {bad[:10].tolist()} ({bad.size} of {n}); "
                         "drop failed simulations first (simulate_batch(..., throw=False, return_status=True) "
                         "marks them)")
    if check_bounds:
        outside = (thetas < space.lower) | (thetas > space.upper)
        if outside.any():
            row, col = np.argwhere(outside)[0]
            p = space.parameters[col]
            raise ValueError(f"{where}: {int(outside.any(axis=1).sum())} samples lie outside the parameter bounds, "
                             f"first: row {row}, {p.name} = {thetas[row, col]} not in [{p.lower}, {p.upper}]; "
                             "widen the bounds (space.replace(name, lower=..., upper=...))")
    return thetas, xs
