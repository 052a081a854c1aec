"""Bayesian estimation on the four-substance reaction (Wulkow et al. 2021, §3.1, Figures 6-7).

The data of ``reactions_classical.py`` (same seed, same noise draws: 22 times, X = F (1 + σ ε),
A-only and ABCD data of one σ share the draw), the relative Gaussian likelihood
exp(-R_X n / 2σ²) with the measurement σ and the paper's prior: **uniform in k** on the box
[1e-6, 1e-3] x [1e-6, 1e-4]^2 (§3.1.1: "a uniform distribution on this interval"; earlier
versions sampled uniform in log k, a different posterior). Three posteriors, as in Figure 6:

- A only, σ = 0.1 (paper: acceptance 75 %, broad marginals, above all for kac and kad, with
  the truth inside);
- A, B, C, D, σ = 0.1 (kac and kad much slimmer, truth inside);
- A, B, C, D, σ = 0.03 (much more precise than σ = 0.1).

Two samplers per posterior, side by side (issue 19):

- ``paper MALA``: the paper's prescaled MALA as the paper ran it: target step length
  τ = 1/50 of each range, 2500 steps of which the first 500 are discarded, started at the
  Gauss-Newton estimate (`reactions_classical.fit_case`), no warm-up; 4 chains (the paper:
  one) for R-hat and ESS;
- ``MALA, Laplace metric``: jcalib's MALA preconditioned by a dense metric (`Laplace` at the
  same start: the inverse Hessian of the log posterior, capped at a tenth of the box in flat
  directions such as the kac - kad direction with A only), 1000 warm-up steps of dual
  averaging of the step factor towards 60 % acceptance, then 10000 steps, every 5th kept;
  4 chains. The A-only posterior in k is a straight ridge kac + kad = const between the
  walls of the box; the metric's long axis lies along it.

Both move in k (`paper_model`), where the prior is flat. (NUTS, tried on the A-only
posterior: in k 80 % of its transitions hit a wall of the box (divergent) and 1000 draws
per chain gave R-hat 1.017; in log k, with the prior's Jacobian, R-hat 1.03 and ESS 105.)

A posterior counts as converged when every parameter has rank-normalised split R-hat
<= 1.01 and bulk ESS >= 400 (ArviZ). Per sampler the metrics give max R-hat, min bulk ESS,
wall time and ESS/s; the experiment reports (figures, intervals, bands, paper rows) the
converged sampler with the larger min ESS, and if none converged the one with the smaller
R-hat, flagged ``converged: false``, its rows marked n/a. No chain is dropped.

§3.1.4 (Figure 7): 90 % band of the forward simulations over the posterior draws (the
confidence band of `jcalib.bayes.predictive`) against the data of D; the paper finds every D
point inside. We report the share of D points inside, also for the prediction band (with
the σ noise), for every posterior.

The A-only posterior is sampled on the ABCD problem with σ = ``UNUSED_SIGMA`` (1e6) for B, C
and D: their likelihood terms then vary by < 1e-10 over the box, so the posterior equals
the A-only one (the log densities differ by a constant; tests/test_experiments_bayes.py
checks it), and all three posteriors share one compiled sampler per kernel.

Usage: python -m experiments.reactions_bayesian [--out results/reactions_bayesian]
       [--seed 0] [--n-steps 2000] [--burn-in 500] [--n-chains 4] [--metric-steps 10000]
       [--metric-thin 5] [--metric-warmup 1000] [--quick]
"""

from __future__ import annotations

import dataclasses
import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations and MALA run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from experiments.reactions_classical import TRUTH, _problem, fit_case  # noqa: E402  (same data, same fits)
from jcalib.bayes import Laplace, Prescaled, mala  # noqa: E402
from jcalib.bayes.predictive import output_bands, prediction_bands  # noqa: E402
from jcalib.data import Measurements, synthetic_measurements  # noqa: E402
from jcalib.parameters import Parameter, ParameterSpace  # noqa: E402
from jcalib.plotting import plot_bands, plot_marginals, plot_pair, plot_trace  # noqa: E402
from jcalib.problems import CalibrationProblem  # noqa: E402

