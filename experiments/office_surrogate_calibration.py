"""Global calibration of the office zone: direct methods versus PELS-VAE screening + polish (Aka et al. 2023).

Reproduces Tables 3 and 4 of Aka, Brunnemann, Freund & Speerforck (2023) on
``thermal_office_r7c4`` (the R7C4 gray-box zone, all 14 parameters free):

1. data: the model at a "truth" drawn uniformly in the inner half of every internal range
   (the paper §3.2: bounds wider than where the estimates are expected), observed every
   ``--stride``-th half hour, plus additive N(0, 0.1 K) noise; the paper fits measured room
   temperatures (not available here), whose MSE floor after calibration is ≈ 0.011 K²; ours is
   ≈ σ² = 0.01 K². Loss = MSE (``weighting="absolute"``, the paper's eq. 1); the initial
   guess θ_init is the nominal parameter set (the paper's documentation-based estimates);
2. Table 3, methods on the true model: LS-TRF from θ_init (`least_squares_trf`, autodiff
   Jacobian), SLSQP, Nelder-Mead and Powell from θ_init (`scipy_minimize`; Nelder-Mead and
   Powell at the paper's limit of 5000 model calls), differential evolution on the true model
   (`differential_evolution`, scipy's population 15 n = 210, capped at ``--de-generations``
   (10: 2,310 simulations) where the paper's ran to 748,020 calls), and LS-TRF multistart
   (`multistart`, the paper's start distribution around θ_init; 16 and 32 starts by default,
   ``--starts 16 32 64`` adds the paper's 64 for about 6 more minutes). The k-start rows are the
   first k starts of one run with the most starts (the first start is θ_init; every prefix is
   a sample of the same start distribution), so "LS-TRF with initial guess" is its first
   start. The paper's multistarts of SLSQP, Nelder-Mead and Powell (18k-1.2M calls) are left
   out;
3. Table 4, PELS-VAE + GA (+ polish): one pool of uniform samples (the paper's eq. 2) is
   simulated once; a PELS-VAE is trained on its first n_train samples for every n_train,
   with the same 320 validation samples (best weights) and 320 test samples (MAE, the
   paper's Fig. 6) for all; `surrogate_calibration` screens with differential evolution on
   the surrogate (scipy's settings: population 210, at most 1000 generations, tol 0.01) and
   polishes with LS-TRF on the true model. n_total = n_train + polish simulations, as in the
   paper (the validation and test simulations are reported apart, not in n_total);
4. results/office_surrogate_calibration/{metrics.json, tables.md, polish.png}, the paper's
   numbers next to ours.

Model calls. The paper counts FMU simulations, finite-difference Jacobians included (261 for
LS-TRF). Here a Jacobian is one forward-mode solve carrying 14 tangents; the tables give
simulations and Jacobians apart and ``fd_calls`` = simulations + 14 Jacobians, what the
same run would cost with forward differences (the paper's currency).

Sizes (a reduced "full" run that fits in about 25 min on 2 CPU cores). The surrogate's LSTM
encoder runs over the whole trajectory, so the observation times are subsampled (``--stride
16``: every 8 h, 63 points; the ODE still integrates all 21 days through every input switch,
so a simulation costs what a full one does), the networks are smaller than the paper's
(hidden 64, latent 32 against its 64-256 latent dimensions) and train for 2000 Adam steps
whatever n_train: the paper trained on a GPU. ``--quick``: n_train 32 and 64, tiny networks,
2 multistart starts, LS-TRF capped at 15 residual evaluations (a smoke test, not a result).

Full run (defaults, seed 0; 18 min on 2 shared CPU cores; MSE at the truth 0.0092, our MSEs
sit below the paper's ≈ 0.011 because the data come from the model itself). Table 3 (ours /
paper, model calls as simulations + Jacobians = fd_calls): LS-TRF from θ_init 89 + 73 = 1111,
MSE 0.00633 / 261, 0.0117; SLSQP 68 + 65 = 978, 0.00649 / 650, 0.0149; Nelder-Mead 2952,
0.00698 / 5000, 0.0126; Powell 2697, 0.0168 / 5000, 0.0881; LS-TRF 16 starts 1407 + 1120 =
17,087, 0.006308 / 3486, 0.0114; 32 starts 3007 + 2393 = 36,509, 0.006308 / 6311, 0.0114; DE
(10 generations) 2310, 0.0316 / 748,020, 0.0104. Table 4: the model's MSE at the surrogate
optimum 0.035-1.18 (paper 0.03-3.45), after the polish 0.00631-0.00788 (the multistart best
0.006308 reached at n_train = 64, 1536, 4096; a nearby local minimum 0.0079 at 1024 and 2048),
n_total 156, 129, 219, 368, 583, 1085, 1604, 2151, 4227 for n_train 32 ... 4096 (paper 260,
188, 299, 562, 651, 1089, 1616, 2113, 4297), test MAE 1.62 K (n = 32) to 0.33 K (4096).

Usage: python -m experiments.office_surrogate_calibration [--out results/office_surrogate_calibration]
       [--seed 0] [--stride 16] [--n-train 32 64 ...] [--starts 16 32] [--de-generations 10]
       [--steps 2000] [--quick]
"""

