"""IMPU versus an extended Kalman filter on the roll-plane model (Kessels et al. 2023, §5, Fig. 19).

The paper trains the IMPU network on TS, MP and RI features of the 10 samples x 4 outputs of
the roll-plane model (tire stiffnesses kt1, kt2 in 80-120 % of 96319.76 N/m; 1 % relative
measurement noise), for several training-set sizes n_s with 1,000 validation samples, and
reports

- the mean absolute relative error μ_|ε| (eq. 21) over 1,000 uniform test samples against
  n_s per parameter and feature type (Fig. 19, solid lines), and
- the absolute relative error of the IMPU estimate of p_ref = [100800, 88855] N/m, the "true"
  values of Blanchard et al.'s EKF study (Fig. 19, markers), against the EKF's error on p_ref
  (Fig. 19, dash-dotted line, from Blanchard et al. 2010, independent of n_s).

Its finding: "already for a relatively low number of training samples (order 100), the IMPU
method is competitive with and can even outperform (for sufficiently high n_s) the EKF".

Here the EKF is ours (`jcalib.filters.ekf.run_ekf`): the parameters in log coordinates are
appended to the 8 states, the filter starts at the nominal stiffnesses (the paper's p_c) with
the variance of a uniform distribution over the box in log θ (sd 11.7 %), known initial
state (at rest), no process noise (the model is exact and the parameters constant), and the
measurement noise R_k = diag((0.01 |ŷ_k| + 1e-6)²) at its own prediction ŷ_k (the relative
noise of the data, whose noise-free value the filter does not know). Two diagnostics go with
it: the filter on noise-free data (what remains is the linearisation bias of its first
updates, taken 4-8 % away from p_ref) and a second pass started at the first pass's
estimate. The paper shows one measurement; we average both methods over ``n_draws`` noise
draws of the p_ref measurement (the same draws for both) and also report the first draw alone.

IMPU (`jcalib.nn.impu.InverseMapping`): an MLP with two ReLU hidden layers of 64 (the
paper's Table 11 is not available to us), Adam 1e-3, batches of 50, at most 200 epochs,
early stopping after 40 without improvement (the paper's §4.1.3 settings); min-max
normalised features and parameters; the paper's 1 % relative noise on training, validation
and test data. For each n_s one Latin-hypercube training set serves all three feature types
(TS = every sample, MP, RI = magnitude/phase and real/imaginary parts of the FFT over the 10
samples; no FBoI, as in the paper). Validation (1,000) and test (1,000) sets are uniform and
shared by all runs.

Writes ``metrics.json`` and ``error_versus_training_size.png`` (Fig. 19) under ``--out``.

Usage: python -m experiments.roll_plane_impu_vs_ekf [--out results/roll_plane_impu_vs_ekf]
       [--seed 0] [--sizes 25 50 100 ...] [--n-draws 20] [--quick]
"""

from __future__ import annotations

import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations and the EKF run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from jcalib.filters.ekf import RelativeMeasurementNoise, run_ekf  # noqa: E402
from jcalib.models.roll_plane import NOISE_FLOOR, NOISE_RELATIVE, P_REF  # noqa: E402
from jcalib.nn.impu import InverseMapping, InverseMappingConfig, paper_noise, paper_training  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.probability import add_noise  # noqa: E402

FEATURES = ("TS-dense", "MP", "RI")  # Fig. 19's TS, MP and RI (all 10 samples of all 4 outputs)
HIDDEN = (64, 64)
# full / quick
SETTINGS = {
    "sizes": ((25, 50, 100, 200, 500, 1000, 2000, 5000), (16, 48)),
    "n_val": (1000, 32),  # the paper: 1,000
    "n_test": (1000, 64),  # the paper: 1,000
    "n_draws": (20, 3),  # noise draws of the p_ref measurement (EKF and IMPU)
    "chunk_size": (512, 64),  # one compiled simulate_batch chunk for all sets
}
PAPER = {
    "source": "Kessels, Fey & van de Wouw (2023), Sec. 5, Fig. 19",
    "finding": "IMPU is competitive with the EKF from n_s of order 100 and better for sufficiently high n_s; "
               "TS, MP and RI give comparable errors; mu_|eps| falls with n_s",
    "impu_inference_ms": 1.5,
    "ekf": "Blanchard, Sandu & Sandu (2010); one estimate of p_ref, error plotted in Fig. 19 (values not "
           "tabulated in the text)",
}


