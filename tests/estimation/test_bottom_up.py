"""bottom_up on the linear-in-parameters model: known knees, warm starts, bounds, bad input."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from jcalib.data import Measurements
from jcalib.estimation.bottom_up import BottomUpResult, bottom_up, find_knee
from jcalib.estimation.result import EstimationResult
from jcalib.plotting import plot_cost_versus_parameters
from jcalib.problems import CalibrationProblem
from jcalib.sensitivity.identifiability import identifiability
from tests.estimation.linear_case import TS, design, linear_model

# a and b off their nominal 0, c at its nominal 0: ranked (a, b, c) the cost vanishes at j = 2
TRUTH = np.array([1.0, -0.5, 0.0])


def _problem(theta, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    y = (design() @ theta).reshape(TS.size, 2) + noise * rng.standard_normal((TS.size, 2))
    return CalibrationProblem(linear_model(), Measurements(TS, y, output_names=("y1", "y2")),
                              weighting="absolute")


@pytest.fixture(scope="module")
def problem():
    """Noise-free data: only a and b differ from the nominal values."""
    return _problem(TRUTH)


@pytest.fixture(scope="module")
def result(problem):
    return bottom_up(problem, ["a", "b", "c"])


@pytest.fixture(scope="module")
def result_c_first(problem):
    """The nominal-valued c ranked first: it can only partly compensate a and b."""
    return bottom_up(problem, ["c", "a", "b"])


@pytest.mark.slow
def test_cost_vanishes_at_the_known_knee_and_stays(result):
    assert isinstance(result, BottomUpResult)
    assert result.ranking == ("a", "b", "c") and result.n_steps == 3
    j0, (j1, j2, j3) = result.initial_loss, result.costs
    assert j0 > 0.1 and j1 > 1e-3 * j0  # a alone cannot explain b t
    assert j2 < 1e-16 * j0 and j3 < 1e-16 * j0
    assert result.knee == 2 and result.selected == ("a", "b")
    assert result.final is result.steps[1]
    assert result.estimate == pytest.approx({"a": 1.0, "b": -0.5}, abs=1e-8)
    assert all(isinstance(r, EstimationResult) and r.method == "trf" for r in result.steps)
    assert [r.names for r in result.steps] == [("a",), ("a", "b"), ("a", "b", "c")]


@pytest.mark.slow
def test_costs_do_not_increase_with_more_parameters(result, result_c_first):
    for r in (result, result_c_first):
        curve = np.concatenate([[r.initial_loss], r.costs])
        assert np.all(np.diff(curve) <= 1e-12 * curve[:-1] + 1e-25)


@pytest.mark.slow
def test_knee_follows_the_ranking(result_c_first):
    j0, (j1, j2, j3) = result_c_first.initial_loss, result_c_first.costs
    assert j1 < j0 and j2 < j1  # c, then a, lower the cost but do not reach the data
    assert j2 > 1e-3 * j0 and j3 < 1e-16 * j0
    assert result_c_first.knee == 3
    assert result_c_first.estimate == pytest.approx({"c": 0.0, "a": 1.0, "b": -0.5}, abs=1e-7)


@pytest.mark.slow
def test_max_curvature_rule_finds_the_same_knees(result, result_c_first):
    for r, knee in ((result, 2), (result_c_first, 3)):
        curve = np.concatenate([[r.initial_loss], r.costs])
        assert find_knee(curve, "max_curvature") == knee
    assert find_knee([1.0, 0.3, 1e-20, 1e-20, 1e-20], "max_curvature") == 2
    assert find_knee([1.0, 0.5, 0.4, 1e-3], "max_curvature") == 3  # the drop at the last step
    assert find_knee([1.0, 0.5], "max_curvature") == 1


def test_find_knee_plateau_rule():
    # the cost after j = 2 decreases by 0.5 % of the total: below the 1 % threshold
    assert find_knee([1.0, 0.5, 0.105, 0.102, 0.1]) == 2
    assert find_knee([1.0, 0.5, 0.105, 0.102, 0.1], threshold=0.001) == 4
    assert find_knee([1.0, 1.0, 1.0]) == 1  # nothing helped: the smallest subset
    assert find_knee([1.0, 0.1, 0.2, 0.05]) == 3  # not monotone: compares with later minima


@pytest.mark.slow
def test_warm_starts_continue_from_the_previous_estimates(result_c_first):
    r = result_c_first
    assert r.base == {"a": 0.0, "b": 0.0, "c": 0.0}
    for j in range(1, r.n_steps):
        start = r.starts[j]
        np.testing.assert_array_equal(start[:j], r.steps[j - 1].theta)
        assert start[j] == r.base[r.ranking[j]]
        # TRF records the loss and parameters at the start first
        np.testing.assert_allclose(r.steps[j].history["theta"][0], start)
    # parameters not yet added are held at their base values
    held = r.parameters_at(1)
    assert held["a"] == 0.0 and held["b"] == 0.0 and held["c"] == r.steps[0].theta[0]
    assert r.parameters_at() == {**r.base, **r.estimate}


@pytest.mark.slow
def test_bounds_hold_with_gauss_newton_and_a_base_start():
    # a = 15 lies above its upper bound 10: the estimate stops on the bound
    problem = _problem(np.array([15.0, -0.5, 0.0]))
    r = bottom_up(problem, ["a", "b", "c"], method="gauss-newton", theta0={"c": 0.1},
                  options={"max_steps": 30})
    assert r.method == "gauss-newton" and r.base["c"] == 0.1
    assert r.starts[2][2] == 0.1  # c enters at its base value
    lower, upper = problem.space.lower, problem.space.upper
    for step in r.steps:
        index = [problem.free_names.index(n) for n in step.names]
        assert np.all(step.theta >= lower[index]) and np.all(step.theta <= upper[index])
        for theta in step.history["theta"]:
            assert np.all(np.asarray(theta) <= upper[index])
    assert r.steps[0].theta[0] == pytest.approx(10.0)
    assert r.steps[0].extra["at_bounds"] == {"a": "upper"}


@pytest.mark.slow
def test_ranking_from_an_identifiability_report(problem):
    report = identifiability(problem, np.array([0.5, -0.2, 0.1]), start="j_sensitivity")
    r = bottom_up(problem, report, max_params=2)
    assert r.ranking == report.correlation.order[:2]
    assert r.ranking[0] == report.j_sensitivity_order[0]


@pytest.mark.slow
def test_to_dict_round_trips_through_json(result, tmp_path):
    d = result.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["knee"] == 2 and d["selected"] == ["a", "b"] and d["knee_rule"] == "plateau"
    assert [s["added"] for s in d["steps"]] == ["a", "b", "c"]
    assert d["final"]["estimate"] == d["steps"][1]["estimate"]
    assert "results" not in d and len(result.to_dict(include_results=True)["results"]) == 3
    fig = plot_cost_versus_parameters(result)
    fig.savefig(tmp_path / "cost.png")
    assert (tmp_path / "cost.png").stat().st_size > 0
    plt.close(fig)


@pytest.mark.slow
def test_callable_knee_rule(problem, result):
    r = bottom_up(problem, ["a"], knee_rule=lambda costs: len(costs) - 1)
    assert r.knee == 1 and r.knee_rule == "callable" and r.knee_threshold is None
    with pytest.raises(ValueError, match=r"knee_rule callable must return an integer in \[1, 1\]; got 0"):
        bottom_up(problem, ["a"], knee_rule=lambda costs: 0)


@pytest.mark.parametrize("ranking, kwargs, match", [
    ([], {}, r"bottom_up: ranking is empty; pass at least one parameter name"),
    (["a", "b", "a"], {}, r"bottom_up: ranking has duplicate names 'a'"),
    (["a", "kab"], {}, r"bottom_up: ranking names unknown parameter\(s\) 'kab'; known: 'a', 'b', 'c'"),
    ([1, 2], {}, r"ranking must hold parameter names \(str\); got 1"),
    (3, {}, r"ranking must be a sequence of parameter names or an IdentifiabilityReport; got int"),
    (["a"], {"method": "lm"}, r"method must be one of \('trf', 'gauss-newton'\); got 'lm'"),
    (["a", "b"], {"max_params": 3}, r"max_params must be None or an integer in \[1, 2\]"),
    (["a", "b"], {"max_params": True}, r"max_params must be None or an integer"),
    (["a"], {"knee_rule": "elbow"}, r"knee_rule must be one of \('plateau', 'max_curvature'\)"),
    (["a"], {"knee_threshold": 1.5}, r"knee_threshold must be a number in \(0, 1\)"),
    (["a"], {"options": {"flat_ratio": 5.0}},
     r"options 'flat_ratio' are not keyword arguments of least_squares_trf; allowed: jac"),
    (["a"], {"options": {"theta0": [1.0]}}, r"theta0 is bottom_up's own argument"),
    (["a"], {"theta0": {"a": 20.0}}, r"bottom_up: theta0 is outside the bounds: a = 20"),
])
def test_bad_input_raises(problem, ranking, kwargs, match):
    with pytest.raises(ValueError, match=match):
        bottom_up(problem, ranking, **kwargs)


def test_ranking_of_a_fixed_parameter_raises(problem):
    with pytest.raises(ValueError, match=r"ranking names parameter\(s\) 'c' that the problem fixes; "
                                         r"free: 'a', 'b'"):
        bottom_up(problem.fix({"c": 0.0}), ["a", "c"])
    with pytest.raises(ValueError, match=r"bottom_up: problem must be a CalibrationProblem; got list"):
        bottom_up([1.0], ["a"])


@pytest.mark.slow
def test_bad_knee_inputs_raise(result):
    with pytest.raises(ValueError, match=r"find_knee: costs must be \(J_0, J_1, ..., J_mu\) with mu >= 1"):
        find_knee([1.0])
    with pytest.raises(ValueError, match=r"find_knee: costs must be finite"):
        find_knee([1.0, np.nan])
    with pytest.raises(ValueError, match=r"find_knee: rule must be one of"):
        find_knee([1.0, 0.5], "elbow")
    with pytest.raises(ValueError, match=r"parameters_at: n_params must be an integer in \[1, 3\]"):
        result.parameters_at(4)
