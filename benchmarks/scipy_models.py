"""NumPy right-hand sides of the built-in models for the scipy baselines (what a user
would write for solve_ivp), with the sampling used by each benchmark case."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

import jcalib


@dataclasses.dataclass(frozen=True)
class ScipyCase:
    model: Callable  # () -> jcalib model
    build: Callable  # (theta, model) -> (rhs(t, y), y0, observe(ys) -> (n_times, n_outputs))
    sample: Callable  # (model, key, n) -> thetas
    rtol: float
    atol: float
    n_full: int
    n_quick: int
    diff_floor: float = 1e-12  # relative differences use max(|y|, floor)
    notes: str = ""


def _four_substance_build(theta, model):
    kab, kac, kad = theta

    def rhs(t, y):
        a = y[0]
        r1, r2, r3 = kab * a * a, kac * a**3, kad * a**3
        return np.array([-2 * r1 - 3 * r2 - 3 * r3, r1, r2, r3])

    return rhs, np.array([10.0, 0.0, 0.0, 0.0]), lambda ys: ys


SCIPY_CASES = {
    "four_substance_reactions": ScipyCase(
        model=lambda: jcalib.models.get("four_substance_reactions"),
        build=_four_substance_build,
        sample=lambda model, key, n: model.parameters.sample(key, n, "lhs"),
        rtol=1e-8, atol=1e-10, n_full=10_000, n_quick=200,
        notes="Tsit5 + PID vmapped vs LSODA loop; LHS over the prior box",
    ),
}
