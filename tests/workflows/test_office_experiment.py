"""experiments/office_surrogate_calibration.py --quick: both tables of Aka et al. 2023 are written,
counted consistently and carry the paper's numbers (a smoke test: tiny networks and budgets)."""

import json

import numpy as np
import pytest

from tests.helpers import load_script


@pytest.mark.slow  # ~50 s: trains PELS-VAEs and runs every direct method
def test_office_surrogate_calibration_quick(tmp_path):
    script = load_script("experiments/office_surrogate_calibration.py")
    metrics = script.main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "polish.png").stat().st_size > 0
    tables = (tmp_path / "tables.md").read_text()
    assert "## Table 3" in tables and "## Table 4" in tables

    rows = {r["method"].split(" (")[0]: r for r in metrics["table3"]}
    methods = ("LS-TRF", "SLSQP", "Nelder-Mead", "Powell")
    assert set(rows) == ({f"{m} with initial guess" for m in methods} | {f"{m} with 2 starts" for m in methods}
                         | {"LS-TRF with initial guess, scipy tolerances 1e-8", "Diff. Evolution"})
    for r in rows.values():
        # the paper's currency: a forward-mode Jacobian of 14 parameters counts as 14 forward differences
        assert r["n_simulations"] > 0 and r["fd_calls"] == r["n_simulations"] + 14 * r["n_jacobians"]
        assert r["mse"] is not None and r["paper_model_calls"] is not None or r["method"].endswith("2 starts")
    assert rows["LS-TRF with initial guess"]["paper_model_calls"] == 261
    assert rows["Diff. Evolution"]["paper_model_calls"] == 748020
    assert rows["Nelder-Mead with initial guess"]["n_jacobians"] == 0
    assert rows["Nelder-Mead with initial guess"]["n_simulations"] <= 41  # the quick budget (40) + final point
    # every multistart's first start is the initial guess: two starts cost more and fit no worse
    for m in methods:
        one, two = rows[f"{m} with initial guess"], rows[f"{m} with 2 starts"]
        assert two["n_simulations"] > one["n_simulations"] and two["mse"] <= one["mse"], m
    # LS-TRF stops on the plateau: recomputed on the same start run to scipy's tolerances (the same
    # iterates), the rule first holds at the step where the plateau-stopped run ended
    plateau, reference = rows["LS-TRF with initial guess"], rows["LS-TRF with initial guess, scipy tolerances 1e-8"]
    window, rtol = script.PLATEAU["plateau_window"], script.PLATEAU["plateau_rtol"]
    losses = reference["loss_history"]
    holds = [k for k in range(window, len(losses)) if losses[k - window] - losses[k] <= rtol * losses[k - window]]
    assert plateau["reason"].startswith("converged: plateau") and plateau["n_jacobians"] == holds[0] + 1
    assert plateau["mse"] == losses[holds[0]] >= reference["mse"]
    de = rows["Diff. Evolution"]
    assert de["n_simulations"] == 20 * 3 and de["generations"] == 2  # population 20, capped at 2 generations
    assert len(de["best_loss_history"]) == 2 and de["mse"] == min(de["best_loss_history"])
    comparison = (tmp_path / "paper_comparison.md").read_text()
    # header + one row per Table 3 method of the paper, per Table 4 size, and the claim on n_train <= 128
    n_rows = sum(r["paper_model_calls"] is not None for r in metrics["table3"]) + len(metrics["table4"]) + 1
    assert comparison.count("\n| ") == 1 + n_rows

    table4 = metrics["table4"]
    assert [r["n_train"] for r in table4] == [32, 64]
    for r in table4:
        assert r["n_total"] == r["n_train"] + r["n_opt_simulations"]
        assert r["fd_calls_total"] == r["n_total"] + 14 * r["n_opt_jacobians"] == r["n_train"] + r["n_opt_fd"]
        # the plateau-stopped polish is a prefix of the same polish run to scipy's tolerances
        details = metrics["surrogates"][str(r["n_train"])]
        stopped, full = details["polish_loss_history"], details["reference_polish_loss_history"]
        assert stopped == full[: len(stopped)] and r["reference_polish"]["mse"] <= r["mse_after_polish"]
        assert r["gap"] == r["mse_model_at_surrogate_optimum"] - r["mse_surrogate_de"]
        # the table's test MAE is the PELS-VAE evaluation's, whose outputs all have n_test x n_times
        # elements: the overall MAE is the mean of the per-output MAEs
        test_errors = metrics["surrogates"][str(r["n_train"])]["test_errors"]
        np.testing.assert_allclose(r["test_mae_K"], np.mean(test_errors["mae"]), rtol=1e-12)
        assert len(test_errors["names"]) == len(test_errors["mae"]) >= 1
        np.testing.assert_allclose(np.asarray(test_errors["scaled_mae"]) * np.asarray(test_errors["scale"]),
                                   test_errors["mae"], rtol=1e-12)  # MAE in units of the training sd
        # the paper's block is the script's PAPER_TABLE4 row (not constants restated here)
        assert r["paper"] == dict(zip(("mse_surrogate_de", "mse_model_at_surrogate_optimum", "n_opt",
                                       "mse_after_polish", "n_total"), script.PAPER_TABLE4[r["n_train"]]))
        # the polish on the true model lowers the MSE at the surrogate optimum to a good fit
        assert r["mse_after_polish"] < r["mse_model_at_surrogate_optimum"]
        assert r["mse_after_polish"] < 0.05  # K²; the noise floor is ~0.01
        assert r["n_surrogate_evaluations"] == 20 * (1 + r["de_generations"])
    assert metrics["setup"]["n_times"] == 63 and metrics["quick"] is True
