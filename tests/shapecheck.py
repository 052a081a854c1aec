"""A typechecker for jaxtyping's import hook that checks array shapes and dtypes only.

``pytest --jaxtyping-packages=jcalib,tests.shapecheck.check`` decorates every function and
dataclass of jcalib with ``jaxtyped(typechecker=check)``: each argument (and return value) that
is an array (NumPy, JAX, or a tracer) is checked against the jaxtyping annotations in its hint
(``Float[Array, "n_times n_outputs"]``, also inside a union), with the dimension names shared
across one call. Everything else passes: jcalib accepts lists, tuples and numbers where it
annotates ``ArrayLike`` and refuses wrong types itself with messages that name the fix, so a
full runtime type check (beartype) would replace those messages by its own.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing

import jax
import numpy as np
from jaxtyping import AbstractArray, TypeCheckError


def _array_hints(hint) -> list[type]:
    """The jaxtyping array types in ``hint`` (itself, or the members of a union)."""
    if inspect.isclass(hint) and issubclass(hint, AbstractArray):
        return [hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [h for arg in typing.get_args(hint) for h in _array_hints(arg)]
    return []


def check(fn):
    """``fn`` wrapped to check its array arguments against their jaxtyping hints.

    jaxtyping calls the typechecker twice per function: on a copy of its parameters (return
    type ``Any``), checked before the call, and on the parameters plus the output, checked
    after it returned. Only the second is checked, so that a function refuses a malformed
    argument itself first, with its own message; a function without a return annotation is
    not checked."""
    signature = inspect.signature(fn)
    if signature.return_annotation is typing.Any:
        return fn
    hints = {name: _array_hints(p.annotation) for name, p in signature.parameters.items()}
    hints = {name: h for name, h in hints.items() if h}
    returned = _array_hints(signature.return_annotation)
    if not hints and not returned:
        return fn

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            _check(fn, name, value, hints.get(name))
        out = fn(*args, **kwargs)  # jaxtyping's stand-in: returns the real function's output
        _check(fn, "the return value", out, returned)
        return out

    return checked


def _check(fn, what: str, value, hints) -> None:
    if hints and isinstance(value, (np.ndarray, np.generic, jax.Array)) \
            and not any(isinstance(value, h) for h in hints):
        raise TypeCheckError(f"{fn.__qualname__}: {what} has shape {np.shape(value)} and dtype "
                             f"{getattr(value, 'dtype', type(value))}, not {hints}")