CASES = (("A", 0.1), ("ABCD", 0.1), ("ABCD", 0.03))  # Figure 6: blue, red, orange
FRACTION = 1 / 50  # τ_i = range / 50 (§3.1.1)
UNUSED_SIGMA = 1e6  # relative σ of an output that carries no information
N_BAND_DRAWS = 1000  # posterior draws simulated for the bands (evenly spaced over all chains)
RHAT_MAX, ESS_MIN = 1.01, 400  # issue 19: every reported posterior, every parameter
PAPER = {  # Wulkow 2021 §3.1.1-3.1.4 (one chain of 2500 steps, 500 discarded)
    "A, sigma=0.1": {"acceptance": 0.75, "note": "broad range for all three, especially kac and kad; "
                                                 "truth well inside"},
    "ABCD, sigma=0.1": {"note": "kac and kad much slimmer than with A only; truth inside"},
    "ABCD, sigma=0.03": {"note": "much more precise than sigma=0.1"},
    "band_D": "all data points of D inside the 90 % band of the forward simulations",
}


def paper_model(model):
    """``model`` with linear internal coordinates: the paper's prior is uniform in k on the
    box and its prescaled steps are fractions of each range in k (§3.1.1), so the paper's
    MALA moves in k, not log k."""
    space = ParameterSpace([Parameter(p.name, p.nominal, p.lower, p.upper, p.unit, log_scale=False)
                            for p in model.parameters])
    return dataclasses.replace(model, parameters=space)


def convergence(result) -> dict:
    """The issue-19 check of one run: max R-hat, min bulk ESS (over parameters), wall time,
    the smallest ESS per second and whether R-hat <= `RHAT_MAX` and ESS >= `ESS_MIN` hold for
    every parameter."""
    max_rhat, min_ess = float(np.max(result.rhat)), float(np.min(result.ess_bulk))
    return {"method": result.method, "n_chains": result.n_chains, "n_draws": result.n_draws,
            "warmup": result.warmup, "burn_in": result.burn_in, "acceptance": result.acceptance,
            "max_rhat": max_rhat, "min_ess_bulk": min_ess, "wall_time_s": result.wall_time_s,
            "min_ess_per_s": float(np.min(result.ess_per_second)),
            "n_logdensity_evaluations": result.n_logdensity_evaluations,
            "divergences": result.extra.get("divergences"),
            "converged": bool(np.isfinite(max_rhat) and max_rhat <= RHAT_MAX and min_ess >= ESS_MIN)}


def reported_sampler(checks: dict) -> str:
    """The run a case reports: the converged one with the larger min ESS; none converged: the
    one with the smaller max R-hat (its metrics say ``converged: false``)."""
    converged = [name for name, c in checks.items() if c["converged"]]
    if converged:
        return max(converged, key=lambda name: checks[name]["min_ess_bulk"])
    return min(checks, key=lambda name: checks[name]["max_rhat"] if np.isfinite(checks[name]["max_rhat"])
               else np.inf)


def sampling_problem(model, data: Measurements, observed, sigma: float, **problem_kwargs):
    """The problem with σ per output: ``sigma`` for the ``observed`` outputs and
    `UNUSED_SIGMA` for the others, so that every subset of outputs gives the same problem
    structure (one compiled sampler)."""
    per_output = np.where([name in observed for name in model.output_names], sigma, UNUSED_SIGMA)
    data = Measurements(data.ts, data.values, mask=data.mask, sigma=per_output,
                        output_names=model.output_names)
    return CalibrationProblem(model, data, **problem_kwargs)


def band_draws(result, n: int = N_BAND_DRAWS) -> np.ndarray:
    """``n`` draws (physical values) evenly spaced over all chains: a fixed count, so every
    posterior's bands reuse one compiled batch simulation."""
    flat = result.flat_samples()
    return flat[np.linspace(0, flat.shape[0] - 1, n).round().astype(int)]


