"""`jcalib amortize` and `jcalib identify` at tiny sizes, and their errors for bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import jcalib
from jcalib.bayes.recovery import recovery_metrics
from jcalib.cli import app
from jcalib.nn.bayesflow import AmortizedPosterior

runner = CliRunner()
TINY = ["--epochs", "2", "--summary", "mlp", "--n-blocks", "1", "--hidden", "8", "--batch-size", "16"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::jcalib.nn.bayesflow.PosteriorLeakageWarning")  # 2 epochs: under-trained
def test_amortize_writes_posterior_and_metrics(tmp_path):
    out = tmp_path / "amortize"
    result = runner.invoke(app, ["amortize", "four_substance_reactions", "--n-train", "64", "--n-val", "16",
                                 "--n-samples", "10", "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_train"] == 64 and metrics["recovery"]["names"] == ["kab", "kac", "kad"]
    assert (out / "recovery.png").stat().st_size > 0
    posterior = AmortizedPosterior.load(out / "posterior.msgpack")
    assert posterior.names == ("kab", "kac", "kad")
    # the written recovery metrics are those of the saved posterior on the validation set the seed
    # gives (simulate_training_set with the second of four keys; posterior draws with the third)
    model = jcalib.models.get("four_substance_reactions")
    _, k_val, k_draw, _ = jax.random.split(jax.random.key(0), 4)
    thetas, xs = jcalib.nn.simulate_training_set(k_val, model, 16)
    draws = np.asarray(posterior.sample(k_draw, jnp.asarray(xs), 10), np.float64).reshape(16, 10, 3)
    expected = recovery_metrics(thetas, draws, space=model.parameters).to_dict()
    for key in ("coverage", "rmse", "r2", "nrmse", "relative_error", "sd_normalised", "contraction"):
        np.testing.assert_allclose([metrics["recovery"][key][n] for n in posterior.names],
                                   [expected[key][n] for n in posterior.names], rtol=1e-9, err_msg=key)
    coverage = np.array(list(metrics["recovery"]["coverage"].values()))
    np.testing.assert_array_equal(coverage * 16, np.round(coverage * 16))  # a count of the 16 truths


@pytest.mark.slow  # ~30 s: Sobol' selection and two posterior networks per step
def test_identify_on_simulated_data(tmp_path):
    csv = tmp_path / "data.csv"
    assert runner.invoke(app, ["simulate", "four_substance_reactions", "--csv", str(csv)]).exit_code == 0
    out = tmp_path / "identify"
    result = runner.invoke(app, ["identify", "four_substance_reactions", "--data", str(csv), "--n-train", "64",
                                 "--n-val", "16", "--generator", "model", "--n-sobol", "4", "--max-steps", "2",
                                 "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["names"] == ["kab", "kac", "kad"] and metrics["n_covered"] is None  # no truth for measured data
    assert sorted(sum(metrics["groups"], [])) == ["kab", "kac", "kad"]
    lines = (out / "estimates.csv").read_text().splitlines()
    assert lines[0].startswith("parameter,estimate,sd") and len(lines) == 4
    assert all(np.isfinite(float(line.split(",")[1])) for line in lines[1:])
    for name in ("identification.png", "recovery.png", "fit.png"):
        assert (out / name).stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (["amortize", "nope"], "unknown model 'nope'"),
    (["amortize", "four_substance_reactions", "--summary", "transformer"], "--summary must be one of"),
    (["amortize", "four_substance_reactions", "--n-train", "1"], "--n-train must be at least 2"),
    (["amortize", "four_substance_reactions", "--epochs", "0"], "--epochs must be a positive integer"),
    (["identify", "four_substance_reactions", "--data", "missing.csv"], "no such file"),
    (["identify", "four_substance_reactions", "--data", "x.csv", "--generator", "vae"], "--generator must be one of"),
])
def test_bad_input_gives_clear_error(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in json.dumps(result.output)


@pytest.mark.slow
def test_identify_refuses_data_at_other_times(tmp_path):
    csv = tmp_path / "data.csv"
    assert runner.invoke(app, ["simulate", "four_substance_reactions", "--times", "0,10,100",
                               "--csv", str(csv)]).exit_code == 0
    result = runner.invoke(app, ["identify", "four_substance_reactions", "--data", str(csv), "--n-train", "8",
                                 "--n-val", "4"])
    assert result.exit_code == 2
    assert "model.with_times" in json.dumps(result.output)