from __future__ import annotations

import os
import sys

# scipy's TRF takes an SVD of the Jacobian every iteration; a multithreaded OpenBLAS competing
# with XLA's threads on a small machine makes it ~100x slower (least_squares_trf's note).
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import math  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from jcalib.estimation import differential_evolution, multistart, scipy_minimize  # noqa: E402
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.workflows import surrogate_calibration  # noqa: E402

SIGMA = 0.1  # K, additive measurement noise of the synthetic data (MSE floor ~ 0.01 K^2)
N_TRAIN = (32, 64, 128, 256, 512, 1024, 1536, 2048, 4096)  # the paper's Table 4
STARTS = (16, 32)  # the paper's LS-TRF multistarts (Table 3: 16, 32, 64; 64 costs ~6 more minutes here)
N_VAL = N_TEST = 320  # the paper's validation and test sets, the same for every n_train
QUICK_TRF = {"max_steps": 15}  # --quick: LS-TRF stops after 15 residual evaluations (a smoke test)

# Aka et al. 2023, Table 3: methods coupled directly with the FMU (model calls, MSE_f(θ_opt))
PAPER_TABLE3 = {
    "LS-TRF with initial guess": (261, 0.0117),
    "SLSQP with initial guess": (650, 0.0149),
    "LS-TRF with 16 starts": (3486, 0.0114),
    "Nelder-Mead with initial guess": (5000, 0.0126),
    "Powell with initial guess": (5000, 0.0881),
    "LS-TRF with 32 starts": (6311, 0.0114),
    "LS-TRF with 64 starts": (12612, 0.0113),
    "SLSQP with 16 starts": (18245, 0.0117),
    "Nelder-Mead with 16 starts": (76483, 0.0117),
    "Powell with 16 starts": (79120, 0.0134),
    "SLSQP with 64 starts": (86322, 0.0114),
    "Nelder-Mead with 64 starts": (286728, 0.0110),
    "Powell with 64 starts": (319322, 0.0125),
    "Diff. Evolution": (748020, 0.0104),
    "Nelder-Mead with 256 starts": (1188496, 0.0111),
}
# Table 4: n_train -> (MSE PELS-VAE + GA, MSE with FMU, n_opt, MSE after polish, n_total)
PAPER_TABLE4 = {
    32: (0.0121, 1.0623, 228, 0.0121, 260),
    64: (0.0128, 1.6390, 124, 0.0128, 188),
    128: (0.0122, 3.4509, 171, 0.0122, 299),
    256: (0.0117, 0.7498, 306, 0.0117, 562),
    512: (0.0124, 0.2486, 139, 0.0124, 651),
    1024: (0.0133, 0.0816, 65, 0.0133, 1089),
    1536: (0.0128, 0.0298, 80, 0.0128, 1616),
    2048: (0.0135, 0.2080, 65, 0.0135, 2113),
    4096: (0.0118, 0.0326, 201, 0.0118, 4297),
}