def posterior_summary(result, truth=None) -> dict:
    """The numbers the experiments report: acceptance, diagnostics, 90 % intervals
    (physical and log k), sd and correlation of log k (whatever coordinates the sampler
    used), and each chain's mean and mean log density (chains that sit in different modes
    show there)."""
    flat = np.log(result.flat_samples())
    lo, hi = result.interval(0.9)
    names = result.names
    out = {
        "acceptance": result.acceptance,
        "acceptance_rate": result.acceptance_rate,
        "interval90": {n: [lo[i], hi[i]] for i, n in enumerate(names)},
        "interval90_log": {n: [np.log(lo[i]), np.log(hi[i])] for i, n in enumerate(names)},
        "sd_log": dict(zip(names, flat.std(axis=0, ddof=1))),
        "correlation_log": np.corrcoef(flat.T),
        "rhat": dict(zip(names, result.rhat)),
        "ess_bulk": dict(zip(names, result.ess_bulk)),
        "chains": [{"mean": dict(zip(names, result.samples[c].mean(axis=0))),
                    "mean_logdensity": result.logdensity[c].mean(), "acceptance": result.acceptance_rate[c]}
                   for c in range(result.n_chains)],
        "posterior": result.to_dict(),
    }
    if truth is not None:
        out["truth_in_interval90"] = {n: bool(lo[i] <= truth[n] <= hi[i]) for i, n in enumerate(names)}
    return out


def band_misses(bands, data: Measurements, output: str) -> dict:
    """Where the measured ``output`` leaves the outermost band: share inside, the points
    outside (time, value, band, relative distance to the band) and the largest miss."""
    j = list(bands.output_names).index(output)
    lo, hi = (np.asarray(v)[:, j] for v in bands.band())
    mask = np.asarray(data.mask)[:, list(data.output_names).index(output)]
    ts = np.asarray(data.ts)[mask]
    x = np.asarray(data.values)[mask, list(data.output_names).index(output)]
    lo, hi = lo[mask], hi[mask]
    miss = np.maximum(np.maximum(lo - x, x - hi), 0.0) / np.abs(x)
    worst = int(np.argmax(miss))
    return {
        "n_points": int(x.size), "fraction_inside": float(np.mean(miss == 0.0)),
        "fraction_outside": float(np.mean(miss > 0.0)),
        "max_relative_miss": float(miss[worst]), "max_miss_time": float(ts[worst]),
        "outside": [{"t": float(t), "value": float(v), "band": [float(a), float(b)], "relative_miss": float(m)}
                    for t, v, a, b, m in zip(ts, x, lo, hi, miss) if m > 0],
    }


