"""The reference side of benchmarks/petab_tools.py: AMICI (CVODES, forward sensitivities) + pyPESTO.

Run by benchmarks/petab_tools.py with the python of its own virtual environment (AMICI, pyPESTO,
Fides and petab are not dependencies of jcalib); it does not import jcalib. It reads the job
(``--job``, JSON: ``problems``, a list of ``{name, yaml, points, parameter_ids, rtol, atol,
max_steps}``, plus ``repeats``, ``llh_tolerance`` and ``model_dir``) and, for every problem,

1. imports it with pyPESTO's PEtab importer on the PEtab v1 route (``petab.v1.Problem``, so the
   parameters keep their PEtab scales, as jcalib's ``z``; observable or noise parameters that vary
   per time point are flattened first with ``petab.v1.flatten_timepoint_specific_output_overrides``,
   which AMICI requires and which leaves the likelihood as it is): AMICI generates and compiles the
   model (C++, into ``model_dir/<name>``, reused when there) with forward sensitivities; the objective
   is the negative log-likelihood (the collection's default problems have no objective priors;
   where a problem has some, pyPESTO adds them and ``objective_priors`` says so). CVODES (BDF,
   KLU) gets the parameters' ``rtol`` / ``atol`` for the states and for the sensitivities, and
   ``max_steps``: jcalib's settings;
2. times one simulation (``sensi_orders=(0,)``) and one gradient (``(0, 1)``) of pyPESTO's
   objective at the nominal parameters (the first call and the median of ``repeats`` more), and
   records AMICI's own CPU time of the solves (``rdata["cpu_time"]``);
3. the batch (``points`` .npz, ``batch``, PEtab scale) two ways: a Python loop over the objective
   (one vector after another), and AMICI's ``run_simulations`` on all vectors' ``ExpData`` at
   once with ``num_threads`` = the CPU count (OpenMP; what an AMICI user would batch with);
   ``wall_s`` is the faster of the two;
4. a pyPESTO multistart with Fides (default options: the FIM from the forward sensitivities,
   switching to BFGS) from the ``starts`` of the .npz, on pyPESTO's ``MultiProcessEngine`` with
   one process per CPU (``SingleCoreEngine`` on one CPU): the final log-likelihoods (recomputed
   without priors), the number that reach the nominal log-likelihood minus ``llh_tolerance``,
   and the wall time.

Writes ``--out`` (JSON) after every problem; a problem that fails gets ``{"error": ...}``.

Usage (normally through ``python -m benchmarks.petab_tools``):
    python benchmarks/petab_tools_reference.py --job JOB.json --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import platform
import resource
import statistics
import time
import traceback

import numpy as np


def _timed(fn, repeats: int, clock=time.perf_counter) -> tuple[dict, object]:
    """`benchmarks.common.time_repeated`'s measurement, written out here: this script runs in the
    AMICI virtual environment, which has neither jax nor jcalib (benchmarks.common imports both).
    ``clock``: wall time by default, ``time.process_time`` for CPU time."""
    t = clock()
    out = fn()
    first = clock() - t
    times = []
    for _ in range(repeats):
        t = clock()
        out = fn()
        times.append(clock() - t)
    return {"first_call_s": first, "median_ms": 1e3 * statistics.median(times), "times_s": times}, out


def _finite(value):
    """``value`` for strict JSON: NumPy scalars as Python numbers, NaN and infinities as None."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value.item() if isinstance(value, np.generic) else value


def _cpu_ms(rdatas) -> float:
    """AMICI's own CPU time of the solves (forward and backward), summed over the conditions."""
    return float(sum(r["cpu_time"] + r["cpu_time_b"] for r in rdatas))


def _amici_objective(problem):
    """The AmiciObjective inside pyPESTO's problem (its objective, or the first part of an
    aggregate with priors)."""
    from pypesto.objective import AggregatedObjective

    objective = problem.objective
    return objective._objectives[0] if isinstance(objective, AggregatedObjective) else objective


