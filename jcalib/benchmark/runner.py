"""Running a benchmark: one run (`run_one`), and the grid of problems x methods x repetitions
(`run_grid`) stored run by run, in this process or on Dask.

A run is one problem, one method configuration, one repetition ``r`` and one budget:

- an optimizer starts from the ``r``-th start point (uniform in the problem's internal box,
  drawn from ``fold_in(key(0), r)``: the same for every method, so methods are compared on
  the same starts) and gets the key ``fold_in(key(1), r)``; the problem it is handed has the
  start as its nominal values (`jcalib.benchmark.cost.CountedProblem`), so that what a method
  evaluates "at the nominal values" is not a PEtab problem's published optimum;
- a sampler gets the key ``fold_in(key(1), r)`` (the built-in samplers draw their chains'
  starts from it, uniformly in the internal box);
- an amortized method gets the same key, the problem's model as a
  `jcalib.benchmark.cost.CountedSimulator` and its noise levels; what it returns is then
  assessed (at no cost to it) by its draws at the problem's data and by simulation-based
  calibration (SBC) on fresh simulations from the prior.

Every evaluation goes through `jcalib.benchmark.cost.CountedProblem`, so the record holds the
method's cost as counted (not as the method reports it), its trace of improvements and, for
samplers, `jcalib.benchmark.metrics.sampler_metrics` against the problem's reference posterior
(and `jcalib.benchmark.metrics.c2st_marginals` where the problem has exact reference draws).
A run ends ``"finished"``, ``"budget"`` (its budget was spent) or ``"error"`` (the method raised;
the message is kept, the numbers are not used as results). A run that cannot start (its problem
fails to build, or cannot take the method) is not a record: `run_grid` runs the rest of the grid
and then raises, naming each such problem x method pair and why.

`run_grid` skips the runs the store holds, and every finished run is stored at once, by the process
that ran it: an interrupted grid loses only the runs in flight, and a rerun does the rest. The
grid runs on a Dask cluster (``engine``: a `distributed.Client`, e.g. of a dask-jobqueue SLURM
cluster, or ``"local"``: a `distributed.LocalCluster` of one process per core) or here, one run
after another (``"inline"``, the default). JAX's own parallelism (vmapped starts, chains) stays
inside a run.

Example:
    >>> import tempfile
    >>> frame = run_grid(["rosenbrock-4"], ["lm"], 1, store=tempfile.mkdtemp(), progress=False)
    >>> frame[["problem", "method", "repeat", "status"]].values.tolist()
    [['rosenbrock-4', 'lm', 0, 'finished']]
    >>> bool(frame["best_nll"][0] - -get_problem("rosenbrock-4").reference_value < 1e-8)
    True
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Mapping, Sequence

import cloudpickle
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jcalib.benchmark.cost import CostCounter, CountedProblem, CountedSimulator, check_budget
from jcalib.benchmark.methods import BenchmarkMethod, canonical_config, method_config
from jcalib.benchmark.metrics import c2st_marginals, sampler_metrics
from jcalib.benchmark.problems import BenchmarkProblem, get_problem, suite
from jcalib.benchmark.store import RunId, Store, run_id
from jcalib.estimation.multistart import sample_starts
from jcalib.problems import AbstractProblem, CalibrationProblem, residual_offset

__all__ = ["ENGINES", "run_grid", "run_one", "start_point"]

ENGINES = ("inline", "local")
REFERENCE_DRAWS = 4000
"""Draws of a problem's reference posterior a sampler's 2-D marginals are tested against (C2ST)."""
AMORTIZED_DRAWS, SBC_SIMULATIONS, SBC_DRAWS = 4000, 200, 99
"""An amortized posterior's draws at the problem's data, and its SBC: simulations from the prior
and posterior draws for each."""
_BUILT: dict[bytes, tuple] = {}  # problems built in this process, by definition (their compiled calls are kept)


def start_point(problem: AbstractProblem, repeat: int) -> np.ndarray:
    """The internal coordinates ``(n_free,)`` of repetition ``repeat``'s start (module docstring)."""
    theta = sample_starts(jax.random.fold_in(jax.random.key(0), repeat), problem, 1, "uniform")[0]
    return np.asarray(problem.to_internal(theta))