def paper_rows(metrics, quick: bool) -> list[dict]:
    """One row per statement of §3.1.1-3.1.4 in ``PAPER``, and one on convergence. Criteria:
    acceptance of the paper's MALA within 0.10 of the paper's; "broad, especially kac and kad"
    every posterior sd (log k) larger with A only than with ABCD (σ 0.1) and the kac, kad ratios
    above kab's; "much slimmer" sd ratios >= 5; "much more precise" 90 % widths (log k) below
    0.6 of σ 0.1's; the band claim for every posterior (Figure 7 does not say which it shows).
    A row resting on a posterior that did not converge (R-hat > 1.01 or ESS < 400) is n/a.
    "Truth inside" is n/a with --quick: the short chains start at the truth."""
    cases, ratio, width = (metrics["cases"], metrics["sd_ratio_A_over_ABCD_sigma0.1"],
                           metrics["width_ratio_sigma0.03_over_sigma0.1"])
    rows = []

    def unconverged(*labels):
        bad = [f"{label} ({cases[label]['reported_sampler']}: R-hat {cases[label]['check']['max_rhat']:.3g}, "
               f"ESS {cases[label]['check']['min_ess_bulk']:.0f})" for label in labels
               if not cases[label]["converged"]]
        return "posterior not converged: " + "; ".join(bad) if bad else ""

    def row(claim, paper, ours, ok, why="", labels=()):
        blocked = unconverged(*labels)
        if blocked:
            ok, why = None, blocked
        rows.append({"claim": claim, "paper": paper, "ours": ours, "match": ok,
                     "why": why if ok is not True else ""})

    def fmt(d, digits=2):
        return ", ".join(f"{n} {v:.{digits}g}" for n, v in d.items())

    paper_mala = cases["A, sigma=0.1"]["samplers"]["paper MALA"]
    acc = paper_mala["acceptance"]
    ok = abs(acc - PAPER["A, sigma=0.1"]["acceptance"]) <= 0.10
    row("A only, sigma 0.1: acceptance of the paper's MALA (within 0.10)", PAPER["A, sigma=0.1"]["acceptance"],
        f"{acc:.2f}", ok, "" if ok else
        "the acceptance of a fixed-step MALA depends on where the chains are: ours wander along the kac + kad "
        "ridge of the A-only posterior (uniform prior in k, steps of 1/50 of each range)")
    checks = "; ".join(
        f"{label}: " + ", ".join(f"{name} R-hat {c['max_rhat']:.3g} ESS {c['min_ess_bulk']:.0f}"
                                 f"{' (converged)' if c['converged'] else ''}" for name, c in case["samplers"].items())
        for label, case in cases.items())
    row(f"posteriors converged (every parameter R-hat <= {RHAT_MAX}, bulk ESS >= {ESS_MIN})",
        "not reported (one chain per posterior)", checks, None)
    decades = {n: (hi - lo) / np.log(10) for n, (lo, hi) in cases["A, sigma=0.1"]["interval90_log"].items()}
    row("A only, sigma 0.1: broad for all three, especially kac and kad (sd ratio A only / ABCD, log k)",
        PAPER["A, sigma=0.1"]["note"], fmt(ratio),
        all(v > 1 for v in ratio.values()) and min(ratio["kac"], ratio["kad"]) > ratio["kab"],
        "all three are broadened alike relative to ABCD; in absolute terms the A-only 90 % intervals span "
        f"{fmt(decades)} decades (kac and kad the widest, as the paper says)",
        labels=("A, sigma=0.1", "ABCD, sigma=0.1"))
    for label in ("A, sigma=0.1", "ABCD, sigma=0.1"):
        inside = cases[label]["truth_in_interval90"]
        row(f"{label}: truth inside the 90 % intervals", "truth inside",
            f"{sum(inside.values())} of 3 inside ({', '.join(n for n, v in inside.items() if not v) or 'none'} "
            "outside)",
            None if quick else all(inside.values()), labels=(label,))
    row("ABCD, sigma 0.1: kac and kad much slimmer than with A only (sd ratio >= 5)",
        PAPER["ABCD, sigma=0.1"]["note"], f"kac {ratio['kac']:.2g}, kad {ratio['kad']:.2g}",
        ratio["kac"] >= 5 and ratio["kad"] >= 5, labels=("A, sigma=0.1", "ABCD, sigma=0.1"))
    row("ABCD, sigma 0.03: much more precise than sigma 0.1 (90 % width ratio, log k, < 0.6)",
        PAPER["ABCD, sigma=0.03"]["note"], fmt(width), all(v < 0.6 for v in width.values()),
        labels=("ABCD, sigma=0.1", "ABCD, sigma=0.03"))
    inside = {label: c["band_D"]["confidence"]["fraction_inside"] for label, c in cases.items()}
    row("§3.1.4: every D point inside the 90 % band of the forward simulations (each posterior)",
        PAPER["band_D"], "; ".join(f"{label}: {v:.0%} inside" for label, v in inside.items()),
        all(v == 1.0 for v in inside.values()),
        "Figure 7 does not say which posterior it shows; the ABCD posteriors' bands are narrower than the noise "
        "of the D data (the prediction band, with the noise, is in metrics)", labels=tuple(cases))
    return rows


