"""Practical identifiability and parameter selection for the winding process (Bastogne 2007, §4.4-4.5).

1. passive data: the winding_process model at a "plant" point (the nominal parameters, each
   off by a random factor in [0.8, 1.25], seeded: the nominal model does not fit the plant
   exactly, as with the paper's real data) plus additive Gaussian noise σ = 0.01 V on both
   tension-meter signals (model spec); cost J = Σ_k eᵀe (Q = I), here as the problem's mean
   squared residual (same ranking);
2. one forward-mode Jacobian of the residuals at the nominal parameters (16 vaguely known
   parameters, 600 times x 2 outputs) gives everything: the sensitivity functions of the
   tension signals (Figure 5; checked against finite differences as the paper checks
   Diffedge's symbolic ones), the numerical rank of S_y (§4.4: 14), the null parameters
   (β1, β3), the J-sensitivity ranking (§4.5.1), the correlation ranking with its σ_min
   spectrum (§4.5.2, Figure 8) and the proposed initial subset, plus Wulkow's essential
   directions of the same matrix;
3. results/winding_identifiability/{metrics.json, sensitivity_functions.png,
   sigma_min_spectrum.png, singular_values.png}, with the paper's values next to ours.

Columns are log-parameter sensitivities dy/d ln θ (V): unit-free in the parameters, so the
rank, the rankings and the σ_min spectrum do not depend on the parameters' units.

Usage: python -m experiments.winding_identifiability [--out results/winding_identifiability]
       [--seed 0] [--quick]
"""

from __future__ import annotations

import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from jcalib.plotting import (  # noqa: E402
    plot_sensitivity_functions,
    plot_sigma_min_spectrum,
    plot_singular_values,
)
from jcalib.sensitivity.identifiability import identifiability  # noqa: E402

SIGMA = 0.01  # V, additive noise on y1 = γ1 T1 and y2 = γ3 T3 (model spec)
PLANT_SPREAD = 0.25  # plant parameters: nominal x exp(U(-ln 1.25, ln 1.25)), inside the box
SIGMA_MIN_THRESHOLD = 0.01  # relative σ_min ending the proposed subset (= 1/100, Wulkow)
RANK_RTOL = 1e-10  # relative rank tolerance: above the sensitivities' solver error (~3e-11
# of the largest, tests/models/test_winding_process.py), far below Jp's 6.6e-8
FD_STEP = 1e-5  # central-difference step in ln θ (the solver's step sequence is pinned by dtmax)
FD_QUICK = ("Jp", "BP1", "BP3")  # the paper's Figure 5 finite-difference troubles

# Bastogne et al. 2007, §4.4-4.5 (the paper states no numbers for the rankings' values)
PAPER = {
    "n_poorly_known": 16,
    "rank": 14,
    "identifiable": ["gamma1", "gamma3", "Jp", "Js", "kW1", "kW3", "G1", "G3", "Tfs1", "Tfs3",
                     "cv1", "cv3", "BP1", "BP3"],  # eq. 18
    "null": ["beta1", "beta3"],
    "j_sensitivity_most": "gamma3",
    "j_sensitivity_least": "Jp",
    "correlation_first_four": ["gamma3", "gamma1", "cv3", "cv1"],  # = J-sensitivity first four
    "initial_subset": ["gamma3", "gamma1", "cv3", "cv1"],
}


def plant_point(key, space):
    """Nominal parameters, each multiplied by a random factor in [1/1.25, 1.25], clipped."""
    factor = jnp.exp(jax.random.uniform(key, (space.n_params,), minval=-np.log1p(PLANT_SPREAD),
                                        maxval=np.log1p(PLANT_SPREAD)))
    return np.clip(space.nominal * np.asarray(factor), space.lower, space.upper)


def perturbed_points(theta, names, columns):
    """θ with ln θ_j moved by ±FD_STEP, for j in ``columns``: rows (up_1, down_1, up_2, ...)."""
    rows = []
    for name in columns:
        j = names.index(name)
        for sign in (1.0, -1.0):
            row = theta.copy()
            row[j] *= np.exp(sign * FD_STEP)
            rows.append(row)
    return np.array(rows).reshape(-1, theta.size)


def finite_difference_sensitivities(values, n_times, n_outputs, names, columns):
    """dy/d ln θ_j by central differences from the outputs at `perturbed_points` (NaN for
    parameters not in ``columns``)."""
    out = np.full((n_times, n_outputs, len(names)), np.nan)
    for k, name in enumerate(columns):
        out[:, :, names.index(name)] = (values[2 * k] - values[2 * k + 1]) / (2 * FD_STEP)
    return out


