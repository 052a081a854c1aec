"""Classical estimation on the radical polymerization case (Wulkow et al. 2021, §3.2.2).

The "real" model (cage effect, primary-radical termination; recipe 1) generates the data at
the paper's times: [M] at 30 times, Mw and end groups (EG) at 500, 1000, 2000, 5000 s,
noise-free and rounded to ``--digits`` significant digits (the paper's Table B1 is
noise-free model output rounded to 2-3 digits). The simple model is fitted by Gauss-Newton
with essential directions (relative residuals, internal coordinates (f, log ktc, log ktd);
f is linear on [0.1, 1]), two starts per test as in the paper:

- Test 1: f, ktc (ktd = 0 fixed) from [M]; starts (f, ktc) = (1, 1e6) and (0.5, 1e7).
- Test 2: f, ktc (ktd = 0) from [M] + Mw; the same starts.
- Test 3: f, ktc, ktd from [M] + Mw; starts (0.5, 1e7, 1) and (0.5, 1, 1e6), the paper's:
  its second start has ktc = 1, below the model's bound 1e4, so Tests 3-4 lower ktc's bound
  to 1 (``KTC_LOWER_TESTS_3_4``).
- Test 4: f, ktc, ktd from [M] + Mw + EG; the starts of Test 3. The paper also fits the
  molar-mass distribution (GPC), which this moment model cannot produce (out of scope).

The paper's numeric estimates are held out; what it states is kept next to ours in
``paper``: Test 1 has 1 essential direction for both starts, a high condition number and two
very different optima with similar residuals; Test 2 a very small condition number and 2
essential directions; Test 3 2 essential directions and non-unique (ktc, ktd); Test 4 2
essential directions and a much lower condition number than Test 3, ktd near its start.

Usage: python -m experiments.polymerization_classical [--out results/polymerization_classical]
       [--digits 3] [--qss] [--quick]
"""

from __future__ import annotations

import dataclasses
import time

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jcalib  # noqa: E402
from experiments import common  # noqa: E402
from jcalib.data import Measurements  # noqa: E402
from jcalib.estimation.gauss_newton import gauss_newton  # noqa: E402
from jcalib.plotting import plot_simulation  # noqa: E402
from jcalib.problems import CalibrationProblem  # noqa: E402

OUTPUTS = ("M", "Mw", "EG")
KTC_LOWER_TESTS_3_4 = 1.0  # L/(mol s): the paper's second start of Tests 3-4 has ktc0 = 1
TESTS = {
    "Test 1": {"free": ("f", "ktc"), "fixed": {"ktd": 0.0}, "outputs": ("M",),
               "starts": [{"f": 1.0, "ktc": 1e6}, {"f": 0.5, "ktc": 1e7}],
               "paper": {"n_essential_directions": [1, 1], "condition": "high",
                         "note": "two very different optima with very similar residuals"}},
    "Test 2": {"free": ("f", "ktc"), "fixed": {"ktd": 0.0}, "outputs": ("M", "Mw"),
               "starts": [{"f": 1.0, "ktc": 1e6}, {"f": 0.5, "ktc": 1e7}],
               "paper": {"n_essential_directions": 2, "condition": "very small",
                         "note": "f and ktc determined"}},
    "Test 3": {"free": ("f", "ktc", "ktd"), "fixed": {}, "outputs": ("M", "Mw"),
               "starts": [{"f": 0.5, "ktc": 1e7, "ktd": 1.0}, {"f": 0.5, "ktc": 1.0, "ktd": 1e6}],
               "paper": {"n_essential_directions": 2,
                         "note": "f nearly equal for both starts, several (ktc, ktd) combinations; "
                                 "second start ktc0 = 1"}},
    "Test 4": {"free": ("f", "ktc", "ktd"), "fixed": {}, "outputs": ("M", "Mw", "EG"),
               "starts": [{"f": 0.5, "ktc": 1e7, "ktd": 1.0}, {"f": 0.5, "ktc": 1.0, "ktd": 1e6}],
               "paper": {"n_essential_directions": 2, "condition": "much lower than Test 3",
                         "note": "ktd close to its start; the paper adds the MMD (out of scope)"}},
}


