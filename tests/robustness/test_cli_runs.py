"""Runs of the command line beside each other and after each other (issue 35 §1.9, §2): a folder
another living run writes to is refused, one left by an ended run is taken over, and every run
releases its folder however it ends; `jcalib petab` names its default folder after the problem's
folder too, and refuses a --start that is not a fit's metrics.json."""

import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from jcalib.cli import app
from jcalib.fileio import LOCK_NAME, lock_output_dir
from tests.io.test_petab import _case

M = "four_substance_reactions"
runner = CliRunner()


def test_a_folder_another_run_writes_to_is_refused(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK_NAME).write_text(str(sleeper.pid))
        result = runner.invoke(app, ["sensitivity", M, "--method", "local", "--out", str(tmp_path)])
        assert result.exit_code == 2
        assert f"is being written by another jcalib run (process {sleeper.pid}); wait for it" in result.output
        assert (tmp_path / LOCK_NAME).read_text() == str(sleeper.pid)  # the other run's lock stays
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_lock_of_an_ended_run_is_taken_over_and_every_run_releases(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / LOCK_NAME).write_text(ended.stdout.strip())
    for _ in range(2):  # the second run finds the folder free again
        result = runner.invoke(app, ["sensitivity", M, "--method", "local", "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert not (tmp_path / LOCK_NAME).exists()
    failed = runner.invoke(app, ["sensitivity", M, "--method", "local", "--set", "kab=-1", "--out", str(tmp_path)])
    assert failed.exit_code == 2 and not (tmp_path / LOCK_NAME).exists()


def test_lock_output_dir_holds_until_released(tmp_path):
    release = lock_output_dir(tmp_path)
    assert (tmp_path / LOCK_NAME).read_text() == str(os.getpid())
    with pytest.raises(ValueError, match=f"another jcalib run \\(process {os.getpid()}\\)"):
        lock_output_dir(tmp_path)
    release()
    assert not (tmp_path / LOCK_NAME).exists()
    lock_output_dir(tmp_path)()


def test_petab_default_folder_and_bad_start(tmp_path, monkeypatch):
    folder, _ = _case("0001")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["petab", str(folder / "_0001.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results" / "petab" / "0001__0001_simulate" / "metrics.json").exists()
    missing = runner.invoke(app, ["petab", str(tmp_path / "nope" / "problem.yaml")])
    assert missing.exit_code == 2 and "no such file; give the PEtab problem's YAML file" in missing.output
    assert not (tmp_path / "results" / "petab" / "nope_problem_simulate").exists()  # no empty folder
    (tmp_path / "fit.json").write_text('{"estimate": {"a0": 1.0}}')
    for start, message in ((tmp_path / "fit.json", "no 'estimate' of this problem's parameters"),
                           (tmp_path / "missing.json", "does not exist"),
                           (folder / "_0001.yaml", "is not a JSON file")):
        bad = runner.invoke(app, ["petab", str(folder / "_0001.yaml"), "--method", "sample", "--start", str(start)])
        assert bad.exit_code == 2 and message in bad.output, bad.output


@pytest.mark.slow  # a Gauss-Newton fit and NUTS on the suite's case 0001: compiles
def test_petab_sample_starts_at_a_fit(tmp_path):
    """§2: `--method sample --start fit/metrics.json` starts the chains at the fit, says so, and its
    last line reports the log-likelihood at the posterior's best draw."""
    import json

    folder, _ = _case("0001")
    yaml = str(folder / "_0001.yaml")
    fit = runner.invoke(app, ["petab", yaml, "--method", "gauss-newton", "--out", str(tmp_path / "fit")])
    assert fit.exit_code == 0, fit.output
    sampled = runner.invoke(app, ["petab", yaml, "--method", "sample", "--steps", "30", "--chains", "2", "--start",
                                  str(tmp_path / "fit" / "metrics.json"), "--out", str(tmp_path / "s")])
    assert sampled.exit_code == 0, sampled.output
    assert f"sampling from the estimate in {tmp_path / 'fit' / 'metrics.json'}" in sampled.output
    assert "log-likelihood at the posterior's best draw" in sampled.output
    metrics = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert metrics["estimate"] == pytest.approx(metrics["posterior"]["best"], rel=1e-12)  # the best draw
    assert (tmp_path / "s" / "posterior.npz").exists()
