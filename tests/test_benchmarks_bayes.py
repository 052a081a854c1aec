"""benchmarks/mala.py runs end to end in quick mode (a few dozen steps per sampler on the
polymerization Test-2 posterior) and writes what it promises; no timing assertions."""

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
