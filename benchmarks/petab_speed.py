"""Real-size PEtab models: jcalib's simulation and gradient against AMICI's, CPU time (issue 36).

For each collection problem (default `PROBLEMS`: those of 10 states or more), in one run:

1. **AMICI** (unless ``--no-reference``; the virtual environment of benchmarks/petab_tools.py,
   built there on first use): benchmarks/petab_speed_reference.py times one simulation, one
   gradient with forward sensitivities and one with adjoint sensitivities at the nominal
   parameters (CVODES + KLU through pyPESTO's PEtab importer, jcalib's tolerances), CPU time;
2. **jcalib**, each problem in its own process (``--timeout`` seconds, a problem that does not
   finish is reported as such): `experiments.petab_collection.load_problem` (the collection's
   solver settings), the first calls of ``jax.jit(pp.log_likelihood)`` and of its ``jax.grad``
   (wall seconds: tracing and lowering, XLA's compilation and the first run, each recorded), then
   the median CPU time of ``--repeats`` warm calls of each;
3. agreement: the log-likelihoods (relative difference) and the gradient per component
   (``|g_jcalib - g_amici| / max(|g_amici|, 1)`` against AMICI's forward gradient; the number
   above 1e-3 is reported), and the ratios jcalib / AMICI of simulation time and of gradient time
   against the faster of AMICI's forward and adjoint gradients;
4. a profile of the simulation: each tool's solver steps from ``t = 0`` over all conditions
   (`count_steps`; CVODES's ``numsteps``), without pre-equilibrations, and the simulation's CPU
   time per step.

CPU time (``time.process_time``: every thread of the process) rather than wall time, since the
machine is shared (wall time is recorded beside it); each side's worker process is pinned to one
core (`_one_core`): AMICI runs single-threaded, and jcalib, with XLA's defaults, on that one core.
Writes JSON (default results/benchmarks/petab_speed.json) with a Markdown table under ``"table"``.

Usage:
    python -m benchmarks.petab_speed [--quick] [--no-reference] [--problems A B ...] [--repeats R]
        [--timeout S] [--venv PATH] [--out PATH]
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchmarks import common
from benchmarks.petab_tools import DEFAULT_VENV, ROOT, _reference_env, ensure_reference_venv
from experiments.petab_collection import collection_root, problem_files, problem_names, settings_of

PROBLEMS = ("Raia_CancerResearch2011", "Laske_PLOSComputBiol2019", "SalazarCavazos_MBoC2020", "Bachmann_MSB2011",
            "Alkan_SciSignal2018", "Raimundez_PCB2020", "Isensee_JCB2018", "Blasi_CellSystems2016",
            "Zheng_PNAS2012", "Lang_PLOSComputBiol2024", "Smith_BMCSystBiol2013", "Chen_MSB2009")
QUICK_PROBLEMS = ("SalazarCavazos_MBoC2020",)
WORKER = ROOT / "benchmarks" / "petab_speed_reference.py"
GRADIENT_TOLERANCE = 1e-3
"""A gradient component agrees when ``|g_jcalib - g_amici| <= 1e-3 * max(|g_amici|, 1)``."""


GRADIENT = "reverse"
"""jcalib's gradient mode here: reverse mode along the solve's steps (`jcalib.io.petab.load`)."""


def measure_jcalib(name: str, repeats: int) -> dict:
    """jcalib's side of one problem (run in its own process by `run_jcalib`)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np

    from experiments.petab_collection import load_problem

    t = time.perf_counter()
    pp = load_problem(problem_files(collection_root() / name)[0], name, gradient=GRADIENT)
    model = pp.problem.model
    record = {"import_s": time.perf_counter() - t, "n_states": len(model.state_names), "gradient_mode": GRADIENT,
              "parameter_ids": list(pp.parameter_ids),
              "n_estimated": len(pp.parameter_ids), "solver": type(model.solver).__name__}
    z = pp.nominal_internal
    for key, jitted in (("simulation", jax.jit(pp.log_likelihood)), ("gradient", jax.jit(jax.grad(pp.log_likelihood)))):
        t = time.perf_counter()
        lowered = jitted.lower(z)  # tracing and lowering to XLA
        traced = time.perf_counter()
        fn = lowered.compile()  # XLA's compilation
        compiled = time.perf_counter()
        out = np.asarray(jax.block_until_ready(fn(z)))
        record[key] = {"first_call_s": time.perf_counter() - t, "trace_s": traced - t,
                       "xla_compile_s": compiled - traced}
        times, walls = [], []
        for _ in range(repeats):
            t, w = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn(z))
            times.append(time.process_time() - t)
            walls.append(time.perf_counter() - w)
        record[key] |= {"cpu_ms": 1e3 * float(np.median(times)), "wall_ms": 1e3 * float(np.median(walls))}
        record["llh" if key == "simulation" else "values"] = out.tolist()
    record["steps"] = count_steps(pp.problem, pp.to_problem_internal(z))
    return record


