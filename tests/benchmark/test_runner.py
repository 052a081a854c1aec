"""jcalib.benchmark.runner and report: a grid end to end, stored run by run; a rerun skips what is
stored; an interrupted grid loses only the run in flight; budgets, errors and bad input."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from jcalib.benchmark import (
    BenchmarkProblem,
    Store,
    get_problem,
    optimizer_table,
    register_method,
    report,
    run_grid,
    sampler_table,
)
from jcalib.benchmark import methods as methods_module
from jcalib.benchmark import problems as problems_module
from jcalib.data import Measurements
from jcalib.model import FunctionSimulator
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import CalibrationProblem
from tests.helpers import shared_petab

CALLS: list[str] = []
INTERRUPT_AT = [-1]  # the call of `_descent` that a Ctrl-C stops


def _descent(key, problem, start, steps=30, rate=0.02):
    """Projected gradient descent on the negative log-likelihood: a user's method."""
    import jax

    CALLS.append(problem.free_names[0])
    if len(CALLS) - 1 == INTERRUPT_AT[0]:
        raise KeyboardInterrupt
    z = jnp.asarray(start)
    grad = jax.jit(jax.grad(lambda z: -problem.log_likelihood(z)))
    lower, upper = problem.space.lower_internal, problem.space.upper_internal
    for _ in range(steps):
        z = jnp.clip(z - rate * grad(z), lower, upper)
    return z


def _failing(key, problem, start):
    problem.log_likelihood(jnp.asarray(start))
    raise ValueError("this method always fails")


@pytest.fixture
def user_methods(monkeypatch):
    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))
    CALLS.clear()
    INTERRUPT_AT[0] = -1
    register_method("descent", _descent)
    register_method("failing", _failing)


def test_a_grid_runs_end_to_end_and_a_rerun_skips_what_is_stored(tmp_path, user_methods):
    problems = ["gaussian-2", "rosenbrock-4"]
    frame = run_grid(problems, ["gauss-newton", "descent:steps=5"], 2, store=tmp_path / "store", progress=False)
    assert len(frame) == 8 and set(frame["status"]) == {"finished"} and len(CALLS) == 4
    gn = frame[frame["method"] == "gauss-newton"]
    assert (gn["best_nll"] >= gn["reference_nll"] - 1e-9).all()  # nothing better than the optimum
    linear = gn[gn["problem"] == "gaussian-2"]
    np.testing.assert_allclose(linear["best_nll"], linear["reference_nll"], rtol=1e-9)  # its one optimum
    # the same start per repetition for every method, different ones across repetitions
    starts = {(r.problem, r.repeat): tuple(r.start) for r in frame.itertuples() if r.method == "descent:steps=5"}
    assert all(tuple(r.start) == starts[(r.problem, r.repeat)] for r in gn.itertuples())
    assert starts[("gaussian-2", 0)] != starts[("gaussian-2", 1)]
    descent = frame[frame["method"] == "descent:steps=5"]
    assert (descent["n_gradients"] == 5).all() and (descent["n_objective"] == 5).all()  # 5 steps, one gradient each
    again = run_grid(problems, ["gauss-newton", "descent:steps=5"], 2, store=tmp_path / "store", progress=False)
    assert len(CALLS) == 4 and len(list((tmp_path / "store").glob("*.parquet"))) == 8
    assert again.drop(columns=["wall_s"]).equals(frame.drop(columns=["wall_s"]))
    path = report(tmp_path / "store", tmp_path / "report")
    text = path.read_text()
    assert "## Optimizers" in text and "gauss-newton" in text
    assert {p.name for p in (tmp_path / "report").iterdir()} >= {"report.md", "optimizers.csv", "ecdf_gradients.png",
                                                                  "profiles_gradients.png", "waterfalls.png"}


