"""Where the test suite's time goes: per test, per file and per folder, compile against run.

Run the suite the way `make test` does and print the report (also `make test-budget`)::

    python -m tests.budget                 # the fast tier, as `make test`
    python -m tests.budget -m ''           # every tier, as `make test-all`
    python -m tests.budget --report DIR    # print the report of an earlier run again

As a pytest plugin (`-p tests.budget`) it records, for every test (setup, call and teardown
together): wall seconds, JAX tracing, lowering and backend-compile seconds (from
`jax.monitoring`'s duration events; a persistent-cache hit counts as compile time too, it is the
time spent getting the program) and the persistent cache's hits and misses. Each xdist worker
writes its own JSON-lines file into `$JCALIB_BUDGET_DIR`.
"""

import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest

_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "compile_s",
}
_COUNTS = {
    "/jax/compilation_cache/cache_hits": "cache_hits",
    "/jax/compilation_cache/cache_misses": "cache_misses",
}
_current: collections.Counter = collections.Counter()


def _on_duration(event: str, duration: float, **_kwargs) -> None:
    if event in _EVENTS:
        _current[_EVENTS[event]] += duration


def _on_event(event: str, **_kwargs) -> None:
    if event in _COUNTS:
        _current[_COUNTS[event]] += 1


def pytest_sessionstart(session):
    import jax  # after tests/conftest.py has set JAX's environment

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current.clear()
    start = time.perf_counter()
    yield
    record = {"nodeid": item.nodeid, "wall_s": time.perf_counter() - start, **_current}
    out = os.environ.get("JCALIB_BUDGET_DIR")
    if out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        pathlib.Path(out).mkdir(parents=True, exist_ok=True)  # a new folder, as `main` makes for itself
        with open(pathlib.Path(out) / f"{worker}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def load(directory: pathlib.Path) -> list[dict]:
    """The records of one run: one dict per test (nodeid, wall_s, trace_s, lower_s, compile_s,
    cache_hits, cache_misses)."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def _jax_s(record: dict) -> float:
    return sum(record.get(k, 0.0) for k in ("trace_s", "lower_s", "compile_s"))


def _row(name: str, records: list[dict]) -> str:
    wall = sum(r["wall_s"] for r in records)
    jax_s = sum(_jax_s(r) for r in records)
    compile_s = sum(r.get("compile_s", 0.0) for r in records)
    hits = sum(r.get("cache_hits", 0) for r in records)
    misses = sum(r.get("cache_misses", 0) for r in records)
    return (f"{wall:8.1f} {jax_s:8.1f} {compile_s:8.1f} {hits:6d} {misses:6d} {len(records):6d}  {name}")


def report(records: list[dict], n_slowest: int = 20) -> str:
    """The n slowest tests, then the totals per file and per folder, as a text table."""
    head = f"{'wall s':>8} {'jax s':>8} {'compile':>8} {'hits':>6} {'misses':>6} {'tests':>6}  "
    lines = [f"{n_slowest} slowest tests (jax s = tracing + lowering + compiling):", head + "test"]
    lines += [_row(r["nodeid"], [r]) for r in sorted(records, key=lambda r: -r["wall_s"])[:n_slowest]]
    for title, key in (("file", lambda n: n.split("::")[0]),
                       ("folder", lambda n: str(pathlib.PurePath(n.split("::")[0]).parent))):
        groups = collections.defaultdict(list)
        for r in records:
            groups[key(r["nodeid"])].append(r)
        lines += ["", f"per {title}:", head + title]
        ordered = sorted(groups.items(), key=lambda kv: -sum(r["wall_s"] for r in kv[1]))
        lines += [_row(name, rs) for name, rs in ordered]
    lines += ["", "all:", head, _row("total (worker-seconds)", records)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--report"]:
        print(report(load(pathlib.Path(argv[1]))))
        return 0
    out = pathlib.Path(tempfile.mkdtemp(prefix="jcalib-budget-"))
    command = [sys.executable, "-m", "pytest", "-n", str((os.cpu_count() or 1) + 1), "--dist", "loadfile",
               "-p", "tests.budget", *argv]
    start = time.perf_counter()
    code = subprocess.call(command, env={**os.environ, "JCALIB_BUDGET_DIR": str(out)})
    print(report(load(out)))
    print(f"\nsuite wall time {time.perf_counter() - start:.0f} s; records in {out}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
