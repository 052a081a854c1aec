"""Extended Kalman filter with the parameters appended to the state (joint estimation).

The baseline of the IMPU comparison (Kessels et al. 2023, §5, Fig. 19), after Blanchard,
Sandu & Sandu (2010): the unknown parameters join the ODE state, ``z = [x, φ]`` with
``θ = g(φ)``, and one discrete-time extended Kalman filter runs over the measurement times
``t_1 < t_2 < ...`` (textbook EKF, e.g. Simon, *Optimal State Estimation*, 2006, §13.2):

    predict   z⁻_k = f(z⁺_{k-1}),                 F_k = ∂f/∂z (z⁺_{k-1})
              P⁻_k = F_k P⁺_{k-1} F_kᵀ + Q_k
    update    ŷ_k = h(z⁻_k),  H_k = ∂h/∂z (z⁻_k),  v_k = y_k − ŷ_k
              S_k = H_k P⁻_k H_kᵀ + R_k,           K_k = P⁻_k H_kᵀ S_k⁻¹
              z⁺_k = z⁻_k + K_k v_k
              P⁺_k = (I − K_k H_k) P⁻_k (I − K_k H_k)ᵀ + K_k R_k K_kᵀ     (Joseph form)

For a jcalib model, ``f`` propagates the state from ``t_{k-1}`` to ``t_k`` with **one
diffrax solve per interval**, started from the current state estimate (`propagate_state`,
the model's own vector field, solver and step-size controller), and keeps φ constant
(random walk: its only change is the process noise); ``h`` is the model's ``observe``.
``F`` and ``H`` come from forward-mode autodiff (``jax.jacfwd``; the solve uses
``adjoint=diffrax.ForwardMode()``), so they are the exact derivatives of the discretised
solve, not finite differences.

Parameter coordinates (``parameters=``):

- ``"log"`` (default): φ = log θ. Keeps θ positive whatever the update does, and puts the
  parameter block of ``P`` on a relative scale (a standard deviation of 0.05 is 5 %), so it
  is commensurate with the state block (tire stiffnesses of 1e5 N/m next to deflections of
  1e-2 m would give ``P`` a condition number of ~1e14 in physical units). Needs θ > 0.
- ``"internal"``: the `ParameterSpace`'s internal coordinates (log for log-scale parameters,
  physical otherwise).
- ``"physical"``: φ = θ.

Bounds are not enforced (the filter may leave the box; `EKFResult.outside_bounds` says so).

Linearisation bias. Started far from the truth, the first updates linearise over a wide range
and the filter may settle on a slightly biased estimate with a covariance that no longer
covers it (roll_plane from the nominal stiffnesses, 4-8 % off, on noise-free data: -0.21 %
and +0.08 %, reported sd 0.07 % and 0.02 %; started 0.1 % off it ends within 1e-6;
experiments/roll_plane_impu_vs_ekf.py). Running the filter again from its estimate (a
second pass) removes most of such a bias.

Noise. ``Q`` is the covariance of the process noise **per unit time** of the augmented
state: the interval ``[t_{k-1}, t_k]`` adds ``Q (t_k − t_{k-1})`` (the first-order
discretisation of white noise, exact for the parameters' random walk); a callable
``Q(t0, t1) -> Q_k`` gives the discrete covariance directly. ``R`` is the measurement-noise
covariance, a matrix, one per measurement time, or a callable ``R(t, ŷ) -> R_k`` of the
predicted output: `RelativeMeasurementNoise` is the relative noise of the IMPU paper
(σ = 1 % of the value), evaluated at the prediction because the noise-free value is unknown.
Missing measurements (a mask) are skipped entry by entry: their rows of ``H`` and entries of
``v`` are zeroed and their ``R`` block replaced by the identity, so they change nothing.

The filter is a `jcalib.algorithm.Algorithm` over a sequence of measurements
(`extended_kalman_filter`): ``init(mean, covariance, t0) -> state`` and ``step(state) ->
(state, info)``, one predict-update per measurement time (``state.index`` counts them);
`run_ekf` builds it for a model, drives it with `jcalib.algorithm.run` (one compiled scan)
and returns an `EKFResult`.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jax.numpy as jnp
    >>> import jcalib
    >>> from jcalib.models.roll_plane import P_REF
    >>> model = jcalib.models.get("roll_plane")
    >>> data = jcalib.synthetic_measurements(jax.random.key(0), model, jnp.asarray(P_REF), 0.01)
    >>> result = run_ekf(model, data, model.parameters.nominal,
    ...                  R=RelativeMeasurementNoise(relative=0.01, floor=1e-6))
    >>> result.theta.shape
    (2,)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jcalib.algorithm import Algorithm, run
from jcalib.data import Measurements
from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractModel, SimulationError, SolveStatus
from jcalib.solve import solve

__all__ = [
    "PARAMETER_COORDINATES",
    "EKFInfo",
    "EKFResult",
    "EKFState",
    "RelativeMeasurementNoise",
    "augmented_covariance",
    "extended_kalman_filter",
    "propagate_state",
    "run_ekf",
]

PARAMETER_COORDINATES = ("log", "internal", "physical")

INITIAL_STATE_SD = 1e-9
"""Default standard deviation of the initial ODE state (in the solver's state units): the
experiment fixes the initial state (a jcalib model computes it from θ), so it is treated as
known; the tiny variance only keeps ``P0`` positive definite."""

_SYMMETRY_RTOL = 1e-10  # covariance inputs: |C - Cᵀ| <= rtol max|C|
_PSD_RTOL = 1e-12  # Q: smallest eigenvalue >= -rtol * largest


# --- the filter ---------------------------------------------------------------------------------
class EKFState(NamedTuple):
    """Filter state after the update at time ``t``.

    Attributes:
        t: time of the last update (``t0`` before the first).
        mean: ``z⁺ = [x, φ]``, ``(n_z,)``.
        covariance: ``P⁺``, ``(n_z, n_z)``.
        log_likelihood: sum of the innovations' Gaussian log densities so far (the filter's
            prediction-error log likelihood).
        index: measurements processed so far (the next step uses measurement ``index``).
    """

    t: Float[Array, ""]
    mean: Float[Array, " n_z"]
    covariance: Float[Array, "n_z n_z"]
    log_likelihood: Float[Array, ""]
    index: Int[Array, ""]


class EKFInfo(NamedTuple):
    """Diagnostics of one predict-update step.

    Attributes:
        predicted_output: ``ŷ_k = h(z⁻_k)``, ``(n_y,)``.
        innovation: ``v_k = y_k − ŷ_k`` (0 for missing entries), ``(n_y,)``.
        innovation_covariance: ``S_k``, ``(n_y, n_y)`` (identity rows for missing entries).
        normalized_innovation_squared: ``v_kᵀ S_k⁻¹ v_k`` (χ² with ``n_measured`` degrees of
            freedom when the filter is consistent).
        log_likelihood: the step's ``log N(v_k; 0, S_k)``.
        n_measured: measured entries at this time.
        finite: whether the propagation, both Jacobians (F and H) and the update gave
            finite numbers (a failed solve gives NaN values and a NaN F, never a zero F).
    """

    predicted_output: Float[Array, " n_y"]
    innovation: Float[Array, " n_y"]
    innovation_covariance: Float[Array, "n_y n_y"]
    normalized_innovation_squared: Float[Array, ""]
    log_likelihood: Float[Array, ""]
    n_measured: Float[Array, ""]
    finite: Bool[Array, ""]


def extended_kalman_filter(
    transition_fn: Callable[[Float[Array, " n_z"], Float[Array, ""], Float[Array, ""]], Float[Array, " n_z"]],
    observation_fn: Callable[[Float[Array, " n_z"], Float[Array, ""]], Float[Array, " n_y"]],
    process_noise: Float[ArrayLike, "n_z n_z"] | Callable,
    measurement_noise: Float[ArrayLike, "n_y n_y"] | Float[ArrayLike, "n_times n_y n_y"] | Callable,
    ts: Float[ArrayLike, " n_times"],
    ys: Float[ArrayLike, "n_times n_y"],
    masks: Bool[ArrayLike, "n_times n_y"] | None = None,
) -> Algorithm:
    """The discrete-time extended Kalman filter (module doc) over the measurements ``ys`` at ``ts``.

    Args:
        transition_fn: ``f(z, t0, t1) -> z``, the state at ``t1`` from the state ``z`` at
            ``t0``; must be differentiable by ``jax.jacfwd`` and return NaN when it fails.
        observation_fn: ``h(z, t) -> y``, ``(n_y,)``.
        process_noise: ``Q`` per unit time, ``(n_z, n_z)`` (the interval adds
            ``Q (t1 − t0)``), or a callable ``(t0, t1) -> Q_k``.
        measurement_noise: ``R``, ``(n_y, n_y)``, one per measurement time ``(n_times, n_y,
            n_y)``, or a callable ``(t, ŷ) -> R_k`` of the predicted output.
        ts: measurement times, non-decreasing, ``>= t0`` of ``init``.
        ys: measurements, ``(n_times, n_y)`` (entries outside ``masks`` may hold anything
            finite).
        masks: boolean ``(n_times, n_y)``, the measured entries (default: all).

    Returns:
        A deterministic `jcalib.algorithm.Algorithm`: ``init(mean, covariance, t0) ->
        EKFState`` and ``step(state) -> (EKFState, EKFInfo)``, the predict-update with
        measurement ``state.index``. Both are pure and jit-able; run ``n_times`` steps, e.g.
        ``jcalib.algorithm.run(None, ekf, ekf.init(z0, p0, t0), n_times)``.

    Long for its documented options; the body is 63 lines.
    """
    ts = jnp.asarray(ts)
    ys = jnp.asarray(ys)
    masks = jnp.ones(ys.shape, dtype=bool) if masks is None else jnp.asarray(masks, dtype=bool)
    if callable(process_noise):
        q_fn = process_noise
    else:
        q_density = jnp.asarray(process_noise)

        def q_fn(t0, t1):
            return q_density * (t1 - t0)

    if callable(measurement_noise):
        def r_fn(k, t, y_predicted):
            return measurement_noise(t, y_predicted)
    else:
        r_matrix = jnp.asarray(measurement_noise)

        def r_fn(k, t, y_predicted):
            return r_matrix[k] if r_matrix.ndim == 3 else r_matrix

    def init(mean, covariance, t0) -> EKFState:
        mean = jnp.asarray(mean)
        return EKFState(t=jnp.asarray(t0, dtype=mean.dtype), mean=mean,
                        covariance=jnp.asarray(covariance, dtype=mean.dtype),
                        log_likelihood=jnp.zeros((), dtype=mean.dtype), index=jnp.asarray(0))

    def step(state: EKFState) -> tuple[EKFState, EKFInfo]:
        dtype = state.mean.dtype
        k = state.index
        t = jnp.asarray(ts[k], dtype=dtype)
        y = jnp.asarray(ys[k], dtype=dtype)
        mask = masks[k]
        # predict: z⁻ = f(z⁺), P⁻ = F P⁺ Fᵀ + Q
        z_prior, jac_f = _value_and_jacfwd(lambda z: transition_fn(z, state.t, t), state.mean)
        p_prior = _symmetric(jac_f @ state.covariance @ jac_f.T + q_fn(state.t, t))
        # update
        y_hat, jac_h = _value_and_jacfwd(lambda z: observation_fn(z, t), z_prior)
        jac_h = jnp.where(mask[:, None], jac_h, 0.0)
        innovation = jnp.where(mask, y - y_hat, 0.0)
        both = mask[:, None] & mask[None, :]
        r = jnp.where(both, r_fn(k, t, y_hat), 0.0) + jnp.diag(jnp.where(mask, 0.0, 1.0).astype(dtype))
        s = _symmetric(jac_h @ p_prior @ jac_h.T + r)
        chol = jnp.linalg.cholesky(s)
        gain = jax.scipy.linalg.cho_solve((chol, True), jac_h @ p_prior).T  # P⁻ Hᵀ S⁻¹ (P⁻, S symmetric)
        z_post = z_prior + gain @ innovation
        i_kh = jnp.eye(z_prior.shape[0], dtype=dtype) - gain @ jac_h
        p_post = _symmetric(i_kh @ p_prior @ i_kh.T + gain @ r @ gain.T)
        whitened = jax.scipy.linalg.solve_triangular(chol, innovation, lower=True)
        nis = jnp.sum(whitened**2)
        n_measured = jnp.sum(mask).astype(dtype)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))
        step_ll = -0.5 * (nis + log_det + n_measured * math.log(2.0 * math.pi))
        finite = (jnp.all(jnp.isfinite(z_post)) & jnp.all(jnp.isfinite(p_post))
                  & jnp.isfinite(step_ll) & jnp.all(jnp.isfinite(jac_f))
                  & jnp.all(jnp.isfinite(jac_h)))
        new = EKFState(t=t, mean=z_post, covariance=p_post,
                       log_likelihood=state.log_likelihood + step_ll, index=k + 1)
        info = EKFInfo(predicted_output=y_hat, innovation=innovation, innovation_covariance=s,
                       normalized_innovation_squared=nis, log_likelihood=step_ll,
                       n_measured=n_measured, finite=finite)
        return new, info

    return Algorithm(init, step)


def _value_and_jacfwd(fn, x):
    """``fn(x)`` and its forward-mode Jacobian in one pass."""
    def both(v):
        out = fn(v)
        return out, out

    jac, value = jax.jacfwd(both, has_aux=True)(x)
    return value, jac


def _symmetric(matrix):
    return 0.5 * (matrix + matrix.T)


# --- jcalib models ------------------------------------------------------------------------------
def propagate_state(
    model: AbstractModel,
    x: Float[Array, " n_states"],
    theta: Float[Array, " n_params"],
    t0: Float[ArrayLike, ""],
    t1: Float[ArrayLike, ""],
) -> Float[Array, " n_states"]:
    """The model's state at ``t1`` from the state ``x`` at ``t0`` (one diffrax solve).

    Uses the model's vector field (inputs included), solver, step-size controller (so its
    ``jump_ts``), ``dt0`` and ``max_steps``, with ``adjoint=diffrax.ForwardMode()`` so that
    ``jax.jacfwd`` differentiates through it. ``t1 == t0`` returns ``x``.

    Args:
        model: any `AbstractModel`.
        x: state at ``t0`` in the solver's state coordinates, ``(n_states,)``.
        theta: physical parameters, ``(n_params,)``.
        t0, t1: start and end time, ``t0 <= t1``.

    Returns:
        The state at ``t1``; NaN if the solve failed (never throws), and so are its
        derivatives, so the filter's transition Jacobian of a failed solve is NaN, never 0.
    """
    sol = solve(model.term(), model.solver, t0, t1, model.dt0, x, theta, dfx.SaveAt(t1=True), model.controller,
                dfx.ForwardMode(), model.max_steps)
    # NaN value *and* NaN derivatives on failure: ``jnp.where(ok, y, nan)`` alone would give
    # the filter a zero transition Jacobian F for a failed solve (read as "no dynamics")
    failed_to_nan = jnp.where(sol.result == dfx.RESULTS.successful, 1.0, jnp.nan).astype(x.dtype)
    return sol.ys[-1] * failed_to_nan


class RelativeMeasurementNoise(eqx.Module):
    """``R(t, ŷ) = diag((relative |ŷ| + floor)²)``: relative Gaussian noise at the prediction.

    The IMPU paper's measurement noise is zero-mean Gaussian with a standard deviation of
    1 % of the noise-free value (Kessels 2023, §5); the filter does not know that value and
    uses its prediction ``ŷ``; ``floor`` (in the outputs' units) keeps ``R`` positive
    definite where ``ŷ`` crosses zero (roll_plane: `jcalib.models.roll_plane.noise_sigma`
    uses relative = 0.01, floor = 1e-6).

    Attributes:
        relative: relative standard deviation (> 0).
        floor: absolute standard deviation added (> 0).
    """

    relative: float = eqx.field(static=True)
    floor: float = eqx.field(static=True)

    def __init__(self, relative: float = 0.01, floor: float = 1e-6):
        for name, value in (("relative", relative), ("floor", floor)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"RelativeMeasurementNoise: {name} must be a positive finite number; "
                                 f"got {value!r}")
        self.relative = float(relative)
        self.floor = float(floor)

    def __call__(self, t, y_predicted):
        return jnp.diag((self.relative * jnp.abs(y_predicted) + self.floor) ** 2)


def augmented_covariance(state: Float[ArrayLike, "..."], parameters: Float[ArrayLike, "..."]) -> np.ndarray:
    """Block-diagonal covariance of ``z = [x, φ]`` from a state block and a parameter block.

    Args:
        state: variances ``(n_states,)`` or a covariance ``(n_states, n_states)``.
        parameters: variances ``(n_params,)`` or a covariance ``(n_params, n_params)``, in
            the filter's parameter coordinates (log θ by default: a variance of 0.05² is a
            5 % standard deviation).

    Returns:
        ``(n_states + n_params, n_states + n_params)`` float64 NumPy array.

    Raises:
        ValueError: a block that is neither 1-D nor square 2-D.
    """
    blocks = []
    for name, value in (("state", state), ("parameters", parameters)):
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 1:
            arr = np.diag(arr)
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise ValueError(f"augmented_covariance: {name} must be variances (n,) or a square matrix "
                             f"(n, n); got shape {np.shape(value)}")
        blocks.append(arr)
    n_x, n_p = blocks[0].shape[0], blocks[1].shape[0]
    out = np.zeros((n_x + n_p, n_x + n_p))
    out[:n_x, :n_x] = blocks[0]
    out[n_x:, n_x:] = blocks[1]
    return out


class _Coordinates(eqx.Module):
    """φ <-> θ maps of the filter's parameter coordinates."""

    kind: str = eqx.field(static=True)
    log: tuple[bool, ...] = eqx.field(static=True)

    def to_physical(self, phi):
        if self.kind == "physical":
            return phi
        return jnp.where(jnp.asarray(self.log), jnp.exp(phi), phi)

    def to_filter(self, theta):
        if self.kind == "physical":
            return theta
        return jnp.where(jnp.asarray(self.log), jnp.log(jnp.abs(theta)), theta)


