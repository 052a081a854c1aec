"""Adaptation: what is computed *before* sampling to choose a sampler's scales, kept apart from
the samplers themselves (as blackjax keeps `window_adaptation` apart from its kernels).

- `prescaling`: the paper's diagonal step sizes P (Wulkow et al. 2021, Appendix A.2): target
  mean step lengths τ_i, a fraction of each parameter's prior range, and posterior-weighted
  mean gradients over 100 random draws give P_ii (eq. A26).
- Dual averaging of a global step-size factor towards a target acceptance rate
  (`dual_averaging_init`, `dual_averaging_update`; Hoffman & Gelman 2014, Alg. 5), used by the
  warm-up of `jcalib.bayes.mala.sample` and of the HMC/NUTS samplers (`jcalib.bayes.hmc`).
- `laplace_covariance`: C = (-∇²log π)⁻¹ at a point (the Laplace approximation), the dense
  preconditioner of MALA and the inverse mass matrix of HMC/NUTS. It works for every likelihood
  and prior, sampled noise levels included:

  - the Hessian is central differences of the *gradient* (2 n gradient evaluations in one
    vmapped batch, the same autodiff gradient the samplers use), symmetrised;
  - directions of small or negative curvature (flat directions the data do not determine,
    or a point that is not quite a mode) have their eigenvalues raised to 1/s_max², so that
    no direction gets a standard deviation above ``s_max`` (default: a tenth of the mean
    width of the box when ``bounds`` are given).

  Only the shape of C matters (correlations and relative scales): a warm-up adapts the global
  step.

The preconditioner *strategies* that call these (`Prescaled`, `DenseMetric`, `Laplace`) are in
`jcalib.bayes.preconditioning`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from jcalib._precision import as_float64
from jcalib.bayes._target import _evaluate_batch, _positive, _resolve_bounds, _resolve_target
from jcalib.parameters import ParameterSpace
from jcalib.problem import CalibrationProblem

__all__ = [
    "DualAveragingState",
    "Prescaling",
    "dual_averaging_init",
    "dual_averaging_update",
    "laplace_covariance",
    "prescaling",
    "step_sizes",
]

_N_PRESCALING_DRAWS = 100  # Wulkow 2021, Appendix A.2 step 2: "we always used n = 100"


class Prescaling(NamedTuple):
    """The prescaled step sizes and how they were obtained (Wulkow 2021, Appendix A.2).

    Attributes:
        step_sizes: the diagonal of P, eq. A26, ``(n_params,)``.
        tau: target mean step lengths τ_i, ``(n_params,)``.
        mean_abs_grad: posterior-weighted mean |∂S_X/∂θ_i| over the draws, eq. A22.
        draws: the points θ_k, ``(n_draws, n_params)``.
        weights: their normalised posterior weights π(θ_k)/Σπ (0 where invalid).
        n_valid: draws with a finite log density and gradient.
    """

    step_sizes: Float[Array, " n_params"]
    tau: Float[Array, " n_params"]
    mean_abs_grad: Float[Array, " n_params"]
    draws: Float[Array, "n_draws n_params"]
    weights: Float[Array, " n_draws"]
    n_valid: Int[Array, ""]


# --- prescaling (Appendix A.2) -----------------------------------------------------------------
def prescaling(
    key: PRNGKeyArray,
    logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]] | CalibrationProblem,
    bounds: tuple[Float[ArrayLike, " n_params"], Float[ArrayLike, " n_params"]] | ParameterSpace | None = None,
    *,
    fraction: float | Float[ArrayLike, " n_params"] = 0.02,
    n_draws: int = _N_PRESCALING_DRAWS,
    center: Float[ArrayLike, " n_params"] | None = None,
    spread: float = 0.1,
) -> Prescaling:
    """Step sizes P_ii of the prescaled MALA from target step lengths (Appendix A.2).

    1. τ_i = ``fraction`` × (upper_i - lower_i), the prior range in internal coordinates
       (log range for log-scale parameters).
    2. ``n_draws`` points θ_k: uniform in the box (default; the paper's "randomly from the
       parameter space"), or, with ``center``, θ_k ~ N(center, (spread (upper-lower))²)
       (useful when the posterior is so narrow that box draws barely see it).
    3. mean|∂_i S| = Σ_k w_k |∂_i S(θ_k)| with w_k ∝ π(θ_k) (eq. A22; draws with a
       -inf/NaN log density or a non-finite gradient get weight 0).
    4. P_ii = (τ_i / (1/√π + √(1/π + τ_i mean|∂_i S|)))², the positive root of
       P_ii mean|∂_i S| + 2√(P_ii/π) = τ_i (eqs. A23-A26, written without cancellation;
       mean|∂_i S| = 0 gives P_ii = π τ_i²/4).

    Args:
        key: a ``jax.random`` key for the draws.
        logdensity_fn: log π(θ) in internal coordinates, or a `CalibrationProblem` (its
            ``log_posterior``; then ``bounds`` defaults to its internal box).
        bounds: ``(lower, upper)`` in internal coordinates, or a `ParameterSpace` (its
            internal box); needed with a plain function.
        fraction: τ_i as a fraction of the range (scalar or per parameter, > 0); the
            paper used 1/50 and 1/200.
        n_draws: number of draws (the paper: 100).
        center: draw around this point (internal coordinates) instead of the box.
        spread: standard deviation of those draws as a fraction of the range.

    Returns:
        `Prescaling` with ``step_sizes`` (the diagonal of P) and the intermediate numbers.

    Raises:
        ValueError: missing or bad ``bounds``; ``fraction``, ``n_draws`` or ``spread`` not
            positive; ``center`` of the wrong shape; no draw with a finite log density and
            gradient.

    Example:
        >>> pre = prescaling(jax.random.key(0), lambda x: -0.5 * jnp.sum(x**2),
        ...                  (-jnp.ones(2), jnp.ones(2)), fraction=0.1)
        >>> pre.step_sizes.shape
        (2,)
    """
    logdensity_fn, space = _resolve_target(logdensity_fn, None, "prescaling")
    return _prescaling(key, logdensity_fn, bounds, space, fraction, n_draws, center, spread)[0]


def _prescaling(key, logdensity_fn, bounds, space, fraction, n_draws, center, spread, extra_points=None):
    """`prescaling`; ``extra_points`` (e.g. the chains' starts) are evaluated in the same
    compiled batch (their validity is returned second) but do not enter the weights."""
    lower, upper = _resolve_bounds(bounds, space, "prescaling")
    n = lower.size
    tau = _positive(fraction, n, "prescaling", "fraction") * (upper - lower)
    if not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ValueError(f"prescaling: n_draws must be a positive integer; got {n_draws!r}")
    if not (isinstance(spread, (int, float)) and spread > 0):
        raise ValueError(f"prescaling: spread must be a positive number; got {spread!r}")
    lo, width = jnp.asarray(lower), jnp.asarray(upper - lower)
    if center is None:
        draws = lo[None, :] + jax.random.uniform(key, (int(n_draws), n), dtype=jnp.float64) * width[None, :]
        where = f"uniform draws from the box {lower.tolist()} .. {upper.tolist()}"
    else:
        c = as_float64(center, "prescaling", "center")
        if c.shape != (n,):
            raise ValueError(f"prescaling: center must have shape ({n},); got shape {c.shape}")
        draws = c[None, :] + spread * width[None, :] * jax.random.normal(key, (int(n_draws), n),
                                                                          dtype=jnp.float64)
        where = f"draws around center={np.asarray(c).tolist()}"
    if extra_points is not None and extra_points.shape[1] != n:
        raise ValueError(
            f"prescaling: the starts have {extra_points.shape[1]} entries but the bounds {n}; pass bounds (or a "
            "space) for the same parameters"
        )
    n_extra = 0 if extra_points is None else int(extra_points.shape[0])
    points = draws if extra_points is None else jnp.concatenate([extra_points, draws])
    logdensity, grad, valid = _evaluate_batch(logdensity_fn, points)
    extra_valid, logdensity, grad, valid = valid[:n_extra], logdensity[n_extra:], grad[n_extra:], valid[n_extra:]
    n_valid = int(jnp.sum(valid))
    if n_valid == 0:
        raise ValueError(
            f"prescaling: the log density (or its gradient) is not finite at any of the "
            f"{n_draws} {where}; pass center= (a point where it is finite) or explicit step_sizes"
        )
    weights = jax.nn.softmax(jnp.where(valid, logdensity, -jnp.inf))
    mean_abs_grad = jnp.sum(weights[:, None] * jnp.abs(grad), axis=0)  # |∂S| = |∂ log π|
    tau_j = jnp.asarray(tau)
    root = tau_j / (1.0 / math.sqrt(math.pi) + jnp.sqrt(1.0 / math.pi + tau_j * mean_abs_grad))
    return Prescaling(root**2, tau_j, mean_abs_grad, draws, weights, jnp.asarray(n_valid)), extra_valid


def step_sizes(key: PRNGKeyArray, logdensity_fn, bounds=None, **kwargs) -> Float[Array, " n_params"]:
    """The diagonal of P from `prescaling` (same arguments); only the step sizes.

    Example:
        >>> p = step_sizes(jax.random.key(0), lambda x: -0.5 * jnp.sum(x**2),
        ...                (-jnp.ones(2), jnp.ones(2)), fraction=0.1)
    """
    return prescaling(key, logdensity_fn, bounds, **kwargs).step_sizes


# --- dual averaging -----------------------------------------------------------------------------
class DualAveragingState(NamedTuple):
    """Dual averaging of the log of a global step factor s (Hoffman & Gelman 2014, Alg. 5;
    blackjax's `dual_averaging_adaptation` written with float64 counters).

    Attributes:
        log_x: log s of the current warm-up step.
        log_x_avg: the averaged iterate, log s̄: frozen for sampling.
        step: the iteration count (from 1).
        avg_error: the running mean of (target - acceptance).
        mu: the shrinkage point μ = log(10 s_0).
    """

    log_x: Float[Array, ""]
    log_x_avg: Float[Array, ""]
    step: Float[Array, ""]
    avg_error: Float[Array, ""]
    mu: Float[Array, ""]


# Hoffman & Gelman 2014, §3.2.1: t0 = 10, γ = 0.05, κ = 0.75; μ = log(10 s_0).
_DA_T0, _DA_GAMMA, _DA_KAPPA = 10.0, 0.05, 0.75


def dual_averaging_update(da: DualAveragingState, target: float, rate) -> DualAveragingState:
    """One dual-averaging step after a warm-up transition with (mean) acceptance ``rate``.

    Args:
        da: the state (from `dual_averaging_init` or a previous update).
        target: the target acceptance rate in (0, 1).
        rate: the observed acceptance probability (e.g. the mean over chains).
    """
    reg = da.step + _DA_T0
    avg_error = (1.0 - 1.0 / reg) * da.avg_error + (target - rate) / reg
    log_x = da.mu - jnp.sqrt(da.step) / _DA_GAMMA * avg_error
    eta = da.step ** (-_DA_KAPPA)
    log_x_avg = eta * log_x + (1.0 - eta) * da.log_x_avg
    return DualAveragingState(log_x, log_x_avg, da.step + 1.0, avg_error, da.mu)


def dual_averaging_init(dtype) -> DualAveragingState:
    """The start: s = 1 (log s = 0) and μ = log(10 s_0) with s_0 = 1.

    Example:
        >>> da = dual_averaging_update(dual_averaging_init(jnp.float64), 0.6, 0.9)
        >>> bool(da.log_x > 0)  # accepted more than the target: the step grows
        True
    """
    zero = jnp.zeros((), dtype)
    return DualAveragingState(zero, zero, zero + 1.0, zero, zero + math.log(10.0))


# --- the Laplace covariance --------------------------------------------------------------------
def laplace_covariance(
    logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]],
    theta_internal: Float[ArrayLike, " n"],
    *,
    bounds: tuple[Float[ArrayLike, " n"], Float[ArrayLike, " n"]] | None = None,
    rel_step: float = 1e-4,
    max_sd: float | None = None,
) -> np.ndarray:
    """C = (-∇²log π)⁻¹ at ``theta_internal``, ``(n, n)``, symmetric positive definite.

    Args:
        logdensity_fn: log π in internal coordinates, a JAX function ``(n,) -> ()``.
        theta_internal: the point, ``(n,)``, float64.
        bounds: ``(lower, upper)`` internal box: sets the difference steps (``rel_step``
            times the width) and the default ``max_sd`` (a tenth of the mean width).
        rel_step: difference step relative to the box width (or to max(1, |θ_i|)).
        max_sd: largest standard deviation allowed in any direction (module doc);
            default as above, or 1e4 × the smallest curvature-based sd without bounds.

    Raises:
        ValueError: wrong shape; a non-finite gradient at a difference point (failed solve,
            outside the support: move the point inside or give a smaller ``rel_step``).
    """
    z = np.asarray(theta_internal, dtype=np.float64)
    if z.ndim != 1:
        raise ValueError(f"laplace_covariance: theta_internal must be 1-D; got shape {z.shape}")
    n = z.size
    if bounds is not None:
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), (n,)) for b in bounds)
        width = upper - lower
    else:
        width = np.maximum(1.0, np.abs(z))
    h = rel_step * width
    points = np.concatenate([z[None, :] + np.diag(h), z[None, :] - np.diag(h)])
    grads = np.asarray(_gradients(logdensity_fn, jnp.asarray(points)))
    if not np.all(np.isfinite(grads)):
        bad = sorted({int(i) % n for i in np.flatnonzero(~np.all(np.isfinite(grads), axis=1))})
        raise ValueError(f"laplace_covariance: the gradient is not finite at θ ± h e_i for i in {bad}; start "
                         "inside the support (away from bounds and failed solves) or pass a smaller rel_step")
    hessian = (grads[:n] - grads[n:]).T / (2.0 * h[None, :])  # column i: d grad / d θ_i
    precision = -0.5 * (hessian + hessian.T)
    eigval, eigvec = np.linalg.eigh(precision)
    if max_sd is None:
        positive = eigval[eigval > 0]
        max_sd = float(np.mean(width)) / 10.0 if bounds is not None else (
            1e4 / np.sqrt(positive.max()) if positive.size else 1.0)
    eigval = np.maximum(eigval, 1.0 / max_sd**2)
    cov = (eigvec / eigval[None, :]) @ eigvec.T
    return 0.5 * (cov + cov.T)


@eqx.filter_jit
def _gradients(logdensity_fn, points):
    return jax.vmap(jax.grad(logdensity_fn))(points)