def paper_rows(ours, comparison, j_identifiable):
    """paper_comparison.md rows: the PAPER claims against ours (match = exact equality)."""
    not_analysed = "not analysed yet (issue 19)"

    def row(claim, paper, value, match):
        return {"claim": claim, "paper": paper, "ours": value, "match": match,
                "why": "" if match else not_analysed}

    subset_match = sorted(ours["initial_subset"]) == sorted(PAPER["initial_subset"])
    first_four_match = ours["correlation_first_four"] == PAPER["correlation_first_four"]
    return [
        row("numerical rank of S_y (16 parameters), §4.4", PAPER["rank"], ours["rank"],
            comparison["rank_matches"]),
        row("null (zero-sensitivity) parameters", ", ".join(PAPER["null"]), ", ".join(ours["null"]),
            comparison["null_matches"]),
        row("identifiable parameters (eq. 18), same set", ", ".join(PAPER["identifiable"]),
            ", ".join(ours["identifiable"]), comparison["identifiable_matches"]),
        row("most J-sensitive parameter (§4.5.1)", PAPER["j_sensitivity_most"],
            ours["j_sensitivity_most"], comparison["j_most_matches"]),
        row("least J-sensitive identifiable parameter (dJ/dθ)", PAPER["j_sensitivity_least"],
            ours["j_sensitivity_least_identifiable"], comparison["j_least_matches"]),
        row("least J-sensitive identifiable parameter (dJ/d ln θ)", PAPER["j_sensitivity_least"],
            ours["j_sensitivity_log_least_identifiable"], comparison["j_log_least_matches"]),
        row("correlation ranking, first four in order (§4.5.2)",
            ", ".join(PAPER["correlation_first_four"]), ", ".join(ours["correlation_first_four"]),
            first_four_match),
        row("correlation first four = J-sensitivity first four (as sets)", "yes",
            f"{'yes' if comparison['correlation_first_four_equal_j_first_four'] else 'no'} "
            f"(J first four: {', '.join(j_identifiable[:4])})",
            comparison["correlation_first_four_equal_j_first_four"]),
        row("proposed initial subset, same set", ", ".join(PAPER["initial_subset"]),
            ", ".join(ours["initial_subset"]), subset_match),
    ]