def test_an_interrupted_grid_keeps_the_finished_runs_and_a_rerun_does_the_rest(tmp_path, user_methods):
    INTERRUPT_AT[0] = 2
    with pytest.raises(KeyboardInterrupt):
        run_grid(["gaussian-2"], ["descent:steps=2"], 4, store=tmp_path, progress=False)
    assert Store(tmp_path).frame()["repeat"].tolist() == [0, 1]  # the finished runs; the third was in flight
    INTERRUPT_AT[0] = -1
    frame = run_grid(["gaussian-2"], ["descent:steps=2"], 4, store=tmp_path, progress=False)
    assert frame["repeat"].tolist() == [0, 1, 2, 3] and len(CALLS) == 3 + 2  # only the two missing runs ran
    assert Store(tmp_path).frame()["digest"].is_unique  # nothing stored twice


def test_budgets_and_failures_are_statuses_not_numbers(tmp_path, user_methods):
    frame = run_grid(["rosenbrock-4"], ["lm", "failing"], 1, {"evaluations": 4}, store=tmp_path, progress=False)
    lm, failing = (frame[frame["method"] == m].iloc[0] for m in ("lm", "failing"))
    assert lm["status"] == "budget" and lm["evaluations"] <= 4 and max(lm["trace_evaluations"]) <= 4
    assert failing["status"] == "error" and "this method always fails" in failing["message"]
    table = optimizer_table(frame)
    assert table.set_index("method").loc["failing", "within_5"] == 0.0  # an error reaches nothing


def test_one_configuration_is_one_run_and_samplers_that_never_finished_are_reported(tmp_path):
    first = run_grid(["rosenbrock-4"], ["trf:stop=fides,max_steps=3"], 1, store=tmp_path, progress=False)
    second = run_grid(["rosenbrock-4"], ["trf:max_steps=3,stop=fides"], 1, store=tmp_path, progress=False)
    assert first["digest"].tolist() == second["digest"].tolist() and len(Store(tmp_path).frame()) == 1
    assert first["method"].tolist() == ["trf:max_steps=3,stop=fides"]
    stopped = run_grid(["gaussian-2"], ["mala:n_steps=50,warmup=10"], 1, {"gradients": 5}, store=tmp_path / "s",
                       progress=False)
    assert stopped["status"].tolist() == ["budget"]
    assert sampler_table(stopped)["finished"].tolist() == [0]
    assert "## Samplers" in report(stopped, tmp_path / "report").read_text()


def test_a_client_with_several_threads_per_worker_is_refused(tmp_path):
    from distributed import Client

    with Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client, \
            pytest.raises(ValueError, match="one thread each"):
        run_grid(["rosenbrock-4"], ["lm"], 1, store=tmp_path, engine=client, progress=False)
    assert not list(tmp_path.glob("*.parquet"))


def test_optimizer_table_counts_converged_runs_per_gradient_against_the_best(tmp_path):
    frame = run_grid(["rosenbrock-4"], ["gauss-newton"], 1, store=tmp_path, progress=False)
    row = frame.iloc[0]
    fake = frame.copy()
    fake.loc[0, "method"], fake.loc[0, "best_nll"] = "worse", row["reference_nll"] + 1.0
    table = optimizer_table(fake).set_index("method")  # best: the reference; "worse" is 1 above it
    assert table.loc["worse", "within_0.05"] == 0.0 and table.loc["worse", "within_2"] == 1.0
    both = optimizer_table(pd.concat([frame, fake])).set_index("method")
    assert both.loc["gauss-newton", "converged_per_gradient"] == pytest.approx(1.0 / row["gradients"])