def build_problem(key, stride: int):
    """The subsampled model, the truth, and the calibration problem on noisy synthetic data."""
    full = jcalib.models.get("thermal_office_r7c4")
    model = full.with_times(np.asarray(full.ts)[stride - 1 :: stride])
    space = model.parameters
    k_truth, k_noise = jax.random.split(key)
    u = jax.random.uniform(k_truth, (space.n_params,), minval=0.25, maxval=0.75, dtype=jnp.float64)
    truth = np.asarray(space.from_unit(u))
    data = jcalib.synthetic_measurements(k_noise, model, jnp.asarray(truth), sigma=SIGMA, noise="additive")
    problem = jcalib.CalibrationProblem(model, data, weighting="absolute")
    return model, truth, problem


def row(method: str, result, n_free: int, paper_key: str | None = None, **extra) -> dict:
    """One Table 3 row of an `EstimationResult` (or summed multistart starts)."""
    paper = PAPER_TABLE3.get(paper_key or method)
    return {"method": method, "n_simulations": result["n_simulations"], "n_jacobians": result["n_jacobians"],
            "fd_calls": result["n_simulations"] + n_free * result["n_jacobians"], "mse": result["loss"],
            "wall_time_s": result["wall_time_s"], "converged": result.get("converged"),
            "paper_model_calls": None if paper is None else paper[0], "paper_mse": None if paper is None else paper[1],
            **extra}


def _single(result) -> dict:
    return {"n_simulations": result.n_simulations, "n_jacobians": result.n_jacobians, "loss": result.loss,
            "wall_time_s": result.wall_time_s, "converged": result.converged, "estimate": result.estimate,
            "reason": result.reason}


def direct_methods(key, problem, starts, de_generations, quick: bool) -> tuple[list[dict], dict]:
    """Table 3 on the true model."""
    n_free = problem.n_free
    k_ms, k_de = jax.random.split(key)
    rows, extra = [], {}
    print(f"multistart LS-TRF, {max(starts)} starts ...", flush=True)
    ms = multistart(k_ms, problem, max(starts), method="trf", progress=not quick, **QUICK_TRF if quick else {})
    first = ms.results[0]
    rows.append(row("LS-TRF with initial guess", _single(first), n_free))
    # scipy's budgets: SLSQP 100 iterations, Nelder-Mead and Powell the paper's 5000 loss evaluations
    budgets = {"slsqp": 5, "nelder-mead": 40, "powell": 40} if quick else {}
    for method, label in (("slsqp", "SLSQP"), ("nelder-mead", "Nelder-Mead"), ("powell", "Powell")):
        print(f"{label} from the initial guess ...", flush=True)
        result = scipy_minimize(None, problem, None, method, max_steps=budgets.get(method))
        budget = budgets.get(method) or ("100 iterations" if method == "slsqp" else "5000 loss evaluations")
        rows.append(row(f"{label} with initial guess", _single(result), n_free, budget=budget))
    for k in sorted(starts):
        part = ms.results[:k]
        losses = np.array([r.loss for r in part])
        best = part[int(np.argmin(losses))]
        summed = {"n_simulations": sum(r.n_simulations for r in part), "n_jacobians": sum(r.n_jacobians for r in part),
                  "loss": best.loss, "wall_time_s": sum(r.wall_time_s for r in part), "converged": best.converged}
        rows.append(row(f"LS-TRF with {k} starts", summed, n_free, mean_mse=float(np.mean(losses[np.isfinite(losses)])),
                        sorted_mse=np.sort(losses), best_estimate=best.estimate))
    print(f"differential evolution on the true model, at most {de_generations} generations ...", flush=True)
    de_options = {"population_size": 20, "max_steps": de_generations} if quick else {"max_steps": de_generations}
    de = differential_evolution(k_de, problem, progress=not quick, **de_options)
    rows.append(row(f"Diff. Evolution ({de.extra['population_size']} x {de.n_steps} generations)", _single(de),
                    n_free, paper_key="Diff. Evolution", budget=de_options))
    extra["multistart"] = ms.to_dict(include_results=False)
    return rows, extra