def _built(entry: BenchmarkProblem) -> tuple[AbstractProblem, float | None]:
    """The problem (built once per process) and its reference log-likelihood.

    Raises:
        ValueError: ``build`` failed or did not return a calibration problem (naming the problem).
    """
    definition = cloudpickle.dumps(entry)  # equal for the copies of one definition a Dask worker unpickles
    if definition not in _BUILT:
        try:
            problem = entry.build()
        except Exception as err:  # noqa: BLE001 - any failure of a user's builder, named
            raise ValueError(f"benchmark: building problem {entry.id!r} failed: {type(err).__name__}: {err}") from err
        if not isinstance(problem, AbstractProblem):
            raise ValueError(f"benchmark: problem {entry.id!r}'s build returned {type(problem).__name__}, not a "
                             "calibration problem (jcalib.problems.AbstractProblem)")
        reference = float(problem.log_likelihood(problem.initial_internal())) if entry.reference_at_nominal \
            else entry.reference_value
        _BUILT[definition] = problem, reference
    return _BUILT[definition]


def run_one(problem: BenchmarkProblem | str, method: str, repeat: int,
            budget: Mapping[str, float] | None = None) -> dict[str, object]:
    """One run (module docstring) and its record: status, counts, costs, times, trace, the
    environment and, for samplers, the sampler metrics.

    Raises:
        ValueError: an unknown problem or method, bad options, a bad budget; an optimizer on a
            problem whose residuals are not its likelihood's (the trace would not be comparable).
    """
    entry = get_problem(problem) if isinstance(problem, str) else problem
    resolved, options = method_config(method)
    run_id(entry.id, method, repeat, budget)  # refuses a bad repetition or budget
    return _run(entry, resolved, options, int(repeat), check_budget(budget))


def _run(entry: BenchmarkProblem, method: BenchmarkMethod, options: dict, repeat: int, budget: dict) -> dict:
    problem, reference = _built(entry)
    key = jax.random.fold_in(jax.random.key(1), repeat)
    if method.kind == "optimizer":
        start = start_point(problem, repeat)
        counted = CountedProblem(problem, jnp.asarray(start))
        offset = residual_offset(problem, [start, problem.initial_internal(), start_point(problem, repeat + 1)])
        if offset is None:
            raise ValueError(f"benchmark: {entry.id}'s residuals are not its likelihood's (|r|^2/2 differs from "
                             "-log-likelihood by more than a constant), so a least-squares method's evaluations "
                             "cannot be traced as log-likelihoods; use weighting='sigma' with known noise levels")
        with CostCounter(budget, offset, problem.n_free) as counter:
            status, message, _ = _call(lambda: method.fn(key, counted, start, **options), counter)
        extra = {"start": start.tolist()}
    elif method.kind == "sampler":
        counted = CountedProblem(problem)
        with CostCounter(budget, None, problem.n_free) as counter:
            status, message, draws = _call(lambda: method.fn(key, counted, **options), counter)
        extra = {}
        if status == "finished":
            try:
                extra = _sampler_record(entry, counter, draws)
            except (ValueError, TypeError) as err:  # what the sampler returned cannot be assessed
                status, message = "error", f"the sampler's draws: {type(err).__name__}: {str(err)[:500]}"
    else:
        status, message, extra, counter = _amortized_run(entry, problem, method, options, key, budget)
    return {"status": status, "message": message, "kind": method.kind, "options": json.dumps(options, sort_keys=True),
            **_cost_record(reference, problem, counter), **extra, **_environment()}