def test_bad_input_is_refused_and_a_pair_that_cannot_run_does_not_stop_the_grid(tmp_path, monkeypatch):
    monkeypatch.setattr(problems_module, "_SUITES", {k: dict(v) for k, v in problems_module._SUITES.items()})
    def relative_problem():
        space = ParameterSpace([Parameter("a", 1.0, 0.5, 2.0)])
        simulator = FunctionSimulator(lambda x: x, space)
        return CalibrationProblem(simulator, Measurements(np.asarray(simulator.ts), np.ones((1, 1)), sigma=0.1),
                                  weighting="relative")

    relative = BenchmarkProblem("relative", relative_problem)
    problems_module.register_problem(relative)
    with pytest.raises(ValueError, match=r"1 problem x method pairs could not run \(the other runs are stored\): "
                                         r"relative x lm: .*residuals are not its likelihood's"):
        run_grid(["relative", "gaussian-2"], ["lm"], 2, store=tmp_path, progress=False)
    assert sorted(Store(tmp_path).frame()["problem"]) == ["gaussian-2"] * 2  # the pair that can run, ran
    for kwargs, message in [({"methods": ["nope"]}, "unknown method"), ({"repeats": 0}, "at least one"),
                            ({"engine": "cluster"}, "engine must be"), ({"budget": {"steps": 1}}, "budget must be")]:
        args = {"problems": ["gaussian-2"], "methods": ["lm"], "repeats": 1, "store": tmp_path / "s",
                "progress": False} | kwargs
        with pytest.raises(ValueError, match=message):
            run_grid(**args)
    assert not list((tmp_path / "s").glob("*.parquet"))
    assert get_problem("gaussian-2")  # the built-in suite is untouched


@pytest.mark.slow  # a Dask cluster of two processes, each importing JAX and compiling (about a minute)
def test_on_dask_a_killed_worker_loses_nothing_and_nothing_is_stored_twice(tmp_path, monkeypatch):
    marker = tmp_path / "killed"

    def dying(key, problem, start):
        problem.log_likelihood(jnp.asarray(start))
        if not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process dies mid-grid; Dask runs its task again elsewhere

    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))
    register_method("dying", dying)
    frame = run_grid(["gaussian-2", "banana-2"], ["dying", "gauss-newton"], 2, store=tmp_path / "store", engine="local",
                n_workers=2, progress=False)
    assert marker.exists() and len(frame) == 8 and set(frame["status"]) == {"finished"}
    assert Store(tmp_path / "store").frame()["digest"].is_unique


@pytest.mark.slow  # imports and compiles a PEtab problem (about a minute)
def test_a_petab_collection_problem_runs_against_its_published_optimum(tmp_path, monkeypatch):
    root = shared_petab("benchmark_models")
    if not (root / "Boehm_JProteomeRes2014").exists():
        pytest.skip("the PEtab benchmark collection is not beside the checkout")
    monkeypatch.setattr(problems_module, "_SUITES", {k: dict(v) for k, v in problems_module._SUITES.items()})
    problems_module.register_petab_collection(root, ["Boehm_JProteomeRes2014"])
    row = run_grid("petab", ["fides"], 1, {"gradients": 100}, store=tmp_path, progress=False).iloc[0]
    assert row["status"] in ("finished", "budget") and row["gradients"] <= 100 and row["n_residuals"] > 0
    assert 130 < row["reference_nll"] < 140  # the published optimum: -log-likelihood 138.22
    assert row["best_nll"] >= row["reference_nll"] - 1e-3  # no start beats the published optimum
    assert row["n_solver_steps"] > 10 * row["n_residuals"]  # Rodas5P takes many steps per solve


def test_a_ctrl_c_during_a_compiled_evaluation_stops_the_grid_and_stores_nothing_of_its_run(tmp_path, monkeypatch,
                                                                                             user_methods):
    from jcalib.benchmark.cost import CostCounter

    record, calls = CostCounter._record, []

    def interrupted_at_the_third(self, kind, value):
        calls.append(kind)
        if len(calls) == 3:
            raise KeyboardInterrupt
        record(self, kind, value)

    monkeypatch.setattr(CostCounter, "_record", interrupted_at_the_third)
    with pytest.raises(KeyboardInterrupt):  # JAX wraps it in a runtime error; the runner raises it again
        run_grid(["gaussian-2"], ["gauss-newton"], 2, store=tmp_path, progress=False)
    assert not list(tmp_path.glob("*.parquet"))


