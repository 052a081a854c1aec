"""``jcalib bench``: a grid to a store and a report; a second call runs nothing; bad input is one line."""

import re

import pytest
from typer.testing import CliRunner

from jcalib.benchmark import Store
from jcalib.cli import app

runner = CliRunner()


def test_bench_runs_the_grid_writes_the_report_and_skips_stored_runs(tmp_path):
    args = ["bench", "analytic", "--problems", "gaussian-2", "--methods", "lm gauss-newton", "--repeats", "2",
            "--budget", "gradients=50", "--store", str(tmp_path / "store")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4 runs (4 finished)" in result.output
    assert (tmp_path / "report" / "report.md").is_file() and (tmp_path / "report" / "optimizers.csv").is_file()
    stamps = sorted(p.stat().st_mtime_ns for p in (tmp_path / "store").glob("*.parquet"))
    assert runner.invoke(app, args).exit_code == 0
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "store").glob("*.parquet")) == stamps  # nothing rerun
    assert set(Store(tmp_path / "store").frame()["budget"]) == {'{"gradients": 50.0}'}


@pytest.mark.parametrize("extra, message", [
    (["--engine", "cluster"], "--engine must be one of inline, local"),
    (["--problems", "nope"], r"--problems: \['nope'\] are not in suite 'analytic'"),
    (["--budget", "steps=3"], "budget must be a dict of units"),
    (["--budget", "gradients=lots"], "is not a number"),
    (["--methods", "lm:foo=1"], r"method 'lm' takes no option \['foo'\]"),
    (["--repeats", "0"], "--repeats must be a positive integer"),
    (["--budget", "gradients=5", "--budget", "gradients=6"], "give each unit once"),
    (["--unit", "evals"], "--unit must be one of evaluations, gradients, seconds"),
    (["--methods", "lm:max_steps=-1"], "method 'lm': option max_steps=-1: must be an integer >= 1"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, extra, message):
    result = runner.invoke(app, ["bench", "analytic", "--store", str(tmp_path / "store"), *extra])
    assert result.exit_code == 2 and result.output.startswith("error: ")
    assert re.search(message, result.output)
    assert not list((tmp_path / "store").glob("*.parquet"))


def test_a_petab_collection_becomes_the_petab_suite(tmp_path, monkeypatch):
    from jcalib.benchmark import problems

    monkeypatch.setattr(problems, "_SUITES", {k: dict(v) for k, v in problems._SUITES.items()})
    (tmp_path / "Alpha_2020").mkdir()
    (tmp_path / "Alpha_2020" / "Alpha_2020.yaml").write_text("format_version: 1\n")
    result = runner.invoke(app, ["bench", "petab", "--petab-collection", str(tmp_path), "--problems", "Beta",
                                 "--store", str(tmp_path / "store")])
    assert result.exit_code == 2 and "--problems: ['Beta'] are not in suite 'petab'; its problems: ['Alpha_2020']" \
        in result.output
