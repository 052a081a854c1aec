"""The classical-estimation experiments run with --quick and keep the papers' structure."""

import json

import pytest

from tests.helpers import load_script


@pytest.mark.slow
def test_reactions_classical_quick(tmp_path):
    metrics = load_script("experiments/reactions_classical.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("fit_A_sigma0.1.png", "fit_ABCD_sigma0.1.png", "fit_ABCD_sigma0.03.png",
                 "profile_kac_ABCD_sigma0.1.png"):
        assert (tmp_path / name).stat().st_size > 0
    cases = metrics["cases"]
    # Wulkow 2021 §3.1: A alone has a flat direction (kac/kad enter A only through their sum)
    assert cases["A, sigma=0.1"]["n_essential_directions"] < 3
    # the paper's start reaches the interior minimum: no other start finds a lower loss
    fits = cases["A, sigma=0.1"]["fits"]
    assert cases["A, sigma=0.1"]["R_X"] == fits["paper (1e-5, 1e-5, 1e-5)"]["R_X"]
    assert 0 <= cases["A, sigma=0.1"]["excess_loss_over_best_start"] < 1e-6
    assert abs(cases["A, sigma=0.1"]["estimate"]["kab"] / metrics["truth"]["kab"] - 1) < 0.3
    # essential directions over noise draws (issue 19): a histogram of all draws, 2 directions
    # at every estimate (kac/kad exactly degenerate; the clear-gap clause keeps kab even where
    # s1/s2 > 100) and at the noise-free truth (model spec: singular values 1 : 0.13 : ~0)
    study = metrics["essential_directions_A_sigma0.1_over_draws"]
    assert sum(study["histogram"].values()) == study["n_draws"] == 3
    assert study["n_above_best_start"] == study["n_on_kab_bound"] == 0
    for draw in study["draws"]:
        assert draw["n_essential"] == 2 and 0 <= draw["excess_loss_over_best_start"] < 1e-6
    assert study["noise_free_truth"]["n_essential"] == 2 and 7.4 < study["noise_free_truth"]["s1_over_s2"] < 8.0
    assert cases["A, sigma=0.1"]["condition_number"] is None or cases["A, sigma=0.1"]["condition_number"] > 1e6
    for label in ("ABCD, sigma=0.1", "ABCD, sigma=0.03"):
        case = cases[label]
        assert case["n_essential_directions"] == 3 and case["condition_number"] < 4
        assert all(case["truth_in_ci95"].values())
        for name, value in case["estimate"].items():
            assert abs(value / metrics["truth"][name] - 1) < 0.3
    # lower noise: smaller standard errors and R_X near sigma^2
    se1 = cases["ABCD, sigma=0.1"]["standard_errors_sigma_given"]
    se3 = cases["ABCD, sigma=0.03"]["standard_errors_sigma_given"]
    assert all(se3[n] < 0.5 * se1[n] for n in se1)
    assert 0.5 * 0.03**2 < cases["ABCD, sigma=0.03"]["R_X"] < 2 * 0.03**2
    lo, hi = metrics["profile_kac_ABCD_sigma0.1"]["ci95_profile"]
    assert lo < metrics["truth"]["kac"] < hi
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 9  # claims of §3.1.1-3.1.3, draw study


@pytest.mark.slow
def test_polymerization_classical_quick(tmp_path):
    metrics = load_script("experiments/polymerization_classical.py").main(["--out", str(tmp_path),
                                                                     "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "fits.png").stat().st_size > 0
    test1, test2 = metrics["tests"]["Test 1"]["fits"], metrics["tests"]["Test 2"]["fits"]
    assert len(test1) == len(test2) == 2  # two starts per test
    # Test 1 ([M] only): one essential direction and a high condition number for both starts,
    # and the two starts end far apart in f with similar residuals
    assert [f["n_essential_directions"] for f in test1] == [1, 1]
    assert all(f["condition_number"] > 100 for f in test1)
    assert abs(test1[0]["estimate"]["f"] - test1[1]["estimate"]["f"]) > 0.1
    assert abs(test1[0]["R_X"] - test1[1]["R_X"]) < 0.2 * test1[0]["R_X"]
    # Test 2 ([M] + Mw): two essential directions, small condition number, one optimum
    assert [f["n_essential_directions"] for f in test2] == [2, 2]
    assert all(f["condition_number"] < 20 for f in test2)
    assert abs(test2[0]["estimate"]["f"] - test2[1]["estimate"]["f"]) < 1e-3
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 11  # Tests 1-4 claims (3-4: n/a)


@pytest.mark.slow
def test_winding_bottom_up_quick(tmp_path):
    metrics = load_script("experiments/winding_bottom_up.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("cost_versus_parameters.png", "validation.png"):
        assert (tmp_path / name).stat().st_size > 0
    ident, bu, ours = metrics["identifiability"], metrics["bottom_up"], metrics["ours"]
    # Bastogne §4.4: rank 14, beta1/beta3 null and never ranked; §3.4: parameters are added in
    # the J-sensitivity order of the report
    assert ident["rank"] == 14 and sorted(ident["null"]) == ["beta1", "beta3"]
    j_order = [n for n in ident["j_sensitivity_order"] if n not in ident["null"]]
    assert metrics["setup"]["ranking_source"] == "j_sensitivity"
    assert bu["ranking"] == j_order[:2] == [s["added"] for s in bu["steps"]] == ["kW3", "gamma3"]
    # nested subsets with warm starts: the cost never increases; kW3 alone removes most of the
    # mismatch, and gamma3 (the same output level as kW3) adds almost nothing after it
    costs = ours["costs_j0_to_mu"]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(costs, costs[1:]))
    assert costs[1] < 0.1 * costs[0] and costs[1] - costs[2] < 0.01 * (costs[0] - costs[2])
    assert bu["knee"] == 1 and bu["selected"] == ["kW3"]
    # estimates near the plant, and the fit carries over to the other excitation
    plant = metrics["setup"]["plant_theta"]
    for name, value in bu["steps"][-1]["estimate"].items():
        assert 0.2 * plant[name] < value < 5 * plant[name]
    validation = metrics["validation"]["cost"]
    assert validation[f"j={bu['knee']}"] < 0.1 * validation["nominal"]
    assert abs(validation[f"j={bu['knee']}"] / costs[bu["knee"]] - 1) < 0.1  # no overfit
    assert validation["plant"] < 1.5 * metrics["validation"]["sigma_squared"]
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    assert len([line for line in table if line.startswith("|")][2:]) == 6  # Bastogne §3.4, §4.6-4.7 claims
