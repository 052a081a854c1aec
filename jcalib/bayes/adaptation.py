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
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from jcalib._precision import as_float64
from jcalib.algorithm import Algorithm, run
from jcalib.bayes._target import _evaluate_batch, _positive, _resolve_bounds, problem_logdensity, problem_starts
from jcalib.parameters import ParameterSpace
from jcalib.problem import CalibrationProblem

__all__ = [
    "DualAveragingState",
    "Prescaling",
    "WarmupState",
    "dual_averaging_warmup",
    "dual_averaging_init",
    "dual_averaging_update",
    "laplace_covariance",
    "prescaling",
    "prior_prescaling",
    "step_sizes",
    "zero_totals",
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
        scale_from: per parameter, what set its scale: ``"box"`` (the paper's box width),
            ``"prior"`` (the prior's spread) or ``"curvature"`` (`prior_prescaling`).
    """

    step_sizes: Float[Array, " n_params"]
    tau: Float[Array, " n_params"]
    mean_abs_grad: Float[Array, " n_params"]
    draws: Float[Array, "n_draws n_params"]
    weights: Float[Array, " n_draws"]
    n_valid: Int[Array, ""]
    scale_from: tuple[str, ...] = ()


# --- prescaling (Appendix A.2) -----------------------------------------------------------------
def prescaling(
    key: PRNGKeyArray,
    logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]],
    bounds: tuple[Float[ArrayLike, " n_params"], Float[ArrayLike, " n_params"]],
    *,
    fraction: float | Float[ArrayLike, " n_params"] = 0.02,
    n_draws: int = _N_PRESCALING_DRAWS,
    center: Float[ArrayLike, " n_params"] | None = None,
    spread: float = 0.1,
) -> Prescaling:
    """Step sizes P_ii of the prescaled MALA from target step lengths (Appendix A.2), for a
    log density on a finite box (for a `CalibrationProblem` use `prior_prescaling`).

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
        logdensity_fn: log π(θ) in internal coordinates, a JAX function ``(n,) -> ()``.
        bounds: ``(lower, upper)`` in internal coordinates, finite.
        fraction: τ_i as a fraction of the range (scalar or per parameter, > 0); the
            paper used 1/50 and 1/200.
        n_draws: number of draws (the paper: 100).
        center: draw around this point (internal coordinates) instead of the box.
        spread: standard deviation of those draws as a fraction of the range.

    Returns:
        `Prescaling` with ``step_sizes`` (the diagonal of P) and the intermediate numbers.

    Raises:
        ValueError: a ``logdensity_fn`` that is not callable; bad ``bounds``; ``fraction``,
            ``n_draws`` or ``spread`` not positive; ``center`` of the wrong shape; no draw
            with a finite log density and gradient.

    Example:
        >>> pre = prescaling(jax.random.key(0), lambda x: -0.5 * jnp.sum(x**2),
        ...                  (-jnp.ones(2), jnp.ones(2)), fraction=0.1)
        >>> pre.step_sizes.shape
        (2,)
    """
    if not callable(logdensity_fn) or isinstance(logdensity_fn, CalibrationProblem):
        raise ValueError(f"prescaling: logdensity_fn must be a function of the internal coordinates; got "
                         f"{type(logdensity_fn).__name__} (for a CalibrationProblem use prior_prescaling)")
    if isinstance(bounds, ParameterSpace) or bounds is None:
        raise ValueError(f"prescaling: bounds must be (lower, upper) in internal coordinates; got {bounds!r} "
                         "(for a CalibrationProblem use prior_prescaling)")
    lower, upper = _resolve_bounds(bounds, None, "prescaling")
    n = lower.size
    _check_draw_settings(n_draws, spread)
    u = jax.random.uniform(key, (int(n_draws), n), dtype=jnp.float64)
    lo, width = jnp.asarray(lower), jnp.asarray(upper - lower)
    if center is None:
        draws = lo[None, :] + u * width[None, :]
        where = f"uniform draws from the box {lower.tolist()} .. {upper.tolist()}"
    else:
        c = as_float64(center, "prescaling", "center")
        if c.shape != (n,):
            raise ValueError(f"prescaling: center must have shape ({n},); got shape {c.shape}")
        draws = c[None, :] + spread * width[None, :] * jax.random.normal(key, (int(n_draws), n), dtype=jnp.float64)
        where = f"draws around center={np.asarray(c).tolist()}"
    tau = _positive(fraction, n, "prescaling", "fraction") * (upper - lower)
    return _prescale(logdensity_fn, draws, tau, where, ("box",) * n)


def prior_prescaling(
    key: PRNGKeyArray,
    problem: CalibrationProblem,
    theta0: Float[ArrayLike, " n_free"] | Float[ArrayLike, "n_chains n_free"] | None = None,
    *,
    coordinates: str = "physical",
    fraction: float | Float[ArrayLike, " n_free"] = 0.02,
    n_draws: int = _N_PRESCALING_DRAWS,
) -> Prescaling:
    """The prescaled MALA's step sizes for a problem, with the ranges and draws from its prior.

    Appendix A.2 takes τ_i as a fraction of each parameter's prior range and draws the n = 100
    points "randomly from the parameter space". Per parameter (``Prescaling.scale_from``):

    - ``"box"``: the default uniform prior on finite bounds: the paper's recipe as in
      `prescaling` (range = box width in internal coordinates, uniform draws);
    - ``"prior"``: any other proper prior (`Normal`, `LogNormal`, ..., `GaussianPrior`, also on
      infinite bounds): draws from the prior truncated to the bounds (inverse CDF, in internal
      coordinates) and range = √12 × the prior's internal standard deviation (the width of a
      uniform prior with the same spread, so a uniform prior gives its width);
    - ``"curvature"``: no proper prior (the flat default on an infinite bound): no range
      exists, so P_ii = h / H_ii from the curvature H = -∇²log π at the (mean) start
      (`laplace_covariance`), h = 1.65²/(2 n^(1/3)) the optimal MALA scale (Roberts & Rosenthal
      1998) for a Gaussian of conditional variances 1/H_ii; the draws of such a parameter are
      N(start_i, 1/H_ii).

    Draws whose log posterior or gradient is not finite (a failed solve) get weight 0 in eq. A22
    and never enter a range (the prior spreads need no solve).

    Args:
        key: a ``jax.random`` key for the draws.
        problem: the problem (its ``log_posterior``, ``space`` and priors).
        theta0: the start(s) (None: the nominal values), used by ``"curvature"`` parameters.
        coordinates: ``"physical"`` (default) or ``"internal"``: the system of ``theta0``.
        fraction: τ_i as a fraction of the range (scalar or per parameter, > 0).
        n_draws: number of draws (the paper: 100).

    Returns:
        `Prescaling`.

    Raises:
        ValueError: bad ``fraction``, ``n_draws`` or start; no draw with a finite log
            density and gradient; a non-finite curvature at the start.
    """
    if not isinstance(problem, CalibrationProblem):
        raise ValueError(f"prior_prescaling: problem must be a CalibrationProblem; got {type(problem).__name__} "
                         "(for a log density function use prescaling)")
    _check_draw_settings(n_draws, 0.1)
    starts = problem_starts(problem, theta0, coordinates, None, "prior_prescaling")
    logdensity_fn = problem_logdensity(problem)
    space = problem.space
    n = space.n_params
    frac = _positive(fraction, n, "prior_prescaling", "fraction")
    u = np.asarray(jax.random.uniform(key, (int(n_draws), n), dtype=jnp.float64))
    draws, ranges, sources = np.empty((int(n_draws), n)), np.full(n, np.nan), []
    lower, upper = np.asarray(space.lower_internal), np.asarray(space.upper_internal)
    for i, parameter in enumerate(space):
        kind, quantile_fn = _prior_column(problem, i, parameter)
        sources.append(kind)
        if kind == "box":
            draws[:, i] = lower[i] + u[:, i] * (upper[i] - lower[i])
            ranges[i] = upper[i] - lower[i]
        elif kind == "prior":
            draws[:, i] = quantile_fn(u[:, i])
            grid = quantile_fn((np.arange(_N_SPREAD_GRID) + 0.5) / _N_SPREAD_GRID)
            ranges[i] = math.sqrt(12.0) * float(np.std(grid))
    curvature = [i for i, s in enumerate(sources) if s == "curvature"]
    p_curvature = None
    if curvature:
        center = np.asarray(jnp.mean(starts, axis=0))
        precision = np.linalg.inv(laplace_covariance(logdensity_fn, center))
        conditional_var = 1.0 / np.diagonal(precision)
        normal = np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (int(n_draws), n), dtype=jnp.float64))
        for i in curvature:
            draws[:, i] = center[i] + np.sqrt(conditional_var[i]) * normal[:, i]
        p_curvature = _DENSE_STEP * n ** (-1.0 / 3.0) * conditional_var
    tau = np.where(np.isfinite(ranges), frac * np.nan_to_num(ranges, nan=1.0), 1.0)
    where = "draws from the prior (box, prior and curvature draws, Prescaling.scale_from)"
    pre = _prescale(logdensity_fn, jnp.asarray(draws), tau, where, tuple(sources))
    if p_curvature is None:
        return pre
    idx = np.asarray(curvature)
    p = np.asarray(pre.step_sizes).copy()
    p[idx] = p_curvature[idx]
    g = np.asarray(pre.mean_abs_grad)
    implied_tau = np.asarray(pre.tau).copy()
    implied_tau[idx] = p[idx] * g[idx] + 2.0 * np.sqrt(p[idx] / math.pi)  # eq. A23 with this P_ii
    return pre._replace(step_sizes=jnp.asarray(p), tau=jnp.asarray(implied_tau))


_N_SPREAD_GRID = 4001  # quantiles for a prior's internal standard deviation (midpoint rule)
_DENSE_STEP = 1.65**2 / 2  # h n^(1/3): √(2h) = 1.65 n^(-1/6), optimal MALA scale (Roberts & Rosenthal 1998)


def _prior_column(problem: CalibrationProblem, i: int, parameter):
    """(``"box"`` | ``"prior"`` | ``"curvature"``, the internal quantile function or None) of
    free parameter ``i``: the default uniform prior on a finite box, a proper prior, or none."""
    from jcalib.probability.priors import GaussianPrior

    n_model = problem.n_model_free
    priors = problem.prior if i < n_model else problem.noise_prior
    finite = bool(np.isfinite(parameter.lower_internal) and np.isfinite(parameter.upper_internal))
    if isinstance(priors, GaussianPrior):
        mean, std = float(priors.mean[i]), float(priors.std[i])
        return "prior", lambda q: mean + std * _ndtri(q)
    prior = None if priors is None else priors.as_dict().get(parameter.name)
    if prior is None:
        return ("box", None) if finite else ("curvature", None)
    try:
        dist = prior._scipy()
        a, b = float(dist.cdf(parameter.lower)), float(dist.cdf(parameter.upper))
    except (TypeError, ValueError, AttributeError, NotImplementedError):
        return ("box", None) if finite else ("curvature", None)
    if not (np.isfinite(a) and np.isfinite(b) and b > a) or not np.isfinite(dist.std()):
        return ("box", None) if finite else ("curvature", None)

    def quantile(q):
        theta = np.clip(dist.ppf(a + np.asarray(q) * (b - a)), parameter.lower, parameter.upper)
        return np.asarray(parameter.to_internal(jnp.asarray(theta, dtype=jnp.float64)))

    return "prior", quantile


def _ndtri(q):
    return np.asarray(jax.scipy.special.ndtri(jnp.asarray(q, dtype=jnp.float64)))


def _check_draw_settings(n_draws, spread) -> None:
    if not isinstance(n_draws, (int, np.integer)) or isinstance(n_draws, bool) or n_draws < 1:
        raise ValueError(f"prescaling: n_draws must be a positive integer; got {n_draws!r}")
    if not (isinstance(spread, (int, float)) and spread > 0):
        raise ValueError(f"prescaling: spread must be a positive number; got {spread!r}")


def _prescale(logdensity_fn, draws, tau, where: str, sources: tuple[str, ...]) -> Prescaling:
    """Eqs. A22-A26 at ``draws`` with target step lengths ``tau``."""
    logdensity, grad, valid = _evaluate_batch(logdensity_fn, jnp.asarray(draws))
    n_valid = int(jnp.sum(valid))
    if n_valid == 0:
        raise ValueError(
            f"prescaling: the log density (or its gradient) is not finite at any of the "
            f"{draws.shape[0]} {where}; pass center= (a point where it is finite) or explicit step_sizes"
        )
    weights = jax.nn.softmax(jnp.where(valid, logdensity, -jnp.inf))
    mean_abs_grad = jnp.sum(weights[:, None] * jnp.abs(grad), axis=0)  # |∂S| = |∂ log π|
    tau_j = jnp.asarray(tau)
    root = tau_j / (1.0 / math.sqrt(math.pi) + jnp.sqrt(1.0 / math.pi + tau_j * mean_abs_grad))
    return Prescaling(root**2, tau_j, mean_abs_grad, jnp.asarray(draws), weights, jnp.asarray(n_valid), sources)


def step_sizes(key: PRNGKeyArray, logdensity_fn: Callable, bounds, **kwargs) -> Float[Array, " n_params"]:
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


class WarmupState(NamedTuple):
    """The state of `dual_averaging_warmup`: the chains, the dual averaging of the global
    factor s, the summed mean acceptance probabilities and the per-chain sums of the infos."""

    states: Any
    da: DualAveragingState
    rate_sum: Float[Array, ""]
    totals: Any


def dual_averaging_warmup(
    key: PRNGKeyArray,
    kernel: Callable,
    states,
    n_steps: int,
    target_acceptance: float,
    *,
    chunk_size: int | None = None,
    progress: bool = False,
) -> tuple[Any, Float[Array, ""], Float[Array, ""], Any]:
    """Adapt a global factor s of a kernel's step by dual averaging over ``n_steps`` warm-up
    steps of all chains, driven by `jcalib.algorithm.run`.

    Args:
        key: a ``jax.random`` key; step t of chain c uses ``split(fold_in(key, t), n_chains)[c]``.
        kernel: ``kernel(key, state, factor) -> (state, info)`` of one chain, ``info`` with
            an ``acceptance_rate`` field; ``factor`` multiplies the kernel's base step.
        states: the chains' states (a batch, leading axis the chains).
        n_steps: warm-up steps (> 0).
        target_acceptance: the target of the chains' mean acceptance probability.
        chunk_size: steps per compiled chunk (progress bar updates).
        progress: show a progress bar.

    Returns:
        ``(states, factor, mean acceptance probability, totals)``: the chains after warm-up,
        the frozen factor exp(log s̄) (the averaged iterate), the mean over the warm-up of the
        chains' mean acceptance probability, and the per-chain sums of the info fields.
    """
    n_chains = jax.tree_util.tree_leaves(states)[0].shape[0]
    dtype = jnp.float64

    def step(key, warm: WarmupState):
        factor = jnp.exp(warm.da.log_x)
        keys = jax.random.split(key, n_chains)
        new, info = jax.vmap(kernel, in_axes=(0, 0, None))(keys, warm.states, factor)
        rate = jnp.mean(info.acceptance_rate)
        totals = _add_info(warm.totals, info)
        return WarmupState(new, dual_averaging_update(warm.da, target_acceptance, rate), warm.rate_sum + rate,
                           totals), None

    totals = zero_totals(kernel, states)
    init = WarmupState(states, dual_averaging_init(dtype), jnp.zeros((), dtype), totals)
    out = run(key, Algorithm(lambda s: s, step, True), init, int(n_steps), chunk_size=chunk_size,
              progress=progress, desc="warm-up", trace_fn=lambda state, info: None)
    warm = out.state
    return warm.states, jnp.exp(warm.da.log_x_avg), warm.rate_sum / max(out.n_steps, 1), warm.totals


def zero_totals(kernel: Callable, states):
    """Zeros shaped like the per-chain sums of ``kernel``'s info fields (float64)."""
    one = jax.tree_util.tree_map(lambda a: a[0], states)
    shapes = jax.eval_shape(lambda s: kernel(jax.random.key(0), s, jnp.ones((), jnp.float64))[1], one)
    n_chains = jax.tree_util.tree_leaves(states)[0].shape[0]
    return jax.tree_util.tree_map(lambda s: jnp.zeros((n_chains, *s.shape), jnp.float64), shapes)


def _add_info(totals, info):
    return jax.tree_util.tree_map(lambda t, x: t + x.astype(t.dtype), totals, info)


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
