"""Sobol' indices: jcalib.sobol_indices versus SALib sampling + a scipy solve_ivp loop + SALib analyze.

For each case: time `sobol_indices` on the model (first and total order, 100 bootstrap draws)
twice with the same key: the first call includes compilation, the second is the run time.
The SALib pipeline a user would write instead: ``SALib.sample.sobol.sample`` for the design,
a Python loop of scipy ``solve_ivp`` over every sample (the model's ScipyCase baseline, same
tolerances and observation times), and ``SALib.analyze.sobol.analyze`` once per output
element (100 resamples each). Where the scipy loop is too long (cabin_thermal: 21,504 solves
at ~0.1 s), it runs on the first ``n_timed`` samples and its time is extrapolated to all
(``"extrapolated": true``); SALib analyze is then timed on jcalib's outputs (its cost does not
depend on the values), in ``--quick`` mode on a few output elements only (extrapolated per
element). Both pipelines use the same design (jcalib's ``sampler="salib"`` is
SALib's sampler mapped through the parameter space), so:

- with the full scipy loop, the indices are compared: the largest |jcalib - SALib/scipy|
  relative to jcalib's bootstrap half-width (< 1: agreement within the bootstrap intervals);
- with a subset, the simulated outputs of the timed samples are compared (max relative
  difference).

Writes JSON (default results/benchmarks/sobol.json).

Usage:
    python -m benchmarks.sobol [--quick] [--cases cabin_thermal,four_substance_reactions]
"""

from __future__ import annotations

import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from SALib.analyze import sobol as salib_analyze  # noqa: E402
from SALib.sample import sobol as salib_sample  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from benchmarks.scipy_reference import SCIPY_CASES  # noqa: E402
from jcalib.sensitivity.sobol import saltelli_design, sobol_indices  # noqa: E402

# N full, N quick, scipy solves timed (None: all) full / quick, output elements SALib analyze
# is timed on (None: all) full / quick; the rest is extrapolated per solve / per element
SETTINGS = {
    "cabin_thermal": {"n": (1024, 8), "scipy_timed": (200, 6), "analyze_timed": (None, 40)},
    "four_substance_reactions": {"n": (1024, 16), "scipy_timed": (None, None),
                                 "analyze_timed": (None, None)},
}
N_BOOTSTRAP = 100


def _problem(space):
    """SALib problem in the unit cube (the space maps it to physical, log-uniform where the
    parameter is log-scale: SALib has no log-uniform distribution, a user would do the same)."""
    return {"num_vars": space.n_params, "names": list(space.names),
            "bounds": [[0.0, 1.0]] * space.n_params}


def time_jcalib(model, n, key):
    """sobol_indices twice with the same key: (result, seconds of the first call (compile +
    run), of the second)."""
    calls = []

    def indices():
        calls.append(sobol_indices(key, model, None, n, n_bootstrap=N_BOOTSTRAP, progress=False))
        return calls[-1]

    first_s, (run_s,), result = common.time_repeated(indices, 1)
    assert np.array_equal(np.asarray(calls[0].first_order), np.asarray(result.first_order))
    return result, first_s, run_s


def time_salib_sample(space, n, seed):
    t = time.perf_counter()
    unit = salib_sample.sample(_problem(space), n, calc_second_order=False, seed=seed)
    np.asarray(space.from_unit(unit))
    return time.perf_counter() - t


def time_scipy(case, model, thetas):
    """The scipy loop over ``thetas``: (outputs, seconds, failures)."""
    t = time.perf_counter()
    out, failures = case.run_batch(thetas, model)
    return out, time.perf_counter() - t, failures


def time_salib_analyze(space, values, skip, n_timed=None):
    """SALib analyze per output element (``skip``: constant elements, which SALib turns into
    NaN with warnings; ``n_timed``: only the first elements); returns S1, ST, their
    half-widths, the time and the number of elements analysed."""
    flat = values.reshape(values.shape[0], -1)
    shape = (space.n_params, flat.shape[1])
    s1, st, s1c, stc = (np.zeros(shape) for _ in range(4))
    problem = _problem(space)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        elements = np.flatnonzero(~skip.ravel())[:n_timed]
        for m in elements:
            res = salib_analyze.analyze(problem, flat[:, m], calc_second_order=False,
                                        num_resamples=N_BOOTSTRAP, seed=m + 1)
            s1[:, m], st[:, m], s1c[:, m], stc[:, m] = res["S1"], res["ST"], res["S1_conf"], \
                res["ST_conf"]
    return s1, st, s1c, stc, time.perf_counter() - t, elements.size


