"""The command line on bad input (issue 17): every mistake ends in one line ``error: ...`` on
stderr naming the problem and the fix, exit code 2, no traceback, and nothing computed before
the refusal (no lost work: output paths are checked before any simulation or training)."""

import importlib
import json
import logging

import numpy as np
import pytest
from typer.testing import CliRunner

import jcalib.estimation
import jcalib.model
import jcalib.sensitivity
from jcalib.bayes import mala
from jcalib.cli import app
from jcalib.data import Measurements
from jcalib.nn.bayesflow import AmortizedPosterior

runner = CliRunner()
M = "four_substance_reactions"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Paths the rows refer to: {data} a valid CSV of the model's outputs, {file} an existing
    file, {dir} a folder, {badcsv} a CSV with a wrong header, {other} data of other outputs."""
    root = tmp_path_factory.mktemp("cli")
    model = jcalib.models.get(M)
    ts = np.asarray(model.ts)
    values = 1.0 + np.arange(ts.size * 4, dtype=np.float64).reshape(ts.size, 4)
    Measurements(ts, values, output_names=model.output_names).to_csv(root / "data.csv")
    (root / "file.txt").write_text("not a folder")
    (root / "folder").mkdir()
    (root / "bad.csv").write_text("time,A\n0,1\n")
    (root / "other.csv").write_text("t,X\n0,1\n")
    return {"data": str(root / "data.csv"), "file": str(root / "file.txt"), "dir": str(root / "folder"),
            "badcsv": str(root / "bad.csv"), "other": str(root / "other.csv"), "root": root}


def _no_computation(*args, **kwargs):
    raise AssertionError("a computation ran before the refusal")


@pytest.fixture
def refuse_computation(monkeypatch):
    """Every simulation, estimator, sampler and training entry point the CLI calls fails the
    test if it is reached."""
    # imported first: a module imported while simulate_batch is patched would keep the patch for good
    workflow = importlib.import_module("jcalib.workflows.iterative_identification")
    monkeypatch.setattr(jcalib.model.AbstractModel, "simulate_with_status", _no_computation)
    monkeypatch.setattr(jcalib.model, "simulate_batch", _no_computation)
    for name in ("gauss_newton", "least_squares_trf", "differential_evolution", "multistart"):
        monkeypatch.setattr(jcalib.estimation, name, _no_computation)
    for name in ("sobol_indices", "output_sensitivities", "identifiability"):
        monkeypatch.setattr(jcalib.sensitivity, name, _no_computation)
    monkeypatch.setattr(mala, "sample", _no_computation)
    monkeypatch.setattr(AmortizedPosterior, "fit", _no_computation)
    # the package re-exports the function under the module's name: patch the module itself
    monkeypatch.setattr(workflow, "iterative_identification", _no_computation)


CAL = ["calibrate", M, "--data", "{data}"]
SAMPLE = ["sample", M, "--data", "{data}", "--sigma", "0.1", "--no-gauss-newton"]
IDENTIFY = ["identify", M, "--data", "{data}"]

ROWS = [
    # simulate: --set, --times, --csv, --plot, --option, model name
    (["simulate", M, "--set", "kab=abc"], "--set kab=abc: 'abc' is not a number; give a value such as"),
    (["simulate", M, "--set", "kab=nan"], "--set kab=nan: 'nan' is not a finite number"),
    (["simulate", M, "--set", "kab=inf"], "--set kab=inf: 'inf' is not a finite number"),
    (["simulate", M, "--set", "kab=-1e-4"], "--set: kab = -0.0001 lies outside its bounds [1e-06, 0.001]; give a value "
                                            "inside them"),
    (["simulate", M, "--set", "kda=1"], "--set: unknown parameter 'kda'; known: 'kab', 'kac', 'kad'"),
    (["simulate", M, "--set", "kab"], "--set expects name=value; got 'kab'"),
    (["simulate", M, "--times", "1,x"], "--times item 2: 'x' is not a number"),
    (["simulate", M, "--times", "0,,5"], "--times item 2: '' is not a number"),
    (["simulate", M, "--times", "5,1"], "--times: Experiment: ts must be non-decreasing"),
    (["simulate", "thermal_office_r7c4", "--times", "1800,1814400,3628800"], "input horizon 1814400"),
    (["simulate", M, "--csv", "{dir}"], "--csv file '{dir}' is a folder; give a file name"),
    (["simulate", M, "--csv", "{file}/x.csv"], "'{file}' is an existing file, not a folder; choose another path"),
    (["simulate", M, "--plot", "{root}/x.unknownext"], "unknown figure type '.unknownext'; use one of"),
    (["simulate", M, "--plot", "{file}/x.png"], "'{file}' is an existing file, not a folder"),
    (["simulate", M, "--option", "observe=X"], "observe must be"),
    (["simulate", M, "--option", "speed=3"], "the factory takes no option ['speed']; its options: observe"),
    (["simulate", "nope"], "unknown model 'nope'; available:"),
    (["simulate"], "Missing argument 'name'"),
    # sensitivity: the point (--set), --method, --out, option types
    (["sensitivity", M, "--method", "local", "--set", "kab=nan"], "--set kab=nan: 'nan' is not a finite number"),
    (["sensitivity", M, "--method", "identifiability", "--set", "kab=nan"], "'nan' is not a finite number"),
    (["sensitivity", M, "--method", "local", "--set", "kab=-1e-4"], "kab = -0.0001 lies outside its bounds"),
    (["sensitivity", M, "--method", "identifiability", "--set", "kxy=1"], "unknown parameter 'kxy'"),
    (["sensitivity", M, "--method", "sobolx"], "--method must be one of sobol, local, identifiability; got 'sobolx'"),
    (["sensitivity", M, "--set", "kab=1e-4"], "Sobol indices cover the whole bounds, so drop --set"),
    (["sensitivity", M, "--out", "{file}"], "--out folder '{file}': '{file}' is an existing file, not a folder"),
    (["sensitivity", M, "--out", "{file}/sub"], "'{file}' is an existing file, not a folder; choose another path"),
    (["sensitivity", M, "--out", "/proc/jcalib-cli-test"], "cannot be created"),
    (["sensitivity", M, "--n", "abc"], "Invalid value for '--n'"),
    (["sensitivity", M, "--delta", "-1"], "--delta must be a positive number; got -1.0"),
    (["sensitivity", M, "--delta", "nan"], "--delta must be a positive number; got nan"),
    # calibrate: --data, --method, --start/--fix/--free, --out
    (["calibrate", M, "--data", "{root}/nope.csv"], "--data '{root}/nope.csv': no such file; give the path of a "
                                                    "measurements CSV"),
    (["calibrate", M, "--data", "{dir}"], "--data '{dir}' is a folder"),
    (["calibrate", M, "--data", "{file}"], "the first column must be 't'"),
    (["calibrate", M, "--data", "{badcsv}"], "--data: from_csv: the first column must be 't'; got header ['time'"),
    (["calibrate", M, "--data", "{other}"], "measurements have 1 outputs but the model has 4 (A, B, C, D)"),
    (["calibrate", M], "Missing option '--data'"),
    ([*CAL, "--method", "newton"], "--method must be one of gauss-newton, trf, de, multistart; got 'newton'"),
    ([*CAL, "--start", "kab=abc"], "--start kab=abc: 'abc' is not a number"),
    ([*CAL, "--start", "kab=nan"], "--start kab=nan: 'nan' is not a finite number"),
    ([*CAL, "--start", "kab=1"], "--start: kab = 1 lies outside its bounds [1e-06, 0.001]"),
    ([*CAL, "--free", "kab", "--start", "kad=1e-5"], "--start: kad not free; free: kab"),
    ([*CAL, "--fix", "kab=abc"], "--fix kab=abc: 'abc' is not a number"),
    ([*CAL, "--fix", "kxy=1"], "--fix: unknown parameter 'kxy'"),
    ([*CAL, "--free", "kab,kxy"], "unknown parameter 'kxy'"),
    ([*CAL, "--weighting", "bogus"], "weighting must be one of ('relative', 'absolute', 'sigma'); got 'bogus'"),
    ([*CAL, "--weighting", "sigma"], "weighting='sigma' needs measurements.sigma"),
    ([*CAL, "--out", "{file}/sub"], "--out folder '{file}/sub': '{file}' is an existing file"),
    # sample: options checked and --out created before Gauss-Newton and MALA
    ([*SAMPLE, "--out", "{file}/sub"], "--out folder '{file}/sub': '{file}' is an existing file"),
    ([*SAMPLE, "--chains", "0"], "--chains: n_chains must be a positive integer; got 0"),
    ([*SAMPLE, "--steps", "0"], "--steps: n_steps must be a positive integer; got 0"),
    ([*SAMPLE, "--burn", "-1"], "--burn: burn_in must be a non-negative integer; got -1"),
    ([*SAMPLE, "--target-acceptance", "2"], "--target-acceptance must lie in (0, 1); got 2.0"),
    ([*SAMPLE, "--fraction", "0"], "--fraction must be a positive number; got 0.0"),
    ([*SAMPLE, "--sigma", "nan"], "sigma must be positive and finite; got nan"),
    ([*SAMPLE, "--likelihood", "poisson"], "--likelihood must be one of relative, absolute, lognormal"),
    ([*SAMPLE, "--sample-sigma"], "give either --sigma (fixed noise) or --sample-sigma, not both"),
    ([*SAMPLE, "--start", "kab=-1"], "--start: kab = -1 lies outside its bounds"),
    (["sample", M, "--data", "{data}", "--no-gauss-newton"], "no noise level: give --sigma"),
    # amortize and identify: checked before simulating training data
    (["amortize", M, "--out", "{file}/sub"], "--out folder '{file}/sub': '{file}' is an existing file"),
    (["amortize", M, "--n-val", "1"], "--n-val must be at least 2; got 1"),
    (["amortize", M, "--n-samples", "1"], "--n-samples must be at least 2; got 1"),
    (["amortize", M, "--summary", "transformer"], "--summary must be one of lstm, gru, conv, mlp"),
    ([*IDENTIFY, "--out", "{file}/sub"], "--out folder '{file}/sub': '{file}' is an existing file"),
    (["identify", M, "--data", "{root}/nope.csv"], "no such file"),
    ([*IDENTIFY, "--r2-threshold", "5"], "r2_threshold must be a number <= 1"),
    ([*IDENTIFY, "--generator", "vae"], "--generator must be one of surrogate, model; got 'vae'"),
    (["models", "show", M, "--option", "observe=X"], "observe must be"),
]


def _fill(text, files):
    return text.format(**{k: str(v) for k, v in files.items()})


# Python's own message for an unknown keyword names the factory; under make test's shape check the
# factory is wrapped and the message names no function (tests/shapecheck.py).
_NAMES_THE_FUNCTION = [pytest.param(a, m, marks=pytest.mark.unwrapped) if "() got an unexpected" in m else (a, m)
                       for a, m in ROWS]


@pytest.mark.parametrize("args, message", _NAMES_THE_FUNCTION, ids=[" ".join(a) for a, _ in ROWS])
def test_mistake_is_one_line_exit_2_before_any_computation(files, refuse_computation, args, message):
    result = runner.invoke(app, [_fill(a, files) for a in args])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert _fill(message, files) in lines[0]


def test_no_output_is_left_behind_by_a_refusal(files, refuse_computation):
    out = files["root"] / "never"
    result = runner.invoke(app, ["sensitivity", M, "--method", "local", "--set", "kab=nan", "--out", str(out)])
    assert result.exit_code == 2
    assert not out.exists()  # the --set check comes before the folder is even created


@pytest.mark.parametrize("command", [["simulate", M], ["sensitivity", M, "--method", "local"],
                                     ["sensitivity", M, "--method", "identifiability"]])
def test_a_failing_solve_is_an_error_not_nan_numbers(tmp_path, monkeypatch, command):
    # a tiny solver budget: the solve at the nominal point fails; nothing NaN is written
    real_get = jcalib.models.get
    monkeypatch.setattr(jcalib.models, "get", lambda *a, **k: real_get(*a, **k).with_solver(max_steps=2))
    result = runner.invoke(app, [*command, "--out", str(tmp_path)] if command[0] == "sensitivity" else command)
    assert result.exit_code == 2, result.output
    assert "simulation failed at" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "metrics.json").exists()


def test_results_are_written_atomically_without_leftovers(tmp_path):
    csv, png = tmp_path / "sim" / "out.csv", tmp_path / "fig" / "out.png"
    result = runner.invoke(app, ["simulate", M, "--times", "0,10,100", "--csv", str(csv), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert Measurements.from_csv(csv).n_times == 3 and png.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["out.csv", "out.png"]


@pytest.mark.slow
def test_sample_prints_and_keeps_sampler_warnings(files, tmp_path):
    # 2 chains x 20 steps without warm-up: ESS far below 100, so the sampler must warn
    result = runner.invoke(app, ["sample", M, "--data", files["data"], "--sigma", "0.5", "--no-gauss-newton",
                                 "--steps", "20", "--burn", "0", "--warmup", "0", "--chains", "2",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, (result.output, result.exception)
    printed = [line[len("warning: "):] for line in result.stderr.splitlines() if line.startswith("warning: ")]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert printed and printed == metrics["warnings"]
    assert any("ESS" in w or "ess" in w for w in printed), printed
    assert "Traceback" not in result.output and "SamplingWarning" not in result.output


@pytest.mark.slow
def test_identify_refuses_data_outside_the_training_range(huge_data, tmp_path):
    result = runner.invoke(app, ["identify", M, "--data", huge_data, "--n-train", "4", "--n-val",
                                 "2", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, (result.output, result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # others: progress bars
    assert len(errors) == 1 and errors[0].startswith("error: iterative_identification: the observation lies outside "
                                                     "the range of the training trajectories: output 'B'"), errors
    assert "--allow-outside-training-range" in errors[0] and "Traceback" not in result.output
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.fixture(scope="module")
def huge_data(files):
    """The model's outputs at the nominal point with one datum of 1e300 (absolute weighting overflows)."""
    model = jcalib.models.get(M)
    values = np.array(model.simulate(np.asarray(model.parameters.nominal)))
    values[2, 1] = 1e300
    path = files["root"] / "huge.csv"
    Measurements(np.asarray(model.ts), values, output_names=model.output_names).to_csv(path)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("method, message", [
    ("gauss-newton", "gauss_newton: the loss overflows (inf) at theta0"),
    ("trf", "least_squares_trf: the loss overflows (inf) at theta0"),
    ("de", "--method de found no finite answer (loss inf): failed: every member of the population has a non-finite "
           "loss at the start"),
    ("multistart", "--method multistart found no finite answer (loss inf):"),
])
def test_calibrate_without_a_finite_answer_exits_2(huge_data, tmp_path, method, message):
    args = ["calibrate", M, "--data", huge_data, "--weighting", "absolute", "--method", method,
            "--n-starts", "2", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.output, result.exception)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # others: progress bars
    assert len(errors) == 1 and message in errors[0], errors
    assert "overflows" in errors[0] and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())  # no metrics, no figures


