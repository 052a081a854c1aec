"""Global calibration of the office zone: direct methods versus PELS-VAE screening + polish (Aka et al. 2023).

Reproduces Tables 3 and 4 of Aka, Brunnemann, Freund & Speerforck (2023) on
``thermal_office_r7c4`` (the R7C4 gray-box zone, all 14 parameters free):

1. data: the model at a "truth" drawn uniformly in the inner half of every internal range
   (the paper §3.2: bounds wider than where the estimates are expected), observed every
   ``--stride``-th half hour, plus additive N(0, 0.1 K) noise; the paper fits measured room
   temperatures (not available here), whose MSE floor after calibration is ≈ 0.011 K²; ours is
   ≈ σ² = 0.01 K². Loss = MSE (``weighting="absolute"``, the paper's eq. 1); the initial
   guess θ_init is the nominal parameter set (the paper's documentation-based estimates);
2. Table 3, methods on the true model, all from the same starts: the paper's start
   distribution around θ_init (`sample_starts`, the first start is θ_init), LS-TRF
   (`multistart` of `least_squares_trf`, autodiff Jacobian), SLSQP, Nelder-Mead and Powell
   (`scipy_minimize` from each start; Nelder-Mead and Powell at the paper's limit of 5000 model
   calls, SLSQP at scipy's 100 iterations). The k-start rows are the first k starts of one run
   with the most starts (every prefix is a sample of the same start distribution), so "<method>
   with initial guess" is its first start. LS-TRF runs in 16 and 32 starts by default
   (``--starts 16 32 64`` adds the paper's 64), SLSQP, Nelder-Mead and Powell in 16
   (``--scalar-starts 16 64`` adds 64; the paper's Nelder-Mead with 256 starts is not offered).
   Every LS-TRF (direct, multistart and polish) stops on a plateau: once its last 5 accepted
   steps together lowered the MSE by less than 1 % (`least_squares_trf`'s ``plateau_window``,
   ``plateau_rtol``); the paper's tolerances were "adapted to the FMU-settings" (Table 2) and
   are not given. The row "LS-TRF with initial guess, scipy tolerances 1e-8" runs the first
   start to scipy's own ftol/xtol/gtol = 1e-8 for comparison. Differential evolution on the
   true model (`differential_evolution`, scipy's settings: population 15 n = 210, best1bin,
   stop once std(losses) <= 0.01 |mean(losses)|) runs to convergence, at most
   ``--de-generations`` (default 1000, scipy's maxiter) generations; its row gives the
   generations, the stop reason and the best MSE;
3. Table 4, PELS-VAE + GA (+ polish): one pool of uniform samples (the paper's eq. 2) is
   simulated once; a PELS-VAE is trained on its first n_train samples for every n_train,
   with the same 320 validation samples (best weights) and 320 test samples (MAE, the
   paper's Fig. 6) for all; `surrogate_calibration` screens with differential evolution on
   the surrogate (scipy's settings: population 210, at most 1000 generations, tol 0.01) and
   polishes with LS-TRF on the true model (plateau stop). n_total = n_train + n_opt, the
   polish's model calls, as in the paper (the validation and test simulations are reported
   apart, not in n_total). The same polish is run again to scipy's tolerances for reference:
   the table gives its MSE after 10 steps and at its stop (polish.png: both loss histories);
4. results/office_surrogate_calibration/{metrics.json, tables.md, paper_comparison.md,
   polish.png}, the paper's numbers next to ours.

Model calls. The paper counts FMU simulations with finite-difference Jacobians (261 for
LS-TRF). Here a Jacobian is one forward-mode solve carrying 14 tangents. The tables give our
actual calls, simulations and Jacobians apart, and the paper's currency ``fd_calls`` =
simulations + 14 Jacobians: a Jacobian of p = 14 parameters counts as p forward-difference
simulations (the residuals at the point are already known), what the same run would cost
with ``jac="2-point"``. Table 4's n_total and n_opt are given in both (``n_total`` in
simulations, ``fd_calls_total`` and ``n_opt_fd`` in the paper's currency);
paper_comparison.md compares the paper's counts with ours in its currency.

Sizes. The surrogate's LSTM encoder runs over the whole trajectory, so the observation times
are subsampled (``--stride 16``: every 8 h, 63 points; the ODE still integrates all 21 days
through every input switch, so a simulation costs what a full one does), the networks are
smaller than the paper's (hidden 64, latent 32 against its 64-256 latent dimensions) and
train for 2000 Adam steps whatever n_train: the paper trained on a GPU. ``--quick``: n_train
32 and 64, tiny networks, 2 starts of every multistart, Nelder-Mead and Powell at 40 calls,
SLSQP at 5 iterations, DE with 20 members for 2 generations, LS-TRF capped at 15 residual
evaluations (a smoke test, not a result).

The default run takes about 2 h on 2 shared CPU cores, most of it in the Nelder-Mead and
Powell multistarts and DE to convergence; ``--scalar-starts 1 --de-generations 10`` takes
about 30 min.

The recorded run, with its command and commit: docs/fidelity/office_surrogate_calibration.md.

Usage: python -m experiments.office_surrogate_calibration [--out results/office_surrogate_calibration]
       [--seed 0] [--stride 16] [--n-train 32 64 ...] [--starts 16 32] [--scalar-starts 16]
       [--de-generations 1000]
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
from jcalib.estimation import differential_evolution, least_squares_trf, multistart, scipy_minimize  # noqa: E402
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig  # noqa: E402
from jcalib.nn.training import TrainingConfig  # noqa: E402
from jcalib.workflows import surrogate_calibration  # noqa: E402

SIGMA = 0.1  # K, additive measurement noise of the synthetic data (MSE floor ~ 0.01 K^2)
N_TRAIN = (32, 64, 128, 256, 512, 1024, 1536, 2048, 4096)  # the paper's Table 4
STARTS = (16, 32)  # the paper's LS-TRF multistarts (Table 3: 16, 32, 64; 64 costs ~6 more minutes here)
N_VAL = N_TEST = 320  # the paper's validation and test sets, the same for every n_train
SCALAR_STARTS = (16,)  # SLSQP, Nelder-Mead, Powell multistarts (Table 3: 16 and 64; Nelder-Mead also 256)
DE_GENERATIONS = 1000  # DE on the true model: scipy's maxiter; it stops earlier once tol = 0.01 holds
QUICK_TRF = {"max_steps": 15}  # --quick: LS-TRF stops after 15 residual evaluations (a smoke test)
# Every LS-TRF of the experiment (direct, multistart, polish) stops on a plateau: once the last 5
# accepted steps together lowered the MSE by less than 1 % (`least_squares_trf`'s plateau_window /
# plateau_rtol). The paper does not give its stop ("tolerances are adapted to the FMU-settings",
# Table 2); scipy's own ftol = 1e-8 creeps on along a flat valley for 60+ more steps (the reference
# row "scipy tolerances 1e-8" shows what that buys).
PLATEAU = {"plateau_window": 5, "plateau_rtol": 0.01}

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
    "Diff. Evolution with FMU": (748020, 0.0104),
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
    """One Table 3 row of an `EstimationResult` (or summed multistart starts); ``fd_calls`` counts
    every Jacobian as ``n_free`` forward-difference simulations (the paper's currency)."""
    paper = PAPER_TABLE3.get(paper_key or method)
    return {"method": method, "n_simulations": result["n_simulations"], "n_jacobians": result["n_jacobians"],
            "fd_calls": result["n_simulations"] + n_free * result["n_jacobians"], "mse": result["loss"],
            "wall_time_s": result["wall_time_s"], "converged": result.get("converged"),
            "reason": result.get("reason"), "paper_key": paper_key or method,
            "paper_model_calls": None if paper is None else paper[0], "paper_mse": None if paper is None else paper[1],
            **extra}


def _single(result) -> dict:
    return {"n_simulations": result.n_simulations, "n_jacobians": result.n_jacobians, "loss": result.loss,
            "wall_time_s": result.wall_time_s, "converged": result.converged, "estimate": result.estimate,
            "reason": result.reason, "n_steps": result.n_steps}


def _summed(part) -> dict:
    """The k-start row of the first k results: calls and time summed, the best loss."""
    losses = np.array([r.loss for r in part])
    best = part[int(np.argmin(losses))]
    return {"n_simulations": sum(r.n_simulations for r in part), "n_jacobians": sum(r.n_jacobians for r in part),
            "loss": best.loss, "wall_time_s": sum(r.wall_time_s for r in part), "converged": best.converged,
            "reason": f"best of {len(part)} starts: {best.reason}"}


def _trf_options(quick: bool) -> dict:
    return {**PLATEAU, **(QUICK_TRF if quick else {})}


def direct_methods(key, problem, starts, scalar_starts, de_generations, quick: bool) -> tuple[list[dict], dict]:
    """Table 3 on the true model: LS-TRF (plateau stop), SLSQP, Nelder-Mead and Powell from the same
    starts (the first is θ_init), DE to convergence."""
    n_free = problem.n_free
    k_ms, k_de = jax.random.split(key)
    rows, extra = [], {}
    n_starts = max(max(starts), max(scalar_starts))
    print(f"multistart LS-TRF (plateau stop), {n_starts} starts ...", flush=True)
    ms = multistart(k_ms, problem, n_starts, method="trf", progress=not quick, **_trf_options(quick))
    rows.append(row("LS-TRF with initial guess", _single(ms.results[0]), n_free, stop="plateau"))
    # the same start to scipy's own tolerances (ftol = xtol = gtol = 1e-8): what the plateau stop saves
    print("LS-TRF from the initial guess to scipy's tolerances ...", flush=True)
    reference = least_squares_trf(problem, ms.starts[0], **(QUICK_TRF if quick else {}))
    rows.append(row("LS-TRF with initial guess, scipy tolerances 1e-8", _single(reference), n_free,
                    paper_key="LS-TRF with initial guess", stop="scipy tolerances",
                    loss_history=reference.history["loss"]))
    # scipy's budgets: SLSQP 100 iterations, Nelder-Mead and Powell the paper's 5000 loss evaluations
    budgets = {"slsqp": 5, "nelder-mead": 40, "powell": 40} if quick else {}
    scalar = {}
    for method, label in (("slsqp", "SLSQP"), ("nelder-mead", "Nelder-Mead"), ("powell", "Powell")):
        print(f"{label} from the first {max(scalar_starts)} starts ...", flush=True)
        results = []
        for i in range(max(scalar_starts)):
            results.append(scipy_minimize(None, problem, ms.starts[i], method, max_steps=budgets.get(method)))
            print(f"  start {i}: MSE {results[-1].loss:.5g}, {results[-1].n_simulations} simulations + "
                  f"{results[-1].n_jacobians} Jacobians", flush=True)
        budget = budgets.get(method) or ("100 iterations" if method == "slsqp" else "5000 loss evaluations")
        rows.append(row(f"{label} with initial guess", _single(results[0]), n_free, budget=budget))
        scalar[label] = results
    for k in sorted(set(starts) | set(scalar_starts)):
        if k < 2:
            continue
        if k in starts:
            part = ms.results[:k]
            losses = np.array([r.loss for r in part])
            rows.append(row(f"LS-TRF with {k} starts", _summed(part), n_free,
                            mean_mse=float(np.mean(losses[np.isfinite(losses)])), sorted_mse=np.sort(losses),
                            best_estimate=part[int(np.argmin(losses))].estimate))
        if k in scalar_starts:
            for label, results in scalar.items():
                rows.append(row(f"{label} with {k} starts", _summed(results[:k]), n_free,
                                sorted_mse=np.sort([r.loss for r in results[:k]])))
    print(f"differential evolution on the true model, to convergence (at most {de_generations} generations) ...",
          flush=True)
    de_options = {"max_steps": de_generations, "tol": 0.01}
    if quick:
        de_options["population_size"] = 20
    de = differential_evolution(k_de, problem, progress=not quick, **de_options)
    rows.append(row(f"Diff. Evolution ({de.extra['population_size']} x {de.n_steps} generations)", _single(de),
                    n_free, paper_key="Diff. Evolution with FMU", budget=de_options, generations=de.n_steps,
                    best_loss_history=de.history["best_loss"], std_loss_history=de.history["std_loss"],
                    mean_loss_history=de.history["mean_loss"]))
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
                                       polish_options=_trf_options(quick))
        # the same polish to scipy's own tolerances: the loss after 10 steps and at scipy's stop
        reference = least_squares_trf(problem, result.surrogate_theta, **(QUICK_TRF if quick else {}))
        ref_losses = reference.history["loss"]
        paper = PAPER_TABLE4.get(n)
        rows.append({
            "n_train": n, "mse_surrogate_de": result.surrogate_loss, "mse_model_at_surrogate_optimum":
                result.true_loss_at_surrogate_optimum, "gap": result.gap,
            "n_opt_simulations": result.polish.n_simulations, "n_opt_jacobians": result.n_true_jacobians,
            "n_opt_fd": result.n_true_calls_fd - n, "n_polish_steps": result.n_polish_steps,
            "polish_stop": result.polish.reason, "mse_after_polish": result.loss,
            "n_total": result.n_true_simulations, "fd_calls_total": result.n_true_calls_fd,
            "reference_polish": {"stop": reference.reason, "n_steps": reference.n_steps, "mse": reference.loss,
                                 "mse_after_10_steps": ref_losses[min(10, len(ref_losses) - 1)],
                                 "n_simulations": reference.n_simulations, "n_jacobians": reference.n_jacobians,
                                 "fd_calls": reference.n_simulations + problem.n_free * reference.n_jacobians},
            "test_mae_K": mae, "de_generations": result.screening.n_steps,
            "n_surrogate_evaluations": result.n_surrogate_evaluations, "durations": result.durations,
            "paper": None if paper is None else dict(zip(
                ("mse_surrogate_de", "mse_model_at_surrogate_optimum", "n_opt", "mse_after_polish", "n_total"), paper)),
        })
        details[n] = {"training": {k: v for k, v in vae.training.to_dict().items() if k != "history"},
                      "test_errors": errors.to_dict(), "result": _without_histories(result.to_dict()),
                      "polish_loss_history": result.polish.history["loss"], "reference_polish_loss_history": ref_losses}
        print(f"  test MAE {mae:.3f} K, DE on surrogate {result.surrogate_loss:.4g}, model there "
              f"{result.true_loss_at_surrogate_optimum:.4g}, polished {result.loss:.4g} after "
              f"{result.polish.n_simulations} simulations + {result.n_true_jacobians} Jacobians "
              f"({result.n_polish_steps} steps; to scipy's tolerances: {reference.loss:.4g} after "
              f"{reference.n_steps} steps)", flush=True)
    setup = {"pool": "uniform in the box (the paper's eq. 2); nested training sets", "n_val": n_val,
             "n_test": n_test, "simulate_pool_s": simulate_s, "n_pool_simulations": n_pool,
             "screening_options": screening or "scipy defaults (population 15 n, <= 1000 generations, tol 0.01)",
             "network": surrogate_config(max(sizes), steps, quick).to_dict()}
    return rows, {"setup": setup, "per_n_train": details}


