"""Multistart against pyPESTO + Fides (issue 37): starts reaching the published optimum and CPU
time per converged start, on PEtab benchmark-collection problems.

Both tools get the same starts, uniform over the PEtab bounds in each parameter's scale
(`benchmarks.petab_tools.draw_points`, key ``--seed``), and the same cores:

- **pyPESTO + Fides** (Fides 0.8 defaults: FIM, then BFGS; ``maxiter`` 1000) on AMICI (CVODES,
  forward sensitivities, jcalib's tolerances), one process per core (pyPESTO's
  ``MultiProcessEngine``), in the reference environment of `benchmarks.petab_tools` (built on
  the first run). AMICI's model compilation is done before and not counted.
- **jcalib**: `jcalib.estimation.trust_region_batch` (Fides's method in JAX, vmapped lanes per
  process, a lane whose start stopped taking the next; ``--lanes`` of them, or by default 8 that
  go on in one lane where that is measured cheaper) on ``--processes`` processes over
  `jcalib.distributed`, each pinned to its own core (`benchmarks.petab_tools.jcalib_processes`).
  jcalib's compilation (one iteration from other starts in every process, for both lane counts
  by default) is timed apart, as AMICI's is.

A start converges when it ends within `jcalib.estimation.LLH_TOLERANCE` of the tool's own
log-likelihood at the published parameters, or above. CPU time: user + system of every process
(pyPESTO's pool included), from the start of the optimisation to its gathered result. Reported
per problem and tool: converged starts, the best log-likelihood, gradient evaluations (a
forward-sensitivity Jacobian for both), converged starts per 1,000 gradient evaluations and per
CPU minute, CPU seconds per converged start (jcalib: without and with compilation), wall time.
Writes JSON after each tool on every problem (default results/benchmarks/petab_multistart.json,
nothing finished is lost when a run is cut short), a Markdown table under ``"table"``, and the waterfall plots of both
tools (``<out>_waterfalls.png`` beside the JSON).

Usage:
    python -m benchmarks.petab_multistart [--quick] [--problems A B ...] [--n-starts N]
        [--lanes L] [--processes P] [--seed S] [--venv PATH] [--out PATH]
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.petab_tools import (  # noqa: E402
    DEFAULT_VENV,
    _fmt,
    draw_points,
    ensure_reference_venv,
    jcalib_processes,
    run_reference,
)
from experiments.petab_collection import collection_root, load_problem, problem_files, settings_of  # noqa: E402
from jcalib.estimation import LLH_TOLERANCE  # noqa: E402

PROBLEMS = ("Bertozzi_PNAS2020", "Boehm_JProteomeRes2014", "Armistead_CellDeathDis2024", "Fiedler_BMCSystBiol2016",
            "Rahman_MBS2016", "Raia_CancerResearch2011", "Laske_PLOSComputBiol2019", "Bachmann_MSB2011")
QUICK_PROBLEMS = ("Bertozzi_PNAS2020",)


def reference_side(names: list[str], problems: dict, args, tmp: pathlib.Path) -> dict:
    """pyPESTO + Fides on every problem (one reference process); its report, or the error."""
    tasks = [{"name": n, "yaml": str(problems[n]["yaml"]), "points": str(problems[n]["points"]),
              "parameter_ids": problems[n]["pp"].parameter_ids} | {k: settings_of(n)[k] for k in
                                                                   ("rtol", "atol", "max_steps")} for n in names]
    try:
        python, install = ensure_reference_venv(args.venv)
        report = run_reference(python, args.venv, tasks, {"repeats": 1, "llh_tolerance": LLH_TOLERANCE,
                                                          "model_dir": str(args.venv / "models"),
                                                          "multistart_only": True}, tmp)
        return report | {"environment": install | {"venv": str(args.venv)}}
    except RuntimeError as err:
        return {"error": str(err)}


def pypesto_record(name: str, problems: dict, args, tmp: pathlib.Path) -> dict:
    """pyPESTO's multistart record of one problem (`reference_side`), or its error."""
    ref = reference_side([name], problems, args, tmp)
    a = ref.get("problems", {}).get(name, {"error": ref.get("error", "not run")})
    return a.get("multistart", a) | {"llh_nominal": a.get("llh_nominal")}


SETTINGS = ("seed", "n_starts", "processes", "lanes", "llh_tolerance")
"""What an earlier report must share for its records to be reused (`reused`)."""


def reused(path: pathlib.Path | None, name: str, report: dict, side: str) -> dict | None:
    """``side``'s record of problem ``name`` from the report at ``path`` (None: no path), marked
    with where it came from.

    Raises:
        ValueError: the report's settings differ from this run's (`SETTINGS`), or it has no
            finished record of that side for the problem.
    """
    if path is None:
        return None
    earlier = json.loads(pathlib.Path(path).read_text())
    differ = {k: (earlier.get(k), report[k]) for k in SETTINGS if earlier.get(k) != report[k]}
    if differ:
        raise ValueError(f"--{side}-from {path}: its settings differ from this run's (earlier, now): {differ}")
    row = next((r for r in earlier.get("problems", []) if r.get("problem") == name), None)
    if row is None or "error" in row.get(side, {"error": None}):
        raise ValueError(f"--{side}-from {path}: no finished {side} record of {name} there")
    return row[side] | {"reused_from": str(path)}


