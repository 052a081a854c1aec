"""Checks of the built-in model factories' keyword arguments (physical constants, tolerances)."""

from __future__ import annotations

import numpy as np


def check_number(factory: str, name: str, value, lower: float, upper: float = np.inf) -> float:
    """``float(value)``, refusing a non-number or a value outside ``[lower, upper]``.

    Raises:
        ValueError: naming the factory, the argument, the allowed range and the value.
    """
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{factory}: {name} must be a number; got {value!r}") from None
    if not (np.isfinite(value) and lower <= value <= upper):
        raise ValueError(f"{factory}: {name} must lie in [{lower}, {upper}]; got {value}")
    return value
