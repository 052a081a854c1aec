"""What an SBML model holds, read with libsbml: the document (``comp`` flattened, packages that change the
model's meaning refused), its entities, and the symbols they become (states, calibrated parameters,
conditions, definitions)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import NamedTuple

import libsbml
import numpy as np
import scipy.linalg
import sympy as sp

from jcalib.io.sbml.events import _Event
from jcalib.io.sbml.mathml import _SWITCH, _TIME, _condition, _Converter, _symbol, _unsupported
from jcalib.parameters import Parameter, ParameterSpace

__all__ = ["DEFAULT_BOUND_FACTOR"]


DEFAULT_BOUND_FACTOR = 1e3
"""Default bounds of a parameter with nominal ``v > 0``: ``[v / 1e3, v * 1e3]``, six decades
around the SBML value (wide enough for a first calibration; give ``bounds`` for real ones)."""


def _read_document(source: str | os.PathLike) -> libsbml.SBMLDocument:
    reader = libsbml.SBMLReader()
    text = str(source)
    if isinstance(source, os.PathLike) or not text.lstrip().startswith("<"):
        if not os.path.exists(text):
            raise ValueError(f"model_from_sbml: {text!r} is neither an SBML string (starting with '<') nor an "
                             "existing file")
        document = reader.readSBMLFromFile(text)
    else:
        document = reader.readSBMLFromString(text)
    _refuse_errors(document, "the SBML could not be read")
    if document.getModel() is None:
        raise ValueError("model_from_sbml: the SBML document has no model")
    if document.getLevel() >= 3 and document.isPackageEnabled("comp"):
        properties = libsbml.ConversionProperties()
        properties.addOption("flatten comp", True)  # libsbml's CompFlatteningConverter
        if document.convert(properties) != libsbml.LIBSBML_OPERATION_SUCCESS:
            raise _unsupported("the SBML package 'comp' (libsbml could not flatten this model)", "sbml")
    namespaces = document.getNamespaces()
    for i in range(namespaces.getLength() if document.getLevel() >= 3 else 0):
        uri, prefix = namespaces.getURI(i), namespaces.getPrefix(i)
        if prefix and document.getPackageRequired(uri):  # a package that changes the model's meaning
            raise _unsupported(f"the required SBML package '{prefix}'", "sbml")
    for category in _UNCHECKED_CATEGORIES:
        document.setConsistencyChecks(category, False)
    if document.checkConsistency():  # identifiers only: e.g. two species with one id (the second would win)
        _refuse_errors(document, "the SBML's identifiers are not consistent")
    return document


_UNCHECKED_CATEGORIES = (libsbml.LIBSBML_CAT_GENERAL_CONSISTENCY, libsbml.LIBSBML_CAT_UNITS_CONSISTENCY,
                         libsbml.LIBSBML_CAT_MATHML_CONSISTENCY, libsbml.LIBSBML_CAT_SBO_CONSISTENCY,
                         libsbml.LIBSBML_CAT_OVERDETERMINED_MODEL, libsbml.LIBSBML_CAT_MODELING_PRACTICE)
"""libsbml's consistency checks left to the import's own refusals (only identifiers are checked)."""


def _refuse_errors(document: libsbml.SBMLDocument, what: str) -> None:
    """ValueError with the first three errors libsbml reports on ``document``, if any."""
    errors = [document.getError(i) for i in range(document.getNumErrors())]
    fatal = [e for e in errors if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR]
    if fatal:
        raise ValueError(f"model_from_sbml: {what}: "
                         + "; ".join(f"line {e.getLine()}: {' '.join(e.getMessage().split())}" for e in fatal[:3]))


def _default_bounds(nominal: float, factor: float) -> tuple[float, float, bool]:
    if nominal > 0:
        return nominal / factor, nominal * factor, True
    if nominal < 0:
        return nominal * factor, nominal / factor, False
    return 0.0, 1.0, False


def _conservation_laws(stoichiometry: np.ndarray, no_rate_rule: Sequence[bool]) -> np.ndarray:
    """Rows ``u`` of amounts the reactions conserve, ``(n_conserved, n_states)``: an orthonormal
    basis of the left null space of the stoichiometry restricted to the states without a rate
    rule (a rate-rule state is conserved by nothing; a state without reactions or rule, such
    as an event target, is conserved alone). `SBMLModel.conserved_moieties` applies them."""
    keep = np.flatnonzero(np.asarray(no_rate_rule, dtype=bool))
    laws = np.zeros((0, stoichiometry.shape[0]))
    if keep.size:
        basis = scipy.linalg.null_space(stoichiometry[keep].T).T  # (n_conserved, n_keep)
        laws = np.zeros((basis.shape[0], stoichiometry.shape[0]))
        laws[:, keep] = basis
    return laws


# --- the steps of model_from_sbml -------------------------------------------------------------
class _Entities(NamedTuple):
    """The SBML model's entities by id, and the ids that events assign."""

    rules: dict  # rule variable -> rule
    initial_assignments: dict  # symbol -> initialAssignment
    compartments: dict
    species: dict
    parameters: dict
    event_targets: set