def test_runs_of_other_budgets_are_reported_apart_and_a_problem_without_reference_does_not_break_it(
        tmp_path, monkeypatch, user_methods):
    monkeypatch.setattr(problems_module, "_SUITES", {k: dict(v) for k, v in problems_module._SUITES.items()})
    problems_module.register_problem(BenchmarkProblem("no-reference", get_problem("gaussian-2").build))
    run_grid(["gaussian-2"], ["gauss-newton"], 1, {"gradients": 1}, store=tmp_path / "s", progress=False)
    run_grid(["gaussian-2", "no-reference"], ["gauss-newton", "failing"], 1, store=tmp_path / "s", progress=False)
    table = optimizer_table(Store(tmp_path / "s").frame()).set_index(["problem", "method"])
    assert ("gaussian-2", 'gauss-newton {"gradients": 1.0}') in table.index and ("gaussian-2", "gauss-newton {}") \
        in table.index
    assert table.loc[("no-reference", "gauss-newton {}"), "within_0.05"] == 1.0  # best: its best run
    path = report(tmp_path / "s", tmp_path / "report")
    assert "no-reference" in path.read_text()


def test_a_sampler_s_unusable_draws_are_an_error_run_and_the_grid_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))
    register_method("garbage", lambda key, problem: "garbage", kind="sampler")
    register_method("stuck", lambda key, problem: np.zeros((2, 50, 2)), kind="sampler")
    frame = run_grid(["gaussian-2"], ["garbage", "stuck"], 1, store=tmp_path, progress=False).set_index("method")
    assert frame.loc["garbage", "status"] == "error" and "draws" in frame.loc["garbage", "message"]
    assert frame.loc["stuck", "status"] == "finished" and frame.loc["stuck", "ess_min"] == 0.0
    assert np.isnan(frame.loc["stuck", "ess_per_gradient"])  # it took no gradient


def test_a_sampler_s_marginals_are_tested_against_the_reference_draws(tmp_path, monkeypatch):
    """Exact posterior draws pass the C2ST (about 0.5); draws shifted by one posterior sd do not."""
    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))
    spec = get_problem("gaussian-2")

    def exact(key, problem, shift=0.0):
        draws = spec.reference_draws(np.random.default_rng(int(jax.random.randint(key, (), 0, 2 ** 30))), 4000)
        return (draws + [shift * spec.reference_sd[0], 0.0]).reshape(4, 1000, 2)

    register_method("exact", exact, kind="sampler")
    frame = run_grid(["gaussian-2"], ["exact", "exact:shift=1.0"], 1, store=tmp_path, progress=False)
    accuracy = frame.set_index("method")["c2st_max"]
    assert abs(accuracy["exact"] - 0.5) < 0.04 and accuracy["exact:shift=1.0"] > 0.62  # Phi(1/2) = 0.69
    assert "c2st_max" in sampler_table(frame)


class _GaussianPosterior:
    """gaussian-2's exact posterior for any data (its Gaussian truncated to the box), its
    covariance times ``scale ** 2`` (``scale < 1``: overconfident)."""

    def __init__(self, problem, scale):
        a = problems_module._GAUSSIAN_DESIGN / problems_module._GAUSSIAN_SIGMA[:, None]
        self.cov = np.linalg.inv(a.T @ a)
        self.gain = self.cov @ a.T / problems_module._GAUSSIAN_SIGMA
        self.lower, self.upper, self.scale = np.asarray(problem.space.lower), np.asarray(problem.space.upper), scale

    def sample(self, key, x, n):
        rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2 ** 30)))
        xs = np.asarray(x).reshape(-1, 3)
        out = []
        for data in xs:
            inside = np.empty((0, 2))
            while len(inside) < n:
                draws = rng.multivariate_normal(self.gain @ data, self.cov * self.scale ** 2, size=4 * n)
                inside = np.concatenate([inside, draws[np.all((draws > self.lower) & (draws < self.upper), axis=1)]])
            out.append(inside[:n])
        return np.stack(out) if np.ndim(x) == 3 else out[0]


