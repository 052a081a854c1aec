"""The PEtab benchmark collection through jcalib.io.petab (issue 21 §4 and §6).

For every problem folder of the Benchmark-Models-PEtab collection (``shared/petab/
benchmark_models``, or the ``--problems`` named), in its own subprocess with a wall-clock
``--timeout``:

1. import it with `jcalib.io.petab.load` (a refusal is recorded with its reason);
2. simulate at the nominal parameters and compare ``simulation_table(z)["simulation"]`` row by
   row with the collection's reference simulation (``simulatedData_<name>.tsv``, or
   ``simulations.tsv``): a row matches when ``|sim - ref| <= RTOL * max(|ref|, FLOOR)``
   (`RTOL` = 1e-3, `FLOOR` = 1e-6: below ``FLOOR`` the tolerance becomes the absolute
   ``RTOL * FLOOR`` = 1e-9, so round-off on values that are zero in exact arithmetic does not
   count as a mismatch);
3. the log-likelihood at the nominal parameters and its ``jax.grad`` (PEtab parameter scale),
   checked component by component against central finite differences (`gradient_check`);
4. times: import, first call (compile + one solve), warm simulation (median), gradient
   compile and warm gradient;
5. size (simulation conditions, estimated parameters, states, reactions) and the solver
   settings used (`SETTINGS`).

Each problem appends one JSON line to ``<out>/results.jsonl`` when it finishes (so an
interrupted run loses nothing); the worker writes its partial record after every stage, so a
problem that runs past its timeout still reports how far it got. At the end
``table.md`` and ``table.json`` are written: one row per problem and the summary
"N of M reproduce their reference simulations". ``--scaling`` adds a compile-time study of
synthetic mass-action chains (10 ... 400 species).

Measured (2026-11-28, 2 shared cores, ``--timeout 400``, then ``--update`` of the problems the
solver restarts at time switches and the implicit steady states changed): 21 of 28 reproduce their
reference simulations (max rel. error <= 4.3e-5), the gradient matches finite differences on 24;
not reproduced: Sneyd (its reference has the two highest-Ca conditions swapped: with them
exchanged, 5.6e-6), Perelson (jcalib = scipy Radau to 1.4e-7), Fujita (stale condition ids,
jcalib = scipy to 2.3e-7), Zheng (the "simulations" are the measurements), Okuonghae and
Oliveira (no reference), Chen (2.8e-3 on 9 of 120 rows with Rodas5P as with Kvaerno5 at two stage
tolerances: not the solver; cause not found). Compile time
grows linearly in the chain length (4.3 s + 36 ms per species).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time

from experiments import common
from jcalib.jsonable import to_jsonable

RTOL = 1e-3
"""Relative tolerance of the comparison with the reference simulation."""
FLOOR = 1e-6
"""Reference values below this magnitude are compared with the absolute tolerance RTOL * FLOOR."""
GRAD_RTOL = 1e-3
GRAD_FLOOR = 1.0
"""Gradient check: a component passes when ``|ad - fd| <= GRAD_RTOL * max(|fd|, GRAD_FLOOR)``:
relative 1e-3, and an absolute 1e-3 (log-likelihood units per unit of parameter scale) for
components below 1. The nominal values are the published best fits, so many components are
near zero, where the finite differences' noise (the adaptive step size changes with the
parameters; ~1e-4 at rtol 1e-8 on Bertozzi_PNAS2020) is larger than the component itself."""
FD_STEPS = (1e-4, 1e-5, 1e-3, 1e-6)
"""Central-difference steps in the parameter scale (log10 / log / lin), tried in order until a
component passes (else the closest is reported)."""

FD_BUDGET_S = 60.0
"""Seconds of simulations the finite differences may take (first step); slower problems check
only the components with the largest |gradient| (the table says how many)."""

DEFAULT = {"solver": "stiff_solver", "rtol": 1e-8, "atol": 1e-10, "max_steps": 100_000}
"""jcalib.io.sbml's default (`jcalib.io.sbml.stiff_solver`): the Rosenbrock method Rodas5P, L-stable, for
stiff models (``stage_tolerances``: Kvaerno5 instead, its chord stage solves with these
tolerances, `jcalib.io.sbml.stiff_solver`); another ``solver`` names a diffrax solver class (used with
its defaults)."""
SETTINGS: dict[str, dict] = {
    "Beer_MolBioSystems2014": {
        "atol": 1e-14,
        "why": "atol 1e-14 (AMICI's default is 1e-16): the inducer concentrations are ~1e-8, so the default "
               "atol 1e-10 allows 2.4e-3 relative error (1e-14: 3.6e-5)"},
    "Brannmark_JBC2010": {
        "rtol": 1e-10, "atol": 1e-12,
        "why": "rtol 1e-10, atol 1e-12: the simulations match at the default, but the gradient of this model with a "
               "step input deviates ~1e-2 from central differences there (< 1e-3 at 1e-10/1e-12)"},
    "Giordano_Nature2020": {
        "atol": 1e-14,
        "why": "atol 1e-14: the observables are population fractions ~1e-5, so the default atol 1e-10 gives 3.9e-3 "
               "relative error (1e-14: 3.4e-6)"},
}
"""Per-problem solver settings where the default is not accurate or too slow (see the footnote)."""

QUICK = ("Boehm_JProteomeRes2014", "Bertozzi_PNAS2020")
QUICK_TIMEOUT = 60.0
SCALING_SIZES = (10, 50, 100, 200, 400)


def collection_root() -> pathlib.Path:
    """``shared/petab/benchmark_models`` beside the checkout, else under /work/shared."""
    beside = pathlib.Path(__file__).resolve().parents[2] / "shared" / "petab"
    root = beside if beside.exists() else pathlib.Path("/work/shared/petab")
    return root / "benchmark_models"


def problem_names(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and problem_files(p)[0] is not None)


def problem_files(folder: pathlib.Path) -> tuple[pathlib.Path | None, pathlib.Path | None]:
    """(the problem's YAML, the reference simulation table or None) of a collection folder."""
    name = folder.name
    yaml = folder / f"{name}.yaml"
    if not yaml.exists():
        candidates = sorted(p for p in folder.glob("*.yaml") if not p.name.startswith("petab_test"))
        yaml = candidates[0] if candidates else None
    reference = folder / f"simulatedData_{name}.tsv"
    if not reference.exists():
        reference = folder / "simulations.tsv"
    return yaml, (reference if reference.exists() else None)


def settings_of(name: str) -> dict:
    return {**DEFAULT, **SETTINGS.get(name, {})}


def load_problem(yaml: pathlib.Path, name: str, gradient: str = "forward"):
    """`jcalib.io.petab.load` of ``yaml`` with the solver settings of collection problem ``name``
    (`load_options`) and the log-likelihood's ``gradient`` mode."""
    from jcalib.io import petab as jpetab

    return jpetab.load(yaml, **load_options(name, gradient))


def load_options(name: str, gradient: str = "forward") -> dict:
    """The keyword arguments of `jcalib.io.petab.load` for collection problem ``name``: the solver
    and tolerances of `settings_of` (`DEFAULT` and its `SETTINGS` entry) and ``gradient``."""
    import diffrax as dfx

    from jcalib.io import sbml

    settings = settings_of(name)
    if settings["solver"] == "stiff_solver":
        stages = settings.get("stage_tolerances")
        solver = None if stages is None else sbml.stiff_solver(method="kvaerno5", stage_tolerances=stages)
    else:
        solver = getattr(dfx, settings["solver"])()
    return {"solver": solver, "rtol": settings["rtol"], "atol": settings["atol"], "max_steps": settings["max_steps"],
            "gradient": gradient}


# --- the worker (one problem, in its own process) ---------------------------------------------
def gradient_check(f, z, grad, steps=FD_STEPS, max_components: int | None = None) -> dict:
    """Compare ``grad`` (autodiff) with central differences of ``f`` at ``z``, component by
    component: the first step of ``steps`` whose difference passes is kept, else the closest.
    ``max_components``: check only that many, those with the largest ``|grad|`` (slow problems)."""
    import numpy as np

    z = np.asarray(z, dtype=np.float64)
    grad = np.asarray(grad, dtype=np.float64)
    fd = np.full_like(z, np.nan)
    used = np.full_like(z, np.nan)
    cache = {}

    def central(i, h):
        if (i, h) not in cache:
            up, down = z.copy(), z.copy()
            up[i] += h
            down[i] -= h
            cache[i, h] = (float(f(up)) - float(f(down))) / (2 * h)
        return cache[i, h]

    def scale(i, value):
        return max(abs(value), GRAD_FLOOR)

    order = np.argsort(-np.abs(np.nan_to_num(grad, nan=np.inf)), kind="stable")
    checked = order if max_components is None else order[:max_components]
    deviation = np.zeros_like(z)
    for i in checked:
        best = None
        for h in steps:
            d = central(i, h)
            dev = abs(grad[i] - d) / scale(i, d)
            if best is None or dev < best[0]:
                best = (dev, d, h)
            if dev <= GRAD_RTOL:
                break
        deviation[i], fd[i], used[i] = best
    finite = bool(np.all(np.isfinite(grad)))
    return {"max_rel_deviation": float(np.max(deviation)) if z.size else 0.0,
            "passes": finite and bool(np.all(deviation <= GRAD_RTOL)),
            "n_failing": int(np.sum(~(deviation <= GRAD_RTOL))), "grad_inf_norm": float(np.max(np.abs(grad)))
            if z.size else 0.0, "steps_used": sorted({float(h) for h in used if np.isfinite(h)}),
            "n_evaluations": len(cache), "n_checked": int(len(checked)), "n_components": int(z.size)}


def run_worker(name: str, record_path: pathlib.Path, root: pathlib.Path, grad: bool = True) -> dict:
    """Everything about one problem; the record is rewritten to ``record_path`` after each stage."""
    import jax

    jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64
    import numpy as np
    import pandas as pd

    record: dict = {"problem": name, "stage": "start"}

    def save(stage):
        record["stage"] = stage
        common.write_metrics(record_path.parent, record, name=record_path.name)

    folder = root / name
    yaml, reference = problem_files(folder)
    settings = settings_of(name)
    record["settings"] = settings
    record["yaml"] = yaml.name
    record["reference"] = reference.name if reference is not None else None
    save("import")
    t0 = time.perf_counter()
    try:
        pp = load_problem(yaml, name)
    except Exception as error:  # noqa: BLE001 - the reason is the result
        record.update(imported=False, reason=f"{type(error).__name__}: {error}")
        save("refused")
        return record
    record["import_s"] = time.perf_counter() - t0
    measurements = pp.petab_problem.measurement_df
    preeq = (measurements["preequilibrationConditionId"].fillna("").astype(str)
             if "preequilibrationConditionId" in measurements else pd.Series([""] * len(measurements)))
    pairs = set(zip(preeq, measurements["simulationConditionId"].astype(str), strict=True))
    record.update(imported=True, n_conditions=len(pairs), n_measurements=len(measurements),
                  n_estimated=len(pp.parameter_ids), n_states=len(pp.model.state_names),
                  n_reactions=len(pp.model.reaction_ids), preequilibration=any(p for p, _ in pairs))
    save("first simulation (compile + solve)")

    z = pp.nominal_internal
    t0 = time.perf_counter()
    sim = np.asarray(jax.block_until_ready(pp.simulate(z)))
    first = time.perf_counter() - t0
    warm = []
    for _ in range(1 if first > 20 else 3):
        t0 = time.perf_counter()
        jax.block_until_ready(pp.simulate(z))
        warm.append(time.perf_counter() - t0)
    record["first_call_s"] = first
    record["warm_sim_ms"] = 1e3 * statistics.median(warm)
    record["compile_s"] = max(first - statistics.median(warm), 0.0)
    record["n_nan"] = int(np.sum(~np.isfinite(sim)))
    save("compare")

    if reference is not None:
        table = pp.simulation_table(z)
        for column in _OVERRIDE_COLUMNS:  # the measurement table's overrides, to align by
            if column in measurements:
                table[column] = measurements[column].to_numpy()
        ref = pd.read_csv(reference, sep="\t")
        record["n_reference_rows"] = len(ref)
        r, alignment = align_reference(table, ref)
        record["alignment"] = alignment
        if r is None:
            record.update(matches=False, mismatch=alignment)
        else:
            s = table["simulation"].to_numpy(float)
            err = np.abs(s - r) / np.maximum(np.abs(r), FLOOR)
            err = np.where(np.isfinite(err), err, np.inf)
            worst = int(np.argmax(err))
            record.update(alignment=alignment, max_rel_error=float(np.max(err)),
                          n_rows_off=int(np.sum(err > RTOL)), matches=bool(np.max(err) <= RTOL),
                          worst_row={"index": worst, "observableId": str(table["observableId"][worst]),
                                     "simulationConditionId": str(table["simulationConditionId"][worst]),
                                     "time": float(table["time"][worst]), "simulation": float(s[worst]),
                                     "reference": float(r[worst])})
    else:
        record["matches"] = None
    save("llh")

    llh_fn = pp.log_likelihood  # jitted inside: the compiled simulation is reused
    record["llh"] = float(llh_fn(z))
    record["chi2"] = float(pp.chi2(z))
    if not grad:
        save("done")
        return record
    save("gradient")
    grad_fn = jax.jit(jax.grad(pp.log_likelihood))
    t0 = time.perf_counter()
    try:
        g = np.asarray(jax.block_until_ready(grad_fn(z)))
    except Exception as error:  # noqa: BLE001 - the failure is the result
        message = " ".join(str(error).split())
        if "non-finite" in message:
            message = "NaN cotangent into the implicit solver's linear solve (lineax: non-finite input)"
        record["gradient_error"] = f"{type(error).__name__}: {message[:300]}"
        save("gradient failed")
        return record
    record["grad_first_call_s"] = time.perf_counter() - t0
    warm = []
    for _ in range(1 if record["grad_first_call_s"] > 20 else 3):
        t0 = time.perf_counter()
        jax.block_until_ready(grad_fn(z))
        warm.append(time.perf_counter() - t0)
    record["warm_grad_ms"] = 1e3 * statistics.median(warm)
    record["grad_finite"] = bool(np.all(np.isfinite(g)))
    save("finite differences")
    t0 = time.perf_counter()
    # central differences cost 2 simulations per component and step: within FD_BUDGET_S, the
    # components with the largest |gradient| first
    per_component = 2 * record["warm_sim_ms"] / 1e3
    budget = max(3, int(FD_BUDGET_S / max(per_component, 1e-9)))
    record["gradient_check"] = gradient_check(llh_fn, z, g, max_components=budget if budget < z.size else None)
    record["gradient_check"]["seconds"] = time.perf_counter() - t0
    save("done")
    return record


_OVERRIDE_COLUMNS = ("observableParameters", "noiseParameters")


def _cell(value) -> str:
    """A table cell as a comparable string: NaN -> '', numbers by value, else the text."""
    import pandas as pd

    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)