class _Symbols:
    """What `model_from_sbml` makes of the entities: ``conditions`` ({id: value}, the
    experiment's), ``theta`` ([(name, value)], the calibrated parameters), ``states`` (ids),
    ``definitions`` (symbol -> expression: rules and constants) and ``init_definitions``
    (the states' values at ``t0`` where they differ from ``definitions``)."""

    def __init__(self):
        self.conditions: dict[str, float] = {}
        self.theta: list[tuple[str, float]] = []
        self.states: list[str] = []
        self.definitions: dict[sp.Symbol, sp.Expr] = {}
        self.init_definitions: dict[sp.Symbol, sp.Expr] = {}


def _entities(model: libsbml.Model, events: list[_Event], constant_parameters: tuple[str, ...]) -> _Entities:
    """The model's entities, after refusing what jcalib.io.sbml does not support (algebraic rules,
    conversion factors, variable compartments) and checking event targets and
    ``constant_parameters``."""
    for rule in model.getListOfRules():
        if rule.isAlgebraic():
            raise _unsupported("algebraic rules", f"algebraicRule {rule.getMetaId() or rule.getIdAttribute() or ''}"
                               .strip())
    if model.getLevel() >= 3 and model.isSetConversionFactor():
        raise _unsupported("conversion factors", f"model '{model.getId()}' conversionFactor")
    rules = {r.getVariable(): r for r in model.getListOfRules()}
    compartments = {c.getId(): c for c in model.getListOfCompartments()}
    for cid, comp in compartments.items():
        if cid in rules or not comp.getConstant():
            raise _unsupported("non-constant compartments (variable volume)", f"compartment '{cid}'")
    species = {s.getId(): s for s in model.getListOfSpecies()}
    for sid, sp_ in species.items():
        if model.getLevel() >= 3 and sp_.isSetConversionFactor():
            raise _unsupported("conversion factors", f"species '{sid}'")
    parameters = {p.getId(): p for p in model.getListOfParameters()}
    for event in events:
        for variable, _ in event.assignments:
            if variable not in species and variable not in parameters:
                raise ValueError(f"model_from_sbml: event '{event.id}' assigns '{variable}', which is not a species "
                                 "or parameter of the model")
    for name in constant_parameters:
        if name not in parameters:
            raise ValueError(f"model_from_sbml: constant_parameters names {name!r}, which is not a global parameter of "
                             f"the model; known: {sorted(parameters)}")
    return _Entities(rules, {ia.getSymbol(): ia for ia in model.getListOfInitialAssignments()}, compartments,
                     species, parameters, {variable for event in events for variable, _ in event.assignments})


def _initial_expr(entities: _Entities, convert: _Converter, sbml_id: str):
    ia = entities.initial_assignments.get(sbml_id)
    return None if ia is None else convert(ia, f"initialAssignment of '{sbml_id}'")


def _compartment_symbols(entities: _Entities, convert: _Converter, symbols: _Symbols) -> None:
    """Compartment sizes: conditions, or definitions where an initial assignment sets them."""
    for cid, comp in entities.compartments.items():
        ia = _initial_expr(entities, convert, cid)
        if ia is not None:
            symbols.definitions[_symbol(cid)] = ia
            continue
        size = comp.getSize() if comp.isSetSize() else (1.0 if comp.getSpatialDimensions() == 0 else math.nan)
        if math.isnan(size):
            raise ValueError(f"model_from_sbml: compartment '{cid}' has no size (set size or an initialAssignment)")
        symbols.conditions[cid] = float(size)
        symbols.definitions[_symbol(cid)] = _condition(cid)


