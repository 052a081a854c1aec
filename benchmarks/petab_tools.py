"""PEtab benchmark collection: jcalib against AMICI (CVODES, forward sensitivities) + pyPESTO.

Target (issue 22 §1): jcalib's log-likelihood gradient within 3x of AMICI's per call, and
faster than AMICI for batches of simulations and for multistarts. In one run, for each
collection problem (``../shared/petab/benchmark_models/<name>``; default `PROBLEMS`):

1. the points both tools get, drawn once here: ``n_starts`` multistart starts uniform over the
   PEtab bounds (`jcalib.estimation.sample_starts`, ``"uniform"``, key ``--seed``: the starts
   that `experiments.petab_multistart.run_problem` draws itself) and ``n_batch`` parameter
   vectors around the nominal one (each component uniform within ``BATCH_SPREAD`` of its bound
   width, in PEtab's parameter scale, clipped to the bounds); both in PEtab's scales, saved to
   an .npz that the reference side reads;
2. **AMICI + pyPESTO** (unless ``--no-reference``): the system packages AMICI builds with
   (`SYSTEM_PACKAGES`, apt-get, only when missing and only as root), a virtual environment
   (default results/benchmarks/amici-venv) with the PyPI ``swig<4.4`` (4.3.1) installed first and
   pinned for AMICI's own build too (`SWIG_REQUIREMENT`: one SWIG for AMICI and its models), then
   AMICI (built from source), pyPESTO, Fides and petab (`REFERENCE_REQUIREMENTS`); then
   benchmarks/petab_tools_reference.py runs in it: pyPESTO's PEtab importer (PEtab v1 route,
   AMICI model with forward sensitivities, CVODES with jcalib's tolerances), one simulation and
   one gradient at the nominal parameters, the batch (the faster of a loop over the objective
   and AMICI's OpenMP ``run_simulations``), and a pyPESTO multistart with Fides (one process per
   CPU) from the same starts;
3. **jcalib**: `experiments.petab_collection.load_problem` (the collection's solver settings:
   `jcalib.io.sbml.stiff_solver`, rtol 1e-8, atol 1e-10 unless the problem has its own; the report
   names the solver class), ``jax.jit(pp.log_likelihood)`` and ``jax.grad(pp.log_likelihood)``
   at ``pp.nominal_internal`` (PEtab scale, forward sensitivities), the batch as one jitted
   ``jax.vmap(pp.log_likelihood)``, and the multistart of
   `experiments.petab_multistart.run_problem` (``--method``: by default scipy's trust-region
   reflective method with jcalib's autodiff Jacobian, one start after another; ``fides``, Fides's
   method with all starts in one vmapped solve and its own stopping rules; ``--max-steps`` caps the
   iterations; for TRF, ``--stop fides``, the default, stops a start as the reference's Fides does
   by default, when an accepted step changed -llh by less than 1e-8 (1 + |llh|), with llh at the
   published optimum (`jcalib.estimation.trf_stop_options`); ``--stop scipy`` by scipy's own
   tests, ftol = xtol = gtol = 1e-8, ftol relative to the cost); then the batch and
   the multistart again on ``--processes`` local processes (default: the CPU count, as AMICI's
   OpenMP batch and pyPESTO's pool use every core; `benchmarks.petab_tools_jcalib_worker` over
   `jcalib.distributed`), because one jcalib process uses one core;
4. agreement: the nominal log-likelihood (relative difference), the gradient per component
   (``|g_jcalib - g_amici| / max(|g_amici|, 1)``: the nominal values are optima, so many
   components are near zero) and the batch's log-likelihoods;
5. ratios: gradient time jcalib / AMICI per call (target <= 3), batch speed-up AMICI time /
   jcalib time (warm, and with jcalib's compilation), multistart time per converged start
   pyPESTO / jcalib (one process, and ``--processes``). A start converges when its final
   log-likelihood is within `jcalib.estimation.LLH_TOLERANCE` of that tool's
   nominal log-likelihood, or
   higher.

Times: median of ``repeats`` warm calls (the first call, jcalib's compilation, is reported
apart); AMICI's model import and C++ compilation are reported apart too. The reference side
runs before jcalib's, in its own process; the two never run at the same time. Writes JSON
(default results/benchmarks/petab_tools.json), with a Markdown table under ``"table"``.
``--quick`` runs Bertozzi_PNAS2020 with few starts and a small batch (CI smoke run; with
``--no-reference`` about a minute). The first run with the reference builds AMICI from source
(7 min on 2 shared cores) and compiles one C++ model per problem (15 s for Bertozzi_PNAS2020;
cached in the venv folder, ``models/``).

Usage:
    python -m benchmarks.petab_tools [--quick] [--no-reference] [--problems A B ...]
        [--n-starts N] [--n-batch N] [--max-steps N] [--repeats R] [--method trf|fides|lm] [--stop fides|scipy]
        [--processes P] [--seed S]
        [--venv PATH] [--out PATH]
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from benchmarks import common  # noqa: E402
from experiments.petab_collection import (  # noqa: E402
    GRAD_FLOOR,
    collection_root,
    load_problem,
    problem_files,
    problem_names,
    settings_of,
)
from experiments.petab_multistart import run_problem  # noqa: E402
from jcalib.estimation import LLH_TOLERANCE, STOP_RULES, sample_starts, trf_stop_options  # noqa: E402
from jcalib.estimation.multistart import LOCAL_METHODS  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = ROOT / "benchmarks" / "petab_tools_reference.py"
PROCESS_TIMEOUT_S = 3600  # jcalib's multi-process side of one problem
DEFAULT_VENV = ROOT / "results" / "benchmarks" / "amici-venv"
# SWIG from PyPI, one version for AMICI's own extension and for every model it compiles: AMICI's
# sdist asks for swig at build time, and pip's isolated build then takes the newest (4.5.1) while
# the models are compiled with the swig on PATH; the two SWIG runtimes differ and a compiled model
# fails to load ("'SwigPyObject' object has no attribute 'module'"). So SWIG_REQUIREMENT goes into
# the venv first, is the constraint of the isolated build too (PIP_CONSTRAINT), and is the swig
# the models use (the venv's bin first on PATH, and $SWIG). Versions that build and run together
# on CPython 3.11 (AMICI 1.0 is built from its sdist, ~5 min on 2 cores).
SWIG_REQUIREMENT = "swig==4.3.1"
REFERENCE_REQUIREMENTS = ("amici==1.0.1", "pypesto==0.7.0", "fides==0.8.0", "petab==0.8.2")
# Debian names of what AMICI's build needs (swig comes from PyPI); HDF5 lets pyPESTO pickle AMICI
# objectives (solver settings), which its MultiProcessEngine needs
SYSTEM_PACKAGES = ("g++", "cmake", "libopenblas-dev", "libhdf5-dev")
PROBLEMS = ("Bertozzi_PNAS2020", "Boehm_JProteomeRes2014", "Armistead_CellDeathDis2024", "Fiedler_BMCSystBiol2016",
            "Rahman_MBS2016")
QUICK_PROBLEMS = ("Bertozzi_PNAS2020",)
TARGET_GRADIENT_RATIO = 3.0  # jcalib's gradient at most 3x AMICI's time per call
BATCH_REPEATS = 1  # warm calls of a batch after the first (the batch takes seconds)
BATCH_SPREAD = 0.05  # batch vectors: nominal +- 5 % of the bound width, per component, in PEtab's scale
LLH_RTOL = 1e-6  # the two tools agree on the nominal log-likelihood to this relative difference
GRADIENT_RTOL = 1e-3  # ... and on the gradient to this (relative, floor GRAD_FLOOR = 1)
# full / quick
SETTINGS = {"n_starts": (24, 4), "n_batch": (1000, 32), "max_steps": (None, None), "repeats": (10, 3),
            "stop": ("fides", "fides"), "method": ("trf", "trf")}


# --- the reference installation ---------------------------------------------------------------
def ensure_system_packages(packages=SYSTEM_PACKAGES) -> dict:
    """Install the Debian packages AMICI's build needs when dpkg lacks them (``apt-get update``
    once, then ``apt-get install -y``), only as root.

    Returns:
        What was done: ``{"missing": [...], "installed": bool}`` (``"checked": False`` where
        there is no dpkg; the build then finds the tools or says what it lacks).

    Raises:
        RuntimeError: packages are missing and this process is not root (the message gives the
            command to run), or apt-get failed (with its output).
    """
    if shutil.which("dpkg-query") is None:
        return {"checked": False, "missing": [], "installed": False}
    missing = [p for p in packages if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                                     text=True).stdout.strip() != "install ok installed"]
    if not missing:
        return {"checked": True, "missing": [], "installed": False}
    if os.geteuid() != 0:
        raise RuntimeError(f"AMICI needs the system packages {', '.join(missing)} to build; install them with "
                           f"`sudo apt-get update && sudo apt-get install -y {' '.join(missing)}` and rerun (or run "
                           "with --no-reference)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        _run_step(cmd, env)
    return {"checked": True, "missing": missing, "installed": True}


def ensure_reference_venv(venv: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """The venv's python, creating the venv and installing AMICI, pyPESTO, Fides and petab when
    it lacks them (SWIG from PyPI first, see `SWIG_REQUIREMENT`).

    Returns:
        The interpreter and what was done (``installed``, ``install_s``, the pins, versions).

    Raises:
        RuntimeError: a step failed (with its output), or the packages do not import after it.
    """
    python = venv / "bin" / "python"
    requirements = [SWIG_REQUIREMENT, *REFERENCE_REQUIREMENTS]
    check = [str(python), "-c", "import json, importlib.metadata as m; import amici, pypesto, fides, petab; "
             "print(json.dumps({p: m.version(p) for p in ('amici', 'pypesto', 'fides', 'petab', 'swig')}))"]
    env = _reference_env(venv)
    done = subprocess.run(check, capture_output=True, text=True, env=env) if python.exists() else None
    if done is not None and done.returncode == 0:
        return python, {"installed": False, "requirements": requirements, "versions": json.loads(done.stdout)}
    system = ensure_system_packages()
    t = time.perf_counter()
    venv.mkdir(parents=True, exist_ok=True)
    constraints = venv / "swig-constraint.txt"
    constraints.write_text(SWIG_REQUIREMENT + "\n")
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir"]
    for cmd in ([sys.executable, "-m", "venv", str(venv)], [*pip, SWIG_REQUIREMENT], [*pip, *REFERENCE_REQUIREMENTS]):
        _run_step(cmd, env | {"PIP_CONSTRAINT": str(constraints)})
    install_s = time.perf_counter() - t
    done = subprocess.run(check, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"AMICI/pyPESTO do not import after the installation:\n{done.stderr[-4000:]}")
    return python, {"installed": True, "install_s": install_s, "requirements": requirements,
                    "versions": json.loads(done.stdout), "system_packages": system}


def _run_step(cmd: list[str], env: dict) -> None:
    print("  $ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")


def _reference_env(venv: pathlib.Path) -> dict:
    """The environment of the reference side: the venv's bin first on PATH and ``$SWIG`` its swig
    (for AMICI's model compilation, see `SWIG_REQUIREMENT`), C++ compilation on every core, and
    no JAX settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "VIRTUAL_ENV", "PIP_"))}
    n = str(os.cpu_count() or 1)
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "SWIG": str(venv / "bin" / "swig"),
            "AMICI_PARALLEL_COMPILE": n, "CMAKE_BUILD_PARALLEL_LEVEL": n}
    return env