class EKFResult(eqx.Module):
    """Output of `run_ekf`: the parameter trajectory, its uncertainty and the innovations.

    Index 0 of the trajectories is the prior (at ``t0``), index ``k`` the estimate after
    the update at ``ts[k - 1]``.

    Attributes:
        names, units: parameter names and units.
        parameter_coordinates: ``"log"``, ``"internal"`` or ``"physical"`` (module doc).
        ts: ``(n_times + 1,)``: ``t0`` followed by the measurement times.
        theta: final estimate, physical units, ``(n_params,)``.
        theta_trajectory: physical estimates, ``(n_times + 1, n_params)``.
        parameters_filter: φ trajectory in the filter's coordinates, same shape.
        parameter_covariance: the φ block of ``P⁺``, ``(n_times + 1, n_params, n_params)``.
        theta_sd: standard deviation of the physical estimate by the delta method
            (``θ sd(log θ)`` for log coordinates), ``(n_times + 1, n_params)``.
        state_trajectory: ODE state estimates, ``(n_times + 1, n_states)``.
        state_sd: their standard deviations, same shape.
        predicted_outputs: ``ŷ_k`` before each update, ``(n_times, n_outputs)``.
        innovations: ``v_k``, ``(n_times, n_outputs)`` (0 where not measured).
        innovation_covariances: ``S_k``, ``(n_times, n_outputs, n_outputs)``.
        normalized_innovations_squared: ``v_kᵀ S_k⁻¹ v_k``, ``(n_times,)``.
        log_likelihood: total prediction-error log likelihood.
        n_measured: measured entries per time, ``(n_times,)``.
        success: every step gave finite numbers (no failed solve).
        outside_bounds: whether the final estimate lies outside the parameter box.
        wall_time_s: seconds of the run (compilation included on the first call).
    """

    names: tuple[str, ...]
    units: tuple[str, ...]
    parameter_coordinates: str
    ts: np.ndarray
    theta: np.ndarray
    theta_trajectory: np.ndarray
    parameters_filter: np.ndarray
    parameter_covariance: np.ndarray
    theta_sd: np.ndarray
    state_trajectory: np.ndarray
    state_sd: np.ndarray
    predicted_outputs: np.ndarray
    innovations: np.ndarray
    innovation_covariances: np.ndarray
    normalized_innovations_squared: np.ndarray
    log_likelihood: float
    n_measured: np.ndarray
    success: bool
    outside_bounds: bool
    wall_time_s: float = float("nan")

    def relative_error(self, truth: Float[ArrayLike, " n_params"], step: int = -1) -> np.ndarray:
        """``|θ_step − truth| / |truth|`` per parameter (default: the final estimate)."""
        truth = np.asarray(truth, dtype=np.float64)
        if truth.shape != self.theta.shape:
            raise ValueError(f"relative_error: truth must have shape {self.theta.shape}; got {truth.shape}")
        return np.abs(self.theta_trajectory[step] - truth) / np.abs(truth)

    def to_dict(self) -> dict:
        """JSON-able summary (trajectories included; non-finite numbers become None)."""
        return to_jsonable({
            "method": "ekf", "names": list(self.names), "units": list(self.units),
            "parameter_coordinates": self.parameter_coordinates,
            "theta": dict(zip(self.names, self.theta.tolist())),
            "theta_sd": dict(zip(self.names, self.theta_sd[-1].tolist())),
            "ts": self.ts, "theta_trajectory": self.theta_trajectory, "theta_sd_trajectory": self.theta_sd,
            "parameter_covariance": self.parameter_covariance[-1],
            "normalized_innovations_squared": self.normalized_innovations_squared,
            "mean_nis_per_measurement": float(np.sum(self.normalized_innovations_squared)
                                              / max(np.sum(self.n_measured), 1.0)),
            "log_likelihood": self.log_likelihood, "success": self.success,
            "outside_bounds": self.outside_bounds, "wall_time_s": self.wall_time_s,
        })


