"""jcalib.io.sbml: SBML models against analytic solutions and the PEtab test suite's simulations."""

import csv

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

from jcalib.io import sbml
from jcalib.rosenbrock import Rodas5P
from tests.helpers import shared_petab

PETAB_SUITE = shared_petab("test_suite_v1")


def _sbml(body: str, functions: str = "") -> str:
    """An SBML level 3 version 2 document around ``body`` (the lists of the model)."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">
  <model id="test">
    {functions}
    {body}
  </model>
</sbml>"""


def _math(inner: str) -> str:
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML">{inner}</math>'


# A -> B in a compartment of volume 2: A a concentration, B an amount (hasOnlySubstanceUnits);
# the kinetic law f(A, k) = k * A is a function definition, so d[A]/dt = -k A / 2 and
# dB/dt = k A; A(0) = 3 * a0 by an initial assignment; total = 2 A + B by an assignment rule.
VOLUME_MODEL = _sbml(
    functions=f"""<listOfFunctionDefinitions>
      <functionDefinition id="mass_action">{_math(
        "<lambda><bvar><ci>x</ci></bvar><bvar><ci>k</ci></bvar>"
        "<apply><times/><ci>k</ci><ci>x</ci></apply></lambda>")}</functionDefinition>
    </listOfFunctionDefinitions>""",
    body=f"""<listOfCompartments>
      <compartment id="cell" size="2" constant="true"/>
    </listOfCompartments>
    <listOfSpecies>
      <species id="A" compartment="cell" initialConcentration="1" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="B" compartment="cell" initialAmount="0" hasOnlySubstanceUnits="true"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k" value="0.4" constant="true"/>
      <parameter id="a0" value="1.5" constant="true"/>
      <parameter id="total" constant="false"/>
    </listOfParameters>
    <listOfInitialAssignments>
      <initialAssignment symbol="A">{_math("<apply><times/><cn>3</cn><ci>a0</ci></apply>")}</initialAssignment>
    </listOfInitialAssignments>
    <listOfRules>
      <assignmentRule variable="total">{_math(
        "<apply><plus/><apply><times/><ci>cell</ci><ci>A</ci></apply><ci>B</ci></apply>")}</assignmentRule>
    </listOfRules>
    <listOfReactions>
      <reaction id="conversion" reversible="false">
        <listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/></listOfReactants>
        <listOfProducts><speciesReference species="B" stoichiometry="1" constant="true"/></listOfProducts>
        <kineticLaw>{_math("<apply><ci>mass_action</ci><ci>A</ci><ci>k</ci></apply>")}</kineticLaw>
      </reaction>
    </listOfReactions>""")

# Rate rules: dx/dt = -r x (x(0) = 2) and dy/dt = piecewise(1 if t < 1 else 0), so y = min(t, 1).
RATE_RULE_MODEL = _sbml(f"""<listOfParameters>
      <parameter id="r" value="0.7" constant="true"/>
      <parameter id="x" value="2" constant="false"/>
      <parameter id="y" value="0" constant="false"/>
    </listOfParameters>
    <listOfRules>
      <rateRule variable="x">{_math("<apply><minus/><apply><times/><ci>r</ci><ci>x</ci></apply></apply>")}</rateRule>
      <rateRule variable="y">{_math(
        '<piecewise><piece><cn type="integer">1</cn><apply><lt/>'
        '<csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">t</csymbol>'
        '<cn>1</cn></apply></piece><otherwise><cn type="integer">0</cn></otherwise></piecewise>')}</rateRule>
    </listOfRules>""")

TS = np.array([0.0, 0.5, 1.5, 3.0, 6.0])


@pytest.fixture(scope="module")
def volume_model():
    return sbml.model_from_sbml(VOLUME_MODEL, ts=TS, outputs=["A", "B", "total"])


@pytest.fixture(scope="module")
def rate_rule_model():
    return sbml.model_from_sbml(RATE_RULE_MODEL, ts=TS)


def test_concentration_species_in_a_compartment_of_volume_2(volume_model):
    assert volume_model.parameters.names == ("k", "a0")
    assert volume_model.state_names == ("A", "B")
    theta = jnp.asarray(volume_model.parameters.nominal)
    y = np.asarray(volume_model.simulate(theta))
    k, a0, volume = 0.4, 1.5, 2.0
    a = 3 * a0 * np.exp(-k * TS / volume)  # initial assignment A(0) = 3 a0
    np.testing.assert_allclose(y[:, 0], a, rtol=1e-6)
    np.testing.assert_allclose(y[:, 1], volume * (3 * a0 - a), rtol=1e-6, atol=1e-9)  # amount
    np.testing.assert_allclose(y[:, 2], volume * 3 * a0, rtol=1e-6)  # assignment rule: conserved total


