"""benchmarks/common.py and benchmarks/scipy_reference/: the shared command line, timing,
machine description and report writing of the benchmarks, and the scipy baselines as a package.
Every script of both folders is a module whose command line builds (``python -m`` style)."""

import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import common
from benchmarks.scipy_reference import SCIPY_CASES, ScipyCase
from tests.helpers import load_script

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = sorted(f"{p.parent.name}.{p.stem}" for folder in ("benchmarks", "experiments")
                 for p in (ROOT / folder).glob("*.py")
                 # *_reference and *_worker: helpers a benchmark runs in other processes, not benchmarks;
                 # record: runs an experiment and writes its record (its own command line, tested apart)
                 if p.stem not in ("__init__", "common", "record") and not p.stem.endswith(("_reference", "_worker")))


def test_parser_shared_flags_and_defaults():
    parser = common.parser("Title line.\n\nMore text.", "demo_bench", quick_help="tiny")
    assert parser.description == "Title line."
    assert parser.prog == "python -m benchmarks.demo_bench"
    args = parser.parse_args([])
    assert (args.quick, args.seed, args.out) == (False, 0, pathlib.Path("results/benchmarks/demo_bench.json"))
    args = parser.parse_args(["--quick", "--seed", "3", "--out", "x.json"])
    assert (args.quick, args.seed, args.out) == (True, 3, pathlib.Path("x.json"))


def test_parse_args_checks_out_before_any_work(tmp_path):
    parser = common.parser("Title.", "x")
    args = common.parse_args(parser, ["--out", str(tmp_path / "new" / "r.json")])
    assert args.out == tmp_path / "new" / "r.json" and (tmp_path / "new").is_dir()
    with pytest.raises(ValueError, match=r"--out '.*' is a folder; give a file name"):
        common.parse_args(parser, ["--out", str(tmp_path)])
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"is an existing file, not a folder"):
        common.parse_args(parser, ["--out", str(tmp_path / "file" / "r.json")])


def test_time_repeated_calls_once_plus_repeats_and_returns_last_output():
    calls = []
    first, times, out = common.time_repeated(lambda: calls.append(len(calls)) or len(calls), 4)
    assert calls == [0, 1, 2, 3, 4] and out == 5
    assert len(times) == 4 and first >= 0 and all(t >= 0 for t in times)
    first, times, out = common.time_repeated(lambda: "only", 0)
    assert times == [] and out == "only"


def test_machine_info_and_load_average():
    load = common.load_average()
    assert load is None or (len(load) == 3 and all(v >= 0 for v in load))
    info = common.machine_info(load, extra_entry="x")
    assert info["load_average_at_start"] == load and info["extra_entry"] == "x"
    assert info["cpu_count"] >= 1 and info["devices"] and info["jax"] and info["python"].count(".") == 2
    assert info["load_average_at_end"] is None or len(info["load_average_at_end"]) == 3


def test_write_report_is_strict_json_and_returns_what_the_file_holds(tmp_path, capsys):
    path = tmp_path / "report.json"
    report = {"ratio": np.float64(2.5), "missing": math.nan, "array": np.arange(3), "pair": (1, np.int64(2)),
              "nested": {1: np.inf}}
    written = common.write_report(path, report)
    assert written == {"ratio": 2.5, "missing": None, "array": [0, 1, 2], "pair": [1, 2], "nested": {"1": None}}
    assert json.loads(path.read_text()) == written
    assert "NaN" not in path.read_text()
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert not [p for p in tmp_path.iterdir() if p.name != "report.json"]  # no temporary file left


def test_scipy_cases_one_module_per_model_in_the_benchmark_order():
    assert list(SCIPY_CASES) == ["four_substance_reactions", "radical_polymerization_real",
                                 "radical_polymerization_real_qss", "rigid_double_beam", "roll_plane",
                                 "cabin_thermal", "thermal_office_r7c4", "winding_process"]
    assert all(isinstance(case, ScipyCase) for case in SCIPY_CASES.values())
    for name in ("four_substance_reactions", "rigid_double_beam", "roll_plane", "cabin_thermal",
                 "thermal_office_r7c4", "winding_process"):
        module = __import__(f"benchmarks.scipy_reference.{name}", fromlist=["CASES"])
        assert SCIPY_CASES[name] is module.CASES[name]


def test_run_batch_counts_failures_and_leaves_nan(model):
    """A failed solve (None) leaves a NaN row and is counted; the others are the solves' outputs."""
    values = np.arange(model.experiment.n_times * model.n_outputs, dtype=float).reshape(
        model.experiment.n_times, model.n_outputs)
    case = ScipyCase(model=lambda: model, sample=None, rtol=1e-8, atol=1e-10, n_full=1, n_quick=1,
                     solve=lambda theta, m, c: None if theta[0] < 0 else values * theta[0])
    out, failures = case.run_batch(np.array([[1.0, 0, 0], [-1.0, 0, 0], [2.0, 0, 0]]), model)
    assert failures == 1 and out.shape == (3, *values.shape)
    np.testing.assert_array_equal(out[0], values)
    np.testing.assert_array_equal(out[2], 2 * values)
    assert np.all(np.isnan(out[1]))


def test_four_substance_baseline_agrees_with_jcalib(model):
    import jcalib

    theta = np.asarray(model.parameters.nominal)
    out, failures = SCIPY_CASES["four_substance_reactions"].run_batch(theta[None], model)
    reference = jcalib.simulate_batch(model, theta[None], progress=False)
    assert failures == 0
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("module", SCRIPTS)
def test_every_script_builds_its_command_line(module, capsys):
    """``main(["--help"])`` of every script: the module imports and its shared flags are there."""
    main = __import__(module, fromlist=["main"]).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.split()[:4] == ["usage:", "python", "-m", module]
    assert "--out" in usage and "--quick" in usage


def test_scripts_run_as_modules_from_the_repository_root():
    """The documented way to run them: ``python -m benchmarks.<name>`` from the repository root."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.simulate_batch", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m benchmarks.simulate_batch" in done.stdout


@pytest.mark.slow
def test_profile_batch_quick(tmp_path):
    """benchmarks/profile_batch.py --quick on the stiff polymerization model: the pieces of a
    Rodas5P step are reported, and the shares are their definitions applied to the reported
    timings (no timing is compared with a threshold)."""
    out = tmp_path / "profile.json"
    report = load_script("benchmarks/profile_batch.py").main(
        ["--quick", "--cases", "radical_polymerization_real", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    (row,) = report["results"]
    assert row["solver"] == "Rodas5P" and row["n_states"] == 11 and row["chunk"] == 16
    assert row["steps_max"] >= row["steps_mean"] > 100 and row["lockstep_factor"] >= 1
    assert row["lane_step_us"] == pytest.approx(row["whole_solve_s"] / 16 / row["steps_max"] * 1e6)
    assert row["share_step"] == pytest.approx(row["step_us"] / row["lane_step_us"])
    assert row["share_lu_and_inverse"] == pytest.approx(row["lu_and_inverse_us"] / row["lane_step_us"])
    assert min(row[k] for k in ("step_us", "vector_field_us", "jacobian_us", "lu_factor_us")) > 0
    with pytest.raises(SystemExit):
        load_script("benchmarks/profile_batch.py").main(["--cases", "nope", "--out", str(out)])