def _keys(df, columns=(), observable_ids=None) -> list[tuple]:
    """(observableId, preequilibrationConditionId, simulationConditionId, time, the ``columns``,
    occurrence) per row. An observableId that is not in ``observable_ids`` but starts with one
    and ``__`` is that one (AMICI writes ``<observableId>__<overrides>__<conditions>``)."""
    import pandas as pd

    def column(name):
        return df[name] if name in df else pd.Series([""] * len(df), index=df.index)

    seen: dict[tuple, int] = {}
    keys = []
    extra = list(zip(*(column(c) for c in columns), strict=True)) if columns else [()] * len(df)
    for obs, pre, sim, t, more in zip(column("observableId"), column("preequilibrationConditionId"),
                                      column("simulationConditionId"), df["time"], extra, strict=True):
        obs = str(obs)
        if observable_ids is not None and obs not in observable_ids and obs.split("__")[0] in observable_ids:
            obs = obs.split("__")[0]
        key = (obs, "" if pd.isna(pre) else str(pre), str(sim), round(float(t), 9), *(_cell(v) for v in more))
        seen[key] = seen.get(key, -1) + 1
        keys.append((*key, seen[key]))
    return keys


def align_reference(table, ref):
    """The reference simulations in the order of ``table`` and how they were aligned: row by row
    when the keys agree in order, by keys when the reference lists the same rows in another
    order (with the override columns both tables have, and AMICI's mangled observable ids
    mapped back), else row by row with a note that the keys differ (e.g. renamed conditions)."""
    import numpy as np

    values = ref["simulation"].to_numpy(float)
    shared = [c for c in _OVERRIDE_COLUMNS if c in table and c in ref]
    for columns in ([shared, []] if shared else [[]]):  # references may write override values, not ids
        ours = _keys(table, columns)
        theirs = _keys(ref, columns, observable_ids=set(table["observableId"].astype(str)))
        if ours == theirs:
            return values, "row order"
        index = {key: i for i, key in enumerate(theirs)}
        if len(ours) == len(theirs) and sorted(ours) == sorted(theirs):
            return (np.array([values[index[key]] for key in ours]),
                    "by keys (the reference lists the rows in another order)")
        if set(ours) <= set(index):
            return np.array([values[index[key]] for key in ours]), "by keys (the reference has more rows)"
    if len(ours) == len(theirs) and [k[3] for k in ours] == [k[3] for k in theirs]:
        return values, "row order (the reference's ids differ, its times agree)"
    return None, "the reference's rows do not correspond to the measurement table's"