def test_default_solver_is_rodas5p_and_kvaerno5_options_are_refused_with_it(volume_model):
    """The default stiff solver is the Rosenbrock method Rodas5P (pinned to the analytic
    solution by test_concentration_species_in_a_compartment_of_volume_2); Kvaerno5's stage-solve options need
    method='kvaerno5'."""
    assert isinstance(volume_model.solver, Rodas5P)
    assert isinstance(sbml.stiff_solver(), Rodas5P)
    with pytest.raises(ValueError, match="method='kvaerno5'"):
        sbml.stiff_solver(newton=True)
    with pytest.raises(ValueError, match="method='kvaerno5'"):
        sbml.stiff_solver(stage_tolerances=(1e-3, 1e-6))
    with pytest.raises(ValueError, match="method must be one of"):
        sbml.stiff_solver(method="radau")


@pytest.mark.slow
def test_kvaerno5_chord_and_newton_stage_solves_give_the_same_analytic_solution():
    """stiff_solver(method='kvaerno5'): diffrax's Kvaerno5 with chord stage solves (the default)
    or optimistix.Newton (newton=True), pinned to the analytic solution like Rodas5P."""
    for newton in (False, True):
        solver = sbml.stiff_solver(method="kvaerno5", newton=newton)
        assert isinstance(solver, dfx.Kvaerno5) and isinstance(solver.root_finder, optx.Newton) == newton
        model = sbml.model_from_sbml(VOLUME_MODEL, ts=TS, outputs=["A"], solver=solver)
        y = np.asarray(model.simulate(jnp.asarray(model.parameters.nominal)))
        np.testing.assert_allclose(y[:, 0], 3 * 1.5 * np.exp(-0.4 * TS / 2.0), rtol=1e-6)


@pytest.mark.slow
def test_chord_stage_tolerances_give_the_same_analytic_solution():
    """stiff_solver(stage_tolerances=(1e-3, 1e-6)): the chord method's own stopping tolerances
    (Lang_PLOSComputBiol2024's setting), still pinned to the analytic solution; bad
    tolerances are refused."""
    solver = sbml.stiff_solver(method="kvaerno5", stage_tolerances=(1e-3, 1e-6))
    assert (solver.root_finder.rtol, solver.root_finder.atol) == (1e-3, 1e-6)
    model = sbml.model_from_sbml(VOLUME_MODEL, ts=TS, outputs=["A"], solver=solver)
    y = np.asarray(model.simulate(jnp.asarray(model.parameters.nominal)))
    np.testing.assert_allclose(y[:, 0], 3 * 1.5 * np.exp(-0.4 * TS / 2.0), rtol=1e-6)
    for bad in [(0.0, 1e-6), (1e-3, float("nan")), (-1e-3, 1e-6)]:
        with pytest.raises(ValueError, match="stage_tolerances"):
            sbml.stiff_solver(method="kvaerno5", stage_tolerances=bad)
    with pytest.raises(ValueError, match="not both"):
        sbml.stiff_solver(method="kvaerno5", newton=True, stage_tolerances=(1e-3, 1e-6))


def test_new_parameters_and_conditions_do_not_recompile(volume_model):
    n_traces = []

    @eqx.filter_jit
    def simulate(model, theta):
        n_traces.append(1)
        return model.simulate(theta)

    theta = jnp.array([0.2, 1.0])
    y = np.asarray(simulate(volume_model, theta))
    np.testing.assert_allclose(y[:, 0], 3.0 * np.exp(-0.2 * TS / 2.0), rtol=1e-6)
    assert volume_model.condition_names == ("cell", "B")  # A has an initial assignment
    bigger = volume_model.with_conditions({"cell": 4.0})
    y = np.asarray(simulate(bigger, theta))
    np.testing.assert_allclose(y[:, 0], 3.0 * np.exp(-0.2 * TS / 4.0), rtol=1e-6)
    simulate(volume_model, jnp.array([0.3, 1.1]))
    assert len(n_traces) == 1
    with pytest.raises(ValueError, match="with_conditions\\(\\): \\['A'\\] are not conditions"):
        volume_model.with_conditions({"A": 1.0})


@pytest.mark.slow
def test_rate_rules_and_piecewise(rate_rule_model):
    assert rate_rule_model.state_names == ("x", "y")
    y = np.asarray(rate_rule_model.simulate(jnp.array([0.7])))
    np.testing.assert_allclose(y[:, 0], 2.0 * np.exp(-0.7 * TS), rtol=1e-6)
    np.testing.assert_allclose(y[:, 1], np.minimum(TS, 1.0), atol=1e-6)


# A -> (nothing) at rate k A, A(0) = 2 sqrt(k a0 + 1) and a constant-in-time B(0) = sqrt(k a0 + 1) + 1:
# both initial assignments share the square root, as analytic steady states do.
_ROOT = "<apply><root/><apply><plus/><apply><times/><ci>k</ci><ci>a0</ci></apply><cn>1</cn></apply></apply>"
SHARED_MODEL = _sbml(f"""<listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="A" compartment="c" initialAmount="0" hasOnlySubstanceUnits="true" boundaryCondition="false"
               constant="false"/>
      <species id="B" compartment="c" initialAmount="0" hasOnlySubstanceUnits="true" boundaryCondition="false"
               constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k" value="0.4" constant="true"/>
      <parameter id="a0" value="1.5" constant="true"/>
    </listOfParameters>
    <listOfInitialAssignments>
      <initialAssignment symbol="A">{_math(f"<apply><times/><cn>2</cn>{_ROOT}</apply>")}</initialAssignment>
      <initialAssignment symbol="B">{_math(f"<apply><plus/>{_ROOT}<cn>1</cn></apply>")}</initialAssignment>
    </listOfInitialAssignments>
    <listOfReactions>
      <reaction id="decay" reversible="false">
        <listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/></listOfReactants>
        <kineticLaw>{_math("<apply><times/><ci>k</ci><ci>A</ci></apply>")}</kineticLaw>
      </reaction>
    </listOfReactions>""")


