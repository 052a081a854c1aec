"""Helpers shared by the benchmark scripts: command line, timing, machine description, report.

Every benchmark is a module run from the repository root (``python -m benchmarks.<name>``) whose
``main(argv)`` builds its command line with `parser` (``--quick``, ``--seed``, ``--out``) and
`parse_args` (which checks ``--out`` before any work), times warm calls with `time_repeated`
(sub-millisecond calls with `per_call_seconds`), and writes one JSON report with `write_report`
(atomic, strict JSON), whose ``"machine"`` entry is `machine_info`.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from jcalib.fileio import check_output_file, write_json
from jcalib.jsonable import to_jsonable

__all__ = ["load_average", "machine_info", "parse_args", "parser", "per_call_seconds", "time_repeated", "write_report"]


def parser(doc: str, name: str, quick_help: str = "small sizes (CI smoke run)") -> argparse.ArgumentParser:
    """The command line every benchmark shares; the script adds its own flags.

    Args:
        doc: the script's docstring; its first line is the description.
        name: the benchmark's name; ``--out`` defaults to ``results/benchmarks/<name>.json``.
        quick_help: the help of ``--quick`` (what the smoke run changes).

    Returns:
        An `argparse.ArgumentParser` with ``--quick``, ``--seed`` (default 0) and ``--out``.
    """
    result = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc.splitlines()[0])
    result.add_argument("--quick", action="store_true", help=quick_help)
    result.add_argument("--seed", type=int, default=0)
    result.add_argument("--out", type=pathlib.Path, default=pathlib.Path(f"results/benchmarks/{name}.json"),
                        help="the JSON report (default %(default)s)")
    return result


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, then ``--out`` checked before any work.

    Raises:
        ValueError: ``--out`` is a folder, or its folder cannot be created or written to.
    """
    args = parser.parse_args(argv)
    args.out = check_output_file(args.out, "--out")
    return args


def time_repeated(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Time one call of ``fn()`` (usually including compilation), then ``repeats`` more.

    Args:
        fn: a function without arguments that returns a finished result (block on JAX
            arrays inside it, e.g. ``lambda: jax.block_until_ready(f(x))``).
        repeats: the number of further (warm) calls timed.

    Returns:
        ``(first_s, times, out)``: the seconds of the first call, the list of seconds of the
        ``repeats`` further calls and the output of the last call.
    """
    t = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return first, times, out


def per_call_seconds(fn: Callable[[], Any], repeats: int, min_seconds: float = 0.2) -> float:
    """Median seconds per warm call of ``fn()``, robust for sub-millisecond calls.

    One untimed call, then ``repeats`` timed loops of k calls each, k chosen so that a loop
    lasts at least ``min_seconds`` (timing single calls of ~0.3 ms on a shared machine gave
    medians 10x off); the result is the median over the loops of (loop time / k).

    Args:
        fn: a function without arguments that returns a finished result (block on JAX
            arrays inside it).
        repeats: the number of timed loops.
        min_seconds: the shortest loop.
    """
    fn()
    t = time.perf_counter()
    fn()
    single = max(time.perf_counter() - t, 1e-7)
    k = max(1, math.ceil(min_seconds / single))
    per_call = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(k):
            fn()
        per_call.append((time.perf_counter() - t) / k)
    return float(statistics.median(per_call))


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the system has none (Windows)."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def machine_info(load_at_start: list[float] | None = None, **extra) -> dict:
    """What the timings of a report ran on: platform, Python, JAX devices and version, CPU
    count, and the load averages at the start (``load_at_start``, from `load_average`) and
    now, since the benchmark machines are shared. ``extra`` entries are added as given."""
    import jax

    return {"platform": platform.platform(), "python": platform.python_version(),
            "devices": [str(d) for d in jax.devices()], "jax": jax.__version__, "cpu_count": os.cpu_count(),
            "load_average_at_start": load_at_start, "load_average_at_end": load_average(), **extra}


def write_report(path: str | os.PathLike, report: dict, indent: int = 2) -> dict:
    """Write ``report`` to ``path`` as strict JSON, atomically, and say so on stdout.

    Returns:
        What the file holds (`jcalib.jsonable.to_jsonable` of ``report``: plain Python
        types, NaN and inf as None).
    """
    report = to_jsonable(report)
    write_json(path, report, indent=indent)
    print(f"wrote {path}")
    return report
