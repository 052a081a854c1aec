"""Failure classification shared by the estimators: failed solve, overflow, non-finite Jacobian.

An estimator must never report a failure as success. Three failures look alike from the
outside (a non-finite loss) but need different fixes, so every estimator names them apart:

- **failed solve**: the simulation fails (NaN outputs); the message gives the solve's
  `jcalib.model.SolveStatus` (``MAX_STEPS``, ``NONFINITE``, ``SOLVER_FAILED``,
  ``INVALID_INPUT``, ``OUT_OF_BOUNDS``), so a user is sent to the solver budget, the
  start or the bounds as appropriate;
- **overflow**: the simulation succeeds, but the residuals or the sum of their squares
  exceed float64 (e.g. absolute weighting with a datum of 1e300): the fix is to rescale the
  data or weigh the residuals differently, not to touch the solver;
- **non-finite Jacobian**: the simulation succeeds but its derivatives are NaN or inf (a
  failed sensitivity solve, or a point where the model is not differentiable); a NaN
  Jacobian is never read as "flat".

`FailedStartError` (a ``ValueError``) is raised when an estimator cannot even start;
`honest_outcome` turns a ``converged=True`` with a non-finite loss or estimate into
``converged=False`` with the reason said.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jcalib.model import SolveStatus

__all__ = ["FailedStartError", "describe_status", "honest_outcome", "jacobian_failure",
           "point_failure", "solve_status"]


class FailedStartError(ValueError):
    """An estimator cannot start: the solve fails, the loss overflows or the Jacobian is not
    finite at the start. A ``ValueError``; the message names which and what to do."""


def solve_status(problem, theta_internal) -> int:
    """The `SolveStatus` code of ``problem``'s simulation at ``theta_internal``."""
    return problem.solve_status(jnp.asarray(theta_internal, dtype=jnp.float64))


def describe_status(code: int) -> str:
    """``"MAX_STEPS: maximum number of solver steps reached"`` (name and text of a code)."""
    try:
        return f"{SolveStatus(int(code)).name}: {SolveStatus.describe(int(code))}"
    except (ValueError, KeyError):
        return f"status {int(code)}"


def _point(problem, z) -> dict:
    try:
        return problem.estimate_dict(np.asarray(z, dtype=np.float64))
    except Exception:  # a point that cannot even be mapped: show the internal values
        return dict(zip(problem.free_names, np.asarray(z, dtype=np.float64).tolist()))


def _overflow_fix(problem) -> str:
    if getattr(problem, "weighting", None) == "absolute":
        return ("rescale the data (other units) or use weighting='relative' or 'sigma'")
    return "check the data and sigma for huge or tiny values, or rescale the data"


def point_failure(problem, theta_internal, residuals, where: str, what: str = "theta0",
                  fix: str = "choose another start") -> str | None:
    """Why the residuals at a point cannot start an estimation, or None if they can.

    Args:
        problem: the `CalibrationProblem`.
        theta_internal: the point (internal coordinates).
        residuals: ``problem.residuals`` there.
        where: the estimator's name, the message's prefix.
        what: the point's name in the message.
        fix: what to do after a failed solve.

    Returns:
        None when the loss there is finite; otherwise a one-line message: a failed solve
        (with its `SolveStatus`) or an overflow of the loss (with the largest residual).
    """
    r = np.asarray(residuals, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        loss = float(np.mean(np.square(r))) if r.size else 0.0
    if math.isfinite(loss):
        return None
    point = _point(problem, theta_internal)
    if np.any(np.isnan(r)):
        code = solve_status(problem, theta_internal)
        if code != SolveStatus.SUCCESS:
            budget = (" or raise the solver budget (model.with_solver(max_steps=...))"
                      if code == SolveStatus.MAX_STEPS else "")
            return (f"{where}: the simulation at {what} = {point} failed ({describe_status(code)}); "
                    f"{fix}{budget}")
        return (f"{where}: the residuals at {what} = {point} are NaN although the simulation "
                "succeeded (NaN in the model's observe or in the data); check the model's outputs "
                "and the data")
    biggest = float(np.max(np.abs(r))) if r.size else math.nan
    return (f"{where}: the loss overflows (inf) at {what} = {point} although the simulation "
            f"succeeded: residuals up to {biggest:.3g}; {_overflow_fix(problem)}")


def jacobian_failure(problem, theta_internal, jacobian, where: str, what: str = "theta0",
                     fix: str = "choose another start") -> str | None:
    """Why a Jacobian cannot be used (NaN or inf entries), or None if it is finite.

    A NaN Jacobian is a failure, never a flat direction: the message says whether the
    simulation itself failed there (with its status) or only its derivatives.
    """
    jac = np.asarray(jacobian, dtype=np.float64)
    if np.all(np.isfinite(jac)):
        return None
    point = _point(problem, theta_internal)
    code = solve_status(problem, theta_internal)
    n_bad = int(np.sum(~np.isfinite(jac)))
    if code != SolveStatus.SUCCESS:
        return (f"{where}: the Jacobian at {what} = {point} is not finite because the simulation "
                f"failed there ({describe_status(code)}); {fix}")
    return (f"{where}: the Jacobian at {what} = {point} has {n_bad} NaN or inf entries although "
            "the simulation succeeded (the model is not differentiable there or its sensitivity "
            f"solve failed); {fix}")


def honest_outcome(converged: bool, reason: str, loss: float, theta) -> tuple[bool, str]:
    """``(converged, reason)``, with ``converged`` False when the loss or the estimate is not
    finite: no estimator reports success with a non-finite answer."""
    theta = np.asarray(theta, dtype=np.float64)
    problems = []
    if not math.isfinite(float(loss)):
        problems.append(f"the loss is {float(loss)}")
    if not np.all(np.isfinite(theta)):
        problems.append("the estimate is not finite")
    if not problems:
        return bool(converged), reason
    return False, f"{reason}; failed: {' and '.join(problems)}"