def configure_solver(solver, task: dict) -> dict:
    """jcalib's tolerances for CVODES (states and forward sensitivities) and step budget."""
    import amici.sim.sundials as asd

    solver.set_sensitivity_method(asd.SensitivityMethod.forward)
    solver.set_relative_tolerance(task["rtol"])
    solver.set_absolute_tolerance(task["atol"])
    solver.set_relative_tolerance_fsa(task["rtol"])
    solver.set_absolute_tolerance_fsa(task["atol"])
    solver.set_max_steps(int(task["max_steps"]))
    # the pre-equilibration's steady state to jcalib's tolerances too: AMICI's defaults (rtol 1e-6,
    # atol 1e-8, times a factor 100) stop Raimundez_PCB2020's pre-equilibration early enough to
    # move its log-likelihood by 0.2 and 70 of its 136 gradient components by up to 1.7
    solver.set_relative_tolerance_steady_state(task["rtol"])
    solver.set_absolute_tolerance_steady_state(task["atol"])
    solver.set_relative_tolerance_steady_state_sensi(task["rtol"])
    solver.set_absolute_tolerance_steady_state_sensi(task["atol"])
    return {"method": "CVODES BDF, forward sensitivities", "rtol": solver.get_relative_tolerance(),
            "atol": solver.get_absolute_tolerance(), "rtol_fsa": solver.get_relative_tolerance_fsa(),
            "atol_fsa": solver.get_absolute_tolerance_fsa(), "max_steps": int(solver.get_max_steps()),
            "linear_solver": asd.LinearSolver(solver.get_linear_solver()).name}


def batch_run_simulations(problem, objective, batch: np.ndarray, n_threads: int) -> tuple[float, np.ndarray]:
    """Log-likelihoods of the batch by one ``run_simulations`` call on every vector's ExpData
    (``n_threads`` OpenMP threads); the seconds of filling in the parameters and simulating."""
    import amici.sim.sundials as asd
    from amici.sim.sundials.petab.v1 import fill_in_parameters

    solver = objective.amici_solver.clone()
    solver.set_sensitivity_order(asd.SensitivityOrder.none)
    t = time.perf_counter()
    edatas = []
    for x in batch:
        copies = [asd.ExpData(e) for e in objective.edatas]
        fill_in_parameters(copies, objective.par_arr_to_dct(problem.get_full_vector(x)), True,
                           objective.parameter_mapping, objective.amici_model, warn_unused=False)
        edatas.extend(copies)
    rdatas = asd.run_simulations(objective.amici_model, solver, edatas, failfast=False, num_threads=n_threads)
    seconds = time.perf_counter() - t
    n = len(objective.edatas)
    llh = np.array([sum(r["llh"] if r["status"] == 0 else np.nan for r in rdatas[i * n:(i + 1) * n])
                    for i in range(len(batch))])
    return seconds, np.where(np.isnan(llh), -np.inf, llh)


