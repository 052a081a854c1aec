"""jcalib.io.petab on the PEtab test suite (format 1.0.0, SBML cases 0001-0020): chi2, llh and
simulations against each case's solution, within its tolerances."""


import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import petab.v1 as petab
import pytest
import yaml
from scipy import stats

from jcalib.estimation import multistart
from jcalib.io import petab as jpetab
from jcalib.model import SolveStatus
from tests.helpers import shared_petab

SUITE = shared_petab("test_suite_v1")
CASES = [f"{i:04d}" for i in range(1, 21)]

# cases jcalib.io.petab does not support yet, with the PEtab feature that is missing
UNSUPPORTED: dict[str, str] = {}


def _case(case):
    folder = SUITE / case
    if not folder.exists():
        pytest.skip(f"the PEtab test suite is not at {SUITE}")
    with open(folder / f"_{case}_solution.yaml") as stream:
        solution = yaml.safe_load(stream)
    return folder, solution


# make test runs case 0001 (two species, one observable); the other cases (5-15 s of compiling each)
# run in make test-all
@pytest.mark.parametrize("case", [c if c == "0001" else pytest.param(c, marks=pytest.mark.slow) for c in CASES])
def test_petab_suite_case(case):
    if case in UNSUPPORTED:
        pytest.skip(f"PEtab test case {case}: unsupported feature: {UNSUPPORTED[case]}")
    folder, solution = _case(case)
    pp = jpetab.load(folder / f"_{case}.yaml")
    z = pp.nominal_internal
    chi2, llh = float(pp.chi2(z)), float(pp.log_likelihood(z))
    assert abs(chi2 - solution["chi2"]) < solution["tol_chi2"], (chi2, solution["chi2"])
    assert abs(llh - solution["llh"]) < solution["tol_llh"], (llh, solution["llh"])
    expected = pd.read_csv(folder / solution["simulation_files"][0], sep="\t")
    table = pp.simulation_table(z)
    assert list(table["observableId"]) == list(expected["observableId"])
    assert list(table["simulationConditionId"]) == list(expected["simulationConditionId"])
    np.testing.assert_allclose(table["time"], expected["time"])
    tol = solution["tol_simulations"]
    np.testing.assert_allclose(table["simulation"], expected["simulation"], rtol=tol, atol=tol)