def jcalib_side(name: str, p: dict, args, llh_nominal: float) -> dict:
    """jcalib's Fides multistart on ``args.processes`` processes, summarised like the reference's."""
    s = {"method": "fides", "stop": "fides", "max_steps": None, "lanes": args.lanes, "multistart_only": True}
    with tempfile.TemporaryDirectory(prefix="jcalib-petab-multistart-") as tmp:
        report = jcalib_processes(name, p["yaml"], p["points"], s, args.processes, pathlib.Path(tmp), llh_nominal)
    if "error" in report:
        return report
    ms = report["multistart"]
    cpu, compile_s = float(sum(ms["cpu_s_per_process"])), max(ms["compile_s_per_process"])
    return ms | {"llh_nominal": llh_nominal, "cpu_s": cpu, "compile_s": compile_s,
                 "cpu_s_with_compile": cpu + float(sum(ms["compile_s_per_process"])),
                 "n_gradient_evaluations": ms["n_jacobians"], "processes": report["processes"]}


def summary(ms: dict) -> dict:
    """The comparison's figures of one tool's multistart."""
    n = ms["n_converged"]
    grads, cpu = ms["n_gradient_evaluations"], ms["cpu_s"]
    finished = [llh for llh in ms["llh_starts"] if llh is not None]  # None: a start pyPESTO could not run
    out = {"converged": f"{n}/{ms['n_starts']}", "llh_best": max(finished) if finished else None,
           "per_1000_gradients": 1000 * n / grads if grads else None, "per_cpu_minute": 60 * n / cpu if cpu else None,
           "cpu_s_per_converged_start": cpu / n if n else None, "wall_s": ms["wall_time_s"]}
    if "cpu_s_with_compile" in ms:
        out["cpu_s_per_converged_start_with_compile"] = ms["cpu_s_with_compile"] / n if n else None
    return out


def _at_most(ours: float | None, theirs: float | None) -> bool | None:
    """jcalib's CPU seconds per converged start at most pyPESTO's (jcalib without a converged
    start: missed; pyPESTO without one: met; neither: None, nothing to compare)."""
    if ours is None and theirs is None:
        return None
    return ours is not None and (theirs is None or ours <= theirs)


def _verdict(met: bool | None) -> str:
    return "–" if met is None else "met" if met else "missed"


def table(rows: list[dict]) -> str:
    """Markdown: one row per problem, jcalib / pyPESTO in each cell."""
    lines = ["| problem | states / estimated | starts | converged jcalib / pyPESTO | best llh jcalib / pyPESTO | "
             "converged per 1,000 gradients | converged per CPU minute | CPU s per converged start jcalib (with "
             "compilation) / pyPESTO | wall s jcalib (compile) / pyPESTO | goal: reach, CPU (with compilation) |",
             "|---|---|---:|---|---|---|---|---|---|---|"]
    for r in rows:
        j, a = r.get("jcalib", {}), r.get("pypesto", {})
        if "error" in j or "error" in a:
            why = (j.get("error") or a.get("error") or "")[:100].replace("\n", " ").replace("|", "/")
            lines.append(f"| {r['problem']} | {r['size']} | {r['n_starts']} | error: {why} |||||||")
            continue
        sj, sa = summary(j), summary(a)
        reach = j["n_converged"] >= a["n_converged"]
        cpu, cpu_compiling = (_at_most(sj[key], sa["cpu_s_per_converged_start"]) for key in
                              ("cpu_s_per_converged_start", "cpu_s_per_converged_start_with_compile"))
        lines.append(
            f"| {r['problem']} | {r['size']} | {r['n_starts']} | {sj['converged']} / {sa['converged']} | "
            f"{_fmt(sj['llh_best'], '.6g')} / {_fmt(sa['llh_best'], '.6g')} | {_fmt(sj['per_1000_gradients'])} / "
            f"{_fmt(sa['per_1000_gradients'])} | {_fmt(sj['per_cpu_minute'])} / {_fmt(sa['per_cpu_minute'])} | "
            f"{_fmt(sj['cpu_s_per_converged_start'])} ({_fmt(sj['cpu_s_per_converged_start_with_compile'])}) / "
            f"{_fmt(sa['cpu_s_per_converged_start'])} | {j['wall_time_s']:.3g} ({j['compile_s']:.3g}) / "
            f"{a['wall_time_s']:.3g} | {_verdict(reach)}, {_verdict(cpu)} ({_verdict(cpu_compiling)}) |")
    return "\n".join(lines) + "\n"


