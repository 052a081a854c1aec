"""jcalib.petab on the PEtab test suite (format 1.0.0, SBML cases 0001-0020): chi2, llh and
simulations against each case's solution, within its tolerances."""


import jax
import numpy as np
import pandas as pd
import petab.v1 as petab
import pytest
import yaml

from jcalib import petab as jpetab
from tests.helpers import shared_petab

SUITE = shared_petab("test_suite_v1")
CASES = [f"{i:04d}" for i in range(1, 21)]

# cases jcalib.petab does not support yet, with the PEtab feature that is missing
UNSUPPORTED: dict[str, str] = {}


def _case(case):
    folder = SUITE / case
    if not folder.exists():
        pytest.skip(f"the PEtab test suite is not at {SUITE}")
    with open(folder / f"_{case}_solution.yaml") as stream:
        solution = yaml.safe_load(stream)
    return folder, solution


@pytest.mark.parametrize("case", CASES)
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


def test_petab_gradient_matches_finite_differences():
    folder, _ = _case("0019")  # a log10-scale estimated initial value
    pp = jpetab.load(folder / "_0019.yaml")
    z = pp.nominal_internal
    grad = np.asarray(jax.grad(pp.log_likelihood)(z))
    eps = 1e-6
    fd = [(float(pp.log_likelihood(z.at[i].add(eps))) - float(pp.log_likelihood(z.at[i].add(-eps)))) / (2 * eps)
          for i in range(z.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


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
                                                "obs_a\tc0\tinf\t0.7\n")
    (tmp_path / "_observables.tsv").write_text((folder / "_observables.tsv").read_text())
    with pytest.raises(ValueError, match="unsupported PEtab feature: steady-state measurements"):
        jpetab.load(tmp_path / "_0001.yaml")


def test_petab_problem_not_built_yet():
    folder, _ = _case("0001")
    pp = jpetab.load(folder / "_0001.yaml")
    with pytest.raises(NotImplementedError, match="not built yet"):
        _ = pp.problem