def run_reference(python: pathlib.Path, venv: pathlib.Path, tasks: list[dict], settings: dict,
                  workdir: pathlib.Path) -> dict:
    """Run the worker in the reference venv on ``tasks`` (one per problem); its report."""
    job, out = workdir / "reference_job.json", workdir / "reference.json"
    job.write_text(json.dumps({"problems": tasks, **settings}))
    cmd = [str(python), str(WORKER), "--job", str(job), "--out", str(out)]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=_reference_env(venv), cwd=ROOT)
    report = json.loads(out.read_text()) if out.exists() else {"problems": {}}
    report["process_wall_s"] = time.perf_counter() - t
    if done.returncode != 0:
        report["error"] = f"the AMICI worker failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return report


# --- the points both tools get ------------------------------------------------------------------
def draw_points(pp, n_starts: int, n_batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, batch)`` in PEtab's parameter scales, ``(n, n_estimated)`` each: the starts of
    `experiments.petab_multistart.run_problem` (uniform in the box of each parameter's scale)
    and the batch vectors around the nominal ones (`BATCH_SPREAD`)."""
    physical = sample_starts(jax.random.key(seed), pp.problem, n_starts, "uniform")
    starts = np.asarray(jax.vmap(lambda theta: pp.from_problem_internal(pp.problem.to_internal(theta)))(physical))
    lower, upper, nominal = (np.asarray(a) for a in (pp.lower, pp.upper, pp.nominal_internal))
    u = np.random.default_rng(seed).uniform(-1.0, 1.0, (n_batch, nominal.size))
    batch = np.clip(nominal + BATCH_SPREAD * (upper - lower) * u, lower, upper)
    return starts, batch


# --- jcalib's side -------------------------------------------------------------------------------
def _timed(fn, repeats: int) -> dict:
    first, times, out = common.time_repeated(lambda: jax.block_until_ready(fn()), repeats)
    return {"first_call_s": first, "median_ms": 1e3 * float(np.median(times)) if times else None,
            "times_s": times, "_out": np.asarray(out)}


def jcalib_side(name: str, pp, starts: np.ndarray, batch: np.ndarray, s: dict, seed: int) -> dict:
    """jcalib's timings and values for one problem (the same points as the reference's)."""
    z = pp.nominal_internal
    llh_fn = jax.jit(pp.log_likelihood)
    sim = _timed(lambda: llh_fn(z), s["repeats"])
    grad_fn = jax.jit(jax.grad(pp.log_likelihood))
    grad = _timed(lambda: grad_fn(z), s["repeats"])
    batch_fn = jax.jit(jax.vmap(pp.log_likelihood))
    zs = jax.numpy.asarray(batch)
    batch_timing = _timed(lambda: batch_fn(zs), BATCH_REPEATS)
    llh_batch = batch_timing.pop("_out")
    warm_s = batch_timing["median_ms"] / 1e3
    row = run_problem(collection_root() / name, s["n_starts"], seed, s["max_steps"], s["method"], _stop(s))
    result = row.pop("_starts")
    if not np.allclose(result.starts, _physical(pp, starts), rtol=1e-10):
        raise RuntimeError(f"{name}: the multistart's starts are not the ones given to the reference")
    return {
        "llh_nominal": float(sim.pop("_out")), "simulation": sim,
        "gradient": grad | {"values": grad.pop("_out").tolist()},
        "batch": batch_timing | {"n": len(batch), "how": "jax.jit(jax.vmap(pp.log_likelihood)), one call",
                                 "warm_s": warm_s, "per_second": len(batch) / warm_s,
                                 "per_second_with_compile": len(batch) / batch_timing["first_call_s"],
                                 "n_finite": int(np.isfinite(llh_batch).sum()), "_llh": llh_batch},
        "multistart": row | {"optimizer": _optimizer(s, row["llh_nominal"]),
                             "timing": "wall time of the whole batch, compilation included"},
    }


def _stop(s: dict) -> str | None:
    """The stop rule the local method takes: ``--stop`` for TRF and Fides's method; LM stops by its own (None)."""
    return None if s["method"] == "lm" else s["stop"]