def _parameter_symbols(entities: _Entities, convert: _Converter, symbols: _Symbols,
                       constant_parameters: tuple[str, ...]) -> None:
    """Global parameters: assignment-rule variables, states (rate rules, event targets),
    conditions (``constant_parameters``), definitions (initial assignments) or calibrated."""
    for pid, par in entities.parameters.items():
        rule = entities.rules.get(pid)
        if rule is not None and rule.isAssignment():
            symbols.definitions[_symbol(pid)] = convert(rule, f"assignmentRule of '{pid}'")
            continue
        ia = _initial_expr(entities, convert, pid)
        if (rule is not None and rule.isRate()) or pid in entities.event_targets:  # a state
            symbols.states.append(pid)
            if ia is not None:
                symbols.init_definitions[_symbol(pid)] = ia
            else:
                symbols.conditions[pid] = float(par.getValue()) if par.isSetValue() else math.nan
                symbols.init_definitions[_symbol(pid)] = _condition(pid)
            continue
        if pid in constant_parameters:
            if ia is not None and ia.free_symbols:
                raise _unsupported("a constant parameter (a condition) whose initial assignment is not a number",
                                   f"initialAssignment of '{pid}'")
            symbols.conditions[pid] = (float(ia) if ia is not None else float(par.getValue()) if par.isSetValue()
                                       else math.nan)
            symbols.definitions[_symbol(pid)] = _condition(pid)
        elif ia is not None:
            symbols.definitions[_symbol(pid)] = ia
        else:
            if not par.isSetValue():
                raise ValueError(f"model_from_sbml: parameter '{pid}' has no value (set value or an initialAssignment)")
            symbols.theta.append((pid, float(par.getValue())))


def _local_parameters(model: libsbml.Model, entities: _Entities, symbols: _Symbols) -> dict[str, dict[str, str]]:
    """Kinetic laws' local parameters as calibrated parameters named ``<reaction>_<id>``
    (underscores appended until the name is free); returns ``{reaction: {local id: name}}``."""
    local_renames: dict[str, dict[str, str]] = {}
    taken = (set(entities.parameters) | set(entities.species) | set(entities.compartments)
             | {r.getId() for r in model.getListOfReactions()})
    for reaction in model.getListOfReactions():
        law = reaction.getKineticLaw()
        if law is None:
            continue
        renames = {}
        locals_ = list(law.getListOfParameters())
        if model.getLevel() >= 3:
            locals_ += list(law.getListOfLocalParameters())
        for local in locals_:
            if local.getId() in renames:  # level 3 lists local parameters under both names
                continue
            name = f"{reaction.getId()}_{local.getId()}"
            while name in taken:
                name += "_"
            taken.add(name)
            renames[local.getId()] = name
            if not local.isSetValue():
                raise ValueError(f"model_from_sbml: local parameter '{local.getId()}' of reaction "
                                 f"'{reaction.getId()}' has no value")
            symbols.theta.append((name, float(local.getValue())))
        local_renames[reaction.getId()] = renames
    return local_renames


def _species_symbols(entities: _Entities, convert: _Converter, symbols: _Symbols) -> None:
    """Species: assignment-rule variables, states (with their initial values) or constants;
    in concentration unless ``hasOnlySubstanceUnits``."""
    for sid, spec in entities.species.items():
        cid = spec.getCompartment()
        only_amounts = spec.getHasOnlySubstanceUnits()
        rule = entities.rules.get(sid)
        if rule is not None and rule.isAssignment():
            symbols.definitions[_symbol(sid)] = convert(rule, f"assignmentRule of '{sid}'")
            continue
        value = _initial_expr(entities, convert, sid)
        if value is None:
            if spec.isSetInitialAmount():
                symbols.conditions[sid] = float(spec.getInitialAmount())
                value = _condition(sid) if only_amounts else _condition(sid) / _symbol(cid)
            elif spec.isSetInitialConcentration():
                symbols.conditions[sid] = float(spec.getInitialConcentration())
                value = _condition(sid) * _symbol(cid) if only_amounts else _condition(sid)
            else:
                raise ValueError(f"model_from_sbml: species '{sid}' has no initial value (set initialAmount, "
                                 "initialConcentration or an initialAssignment)")
        dynamic = (rule is not None or sid in entities.event_targets
                   or not (spec.getConstant() or spec.getBoundaryCondition()))
        if dynamic:
            symbols.states.append(sid)
            symbols.init_definitions[_symbol(sid)] = value
        else:
            symbols.definitions[_symbol(sid)] = value


