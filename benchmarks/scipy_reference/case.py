"""`ScipyCase`: what the simulate_batch benchmark needs to run one model with scipy."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from scipy.integrate import solve_ivp


@dataclasses.dataclass(frozen=True)
class ScipyCase:
    """One benchmark case: a jcalib model, how to sample it and its scipy baseline.

    The baseline is either ``build`` (a NumPy right-hand side solved by ``solve_ivp`` with
    ``method`` over [t0, t1], evaluated at the observation times) or, for models whose
    inputs jump, a full ``solve`` function (e.g. piecewise integration between the jumps).
    """

    model: Callable  # () -> jcalib model
    sample: Callable  # (model, key, n) -> thetas
    rtol: float
    atol: float
    n_full: int
    n_quick: int
    build: Callable | None = None  # (theta, model) -> (rhs(t, y), y0, observe(ys) -> outputs)
    diff_floor: float = 1e-12  # relative differences use max(|y|, floor)
    notes: str = ""
    method: str = "LSODA"
    solve: Callable | None = None  # (theta, model, case) -> (n_times, n_outputs); overrides build

    def run(self, theta, model) -> np.ndarray | None:
        """Outputs of one scipy solve at the model's observation times, None if it failed."""
        if self.solve is not None:
            return self.solve(theta, model, self)
        rhs, y0, observe = self.build(theta, model)
        sol = solve_ivp(rhs, (float(model.experiment.t0), float(model.experiment.t1)), y0,
                        method=self.method, t_eval=np.asarray(model.ts), rtol=self.rtol,
                        atol=self.atol)
        return observe(sol.y.T) if sol.success else None

    def run_batch(self, thetas, model) -> tuple[np.ndarray, int]:
        """`run` on every row of ``thetas`` in a Python loop (what a scipy user would write).

        Returns:
            ``(outputs, n_failures)``: outputs ``(n, n_times, n_outputs)``, NaN where a solve
            failed, and the number of failed solves.
        """
        out = np.full((len(thetas), model.experiment.n_times, model.n_outputs), np.nan)
        failures = 0
        for i, theta in enumerate(thetas):
            values = self.run(theta, model)
            if values is None:
                failures += 1
            else:
                out[i] = values
        return out, failures
