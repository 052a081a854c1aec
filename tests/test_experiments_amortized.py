"""experiments/cabin_iterative_identification.py --quick: both workflows run on the cabin and the
metrics carry the paper's numbers next to ours (a smoke test: tiny networks, 2 epochs)."""

import json

import pytest

from tests.helpers import load_script


@pytest.mark.slow  # ~75 s of CPU: a PELS-VAE, 3 posterior networks on 19 parameters and the Sobol' designs
def test_cabin_iterative_identification_quick(tmp_path):
    metrics = load_script("experiments/cabin_iterative_identification.py").main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("identification.png", "identification_one_shot.png", "recovery.png", "recovery_one_shot.png",
                 "outputs.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert metrics["paper"]["mean_relative_error_percent"] == 1.62 and metrics["paper"]["n_covered"] == 16
    assert metrics["split"] == [80, 19, 1]
    for label in ("iterative", "one_shot"):
        summary = metrics[label]["summary"]
        assert summary["n_parameters"] == 19
        assert sorted(sum(summary["groups"], [])) == sorted(metrics["truth"])
        assert 0 <= summary["n_covered"] <= 19 and summary["mean_relative_error_percent"] > 0
        assert summary["output_mae_degC"] > 0
    iterative = metrics["iterative"]["result"]
    assert iterative["steps"][0]["generator"] == "model"
    assert all(s["generator"] == "surrogate" for s in iterative["steps"][1:])
    assert len(iterative["steps"]) <= 2  # --quick: max_steps 2
    assert metrics["config"]["regenerate_observation"] is True
    assert "| mean ER [%] |" in (tmp_path / "report.md").read_text()
