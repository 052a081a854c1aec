"""Iterative identification of the 19 cabin parameters with BayesFlow and PELS-VAE (Zhang & Mikelsons 2023).

Reproduces the calibration experiment of Zhang & Mikelsons (2023, "Parameter inference with
BayesFlow", Fig. 6, Figs. 13-14) on ``cabin_thermal`` (our reduced-order stand-in for their
Modelica cabin: 19 correction factors, 4 left-side air temperatures, cool-down and heat-up at
18 s steps: (200, 4) = their (100, 8)):

1. data: 2,000 parameter vectors uniform in the box, simulated once; 1,600 train, 399
   validation (trial R² and the recovery metrics of Fig. 14; not used for early stopping,
   as in the paper), 1 test sample (the "measurement", noise-free, with known truth);
2. a PELS-VAE trained on the training set generates the data of later steps (the paper's
   generator; ``--generator model`` uses the true model instead, which is cheap here: about
   1 ms per trajectory);
3. Algorithm 3 (`jcalib.workflows.iterative_identification`): Sobol' selection with S = 64
   (Algorithm 1, δ = 0.001), trial inference, formal inference, fixing, regeneration, until all
   19 are identified;
4. the baseline: one amortized posterior for all 19 at once on the same training set, with
   the same network and training settings as each formal inference;
5. metrics of both next to the paper's: average relative error ER over the 19 estimates (paper
   1.62 %), how many 95 % intervals cover the truth (paper 16 of 19), mean absolute error of
   the model's outputs at the estimate against the test sample (paper 0.108 °C), wall time
   (paper 23.41 h for the steps on an A30 GPU, plus 2,000 × 5 s of simulation and 1 h of
   PELS-VAE training), the groups (paper: 5 steps), and per step the validation R² / NRMSE.

Protocol of the test sample. The paper transforms the test sample like the training data:
in step n > 1 its observation is the PELS-VAE's output at the truth with the identified
parameters at their estimates (its Algorithm 2; "the test sample x^(o) is also transformed
in the same way"). That is the default here (``regenerate_observation``); ``--fixed-observation``
keeps the simulated test trajectory in every step, as with real measurements (the networks of
later steps then see the surrogate's error at the estimates as well).

Sizes. All modes use the paper's data sizes (2,000 simulations: 1,600 / 399 / 1). The default
("hour", issue 19) trains MLP-summary posteriors (4 couplings of 64 x 64) for 60 epochs, trials
for 15, and the default PELS-VAE (100 epochs): meant for about an hour on 2 CPU cores.
``--default-size`` trains jcalib's default networks (`BayesFlowConfig()`: LSTM summary, 6 affine
couplings of 128 x 128, 100 epochs, trials for 25; the paper gives no network sizes): 2 networks
per step plus the one-shot baseline and the PELS-VAE (Sobol' designs, data generation and
sampling as in the default; est. 1-2 h on 2 CPU cores). ``--reduced`` (GRU summary, 30
epochs) is the earlier ~15-30 min configuration; ``--quick`` (100 samples, tiny networks, 2
epochs, at most 2 steps) is a smoke test for CI, not a result.

Writes results/cabin_iterative_identification/{metrics.json, identification.png,
identification_one_shot.png, recovery.png, recovery_one_shot.png, outputs.png, report.md}.

Usage: python -m experiments.cabin_iterative_identification [--out DIR] [--seed 0]
       [--n-samples 2000] [--epochs N] [--generator surrogate|model] [--fixed-observation]
       [--no-baseline] [--default-size | --reduced | --quick]
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from jcalib.nn.bayesflow import BayesFlowConfig  # noqa: E402
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.plotting import plot_identification, plot_identification_recovery  # noqa: E402
from jcalib.workflows.iterative_identification import (  # noqa: E402
    IdentificationConfig,
    iterative_identification,
    one_shot_identification,
)

# Zhang & Mikelsons 2023: "Parameter inference with BayesFlow" and Fig. 6
PAPER = {
    "mean_relative_error_percent": 1.62,
    "n_covered": 16,
    "n_parameters": 19,
    "output_mae_degC": 0.108,
    "steps_h": 23.41,
    "data_generation_s": 2000 * 5.0,
    "pelsvae_training_h": 1.0,
    "n_steps": 5,
    "largest_relative_error": {"parameter": "CF_airExchangeRBT", "relative_error_percent": 5.008},
    "not_covered": ["CF_airExchangeRBT", "CF_airExchangeFLR/RLR", "ratioBottomUp"],
    "hardware": "one NVIDIA A30 GPU",
}
SPLIT = (1600, 399, 1)  # train, validation, test (the paper's)
HOUR_EPOCHS = 60  # formal-inference epochs of the default ("hour") configuration


MODES = ("quick", "reduced", "hour", "default")


def settings(mode: str, epochs: int | None) -> tuple[IdentificationConfig, dict]:
    """The workflow's configuration for a mode: "hour" (the default), "default" (--default-size: jcalib's
    default networks),
    "reduced" or "quick"."""
    if mode not in MODES:
        raise ValueError(f"settings: mode must be one of {MODES}; got {mode!r}")
    if mode == "quick":
        posterior = BayesFlowConfig(summary="mlp", summary_size=8, summary_hidden=16, n_blocks=2,
                                    coupling_hidden=(16, 16),
                                    training=TrainingConfig(epochs=epochs or 2, batch_size=32, progress=False))
        surrogate = PELSVAEConfig(latent_size=4, hidden_size=16, n_passes=2, training=TrainingConfig(
            epochs=2, batch_size=32, progress=False))
        config = IdentificationConfig(posterior=posterior, trial_epochs=1, n_sobol=4, n_samples=100,
                                      n_val_samples=10, max_steps=2, surrogate=surrogate, progress=False)
    elif mode == "reduced":
        posterior = BayesFlowConfig(summary="gru", summary_size=32, summary_hidden=32, n_blocks=4,
                                    coupling_hidden=(64, 64),
                                    training=TrainingConfig(epochs=epochs or 30, batch_size=64, learning_rate=1e-3,
                                                            schedule="exponential", decay=0.97, progress=False))
        surrogate = PELSVAEConfig(latent_size=16, hidden_size=64, training=TrainingConfig(
            epochs=60, batch_size=64, learning_rate=3e-3, schedule="multistep", milestones=(36, 51), decay=0.2,
            progress=False))
        config = IdentificationConfig(posterior=posterior, surrogate=surrogate)
    elif mode == "hour":
        # issue 19: the configuration meant for about an hour on 2 CPU cores. An MLP summary of
        # the standardised (200, 4) trajectories learnt A_internal_mass better than the GRU in
        # 30 epochs (validation R² 0.72 vs 0.28 on the step-1 data); more epochs than --reduced
        # for the formal networks, a quarter of them for the trials.
        posterior = BayesFlowConfig(summary="mlp", summary_size=32, summary_hidden=128, n_blocks=4,
                                    coupling_hidden=(64, 64),
                                    training=TrainingConfig(epochs=epochs or HOUR_EPOCHS, batch_size=64,
                                                            learning_rate=1e-3, schedule="exponential",
                                                            decay=0.97, progress=False))
        config = IdentificationConfig(posterior=posterior)
    else:  # the paper's sizes: jcalib's default networks (LSTM summary, 6 couplings of 128 x 128, 100 epochs)
        posterior = BayesFlowConfig()
        if epochs is not None:
            posterior = dataclasses.replace(posterior, training=dataclasses.replace(posterior.training, epochs=epochs))
        config = IdentificationConfig(posterior=posterior)
    return config, {"mode": mode}


def output_figure(model, truth, results: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = np.asarray(model.ts)
    y_true = np.asarray(model.simulate(jnp.asarray(truth)))
    fig, axes = plt.subplots(1, model.n_outputs, figsize=(3.4 * model.n_outputs, 3.0), squeeze=False)
    for j, ax in enumerate(axes[0]):
        ax.plot(ts, y_true[:, j], "k-", lw=1.8, label="truth")
        for label, result in results.items():
            theta = np.clip(result.estimate, model.parameters.lower, model.parameters.upper)
            ax.plot(ts, np.asarray(model.simulate(jnp.asarray(theta)))[:, j], "--", lw=1.1,
                    label=f"{label} (MAE {result.output_mae:.3f} °C)")
        ax.set_title(model.output_names[j], fontsize=9)
        ax.set_xlabel("t [s]")
    axes[0, 0].set_ylabel("air temperature [°C]")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    common.save(fig, path, dpi=110)


def row(result) -> dict:
    """The paper's headline numbers of one result."""
    rel = np.asarray(result.relative_error)
    worst = int(np.argmax(rel))
    return {"mean_relative_error_percent": result.mean_relative_error, "n_covered": result.n_covered,
            "n_parameters": len(result.names), "output_mae_degC": result.output_mae,
            "n_steps": len(result.steps), "groups": [list(g) for g in result.groups],
            "step1_candidates": list(result.steps[0].candidates),
            "n_fallbacks": int(sum(bool(s.fallback) for s in result.steps)),
            "selection_reasons": [s.selection_reason for s in result.steps],
            "largest_relative_error": {"parameter": result.names[worst], "relative_error_percent": float(rel[worst])},
            "not_covered": [n for n, c in zip(result.names, result.covered) if not c],
            "mean_normalized_sd": float(np.mean(result.normalized_sd)),
            "validation_r2": {n: v["r2"] for s in result.steps for n, v in s.validation.items()},
            "validation_nrmse": {n: v["nrmse"] for s in result.steps for n, v in s.validation.items()},
            "durations_s": result.durations,
            "steps_h": result.durations["steps_s"] / 3600.0,
            "n_model_simulations": result.n_model_simulations,
            "n_surrogate_evaluations": result.n_surrogate_evaluations}