def test_an_amortized_method_is_charged_its_simulations_and_checked_by_sbc(tmp_path, monkeypatch):
    """The exact posterior passes SBC and the C2ST; an overconfident one (sds halved) fails SBC.
    The method pays for the simulations it makes, not for the assessment's."""
    from jcalib.nn.data import simulate_training_set

    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))
    problem = get_problem("gaussian-2").build()

    def exact(key, simulator, noise, scale=1.0):
        np.testing.assert_array_equal(noise, problems_module._GAUSSIAN_SIGMA)
        simulate_training_set(key, simulator, 10, noise=noise)
        return _GaussianPosterior(problem, scale)

    register_method("exact-amortized", exact, kind="amortized")
    frame = run_grid(["gaussian-2"], ["exact-amortized", "exact-amortized:scale=0.5"], 1, store=tmp_path,
                     progress=False).set_index("method")
    good, bad = frame.loc["exact-amortized"], frame.loc["exact-amortized:scale=0.5"]
    assert good["status"] == "finished" and good["n_simulations"] == 10 and good["evaluations"] == 10
    assert good["sbc_in_band"] == 1.0 and good["sbc_min_p"] > 0.01 and good["c2st_max"] < 0.56
    assert bad["sbc_in_band"] == 0.0 and bad["sbc_min_p"] < 1e-3 and bad["c2st_max"] > 0.6
    assert set(sampler_table(frame.reset_index())["method"]) == {"exact-amortized", "exact-amortized:scale=0.5"}
    unknown_noise = BenchmarkProblem("no-noise-level", lambda: CalibrationProblem(
        problem.model, Measurements(np.asarray(problem.model.ts), np.ones((1, 3))), weighting="absolute"))
    with pytest.raises(ValueError, match="one known noise level per output"):
        run_grid([unknown_noise], ["exact-amortized"], 1, store=tmp_path, progress=False)


BUILDS: list[str] = []


def _counted_build(problem_id: str):
    BUILDS.append(problem_id)
    return get_problem(problem_id).build()


def test_problems_are_built_per_definition_and_repetitions_are_checked(tmp_path):
    import functools

    import cloudpickle

    from jcalib.benchmark import run_one

    first = run_one(BenchmarkProblem("same-id", get_problem("banana-2").build), "gauss-newton", 0)
    second = run_one(BenchmarkProblem("same-id", get_problem("rosenbrock-4").build), "gauss-newton", 0)
    assert (first["n_free"], second["n_free"]) == (2, 4)
    # a copy of a definition, as each Dask task unpickles one, reuses the problem built (and compiled) before
    entry = BenchmarkProblem("built-once", functools.partial(_counted_build, "gaussian-2"))
    for copy in (entry, cloudpickle.loads(cloudpickle.dumps(entry))):
        run_one(copy, "gauss-newton", 0)
    assert BUILDS == ["gaussian-2"]
    for repeats in (-1, 1.5, "1", [1.7], True, [0, -2]):
        with pytest.raises(ValueError, match="repeat"):
            run_grid(["gaussian-2"], ["lm"], repeats, store=tmp_path, progress=False)
    with pytest.raises(ValueError, match="repeat"):
        run_one("gaussian-2", "lm", -1)
    with pytest.raises(ValueError, match=r"a list of configurations; got the string 'lm'"):
        run_grid(["gaussian-2"], "lm", 1, store=tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"a single problem is a list: \['gaussian-2'\]"):
        run_grid("gaussian-2", ["lm"], 1, store=tmp_path, progress=False)


def test_a_derivative_free_method_has_no_cost_per_gradient_and_is_left_out_of_the_gradient_figures(
        tmp_path, monkeypatch):
    monkeypatch.setattr(methods_module, "_METHODS", dict(methods_module._METHODS))

    def random_search(key, problem, start, n=20):
        import jax

        for z in jax.random.uniform(key, (n, problem.n_free), minval=problem.space.lower_internal,
                                    maxval=problem.space.upper_internal):
            problem.log_likelihood(z)

    register_method("random-search", random_search)
    frame = run_grid(["gaussian-2"], ["random-search", "gauss-newton"], 1, store=tmp_path / "s", progress=False)
    table = optimizer_table(frame).set_index("method")
    assert np.isnan(table.loc["random-search", "converged_per_gradient"])
    assert table.loc["random-search", "median_evaluations"] == 20
    text = report(frame, tmp_path / "r").read_text()
    assert "Left out of the figures: random-search, which spent no gradients" in text
