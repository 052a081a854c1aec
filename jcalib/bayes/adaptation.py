"""Adaptation: what is computed *before* sampling to choose a sampler's scales, kept apart from
the samplers themselves (as blackjax keeps `window_adaptation` apart from its kernels).

- `prescaling`: the paper's diagonal step sizes P (Wulkow et al. 2021, Appendix A.2): target
  mean step lengths τ_i, a fraction of each parameter's prior range, and posterior-weighted
  mean gradients over 100 random draws give P_ii (eq. A26).
- Dual averaging of a global step-size factor towards a target acceptance rate
  (`dual_averaging_init`, `dual_averaging_update`; Hoffman & Gelman 2014, Alg. 5) and
  `dual_averaging_algorithm`, the chains of any kernel with that warm-up in front (the
  warm-up of `jcalib.bayes.mala.sample` for MALA, HMC and NUTS).
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
from jcalib.algorithm import Algorithm
from jcalib.bayes._target import _evaluate_batch, _positive, _resolve_bounds, problem_logdensity
from jcalib.parameters import ParameterSpace
from jcalib.problems import AbstractProblem

__all__ = [
    "DualAveragingState",
    "Prescaling",
    "AdaptiveState",
    "dual_averaging_algorithm",
    "dual_averaging_init",
    "dual_averaging_update",
    "laplace_covariance",
    "prescaling",
    "prior_ranges",
    "prior_prescaling",
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
        scale_from: per parameter, what set its range: ``"box"`` (the paper's box width) or
            ``"prior"`` (the prior's spread, `prior_prescaling`).
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
    if not callable(logdensity_fn) or isinstance(logdensity_fn, AbstractProblem):
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
    problem: AbstractProblem,
    *,
    fraction: float | Float[ArrayLike, " n_free"] = 0.02,
    n_draws: int = _N_PRESCALING_DRAWS,
) -> Prescaling:
    """The prescaled MALA's step sizes for a problem, with the ranges and draws from its prior,
    so that they do not depend on an arbitrary box (issue 18 §6).

    Appendix A.2 takes τ_i as a fraction of each parameter's prior range and draws the n = 100
    points "randomly from the parameter space". Per parameter (``Prescaling.scale_from``):

    - ``"box"``: the default uniform prior on finite bounds: the paper's recipe, exactly as
      `prescaling` on the internal box (range = box width, uniform draws);
    - ``"prior"``: any other (proper) prior, e.g. `Normal` or `LogNormal` on infinite bounds, or
      a `GaussianPrior`: draws from the prior truncated to the bounds (inverse CDF, mapped to
      internal coordinates) and range = 2 × the interquartile range of the prior in internal
      coordinates, the width of the uniform prior with the same quartiles (a uniform prior in
      internal coordinates gives its width).

    A draw whose log posterior or gradient is not finite (a failed solve) gets weight 0 in eq.
    A22; the ranges come from the prior alone (no solve).

    Args:
        key: a ``jax.random`` key for the draws.
        problem: the problem (its ``log_posterior``, ``space`` and priors).
        fraction: τ_i as a fraction of the range (scalar or per parameter, > 0).
        n_draws: number of draws (the paper: 100).

    Returns:
        `Prescaling`.

    Raises:
        ValueError: ``problem`` not a `CalibrationProblem`; bad ``fraction`` or ``n_draws``; a
            parameter with infinite bounds and no proper prior; no draw with a finite log
            posterior and gradient.
    """
    if not isinstance(problem, AbstractProblem):
        raise ValueError(f"prior_prescaling: problem must be a CalibrationProblem; got {type(problem).__name__} "
                         "(for a log density function use prescaling)")
    _check_draw_settings(n_draws, 0.1)
    space = problem.space
    n = space.n_params
    frac = _positive(fraction, n, "prior_prescaling", "fraction")
    u = np.asarray(jax.random.uniform(key, (int(n_draws), n), dtype=jnp.float64))
    draws, ranges, sources = np.empty((int(n_draws), n)), prior_ranges(problem), []
    for i, parameter in enumerate(space):
        quantile_fn = _prior_quantiles(problem, i, parameter)
        if quantile_fn is None:  # the default uniform prior on a finite box: the paper's recipe
            lower, upper = parameter.lower_internal, parameter.upper_internal
            draws[:, i] = lower + u[:, i] * (upper - lower)
            sources.append("box")
        else:
            draws[:, i] = quantile_fn(u[:, i])
            sources.append("prior")
    where = f"draws from the prior ({', '.join(f'{p.name}: {k}' for p, k in zip(space, sources))})"
    return _prescale(problem_logdensity(problem), jnp.asarray(draws), frac * ranges, where, tuple(sources))


def _prior_quantiles(problem: AbstractProblem, i: int, parameter):
    """The internal quantile function of free parameter ``i``'s prior (truncated to its bounds),
    or None for the default uniform prior on a finite box."""
    from jcalib.probability.priors import GaussianPrior, default_prior

    priors = problem.prior if i < problem.n_model_free else problem.noise_prior
    finite = bool(np.isfinite(parameter.lower_internal) and np.isfinite(parameter.upper_internal))
    if isinstance(priors, GaussianPrior):
        mean, std = float(priors.mean[i]), float(priors.std[i])
        return lambda q: mean + std * np.asarray(jax.scipy.special.ndtri(jnp.asarray(q, dtype=jnp.float64)))
    prior = None if priors is None else priors.as_dict().get(parameter.name)
    if finite and (prior is None or prior == default_prior(parameter)):
        return None
    if prior is None:
        raise ValueError(
            f"prior_prescaling: {parameter.name!r} has infinite bounds [{parameter.lower}, {parameter.upper}] and "
            "no proper prior, so there is no prior range for its step size; give it a proper prior (e.g. Normal) "
            "or pass explicit step_sizes")
    dist = prior._scipy()
    a, b = float(dist.cdf(parameter.lower)), float(dist.cdf(parameter.upper))

    def quantile(q):
        theta = np.clip(dist.ppf(a + np.asarray(q) * (b - a)), parameter.lower, parameter.upper)
        return np.asarray(parameter.to_internal(jnp.asarray(theta, dtype=jnp.float64)))

    return quantile


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


class AdaptiveState(NamedTuple):
    """The state of `dual_averaging_algorithm`.

    Attributes:
        states: the chains' states (leading axis: the chains).
        da: the dual averaging of log s, the global step factor (frozen after the warm-up).
        rate_sum: the summed mean acceptance probability of the warm-up steps.
        totals: per-phase, per-chain sums of the kernel's info fields, leading axes
            ``(3, n_chains)``: warm-up, burn-in, sampling.
        step: steps taken.
    """

    states: Any
    da: DualAveragingState
    rate_sum: Float[Array, ""]
    totals: Any
    step: Int[Array, ""]


def dual_averaging_algorithm(init: Callable, kernel: Callable, n_warmup: int, target_acceptance: float,
                             n_burn_in: int = 0) -> Algorithm:
    """Chains whose first ``n_warmup`` steps adapt a global step factor s by dual averaging of
    the chains' mean acceptance probability towards ``target_acceptance`` (Hoffman & Gelman
    2014), and whose later steps use the frozen averaged factor s̄, so that the steps after the
    warm-up are a fixed, valid Markov chain. One `jcalib.algorithm.Algorithm` for warm-up,
    burn-in and sampling: `jcalib.algorithm.run` compiles the kernel (a model solve and its
    gradient) once for all three.

    Args:
        init: ``init(position) -> state`` of one chain.
        kernel: ``kernel(key, state, factor) -> (state, info)`` of one chain, ``info`` with an
            ``acceptance_rate`` field; ``factor`` multiplies the kernel's base step.
        n_warmup: adapting steps (0: s = 1 throughout).
        target_acceptance: the target in (0, 1).
        n_burn_in: steps after the warm-up counted as burn-in in ``AdaptiveState.totals``.

    Returns:
        ``init(positions (n_chains, n)) -> AdaptiveState``; ``step(key, state)`` splits ``key``
        over the chains; the factor of the sampling steps is ``exp(state.da.log_x_avg)``
        (1 without warm-up).
    """
    n_warmup, n_burn_in = int(n_warmup), int(n_burn_in)
    # pytrees of module-level functions: `jcalib.algorithm.run` reuses the compiled loop for a
    # later run with a kernel of the same structure
    partial = jax.tree_util.Partial
    return Algorithm(partial(_adaptive_init, init, kernel),
                     partial(_adaptive_step, kernel, n_warmup, float(target_acceptance), n_burn_in), True)


def _adaptive_init(init: Callable, kernel: Callable, positions) -> AdaptiveState:
    """`dual_averaging_algorithm`'s ``init``."""
    states = jax.vmap(init)(positions)
    one = jax.tree_util.tree_map(lambda a: a[0], states)
    info = jax.eval_shape(lambda s: kernel(jax.random.key(0), s, jnp.ones((), jnp.float64))[1], one)
    n_chains = positions.shape[0]
    totals = jax.tree_util.tree_map(lambda x: jnp.zeros((3, n_chains, *x.shape), jnp.float64), info)
    zero = jnp.zeros((), jnp.float64)
    return AdaptiveState(states, dual_averaging_init(jnp.float64), zero, totals, jnp.zeros((), jnp.int32))


