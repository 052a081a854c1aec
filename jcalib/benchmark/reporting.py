"""A benchmark's report: tables and figures from a store's records, written to a folder.

For optimizers, per problem the *best* is the lower of the reference's negative log-likelihood and
the best any stored run reached; a run's value is the best it evaluated (a line search's trial
points included), as in COCO. Per (problem, method): the runs and how they ended, the fraction
within 0.05, 2 and 5 of the best (`jcalib.benchmark.metrics.fraction_within`), the medians of their
costs (the ODE solver's steps among them), and the *converged* runs (within 0.05) per gradient and
per second; figures: COCO's runtime distributions to the targets ``best + 10^e``, ``e`` from 2 down
to -3 (`TARGET_EXPONENTS`: below 1e-3 a log-likelihood difference is within the solver's
tolerance), Dolan-Moré and Moré-Wild profiles of the average runtime to ``best + 0.05``, and
waterfalls. For samplers: ESS per gradient and per second, R-hat, the errors against the reference
posterior and the largest C2ST accuracy of its 2-D marginals against exact reference draws (0.5:
indistinguishable). A run that ended in an error counts as a run that reached nothing.

Example:
    >>> import tempfile
    >>> from jcalib.benchmark.runner import run_grid
    >>> store = tempfile.mkdtemp()
    >>> _ = run_grid(["gaussian-2"], ["gauss-newton"], 2, store=store, progress=False)
    >>> path = report(store, tempfile.mkdtemp())
    >>> path.name, optimizer_table(Store(store).frame())["within_0.05"].tolist()
    ('report.md', [1.0])
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from jcalib.benchmark import metrics
from jcalib.benchmark.cost import BUDGET_UNITS
from jcalib.benchmark.store import Store
from jcalib.fileio import atomic_write_text

__all__ = ["TARGET_EXPONENTS", "UNITS", "optimizer_table", "report", "sampler_table"]

TARGET_EXPONENTS = tuple(np.linspace(2, -3, 26))
UNITS = BUDGET_UNITS
_CONVERGED = 0.05


def _best(frame: pd.DataFrame) -> pd.Series:
    """Per problem: the lower of the reference and the best stored value (NaN: neither)."""
    values = pd.Series(_final(frame), index=frame.index)
    return pd.concat([values, frame["reference_nll"]], axis=1).min(axis=1).groupby(frame["problem"]).min()


def _seconds(frame: pd.DataFrame) -> pd.Series:
    """Each run's seconds, NaN where the counting's own time was 90 % or more of the time not spent
    compiling: then the remainder is within the estimate's error, not a measurement."""
    measured = frame["wall_s"] - frame["compile_s"]
    return frame["run_s"].where(frame["callback_s"] < 0.9 * measured)


def _final(frame: pd.DataFrame) -> np.ndarray:
    """Each run's best value, NaN for a run that ended in an error (its numbers are not results)."""
    return frame["best_nll"].where(frame["status"] != "error").to_numpy(dtype=np.float64)


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each method labelled by its budget where the runs have several budgets (runs
    of different budgets are not pooled)."""
    if frame["budget"].nunique() <= 1:
        return frame
    return frame.assign(method=frame["method"] + " " + frame["budget"])


def optimizer_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (problem, method) of the optimizer runs in ``frame`` (`Store.frame`); columns
    in the module docstring (the fractions NaN for a problem without a reference or any value)."""
    frame = _labelled(frame[frame["kind"] == "optimizer"])
    best = _best(frame)
    rows = []
    for (problem, method), runs in frame.groupby(["problem", "method"], sort=True):
        within = metrics.fraction_within(_final(runs), float(best[problem]), (_CONVERGED, 2.0, 5.0)) \
            if np.isfinite(best[problem]) else {t: np.nan for t in (_CONVERGED, 2.0, 5.0)}
        n_converged = within[_CONVERGED] * len(runs)
        rows.append({"problem": problem, "method": method, "runs": len(runs),
                     **{status: int((runs["status"] == status).sum()) for status in ("finished", "budget", "error")},
                     "best": float(np.nanmin(_final(runs))) if np.isfinite(_final(runs)).any() else np.nan,
                     **{f"within_{t:g}": f for t, f in within.items()},
                     "median_evaluations": runs["evaluations"].median(), "median_gradients": runs["gradients"].median(),
                     **({"median_solver_steps": runs["n_solver_steps"].median()} if "n_solver_steps" in runs
                        else {}),  # records made before the steps were counted have none
                     "median_run_s": _seconds(runs).median(skipna=False),
                     "converged_per_gradient": _per(n_converged, runs["gradients"].sum()),
                     "converged_per_second": _per(n_converged, _seconds(runs).sum(skipna=False))})
    return pd.DataFrame(rows)