def _reactions(model: libsbml.Model, entities: _Entities, convert: _Converter,
               local_renames: dict[str, dict[str, str]], states: list[str]):
    """(reaction ids, kinetic laws, stoichiometry ``(n_states, n_reactions)``); boundary and
    rule-driven species get no stoichiometry."""
    state_index = {s: i for i, s in enumerate(states)}
    reaction_ids, rate_exprs, columns = [], [], []
    for reaction in model.getListOfReactions():
        rid = reaction.getId()
        if reaction.isSetFast() and reaction.getFast():
            raise _unsupported("fast reactions", f"reaction '{rid}'")
        law = reaction.getKineticLaw()
        if law is None:
            raise _unsupported("a reaction without a kinetic law", f"reaction '{rid}'")
        rate_exprs.append(convert(law, f"kineticLaw of reaction '{rid}'", local_renames[rid]))
        column = np.zeros(len(states))
        for sign, refs in ((-1.0, reaction.getListOfReactants()), (1.0, reaction.getListOfProducts())):
            for ref in refs:
                target = _reactant(model, entities, ref, rid)
                if (target in state_index and target not in entities.rules
                        and not entities.species[target].getBoundaryCondition()):
                    column[state_index[target]] += sign * ref.getStoichiometry()
        reaction_ids.append(rid)
        columns.append(column)
    stoichiometry = np.stack(columns, axis=1) if columns else np.zeros((len(states), 0))
    return reaction_ids, rate_exprs, stoichiometry


def _reactant(model: libsbml.Model, entities: _Entities, ref, rid: str) -> str:
    """The species of a species reference, after refusing variable stoichiometry."""
    where = f"speciesReference to '{ref.getSpecies()}' in reaction '{rid}'"
    if ref.isSetStoichiometryMath():
        raise _unsupported("variable stoichiometry (stoichiometryMath)", where)
    if ref.isSetId() and (ref.getId() in entities.rules or ref.getId() in entities.initial_assignments):
        raise _unsupported("variable stoichiometry (a rule or initial assignment on a species reference)", where)
    if model.getLevel() >= 3 and not ref.isSetStoichiometry():
        raise ValueError(f"model_from_sbml: the {where} has no stoichiometry")
    if ref.getSpecies() not in entities.species:
        raise ValueError(f"model_from_sbml: the {where} names an unknown species")
    return ref.getSpecies()


def _output_ids(outputs: Sequence[str] | None, entities: _Entities, states: list[str]) -> tuple[str, ...]:
    """The observed ids: ``outputs``, checked, or the states."""
    known_ids = set(entities.species) | set(entities.parameters) | set(entities.compartments) | set(entities.rules)
    if outputs is None:
        if not states:
            raise ValueError("model_from_sbml: the model has no states; pass outputs=[ids] to observe something")
        return tuple(states)
    outputs = tuple(outputs)
    unknown = [o for o in outputs if o not in known_ids]
    if unknown:
        raise ValueError(f"model_from_sbml: outputs names unknown ids {unknown}; known: {sorted(known_ids)}")
    return outputs


def _sbml_space(theta: list[tuple[str, float]], bounds, bound_factor: float) -> ParameterSpace:
    """The calibrated parameters with their bounds (given, or `_default_bounds`)."""
    theta_names = [name for name, _ in theta]
    for name, value in theta:
        if not math.isfinite(value):
            raise ValueError(f"model_from_sbml: parameter '{name}' has the value {value}; give it a finite value")
    bounds = dict(bounds or {})
    unknown = sorted(set(bounds) - set(theta_names))
    if unknown:
        raise ValueError(f"model_from_sbml: bounds names {unknown}, which are not calibrated parameters; known: "
                         f"{theta_names}")
    space_parameters = []
    for name, value in theta:
        if name in bounds:
            lower, upper = (float(b) for b in bounds[name])
            log_scale = lower > 0
        else:
            lower, upper, log_scale = _default_bounds(value, bound_factor)
        space_parameters.append(Parameter(name, value, lower, upper, log_scale=log_scale))
    return ParameterSpace(space_parameters)


def _check_symbols(symbols: _Symbols, rate_exprs, rate_rule_exprs, events: list[_Event]) -> None:
    """Refuse an expression that reads an id without a value, and an initial assignment of a
    constant that depends on a species or time."""
    theta_names = [name for name, _ in symbols.theta]
    state_symbols = {_symbol(s) for s in symbols.states}
    known = (state_symbols | {_symbol(n) for n in theta_names} | {_condition(n) for n in symbols.conditions}
             | {_TIME, _SWITCH} | set(symbols.definitions))
    for exprs, where in ((symbols.definitions.values(), "model's rules and initial assignments"),
                         (rate_exprs + rate_rule_exprs, "model's kinetic laws and rate rules"),
                         (symbols.init_definitions.values(), "model's initial values"),
                         ([e.trigger for e in events] + [v for e in events for _, v in e.assignments],
                          "model's events")):
        for expr in exprs:
            for symbol in sorted(expr.free_symbols - known, key=str):
                raise ValueError(f"model_from_sbml: the {where} uses '{str(symbol)[2:]}', which is not a species, "
                                 "compartment, parameter or rule variable of the model")
