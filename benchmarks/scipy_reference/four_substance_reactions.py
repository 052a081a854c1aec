"""scipy baseline of ``four_substance_reactions``: the NumPy right-hand side a user would write
for ``solve_ivp`` (LSODA), with Latin-hypercube samples over the prior box."""

from __future__ import annotations

import numpy as np

import jcalib

from .case import ScipyCase


def _build(theta, model):
    kab, kac, kad = theta

    def rhs(t, y):
        a = y[0]
        r1, r2, r3 = kab * a * a, kac * a**3, kad * a**3
        return np.array([-2 * r1 - 3 * r2 - 3 * r3, r1, r2, r3])

    return rhs, np.array([10.0, 0.0, 0.0, 0.0]), lambda ys: ys


CASES = {
    "four_substance_reactions": ScipyCase(
        model=lambda: jcalib.models.get("four_substance_reactions"),
        build=_build,
        sample=lambda model, key, n: model.parameters.sample(key, n, "lhs"),
        rtol=1e-8, atol=1e-10, n_full=10_000, n_quick=200,
        notes="Tsit5 + PID vmapped vs LSODA loop; LHS over the prior box",
    ),
}