def plot_waterfalls(rows: list[dict], path: pathlib.Path) -> None:
    """One panel per problem: both tools' final -llh, sorted, relative to the published optimum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "llh_starts" in r.get("jcalib", {}) and "llh_starts" in r.get("pypesto", {})]
    if not done:
        return
    cols = min(4, len(done))
    fig, axes = plt.subplots(-(-len(done) // cols), cols, figsize=(3.6 * cols, 2.9 * -(-len(done) // cols)),
                             squeeze=False)
    for ax, r in zip(axes.flat, done):
        for tool, style in (("jcalib", "o-"), ("pypesto", "s--")):
            llh = np.asarray(r[tool]["llh_starts"], dtype=float)
            gap = np.sort(r[tool]["llh_nominal"] - llh)
            ax.plot(np.arange(1, gap.size + 1), np.maximum(gap, 1e-3), style, ms=3, label=tool)
        ax.axhline(LLH_TOLERANCE, color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.set_title(r["problem"].split("_")[0], fontsize=9)
        ax.set_xlabel("start (sorted)", fontsize=8)
        ax.set_ylabel("llh published - final (min 1e-3)", fontsize=8)
    axes.flat[0].legend(fontsize=8)
    for ax in list(axes.flat)[len(done):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None):
    parser = common.parser(__doc__, "petab_multistart", quick_help="Bertozzi_PNAS2020 only, 4 starts")
    parser.add_argument("--problems", nargs="+", default=None, help=f"default: {' '.join(PROBLEMS)}")
    parser.add_argument("--n-starts", type=int, default=24, help="starts per problem (the same for both tools)")
    parser.add_argument("--lanes", type=int, default=None, help="jcalib's vmapped lanes per process "
                                                                "(default: trust_region_batch's)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="processes of each tool")
    parser.add_argument("--venv", type=pathlib.Path, default=DEFAULT_VENV, help="the AMICI/pyPESTO environment")
    for side in ("jcalib", "pypesto"):
        parser.add_argument(f"--{side}-from", type=pathlib.Path, default=None, metavar="REPORT",
                            help=f"take {side}'s records from an earlier report of the same settings instead of "
                                 "running them again (e.g. after the other tool's run failed)")
    args = common.parse_args(parser, argv)
    n_starts = 4 if args.quick else args.n_starts
    if n_starts < 1 or args.processes < 1 or (args.lanes is not None and args.lanes < 1):
        raise ValueError("petab_multistart benchmark: --n-starts, --processes and --lanes must be positive")
    names = list(args.problems or (QUICK_PROBLEMS if args.quick else PROBLEMS))
    load_at_start, rows = common.load_average(), []
    report = {"benchmark": "petab_multistart", "quick": args.quick, "seed": args.seed, "n_starts": n_starts,
              "processes": args.processes, "lanes": args.lanes, "llh_tolerance": LLH_TOLERANCE, "problems": rows}
    with tempfile.TemporaryDirectory(prefix="jcalib-petab-multistart-") as tmp:
        tmp, problems = pathlib.Path(tmp), {}
        for name in names:
            yaml, _ = problem_files(collection_root() / name)
            pp = load_problem(yaml, name)
            starts, batch = draw_points(pp, n_starts, 1, args.seed)
            np.savez(tmp / f"{name}.npz", starts=starts, batch=batch)
            problems[name] = {"pp": pp, "yaml": yaml, "points": tmp / f"{name}.npz"}
        for name in names:  # one problem at a time, both tools, the JSON after each
            pp = problems[name]["pp"]
            print(f"{name}: pyPESTO + Fides ...", flush=True)
            row = {"problem": name, "size": f"{len(pp.model.state_names)} / {len(pp.parameter_ids)}",
                   "n_starts": n_starts, "pypesto": reused(args.pypesto_from, name, report, "pypesto")
                   or pypesto_record(name, problems, args, tmp),
                   "jcalib": {"error": "not finished (the run was cut short)"}}
            rows.append(row)
            common.write_report(args.out, report | {"table": table(rows)})  # the reference's side kept
            print(f"{name}: jcalib ...", flush=True)
            t = time.perf_counter()
            llh_nominal = float(jax.jit(pp.log_likelihood)(pp.nominal_internal))
            row["jcalib"] = reused(args.jcalib_from, name, report, "jcalib") or (
                jcalib_side(name, problems[name], args, llh_nominal) | {"process_wall_s": time.perf_counter() - t})
            common.write_report(args.out, report | {"table": table(rows)})  # both sides kept before any summary
            print(table([row]).splitlines()[-1], flush=True)
            report |= {"table": table(rows), "machine": common.machine_info(load_at_start)}
            common.write_report(args.out, report)
            plot_waterfalls(rows, args.out.with_name(f"{args.out.stem}_waterfalls.png"))
    print(report["table"])
    return report


if __name__ == "__main__":
    main()
