"""A model given input it cannot honour (issue 35 §1.7-1.8): an SBML file whose ids are not unique
(the second species used to win silently) and an experiment without a condition the model reads
(a bare KeyError from inside the solve). Each is one ValueError that names the element and the fix."""

import numpy as np
import pytest

import jcalib
from jcalib.io.sbml import model_from_sbml

DUPLICATE_SPECIES = """<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">
  <model id="m">
    <listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="x" compartment="c" initialConcentration="1" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="x" compartment="c" initialConcentration="5" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters><parameter id="k" value="0.5" constant="true"/></listOfParameters>
    <listOfReactions>
      <reaction id="r" reversible="false">
        <listOfReactants><speciesReference species="x" stoichiometry="1" constant="true"/></listOfReactants>
        <kineticLaw><math xmlns="http://www.w3.org/1998/Math/MathML">
          <apply><times/><ci>k</ci><ci>x</ci></apply></math></kineticLaw>
      </reaction>
    </listOfReactions>
  </model>
</sbml>
"""


def test_duplicate_sbml_ids_are_refused():
    with pytest.raises(ValueError, match="model_from_sbml: the SBML's identifiers are not consistent: .*"
                                         "The <species> id 'x' conflicts with the previously defined <species> id"):
        model_from_sbml(DUPLICATE_SPECIES)
    assert model_from_sbml(DUPLICATE_SPECIES.replace('<species id="x" compartment="c" initialConcentration="5"',
                                                     '<species id="y" compartment="c" initialConcentration="5"'))


def test_an_experiment_without_a_condition_the_model_reads():
    model = jcalib.models.get("four_substance_reactions")
    exp = model.experiment
    conditions = {k: float(v) for k, v in exp.conditions.items() if k != "A0"}
    lacking = jcalib.Experiment(np.asarray(exp.ts), t0=float(exp.t0), t1=float(exp.t1), conditions=conditions,
                                name="batch 2")
    with pytest.raises(ValueError, match=r"with_experiment: experiment 'batch 2' lacks the conditions \['A0'\] that "
                                         r"the model reads; give them, .* with A0=\d"):
        model.with_experiment(lacking)


SECOND = '<species id="{}" compartment="c" initialConcentration="5"'
NO_PARAMETERS = DUPLICATE_SPECIES.replace(SECOND.format("x"), SECOND.format("y")).replace(
    '<listOfParameters><parameter id="k" value="0.5" constant="true"/></listOfParameters>', "").replace(
    "<ci>k</ci>", "<cn>0.5</cn>")


def test_a_model_without_parameters_simulates():
    """Nothing to calibrate (issue 35 §1.12): x' = -0.5 x, y constant; the model simulates at an
    empty theta; a problem on it has no free parameter and says so."""
    import jax.numpy as jnp

    model = model_from_sbml(NO_PARAMETERS, ts=[0.0, 1.0, 2.0])
    assert model.parameters.n_params == 0
    np.testing.assert_allclose(model.simulate(jnp.zeros(0)), [[1.0, 5.0], [np.exp(-0.5), 5.0], [np.exp(-1.0), 5.0]],
                               rtol=1e-7)
    data = jcalib.Measurements(np.asarray(model.ts), np.asarray(model.simulate(jnp.zeros(0))),
                               output_names=model.output_names)
    with pytest.raises(ValueError, match="no free parameters"):
        jcalib.CalibrationProblem(model, data)


def test_a_petab_problem_with_nothing_to_estimate(tmp_path):
    """Every ``estimate`` 0: the problem loads, its log-likelihood is PEtab's at the nominal
    values (the suite's value for case 0001), and methods say there is nothing to estimate."""
    import jax
    import jax.numpy as jnp
    import pandas as pd
    import yaml

    from jcalib.bayes import mala
    from jcalib.estimation import gauss_newton
    from jcalib.io import petab as jpetab
    from jcalib.sensitivity import identifiability
    from tests.robustness.test_petab_input import CASE, _problem

    path = _problem(tmp_path)
    table = pd.read_csv(path.parent / "_parameters.tsv", sep="\t")
    table["estimate"] = 0
    table.to_csv(path.parent / "_parameters.tsv", sep="\t", index=False)
    pp = jpetab.load(path)
    assert pp.problem.free_names == ()
    solution = yaml.safe_load((CASE / "_0001_solution.yaml").read_text())
    assert abs(float(pp.problem.log_likelihood(jnp.zeros(0))) - solution["llh"]) < solution["tol_llh"]
    for call in (lambda: gauss_newton(pp.problem), lambda: mala.sample(jax.random.key(0), pp.problem, None, 5),
                 lambda: identifiability(pp.problem)):
        with pytest.raises(ValueError, match="the problem has no free parameter \\(nothing to estimate\\)"):
            call()


def test_a_model_option_its_factory_does_not_take():
    """`models.get` with an option of another model (the README's `outputs=` of the polymerization
    model given to four_substance_reactions) names the factory's options (a bare TypeError before)."""
    with pytest.raises(ValueError, match=r"models.get\('four_substance_reactions'\): the factory takes no option "
                                         r"\['outputs'\]; its options: observe, a0"):
        jcalib.models.get("four_substance_reactions", outputs=("A",))