def real_data(qss: bool, digits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    real = jcalib.models.get("radical_polymerization_real", recipe=1, outputs=OUTPUTS, qss=qss)
    y = np.asarray(real.simulate(jnp.asarray(real.parameters.nominal)))
    if digits:
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(np.isfinite(y), np.asarray([[float(f"{v:.{digits}g}") for v in row]
                                                     for row in y]), y)
    return np.asarray(real.ts), y, np.asarray(real.experiment.mask)


def run_test(spec, ts, y, mask, qss):
    columns = [OUTPUTS.index(o) for o in spec["outputs"]]
    data = Measurements(ts, y[:, columns], mask=mask[:, columns], output_names=spec["outputs"])
    model = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=spec["outputs"],
                              qss=qss)
    if "ktd" in spec["free"]:  # Tests 3-4
        model = dataclasses.replace(model, parameters=model.parameters.replace("ktc", lower=KTC_LOWER_TESTS_3_4))
    problem = CalibrationProblem(model, data, free=spec["free"], fixed=spec["fixed"])
    fits = [gauss_newton(problem, start) for start in spec["starts"]]
    rows = []
    for start, fit in zip(spec["starts"], fits):
        rows.append({"start": start, "estimate": fit.estimate, "R_X": fit.loss,
                     "condition_number": fit.condition_number,
                     "n_essential_directions": fit.n_essential_directions,
                     "singular_values": fit.singular_values,
                     "flat_directions": fit.extra["flat_directions"],
                     "at_bounds": fit.extra["at_bounds"], "converged": fit.converged,
                     "reason": fit.reason, "n_steps": fit.n_steps,
                     "n_simulations": fit.n_simulations, "n_jacobians": fit.n_jacobians,
                     "wall_time_s": fit.wall_time_s})
    return rows, fits, problem


def paper_rows(results) -> list[dict]:
    """One row per statement of §3.2.2 kept in ``TESTS[...]["paper"]`` (the numeric estimates
    are held out). Criteria: "high" condition number > 100 and "very small" < 20 (as in
    tests/test_experiments_estimation.py); "very different optima" |Δf| > 0.1 with R_X within
    20 %; "determined"/"nearly equal" |Δf| < 0.02 between the two starts; "several (ktc, ktd)"
    ktc or ktd differing by more than a factor 2; "much lower" below a tenth of Test 3's for the
    same start; "ktd close to its start" within a factor 10. Tests 3-4 are not run with --quick."""
    rows = []

    def add(claim, paper, test, ours_of, ok_of, why_of=lambda fits: "no explanation computed for this row"):
        if test not in results:
            rows.append({"claim": f"{test}: {claim}", "paper": paper, "ours": "not run (--quick: Tests 1-2 only)",
                         "match": None, "why": ""})
            return
        fits = results[test]["fits"]
        ok = bool(ok_of(fits))
        rows.append({"claim": f"{test}: {claim}", "paper": paper, "ours": ours_of(fits), "match": ok,
                     "why": "" if ok else why_of(fits)})

    def ess(fits):
        return str([f["n_essential_directions"] for f in fits])

    def cond(fits):
        return ", ".join("inf" if f["condition_number"] is None else f"{f['condition_number']:.3g}" for f in fits)

    def kappa(f):
        return float("inf") if f["condition_number"] is None else f["condition_number"]

    def df(fits):
        return abs(fits[0]["estimate"]["f"] - fits[1]["estimate"]["f"])

    add("essential directions (both starts)", "1, 1", "Test 1", ess,
        lambda fits: all(f["n_essential_directions"] == 1 for f in fits))
    add("condition number high (> 100, both starts)", "high", "Test 1", cond,
        lambda fits: all(kappa(f) > 100 for f in fits))
    add("two very different optima with very similar residuals (|Δf| > 0.1, R_X within 20 %)",
        TESTS["Test 1"]["paper"]["note"], "Test 1",
        lambda fits: f"f {fits[0]['estimate']['f']:.3f} vs {fits[1]['estimate']['f']:.3f}; "
                     f"R_X {fits[0]['R_X']:.3g} vs {fits[1]['R_X']:.3g}",
        lambda fits: df(fits) > 0.1 and abs(fits[0]["R_X"] - fits[1]["R_X"]) < 0.2 * fits[0]["R_X"])
    add("essential directions (both starts)", "2", "Test 2", ess,
        lambda fits: all(f["n_essential_directions"] == 2 for f in fits))
    add("condition number very small (< 20, both starts)", "very small", "Test 2", cond,
        lambda fits: all(kappa(f) < 20 for f in fits))
    add("f and ktc determined (both starts reach the same f, |Δf| < 0.02)", TESTS["Test 2"]["paper"]["note"],
        "Test 2", lambda fits: f"|Δf| {df(fits):.2g}", lambda fits: df(fits) < 0.02)
    add("essential directions (both starts)", "2", "Test 3", ess,
        lambda fits: all(f["n_essential_directions"] == 2 for f in fits))

    def termination_why(fits):
        moves = "; ".join(f"start {i + 1}: ktc {f['start']['ktc']:g} -> {f['estimate']['ktc']:.3g}, ktd "
                          f"{f['start']['ktd']:g} -> {f['estimate']['ktd']:.3g}, f {f['estimate']['f']:.3f}, R_X "
                          f"{f['R_X']:.3g}" for i, f in enumerate(fits))
        return (f"{moves}. A termination constant far below the other barely changes the outputs (its "
                "log-coordinate column is about its share of termination), so the one a start sets low is a flat "
                "direction and stays there: the starts end at different termination mechanisms with different f")

    def ktc_ktd_apart(fits):
        e0, e1 = fits[0]["estimate"], fits[1]["estimate"]
        return max(abs(np.log10(max(e0[n], 1e-300) / max(e1[n], 1e-300))) for n in ("ktc", "ktd")) > np.log10(2)

    add("f nearly equal for both starts (|Δf| < 0.02), several (ktc, ktd) combinations (ktc or ktd apart by "
        "more than a factor 2)", TESTS["Test 3"]["paper"]["note"], "Test 3",
        lambda fits: "; ".join(f"f {f['estimate']['f']:.3f}, ktc {f['estimate']['ktc']:.3g}, "
                               f"ktd {f['estimate']['ktd']:.3g}" for f in fits),
        lambda fits: df(fits) < 0.02 and ktc_ktd_apart(fits), termination_why)
    add("essential directions (both starts)", "2", "Test 4", ess,
        lambda fits: all(f["n_essential_directions"] == 2 for f in fits))
    add("condition number much lower than Test 3 (below a tenth, same start)", "much lower than Test 3", "Test 4",
        lambda fits: f"Test 4: {cond(fits)}; Test 3: {cond(results['Test 3']['fits'])}",
        lambda fits: all(kappa(f) < 0.1 * kappa(g) for f, g in zip(fits, results["Test 3"]["fits"])))
    add("ktd close to its start (within a factor 10)", "ktd close to its start", "Test 4",
        lambda fits: "; ".join(f"ktd {f['estimate']['ktd']:.3g} from {f['start']['ktd']:g}" for f in fits),
        lambda fits: all(abs(np.log10(max(f["estimate"]["ktd"], 1e-300) / f["start"]["ktd"])) < 1 for f in fits),
        termination_why)
    return rows


