"""Least squares: jcalib TRF with the autodiff Jacobian versus scipy TRF with finite differences.

Case (full run): thermal_office_r7c4, all 14 parameters free, synthetic data at the
nominal parameters with additive N(0, 0.1 K) noise on the 1008 room-air temperatures, MSE
(``weighting="absolute"``) as in Aka et al. 2023. Both methods start from the same point
(each internal coordinate moved by a seeded uniform draw in ±25 % of its range from the
truth) and run ``scipy.optimize.least_squares(method="trf")`` with the same bounds,
tolerances and budget (scipy's defaults); they differ only in the Jacobian:

- jcalib: `least_squares_trf`, the exact Jacobian by forward-mode autodiff through the ODE
  solve (`CalibrationProblem.jacobian`);
- scipy: ``jac="2-point"`` finite differences, each column one more call of the same
  jitted ``problem.residuals`` (what a user without autodiff would run; n_free extra
  simulations per Jacobian).

In the same run the benchmark measures the cost of one forward-mode Jacobian in
simulation-equivalents, ``time(jacobian) / time(residuals)`` (medians of repeated warm
calls), and reports per method: simulations, Jacobians, simulation-equivalents, wall time
(compiled code; the one-off compile times are reported separately and in an
"including compile" ratio), final MSE and the largest relative error of the estimate.
Writes JSON (default results/benchmarks/least_squares.json).

``--quick`` runs four_substance_reactions instead (3 parameters, 1 % multiplicative noise,
relative weighting), so the CI smoke test stays within seconds; its ratios say little.

Usage:
    python -m benchmarks.least_squares [--quick] [--repeats 10] [--seed 0] [--out PATH]
"""

from __future__ import annotations

import os
import sys

# scipy's TRF takes an SVD of the (1008 x 14) Jacobian every iteration. On the 2-core
# benchmark machine a multithreaded OpenBLAS competing with XLA's threads made that SVD take
# ~70 ms instead of ~0.5 ms, for both methods; one BLAS thread avoids it. Effective only
# when numpy is not imported yet (running this module with python -m).
_BLAS_SINGLE_THREAD = "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ
if _BLAS_SINGLE_THREAD:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

import itertools  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from jcalib.estimation.least_squares import least_squares_trf  # noqa: E402

CASES = {
    # name: (model, noise, sigma, weighting)
    "thermal_office_r7c4": ("thermal_office_r7c4", "additive", 0.1, "absolute"),
    "four_substance_reactions": ("four_substance_reactions", "multiplicative", 0.01, "relative"),
}
START_SPREAD = 0.25  # start: truth ± U(-0.25, 0.25) of each internal range, kept inside


def build(case: str, seed: int):
    model_name, noise, sigma, weighting = CASES[case]
    model = jcalib.models.get(model_name)
    truth = np.asarray(model.parameters.nominal)
    key_data, key_start = jax.random.split(jax.random.key(seed))
    data = jcalib.synthetic_measurements(key_data, model, jnp.asarray(truth), sigma=sigma, noise=noise)
    problem = jcalib.CalibrationProblem(model, data, weighting=weighting)
    space = problem.space
    u = np.asarray(space.to_unit(jnp.asarray(truth)))
    shift = np.asarray(jax.random.uniform(key_start, u.shape, minval=-START_SPREAD, maxval=START_SPREAD,
                                          dtype=jnp.float64))
    theta0 = np.asarray(space.from_unit(jnp.asarray(np.clip(u + shift, 0.02, 0.98))))
    return problem, truth, theta0


def time_calls(fn, z, repeats):
    """Median seconds per warm call (`common.per_call_seconds`: loops of >= 0.2 s, so that
    sub-millisecond calls are timed reliably), each call at a new point."""
    points = (z + 1e-9 * i for i in itertools.count())  # a new point each time (no caching anywhere)
    return common.per_call_seconds(lambda: jax.block_until_ready(fn(next(points))), repeats)


def run_scipy_fd(problem, theta0):
    """scipy least_squares(trf) with 2-point finite differences on problem.residuals."""
    calls = {"n": 0}

    def residuals(z):
        calls["n"] += 1
        return np.asarray(problem.residuals(jnp.asarray(z)))

    z0 = np.asarray(problem.to_internal(jnp.asarray(theta0)))
    space = problem.space
    t = time.perf_counter()
    sol = scipy.optimize.least_squares(residuals, z0, jac="2-point", method="trf",
                                       bounds=(space.lower_internal, space.upper_internal))
    wall = time.perf_counter() - t
    return sol, calls["n"], wall