def count_steps(problem, z) -> int:
    """jcalib's solver steps of one simulation of every condition at ``z`` (jcalib's internal
    coordinates), from ``t = 0`` to the last measurement, without the pre-equilibrations and
    the steady states at ``t = inf`` (as AMICI's ``numsteps``): as the benchmark counts them
    (`jcalib.benchmark.cost.CountedProblem`, from `jcalib.model.solver_steps_reported`)."""
    from jcalib.benchmark.cost import CostCounter, CountedProblem

    with CostCounter() as counter:
        CountedProblem(problem).log_likelihood(z)
    return counter.counts["solver_steps"]


def _one_core() -> None:
    """Pin a worker process to one core (the first this process may use): AMICI runs single-threaded,
    and XLA's idle worker threads, left free on another core, add CPU time that is no work (on the
    2-core machine, Laske's simulation: 266 ms CPU for 156 ms wall unpinned, 130 ms both pinned)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_jcalib(name: str, repeats: int, timeout: float) -> dict:
    """`measure_jcalib` in a fresh process, at most ``timeout`` seconds."""
    code = (f"import json, sys; from benchmarks.petab_speed import measure_jcalib; "
            f"print('RESULT' + json.dumps(measure_jcalib({name!r}, {repeats})))")
    t = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT, preexec_fn=_one_core)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr[-2000:]}"}
    return json.loads(lines[-1][len("RESULT"):]) | {"process_wall_s": time.perf_counter() - t}


def run_reference(venv: pathlib.Path, names: list[str], repeats: int, workdir: pathlib.Path) -> dict:
    """AMICI's side of every problem (benchmarks/petab_speed_reference.py in the AMICI venv)."""
    python, install = ensure_reference_venv(venv)
    tasks = [{"name": n, "yaml": str(problem_files(collection_root() / n)[0]), "parameter_ids": None}
             | {k: settings_of(n)[k] for k in ("rtol", "atol", "max_steps")} for n in names]
    job, out = workdir / "job.json", workdir / "reference.json"
    job.write_text(json.dumps({"problems": tasks, "repeats": repeats, "model_dir": str(venv / "models")}))
    done = subprocess.run([str(python), str(WORKER), "--job", str(job), "--out", str(out)], capture_output=True,
                          text=True, env=_reference_env(venv), cwd=ROOT, preexec_fn=_one_core)
    report = json.loads(out.read_text()) if out.exists() else {"problems": {}}
    report["environment"] = install
    if done.returncode != 0:
        report["error"] = f"the AMICI worker failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return report


def compare(ours: dict, amici: dict) -> dict:
    """Agreement and ratios of one problem (empty where a side has no result)."""
    import numpy as np

    out = {}
    if ours.get("llh") is not None and amici.get("llh") is not None:
        out["llh_rel_diff"] = abs(ours["llh"] - amici["llh"]) / max(abs(amici["llh"]), 1.0)
        out["simulation_ratio"] = ours["simulation"]["cpu_ms"] / amici["simulation"]["cpu_ms"]
    fastest = [amici[m]["cpu_ms"] for m in ("forward", "adjoint") if "cpu_ms" in amici.get(m, {})]
    if "values" in ours and "gradient" in amici.get("forward", {}):
        order = [amici["parameter_ids"].index(n) for n in ours["parameter_ids"]]
        # None: a component that was not finite (strict JSON)
        g = np.asarray(ours["values"], dtype=float)
        ref = np.asarray(amici["forward"]["gradient"], dtype=float)[order]
        deviation = np.abs(g - ref) / np.maximum(np.abs(ref), 1.0)
        out |= {"gradient_max_deviation": float(np.max(deviation)),
                "gradient_n_disagreeing": int(np.sum(~(deviation <= GRADIENT_TOLERANCE)))}
    if "values" in ours and fastest:
        out["gradient_ratio"] = ours["gradient"]["cpu_ms"] / min(fastest)
    for side, record in (("jcalib", ours), ("amici", amici)):
        if record.get("steps") and "cpu_ms" in record.get("simulation", {}):
            out[f"{side}_us_per_step"] = 1e3 * record["simulation"]["cpu_ms"] / record["steps"]
    return out