def run_case(name, n, n_timed, n_analyze, seed):
    case = SCIPY_CASES[name]
    model = case.model()
    space = model.parameters
    key = jax.random.key(seed)
    result, first_s, run_s = time_jcalib(model, n, key)
    n_total = result.n_simulations

    # the SALib + scipy pipeline on the same design as jcalib (same key split as sobol_indices)
    sample_s = time_salib_sample(space, n, seed)
    design_key, _ = jax.random.split(key)
    thetas = np.asarray(saltelli_design(design_key, space, n))
    n_timed = n_total if n_timed is None else min(n_timed, n_total)
    ref, scipy_s, failures = time_scipy(case, model, thetas[:n_timed])
    extrapolated = n_timed < n_total
    scipy_total_s = scipy_s / n_timed * n_total

    # jcalib's outputs for the comparison (the same simulate_batch call sobol_indices makes)
    values = jcalib.simulate_batch(model, thetas, progress=False)
    mask = np.asarray(result.constant_mask)
    analyze_values = values if extrapolated or failures else ref
    s1, st, s1c, stc, analyze_timed_s, n_analyzed = time_salib_analyze(space, analyze_values,
                                                                      mask, n_analyze)
    n_varying = int(mask.size - mask.sum())
    analyze_s = analyze_timed_s / n_analyzed * n_varying
    salib_total_s = sample_s + scipy_total_s + analyze_s

    a, b = values[:n_timed], ref
    scale = np.maximum(np.abs(b), case.diff_floor)
    out = {
        "case": name,
        "n_params": space.n_params,
        "n_base": n,
        "n_simulations": n_total,
        "n_output_elements": int(mask.size),
        "n_constant_elements": int(result.n_constant),
        "n_bootstrap": N_BOOTSTRAP,
        "jcalib_compile_plus_run_s": first_s,
        "jcalib_compile_s_estimate": first_s - run_s,
        "jcalib_run_s": run_s,
        "jcalib_run_breakdown_s": {"simulation": float(result.simulation_time_s),
                                   "analysis": float(result.analysis_time_s),
                                   "design_and_rest": float(result.wall_time_s
                                                            - result.simulation_time_s
                                                            - result.analysis_time_s)},
        "salib_sample_s": sample_s,
        "scipy_loop": {"n_timed": n_timed, "n_total": n_total, "extrapolated": extrapolated,
                       "timed_s": scipy_s, "total_s": scipy_total_s, "failures": failures,
                       "per_solve_s": scipy_s / n_timed, "method": case.method,
                       "rtol": case.rtol, "atol": case.atol},
        "salib_analyze": {"n_timed": n_analyzed, "n_total": n_varying,
                          "extrapolated": n_analyzed < n_varying, "timed_s": analyze_timed_s,
                          "total_s": analyze_s,
                          "on": "jcalib outputs (scipy ran a subset)" if extrapolated
                                else "scipy outputs"},
        "salib_pipeline_s": salib_total_s,
        "speedup_run": salib_total_s / run_s,
        "speedup_including_compile": salib_total_s / first_s,
        "outputs_max_rel_difference": float(np.nanmax(np.abs(a - b) / scale)),
        "notes": case.notes,
    }
    if not extrapolated and not failures and n_analyzed == n_varying:
        ours = {"S1": np.asarray(result.first_order).reshape(space.n_params, -1),
                "ST": np.asarray(result.total_order).reshape(space.n_params, -1)}
        half = {"S1": np.asarray(result.first_order_conf).reshape(space.n_params, -1),
                "ST": np.asarray(result.total_order_conf).reshape(space.n_params, -1)}
        keep = ~mask.ravel()
        out["indices_comparison"] = {
            kind: {
                "max_abs_difference": float(np.max(np.abs(ours[kind] - ref_kind)[:, keep])),
                "max_difference_over_half_width": float(np.max(
                    (np.abs(ours[kind] - ref_kind) / np.maximum(half[kind], 1e-300))[:, keep])),
                "median_half_width": float(np.median(half[kind][:, keep])),
                "salib_median_half_width": float(np.median(ref_conf[:, keep])),
            }
            for kind, ref_kind, ref_conf in (("S1", s1, s1c), ("ST", st, stc))
        }
        out["indices_comparison"]["within_bootstrap_intervals"] = all(
            v["max_difference_over_half_width"] < 1 for v in out["indices_comparison"].values())
    print(f"{name}: {n_total} simulations; jcalib {run_s:.2f} s (+ ~{first_s - run_s:.1f} s "
          f"compile); SALib+scipy {salib_total_s:.1f} s (sample {sample_s:.2f}, scipy "
          f"{scipy_total_s:.1f}{' extrapolated from ' + str(n_timed) if extrapolated else ''}, "
          f"analyze {analyze_s:.1f}); speed-up {out['speedup_run']:.0f}x "
          f"({out['speedup_including_compile']:.0f}x incl. compile); outputs max rel diff "
          f"{out['outputs_max_rel_difference']:.1e}", flush=True)
    return out


def main(argv=None):
    parser = common.parser(__doc__, "sobol")
    parser.add_argument("--cases", default=",".join(SETTINGS))
    args = common.parse_args(parser, argv)
    load_at_start = common.load_average()
    results = []
    for name in args.cases.split(","):
        if name not in SETTINGS:
            raise SystemExit(f"unknown case {name!r}; known: {', '.join(SETTINGS)}")
        pick = 1 if args.quick else 0
        results.append(run_case(name, *(v[pick] for v in SETTINGS[name].values()), args.seed))
    report = {
        "benchmark": "sobol",
        "quick": args.quick,
        "target": "jcalib >= 100x faster than SALib sample + scipy solve_ivp loop + SALib analyze",
        "machine": common.machine_info(load_at_start),
        "results": results,
    }
    return common.write_report(args.out, report)


if __name__ == "__main__":
    main()
