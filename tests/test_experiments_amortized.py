"""experiments/cabin_iterative_identification.py --quick: both workflows run on the cabin and the
metrics carry the paper's numbers next to ours (a smoke test: tiny networks, 2 epochs)."""

import json

import pytest

from tests.helpers import load_script


@pytest.mark.slow  # ~75 s of CPU: a PELS-VAE, 3 posterior networks on 19 parameters and the Sobol' designs
def test_cabin_iterative_identification_quick(tmp_path):
    script = load_script("experiments/cabin_iterative_identification.py")
    metrics = script.main(["--out", str(tmp_path), "--quick"])
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    for name in ("identification.png", "identification_one_shot.png", "recovery.png", "recovery_one_shot.png",
                 "outputs.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    assert metrics["paper"] == json.loads(json.dumps(script.PAPER))  # the paper's numbers travel with ours
    assert metrics["split"] == [80, 19, 1]
    # the generator of steps > 1 is tested on new true-model samples (issue 39 (b))
    surrogate = metrics["surrogate"]["test"]
    assert surrogate["n_test"] == metrics["surrogate"]["n_test"] == 20
    assert len(surrogate["mae"]) == len(surrogate["names"]) and all(0 < m < float("inf") for m in surrogate["mae"])
    assert "MAE [°C] on 20 new uniform samples" in (tmp_path / "paper_comparison.md").read_text()
    for label in ("iterative", "one_shot"):
        summary = metrics[label]["summary"]
        assert summary["n_parameters"] == 19
        assert sorted(sum(summary["groups"], [])) == sorted(metrics["truth"])
        # the headline numbers follow from the per-parameter entries (estimate, truth, 95 % interval)
        parameters = metrics[label]["result"]["parameters"]
        assert set(parameters) == set(metrics["truth"])
        relative = {}
        for name, p in parameters.items():
            assert p["truth"] == pytest.approx(metrics["truth"][name], rel=1e-12)
            relative[name] = 100 * abs(p["estimate"] / p["truth"] - 1)
            assert p["relative_error_percent"] == pytest.approx(relative[name], rel=1e-9, abs=1e-12)
            assert p["covered"] == (p["lower"] <= p["truth"] <= p["upper"])
        assert summary["n_covered"] == sum(p["covered"] for p in parameters.values())
        assert summary["not_covered"] == [n for n, p in parameters.items() if not p["covered"]]
        assert summary["mean_relative_error_percent"] == pytest.approx(sum(relative.values()) / len(relative))
        assert summary["largest_relative_error"]["parameter"] == max(relative, key=relative.get)
        assert summary["output_mae_degC"] > 0
    iterative = metrics["iterative"]["result"]
    assert iterative["steps"][0]["generator"] == "model"
    assert all(s["generator"] == "surrogate" for s in iterative["steps"][1:])
    assert len(iterative["steps"]) <= 2  # --quick: max_steps 2
    assert metrics["config"]["regenerate_observation"] is True
    assert "| mean ER [%] |" in (tmp_path / "report.md").read_text()
    table = (tmp_path / "paper_comparison.md").read_text().splitlines()
    # one row per claim of Fig. 6 and issue 19 (step-1 candidates, ER, coverage, MAE, steps, worst,
    # uncovered set, wall time)
    assert len([line for line in table if line.startswith("|")][2:]) == 8
    assert metrics["iterative"]["summary"]["n_fallbacks"] == sum(s["fallback"] for s in iterative["steps"])
