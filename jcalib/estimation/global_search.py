"""Global search: differential evolution in JAX and scipy baselines.

The global methods of Aka et al. 2023 (§2.4, Tables 2-3) on a `CalibrationProblem`, all in
the problem's internal coordinates and its internal box (the multistart of local methods is
`jcalib.estimation.multistart`):

- `differential_evolution`: DE/rand/1/bin or DE/best/1/bin (Storn & Price 1997) written in
  JAX, the population's losses evaluated by one vmapped loss: a stochastic
  `jcalib.algorithm.Algorithm` (`differential_evolution_algorithm`, for any JAX function of a
  vector with a box) driven by `jcalib.algorithm.run` (a progress bar, stopped once
  converged); `differential_evolution` runs it on a problem's ``loss``, one compiled call per
  generation that is cached across calls on problems of one structure. Defaults follow
  ``scipy.optimize.differential_evolution``: population 15 per parameter, Latin-hypercube
  start, mutation factor dithered in [0.5, 1), crossover 0.7,
  out-of-box trial components redrawn uniformly in the box, and the stop rule
  std(losses) <= atol + tol |mean(losses)| with tol = 0.01.
- `scipy_minimize`: scipy's SLSQP (with the autodiff gradient), Nelder-Mead, Powell and
  differential evolution behind one interface, as in the paper's Table 3, with every model
  call counted.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> from jcalib import CalibrationProblem, models, synthetic_measurements
    >>> model = models.get("four_substance_reactions")
    >>> data = synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, 0.01)
    >>> result = differential_evolution(jax.random.key(1), CalibrationProblem(model, data), max_steps=3)
    >>> result.method, result.n_steps
    ('de', 3)
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from jcalib.algorithm import Algorithm, run
from jcalib.estimation.failures import FailedStartError, honest_outcome, point_failure
from jcalib.estimation.least_squares import _Calls, _inside, least_squares_trf
from jcalib.estimation.result import INTERRUPTED, EstimationResult
from jcalib.parameters import unit_samples
from jcalib.problems import AbstractProblem
from jcalib.starts import start_internal

__all__ = [
    "DE_STRATEGIES",
    "DifferentialEvolutionInfo",
    "DifferentialEvolutionState",
    "SCIPY_METHODS",
    "differential_evolution",
    "differential_evolution_algorithm",
    "scipy_minimize",
]

DE_STRATEGIES = ("rand1bin", "best1bin")
SCIPY_METHODS = ("slsqp", "nelder-mead", "powell", "scipy-de")
_NELDER_MEAD_POWELL_MAX_NFEV = 5000  # the paper's iteration limit (Table 3: 5000 model calls)


# --- differential evolution in JAX -----------------------------------------------------------
class DifferentialEvolutionState(NamedTuple):
    """Population in the unit cube of the box, its losses, and counters.

    Attributes:
        population: ``(n_population, n)`` in ``[0, 1]``, linear in the box coordinates.
        losses: ``(n_population,)``; failed evaluations (NaN) are stored as ``inf``.
        generation: generations done.
        converged: the spread rule std(losses) <= atol + tol |mean(losses)| holds.
    """

    population: Float[Array, "n_population n"]
    losses: Float[Array, " n_population"]
    generation: Int[Array, ""]
    converged: Bool[Array, ""]

    def best(self, lower: Float[ArrayLike, " n"], upper: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
        """The best member in box coordinates, ``lower + x_best (upper - lower)``."""
        lower = jnp.asarray(lower)
        return lower + self.population[jnp.argmin(self.losses)] * (jnp.asarray(upper) - lower)


class DifferentialEvolutionInfo(NamedTuple):
    """Per-generation diagnostics (stacked into the trace of `jcalib.algorithm.run`).

    Attributes:
        best_loss, mean_loss, std_loss: of the population after the generation (mean and
            standard deviation over the finite losses).
        best: the best member, ``(n,)`` in the unit cube.
        n_replaced: trial vectors that replaced their parent.
    """

    best_loss: Float[Array, ""]
    mean_loss: Float[Array, ""]
    std_loss: Float[Array, ""]
    best: Float[Array, " n"]
    n_replaced: Int[Array, ""]


def _check_box(lower: np.ndarray, upper: np.ndarray) -> None:
    if lower.ndim != 1 or lower.shape != upper.shape:
        raise ValueError(f"differential_evolution: the box (lower, upper) must be two 1-D arrays of one shape; got "
                         f"{lower.shape} and {upper.shape}")
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
        raise ValueError(f"differential_evolution: the box needs finite lower < upper; got lower="
                         f"{lower.tolist()}, upper={upper.tolist()}")


def differential_evolution_algorithm(
    loss_fn: Callable[[Float[Array, " n"]], Float[Array, ""]],
    lower: Float[ArrayLike, " n"],
    upper: Float[ArrayLike, " n"],
    population_size: int,
    strategy: str = "best1bin",
    mutation: float | tuple[float, float] = (0.5, 1.0),
    recombination: float = 0.7,
    tol: float = 0.01,
    atol: float = 0.0,
    init_method: str = "lhs",
    batch_size: int | None = None,
) -> Algorithm:
    """DE as a stochastic `jcalib.algorithm.Algorithm` (jittable; a generation is one vmapped loss,
    or ``batch_size`` members at a time).

    One generation ("deferred" updating, all trials from the same population): for each
    member i, the mutant is ``x_r1 + F (x_r2 - x_r3)`` (rand/1) or ``x_best + F (x_r1 -
    x_r2)`` (best/1) with r1, r2, r3 distinct and different from i; binomial crossover
    takes each component from the mutant with probability ``recombination`` (one random
    component always); components outside the box are redrawn uniformly in it; a trial
    replaces its parent when its loss is not larger.

    Args:
        loss_fn: JAX function of a point in box coordinates, ``(n,) -> ()``; NaN counts as
            ``inf`` (a rejected trial).
        lower, upper: the box, ``(n,)``, finite with ``lower < upper``.
        population_size: members (at least 5).
        strategy: ``"rand1bin"`` or ``"best1bin"``.
        mutation: the factor F, or ``(low, high)`` to draw F ~ U(low, high) per trial
            (dithering).
        recombination: crossover probability in [0, 1].
        tol, atol: the stop rule std(losses) <= atol + tol |mean(losses)| (``state.converged``).
        init_method: initial population, ``"lhs"``, ``"uniform"`` or ``"sobol"``.
        batch_size: members simulated at once (``jax.lax.map`` batches; default: the whole
            population in one vmap). Smaller batches bound the memory, keep a stiff member from
            slowing the whole population, and let a host callback (a benchmark's budget) act
            between batches rather than once per generation.

    Returns:
        ``Algorithm(init, step, stochastic=True)``: ``init(key) ->
        DifferentialEvolutionState`` and ``step(key, state) -> (state,
        DifferentialEvolutionInfo)``; ``state.best(lower, upper)`` is the best point.

    Raises:
        ValueError: a box that is not two finite 1-D arrays of one shape with ``lower <
            upper``; unknown ``strategy`` or ``init_method``; ``population_size`` < 5;
            ``recombination`` outside [0, 1].

    Example:
        A raw JAX loss goes through this builder and `jcalib.algorithm.run`
        (`differential_evolution` itself takes a `CalibrationProblem`):

        >>> import jax, jax.numpy as jnp
        >>> jax.config.update("jax_enable_x64", True)
        >>> from jcalib.algorithm import run
        >>> def sphere(x):
        ...     return jnp.sum((x - 0.3) ** 2)
        >>> lower, upper = -jnp.ones(2), jnp.ones(2)
        >>> de = differential_evolution_algorithm(sphere, lower, upper, 30, tol=1e-8)
        >>> key_init, key_run = jax.random.split(jax.random.key(0))
        >>> out = run(key_run, de, de.init(key_init), 1000, chunk_size=10,
        ...           stop=lambda state: state.converged)
        >>> out.status, [round(float(v), 3) for v in out.state.best(lower, upper)]
        ('converged', [0.3, 0.3])

    Long for its documented options; the body is 73 lines.
    """
    if strategy not in DE_STRATEGIES:
        raise ValueError(f"differential_evolution: strategy must be one of {DE_STRATEGIES}; got {strategy!r}")
    if init_method not in ("lhs", "uniform", "sobol"):
        raise ValueError(f"differential_evolution: init must be 'lhs', 'uniform' or 'sobol'; got {init_method!r}")
    if not isinstance(population_size, (int, np.integer)) or population_size < 5:
        raise ValueError(f"differential_evolution: population_size must be an integer >= 5; got "
                         f"{population_size!r}")
    if not 0.0 <= recombination <= 1.0:
        raise ValueError(f"differential_evolution: recombination must lie in [0, 1]; got {recombination}")
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
        raise ValueError(f"differential_evolution: batch_size must be an integer >= 1 or None; got {batch_size!r}")
    try:
        box = (np.atleast_1d(np.asarray(lower, dtype=np.float64)), np.atleast_1d(np.asarray(upper, dtype=np.float64)))
    except jax.errors.TracerArrayConversionError:  # inside jit: checked where it was built
        box = None
    if box is not None:
        _check_box(*box)
    lower = jnp.asarray(lower, dtype=jnp.float64)
    width = jnp.asarray(upper, dtype=jnp.float64) - lower
    n = int(lower.shape[0])
    n_pop = int(population_size)
    dither = isinstance(mutation, (tuple, list))
    f_low, f_high = (float(mutation[0]), float(mutation[1])) if dither else (float(mutation),) * 2

    def evaluate(population):
        points = lower[None, :] + population * width[None, :]
        losses = (jax.vmap(loss_fn)(points) if batch_size is None or batch_size >= n_pop
                  else jax.lax.map(loss_fn, points, batch_size=int(batch_size)))
        return jnp.where(jnp.isnan(losses), jnp.inf, losses)

    def is_converged(losses):
        finite = jnp.all(jnp.isfinite(losses))
        return finite & (jnp.std(losses) <= atol + tol * jnp.abs(jnp.mean(losses)))

    def init(key):
        population = unit_samples(key, n_pop, n, init_method)
        losses = evaluate(population)
        return DifferentialEvolutionState(population, losses, jnp.array(0), is_converged(losses))

    def step(key, state):
        pop, losses = state.population, state.losses
        k_idx, k_f, k_cross, k_jrand, k_fill = jax.random.split(key, 5)
        n_donors = 2 if strategy == "best1bin" else 3

        def donors(k, i):
            pick = jax.random.permutation(k, n_pop - 1)[:n_donors].astype(i.dtype)
            return pick + (pick >= i).astype(i.dtype)  # skip i itself

        idx = jax.vmap(donors)(jax.random.split(k_idx, n_pop), jnp.arange(n_pop))
        f = jax.random.uniform(k_f, (n_pop, 1), minval=f_low, maxval=f_high, dtype=pop.dtype)
        if strategy == "best1bin":
            base = jnp.broadcast_to(pop[jnp.argmin(losses)], pop.shape)
            mutant = base + f * (pop[idx[:, 0]] - pop[idx[:, 1]])
        else:
            mutant = pop[idx[:, 0]] + f * (pop[idx[:, 1]] - pop[idx[:, 2]])
        cross = jax.random.uniform(k_cross, pop.shape, dtype=pop.dtype) < recombination
        j_rand = jax.random.randint(k_jrand, (n_pop,), 0, n)
        cross = cross | (jnp.arange(n)[None, :] == j_rand[:, None])
        trial = jnp.where(cross, mutant, pop)
        fill = jax.random.uniform(k_fill, pop.shape, dtype=pop.dtype)
        trial = jnp.where((trial < 0.0) | (trial > 1.0), fill, trial)
        trial_losses = evaluate(trial)
        better = trial_losses <= losses
        pop = jnp.where(better[:, None], trial, pop)
        losses = jnp.where(better, trial_losses, losses)
        state = DifferentialEvolutionState(pop, losses, state.generation + 1, is_converged(losses))
        best = jnp.argmin(losses)
        finite = jnp.where(jnp.isfinite(losses), losses, jnp.nan)
        info = DifferentialEvolutionInfo(losses[best], jnp.nanmean(finite), jnp.nanstd(finite), pop[best],
                                         jnp.sum(better))
        return state, info

    return Algorithm(init, step, stochastic=True)


def differential_evolution(
    key: PRNGKeyArray,
    problem: AbstractProblem,
    *,
    population_size: int | None = None,
    strategy: str = "best1bin",
    mutation: float | tuple[float, float] = (0.5, 1.0),
    recombination: float = 0.7,
    max_steps: int = 1000,
    tol: float = 0.01,
    atol: float = 0.0,
    init: str = "lhs",
    polish: bool = False,
    chunk_size: int = 10,
    progress: bool = False,
    batch_size: int | None = None,
) -> EstimationResult:
    """Differential evolution in JAX: a global search with one vmapped loss per generation (or
    one per batch of ``batch_size`` members).

    Minimises ``problem.loss`` over the problem's internal box: `differential_evolution_algorithm`
    driven by `jcalib.algorithm.run`, stopped once the spread rule holds. Its generation is
    one jitted call cached across calls (a second run on a problem of the same structure
    does not compile again), so ``run`` loops over generations in Python
    (``compiled=False``). For a raw JAX loss function use that builder and ``run`` directly
    (see its example).

    Args:
        key: a ``jax.random`` key; the same key gives the same result.
        problem: a `CalibrationProblem`; every free parameter needs finite bounds (a box).
        population_size: members (default ``15 n`` as scipy; at least 5).
        strategy: ``"best1bin"`` (scipy's default) or ``"rand1bin"``.
        mutation: F, or ``(low, high)`` for dithering (default ``(0.5, 1.0)``).
        recombination: crossover probability (default 0.7).
        max_steps: generation budget (scipy's ``maxiter``).
        tol, atol: stop when std(losses) <= atol + tol |mean(losses)|.
        init: initial population, ``"lhs"`` (default), ``"uniform"`` or ``"sobol"``.
        polish: finish with `least_squares_trf` from the best member (``method="de+trf"``;
            counts include the polish).
        chunk_size: generations per chunk of `jcalib.algorithm.run` (the progress bar
            advances once per chunk).
        progress: progress bar over generations.
        batch_size: members simulated at once (default: all; see
            `differential_evolution_algorithm`).

    Returns:
        `EstimationResult` with ``method="de"``: the best member, ``n_steps`` =
        generations, ``n_simulations`` = ``population_size (1 + generations)``,
        ``converged`` (the spread rule held), ``history`` per generation (``best_loss``,
        ``mean_loss``, ``std_loss``, ``n_replaced``, ``best_theta`` in physical units)
        and ``extra`` (``population_size``, ``strategy``, final population losses'
        ``n_failed``). When no member of the initial population has a finite loss (e.g. a
        failed solve or an overflowing loss everywhere), no generation is run:
        ``converged=False``, ``loss = inf`` and the reason (with the failed solve's status
        or the overflow).

    Raises:
        ValueError: ``problem`` is not a `CalibrationProblem`; a free parameter without
            finite bounds; unknown ``strategy`` or ``init``; bad sizes or settings.

    Long for its documented options; the body is 75 lines.
    """
    start = time.perf_counter()
    if not isinstance(problem, AbstractProblem):
        raise ValueError(
            f"differential_evolution: problem must be a CalibrationProblem; got {type(problem).__name__} (for a "
            "loss function use differential_evolution_algorithm(loss_fn, lower, upper, ...) with "
            "jcalib.algorithm.run)"
        )
    problem.space.check_box("differential_evolution")
    lower, upper = problem.space.lower_internal, problem.space.upper_internal
    names = problem.free_names
    loss_fn = jax.tree_util.Partial(_problem_loss, problem)
    n = int(lower.size)
    n_pop = 15 * n if population_size is None else population_size
    for label, value in (("max_steps", max_steps), ("chunk_size", chunk_size)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"differential_evolution: {label} must be a positive integer; got {value!r}")
    settings = (n_pop, strategy, tuple(mutation) if isinstance(mutation, (tuple, list)) else float(mutation),
                float(recombination), float(tol), float(atol), init, batch_size)
    differential_evolution_algorithm(loss_fn, lower, upper, *settings)  # checks the settings
    lower_j, upper_j = jnp.asarray(lower), jnp.asarray(upper)
    algorithm = Algorithm(
        functools.partial(_de_init, loss_fn, lower_j, upper_j, settings),
        functools.partial(_de_step, loss_fn, lower_j, upper_j, settings), stochastic=True)
    key_init, key_run = jax.random.split(key)
    state = algorithm.init(key_init)
    # no member with a finite loss: no generation can improve on that (every trial vector is
    # compared with an inf loss, the best member is arbitrary), so stop at once with the reason
    failed_start = not bool(np.any(np.isfinite(np.asarray(state.losses))))
    out = run(key_run, algorithm, state, 0 if failed_start else int(max_steps), chunk_size=int(chunk_size),
              stop=lambda s: s.converged, compiled=False, progress=progress, desc="differential_evolution")
    state = out.state
    generations = int(state.generation)
    losses = np.asarray(state.losses)
    best = int(np.argmin(losses))
    z = np.asarray(state.best(lower, upper))
    history = _de_history(jax.tree_util.tree_map(np.asarray, out.trace), lower, upper, problem)
    converged = bool(state.converged)
    reason = (f"converged: std(losses) <= {atol} + {tol} |mean(losses)|" if converged
              else f"{INTERRUPTED} (KeyboardInterrupt) after {generations} generations"
              if out.status == "interrupted" else f"stopped: max_steps={max_steps} reached")
    n_failed = int(np.sum(~np.isfinite(losses)))
    extra = {"population_size": int(n_pop), "strategy": strategy, "n_failed_final_population": n_failed}
    z_int, theta = _inside(problem, z)
    if not math.isfinite(float(losses[best])):
        why = point_failure(problem, z_int, np.asarray(problem.residuals(jnp.asarray(z_int))),
                            "differential_evolution", "the best member",
                            fix="narrow the bounds to where the model can be simulated")
        when = (f"at the start ({int(n_pop)} members), so no generation was run" if generations == 0
                else f"after {generations} generations")
        reason = f"failed: every member of the population has a non-finite loss {when}" + (f"; {why}" if why else "")
    converged, reason = honest_outcome(converged, reason, float(losses[best]), theta)
    result = EstimationResult(
        method="de", names=names, theta=theta, theta_internal=z_int, loss=float(losses[best]),
        singular_values=np.zeros(0), condition_number=math.nan, n_essential_directions=n,
        n_steps=generations, n_simulations=int(n_pop) * (1 + generations), n_jacobians=0,
        wall_time_s=time.perf_counter() - start, converged=converged, reason=reason,
        history=history, extra=extra,
    )
    if polish and math.isfinite(result.loss):
        try:
            polished = least_squares_trf(problem, theta)
        except FailedStartError as e:  # e.g. a NaN Jacobian at the best member: keep DE's answer
            return eqx.tree_at(lambda r: (r.reason, r.converged), result,
                               (f"{reason}; TRF polish could not start: {e}", False))
        return EstimationResult(
            method="de+trf", names=names, theta=polished.theta,
            theta_internal=polished.theta_internal, loss=polished.loss,
            singular_values=polished.singular_values, condition_number=polished.condition_number,
            n_essential_directions=n, n_steps=generations + polished.n_steps,
            n_simulations=result.n_simulations + polished.n_simulations,
            n_jacobians=polished.n_jacobians, wall_time_s=time.perf_counter() - start,
            converged=polished.converged, reason=f"DE {reason}; TRF polish {polished.reason}",
            history=history, extra={**extra, "de_loss": result.loss, "polish": polished.to_dict()},
        )
    return result


def _problem_loss(problem: AbstractProblem, z):
    return problem.loss(z)


@eqx.filter_jit
def _de_init(loss_fn, lower, upper, settings, key):
    return differential_evolution_algorithm(loss_fn, lower, upper, *settings).init(key)


@eqx.filter_jit
def _de_step(loss_fn, lower, upper, settings, key, state):
    return differential_evolution_algorithm(loss_fn, lower, upper, *settings).step(key, state)


def _de_history(info: DifferentialEvolutionInfo, lower, upper, problem) -> dict:
    z = lower + info.best * (upper - lower)
    theta = np.clip(np.asarray(problem.space.to_physical(jnp.asarray(z))), problem.space.lower,
                    problem.space.upper)
    return {"best_loss": info.best_loss.tolist(), "mean_loss": info.mean_loss.tolist(),
            "std_loss": info.std_loss.tolist(), "n_replaced": info.n_replaced.tolist(),
            "best_theta": np.asarray(theta).reshape(-1, len(lower)).tolist()}


# --- scipy baselines -------------------------------------------------------------------------
def scipy_minimize(
    key: PRNGKeyArray | None,
    problem: AbstractProblem,
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    method: str = "slsqp",
    *,
    coordinates: str = "physical",
    max_steps: int | None = None,
    tol: float | None = None,
    options: dict | None = None,
) -> EstimationResult:
    """scipy optimizers on ``problem.loss`` within the internal box (Aka et al. 2023, Table 3).

    Methods (scipy defaults unless stated; NaN losses of failed solves become ``inf``):

    - ``"slsqp"``: ``minimize(method="SLSQP")`` with the exact gradient
      ``2/m Jᵀ r`` from the autodiff Jacobian (each gradient: one counted Jacobian);
    - ``"nelder-mead"``, ``"powell"``: derivative-free ``minimize`` with bounds, at most
      5000 loss evaluations by default (the paper's limit);
    - ``"scipy-de"``: ``scipy.optimize.differential_evolution`` one loss call at a time,
      seeded from ``key``; ``theta0``, when given, joins the initial population.

    Args:
        key: a ``jax.random`` key for ``"scipy-de"`` (its seed); None for the deterministic
            methods.
        problem: the calibration problem.
        theta0: start, ``(n_free,)`` or ``{name: value}`` (None: nominal values; see
            `jcalib.starts`), in ``coordinates`` (``"physical"`` or ``"internal"``).
        method: one of `SCIPY_METHODS`.
        max_steps: loss-evaluation budget of Nelder-Mead and Powell (default 5000), the
            ``maxiter`` of SLSQP (default 100) or of scipy's DE (generations, default 1000).
        tol: scipy's ``tol``.
        options: further options for ``minimize`` (or keyword arguments of
            ``differential_evolution``).

    Returns:
        `EstimationResult` with ``method`` as given; ``history["best_loss"]`` (best loss
        so far after each simulation); ``extra``: scipy's ``message``, ``nfev``,
        ``n_failed_solves``, ``max_bound_violation`` of any evaluated point.

    Raises:
        ValueError: unknown ``method``; ``theta0`` invalid or outside the bounds; no
            ``key`` for ``"scipy-de"``.

    Long for its documented options; the body is 54 lines.
    """
    if method not in SCIPY_METHODS:
        raise ValueError(f"scipy_minimize: method must be one of {SCIPY_METHODS}; got {method!r}")
    if method == "scipy-de" and key is None:
        raise ValueError("scipy_minimize: method='scipy-de' is stochastic; pass a jax.random key as the first "
                         "argument")
    start = time.perf_counter()
    z0 = start_internal(problem, theta0, coordinates=coordinates, where="scipy_minimize")
    calls = _Calls(problem)
    lower, upper = problem.space.lower_internal, problem.space.upper_internal
    bounds = scipy.optimize.Bounds(lower, upper)
    options = {} if options is None else dict(options)
    n_obs = problem.n_observed

    if method == "scipy-de":
        seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
        kwargs = {"maxiter": 1000 if max_steps is None else int(max_steps), "rng": seed, **options}
        if theta0 is not None:
            kwargs["x0"] = z0
        if tol is not None:
            kwargs["tol"] = tol
        sol = scipy.optimize.differential_evolution(calls.loss, bounds, **kwargs)
    elif method == "slsqp":
        def grad(z):
            r = calls.cached_residuals(z)
            return 2.0 / n_obs * (calls.jacobian(z).T @ r)
        opts = {"maxiter": 100 if max_steps is None else int(max_steps), **options}
        sol = scipy.optimize.minimize(calls.loss, z0, jac=grad, method="SLSQP", bounds=bounds,
                                      tol=tol, options=opts)
    else:
        budget = _NELDER_MEAD_POWELL_MAX_NFEV if max_steps is None else int(max_steps)
        opts = {"maxfev": budget, **options}
        sol = scipy.optimize.minimize(calls.loss, z0, method="Nelder-Mead" if method == "nelder-mead" else "Powell",
                                      bounds=bounds, tol=tol, options=opts)
    z = np.asarray(sol.x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        loss = float(np.mean(calls.cached_residuals(z) ** 2))
    if not math.isfinite(loss) and calls.best_z is not None:
        z, loss = calls.best_z, calls.best_loss
    z, theta = _inside(problem, z)
    converged, reason = honest_outcome(bool(sol.success), str(sol.message), loss, theta)
    if not math.isfinite(loss):
        reason += "; " + (point_failure(problem, z, calls.cached_residuals(z), "scipy_minimize",
                                        "the estimate") or "no evaluated point has a finite loss")
    return EstimationResult(
        method=method, names=problem.free_names, theta=theta, theta_internal=z,
        loss=loss if math.isfinite(loss) else math.inf,
        singular_values=np.zeros(0), condition_number=math.nan,
        n_essential_directions=problem.n_free, n_steps=int(getattr(sol, "nit", 0) or 0),
        n_simulations=calls.n_simulations, n_jacobians=calls.n_jacobians,
        wall_time_s=time.perf_counter() - start, converged=converged, reason=reason,
        history={"best_loss": calls.best_trace},
        extra={"nfev": int(getattr(sol, "nfev", calls.n_simulations)), "n_failed_solves": calls.n_failed,
               "max_bound_violation": calls.max_violation},
    )