def multistart(problem, call, starts: np.ndarray, n_procs: int, llh_nominal: float, tolerance: float) -> dict:
    """pyPESTO + Fides from ``starts``; the final log-likelihoods (``call``: `import_problem`'s
    objective of the estimated parameters) and the converged starts."""
    import pypesto.engine
    import pypesto.optimize

    problem.set_x_guesses(np.array([problem.get_full_vector(x) for x in starts]))
    engine = pypesto.engine.MultiProcessEngine(n_procs=n_procs) if n_procs > 1 else pypesto.engine.SingleCoreEngine()
    optimizer = pypesto.optimize.FidesOptimizer(verbose=logging.WARNING)
    t, cpu = time.perf_counter(), _cpu_with_children()
    result = pypesto.optimize.minimize(problem, optimizer, n_starts=len(starts), engine=engine, progress_bar=False)
    wall, cpu = time.perf_counter() - t, _cpu_with_children() - cpu
    by_id = sorted(result.optimize_result.list, key=lambda r: int(r["id"]))
    x0 = np.array([r["x0"][problem.x_free_indices] for r in by_id])
    if not np.allclose(x0, starts, rtol=1e-12, atol=1e-12):
        raise RuntimeError("pyPESTO did not start from the given points")
    llh = np.array([-float(call(r["x"][problem.x_free_indices], (0,))["fval"])
                    if r["x"] is not None and np.all(np.isfinite(r["x"])) else -np.inf for r in by_id])
    llh = np.where(np.isfinite(llh), llh, -np.inf)
    n_converged = int(np.sum(llh >= llh_nominal - tolerance))
    return {"optimizer": f"pyPESTO {optimizer!r} (Fides defaults)",
            "engine": f"{type(engine).__name__}({n_procs} processes)" if n_procs > 1 else "SingleCoreEngine",
            "n_starts": len(starts), "llh_starts": llh.tolist(), "llh_best": float(llh.max()),
            "n_converged": n_converged, "fraction_converged": n_converged / len(starts),
            "n_function_evaluations": int(sum(r["n_fval"] or 0 for r in by_id)),
            "n_gradient_evaluations": int(sum(r["n_grad"] or 0 for r in by_id)),
            "exit_messages": sorted({str(r["message"]) for r in by_id}),
            "wall_time_s": wall, "seconds_per_converged_start": wall / n_converged if n_converged else None,
            "cpu_s": cpu, "cpu_s_per_converged_start": cpu / n_converged if n_converged else None,
            "n_gradient_evaluations_per_start": [int(r["n_grad"] or 0) for r in by_id],
            "timing": "wall time of pyPESTO's minimize (model already compiled); CPU time of this process and "
                      "its pool's processes"}


