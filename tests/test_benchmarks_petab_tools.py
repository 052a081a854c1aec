"""benchmarks/petab_tools.py (jcalib against AMICI + pyPESTO on the PEtab benchmark collection):
jcalib's side in quick mode writes what it promises, bad arguments are refused by name; the run
with the reference tools (which builds AMICI) is slow-marked. No timing assertions."""

import json

import numpy as np
import pytest

from tests.helpers import load_script

BERTOZZI_LLH = -158.864276  # Bertozzi_PNAS2020's log-likelihood at its nominal parameters (the collection's)


def _check_jcalib_side(row, n_starts, n_batch):
    assert row["problem"] == "Bertozzi_PNAS2020" and (row["n_states"], row["n_estimated"]) == (3, 8)
    assert row["solver"]["rtol"] == 1e-8 and row["solver"]["atol"] == 1e-10
    j = row["jcalib"]
    assert j["llh_nominal"] == pytest.approx(BERTOZZI_LLH, rel=1e-6)
    for timing in (j["simulation"], j["gradient"]):
        assert timing["first_call_s"] > 0 and timing["median_ms"] > 0 and len(timing["times_s"]) == 3
    assert len(j["gradient"]["values"]) == 8 and np.all(np.isfinite(j["gradient"]["values"]))
    b = j["batch"]
    assert b["n"] == n_batch and b["n_finite"] == n_batch and b["warm_s"] > 0 and "_llh" not in b
    m = j["multistart"]
    assert m["n_starts"] == n_starts and len(m["llh_starts"]) == n_starts
    assert 0.0 <= m["fraction_converged"] <= 1.0 and m["n_converged"] == round(m["fraction_converged"] * n_starts)
    assert m["llh_best"] == max(m["llh_starts"]) and m["llh_nominal"] == pytest.approx(BERTOZZI_LLH, rel=1e-6)
    assert (m["seconds_per_converged_start"] is None) == (m["n_converged"] == 0)


