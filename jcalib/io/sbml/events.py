"""SBML events (triggered at a time or by the state) and the piecewise switches in time at which the solver
restarts."""

from __future__ import annotations

from typing import NamedTuple

import libsbml
import sympy as sp
from sympy.core.relational import Relational

from jcalib.io.sbml.mathml import _SWITCH, _TIME, _Converter, _unsupported


class _Event(NamedTuple):
    """An SBML event: ``trigger`` is ``T`` of ``time >= T`` (a time event) or, for other
    triggers, ``h`` with the trigger true where ``h > 0`` (a state event)."""
    id: str
    trigger: sp.Expr
    initial_value: bool
    assignments: list[tuple[str, sp.Expr]]
    is_time_event: bool


def _events(model: libsbml.Model, convert: _Converter) -> list[_Event]:
    """The model's events, without delays, each triggered by one comparison: ``time >= T``
    (or ``>``, ``T <= time``) is a time event (`_Event.trigger` = T; whether T depends on the
    state is checked later), any other ``a > b`` / ``a < b`` (or ``>=``, ``<=``) a state event
    with ``h = a - b`` (or ``b - a``)."""
    events = []
    compartments = {c.getId() for c in model.getListOfCompartments()}
    for k, event in enumerate(model.getListOfEvents()):
        name = event.getId() or event.getName() or str(k)
        where = f"event '{name}'"
        if event.isSetDelay():
            raise _unsupported("events with a delay", where)
        if not event.isSetTrigger() or event.getTrigger().getMath() is None:
            raise ValueError(f"model_from_sbml: {where} has no trigger")
        trigger = convert(event.getTrigger(), f"trigger of {where}")
        if isinstance(trigger, (sp.GreaterThan, sp.StrictGreaterThan)):
            h = trigger.lhs - trigger.rhs
        elif isinstance(trigger, (sp.LessThan, sp.StrictLessThan)):
            h = trigger.rhs - trigger.lhs
        else:
            raise _unsupported(f"event triggers other than one comparison ({trigger})", where)
        assignments = []
        for assignment in event.getListOfEventAssignments():
            variable = assignment.getVariable()
            if variable in compartments:
                raise _unsupported("event assignments to compartments", f"{where}, eventAssignment to '{variable}'")
            assignments.append((variable, convert(assignment, f"eventAssignment to '{variable}' of {where}")))
        initial_value = bool(event.getTrigger().getInitialValue()) if model.getLevel() >= 3 else True
        time_trigger = sp.expand(h).coeff(_TIME) == 1 and _TIME not in (sp.expand(h) - _TIME).free_symbols
        events.append(_Event(name, sp.expand(_TIME - h) if time_trigger else h, initial_value, assignments,
                             time_trigger))
    return events


def _time_switches(exprs, constant_in_time) -> tuple[dict, list]:
    """Piecewise conditions that compare time with a threshold ``T`` constant in time (``time < T``,
    ``T - time > 0``, ... with ``T`` of parameters and conditions): the replacements that make
    them compare ``t_switch`` (`_SWITCH`) instead, and the thresholds.

    `SBMLModel.integrate` restarts the solver at every threshold and evaluates these conditions
    at the middle of each segment, where they cannot change: no step straddles the switch, and
    the derivative with respect to ``T`` (the jump of the vector field times dT) is right; the
    conditions evaluated at the time itself, ``d(where(t < T, a, b))/dT`` would be 0.
    """
    replacements: dict[sp.Basic, sp.Basic] = {}
    thresholds: list[sp.Expr] = []
    for expr in exprs:
        for piecewise in sorted(expr.atoms(sp.Piecewise), key=sp.default_sort_key):  # one order in every process
            for _, condition in piecewise.args:
                relations = condition.atoms(Relational) if isinstance(condition, sp.Basic) else ()
                for relation in sorted(relations, key=sp.default_sort_key):
                    difference = sp.expand(relation.lhs - relation.rhs)
                    slope = difference.coeff(_TIME)
                    rest = sp.expand(difference - slope * _TIME)
                    if relation in replacements or slope not in (1, -1) or _TIME in rest.free_symbols \
                            or not constant_in_time(rest):
                        continue
                    replacements[relation] = relation.xreplace({_TIME: _SWITCH})
                    if -rest / slope not in thresholds:
                        thresholds.append(-rest / slope)
    return replacements, thresholds