def _f(x, fmt):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def markdown(metrics: dict) -> str:
    f = _f
    lines = [f"# Office zone: Aka et al. 2023, Tables 3 and 4 ({'quick' if metrics['quick'] else 'full'} run)", "",
             f"thermal_office_r7c4, 14 free parameters, {metrics['setup']['n_times']} observation times "
             f"(every {metrics['setup']['stride']}th), additive noise sigma = {SIGMA} K (MSE at the truth: "
             f"{metrics['setup']['mse_at_truth']:.4g}). Model calls: simulations and Jacobians (one forward-mode "
             "solve carrying 14 tangents each) counted apart, and fd_calls = simulations + 14 Jacobians, what "
             "forward differences would cost (the paper's currency). Every LS-TRF stops on a plateau (MSE down "
             f"by less than {PLATEAU['plateau_rtol']:.0%} over the last {PLATEAU['plateau_window']} accepted "
             "steps) except the row marked 'scipy tolerances'.", "",
             "## Table 3: methods on the true model", "",
             "| method | simulations | Jacobians | fd_calls | MSE | wall [s] | paper: model calls | paper: MSE |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in metrics["table3"]:
        lines.append(f"| {r['method']} | {r['n_simulations']} | {r['n_jacobians']} | {r['fd_calls']} | "
                     f"{f(r['mse'], '.4g')} | {f(r['wall_time_s'], '.1f')} | {f(r['paper_model_calls'], 'd')} | "
                     f"{f(r['paper_mse'], '.4g')} |")
    de = next(r for r in metrics["table3"] if r["method"].startswith("Diff. Evolution"))
    lines += ["", f"Differential evolution: {de['reason']} ({de['generations']} generations, "
              f"{de['n_simulations']} simulations, best MSE {f(de['mse'], '.5g')}).", "",
              "## Table 4: PELS-VAE + DE (GA), polished with LS-TRF on the true model", "",
              "| n_train | test MAE [K] | MSE PELS-VAE + DE | MSE model at it | polish steps | "
              "polish sims + Jacobians | n_opt (fd) | MSE after polish | "
              "MSE after 10 steps / at scipy's stop (steps) | n_total (sims) | "
              "n_total (fd) | paper: MSE PELS-VAE + GA | paper: MSE with FMU | paper: n_opt | "
              "paper: MSE after polish | paper: n_total |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in metrics["table4"]:
        p, ref = r["paper"] or {}, r["reference_polish"]
        lines.append(
            f"| {r['n_train']} | {f(r['test_mae_K'], '.3f')} | {f(r['mse_surrogate_de'], '.4g')} | "
            f"{f(r['mse_model_at_surrogate_optimum'], '.4g')} | {r['n_polish_steps']} | "
            f"{r['n_opt_simulations']} + {r['n_opt_jacobians']} | {r['n_opt_fd']} | "
            f"{f(r['mse_after_polish'], '.4g')} | {f(ref['mse_after_10_steps'], '.4g')} / {f(ref['mse'], '.4g')} "
            f"({ref['n_steps']}) | {r['n_total']} | {r['fd_calls_total']} | {f(p.get('mse_surrogate_de'), '.4g')} | "
            f"{f(p.get('mse_model_at_surrogate_optimum'), '.4g')} | {f(p.get('n_opt'), 'd')} | "
            f"{f(p.get('mse_after_polish'), '.4g')} | {f(p.get('n_total'), 'd')} |")
    not_run = [k for k in PAPER_TABLE3 if k not in {r["paper_key"] for r in metrics["table3"]}]
    lines += ["", f"Not run: {', '.join(not_run) or 'none'} (see --starts / --scalar-starts).",
              f"Validation and test sets ({metrics['table4_setup']['n_val']} + {metrics['table4_setup']['n_test']} "
              "simulations, shared by all n_train) are not in n_total, as in the paper.", ""]
    return "\n".join(lines)


def _within(ours, paper, factor=2.0) -> bool:
    return ours is not None and paper is not None and 1 / factor <= ours / paper <= factor


def _why_table3(r: dict, setup: dict) -> str:
    """Why a Table 3 row's model calls differ from the paper's (the causes we measured)."""
    method = r["method"]
    if method.startswith("Diff. Evolution"):
        return (f"scipy's settings (population 210, tol 0.01, at most {setup['options']['de_generations']} "
                f"generations): {r['reason']} after {r['generations']} generations; the paper's 748,020 calls "
                "(3562 populations of 210) cannot come from scipy's defaults (at most 1001 x 210 = 210,210 plus "
                "the polish); its DE settings are not stated")
    if "scipy tolerances" in method:
        return ("our own reference: scipy's ftol = 1e-8 creeps on along a flat valley (see polish.png); the "
                "paper's tolerances were 'adapted to the FMU' (Table 2)")
    if method.startswith(("Nelder-Mead", "Powell")) and "starts" not in method:
        return "the paper's 5000-call limit: scipy stopped earlier on its own tolerances (xatol/fatol, ftol)"
    return ("cause not isolated; our data are synthetic, from our R7C4 implementation, not the paper's FMU "
            "and measurements")


def _why_small(r: dict, trf: dict) -> str:
    """Why one small-n_train polish is not comparable to LS-TRF from θ_init, in numbers."""
    why = []
    if r["mse_after_polish"] > 1.1 * trf["mse"]:
        why.append(f"MSE {r['mse_after_polish']:.4g} > 1.1 x {trf['mse']:.4g}: the polish from the surrogate "
                   f"optimum ends in another local minimum (to scipy's tolerances: {r['reference_polish']['mse']:.4g})")
    if r["fd_calls_total"] > 1.5 * trf["fd_calls"]:
        why.append(f"{r['fd_calls_total']} calls > 1.5 x {trf['fd_calls']}: n_train {r['n_train']} + a polish of "
                   f"{r['n_polish_steps']} steps from MSE {r['mse_model_at_surrogate_optimum']:.3g} "
                   f"(LS-TRF from θ_init: {trf['n_jacobians'] - 1} steps)")
    return f"n_train = {r['n_train']}: " + ", ".join(why)


def comparison_rows(metrics: dict, quick: bool) -> list[dict]:
    """paper_comparison.md: Table 3 (model calls in the paper's currency within a factor 2), Table 4
    (n_total in that currency within a factor 2) and the paper's two claims on Table 4."""
    f = _f
    rows = []
    for r in metrics["table3"]:
        if r["paper_model_calls"] is None:
            continue
        match = None if quick else _within(r["fd_calls"], r["paper_model_calls"])
        rows.append({
            "claim": f"Table 3: {r['method']}: model calls (MSE)",
            "paper": f"{r['paper_model_calls']} calls (MSE {r['paper_mse']}); criterion: calls within a factor 2",
            "ours": f"{r['fd_calls']} calls in the paper's currency = {r['n_simulations']} simulations + 14 x "
                    f"{r['n_jacobians']} Jacobians (MSE {f(r['mse'], '.4g')})",
            "match": match, "why": "" if match in (True, None) else _why_table3(r, metrics["setup"])})
    for r in metrics["table4"]:
        p = r["paper"]
        if p is None:
            continue
        match = None if quick else _within(r["fd_calls_total"], p["n_total"])
        rows.append({
            "claim": f"Table 4, n_train = {r['n_train']}: n_total (MSE after polish)",
            "paper": f"n_total {p['n_total']} (n_opt {p['n_opt']}), MSE {p['mse_after_polish']}; criterion: "
                     "n_total within a factor 2",
            "ours": f"{r['fd_calls_total']} in the paper's currency ({r['n_total']} simulations + 14 x "
                    f"{r['n_opt_jacobians']} Jacobians; n_opt {r['n_opt_fd']}, {r['n_polish_steps']} polish steps), "
                    f"MSE {f(r['mse_after_polish'], '.4g')}",
            "match": match,
            "why": "" if match in (True, None) else (
                f"n_train is the paper's; the polish differs: {r['n_polish_steps']} steps to our plateau stop "
                f"({r['n_opt_simulations']} simulations + 14 x {r['n_opt_jacobians']} Jacobians = {r['n_opt_fd']}) "
                f"against the paper's n_opt {p['n_opt']} (its stop rule is not stated)")})
    trf = next(r for r in metrics["table3"] if r["method"] == "LS-TRF with initial guess")
    small = [r for r in metrics["table4"] if r["n_train"] <= 128]
    if small:
        ok = [r["mse_after_polish"] <= 1.1 * trf["mse"] and r["fd_calls_total"] <= 1.5 * trf["fd_calls"]
              for r in small]
        rows.append({
            "claim": "Table 4, n_train = 32-128: MSE after polish comparable to LS-TRF with initial guess, with "
                     "fewer or comparable model calls",
            "paper": "MSE 0.0121-0.0128 vs 0.0117 with 188-299 vs 261 calls; criterion: MSE within 10 % and "
                     "calls at most 1.5x LS-TRF's (fd currency)",
            "ours": "; ".join(f"n_train {r['n_train']}: MSE {f(r['mse_after_polish'], '.4g')}, {r['fd_calls_total']} "
                              "calls" for r in small)
                    + f" vs LS-TRF {f(trf['mse'], '.4g')}, {trf['fd_calls']} calls",
            "match": None if quick else all(ok),
            "why": "" if quick or all(ok) else "; ".join(_why_small(r, trf) for r, good in zip(small, ok) if not good)})
    lo = [r["gap"] for r in metrics["table4"] if r["n_train"] <= 128]
    hi = [r["gap"] for r in metrics["table4"] if r["n_train"] >= 512]
    if lo and hi:
        match = None if quick else min(lo) > max(hi)
        rows.append({
            "claim": "Table 4: the prediction gap MSE_f - MSE_PELS-VAE shrinks with n_train",
            "paper": "1.05-3.44 for n_train = 32-128, 0.02-0.22 for 512-4096; criterion: every small-n gap above "
                     "every large-n gap",
            "ours": f"{f(min(lo), '.3g')}-{f(max(lo), '.3g')} for n_train <= 128, {f(min(hi), '.3g')}-"
                    f"{f(max(hi), '.3g')} for n_train >= 512",
            "match": match, "why": "" if match in (True, None) else "the surrogates' errors do not fall monotonically"})
    return rows


def plot_polish(metrics: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for n, d in metrics["surrogates"].items():
        line, = ax.semilogy(d["reference_polish_loss_history"], lw=0.8, alpha=0.5)
        stopped = d["polish_loss_history"]
        ax.semilogy(stopped, marker=".", color=line.get_color(), label=f"n_train = {n}")
        ax.plot(len(stopped) - 1, stopped[-1], "x", color=line.get_color(), ms=8)
    best = min(r["mse"] for r in metrics["table3"] if r["mse"] is not None)
    ax.axhline(best, color="k", ls="--", lw=0.8, label="best direct method")
    ax.set(xlabel="accepted LS-TRF step of the polish", ylabel="MSE of the model [K²]",
           title="polish from the surrogate optimum (cf. Aka et al. 2023, Fig. 9)\n"
                 "dots: the polish with the plateau stop (x: its end); thin: to scipy's tolerances")
    ax.legend(fontsize=7)
    fig.tight_layout()
    common.save(fig, path, dpi=110)


def main(argv=None):
    parser = common.parser(__doc__, "office_surrogate_calibration")
    parser.add_argument("--stride", type=int, default=None, help="observe every stride-th half hour (default 16)")
    parser.add_argument("--n-train", type=int, nargs="+", default=None, help=f"training-set sizes (default {N_TRAIN})")
    parser.add_argument("--starts", type=int, nargs="+", default=None,
                        help=f"LS-TRF multistart sizes (default {STARTS})")
    parser.add_argument("--scalar-starts", type=int, nargs="+", default=None,
                        help=f"SLSQP, Nelder-Mead and Powell multistart sizes (default {SCALAR_STARTS}; 1: the "
                             "initial guess only)")
    parser.add_argument("--de-generations", type=int, default=None,
                        help=f"generation cap of DE on the true model (default {DE_GENERATIONS}; it stops once "
                             "std(losses) <= 0.01 |mean(losses)|)")
    parser.add_argument("--steps", type=int, default=None, help="Adam steps per PELS-VAE (default 2000)")
    args = parser.parse_args(argv)
    quick = args.quick
    stride = args.stride or 16
    sizes = tuple(args.n_train or ((32, 64) if quick else N_TRAIN))
    starts = tuple(args.starts or ((2,) if quick else STARTS))
    scalar_starts = tuple(args.scalar_starts or ((2,) if quick else SCALAR_STARTS))
    de_generations = args.de_generations or (2 if quick else DE_GENERATIONS)
    steps = args.steps or (100 if quick else 2000)
    n_val, n_test = (16, 16) if quick else (N_VAL, N_TEST)
    for label, values in (("--starts", starts), ("--scalar-starts", scalar_starts)):
        if min(values) < 1:
            raise ValueError(f"{label} must be positive start counts; got {values}")
    common.prepare_out(args.out)
    start = time.perf_counter()

    k_problem, k_direct, k_surrogate = jax.random.split(jax.random.key(args.seed), 3)
    model, truth, problem = build_problem(k_problem, stride)
    mse_truth = float(problem.loss(problem.to_internal(jnp.asarray(truth))))
    table3, direct = direct_methods(k_direct, problem, starts, scalar_starts, de_generations, quick)
    table4, surrogates = surrogate_methods(k_surrogate, model, problem, sizes, steps, n_val, n_test, quick)
    metrics = {
        "setup": {"model": "thermal_office_r7c4", "stride": stride, "n_times": int(model.ts.shape[0]),
                  "noise": f"additive N(0, {SIGMA}^2) K", "truth": model.parameters.to_dict(truth),
                  "truth_draw": "uniform in the inner half of every internal range", "mse_at_truth": mse_truth,
                  "initial_guess": "nominal", "weighting": "absolute (loss = MSE)", "seed": args.seed,
                  "options": {"stride": stride, "n_train": sizes, "starts": starts, "scalar_starts": scalar_starts,
                              "de_generations": de_generations, "steps": steps, "trf_plateau": PLATEAU},
                  "model_calls": "fd_calls = simulations + 14 x Jacobians (forward differences: the paper's currency)",
                  "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "devices": [str(d) for d in jax.devices()]},
        "table3": table3, "table4": table4, "table4_setup": surrogates["setup"],
        "multistart": direct["multistart"], "surrogates": surrogates["per_n_train"],
        "paper": {"table3": PAPER_TABLE3, "table4": PAPER_TABLE4}, "quick": quick,
        "wall_time_s": time.perf_counter() - start,
    }
    metrics = common.write_metrics(args.out, metrics)
    common.write_text(args.out / "tables.md", markdown(metrics))
    common.write_paper_comparison(args.out, "Aka et al. 2023, Tables 3 and 4 (office zone R7C4)",
                                  comparison_rows(metrics, quick), quick=quick)
    plot_polish(metrics, args.out / "polish.png")
    print(markdown(metrics))
    print(f"wrote {args.out}/metrics.json, tables.md, paper_comparison.md, polish.png in "
          f"{metrics['wall_time_s']:.0f} s")
    return metrics


if __name__ == "__main__":
    main()
