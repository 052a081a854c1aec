"""Sampling a problem's posterior with any transition kernel: what `jcalib.bayes.mala.sample`,
`jcalib.bayes.hmc.sample` and `jcalib.bayes.nuts.sample` share.

The checks of the step counts and the start, the preconditioner's numbers (`_metric`), the run of
warm-up, burn-in and sampling as one `jcalib.bayes.adaptation.dual_averaging_algorithm` driven by
one `jcalib.algorithm.run`, and the `PosteriorResult`. What differs between kernels is a
`KernelSetup`: the density the chains move on, their starts, the transition and its accounting
(how many log-density evaluations a transition costs, the step sizes it used), built by each
kernel's module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jcalib.algorithm import run
from jcalib.bayes._target import _check_start, _evaluate_batch, _positive, problem_logdensity, problem_starts
from jcalib.bayes.adaptation import Prescaling, dual_averaging_algorithm, prior_ranges
from jcalib.bayes.preconditioning import AbstractPreconditioner, DenseMetric, Prescaled, _cholesky_factor
from jcalib.bayes.result import PosteriorResult
from jcalib.problems import AbstractProblem

__all__ = ["KERNELS", "KernelSetup", "Metric", "sample_chains"]

KERNELS = ("mala", "hmc", "nuts")
"""The transition kernels that sample a problem's posterior, each with its module's ``sample``."""


class Metric(NamedTuple):
    """The preconditioner's numbers in internal coordinates: a diagonal (`Prescaled`) or a
    covariance ``cov = chol @ chol.T`` (`DenseMetric`, `Laplace`)."""

    diagonal: np.ndarray | None  # (n,)
    cov: np.ndarray | None  # (n, n)
    chol: np.ndarray | None  # (n, n)
    extra: dict
    n_evaluations: int  # log-density evaluations spent computing it


class KernelSetup(NamedTuple):
    """What a kernel's module hands to `sample_chains` (after the adaptation, before the warm-up)."""

    logdensity_fn: Callable  # the density the chains move on
    positions: Array  # the starts in those coordinates, (n_chains, n)
    init: Callable  # init(position) -> state
    kernel: Callable  # kernel(key, state, factor) -> (state, info); factor scales the step
    to_theta: Callable | None  # positions -> internal coordinates (None: the same)
    method: str
    extra: dict
    n_evaluations: int
    account: Callable  # account(totals, n_counted, n_all, factor) -> (extra, n_evaluations, step diagonal)


def _metric(key, problem: AbstractProblem, theta0: Array, preconditioner: AbstractPreconditioner, step_sizes,
           explicit_diagonal: bool) -> Metric:
    """The numbers of ``preconditioner`` for chains starting at ``theta0`` ``(n_chains, n)``.
    `Prescaled`: the diagonal of a given `Prescaling`, the explicit ``step_sizes`` when
    ``explicit_diagonal`` (MALA's step sizes are the diagonal), else the paper's prescaling;
    otherwise the covariance of `DenseMetric` or of `Laplace` at the chains' mean start."""
    n = int(theta0.shape[1])
    extra: dict = {"metric": type(preconditioner).__name__}
    if not isinstance(preconditioner, Prescaled):
        n_evaluations = 0
        if isinstance(preconditioner, DenseMetric):
            cov = preconditioner.cov
        else:
            box = _finite_box(problem)
            cov = preconditioner.covariance(problem_logdensity(problem), jnp.mean(theta0, axis=0), bounds=box,
                                            widths=None if box is not None else _prior_widths(problem))
            n_evaluations = 2 * n
        chol = _cholesky_factor(cov, n)
        return Metric(None, chol @ chol.T, chol, extra, n_evaluations)
    if explicit_diagonal and not isinstance(step_sizes, Prescaling) and not (
            isinstance(step_sizes, str) and step_sizes == "prescaled"):
        if isinstance(step_sizes, str):
            raise ValueError(f"sample: step_sizes must be 'prescaled', a Prescaling or positive numbers; got "
                             f"{step_sizes!r}")
        diagonal = _positive(step_sizes, n, "sample", "step_sizes")
        return Metric(_check_diagonal(diagonal, n), None, None, extra, 0)
    pre = step_sizes if isinstance(step_sizes, Prescaling) else preconditioner.prescaling(key, problem)
    extra.update({"tau": np.asarray(pre.tau), "mean_abs_grad": np.asarray(pre.mean_abs_grad),
                  "prescaling_n_valid": int(pre.n_valid), "step_sizes_prescaled": np.asarray(pre.step_sizes),
                  "scale_from": list(pre.scale_from)})
    n_evaluations = 0 if isinstance(step_sizes, Prescaling) else int(pre.draws.shape[0])
    return Metric(_check_diagonal(np.asarray(pre.step_sizes), n), None, None, extra, n_evaluations)


