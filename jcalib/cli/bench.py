"""``jcalib bench``: run a benchmark grid of methods on a suite's problems and write its report."""

from __future__ import annotations

import pathlib
from typing import Annotated

import typer

from jcalib.cli.common import _interrupted, _number, _parse_assignments

__all__ = ["bench"]


def bench(
    suite: Annotated[str, typer.Argument(help="the suite (e.g. analytic)")],
    methods: Annotated[list[str] | None, typer.Option(
        help="method configurations, space-separated or repeated: --methods 'lm fides trf:stop=fides,max_steps=200' "
             "(default: lm fides)")] = None,
    repeats: Annotated[int, typer.Option(help="repetitions (start points, sampler keys) per problem and method")] = 5,
    budget: Annotated[list[str] | None, typer.Option(
        help="a limit per run, unit=amount (evaluations, gradients, seconds); repeatable")] = None,
    store: Annotated[pathlib.Path, typer.Option(help="the record store's folder: runs stored there are skipped")] =
        pathlib.Path("results/benchmark/store"),
    problems: Annotated[str | None, typer.Option(help="comma-separated problem ids of the suite (default: all)")] =
        None,
    engine: Annotated[str, typer.Option(help="inline (this process) | local (a Dask cluster of --workers "
                                             "processes)")] = "inline",
    workers: Annotated[int | None, typer.Option(help="local: processes (default: one per core)")] = None,
    report: Annotated[pathlib.Path | None, typer.Option(
        help="the report's folder (default: the store's folder/../report)")] = None,
    unit: Annotated[str, typer.Option(help="the report's cost unit: evaluations | gradients | seconds")] =
        "gradients",
    petab_collection: Annotated[pathlib.Path | None, typer.Option(
        help="a Benchmark-Models-PEtab folder: its problems become the suite 'petab'")] = None,
):
    """Run every (problem, method, repetition) not in the store yet, storing each as it finishes
    (a Ctrl-C loses only the runs in flight), then write the report of this grid's runs
    (report.md, tables, figures)."""
    from jcalib.benchmark import register_petab_collection, run_grid
    from jcalib.benchmark import report as write_report
    from jcalib.benchmark import suite as suite_problems
    from jcalib.benchmark.reporting import UNITS
    from jcalib.benchmark.runner import ENGINES

    if unit not in UNITS:
        raise ValueError(f"--unit must be one of {', '.join(UNITS)}; got {unit!r}")
    if engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if repeats < 1:
        raise ValueError(f"--repeats must be a positive integer; got {repeats}")
    limits = _limits(budget)
    configs = [m for text in (methods or ["lm fides"]) for m in text.split()]
    if petab_collection is not None:
        register_petab_collection(petab_collection)
    entries = _selected(suite_problems(suite), suite, problems)
    try:
        frame = run_grid(entries, configs, repeats, limits, store=store, engine=engine, n_workers=workers)
    except KeyboardInterrupt:
        _interrupted(f"the finished runs are stored in {store}; run the same command again to do the rest")
    path = write_report(frame, report or store.parent / "report", unit)
    counts = frame["status"].value_counts().to_dict()
    typer.echo(f"{len(frame)} runs ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}); report: {path}")
    errors = frame[frame["status"] == "error"]
    if len(errors):
        first = errors.iloc[0]
        typer.echo(f"note: {len(errors)} runs ended in an error (stored as such); the first, {first['problem']} x "
                   f"{first['method']} repeat {first['repeat']}: {first['message'][:300]}", err=True)


def _limits(budget: list[str] | None) -> dict[str, float]:
    """``--budget unit=amount ...`` as ``{unit: amount}``, each unit once."""
    units = [item.partition("=")[0].strip() for item in budget or []]
    if len(set(units)) < len(units):
        raise ValueError(f"--budget: give each unit once; got {budget}")
    return {u: _number(text, f"--budget {u}") for u, text in _parse_assignments(budget, "--budget").items()}


def _selected(entries: list, suite: str, problems: str | None) -> list:
    """The suite's problems named in ``--problems`` (all where None)."""
    if problems is None:
        return entries
    wanted = [p.strip() for p in problems.split(",") if p.strip()]
    unknown = sorted(set(wanted) - {e.id for e in entries})
    if unknown:
        raise ValueError(f"--problems: {unknown} are not in suite {suite!r}; its problems: {[e.id for e in entries]}")
    return [e for e in entries if e.id in wanted]