def _amortized_run(entry: BenchmarkProblem, problem: AbstractProblem, method: BenchmarkMethod, options: dict, key,
                   budget: dict) -> tuple[str, str, dict, CostCounter]:
    """Train an amortized method on counted simulations of the problem's model, then assess it
    (uncounted): `AMORTIZED_DRAWS` posterior draws at the problem's data against the reference
    posterior (as a sampler's, `_sampler_record`) and SBC (`jcalib.bayes.sbc.run_sbc`) on
    `SBC_SIMULATIONS` fresh simulations from the prior with `SBC_DRAWS` draws each."""
    from jcalib.bayes.sbc import run_sbc
    from jcalib.nn.data import simulate_training_set

    model, data, noise = _amortized_setting(entry, problem)
    with CostCounter(budget, None, problem.n_free) as counter:
        status, message, posterior = _call(lambda: method.fn(key, CountedSimulator(model), noise, **options), counter)
    if status != "finished":
        return status, message, {}, counter
    key_draws, key_sbc, key_ranks = jax.random.split(jax.random.fold_in(key, 1), 3)
    try:
        draws = np.asarray(posterior.sample(key_draws, data, AMORTIZED_DRAWS), dtype=np.float64)
        extra = _sampler_record(entry, counter, draws[None])
        truths = simulate_training_set(key_sbc, model, SBC_SIMULATIONS, noise=noise)
        sbc = run_sbc(key_ranks, posterior, truths.thetas, truths.trajectories, n_draws=SBC_DRAWS)
    except (ValueError, TypeError, AttributeError) as err:  # what the method returned cannot be assessed
        return "error", f"the amortized posterior: {type(err).__name__}: {str(err)[:500]}", {}, counter
    return status, message, extra | {"sbc_min_p": float(np.min(sbc.p_values)),
                                     "sbc_in_band": float(np.all(sbc.in_band))}, counter


def _amortized_setting(entry: BenchmarkProblem, problem: AbstractProblem):
    """The model, the data ``(n_times, n_outputs)`` and the noise sds ``(n_outputs,)`` an
    amortized method is trained and assessed on; a ValueError where the problem has none."""
    if not isinstance(problem, CalibrationProblem) or \
            tuple(problem.free_names) != tuple(problem.model.parameters.names):
        raise ValueError(f"benchmark: {entry.id} is not one model with every parameter free and one data set, which "
                         "an amortized method needs (a CalibrationProblem without fixed parameters)")
    model, measurements = problem.model, problem.measurements
    sigma = None if measurements.sigma is None else np.asarray(measurements.sigma, dtype=np.float64)
    values = np.asarray(measurements.values, dtype=np.float64)
    if sigma is not None and sigma.ndim == 2:
        sigma = sigma[0] if np.all(sigma == sigma[0]) else None
    if sigma is None or not np.all(np.asarray(measurements.mask)) or values.shape != (len(model.ts), model.n_outputs):
        raise ValueError(f"benchmark: {entry.id}'s data must measure every output at every time of its model, with "
                         "one known noise level per output, for an amortized method")
    return model, values, np.broadcast_to(sigma, (model.n_outputs,))


def _call(fn, counter: CostCounter) -> tuple[str, str, object]:
    """``fn()``'s status (``"finished"``, ``"budget"``, ``"error"``), message and result; a
    Ctrl-C is passed on (nothing of the run is stored)."""
    try:
        out = fn()
    except Exception as err:  # noqa: BLE001 - a method's failure is a result of the benchmark
        if counter.interrupted or "KeyboardInterrupt" in str(err):
            raise KeyboardInterrupt("a Ctrl-C during an evaluation") from None
        if counter.exhausted:
            return "budget", _budget_message(counter), None
        return "error", f"{type(err).__name__}: {str(err)[:500]}", None
    if counter.interrupted:
        raise KeyboardInterrupt("a Ctrl-C during an evaluation (the method carried on)")
    return ("budget", _budget_message(counter), out) if counter.exhausted else ("finished", "", out)


def _budget_message(counter: CostCounter) -> str:
    return f"the budget of {counter.budget[counter.exhausted]:g} {counter.exhausted} was spent"


def _cost_record(reference: float | None, problem: AbstractProblem, counter: CostCounter) -> dict:
    trace = np.asarray(counter.trace, dtype=np.float64).reshape(-1, 4)
    cost = counter.cost()
    return {
        "n_free": problem.n_free, "n_observed": int(problem.n_observed),
        "reference_nll": np.nan if reference is None or not np.isfinite(reference) else -float(reference),
        "best_nll": float(trace[-1, 3]) if len(trace) else np.nan,
        **{f"n_{k}": v for k, v in counter.counts.items()},
        "evaluations": cost["evaluations"], "gradients": cost["gradients"],
        "run_s": max(counter.wall_s - counter.compile_s - counter.callback_s, 0.0), "compile_s": counter.compile_s,
        "callback_s": counter.callback_s, "n_callbacks": counter.n_callbacks, "wall_s": counter.wall_s,
        "cpu_s": counter.cpu_s,
        "trace_evaluations": trace[:, 0].tolist(), "trace_gradients": trace[:, 1].tolist(),
        "trace_seconds": trace[:, 2].tolist(), "trace_nll": trace[:, 3].tolist(),
    }