def main(argv=None):
    parser = common.parser(__doc__, "reactions_bayesian",
                           quick_help="2 chains: paper MALA 500 steps after 200 burn-in, Laplace-metric MALA 2000 "
                                      "steps (400 kept) after 300 warm-up, started at the truth (no Gauss-Newton)")
    parser.add_argument("--n-steps", type=int, default=2000, help="paper MALA: kept steps per chain (paper: 2000)")
    parser.add_argument("--burn-in", type=int, default=500, help="paper MALA: discarded steps (paper: 500)")
    parser.add_argument("--n-chains", type=int, default=4, help="chains of every sampler")
    parser.add_argument("--metric-steps", type=int, default=10000, help="Laplace-metric MALA: steps per chain")
    parser.add_argument("--metric-thin", type=int, default=5, help="Laplace-metric MALA: keep every n-th step")
    parser.add_argument("--metric-warmup", type=int, default=1000,
                        help="Laplace-metric MALA: warm-up steps (step factor adaptation)")
    args = parser.parse_args(argv)
    common.prepare_out(args.out)
    if args.quick:
        n_steps, burn_in, n_chains, metric_steps, metric_thin, metric_warmup = 500, 200, 2, 2000, 5, 300
    else:
        n_steps, burn_in, n_chains = args.n_steps, args.burn_in, args.n_chains
        metric_steps, metric_thin, metric_warmup = args.metric_steps, args.metric_thin, args.metric_warmup
    model = jcalib.models.get("four_substance_reactions")
    linear = paper_model(model)  # k itself: the paper's uniform prior is the default "uniform" there
    samplers = {  # name: (file tag, sample() settings)
        "paper MALA": ("paper_mala", {"preconditioner": Prescaled(FRACTION), "n_steps": n_steps,
                                      "burn_in": burn_in, "warmup": 0}),
        "MALA, Laplace metric": ("mala_laplace", {"preconditioner": Laplace(), "n_steps": metric_steps,
                                                  "thin": metric_thin, "warmup": metric_warmup}),
    }
    t0 = time.perf_counter()
    # the classical script's keys: the same noise draws for the same seed
    key_data = jax.random.split(jax.random.key(args.seed))[0]
    key_sampler, key_noise = jax.random.split(jax.random.key(args.seed + 1))
    theta = jnp.asarray(list(TRUTH.values()))
    data = {sigma: synthetic_measurements(key, model, theta, sigma=sigma)
            for sigma, key in zip((0.1, 0.03), jax.random.split(key_data))}

    cases, results = {}, {}
    for (observe, sigma), key in zip(CASES, jax.random.split(key_sampler, len(CASES))):
        label = f"{observe}, sigma={sigma}"
        if args.quick:
            start, start_note = dict(TRUTH), "truth (--quick)"
        else:
            fit, _ = fit_case(_problem(model, data[sigma], observe), sigma)
            start, start_note = fit["estimate"], f"Gauss-Newton from {fit['best_start']}, R_X {fit['R_X']:.3g}"
        runs = {}
        problem = sampling_problem(linear, data[sigma], observe, sigma)
        for (name, (tag, settings)), k in zip(samplers.items(), jax.random.split(key, len(samplers))):
            settings = dict(settings)
            runs[name] = mala.sample(k, problem, {n: start[n] for n in TRUTH}, settings.pop("n_steps"),
                                     n_chains=n_chains, progress=not args.quick, **settings)
            runs[name].save(args.out / f"posterior_{observe}_sigma{sigma}_{tag}.npz")
            common.save(plot_trace(runs[name], title=f"{name} traces, {label}"),
                        args.out / f"trace_{observe}_sigma{sigma}_{tag}.png", dpi=110)
        checks = {name: convergence(r) for name, r in runs.items()}
        chosen = reported_sampler(checks)
        results[label] = runs[chosen]
        runs[chosen].save(args.out / f"posterior_{observe}_sigma{sigma}.npz")
        cases[label] = {"observe": observe, "sigma": sigma, "start": start, "start_from": start_note,
                        "samplers": checks, "reported_sampler": chosen, "check": checks[chosen],
                        "converged": checks[chosen]["converged"],
                        **posterior_summary(results[label], TRUTH), "paper": PAPER[label]}

    # §3.1.4: bands of the forward simulations over each posterior against the data of D
    bands = {}
    for (observe, sigma), key in zip(CASES, jax.random.split(key_noise, len(CASES))):
        label = f"{observe}, sigma={sigma}"
        full = sampling_problem(model, data[sigma], "ABCD", sigma)  # the noise of every output
        draws = band_draws(results[label])
        bands[label] = output_bands(full, draws)
        noisy = prediction_bands(key, full, draws)
        cases[label]["band_D"] = {"confidence": band_misses(bands[label], data[sigma], "D"),
                                  "prediction": band_misses(noisy, data[sigma], "D")}
        fig = plot_bands(bands[label], data[sigma], units=["mol/L"] * 4, time_unit="s",
                         title=f"90 % band of the forward simulations, posterior {label} "
                               f"({cases[label]['reported_sampler']})")
        common.save(fig, args.out / f"bands_{observe}_sigma{sigma}.png", dpi=110)

    common.save(plot_marginals(results, truth=TRUTH, title="marginal posteriors (Figure 6)"),
                args.out / "marginals.png", dpi=110)
    common.save(plot_marginals({label: results[label] for label in ("ABCD, sigma=0.1", "ABCD, sigma=0.03")},
                               truth=TRUTH, title="marginal posteriors, A, B, C, D (Figure 6, red and orange)"),
                args.out / "marginals_ABCD.png", dpi=110)
    common.save(plot_pair(results["A, sigma=0.1"], truth=TRUTH, title="posterior pairs, A only, sigma=0.1"),
                args.out / "pair_A_sigma0.1.png", dpi=110)

    sd = {label: np.asarray(list(c["sd_log"].values())) for label, c in cases.items()}

    def width(label):
        return np.diff(np.asarray(list(cases[label]["interval90_log"].values())), axis=1)[:, 0]

    metrics = {
        "truth": TRUTH,
        "settings": {"prior": "uniform in k on the box (the paper's)", "coordinates": "k (linear)",
                     "fraction": FRACTION, "n_steps": n_steps, "burn_in": burn_in, "n_chains": n_chains,
                     "metric_steps": metric_steps, "metric_thin": metric_thin, "metric_warmup": metric_warmup,
                     "metric": "Laplace at the start, capped at a tenth of the box",
                     "rhat_max": RHAT_MAX, "ess_min": ESS_MIN, "unused_sigma": UNUSED_SIGMA,
                     "n_band_draws": N_BAND_DRAWS,
                     "paper": {"fraction": 1 / 50, "n_steps": 2500, "burn_in": 500, "n_chains": 1}},
        "cases": cases,
        "all_converged": all(c["converged"] for c in cases.values()),
        "sd_ratio_A_over_ABCD_sigma0.1": dict(zip(TRUTH, sd["A, sigma=0.1"] / sd["ABCD, sigma=0.1"])),
        "width_ratio_sigma0.03_over_sigma0.1": dict(zip(TRUTH, width("ABCD, sigma=0.03") / width("ABCD, sigma=0.1"))),
        "paper_band_D": PAPER["band_D"],
        "seed": args.seed,
        "quick": args.quick,
        "wall_time_s": time.perf_counter() - t0,
    }
    metrics = common.write_metrics(args.out, metrics)
    common.write_paper_comparison(args.out, "Wulkow et al. 2021, §3.1.1-3.1.4 (four substances, prescaled MALA "
                                  "and Laplace-metric MALA)", paper_rows(metrics, args.quick), quick=args.quick)

    print(f"{'case':17s} {'sampler':20s} {'accept':>6s} {'R-hat':>6s} {'ESS':>6s} {'time':>7s} {'ESS/s':>7s}")
    for label, c in cases.items():
        for name, check in c["samplers"].items():
            mark = " <- reported" + ("" if check["converged"] else " (NOT CONVERGED)") \
                if name == c["reported_sampler"] else ""
            print(f"{label:17s} {name:20s} {check['acceptance']:6.2f} {check['max_rhat']:6.3f} "
                  f"{check['min_ess_bulk']:6.0f} {check['wall_time_s']:6.1f}s {check['min_ess_per_s']:7.2f}{mark}")
    for label, c in cases.items():
        iv = "; ".join(f"{lo:.2g}-{hi:.2g}" for lo, hi in c["interval90"].values())
        d = c["band_D"]
        print(f"{label:17s} 90 % (kab; kac; kad) {iv}  truth in {sum(c['truth_in_interval90'].values())}/3  "
              f"D in band {d['confidence']['fraction_inside']:.2f} / {d['prediction']['fraction_inside']:.2f}")
    print("sd ratio A-only / ABCD (sigma 0.1, log k):",
          {k: round(v, 1) for k, v in metrics["sd_ratio_A_over_ABCD_sigma0.1"].items()})
    print("90 % width ratio sigma 0.03 / 0.1 (log k):",
          {k: round(v, 2) for k, v in metrics["width_ratio_sigma0.03_over_sigma0.1"].items()})
    print(f"paper: acceptance 0.75 (A only); {PAPER['band_D']}")
    print(f"wrote {args.out / 'metrics.json'}, posteriors and figures in {metrics['wall_time_s']:.1f} s")
    return metrics


if __name__ == "__main__":
    main()