@pytest.mark.slow  # 14-60 s of compiling; make test keeps the fast gradient/import checks (moved 2026-12-02)
def test_a_subexpression_shared_by_initial_assignments_is_computed_once():
    """The generated code computes a repeated subexpression once (sympy.cse): traced,
    differentiated and compiled once, not per occurrence (an analytic steady state repeated in
    every species' initial assignment made a reverse-mode gradient compile for minutes).
    Values and reverse-mode derivatives are the analytic ones."""
    model = sbml.model_from_sbml(SHARED_MODEL, ts=TS, outputs=["A", "B"])
    init_source = model.source.split("def init(")[1].split("\ndef ")[0]
    assert init_source.count("sqrt") == 1
    k, a0 = 0.4, 1.5
    root = np.sqrt(k * a0 + 1)
    y = np.asarray(model.simulate(jnp.array([k, a0])))
    np.testing.assert_allclose(y[:, 0], 2 * root * np.exp(-k * TS), rtol=1e-7)
    np.testing.assert_allclose(y[:, 1], root + 1, rtol=1e-10)
    grad = np.asarray(jax.jit(jax.grad(lambda th: jnp.sum(model.simulate(th))))(jnp.array([k, a0])))
    d_root = np.array([a0, k]) / (2 * root)  # d sqrt(k a0 + 1) / d (k, a0)
    decay = np.exp(-k * TS)
    expected = (2 * decay.sum() + len(TS)) * d_root + np.array([-2 * root * np.sum(TS * decay), 0.0])
    np.testing.assert_allclose(grad, expected, rtol=1e-6)

@pytest.mark.slow
def test_jacobian_matches_finite_differences(volume_model):
    theta = jnp.asarray(volume_model.parameters.nominal)
    jac = np.asarray(volume_model.jacobian(theta))
    step = 1e-6 * np.asarray(theta)
    fd = np.stack([(np.asarray(volume_model.simulate(theta.at[i].add(step[i])))
                    - np.asarray(volume_model.simulate(theta.at[i].add(-step[i])))) / (2 * step[i])
                   for i in range(2)], axis=-1)
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-6)
    k, a0 = 0.4, 1.5  # analytic d A / d k at the observation times
    np.testing.assert_allclose(jac[:, 0, 0], -3 * a0 * TS / 2.0 * np.exp(-k * TS / 2.0), rtol=1e-5)


def _petab_table(case: str, name: str) -> list[dict]:
    with open(PETAB_SUITE / case / f"_{name}.tsv") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["0001", "0011"])
def test_petab_suite_models_reproduce_the_reference_simulations(case):
    """Cases whose observable is the plain species A, in one condition: the parameter table's
    nominal values go into theta, species overrides of the condition table into the
    experiment's conditions."""
    observables = _petab_table(case, "observables")
    assert [(o["observableId"], o["observableFormula"]) for o in observables] == [("obs_a", "A")]
    reference = _petab_table(case, "simulations")
    ts = np.array([float(r["time"]) for r in reference])
    model = sbml.model_from_sbml(PETAB_SUITE / case / "_model.xml", ts=ts, outputs=["A"]).with_bounds_check(False)
    nominal = {r["parameterId"]: float(r["nominalValue"]) for r in _petab_table(case, "parameters")}
    theta = jnp.array([nominal.get(name, model.parameters[name].nominal) for name in model.parameters.names])
    (condition,) = _petab_table(case, "conditions")
    overrides = {k: float(v) for k, v in condition.items() if k != "conditionId"}
    model = model.with_conditions(overrides)
    y = np.asarray(model.simulate(theta))[:, 0]
    np.testing.assert_allclose(y, [float(r["simulation"]) for r in reference], rtol=1e-6)


def test_default_bounds_and_overrides():
    model = sbml.model_from_sbml(RATE_RULE_MODEL, bounds={"r": (0.1, 1.0)})
    assert (model.parameters["r"].lower, model.parameters["r"].upper) == (0.1, 1.0)
    default = sbml.model_from_sbml(VOLUME_MODEL)
    assert default.parameters["k"].lower == pytest.approx(0.4e-3)
    assert default.parameters["k"].upper == pytest.approx(0.4e3)
    with pytest.raises(ValueError, match="bounds names \\['nope'\\]"):
        sbml.model_from_sbml(RATE_RULE_MODEL, bounds={"nope": (0.1, 1.0)})
    with pytest.raises(ValueError, match="outputs names unknown ids \\['nope'\\]"):
        sbml.model_from_sbml(RATE_RULE_MODEL, outputs=["nope"])