def report(metrics: dict) -> str:
    def f(x, fmt):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)

    it, one, p = metrics["iterative"]["summary"], metrics["one_shot"]["summary"], PAPER
    lines = [f"# Cabin: iterative identification vs one-shot BayesFlow ({metrics['mode']} run)", "",
             f"cabin_thermal, 19 parameters, {metrics['split']} train/validation/test samples, generator "
             f"{metrics['config']['generator']}, test-sample protocol: "
             f"{'paper (regenerated)' if metrics['config']['regenerate_observation'] else 'fixed observation'}.", "",
             "| metric | iterative (ours) | one-shot (ours) | paper (iterative) |", "|---|---:|---:|---:|",
             f"| mean ER [%] | {f(it['mean_relative_error_percent'], '.3f')} | "
             f"{f(one['mean_relative_error_percent'], '.3f')} | {p['mean_relative_error_percent']} |",
             f"| 95 % intervals covering the truth | {it['n_covered']} / 19 | {one['n_covered']} / 19 | "
             f"{p['n_covered']} / 19 |",
             f"| output MAE [°C] | {f(it['output_mae_degC'], '.4f')} | {f(one['output_mae_degC'], '.4f')} | "
             f"{p['output_mae_degC']} |",
             f"| steps | {it['n_steps']} | 1 | {p['n_steps']} |",
             f"| largest ER | {it['largest_relative_error']['parameter']} "
             f"{f(it['largest_relative_error']['relative_error_percent'], '.2f')} % | "
             f"{one['largest_relative_error']['parameter']} "
             f"{f(one['largest_relative_error']['relative_error_percent'], '.2f')} % | CF_airExchangeRBT 5.008 % |",
             f"| mean σ̄ (sd / range) | {f(it['mean_normalized_sd'], '.4f')} | {f(one['mean_normalized_sd'], '.4f')} "
             "| - |",
             f"| wall time of the steps | {f(it['steps_h'] * 60, '.1f')} min | {f(one['steps_h'] * 60, '.1f')} min | "
             f"{p['steps_h']} h (GPU) |", "",
             "Groups (iterative): " + " | ".join(", ".join(g) for g in it["groups"]), ""]
    return "\n".join(lines)