@pytest.mark.slow  # ~70 s each: two PEtab problems in two processes
@pytest.mark.parametrize("method", ["trf", "fides"])
def test_petab_tools_quick_jcalib_side(tmp_path, method):
    """--quick --no-reference: Bertozzi_PNAS2020, 4 starts, a batch of 32, jcalib only (nothing installed),
    in one process and on two (benchmarks/petab_tools_jcalib_worker.py over jcalib.distributed), with
    TRF or Fides's method as the local method."""
    out = tmp_path / "petab_tools.json"
    report = load_script("benchmarks/petab_tools.py").main(["--quick", "--no-reference", "--processes", "2",
                                                           "--method", method, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["benchmark"] == "petab_tools" and report["quick"]
    assert report["settings"] == {"n_starts": 4, "n_batch": 32, "max_steps": None, "repeats": 3, "stop": "fides",
                                  "method": method}
    assert report["problems"][0]["jcalib"]["multistart"]["method"] == method
    assert report["reference"] == {"skipped": "--no-reference"} and len(report["problems"]) == 1
    row = report["problems"][0]
    _check_jcalib_side(row, 4, 32)
    assert row["amici"] == {"skipped": "--no-reference"} and "ratios" not in row
    two, one = row["jcalib_processes"], row["jcalib"]
    assert two["processes"] == 2 and len(two["devices"]) == 2, two.get("error")
    assert two["batch"]["n"] == 32 and two["batch"]["warm_s"] > 0 and "llh" not in two["batch"]
    # the same solves of the same rows, vmapped 16 wide instead of 32: round-off apart
    assert two["batch"]["max_abs_difference_to_one_process"] <= 1e-8 * abs(BERTOZZI_LLH)
    # each start runs the same iteration in another process: the same final log-likelihoods
    np.testing.assert_allclose(two["multistart"]["llh_starts"], one["multistart"]["llh_starts"], rtol=1e-9)
    assert two["multistart"]["n_converged"] == one["multistart"]["n_converged"]
    assert "| Bertozzi_PNAS2020 | 3 / 8 |" in report["table"] and report["machine"]["cpu_count"] > 0


def test_petab_tools_points_inside_the_bounds():
    """The starts and the batch are in PEtab's scales, within the bounds, the batch around the
    nominal values (that the multistart starts from the same points, the quick run checks)."""
    from experiments.petab_collection import collection_root, load_problem, problem_files

    bench = load_script("benchmarks/petab_tools.py")
    pp = load_problem(problem_files(collection_root() / "Bertozzi_PNAS2020")[0], "Bertozzi_PNAS2020")
    starts, batch = bench.draw_points(pp, 3, 50, seed=7)
    lower, upper, nominal = (np.asarray(a) for a in (pp.lower, pp.upper, pp.nominal_internal))
    assert starts.shape == (3, 8) and batch.shape == (50, 8)
    assert np.all((starts >= lower) & (starts <= upper)) and np.all((batch >= lower) & (batch <= upper))
    assert np.all(np.abs(batch - nominal) <= bench.BATCH_SPREAD * (upper - lower) + 1e-12)
    assert len({tuple(z) for z in batch}) == 50


@pytest.mark.parametrize("args, match", [
    (["--n-starts", "0"], r"--n-starts must be at least 1; got 0"),
    (["--n-batch", "0"], r"--n-batch must be at least 1; got 0"),
    (["--repeats", "0"], r"--repeats must be at least 1; got 0"),
    (["--processes", "0"], r"--processes must be at least 1; got 0"),
    (["--problems", "Nope_2000"], r"unknown problem\(s\) 'Nope_2000' in .*; known: .*Bertozzi_PNAS2020"),
])
def test_petab_tools_bad_arguments(tmp_path, args, match):
    with pytest.raises(ValueError, match=match):
        load_script("benchmarks/petab_tools.py").main(["--quick", "--no-reference", "--out", str(tmp_path / "x.json"),
                                                      *args])


def test_petab_tools_system_packages_refused_without_root(monkeypatch):
    """Missing system packages: a non-root run says which and how to install them."""
    bench = load_script("benchmarks/petab_tools.py")
    monkeypatch.setattr(bench.os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match=r"needs the system packages no-such-package-jcalib.*sudo apt-get install"):
        bench.ensure_system_packages(("no-such-package-jcalib",))


def test_petab_tools_reference_worker_imports_without_the_tools(capsys):
    """The worker runs in the reference venv; it imports AMICI and pyPESTO only when it runs."""
    worker = load_script("benchmarks/petab_tools_reference.py")
    with pytest.raises(SystemExit):
        worker.main(["--help"])
    assert "--job" in capsys.readouterr().out


@pytest.mark.slow  # installs AMICI (built from source, ~5 min) into results/benchmarks/amici-venv on its first run
def test_petab_tools_quick_with_reference(tmp_path):
    out = tmp_path / "petab_tools.json"
    report = load_script("benchmarks/petab_tools.py").main(["--quick", "--out", str(out)])
    assert "error" not in report["reference"], report["reference"].get("error")
    row = report["problems"][0]
    _check_jcalib_side(row, 4, 32)
    a = row["amici"]
    assert "error" not in a, a.get("error")
    assert a["solver"]["rtol"] == 1e-8 and a["solver"]["atol"] == 1e-10
    assert a["llh_nominal"] == pytest.approx(BERTOZZI_LLH, rel=1e-6)
    assert row["agreement"]["llh_agree"] and row["agreement"]["gradient_agree"]
    assert row["agreement"]["batch_n_both_finite"] == 32 and row["agreement"]["batch_llh_max_rel_difference"] < 1e-5
    assert 0.0 <= a["multistart"]["fraction_converged"] <= 1.0 and a["multistart"]["n_starts"] == 4
    assert report["reference"]["versions"]["amici"] == "1.0.1"
    r = row["ratios"]
    assert r["gradient_jcalib_over_amici"] > 0 and r["batch_speedup_amici_over_jcalib"] > 0
    assert isinstance(r["gradient_target_met"], bool)