def quick_training() -> TrainingConfig:
    """A few epochs (CI smoke run; its numbers say little)."""
    return TrainingConfig(epochs=15, batch_size=16, learning_rate=3e-3, patience=None, progress=False)


def ekf_on_p_ref(model, measurements) -> dict:
    """`run_ekf` from the nominal stiffnesses on every measurement; errors against p_ref."""
    p_ref = np.asarray(P_REF)
    noise = RelativeMeasurementNoise(relative=NOISE_RELATIVE, floor=NOISE_FLOOR)
    runs, errors = [], []
    for data in measurements:
        result = run_ekf(model, data, model.parameters.nominal, R=noise)
        runs.append(result)
        errors.append(result.relative_error(p_ref))
    errors = np.array(errors)
    times = [r.wall_time_s for r in runs]
    names = model.parameters.names
    # diagnostics of what limits the filter: the same filter on noise-free data (its
    # linearisation bias), and a second pass over each measurement started at the first
    # pass's estimate (an iterated filter in its simplest form; it uses the data twice, so
    # its covariance means nothing, only its point estimate)
    noise_free = run_ekf(model, np.asarray(model.simulate(jnp.asarray(p_ref))), model.parameters.nominal, R=noise)
    second = np.array([run_ekf(model, data, r.theta, R=noise).relative_error(p_ref)
                       for data, r in zip(measurements, runs)])
    return {
        "start": dict(zip(names, model.parameters.nominal)),
        "start_relative_error": dict(zip(names, np.abs(model.parameters.nominal - p_ref) / p_ref)),
        "mean_abs_relative_error": dict(zip(names, errors.mean(axis=0))),
        "max_abs_relative_error": dict(zip(names, errors.max(axis=0))),
        "bias_relative": dict(zip(names, np.mean([(r.theta - p_ref) / p_ref for r in runs], axis=0))),
        "first_draw_abs_relative_error": dict(zip(names, errors[0])),
        "estimates": np.array([r.theta for r in runs]),
        "reported_sd_relative": dict(zip(names, np.mean([r.theta_sd[-1] / r.theta for r in runs], axis=0))),
        "mean_nis_per_measurement": float(np.mean([np.sum(r.normalized_innovations_squared)
                                                   / np.sum(r.n_measured) for r in runs])),
        "all_success": all(r.success for r in runs),
        "noise_free_relative_error": dict(zip(names, (noise_free.theta - p_ref) / p_ref)),
        "second_pass_mean_abs_relative_error": dict(zip(names, second.mean(axis=0))),
        "first_run_s_with_compile": times[0],
        "warm_run_s_median": float(np.median(times[1:])) if len(times) > 1 else None,
        "settings": {"parameters": "log", "P0": "box-uniform variance in log theta (sd 11.7 %); states 1e-9",
                     "Q": 0.0, "R": f"diag(({NOISE_RELATIVE} |y_pred| + {NOISE_FLOOR})^2)"},
        "first_run": runs[0].to_dict(),
    }