TARGETS = {  # issue 19: what a reproduction has to reach (the paper's numbers with some slack)
    "mean_relative_error_percent": 3.0, "n_covered": 16, "output_mae_degC": 0.2, "n_steps": 6,
}
PAPER_STEP1 = ("ratioFrontRear", "ratioBottomUp", "A_internal_mass", "CF_alpha_internal")  # Fig. 4


def paper_rows(it: dict, mode: str) -> list[dict]:
    """paper_comparison.md rows: the iterative workflow's summary against PAPER, with the issue-19
    targets as the criteria (ER <= 3 %, >= 16 / 19 intervals covering the truth, output MAE <=
    0.2 degC, at most 6 steps without one-parameter fallbacks); n/a in --quick (a smoke test)."""
    p, t = PAPER, TARGETS
    quick = mode == "quick"
    gap = {"reduced": "--reduced: smaller networks, fewer epochs than the paper's",
           "hour": ("settings / learning, not the model: all 19 are locally identifiable at the nominal θ from "
                    "the noise-free outputs (sd <= 4.4 % of the range at 0.01 K noise, Jacobian condition 868), "
                    "but after step 1 "
                    "the surrogate's Sobol' indices decay smoothly, Algorithm 1 keeps 15 of 16, 13 of 14, ..., a "
                    "trial of that many candidates (15 epochs) confirms 1-2 per step (see the steps in metrics.json)"),
           "default": "see docs/fidelity/cabin_iterative_identification.md"}.get(mode, "")

    def num(x, fmt):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)

    def decide(ok):
        return None if quick or ok is None else bool(ok)

    def row(claim, paper, ours, match, why=None):
        match = decide(match)
        if why is None:
            why = "--quick: tiny networks, 2 epochs, at most 2 steps" if quick else ("" if match else gap)
        elif match:
            why = ""
        return {"claim": claim, "paper": paper, "ours": ours, "match": match, "why": why}

    er, mae = it["mean_relative_error_percent"], it["output_mae_degC"]
    worst = it["largest_relative_error"]
    step1 = it.get("step1_candidates", [])
    n_fallbacks = it.get("n_fallbacks", 0)
    return [
        row("step 1: Algorithm 1 candidates (same set)", f"4 of 19: {', '.join(PAPER_STEP1)}",
            f"{len(step1)} of 19: {', '.join(step1)}", sorted(step1) == sorted(PAPER_STEP1)),
        row(f"mean relative error ER over 19 estimates [%] (match: <= {t['mean_relative_error_percent']})",
            p["mean_relative_error_percent"], num(er, ".3f"),
            None if er is None else er <= t["mean_relative_error_percent"]),
        row(f"95 % intervals covering the truth (match: >= {t['n_covered']})",
            f"{p['n_covered']} / {p['n_parameters']}", f"{it['n_covered']} / {it['n_parameters']}",
            it["n_covered"] >= t["n_covered"]),
        row(f"output MAE at the estimate [°C] (match: <= {t['output_mae_degC']})", p["output_mae_degC"],
            num(mae, ".4f"), None if mae is None else mae <= t["output_mae_degC"]),
        row(f"identification steps (match: <= {t['n_steps']}, no one-parameter fallback)", p["n_steps"],
            f"{it['n_steps']} ({n_fallbacks} fallbacks)", it["n_steps"] <= t["n_steps"] and n_fallbacks == 0),
        row("parameter with the largest relative error",
            f"{p['largest_relative_error']['parameter']} {p['largest_relative_error']['relative_error_percent']} %",
            f"{worst['parameter']} {num(worst['relative_error_percent'], '.2f')} %",
            worst["parameter"] == p["largest_relative_error"]["parameter"],
            None if quick else "the model is our reduced-order stand-in: its weakest parameters are not the paper's"),
        row("parameters whose 95 % interval misses the truth (same set)", ", ".join(p["not_covered"]),
            ", ".join(it["not_covered"]) or "none", sorted(it["not_covered"]) == sorted(p["not_covered"]),
            None if quick else "the model is our reduced-order stand-in: its weakest parameters are not the paper's"),
        row("wall time of the steps", f"{p['steps_h']} h ({p['hardware']})",
            f"{num(it['steps_h'] * 60, '.1f')} min (CPU)", None,
            "different hardware and model (reduced-order cabin stand-in, ~1 ms per simulation)"),
    ]


