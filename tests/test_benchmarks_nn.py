"""benchmarks/pelsvae.py runs end to end in quick mode (a tiny PELS-VAE on 96 cabin_thermal
samples, 128 generated trajectories) and writes what it promises; no timing assertions."""

import json

import numpy as np
import pytest

from tests.helpers import load_script


@pytest.mark.slow  # ~30 s of training and compiles
def test_pelsvae_benchmark_quick(tmp_path):
    out = tmp_path / "pelsvae.json"
    report = load_script("benchmarks/pelsvae.py").main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["benchmark"] == "pelsvae" and report["quick"] and report["model"] == "cabin_thermal"
    assert (report["n_params"], report["n_times"], report["n_outputs"]) == (19, 200, 4)
    assert report["n_generate"] == 128 and report["repeats"] == 2
    tr = report["training"]
    assert tr["epochs"] == 3 and tr["n_train"] == 96 and tr["samples_per_second"] > 0
    assert 1 <= tr["best_epoch"] <= 3 and np.isfinite(tr["best_val_loss"])
    for row in (report["surrogate_simulate_batch"], report["model_simulate_batch"],
                *report["surrogate_generate_jit"].values()):
        assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]
        assert row["first_call_s"] > 0 and row["compile_s_estimate"] >= 0
        assert abs(row["trajectories_per_s"] * row["median_s"] - 128) < 1e-6
    assert set(report["surrogate_generate_jit"]) == {"n_passes_20", "n_passes_0"}
    acc = report["accuracy_on_generated"]
    assert acc["n_samples"] == 128 and set(acc["mae_per_output_K"]) == {"T1", "T3", "T5", "T7"}
    assert 0 < acc["mae_K"] <= acc["max_abs_error_K"] < 100  # K: a few epochs give a rough surrogate
    # the surrogate through simulate_batch is the same function as one jitted generate call
    assert acc["simulate_batch_vs_generate_max_abs_difference_K"] < 1e-3
    r = report["ratios"]
    assert r["speedup_vs_model_simulate_batch"] > 0 and r["paper_gpu_s_over_ours_2000"] > 0
    assert isinstance(r["target_met"], bool)
    assert report["network"]["n_weights"] > 0 and report["machine"]["cpu_count"] > 0
