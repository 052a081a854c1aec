"""jcalib's batch and multistart of `benchmarks.petab_tools` spread over several processes.

AMICI's batch (OpenMP) and pyPESTO's multistart (one process per CPU) use every core; one
jcalib process uses one (XLA's CPU devices of one process run one after another, measured:
two host devices took twice one device's time). This worker is one of ``P`` processes that
join one run with `jcalib.distributed` and split the work by rows, as a user spreads a job
over the cores or machines of a cluster:

- **batch**: each process evaluates its block of the parameter vectors
  (`jcalib.distributed.process_rows`) with one jitted ``jax.vmap(pp.log_likelihood)`` and
  every process gets all log-likelihoods back (`jcalib.distributed.gather_rows`). Timed from a
  barrier to the gathered result; first call (compilation) apart, then ``repeats`` warm calls.
- **multistart**: `jcalib.estimation.multistart` on the given starts, each process its block:
  scipy's trust-region reflective method with the autodiff Jacobian (one start after another),
  Fides's method (``--method fides``, through ``--lanes`` vmapped lanes, compiled first) or the
  vmapped Levenberg-Marquardt; the final log-likelihoods are gathered. Wall time from a barrier
  after the import (and Fides's compilation) to the gathered result; TRF's and LM's compilation
  included.

Process 0 writes the JSON. Usage (one line per process; `benchmarks.petab_tools` starts them)::

    python -m benchmarks.petab_tools_jcalib_worker NAME YAML POINTS.npz OUT.json PORT PROCESS_ID NUM_PROCESSES \\
        --llh-nominal LLH [--repeats R] [--max-steps N] [--stop scipy|fides] [--method trf|fides|lm]
        [--lanes L] [--multistart-only]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from jcalib import distributed


def _barrier(name: str) -> None:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)


def batch_timing(pp, batch: np.ndarray, repeats: int) -> dict:
    """The batch's log-likelihoods and timings (seconds, barrier to gathered result)."""
    import jax

    fn = jax.jit(jax.vmap(pp.log_likelihood))
    rows = jax.numpy.asarray(distributed.process_rows(batch))
    times, llh = [], None
    for i in range(1 + repeats):
        _barrier(f"batch{i}")
        t = time.perf_counter()
        llh = distributed.gather_rows(np.asarray(fn(rows)), len(batch))
        times.append(time.perf_counter() - t)
    return {"first_call_s": times[0], "warm_s": float(np.median(times[1:])), "times_s": times[1:],
            "llh": llh.tolist()}


def multistart_timing(pp, starts: np.ndarray, max_steps: int | None, stop: str | None, llh_nominal: float,
                      method: str = "trf", lanes: int | None = None) -> dict:
    """`jcalib.estimation.multistart` with the local ``method`` from ``starts`` (PEtab scale,
    ``(n, n_estimated)``; each process its block): every start's final log-likelihood (``-inf``
    where the start could not be used), the wall time (s) of the whole multistart and every
    process's CPU time (and, for Fides's method, lanes at the end). Fides's method is compiled
    first (one iteration from other starts, timed as ``compile_s``), with ``lanes`` None for its
    lanes and for one lane. ``stop``: None (the method's own) or one of
    `jcalib.estimation.STOP_RULES`; TRF's Fides rule is scaled by ``llh_nominal`` (the parent's
    log-likelihood at the nominal parameters)."""
    import jax

    from jcalib.estimation import final_log_likelihoods, multistart
    from jcalib.estimation.trust_region import n_lanes

    problem = pp.problem
    physical = np.asarray(jax.vmap(pp.to_physical)(jax.numpy.asarray(starts)))
    options = ({} if max_steps is None else {"max_steps": max_steps}) | {"stop": stop}
    options |= {"lanes": lanes} if method == "fides" else {"objective_scale": llh_nominal} if method == "trf" else {}
    compile_s = None
    if method == "fides":
        width = n_lanes(lanes, len(distributed.process_rows(physical)))
        t = time.perf_counter()
        for w in {width, 1 if lanes is None else width}:  # lanes=None may go on in one lane: both compiled
            warm = physical[::-1][:w * jax.process_count()]  # the run's shapes: `w` starts per process
            multistart(None, problem, len(warm), method, starts=warm, max_steps=1, lanes=w, stop=stop)
        compile_s = distributed.gather_rows(np.array([time.perf_counter() - t]), jax.process_count()).tolist()
    _barrier("multistart")
    t, cpu = time.perf_counter(), time.process_time()
    result = multistart(None, problem, len(physical), method, starts=physical, **options)
    cpu = distributed.gather_rows(np.array([time.process_time() - cpu]), jax.process_count())
    llh = final_log_likelihoods(problem, result)
    wall = time.perf_counter() - t
    lanes_at_end = None if method != "fides" else distributed.gather_rows(
        np.array([result.extra["lanes_at_end"]]), jax.process_count()).tolist()
    return {"wall_time_s": wall, "llh_starts": llh.tolist(), "cpu_s_per_process": cpu.tolist(),
            "compile_s_per_process": compile_s, "lanes_at_end_per_process": lanes_at_end,
            "n_jacobians": result.n_jacobians, "n_jacobians_per_start": [r.n_jacobians for r in result.results]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.petab_tools_jcalib_worker",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("yaml")
    parser.add_argument("points", help=".npz with 'starts' and 'batch' (PEtab scale)")
    parser.add_argument("out", help="the JSON process 0 writes")
    parser.add_argument("port", type=int)
    parser.add_argument("process_id", type=int)
    parser.add_argument("num_processes", type=int)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--method", default="trf", choices=("trf", "fides", "lm"), help="jcalib's local method")
    parser.add_argument("--stop", default=None, help="one of jcalib.estimation.STOP_RULES (default: the method's own)")
    parser.add_argument("--lanes", type=int, default=None, help="Fides's vmapped lanes per process (default: all)")
    parser.add_argument("--multistart-only", action="store_true", help="skip the batch")
    parser.add_argument("--llh-nominal", type=float, required=True,
                        help="the log-likelihood at the nominal parameters (scales the fides stop)")
    args = parser.parse_args(argv)

    distributed.initialize(f"127.0.0.1:{args.port}", args.num_processes, args.process_id)
    import jax

    jax.config.update("jax_enable_x64", True)
    from experiments.petab_collection import load_problem
    from jcalib.fileio import write_json

    pp = load_problem(args.yaml, args.name)
    points = np.load(args.points)
    report = {"processes": jax.process_count(), "devices": [str(d) for d in jax.devices()]}
    if not args.multistart_only:
        report["batch"] = batch_timing(pp, points["batch"], args.repeats)
    report["multistart"] = multistart_timing(pp, points["starts"], args.max_steps, args.stop, args.llh_nominal,
                                             args.method, args.lanes)
    if jax.process_index() == 0:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