def _model_filter(model, coords, q, r, ts, ys, masks) -> Algorithm:
    """`extended_kalman_filter` for a jcalib model with the parameters appended to the state;
    its step is one compiled call, cached across calls with the same model and shapes (so
    `run_ekf` drives it with ``run(..., compiled=False)`` and compiles once per model)."""
    ekf = _traced_model_filter(model, coords, q, r, ts, ys, masks)
    ts, ys, masks = jnp.asarray(ts), jnp.asarray(ys), jnp.asarray(masks)

    def step(state):
        return _model_filter_step(model, coords, q, r, ts, ys, masks, state)

    return Algorithm(ekf.init, step)


@eqx.filter_jit
def _model_filter_step(model, coords, q, r, ts, ys, masks, state):
    return _traced_model_filter(model, coords, q, r, ts, ys, masks).step(state)


def _traced_model_filter(model, coords, q, r, ts, ys, masks) -> Algorithm:
    n_x = len(model.state_names)

    def transition(z, t_start, t_end):
        theta = coords.to_physical(z[n_x:])
        return jnp.concatenate([propagate_state(model, z[:n_x], theta, t_start, t_end), z[n_x:]])

    def observation(z, t):
        return model.observe(t, z[:n_x], coords.to_physical(z[n_x:]))

    return extended_kalman_filter(transition, observation, q, r, ts, ys, masks)


