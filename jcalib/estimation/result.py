"""`EstimationResult`: what every classical estimator returns (one type for all methods)."""

from __future__ import annotations

import equinox as eqx
import numpy as np

from jcalib.jsonable import to_jsonable

__all__ = ["EstimationResult"]


class EstimationResult(eqx.Module):
    """The outcome of one estimation run, in physical units and by parameter name.

    Attributes:
        method: estimator name, e.g. ``"gauss-newton"``, ``"trf"``, ``"de"``.
        names: free parameter names, in the order of ``theta``.
        theta: estimate in physical units, ``(n_free,)``.
        theta_internal: the same in the problem's internal coordinates, ``(n_free,)``.
        loss: the problem's loss at the estimate (mean squared weighted residual; for the
            relative weighting this is R_X of Wulkow 2021, eq. 6).
        singular_values: of the residual Jacobian (internal coordinates) at the estimate,
            ``(n_free,)``; empty when the method does not compute it.
        condition_number: ``s_1 / s_n`` of that Jacobian (inf when singular).
        n_essential_directions: directions kept by the essential-direction rule.
        n_steps: iterations taken (generations for evolutionary methods).
        n_simulations: model solves for values (residuals, losses).
        n_jacobians: forward-mode Jacobian evaluations (counted separately).
        wall_time_s: wall-clock seconds including compilation.
        converged: whether the method's convergence test was met.
        reason: why it stopped, in words.
        history: per-iteration diagnostics (name -> list), e.g. loss, damping, condition.
        extra: method-specific numbers (JSON-able), e.g. the flat directions' mixtures.
    """

    method: str
    names: tuple[str, ...]
    theta: np.ndarray
    theta_internal: np.ndarray
    loss: float
    singular_values: np.ndarray
    condition_number: float
    n_essential_directions: int
    n_steps: int
    n_simulations: int
    n_jacobians: int
    wall_time_s: float
    converged: bool
    reason: str
    history: dict = eqx.field(default_factory=dict)
    extra: dict = eqx.field(default_factory=dict)

    @property
    def estimate(self) -> dict[str, float]:
        """``{name: physical value}``."""
        return {n: float(v) for n, v in zip(self.names, np.asarray(self.theta))}

    def to_dict(self) -> dict:
        """JSON-able summary (non-finite numbers become None)."""
        return to_jsonable({
            "method": self.method, "estimate": self.estimate, "theta_internal": self.theta_internal,
            "loss": self.loss, "singular_values": self.singular_values,
            "condition_number": self.condition_number,
            "n_essential_directions": self.n_essential_directions,
            "n_steps": self.n_steps, "n_simulations": self.n_simulations,
            "n_jacobians": self.n_jacobians, "wall_time_s": self.wall_time_s,
            "converged": self.converged, "reason": self.reason, "history": self.history,
            "extra": self.extra,
        })