def _optimizer(s: dict, llh_nominal: float) -> str:
    """jcalib's multistart recipe in words."""
    if s["method"] == "fides":
        return ("fides (jcalib.estimation.trust_region: Fides's trust-region reflective method, all starts in one "
                f"vmapped solve, Fides's default stopping rules), max_steps {s['max_steps']}")
    if s["method"] == "lm":
        return f"lm (vmapped Levenberg-Marquardt), max_steps {s['max_steps']}"
    return (f"trf (scipy's trust-region reflective with jcalib's autodiff Jacobian), max_steps {s['max_steps']}, "
            f"stop {s['stop']!r}: {trf_stop_options(s['stop'], llh_nominal) or 'scipy tests'}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jcalib_processes(name: str, yaml: pathlib.Path, points: pathlib.Path, s: dict, n_processes: int,
                     tmp: pathlib.Path, llh_nominal: float) -> dict:
    """jcalib's batch and multistart over ``n_processes`` local processes
    (`benchmarks.petab_tools_jcalib_worker`, `jcalib.distributed` on 127.0.0.1), process ``i``
    pinned to the ``i``-th core this process may use (XLA's idle threads would spin on the
    others); ``s["lanes"]`` and ``s["multistart_only"]`` (no batch) where given."""
    out = tmp / f"{name}.processes.json"
    port = _free_port()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", JAX_PLATFORMS="cpu")
    extra = ["--repeats", str(BATCH_REPEATS), "--method", s["method"], "--llh-nominal", repr(llh_nominal)]
    extra += [] if _stop(s) is None else ["--stop", _stop(s)]
    extra += [] if s["max_steps"] is None else ["--max-steps", str(s["max_steps"])]
    extra += [] if s.get("lanes") is None else ["--lanes", str(s["lanes"])]
    extra += ["--multistart-only"] if s.get("multistart_only") else []
    worker = "benchmarks.petab_tools_jcalib_worker"
    cores = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-m", worker, name, str(yaml), str(points),
                               str(out), str(port), str(i), str(n_processes), *extra],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=functools.partial(os.sched_setaffinity, 0, {cores[i % len(cores)]}))
             for i in range(n_processes)]
    try:
        logs = [p.communicate(timeout=PROCESS_TIMEOUT_S)[0] for p in procs]
    except subprocess.TimeoutExpired:
        logs = [f"timed out after {PROCESS_TIMEOUT_S} s"] * n_processes
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    failed = [(i, log) for i, (p, log) in enumerate(zip(procs, logs)) if p.returncode != 0]
    if failed:
        return {"error": f"process {failed[0][0]} of {n_processes} failed:\n{failed[0][1][-3000:]}"}
    report = json.loads(out.read_text())
    llh = np.asarray(report["multistart"]["llh_starts"], dtype=float)
    n_converged = int((llh >= llh_nominal - LLH_TOLERANCE).sum())
    wall = report["multistart"]["wall_time_s"]
    if "batch" in report:
        report["batch"] |= {"n": len(report["batch"]["llh"]), "per_second": len(report["batch"]["llh"]) /
                            report["batch"]["warm_s"],
                            "how": "jax.jit(jax.vmap(pp.log_likelihood)) on each process's block of rows, gathered"}
    report["multistart"] |= {"n_starts": int(llh.size), "n_converged": n_converged,
                             "seconds_per_converged_start": wall / n_converged if n_converged else None,
                             "timing": "barrier after the import to the gathered result; every process's "
                                       "compilation included"}
    return report