def main(argv=None):
    parser = common.parser(__doc__, "least_squares",
                           quick_help="four_substance_reactions instead of thermal_office_r7c4 (CI smoke run)")
    parser.add_argument("--case", default=None, choices=sorted(CASES))
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per cost measurement")
    args = common.parse_args(parser, argv)
    case = args.case or ("four_substance_reactions" if args.quick else "thermal_office_r7c4")
    repeats = args.repeats or (5 if args.quick else 15)
    load_at_start = common.load_average()

    problem, truth, theta0 = build(case, args.seed)
    z0 = problem.to_internal(jnp.asarray(theta0))
    t = time.perf_counter()
    jax.block_until_ready(problem.residuals(z0))
    compile_residuals_s = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(problem.jacobian(z0))
    compile_jacobian_s = time.perf_counter() - t
    t_sim = time_calls(problem.residuals, z0, repeats)
    t_jac = time_calls(problem.jacobian, z0, repeats)
    jac_cost = t_jac / t_sim
    print(f"{case}: {problem.n_free} parameters, {problem.n_observed} residuals; simulation "
          f"{t_sim * 1e3:.1f} ms, forward-mode Jacobian {t_jac * 1e3:.1f} ms = {jac_cost:.2f} "
          f"simulation-equivalents (finite differences: {problem.n_free})", flush=True)

    jc = least_squares_trf(problem, theta0)
    sol, fd_calls, fd_wall = run_scipy_fd(problem, theta0)
    fd_theta = np.asarray(problem.to_physical(jnp.asarray(sol.x)))
    fd_mse = float(np.mean(sol.fun**2))

    def rel_error(theta):
        return float(np.max(np.abs(theta / truth - 1.0)))

    # when did jcalib first reach scipy's final MSE (equal-MSE comparison)?
    reached = [i for i, loss in enumerate(jc.history["loss"]) if loss <= fd_mse]
    time_to_scipy_mse = jc.history["time_s"][reached[0]] if reached else None

    jcalib_row = {
        "method": "jcalib least_squares_trf (autodiff Jacobian)",
        "n_simulations": jc.n_simulations, "n_jacobians": jc.n_jacobians,
        "simulation_equivalents": jc.n_simulations + jac_cost * jc.n_jacobians,
        "wall_s": jc.wall_time_s, "wall_s_including_jacobian_compile": jc.wall_time_s + compile_jacobian_s,
        "mse": jc.loss, "iterations": jc.n_steps, "converged": jc.converged, "message": jc.reason,
        "max_rel_error_vs_truth": rel_error(jc.theta),
        "wall_s_to_reach_scipy_final_mse": time_to_scipy_mse,
        "iterations_to_reach_scipy_final_mse": reached[0] if reached else None,
    }
    scipy_row = {
        "method": "scipy least_squares trf, jac='2-point' on problem.residuals",
        "n_simulations": fd_calls, "n_jacobians": 0, "n_jacobians_by_finite_differences": int(sol.njev),
        "simulation_equivalents": float(fd_calls), "wall_s": fd_wall, "mse": fd_mse,
        "iterations": int(sol.nfev), "converged": bool(sol.status > 0), "message": str(sol.message),
        "max_rel_error_vs_truth": rel_error(fd_theta),
    }
    ratios = {
        "wall_speedup": fd_wall / jc.wall_time_s,
        "wall_speedup_including_jacobian_compile": fd_wall / (jc.wall_time_s + compile_jacobian_s),
        "simulation_equivalents_ratio": scipy_row["simulation_equivalents"] / jcalib_row["simulation_equivalents"],
        "wall_speedup_at_equal_mse": None if time_to_scipy_mse is None else fd_wall / time_to_scipy_mse,
        "mse_ratio_jcalib_over_scipy": jc.loss / fd_mse,
        "target_5x_full_runs_met": bool(fd_wall / jc.wall_time_s >= 5.0 and jc.loss <= fd_mse * (1 + 1e-6)),
        "target_5x_at_equal_mse_met": bool(time_to_scipy_mse is not None and fd_wall / time_to_scipy_mse >= 5.0),
    }
    for row in (jcalib_row, scipy_row):
        print(f"  {row['method']}: {row['n_simulations']} simulations + {row['n_jacobians']} Jacobians = "
              f"{row['simulation_equivalents']:.0f} sim-eq, {row['wall_s']:.2f} s, MSE {row['mse']:.6g}, "
              f"max rel error {row['max_rel_error_vs_truth']:.2e}", flush=True)
    print(f"  speed-up {ratios['wall_speedup']:.1f}x wall ({ratios['wall_speedup_including_jacobian_compile']:.1f}x "
          f"including the Jacobian's {compile_jacobian_s:.1f} s compile), "
          f"{ratios['simulation_equivalents_ratio']:.1f}x fewer simulation-equivalents", flush=True)
    if time_to_scipy_mse is not None:
        print(f"  jcalib reached scipy's final MSE after {time_to_scipy_mse:.2f} s "
              f"({ratios['wall_speedup_at_equal_mse']:.1f}x faster at equal MSE)", flush=True)

    report = {
        "benchmark": "least_squares",
        "quick": args.quick,
        "case": case,
        "n_free": problem.n_free,
        "n_residuals": problem.n_observed,
        "noise": {"model": CASES[case][1], "sigma": CASES[case][2], "weighting": CASES[case][3]},
        "theta_true": problem.estimate_dict(problem.to_internal(jnp.asarray(truth))),
        "theta0": problem.estimate_dict(z0),
        "compile_residuals_s": compile_residuals_s,
        "compile_jacobian_s": compile_jacobian_s,
        "simulation_s": t_sim,
        "jacobian_s": t_jac,
        "jacobian_cost_simulation_equivalents": jac_cost,
        "jcalib": jcalib_row,
        "scipy": scipy_row,
        "ratios": ratios,
        "machine": common.machine_info(load_at_start, openblas_num_threads=os.environ.get("OPENBLAS_NUM_THREADS"),
                                       blas_single_thread_set_here=_BLAS_SINGLE_THREAD),
    }
    return common.write_report(args.out, report)


if __name__ == "__main__":
    main()
