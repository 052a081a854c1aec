"""benchmarks/petab_speed.py: the comparison of the two sides (no AMICI needed)."""

import numpy as np
import pytest

from benchmarks.petab_speed import compare, main, table


def _ours(values):
    return {"n_states": 3, "n_estimated": 2, "parameter_ids": ["a", "b"], "llh": -10.0, "values": values,
            "simulation": {"cpu_ms": 20.0, "first_call_s": 3.0}, "gradient": {"cpu_ms": 90.0, "first_call_s": 7.0}}


AMICI = {"llh": -10.001, "parameter_ids": ["b", "a"], "simulation": {"cpu_ms": 10.0},
         "forward": {"cpu_ms": 60.0, "gradient": [2.0, 0.5]}, "adjoint": {"cpu_ms": 30.0, "gradient": [2.0, 0.5]}}


def test_gradients_are_compared_by_parameter_name_and_ratios_against_the_faster_method():
    c = compare(_ours([0.5, 2.0]), AMICI)  # AMICI's order is (b, a)
    assert c["gradient_n_disagreeing"] == 0 and c["gradient_max_deviation"] == 0.0
    assert c["simulation_ratio"] == 2.0 and c["gradient_ratio"] == 3.0  # 90 ms against the adjoint's 30
    np.testing.assert_allclose(c["llh_rel_diff"], 0.001 / 10.001)
    off = compare(_ours([0.5, 2.1]), AMICI)
    assert off["gradient_n_disagreeing"] == 1 and off["gradient_max_deviation"] == pytest.approx(0.05)


def test_a_side_without_results_leaves_its_cells_empty():
    rows = {"P": {"jcalib": {"error": "did not finish within 60 s"}, "amici": AMICI, "comparison": {}},
            "Q": {"jcalib": _ours([0.5, 2.0]), "amici": {"error": "boom"}, "comparison": compare(_ours([0.5, 2.0]),
                                                                                                 {"error": "boom"})}}
    text = table(rows)
    assert "| P | ? / ? | – / 10.0 | – / 60.0 / 30.0 | – / – | did not finish within 60 s | – | – |" in text
    assert "| Q | 3 / 2 | 20.0 / – | 90.0 / – / – | – / – | 3 / 7 | – | – |" in text


def test_the_profile_gives_each_side_its_cpu_time_per_step():
    ours = _ours([0.5, 2.0]) | {"steps": 400}
    c = compare(ours, AMICI | {"steps": 50})
    assert c["jcalib_us_per_step"] == 50.0 and c["amici_us_per_step"] == 200.0  # 20 ms / 400, 10 ms / 50
    assert "| 400 (50) / 50 (200) |" in table({"P": {"jcalib": ours, "amici": AMICI | {"steps": 50}, "comparison": c}})


@pytest.mark.slow
def test_steps_are_counted_along_the_simulation_the_likelihood_runs():
    import jax.numpy as jnp

    from benchmarks.petab_speed import count_steps
    from jcalib.io import petab as jpetab
    from tests.helpers import shared_petab

    folder = shared_petab("test_suite_v1") / "0001"
    if not folder.exists():
        pytest.skip("the PEtab test suite is not in shared/")
    problem = jpetab.load(folder / "_0001.yaml").problem
    z = problem.initial_internal()
    model, (group,) = problem.model, problem.plan["pair_groups"]
    (pair,) = group["pairs"]
    assert not pair["condition"] and group["preequilibrations"] == []  # the model's own parameters and state
    theta = jnp.asarray(problem.plan["sbml_nominal"]).at[
        jnp.asarray([model.parameters.names.index(n) for n in problem.free_names])].set(problem.space.to_physical(z))
    direct = model.integrate(model.initial_state(theta), theta, 0.0, group["t1"][0], jnp.asarray(group["ts"][0]))
    assert count_steps(problem, z) == int(direct.stats["num_steps"]) > 0


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="unknown problems"):
        main(["--no-reference", "--problems", "NoSuchProblem", "--out", str(tmp_path / "x.json")])


def test_components_that_are_not_finite_count_as_disagreeing():
    amici = {**AMICI, "forward": {"cpu_ms": 60.0, "gradient": [None, 0.5]}}
    c = compare(_ours([None, 2.0]), amici)
    assert c["gradient_n_disagreeing"] == 2


def test_workers_run_on_one_core():
    import subprocess
    import sys

    from benchmarks.petab_speed import _one_core

    done = subprocess.run([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                          capture_output=True, text=True, preexec_fn=_one_core, check=True)
    assert done.stdout.strip() == "1"
