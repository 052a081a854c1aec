"""experiments/benchmark_baseline.py (issue 38 §8) --quick: the analytic and ODE suites with two
optimizers and one short sampler run, stored and reported with the command and commit that made it."""

import pytest

from jcalib.benchmark import Store
from tests.helpers import load_script


@pytest.mark.slow  # about a minute of compiling
def test_benchmark_baseline_quick(tmp_path):
    script = load_script("experiments/benchmark_baseline.py")
    summary = script.main(["--out", str(tmp_path), "--quick"])
    assert summary["n_optimizer_runs"] == 6 * 2 * 2 and summary["n_sampler_runs"] == 1
    text = (tmp_path / "report.md").read_text()
    assert "Made by `python -m experiments.benchmark_baseline --out" in text and "at commit" in text
    assert "## Optimizers" in text and "## Samplers" in text
    frame = Store(tmp_path / "store").frame()
    assert set(frame["status"]) <= {"finished", "budget"} and frame["digest"].is_unique
    again = script.main(["--out", str(tmp_path), "--quick"])  # everything stored: nothing runs again
    assert again["n_optimizer_runs"] == summary["n_optimizer_runs"] and len(Store(tmp_path / "store").frame()) == 24 + 1