def _adaptive_step(kernel: Callable, n_warmup: int, target_acceptance: float, n_burn_in: int, key,
                   state: AdaptiveState):
    """`dual_averaging_algorithm`'s ``step``."""
    warm = state.step < n_warmup
    factor = jnp.exp(jnp.where(warm, state.da.log_x, state.da.log_x_avg))
    n_chains = jax.tree_util.tree_leaves(state.states)[0].shape[0]
    states, info = jax.vmap(kernel, in_axes=(0, 0, None))(jax.random.split(key, n_chains), state.states, factor)
    rate = jnp.mean(info.acceptance_rate)
    da = jax.tree_util.tree_map(lambda new, old: jnp.where(warm, new, old),
                                dual_averaging_update(state.da, target_acceptance, rate), state.da)
    phase = (state.step >= n_warmup).astype(jnp.int32) + (state.step >= n_warmup + n_burn_in).astype(jnp.int32)
    totals = jax.tree_util.tree_map(lambda t, x: t.at[phase].add(x.astype(t.dtype)), state.totals, info)
    return AdaptiveState(states, da, state.rate_sum + jnp.where(warm, rate, 0.0), totals, state.step + 1), info


# --- the Laplace covariance --------------------------------------------------------------------
def laplace_covariance(
    logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]],
    theta_internal: Float[ArrayLike, " n"],
    *,
    bounds: tuple[Float[ArrayLike, " n"], Float[ArrayLike, " n"]] | None = None,
    rel_step: float = 1e-4,
    max_sd: float | None = None,
    widths: Float[ArrayLike, " n"] | None = None,
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
        widths: per-parameter scales ``(n,)`` where the box is not finite (e.g. the prior's
            ranges, `prior_ranges`): they set the steps and the default ``max_sd`` as the box
            widths would.

    Raises:
        ValueError: wrong shape; a non-finite gradient at a difference point (failed solve,
            outside the support: move the point inside or give a smaller ``rel_step``).

    Warns:
        SamplingWarning: directions where log π is not concave at the point (it is not an
            interior mode) or flatter than ``max_sd``; their sd is capped at ``max_sd``.
    """
    z = np.asarray(theta_internal, dtype=np.float64)
    if z.ndim != 1:
        raise ValueError(f"laplace_covariance: theta_internal must be 1-D; got shape {z.shape}")
    n = z.size
    if bounds is not None:
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), (n,)) for b in bounds)
        width = upper - lower
    elif widths is not None:
        width = np.broadcast_to(np.asarray(widths, dtype=np.float64), (n,))
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
        max_sd = float(np.mean(width)) / 10.0 if bounds is not None or widths is not None else (
            1e4 / np.sqrt(positive.max()) if positive.size else 1.0)
    _warn_clamped(eigval, max_sd)
    eigval = np.maximum(eigval, 1.0 / max_sd**2)
    cov = (eigvec / eigval[None, :]) @ eigvec.T
    return 0.5 * (cov + cov.T)


def _warn_clamped(eigval: np.ndarray, max_sd: float) -> None:
    """Say which directions of a Laplace covariance are capped at ``max_sd``, and why."""
    from jcalib._warnings import warn_user
    from jcalib.bayes.diagnostics import SamplingWarning

    concave_not = int(np.sum(eigval <= 0))
    flat = int(np.sum((eigval > 0) & (eigval < 1.0 / max_sd**2)))
    if concave_not:
        warn_user(f"laplace_covariance: the log density is not concave at the point in {concave_not} of "
                  f"{eigval.size} directions, so the point is not an interior mode (a start away from the optimum, "
                  f"or an optimum on a bound); the sd in those directions is capped at max_sd = {max_sd:.3g}",
                  SamplingWarning)
    if flat:
        warn_user(f"laplace_covariance: {flat} of {eigval.size} directions are flatter than max_sd = {max_sd:.3g} "
                  "(weakly identified); their sd is capped there", SamplingWarning)


def prior_ranges(problem: AbstractProblem) -> Float[np.ndarray, " n_free"]:
    """Each free parameter's range in internal coordinates, as `prior_prescaling` takes it: the
    box width for the default uniform prior on a finite box, else 2 × the prior's interquartile
    range (the width of the uniform prior with the same quartiles).

    Raises:
        ValueError: a parameter with an infinite bound and no proper prior.
    """
    ranges = np.empty(problem.space.n_params)
    for i, parameter in enumerate(problem.space):
        quantile_fn = _prior_quantiles(problem, i, parameter)
        if quantile_fn is None:
            ranges[i] = parameter.upper_internal - parameter.lower_internal
        else:
            q1, q3 = quantile_fn(np.array([0.25, 0.75]))
            ranges[i] = 2.0 * (q3 - q1)
    return ranges


@eqx.filter_jit
def _gradients(logdensity_fn, points):
    return jax.vmap(jax.grad(logdensity_fn))(points)