def _sampler_record(entry: BenchmarkProblem, counter: CostCounter, draws) -> dict:
    """The sampler metrics of ``draws`` (per gradient: NaN where the sampler took none)."""
    cost = counter.cost()
    draws = np.asarray(draws, dtype=np.float64)
    seconds = counter.wall_s - counter.compile_s - counter.callback_s
    metrics = sampler_metrics(draws, max(cost["gradients"], 1.0), max(seconds, 1e-9),
                              entry.reference_mean, entry.reference_sd)
    if cost["gradients"] == 0:
        metrics["ess_per_gradient"] = np.nan
    flat = draws.reshape(-1, draws.shape[-1])
    if entry.reference_draws is not None:
        metrics |= _c2st_record(entry, draws)
    return metrics | {"n_draws": int(flat.shape[0]), "mean": flat.mean(axis=0).tolist(),
                      "sd": flat.std(axis=0, ddof=1).tolist()}


def _c2st_record(entry: BenchmarkProblem, draws: np.ndarray) -> dict:
    """The largest and the mean C2ST accuracy of the 2-D marginals against ``REFERENCE_DRAWS``
    of the problem's reference draws (seed 0)."""
    reference = np.asarray(entry.reference_draws(np.random.default_rng(0), REFERENCE_DRAWS), dtype=np.float64)
    if reference.shape != (REFERENCE_DRAWS, draws.shape[-1]):
        raise ValueError(f"{entry.id}'s reference_draws returned shape {reference.shape}, not "
                         f"({REFERENCE_DRAWS}, {draws.shape[-1]})")
    accuracy = c2st_marginals(None, draws, reference)
    return {"c2st_max": float(accuracy.max()), "c2st_mean": float(accuracy.mean())}


def _environment() -> dict[str, object]:
    import jcalib

    return {"jcalib_version": jcalib.__version__, "jax_version": jax.__version__, "backend": jax.default_backend(),
            "devices": ", ".join(str(d) for d in jax.devices()), "machine": platform.platform(),
            "cpu_count": os.cpu_count()}


def run_grid(problems: str | Sequence[str | BenchmarkProblem], methods: Sequence[str], repeats: int | Iterable[int],
        budget: Mapping[str, float] | None = None, *, store: Store | str | os.PathLike, engine=None,
        n_workers: int | None = None, progress: bool = True):
    """The grid ``problems x methods x repeats``, each run stored as it finishes (module docstring).

    Args:
        problems: a suite's name, or problem ids / `BenchmarkProblem` s.
        methods: method configurations (`jcalib.benchmark.methods.method_config`; stored and
            reported with their options sorted, `jcalib.benchmark.methods.canonical_config`).
        repeats: the number of repetitions (0, 1, ...) or the repetitions themselves.
        budget: ``{unit: amount}`` for every run (`jcalib.benchmark.cost.BUDGET_UNITS`).
        store: a `Store` or its folder.
        engine: None or ``"inline"`` (here), ``"local"`` (a new Dask `LocalCluster` of
            ``n_workers`` processes, default one per core) or a `distributed.Client`.
        n_workers: processes of ``"local"``.
        progress: a progress bar over the runs.

    Returns:
        The records of the grid's runs (those stored before included) as a pandas frame.

    Raises:
        ValueError: an unknown suite, problem, method or engine, bad options or budget, no
            repetitions (before anything runs); after the grid, the problem x method pairs that
            could not run (a problem that fails to build or cannot take the method, e.g. an
            optimizer where the residuals are not the likelihood's), each with its reason.
    """
    entries = _entries(problems)
    if isinstance(methods, str):
        raise ValueError(f"run_grid: methods is a list of configurations; got the string {methods!r} "
                         f"(write [{methods!r}])")
    configs = {canonical_config(m): method_config(m) for m in methods}  # reordered options: one configuration
    repeats = _repeats(repeats)
    budget = check_budget(budget)
    if not entries or not configs or not repeats:
        raise ValueError("run_grid: give at least one problem, one method and one repetition")
    store = store if isinstance(store, Store) else Store(store)
    grid = [(e, m, r, run_id(e.id, m, r, budget)) for e in entries for m in configs for r in repeats]
    pending = [g for g in grid if not store.has(g[3])]
    bar = tqdm(total=len(grid), initial=len(grid) - len(pending), desc="benchmark runs", unit="run",
               disable=not progress)
    unsuitable: dict[tuple[str, str], str] = {}
    with bar:
        tasks = [(store.path, e, *configs[m], r, budget, run) for e, m, r, run in pending]
        for run, refusal in _execute(tasks, engine, n_workers):
            if refusal is not None:
                unsuitable.setdefault((run.problem, run.method), refusal)
            bar.update()
    if unsuitable:
        pairs = "; ".join(f"{p} x {m}: {why}" for (p, m), why in sorted(unsuitable.items()))
        raise ValueError(f"run_grid: {len(unsuitable)} problem x method pairs could not run (the other runs are "
                         f"stored): {pairs}")
    frame = store.frame()
    return frame[frame["digest"].isin({g[3].digest for g in grid})].reset_index(drop=True)


