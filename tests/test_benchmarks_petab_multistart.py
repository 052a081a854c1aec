"""benchmarks/petab_multistart.py (jcalib's Fides multistart against pyPESTO + Fides, issue 37): the
figures and the goal columns follow from each tool's record, the waterfalls are drawn, bad
arguments are refused; the run with the reference (which builds AMICI) is slow-marked. No timing
assertions."""

import pytest

from tests.helpers import load_script


def _tool(llh, n_converged, grads, cpu, wall, **extra):
    return {"llh_starts": llh, "n_converged": n_converged, "n_starts": len(llh), "n_gradient_evaluations": grads,
            "cpu_s": cpu, "wall_time_s": wall, "llh_nominal": -10.0} | extra


def _rows():
    jcalib = _tool([-10.0, -10.05, -12.0, -30.0], 2, 400, 6.0, 3.5, cpu_s_with_compile=26.0, compile_s=10.0)
    pypesto = _tool([-10.0, -10.0, -10.02, -11.0], 3, 300, 12.0, 6.0)
    return [{"problem": "Toy_2026", "size": "3 / 8", "n_starts": 4, "jcalib": jcalib, "pypesto": pypesto},
            {"problem": "Broken_2026", "size": "1 / 1", "n_starts": 4, "jcalib": {"error": "process 0 failed"},
             "pypesto": pypesto}]


def test_the_figures_and_goals_follow_from_the_records(tmp_path):
    script = load_script("benchmarks/petab_multistart.py")
    rows = _rows()
    j, a = script.summary(rows[0]["jcalib"]), script.summary(rows[0]["pypesto"])
    assert (j["converged"], a["converged"]) == ("2/4", "3/4")
    assert j["per_1000_gradients"] == pytest.approx(5.0) and a["per_1000_gradients"] == pytest.approx(10.0)
    assert j["per_cpu_minute"] == pytest.approx(20.0) and a["per_cpu_minute"] == pytest.approx(15.0)
    assert j["cpu_s_per_converged_start"] == pytest.approx(3.0) and a["cpu_s_per_converged_start"] == pytest.approx(4.0)
    assert j["cpu_s_per_converged_start_with_compile"] == pytest.approx(13.0)
    lines = script.table(rows).splitlines()
    # fewer starts reach the optimum (missed), less CPU per converged start (met), more with compilation
    assert lines[2] == ("| Toy_2026 | 3 / 8 | 4 | 2/4 / 3/4 | -10 / -10 | 5 / 10 | 20 / 15 | 3 (13) / 4 | "
                        "3.5 (10) / 6 | missed, met (missed) |")
    assert lines[3].startswith("| Broken_2026 | 1 / 1 | 4 | error: process 0 failed |")
    no_start = rows[0] | {"jcalib": rows[0]["jcalib"] | {"n_converged": 0}}
    assert script.table([no_start]).splitlines()[2].endswith("missed, missed (missed) |")
    neither = no_start | {"pypesto": rows[0]["pypesto"] | {"n_converged": 0}}
    assert script.table([neither]).splitlines()[2].endswith("met, – (–) |")  # no CPU per converged start
    failed = rows[0] | {"pypesto": rows[0]["pypesto"] | {"llh_starts": [None, -10.0, -10.02, -11.0]}}
    assert script.summary(failed["pypesto"])["llh_best"] == -10.0  # a start pyPESTO could not run: None
    assert " | 2/4 / 3/4 | -10 / -10 | " in script.table([failed]).splitlines()[2]
    path = tmp_path / "waterfalls.png"
    script.plot_waterfalls([*rows, failed], path)
    assert path.stat().st_size > 0


def test_records_of_an_earlier_report_are_reused_only_with_the_same_settings(tmp_path):
    import json

    script = load_script("benchmarks/petab_multistart.py")
    settings = {"seed": 0, "n_starts": 4, "processes": 2, "lanes": None, "llh_tolerance": 0.1}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(settings | {"problems": _rows()}))
    assert script.reused(None, "Toy_2026", settings, "jcalib") is None
    record = script.reused(path, "Toy_2026", settings, "pypesto")
    assert record == _rows()[0]["pypesto"] | {"reused_from": str(path)}
    with pytest.raises(ValueError, match=r"settings differ .*'n_starts': \(4, 8\)"):
        script.reused(path, "Toy_2026", settings | {"n_starts": 8}, "jcalib")
    with pytest.raises(ValueError, match="no finished jcalib record of Broken_2026"):
        script.reused(path, "Broken_2026", settings, "jcalib")
    with pytest.raises(ValueError, match="no finished jcalib record of Other"):
        script.reused(path, "Other", settings, "jcalib")


@pytest.mark.parametrize("args", [["--n-starts", "0"], ["--processes", "0"], ["--lanes", "0"]])
def test_bad_arguments_are_refused_before_any_work(tmp_path, args):
    script = load_script("benchmarks/petab_multistart.py")
    with pytest.raises(ValueError, match="must be positive"):
        script.main([*args, "--out", str(tmp_path / "x.json")])


@pytest.mark.slow  # builds AMICI (~9 min) into results/benchmarks/amici-venv on its first run; then ~2 min
def test_quick_run_against_pypesto(tmp_path):
    out = tmp_path / "petab_multistart.json"
    report = load_script("benchmarks/petab_multistart.py").main(["--quick", "--out", str(out)])
    (row,) = report["problems"]
    j, a = row["jcalib"], row["pypesto"]
    assert "error" not in j and "error" not in a, (j.get("error"), a.get("error"))
    assert j["n_starts"] == a["n_starts"] == 4 and len(j["llh_starts"]) == len(a["llh_starts"]) == 4
    assert j["llh_nominal"] == pytest.approx(a["llh_nominal"], rel=1e-6)
    assert j["n_converged"] >= 3 and a["n_converged"] >= 3  # Bertozzi_PNAS2020: every start reaches it here
    assert len(j["cpu_s_per_process"]) == 2 and j["cpu_s"] > 0 and a["cpu_s"] > 0
    assert (tmp_path / "petab_multistart_waterfalls.png").stat().st_size > 0