def main(argv=None):
    parser = common.parser(__doc__, "winding_identifiability",
                           quick_help=f"finite-difference check of {', '.join(FD_QUICK)} only")
    args = parser.parse_args(argv)
    common.prepare_out(args.out)
    plant_key, noise_key = jax.random.split(jax.random.key(args.seed))

    # 1. passive data from the "plant"
    model = jcalib.models.get("winding_process")
    space = model.parameters
    names = list(space.names)
    theta_plant = plant_point(plant_key, space)
    # one vmapped solve for the plant and the finite-difference points
    fd_names = list(FD_QUICK) if args.quick else names
    thetas = np.concatenate([theta_plant[None],
                             perturbed_points(space.nominal.copy(), names, fd_names)])
    t = time.perf_counter()
    values = jcalib.simulate_batch(model, thetas, progress=False)
    simulate_s = time.perf_counter() - t
    noise = SIGMA * np.asarray(jax.random.normal(noise_key, values[0].shape, dtype=jnp.float64))
    data = jcalib.Measurements(model.ts, values[0] + noise, sigma=SIGMA,
                               output_names=model.output_names)
    problem = jcalib.CalibrationProblem(model, data, weighting="absolute")

    # 2. one Jacobian at the nominal point -> everything
    t = time.perf_counter()
    report = identifiability(problem, jnp.asarray(space.nominal), scaling="log",
                             rank_rtol=RANK_RTOL, start="j_sensitivity",
                             sigma_min_threshold=SIGMA_MIN_THRESHOLD)
    analysis_s = time.perf_counter() - t
    # residual r = x - y, so dy/d ln θ = -dr/d ln θ; rows are (time, output) row-major
    sens = -report.matrix.reshape(model.experiment.n_times, model.n_outputs, len(names))
    fd = finite_difference_sensitivities(values[1:], model.experiment.n_times, model.n_outputs,
                                         names, fd_names)
    fd_error = {}
    for name in fd_names:
        j = names.index(name)
        scale = np.abs(sens[:, :, j]).max()
        fd_error[name] = (float(np.abs(sens[:, :, j] - fd[:, :, j]).max() / scale)
                          if scale > 0 else float(np.abs(fd[:, :, j]).max()))
    log_j = np.abs(report.j_sensitivity * space.nominal)  # |dJ/d ln θ| from the same gradient
    log_j_order = [names[i] for i in np.argsort(-log_j, kind="stable")]
    rms = np.sqrt(np.mean(sens**2, axis=(0, 1)))

    corr = report.correlation
    j_order = list(report.j_sensitivity_order)
    j_identifiable = [n for n in j_order if n not in report.null_parameters]
    ours = {
        "rank": report.rank,
        "identifiable": list(report.identifiable_parameters),
        "null": list(report.null_parameters),
        "j_sensitivity_order": j_order,
        "j_sensitivity_most": j_order[0],
        "j_sensitivity_least_identifiable": j_identifiable[-1],
        "j_sensitivity_log_least_identifiable": [n for n in log_j_order
                                                 if n not in report.null_parameters][-1],
        "correlation_order": list(corr.order),
        "correlation_first_four": list(corr.order[:4]),
        "initial_subset": list(report.proposed_subset),
    }
    comparison = {
        "rank_matches": ours["rank"] == PAPER["rank"],
        "null_matches": sorted(ours["null"]) == sorted(PAPER["null"]),
        "identifiable_matches": sorted(ours["identifiable"]) == sorted(PAPER["identifiable"]),
        "j_most_matches": ours["j_sensitivity_most"] == PAPER["j_sensitivity_most"],
        "j_least_matches": ours["j_sensitivity_least_identifiable"] == PAPER["j_sensitivity_least"],
        "j_log_least_matches": (ours["j_sensitivity_log_least_identifiable"]
                                == PAPER["j_sensitivity_least"]),
        "correlation_first_four_equal_j_first_four": (
            sorted(corr.order[:4]) == sorted(j_identifiable[:4])),
        "initial_subset_overlap_with_paper": sorted(set(ours["initial_subset"])
                                                    & set(PAPER["initial_subset"])),
    }
    metrics = {
        "setup": {
            "model": "winding_process", "outputs": list(model.output_names),
            "n_times": model.experiment.n_times, "noise": "additive", "sigma_V": SIGMA,
            "seed": args.seed, "quick": args.quick,
            "plant_theta": space.to_dict(theta_plant),
            "analysis_point": "nominal", "cost": "mean squared residual (Q = I)",
            "sensitivity_columns": "dy/d ln theta [V]",
            "rank_rtol": RANK_RTOL, "sigma_min_threshold_relative": SIGMA_MIN_THRESHOLD,
            "correlation_start": "most J-sensitive parameter (Bastogne eq. 13)",
        },
        "timing": {"simulate_batch_s": simulate_s, "n_simulations": int(thetas.shape[0]),
                   "jacobian_and_analysis_s": analysis_s},
        "sensitivity_functions": {
            "rms_dy_dlntheta_V": dict(zip(names, rms.tolist())),
            "finite_difference_max_rel_error": fd_error,
            "finite_difference_step_ln_theta": FD_STEP,
            "finite_difference_note": "max |autodiff - FD| / max |autodiff| per parameter; "
                                      "for a zero column (beta1, beta3) max |FD| in V",
        },
        "condition_number_identifiable_columns": float(np.linalg.cond(
            report.matrix[:, [names.index(n) for n in report.identifiable_parameters]])),
        "identifiability": report.to_dict(),
        "j_sensitivity_log_order": log_j_order,
        "ours": ours,
        "paper": PAPER,
        "comparison": comparison,
    }
    common.write_metrics(args.out, metrics)
    common.write_paper_comparison(args.out, "Bastogne et al. 2007, §4.4-4.5 (winding process)",
                                  paper_rows(ours, comparison, j_identifiable), quick=args.quick)

    ts = np.asarray(model.ts)
    # in newtons: γ_i⁻¹ dy_i/d ln θ = dT_i/d ln θ for every θ but γ_i (for which it is T_i)
    gammas = space.nominal[[names.index("gamma1"), names.index("gamma3")]]
    fig = plot_sensitivity_functions(
        ts, sens / gammas[None, :, None], ["T1", "T3"], names,
        reference=fd / gammas[None, :, None], time_unit="s", ylabel="dT/d ln θ [N]",
        title="Sensitivity functions of T1, T3 (solid: autodiff, dotted: finite differences)")
    common.save(fig, args.out / "sensitivity_functions.png", dpi=110)
    fig = plot_sigma_min_spectrum(report, title="σ_min spectrum of Σ_1..j (dy/d ln θ columns)")
    common.save(fig, args.out / "sigma_min_spectrum.png", dpi=120)
    fig = plot_singular_values({"S_y, 16 parameters": report.jacobian.singular_values},
                               title="winding process: dy/d ln θ")
    common.save(fig, args.out / "singular_values.png", dpi=120)

    print(f"rank {report.rank} of {len(names)} (paper {PAPER['rank']}); null: "
          f"{', '.join(report.null_parameters)}")
    print(f"J-sensitivity order: {', '.join(j_order)}")
    print(f"correlation order:   {', '.join(corr.order)}")
    print(f"relative sigma_min:  {np.array2string(corr.relative_sigma_min, precision=3)}")
    print(f"proposed subset: {', '.join(report.proposed_subset)} (paper: "
          f"{', '.join(PAPER['initial_subset'])})")
    print(f"essential directions: {report.jacobian.n_essential} ({report.jacobian.rule} rule), "
          f"condition number {report.jacobian.condition_number:.3g}")
    print(f"analysis {analysis_s:.1f} s; wrote {args.out / 'metrics.json'} and 3 figures")
    return metrics


if __name__ == "__main__":
    main()