def _without_histories(d: dict) -> dict:
    """A `SurrogateCalibrationResult.to_dict` without the per-generation and per-step histories
    (megabytes over nine sizes); the polish's loss history is kept apart."""
    for phase in ("screening", "polish"):
        if d.get(phase):
            d[phase] = {k: v for k, v in d[phase].items() if k != "history"}
    return d


def surrogate_config(n_train: int, steps: int, quick: bool) -> PELSVAEConfig:
    """The same number of Adam steps for every training-set size, multi-step schedule."""
    batch_size = 8 if n_train <= 32 else 32 if n_train <= 256 else 64
    epochs = max(steps // (n_train // batch_size), 2)
    latent, hidden = (8, 16) if quick else (32, 64)
    return PELSVAEConfig(latent_size=latent, hidden_size=hidden, training=TrainingConfig(
        epochs=epochs, batch_size=batch_size, learning_rate=3e-3, schedule="multistep",
        milestones=(max(int(0.6 * epochs), 1), max(int(0.85 * epochs), 2)), decay=0.2, progress=False))


def surrogate_methods(key, model, problem, sizes, steps, n_val, n_test, quick: bool) -> tuple[list[dict], dict]:
    """Table 4: PELS-VAE + DE (+ polish) for every training-set size."""
    space = model.parameters
    k_pool, k_screen = jax.random.split(key)
    k_fit = jax.random.fold_in(key, 99)  # the surrogates' initial weights, shuffling and generation noise
    n_pool = max(sizes) + n_val + n_test
    print(f"simulating {n_pool} uniform samples (training pool, validation, test) ...", flush=True)
    t = time.perf_counter()
    pool = np.asarray(space.sample(k_pool, n_pool, "uniform"))
    xs = jcalib.simulate_batch(model, pool, throw=False)
    simulate_s = time.perf_counter() - t
    ok = np.all(np.isfinite(xs.reshape(n_pool, -1)), axis=1)
    if not ok.all():
        raise RuntimeError(f"{int((~ok).sum())} of the {n_pool} pool simulations failed")
    val = (pool[-(n_val + n_test):-n_test], xs[-(n_val + n_test):-n_test])
    test = (pool[-n_test:], xs[-n_test:])
    screening = {"population_size": 20, "max_steps": 10} if quick else {}
    rows, details = [], {}
    for n in sizes:
        print(f"n_train = {n}: training ...", flush=True)
        vae = PELSVAE(model, surrogate_config(n, steps, quick)).fit(jax.random.fold_in(k_fit, n), pool[:n], xs[:n],
                                                                     val=val)
        errors = vae.evaluate(*test)  # the generation path, per output
        mae = float(np.mean(errors.mae))  # over all outputs, times and test samples
        result = surrogate_calibration(jax.random.fold_in(k_screen, n), problem, vae, screening_options=screening,
                                       polish_options=QUICK_TRF if quick else None)
        paper = PAPER_TABLE4.get(n)
        rows.append({
            "n_train": n, "mse_surrogate_de": result.surrogate_loss, "mse_model_at_surrogate_optimum":
                result.true_loss_at_surrogate_optimum, "gap": result.gap,
            "n_opt_simulations": result.polish.n_simulations, "n_opt_jacobians": result.n_true_jacobians,
            "n_polish_steps": result.n_polish_steps, "mse_after_polish": result.loss,
            "n_total": result.n_true_simulations,
            "fd_calls_total": result.n_true_simulations + problem.n_free * result.n_true_jacobians,
            "test_mae_K": mae, "de_generations": result.screening.n_steps,
            "n_surrogate_evaluations": result.n_surrogate_evaluations, "durations": result.durations,
            "paper": None if paper is None else dict(zip(
                ("mse_surrogate_de", "mse_model_at_surrogate_optimum", "n_opt", "mse_after_polish", "n_total"), paper)),
        })
        details[n] = {"training": {k: v for k, v in vae.training.to_dict().items() if k != "history"},
                      "test_errors": errors.to_dict(), "result": _without_histories(result.to_dict()),
                      "polish_loss_history": result.polish.history["loss"]}
        print(f"  test MAE {mae:.3f} K, DE on surrogate {result.surrogate_loss:.4g}, model there "
              f"{result.true_loss_at_surrogate_optimum:.4g}, polished {result.loss:.4g} after "
              f"{result.polish.n_simulations} simulations + {result.n_true_jacobians} Jacobians", flush=True)
    setup = {"pool": "uniform in the box (the paper's eq. 2); nested training sets", "n_val": n_val,
             "n_test": n_test, "simulate_pool_s": simulate_s, "n_pool_simulations": n_pool,
             "screening_options": screening or "scipy defaults (population 15 n, <= 1000 generations, tol 0.01)",
             "network": surrogate_config(max(sizes), steps, quick).to_dict()}
    return rows, {"setup": setup, "per_n_train": details}


def markdown(metrics: dict) -> str:
    def f(x, fmt):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)

    lines = [f"# Office zone: Aka et al. 2023, Tables 3 and 4 ({'quick' if metrics['quick'] else 'full'} run)", "",
             f"thermal_office_r7c4, 14 free parameters, {metrics['setup']['n_times']} observation times "
             f"(every {metrics['setup']['stride']}th), additive noise sigma = {SIGMA} K (MSE at the truth: "
             f"{metrics['setup']['mse_at_truth']:.4g}); simulations and Jacobians counted apart, "
             "fd_calls = simulations + 14 Jacobians (what forward differences would cost, the paper's currency).", "",
             "## Table 3: methods on the true model", "",
             "| method | simulations | Jacobians | fd_calls | MSE | wall [s] | paper: model calls | paper: MSE |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in metrics["table3"]:
        lines.append(f"| {r['method']} | {r['n_simulations']} | {r['n_jacobians']} | {r['fd_calls']} | "
                     f"{f(r['mse'], '.4g')} | {f(r['wall_time_s'], '.1f')} | {f(r['paper_model_calls'], 'd')} | "
                     f"{f(r['paper_mse'], '.4g')} |")
    lines += ["", "## Table 4: PELS-VAE + DE (GA), polished with LS-TRF on the true model", "",
              "| n_train | test MAE [K] | MSE PELS-VAE + DE | MSE model at it | polish sims + Jacobians | "
              "MSE after polish | n_total | paper: MSE PELS-VAE + GA | paper: MSE with FMU | paper: n_opt | "
              "paper: MSE after polish | paper: n_total |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in metrics["table4"]:
        p = r["paper"] or {}
        lines.append(
            f"| {r['n_train']} | {f(r['test_mae_K'], '.3f')} | {f(r['mse_surrogate_de'], '.4g')} | "
            f"{f(r['mse_model_at_surrogate_optimum'], '.4g')} | {r['n_opt_simulations']} + {r['n_opt_jacobians']} | "
            f"{f(r['mse_after_polish'], '.4g')} | {r['n_total']} | {f(p.get('mse_surrogate_de'), '.4g')} | "
            f"{f(p.get('mse_model_at_surrogate_optimum'), '.4g')} | {f(p.get('n_opt'), 'd')} | "
            f"{f(p.get('mse_after_polish'), '.4g')} | {f(p.get('n_total'), 'd')} |")
    lines += ["", "Not run: the paper's multistarts of SLSQP, Nelder-Mead and Powell (18k-1.2M model calls).",
              f"Validation and test sets ({metrics['table4_setup']['n_val']} + {metrics['table4_setup']['n_test']} "
              "simulations, shared by all n_train) are not in n_total, as in the paper.", ""]
    return "\n".join(lines)


def plot_polish(metrics: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for n, d in metrics["surrogates"].items():
        ax.semilogy(d["polish_loss_history"], marker=".", label=f"n_train = {n}")
    best = min(r["mse"] for r in metrics["table3"] if r["mse"] is not None)
    ax.axhline(best, color="k", ls="--", lw=0.8, label="best direct method")
    ax.set(xlabel="accepted LS-TRF step of the polish", ylabel="MSE of the model [K²]",
           title="polish from the surrogate optimum (cf. Aka et al. 2023, Fig. 9)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    common.save(fig, path, dpi=110)


def main(argv=None):
    parser = common.parser(__doc__, "office_surrogate_calibration")
    parser.add_argument("--stride", type=int, default=None, help="observe every stride-th half hour (default 16)")
    parser.add_argument("--n-train", type=int, nargs="+", default=None, help=f"training-set sizes (default {N_TRAIN})")
    parser.add_argument("--starts", type=int, nargs="+", default=None, help=f"multistart sizes (default {STARTS})")
    parser.add_argument("--de-generations", type=int, default=None,
                        help="generation cap of DE on the true model (default 10; the paper ran to convergence)")
    parser.add_argument("--steps", type=int, default=None, help="Adam steps per PELS-VAE (default 2000)")
    args = parser.parse_args(argv)
    quick = args.quick
    stride = args.stride or 16
    sizes = tuple(args.n_train or ((32, 64) if quick else N_TRAIN))
    starts = tuple(args.starts or ((2,) if quick else STARTS))
    de_generations = args.de_generations or (2 if quick else 10)
    steps = args.steps or (100 if quick else 2000)
    n_val, n_test = (16, 16) if quick else (N_VAL, N_TEST)
    common.prepare_out(args.out)
    start = time.perf_counter()

    k_problem, k_direct, k_surrogate = jax.random.split(jax.random.key(args.seed), 3)
    model, truth, problem = build_problem(k_problem, stride)
    mse_truth = float(problem.loss(problem.to_internal(jnp.asarray(truth))))
    table3, direct = direct_methods(k_direct, problem, starts, de_generations, quick)
    table4, surrogates = surrogate_methods(k_surrogate, model, problem, sizes, steps, n_val, n_test, quick)
    metrics = {
        "setup": {"model": "thermal_office_r7c4", "stride": stride, "n_times": int(model.ts.shape[0]),
                  "noise": f"additive N(0, {SIGMA}^2) K", "truth": model.parameters.to_dict(truth),
                  "truth_draw": "uniform in the inner half of every internal range", "mse_at_truth": mse_truth,
                  "initial_guess": "nominal", "weighting": "absolute (loss = MSE)", "seed": args.seed,
                  "options": {"stride": stride, "n_train": sizes, "starts": starts, "de_generations": de_generations,
                              "steps": steps},
                  "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "devices": [str(d) for d in jax.devices()]},
        "table3": table3, "table4": table4, "table4_setup": surrogates["setup"],
        "multistart": direct["multistart"], "surrogates": surrogates["per_n_train"],
        "paper": {"table3": PAPER_TABLE3, "table4": PAPER_TABLE4}, "quick": quick,
        "wall_time_s": time.perf_counter() - start,
    }
    metrics = common.write_metrics(args.out, metrics)
    common.write_text(args.out / "tables.md", markdown(metrics))
    # paper_comparison.md: one row per Table 3 method the paper reports; the criterion is the model-call count
    # (fd_calls, the paper's currency) within a factor 2; our MSE is not the paper's (synthetic data, see above)
    common.write_paper_comparison(
        args.out, "Aka et al. 2023, Table 3 (office zone R7C4, direct calibration)",
        [{"claim": f"Table 3: {r['method']} model calls (MSE)",
          "paper": f"{r['paper_model_calls']} calls (MSE {r['paper_mse']}); criterion: calls within a factor 2",
          "ours": f"{r['fd_calls']} calls (MSE {r['mse']:.4g})",
          "match": None if args.quick else bool(0.5 <= r["fd_calls"] / r["paper_model_calls"] <= 2),
          "why": "" if args.quick or 0.5 <= r["fd_calls"] / r["paper_model_calls"] <= 2
          else ("by design: capped at --de-generations (10: 2,310 simulations), the paper's ran to 748,020 calls"
                if r["method"].startswith("Diff. Evolution") else "not analysed yet (issue 19)")}
         for r in metrics["table3"] if r["paper_model_calls"] is not None],
        quick=args.quick)
    plot_polish(metrics, args.out / "polish.png")
    print(markdown(metrics))
    print(f"wrote {args.out}/metrics.json, tables.md, polish.png in {metrics['wall_time_s']:.0f} s")
    return metrics


if __name__ == "__main__":
    main()