def run_ekf(
    model: AbstractModel,
    measurements,
    theta0: Float[ArrayLike, " n_params"],
    P0: Float[ArrayLike, "n_z n_z"] | None = None,  # noqa: N803 (the filter's textbook names)
    Q: Float[ArrayLike, "n_z n_z"] | Callable | None = None,  # noqa: N803
    R: Float[ArrayLike, "n_y n_y"] | Callable | None = None,  # noqa: N803
    *,
    parameters: str = "log",
    x0: Float[ArrayLike, " n_states"] | None = None,
    throw: bool = True,
) -> EKFResult:
    """Estimate a model's parameters with the augmented-state EKF (module doc).

    Args:
        model: any `AbstractModel`; all its parameters are estimated (use a model whose
            other constants are fixed fields).
        measurements: a `jcalib.Measurements` (times, values, mask) or an array
            ``(n_times, n_outputs)`` at ``model.ts``. The filter starts at the experiment's
            ``t0``; measurement times must be ``>= t0`` and non-decreasing.
        theta0: initial parameter guess, physical units, ``(n_params,)``.
        P0: covariance of the initial augmented state ``[x0, φ0]``, ``(n_z, n_z)`` with
            ``n_z = n_states + n_params``, positive definite (see `augmented_covariance`).
            Default: states `INITIAL_STATE_SD`², parameters the variance of a uniform
            distribution over the box, ``(upper − lower)²/12`` in the filter's coordinates.
        Q: process noise of ``z`` per unit time, ``(n_z, n_z)``, symmetric positive
            semi-definite (its parameter block is the random walk of φ), or a callable
            ``(t0, t1) -> Q_k``. Default: zero (exact model, constant parameters).
        R: measurement noise, ``(n_outputs, n_outputs)`` or ``(n_times, n_outputs,
            n_outputs)``, positive definite, or a callable ``(t, ŷ) -> R_k`` such as
            `RelativeMeasurementNoise`. Required.
        parameters: coordinates of φ: ``"log"`` (default), ``"internal"`` or ``"physical"``.
        x0: initial ODE state (default ``model.initial_state(theta0)``).
        throw: raise `SimulationError` when a step gives non-finite numbers (a failed solve);
            with False, check ``result.success``.

    Returns:
        An `EKFResult`.

    Raises:
        ValueError: wrong shapes, NaN/inf inputs (NaN measurements outside the mask),
            measurement times before ``t0`` or decreasing, covariances that are not
            symmetric positive (semi-)definite, non-positive ``theta0`` with log
            coordinates, unknown ``parameters``, missing ``R``.
        SimulationError: a step failed and ``throw`` is True.
        KeyboardInterrupt: a Ctrl-C during the filter (it names how far it got; a partial
            trajectory is not returned as an estimate).

    Long for its documented options; the body is 75 lines.
    """
    start = time.perf_counter()
    if not jax.config.jax_enable_x64:
        raise ValueError("run_ekf needs float64: call jax.config.update('jax_enable_x64', True)")
    if parameters not in PARAMETER_COORDINATES:
        raise ValueError(f"run_ekf: parameters must be one of {PARAMETER_COORDINATES}; got {parameters!r}")
    space = model.parameters
    n_p, n_y = space.n_params, model.n_outputs
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.shape != (n_p,) or not np.all(np.isfinite(theta0)):
        raise ValueError(f"run_ekf: theta0 must be {n_p} finite numbers ({', '.join(space.names)}); got "
                         f"{theta0.tolist() if theta0.size < 20 else theta0.shape}")
    log = tuple(True for _ in range(n_p)) if parameters == "log" else tuple(bool(b) for b in space.log_scale)
    if parameters != "physical" and np.any(theta0[np.asarray(log)] <= 0):
        raise ValueError(f"run_ekf: theta0 must be positive for {parameters} coordinates; got "
                         f"{space.to_dict(theta0)} (use parameters='physical' for signed parameters)")
    coords = _Coordinates(parameters, log)

    ts, ys, masks = _measurements(model, measurements)
    t0 = float(model.experiment.t0)
    if ts[0] < t0:
        raise ValueError(f"run_ekf: measurement times must be >= the experiment's t0 = {t0}; first time is "
                         f"{ts[0]}")

    x0 = _initial_state(model, x0, theta0)
    n_x = len(model.state_names)
    n_z = n_x + n_p
    phi0 = np.asarray(coords.to_filter(jnp.asarray(theta0)))
    if P0 is None:
        lo = np.asarray(coords.to_filter(jnp.asarray(space.lower)))
        hi = np.asarray(coords.to_filter(jnp.asarray(space.upper)))
        P0 = augmented_covariance(np.full(n_x, INITIAL_STATE_SD**2), (hi - lo) ** 2 / 12.0)
    p0 = _check_covariance("P0", P0, n_z, definite=True)
    if Q is None:
        Q = np.zeros((n_z, n_z))
    q = Q if callable(Q) else _check_covariance("Q", Q, n_z, definite=False)
    r = _measurement_noise(R, ts.size, n_y)
    z0 = jnp.asarray(np.concatenate([x0, phi0]))
    ekf = _model_filter(model, coords, q if callable(q) else jnp.asarray(q), r, ts, ys, masks)
    state = ekf.init(z0, jnp.asarray(p0), t0)
    out = run(None, ekf, state, ts.size, compiled=False, trace_fn=lambda s, info: (info, s.mean, s.covariance))
    if out.status == "interrupted":  # a filter's estimate is the one after its last measurement
        raise KeyboardInterrupt(f"run_ekf: interrupted after {out.n_steps} of {ts.size} measurement times")
    final, (infos, means, covs) = out.state, out.trace
    means = np.concatenate([np.asarray(state.mean)[None], np.asarray(means)])
    covs = np.concatenate([np.asarray(state.covariance)[None], np.asarray(covs)])
    finite = np.asarray(infos.finite)
    phi = means[:, n_x:]
    theta_traj = np.asarray(coords.to_physical(jnp.asarray(phi)))
    p_phi = covs[:, n_x:, n_x:]
    sd_phi = np.sqrt(np.clip(np.diagonal(p_phi, axis1=1, axis2=2), 0.0, None))
    scale = np.where(np.asarray(log) & (parameters != "physical"), theta_traj, 1.0)
    state_sd = np.sqrt(np.clip(np.diagonal(covs[:, :n_x, :n_x], axis1=1, axis2=2), 0.0, None))
    success = bool(np.all(finite))
    theta = theta_traj[-1]
    result = EKFResult(
        names=space.names, units=space.units, parameter_coordinates=parameters,
        ts=np.concatenate([[t0], ts]), theta=theta, theta_trajectory=theta_traj, parameters_filter=phi,
        parameter_covariance=p_phi, theta_sd=np.abs(scale) * sd_phi, state_trajectory=means[:, :n_x],
        state_sd=state_sd, predicted_outputs=np.asarray(infos.predicted_output),
        innovations=np.asarray(infos.innovation), innovation_covariances=np.asarray(infos.innovation_covariance),
        normalized_innovations_squared=np.asarray(infos.normalized_innovation_squared),
        log_likelihood=float(final.log_likelihood), n_measured=np.asarray(infos.n_measured),
        success=success,
        outside_bounds=bool(np.any((theta < space.lower) | (theta > space.upper))),
        wall_time_s=time.perf_counter() - start,
    )
    if throw and not success:
        first = int(np.flatnonzero(~finite)[0])
        raise SimulationError(
            f"run_ekf: the filter step at t = {ts[first]} gave non-finite numbers (failed solve or "
            f"covariance breakdown); parameters before it: {space.to_dict(theta_traj[first])} (pass "
            "throw=False to get the result with NaN)",
            np.asarray(infos.predicted_output)[None], np.array([SolveStatus.NONFINITE]),
        )
    return result


