"""experiments/joint_calibration.py runs with --quick and keeps the structure of its two cases
(issue 20 §6): what must hold whatever the noise draw, not tuned numbers."""

import json

import numpy as np
import pytest

from tests.helpers import load_script


@pytest.mark.slow  # ~130-200 s cold
def test_joint_calibration_quick(tmp_path):
    script = load_script("experiments/joint_calibration.py")
    metrics = script.main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "polymerization_recipe2.png").stat().st_size > 0
    report = (tmp_path / "report.md").read_text()
    assert "A only" in report and "recipe 2" in report
    comparison = (tmp_path / "paper_comparison.md").read_text()
    assert comparison.count("| A only, sigma 0.1") == 1 and comparison.count("| recipe 2,") == 1  # the paper's

    # part 1: the designs' experiments, shared rate constants
    reactions = metrics["reactions"]
    truth = metrics["truth"]
    for obs in ("A", "ABCD"):
        assert reactions[obs]["one experiment"]["experiments"] == ["A0=10"]
        assert reactions[obs]["three concentrations"]["experiments"] == ["A0=10", "A0=5", "A0=20"]
        assert reactions[obs]["three replicates"]["experiments"] == ["A0=10 #1", "A0=10 #2", "A0=10 #3"]
        for design in script.DESIGNS:
            assert reactions[obs][design]["free"] == ["kab", "kac", "kad"]
            assert len(reactions[obs][design]["draws"]) == 3
    # A only: kac and kad enter only through their sum at every A0, so every design and draw
    # has at most 2 essential directions, a (numerically) zero third singular value, and the
    # weakest direction is the sum-preserving one: no kab, d(log kac) kac + d(log kad) kad = 0
    for design in script.DESIGNS:
        case = reactions["A"][design]
        assert case["noise_free_truth"]["singular_values"][2] < 1e-10 * case["noise_free_truth"]["singular_values"][0]
        for draw in case["draws"]:
            assert draw["n_essential"] == 2  # kab kept even past s1/s2 = 100: the gap to the null is clearer
            s = draw["singular_values"]
            assert s[2] < 1e-10 * s[0]
            v, e = draw["smallest_direction"], draw["estimate"]
            assert abs(v["kab"]) < 1e-6
            assert abs(v["kac"] * e["kac"] + v["kad"] * e["kad"]) < 1e-6 * (e["kac"] + e["kad"])
        # replicates repeat the same rows (the noise-free Jacobian is the single one stacked three
        # times): the same singular values up to sqrt(3)
        one = np.asarray(reactions["A"]["one experiment"]["noise_free_truth"]["singular_values"])
        rep = np.asarray(reactions["A"]["three replicates"]["noise_free_truth"]["singular_values"])
        np.testing.assert_allclose(rep[:2], np.sqrt(3) * one[:2], rtol=1e-8)
    # A, B, C, D: all three rates, in every design, estimated near the truth (sigma 0.1)
    for design in script.DESIGNS:
        for draw in reactions["ABCD"][design]["draws"]:
            assert draw["n_essential"] == 3
            assert all(abs(draw["estimate"][n] / truth[n] - 1) < 0.5 for n in truth)

    # part 2: the simple model against recipes 1 and 2
    fits = metrics["polymerization"]["fits"]
    alone, joint, per = fits["recipe 1 alone"], fits["recipes 1 + 2 jointly"], fits["f per recipe, shared ktc"]
    assert alone["experiments"] == ["recipe 1"] and joint["experiments"] == ["recipe 1", "recipe 2"]
    assert alone["free"] == joint["free"] == ["f", "ktc"]
    assert per["free"] == ["ktc", "f[recipe 1]", "f[recipe 2]"]
    for fit in (alone, joint, per):
        for recipe in ("recipe 1", "recipe 2"):
            m = fit["misfit"][recipe]
            assert m["R_X"] is not None and np.isfinite(m["R_X"]) and m["R_X"] > 0
            assert set(m["largest_relative_residual"]) == {"M", "Mw", "EG"}
    # the joint loss is the mean over both recipes' rows of the per-recipe residuals
    n1, n2 = 30 + 2 * 4, 30 + 2 * 4  # M at 30 times, Mw and EG at 4
    mean = (n1 * joint["misfit"]["recipe 1"]["R_X"] + n2 * joint["misfit"]["recipe 2"]["R_X"]) / (n1 + n2)
    np.testing.assert_allclose(joint["loss"], mean, rtol=1e-6)
    # each fit is the minimum of its own problem: the recipe-1 fit is best on recipe 1, the joint
    # fit best on both recipes, and a free f per recipe (a larger model) is no worse than one f
    assert alone["misfit"]["recipe 1"]["R_X"] <= joint["misfit"]["recipe 1"]["R_X"] * (1 + 1e-6)
    assert joint["loss"] <= alone["loss_on_both_recipes"] * (1 + 1e-6)
    assert per["loss"] <= joint["loss"] * (1 + 1e-6)
