"""Warnings attributed to the user's code: `warn_user` walks up the stack past jcalib's own
frames, so a warning raised deep inside jcalib points at the line that called jcalib.

Imports nothing from jcalib, so every layer (`jcalib.probability`, `jcalib.bayes`, ...) can use it.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_user"]


def warn_user(message: str, category: type[Warning]) -> None:
    """`warnings.warn` attributed to the first caller outside jcalib (and equinox, whose
    module metaclass calls ``__init__`` of classes such as `CalibrationProblem`).

    Args:
        message: the warning's text.
        category: the warning class (e.g. `jcalib.probability.PriorTruncationWarning`).
    """
    import equinox

    packages = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                     for m in (sys.modules["jcalib"], equinox))
    level, frame = 2, sys._getframe(1)  # stacklevel 2: the caller of warn_user
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(packages):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