def _cpu_with_children() -> float:
    """CPU seconds (user + system) of this process and its finished child processes."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def import_problem(task: dict, model_dir: pathlib.Path):
    """``(problem, objective, x, info)``: pyPESTO's problem of ``task["yaml"]``, its AMICI objective
    (without priors), the nominal estimated parameters (PEtab scales) and ``info``: the import's
    seconds, whether the model was compiled before, whether the tables were flattened and had
    objective priors, and ``call(x, sensi_orders)``, the objective's dict at the estimated
    parameters ``x`` (its ``grad`` with respect to them only)."""
    import petab.v1 as petab
    import pypesto.petab

    name = task["name"]
    model_dir = model_dir / name
    compiled = model_dir.exists()
    t = time.perf_counter()
    petab_problem = petab.Problem.from_yaml(task["yaml"])
    flattened = bool(petab.measurement_table_has_timepoint_specific_mappings(petab_problem.measurement_df))
    if flattened:  # AMICI refuses observable/noise parameters that vary per time point unless flattened
        petab.flatten_timepoint_specific_output_overrides(petab_problem)
    importer = pypesto.petab.PetabImporter(petab_problem, output_folder=str(model_dir), model_name=name)
    problem = importer.create_problem(verbose=False)
    import_s = time.perf_counter() - t
    objective = _amici_objective(problem)
    free_names = [problem.x_names[i] for i in problem.x_free_indices]
    if task["parameter_ids"] is not None and free_names != list(task["parameter_ids"]):
        raise RuntimeError(f"{name}: estimated parameters {free_names} differ from jcalib's {task['parameter_ids']}")
    free = np.asarray(problem.x_free_indices)

    def call(x, sensi_orders):
        # with objective priors the AMICI objective is the aggregate's first part, which pyPESTO
        # did not reduce to the estimated parameters: it takes the full vector
        if problem.objective is objective:
            return objective(x, sensi_orders=sensi_orders, return_dict=True)
        out = dict(objective(problem.get_full_vector(x), sensi_orders=sensi_orders, return_dict=True))
        if 1 in sensi_orders:
            out["grad"] = np.asarray(out["grad"])[free]
        return out

    info = {"import_and_compile_s": import_s, "model_was_compiled_before": compiled,
            "objective_priors": problem.objective is not objective, "flattened": flattened, "call": call,
            "parameter_ids": free_names}
    return problem, objective, np.asarray(petab_problem.x_nominal_free_scaled, dtype=float), info


def run_problem(task: dict, job: dict, n_threads: int) -> dict:
    """Everything the reference side measures for one problem."""
    repeats = int(job["repeats"])
    points = np.load(task["points"])
    problem, objective, x, info = import_problem(task, pathlib.Path(job["model_dir"]))
    call = info.pop("call")
    solver = configure_solver(objective.amici_solver, task)
    if job.get("multistart_only"):
        llh_nominal = -float(call(x, (0,))["fval"])
        return info | {"solver": solver, "llh_nominal": llh_nominal, "multistart": multistart(
            problem, call, points["starts"], n_threads, llh_nominal, float(job["llh_tolerance"]))}

    # the negative log-likelihood and its gradient with respect to the estimated parameters
    sim, out = _timed(lambda: call(x, (0,)), repeats)
    sim["amici_cpu_ms"] = _cpu_ms(out["rdatas"])
    statuses = [int(r["status"]) for r in out["rdatas"]]
    grad, out = _timed(lambda: call(x, (0, 1)), repeats)
    grad["amici_cpu_ms"] = _cpu_ms(out["rdatas"])
    gradient = -np.asarray(out["grad"])
    llh_nominal = -float(out["fval"])

    batch = points["batch"]
    t = time.perf_counter()
    llh_loop = np.array([-float(call(z, (0,))["fval"]) for z in batch])
    loop_s = time.perf_counter() - t
    threads_s, llh_threads = batch_run_simulations(problem, objective, batch, n_threads)
    if not np.allclose(llh_loop[np.isfinite(llh_loop)], llh_threads[np.isfinite(llh_loop)], rtol=1e-6):
        raise RuntimeError(f"{task['name']}: run_simulations and the objective disagree on the batch")
    fastest = "run_simulations" if threads_s < loop_s else "loop"
    wall = min(loop_s, threads_s)
    return info | {
        "solver": solver, "n_conditions": len(statuses),
        "simulation_status": statuses, "llh_nominal": llh_nominal,
        "simulation": sim | {"how": "pyPESTO objective, sensi_orders=(0,), all conditions, 1 thread"},
        "gradient": grad | {"values": gradient.tolist(), "how": "pyPESTO objective, sensi_orders=(0, 1), forward "
                                                                "sensitivities, PEtab parameter scale"},
        "batch": {"n": len(batch), "loop_s": loop_s, "run_simulations_s": threads_s, "n_threads": n_threads,
                  "wall_s": wall, "fastest": fastest, "per_second": len(batch) / wall,
                  "n_finite": int(np.isfinite(llh_threads).sum()), "llh": llh_threads.tolist(),
                  "how": "the faster of a Python loop over pyPESTO's objective and one amici run_simulations call "
                         f"with {n_threads} OpenMP threads"},
        "multistart": multistart(problem, call, points["starts"], n_threads, llh_nominal,
                                 float(job["llh_tolerance"])),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/petab_tools_reference.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=pathlib.Path, required=True, help="the job (JSON) from petab_tools.py")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the report (JSON)")
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    t = time.perf_counter()
    import importlib.metadata

    import amici.sim.sundials as asd

    n_threads = os.cpu_count() or 1
    report = {"versions": {p: importlib.metadata.version(p) for p in ("amici", "pypesto", "fides", "petab", "swig")},
              "amici_openmp": bool(asd.compiled_with_openmp()), "amici_hdf5": bool(asd.hdf5_enabled),
              "import_s": time.perf_counter() - t, "n_threads": n_threads, "python": platform.python_version(),
              "load_average_at_start": list(os.getloadavg()), "problems": {}}
    for logger in ("pypesto", "amici"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    for task in job["problems"]:
        print(f"{task['name']}: AMICI + pyPESTO ...", flush=True)
        t = time.perf_counter()
        try:
            result = run_problem(task, job, n_threads)
        except Exception as error:  # noqa: BLE001 - a failed problem is a result; the others still run
            result = {"error": f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}"}
        result["wall_s"] = time.perf_counter() - t
        report["problems"][task["name"]] = result
        report["load_average_at_end"] = list(os.getloadavg())
        args.out.write_text(json.dumps(_finite(report), indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