def train_surrogate(key, model, config, train, val, n_test: int) -> tuple[PELSVAE, dict]:
    """The PELS-VAE that generates the data of steps > 1, trained as the workflow would train it
    (``config.surrogate`` on ``train``, validated on ``val``), and its errors (°C, per output) on
    ``n_test`` new uniform samples of the true model."""
    k_fit, k_test = jax.random.split(key)
    t0 = time.perf_counter()
    vae = PELSVAE(model, config.surrogate).fit(k_fit, *train, val=val)
    training_s = time.perf_counter() - t0
    thetas = np.asarray(model.parameters.sample(k_test, n_test, "uniform"))
    test = vae.evaluate(thetas, jcalib.simulate_batch(model, thetas))
    return vae, {"n_test": n_test, "training_s": training_s, "test": test.to_dict()}


def surrogate_notes(surrogate: dict | None) -> list[str]:
    """The generator's test errors, for the record (none with ``--generator model``)."""
    if surrogate is None:
        return ["Generator of steps > 1: the true model."]
    test = surrogate["test"]
    errors = ", ".join(f"{n} {m:.3f}" for n, m in zip(test["names"], test["mae"]))
    return [f"Generator of steps > 1: the PELS-VAE, trained in {surrogate['training_s']:.0f} s; its MAE [°C] on "
            f"{surrogate['n_test']} new uniform samples of the true model: {errors}."]


