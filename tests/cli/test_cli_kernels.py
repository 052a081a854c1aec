"""`jcalib sample --kernel nuts`: NUTS whitened by the Laplace covariance at the Gauss-Newton
estimate, the same outputs as MALA; bad --kernel values."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import jcalib
from jcalib.bayes import PosteriorResult
from jcalib.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def reactions_csv(tmp_path_factory):
    """Noise-free four_substance_reactions data at the nominal parameters, as a CSV."""
    path = tmp_path_factory.mktemp("data") / "reactions.csv"
    result = runner.invoke(app, ["simulate", "four_substance_reactions", "--csv", str(path)])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.slow  # ~50 s cold
def test_sample_with_nuts(tmp_path, reactions_csv):
    result = runner.invoke(app, ["sample", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--sigma", "0.05", "--steps", "60", "--burn", "0", "--chains", "2",
                                 "--warmup", "40", "--kernel", "nuts", "--free", "kab,kac", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    posterior = PosteriorResult.load(tmp_path / "posterior.npz")
    assert posterior.samples.shape == (2, 60, 2) and np.all(np.isfinite(posterior.samples))
    assert posterior.method.startswith("nuts") and metrics["posterior"]["extra"]["kernel"] == "nuts"
    assert metrics["posterior"]["extra"]["metric"] == "Laplace"
    assert metrics["posterior"]["extra"]["target_acceptance"] == 0.8
    nominal = np.asarray(jcalib.models.get("four_substance_reactions").parameters.nominal)[:2]
    lo, hi = posterior.interval(0.99)
    assert np.all((lo < nominal) & (nominal < hi)), (lo, nominal, hi)
    assert np.all(np.isfinite(posterior.rhat)) and np.all(posterior.ess_bulk > 10)


@pytest.mark.parametrize("args, message", [
    (["--kernel", "gibbs"], "--kernel must be one of mala, hmc, nuts; got 'gibbs'"),
    (["--kernel", "nuts", "--preconditioner", "full"], "--preconditioner must be diagonal or laplace"),
])
def test_sample_bad_kernel(reactions_csv, args, message):
    result = runner.invoke(app, ["sample", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--sigma", "0.1", "--no-gauss-newton", *args])
    assert result.exit_code == 2
    assert message in json.dumps(result.output)
