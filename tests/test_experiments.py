"""The demo and the benchmark run end to end at small size and write what they promise."""

import json

import numpy as np
import pytest

from jcalib.bayes import PosteriorResult
from tests.helpers import load_script


@pytest.mark.slow  # experiments' --quick runs are make test-all (~170-240 s cold)
def test_demo_writes_metrics_and_figures(tmp_path):
    metrics = load_script("experiments/demo.py").main(["--out", str(tmp_path), "--quick"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    for name in ("recipe1_fit.png", "singular_values.png", "data_recipe1.csv", "marginals.png", "pair.png",
                 "trace.png", "recipe2_bands.png", "report.md", "posterior.npz"):
        assert (tmp_path / name).stat().st_size > 0
    spectra = saved["simple_model_jacobian"]["spectra"]
    # Wulkow 2021 structure: [M] alone leaves f/ktc correlated, Mw breaks it
    assert spectra["M (f, ktc)"]["condition_number"] > 100
    assert spectra["M+Mw (f, ktc)"]["condition_number"] < 20
    assert spectra["M (f, ktc)"]["n_essential_directions"] == 1
    assert spectra["M+Mw (f, ktc)"]["n_essential_directions"] == 2
    # the same structure at the Gauss-Newton optima of the fits to the real model's data
    fits = saved["gauss_newton_fits"]["fits"]
    assert fits["M"]["n_essential_directions"] == 1 and fits["M"]["condition_number"] > 100
    assert fits["M+Mw"]["n_essential_directions"] == 2
    assert fits["M+Mw"]["condition_number"] * 10 <= fits["M"]["condition_number"]
    assert fits["M"]["converged"] and fits["M+Mw"]["converged"]
    # Bayesian step: the Gauss-Newton-preconditioned chains mix (even in --quick's 2 x 300 draws),
    # the posterior brackets the Gauss-Newton estimate of the same data
    bayes = saved["bayesian"]
    posterior = PosteriorResult.load(tmp_path / "posterior.npz")
    assert np.all(posterior.ess_bulk > 100) and np.all(posterior.rhat < 1.1), (posterior.ess_bulk, posterior.rhat)
    assert 0.4 < posterior.acceptance < 0.8
    lo, hi = posterior.interval(0.9)
    start = np.array([bayes["gauss_newton_start"][n] for n in posterior.names])
    assert np.all((lo < start) & (start < hi))
    # recipe 2 was not fitted: the simple model's band misses the real model's [M] (Wulkow 2021
    # §3.2.2) by more than it misses Mw
    misses = bayes["recipe2_misses"]
    assert misses["M"]["max_miss_of_range"] > 0.02
    assert misses["M"]["max_miss_of_range"] > 2 * misses["Mw"]["max_miss_of_range"]
    assert "Recipe 2" in (tmp_path / "report.md").read_text()
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 6  # one row per claim of §3.2.2


@pytest.mark.slow
@pytest.mark.parametrize("case", ["four_substance_reactions", "radical_polymerization_real_qss"])
def test_benchmark_quick(tmp_path, case):
    out = tmp_path / "bench.json"
    report = load_script("benchmarks/simulate_batch.py").main(["--quick", "--cases", case,
                                                          "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    (result,) = report["results"]
    assert result["scipy_failures"] == 0
    # same answers as scipy within the model's tolerance (QSS: its error vs the full model)
    assert result["max_rel_difference"] < (1e-3 if case.endswith("qss") else 1e-5)


@pytest.mark.slow
def test_winding_identifiability_quick(tmp_path):
    metrics = load_script("experiments/winding_identifiability.py").main(["--out", str(tmp_path),
                                                                    "--quick"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    for name in ("sensitivity_functions.png", "sigma_min_spectrum.png", "singular_values.png"):
        assert (tmp_path / name).stat().st_size > 0
    report = saved["identifiability"]
    # Bastogne 2007 §4.4: rank 14 of 16, the dynamometer gains have exactly zero sensitivity
    assert report["rank"] == saved["paper"]["rank"] == 14
    assert report["null_parameters"] == ["beta1", "beta3"]
    assert report["column_norms"]["beta1"] == report["column_norms"]["beta3"] == 0.0
    assert report["j_sensitivity"]["beta1"] == report["j_sensitivity"]["beta3"] == 0.0
    assert saved["comparison"]["identifiable_matches"]
    # autodiff sensitivities agree with finite differences (Jp: weak, FD-limited, ~1e-3)
    errors = saved["sensitivity_functions"]["finite_difference_max_rel_error"]
    assert set(errors) == {"Jp", "BP1", "BP3"} and errors["BP1"] < 1e-6 and errors["Jp"] < 1e-2
    spectrum = report["correlation"]["relative_sigma_min"]
    assert all(a >= b for a, b in zip(spectrum, spectrum[1:]))
    assert report["proposed_subset"] == report["correlation"]["order"][:len(
        report["proposed_subset"])]
    # the paper's definitions: |dJ/dθ| in physical units (eq. 12), correlation of the running
    # cost's sensitivity functions S_J(t, θ) (§3.3.2), started at the most J-sensitive (eq. 13)
    ours = saved["ours"]
    assert report["j_sensitivity_scaling"] == "absolute" and report["correlation_columns"] == "j_sensitivity"
    assert report["correlation"]["order"][0] == report["j_sensitivity_order"][0]
    recomputed = ours["recomputed_from_matrix"]  # S_J from the matrix by numpy: same ends, same ranking
    for name, value in report["j_sensitivity"].items():
        assert abs(recomputed["j_sensitivity"][name] - value) <= 1e-9 * max(report["j_sensitivity"].values())
    assert recomputed["correlation_order"] == report["correlation"]["order"]
    # rank under two tolerances: solver accuracy keeps Jp (14), the noise (σ/s_k < 1 in ln θ) does not
    assert ours["ranks"]["solver_tolerance"] == 14 and ours["ranks"]["noise_delta_1"] == 13
    assert ours["ranks"]["noise_delta_0.1"] <= ours["ranks"]["noise_delta_1"]
    assert ours["jp_cramer_rao_sd_ln"] > 100  # Jp's direction: a factor e^100 is no estimate
    # kW3 above γ3 on a level mismatch (Table 4 plant): the steady-state factor explains the ratio
    factor = ours["kw3_factor"]["dlnT3_dlnkW3"]
    assert factor > 1.5 and abs(ours["table4_plant"]["kw3_over_gamma3"] / factor - 1) < 0.05
    table = [line for line in (tmp_path / "paper_comparison.md").read_text().splitlines()
             if line.startswith("| ") and not line.startswith("| claim")]
    assert len(table) == 18  # checked items and claims of Bastogne 2007 §4.4-4.5


@pytest.mark.slow
def test_sobol_benchmark_quick(tmp_path):
    out = tmp_path / "sobol.json"
    report = load_script("benchmarks/sobol.py").main(["--quick", "--cases", "four_substance_reactions",
                                                "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    (result,) = report["results"]
    assert result["n_simulations"] == 16 * 5 and result["scipy_loop"]["failures"] == 0
    assert not result["scipy_loop"]["extrapolated"]
    assert result["outputs_max_rel_difference"] < 1e-5
    # same design, near-identical outputs: SALib/scipy indices within jcalib's intervals
    assert result["indices_comparison"]["within_bootstrap_intervals"]


@pytest.mark.slow
def test_cabin_sensitivity_quick(tmp_path):
    metrics = load_script("experiments/cabin_sensitivity.py").main(["--out", str(tmp_path), "--quick"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    for name in saved["figures"]:
        assert (tmp_path / name).stat().st_size > 0
    assert {"sobol_over_time_first.png", "sorted_indices_round1.png"} <= set(saved["figures"])
    names = list(saved["rounds"][0]["parameters"])
    assert len(names) == 19
    # groups are disjoint, in round order, and together with the leftovers cover all 19
    grouped = [p for group in saved["groups"] for p in group]
    assert len(grouped) == len(set(grouped))
    assert sorted(grouped + saved["ungrouped"]) == sorted(names)
    for rnd, group in zip(saved["rounds"], saved["groups"]):
        sel = rnd["selection"]
        assert sel["selected"] == group
        # Algorithm 1: the kept prefix has S >= delta and r <= K; the walk stopped at the
        # first failure; K = max(r(0,1), r(1,2))
        s, r, k = sel["sorted_indices"], sel["ratios"], sel["K"]
        assert k == max(r[0], r[1])
        assert sel["sorted_names"][:len(group)] == group
        assert all(s[i] >= sel["delta"] and r[i] <= k for i in range(len(group)))
        if len(group) < len(s):
            i = len(group)
            assert s[i] < sel["delta"] or r[i] is None or r[i] > k
        # the next round varies exactly the parameters not grouped so far
        assert set(rnd["parameters"]).isdisjoint(rnd["fixed_at_nominal"])
    table = [line for line in (tmp_path / "paper_comparison.md").read_text().splitlines()
             if line.startswith("| ") and not line.startswith("| claim")]
    assert len(table) == 5  # one row per claim of Zhang & Mikelsons 2023, Fig. 4 / App. A.2
