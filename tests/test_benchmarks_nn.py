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


def _check_bayesflow_side(side, n_train, epochs, n_obs, n_samples):
    tr, sa = side["training"], side["sampling"]
    assert tr["n_train"] == n_train and tr["epochs"] == epochs and len(tr["epoch_time_s"]) == epochs
    assert np.all(np.isfinite(tr["loss"])) and tr["samples_per_second"] > 0
    # the throughput leaves out the first (compiling) epoch: n_train (epochs - 1) / their seconds
    assert np.isclose(tr["samples_per_second"], n_train * (epochs - 1) / sum(tr["epoch_time_s"][1:]), rtol=1e-6)
    assert len(tr["epoch_cpu_s"]) == epochs and min(tr["epoch_cpu_s"]) > 0 and tr["samples_per_cpu_second"] > 0
    assert tr["samples_per_second_best_epoch"] >= tr["samples_per_second_median_epoch"] > 0
    assert sa["n_obs"] == n_obs and sa["n_samples"] == n_samples and sa["all_finite"]
    assert sa["first_call_s"] > 0 and sa["median_s"] > 0 and sa["compile_s_estimate"] >= 0
    sbc = side["sbc"]
    names = ["omega", "zeta", "amplitude", "phase"]
    assert sbc["ranks_shape"] == [n_obs, 4] and sbc["n_sims"] == n_obs and sbc["n_draws"] == n_samples
    assert list(sbc["p_values"]) == names and all(0.0 <= p <= 1.0 for p in sbc["p_values"].values())
    assert np.all(np.sum(sbc["rank_histogram"], axis=1) == n_obs)  # every rank lands in one bin
    assert sbc["all_passed"] == all(sbc["passed"].values())


@pytest.mark.slow
def test_bayesflow_benchmark_quick_jcalib_side(tmp_path):
    """benchmarks/bayesflow.py --quick --no-reference: jcalib's side only (nothing installed), two
    configurations (the LSTM and the convolutional summary network) in one report."""
    out = tmp_path / "bayesflow.json"
    report = load_script("benchmarks/bayesflow.py").main(["--quick", "--no-reference", "--configs", "lstm:64,conv:128",
                                                          "--n-train", "300", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["benchmark"] == "bayesflow" and report["quick"]
    p = report["problem"]
    assert (p["n_params"], p["n_times"], p["n_outputs"], p["n_train"], p["n_obs"]) == (4, 20, 2, 300, 32)
    # n_train is rounded down to a multiple of each configuration's batch size
    assert report["configurations"] == [{"summary": "lstm", "batch_size": 64, "n_train": 256},
                                        {"summary": "conv", "batch_size": 128, "n_train": 256}]
    assert [run["configuration"] for run in report["runs"]] == report["configurations"]
    for run, summary, batch_size in zip(report["runs"], ("lstm", "conv"), (64, 128)):
        ours = run["jcalib"]
        _check_bayesflow_side(ours, 256, 3, 32, 100)
        assert ours["configuration"]["summary"] == summary and ours["network"]["summary_network"] == summary
        assert ours["training"]["batch_size"] == batch_size
        assert 0 < ours["network"]["n_summary_weights"] < ours["network"]["n_weights"]
        assert run["bayesflow"] == {"skipped": "--no-reference"}
        assert set(run["ratios"]) == {"target_training_throughput_ratio"}
    # hidden 16, summary 8: LSTM 4*16*(2+16)+4*16, conv 5*2*16+16 + 3*16*16+16, each + dense 16*8+8
    assert [run["jcalib"]["network"]["n_summary_weights"] for run in report["runs"]] == [1352, 1096]
    assert [(row["summary"], row["batch_size"], row["ratio"]) for row in report["table"]] == [("lstm", 64, None),
                                                                                            ("conv", 128, None)]
    assert report["best"] is None and report["target_met"] is None
    assert report["machine"]["cpu_count"] > 0


@pytest.mark.parametrize("args, match", [
    (["--epochs", "1"], "need --epochs >= 2"),
    (["--n-train", "10"], "--n-train must be at least the batch size"),
    (["--summary", "gru"], "unknown summary network 'gru'; known: lstm, conv"),
    (["--configs", "lstm:64,transformer:64"], "unknown summary network 'transformer'"),
    (["--configs", "lstm64"], "entries are SUMMARY:BATCH_SIZE"),
    (["--configs", "conv:0"], "batch size must be at least 1"),
    (["--configs", "conv:64,conv:64"], "lists a configuration twice"),
    (["--configs", "conv:64", "--batch-size", "32"], "either --configs or --summary/--batch-size"),
    (["--configs", "conv:64", "--summary", "lstm"], "either --configs or --summary/--batch-size"),
])
def test_bayesflow_benchmark_bad_arguments(tmp_path, args, match):
    with pytest.raises(ValueError, match=match):
        load_script("benchmarks/bayesflow.py").main(["--quick", "--no-reference", "--out", str(tmp_path / "x.json"),
                                                     *args])


@pytest.mark.slow  # installs bayesflow into results/benchmarks/bayesflow-venv (PyPI) on its first run, ~2-3 min
def test_bayesflow_benchmark_quick_with_reference(tmp_path):
    out = tmp_path / "bayesflow.json"
    report = load_script("benchmarks/bayesflow.py").main(["--quick", "--configs", "lstm:64,conv:64", "--out", str(out)])
    for run in report["runs"]:
        ref = run["bayesflow"]
        assert "error" not in ref, ref.get("error")
        assert ref["keras_backend"] == "jax" and ref["versions"]["bayesflow"].startswith("2.")
        assert ref["versions"]["jax"] == report["machine"]["jax"]  # the same XLA on both sides
        assert ref["configuration"] == run["configuration"]
        # the same summary network on both sides: same layers, same number of weights
        assert ref["network"]["summary_network"] == run["jcalib"]["network"]["summary_network"]
        assert ref["network"]["summary"] == run["jcalib"]["network"]["summary"]
        assert ref["network"]["n_summary_weights"] == run["jcalib"]["network"]["n_summary_weights"]
        for side in (run["jcalib"], ref):
            _check_bayesflow_side(side, 256, 3, 32, 100)
        r = run["ratios"]
        assert np.isclose(r["training_throughput_jcalib_over_bayesflow"],
                          run["jcalib"]["training"]["samples_per_second"] / ref["training"]["samples_per_second"])
        assert r["sampling_time_bayesflow_over_jcalib"] > 0 and isinstance(r["target_met"], bool)
    assert report["best"]["ratio"] == max(row["ratio"] for row in report["table"])
    assert isinstance(report["target_met"], bool)