def _event(event_id: str, time: str, assignments: str, initial_value: str = "true") -> str:
    trigger = _math('<apply><geq/><csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">'
                    f't</csymbol>{time}</apply>')
    return (f'<event id="{event_id}" useValuesFromTriggerTime="true"><trigger initialValue="{initial_value}" '
            f'persistent="true">{trigger}</trigger><listOfEventAssignments>{assignments}</listOfEventAssignments>'
            '</event>')


def _assign(variable: str, inner: str) -> str:
    return f'<eventAssignment variable="{variable}">{_math(inner)}</eventAssignment>'


# S (a boundary species, 2) feeds X at rate k S; events: at t0 X = 0.25 (initialValue false: fires
# at t0), at T (a parameter) S = 0 and X = X + 1 (values before the event), at 100 (after the
# horizon) X = 1000, at 0 with initialValue true (never: its trigger was already true) X = 99.
# So X = 0.25 + 2 k t for t < T, 1.25 + 2 k T after; S = 2, then 0.
EVENT_MODEL = _sbml(f"""<listOfCompartments><compartment id="c" size="1" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="S" compartment="c" initialConcentration="2" hasOnlySubstanceUnits="false"
               boundaryCondition="true" constant="false"/>
      <species id="X" compartment="c" initialConcentration="0" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="k" value="0.5" constant="true"/><parameter id="T" value="1.5" constant="true"/>
    </listOfParameters>
    <listOfReactions><reaction id="feed" reversible="false">
      <listOfReactants><speciesReference species="S" stoichiometry="1" constant="true"/></listOfReactants>
      <listOfProducts><speciesReference species="X" stoichiometry="1" constant="true"/></listOfProducts>
      <kineticLaw>{_math("<apply><times/><ci>k</ci><ci>S</ci></apply>")}</kineticLaw>
    </reaction></listOfReactions>
    <listOfEvents>
      {_event("late", "<cn>100</cn>", _assign("X", "<cn>1000</cn>"))}
      {_event("pulse_end", "<ci>T</ci>",
              _assign("S", "<cn>0</cn>") + _assign("X", "<apply><plus/><ci>X</ci><cn>1</cn></apply>"))}
      {_event("start", "<cn>0</cn>", _assign("X", "<cn>0.25</cn>"), initial_value="false")}
      {_event("never", "<cn>0</cn>", _assign("X", "<cn>99</cn>"))}
    </listOfEvents>""")


def _event_solution(theta, ts):
    k, t_event = theta
    x = np.where(ts < t_event, 0.25 + 2 * k * ts, 1.25 + 2 * k * t_event)
    return np.stack([np.where(ts < t_event, 2.0, 0.0), x], axis=1)


@pytest.fixture(scope="module")
def event_model():
    return sbml.model_from_sbml(EVENT_MODEL, ts=TS, bounds={"T": (0.1, 10.0)})


@pytest.mark.slow
def test_time_events_against_the_analytic_solution(event_model):
    """States saved at an event's time are the ones after it (t = 1.5 here)."""
    assert event_model.state_names == ("S", "X")  # the boundary species an event sets is a state
    assert event_model.event_ids == ("late", "pulse_end", "start", "never")
    for theta in ([0.5, 1.5], [0.3, 4.0], [0.5, 7.0]):  # 7 > t1: the pulse never ends
        np.testing.assert_allclose(event_model.simulate(jnp.asarray(theta)), _event_solution(theta, TS),
                                   rtol=1e-7, atol=1e-9)