def _initial_state(model: AbstractModel, x0, theta0: np.ndarray) -> np.ndarray:
    """``x0`` (default: the model's initial state at ``theta0``), checked."""
    if x0 is None:
        x0 = np.asarray(model.initial_state(jnp.asarray(theta0)))
    x0 = np.asarray(x0, dtype=np.float64)
    n_x = len(model.state_names)
    if x0.shape != (n_x,) or not np.all(np.isfinite(x0)):
        raise ValueError(f"run_ekf: x0 must be {n_x} finite numbers ({', '.join(model.state_names)}); got "
                         f"shape {x0.shape}")
    return x0


def _measurement_noise(R, n_times: int, n_y: int):  # noqa: N803 (the filter's textbook name)
    """``R`` checked: a callable as given, else a covariance ``(n_y, n_y)`` or one per time
    ``(n_times, n_y, n_y)`` as a JAX array."""
    if R is None:
        raise ValueError("run_ekf: R (the measurement noise) is required: a covariance (n_outputs, n_outputs), one "
                         "per time (n_times, n_outputs, n_outputs), or a callable such as "
                         "RelativeMeasurementNoise(relative=0.01)")
    if callable(R):
        return R
    r_np = np.asarray(R, dtype=np.float64)
    if r_np.ndim == 3:
        if r_np.shape[0] != n_times:
            raise ValueError(f"run_ekf: R per time must have shape (n_times={n_times}, {n_y}, {n_y}); got "
                             f"{r_np.shape}")
        return jnp.asarray(np.stack([_check_covariance(f"R[{k}]", rk, n_y, definite=True)
                                     for k, rk in enumerate(r_np)]))
    return jnp.asarray(_check_covariance("R", r_np, n_y, definite=True))