def main(argv=None):
    parser = common.parser(__doc__, "cabin_iterative_identification", quick_help=None)
    parser.add_argument("--n-samples", type=int, default=None,
                        help="simulated samples, split 80 %% / 20 %% - 1 / 1 (default 2000: the paper's 1600/399/1)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs of each formal inference")
    parser.add_argument("--generator", choices=("surrogate", "model"), default="surrogate")
    parser.add_argument("--fixed-observation", action="store_true",
                        help="keep the simulated test trajectory in every step (default: the paper's protocol)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the one-shot baseline")
    parser.add_argument("--surrogate-test", type=int, default=None,
                        help="new true-model samples the PELS-VAE is tested on (default 400; --quick 20)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--default-size", action="store_true",
                      help="jcalib's default networks (the paper gives no sizes): LSTM summary, 6 couplings of "
                           "128 x 128, 100 epochs (hours on 2 cores)")
    size.add_argument("--reduced", action="store_true", help="GRU summary, 30 epochs (~15-30 min on 2 cores)")
    size.add_argument("--quick", action="store_true", help="tiny sizes, for CI (a smoke test)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "reduced" if args.reduced else "default" if args.default_size else "hour"
    n_samples = args.n_samples or (100 if args.quick else 2000)
    if n_samples < 10:
        parser.error(f"--n-samples must be at least 10; got {n_samples}")
    n_train = int(round(0.8 * n_samples))
    split = (n_train, n_samples - n_train - 1, 1)
    config, _ = settings(mode, args.epochs)
    config = dataclasses.replace(config, generator=args.generator,
                                 regenerate_observation=not args.fixed_observation)
    out = common.prepare_out(args.out)

    model = jcalib.models.get("cabin_thermal")
    space = model.parameters
    key = jax.random.key(args.seed)
    k_data, k_iter, k_one, k_surrogate = jax.random.split(key, 4)
    print(f"simulating {n_samples} uniform samples ...", flush=True)
    t0 = time.perf_counter()
    thetas = np.asarray(space.sample(k_data, n_samples, "uniform"))
    xs = jcalib.simulate_batch(model, thetas)
    simulate_s = time.perf_counter() - t0
    train = (thetas[:split[0]], xs[:split[0]])
    val = (thetas[split[0]:split[0] + split[1]], xs[split[0]:split[0] + split[1]])
    truth, observation = thetas[-1], xs[-1]

    surrogate, surrogate_metrics = None, None
    if config.generator == "surrogate":
        print("PELS-VAE surrogate: training and testing ...", flush=True)
        n_test = args.surrogate_test or (20 if args.quick else 400)
        surrogate, surrogate_metrics = train_surrogate(k_surrogate, model, config, train, val, n_test)
    print(f"iterative identification ({mode}, generator {config.generator}) ...", flush=True)
    iterative = iterative_identification(k_iter, model, observation, train, val, truth=truth, config=config,
                                         surrogate=surrogate)
    print(iterative.summary(), flush=True)
    results = {"iterative": iterative}
    if not args.no_baseline:
        print("one-shot baseline (all 19 parameters, one network) ...", flush=True)
        results["one-shot"] = one_shot_identification(k_one, model, observation, train, val, truth=truth,
                                                      config=config)
        print(results["one-shot"].summary(), flush=True)

    metrics = {"experiment": "cabin_iterative_identification", "mode": mode, "seed": args.seed,
               "split": list(split), "simulate_s": simulate_s, "paper": PAPER,
               "config": iterative.config, "truth": space.to_dict(truth), "surrogate": surrogate_metrics}
    for label, result in results.items():
        metrics[label.replace("-", "_")] = {"summary": row(result), "result": result.to_dict(include_arrays=False)}
    if "one_shot" not in metrics:
        metrics["one_shot"] = None
    metrics = common.write_metrics(out, metrics, indent=1)
    common.write_paper_comparison(out, "Zhang & Mikelsons 2023, cabin (iterative identification, Fig. 6)",
                                  paper_rows(metrics["iterative"]["summary"], mode), quick=args.quick,
                                  notes=surrogate_notes(metrics["surrogate"]))
    if metrics["one_shot"] is not None:
        common.write_text(out / "report.md", report(metrics))
    for label, result in results.items():
        suffix = "" if label == "iterative" else "_one_shot"
        common.save(plot_identification(result, title=f"cabin_thermal: {label}"), out / f"identification{suffix}.png")
        common.save(plot_identification_recovery(result), out / f"recovery{suffix}.png")
    output_figure(model, truth, results, out / "outputs.png")
    print(f"wrote {out}/metrics.json and figures", flush=True)
    return metrics


if __name__ == "__main__":
    main()
