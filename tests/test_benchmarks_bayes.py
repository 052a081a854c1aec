"""benchmarks/mala.py runs end to end in quick mode (a few dozen steps per sampler on the
polymerization Test-2 posterior, a few steps on the 13-parameter cabin posterior) and writes what
it promises; no timing assertions."""

import json

import numpy as np
import pytest

from tests.helpers import load_script

METHODS = ("jcalib", "jcalib_laplace", "jcalib_nuts", "fd", "nuts")


@pytest.mark.slow  # ~2 min: compiles five samplers (jcalib MALA x2 and NUTS, blackjax NUTS, scipy loop)
def test_mala_benchmark_quick(tmp_path):
    out = tmp_path / "mala.json"
    report = load_script("benchmarks/mala.py").main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["quick"] and report["benchmark"] == "mala"

    # scipy (LSODA) and diffrax (Tsit5) solve the same QSS model at rtol 1e-8 / atol 1e-10 on
    # scaled states: the 34 relative residuals differ by ~1e-8 / sigma (sigma = 0.05), so log π
    # (~ -100) by ~1e-5 (measured 1.1e-5); 1e-3 leaves room and still catches any mismatch of
    # likelihood, prior constant or coordinates (those are O(1) or larger)
    check = report["scipy_check"]
    assert check["n_points"] >= 2 and check["max_abs_logdensity_difference"] < 1e-3

    names = ("f", "ktc")
    for method in METHODS:
        row = report[method]
        assert row["all_finite"], method
        assert 0 < row["acceptance"] <= 1, method
        assert row["ess_bulk_min"] > 0 and row["ess_per_second"] > 0, method
        assert set(row["mean"]) == set(names) and all(np.isfinite(row["sd"][n]) for n in names), method
    # 1 + 2 n_params solves per step (fewer only for proposals outside the prior box)
    assert report["fd"]["n_steps"] < report["fd"]["solves"] <= (report["fd"]["n_steps"] + 1) * (1 + 2 * len(names))
    # the fd chain uses jcalib's adapted step sizes (the same algorithm)
    assert report["fd"]["step_sizes"] == report["jcalib"]["step_sizes"]

    # the three samplers see the same posterior: means (internal coordinates f, log ktc) within a
    # few posterior sd (the longer jcalib and NUTS runs' sd; the chains start at the GN mode)
    sd = np.maximum(report["jcalib"]["sd_internal"], report["nuts"]["sd_internal"])
    means = {m: np.asarray(report[m]["mean_internal"]) for m in METHODS}
    for a in METHODS:
        for b in METHODS:
            assert np.all(np.abs(means[a] - means[b]) < 4 * sd), (a, b, means, sd)
    # the reported ratios follow from the report's own rows (consistency, not a speed threshold)
    jc, fd, nuts = report["jcalib"], report["fd"], report["nuts"]
    expected = {"jcalib_vs_fd": jc["ess_per_second"] / fd["ess_per_second"],
                "jcalib_vs_fd_at_equal_ess_per_step":
                    jc["ess_per_second"] / fd["ess_per_second_at_jcalib_ess_per_step"],
                "jcalib_vs_nuts": jc["ess_per_second"] / nuts["ess_per_second"]}
    for key, value in expected.items():
        assert report["ratios"][key] == pytest.approx(value, rel=1e-12), key


CABIN_METHODS = ("jcalib", "jcalib_laplace", "fd")


