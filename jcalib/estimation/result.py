"""`EstimationResult`: what every classical estimator returns (one type for all methods)."""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np

from jcalib.jsonable import to_jsonable

__all__ = ["INTERRUPTED", "EstimationResult", "MultistartResult", "multistart_result"]

INTERRUPTED = "interrupted"
"""How the ``reason`` of a start that a Ctrl-C stopped before it finished begins."""


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
    def interrupted(self) -> bool:
        """A Ctrl-C stopped the method before it finished (its ``reason`` begins with `INTERRUPTED`)."""
        return self.reason.startswith(INTERRUPTED)

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


class MultistartResult(eqx.Module):
    """Local estimates from many starts: all of them, the best, and the sorted losses.

    Attributes:
        method: the local method, ``"lm"``, ``"fides"`` or ``"trf"``.
        start_distribution: how the starts were drawn (``"given"`` when passed in).
        names: free parameter names.
        starts: the starting points in physical units, ``(n_starts, n_free)``.
        results: one `EstimationResult` per start, in the order of ``starts``.
        best_index: index of the smallest final loss (failed starts count as ``inf``).
        sorted_losses: final losses in ascending order (the waterfall plot of
            `jcalib.plotting.plot_multistart_waterfall`), ``(n_starts,)``.
        n_simulations: simulations of all starts together.
        n_jacobians: Jacobian evaluations of all starts together.
        wall_time_s: wall-clock seconds of the whole batch, compilation included.
        extra: method-specific numbers (JSON-able); always ``status`` (``"completed"``, or
            ``"interrupted"``: a Ctrl-C stopped the batch; the starts that had not finished say
            so in their ``reason``, ``converged=False``, and ``n_finished_starts`` counts the
            others) and ``n_failed_starts`` (starts that ended with a non-finite loss), and
            ``failure`` (in words) when every start failed, in which case ``best.converged``
            is False.
    """

    method: str
    start_distribution: str
    names: tuple[str, ...]
    starts: np.ndarray
    results: tuple[EstimationResult, ...]
    best_index: int
    sorted_losses: np.ndarray
    n_simulations: int
    n_jacobians: int
    wall_time_s: float
    extra: dict = eqx.field(default_factory=dict)

    @property
    def best(self) -> EstimationResult:
        """The result with the smallest final loss."""
        return self.results[self.best_index]

    @property
    def losses(self) -> np.ndarray:
        """Final loss per start, in the order of ``starts`` (``inf`` for failed starts)."""
        return np.array([r.loss for r in self.results])

    @property
    def n_starts(self) -> int:
        return len(self.results)

    def to_dict(self, include_results: bool = True) -> dict:
        """JSON-able summary; ``include_results=False`` leaves out the per-start results."""
        out = {
            "method": self.method, "start_distribution": self.start_distribution,
            "n_starts": self.n_starts, "best_index": self.best_index, "best": self.best.to_dict(),
            "sorted_losses": self.sorted_losses, "n_simulations": self.n_simulations,
            "n_jacobians": self.n_jacobians, "wall_time_s": self.wall_time_s,
            "starts": self.starts, "extra": self.extra,
        }
        if include_results:
            out["results"] = [r.to_dict() for r in self.results]
        return to_jsonable(out)


def multistart_result(method: str, start_distribution: str, problem, starts, results, wall: float,
                      extra: dict | None = None, status: str = "completed") -> MultistartResult:
    """The `MultistartResult` of local ``results`` from ``starts`` (physical); the best is the
    smallest finite loss, ``extra`` gains ``status``, ``n_failed_starts`` (and ``failure`` when
    all failed; ``n_finished_starts`` when interrupted: the results whose reason does not begin
    with ``INTERRUPTED``)."""
    losses = np.array([r.loss if math.isfinite(r.loss) else math.inf for r in results])
    unfinished = np.array([r.interrupted for r in results])
    n_failed = int(np.sum(~np.isfinite(losses) & ~unfinished))
    extra = {**({} if extra is None else extra), "status": status, "n_failed_starts": n_failed}
    if status == "interrupted":
        extra["n_finished_starts"] = int(np.sum(~unfinished))
    elif n_failed == len(results):
        extra["failure"] = f"every start failed; first: {results[0].reason}"
    return MultistartResult(
        method=method, start_distribution=start_distribution, names=problem.free_names,
        starts=np.asarray(starts), results=tuple(results), best_index=int(np.argmin(losses)),
        sorted_losses=np.sort(losses), n_simulations=sum(r.n_simulations for r in results),
        n_jacobians=sum(r.n_jacobians for r in results), wall_time_s=wall, extra=extra,
    )