def main(argv=None):
    parser = common.parser(__doc__, "roll_plane_impu_vs_ekf", quick_help="tiny sets and 15 epochs (CI smoke run)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="training-set sizes n_s")
    parser.add_argument("--n-draws", type=int, default=None, help="noise draws of the p_ref measurement")
    args = parser.parse_args(argv)
    s = {k: v[1 if args.quick else 0] for k, v in SETTINGS.items()}
    sizes = tuple(args.sizes or s["sizes"])
    n_draws = args.n_draws or s["n_draws"]
    common.prepare_out(args.out)
    start = time.perf_counter()

    model = jcalib.models.get("roll_plane")
    space = model.parameters
    names = space.names
    p_ref = np.asarray(P_REF)
    noise_std, relative = paper_noise(model)  # 1 % of the noise-free value, every output
    noise_model = "multiplicative" if relative else "additive"  # jcalib.probability.add_noise's noise
    key = jax.random.key(args.seed)
    k_train, k_val, k_test, k_noise, k_ref = jax.random.split(key, 5)

    # --- the p_ref measurements: n_draws noise draws, shared by the EKF and IMPU ---------------
    ref_keys = jax.random.split(k_ref, n_draws)
    measurements = [jcalib.synthetic_measurements(k, model, jnp.asarray(p_ref), NOISE_RELATIVE) for k in ref_keys]
    measured = np.stack([np.asarray(m.values) for m in measurements])  # (n_draws, 10, 4)

    t_ekf = time.perf_counter()
    ekf = ekf_on_p_ref(model, measurements)
    ekf["wall_time_s"] = time.perf_counter() - t_ekf
    ekf_error = np.array([ekf["mean_abs_relative_error"][n] for n in names])

    # --- simulated data: all sets in one batched simulation (one compiled chunk) ----------------
    train_sets = [np.asarray(space.sample(jax.random.fold_in(k_train, n), n, "lhs")) for n in sizes]
    val_thetas = np.asarray(space.sample(k_val, s["n_val"], "uniform"))
    test_thetas = np.asarray(space.sample(k_test, s["n_test"], "uniform"))
    t_sim = time.perf_counter()
    signals = jcalib.simulate_batch(model, np.concatenate([*train_sets, val_thetas, test_thetas]),
                                    s["chunk_size"], progress=False)
    simulate_s = time.perf_counter() - t_sim
    offsets = np.cumsum([0, *sizes, s["n_val"]])
    train_signals = [signals[a:b] for a, b in zip(offsets[:-1], offsets[1:])][: len(sizes)]
    val_signals = signals[offsets[-2]: offsets[-1]]
    test_signals = signals[offsets[-1]:]
    k_noise_val, k_noise_test, k_noise_train = jax.random.split(k_noise, 3)
    val_noisy = add_noise(k_noise_val, val_signals, noise_std, noise_model)
    test_noisy = add_noise(k_noise_test, test_signals, noise_std, noise_model)  # noisy test data, as in the paper
    k_fit = jax.random.fold_in(key, 99)  # the networks' initial weights and shuffling

    # --- IMPU for every feature type and n_s ------------------------------------------------------
    training = quick_training() if args.quick else paper_training()
    impu = {f: {"test_mare": [], "test_bias": [], "test_sd": [], "test_max_are": [], "test_outside_rate": [],
                "p_ref_mean_abs_relative_error": [], "p_ref_first_draw_abs_relative_error": [],
                "p_ref_outside": [], "epochs": [], "best_epoch": [], "training_s": []} for f in FEATURES}
    for i, (n, thetas, clean) in enumerate(zip(sizes, train_sets, train_signals)):
        noisy = add_noise(jax.random.fold_in(k_noise_train, i), clean, noise_std, noise_model)
        for feature in FEATURES:
            config = InverseMappingConfig(feature=feature, hidden=HIDDEN, training=training)
            mapping = InverseMapping(model, config).fit(k_fit, thetas, noisy, val=(val_thetas, val_noisy))
            metrics = mapping.evaluate(test_thetas, test_noisy)
            estimate = mapping.infer(measured)
            err_ref = np.abs(np.asarray(estimate.theta) - p_ref) / p_ref
            row = impu[feature]
            row["test_mare"].append(np.asarray(metrics.mare))
            row["test_bias"].append(np.asarray(metrics.bias))
            row["test_sd"].append(np.asarray(metrics.sd))
            row["test_max_are"].append(np.asarray(metrics.max_are))
            row["test_outside_rate"].append(float(np.mean(np.asarray(metrics.outside))))
            row["p_ref_mean_abs_relative_error"].append(err_ref.mean(axis=0))
            row["p_ref_first_draw_abs_relative_error"].append(err_ref[0])
            row["p_ref_outside"].append(int(np.sum(np.asarray(estimate.outside_training_range))))
            tr = mapping.training
            row["epochs"].append(len(tr.history["train_loss"]))
            row["best_epoch"].append(int(tr.best_epoch))
            row["training_s"].append(float(tr.wall_time_s))
            print(f"n_s={n:5d} {feature:8s} test MARE {100 * np.asarray(metrics.mare)} %  p_ref error "
                  f"{100 * err_ref.mean(axis=0)} %  (EKF {100 * ekf_error} %)", flush=True)
    for row in impu.values():
        for k in ("test_mare", "test_bias", "test_sd", "test_max_are", "p_ref_mean_abs_relative_error",
                  "p_ref_first_draw_abs_relative_error"):
            row[k] = np.array(row[k])  # (n_sizes, n_params)

    # --- comparison: where IMPU's p_ref error drops below the EKF's -----------------------------
    comparison = {}
    for feature, row in impu.items():
        below = np.all(row["p_ref_mean_abs_relative_error"] <= ekf_error, axis=1)
        first = int(np.argmax(below)) if below.any() else None
        comparison[feature] = {
            "smallest_n_s_with_p_ref_error_below_ekf_both_params": None if first is None else sizes[first],
            "p_ref_error_over_ekf_at_largest_n_s": dict(zip(names, row["p_ref_mean_abs_relative_error"][-1]
                                                            / ekf_error)),
            "test_mare_over_ekf_p_ref_error_at_largest_n_s": dict(zip(names, row["test_mare"][-1] / ekf_error)),
        }

    metrics = {
        "experiment": "roll_plane_impu_vs_ekf", "quick": args.quick, "seed": args.seed,
        "model": "roll_plane", "parameters": list(names), "p_ref": dict(zip(names, p_ref)),
        "nominal": dict(zip(names, space.nominal)), "features": list(FEATURES), "sizes": list(sizes),
        "n_val": s["n_val"], "n_test": s["n_test"], "n_draws": n_draws,
        "noise": {"relative": NOISE_RELATIVE, "kind": "y (1 + 0.01 eps), eps ~ N(0, 1)"},
        "network": {"hidden": list(HIDDEN), "training": training.to_dict()},
        "ekf": ekf,
        "impu": impu,
        "comparison": comparison,
        "simulate_s": simulate_s,
        "paper": PAPER,
        "wall_time_s": time.perf_counter() - start,
    }
    metrics = common.write_metrics(args.out, metrics)
    # paper_comparison.md: Fig. 19's three statements, each with a stated criterion; None at --quick sizes
    final = {f: float(np.mean(impu[f]["test_mare"][-1])) * 100 for f in impu}
    first = {f: float(np.mean(impu[f]["test_mare"][0])) * 100 for f in impu}
    ratio = {f: {n: round(float(v), 2) for n, v in c["p_ref_error_over_ekf_at_largest_n_s"].items()}
             for f, c in comparison.items()}
    checks = [
        ("IMPU competitive with the EKF from n_s ~ 100, better for sufficiently high n_s (Fig. 19)",
         "IMPU p_ref error / EKF's <= 1 for both parameters at the largest n_s, every feature type",
         {"p_ref error / EKF at largest n_s": ratio,
          "smallest n_s below EKF": {f: c["smallest_n_s_with_p_ref_error_below_ekf_both_params"]
                                     for f, c in comparison.items()}},
         all(v <= 1 for r in ratio.values() for v in r.values())),
        ("TS, MP and RI give comparable errors (Fig. 19)",
         "largest n_s: max / min of the mean test mu_|eps| over the feature types <= 2",
         {f: round(v, 3) for f, v in final.items()}, max(final.values()) <= 2 * min(final.values())),
        ("mu_|eps| falls with n_s (Fig. 19)", "mean test mu_|eps| at the largest n_s < at the smallest, every type",
         {f: f"{first[f]:.3f} -> {final[f]:.3f} %" for f in final}, all(final[f] < first[f] for f in final)),
    ]
    common.write_paper_comparison(
        args.out, "Kessels et al. 2023, Sec. 5 (roll plane, IMPU versus EKF)",
        [{"claim": claim, "paper": f"{PAPER['finding']}; criterion: {criterion}", "ours": ours,
          "match": None if args.quick else bool(holds),
          "why": "" if args.quick or holds else "not analysed yet (issue 19)"}
         for claim, criterion, ours, holds in checks],
        quick=args.quick)
    common.save(figure(sizes, impu, ekf_error, names), args.out / "error_versus_training_size.png", dpi=120)
    return metrics


def figure(sizes, impu, ekf_error, names):
    """Fig. 19: μ_|ε| on the test set (lines) and the p_ref error (markers, mean over the noise
    draws) against n_s per feature type, with the EKF's p_ref error (dash-dotted)."""
    from jcalib.plotting import plot_impu_error_versus_training_size

    fig = plot_impu_error_versus_training_size(
        sizes, {f"{f} test μ|ε|": row["test_mare"] for f, row in impu.items()}, names,
        title="roll plane: IMPU (TS, MP, RI) versus EKF")
    for j, ax in enumerate(fig.axes[: len(names)]):
        for c, (feature, row) in enumerate(impu.items()):
            ax.plot(sizes, 100 * row["p_ref_mean_abs_relative_error"][:, j], "x", ms=6, color=f"C{c}",
                    label=f"{feature} |ε| of p_ref")
        ax.axhline(100 * ekf_error[j], color="k", ls="-.", lw=1.2, label="EKF |ε| of p_ref")
        ax.set_yscale("log")
    fig.axes[0].legend(fontsize=6)
    return fig


if __name__ == "__main__":
    main()
