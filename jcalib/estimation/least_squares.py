"""Bounded nonlinear least squares: trust-region reflective (scipy) and batched Levenberg-Marquardt.

Two local least-squares estimators of a `CalibrationProblem`, both on the problem's
internal coordinates ``theta_internal`` (log for log-scale parameters) with the box
``[space.lower_internal, space.upper_internal]``:

- `least_squares_trf`: scipy's trust-region reflective method (``least_squares(method=
  "trf")``, Branch, Coleman & Li 1999; the bounded reflective Newton method of Bastogne et
  al. 2007, §3.4, and "LS-TRF" of Aka et al. 2023, Table 2) driven by the exact Jacobian of
  the residuals from forward-mode autodiff through the ODE solve (`CalibrationProblem.jacobian`).
  Iterates stay inside the box (the reflective strategy). One start, a Python loop run by
  scipy; every simulation and every Jacobian is counted.
- `levenberg_marquardt_batch`: optimistix's Levenberg-Marquardt as a `jcalib.algorithm.Algorithm`
  (`levenberg_marquardt_algorithm`: the solver's own ``init``/``step``/``terminate``), vmapped
  over many starts and driven by `jcalib.algorithm.run` (one compiled step for the whole batch,
  cached across calls). Optimistix has no bounds, so
  it iterates on an unconstrained ``u`` with the bounded transform of MINUIT (James & Roos
  1975): ``theta_internal = mid + half * sin(u)``, ``mid, half`` the centre and half-width of
  the internal box. Every ``u`` maps inside the box, so no iterate ever leaves it; a bound is
  reached at the finite ``u = ±π/2`` (unlike a logistic transform), where the Jacobian
  column vanishes. Starts are moved ``1e-10`` of the half-width off a bound, as scipy's
  TRF moves them strictly inside, because at ``u = ±π/2`` the parameter could not move.

Model-call counts (`EstimationResult.n_simulations` / ``n_jacobians``): TRF counts each call
of ``problem.residuals`` and ``problem.jacobian`` (scipy's own ``nfev`` leaves out the calls
of a finite-difference Jacobian). One Levenberg-Marquardt step linearises the residuals at
its trial point (``jax.linearize``: one solve carrying the tangents), counted as one
simulation and one Jacobian.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> from jcalib import CalibrationProblem, models, synthetic_measurements
    >>> model = models.get("four_substance_reactions")
    >>> truth = model.parameters.nominal
    >>> problem = CalibrationProblem(model, synthetic_measurements(jax.random.key(0), model, truth, 0.01))
    >>> result = least_squares_trf(problem, [3e-4, 3e-5, 2e-5])
    >>> result.converged, result.n_jacobians > 0
    (True, True)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import scipy.optimize
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jcalib import distributed
from jcalib.algorithm import Algorithm, run, vmap_chains
from jcalib.estimation.failures import FailedStartError, honest_outcome, jacobian_failure, point_failure
from jcalib.estimation.result import INTERRUPTED, EstimationResult, MultistartResult, multistart_result
from jcalib.problems import AbstractProblem
from jcalib.starts import start_internal

__all__ = ["FIDES_FATOL", "FIDES_FRTOL", "LevenbergMarquardtInfo", "LevenbergMarquardtState", "MultistartResult",
           "STOP_RULES", "least_squares_trf", "levenberg_marquardt_algorithm", "levenberg_marquardt_batch",
           "trf_stop_options"]

# When a TRF start stops: "scipy", scipy's own tests (ftol = xtol = gtol = 1e-8, ftol relative to the
# cost), or "fides", the default test of Fides (pyPESTO's optimiser): an accepted step changed the
# objective f by less than FIDES_FATOL + FIDES_FRTOL |f| (`trf_stop_options`).
STOP_RULES = ("scipy", "fides")
FIDES_FATOL = FIDES_FRTOL = 1e-8  # fides.constants.DEFAULT_OPTIONS (fides 0.8.0)

_TRF_JACOBIANS = ("autodiff", "2-point", "3-point")
_BOUND_NUDGE = 1e-10  # fraction of the half-width a start is moved off a bound (LM transform)


# --- trust-region reflective (scipy) ----------------------------------------------------------
class _Calls:
    """Counts and checks every model call made on behalf of a scipy optimizer."""

    def __init__(self, problem: AbstractProblem):
        self.problem = problem
        self.lower = problem.space.lower_internal
        self.upper = problem.space.upper_internal
        self.n_simulations = 0
        self.n_jacobians = 0
        self.n_failed = 0
        self.max_violation = 0.0
        self.best_loss = math.inf
        self.best_z: np.ndarray | None = None
        self.best_trace: list[float] = []  # best loss so far, per simulation
        self._last: tuple[bytes, np.ndarray] | None = None

    def _see(self, z: np.ndarray) -> None:
        violation = np.maximum(self.lower - z, 0.0).max(initial=0.0)
        self.max_violation = max(self.max_violation, float(violation),
                                 float(np.maximum(z - self.upper, 0.0).max(initial=0.0)))

    def residuals(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        self._see(z)
        self.n_simulations += 1
        r = np.asarray(self.problem.residuals(jnp.asarray(z)))
        loss = _mean_square(r)
        if not math.isfinite(loss):
            self.n_failed += 1
        elif loss < self.best_loss:
            self.best_loss, self.best_z = loss, z.copy()
        self.best_trace.append(self.best_loss)
        self._last = (z.tobytes(), r)
        return r

    def cached_residuals(self, z: np.ndarray) -> np.ndarray:
        """Residuals at ``z``, reusing the last simulation when it was at the same point."""
        z = np.asarray(z, dtype=np.float64)
        if self._last is not None and self._last[0] == z.tobytes():
            return self._last[1]
        return self.residuals(z)

    def jacobian(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        self._see(z)
        self.n_jacobians += 1
        return np.asarray(self.problem.jacobian(jnp.asarray(z)))

    def loss(self, z: np.ndarray) -> float:
        """Scalar objective for scipy minimizers: NaN (failed solve) becomes ``inf``."""
        loss = _mean_square(self.residuals(z))
        return loss if math.isfinite(loss) else math.inf


class _JacobianFailed(Exception):
    def __init__(self, z: np.ndarray, jacobian: np.ndarray):
        super().__init__("non-finite Jacobian")
        self.z = np.asarray(z, dtype=np.float64).copy()
        self.jacobian = jacobian


class _Plateau(Exception):
    """Raised from the Jacobian callback to stop scipy at an accepted point on a plateau."""

    def __init__(self, z: np.ndarray, jacobian: np.ndarray, reason: str):
        super().__init__(reason)
        self.z = np.asarray(z, dtype=np.float64).copy()
        self.jacobian = jacobian
        self.reason = reason


_PLATEAU_STATUS = 5  # scipy's statuses are -1..4; 5 marks the plateau stop of least_squares_trf


def least_squares_trf(
    problem: AbstractProblem,
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    *,
    coordinates: str = "physical",
    jac: str = "autodiff",
    ftol: float = 1e-8,
    xtol: float = 1e-8,
    gtol: float = 1e-8,
    max_steps: int | None = None,
    x_scale: str | Float[ArrayLike, " n_free"] | None = None,
    plateau_window: int | None = None,
    plateau_rtol: float = 0.01,
    plateau_atol: float = 0.0,
    verbose: int = 0,
) -> EstimationResult:
    """Trust-region reflective least squares within the bounds, with the autodiff Jacobian.

    Minimises ``sum(problem.residuals(theta_internal) ** 2)`` over the internal box with
    ``scipy.optimize.least_squares(method="trf")``. A trial point whose solve fails (NaN
    residuals) is rejected by scipy and its trust region shrunk; such solves are counted in
    ``extra["n_failed_solves"]``. A non-finite Jacobian at an accepted point stops the run
    with ``converged=False`` and the best point so far.

    Args:
        problem: the calibration problem.
        theta0: start, ``(n_free,)`` ordered as ``problem.free_names``, or ``{name:
            value}`` (missing names take nominal values); None: the nominal values. Must
            lie within the bounds (on a bound is allowed); see `jcalib.starts`.
        coordinates: ``"physical"`` or ``"internal"``, the coordinates of ``theta0``.
        jac: ``"autodiff"`` (`CalibrationProblem.jacobian`, forward mode through the
            solver) or scipy's finite differences ``"2-point"`` / ``"3-point"`` on
            ``problem.residuals`` (baselines; each difference is a counted simulation).
        ftol, xtol, gtol: scipy's tolerances on the cost, the step and the scaled gradient.
        max_steps: residual evaluations allowed (scipy's ``max_nfev``; default ``100 * n_free``).
        x_scale: scipy's variable scaling (None: scipy's default; ``"jac"``: by the
            Jacobian's column norms).
        plateau_window: stop on a plateau (None: off, scipy's tests only): after accepted
            step k >= w = ``plateau_window``, stop when the last w accepted steps together
            lowered the loss by at most ``plateau_rtol`` of its value w steps before,
            ``loss[k - w] - loss[k] <= plateau_rtol * loss[k - w]`` (a windowed ``ftol``: scipy's
            ``ftol`` compares one step's decrease only). The run then ends at step k with
            ``converged=True``, ``extra["status"] = 5`` and the rule in ``reason``; the Jacobian
            at that point (computed for the step, as scipy does at every accepted point) gives
            the singular values. Needs ``jac="autodiff"``.
        plateau_rtol: relative loss decrease over the window that counts as a plateau
            (default 0.01: less than 1 % in w steps).
        plateau_atol: absolute decrease of the cost ``0.5 * sum(r ** 2)`` over the window that
            counts as a plateau too (default 0: off). With ``plateau_window=1, plateau_rtol=0``
            it stops where Fides's default test does (an accepted step changed the objective f
            by less than ``1e-8 + 1e-8 |f|``) when f is a negative log-likelihood of Gaussian
            residuals (the cost up to a constant) and ``plateau_atol = 1e-8 (1 + |f|)`` at the
            optimum.
        verbose: scipy's verbosity (0, 1 or 2).

    Returns:
        `EstimationResult` with ``method="trf"``; ``singular_values`` and
        ``condition_number`` of the residual Jacobian (internal coordinates) at the
        estimate; ``history["loss"]``, ``history["theta"]`` (physical) and
        ``history["time_s"]`` (seconds since the call) at the start and after every
        accepted step (with finite differences: at the start and the end only);
        ``extra``: scipy's ``status`` and ``nfev``/``njev``, ``n_failed_solves``,
        ``max_bound_violation`` (largest distance outside the box of any evaluated point,
        internal coordinates; 0 when the bounds held) and ``jac``. All directions are
        estimated, so ``n_essential_directions = n_free``.

    Note:
        scipy's TRF takes an SVD of the Jacobian every iteration. On a small, busy CPU
        machine a multithreaded OpenBLAS competing with XLA's threads made this tiny SVD
        (1008 x 14) ~100x slower (70 ms instead of 0.5 ms); ``OPENBLAS_NUM_THREADS=1`` (set
        before numpy is imported) avoids it.

    Raises:
        ValueError: ``theta0`` has the wrong shape or names, is not finite or lies outside
            the bounds; unknown ``jac``; ``plateau_window`` not a positive integer or used
            with finite differences; ``plateau_rtol`` not in [0, 1); ``plateau_atol`` negative
            or not finite.
        FailedStartError: (a ``ValueError``) the simulation fails at ``theta0`` (the message
            gives its `jcalib.model.SolveStatus`), the loss overflows there although the
            simulation succeeded (e.g. absolute weighting of huge data), or the autodiff
            Jacobian there has NaN or inf entries.

    The result never reports success with a non-finite loss or estimate: a run whose last
    point failed returns the best point evaluated with ``converged=False``.

    Long for its documented options; the body is 78 lines.
    """
    _check_trf_options(jac, plateau_window, plateau_rtol, plateau_atol)
    start = time.perf_counter()
    z0 = start_internal(problem, theta0, coordinates=coordinates, where="least_squares_trf")
    calls = _Calls(problem)
    r0 = calls.residuals(z0)
    failure = point_failure(problem, z0, r0, "least_squares_trf")
    if failure:
        raise FailedStartError(failure)
    history: dict[str, list] = {"loss": [], "theta": [], "time_s": []}

    def record(z: np.ndarray) -> None:
        r = calls.cached_residuals(z)
        history["time_s"].append(time.perf_counter() - start)
        history["loss"].append(float(np.mean(r**2)))
        history["theta"].append(np.asarray(problem.to_physical(jnp.asarray(z))).tolist())

    if jac == "autodiff":
        def jac_fn(z):
            j = calls.jacobian(z)
            if not np.all(np.isfinite(j)):
                raise _JacobianFailed(z, j)
            record(z)
            plateau = _plateau(history["loss"], r0.size, plateau_window, plateau_rtol, plateau_atol)
            if plateau:
                raise _Plateau(z, j, plateau)
            return j
    else:
        jac_fn = jac
        record(z0)

    kwargs = {} if x_scale is None else {"x_scale": x_scale}
    lower, upper = problem.space.lower_internal, problem.space.upper_internal
    try:
        sol = scipy.optimize.least_squares(
            calls.cached_residuals, z0, jac=jac_fn, bounds=(lower, upper), method="trf",
            ftol=ftol, xtol=xtol, gtol=gtol, max_nfev=max_steps, verbose=verbose, **kwargs)
    except _JacobianFailed as failed:
        if not history["loss"]:  # scipy's first Jacobian, at the start: nothing to return
            raise FailedStartError(jacobian_failure(problem, failed.z, failed.jacobian,
                                                    "least_squares_trf")) from None
        z = calls.best_z
        j = None
        n_iterations = max(len(history["loss"]) - 1, 0)
        converged, status = False, -10
        reason = "failed: " + (jacobian_failure(problem, failed.z, failed.jacobian,
                                                "least_squares_trf", "an accepted point",
                                                fix="stopped with the best point so far")
                               or "the Jacobian is not finite at an accepted point")
        extra_scipy = {}
    except _Plateau as plateau:
        z, j = plateau.z, np.asarray(plateau.jacobian)
        n_iterations = len(history["loss"]) - 1
        converged, status, reason = True, _PLATEAU_STATUS, plateau.reason
        extra_scipy = {}
    else:
        z = np.asarray(sol.x)
        j = np.asarray(sol.jac)
        converged, status, reason = bool(sol.status > 0), int(sol.status), str(sol.message)
        # accepted steps: one Jacobian at the start and after each of them
        n_iterations = max((len(history["loss"]) if jac == "autodiff" else int(sol.njev)) - 1, 0)
        extra_scipy = {"nfev": int(sol.nfev), "njev": None if sol.njev is None else int(sol.njev)}
        if jac != "autodiff":
            history["time_s"].append(time.perf_counter() - start)
            history["loss"].append(float(2.0 * sol.cost / max(sol.fun.size, 1)))
            history["theta"].append(np.asarray(problem.to_physical(jnp.asarray(z))).tolist())
    z, theta, loss, converged, reason = _final_point(problem, calls, z, converged, reason)
    singular_values = (np.zeros(0) if j is None or not np.all(np.isfinite(j))
                       else np.linalg.svd(j, compute_uv=False))
    return EstimationResult(
        method="trf", names=problem.free_names, theta=theta, theta_internal=z, loss=loss,
        singular_values=singular_values, condition_number=_condition(singular_values),
        n_essential_directions=problem.n_free, n_steps=n_iterations,
        n_simulations=calls.n_simulations, n_jacobians=calls.n_jacobians,
        wall_time_s=time.perf_counter() - start, converged=converged, reason=reason,
        history=history,
        extra={"status": status, **extra_scipy, "n_failed_solves": calls.n_failed,
               "max_bound_violation": calls.max_violation, "jac": jac},
    )


def trf_stop_options(stop: str, objective_scale: float = 0.0) -> dict:
    """`least_squares_trf` options of the stop rule ``stop`` (one of `STOP_RULES`).

    ``"scipy"``: none (scipy's own tests). ``"fides"``: stop at the first accepted step that
    lowered the cost ``0.5 * sum(r**2)`` (= -log-likelihood + const for Gaussian noise) by at most
    ``FIDES_FATOL + FIDES_FRTOL * |objective_scale|``, a one-step plateau; ``objective_scale`` is
    the |f| Fides's relative tolerance refers to, e.g. -log-likelihood at a reference point.

    Example:
        >>> trf_stop_options("fides", -100.0)["plateau_atol"]  # 1e-8 + 1e-8 * 100
        1.0099999999999999e-06
    """
    if stop not in STOP_RULES:
        raise ValueError(f"trf_stop_options: stop must be one of {STOP_RULES}; got {stop!r}")
    if stop == "scipy":
        return {}
    return {"plateau_window": 1, "plateau_rtol": 0.0, "plateau_atol": FIDES_FATOL + FIDES_FRTOL * abs(objective_scale)}


def _plateau(losses: list[float], n_residuals: int, window: int | None, rtol: float, atol: float) -> str | None:
    """The stop reason when the last ``window`` accepted steps lowered the loss by at most
    ``rtol`` (relative) or the cost ``0.5 * sum(r**2)`` by at most ``atol``; else None."""
    if window is None or len(losses) <= window:
        return None
    before, now = losses[-1 - window], losses[-1]
    cost_drop = 0.5 * n_residuals * (before - now)  # the loss is the mean square
    if before - now > rtol * before and cost_drop > atol:
        return None
    return (f"converged: plateau: the last {window} accepted steps lowered the loss from {before:.6g} to "
            f"{now:.6g} ({(before - now) / before:.3%}, the cost by {cost_drop:.3g}; plateau_rtol = {rtol:g}, "
            f"plateau_atol = {atol:g})")


def _check_trf_options(jac, plateau_window, plateau_rtol, plateau_atol) -> None:
    """ValueError for `least_squares_trf` options out of range (see its Raises)."""
    if jac not in _TRF_JACOBIANS:
        raise ValueError(f"least_squares_trf: jac must be one of {_TRF_JACOBIANS}; got {jac!r}")
    if plateau_window is not None:
        if isinstance(plateau_window, bool) or not isinstance(plateau_window, (int, np.integer)) or plateau_window < 1:
            raise ValueError(f"least_squares_trf: plateau_window must be a positive integer (accepted steps) or "
                             f"None; got {plateau_window!r}")
        if jac != "autodiff":
            raise ValueError(f"least_squares_trf: plateau_window needs jac='autodiff' (the loss after every "
                             f"accepted step); got jac={jac!r}: pass plateau_window=None")
    if not (isinstance(plateau_rtol, (int, float, np.floating)) and 0.0 <= plateau_rtol < 1.0):
        raise ValueError(f"least_squares_trf: plateau_rtol must be a number in [0, 1); got {plateau_rtol!r}")
    if not (isinstance(plateau_atol, (int, float, np.floating)) and 0.0 <= plateau_atol < math.inf):
        raise ValueError(f"least_squares_trf: plateau_atol must be a finite number >= 0 (cost units); got "
                         f"{plateau_atol!r}")


def _final_point(problem: AbstractProblem, calls: _Calls, z, converged: bool, reason: str):
    """``(z, theta, loss, converged, reason)`` of a scipy run's last point, clipped into the box;
    never a failed point: if it failed, the best point evaluated, with ``converged=False``."""
    z, theta = _inside(problem, z)
    loss = _mean_square(calls.cached_residuals(z))
    if not math.isfinite(loss) and calls.best_z is not None:
        z, theta = _inside(problem, calls.best_z)
        loss = _mean_square(calls.cached_residuals(z))
        reason += "; the final point failed, the best point evaluated is returned"
        converged = False
    converged, reason = honest_outcome(converged, reason, loss, theta)
    return z, theta, loss, converged, reason


# --- Levenberg-Marquardt, jitted and vmapped (optimistix) -----------------------------------
class LevenbergMarquardtState(NamedTuple):
    """Iterate of `levenberg_marquardt_algorithm` (one start; vmapped for a batch).

    Attributes:
        u: the unconstrained iterate, ``(n,)``.
        solver_state: the array part of optimistix's Levenberg-Marquardt state (its static
            part is rebuilt by the step).
        n_steps: steps taken while the start was active.
        terminate: optimistix's Cauchy termination holds.
        result: optimistix's `optimistix.RESULTS` (``successful`` while running).
    """

    u: Float[Array, " n"]
    solver_state: Any
    n_steps: Int[Array, ""]
    terminate: Bool[Array, ""]
    result: optx.RESULTS

    @property
    def done(self) -> Bool[Array, "*starts"]:
        """The start has stopped: terminated or failed (e.g. a non-finite iterate); one flag per
        start of a vmapped batch."""
        return self.terminate | (self.result != optx.RESULTS.successful)


class LevenbergMarquardtInfo(NamedTuple):
    """Diagnostics of one step.

    Attributes:
        loss: mean squared residual at the last accepted point.
        active: whether the start was still iterating (False once ``done``: frozen).
    """

    loss: Float[Array, ""]
    active: Bool[Array, ""]


def levenberg_marquardt_algorithm(
    residual_fn: Callable[[Float[Array, " n"]], Float[Array, " m"]],
    n: int,
    *,
    rtol: float = 1e-8,
    atol: float = 1e-10,
) -> Algorithm:
    """optimistix's Levenberg-Marquardt as a deterministic `jcalib.algorithm.Algorithm`.

    The same iteration as ``optx.least_squares(residual_fn, optx.LevenbergMarquardt(rtol,
    atol), u0)``: ``init(u0)`` runs the solver's ``init`` and termination test, each
    ``step`` one solver step followed by the test (optimistix's ``_iterate``); once the
    state is ``done`` the step leaves it unchanged, so a vmapped batch (`vmap_chains`)
    stops start by start as optimistix's vmapped while loop does.

    Args:
        residual_fn: JAX function ``(n,) -> (m,)``, unconstrained.
        n: the length of ``u``.
        rtol, atol: optimistix's Cauchy termination tolerances.

    Returns:
        ``Algorithm(init, step)`` with `LevenbergMarquardtState` and `LevenbergMarquardtInfo`;
        run it with ``stop=lambda s: s.done`` (``jnp.all(s.done)`` for a batch).
    """
    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    tags: frozenset = frozenset()

    def fn(u, args):
        return jnp.asarray(residual_fn(u)), None

    u_struct = jax.ShapeDtypeStruct((int(n),), jnp.float64)
    f_struct = jax.eval_shape(lambda u: fn(u, None)[0], u_struct)

    def full_init(u0):
        return solver.init(fn, u0, None, {}, f_struct, None, tags)

    def dynamic(tree):
        return eqx.filter(tree, eqx.is_array)

    static = eqx.filter(eqx.filter_eval_shape(full_init, u_struct),
                        lambda x: not isinstance(x, jax.ShapeDtypeStruct))

    def terminate_and_result(u, solver_state):
        terminate, result = solver.terminate(fn, u, None, {}, solver_state, tags)
        finite = jnp.all(jnp.isfinite(u))
        return terminate, optx.RESULTS.where(finite, result, optx.RESULTS.nonfinite)

    def init(u0) -> LevenbergMarquardtState:
        u0 = jnp.asarray(u0, dtype=jnp.float64)
        solver_state = full_init(u0)
        terminate, result = terminate_and_result(u0, solver_state)
        return LevenbergMarquardtState(u0, dynamic(solver_state), jnp.array(0), terminate, result)

    def step(state: LevenbergMarquardtState) -> tuple[LevenbergMarquardtState, LevenbergMarquardtInfo]:
        solver_state = eqx.combine(static, state.solver_state)
        new_u, new_solver_state, _ = solver.step(fn, state.u, None, {}, solver_state, tags)
        terminate, result = terminate_and_result(state.u, new_solver_state)
        new = LevenbergMarquardtState(new_u, dynamic(new_solver_state), state.n_steps + 1, terminate, result)
        active = jnp.logical_not(state.done)
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), new, state)
        loss = jnp.mean(eqx.combine(static, new.solver_state).f_info.residual ** 2)
        return new, LevenbergMarquardtInfo(loss, active)

    return Algorithm(init, step)


def levenberg_marquardt_batch(
    problem: AbstractProblem,
    theta0: Float[ArrayLike, "n_starts n_free"],
    *,
    coordinates: str = "physical",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 200,
    chunk_size: int | None = None,
    start_distribution: str = "given",
) -> MultistartResult:
    """Levenberg-Marquardt from many starts at once: optimistix's solver, vmapped, driven by `run`.

    Runs `levenberg_marquardt_algorithm` (the iteration of ``optx.least_squares(...,
    optx.LevenbergMarquardt(rtol, atol))``) on the bounded transform ``theta_internal = mid +
    half * sin(u)`` (see the module docstring), vmapped over the starts (`vmap_chains`) and
    driven by ``jcalib.algorithm.run`` until every start has stopped; a stopped start is
    frozen, so per-start step counts are those of the start, while the batch costs
    ``n_starts`` times the largest (``extra["max_steps_taken"]``). The vmapped step is one
    jitted call, compiled once per problem structure and batch size.

    Args:
        problem: the calibration problem.
        theta0: starts, ``(n_starts, n_free)`` ordered as ``problem.free_names``; within
            the bounds (`jcalib.starts`).
        coordinates: ``"physical"`` or ``"internal"``, the coordinates of ``theta0``.
        rtol, atol: optimistix's Cauchy termination: stop when both the step in ``u`` and
            the change of the residuals are below ``atol + rtol * |value|`` (max norm).
        max_steps: step budget per start (reaching it: ``converged=False``).
        chunk_size: starts per compiled call (None: all at once); the last chunk is padded,
            so every chunk reuses one compiled program. After `jcalib.distributed.initialize`
            with several processes, each process runs its block of the starts
            (`jcalib.distributed.process_rows`, in chunks of ``chunk_size``) on its default
            device and every process gets all results (`jcalib.distributed.gather_rows`).
        start_distribution: label stored in the result (used by `multistart`).

    Returns:
        `MultistartResult` with ``method="lm"``. Per start: ``history`` is empty,
        ``singular_values`` empty and ``condition_number`` NaN (not computed), and
        ``wall_time_s`` is the batch's time divided by ``n_starts``. A start that ended
        with a non-finite loss or estimate gets ``loss = inf``, its start as the estimate,
        ``converged=False`` and a ``reason`` saying why: the simulation failed at the start
        (with its `jcalib.model.SolveStatus`), the loss overflows there although the
        simulation succeeded, the Jacobian there is not finite, or the iteration reached
        such a point. ``extra["n_failed_starts"]`` counts them.

    Raises:
        ValueError: a free parameter without finite bounds; ``theta0`` not ``(n_starts,
            n_free)``, not finite or outside the bounds;
            bad ``max_steps`` or ``chunk_size``.

    Long for its documented options; the body is 61 lines.
    """
    start = time.perf_counter()
    space = problem.space
    space.check_box("levenberg_marquardt_batch")  # the sin transform maps onto the box
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.ndim == 1:
        raise ValueError(
            f"levenberg_marquardt_batch: theta0 must be (n_starts, n_free={problem.n_free}); got "
            f"shape {theta0.shape} (use theta0[None, :] for one start)"
        )
    space.check_shape(theta0, "levenberg_marquardt_batch: theta0", batched=True)
    n = theta0.shape[0]
    if n == 0:
        raise ValueError("levenberg_marquardt_batch: theta0 is empty; pass at least one start")
    if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"levenberg_marquardt_batch: max_steps must be a positive integer; got {max_steps!r}")
    z0s = start_internal(problem, theta0, coordinates=coordinates, where="levenberg_marquardt_batch",
                         rows="n_starts")
    lower, upper = space.lower_internal, space.upper_internal
    mid, half = 0.5 * (lower + upper), 0.5 * (upper - lower)
    s0 = np.clip((z0s - mid) / half, -1.0 + _BOUND_NUDGE, 1.0 - _BOUND_NUDGE)
    u0s = np.arcsin(s0)

    chunk = n if chunk_size is None else int(chunk_size)
    if chunk < 1:
        raise ValueError(f"levenberg_marquardt_batch: chunk_size must be positive; got {chunk_size}")
    local = distributed.process_rows(u0s)  # several processes: each runs its block of starts
    chunk = min(chunk, local.shape[0])
    z_final, losses, success, max_reached, n_steps, n_accepted, finished = distributed.gather_rows(
        _lm_blocks(problem.forward_mode(), local, chunk, mid, half, rtol, atol, max_steps), n)
    wall = time.perf_counter() - start
    status = "completed" if np.all(finished) else "interrupted"

    results = []
    for i in range(n):
        failed = not (np.isfinite(losses[i]) and np.all(np.isfinite(z_final[i])))
        if not finished[i]:
            ran = n_steps[i] > 0 and not failed
            z, loss, converged = (z_final[i], float(losses[i]), False) if ran else (z0s[i], math.inf, False)
            reason = (f"{INTERRUPTED} (KeyboardInterrupt) after {int(n_steps[i])} steps: not converged; the loss "
                      "and estimate are the iterate's then" if ran else
                      f"{INTERRUPTED} (KeyboardInterrupt) before this start ran")
        elif failed:
            z, loss, converged = z0s[i], math.inf, False
            reason = "failed: " + _lm_failure(problem, z0s[i], f"theta0[{i}]")
        else:
            z, loss, converged = z_final[i], float(losses[i]), bool(success[i])
            reason = ("converged: Cauchy termination (step and residual change below "
                      "atol + rtol |value|)" if converged else
                      f"stopped: max_steps={max_steps} reached" if max_reached[i] else
                      "stopped: optimistix reported a failure")
        z, theta = _inside(problem, z)
        results.append(EstimationResult(
            method="lm", names=problem.free_names, theta=theta, theta_internal=z, loss=loss,
            singular_values=np.zeros(0), condition_number=math.nan,
            n_essential_directions=problem.n_free, n_steps=int(n_steps[i]),
            n_simulations=int(n_steps[i]), n_jacobians=int(n_steps[i]), wall_time_s=wall / n,
            converged=converged, reason=reason, history={},
            extra={"n_accepted_steps": int(n_accepted[i]), "bounds": "sin transform"},
        ))
    return multistart_result("lm", start_distribution, problem, theta0, results, wall,
                              extra={"max_steps_taken": int(n_steps.max()), "chunk_size": chunk}, status=status)


def _lm_blocks(forward, local: np.ndarray, chunk: int, mid, half, rtol, atol, max_steps: int) -> list[np.ndarray]:
    """The outcomes of `_lm_outcome` and a ``finished`` flag for this process's starts ``local``
    (``u`` coordinates), block by block of ``chunk`` (the last one padded). A Ctrl-C ends the
    blocks: the running block's starts that had stopped are finished, the others and the later
    blocks are not (their rows: the iterate then, or NaN and 0 steps)."""
    outputs, interrupted = [], False
    settings = (forward, jnp.asarray(mid), jnp.asarray(half), float(rtol), float(atol))
    algorithm = Algorithm(functools.partial(_lm_init, *settings), functools.partial(_lm_step, *settings))
    for i in range(0, local.shape[0], chunk):
        n_real = min(chunk, local.shape[0] - i)
        if interrupted:
            flags, counts = np.zeros(n_real, dtype=bool), np.zeros(n_real, dtype=int)
            outputs.append([np.full((n_real, local.shape[1]), np.nan), np.full(n_real, np.nan), flags, flags,
                            counts, counts, flags])
            continue
        block = local[i : i + chunk]
        if n_real < chunk:
            block = np.concatenate([block, np.repeat(block[-1:], chunk - n_real, axis=0)])
        out = run(None, algorithm, algorithm.init(jnp.asarray(block)), int(max_steps), chunk_size=1,
                  compiled=False, stop=lambda s: jnp.all(s.done), trace_fn=lambda s, info: None)
        interrupted = out.status == "interrupted"
        outcome = jax.vmap(_lm_outcome, (0, None, None))(out.state, mid, half)
        done = np.ones(chunk, dtype=bool) if not interrupted else np.asarray(out.state.done)
        outputs.append([np.asarray(o)[:n_real] for o in outcome] + [done[:n_real]])
    return [np.concatenate([o[k] for o in outputs]) for k in range(7)]


def _lm_failure(problem: AbstractProblem, z0: np.ndarray, what: str) -> str:
    """Why a Levenberg-Marquardt start ended with a non-finite loss, in words."""
    where = "levenberg_marquardt_batch"
    r0 = np.asarray(problem.residuals(jnp.asarray(z0)))
    why = point_failure(problem, z0, r0, where, what)
    if why is None:
        why = jacobian_failure(problem, z0, np.asarray(problem.jacobian(jnp.asarray(z0))), where, what)
    return why or (f"{where}: the iteration from {what} = {problem.estimate_dict(z0)} reached a point "
                   "where the loss is not finite (a failed solve, an overflow or a NaN Jacobian)")


def _lm_problem_algorithm(problem, mid, half, rtol, atol) -> Algorithm:
    """`levenberg_marquardt_algorithm` on ``u -> problem.residuals(mid + half sin(u))``, vmapped."""
    def residual_fn(u):
        return problem.residuals(mid + half * jnp.sin(u))

    return vmap_chains(levenberg_marquardt_algorithm(residual_fn, problem.n_free, rtol=rtol, atol=atol))


@eqx.filter_jit
def _lm_init(problem, mid, half, rtol, atol, u0s):
    return _lm_problem_algorithm(problem, mid, half, rtol, atol).init(u0s)


@eqx.filter_jit
def _lm_step(problem, mid, half, rtol, atol, states):
    """One vmapped step, compiled once per problem structure (cached across calls)."""
    return _lm_problem_algorithm(problem, mid, half, rtol, atol).step(states)


def _lm_outcome(state: LevenbergMarquardtState, mid, half):
    """Final z, loss, flags and step counts of one start, as optimistix's ``least_squares`` reports them."""
    running = (state.result == optx.RESULTS.successful) & jnp.logical_not(state.terminate)
    result = optx.RESULTS.where(running, optx.RESULTS.nonlinear_max_steps_reached, state.result)
    residual = state.solver_state.f_info.residual  # at the last accepted point, i.e. at u
    return (mid + half * jnp.sin(state.u), jnp.mean(residual**2),
            result == optx.RESULTS.successful, result == optx.RESULTS.nonlinear_max_steps_reached,
            state.n_steps, state.solver_state.num_accepted_steps)


# --- shared helpers (also used by global_search) ---------------------------------------------
def _inside(problem: AbstractProblem, z) -> tuple[np.ndarray, np.ndarray]:
    """``(theta_internal, theta)`` clipped into the box against round-off of the maps."""
    space = problem.space
    z = np.clip(np.asarray(z, dtype=np.float64), space.lower_internal, space.upper_internal)
    theta = np.clip(np.asarray(space.to_physical(jnp.asarray(z))), space.lower, space.upper)
    return z, theta


def _mean_square(r) -> float:
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported, not warned
        return float(np.mean(np.square(np.asarray(r))))


def _condition(singular_values: np.ndarray) -> float:
    if singular_values.size == 0:
        return math.nan
    if singular_values[-1] <= 0:
        return math.inf
    return float(singular_values[0] / singular_values[-1])


