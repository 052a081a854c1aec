"""HMC and NUTS (blackjax's kernels) on a jcalib posterior: the ``kernel="hmc"`` and
``kernel="nuts"`` paths of `jcalib.bayes.mala.sample`, with the same problem, result type,
diagnostics and warnings as MALA.

**Metric.** The inverse mass matrix is a preconditioner strategy
(`jcalib.bayes.preconditioning`): by default `Laplace()`, the inverse Hessian of the log
posterior at the chains' mean start (start at an estimate, e.g. Gauss-Newton's), so that the
sampler moves in coordinates where the posterior is close to N(0, I). On stiff, correlated
ODE posteriors this whitening made NUTS about 20x more efficient than blackjax's plain window
adaptation (issue 18). `DenseMetric(cov)` uses a given covariance; `Prescaled(fraction)` the
paper's diagonal step sizes P (only their relative scales matter).

**Step size.** A global step size ε = s ε_0 with ε_0 = n^(-1/4) (the leapfrog step that keeps
the energy error O(1) on an n-dimensional standard normal, Beskos et al. 2013), s adapted
during ``warmup`` by dual averaging of the chains' mean acceptance probability towards
``target_acceptance`` (`jcalib.bayes.adaptation`; Hoffman & Gelman 2014), then frozen at its
averaged iterate: the sampling phase is a fixed, valid Markov chain.

**HMC trajectory.** Each HMC transition integrates for L = ⌈u π / ε⌉ leapfrog steps with
u ~ U(0, 1) per transition and chain (a jittered trajectory of mean length π/2, a quarter
period of a unit-variance Gaussian in whitened coordinates, which avoids the periodicities of
a fixed length; Neal 2011, §5.4.2.2). NUTS chooses its own trajectory (at most
2^``max_num_doublings`` steps).

**Failed solves.** A point where the log density is -inf or NaN has infinite (or NaN) energy:
blackjax counts the transition as divergent and never selects it; a state whose log density
or gradient is still not finite after a transition is replaced by the previous state (a
rejection). Divergences per chain are reported in ``extra["divergences"]``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from jcalib.bayes._target import _check_start, _resolve_bounds
from jcalib.bayes.adaptation import dual_averaging_init, dual_averaging_update
from jcalib.bayes.preconditioning import (
    AbstractPreconditioner,
    DenseMetric,
    Laplace,
    Prescaled,
    _cholesky_factor,
    as_preconditioner,
)
from jcalib.bayes.result import PosteriorResult

__all__ = ["KERNELS", "HMCChainInfo", "default_preconditioner", "run_chains", "sample_chains"]

KERNELS = ("mala", "hmc", "nuts")
_MAX_INTEGRATION_STEPS = 1024  # cap of one HMC trajectory (as NUTS's 2^10)


class HMCChainInfo(NamedTuple):
    """Per-chain totals over the counted (post-burn-in) steps, and the adapted step size.

    Attributes:
        accepted: HMC: accepted transitions; NUTS: the summed acceptance statistic
            (blackjax's mean acceptance probability over the trajectory).
        p_accept_sum: summed acceptance probabilities.
        divergences: divergent transitions (an energy error above 1000 or a failed solve).
        integration_steps: leapfrog steps (gradient evaluations) of all steps, warm-up included.
        step_size: ε used for sampling.
        warmup_acceptance_mean: mean acceptance probability over the warm-up (NaN without).
    """

    accepted: Float[Array, " n_chains"]
    p_accept_sum: Float[Array, " n_chains"]
    divergences: Float[Array, " n_chains"]
    integration_steps: Float[Array, " n_chains"]
    step_size: Float[Array, ""]
    warmup_acceptance_mean: Float[Array, ""]


def _transition(kernel: str, logdensity_fn: Callable, max_num_doublings: int):
    """``step(key, state, step_size, inverse_mass_matrix) -> (state, (p_accept, accepted,
    divergent, n_steps))`` of one chain; a non-finite new state is a rejection."""
    import blackjax  # imported on use: blackjax is needed only for these kernels

    if kernel == "nuts":
        base = blackjax.mcmc.nuts.build_kernel()

        def step(key, state, eps, inv_mass):
            with jax.numpy_dtype_promotion("standard"):  # blackjax mixes Python ints and floats
                new, info = base(key, state, logdensity_fn, eps, inv_mass, max_num_doublings)
            return new, info.acceptance_rate, info.acceptance_rate, info.is_divergent, info.num_integration_steps
    else:
        base = blackjax.mcmc.hmc.build_kernel()

        def step(key, state, eps, inv_mass):
            key_length, key_step = jax.random.split(key)
            u = jax.random.uniform(key_length, (), dtype=eps.dtype)
            n_steps = jnp.clip(jnp.ceil(u * math.pi / eps), 1, _MAX_INTEGRATION_STEPS).astype(jnp.int32)
            with jax.numpy_dtype_promotion("standard"):
                new, info = base(key_step, state, logdensity_fn, eps, inv_mass, n_steps)
            return (new, info.acceptance_rate, info.is_accepted.astype(eps.dtype), info.is_divergent,
                    info.num_integration_steps)

    def safe_step(key, state, eps, inv_mass):
        new, p_accept, accepted, divergent, n_steps = step(key, state, eps, inv_mass)
        finite = jnp.isfinite(new.logdensity) & jnp.all(jnp.isfinite(new.logdensity_grad))
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(finite, a, b), new, state)
        p_accept = jnp.where(finite & jnp.isfinite(p_accept), p_accept, 0.0)
        accepted = jnp.where(finite & jnp.isfinite(accepted), accepted, 0.0)
        return new, (p_accept, accepted, divergent | ~finite, n_steps)

    return safe_step


@eqx.filter_jit
def run_chains(logdensity_fn: Callable, kernel: str, key_warm, key_draw, positions: Float[Array, "n_chains n"],
               inverse_mass_matrix: Float[Array, "..."], step_size0: Float[Array, ""], n_warmup: int, n_burn: int,
               n_records: int, thin: int, target: Float[Array, ""], max_num_doublings: int = 10):
    """Run ``n_warmup`` adapting, ``n_burn`` discarded and ``n_records * thin`` counted steps
    of every chain (vmapped); keeps every ``thin``-th state.

    Step t of a phase uses ``fold_in(key, t)`` split over the chains (as MALA does).

    Args:
        logdensity_fn: log π in internal coordinates (a pytree callable compiles once per
            problem structure).
        kernel: ``"hmc"`` or ``"nuts"``.
        key_warm, key_draw: keys of the warm-up and of the later steps.
        positions: the starts, finite log density and gradient.
        inverse_mass_matrix: ``(n,)`` diagonal or ``(n, n)`` dense.
        step_size0: ε_0; warm-up adapts a factor on it.
        n_warmup, n_burn, n_records, thin: counts (static).
        target: target acceptance of the warm-up.
        max_num_doublings: NUTS tree depth limit.

    Returns:
        ``(positions, logdensity, valid0, info)``: kept positions ``(n_records, n_chains, n)``,
        their log densities ``(n_records, n_chains)``, whether each start was valid, and
        `HMCChainInfo`.
    """
    import blackjax

    step = _transition(kernel, logdensity_fn, max_num_doublings)
    n_chains = positions.shape[0]
    dtype = positions.dtype

    def step_all(key, t, states, eps):
        keys = jax.random.split(jax.random.fold_in(key, t), n_chains)
        return jax.vmap(step, in_axes=(0, 0, None, None))(keys, states, eps, inverse_mass_matrix)

    states = jax.vmap(lambda x: blackjax.mcmc.hmc.init(x, logdensity_fn))(positions)
    valid0 = jnp.isfinite(states.logdensity) & jnp.all(jnp.isfinite(states.logdensity_grad), axis=1)

    def warm(carry, t):
        states, da, rate_sum, n_int = carry
        states, (p_accept, _, _, n_steps) = step_all(key_warm, t, states, step_size0 * jnp.exp(da.log_x))
        rate = jnp.mean(p_accept)
        return (states, dual_averaging_update(da, target, rate), rate_sum + rate, n_int + n_steps.astype(dtype)), None

    zeros = jnp.zeros(n_chains, dtype)
    (states, da, rate_sum, n_int), _ = jax.lax.scan(
        warm, (states, dual_averaging_init(dtype), jnp.zeros((), dtype), zeros), jnp.arange(n_warmup))
    eps = step_size0 * jnp.exp(da.log_x_avg) if n_warmup else step_size0

    def one(carry, t):
        states, counted, totals = carry
        states, (p_accept, accepted, divergent, n_steps) = step_all(key_draw, t, states, eps)
        c = counted.astype(dtype)
        totals = (totals[0] + c * accepted, totals[1] + c * p_accept, totals[2] + c * divergent.astype(dtype),
                  totals[3] + n_steps.astype(dtype))
        return (states, counted, totals), None

    totals = (zeros, zeros, zeros, n_int)
    (states, _, totals), _ = jax.lax.scan(one, (states, False, totals), jnp.arange(n_burn))

    def record(carry, r):
        states, totals = carry
        (states, _, totals), _ = jax.lax.scan(one, (states, True, totals), n_burn + r * thin + jnp.arange(thin))
        return (states, totals), (states.position, states.logdensity)

    (states, totals), (kept, logdensity) = jax.lax.scan(record, (states, totals), jnp.arange(n_records))
    warm_mean = rate_sum / n_warmup if n_warmup else jnp.asarray(jnp.nan, dtype)
    return kept, logdensity, valid0, HMCChainInfo(*totals, eps, warm_mean)


def default_preconditioner(preconditioner) -> AbstractPreconditioner:
    """HMC/NUTS: `Laplace()` unless another strategy (or its short form) is given."""
    if preconditioner is None:
        return Laplace()
    return as_preconditioner(preconditioner)


def sample_chains(key: PRNGKeyArray, kernel: str, logdensity_fn: Callable, theta0: Float[Array, "n_chains n"],
                  n_steps: int, *, burn_in: int, thin: int, warmup: int, preconditioner: AbstractPreconditioner,
                  step_size, target_acceptance: float, bounds, space, names, phys_fn,
                  start_time: float) -> PosteriorResult:
    """The ``kernel="hmc"``/``"nuts"`` path of `jcalib.bayes.mala.sample` (arguments checked
    there): the metric from ``preconditioner``, then `run_chains`, as a `PosteriorResult`.

    Raises:
        ValueError: ``step_size`` neither ``"prescaled"`` (ε_0 = n^(-1/4)) nor a positive
            number; a bad metric; a start with a non-finite log density or gradient.
    """
    key_pre, key_warm, key_draw = jax.random.split(key, 3)
    n_chains, n = (int(s) for s in theta0.shape)
    if isinstance(step_size, str) and step_size == "prescaled":
        eps0 = n ** -0.25
    elif isinstance(step_size, (int, float, np.integer, np.floating)) and not isinstance(step_size, bool) \
            and 0 < step_size < np.inf:
        eps0 = float(step_size)
    else:
        raise ValueError(f"sample: with kernel={kernel!r}, step_sizes is the leapfrog step ε: 'prescaled' "
                         f"(n_params^(-1/4), adapted by warmup) or one positive number; got {step_size!r}")
    n_evaluations = 0
    extra = {}
    if isinstance(preconditioner, Prescaled):
        if bounds is None and space is None:
            raise ValueError("sample: Prescaled needs the prior box: pass bounds=(lower, upper) in internal "
                             "coordinates or a ParameterSpace as to_physical, or use Laplace()")
        pre, start_valid = preconditioner.prescaling(key_pre, logdensity_fn, bounds, space, extra_points=theta0)
        _check_start(start_valid)
        inverse_mass = jnp.asarray(pre.step_sizes)
        n_evaluations += int(pre.draws.shape[0]) + n_chains
        extra.update({"tau": np.asarray(pre.tau), "step_sizes_prescaled": np.asarray(pre.step_sizes)})
    else:
        if isinstance(preconditioner, DenseMetric):
            cov = preconditioner.cov
        else:
            box = _resolve_bounds(bounds, space, "sample") if (bounds is not None or space is not None) else None
            cov = preconditioner.covariance(logdensity_fn, jnp.mean(theta0, axis=0), bounds=box)
            n_evaluations += 2 * n
        chol = _cholesky_factor(cov, n)
        inverse_mass = jnp.asarray(chol @ chol.T)
    dtype = theta0.dtype
    kept, logdensity, valid0, info = run_chains(
        logdensity_fn, kernel, key_warm, key_draw, theta0, inverse_mass, jnp.asarray(eps0, dtype), int(warmup),
        int(burn_in), int(n_steps) // int(thin), int(thin), jnp.asarray(float(target_acceptance), dtype))
    _check_start(valid0)
    n_counted = (int(n_steps) // int(thin)) * int(thin)
    samples_internal = np.swapaxes(np.asarray(kept), 0, 1)
    acceptance = np.asarray(info.accepted) / n_counted
    n_evaluations += int(np.sum(np.asarray(info.integration_steps))) + n_chains
    inverse_mass = np.asarray(inverse_mass)
    eps = float(info.step_size)
    extra.update({
        "kernel": kernel, "target_acceptance": float(target_acceptance), "step_size": eps,
        "step_size_factor": eps / eps0, "inverse_mass_matrix": inverse_mass,
        "metric": type(preconditioner).__name__,
        "mean_acceptance_probability": np.asarray(info.p_accept_sum) / n_counted,
        "divergences": np.asarray(info.divergences).astype(int),
        "mean_integration_steps": float(np.sum(np.asarray(info.integration_steps)))
        / ((int(warmup) + int(burn_in) + n_counted) * n_chains),
        "warmup_acceptance_mean": float(info.warmup_acceptance_mean) if warmup else None,
    })
    diagonal = inverse_mass if inverse_mass.ndim == 1 else np.diagonal(inverse_mass)
    return PosteriorResult.from_chains(
        samples_internal, np.swapaxes(np.asarray(logdensity), 0, 1), acceptance,
        samples=np.asarray(phys_fn(jnp.asarray(samples_internal))), names=names,
        units=space.units if space is not None else None,
        log_scale=tuple(bool(b) for b in space.log_scale) if space is not None else None,
        step_sizes=eps**2 * diagonal / 2.0,  # the MALA-equivalent diagonal: one leapfrog step is MALA with ε²M⁻¹/2
        n_steps=int(n_steps), method=f"{kernel} (blackjax), {type(preconditioner).__name__} metric",
        burn_in=int(burn_in), thin=int(thin), warmup=int(warmup), n_logdensity_evaluations=n_evaluations,
        wall_time_s=time.perf_counter() - start_time, extra=extra)

