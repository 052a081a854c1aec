"""The demo and the benchmark run end to end at small size and write what they promise."""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(relative):
    spec = importlib.util.spec_from_file_location(relative.replace("/", "_")[:-3], ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_writes_metrics_and_figures(tmp_path):
    metrics = _load("experiments/demo.py").main(["--out", str(tmp_path), "--quick"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    for name in ("recipe1_fit.png", "singular_values.png", "data_recipe1.csv"):
        assert (tmp_path / name).stat().st_size > 0
    spectra = saved["simple_model_jacobian"]["spectra"]
    # Wulkow 2021 structure: [M] alone leaves f/ktc correlated, Mw breaks it
    assert spectra["M (f, ktc)"]["condition_number"] > 100
    assert spectra["M+Mw (f, ktc)"]["condition_number"] < 20
    assert spectra["M (f, ktc)"]["n_essential_directions"] == 1
    assert spectra["M+Mw (f, ktc)"]["n_essential_directions"] == 2


@pytest.mark.parametrize("case", ["four_substance_reactions", "radical_polymerization_real_qss"])
def test_benchmark_quick(tmp_path, case):
    out = tmp_path / "bench.json"
    report = _load("benchmarks/simulate_batch.py").main(["--quick", "--cases", case,
                                                          "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    (result,) = report["results"]
    assert result["scipy_failures"] == 0
    # same answers as scipy within the model's tolerance (QSS: its error vs the full model)
    assert result["max_rel_difference"] < (1e-3 if case.endswith("qss") else 1e-5)