def _physical(pp, z: np.ndarray) -> np.ndarray:
    """PEtab scale -> physical values, for a batch of vectors."""
    return np.asarray(jax.vmap(pp.to_physical)(jax.numpy.asarray(z)))


# --- both sides together -------------------------------------------------------------------------
def compare(ours: dict, ref: dict, ours_processes: dict | None = None) -> tuple[dict, dict]:
    """``(agreement, ratios)`` of one problem's two sides (and of jcalib's multi-process side,
    `jcalib_processes`, when given and not failed)."""
    g_j, g_a = np.asarray(ours["gradient"]["values"]), np.asarray(ref["gradient"]["values"])
    grad_dev = np.abs(g_j - g_a) / np.maximum(np.abs(g_a), GRAD_FLOOR)
    llh_dev = abs(ours["llh_nominal"] - ref["llh_nominal"]) / abs(ref["llh_nominal"])
    b_j, b_a = ours["batch"].pop("_llh"), np.asarray(ref["batch"].pop("llh"), dtype=float)
    both = np.isfinite(b_j) & np.isfinite(b_a)
    batch_dev = np.abs(b_j - b_a)[both] / np.abs(b_a[both])
    agreement = {
        "llh_rel_difference": llh_dev, "llh_agree": bool(llh_dev <= LLH_RTOL),
        "gradient_rel_difference": grad_dev.tolist(), "gradient_max_rel_difference": float(grad_dev.max()),
        "gradient_agree": bool(grad_dev.max() <= GRADIENT_RTOL),
        "batch_llh_max_rel_difference": float(batch_dev.max()) if batch_dev.size else None,
        "batch_n_both_finite": int(both.sum()),
        "rule": f"llh: relative <= {LLH_RTOL}; gradient: |g_jcalib - g_amici| / max(|g_amici|, {GRAD_FLOOR}) <= "
                f"{GRADIENT_RTOL} per component (PEtab parameter scale)",
    }
    ms_j, ms_a = ours["multistart"], ref["multistart"]
    per_j, per_a = ms_j["seconds_per_converged_start"], ms_a["seconds_per_converged_start"]
    ratios = {
        "simulation_jcalib_over_amici": ours["simulation"]["median_ms"] / ref["simulation"]["median_ms"],
        "gradient_jcalib_over_amici": ours["gradient"]["median_ms"] / ref["gradient"]["median_ms"],
        "batch_speedup_amici_over_jcalib": ref["batch"]["wall_s"] / ours["batch"]["warm_s"],
        "batch_speedup_with_compile": ref["batch"]["wall_s"] / ours["batch"]["first_call_s"],
        "multistart_wall_pypesto_over_jcalib": ms_a["wall_time_s"] / ms_j["wall_time_s"],
        "seconds_per_converged_start_pypesto_over_jcalib": per_a / per_j if per_j and per_a else None,
    }
    ratios["gradient_target_met"] = bool(ratios["gradient_jcalib_over_amici"] <= TARGET_GRADIENT_RATIO)
    if ours_processes and "error" not in ours_processes:
        per_p = ours_processes["multistart"]["seconds_per_converged_start"]
        ratios["batch_speedup_amici_over_jcalib_processes"] = ref["batch"]["wall_s"] / ours_processes["batch"]["warm_s"]
        ratios["seconds_per_converged_start_pypesto_over_jcalib_processes"] = per_a / per_p if per_p and per_a else None
    return agreement, ratios


