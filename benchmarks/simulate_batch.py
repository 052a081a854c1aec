"""Batched simulation: jcalib.simulate_batch versus a Python loop of scipy solve_ivp.

For each case: draw parameter sets, time the first simulate_batch call (compile + run)
and a second call (run only), time a loop of scipy ``solve_ivp(method="LSODA")`` with the
same tolerances and observation times on the same sets (piecewise between input jumps
where a model has them, as a scipy user would do it), and report the speed-up and the
largest relative difference between the two. Writes JSON (default
results/benchmarks/simulate_batch.json).

Usage:
    python -m benchmarks.simulate_batch [--quick] [--cases four_substance_reactions,...]
"""

from __future__ import annotations

import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from benchmarks.scipy_reference import SCIPY_CASES  # noqa: E402


def time_jcalib(model, thetas, chunk_size):
    """simulate_batch twice: (values, seconds of the first call (compile + run), of the second)."""
    calls = []

    def simulate():
        calls.append(jcalib.simulate_batch(model, thetas, chunk_size=chunk_size, progress=False))
        return calls[-1]

    first_s, (run_s,), values = common.time_repeated(simulate, 1)
    assert np.array_equal(calls[0], values, equal_nan=True)
    return values, first_s, run_s


def time_scipy(case, model, thetas, n_scipy):
    """The scipy loop on the first ``n_scipy`` sets: (outputs, seconds, failures)."""
    t = time.perf_counter()
    out, failures = case.run_batch(thetas[:n_scipy], model)
    return out, time.perf_counter() - t, failures


def run_case(name, n, n_scipy, chunk_size, seed):
    case = SCIPY_CASES[name]
    model = case.model()
    thetas = np.asarray(case.sample(model, jax.random.key(seed), n))
    values, first_s, run_s = time_jcalib(model, thetas, chunk_size)
    n_scipy = min(n, n_scipy)
    ref, scipy_s, failures = time_scipy(case, model, thetas, n_scipy)
    mask = np.ones(values.shape[1:], bool) if model.experiment.mask is None else np.asarray(
        model.experiment.mask)
    a, b = values[:n_scipy][:, mask], ref[:, mask]
    scale = np.maximum(np.abs(b), case.diff_floor)
    per_sample_scipy = scipy_s / n_scipy
    result = {
        "case": name,
        "n_samples": n,
        "n_scipy": n_scipy,
        "jcalib_compile_plus_run_s": first_s,
        "jcalib_compile_s_estimate": first_s - run_s,
        "jcalib_run_s": run_s,
        "jcalib_samples_per_s": n / run_s,
        "scipy_loop_s": scipy_s,
        "scipy_loop_s_extrapolated_to_n": per_sample_scipy * n,
        "scipy_samples_per_s": 1.0 / per_sample_scipy,
        "scipy_failures": failures,
        "speedup_run": per_sample_scipy * n / run_s,
        "speedup_including_compile": per_sample_scipy * n / first_s,
        "max_rel_difference": float(np.nanmax(np.abs(a - b) / scale)),
        "rtol": case.rtol,
        "atol": case.atol,
        "notes": case.notes,
    }
    print(f"{name}: jcalib {n / run_s:,.0f}/s (compile ~{first_s - run_s:.1f} s), scipy "
          f"{1 / per_sample_scipy:,.1f}/s, speed-up {result['speedup_run']:.1f}x "
          f"({result['speedup_including_compile']:.1f}x incl. compile), max rel diff "
          f"{result['max_rel_difference']:.2e}", flush=True)
    return result


def main(argv=None):
    parser = common.parser(__doc__, "simulate_batch")
    parser.add_argument("--cases", default=",".join(SCIPY_CASES))
    parser.add_argument("--n-scipy", type=int, default=None,
                        help="scipy loop only on the first N sets (per-sample rate extrapolated)")
    parser.add_argument("--chunk-size", type=int, default=None)
    args = common.parse_args(parser, argv)
    load_at_start = common.load_average()
    results = []
    for name in args.cases.split(","):
        case = SCIPY_CASES[name]
        n = case.n_quick if args.quick else case.n_full
        n_scipy = args.n_scipy or (n if not args.quick else min(n, 20))
        results.append(run_case(name, n, n_scipy, args.chunk_size, args.seed))
    report = {
        "benchmark": "simulate_batch",
        "quick": args.quick,
        "machine": common.machine_info(load_at_start),
        "results": results,
    }
    return common.write_report(args.out, report)


if __name__ == "__main__":
    main()
