"""`tests.shapecheck.check`, make test's runtime check of jaxtyping annotations: it refuses what
an annotation does not allow and lets a function refuse bad input itself first."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, ArrayLike, Float, TypeCheckError, jaxtyped

from tests.shapecheck import check


@jaxtyped(typechecker=check)
def _inner(x: Float[Array, " n"], y: Float[ArrayLike, " n"] | None = None) -> Float[Array, ""]:
    if x.ndim != 1:
        raise ValueError("x must be a vector")
    return jnp.sum(x) if y is None else jnp.sum(x) + jnp.sum(jnp.asarray(y))


@jaxtyped(typechecker=check)
def _wrong_output(x: Float[Array, " n"]) -> Float[Array, " n"]:
    return jnp.concatenate([x, x])


def test_matching_shapes_and_other_types_pass():
    assert float(_inner(jnp.ones(3))) == 3.0
    assert float(_inner(jnp.ones(3), np.ones(3))) == 6.0
    assert float(_inner(jnp.ones(3), [1.0, 2.0])) == 6.0  # not an array: not checked


def test_a_dimension_that_disagrees_is_refused():
    with pytest.raises(TypeCheckError):
        _inner(jnp.ones(3), np.ones(4))


def test_a_wrong_output_shape_is_refused():
    with pytest.raises(TypeCheckError):
        _wrong_output(jnp.ones(2))


def test_a_function_refuses_bad_input_itself_first():
    with pytest.raises(ValueError, match="x must be a vector"):
        _inner(jnp.ones((2, 2)))
