"""`to_jsonable`: results to strict JSON (nested lists; NaN and inf become None)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_jsonable"]


def to_jsonable(value):
    """Dicts, sequences, arrays and scalars as JSON-able Python objects.

    Arrays become nested lists; non-finite floats become None (JSON has no NaN/inf);
    NumPy integers and booleans become Python ones; strings and None pass through.
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        return to_jsonable(np.asarray(value).tolist())
    return value
