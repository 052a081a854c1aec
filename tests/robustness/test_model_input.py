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