def table(rows: dict) -> str:
    """The Markdown table of the report."""
    def ms(record, key):
        return f"{record[key]['cpu_ms']:,.1f}" if "cpu_ms" in record.get(key, {}) else "–"

    lines = ["| problem | states / estimated | simulation ms jcalib / AMICI (ratio) | gradient ms jcalib / AMICI "
             "forward / adjoint (ratio to the faster) | steps jcalib / CVODES (µs per step) | compile s llh / "
             "gradient | llh rel. diff | gradient components off |", "|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        ours, amici, c = row["jcalib"], row["amici"], row["comparison"]
        size = f"{ours.get('n_states', '?')} / {ours.get('n_estimated', '?')}"
        sim = f"{ms(ours, 'simulation')} / {ms(amici, 'simulation')}" + (
            f" ({c['simulation_ratio']:.2g}x)" if "simulation_ratio" in c else "")
        grad = f"{ms(ours, 'gradient')} / {ms(amici, 'forward')} / {ms(amici, 'adjoint')}" + (
            f" ({c['gradient_ratio']:.2g}x)" if "gradient_ratio" in c else "")
        compile_s = (f"{ours['simulation']['first_call_s']:.0f} / {ours['gradient']['first_call_s']:.0f}"
                     if "gradient" in ours else ours.get("error", "–").splitlines()[0][:60])
        off = (f"{c['gradient_n_disagreeing']} of {ours.get('n_estimated')} (max {c['gradient_max_deviation']:.2g})"
               if "gradient_n_disagreeing" in c else "–")
        diff = f"{c['llh_rel_diff']:.1e}" if "llh_rel_diff" in c else "–"
        steps = " / ".join(f"{r['steps']:,} ({c[side + '_us_per_step']:,.0f})" if f"{side}_us_per_step" in c else "–"
                           for side, r in (("jcalib", ours), ("amici", amici)))
        lines.append(f"| {name} | {size} | {sim} | {grad} | {steps} | {compile_s} | {diff} | {off} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__, "petab_speed", quick_help=f"{', '.join(QUICK_PROBLEMS)} only")
    parser.add_argument("--no-reference", action="store_true", help="jcalib's side only (installs nothing)")
    parser.add_argument("--problems", nargs="+", default=None, help=f"default: {' '.join(PROBLEMS)}")
    parser.add_argument("--repeats", type=int, default=3, help="warm timed calls (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per problem for jcalib's side")
    parser.add_argument("--venv", type=pathlib.Path, default=DEFAULT_VENV, help="the AMICI virtual environment")
    args = common.parse_args(parser, argv)
    known = problem_names(collection_root())
    names = list(args.problems or (QUICK_PROBLEMS if args.quick else PROBLEMS))
    unknown = [n for n in names if n not in known]
    if unknown or args.repeats < 1 or args.timeout <= 0:
        raise ValueError(f"petab_speed benchmark: unknown problems {unknown} (known: {', '.join(known)}), or "
                         f"--repeats {args.repeats} < 1, or --timeout {args.timeout} <= 0")
    load_at_start = common.load_average()
    reference = {"skipped": "--no-reference", "problems": {}}
    if not args.no_reference:
        with tempfile.TemporaryDirectory(prefix="jcalib-petab-speed-") as tmp:
            reference = run_reference(args.venv, names, args.repeats, pathlib.Path(tmp))
    rows = {}
    for name in names:
        print(f"{name}: jcalib ...", flush=True)
        ours = run_jcalib(name, args.repeats, args.timeout)
        amici = reference["problems"].get(name, {})
        rows[name] = {"jcalib": ours, "amici": amici, "comparison": compare(ours, amici)}
        report = {"problems": rows, "reference": {k: v for k, v in reference.items() if k != "problems"},
                  "table": table(rows), "machine": common.machine_info(load_at_start, cpu_time="process_time"),
                  "xla_flags": os.environ.get("XLA_FLAGS", "")}
        common.write_report(args.out, report)
    print(report["table"])


if __name__ == "__main__":
    main()