def _scaled_step(kernel: Callable, base, key, state, factor):
    """``kernel(key, state, factor * base)``: a transition whose base step the warm-up scales
    (`KernelSetup.kernel`, as a `jax.tree_util.Partial` of it)."""
    return kernel(key, state, factor * base)


def _check_diagonal(diagonal: np.ndarray, n: int) -> np.ndarray:
    if diagonal.shape != (n,):
        raise ValueError(f"sample: step_sizes must have shape ({n},); got shape {diagonal.shape}")
    return diagonal


def _prior_widths(problem) -> np.ndarray | None:
    """The parameters' prior ranges (`jcalib.bayes.adaptation.prior_ranges`) as the scale of a
    Laplace covariance on an infinite box; None where a parameter has no proper prior."""
    try:
        return prior_ranges(problem)
    except ValueError:
        return None


def _finite_box(problem):
    """The problem's internal box if every bound is finite, else None."""
    lower, upper = np.asarray(problem.space.lower_internal), np.asarray(problem.space.upper_internal)
    return (lower, upper) if np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) else None


def sample_chains(key, problem: AbstractProblem, build: Callable, theta0, n_steps: int, *, kernel: str,
                  coordinates: str, n_chains: int, burn_in: int, thin: int, warmup: int,
                  target_acceptance: float | None, default_target: float, chunk_size: int | None,
                  progress: bool) -> PosteriorResult:
    """The sampling run that every kernel's ``sample`` documents: checks, starts,
    ``build(key, problem, theta0_internal) -> KernelSetup``, the run, the `PosteriorResult`.
    Step t (counted from the first warm-up step) of chain c uses ``split(fold_in(k, t),
    n_chains)[c]`` of a key k derived from ``key``."""
    start_time = time.perf_counter()
    if not jax.config.jax_enable_x64:
        raise ValueError(f"sample: {kernel.upper()} runs in float64; call jax.config.update('jax_enable_x64', "
                         "True) first")
    if not isinstance(problem, AbstractProblem):
        raise ValueError(f"sample: problem must be a CalibrationProblem; got {type(problem).__name__} (for a log "
                         "density function use mala_algorithm, hmc_algorithm or nuts_algorithm with "
                         "jcalib.algorithm.run)")
    _check_settings(n_steps=n_steps, n_chains=n_chains, burn_in=burn_in, thin=thin, warmup=warmup)
    if target_acceptance is not None and not (
            isinstance(target_acceptance, (int, float)) and 0.0 < target_acceptance < 1.0):
        raise ValueError(f"sample: target_acceptance must lie in (0, 1); got {target_acceptance!r}")
    if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1):
        raise ValueError(f"sample: chunk_size must be a positive integer or None; got {chunk_size!r}")
    theta0_internal = problem_starts(problem, theta0, coordinates, int(n_chains), "sample")
    target = default_target if target_acceptance is None else float(target_acceptance)
    key_pre, _, key_run = jax.random.split(key, 3)  # as in earlier versions: without warm-up, the same draws
    setup = build(key_pre, problem, theta0_internal)
    _, _, start_valid = _evaluate_batch(setup.logdensity_fn, setup.positions)
    _check_start(start_valid)
    phases = _run_phases(key_run, setup, kernel, n_steps, burn_in=burn_in, thin=thin, warmup=warmup, target=target,
                         chunk_size=chunk_size, progress=progress)
    return _posterior_result(problem, setup, phases, n_steps, burn_in=burn_in, thin=thin, warmup=warmup,
                             target=target, start_time=start_time)


def _check_settings(**counts) -> None:
    """The step counts of ``sample``: integers, positive (``n_steps``, ``n_chains``, ``thin``)
    or non-negative (``burn_in``, ``warmup``), and at least one kept draw."""
    for label, value in counts.items():
        minimum = 0 if label in ("burn_in", "warmup") else 1
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
            kind = "positive" if minimum else "non-negative"
            raise ValueError(f"sample: {label} must be a {kind} integer; got {value!r}")
    if counts["n_steps"] < counts["thin"]:
        raise ValueError(f"sample: n_steps={counts['n_steps']} keeps no draw with thin={counts['thin']}; use "
                         "n_steps >= thin")