def _per(count: float, cost: float) -> float:
    """``count / cost``; NaN where nothing was spent (a derivative-free method has no gradients)."""
    return count / cost if cost > 0 else np.nan


def sampler_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (problem, method) of the sampler and amortized runs: means over the finished
    runs of the sampler metrics (`jcalib.benchmark.metrics.sampler_metrics`), the C2ST accuracy,
    and for amortized methods their training simulations, the smallest SBC p-value and the
    fraction of runs whose SBC rank ECDFs all stayed in their band."""
    frame = _labelled(frame[frame["kind"].isin(["sampler", "amortized"])])
    columns = [c for c in ("ess_per_gradient", "ess_per_second", "rhat_max", "mean_error", "sd_error", "c2st_max",
                           "n_simulations", "sbc_min_p", "sbc_in_band") if c in frame]
    finished = frame[frame["status"] == "finished"]
    if "ess_per_second" in finished:
        finished = finished.assign(ess_per_second=finished["ess_per_second"].where(_seconds(finished).notna()))
    table = finished.groupby(["problem", "method"])[columns].mean()
    counts = frame.groupby(["problem", "method"]).agg(runs=("status", "size"),
                                                      finished=("status", lambda s: int((s == "finished").sum())))
    return counts.join(table).reset_index()


def _runtimes(runs: pd.DataFrame, targets: np.ndarray, unit: str) -> np.ndarray:
    """``(n_runs, n_targets)`` runtimes in ``unit`` (``inf`` where not reached or the run failed)."""
    out = np.full((len(runs), targets.size), np.inf)
    for i, (_, run) in enumerate(runs.iterrows()):
        costs = np.asarray(run[f"trace_{unit}"], dtype=np.float64)
        if run["status"] != "error" and costs.size:
            out[i] = metrics.runtimes_to_targets(costs, np.asarray(run["trace_nll"], dtype=np.float64), targets)
    return out


def _spent(runs: pd.DataFrame, unit: str) -> np.ndarray:
    return runs["run_s" if unit == "seconds" else unit].to_numpy(dtype=np.float64)


def _frame(runs) -> pd.DataFrame:
    """The records of a frame, a `Store` or a store's folder; a ValueError where there are none."""
    if isinstance(runs, pd.DataFrame):
        frame = runs
    elif isinstance(runs, Store):
        frame = runs.frame()
    elif not pathlib.Path(runs).is_dir():
        raise ValueError(f"report: no store at {os.fspath(runs)!r}; give the folder run_grid stored the runs in")
    else:
        frame = Store(runs).frame()
    if frame.empty:
        raise ValueError("report: there are no runs; run the benchmark first")
    return frame