def _entries(problems) -> list[BenchmarkProblem]:
    """The problems of a suite's name or of a list of ids and `BenchmarkProblem` s."""
    if isinstance(problems, str):
        try:
            return suite(problems)
        except ValueError as err:
            raise ValueError(f"{err} (a single problem is a list: [{problems!r}])") from None
    return [get_problem(p) if isinstance(p, str) else p for p in problems]


def _repeats(repeats) -> list[int]:
    """``range(repeats)`` for a count, else the repetitions given (each an integer >= 0, once)."""
    def whole(r) -> bool:
        return isinstance(r, (int, np.integer)) and not isinstance(r, bool) and r >= 0
    if whole(repeats):
        return list(range(int(repeats)))
    given = list(repeats) if isinstance(repeats, Iterable) and not isinstance(repeats, str) else None
    if given is None or not all(map(whole, given)):
        raise ValueError(f"run_grid: repeats is a count or a list of integers >= 0; got {repeats!r}")
    return sorted({int(r) for r in given})


def _run_and_store(path, entry: BenchmarkProblem, method: BenchmarkMethod, options: dict, repeat: int,
                   budget: dict, run: RunId) -> tuple[RunId, str | None]:
    """One task of the grid: run it and store its record (unless another worker did already);
    returns the run and, where the problem cannot be built or cannot take the method (a
    ValueError before the method starts; nothing stored), why. A Dask worker is a fresh process:
    float64 is switched on here, as jcalib's command line does."""
    jax.config.update("jax_enable_x64", True)
    store = Store(path)
    if not store.has(run):
        try:
            record = _run(entry, method, options, repeat, budget)
        except ValueError as err:
            return run, str(err)
        if not store.has(run):
            store.append(run, record)
    return run, None


def _execute(tasks: list[tuple], engine, n_workers: int | None):
    """Yield each task's ``(run, refusal)`` as it finishes, on the engine (see `run_grid`)."""
    if engine in (None, "inline"):
        for task in tasks:
            yield _run_and_store(*task)
        return
    from distributed import Client, LocalCluster, as_completed

    if engine == "local":
        with LocalCluster(n_workers=n_workers or os.cpu_count(), threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield from _on_dask(client, tasks, as_completed)
    elif isinstance(engine, Client):
        threads = {w: n for w, n in engine.nthreads().items() if n != 1}
        if threads:
            raise ValueError(f"run_grid: the client's workers must run one thread each (a run's cost is counted "
                             f"per process); these run more: {threads}. Start them with --nthreads 1 (dask-jobqueue: "
                             "cores=processes)")
        yield from _on_dask(engine, tasks, as_completed)
    else:
        raise ValueError(f"run_grid: engine must be one of {ENGINES}, a distributed.Client or None; got {engine!r}")


def _on_dask(client, tasks: list[tuple], as_completed):
    futures = [client.submit(_run_and_store, *task, pure=False) for task in tasks]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.cancel(futures)
