"""jcalib's tests. ``tests.shapecheck`` is imported here so that jaxtyping's import hook can name
``tests.shapecheck.check`` as its typechecker."""

from tests import shapecheck  # noqa: F401