@pytest.mark.slow  # ~1-2.5 min: compiles prescaled and Laplace MALA on the cabin model (the sampling is seconds)
def test_mala_benchmark_quick_cabin(tmp_path):
    out = tmp_path / "mala_cabin.json"
    report = load_script("benchmarks/mala.py").main(["--quick", "--case", "cabin_thermal", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["quick"] and report["benchmark"] == "mala" and report["case_name"] == "cabin_thermal"
    assert report["methods"] == list(CABIN_METHODS) and report["nuts"] is None and report["jcalib_nuts"] is None

    # 13 free correction factors (>= 10, the condition), the other 6 fixed at nominal
    names = set(report["jcalib"]["mean"])
    assert len(names) == 13 and set(report["data"]["fixed"]).isdisjoint(names)
    assert len(names) + len(report["data"]["fixed"]) == 19

    # scipy RK45 and diffrax Tsit5 at rtol = atol = 1e-6 differ by up to ~3e-4 K per output; 800
    # residuals of sigma = 0.1 K around log pi ~ 700 then differ by ~1e-2 (measured 6e-3); 0.1
    # still catches a wrong likelihood constant, prior or fixed parameter (each O(1) or more)
    check = report["scipy_check"]
    assert check["n_points"] >= 2 and check["max_abs_logdensity_difference"] < 0.1
    # the forward-difference gradient (the fd chain's) against autodiff, as a vector: 1.6e-3
    # measured at posterior draws (the scipy-vs-diffrax discretisation gap, which central
    # differences share; componentwise it reaches ~1 % to 30 % where a component of the gradient
    # is near 0 at the mode, so that is reported, not tested); 5 % catches a wrong step, sign or
    # scale. Against central differences of the same scipy log pi: 4.5e-4 measured
    assert check["max_norm_rel_gradient_error_fd_vs_autodiff"] < 0.05
    assert check["max_rel_gradient_error_forward_vs_central"] < 1e-2

    for method in CABIN_METHODS:
        row = report[method]
        assert row["all_finite"], method
        assert 0 < row["acceptance"] <= 1, method
        assert row["ess_bulk_min"] > 0 and row["ess_per_second"] > 0, method
        assert set(row["mean"]) == names and all(np.isfinite(row["sd"][n]) for n in names), method
    # forward differences: 1 + n solves per step (fewer only for proposals outside the prior box)
    fd = report["fd"]
    assert fd["differences"] == "forward" and fd["solves_per_evaluation"] == 1 + len(names)
    assert fd["n_steps"] < fd["solves"] <= (fd["n_steps"] + 1) * (1 + len(names))
    # the same kernel as jcalib's Laplace-preconditioned chains, with their adapted step after warm-up
    lap = report["jcalib_laplace"]
    assert fd["preconditioner"] == "laplace" and fd["compared_with"] == "jcalib_laplace"
    assert fd["step_size_h"] == pytest.approx(lap["step_size_h"] * lap["step_size_factor"], rel=1e-12)
    assert fd["step_sizes"] == lap["step_sizes"]
    # a well-posed posterior: the Laplace sd of every free parameter is a small part of its box
    assert max(report["laplace_sd_over_box_width"].values()) < 0.1

    # the chains see the same posterior: means within a few Laplace sd (all start at the truth)
    sd = np.sqrt(np.diagonal(np.asarray(lap["preconditioner"])))
    means = {m: np.asarray(report[m]["mean_internal"]) for m in CABIN_METHODS}
    for a in CABIN_METHODS:
        for b in CABIN_METHODS:
            assert np.all(np.abs(means[a] - means[b]) < 4 * sd), (a, b, means, sd)
    # the ratios follow from the report's own rows (consistency, not a speed threshold)
    ratios = report["ratios"]
    assert ratios["fd_compared_with"] == "jcalib_laplace"
    expected = {"same_algorithm_vs_fd": lap["ess_per_second"] / fd["ess_per_second"],
                "same_algorithm_vs_fd_at_equal_ess_per_step":
                    lap["ess_per_second"] / fd["ess_per_second_at_jcalib_ess_per_step"],
                "same_algorithm_vs_fd_at_equal_ess_per_step_compiled":
                    lap["ess_per_second_compiled"] / fd["ess_per_second_at_jcalib_ess_per_step"],
                "jcalib_vs_fd": report["jcalib"]["ess_per_second"] / fd["ess_per_second"]}
    for key, value in expected.items():
        assert ratios[key] == pytest.approx(value, rel=1e-12), key
    assert fd["ess_per_second_at_jcalib_ess_per_step"] == pytest.approx(
        lap["ess_per_chain_step"] / fd["s_per_step"], rel=1e-12)
    assert 0 <= lap["compile_in_run_s"] <= lap["run_s"]
    assert set(report["profile"]) >= {"fd_s_per_step", "fd_solves_per_step", "jcalib_laplace_s_per_chain_step"}