def main(argv=None):
    parser = common.parser(__doc__, "polymerization_classical", quick_help="Tests 1 and 2 only, with --qss", seed=False)
    parser.add_argument("--digits", type=int, default=3,
                        help="round the data to this many significant digits (0: no rounding)")
    parser.add_argument("--qss", action="store_true",
                        help="quasi-steady radicals in both models (< 2e-4 from the full models; "
                             "explicit solves, ~4x shorter compiles)")
    args = parser.parse_args(argv)
    common.prepare_out(args.out)
    qss = args.qss or args.quick
    t0 = time.perf_counter()
    ts, y, mask = real_data(qss, args.digits)
    names = ("Test 1", "Test 2") if args.quick else tuple(TESTS)

    results, best = {}, {}
    for name in names:
        spec = TESTS[name]
        rows, fits, problem = run_test(spec, ts, y, mask, qss)
        results[name] = {"free": spec["free"], "fixed": spec["fixed"], "outputs": spec["outputs"],
                         "fits": rows, "paper": spec["paper"]}
        i = int(np.argmin([f.loss for f in fits]))
        best[name] = problem.theta_full(jnp.asarray(fits[i].theta_internal))

    # fit vs data: best fit of every test, all outputs, one dense simulation model
    dense = np.linspace(1.0, 5000.0, 200)
    simple = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=OUTPUTS, qss=qss)
    simple = simple.with_bounds_check(False)  # Tests 1-2 hold ktd = 0, below its bound [1, 1e8]
    simulate = jax.jit(lambda th: simple.with_times(dense).simulate(th))
    curves = {f"{name} ({', '.join(TESTS[name]['outputs'])})": np.asarray(simulate(theta))
              for name, theta in best.items()}
    data = Measurements(ts, y, mask=mask, output_names=OUTPUTS)
    fig = plot_simulation(dense, curves, OUTPUTS, data=data, units=("mol/L", "kg/mol", "mmol/L"),
                          time_unit="s", title="simple model fitted to real-model data (recipe 1)")
    common.save(fig, args.out / "fits.png", dpi=110)

    metrics = {"data": {"model": "radical_polymerization_real", "recipe": 1, "qss": qss,
                        "rounded_digits": args.digits, "noise": "none"},
               "parameter_scaling": "internal coordinates: f linear, log ktc, log ktd; "
                                    "relative residuals",
               "tests": results, "quick": args.quick, "wall_time_s": time.perf_counter() - t0}
    metrics = common.write_metrics(args.out, metrics)
    common.write_paper_comparison(args.out, "Wulkow et al. 2021, §3.2.2 Tests 1-4 (radical polymerization, "
                                  "Gauss-Newton)", paper_rows(results), quick=args.quick)

    print(f"{'test':7s} {'start':28s} {'f':>6s} {'ktc':>9s} {'ktd':>9s} {'R_X':>8s} {'cond':>9s} ess"
          "  paper")
    for name, res in results.items():
        for row in res["fits"]:
            e = row["estimate"]
            start = ", ".join(f"{v:g}" for v in row["start"].values())
            ktd = e.get("ktd", 0.0)
            print(f"{name:7s} {start:28s} {e['f']:6.3f} {e['ktc']:9.3g} {ktd:9.3g} "
                  f"{row['R_X']:8.3g} {row['condition_number'] or float('inf'):9.3g} "
                  f"{row['n_essential_directions']:3d}  {res['paper'].get('n_essential_directions')}")
    print(f"wrote {args.out / 'metrics.json'} and fits.png in {metrics['wall_time_s']:.1f} s")
    return metrics


if __name__ == "__main__":
    main()
