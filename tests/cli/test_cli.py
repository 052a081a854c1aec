import json
import os
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import jcalib
import jcalib.plotting
from jcalib.bayes import PosteriorResult
from jcalib.cli import app
from jcalib.data import Measurements

runner = CliRunner()


def test_models_table_lists_every_model():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for name in jcalib.models.available():
        assert name in result.output


def test_models_show_parameter_table():
    result = runner.invoke(app, ["models", "show", "four_substance_reactions"])
    assert result.exit_code == 0, result.output
    assert "kab" in result.output and "L/(mol*s)" in result.output
    assert "22 observation times" in result.output


@pytest.mark.slow
def test_simulate_writes_csv_and_plot(tmp_path):
    csv, png = tmp_path / "out.csv", tmp_path / "out.png"
    result = runner.invoke(app, ["simulate", "four_substance_reactions", "--set", "kab=2e-4",
                                 "--times", "0,10,100", "--csv", str(csv), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    table = Measurements.from_csv(csv)
    np.testing.assert_array_equal(np.asarray(table.ts), [0.0, 10.0, 100.0])
    assert table.output_names == ("A", "B", "C", "D")
    a = np.asarray(table.values)[:, 0]
    assert a[0] == 10.0 and a[2] < a[1]
    assert png.stat().st_size > 10_000


def test_installed_entry_point_simulates_in_a_subprocess(tmp_path):
    """The one real-subprocess CLI call of `make test`: the ``jcalib`` script that pip installed
    beside this interpreter starts, simulates and writes its CSV (the tests below call the same
    app in-process), and keeps what it compiled in its persistent cache for the next run."""
    script = pathlib.Path(sys.executable).with_name("jcalib")
    csv = tmp_path / "out.csv"
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "JCALIB_COMPILATION_CACHE")}
    done = subprocess.run([str(script), "simulate", "four_substance_reactions", "--times", "0,10,100",
                           "--csv", str(csv)], capture_output=True, text=True, timeout=300,
                          env=env | {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert Measurements.from_csv(csv).output_names == ("A", "B", "C", "D")
    assert any((tmp_path / "cache" / "jcalib" / "jax").iterdir())


@pytest.mark.parametrize("args, message", [
    (["simulate", "four_substance_reactions", "--set", "kda=1"], "unknown parameter 'kda'"),
    (["simulate", "four_substance_reactions", "--set", "kab=1"], "outside its bounds"),
    (["simulate", "four_substance_reactions", "--set", "kab"], "expects name=value"),
    (["simulate", "four_substance_reactions", "--times", "5,1"], "non-decreasing"),
    (["simulate", "nope"], "unknown model 'nope'"),
    (["models", "show", "four_substance_reactions", "--option", "observe=X"], "observe must be"),
])
def test_bad_input_gives_clear_error(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in json.dumps(result.output) and "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize("name", jcalib.models.available())
def test_every_model_shows_its_table_and_plots_all_outputs(name, tmp_path, monkeypatch):
    model = jcalib.models.get(name)
    shown = runner.invoke(app, ["models", "show", name])
    assert shown.exit_code == 0, shown.output
    for p in model.parameters:
        assert p.name in shown.output
    for cname in model.constants():
        assert cname in shown.output

    figures = []
    real_plot = jcalib.plotting.plot_simulation
    monkeypatch.setattr(jcalib.plotting, "plot_simulation",
                        lambda *a, **k: figures.append(real_plot(*a, **k)) or figures[-1])
    png = tmp_path / f"{name}.png"
    result = runner.invoke(app, ["simulate", name, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 10_000
    panels = [ax for ax in figures[0].axes if ax.get_visible()]
    assert [ax.get_ylabel() for ax in panels] == list(model.output_names)
    for ax in panels:  # every output drawn over all observation times with finite values
        (line,) = ax.get_lines()
        assert line.get_xdata().size == model.experiment.n_times
        assert np.isfinite(line.get_ydata()).sum() > 0


@pytest.mark.slow
def test_sensitivity_sobol_writes_indices_selection_and_figures(tmp_path):
    result = runner.invoke(app, ["sensitivity", "four_substance_reactions", "--method", "sobol",
                                 "--n", "64", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["sobol"]["n_simulations"] == 64 * (3 + 2)
    # all three rate constants move A..D: Algorithm 1 keeps them, K = max(r(0,1), r(1,2))
    assert sorted(metrics["selection"]["selected"]) == ["kab", "kac", "kad"]
    for name in ("sobol_over_time.png", "sorted_indices.png"):
        assert (tmp_path / name).stat().st_size > 10_000


@pytest.mark.slow
def test_sensitivity_identifiability_reports_rank_and_flat_direction(tmp_path):
    # A only: kac and kad enter through their sum -> rank 2, one flat direction
    result = runner.invoke(app, ["sensitivity", "four_substance_reactions", "--method",
                                 "identifiability", "--option", "observe=A", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "metrics.json").read_text())["identifiability"]
    assert report["rank"] == 2 and report["jacobian"]["n_essential"] == 2
    assert "rank 2 of 3" in result.output
    assert (tmp_path / "sigma_min_spectrum.png").stat().st_size > 10_000


@pytest.mark.slow
def test_sensitivity_local_and_bad_method(tmp_path):
    result = runner.invoke(app, ["sensitivity", "four_substance_reactions", "--method", "local",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    s = np.asarray(json.loads((tmp_path / "metrics.json").read_text())["relative_sensitivities"])
    assert s.shape == (22, 4, 3)
    bad = runner.invoke(app, ["sensitivity", "four_substance_reactions", "--method", "sobolx"])
    assert bad.exit_code == 2 and "--method must be one of" in bad.output


@pytest.fixture(scope="module")
def reactions_csv(tmp_path_factory):
    """Noise-free four_substance_reactions data at the nominal parameters, as a CSV."""
    path = tmp_path_factory.mktemp("data") / "reactions.csv"
    result = runner.invoke(app, ["simulate", "four_substance_reactions", "--csv", str(path)])
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gauss-newton", "trf"])
def test_calibrate_recovers_nominal_from_noise_free_data(tmp_path, reactions_csv, method):
    result = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--method", method, "--free", "kab,kac", "--start", "kab=2e-5",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    nominal = jcalib.models.get("four_substance_reactions").parameters
    for name in ("kab", "kac"):
        np.testing.assert_allclose(metrics["result"]["estimate"][name], nominal[name].nominal, rtol=1e-6)
    assert set(metrics["result"]["estimate"]) == {"kab", "kac"}  # kad stayed at its nominal value
    assert f"; {metrics['result']['n_steps']} steps, {metrics['result']['n_simulations']} simulations" in result.output
    for name in ("fit.png", "residuals.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_calibrate_bad_input(tmp_path, reactions_csv):
    bad_method = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv),
                                     "--method", "newton"])
    assert bad_method.exit_code == 2 and "--method must be one of" in bad_method.output
    not_free = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv),
                                   "--free", "kab", "--start", "kad=1e-5"])
    assert not_free.exit_code == 2 and "--start: kad not free" in not_free.output
    missing = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data",
                                  str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2 and "nope.csv" in missing.output


@pytest.mark.slow  # ~90 s cold
def test_calibrate_several_experiments_jointly(tmp_path, reactions_csv):
    """--data twice: the nominal-A0 file and one at A0 = 5 (--condition), kad per experiment;
    noise-free data give the nominal parameters back, with kad[<stem>] names."""
    from jcalib.data import Measurements
    from jcalib.model import Experiment

    base = jcalib.models.get("four_substance_reactions")
    low = base.with_experiment(Experiment(np.asarray(base.ts), t0=float(base.experiment.t0), conditions={"A0": 5.0}))
    path = tmp_path / "low.csv"
    Measurements(low.ts, np.asarray(low.simulate(jnp.asarray(base.parameters.nominal))),
                 output_names=low.output_names).to_csv(path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--data", str(path), "--condition", "low:A0=5", "--per-experiment", "kad",
                                 "--free", "kab,kac", "--weighting", "absolute", "--out", str(out)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    estimate = metrics["result"]["estimate"]
    assert set(estimate) == {"kab", "kac", "kad[reactions]", "kad[low]"}
    for name, value in estimate.items():
        np.testing.assert_allclose(value, base.parameters[name.split("[")[0]].nominal, rtol=1e-6)
    assert metrics["data"] == [str(reactions_csv), str(path)]
    bad = runner.invoke(app, ["calibrate", "four_substance_reactions", "--data", str(reactions_csv),
                              "--data", str(path), "--condition", "nope:A0=5"])
    assert bad.exit_code == 2 and "EXPERIMENT one of" in bad.output
    sampled = runner.invoke(app, ["sample", "four_substance_reactions", "--data", str(reactions_csv),
                                  "--data", str(path), "--condition", "low:A0=5", "--free", "kab,kac",
                                  "--likelihood", "absolute", "--sigma", "0.01", "--steps", "60", "--burn", "0",
                                  "--chains", "2", "--warmup", "30", "--out", str(tmp_path / "sample")])
    assert sampled.exit_code == 0, sampled.output
    posterior = json.loads((tmp_path / "sample" / "metrics.json").read_text())
    assert set(posterior["band_coverage_of_data"]) == {"reactions", "low"}
    assert (tmp_path / "sample" / "bands_low.png").exists()


@pytest.mark.slow  # ~45 s of compiles per preconditioner
@pytest.mark.parametrize("preconditioner", ["diagonal", "laplace"])
def test_sample_writes_posterior_metrics_and_figures(tmp_path, reactions_csv, preconditioner):
    # noise-free data at the nominal point: the chains start at the Gauss-Newton estimate (the
    # truth) and the 90 % intervals must contain it
    result = runner.invoke(app, ["sample", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--sigma", "0.05", "--steps", "300", "--burn", "50", "--chains", "2",
                                 "--warmup", "100", "--preconditioner", preconditioner, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    posterior = PosteriorResult.load(tmp_path / "posterior.npz")
    assert posterior.samples.shape == (2, 300, 3) and np.all(np.isfinite(posterior.samples))
    assert metrics["posterior"]["names"] == ["kab", "kac", "kad"]
    assert 0.3 < metrics["posterior"]["acceptance"] < 0.9
    nominal = jcalib.models.get("four_substance_reactions").parameters.nominal
    lo, hi = posterior.interval(0.9)
    assert np.all((lo < nominal) & (nominal < hi)), (lo, nominal, hi)
    assert metrics["gauss_newton"]["converged"]
    assert metrics["band_coverage_of_data"] > 0.8
    for name in ("marginals.png", "trace.png", "bands.png", "pair.png"):
        assert (tmp_path / name).stat().st_size > 10_000


@pytest.mark.parametrize("args, message", [
    ([], "no noise level"),
    (["--sigma", "0.1", "--sample-sigma"], "not both"),
    (["--sigma", "0.1", "--likelihood", "poisson"], "--likelihood must be one of"),
    (["--sigma", "0.1", "--free", "kab,kxy"], "unknown parameter 'kxy'"),
    (["--sigma", "-1"], "sigma must be positive"),
    (["--sigma", "0.1", "--chains", "0"], "n_chains must be a positive integer"),
    (["--sigma", "0.1", "--preconditioner", "full"], "diagonal or laplace"),
])
def test_sample_bad_input(reactions_csv, args, message):
    result = runner.invoke(app, ["sample", "four_substance_reactions", "--data", str(reactions_csv),
                                 "--no-gauss-newton", *args])
    assert result.exit_code == 2
    assert message in json.dumps(result.output)
