"""The reference side of benchmarks/petab_speed.py: AMICI's simulation and gradients, CPU time.

Run by benchmarks/petab_speed.py with the python of the AMICI virtual environment
(benchmarks/petab_tools.py builds it); it does not import jcalib. For every problem of the job
(``--job``, JSON: ``problems``, each ``{name, yaml, parameter_ids, rtol, atol, max_steps}``, plus
``repeats`` and ``model_dir``), with pyPESTO's PEtab importer as in
benchmarks/petab_tools_reference.py (`import_problem`): CPU seconds (``time.process_time``, one
thread; wall time beside it) of one simulation (``sensi_orders=(0,)``), one gradient with forward
sensitivities and one with adjoint sensitivities (``(0, 1)``) at the nominal parameters, the median
of ``repeats`` warm calls each; the log-likelihood without priors and both gradients; CVODES's
steps of the simulation (`_steps`). Writes ``--out`` after every problem; a problem that fails gets
``{"error": ...}``.

Usage (normally through ``python -m benchmarks.petab_speed``):
    python benchmarks/petab_speed_reference.py --job JOB.json --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from petab_tools_reference import _finite, _timed, configure_solver, import_problem  # noqa: E402


def _cpu(fn, repeats: int) -> tuple[dict, object]:
    """The first call's CPU seconds and the median of ``repeats`` more, in ms, CPU and wall
    time (each call timed on both clocks); the last output."""
    walls = []

    def both():
        t = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t)
        return out

    timing, out = _timed(both, repeats, clock=time.process_time)
    return {"first_call_cpu_s": timing["first_call_s"], "cpu_ms": timing["median_ms"],
            "wall_ms": 1e3 * float(np.median(walls[1:]))}, out


def _steps(rdatas) -> int:
    """CVODES's steps of the simulations from ``t = 0`` (``numsteps`` is cumulative per output
    time), without the pre-equilibrations."""
    return int(sum(np.asarray(r["numsteps"])[-1] for r in rdatas if np.size(r["numsteps"])))


def run_problem(task: dict, job: dict) -> dict:
    """Simulation, forward and adjoint gradient of one problem."""
    import amici.sim.sundials as asd

    problem, objective, x, info = import_problem(task, pathlib.Path(job["model_dir"]))
    configure_solver(objective.amici_solver, task)
    call = info.pop("call")
    repeats = int(job["repeats"])
    simulation, out = _cpu(lambda: call(x, (0,)), repeats)
    statuses = [int(r["status"]) for r in out["rdatas"]]
    result = info | {"llh": -float(out["fval"]), "simulation": simulation, "statuses": statuses,
                     "steps": _steps(out["rdatas"])}
    for method in ("forward", "adjoint"):
        objective.amici_solver.set_sensitivity_method(getattr(asd.SensitivityMethod, method))
        try:
            timing, out = _cpu(lambda: call(x, (0, 1)), repeats)
            result[method] = timing | {"gradient": (-np.asarray(out["grad"])).tolist(),
                                       "statuses": [int(r["status"]) for r in out["rdatas"]]}
        except Exception as error:  # noqa: BLE001 - one sensitivity method failing is a result
            result[method] = {"error": f"{type(error).__name__}: {error}"}
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/petab_speed_reference.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    import importlib.metadata

    report = {"versions": {p: importlib.metadata.version(p) for p in ("amici", "pypesto", "petab")}, "problems": {}}
    for task in job["problems"]:
        print(f"{task['name']}: AMICI ...", flush=True)
        t = time.perf_counter()
        try:
            result = run_problem(task, job)
        except Exception as error:  # noqa: BLE001 - a failed problem is a result; the others still run
            result = {"error": f"{type(error).__name__}: {error}\n{traceback.format_exc()[-3000:]}"}
        result["wall_s"] = time.perf_counter() - t
        report["problems"][task["name"]] = result
        args.out.write_text(json.dumps(_finite(report), indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