def _profiles(frame: pd.DataFrame, best: pd.Series, unit: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Methods, the ``(n_problems, n_methods)`` average runtimes to ``best + 0.05`` and the
    problems' parameter counts."""
    methods, problems = sorted(frame["method"].unique()), sorted(frame["problem"].unique())
    art = np.full((len(problems), len(methods)), np.inf)
    for i, problem in enumerate(problems):
        for j, method in enumerate(methods):
            runs = frame[(frame["problem"] == problem) & (frame["method"] == method)]
            if len(runs):
                runtimes = _runtimes(runs, np.array([best[problem] + _CONVERGED]), unit)[:, 0]
                art[i, j] = metrics.average_runtime(runtimes, np.maximum(_spent(runs, unit), np.where(
                    np.isfinite(runtimes), runtimes, 0.0)))
    n_free = frame.groupby("problem")["n_free"].first().reindex(problems).to_numpy(dtype=np.float64)
    return methods, art, n_free


def _figures(frame: pd.DataFrame, best: pd.Series, unit: str) -> dict:
    """The optimizer figures: ECDF of runtimes, profiles, waterfalls."""
    from jcalib.plotting.benchmark import plot_profiles, plot_runtime_ecdf, plot_waterfalls

    figures, curves = {}, {}
    spent = _spent(frame, unit)
    positive = spent[np.isfinite(spent) & (spent > 0)]
    top = float(positive.max()) if positive.size else 1.0
    budgets = np.geomspace(min(float(positive.min()) if positive.size else 1.0, top / 10), top, 200)
    for method, runs in frame.groupby("method", sort=True):
        runtimes = np.concatenate([_runtimes(r, metrics.coco_targets(best[p], TARGET_EXPONENTS), unit)
                                   for p, r in runs.groupby("problem")])
        curves[method] = metrics.runtime_ecdf(runtimes, budgets)
    figures[f"ecdf_{unit}.png"] = plot_runtime_ecdf(budgets, curves, unit=unit)
    methods, art, n_free = _profiles(frame, best, unit)
    finite = art[np.isfinite(art)]
    taus = np.geomspace(1.0, max(float(finite.max() / max(finite.min(), 1e-300)), 2.0) * 2 if finite.size else 10.0,
                        200)
    # Moré and Wild's n + 1 turns evaluations into simplex gradients; gradients and seconds stay as they are
    n_free = n_free if unit == "evaluations" else np.zeros_like(n_free)
    alphas = np.geomspace(budgets[0] / (n_free.max() + 1), top, 200)
    performance, data = metrics.performance_profile(art, taus), metrics.data_profile(art, n_free, alphas)
    figures[f"profiles_{unit}.png"] = plot_profiles(taus, dict(zip(methods, performance.T)), alphas,
                                                    dict(zip(methods, data.T)), unit=unit)
    finals = {p: {m: _final(r) for m, r in runs.groupby("method")} for p, runs in frame.groupby("problem")}
    figures["waterfalls.png"] = plot_waterfalls(finals, best.to_dict())
    return figures


def report(runs: Store | pd.DataFrame | str | os.PathLike, folder: str | os.PathLike, unit: str = "gradients",
           notes: Sequence[str] = ()) -> pathlib.Path:
    """Write ``report.md`` (tables, figure links), ``optimizers.csv``, ``samplers.csv`` and the
    figures (runtimes in ``unit``: ``"evaluations"``, ``"gradients"`` or ``"seconds"``) of the
    runs (a store, its folder, or a frame of its records such as `run_grid` returns) into
    ``folder`` (created; an earlier report's files there are replaced); returns the path of
    ``report.md``. Runs of different budgets are reported apart. ``notes``: paragraphs under the
    title (e.g. the command and commit that made the runs).

    Raises:
        ValueError: an unknown unit; no store at the path; no runs.
    """
    from jcalib.fileio import prepare_output_dir, save_figure

    if unit not in UNITS:
        raise ValueError(f"report: unit must be one of {UNITS}; got {unit!r}")
    frame = _frame(runs)
    folder = prepare_output_dir(folder, "report folder")
    for name in ("report.md", "optimizers.csv", "samplers.csv", "waterfalls.png",
                 *(f"{kind}_{u}.png" for kind in ("ecdf", "profiles") for u in UNITS)):
        (folder / name).unlink(missing_ok=True)
    versions = {c: ", ".join(sorted(frame[c].astype(str).unique()))
                for c in ("jcalib_version", "jax_version", "devices")}
    lines = ["# Benchmark report", "", *(line for note in notes for line in (note, "")),
             f"{len(frame)} runs; jcalib {versions['jcalib_version']}, JAX "
             f"{versions['jax_version']} on {versions['devices']}.", ""]
    optimizers = frame[frame["kind"] == "optimizer"]
    if len(optimizers):
        table = optimizer_table(frame)
        table.to_csv(folder / "optimizers.csv", index=False)
        lines += ["## Optimizers", "", f"Converged: within {_CONVERGED} of the best (the reference or the best run).",
                  "", table.to_markdown(index=False, floatfmt=".4g"), ""]
        labelled = _labelled(optimizers)
        best = _best(labelled)
        known = labelled[labelled["problem"].map(lambda p: np.isfinite(best[p]))]
        spent = known.groupby("method")["run_s" if unit == "seconds" else unit].transform("sum")
        if (spent <= 0).any():
            lines += [f"Left out of the figures: {', '.join(sorted(known[spent <= 0]['method'].unique()))}, which "
                      f"spent no {unit} (derivative-free in gradients: see the evaluations).", ""]
            known = known[spent > 0]
        for name, fig in (_figures(known, best, unit) if len(known) else {}).items():
            save_figure(fig, folder / name)
            lines += [f"![{name}]({name})", ""]
    samplers = frame[frame["kind"].isin(["sampler", "amortized"])]
    if len(samplers):
        table = sampler_table(frame)
        left_out = "ess_per_second" in table and table["ess_per_second"].isna().any()
        note = ["Seconds are left out (NaN) where the counting's own time was 90 % or more of a run's time "
                "(problems that evaluate in microseconds).", ""] if left_out else []
        table.to_csv(folder / "samplers.csv", index=False)
        lines += ["## Samplers and amortized posteriors", "", table.to_markdown(index=False, floatfmt=".4g"), "", *note]
    atomic_write_text(folder / "report.md", "\n".join(lines))
    return folder / "report.md"