# --- the driver ---------------------------------------------------------------------------------
def run_problem(name: str, out: pathlib.Path, root: pathlib.Path, timeout: float, grad: bool = True) -> dict:
    """One problem in a subprocess with a wall-clock timeout; its (possibly partial) record."""
    work = out / "work"
    work.mkdir(exist_ok=True)
    record_path = work / f"{name}.json"
    record_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "experiments.petab_collection", "--worker", name, "--root", str(root),
               "--out", str(work)] + ([] if grad else ["--no-gradient"])
    t0 = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, cwd=pathlib.Path(__file__).resolve().parents[1])
    try:
        output, _ = process.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the worker's own process group, nothing else
        output, _ = process.communicate()
        timed_out = True
    wall = time.perf_counter() - t0
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {"problem": name, "stage": "start"}
    record["wall_s"] = wall
    if timed_out:
        record["timeout"] = f"timeout after {timeout:.0f} s (during: {record.get('stage')})"
    elif process.returncode != 0:
        tail = (output or "").strip().splitlines()[-3:]
        record["crash"] = f"exit {process.returncode} during {record.get('stage')}: " + " | ".join(tail)[-400:]
    record.setdefault("settings", settings_of(name))
    return record


def fmt(value, spec=".3g", missing="–"):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, spec)