def _fmt(value, spec=".3g", missing="–") -> str:
    return missing if value is None else format(value, spec)


def table(rows: list[dict], n_batch: int) -> str:
    """The Markdown table of the run (one row per problem). Batch and multistart columns give
    jcalib in one process, then jcalib on P processes (`jcalib_processes`; "–" when not run),
    then the reference; speed-ups are the reference's time over jcalib's (one process / P)."""
    head = ("| problem | states / estimated | llh jcalib / AMICI | grad max rel. diff. | sim ms jcalib / AMICI | "
            f"grad ms jcalib / AMICI (ratio) | {n_batch} sims s: jcalib (first call) / jcalib P / AMICI "
            "(speed-up 1 / P) | multistart reach jcalib / jcalib P / pyPESTO | s per converged start jcalib / "
            "jcalib P / pyPESTO |")
    lines = [head, "|---|---|---|---:|---|---|---|---|---|"]
    for r in rows:
        j, a, jp = r.get("jcalib", {}), r.get("amici", {}), r.get("jcalib_processes") or {}
        if "error" in j:
            lines.append(f"| {r['problem']} | error (jcalib): {j['error'][:120]} |||||||| ")
            continue
        size = f"{r['n_states']} / {r['n_estimated']}"
        ms_j = j["multistart"]
        ok_p = "batch" in jp
        batch_p = f"{jp['batch']['warm_s']:.3g} (P={jp['processes']})" if ok_p else "–"
        reach_p = f"{jp['multistart']['n_converged']}/{jp['multistart']['n_starts']}" if ok_p else "–"
        per_p = _fmt(jp["multistart"]["seconds_per_converged_start"]) if ok_p else "–"
        reach_j = f"{ms_j['n_converged']}/{ms_j['n_starts']}"
        if "llh_nominal" not in a:
            why = a.get("error", a.get("skipped", "not run"))[:80].replace("\n", " ").replace("|", "/")
            lines.append(f"| {r['problem']} | {size} | {j['llh_nominal']:.6g} / – | – | "
                         f"{j['simulation']['median_ms']:.3g} / – | {j['gradient']['median_ms']:.3g} / – | "
                         f"{j['batch']['warm_s']:.3g} ({j['batch']['first_call_s']:.3g}) / {batch_p} / – | "
                         f"{reach_j} / {reach_p} / – | "
                         f"{_fmt(ms_j['seconds_per_converged_start'])} / {per_p} / – ({why}) |")
            continue
        ag, ra, ms_a = r["agreement"], r["ratios"], a["multistart"]
        speed_p = _fmt(ra.get("batch_speedup_amici_over_jcalib_processes"), ".2g")
        lines.append(
            f"| {r['problem']} | {size} | {j['llh_nominal']:.6g} / {a['llh_nominal']:.6g} | "
            f"{ag['gradient_max_rel_difference']:.1e} | {j['simulation']['median_ms']:.3g} / "
            f"{a['simulation']['median_ms']:.3g} | {j['gradient']['median_ms']:.3g} / {a['gradient']['median_ms']:.3g} "
            f"({ra['gradient_jcalib_over_amici']:.2g}x) | {j['batch']['warm_s']:.3g} "
            f"({j['batch']['first_call_s']:.3g}) / {batch_p} / {a['batch']['wall_s']:.3g} "
            f"({ra['batch_speedup_amici_over_jcalib']:.2g}x / {speed_p}x) | {reach_j} / {reach_p} / "
            f"{ms_a['n_converged']}/{ms_a['n_starts']} | {_fmt(ms_j['seconds_per_converged_start'])} / {per_p} / "
            f"{_fmt(ms_a['seconds_per_converged_start'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = common.parser(__doc__, "petab_tools", quick_help="Bertozzi_PNAS2020 only, 4 starts, a batch of 32")
    parser.add_argument("--no-reference", action="store_true", help="jcalib's side only (installs nothing)")
    parser.add_argument("--problems", nargs="+", default=None,
                        help=f"collection problems (default: {' '.join(PROBLEMS)})")
    parser.add_argument("--n-starts", type=int, default=None, help="multistart starts per problem (default 24)")
    parser.add_argument("--n-batch", type=int, default=None, help="simulations per batch (default 1000)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="jcalib's multistart iterations per start (default: the method's own)")
    parser.add_argument("--repeats", type=int, default=None, help="warm timed calls of a simulation and a gradient")
    parser.add_argument("--stop", choices=STOP_RULES, default=None,
                        help="when jcalib's TRF and Fides starts stop (default fides: as the reference's optimiser "
                             "by default, an accepted step changed -llh by less than 1e-8 (1 + |llh|); scipy: "
                             "scipy's own tests)")
    parser.add_argument("--method", choices=LOCAL_METHODS, default=None,
                        help="jcalib's local method (default trf: one start after another; fides: Fides's "
                             "trust-region reflective method, all starts vmapped; lm: vmapped Levenberg-Marquardt)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                        help="jcalib's batch and multistart also on this many local processes (jcalib.distributed; "
                             "default: the CPU count, as AMICI's OpenMP batch and pyPESTO's pool; 1: skip)")
    parser.add_argument("--venv", type=pathlib.Path, default=DEFAULT_VENV, help="the AMICI/pyPESTO virtual environment")
    args = common.parse_args(parser, argv)
    s = {k: v[1 if args.quick else 0] for k, v in SETTINGS.items()}
    for key in s:
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    if args.processes < 1:
        raise ValueError(f"petab_tools benchmark: --processes must be at least 1; got {args.processes}")
    for key, least in (("n_starts", 1), ("n_batch", 1), ("max_steps", 1), ("repeats", 1)):
        if s[key] is not None and s[key] < least:
            raise ValueError(f"petab_tools benchmark: --{key.replace('_', '-')} must be at least {least}; "
                             f"got {s[key]}")
    root = collection_root()
    known = problem_names(root) if root.is_dir() else []
    names = list(args.problems or (QUICK_PROBLEMS if args.quick else PROBLEMS))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"petab_tools benchmark: unknown problem(s) {', '.join(map(repr, unknown))} in {root}; "
                         f"known: {', '.join(known) or 'none (the collection is missing)'}")
    load_at_start = common.load_average()

    problems, tasks = {}, []
    with tempfile.TemporaryDirectory(prefix="jcalib-petab-tools-") as tmp:
        tmp = pathlib.Path(tmp)
        for name in names:
            yaml, _ = problem_files(root / name)
            t = time.perf_counter()
            pp = load_problem(yaml, name)
            starts, batch = draw_points(pp, s["n_starts"], s["n_batch"], args.seed)
            points = tmp / f"{name}.npz"
            np.savez(points, starts=starts, batch=batch)
            settings = settings_of(name)
            problems[name] = {"pp": pp, "yaml": yaml, "starts": starts, "batch": batch,
                              "import_s": time.perf_counter() - t}
            tasks.append({"name": name, "yaml": str(yaml), "points": str(points), "parameter_ids": pp.parameter_ids,
                          "rtol": settings["rtol"], "atol": settings["atol"], "max_steps": settings["max_steps"]})

        reference = {"skipped": "--no-reference"}
        if not args.no_reference:
            try:
                python, install = ensure_reference_venv(args.venv)
                print(f"AMICI venv {args.venv} ({'installed' if install['installed'] else 'present'}): "
                      f"{install['versions']}", flush=True)
                reference = run_reference(python, args.venv, tasks, {"repeats": s["repeats"],
                                          "llh_tolerance": LLH_TOLERANCE, "model_dir": str(args.venv / "models")},
                                          tmp)
                reference["environment"] = install | {"venv": str(args.venv)}
            except RuntimeError as err:
                reference = {"error": str(err)}
                print(f"AMICI/pyPESTO side failed:\n{err}", flush=True)

    rows = []
    for name in names:
        p = problems[name]
        pp = p["pp"]
        row = {"problem": name, "n_states": len(pp.model.state_names), "n_estimated": len(pp.parameter_ids),
               "n_measurements": len(pp.petab_problem.measurement_df), "parameter_ids": list(pp.parameter_ids),
               "scales": list(pp.scales), "solver": settings_of(name) | {"class": type(pp.model.solver).__name__},
               "jcalib_import_s": p["import_s"]}
        print(f"{name}: jcalib ...", flush=True)
        row["jcalib"] = jcalib_side(name, pp, p["starts"], p["batch"], s, args.seed)
        if args.processes > 1:
            print(f"{name}: jcalib on {args.processes} processes ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="jcalib-petab-processes-") as tmp:
                points = pathlib.Path(tmp) / f"{name}.npz"
                np.savez(points, starts=p["starts"], batch=p["batch"])
                row["jcalib_processes"] = jcalib_processes(name, p["yaml"], points, s, args.processes,
                                                           pathlib.Path(tmp), row["jcalib"]["llh_nominal"])
            if "batch" in row["jcalib_processes"]:  # the same rows, vmapped in blocks of another width
                b_p = np.asarray(row["jcalib_processes"]["batch"].pop("llh"), dtype=float)
                row["jcalib_processes"]["batch"]["max_abs_difference_to_one_process"] = float(
                    np.max(np.abs(b_p - row["jcalib"]["batch"]["_llh"]), initial=0.0))
        ref = reference.get("problems", {}).get(name) if "problems" in reference else None
        if ref is None:
            row["amici"] = {k: v for k, v in reference.items() if k in ("skipped", "error")} or {"error": "not run"}
            row["jcalib"]["batch"].pop("_llh")
        elif "error" in ref:
            row["amici"] = ref
            row["jcalib"]["batch"].pop("_llh")
        else:
            row["amici"] = ref
            row["agreement"], row["ratios"] = compare(row["jcalib"], ref, row.get("jcalib_processes"))
        rows.append(row)
        print(table(rows[-1:], s["n_batch"]).splitlines()[-1], flush=True)

    text = table(rows, s["n_batch"])
    print(text)
    report = {
        "benchmark": "petab_tools", "quick": args.quick, "seed": args.seed, "settings": s,
        "target": f"jcalib's log-likelihood gradient within {TARGET_GRADIENT_RATIO:g}x of AMICI's time per call; "
                  "faster than AMICI + pyPESTO for batches of simulations and for multistarts",
        "points": {"starts": "uniform over the PEtab bounds in each parameter's scale "
                             "(jcalib.estimation.sample_starts(key(seed), problem, n, 'uniform')), the same for "
                             "both tools",
                   "batch": f"nominal + U(-1, 1) * {BATCH_SPREAD} * (upper - lower) per component in PEtab's "
                            "scale, clipped to the bounds (numpy default_rng(seed))"},
        "convergence": f"a start converges when its final log-likelihood >= that tool's nominal log-likelihood - "
                       f"{LLH_TOLERANCE}",
        "problems": rows, "table": text,
        "reference": {k: v for k, v in reference.items() if k != "problems"},
        "machine": common.machine_info(load_at_start),
    }
    return common.write_report(args.out, report)


if __name__ == "__main__":
    main()