def test_fix_outside_the_bounds_gets_a_note(files, tmp_path, refuse_computation):
    # allowed on purpose (CalibrationProblem widens a fixed parameter's bounds), but said on stderr; the note
    # comes before any computation (refused here, so that the test stays fast)
    result = runner.invoke(app, ["calibrate", M, "--data", files["data"], "--fix", "kad=-2e-6", "--free", "kab",
                                 "--method", "trf", "--out", str(tmp_path)])
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert notes == ["note: --fix kad=-2e-06 lies outside its bounds [1e-06, 0.0001]; allowed for a fixed value (the "
                     "problem widens its bounds to include it)"], result.stderr
    inside = runner.invoke(app, ["calibrate", M, "--data", files["data"], "--fix", "kad=2e-6", "--free", "kab",
                                 "--method", "trf", "--out", str(tmp_path / "inside")])
    assert "note:" not in inside.stderr


@pytest.fixture
def arviz_log():
    """The messages ArviZ logs meanwhile (its own ``Logger("arviz")``, outside logging's tree)."""
    import arviz as az

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    messages, handler = [], Collect(logging.WARNING)
    az._log.addHandler(handler)
    yield messages
    az._log.removeHandler(handler)


@pytest.mark.slow  # ~50 s cold
def test_sample_with_one_chain_explains_r_hat(files, tmp_path, arviz_log):
    result = runner.invoke(app, ["sample", M, "--data", files["data"], "--sigma", "0.5", "--no-gauss-newton",
                                 "--steps", "23", "--burn", "0", "--warmup", "0", "--chains", "1",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "note: R-hat needs at least 2 chains (it compares them); run --chains 2 or more" in result.stderr
    assert "nan" not in result.stdout.split("acceptance")[0]  # the table says n/a, not nan
    assert " n/a" in result.stdout
    assert not [m for m in arviz_log if "Shape validation failed" in m]


def test_arviz_shape_message_is_dropped_only_inside_jcalib_diagnostics(arviz_log):
    import arviz as az

    from jcalib.bayes.diagnostics import chain_diagnostics, rhat, to_inference_data

    draws = np.random.default_rng(0).normal(size=(1, 97, 2))  # a shape no other test uses (ArviZ logs each once)
    assert np.all(np.isnan(chain_diagnostics(draws).rhat)) and np.all(np.isnan(rhat(draws[:, :96])))
    assert not [m for m in arviz_log if "Shape validation failed" in m]
    az.rhat(to_inference_data(draws[:, :95]))  # ArviZ itself still logs it: the capture works
    assert [m for m in arviz_log if "Shape validation failed" in m]