def _measurements(model, measurements):
    """(ts, values, mask) as NumPy arrays, checked."""
    n_y = model.n_outputs
    if isinstance(measurements, Measurements):
        ts = np.asarray(measurements.ts, dtype=np.float64)
        ys = np.asarray(measurements.values, dtype=np.float64)
        masks = np.asarray(measurements.mask, dtype=bool)
    else:
        ys = np.asarray(measurements, dtype=np.float64)
        ts = np.asarray(model.ts, dtype=np.float64)
        masks = (np.ones(ys.shape, dtype=bool) if model.experiment.mask is None
                 else np.asarray(model.experiment.mask, dtype=bool))
        if ys.ndim != 2 or ys.shape[0] != ts.size:
            raise ValueError(f"run_ekf: measurements must have shape (n_times={ts.size}, n_outputs={n_y}) at "
                             f"model.ts; got {ys.shape} (pass a jcalib.Measurements for other times)")
    if ys.ndim != 2 or ys.shape[1] != n_y:
        raise ValueError(f"run_ekf: measurements must have {n_y} outputs ({', '.join(model.output_names)}); got "
                         f"shape {ys.shape}")
    if ts.size == 0 or np.any(~np.isfinite(ts)) or np.any(np.diff(ts) < 0):
        raise ValueError("run_ekf: measurement times must be finite and non-decreasing")
    bad = masks & ~np.isfinite(ys)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise ValueError(f"run_ekf: measurements contain NaN or inf at measured entries (time indices "
                         f"{rows[:10].tolist()}); mark missing entries with a mask (jcalib.Measurements)")
    ys = np.where(masks, ys, 0.0)
    return ts, ys, masks


def _check_covariance(name: str, value, n: int, *, definite: bool) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (n, n):
        raise ValueError(f"run_ekf: {name} must have shape ({n}, {n}); got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"run_ekf: {name} contains NaN or inf")
    if np.max(np.abs(arr - arr.T)) > _SYMMETRY_RTOL * max(np.max(np.abs(arr)), 1e-300):
        raise ValueError(f"run_ekf: {name} must be symmetric; max |{name} - {name}.T| = "
                         f"{np.max(np.abs(arr - arr.T)):.3g}")
    arr = 0.5 * (arr + arr.T)
    if definite:
        try:
            np.linalg.cholesky(arr)
        except np.linalg.LinAlgError:
            raise ValueError(f"run_ekf: {name} must be positive definite; its smallest eigenvalue is "
                             f"{np.linalg.eigvalsh(arr).min():.3g}") from None
    else:
        eig = np.linalg.eigvalsh(arr)
        if eig.min() < -_PSD_RTOL * max(eig.max(), 0.0):
            raise ValueError(f"run_ekf: {name} must be positive semi-definite; its smallest eigenvalue is "
                             f"{eig.min():.3g}")
    return arr
