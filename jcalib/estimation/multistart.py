"""Multistart: a local least-squares method from many starts, the standard calibration of the field
(Raue et al. 2013), with the start distributions of Aka et al. 2023 and the stop rules of scipy and
Fides.

- starts (`sample_starts`): ``"aka2023"``, the paper's (Table 2): the first start is the initial
  guess θ_init, the others are drawn from N(θ_init, σ²) and redrawn until they lie within the
  bounds, i.e. a normal truncated to the box. The paper writes σ² = 0.5 (θ₊ - θ₋), which has the
  units of θ rather than θ²; we read it as a standard deviation σ = 0.5 (θ₊ - θ₋) per parameter,
  taken in internal coordinates (so log-uniform parameters spread over their decades). ``"lhs"``,
  ``"sobol"`` and ``"uniform"`` fill the box instead (no initial guess; uniform is the field's
  usual choice for PEtab problems).
- the local method: `jcalib.estimation.trust_region.trust_region_batch` (the default, Fides's
  trust-region reflective method: the starts through vmapped lanes),
  `jcalib.estimation.least_squares.levenberg_marquardt_batch` (all starts in one vmapped solve)
  or `jcalib.estimation.least_squares.least_squares_trf` (one start after another); after
  `jcalib.distributed.initialize` with several processes each process runs its block of the
  starts and every process gets all results.
- the stop rule of Fides's method and TRF (``stop=``): Fides's default tests or scipy's (each
  method's own by default).
- which starts converged: `final_log_likelihoods` against a reference (e.g. a published optimum),
  within `LLH_TOLERANCE`.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> from jcalib import CalibrationProblem, models, synthetic_measurements
    >>> model = models.get("four_substance_reactions")
    >>> data = synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, 0.01)
    >>> problem = CalibrationProblem(model, data)
    >>> ms = multistart(jax.random.key(1), problem, 2, "trf", "uniform", max_steps=5)
    >>> final_log_likelihoods(problem, ms).shape
    (2,)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray
from tqdm.auto import tqdm

from jcalib import distributed
from jcalib.estimation.failures import FailedStartError
from jcalib.estimation.least_squares import (
    STOP_RULES,
    _inside,
    least_squares_trf,
    levenberg_marquardt_batch,
    trf_stop_options,
)
from jcalib.estimation.result import INTERRUPTED, EstimationResult, MultistartResult, multistart_result
from jcalib.estimation.trust_region import trust_region_batch
from jcalib.problems import AbstractProblem
from jcalib.starts import check_free, start_internal

__all__ = ["LLH_TOLERANCE", "LOCAL_METHODS", "START_DISTRIBUTIONS", "check_method", "clusters",
           "final_log_likelihoods", "multistart", "sample_starts"]

START_DISTRIBUTIONS = ("aka2023", "lhs", "sobol", "uniform")
LOCAL_METHODS = ("lm", "fides", "trf")
LLH_TOLERANCE = 0.1
"""A start has converged when its log-likelihood is within 0.1 of the reference (or above it)."""
_AKA2023_STD = 0.5  # σ = 0.5 (θ₊ - θ₋), Aka et al. 2023, Table 2 (read as a standard deviation)


def sample_starts(
    key: PRNGKeyArray,
    problem: AbstractProblem,
    n_starts: int,
    start_distribution: str = "aka2023",
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    *,
    coordinates: str = "physical",
) -> Float[np.ndarray, "n_starts n_free"]:
    """Starting points in physical units, inside the bounds.

    Args:
        key: a ``jax.random`` key; the same key gives the same starts.
        problem: the calibration problem (its free parameters and box).
        n_starts: number of starts.
        start_distribution: ``"aka2023"`` (θ_init first, then a normal around it with
            σ = 0.5 (θ₊ - θ₋) per parameter in internal coordinates, truncated to the box;
            see the module docstring), ``"lhs"`` (Latin hypercube), ``"sobol"`` (scrambled
            Sobol sequence) or ``"uniform"`` in the internal box (``theta0`` is not used).
        theta0: θ_init for ``"aka2023"`` (None: the nominal values; see `jcalib.starts`).
        coordinates: ``"physical"`` or ``"internal"``, the coordinates of ``theta0`` (the
            starts are physical either way).

    Raises:
        ValueError: unknown ``start_distribution``; ``n_starts`` not a positive integer;
            ``theta0`` invalid or outside the bounds; a free parameter without finite bounds
            (the starts are drawn from the box).
    """
    if start_distribution not in START_DISTRIBUTIONS:
        raise ValueError(
            f"multistart: start_distribution must be one of {START_DISTRIBUTIONS}; got "
            f"{start_distribution!r}"
        )
    if not isinstance(n_starts, (int, np.integer)) or n_starts < 1:
        raise ValueError(f"multistart: n_starts must be a positive integer; got {n_starts!r}")
    check_free(problem, "multistart")
    space = problem.space
    space.check_box("sample_starts")
    if start_distribution != "aka2023":
        return np.asarray(space.sample(key, int(n_starts), start_distribution))
    z0 = start_internal(problem, theta0, coordinates=coordinates, where="multistart")
    lower, upper = space.lower_internal, space.upper_internal
    std = _AKA2023_STD * (upper - lower)
    shape = (int(n_starts) - 1, problem.n_free)
    t = jax.random.truncated_normal(key, jnp.broadcast_to((lower - z0) / std, shape),
                                    jnp.broadcast_to((upper - z0) / std, shape), shape, dtype=jnp.float64)
    z = np.clip(z0 + std * np.asarray(t), lower, upper)
    z = np.concatenate([z0[None, :], z])
    return np.clip(np.asarray(space.to_physical(jnp.asarray(z))), space.lower, space.upper)


def multistart(
    key: PRNGKeyArray | None,
    problem: AbstractProblem,
    n_starts: int,
    method: str = "fides",
    start_distribution: str = "aka2023",
    *,
    starts: Float[ArrayLike, "n_starts n_free"] | None = None,
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    coordinates: str = "physical",
    stop: str | None = None,
    objective_scale: float | None = None,
    progress: bool = False,
    **local_options,
) -> MultistartResult:
    """A local least-squares method from ``n_starts`` starts (Aka et al. 2023, Table 2).

    Args:
        key: a ``jax.random`` key for the starts; the same key gives the same result (None
            with ``starts``).
        problem: the calibration problem.
        n_starts: number of starts.
        method: ``"fides"`` (the default: `jcalib.estimation.trust_region.trust_region_batch`,
            Fides's trust-region reflective method with its own stopping rule, the starts
            through vmapped lanes; pyPESTO's default optimiser), ``"lm"``
            (`levenberg_marquardt_batch`: all starts in one jitted, vmapped solve) or ``"trf"``
            (`least_squares_trf` with the autodiff Jacobian, one start after another). With
            several processes (`jcalib.distributed`) each runs its block of the starts.
        start_distribution: ``"aka2023"``, ``"lhs"``, ``"sobol"`` or ``"uniform"`` (see
            `sample_starts`); for a PEtab problem ``"uniform"`` (its nominal values are the
            published optimum, not a guess).
        starts: the starts themselves, ``(n_starts, n_free)``, physical, within the bounds
            (``start_distribution`` and ``theta0`` are then not used; the result says
            ``"given"``).
        theta0: the initial guess θ_init of ``"aka2023"`` (None: nominal values; see
            `jcalib.starts`), in ``coordinates`` (``"physical"`` or ``"internal"``).
        stop: the stop rule of ``"fides"`` and ``"trf"`` (``"lm"`` has its own), None (the
            method's own) or one of `STOP_RULES`: ``"scipy"`` (``least_squares``'s tests,
            `jcalib.estimation.trust_region.scipy_stop_options`) or ``"fides"`` (Fides's default,
            for ``"trf"`` `jcalib.estimation.least_squares.trf_stop_options`).
        objective_scale: the |f| of ``"trf"``'s Fides rule (default: -log-likelihood at the
            nominal values, e.g. a PEtab problem's published optimum).
        progress: progress bar over the starts (``"fides"`` and ``"trf"``).
        **local_options: passed to the local method (e.g. ``max_steps``).

    Returns:
        `MultistartResult`: every local result, the best, and ``sorted_losses`` for a
        waterfall plot (`jcalib.plotting.plot_multistart_waterfall`). A Ctrl-C ends the
        multistart with ``extra["status"] == "interrupted"``: the finished starts are kept as
        they are, the others say so in their ``reason`` (``"trf"``: the start being fitted
        and the later ones have no estimate; ``"lm"`` and ``"fides"``: the running starts keep
        their iterate or best point, not converged).

    Raises:
        ValueError: unknown ``method``, ``start_distribution`` or ``stop``; a stop rule with
            ``"lm"``; bad ``n_starts``, ``starts`` or ``theta0``.
            A start that cannot be used (failed solve, overflowing loss or non-finite Jacobian
            there) is not an error: it gets ``loss = inf``, ``converged=False`` and the reason;
            ``extra["n_failed_starts"]`` counts them and, when every start failed,
            ``extra["failure"]`` says why.
    """
    check_method(method, stop)
    start = time.perf_counter()
    if starts is None:
        starts = sample_starts(key, problem, n_starts, start_distribution, theta0, coordinates=coordinates)
    else:
        starts, start_distribution = _given_starts(problem, n_starts, starts), "given"
    if method in ("lm", "fides"):
        batch = levenberg_marquardt_batch if method == "lm" else trust_region_batch
        options = local_options | ({"progress": progress, "stop": stop or "fides"} if method == "fides" else {})
        result = batch(problem, starts, start_distribution=start_distribution, **options)
        return eqx.tree_at(lambda r: r.wall_time_s, result, time.perf_counter() - start)
    if stop == "fides":
        scale = objective_scale if objective_scale is not None else \
            float(problem.log_likelihood(problem.initial_internal()))
        local_options = trf_stop_options(stop, scale) | local_options
    results, status = _trf_starts(problem, starts, local_options, progress)
    return multistart_result("trf", start_distribution, problem, starts, results,
                              time.perf_counter() - start, status=status)


def _trf_starts(problem: AbstractProblem, starts: np.ndarray, options: dict,
                progress: bool) -> tuple[list[EstimationResult], str]:
    """`least_squares_trf` from each of this process's starts (`jcalib.distributed.process_slice`)
    in turn; every process's results and ``"completed"`` or ``"interrupted"`` (a Ctrl-C: the
    start being fitted and the later ones of that process get no estimate)."""
    results, status = [], "completed"
    rows = range(starts.shape[0])[distributed.process_slice(starts.shape[0])]
    for i in tqdm(rows, desc="multistart trf", unit="start", disable=not progress):
        if status == "interrupted":
            results.append(_unused_start(problem, starts[i], f"{INTERRUPTED} (KeyboardInterrupt) before this start "
                                                             "ran", n_simulations=0))
            continue
        try:
            results.append(least_squares_trf(problem, starts[i], **options))
        except FailedStartError as e:
            results.append(_unused_start(problem, starts[i], f"failed: {e}"))
        except KeyboardInterrupt:
            status = "interrupted"
            results.append(_unused_start(problem, starts[i], f"{INTERRUPTED} (KeyboardInterrupt) during this start's "
                                                             "fit: its iterates are lost", n_simulations=0))
    parts = distributed.gather_objects([(results, status)])  # every process's, in process order
    interrupted = any(part_status == "interrupted" for _, part_status in parts)
    return [r for part, _ in parts for r in part], "interrupted" if interrupted else "completed"


def _given_starts(problem: AbstractProblem, n_starts: int, starts) -> np.ndarray:
    """``starts`` as a physical ``(n_starts, n_free)`` array within the bounds, or a ValueError."""
    starts = np.asarray(starts, dtype=np.float64)
    if starts.shape != (n_starts, problem.n_free):
        raise ValueError(f"multistart: starts must be (n_starts={n_starts}, n_free={problem.n_free}); got shape "
                         f"{starts.shape}")
    start_internal(problem, starts, where="multistart", rows="n_starts")  # finite and within the bounds
    return starts


def _unused_start(problem: AbstractProblem, theta0, reason: str, n_simulations: int = 1) -> EstimationResult:
    """The result of a start without an estimate (failed or not run): the start, ``loss = inf``."""
    z, theta = _inside(problem, problem.to_internal(jnp.asarray(theta0)))
    return EstimationResult(
        method="trf", names=problem.free_names, theta=theta, theta_internal=z, loss=math.inf,
        singular_values=np.zeros(0), condition_number=math.nan, n_essential_directions=problem.n_free, n_steps=0,
        n_simulations=n_simulations, n_jacobians=0, wall_time_s=0.0, converged=False, reason=reason)


def check_method(method: str, stop: str | None = None) -> None:
    """Refuse a local method that is not one of `LOCAL_METHODS`, a stop rule that is neither None
    (the method's own) nor one of `STOP_RULES`, and a stop rule for ``"lm"`` (which stops by its
    own tests). `multistart` checks them first; a script can check them before a long import."""
    if method not in LOCAL_METHODS:
        raise ValueError(f"multistart: method must be one of {LOCAL_METHODS}; got {method!r}")
    if stop is not None and stop not in STOP_RULES:
        raise ValueError(f"multistart: stop must be None or one of {STOP_RULES}; got {stop!r}")
    if stop is not None and method == "lm":
        raise ValueError(f"multistart: stop={stop!r} is a rule of the Fides and TRF methods; Levenberg-Marquardt "
                         "('lm') stops by its own tests (stop=None)")


def final_log_likelihoods(problem: AbstractProblem, result: MultistartResult) -> Float[np.ndarray, " n_starts"]:
    """The log-likelihood at each start's end point, in the order of ``result.results``
    (``-inf`` where the start could not be used), e.g. to count the starts that reach a
    reference optimum: ``final_log_likelihoods(problem, ms) >= llh_reference - LLH_TOLERANCE``."""
    return np.array([float(problem.log_likelihood(r.theta_internal)) if math.isfinite(r.loss) else -math.inf
                     for r in result.results])


def clusters(values: Float[ArrayLike, " n_starts"], tolerance: float = LLH_TOLERANCE) -> list[dict]:
    """The starts' final objective values grouped where they agree (pyPESTO's "found N times"):
    sorted values join one group while each is within ``tolerance`` of the one before (single
    linkage); values that are not finite (failed starts) are left out.

    Args:
        values: one objective value per start, lower is better, e.g. ``-final_log_likelihoods(
            problem, result)``.
        tolerance: the largest gap within a group (default `LLH_TOLERANCE`, in the values' units).

    Returns:
        ``[{"value": lowest, "n_starts": size, "starts": indices}, ...]``, best group first.

    Example:
        >>> [(c["value"], c["n_starts"]) for c in clusters([3.0, 1.0, 1.05, float("nan"), 1.1, 7.0])]
        [(1.0, 3), (3.0, 1), (7.0, 1)]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or not tolerance >= 0:
        raise ValueError(f"clusters: values must be one per start (1-D) and tolerance >= 0; got shape "
                         f"{values.shape} and tolerance {tolerance!r}")
    order = [int(i) for i in np.argsort(values, kind="stable") if np.isfinite(values[i])]
    groups: list[list[int]] = []
    for i in order:
        if groups and values[i] - values[groups[-1][-1]] <= tolerance:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [{"value": float(values[g[0]]), "n_starts": len(g), "starts": g} for g in groups]