@pytest.mark.slow
def test_time_event_derivatives_jit_and_vmap(event_model):
    """d X / d T = 2 k after the event, d X / d k = 2 min(t, T): the event time is differentiable,
    in forward and in reverse mode."""
    theta = jnp.asarray([0.5, 2.0])
    jac = np.asarray(event_model.forward_mode().jacobian(theta))[:, 1, :]
    np.testing.assert_allclose(jac[:, 0], 2 * np.minimum(TS, 2.0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jac[:, 1], np.where(TS >= 2.0, 2 * 0.5, 0.0), rtol=1e-6, atol=1e-8)
    reverse = np.asarray(jax.jit(jax.jacrev(event_model.simulate))(theta))  # along the replayed steps
    np.testing.assert_allclose(reverse[:, 1, :], jac, rtol=1e-9, atol=1e-12)
    thetas = jnp.asarray([[0.5, 2.0], [0.2, 0.5], [0.8, 5.5]])
    batched = jax.jit(jax.vmap(event_model.simulate))(thetas)
    for theta, out in zip(thetas, batched, strict=True):
        np.testing.assert_allclose(out, event_model.simulate(theta), rtol=1e-12)
        np.testing.assert_allclose(out, _event_solution(np.asarray(theta), TS), rtol=1e-7, atol=1e-9)


_TIME_CSYMBOL = '<csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">t</csymbol>'
# dx/dt = k while time < T (a piecewise in an assignment rule, as Beer_MolBioSystems2014's lag),
# then a constant 2 k while 2 T - time > 0, then 0: x = k min(t, T) + 2 k clip(t - T, 0, T)
SWITCH_MODEL = _sbml(f"""<listOfParameters>
      <parameter id="x" value="0" constant="false"/><parameter id="k" value="0.5" constant="true"/>
      <parameter id="T" value="1.5" constant="true"/><parameter id="rate" constant="false"/>
    </listOfParameters>
    <listOfRules>
      <assignmentRule variable="rate">{_math(
          f"<piecewise><piece><ci>k</ci><apply><lt/>{_TIME_CSYMBOL}<ci>T</ci></apply></piece>"
          f"<piece><apply><times/><cn>2</cn><ci>k</ci></apply><apply><gt/><apply><minus/><apply><times/>"
          f"<cn>2</cn><ci>T</ci></apply>{_TIME_CSYMBOL}</apply><cn>0</cn></apply></piece>"
          "<otherwise><cn>0</cn></otherwise></piecewise>")}</assignmentRule>
      <rateRule variable="x">{_math("<ci>rate</ci>")}</rateRule>
    </listOfRules>""")


def _switch_solution(theta, ts):
    k, t_switch = theta
    return k * np.minimum(ts, t_switch) + 2 * k * np.clip(ts - t_switch, 0.0, t_switch)


@pytest.mark.slow
def test_piecewise_switches_in_time_restart_the_solver_and_have_derivatives():
    """Piecewise conditions comparing time with parameters are switches: the solver restarts at
    T and 2 T, and the derivatives include the jump, d x / d T = k (2 - 1) + 2 k (t > 2T) ...:
    analytic values and derivatives, forward and reverse mode, jit and vmap."""
    ts = np.array([0.0, 1.0, 2.0, 3.5, 6.0])
    model = sbml.model_from_sbml(SWITCH_MODEL, ts=ts, bounds={"T": (0.1, 10.0)})
    assert model.switch_conditions == ("2.0*T - time > 0", "T > time")
    theta = jnp.asarray([0.5, 1.5])
    np.testing.assert_allclose(model.simulate(theta)[:, 0], _switch_solution([0.5, 1.5], ts), rtol=1e-8, atol=1e-10)
    # x = k min(t, T) + 2 k clip(t - T, 0, T): dx/dk = x / k; dx/dT = k [t > T] - 2 k [T < t] + 4 k [t > 2T]
    jac = np.asarray(model.forward_mode().jacobian(theta))[:, 0, :]
    np.testing.assert_allclose(jac[:, 0], _switch_solution([1.0, 1.5], ts), rtol=1e-7, atol=1e-9)
    d_t = 0.5 * ((ts > 1.5) * 1.0 - 2 * (ts > 1.5) + 4 * (ts > 3.0))
    np.testing.assert_allclose(jac[:, 1], d_t, rtol=1e-7, atol=1e-9)
    reverse = jax.jacrev(lambda th: model.simulate(th)[:, 0])(theta)
    np.testing.assert_allclose(np.asarray(reverse), jac, rtol=1e-7, atol=1e-9)
    thetas = jnp.asarray([[0.5, 1.5], [0.2, 0.5], [0.8, 4.0]])
    batched = jax.jit(jax.vmap(model.simulate))(thetas)
    for th, out in zip(thetas, batched, strict=True):
        np.testing.assert_allclose(out[:, 0], _switch_solution(np.asarray(th), ts), rtol=1e-8, atol=1e-10)


def _sawtooth(trigger: str) -> str:
    """dx/dt = r (x(0) = 0) and an event that sets x = 0 when ``trigger`` becomes true."""
    return _sbml(f"""<listOfParameters><parameter id="x" value="0" constant="false"/>
      <parameter id="r" value="1" constant="true"/></listOfParameters>
    <listOfRules><rateRule variable="x">{_math("<ci>r</ci>")}</rateRule></listOfRules>
    <listOfEvents><event id="reset" useValuesFromTriggerTime="true">
      <trigger initialValue="false" persistent="true">{_math(trigger)}</trigger>
      <listOfEventAssignments><eventAssignment variable="x">{_math("<cn>0</cn>")}</eventAssignment>
      </listOfEventAssignments></event></listOfEvents>""")


@pytest.mark.slow
def test_a_state_dependent_event_against_the_sawtooth():
    """x > 2 resets x to 0: x = r t mod 2, found by diffrax's event root finding; dx/dr = t
    (the event times 2 k / r move with r); jit and vmap agree."""
    ts = np.array([0.0, 0.5, 1.5, 3.0, 5.5])
    model = sbml.model_from_sbml(_sawtooth("<apply><gt/><ci>x</ci><cn>2</cn></apply>"), ts=ts,
                                 bounds={"r": (0.1, 10.0)})
    for r in (1.0, 1.3):
        np.testing.assert_allclose(model.simulate(jnp.asarray([r]))[:, 0], np.mod(r * ts, 2.0), rtol=1e-6, atol=1e-7)
    jac = np.asarray(model.forward_mode().jacobian(jnp.asarray([1.3])))[:, 0, 0]
    np.testing.assert_allclose(jac, ts, rtol=1e-5, atol=1e-6)
    batched = jax.jit(jax.vmap(model.simulate))(jnp.asarray([[1.0], [1.3], [0.7]]))
    np.testing.assert_allclose(batched[:, :, 0], np.mod(np.outer([1.0, 1.3, 0.7], ts), 2.0), rtol=1e-6, atol=1e-7)


def test_unsupported_event_triggers_are_refused_by_name():
    both = ("<apply><and/><apply><gt/><ci>x</ci><cn>2</cn></apply><apply><gt/>"
            '<csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/time">t</csymbol>'
            "<cn>1</cn></apply></apply>")
    with pytest.raises(ValueError, match=r"unsupported SBML feature: event triggers other than one comparison "
                                         r".*\(event 'reset'\)"):
        sbml.model_from_sbml(_sawtooth(both))
    mixed = _sawtooth("<apply><gt/><ci>x</ci><cn>2</cn></apply>").replace(
        "</listOfEvents>", _event("later", "<cn>3</cn>", _assign("x", "<cn>1</cn>")) + "</listOfEvents>")
    with pytest.raises(ValueError, match=r"time events and state-dependent events in one model \(event 'reset'\)"):
        sbml.model_from_sbml(mixed)
    unknown = _sawtooth("<apply><gt/><ci>x</ci><cn>2</cn></apply>").replace('variable="x"><math',
                                                                            'variable="nope"><math')
    with pytest.raises(ValueError, match="event 'reset' assigns 'nope', which is not a species or parameter"):
        sbml.model_from_sbml(unknown)


# SBML comp: a main model instantiating the submodel "decay" (dX/dt = -k X, X(0) = 2)
COMP_MODEL = f"""<?xml version="1.0" encoding="UTF-8"?>
<sbml xmlns="http://www.sbml.org/sbml/level3/version1/core" level="3" version="1"
      xmlns:comp="http://www.sbml.org/sbml/level3/version1/comp/version1" comp:required="true">
  <model id="main">
    <listOfCompartments><compartment id="c" size="1" constant="true" spatialDimensions="3"/></listOfCompartments>
    <comp:listOfSubmodels><comp:submodel comp:id="sub" comp:modelRef="decay"/></comp:listOfSubmodels>
  </model>
  <comp:listOfModelDefinitions>
    <comp:modelDefinition id="decay">
      <listOfCompartments><compartment id="c" size="1" constant="true" spatialDimensions="3"/></listOfCompartments>
      <listOfSpecies><species id="X" compartment="c" initialConcentration="2" hasOnlySubstanceUnits="false"
        boundaryCondition="false" constant="false"/></listOfSpecies>
      <listOfParameters><parameter id="k" value="0.3" constant="true"/></listOfParameters>
      <listOfReactions><reaction id="r" reversible="false" fast="false">
        <listOfReactants><speciesReference species="X" stoichiometry="1" constant="true"/></listOfReactants>
        <kineticLaw>{_math("<apply><times/><ci>k</ci><ci>X</ci></apply>")}</kineticLaw>
      </reaction></listOfReactions>
    </comp:modelDefinition>
  </comp:listOfModelDefinitions>
</sbml>"""


def test_a_comp_model_is_flattened_by_libsbml():
    """Hierarchical models (the comp package) are flattened with libsbml's converter: the
    submodel's ids get its prefix, the dynamics are the submodel's."""
    model = sbml.model_from_sbml(COMP_MODEL, ts=TS)
    assert model.state_names == ("sub__X",) and model.parameters.names == ("sub__k",)
    np.testing.assert_allclose(model.simulate(jnp.asarray([0.3]))[:, 0], 2 * np.exp(-0.3 * TS), rtol=1e-6)


def test_an_algebraic_rule_is_refused_by_name():
    algebraic = _sbml(f"""<listOfParameters>
      <parameter id="x" value="1" constant="false"/><parameter id="z" value="1" constant="false"/>
    </listOfParameters>
    <listOfRules>
      <rateRule variable="x">{_math("<cn>1</cn>")}</rateRule>
      <algebraicRule metaid="balance">{_math("<apply><minus/><ci>z</ci><ci>x</ci></apply>")}</algebraicRule>
    </listOfRules>""")
    with pytest.raises(ValueError, match="unsupported SBML feature: algebraic rules \\(algebraicRule balance\\)"):
        sbml.model_from_sbml(algebraic)


def test_a_delay_is_refused_by_name():
    delayed = _sbml(f"""<listOfParameters><parameter id="x" value="1" constant="false"/></listOfParameters>
    <listOfRules><rateRule variable="x">{_math(
        '<apply><csymbol encoding="text" definitionURL="http://www.sbml.org/sbml/symbols/delay">delay</csymbol>'
        '<ci>x</ci><cn>1</cn></apply>')}</rateRule></listOfRules>""")
    with pytest.raises(ValueError, match="unsupported SBML feature: delay\\(\\) \\(rateRule of 'x'\\)"):
        sbml.model_from_sbml(delayed)


def test_unreadable_input_is_refused():
    with pytest.raises(ValueError, match="neither an SBML string"):
        sbml.model_from_sbml("no/such/file.xml")


def test_non_polynomial_and_mass_action_kinetic_laws_share_the_vector_field():
    """Michaelis-Menten (a scalar expression) next to mass action (the monomial arrays), with
    a local parameter and a boundary species (constant, no state); evaluated without a solve."""
    mixed = _sbml(f"""<listOfCompartments><compartment id="c" size="0.5" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="S" compartment="c" initialConcentration="2" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="P" compartment="c" initialConcentration="0" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="E" compartment="c" initialConcentration="3" hasOnlySubstanceUnits="false"
               boundaryCondition="true" constant="false"/>
    </listOfSpecies>
    <listOfParameters><parameter id="vmax" value="1.2" constant="true"/></listOfParameters>
    <listOfReactions>
      <reaction id="mm" reversible="false">
        <listOfReactants><speciesReference species="S" stoichiometry="1" constant="true"/></listOfReactants>
        <listOfProducts><speciesReference species="P" stoichiometry="2" constant="true"/></listOfProducts>
        <kineticLaw>{_math("<apply><divide/><apply><times/><ci>c</ci><ci>vmax</ci><ci>S</ci></apply>"
                           "<apply><plus/><ci>km</ci><ci>S</ci></apply></apply>")}
          <listOfLocalParameters><localParameter id="km" value="0.3"/></listOfLocalParameters>
        </kineticLaw>
      </reaction>
      <reaction id="ma" reversible="true">
        <listOfReactants><speciesReference species="P" stoichiometry="1" constant="true"/></listOfReactants>
        <listOfProducts><speciesReference species="S" stoichiometry="1" constant="true"/></listOfProducts>
        <kineticLaw>{_math("<apply><times/><ci>c</ci><apply><minus/><apply><times/><ci>kf</ci><ci>P</ci>"
                           "<ci>E</ci></apply><apply><times/><ci>kr</ci><apply><power/><ci>S</ci><cn>2</cn>"
                           "</apply></apply></apply></apply>")}
          <listOfLocalParameters><localParameter id="kf" value="0.1"/><localParameter id="kr" value="0.05"/>
          </listOfLocalParameters>
        </kineticLaw>
      </reaction>
    </listOfReactions>""")
    model = sbml.model_from_sbml(mixed)
    assert model.parameters.names == ("vmax", "mm_km", "ma_kf", "ma_kr")
    assert model.state_names == ("S", "P")
    theta = jnp.asarray(model.parameters.nominal)
    s, p, e, c = 1.5, 0.7, 3.0, 0.5
    rates = np.asarray(model.reaction_rates(0.0, jnp.array([s, p]), theta))
    expected = [c * 1.2 * s / (0.3 + s), c * (0.1 * p * e - 0.05 * s**2)]
    np.testing.assert_allclose(rates, expected, rtol=1e-14)
    dydt = np.asarray(model.vector_field(0.0, jnp.array([s, p]), theta))
    np.testing.assert_allclose(dydt, [(-expected[0] + expected[1]) / c, (2 * expected[0] - expected[1]) / c],
                               rtol=1e-14)
    np.testing.assert_allclose(model.initial_state(theta), [2.0, 0.0])


def test_a_constant_parameter_with_a_numeric_initial_assignment_becomes_a_condition():
    """PEtab conditions set such parameters (Liu_IFACPapersOnLine2025's dose u_2): the initial
    assignment is the condition's default; an assignment of other symbols is refused."""
    def model(assignment):
        return _sbml(f"""<listOfParameters><parameter id="x" value="0" constant="false"/>
          <parameter id="dose" constant="true"/><parameter id="r" value="1" constant="true"/></listOfParameters>
        <listOfInitialAssignments><initialAssignment symbol="dose">{_math(assignment)}</initialAssignment>
        </listOfInitialAssignments>
        <listOfRules><rateRule variable="x">{_math("<apply><times/><ci>r</ci><ci>dose</ci></apply>")}</rateRule>
        </listOfRules>""")
    m = sbml.model_from_sbml(model("<apply><times/><cn>2</cn><cn>3</cn></apply>"), ts=TS, constant_parameters=["dose"])
    assert m.parameters.names == ("r",) and float(m.experiment.conditions["dose"]) == 6.0
    np.testing.assert_allclose(m.simulate(jnp.asarray([1.0]))[:, 0], 6.0 * TS, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m.with_conditions({"dose": 0.5}).simulate(jnp.asarray([1.0]))[:, 0], 0.5 * TS,
                               rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="whose initial assignment is not a number .*initialAssignment of 'dose'"):
        sbml.model_from_sbml(model("<apply><times/><cn>2</cn><ci>r</ci></apply>"), constant_parameters=["dose"])


# Every path of the assembled Jacobian: mass action with a squared factor and a boundary species,
# Michaelis-Menten (a scalar rate), an assignment rule on the species inside a mass-action law (a
# derived value that depends on the state), a rate rule that reads a species, compartment 0.5.
JACOBIAN_MODEL = _sbml(f"""<listOfCompartments><compartment id="c" size="0.5" constant="true"/></listOfCompartments>
    <listOfSpecies>
      <species id="S" compartment="c" initialConcentration="2" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="P" compartment="c" initialConcentration="0.5" hasOnlySubstanceUnits="false"
               boundaryCondition="false" constant="false"/>
      <species id="E" compartment="c" initialConcentration="3" hasOnlySubstanceUnits="false"
               boundaryCondition="true" constant="false"/>
    </listOfSpecies>
    <listOfParameters>
      <parameter id="vmax" value="1.2" constant="true"/><parameter id="kd" value="0.2" constant="true"/>
      <parameter id="r" value="0.3" constant="true"/>
      <parameter id="total" constant="false"/><parameter id="x" value="1" constant="false"/>
    </listOfParameters>
    <listOfRules>
      <assignmentRule variable="total">{_math("<apply><plus/><ci>S</ci><ci>P</ci></apply>")}</assignmentRule>
      <rateRule variable="x">{_math("<apply><times/><apply><minus/><ci>r</ci></apply><ci>x</ci><ci>S</ci></apply>")}
      </rateRule>
    </listOfRules>
    <listOfReactions>
      <reaction id="mm" reversible="false">
        <listOfReactants><speciesReference species="S" stoichiometry="1" constant="true"/></listOfReactants>
        <listOfProducts><speciesReference species="P" stoichiometry="2" constant="true"/></listOfProducts>
        <kineticLaw>{_math("<apply><divide/><apply><times/><ci>c</ci><ci>vmax</ci><ci>S</ci></apply>"
                           "<apply><plus/><cn>0.3</cn><ci>S</ci></apply></apply>")}</kineticLaw>
      </reaction>
      <reaction id="ma" reversible="true">
        <listOfReactants><speciesReference species="P" stoichiometry="1" constant="true"/></listOfReactants>
        <listOfProducts><speciesReference species="S" stoichiometry="1" constant="true"/></listOfProducts>
        <kineticLaw>{_math("<apply><times/><ci>c</ci><apply><minus/><apply><times/><cn>0.1</cn><ci>P</ci>"
                           "<ci>E</ci></apply><apply><times/><cn>0.05</cn><apply><power/><ci>S</ci><cn>2</cn>"
                           "</apply></apply></apply></apply>")}</kineticLaw>
      </reaction>
      <reaction id="decay" reversible="false">
        <listOfReactants><speciesReference species="P" stoichiometry="1" constant="true"/></listOfReactants>
        <kineticLaw>{_math("<apply><times/><ci>c</ci><ci>kd</ci><ci>total</ci><ci>P</ci></apply>")}</kineticLaw>
      </reaction>
    </listOfReactions>""")


def test_the_assembled_jacobian_equals_autodiff_of_the_vector_field():
    """`SBMLModel.state_jacobian` (monomials in closed form through the stoichiometry, plus the
    scalar rate, the state-dependent assignment rule and the rate rule by autodiff) equals
    ``jax.jacfwd`` of the vector field in every entry, at several states and under jit."""
    model = sbml.model_from_sbml(JACOBIAN_MODEL)
    assert model.state_names == ("S", "P", "x")
    assert model._jacobian_fn is not None and "rest" in model._jacobian_fn.namespace
    theta = jnp.asarray(model.parameters.nominal)
    jitted = eqx.filter_jit(lambda m, t, y, th: m.state_jacobian(t, y, th))
    for y in np.random.default_rng(0).uniform(0.1, 3.0, (4, 3)):
        y = jnp.asarray(y)
        expected = np.asarray(jax.jacfwd(lambda x: model.vector_field(0.3, x, theta))(y))
        assert np.count_nonzero(expected) == 6  # S and P on each other; x on S and x
        np.testing.assert_allclose(model.state_jacobian(0.3, y, theta), expected, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(jitted(model, 0.3, y, theta), expected, rtol=1e-13, atol=1e-15)


def test_a_pure_mass_action_model_needs_no_autodiff_for_its_jacobian(volume_model):
    """A -> B with k A in a compartment of volume 2: the Jacobian is [[-k/2, 0], [k, 0]], with no
    ``rest`` function (nothing beyond the monomials depends on the state)."""
    assert "rest" not in volume_model._jacobian_fn.namespace
    theta = jnp.asarray(volume_model.parameters.nominal)
    k = float(theta[volume_model.parameters.names.index("k")])
    np.testing.assert_allclose(volume_model.state_jacobian(0.0, jnp.array([1.3, 0.4]), theta),
                               [[-k / 2, 0.0], [k, 0.0]], rtol=1e-15)


@pytest.mark.slow  # 14-60 s of compiling; make test keeps the fast gradient/import checks (moved 2026-12-02)
def test_the_generated_code_is_the_same_in_every_process():
    """The generated source does not depend on Python's hash seed (set iteration orders): the same
    text under two PYTHONHASHSEEDs, for models with many rules and initial assignments (Alkan) and
    with piecewise switches in time (Giordano), so JAX's persistent compilation cache finds what an
    earlier run compiled (it missed every time when the definitions came out in hash order)."""
    import os
    import subprocess
    import sys

    models = [shared_petab("benchmark_models", name, f"model_{name}.xml")
              for name in ("Alkan_SciSignal2018", "Giordano_Nature2020")]
    if not all(path.exists() for path in models):
        pytest.skip("the PEtab benchmark collection is not there")
    script = ("import sys, hashlib; from jcalib.io import sbml; "
              "print([hashlib.sha1(sbml.model_from_sbml(p).source.encode()).hexdigest() for p in sys.argv[1:]])")
    outputs = []
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", script, *map(str, models)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs[0] == outputs[1]
