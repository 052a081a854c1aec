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
    assert set(rows) == {"LS-TRF with initial guess", "SLSQP with initial guess", "Nelder-Mead with initial guess",
                         "Powell with initial guess", "LS-TRF with 2 starts", "Diff. Evolution"}
    for r in rows.values():
        assert r["n_simulations"] > 0 and r["fd_calls"] == r["n_simulations"] + 14 * r["n_jacobians"]
        assert r["mse"] is not None and r["paper_model_calls"] is not None or r["method"].endswith("2 starts")
    assert rows["LS-TRF with initial guess"]["paper_model_calls"] == 261
    assert rows["Nelder-Mead with initial guess"]["n_jacobians"] == 0
    assert rows["Nelder-Mead with initial guess"]["n_simulations"] <= 41  # the quick budget (40) + final point
    # the multistart's first start is the initial guess: two starts cost more and fit no worse
    one, two = rows["LS-TRF with initial guess"], rows["LS-TRF with 2 starts"]
    assert two["n_simulations"] > one["n_simulations"] and two["mse"] <= one["mse"]
    assert rows["Diff. Evolution"]["n_simulations"] == 20 * 3  # population 20, 2 generations
    comparison = (tmp_path / "paper_comparison.md").read_text()  # header + one row per Table 3 method of the paper
    assert comparison.count("\n| ") == 1 + sum(r["paper_model_calls"] is not None for r in metrics["table3"])

    table4 = metrics["table4"]
    assert [r["n_train"] for r in table4] == [32, 64]
    for r in table4:
        assert r["n_total"] == r["n_train"] + r["n_opt_simulations"]
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