@pytest.mark.slow
def test_petab_gradient_matches_finite_differences():
    folder, _ = _case("0019")  # a log10-scale estimated initial value
    pp = jpetab.load(folder / "_0019.yaml")
    z = pp.nominal_internal
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    eps = 1e-6
    fd = [(float(pp.log_likelihood(z.at[i].add(eps))) - float(pp.log_likelihood(z.at[i].add(-eps)))) / (2 * eps)
          for i in range(z.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["0007", "0016"])  # lin + log10, lin + log observables
def test_petab_laplace_matches_petab_calculate(case, tmp_path):
    """Laplace noise (not in the suite's cases 1-20): llh and chi2 equal petab's own
    calculate_llh / calculate_chi2 on jcalib's simulation table."""
    folder, _ = _case(case)
    for path in folder.iterdir():
        if path.is_file():
            (tmp_path / path.name).write_text(path.read_text())
    observables = pd.read_csv(folder / "_observables.tsv", sep="\t")
    observables["noiseDistribution"] = "laplace"
    observables.to_csv(tmp_path / "_observables.tsv", sep="\t", index=False)
    pp = jpetab.load(tmp_path / f"_{case}.yaml")
    z = pp.nominal_internal
    table = pp.simulation_table(z)
    p = pp.petab_problem
    expected_llh = petab.calculate_llh(p.measurement_df, table, p.observable_df, p.parameter_df)
    expected_chi2 = petab.calculate_chi2(p.measurement_df, table, p.observable_df, p.parameter_df)
    np.testing.assert_allclose(float(pp.log_likelihood(z)), expected_llh, rtol=1e-10)
    np.testing.assert_allclose(float(pp.chi2(z)), expected_chi2, rtol=1e-10)


def test_petab_unsupported_feature_is_refused(tmp_path):
    folder, _ = _case("0001")
    for name in ("_model.xml", "_conditions.tsv", "_parameters.tsv", "_0001.yaml"):
        (tmp_path / name).write_text((folder / name).read_text())
    (tmp_path / "_measurements.tsv").write_text("observableId\tsimulationConditionId\ttime\tmeasurement\n"
                                                "obs_a\tc0\t-inf\t0.7\n")
    (tmp_path / "_observables.tsv").write_text((folder / "_observables.tsv").read_text())
    with pytest.raises(ValueError, match="unsupported PEtab feature: measurement times that are NaN or -inf"):
        jpetab.load(tmp_path / "_0001.yaml", validate=False)


@pytest.mark.slow  # ~65 s cold
def test_petab_steady_state_measurements(tmp_path):
    """Case 0001 (A <-> B, k1 A and k2 B, A(0) + B(0) = 1) with rows at t = inf: the steady state
    A = k2 / (k1 + k2) and its gradient, next to the finite-time rows (unchanged)."""
    path = _copy("0001", tmp_path)
    (tmp_path / "_measurements.tsv").write_text("observableId\tsimulationConditionId\ttime\tmeasurement\n"
                                                "obs_a\tc0\t0\t0.7\nobs_a\tc0\tinf\t0.4\n"
                                                "obs_a\tc0\t10\t0.1\nobs_a\tc0\tinf\t0.45\n")
    pp = jpetab.load(path)
    z = pp.nominal_internal  # a0, b0, k1, k2 = 1, 0, 0.8, 0.6 (lin scale)
    table = pp.simulation_table(z)
    assert np.isinf(table["time"].to_numpy()[[1, 3]]).all()
    steady = 0.6 / 1.4
    np.testing.assert_allclose(table["simulation"], [1.0, steady, 0.42857190373069665, steady], rtol=1e-6)
    # d llh / d k1 of the two steady-state rows (sigma 0.5) is analytic; the finite-time rows by FD
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    eps = 1e-6
    fd = [(float(pp.log_likelihood(z.at[i].add(eps))) - float(pp.log_likelihood(z.at[i].add(-eps)))) / (2 * eps)
          for i in range(z.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)
    d_steady_dk1 = -0.6 / 1.4 ** 2
    r = np.array([0.4, 0.45]) - steady
    grad_steady_k1 = float(np.sum(r / 0.25) * d_steady_dk1)
    (tmp_path / "_measurements.tsv").write_text("observableId\tsimulationConditionId\ttime\tmeasurement\n"
                                                "obs_a\tc0\tinf\t0.4\nobs_a\tc0\tinf\t0.45\n")
    pp_steady = jpetab.load(path)
    np.testing.assert_allclose(float(jax.grad(pp_steady.log_likelihood)(z)[2]), grad_steady_k1, rtol=1e-5)
    # a model with events: its steady state would ignore them, so the problem is refused
    model = (tmp_path / "_model.xml").read_text()
    event = ('<listOfEvents><event id="dose"><trigger><math xmlns="http://www.w3.org/1998/Math/MathML"><apply><geq/>'
             '<csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">t</csymbol><cn>1</cn>'
             '</apply></math></trigger><listOfEventAssignments><eventAssignment variable="A"><math '
             'xmlns="http://www.w3.org/1998/Math/MathML"><cn>1</cn></math></eventAssignment>'
             '</listOfEventAssignments></event></listOfEvents>')
    (tmp_path / "_model.xml").write_text(model.replace("</model>", event + "</model>"))
    with pytest.raises(ValueError, match=r"steady states .* of a model with events \['dose'\]"):
        jpetab.load(path)
    (tmp_path / "_model.xml").write_text(model)
    # a steady state not reached (here: a step budget of 2) is a status, NaN and -inf, not a number
    starved = jpetab.load(path, max_steps=2)
    assert starved.problem.solve_status(starved.to_problem_internal(z)) == SolveStatus.NO_STEADY_STATE
    assert np.isnan(starved.simulate(z)).all() and float(starved.log_likelihood(z)) == -np.inf


@pytest.mark.slow
def test_petab_steady_state_derivatives_are_exact_for_slow_kinetics(tmp_path):
    """Case 0001 with slow rates (k1 = 2e-3, k2 = 1e-3 /s) and one t = inf row: the simulation
    reaches the steady-state event while its slowest mode (and more so its sensitivities) are
    still converging; the polished steady state and its implicit-function derivatives match
    A = (a0 + b0) k2 / (k1 + k2) and its analytic derivatives, the dependence on a0 and b0
    coming through the conserved total A + B."""
    path = _copy("0001", tmp_path)
    (tmp_path / "_parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "a0\tlin\t0\t10\t1.0\t1\nb0\tlin\t0\t10\t0.5\t1\nk1\tlin\t0\t10\t0.002\t1\nk2\tlin\t0\t10\t0.001\t1\n")
    (tmp_path / "_measurements.tsv").write_text("observableId\tsimulationConditionId\ttime\tmeasurement\n"
                                                "obs_a\tc0\tinf\t0.4\n")
    pp = jpetab.load(path)
    assert pp.model.conservation.shape == (1, 2)  # A + B
    z = pp.nominal_internal
    a0, b0, k1, k2 = 1.0, 0.5, 0.002, 0.001
    steady = (a0 + b0) * k2 / (k1 + k2)
    np.testing.assert_allclose(pp.simulation_table(z)["simulation"], [steady], rtol=1e-10)
    d_steady = np.array([k2 / (k1 + k2), k2 / (k1 + k2), -(a0 + b0) * k2 / (k1 + k2) ** 2,
                         (a0 + b0) * k1 / (k1 + k2) ** 2])  # d/d(a0, b0, k1, k2)
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    np.testing.assert_allclose(grad, (0.4 - steady) / 0.25 * d_steady, rtol=1e-8)


def _copy(case, tmp_path):
    folder, _ = _case(case)
    for path in folder.iterdir():
        if path.is_file():
            (tmp_path / path.name).write_text(path.read_text())
    return tmp_path / f"_{case}.yaml"


@pytest.fixture(scope="module")
def noise_case():
    """Case 0015: an estimated noise parameter (sigma varies with z)."""
    folder, solution = _case("0015")
    return jpetab.load(folder / "_0015.yaml"), solution


@pytest.mark.slow
def test_petab_problem_is_the_same_objective(noise_case):
    pp, solution = noise_case
    problem = pp.problem
    assert problem.free_names == pp.parameter_ids
    z = pp.nominal_internal
    theta = pp.to_problem_internal(z)
    np.testing.assert_allclose(pp.from_problem_internal(theta), z, rtol=1e-15)
    np.testing.assert_allclose(float(problem.log_likelihood(theta)), solution["llh"], atol=solution["tol_llh"])
    np.testing.assert_allclose(problem.to_physical(theta), pp.to_physical(z), rtol=1e-14)
    table = problem.simulation_table(theta)
    np.testing.assert_array_equal(table["simulation"], pp.simulation_table(z)["simulation"])


@pytest.mark.slow  # 9-16 s of compiling; moved out of make test to keep it under 10 min (2026-12-02)
def test_petab_problem_residuals_with_estimated_noise(noise_case):
    """With sigma estimated, the residuals carry one sigma term per row (AMICI's trick):
    0.5 sum r^2 + llh is the same constant at any parameters, and the first half of the
    residuals squared is chi2."""
    pp, _ = noise_case
    problem = pp.problem
    n_rows = len(pp.petab_problem.measurement_df)
    assert problem.n_observed == 2 * n_rows
    constants = []
    for shift in (0.0, 0.3):
        theta = pp.to_problem_internal(pp.nominal_internal) + shift
        r = np.asarray(problem.residuals(theta))
        np.testing.assert_allclose(np.sum(r[:n_rows] ** 2), float(pp.chi2(pp.from_problem_internal(theta))),
                                   rtol=1e-12)
        constants.append(0.5 * np.sum(r ** 2) + float(problem.log_likelihood(theta)))
    np.testing.assert_allclose(constants[0], constants[1], rtol=1e-12)
    np.testing.assert_allclose(constants[0], 0.5 * n_rows * 50.0, rtol=1e-12)  # no transformation: no log-Jacobian


@pytest.mark.slow
def test_petab_problem_jacobian_matches_finite_differences(noise_case):
    pp, _ = noise_case
    problem = pp.problem
    theta = pp.to_problem_internal(pp.nominal_internal)
    jac = np.asarray(problem.jacobian(theta))
    eps = 1e-6
    fd = np.stack([(np.asarray(problem.residuals(theta.at[i].add(eps)))
                    - np.asarray(problem.residuals(theta.at[i].add(-eps)))) / (2 * eps)
                   for i in range(theta.size)], axis=1)
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7)
    batched = jax.vmap(problem._log_likelihood_impl)(jnp.stack([theta, theta + 0.1]))
    np.testing.assert_allclose(batched[1], float(problem.log_likelihood(theta + 0.1)), rtol=1e-12)


@pytest.mark.slow
def test_petab_problem_least_squares_fit(noise_case):
    """Levenberg-Marquardt (vmapped multistart from the PEtab bounds) on the PEtab problem:
    the best start reaches at least the nominal log-likelihood."""
    pp, _ = noise_case
    problem = pp.problem.fix({"a0": 1.0, "b0": 0.0})  # 2 data points: keep k1, k2, noise
    result = multistart(jax.random.key(0), problem, 8, "lm", "lhs")
    best = result.best.theta_internal
    nominal = pp.to_problem_internal(pp.nominal_internal)[2:]
    assert float(problem.log_likelihood(best)) >= float(problem.log_likelihood(nominal)) - 1e-6


def test_petab_problem_fix_and_bad_input(noise_case):
    pp, _ = noise_case
    theta = pp.to_problem_internal(pp.nominal_internal)
    fixed = pp.problem.fix({"k1": float(pp.to_physical(pp.nominal_internal)[2])})
    assert "k1" not in fixed.free_names and fixed.fixed["k1"] == 0.8
    np.testing.assert_allclose(float(fixed.log_likelihood(jnp.delete(theta, 2))),
                               float(pp.problem.log_likelihood(theta)), rtol=1e-12)
    with pytest.raises(ValueError, match="not an estimated parameter"):
        pp.problem.fix({"nope": 1.0})
    with pytest.raises(ValueError, match="shape"):
        pp.log_likelihood(jnp.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        pp.problem.log_likelihood(jnp.zeros(3))


@pytest.mark.slow
def test_petab_failed_solve_is_not_a_number(tmp_path):
    """A solve that cannot finish gives -inf log-likelihood, NaN residuals and a status."""
    pp = jpetab.load(_copy("0001", tmp_path), max_steps=2)
    theta = pp.to_problem_internal(pp.nominal_internal)
    assert float(pp.problem.log_likelihood(theta)) == -np.inf
    assert float(pp.log_likelihood(pp.nominal_internal)) == -np.inf
    assert np.all(np.isnan(pp.problem.residuals(theta)))
    assert pp.problem.solve_status(theta) == SolveStatus.MAX_STEPS
    assert pp.problem.solve_status(theta.at[0].set(np.nan)) == SolveStatus.INVALID_INPUT


def test_petab_laplace_refuses_least_squares(tmp_path):
    path = _copy("0001", tmp_path)
    observables = pd.read_csv(tmp_path / "_observables.tsv", sep="\t")
    observables["noiseDistribution"] = "laplace"
    observables.to_csv(tmp_path / "_observables.tsv", sep="\t", index=False)
    pp = jpetab.load(path)
    theta = pp.to_problem_internal(pp.nominal_internal)
    with pytest.raises(ValueError, match="laplace noise, which is not a least-squares problem"):
        pp.problem.residuals(theta)
    assert np.isfinite(float(pp.problem.log_posterior(theta)))


def test_petab_objective_priors(tmp_path):
    """objectivePriorType normal / parameterScaleNormal on log10 become truncated jcalib priors."""
    path = _copy("0019", tmp_path)
    parameters = pd.read_csv(tmp_path / "_parameters.tsv", sep="\t")
    parameters["objectivePriorType"] = ["normal", "", "parameterScaleNormal", ""]
    parameters["objectivePriorParameters"] = ["0.8;0.5", "", "0.3;0.2", ""]
    parameters.to_csv(tmp_path / "_parameters.tsv", sep="\t", index=False)
    pp = jpetab.load(path)
    problem = pp.problem
    z = pp.nominal_internal  # k1 0.8, k2 0.6, log10 initial_A = log10(2)
    theta = pp.to_problem_internal(z)
    k1 = stats.truncnorm((0 - 0.8) / 0.5, (10 - 0.8) / 0.5, loc=0.8, scale=0.5).logpdf(0.8)
    k2 = -np.log(10.0)  # default: uniform on [0, 10]
    # log10 A ~ N(0.3, 0.2) truncated to [0, 1]; in jcalib's coordinate ln A = ln 10 * log10 A
    a = stats.truncnorm((0 - 0.3) / 0.2, (1 - 0.3) / 0.2, loc=0.3, scale=0.2).logpdf(float(z[2])) - np.log(np.log(10))
    np.testing.assert_allclose(float(problem.log_prior(theta)), k1 + k2 + a, rtol=1e-10)
    parameters["objectivePriorType"] = ["laplace", "", "", ""]
    parameters.to_csv(tmp_path / "_parameters.tsv", sep="\t", index=False)
    pp = jpetab.load(path)
    assert np.isfinite(float(pp.problem.log_likelihood(theta)))
    with pytest.raises(ValueError, match="objectivePriorType 'laplace'"):
        pp.problem.log_prior(theta)
    with pytest.raises(ValueError, match="objectivePriorType 'laplace'"):
        pp.problem.log_posterior(theta)


@pytest.mark.slow
def test_cli_petab_simulate_and_fit(tmp_path):
    """`jcalib petab PATH.yaml`: the simulation table at the nominal parameters is the suite's
    expected one; a Gauss-Newton fit reaches at least the nominal log-likelihood; bad input is
    one error line."""
    import json

    from typer.testing import CliRunner

    from jcalib.cli import app

    folder, solution = _case("0019")
    runner = CliRunner()
    result = runner.invoke(app, ["petab", str(folder / "_0019.yaml"), "--out", str(tmp_path / "sim")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "sim" / "simulation.tsv", sep="\t")
    expected = pd.read_csv(folder / solution["simulation_files"][0], sep="\t")
    tol = solution["tol_simulations"]
    np.testing.assert_allclose(table["simulation"], expected["simulation"], rtol=tol, atol=tol)
    metrics = json.loads((tmp_path / "sim" / "metrics.json").read_text())
    assert abs(metrics["llh_nominal"] - solution["llh"]) < solution["tol_llh"]
    result = runner.invoke(app, ["petab", str(folder / "_0019.yaml"), "--method", "gauss-newton",
                                 "--out", str(tmp_path / "gn")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "gn" / "metrics.json").read_text())
    assert metrics["llh"] >= metrics["llh_nominal"] - 1e-6
    result = runner.invoke(app, ["petab", str(folder / "_0019.yaml"), "--method", "nope"])
    assert result.exit_code == 2 and "--method must be one of" in result.output
    result = runner.invoke(app, ["petab", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "no such file" in result.output


@pytest.mark.slow
def test_petab_gradient_on_a_stiff_collection_model():
    """Boehm_JProteomeRes2014 (stiff): jax.grad of the log-likelihood comes from forward
    sensitivities (reverse mode through diffrax's implicit solver raised a lineax error here)
    and matches central finite differences; its llh is the collection's -138.222."""
    folder = shared_petab("benchmark_models") / "Boehm_JProteomeRes2014"
    if not folder.exists():
        pytest.skip(f"the benchmark collection is not at {folder.parent}")
    pp = jpetab.load(folder / "Boehm_JProteomeRes2014.yaml")
    z = pp.nominal_internal
    np.testing.assert_allclose(float(pp.log_likelihood(z)), -138.22199, atol=1e-3)
    z = z + 0.1  # away from the optimum, where the gradient is not round-off
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    eps = 1e-4
    fd = np.array([(float(pp.log_likelihood(z.at[i].add(eps))) - float(pp.log_likelihood(z.at[i].add(-eps))))
                   / (2 * eps) for i in range(z.size)])
    assert np.max(np.abs(grad)) > 10.0
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_petab_gradient_where_an_observable_is_zero(tmp_path):
    """An untransformed observable that is exactly 0 (B at t = 0 with b0 = 0): the log branch
    of the transformation must not leak 0 * inf = NaN into the gradient."""
    path = _copy("0001", tmp_path)
    observables = pd.read_csv(tmp_path / "_observables.tsv", sep="\t")
    observables["observableFormula"] = "B"
    observables.to_csv(tmp_path / "_observables.tsv", sep="\t", index=False)
    pp = jpetab.load(path)
    z = pp.nominal_internal
    assert float(pp.simulate(z)[0]) == 0.0
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    assert np.all(np.isfinite(grad))
    eps = 1e-6
    fd = [(float(pp.log_likelihood(z.at[i].add(eps))) - float(pp.log_likelihood(z.at[i].add(-eps)))) / (2 * eps)
          for i in range(z.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_petab_vmapped_conditions_equal_one_by_one():
    """Case 0005 (two conditions): the vmapped solve (``batch_size=2``) gives the sequential
    results and the suite's llh; a bad batch size is refused."""
    folder, solution = _case("0005")
    one_by_one = jpetab.load(folder / "_0005.yaml")
    z = one_by_one.nominal_internal
    expected = np.asarray(one_by_one.simulate(z))
    vmapped = jpetab.load(folder / "_0005.yaml", batch_size=2)
    np.testing.assert_allclose(vmapped.simulate(z), expected, rtol=1e-12)
    assert abs(float(vmapped.log_likelihood(z)) - solution["llh"]) < solution["tol_llh"]
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        jpetab.load(folder / "_0005.yaml", batch_size=0)


def test_each_preequilibration_condition_is_solved_once_and_starts_its_simulations(tmp_path):
    """Case 0009's A <-> B (k1 A, k2 B, A + B = a0 + b0 = 1) with two pre-equilibration conditions
    (k1 = 0.3, 0.5) and three simulations (k1 = 0.8, 1.2 after the first, 0.8 after the second):
    two steady states are solved, and each simulation starts from its own:
    A(t) = A_ss + (A_pre - A_ss) exp(-(k1 + k2) t) with A_ss = k2 / (k1 + k2)."""
    path = _copy("0009", tmp_path)
    (tmp_path / "_conditions.tsv").write_text("conditionId\tk1\np0\t0.3\np1\t0.5\nc0\t0.8\nc1\t1.2\nc2\t0.8\n")
    (tmp_path / "_measurements.tsv").write_text(
        "observableId\tpreequilibrationConditionId\tsimulationConditionId\ttime\tmeasurement\n"
        "obs_a\tp0\tc0\t1\t0.7\nobs_a\tp0\tc1\t1\t0.6\nobs_a\tp1\tc2\t1\t0.5\nobs_a\tp0\tc0\t10\t0.1\n")
    pp = jpetab.load(path)
    group = pp.problem.plan["pair_groups"][0]
    assert len(group["preequilibrations"]) == 2 and group["preequilibration_index"].tolist() == [0, 0, 1]
    k2 = 0.6

    def a(k1_pre, k1, t):
        steady = k2 / (k1 + k2)
        return steady + (k2 / (k1_pre + k2) - steady) * np.exp(-(k1 + k2) * t)

    expected = [a(0.3, 0.8, 1), a(0.3, 1.2, 1), a(0.5, 0.8, 1), a(0.3, 0.8, 10)]
    np.testing.assert_allclose(pp.simulation_table(pp.nominal_internal)["simulation"], expected, rtol=1e-6)


@pytest.mark.slow  # 14-60 s of compiling; make test keeps the fast gradient/import checks (moved 2026-12-02)
def test_reverse_and_forward_gradients_agree_with_central_differences(tmp_path):
    """``load(gradient=)``: reverse mode through the solver (the default with Rodas5P) and
    forward sensitivities give the same gradient, component by component, and both match
    central differences; with pre-equilibrations (case 0009's A <-> B).
    Kvaerno5 defaults to forward mode; an unknown mode is refused."""
    path = _copy("0009", tmp_path)
    (tmp_path / "_conditions.tsv").write_text("conditionId\tk1\np0\t0.3\nc0\t0.8\nc1\t1.2\n")
    (tmp_path / "_measurements.tsv").write_text(
        "observableId\tpreequilibrationConditionId\tsimulationConditionId\ttime\tmeasurement\n"
        "obs_a\tp0\tc0\t1\t0.7\nobs_a\tp0\tc1\t2\t0.6\nobs_a\tp0\tc0\t10\t0.1\n")
    reverse, forward = jpetab.load(path), jpetab.load(path, gradient="forward")
    assert reverse.problem.plan["gradient"] == "reverse" and forward.problem.plan["gradient"] == "forward"
    z = reverse.nominal_internal * 1.1
    g_reverse = np.asarray(jax.grad(reverse.log_likelihood)(z))
    g_forward = np.asarray(jax.grad(forward.log_likelihood)(z))
    np.testing.assert_allclose(g_reverse, g_forward, rtol=1e-8, atol=1e-12)
    eps = 1e-6
    fd = [(float(reverse.log_likelihood(z.at[i].add(eps))) - float(reverse.log_likelihood(z.at[i].add(-eps))))
          / (2 * eps) for i in range(z.size)]
    np.testing.assert_allclose(g_reverse, fd, rtol=1e-5, atol=1e-7)
    assert np.count_nonzero(np.abs(g_reverse) > 1e-3) == z.size
    assert jpetab.load(path, solver=dfx.Kvaerno5()).problem.plan["gradient"] == "forward"
    with pytest.raises(ValueError, match="gradient must be one of"):
        jpetab.load(path, gradient="adjoint")


@pytest.mark.slow  # 14-60 s of compiling; make test keeps the fast gradient/import checks (moved 2026-12-02)
def test_an_output_that_is_nan_where_nobody_reads_it_leaves_the_reverse_gradient_finite(tmp_path):
    """Case 0001 (A(0) = 1, B(0) = 0) with an assignment rule ``ratio = B / sqrt(B^2)`` (0 / 0 at
    t = 0, 1 after) observed only at t = 1, beside A at t = 0: reverse mode (zero cotangent
    times the NaN partials of the unread output) gives the forward gradient, finite."""
    path = _copy("0001", tmp_path)
    model = (tmp_path / "_model.xml").read_text()
    rule = ('<listOfRules><assignmentRule variable="ratio"><math xmlns="http://www.w3.org/1998/Math/MathML">'
            '<apply><divide/><ci>B</ci><apply><root/><apply><power/><ci>B</ci><cn>2</cn></apply></apply></apply>'
            '</math></assignmentRule></listOfRules>')
    model = model.replace("</listOfParameters>", '<parameter id="ratio" constant="false"/></listOfParameters>')
    model = model.replace("<listOfReactions>", rule + "<listOfReactions>")
    (tmp_path / "_model.xml").write_text(model)
    (tmp_path / "_observables.tsv").write_text("observableId\tobservableFormula\tnoiseFormula\nobs_a\tA\t0.5\n"
                                               "obs_r\tratio\t0.5\n")
    (tmp_path / "_measurements.tsv").write_text("observableId\tsimulationConditionId\ttime\tmeasurement\n"
                                                "obs_a\tc0\t0\t0.7\nobs_r\tc0\t1\t0.9\nobs_a\tc0\t1\t0.5\n")
    reverse, forward = jpetab.load(path), jpetab.load(path, gradient="forward")
    z = reverse.nominal_internal
    g_reverse = np.asarray(jax.grad(reverse.log_likelihood)(z))
    assert np.isfinite(g_reverse).all()
    np.testing.assert_allclose(g_reverse, np.asarray(jax.grad(forward.log_likelihood)(z)), rtol=1e-8, atol=1e-12)


@pytest.mark.slow  # 14-60 s of compiling; make test keeps the fast gradient/import checks (moved 2026-12-02)
def test_the_traced_likelihood_does_not_grow_with_the_number_of_conditions(tmp_path):
    """Case 0009's A <-> B under 2 and under 12 conditions (k1 a number or the estimated k2,
    by condition): each condition's parameters come from one gather over index tables, so the
    traced log-likelihood has as many equations for 12 conditions as for 2 (it used to trace
    one scalar per condition and parameter, which made large problems compile for minutes)."""
    path = _copy("0009", tmp_path)

    def equations(n_conditions: int) -> int:
        sources = ["k2" if c % 3 == 0 else str(0.2 + 0.1 * c) for c in range(n_conditions)]
        (tmp_path / "_conditions.tsv").write_text(
            "conditionId\tk1\n" + "".join(f"c{c}\t{k1}\n" for c, k1 in enumerate(sources)))
        (tmp_path / "_measurements.tsv").write_text(
            "observableId\tsimulationConditionId\ttime\tmeasurement\n"
            + "".join(f"obs_a\tc{c}\t{1 + c % 2}\t0.5\n" for c in range(n_conditions)))
        pp = jpetab.load(path, gradient="reverse")
        z = pp.nominal_internal
        assert np.isfinite(float(pp.log_likelihood(z)))
        simulated = pp.simulation_table(z)["simulation"].to_numpy()
        k1 = np.array([0.6 if s == "k2" else float(s) for s in sources])  # A(t), A(0) = a0 = 1, B(0) = 0
        t = 1.0 + np.arange(n_conditions) % 2
        np.testing.assert_allclose(simulated, (0.6 + k1 * np.exp(-(k1 + 0.6) * t)) / (k1 + 0.6), rtol=1e-6)
        return len(jax.make_jaxpr(pp.problem._log_likelihood_impl)(pp.problem.initial_internal()).eqns)

    assert equations(12) == equations(2)
