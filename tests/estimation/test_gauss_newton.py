"""Damped Gauss-Newton with essential directions (Wulkow 2021 §2.2.1): exact linear step,
recovery on four_substance_reactions, essential directions of the polymerization case,
bounds, bad input."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.algorithm import Algorithm, run
from jcalib.data import Measurements
from jcalib.estimation.gauss_newton import gauss_newton, gauss_newton_algorithm
from jcalib.problems import CalibrationProblem
from tests.estimation.linear_case import design, linear_problem

NOMINAL = np.array([1e-4, 1e-5, 5e-5])  # four_substance_reactions: kab, kac, kad


def _noise_free_problem(observe):
    model = jcalib.models.get("four_substance_reactions", observe=observe)
    y = np.asarray(model.simulate(jnp.asarray(NOMINAL)))
    return CalibrationProblem(model, Measurements(model.ts, y, output_names=model.output_names))


@pytest.fixture(scope="module")
def abcd():
    return _noise_free_problem("ABCD")


@pytest.fixture(scope="module")
def a_only():
    return _noise_free_problem("A")


@pytest.fixture(scope="module")
def linear():
    return linear_problem()


def _assert_within_bounds(problem, result):
    theta = np.asarray(result.history["theta"])
    assert theta.shape == (result.n_steps + 1, problem.n_free)
    assert np.all(theta >= problem.space.lower) and np.all(theta <= problem.space.upper)
    assert np.all(result.theta >= problem.space.lower) and np.all(result.theta <= problem.space.upper)


# --- analytic reference -------------------------------------------------------------------
@pytest.mark.slow
def test_one_undamped_step_is_the_normal_equations_solution(linear):
    problem, y = linear
    a = design()
    expected = np.linalg.solve(a.T @ a, a.T @ y)
    result = gauss_newton(problem, [2.0, 1.0, -1.0], max_steps=1)
    assert result.history["damping"] == [1.0] and result.history["accepted"] == [True]
    np.testing.assert_allclose(result.theta, expected, rtol=1e-10, atol=1e-12)
    assert (result.n_steps, result.n_simulations, result.n_jacobians) == (1, 2, 2)
    # the same through init/step
    algorithm = gauss_newton_algorithm(problem)
    state, info = algorithm.step(algorithm.init(np.array([2.0, 1.0, -1.0])))
    np.testing.assert_allclose(state.theta_internal, expected, rtol=1e-10, atol=1e-12)
    assert info.accepted and info.damping == 1.0 and info.n_essential == 3
    np.testing.assert_allclose(info.loss, np.mean((y - a @ expected) ** 2), rtol=1e-10)


@pytest.mark.slow
def test_linear_converges_in_one_step_and_stops_on_step_size(linear):
    problem, _ = linear
    result = gauss_newton(problem, [0.0, 0.0, 0.0])
    assert result.converged and result.n_steps == 2
    assert "xtol" in result.reason
    json.dumps(result.to_dict())


def test_the_algorithm_driven_by_run_is_gauss_newton(abcd):
    """`gauss_newton` is its Algorithm driven by `jcalib.algorithm.run`: the same iterates,
    the same stop; the host-side step needs ``compiled=False``."""
    start = NOMINAL / 10
    result = gauss_newton(abcd, start, xtol=1e-9, ftol=1e-12)
    algorithm = gauss_newton_algorithm(abcd, xtol=1e-9, ftol=1e-12)
    assert isinstance(algorithm, Algorithm) and not algorithm.stochastic
    state = algorithm.init(np.log(start))
    out = run(None, algorithm, state, 100, compiled=False, stop=lambda s: s.stopped,
              trace_fn=lambda s, info: (s.theta_internal, info.loss))
    assert out.status == "converged" and out.n_steps == result.n_steps < 100
    np.testing.assert_array_equal(out.state.theta_internal, result.theta_internal)
    np.testing.assert_allclose(np.exp(out.trace[0]), np.asarray(result.history["theta"])[1:], rtol=1e-14)
    np.testing.assert_array_equal(out.trace[1], result.history["loss"][1:])
    # without a stopping rule the budget is spent: later steps no longer move the iterate
    budget = run(None, algorithm, state, out.n_steps + 2, compiled=False)
    assert budget.status == "completed" and budget.n_steps == out.n_steps + 2
    np.testing.assert_allclose(budget.state.theta_internal, result.theta_internal, rtol=1e-12)


# --- four_substance_reactions ---------------------------------------------------------------
def test_all_species_noise_free_recovers_truth_from_ten_times_off(abcd):
    start = NOMINAL / 10  # kac starts on its lower bound 1e-6
    result = gauss_newton(abcd, start)
    assert result.converged, result.reason
    np.testing.assert_allclose(result.theta, NOMINAL, rtol=1e-6)
    assert result.loss < 1e-20
    assert result.n_essential_directions == 3 and result.extra["flat_directions"] == []
    assert 1.5 < result.condition_number < 4  # spec: ~2.3 at the truth
    assert result.n_jacobians <= result.n_steps + 1 <= result.n_simulations + 1
    assert len(result.history["loss"]) == result.n_steps + 1
    assert np.all(np.diff(result.history["loss"]) <= 0)  # monotonicity test
    _assert_within_bounds(abcd, result)


@pytest.mark.slow
def test_a_only_two_essential_directions_flat_mixes_kac_and_kad(a_only):
    start = [1e-3, 1e-4, 1e-4]  # kab 10x, kac 10x, kad 2x the truth (upper bounds)
    result = gauss_newton(a_only, start)
    assert result.converged, result.reason
    assert result.n_essential_directions == 2
    assert result.condition_number > 1e6  # paper: ~1e8; structurally singular
    (flat,) = result.extra["flat_directions"]
    c = flat["components"]
    # A depends on kac + kad only: the flat direction is (0, kad, -kac)/norm in log coordinates
    assert abs(c["kab"]) < 1e-4
    assert abs(c["kac"]) > 0.5 and abs(c["kad"]) > 0.5 and c["kac"] * c["kad"] < 0
    np.testing.assert_allclose(result.estimate["kab"], 1e-4, rtol=1e-6)
    np.testing.assert_allclose(result.estimate["kac"] + result.estimate["kad"], 6e-5, rtol=1e-6)
    _assert_within_bounds(a_only, result)


@pytest.mark.slow
def test_a_only_paper_start_reaches_the_truth_ratio_rule_alone_stalls(a_only):
    """From the paper's start (1e-5 each) the Gauss-Newton direction first lowers kab, to where
    its direction is > 100x weaker than the first but still far above the exact kac/kad
    degeneracy: the clear-gap clause keeps it essential and the iteration reaches the truth.
    The 100 rule alone calls it flat, and the reduced-direction iteration stalls away from
    the minimum (issue 39 §3)."""
    result = gauss_newton(a_only, [1e-5, 1e-5, 1e-5])
    assert result.converged, result.reason
    assert result.n_essential_directions == 2 and result.loss < 1e-14
    np.testing.assert_allclose(result.estimate["kab"], 1e-4, rtol=1e-6)
    assert min(theta[0] for theta in result.history["theta"]) < 1e-5  # kab went down first
    _assert_within_bounds(a_only, result)
    ratio_only = gauss_newton(a_only, [1e-5, 1e-5, 1e-5], gap_ratio=None)
    assert ratio_only.estimate["kab"] < 1e-5 and ratio_only.n_essential_directions == 1
    assert ratio_only.loss > 1e-4
    _assert_within_bounds(a_only, ratio_only)


def test_a_start_on_a_bound_leaves_it_for_an_interior_optimum(a_only):
    """kab starts on its lower bound 1e-6, 100x below the truth, where its log-coordinate
    column is weakest; the optimum is inside the box and Gauss-Newton reaches it."""
    result = gauss_newton(a_only, [1e-6, 1e-5, 1e-5])
    np.testing.assert_allclose(result.history["theta"][0][0], a_only.space.lower[0], rtol=1e-12)
    assert result.converged, result.reason
    assert result.n_essential_directions == 2 and result.loss < 1e-14
    np.testing.assert_allclose(result.estimate["kab"], 1e-4, rtol=1e-6)
    np.testing.assert_allclose(result.estimate["kac"] + result.estimate["kad"], 6e-5, rtol=1e-6)
    _assert_within_bounds(a_only, result)


def test_fixed_number_of_essential_directions(a_only):
    result = gauss_newton(a_only, [1e-5, 1e-5, 1e-5], n_essential=2)
    assert result.extra["rule"] == "fixed" and result.n_essential_directions == 2
    np.testing.assert_allclose(result.estimate["kab"], 1e-4, rtol=1e-6)


# --- radical polymerization: simple model fitted to the real model's data ---------------------
@pytest.fixture(scope="module")
def polymerization_fits():
    """Simple model (f, ktc; ktd = 0 fixed) fitted to noise-free real-model data (recipe 1, the
    paper's times), start f0 = 1, ktc0 = 1e6 (paper Test 1). Both models with quasi-steady
    radicals (< 2e-4 from the full models on the measured entries) to keep compiles short.
    Parameter scaling: the problem's internal coordinates, (f, log ktc) -- f is linear on
    [0.1, 1] -- with relative residuals."""
    real = jcalib.models.get("radical_polymerization_real", recipe=1, outputs=("M", "Mw"), qss=True)
    y = np.asarray(real.simulate(jnp.asarray(real.parameters.nominal)))
    mask = np.asarray(real.experiment.mask)
    fits = {}
    for label, columns in (("M", [0]), ("M+Mw", [0, 1])):
        outputs = tuple(real.output_names[j] for j in columns)
        data = Measurements(real.ts, y[:, columns], mask=mask[:, columns], output_names=outputs)
        simple = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=outputs,
                                   qss=True)
        problem = CalibrationProblem(simple, data, free=["f", "ktc"], fixed={"ktd": 0.0})
        fits[label] = (problem, gauss_newton(problem, {"f": 1.0, "ktc": 1e6}))
    return fits


@pytest.mark.slow
def test_polymerization_monomer_only_one_essential_direction(polymerization_fits):
    problem, result = polymerization_fits["M"]
    assert result.converged, result.reason
    assert result.n_essential_directions == 1
    assert result.condition_number > 100
    (flat,) = result.extra["flat_directions"]
    assert abs(flat["components"]["f"]) > 0.05 and abs(flat["components"]["ktc"]) > 0.5
    _assert_within_bounds(problem, result)


@pytest.mark.slow
def test_polymerization_mw_breaks_the_correlation(polymerization_fits):
    _, m_only = polymerization_fits["M"]
    problem, result = polymerization_fits["M+Mw"]
    assert result.converged, result.reason
    assert result.n_essential_directions == 2 and result.extra["flat_directions"] == []
    assert result.condition_number * 10 <= m_only.condition_number
    assert result.condition_number < 20
    assert 0.1 < result.estimate["f"] < 1 and 1e6 < result.estimate["ktc"] < 1e8
    assert result.loss < 0.05  # model error of the simple model: R_X stays ~0.02
    _assert_within_bounds(problem, result)


# --- bad input ------------------------------------------------------------------------------
def test_start_outside_bounds_is_an_error(abcd):
    with pytest.raises(ValueError, match=r"theta0 is outside the bounds: kab = 1e-07 is below "
                                         r"the lower bound of \[1e-06, 0.001\]"):
        gauss_newton(abcd, [1e-7, 1e-5, 1e-5])
    with pytest.raises(ValueError, match="kad = 0.01 is above the upper bound"):
        gauss_newton(abcd, {"kad": 1e-2})
    with pytest.raises(ValueError, match=r"outside the bounds: kab = 0 is above .*internal"):
        gauss_newton(abcd, [0.0, -11.0, -11.0], coordinates="internal")


@pytest.mark.parametrize("kwargs, match", [
    ({"theta0": [1e-5, 1e-5]}, r"theta0 must have shape \(n_free,\) = \(3,\)"),
    ({"theta0": {"kda": 1e-5}}, r"theta0 names \['kda'\] that are not free parameters"),
    ({"theta0": [np.nan, 1e-5, 1e-5]}, "theta0 must be finite"),
    ({"max_steps": 0}, "max_steps must be a positive integer"),
    ({"coordinates": "log"}, r"coordinates must be one of \(.physical., .internal.\); got .log."),
    ({"xtol": -1.0}, "xtol must be a finite number >= 0"),
    ({"flat_ratio": 1.0}, "flat_ratio must be a number > 1"),
    ({"gap_ratio": 0.5}, "gap_ratio must be > 1 or None"),
    ({"n_essential": 4}, r"n_essential must be None \(rule\) or an integer in \[1, n_free=3\]"),
    ({"min_damping": 0.0}, r"min_damping must be in \(0, 1\]"),
    ({"damping_growth": 0.5}, "damping_growth must be >= 1"),
])
def test_bad_arguments(abcd, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gauss_newton(abcd, **kwargs)


def test_problem_type_is_checked():
    with pytest.raises(ValueError, match="problem must be a CalibrationProblem"):
        gauss_newton("not a problem")
