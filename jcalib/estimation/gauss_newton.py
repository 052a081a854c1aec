"""Damped Gauss-Newton with essential directions (Wulkow et al. 2021, §2.2.1).

The residual vector E(θ) of a `CalibrationProblem` (relative residuals give
R_X = ‖E‖²/(mT), eq. 6) is linearised at each iterate, J = dE/dθ = U S Vᵀ (eq. 17), and the
Gauss-Newton step Δθ = -J⁺E (eq. 16) is taken **only along the essential directions**: the
right singular vectors v_1..v_k whose singular values pass the flat-direction rule
(the "reduced-direction approach", eq. 22-23),

    Δθ = - Σ_{l ≤ k} v_l (u_lᵀ E) / s_l.

Directions with s_1/s_l > 100 are flat unless a clearer gap exists between the singular
values (`jcalib.sensitivity.identifiability.n_essential_directions`, thresholds settable).
Along flat directions the iterate does not move: the data barely constrain them, and a
Gauss-Newton step there would be huge and dominated by noise.

Damping (eq. 20): θ_{k+1} = θ_k + λ_k Δθ_k with a monotonicity test: starting from
λ = min(1, 2 λ_{k-1}) (λ = 1 at the first iteration), λ is halved until the loss decreases
strictly; if it has not decreased by ``min_damping`` the iteration stops.

Coordinates and bounds: everything runs in the problem's *internal* coordinates (log for
log-scale parameters, so step sizes there are relative changes of the physical value;
identity for linear ones). Bounds are respected by **projection**: every trial point is
clipped onto the internal box [lower_internal, upper_internal], and a parameter that sits on
a bound while the descent direction -Jᵀ E points outwards is held for that iteration (its
column is dropped from the step's SVD: a one-iteration active set), so the remaining
parameters still get a full Gauss-Newton step. Physical values reported are additionally
clipped to [lower, upper] against the round-off of exp(log(·)).

Stopping: the accepted step ‖λΔθ‖_∞ <= ``xtol`` (internal units); the relative loss decrease
<= ``ftol``; no decrease down to ``min_damping`` (converged if the full step is already
below sqrt(xtol), i.e. the iterate is at the minimum to the accuracy of the simulated
residuals, otherwise "stalled"); or ``max_steps``.

The algorithm is a `jcalib.algorithm.Algorithm`: ``init(theta_internal) -> state`` and
``step(state) -> (state, info)`` (`gauss_newton_algorithm`); ``state.stopped`` says when a
stopping rule holds. The step is a pure function of its state, but it runs on the host:
each trial point of the damping loop is one call of the problem's jitted ``residuals`` and
each new iterate one call of its jitted ``jacobian``, so the compiled solves are shared
with every other user of the problem (covariance, profiles, plots) and the damping loop
simulates only the trial points it needs. `gauss_newton` drives it with
``jcalib.algorithm.run(None, algorithm, state, max_steps, compiled=False, stop=...)``
(optionally with a progress bar) and returns an `EstimationResult`.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> from jcalib.problems import CalibrationProblem
    >>> model = jcalib.models.get("four_substance_reactions")
    >>> data = jcalib.synthetic_measurements(jax.random.key(0), model,
    ...                                      model.parameters.nominal, sigma=0.01)
    >>> result = gauss_newton(CalibrationProblem(model, data), [1e-5, 1e-5, 1e-5])
    >>> result.n_essential_directions, result.converged
    (3, True)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import NamedTuple

import jax
import numpy as np
from jaxtyping import ArrayLike, Float

from jcalib.algorithm import Algorithm, run
from jcalib.estimation.failures import FailedStartError, honest_outcome, jacobian_failure, point_failure
from jcalib.estimation.result import INTERRUPTED, EstimationResult
from jcalib.problems import AbstractProblem
from jcalib.sensitivity.identifiability import (
    FLAT_RATIO,
    GAP_RATIO,
    jacobian_analysis,
    n_essential_directions,
)
from jcalib.starts import start_internal

__all__ = [
    "GaussNewtonInfo",
    "GaussNewtonState",
    "gauss_newton",
    "gauss_newton_algorithm",
]

MIN_DAMPING = 1e-6
"""Smallest damping factor tried: 20 halvings of a full step. A Gauss-Newton direction is a
descent direction, so failing to decrease the loss at λ ~ 1e-6 means the linearisation is
useless there (or the loss is at its round-off floor)."""

DAMPING_GROWTH = 2.0
"""The next iteration starts at min(1, 2 λ): one halving is undone per successful step, so
the method returns to full (quadratically convergent) steps once the damping is no longer
needed."""


class GaussNewtonState(NamedTuple):
    """Iterate of `gauss_newton_algorithm` (NumPy float64 arrays).

    Attributes:
        theta_internal: current point, ``(n_free,)`` internal coordinates.
        residuals: E at that point, ``(n_observed,)``.
        loss: mean squared residual there (R_X for relative weighting).
        jacobian: dE/dθ_internal there, ``(n_observed, n_free)``.
        damping: damping factor of the last step (1 before the first).
        n_simulations: residual evaluations so far.
        n_jacobians: Jacobian evaluations so far.
        stopped: a stopping rule held after the last step (see `gauss_newton_algorithm`).
    """

    theta_internal: np.ndarray
    residuals: np.ndarray
    loss: float
    jacobian: np.ndarray
    damping: float
    n_simulations: int
    n_jacobians: int
    stopped: bool = False


class GaussNewtonInfo(NamedTuple):
    """Diagnostics of one iteration.

    Attributes:
        loss: loss after the iteration (unchanged when no step was accepted).
        loss_before: loss at the start of the iteration.
        accepted: whether a damped step decreased the loss.
        damping: damping factor λ of the accepted step (or the last one tried).
        n_trials: trial points simulated by the damping loop.
        step_norm: ‖λΔθ‖_∞ of the accepted step in internal units (0 if rejected).
        full_step_norm: ‖Δθ‖_∞ of the undamped reduced Gauss-Newton step.
        singular_values: of J at the start of the iteration (all free columns).
        condition_number: s_1/s_d of that J (inf if singular).
        n_essential: essential directions of that J.
        n_step_directions: directions the step actually used (fewer when parameters are
            held on a bound).
        held: per free parameter, whether it was held on a bound in this iteration.
        jacobian_finite: False if J contained NaN or inf (then no step is tried).
    """

    loss: float
    loss_before: float
    accepted: bool
    damping: float
    n_trials: int
    step_norm: float
    full_step_norm: float
    singular_values: np.ndarray
    condition_number: float
    n_essential: int
    n_step_directions: int
    held: np.ndarray
    jacobian_finite: bool


def gauss_newton_algorithm(
    problem: AbstractProblem,
    *,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
    n_essential: int | None = None,
    min_damping: float = MIN_DAMPING,
    damping_growth: float = DAMPING_GROWTH,
    xtol: float = 0.0,
    ftol: float = 0.0,
) -> Algorithm:
    """The damped, essential-direction Gauss-Newton iteration on ``problem`` (module doc).

    Args:
        problem: what to fit; its internal coordinates are the iteration's coordinates.
        flat_ratio: singular directions with s_1/s_k > ``flat_ratio`` are flat (default 100,
            Wulkow 2021 §2.2.1).
        gap_ratio: a neighbour ratio s_k/s_{k+1} of at least this counts as a clearer gap
            (default 10); None uses the ratio rule alone.
        n_essential: fix the number of essential directions instead of the rule (capped at
            the number of parameters not held on a bound); ``n_essential = n_free`` gives
            the plain (pseudo-inverse) Gauss-Newton method.
        min_damping: smallest damping factor tried (in (0, 1]).
        damping_growth: the next iteration starts at ``min(1, damping_growth * λ)`` (>= 1).
        xtol: damped steps with ‖λΔθ‖_∞ <= ``xtol`` are not tried (they cannot make
            progress beyond the residuals' round-off; saves simulations at convergence),
            and an accepted step that small stops the iteration.
        ftol: a relative loss decrease of at most ``ftol`` stops the iteration.

    Returns:
        A deterministic `jcalib.algorithm.Algorithm`: ``init(theta_internal) ->
        GaussNewtonState`` (NumPy arrays) and ``step(state) -> (GaussNewtonState,
        GaussNewtonInfo)``. ``state.stopped`` turns True when a stopping rule of the module
        doc holds (no step direction, a step below ``xtol``, no loss decrease, a loss
        decrease below ``ftol``, a non-finite Jacobian); drive it with
        ``run(None, algorithm, algorithm.init(z0), n, compiled=False, stop=lambda s:
        s.stopped)``.

    Raises:
        ValueError: invalid thresholds, ``n_essential`` or damping settings.

    Long for its documented options; the body is 72 lines.
    """
    _check_options(problem, flat_ratio, gap_ratio, n_essential, min_damping, damping_growth)
    names = problem.free_names
    lower = np.asarray(problem.space.lower_internal, dtype=np.float64)
    upper = np.asarray(problem.space.upper_internal, dtype=np.float64)

    def residuals(z):
        return np.asarray(problem.residuals(np.asarray(z, dtype=np.float64)))

    def jacobian(z):
        return np.asarray(problem.jacobian(np.asarray(z, dtype=np.float64)))

    def init(theta_internal) -> GaussNewtonState:
        z = np.asarray(theta_internal, dtype=np.float64).copy()
        r = residuals(z)
        return GaussNewtonState(theta_internal=z, residuals=r, loss=_mean_square(r),
                                jacobian=jacobian(z), damping=1.0, n_simulations=1,
                                n_jacobians=1)

    def step(state: GaussNewtonState) -> tuple[GaussNewtonState, GaussNewtonInfo]:
        state, info = advance(_on_host(state))
        return state._replace(stopped=_outcome(info, xtol, ftol) is not None), info

    def advance(state: GaussNewtonState) -> tuple[GaussNewtonState, GaussNewtonInfo]:
        z, r, jac = state.theta_internal, state.residuals, state.jacobian
        d = z.size
        finite = bool(np.all(np.isfinite(jac)))
        if not finite or not np.any(jac):
            info = GaussNewtonInfo(
                loss=state.loss, loss_before=state.loss, accepted=False, damping=state.damping,
                n_trials=0, step_norm=0.0, full_step_norm=0.0,
                singular_values=np.full(d, np.nan), condition_number=math.inf, n_essential=0,
                n_step_directions=0, held=np.zeros(d, bool), jacobian_finite=finite)
            return state, info
        analysis = jacobian_analysis(jac, names, flat_ratio=flat_ratio, gap_ratio=gap_ratio)
        n_ess = analysis.n_essential if n_essential is None else min(n_essential, d)

        # parameters on a bound whose descent direction points outwards are held
        gradient = jac.T @ r
        on_lower, on_upper = _on_bounds(z, lower, upper)
        held = (on_lower & (gradient > 0)) | (on_upper & (gradient < 0))
        delta, n_dir = _reduced_step(jac[:, ~held], r, n_essential, flat_ratio, gap_ratio)
        full_delta = np.zeros(d)
        full_delta[~held] = delta

        lam = min(1.0, damping_growth * state.damping)
        n_trials, accepted = 0, False
        full_norm = float(np.max(np.abs(full_delta)))
        while lam >= min_damping and lam * full_norm > xtol and n_dir > 0:
            z_try = np.clip(z + lam * full_delta, lower, upper)
            r_try = residuals(z_try)
            n_trials += 1
            loss_try = _mean_square(r_try)
            if math.isfinite(loss_try) and loss_try < state.loss:
                accepted = True
                break
            lam *= 0.5
        common = dict(loss_before=state.loss, n_trials=n_trials, full_step_norm=full_norm,
                      singular_values=np.asarray(analysis.singular_values),
                      condition_number=float(analysis.condition_number), n_essential=n_ess,
                      n_step_directions=n_dir, held=held, jacobian_finite=True)
        if not accepted:
            new = state._replace(damping=lam, n_simulations=state.n_simulations + n_trials)
            return new, GaussNewtonInfo(loss=state.loss, accepted=False, damping=lam,
                                        step_norm=0.0, **common)
        new = GaussNewtonState(
            theta_internal=z_try, residuals=r_try, loss=loss_try, jacobian=jacobian(z_try),
            damping=lam, n_simulations=state.n_simulations + n_trials,
            n_jacobians=state.n_jacobians + 1)
        return new, GaussNewtonInfo(loss=loss_try, accepted=True, damping=lam,
                                    step_norm=float(np.max(np.abs(z_try - z))), **common)

    return Algorithm(init, step)


def gauss_newton(
    problem: AbstractProblem,
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    *,
    coordinates: str = "physical",
    max_steps: int = 100,
    xtol: float = 1e-9,
    ftol: float = 1e-12,
    flat_ratio: float = FLAT_RATIO,
    gap_ratio: float | None = GAP_RATIO,
    n_essential: int | None = None,
    min_damping: float = MIN_DAMPING,
    damping_growth: float = DAMPING_GROWTH,
    progress: bool = False,
) -> EstimationResult:
    """Fit ``problem`` by damped Gauss-Newton with essential directions (module doc).

    Args:
        problem: what to fit (any weighting; a prior is ignored: this is least squares).
        theta0: start, values of the free parameters as an array ordered as
            ``problem.free_names`` or a ``{name: value}`` dict (missing names take their
            nominal values); None: the nominal values. Must lie within the bounds.
        coordinates: ``"physical"`` (default) or ``"internal"``: the system ``theta0`` is
            given in.
        max_steps: iteration budget (>= 1).
        xtol: stop when an accepted step ‖λΔθ‖_∞ is at most this (internal units: a
            relative change for log-scale parameters).
        ftol: stop when the loss decreases by at most ``ftol`` times its value.
        flat_ratio, gap_ratio, n_essential, min_damping, damping_growth: see
            `gauss_newton_algorithm`.
        progress: show a progress bar over iterations.

    Returns:
        An `EstimationResult` with ``method="gauss-newton"``. Its singular values, condition
        number and essential directions are those of the Jacobian at the estimate;
        ``history`` holds ``loss`` and ``theta`` (physical) at the start and after every
        iteration (length ``n_steps + 1``) and per iteration ``damping``, ``accepted``,
        ``n_trials``, ``step_norm``, ``condition_number``, ``n_essential_directions`` and
        ``held`` (names held on a bound); ``extra`` holds the named ``flat_directions``
        and ``essential_directions`` at the estimate (components of unit vectors in
        internal coordinates), the rule and its thresholds, ``at_bounds`` and ``start``.

    Raises:
        ValueError: bad ``theta0`` (shape, unknown name, non-finite, outside the bounds),
            ``coordinates`` or options.
        FailedStartError: (a ``ValueError``) nothing to iterate from: the simulation fails
            at the start (the message gives its `jcalib.model.SolveStatus`), the loss
            overflows there although the simulation succeeded (e.g. absolute weighting of
            huge data), or the Jacobian there has NaN or inf entries.

    A non-finite Jacobian at a later iterate stops the run with ``converged=False`` and the
    failure in ``reason``; a trial point whose solve fails (or whose loss overflows) is
    rejected by the damping loop, so the iteration steps around failed regions and never
    returns a point where the simulation fails.

    Long for its documented options; the body is 54 lines.
    """
    t_start = time.perf_counter()
    if int(max_steps) != max_steps or max_steps < 1:
        raise ValueError(f"gauss_newton: max_steps must be a positive integer; got {max_steps!r}")
    for label, value in (("xtol", xtol), ("ftol", ftol)):
        if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
            raise ValueError(f"gauss_newton: {label} must be a finite number >= 0; got {value!r}")
    algorithm = gauss_newton_algorithm(problem, flat_ratio=flat_ratio, gap_ratio=gap_ratio,
                                       n_essential=n_essential, min_damping=min_damping,
                                       damping_growth=damping_growth, xtol=xtol, ftol=ftol)
    z0 = start_internal(problem, theta0, coordinates=coordinates, where="gauss_newton")
    state = algorithm.init(z0)
    loss0 = state.loss
    failure = (point_failure(problem, z0, state.residuals, "gauss_newton", fix="choose another theta0")
               or jacobian_failure(problem, z0, state.jacobian, "gauss_newton",
                                   fix="choose another theta0"))
    if failure:
        raise FailedStartError(failure)
    out = run(None, algorithm, state, int(max_steps), chunk_size=1, compiled=False,
              stop=lambda s: s.stopped, trace_fn=lambda s, info: (s.theta_internal, info),
              progress=progress, desc="gauss_newton")
    state = _on_host(out.state)
    z_trace, info = jax.tree_util.tree_map(np.asarray, out.trace)
    names = problem.free_names
    history: dict[str, list] = {
        "loss": [float(loss0)] + info.loss.tolist(),
        "theta": [_physical(problem, z0).tolist()] + [_physical(problem, z).tolist() for z in z_trace],
        "damping": info.damping.tolist(),
        "accepted": info.accepted.tolist(),
        "n_trials": info.n_trials.tolist(),
        "step_norm": info.step_norm.tolist(),
        "condition_number": info.condition_number.tolist(),
        "n_essential_directions": info.n_essential.tolist(),
        "held": [[n for n, h in zip(names, row) if h] for row in info.held],
    }
    outcome = None if out.n_steps == 0 else _outcome(GaussNewtonInfo(*(a[-1] for a in info)), xtol, ftol)
    if out.status == "interrupted":
        converged, reason = False, f"{INTERRUPTED} (KeyboardInterrupt) after {out.n_steps} steps"
    elif outcome is None:
        converged, reason = False, f"max_steps={max_steps} reached"
    else:
        converged, reason = outcome
    if reason is None:  # a non-finite Jacobian at the iterate
        reason = "failed: " + (jacobian_failure(problem, state.theta_internal, state.jacobian,
                                                "gauss_newton", "the iterate",
                                                fix="the iteration stopped there")
                               or "the Jacobian is not finite at the iterate")

    converged, reason = honest_outcome(converged, reason, state.loss, state.theta_internal)
    analysis = None
    if np.all(np.isfinite(state.jacobian)) and np.any(state.jacobian):
        analysis = jacobian_analysis(state.jacobian, names, flat_ratio=flat_ratio,
                                     gap_ratio=gap_ratio)
    return _result(problem, state, analysis, n_essential, history, out.n_steps, converged,
                   reason, time.perf_counter() - t_start, z0, flat_ratio, gap_ratio)


# --- helpers ----------------------------------------------------------------------------------
def _check_options(problem, flat_ratio, gap_ratio, n_essential, min_damping, damping_growth):
    if not isinstance(problem, AbstractProblem):
        raise ValueError(f"gauss_newton: problem must be a CalibrationProblem; got "
                         f"{type(problem).__name__}")
    if not (isinstance(flat_ratio, (int, float)) and flat_ratio > 1):
        raise ValueError(f"gauss_newton: flat_ratio must be a number > 1; got {flat_ratio!r}")
    if gap_ratio is not None and not (isinstance(gap_ratio, (int, float)) and gap_ratio > 1):
        raise ValueError(f"gauss_newton: gap_ratio must be > 1 or None (ratio rule only); got "
                         f"{gap_ratio!r}")
    if n_essential is not None and (int(n_essential) != n_essential
                                    or not 1 <= n_essential <= problem.n_free):
        raise ValueError(f"gauss_newton: n_essential must be None (rule) or an integer in "
                         f"[1, n_free={problem.n_free}]; got {n_essential!r}")
    if not (isinstance(min_damping, (int, float)) and 0 < min_damping <= 1):
        raise ValueError(f"gauss_newton: min_damping must be in (0, 1]; got {min_damping!r}")
    if not (isinstance(damping_growth, (int, float)) and damping_growth >= 1):
        raise ValueError(f"gauss_newton: damping_growth must be >= 1; got {damping_growth!r}")


def _on_host(state: GaussNewtonState) -> GaussNewtonState:
    """The state as NumPy arrays and Python numbers (`jcalib.algorithm.run` may hand it back
    as JAX arrays), so that every step computes with NumPy."""
    return GaussNewtonState(
        theta_internal=np.asarray(state.theta_internal, dtype=np.float64),
        residuals=np.asarray(state.residuals, dtype=np.float64), loss=float(state.loss),
        jacobian=np.asarray(state.jacobian, dtype=np.float64), damping=float(state.damping),
        n_simulations=int(state.n_simulations), n_jacobians=int(state.n_jacobians),
        stopped=bool(state.stopped))


def _outcome(info: GaussNewtonInfo, xtol: float, ftol: float) -> tuple[bool, str | None] | None:
    """``(converged, reason)`` when a stopping rule holds after the step ``info`` describes,
    else None; the reason is None for a non-finite Jacobian (the caller names the failure)."""
    if not bool(info.jacobian_finite):
        return False, None
    if int(info.n_step_directions) == 0:
        return True, "no step direction: the Jacobian is zero or every parameter is held on a bound"
    if int(info.n_trials) == 0:
        return True, f"Gauss-Newton step {float(info.full_step_norm):.3g} <= xtol={xtol:g}"
    if not bool(info.accepted):
        converged = float(info.full_step_norm) <= math.sqrt(xtol)
        return converged, (f"no loss decrease down to damping {float(info.damping) * 2:g}; the full step "
                           f"{float(info.full_step_norm):.3g} is "
                           + ("below sqrt(xtol): at the minimum to the accuracy of the residuals"
                              if converged else "not small: stalled"))
    if float(info.step_norm) <= xtol:
        return True, f"step size {float(info.step_norm):.3g} <= xtol={xtol:g}"
    if float(info.loss_before) - float(info.loss) <= ftol * float(info.loss_before):
        return True, f"relative loss change <= ftol={ftol:g}"
    return None


def _on_bounds(z, lower, upper) -> tuple[np.ndarray, np.ndarray]:
    """Which coordinates sit on their lower / upper bound (to round-off of log(bound)); an
    infinite bound (a parameter without one, issue 18 §6) is never reached."""
    size = np.maximum(np.where(np.isfinite(lower), np.abs(lower), 0.0),
                      np.where(np.isfinite(upper), np.abs(upper), 0.0))
    tol = 1e-12 * (1.0 + size)
    return np.isfinite(lower) & (z <= lower + tol), np.isfinite(upper) & (z >= upper - tol)


def _mean_square(r: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported, not warned
        return float(np.mean(np.square(r)))


def _reduced_step(jac, r, n_essential, flat_ratio, gap_ratio) -> tuple[np.ndarray, int]:
    """-Σ_{l<=k} v_l (u_lᵀ r)/s_l over the essential directions of ``jac`` (eq. 23)."""
    if jac.shape[1] == 0 or not np.any(jac):
        return np.zeros(jac.shape[1]), 0
    u, s, vt = np.linalg.svd(jac, full_matrices=False)
    if n_essential is None:
        k, _ = n_essential_directions(s, flat_ratio=flat_ratio, gap_ratio=gap_ratio)
    else:
        k = min(int(n_essential), int(np.sum(s > 0)))
    coefficients = (u[:, :k].T @ r) / s[:k]
    return -(vt[:k].T @ coefficients), k


def _physical(problem, z) -> np.ndarray:
    space = problem.space
    theta = np.asarray(space.to_physical(np.asarray(z, dtype=np.float64)))
    return np.clip(theta, space.lower, space.upper)


def _directions(analysis, first: int, last: int) -> list[dict]:
    s = np.asarray(analysis.singular_values)
    v = np.asarray(analysis.right_singular_vectors)
    out = []
    for k in range(first, last):
        out.append({
            "index": k + 1,
            "singular_value": float(s[k]),
            "ratio_to_largest": float(s[0] / s[k]) if s[k] > 0 else math.inf,
            "components": {n: float(v[i, k]) for i, n in enumerate(analysis.parameter_names)},
        })
    return out


def _result(problem, state, analysis, n_essential, history, n_steps, converged, reason,
            wall_time_s, z0, flat_ratio, gap_ratio) -> EstimationResult:
    names = problem.free_names
    d = len(names)
    z = state.theta_internal
    lower, upper = problem.space.lower_internal, problem.space.upper_internal
    on_lower, on_upper = _on_bounds(z, lower, upper)
    at_bounds = {n: ("lower" if on_lower[i] else "upper")
                 for i, n in enumerate(names) if on_lower[i] or on_upper[i]}
    extra = {"flat_ratio": float(flat_ratio),
             "gap_ratio": None if gap_ratio is None else float(gap_ratio),
             "at_bounds": at_bounds, "start": dict(zip(names, _physical(problem, z0).tolist())),
             "bounds": "internal coordinates, trial points projected onto the internal box"}
    if analysis is None:
        singular_values, condition, n_ess = np.full(d, np.nan), math.inf, 0
        extra |= {"rule": None, "essential_directions": [], "flat_directions": []}
    else:
        singular_values = np.asarray(analysis.singular_values)
        condition = float(analysis.condition_number)
        if n_essential is None:
            n_ess, rule = analysis.n_essential, analysis.rule
        else:
            n_ess, rule = min(int(n_essential), d), "fixed"
        extra |= {"rule": rule, "essential_directions": _directions(analysis, 0, n_ess),
                  "flat_directions": _directions(analysis, n_ess, d)}
    return EstimationResult(
        method="gauss-newton", names=tuple(names), theta=_physical(problem, z),
        theta_internal=np.asarray(z), loss=float(state.loss), singular_values=singular_values,
        condition_number=condition, n_essential_directions=int(n_ess),
        n_steps=int(n_steps), n_simulations=int(state.n_simulations),
        n_jacobians=int(state.n_jacobians), wall_time_s=float(wall_time_s),
        converged=bool(converged), reason=reason, history=history, extra=extra,
    )