class _Phases(NamedTuple):
    """What the run of warm-up, burn-in and sampling gives `_posterior_result`."""

    positions: np.ndarray  # kept draws, (n_draws, n_chains, n), in the chains' coordinates
    logdensity: np.ndarray  # (n_draws, n_chains)
    n_counted: int  # sampling steps taken
    status: str  # jcalib.algorithm.run's
    factor: float  # the adapted global step factor (1 without warm-up)
    warm_mean: float | None  # mean acceptance probability of the warm-up
    totals: tuple  # per-chain sums of the infos: (warm-up, burn-in, sampling)


def _run_phases(key, setup: KernelSetup, kernel: str, n_steps: int, *, burn_in: int, thin: int, warmup: int,
                target: float, chunk_size: int | None, progress: bool) -> _Phases:
    """Warm-up, burn-in and sampling as one `dual_averaging_algorithm` driven by one
    `jcalib.algorithm.run` (the kernel compiles once). It records every g-th state, g =
    gcd(thin, warmup + burn_in), and keeps every ``thin``-th after the burn-in; a Ctrl-C
    before the sampling phase has no draws to return and re-raises."""
    skip, thin = int(warmup) + int(burn_in), int(thin)
    every = math.gcd(thin, skip)
    algorithm = dual_averaging_algorithm(setup.init, setup.kernel, warmup, target, burn_in)
    steps = None if chunk_size is None and not progress else \
        (int(chunk_size) * thin if chunk_size is not None else -(-(skip + int(n_steps)) // (20 * thin)) * thin)
    out = run(key, algorithm, algorithm.init(setup.positions), skip + int(n_steps), thin=every, chunk_size=steps,
              trace_fn=_positions_and_logdensity, progress=progress,
              desc=f"{kernel}: {warmup} warm-up, {burn_in} burn-in, {n_steps} sampling steps")
    if out.n_steps <= skip and out.status == "interrupted":
        raise KeyboardInterrupt("sample: interrupted during the warm-up or burn-in (no draws yet)")
    recorded = (np.arange(out.trace[0].shape[0]) + 1) * every  # the step each record follows
    keep = (recorded > skip) & ((recorded - skip) % thin == 0)
    state = out.state
    return _Phases(np.asarray(out.trace[0])[keep], np.asarray(out.trace[1])[keep], out.n_steps - skip, out.status,
                   float(jnp.exp(state.da.log_x_avg)), float(state.rate_sum) / warmup if warmup else None,
                   tuple(jax.tree_util.tree_map(lambda t, i=i: np.asarray(t[i]), state.totals) for i in range(3)))


def _positions_and_logdensity(state, info):
    """What `_run_phases` records of each step: the chains' positions and log densities."""
    del info
    return state.states.position, state.states.logdensity


def _posterior_result(problem, setup: KernelSetup, phases: _Phases, n_steps: int, *, burn_in: int, thin: int,
                      warmup: int, target: float, start_time: float) -> PosteriorResult:
    """The draws and diagnostics of the sampling run as a `PosteriorResult`."""
    factor, totals, positions, logdensity = phases.factor, phases.totals[-1], phases.positions, phases.logdensity
    if setup.to_theta is not None:
        positions = np.asarray(setup.to_theta(jnp.asarray(positions)))
    samples_internal = np.swapaxes(positions, 0, 1)  # (n_chains, n_draws, n)
    n_chains = samples_internal.shape[0]
    n_counted = max(phases.n_counted, 1)
    n_all = (int(warmup) + int(burn_in) + phases.n_counted) * n_chains  # transitions of all chains
    extra = dict(setup.extra)
    extra.update({"status": phases.status, "target_acceptance": target, "step_size_factor": factor,
                  "mean_acceptance_probability": totals.acceptance_rate / n_counted,
                  "warmup_acceptance_mean": phases.warm_mean})
    kernel_extra, n_transition_evaluations, step_diag = setup.account(phases.totals, n_counted, n_all, factor)
    extra.update(kernel_extra)
    space = problem.space
    return PosteriorResult.from_chains(
        samples_internal, np.swapaxes(logdensity, 0, 1), totals.is_accepted / n_counted,
        samples=np.asarray(space.to_physical(jnp.asarray(samples_internal))), names=space.names,
        units=space.units, log_scale=tuple(bool(b) for b in space.log_scale), step_sizes=np.asarray(step_diag),
        n_steps=int(n_steps), method=setup.method, burn_in=int(burn_in), thin=int(thin), warmup=int(warmup),
        n_logdensity_evaluations=setup.n_evaluations + n_chains + n_transition_evaluations,
        wall_time_s=time.perf_counter() - start_time, extra=extra,
    )
