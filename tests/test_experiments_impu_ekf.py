"""experiments/roll_plane_impu_vs_ekf.py and benchmarks/impu.py run end to end in quick mode
and write what they promise (no timing assertions; the numbers of quick runs say little)."""

import json

import numpy as np
import pytest

from tests.helpers import load_script


def test_figure_has_ekf_line_and_p_ref_markers():
    """Fig. 19's layout from synthetic numbers (no training): one panel per parameter, test
    curves, p_ref markers and the EKF's dash-dotted line at its error."""
    script = load_script("experiments/roll_plane_impu_vs_ekf.py")
    sizes = (10, 100)
    impu = {f: {"test_mare": np.array([[0.05, 0.04], [0.01, 0.02]]),
                "p_ref_mean_abs_relative_error": np.array([[0.03, 0.02], [0.004, 0.003]])}
            for f in script.FEATURES}
    fig = script.figure(sizes, impu, np.array([0.002, 0.001]), ("kt1", "kt2"))
    ax = fig.axes[0]
    ekf = [line for line in ax.lines if line.get_linestyle() == "-."]
    assert len(ekf) == 1 and ekf[0].get_ydata()[0] == pytest.approx(0.2)
    assert len(ax.lines) == 2 * len(script.FEATURES) + 1


def test_ekf_configurations():
    """The paper-configured EKF takes the description literally (physical N/m, P0 the box-uniform
    variance, Q = 0, R = (1 % of the measured value + floor)²); the tuned one keeps run_ekf's
    defaults with R at the prediction."""
    import jcalib
    from jcalib.filters.ekf import RelativeMeasurementNoise

    script = load_script("experiments/roll_plane_impu_vs_ekf.py")
    model = jcalib.models.get("roll_plane")
    values = np.full((10, 4), 0.02)
    values[3, 1] = -0.5
    paper = script.ekf_options(model, "paper", values)
    assert paper["parameters"] == "physical"
    n_x = len(model.state_names)
    box_sd = (model.parameters.upper - model.parameters.lower) / np.sqrt(12)  # 11.5 % of nominal
    np.testing.assert_allclose(np.sqrt(np.diag(paper["P0"])[n_x:]), box_sd)
    assert not paper["Q"].any() and paper["R"].shape == (10, 4, 4)
    walk = script.ekf_options(model, "random_walk", values)["Q"]  # log θ random walk, states without noise
    assert not walk[:n_x].any() and np.all(np.diag(walk)[n_x:] == script.RANDOM_WALK**2)
    assert paper["R"][3, 1, 1] == pytest.approx((0.01 * 0.5 + 1e-6) ** 2)
    assert paper["R"][0, 0, 0] == pytest.approx((0.01 * 0.02 + 1e-6) ** 2) and paper["R"][0, 0, 1] == 0
    tuned = script.ekf_options(model, "tuned", values)
    assert set(tuned) == {"R"} and isinstance(tuned["R"], RelativeMeasurementNoise)
    with pytest.raises(ValueError, match="config"):
        script.ekf_options(model, "other", values)


@pytest.mark.slow  # ~45 s CPU: roll_plane simulation and EKF compiles, six tiny trainings
def test_roll_plane_impu_vs_ekf_quick(tmp_path):
    metrics = load_script("experiments/roll_plane_impu_vs_ekf.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "error_versus_training_size.png").stat().st_size > 0
    assert metrics["sizes"] == [16, 48] and metrics["n_draws"] == 3
    ekf = metrics["ekf"]
    assert ekf["all_success"] and len(ekf["estimates"]) == 3
    for name in ("kt1", "kt2"):  # the EKF moves from the nominal values towards p_ref
        assert ekf["mean_abs_relative_error"][name] < ekf["start_relative_error"][name]
        assert abs(ekf["noise_free_relative_error"][name]) < ekf["start_relative_error"][name]
        assert ekf["second_pass_mean_abs_relative_error"][name] < ekf["start_relative_error"][name]
    for feature in ("TS-dense", "MP", "RI"):
        row = metrics["impu"][feature]
        for key in ("test_mare", "p_ref_mean_abs_relative_error", "test_bias", "test_sd"):
            assert np.asarray(row[key]).shape == (2, 2)
        mare = np.asarray(row["test_mare"])
        assert np.all(np.isfinite(mare)) and np.all(mare < 0.2)  # the box spans +-20 %
        assert row["epochs"] == [15, 15]
        assert set(metrics["comparison"][feature]) >= {"smallest_n_s_with_p_ref_error_below_ekf_both_params"}
    paper = metrics["ekf_paper"]  # the paper-configured EKF: physical N/m, R at the measured values
    assert paper["all_success"] and paper["config"] == "paper" and paper["settings"]["parameters"].startswith("phys")
    for name in ("kt1", "kt2"):
        assert paper["mean_abs_relative_error"][name] < paper["start_relative_error"][name]
        # no unbiased estimator beats the Cramér-Rao bound on average; the bound is far below the prior's spread
        assert 0 < metrics["cramer_rao"]["expected_abs_relative_error"][name] < 0.01
    comparison = (tmp_path / "paper_comparison.md").read_text()
    assert comparison.count("\n| ") == 1 + 4  # header + one row per claim (Fig. 19: two EKFs, two more statements)


@pytest.mark.slow  # ~45 s CPU: double-beam and roll-plane compiles, two tiny trainings, EKF
def test_impu_benchmark_quick(tmp_path):
    out = tmp_path / "impu.json"
    report = load_script("benchmarks/impu.py").main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["benchmark"] == "impu" and report["quick"]
    beam = report["rigid_double_beam"]
    offline = beam["offline"]
    assert offline["n_train"] == 64 and offline["epochs"] == 3
    assert 0 < offline["data_generation_s_warm"] and 0 < offline["training_s"] <= offline["fit_s"]
    single = beam["online"]["single"]
    for row in (single["inference_fn_device_array"], single["inference_fn_numpy_input"], single["infer"],
                single["dispatch_floor_trivial_jit"], report["roll_plane"]["inference_fn_device_array"]):
        assert row["n_calls"] == 200
        assert 0 < row["min_us"] <= row["p5_us"] <= row["median_us"] <= row["p95_us"] <= row["p99_us"] <= row["max_us"]
    for row in beam["online"]["batch"].values():
        assert row["batch"] == 64 and row["measurements_per_s"] * row["median_s"] == pytest.approx(64)
    assert set(beam["accuracy_mare_percent"]) == {"d1", "d2", "k1", "k2"}
    rp = report["roll_plane"]
    assert rp["ekf_run_s_warm_median"] > 0 and set(rp["ekf_estimate"]) == {"kt1", "kt2"}
    assert isinstance(report["ratios"]["target_met"], bool)
    assert report["machine"]["cpu_count"] > 0 and len(report["machine"]["load_average_at_start"]) == 3