def status_of(row: dict) -> str:
    if row.get("imported") is False:
        return "refused: " + row.get("reason", "")
    if "timeout" in row:
        return row["timeout"]
    if "crash" in row:
        return row["crash"]
    if "gradient_error" in row:
        return "gradient failed: " + row["gradient_error"]
    if row.get("matches") is None and row.get("imported"):
        return "no reference simulation in the folder"
    if row.get("matches") is False:
        return row.get("mismatch") or f"{row.get('n_rows_off')} rows off"
    return "ok"


def scaling_fit(points: list[tuple[float, float]]) -> dict | None:
    """Least-squares slope of log(compile) against log(size): ~1 linear, >> 1 super-linear."""
    import numpy as np

    points = [(x, y) for x, y in points if x and y and x > 0 and y > 0]
    if len(points) < 3:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    slope, intercept = np.polyfit(x, y, 1)
    return {"loglog_slope": float(slope), "n_points": len(points)}


def write_table(out: pathlib.Path, rows: list[dict], scaling: list[dict] | None, quick: bool, wall: float,
                timeout: float) -> dict:
    n_total = len(rows)
    n_match = sum(r.get("matches") is True for r in rows)
    n_with_reference = sum(r.get("reference") is not None for r in rows)
    n_imported = sum(r.get("imported") is True for r in rows)
    n_grad = sum((r.get("gradient_check") or {}).get("passes") is True for r in rows)
    mark = {True: "yes", False: "no", None: "–"}
    lines = [f"# PEtab benchmark collection through jcalib.io.petab{' (--quick)' if quick else ''}", "",
             f"**{n_match} of {n_total} problems reproduce their reference simulations** "
             f"({n_with_reference} have a reference table; {n_imported} import; goal >= 21 of 28). "
             f"Gradient matches finite differences: {n_grad}. Wall time {wall:.0f} s, timeout {timeout:.0f} s "
             "per problem.", "",
             "| problem | cond. | est. | states | reactions | imported | matches ref. | max rel. err | llh | "
             "grad check (max dev.) | import s | compile s | warm sim ms | warm grad ms | solver | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r.get("settings", {})
        solver = f"{s.get('solver')} {s.get('rtol'):.0e}/{s.get('atol'):.0e}" if s else "–"
        if s.get("stage_tolerances"):
            solver += " (stages {:.0e}/{:.0e})".format(*s["stage_tolerances"])
        gc = r.get("gradient_check")
        grad = (f"{mark[gc['passes']]} ({fmt(gc['max_rel_deviation'], '.1e')}"
                + (f"; {gc['n_checked']} of {gc['n_components']}" if gc.get("n_checked", 0) < gc.get(
                    "n_components", 0) else "") + ")") if gc else "–"
        status = " ".join(status_of(r).split()).replace("|", "\\|")[:160]
        lines.append(
            f"| {r['problem']} | {fmt(r.get('n_conditions'), 'd')} | {fmt(r.get('n_estimated'), 'd')} | "
            f"{fmt(r.get('n_states'), 'd')} | {fmt(r.get('n_reactions'), 'd')} | {mark[r.get('imported')]} | "
            f"{mark[r.get('matches')]} | {fmt(r.get('max_rel_error'), '.1e')} | {fmt(r.get('llh'), '.6g')} | "
            f"{grad} | {fmt(r.get('import_s'), '.2f')} | {fmt(r.get('compile_s'), '.1f')} | "
            f"{fmt(r.get('warm_sim_ms'), '.3g')} | {fmt(r.get('warm_grad_ms'), '.3g')} | {solver} | {status} |")
    size_points = [(r.get("n_states", 0) + r.get("n_reactions", 0), r.get("compile_s")) for r in rows
                   if r.get("compile_s") is not None]
    collection_fit = scaling_fit(size_points)
    lines += ["", "Footnotes:", "",
              f"- A row matches when |sim - ref| <= {RTOL:g} * max(|ref|, {FLOOR:g}) (relative {RTOL:g}; "
              f"absolute {RTOL * FLOOR:g} for reference values below {FLOOR:g}); max rel. err is "
              f"max |sim - ref| / max(|ref|, {FLOOR:g}).",
              f"- Gradient: jax.grad of the log-likelihood in PEtab parameter scale against central differences "
              f"with steps {', '.join(f'{h:g}' for h in FD_STEPS)} (the first that passes per component); a component "
              f"passes when |ad - fd| <= {GRAD_RTOL:g} * max(|fd|, {GRAD_FLOOR:g}) (an absolute floor: at the "
              "published best fits many components are ~0 and finite differences carry ~1e-4 of "
              "step-size-controller noise); "
              "the column shows the largest |ad - fd| / max(|fd|, 1).",
              "- compile s = first call (trace, compile and one solve) minus the warm median; warm sim = median "
              "of 3 simulations of all conditions (1 when the first call took > 20 s).",
              f"- Solver: jcalib.io.sbml's default (stiff_solver) is the Rosenbrock method Rodas5P (L-stable, order 5, "
              f"one Jacobian and LU factorisation per step) with "
              f"PIDController(rtol={DEFAULT['rtol']:g}, atol={DEFAULT['atol']:g}), max_steps {DEFAULT['max_steps']}. "
              + ("Per-problem settings: " + "; ".join(f"{k}: {v.get('why', v)}" for k, v in SETTINGS.items())
                 if SETTINGS else "No per-problem settings.")]
    if collection_fit:
        lines.append(f"- Compile time against model size (states + reactions) over the collection: log-log slope "
                     f"{collection_fit['loglog_slope']:.2f} over {collection_fit['n_points']} problems "
                     "(1 = linear). Compile time also depends on the number of conditions (one solve each is "
                     "traced) and the kinetic laws, so this is indicative.")
    if scaling:
        fit = scaling_fit([(p["n_species"], p["compile_s"]) for p in scaling])
        lines += ["", "## Compile time of synthetic mass-action chains", "",
                  "| species | reactions | compile s | warm sim ms |", "|---|---|---|---|"]
        lines += [f"| {p['n_species']} | {p['n_reactions']} | {p['compile_s']:.2f} | {p['warm_sim_ms']:.3g} |"
                  for p in scaling]
        if fit:
            import numpy as np

            n = np.array([p["n_species"] for p in scaling], dtype=float)
            c = np.array([p["compile_s"] for p in scaling], dtype=float)
            b, a = np.polyfit(n, c, 1)
            r2 = 1 - np.sum((c - (a + b * n)) ** 2) / max(np.sum((c - c.mean()) ** 2), 1e-300)
            verdict = ("roughly linear (a fixed cost plus a linear term), not exponential"
                       if fit["loglog_slope"] < 1.3 else "super-linear")
            lines += ["", f"Compile time = {a:.1f} s + {1e3 * b:.1f} ms per species (linear fit, R^2 {r2:.3f}); "
                      f"log-log slope {fit['loglog_slope']:.2f}: it grows {verdict}. The warm solve grows faster "
                      "(the stiff solver's dense Jacobian and LU factorisation, ~n^2 to n^3 per step)."]
    text = "\n".join(lines) + "\n"
    common.write_text(out / "table.md", text)
    common.write_paper_comparison(out, "PEtab benchmark collection: reference simulations at the nominal parameters",
                                  [{"claim": f"{r['problem']}: simulatedData reproduces the model at the nominal "
                                             "parameters", "paper": "reference table",
                                    "ours": ("max rel. error " + format(r["max_rel_error"], ".1e")
                                             if r.get("max_rel_error") is not None else "no comparison"),
                                    "match": r.get("matches"),
                                    "why": "" if r.get("matches") else " ".join(str(
                                        r.get("mismatch") or r.get("timeout") or r.get("reason")
                                        or ("no reference simulation" if r.get("reference") is None
                                            else f"{r.get('n_rows_off')} rows off")).split())}
                                   for r in rows], quick=quick)
    summary = {"n_problems": n_total, "n_match": n_match, "n_with_reference": n_with_reference,
               "n_imported": n_imported, "n_gradient_ok": n_grad, "wall_time_s": wall, "timeout_s": timeout,
               "quick": quick, "rtol": RTOL, "floor": FLOOR, "default_settings": DEFAULT,
               "per_problem_settings": SETTINGS, "collection_compile_fit": collection_fit,
               "rows": rows, "scaling": scaling}
    return common.write_metrics(out, summary, name="table.json")


def chain_sbml(n: int) -> str:
    """An SBML level 3 chain S0 -> S1 -> ... -> S(n-1) with mass-action rates k_i S_i."""
    species = "".join(f'<species id="S{i}" compartment="c" initialConcentration="{1.0 if i == 0 else 0.0}" '
                      'hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>' for i in range(n))
    params = "".join(f'<parameter id="k{i}" value="{1.0 + 0.01 * i}" constant="true"/>' for i in range(n - 1))
    reactions = "".join(
        f'<reaction id="R{i}" reversible="false" fast="false"><listOfReactants><speciesReference species="S{i}" '
        f'stoichiometry="1" constant="true"/></listOfReactants><listOfProducts><speciesReference '
        f'species="S{i + 1}" stoichiometry="1" constant="true"/></listOfProducts><kineticLaw><math '
        f'xmlns="http://www.w3.org/1998/Math/MathML"><apply><times/><ci>c</ci><ci>k{i}</ci><ci>S{i}</ci>'
        '</apply></math></kineticLaw></reaction>' for i in range(n - 1))
    return ('<?xml version="1.0" encoding="UTF-8"?><sbml xmlns="http://www.sbml.org/sbml/level3/version1/core" '
            'level="3" version="1"><model id="chain"><listOfCompartments><compartment id="c" size="1" '
            f'constant="true"/></listOfCompartments><listOfSpecies>{species}</listOfSpecies><listOfParameters>'
            f'{params}</listOfParameters><listOfReactions>{reactions}</listOfReactions></model></sbml>')


def run_scaling(sizes=SCALING_SIZES) -> list[dict]:
    """Compile time (first call minus warm) of synthetic chains, in this process."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import equinox as eqx
    import jax.numpy as jnp

    from jcalib.io.sbml import model_from_sbml

    points = []
    for n in sizes:
        model = model_from_sbml(chain_sbml(n), ts=[0.0, 1.0, 5.0, 10.0])
        fn = eqx.filter_jit(lambda m, th: m.simulate(th))
        theta = jnp.asarray(model.parameters.nominal)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(model, theta))
        first = time.perf_counter() - t0
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(model, theta))
            warm.append(time.perf_counter() - t0)
        w = statistics.median(warm)
        points.append({"n_species": n, "n_reactions": n - 1, "compile_s": first - w, "warm_sim_ms": 1e3 * w})
        print(f"scaling: {n} species, compile {first - w:.2f} s, warm {1e3 * w:.3g} ms", flush=True)
    return points


def main(argv=None):
    parser = common.parser(__doc__, "petab_collection", seed=False,
                           quick_help=f"only {', '.join(QUICK)} with a {QUICK_TIMEOUT:.0f} s timeout")
    parser.add_argument("--problems", nargs="*", help="problem folders to run (default: all; none with --scaling: "
                                                      "only the scaling study)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per problem (default %(default)s)")
    parser.add_argument("--root", type=pathlib.Path, default=None, help="the collection (default shared/petab)")
    parser.add_argument("--scaling", action="store_true", help="also time synthetic chains of 10..400 species")
    parser.add_argument("--no-gradient", action="store_true", help="skip the gradient and its check")
    parser.add_argument("--update", action="store_true", help="rerun only --problems and replace their rows in the "
                                                              "existing <out>/results.jsonl (the tables are rewritten)")
    parser.add_argument("--worker", help=argparse_hidden())
    args = parser.parse_args(argv)
    root = args.root or collection_root()
    if args.worker:
        common.prepare_out(args.out)
        run_worker(args.worker, args.out / f"{args.worker}.json", root, grad=not args.no_gradient)
        return None
    if not root.exists():
        raise SystemExit(f"no PEtab collection at {root}")
    out = common.prepare_out(args.out)
    names = list(args.problems if args.problems is not None else QUICK if args.quick else problem_names(root))
    timeout = min(args.timeout, QUICK_TIMEOUT) if args.quick else args.timeout
    jsonl = out / "results.jsonl"
    rows = _previous_rows(jsonl, args.problems) if args.update else []
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))  # kept until replaced: see _previous_rows
    t_start = time.perf_counter()
    for k, name in enumerate(names, 1):
        print(f"[{k}/{len(names)}] {name} ...", flush=True)
        row = run_problem(name, out, root, timeout, grad=not args.no_gradient)
        at = [i for i, r in enumerate(rows) if r["problem"] == name]  # --update: in its earlier place
        if at:
            rows[at[0]] = row
        else:
            rows.append(row)
        with jsonl.open("a") as stream:
            stream.write(json.dumps(to_jsonable(row)) + "\n")
        print(f"    {status_of(row)}; match {row.get('matches')}, max rel err {fmt(row.get('max_rel_error'))}, "
              f"llh {fmt(row.get('llh'), '.6g')}, grad {(row.get('gradient_check') or {}).get('passes')}, "
              f"{row['wall_s']:.1f} s", flush=True)
    scaling = run_scaling(SCALING_SIZES[:2] if args.quick else SCALING_SIZES) if args.scaling else None
    wall = sum(r.get("wall_s", 0.0) for r in rows) if args.update else time.perf_counter() - t_start
    written = write_table(out, rows, scaling, args.quick, wall, timeout)
    print((out / "table.md").read_text())
    print(f"wrote {out / 'results.jsonl'}, table.md and table.json")
    return written


def _previous_rows(jsonl: pathlib.Path, problems) -> list[dict]:
    """The rows of an earlier run (``--update``; those of ``problems`` are replaced as they rerun),
    one per problem: where a problem has several lines (an update appends), the last."""
    if not problems:
        raise SystemExit("--update needs --problems (the ones to rerun)")
    if not jsonl.exists():
        raise SystemExit(f"--update: no earlier run at {jsonl}")
    rows: dict[str, dict] = {}
    for line in jsonl.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["problem"]] = row  # keeps the first place, takes the last value
    return list(rows.values())


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
