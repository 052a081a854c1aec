"""`make demo`: the foundation pipeline on the radical polymerization case (Wulkow 2021, Ex. 2).

1. simulate the "real" data-generating model (cage effect, primary-radical termination)
   for recipe 1 and draw noisy measurements (relative Gaussian noise, sigma = 5 %);
2. compute the forward-mode Jacobian of the simple model's outputs with respect to
   (f, kt,c, kt,d) and compare its singular values when only [M] is observed with [M] + Mw
   (and [M] + Mw + EG): Mw breaks the f / kt,c correlation;
3. fit the simple model's f and kt,c (kt,d = 0) to the real model's noise-free data by
   Gauss-Newton with essential directions (Wulkow 2021 §2.2.1; paper Tests 1-2, start
   f = 1, kt,c = 1e6): [M] only leaves one essential direction and a condition number in the
   thousands, [M] + Mw gives two and a condition number below 10. The fits use the simple
   model with quasi-steady radicals (< 2e-4 from the full model; 4x shorter compiles);
4. write results/demo/metrics.json, the data as CSV and figures.

Usage: python experiments/demo.py [--out results/demo] [--seed 0] [--sigma 0.05]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from jcalib.data import Measurements, synthetic_measurements  # noqa: E402
from jcalib.estimation.gauss_newton import gauss_newton  # noqa: E402
from jcalib.plotting import plot_simulation, plot_singular_values  # noqa: E402
from jcalib.problem import CalibrationProblem  # noqa: E402

FLAT_RATIO = 100.0  # s_1/s_k above this: a flat (non-essential) direction (Wulkow 2021 §2.2.1)


def log_sensitivities(model, theta):
    """d log y / d log theta, (n_times, n_outputs, n_params): relative residuals, log params."""
    jac = np.asarray(model.jacobian(jnp.asarray(theta)))
    y = np.asarray(model.simulate(jnp.asarray(theta)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return jac * np.asarray(theta)[None, None, :] / y[:, :, None]


def spectrum(sens, mask, outputs, names, columns):
    """Singular values of the sensitivity rows of the measured entries of ``outputs``."""
    rows = [sens[mask[:, names.index(o)], names.index(o)][:, columns] for o in outputs]
    s = np.linalg.svd(np.concatenate(rows), compute_uv=False)
    return {
        "singular_values": s.tolist(),
        "condition_number": float(s[0] / s[-1]),
        "n_essential_directions": int(np.sum(s[0] / s < FLAT_RATIO)),
        "n_rows": int(sum(r.shape[0] for r in rows)),
    }


def gauss_newton_fits(real, y_real):
    """Gauss-Newton fits of the simple model (f, ktc; ktd = 0) to noise-free real-model data,
    [M] only and [M] + Mw; returns ``{label: (problem, result)}``."""
    mask = np.asarray(real.experiment.mask)
    fits = {}
    for label, outputs in (("M", ("M",)), ("M+Mw", ("M", "Mw"))):
        columns = [real.output_names.index(o) for o in outputs]
        data = Measurements(real.ts, np.asarray(y_real)[:, columns], mask=mask[:, columns],
                            output_names=outputs)
        model = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=outputs,
                                  qss=True)
        problem = CalibrationProblem(model, data, free=["f", "ktc"], fixed={"ktd": 0.0})
        fits[label] = (problem, gauss_newton(problem, {"f": 1.0, "ktc": 1e6}))
    return fits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/demo"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigma", type=float, default=0.05, help="relative noise level")
    parser.add_argument("--quick", action="store_true",
                        help="same numbers; figure curves at the observation times only (fewer compiles)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    key = jax.random.key(args.seed)

    # 1. the real model and noisy data
    real = jcalib.models.get("radical_polymerization_real", recipe=1)
    theta_real = jnp.asarray(real.parameters.nominal)
    simulate_real = jax.jit(lambda th: real.simulate_with_status(th))
    t = time.perf_counter()
    y_real, status = jax.block_until_ready(simulate_real(theta_real))
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(simulate_real(theta_real))
    solve_s = time.perf_counter() - t
    if int(status) != jcalib.SolveStatus.SUCCESS:
        raise RuntimeError(f"real model failed: {jcalib.SolveStatus.describe(int(status))}")
    n_steps = int(real.solve(theta_real).stats["num_steps"])
    data = synthetic_measurements(key, real, theta_real, sigma=args.sigma, noise="multiplicative")
    data.to_csv(args.out / "data_recipe1.csv")

    # 2. sensitivities of the simple model at its nominal point
    simple = jcalib.models.get("radical_polymerization_simple", recipe=1)
    theta_simple = simple.parameters.nominal
    t = time.perf_counter()
    sens = log_sensitivities(simple, theta_simple)
    jac_s = time.perf_counter() - t
    mask = np.asarray(simple.experiment.mask)
    names = list(simple.output_names)
    cases = {"M": ["M"], "M+Mw": ["M", "Mw"], "M+Mw+EG": ["M", "Mw", "EG"]}
    spectra = {
        f"{label} (f, ktc, ktd)": spectrum(sens, mask, outs, names, [0, 1, 2])
        for label, outs in cases.items()
    }
    spectra |= {
        f"{label} (f, ktc)": spectrum(sens, mask, outs, names, [0, 1])
        for label, outs in cases.items()
    }

    # 3. Gauss-Newton fits of the simple model to the real model's data
    t = time.perf_counter()
    fits = gauss_newton_fits(real, y_real)
    fit_s = time.perf_counter() - t
    gn_metrics = {
        label: {"estimate": r.estimate, "R_X": r.loss, "condition_number": r.condition_number,
                "n_essential_directions": r.n_essential_directions,
                "singular_values": np.asarray(r.singular_values).tolist(),
                "flat_directions": r.extra["flat_directions"], "converged": r.converged,
                "reason": r.reason, "n_iterations": r.n_iterations,
                "n_simulations": r.n_simulations, "n_jacobians": r.n_jacobians}
        for label, (_, r) in fits.items()
    }

    # 4. results
    metrics = {
        "real_model": {
            "parameters": real.parameters.to_dict(theta_real),
            "recipe": 1,
            "solver": type(real.solver).__name__,
            "accepted_steps": n_steps,
            "compile_plus_first_solve_s": first_s,
            "solve_s": solve_s,
            "final": dict(zip(real.output_names, np.asarray(y_real)[-1].tolist())),
        },
        "data": {"noise": "multiplicative", "sigma": args.sigma, "seed": args.seed,
                 "n_observed": int(data.n_observed), "csv": str(args.out / "data_recipe1.csv")},
        "simple_model_jacobian": {
            "theta": simple.parameters.to_dict(theta_simple),
            "sensitivity": "d log y / d log theta on measured entries",
            "flat_direction_threshold_s1_over_sk": FLAT_RATIO,
            "jacobian_compile_plus_run_s": jac_s,
            "spectra": spectra,
        },
        "gauss_newton_fits": {
            "model": "radical_polymerization_simple (qss), free f, ktc; ktd = 0",
            "data": "real model, recipe 1, noise-free, paper times",
            "start": {"f": 1.0, "ktc": 1e6},
            "parameter_scaling": "internal coordinates: f linear, log ktc; relative residuals",
            "flat_direction_threshold_s1_over_sk": FLAT_RATIO,
            "compile_plus_fit_s": fit_s,
            "fits": gn_metrics,
        },
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2))

    if args.quick:  # curves at the observation times: reuses the solves compiled above
        dense, simulate_simple = np.asarray(real.ts), simple.simulate
        curves = {"real model": y_real}
    else:
        dense = np.linspace(1.0, float(real.experiment.t1), 200)
        simulate_simple = jax.jit(lambda th: simple.with_times(dense).simulate(th))
        curves = {"real model": jax.jit(lambda th: real.with_times(dense).simulate(th))(theta_real)}
    curves["simple model (nominal)"] = simulate_simple(jnp.asarray(theta_simple))
    for label, (problem, r) in fits.items():
        curves[f"simple, GN fit to {label}"] = simulate_simple(
            problem.theta_full(jnp.asarray(r.theta_internal)))
    fig = plot_simulation(dense, curves, real.output_names, data=data,
                          units=("mol/L", "kg/mol", "mmol/L"), time_unit="s",
                          title="Radical polymerization, recipe 1")
    fig.savefig(args.out / "recipe1_fit.png", dpi=120)
    fig = plot_singular_values({k: v["singular_values"] for k, v in spectra.items()
                                if k.endswith("(f, ktc, ktd)")},
                               title="simple model: d log y / d log (f, ktc, ktd)")
    fig.savefig(args.out / "singular_values.png", dpi=120)

    for label, sp in spectra.items():
        print(f"{label:22s} condition {sp['condition_number']:10.3g}   essential directions "
              f"{sp['n_essential_directions']}   s = {np.round(sp['singular_values'], 4)}")
    for label, g in gn_metrics.items():
        est = ", ".join(f"{k} = {v:.4g}" for k, v in g["estimate"].items())
        print(f"Gauss-Newton fit to {label:5s}: {est}   R_X {g['R_X']:.4g}   condition "
              f"{g['condition_number']:.3g}   essential directions {g['n_essential_directions']}")
    print(f"real model: {n_steps} steps, solve {solve_s * 1e3:.1f} ms (first call {first_s:.1f} s)")
    print(f"wrote {args.out / 'metrics.json'}, recipe1_fit.png, singular_values.png, data_recipe1.csv")
    return metrics


if __name__ == "__main__":
    main()
