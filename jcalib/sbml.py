"""SBML models (levels 2 and 3, core) as jcalib models.

`model_from_sbml` reads an SBML file or string with ``python-libsbml``, converts its MathML with
``sbmlmath`` to sympy, and prints the sympy expressions as JAX code (sympy's own
``JaxPrinter``); the result is an `SBMLModel`, an `AbstractModel` like any built-in one.

Symbols and units. Every SBML symbol has the value SBML gives it: species are concentrations
(amount / compartment size) unless ``hasOnlySubstanceUnits`` is true, then amounts; kinetic
laws are extensive (substance / time), so for a concentration species
``d[S]/dt = sum_j N_sj v_j / V`` and for an amount species ``dS/dt = sum_j N_sj v_j``. The
vector field is built as array operations: the reaction rates ``v`` (one vector), then
``(N @ v) * scale + rate_rules`` with the stoichiometric matrix ``N``, ``scale = 1/V`` or 1
per state, and the rate-rule derivatives; its size grows linearly with the model.

What becomes what:

- constant global parameters (and the local parameters of kinetic laws, renamed
  ``<reactionId>_<parameterId>``) are the calibrated parameters ``theta``, nominal = the SBML
  value; ``constant_parameters`` moves some of them to the experiment's conditions instead;
- compartment sizes, species initial values (as written: ``initialAmount`` or
  ``initialConcentration``) and the initial values of rate-rule variables are
  ``experiment.conditions``, keyed by their SBML ids (arrays: new values never recompile);
- states: species that are neither constant, boundary nor set by an assignment rule, and all
  targets of rate rules;
- assignment rules, initial assignments, function definitions and piecewise expressions are
  evaluated in the generated code (in dependency order).

Default bounds: a parameter with nominal ``v > 0`` gets ``[v / 1e3, v * 1e3]`` on a log scale
(`DEFAULT_BOUND_FACTOR`), ``v < 0`` gets ``[v * 1e3, v / 1e3]`` (linear) and ``v = 0`` gets
``[0, 1]`` (linear); pass ``bounds={id: (lower, upper)}`` for anything else.

Default solver: most SBML models of biology are stiff, so `model_from_sbml` uses jcalib's
Rosenbrock method `jcalib.rosenbrock.Rodas5P` (one Jacobian and LU factorisation per step, no
stage iterations) with ``PIDController(rtol=1e-8, atol=1e-10)`` (the tolerances of the built-in
models) and ``max_steps=100_000`` (`stiff_solver`); change them with the arguments or
`AbstractModel.with_solver`. ``stiff_solver(method="kvaerno5")`` gives diffrax's implicit
``Kvaerno5`` instead, with the chord method for its stage equations, full Newton
(``newton=True``, ``optimistix.Newton``: fewer rejected steps, less accurate forward-mode
derivatives) or the chord method with its own stopping tolerances (``stage_tolerances=(rtol,
atol)``, for models whose chord iterations fail at the controller's tolerances).

Events: those triggered at a time ``T`` (``time >= T``, ``T`` a constant or an expression of
parameters and conditions; Smith_BMCSystBiol2013's insulin pulses) restart the solver at ``T``
after their assignments; other triggers (one comparison that depends on the state, e.g.
Liu_IFACPapersOnLine2025's ``U < 1e-8``) are located by diffrax's event root finding and the
solver restarts there (at most `MAX_EVENT_RESTARTS` times; forward-mode derivatives only).
Event targets (species, non-constant parameters) become states with zero derivative; see
`SBMLModel.integrate`.

Not supported, each refused with a ``ValueError`` that names the feature and the SBML element:
events with delays, triggers other than one comparison, time and state-dependent events in one
model, algebraic rules, ``delay``, ``rateOf``, fast reactions, non-constant compartments
(rules on compartments), variable stoichiometry (``stoichiometryMath`` or rules on species
references), conversion factors, reactions without kinetic laws, and SBML packages
(``fbc`` ...) that change the model's meaning; hierarchical models (``comp``) are flattened by
libsbml's CompFlatteningConverter first.
"""

from __future__ import annotations

import graphlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import libsbml
import numpy as np
import optimistix as optx
import sbmlmath
import scipy.linalg
import sympy as sp
from jaxtyping import Array, Float
from sympy.core.function import AppliedUndef
from sympy.core.relational import Relational
from sympy.printing.numpy import JaxPrinter

from jcalib.model import AbstractModel, Experiment
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.rosenbrock import Rodas5P

__all__ = [
    "DEFAULT_BOUND_FACTOR", "MAX_EVENT_RESTARTS", "STIFF_METHODS", "SBMLModel", "model_from_sbml", "stiff_solver",
]

DEFAULT_BOUND_FACTOR = 1e3
"""Default bounds of a parameter with nominal ``v > 0``: ``[v / 1e3, v * 1e3]``, six decades
around the SBML value (wide enough for a first calibration; give ``bounds`` for real ones)."""

_TIME = sp.Symbol("t")
_SWITCH = sp.Symbol("t_switch")
"""The time at which piecewise switches in time are evaluated (`_time_switches`): the middle of
the solver's current segment while integrating, the time itself everywhere else."""


MAX_EVENT_RESTARTS = 100
"""State-dependent events: the most restarts of the solver in one simulation (more events end it
with ``max_steps_reached``, so it is reported as failed, never truncated silently)."""


def _solution(t0, t1, ts, ys, result, steps) -> dfx.Solution:
    """A diffrax Solution of states ``ys`` at ``ts`` pieced together from several solves."""
    return dfx.Solution(t0=t0, t1=t1, ts=ts, ys=ys, interpolation=None, stats={"num_steps": steps}, result=result,
                        solver_state=None, controller_state=None, made_jump=None, event_mask=None)


class SBMLModel(AbstractModel):
    """An SBML model as a jcalib model (build it with `model_from_sbml`).

    Attributes (besides `AbstractModel`'s):
        stoichiometry: ``(n_states, n_reactions)`` stoichiometric matrix (0 rows for states set
            by rate rules).
        conservation: ``(n_conserved, n_states)`` the conserved moieties of the reactions, as
            weights of the states' amounts (`conserved_moieties`).
        condition_names: the ids held in ``experiment.conditions`` (compartment sizes,
            species initial values, constant parameters moved there), in code order.
        reaction_ids: the SBML reaction ids, columns of `stoichiometry`.
        source: the generated JAX code, for reading and debugging.
        event_ids: the SBML events: `integrate` restarts the solver at each (module docstring).
        switch_conditions: the piecewise conditions that switch at a time ``T`` constant in time
            (e.g. ``tau - time > 0``): `integrate` restarts the solver at each ``T`` too.
    """

    stoichiometry: Float[Array, "n_states n_reactions"]
    conservation: Float[Array, "n_conserved n_states"]
    condition_names: tuple[str, ...] = eqx.field(static=True)
    reaction_ids: tuple[str, ...] = eqx.field(static=True)
    source: str = eqx.field(static=True)
    _rhs_fn: object = eqx.field(static=True)
    _init_fn: object = eqx.field(static=True)
    _observe_fn: object = eqx.field(static=True)
    event_ids: tuple[str, ...] = eqx.field(static=True, default=())
    _event_fns: tuple = eqx.field(static=True, default=())
    _event_fires_at_t0: tuple[bool, ...] = eqx.field(static=True, default=())
    _event_triggers_fn: object = eqx.field(static=True, default=None)
    _state_events: bool = eqx.field(static=True, default=False)
    switch_conditions: tuple[str, ...] = eqx.field(static=True, default=())
    _switch_times_fn: object = eqx.field(static=True, default=None)

    def _conditions(self):
        conditions = self.experiment.conditions
        if not self.condition_names:
            return jnp.zeros((0,))
        return jnp.stack([jnp.asarray(conditions[name], dtype=jnp.float64) for name in self.condition_names])

    def vector_field(self, t, y, theta):
        return self._field(t, y, theta, t)

    def _field(self, t, y, theta, t_switch):
        """dy/dt with the piecewise switches in time (`switch_conditions`) evaluated at ``t_switch``."""
        rates, scale, rate_rules = self._rhs_fn(t, y, theta, self._conditions(), t_switch)
        return (self.stoichiometry @ rates) * scale + rate_rules

    def initial_state(self, theta):
        t0 = jnp.asarray(self.experiment.t0, dtype=jnp.float64)
        return self._init_fn(t0, theta, self._conditions(), t0)

    def observe(self, t, y, theta):
        return self._observe_fn(t, y, theta, self._conditions(), t)

    def integrate(self, y0, theta, t0, t1, ts) -> dfx.Solution:
        """`AbstractModel.integrate`, restarting the solver at each event and each time switch:
        these times in order split ``[t0, t1]`` into segments (one ``lax.scan`` over them, one
        compiled solve); at an event's time ``T`` its assignments change the state, and a state
        saved at ``T`` is the one after the event. An event with ``T > t1`` does not happen; one
        with ``T <= t0`` happens at ``t0`` only if its trigger's ``initialValue`` is false (SBML).
        Within a segment the time switches are evaluated at its middle, where they are
        constant (`switch_conditions`)."""
        if not self._event_fns and self._switch_times_fn is None:
            return super().integrate(y0, theta, t0, t1, ts)
        if self._state_events:
            return self._integrate_state_events(y0, theta, t0, t1, ts)
        conditions = self._conditions()
        t0, t1 = jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(t1, dtype=jnp.float64)
        # time events: the "triggers" are their times T (functions of parameters and conditions only);
        # time switches are events without assignments
        times = jnp.asarray(self._event_triggers_fn(t0, y0, theta, conditions, t0), dtype=jnp.float64)
        fires = (times <= t1) & ((times > t0) | jnp.asarray(self._event_fires_at_t0, dtype=bool))
        if self._switch_times_fn is not None:
            switch_times = jnp.asarray(self._switch_times_fn(t0, y0, theta, conditions, t0), dtype=jnp.float64)
            times = jnp.concatenate([times, switch_times])
            fires = jnp.concatenate([fires, jnp.zeros(switch_times.shape, dtype=bool)])
        order = jnp.argsort(times)
        bounds = jnp.clip(times[order], t0, t1)
        starts = jnp.concatenate([t0[None], bounds])
        ends = jnp.concatenate([bounds, t1[None]])
        events = jnp.concatenate([order, jnp.zeros(1, dtype=order.dtype)])
        event_fires = jnp.concatenate([fires[order], jnp.zeros(1, dtype=bool)])
        term = dfx.ODETerm(lambda t, y, args: self._field(t, y, *args))

        def segment(carry, xs):
            y, ys, result, steps = carry
            start, end, event, fire = xs
            sol = dfx.diffeqsolve(
                term, self.solver, start, end, self.dt0, y, args=(theta, 0.5 * (start + end)),
                saveat=dfx.SaveAt(ts=jnp.clip(ts, start, end), t1=True),
                stepsize_controller=self.controller, adjoint=self.adjoint, max_steps=self.max_steps, throw=False)
            ys = jnp.where((ts >= start)[:, None], sol.ys[:-1], ys)
            result = dfx.RESULTS.where(result == dfx.RESULTS.successful, sol.result, result)
            which = (jnp.arange(len(self._event_fns)) == event) & fire  # a switch (event >= n_events): none
            return (self._assign(end, sol.ys[-1], theta, conditions, which), ys, result,
                    steps + sol.stats["num_steps"]), None

        init = (y0, jnp.full((ts.shape[0], y0.shape[0]), jnp.nan), dfx.RESULTS.successful, jnp.asarray(0))
        (_, ys, result, steps), _ = jax.lax.scan(segment, init, (starts, ends, events, event_fires))
        return _solution(t0, t1, ts, ys, result, steps)

    def _assign(self, t, y, theta, conditions, which):
        """The state after the assignments of the events flagged in ``which`` ``(n_events,)``,
        all computed from ``y``, the state before them."""
        new = y
        for k, assign in enumerate(self._event_fns):
            changed = assign(t, y, theta, conditions, t)
            new = jnp.where(which[k] & (changed != y), changed, new)
        return new

    def _integrate_state_events(self, y0, theta, t0, t1, ts) -> dfx.Solution:
        """Events whose triggers ``h(t, x) > 0`` depend on the state: diffrax's event
        detection (root finding on the dense output) stops the solve where some ``h`` changes
        sign; the events whose trigger became true apply their assignments; the solve
        restarts there (a ``lax.while_loop``, at most `MAX_EVENT_RESTARTS` restarts, else the
        result is ``max_steps_reached``). At ``t0`` an event whose trigger is true fires if
        its ``initialValue`` is false. Forward-mode derivatives only (the loop has no reverse
        mode)."""
        conditions = self._conditions()
        t0, t1 = jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(t1, dtype=jnp.float64)
        term = dfx.ODETerm(self.vector_field)
        n_events = len(self._event_fns)

        def triggers(t, y):
            return jnp.asarray(self._event_triggers_fn(t, y, theta, conditions, t), dtype=jnp.float64)

        def cond_fn(k):
            return lambda t, y, args, **kwargs: triggers(t, y)[k]

        event = dfx.Event([cond_fn(k) for k in range(n_events)],
                          root_finder=optx.Newton(rtol=self.controller.rtol, atol=self.controller.atol))
        y0 = self._assign(t0, y0, theta, conditions, (triggers(t0, y0) > 0) & jnp.asarray(self._event_fires_at_t0))

        def body(carry):
            start, y, ys, result, steps, n, _ = carry
            sol = dfx.diffeqsolve(
                term, self.solver, start, t1, self.dt0, y, args=theta,
                saveat=dfx.SaveAt(subs=[dfx.SubSaveAt(ts=jnp.clip(ts, start, t1)), dfx.SubSaveAt(t1=True)]),
                stepsize_controller=self.controller, adjoint=self.adjoint, max_steps=self.max_steps, event=event,
                throw=False)
            (_, end), (saved, y_end) = (sol.ts[0], sol.ts[1][0]), (sol.ys[0], sol.ys[1][0])
            stopped = sol.result == dfx.RESULTS.event_occurred
            take = (ts >= start) & jnp.where(stopped, ts < end, ts <= end)
            ys = jnp.where(take[:, None], saved, ys)
            # the events whose h changed sign upwards (their trigger became true): h <= 0 at the start
            which = jnp.stack([jnp.asarray(m) for m in sol.event_mask]) & (triggers(start, y) <= 0)
            y_next = self._assign(end, y_end, theta, conditions, which & stopped)
            ok = (sol.result == dfx.RESULTS.successful) | stopped
            result = dfx.RESULTS.where(ok, result, sol.result)
            done = ~stopped | ~ok | (n + 1 >= MAX_EVENT_RESTARTS)
            result = dfx.RESULTS.where(stopped & (n + 1 >= MAX_EVENT_RESTARTS), dfx.RESULTS.max_steps_reached, result)
            return end, y_next, ys, result, steps + sol.stats["num_steps"], n + 1, done

        init = (t0, y0, jnp.full((ts.shape[0], y0.shape[0]), jnp.nan), dfx.RESULTS.successful, jnp.asarray(0),
                jnp.asarray(0), jnp.asarray(False))
        _, _, ys, result, steps, _, _ = jax.lax.while_loop(lambda c: ~c[-1], body, init)
        return _solution(t0, t1, ts, ys, result, steps)

    def with_conditions(self, values: Mapping[str, float]) -> SBMLModel:
        """A copy with other compartment sizes, initial values or constant parameters (see
        `condition_names`); the pytree structure stays the same, so compiled solves are reused.

        Raises:
            ValueError: an id that is not a condition of the model.
        """
        unknown = sorted(set(values) - set(self.condition_names))
        if unknown:
            raise ValueError(f"with_conditions(): {unknown} are not conditions of the model; known: "
                             f"{list(self.condition_names)}")
        conditions = dict(self.experiment.conditions)
        conditions.update({k: jnp.asarray(float(v)) for k, v in values.items()})
        return eqx.tree_at(lambda m: m.experiment.conditions, self, conditions)

    def conserved_moieties(self, y, theta) -> Float[Array, " n_conserved"]:
        """The quantities the reactions conserve, ``conservation @ amounts`` (an amount is a
        concentration times its compartment's size); constant along every trajectory, so a
        steady state depends on the initial state through them."""
        t0 = jnp.asarray(self.experiment.t0, dtype=jnp.float64)
        scale = self._rhs_fn(t0, y, theta, self._conditions(), t0)[1]  # 1 / compartment size or 1
        return self.conservation @ (y / scale)

    def reaction_rates(self, t, y, theta) -> Float[Array, " n_reactions"]:
        """The reaction rates (kinetic laws, substance / time) at one state."""
        return self._rhs_fn(t, y, theta, self._conditions(), t)[0]


class _Printer(JaxPrinter):
    """sympy's JAX printer, with piecewise as nested ``jnp.where`` of float64 values (sympy's
    ``jnp.select`` over Python integers would give integer arrays, which strict dtype promotion
    refuses)."""

    def _print_Piecewise(self, expr):
        code = "jax.numpy.nan"
        for value, condition in reversed(expr.args):
            if condition == sp.true:
                code = f"_f({self._print(value)})"
            else:
                code = f"jax.numpy.where({self._print(condition)}, _f({self._print(value)}), {code})"
        return code

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"


def _f(value):
    return jnp.asarray(value, dtype=jnp.float64)


def _unsupported(feature: str, element: str) -> ValueError:
    return ValueError(f"model_from_sbml: unsupported SBML feature: {feature} ({element}); jcalib.sbml does not "
                      "simulate it, and would rather refuse the model than simulate something else")


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
    errors = [document.getError(i) for i in range(document.getNumErrors())]
    fatal = [e for e in errors if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR]
    if fatal:
        raise ValueError("model_from_sbml: the SBML could not be read: "
                         + "; ".join(f"line {e.getLine()}: {e.getMessage().strip()}" for e in fatal[:3]))
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
    return document


class _Converter:
    """MathML -> sympy with SBML ids renamed to ``S_<id>`` and function definitions expanded."""

    def __init__(self, model: libsbml.Model):
        self.functions: dict[str, sp.Lambda] = {}
        for fd in model.getListOfFunctionDefinitions():
            if fd.getMath() is None:
                raise _unsupported("a function definition without math", f"functionDefinition '{fd.getId()}'")
            lam = sbmlmath.sbml_math_to_sympy(fd, ignore_units=True, floats_as_rationals=False)
            if not isinstance(lam, sp.Lambda):
                raise _unsupported("a function definition that is not a lambda",
                                   f"functionDefinition '{fd.getId()}'")
            self.functions[fd.getId()] = sp.Lambda(lam.variables, self._expand(lam.expr, f"functionDefinition "
                                                                                          f"'{fd.getId()}'"))

    def _expand(self, expr, where: str):
        for node in sp.preorder_traversal(expr):
            if isinstance(node, sbmlmath.CSymbol) and not isinstance(node, sbmlmath.TimeSymbol) \
                    and "avogadro" not in str(node.definition_url):
                raise _unsupported(f"the csymbol {node.definition_url}", where)
            if isinstance(node, AppliedUndef):
                name = node.func.__name__
                if isinstance(node.func, sbmlmath.Delay):
                    raise _unsupported("delay()", where)
                if isinstance(node.func, sbmlmath.RateOf):
                    raise _unsupported("rateOf()", where)
                if isinstance(node.func, sbmlmath.CFunction) or name not in self.functions:
                    raise _unsupported(f"the function '{name}'", where)

        def replace(e):
            return self.functions[e.func.__name__](*e.args)

        return expr.replace(lambda e: isinstance(e, AppliedUndef), replace)

    def __call__(self, element, where: str, renames: Mapping[str, str] | None = None) -> sp.Expr:
        if element.getMath() is None:
            raise ValueError(f"model_from_sbml: {where} has no math")
        expr = self._expand(sbmlmath.sbml_math_to_sympy(element, ignore_units=True, floats_as_rationals=False),
                            where)
        renames = renames or {}
        mapping = {}
        for symbol in expr.free_symbols:
            if isinstance(symbol, sbmlmath.TimeSymbol):
                mapping[symbol] = _TIME
            elif isinstance(symbol, sbmlmath.CSymbol):  # avogadro
                mapping[symbol] = sp.Float(float(symbol))
            else:
                mapping[symbol] = sp.Symbol("S_" + renames.get(symbol.name, symbol.name))
        return expr.xreplace(mapping)


def _symbol(sbml_id: str) -> sp.Symbol:
    return sp.Symbol("S_" + sbml_id)


def _condition(sbml_id: str) -> sp.Symbol:
    return sp.Symbol("C_" + sbml_id)


def _default_bounds(nominal: float, factor: float) -> tuple[float, float, bool]:
    if nominal > 0:
        return nominal / factor, nominal * factor, True
    if nominal < 0:
        return nominal * factor, nominal / factor, False
    return 0.0, 1.0, False


def _ordered(definitions: Mapping[sp.Symbol, sp.Expr], needed, where: str) -> list[sp.Symbol]:
    """The defined symbols that ``needed`` depends on, in evaluation order."""
    graph, stack, seen = {}, list(needed), set()
    while stack:
        symbol = stack.pop()
        if symbol in seen or symbol not in definitions:
            continue
        seen.add(symbol)
        deps = {s for s in definitions[symbol].free_symbols if s in definitions}
        graph[symbol] = deps
        stack.extend(deps)
    try:
        return list(graph_order for graph_order in graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        names = ", ".join(str(s)[2:] for s in error.args[1])
        raise ValueError(f"model_from_sbml: the rules and initial assignments of {where} form a cycle: "
                         f"{names}") from None


_MAX_FACTORS = 8
"""Monomials with more factors (a high total order) stay scalar expressions."""


def _monomials(expr: sp.Expr) -> list[tuple[float, list[sp.Symbol]]] | None:
    """``expr`` as ``[(coefficient, factors)]`` (a sum of numeric coefficients times products of
    symbols with positive integer powers, e.g. mass action ``V (kf A B - kr C)``), or None."""
    symbols = expr.free_symbols
    if _TIME in symbols or not expr.is_polynomial(*symbols):
        return None
    terms = []
    for term in sp.Add.make_args(sp.expand(expr)):
        coefficient, factors = term.as_coeff_mul()
        if not coefficient.is_Number:
            return None
        flat = []
        for factor in factors:
            base, exponent = factor.as_base_exp()
            if not (isinstance(base, sp.Symbol) and exponent.is_Integer and 0 < exponent):
                return None
            flat += [base] * int(exponent)
        if len(flat) > _MAX_FACTORS:
            return None
        if coefficient != 0:
            terms.append((float(coefficient), flat))
    return terms


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
        for piecewise in expr.atoms(sp.Piecewise):
            for _, condition in piecewise.args:
                for relation in condition.atoms(Relational) if isinstance(condition, sp.Basic) else ():
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


def _code_lines(printer, definitions, order) -> list[str]:
    return [f"    {symbol} = {printer.doprint(definitions[symbol])}" for symbol in order]


STIFF_METHODS = ("rodas5p", "kvaerno5")
"""The stiff solvers `stiff_solver` offers: jcalib's Rosenbrock method `jcalib.rosenbrock.Rodas5P`
(the default) and diffrax's implicit ``Kvaerno5``."""


def stiff_solver(rtol: float = 1e-8, atol: float = 1e-10, *, method: str = "rodas5p", newton: bool = False,
                 stage_tolerances: tuple[float, float] | None = None) -> dfx.AbstractSolver:
    """The default solver of SBML models.

    Args:
        rtol, atol: the step controller's tolerances (``kvaerno5`` with ``newton=True`` solves its
            stages to a tenth of them).
        method: ``"rodas5p"`` (default): the Rosenbrock method `jcalib.rosenbrock.Rodas5P`, one
            Jacobian and LU factorisation per step and no stage iterations; ``"kvaerno5"``: diffrax's
            implicit Kvaerno5 with chord stage solves.
        newton: (``kvaerno5`` only) full-Newton stage solves (optimistix.Newton).
        stage_tolerances: (``kvaerno5`` only) the chord method's own stopping tolerances ``(rtol,
            atol)`` instead of the controller's: on Lang_PLOSComputBiol2024 the controller's
            1e-8/1e-10 make the chord iterations fail and reject step after step (100,000 steps do
            not reach t = 1,000), (1e-3, 1e-6) reach it in 785.

    Raises:
        ValueError: an unknown ``method``; ``newton`` or ``stage_tolerances`` with ``rodas5p``; both
            together; stage tolerances that are not two positive numbers.
    """
    if method not in STIFF_METHODS:
        raise ValueError(f"stiff_solver: method must be one of {STIFF_METHODS}; got {method!r}")
    if method == "rodas5p":
        if newton or stage_tolerances is not None:
            raise ValueError("stiff_solver: newton and stage_tolerances set Kvaerno5's stage solves; a Rosenbrock "
                             "method has none (pass method='kvaerno5' to use them)")
        return Rodas5P()
    if newton and stage_tolerances is not None:
        raise ValueError("stiff_solver: give newton=True or stage_tolerances, not both")
    if newton:
        return dfx.Kvaerno5(root_finder=optx.Newton(rtol=rtol / 10, atol=atol / 10))
    if stage_tolerances is not None:
        stage_rtol, stage_atol = (float(v) for v in stage_tolerances)
        if not (stage_rtol > 0 and stage_atol > 0):
            raise ValueError(f"stiff_solver: stage_tolerances must be two positive numbers; got {stage_tolerances}")
        return dfx.Kvaerno5(root_finder=dfx.VeryChord(rtol=stage_rtol, atol=stage_atol))
    return dfx.Kvaerno5()


def model_from_sbml(
    source: str | os.PathLike,
    *,
    outputs: Sequence[str] | None = None,
    ts: Sequence[float] | None = None,
    t0: float = 0.0,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    constant_parameters: Sequence[str] = (),
    bound_factor: float = DEFAULT_BOUND_FACTOR,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 100_000,
) -> SBMLModel:
    """Build a jcalib model from an SBML model (levels 2 and 3, core).

    Args:
        source: path of an SBML file, or the SBML document itself as a string.
        outputs: SBML ids to observe (species, parameters, compartments, assignment-rule
            variables); default: the states (the dynamic species, then the other rate-rule
            variables), in SBML order.
        ts: observation times (default ``t0 + [0, 1, ..., 10]``; `AbstractModel.with_times`
            changes them later).
        t0: start time.
        bounds: ``{parameter id: (lower, upper)}``, overriding the default bounds (module
            docstring, `DEFAULT_BOUND_FACTOR`). A positive lower bound makes the parameter
            log-scale.
        constant_parameters: ids of global parameters that are experiment conditions instead of
            calibrated parameters.
        bound_factor: the factor of the default bounds.
        solver: diffrax solver (default `stiff_solver`: `jcalib.rosenbrock.Rodas5P`).
        rtol, atol: tolerances of the PID step-size controller.
        max_steps: the solver's step budget.

    Returns:
        An `SBMLModel`; its ``parameters`` are the calibrated SBML parameters at their SBML
        values, ``experiment.conditions`` the compartment sizes and initial values.

    Raises:
        ValueError: unreadable SBML; an unsupported feature (the message names it and the SBML
            element, see the module docstring); unknown ids in ``outputs``, ``bounds`` or
            ``constant_parameters``; a symbol without a value.

    Example:
        >>> model = model_from_sbml("tests/data/decay.xml")  # doctest: +SKIP
        >>> model.simulate(model.parameters.nominal)  # doctest: +SKIP

    Long for its documented options; the body is 54 lines.
    """
    document = _read_document(source)
    model = document.getModel()
    convert = _Converter(model)
    events = _events(model, convert)
    entities = _entities(model, events, tuple(constant_parameters))
    symbols = _Symbols()
    _compartment_symbols(entities, convert, symbols)
    _parameter_symbols(entities, convert, symbols, tuple(constant_parameters))
    local_renames = _local_parameters(model, entities, symbols)
    _species_symbols(entities, convert, symbols)
    states = symbols.states
    species = entities.species
    # species states first (SBML order), then the other rate-rule variables
    states.sort(key=lambda s: (s not in species, list(species).index(s) if s in species else 0))
    reaction_ids, rate_exprs, stoichiometry = _reactions(model, entities, convert, local_renames, states)
    scale_exprs = [sp.Float(1.0) if s in entities.rules or species.get(s) is None
                   or species[s].getHasOnlySubstanceUnits() else 1 / _symbol(species[s].getCompartment())
                   for s in states]
    rate_rule_exprs = [sp.Float(0.0) if entities.rules.get(s) is None
                       else convert(entities.rules[s], f"rateRule of '{s}'") for s in states]
    outputs = _output_ids(outputs, entities, states)
    space = _sbml_space(symbols.theta, bounds, bound_factor)
    code = _generate(model.getId(), entities, symbols, events, rate_exprs, rate_rule_exprs, scale_exprs, outputs)
    t_obs = np.asarray(ts, dtype=np.float64) if ts is not None else t0 + np.arange(11.0)
    t1 = float(t_obs.max()) if t_obs.max() > t0 else t0 + 1.0
    experiment = Experiment(t_obs, t0=t0, t1=t1, conditions=symbols.conditions, name=model.getId() or "sbml")
    namespace, events = code["namespace"], code["events"]
    return SBMLModel(
        parameters=space,
        output_names=outputs,
        state_names=tuple(states),
        experiment=experiment,
        solver=stiff_solver(rtol, atol) if solver is None else solver,
        controller=dfx.PIDController(rtol=rtol, atol=atol),
        adjoint=dfx.RecursiveCheckpointAdjoint(),
        dt0=None,
        max_steps=max_steps,
        stoichiometry=jnp.asarray(stoichiometry),
        conservation=jnp.asarray(_conservation_laws(stoichiometry, [e.is_zero is True for e in rate_rule_exprs])),
        condition_names=tuple(symbols.conditions),
        reaction_ids=tuple(reaction_ids),
        source=code["source"],
        _rhs_fn=namespace["rhs"],
        _init_fn=namespace["init"],
        _observe_fn=namespace["observe"],
        event_ids=tuple(e.id for e in events),
        _event_triggers_fn=namespace["event_triggers"],
        _state_events=code["state_events"],
        _event_fns=tuple(namespace[f"event_{k}"] for k in range(len(events))),
        _event_fires_at_t0=tuple(not e.initial_value for e in events),
        switch_conditions=tuple(sorted({re.sub(r"\bt\b", "time", re.sub(r"\b[SC]_", "", str(r)))
                                        for r in code["switches"]})),
        _switch_times_fn=namespace["switch_times"] if code["switch_times"] else None,
    )


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
    """The model's entities, after refusing what jcalib.sbml does not support (algebraic rules,
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
            for symbol in expr.free_symbols - known:
                raise ValueError(f"model_from_sbml: the {where} uses '{str(symbol)[2:]}', which is not a species, "
                                 "compartment, parameter or rule variable of the model")


class _Codegen:
    """Python source of the model's functions ``f(t, x, p, c, t_switch)``: states ``x``,
    calibrated parameters ``p`` and conditions ``c`` unpacked into their symbols, then the
    definitions an expression needs, in dependency order."""

    def __init__(self, symbols: _Symbols):
        self.printer = _Printer()
        self.definitions = symbols.definitions
        self.slots = {**{_symbol(s): f"x[{i}]" for i, s in enumerate(symbols.states)},
                      **{_symbol(n): f"p[{i}]" for i, (n, _) in enumerate(symbols.theta)},
                      **{_condition(n): f"c[{i}]" for i, n in enumerate(symbols.conditions)}}
        self.state_symbols = {_symbol(s) for s in symbols.states}

    def stack(self, exprs) -> str:
        if not exprs:
            return "jax.numpy.zeros((0,))"
        return "jax.numpy.stack([" + ", ".join(f"_f({self.printer.doprint(e)})" for e in exprs) + "])"

    def body(self, exprs, defs=None) -> list[str]:
        """Unpacking of the arguments and the definitions ``exprs`` need, in order."""
        defs = self.definitions if defs is None else defs
        order = _ordered(defs, set().union(*(e.free_symbols for e in exprs)) if exprs else set(), "the model")
        used = set().union(set(), *(e.free_symbols for e in exprs), *(defs[d].free_symbols for d in order))
        unpacked = [f"    {symbol} = {slot}" for symbol, slot in self.slots.items()
                    if symbol in used and symbol not in defs]
        return unpacked + _code_lines(self.printer, defs, order)

    def function(self, name: str, exprs, result: str | None = None, defs=None,
                 arguments: str = "t, x, p, c, t_switch") -> list[str]:
        """``def name(arguments)`` returning the stacked ``exprs`` (or ``result``)."""
        return [f"def {name}({arguments}):", *self.body(exprs, defs),
                f"    return {self.stack(exprs) if result is None else result}", ""]

    def depends_on_state(self, expr) -> bool:
        needed = expr.free_symbols.union(
            *(self.definitions[d].free_symbols for d in _ordered(self.definitions, expr.free_symbols, "the model")))
        return bool(needed & (self.state_symbols | {_TIME}))


def _generate(model_id: str, entities: _Entities, symbols: _Symbols, events: list[_Event], rate_exprs,
              rate_rule_exprs, scale_exprs, outputs: tuple[str, ...]) -> dict:
    """The model's functions, compiled from generated source: ``source``, ``namespace``
    (``rhs``, ``init``, ``observe``, ``event_triggers``, ``switch_times``, ``event_<k>``),
    the ``events`` (time events whose time depends on the state turned into state events),
    ``state_events`` (whether they are), and the time ``switches`` and ``switch_times``."""
    _check_symbols(symbols, rate_exprs, rate_rule_exprs, events)
    code = _Codegen(symbols)
    for symbol, expr in symbols.definitions.items():
        if str(symbol)[2:] not in entities.rules and expr.free_symbols & (code.state_symbols | {_TIME}):
            raise _unsupported("an initial assignment of a constant that depends on a variable (species or time)",
                               f"initialAssignment of '{str(symbol)[2:]}'")
    # a time event whose T depends on the state is a state event with h = t - T
    events = [e._replace(trigger=_TIME - e.trigger, is_time_event=False)
              if e.is_time_event and code.depends_on_state(e.trigger) else e for e in events]
    state_events = [e for e in events if not e.is_time_event]
    if state_events and len(state_events) < len(events):
        raise _unsupported("time events and state-dependent events in one model", f"event '{state_events[0].id}'")
    # piecewise switches in time at thresholds constant in time: the solver restarts there
    switches, switch_times = _time_switches(
        [*symbols.definitions.values(), *symbols.init_definitions.values(), *rate_exprs, *rate_rule_exprs],
        lambda expr: not code.depends_on_state(expr))
    if switch_times and state_events:
        raise _unsupported("piecewise switches in time and state-dependent events in one model",
                           f"event '{state_events[0].id}'")
    symbols.definitions = code.definitions = {k: v.xreplace(switches) for k, v in symbols.definitions.items()}
    init_definitions = {k: v.xreplace(switches) for k, v in symbols.init_definitions.items()}
    rate_exprs = [e.xreplace(switches) for e in rate_exprs]
    rate_rule_exprs = [e.xreplace(switches) for e in rate_rule_exprs]

    rule_states = [i for i, s in enumerate(symbols.states) if s in entities.rules]
    lines, constants = _vector_field(code, symbols, rate_exprs, [rate_rule_exprs[i] for i in rule_states],
                                     rule_states, scale_exprs)
    state_list = [_symbol(s) for s in symbols.states]
    lines += code.function("init", state_list, defs={**code.definitions, **init_definitions},
                           arguments="t, p, c, t_switch")
    lines += code.function("observe", [_symbol(o) for o in outputs])
    lines += code.function("event_triggers", [e.trigger for e in events])
    lines += code.function("switch_times", switch_times)
    state_index = {s: i for i, s in enumerate(symbols.states)}
    for k, event in enumerate(events):
        constants[f"_EVENT{k}"] = np.array([state_index[v] for v, _ in event.assignments], dtype=np.int32)
        values = [v for _, v in event.assignments]
        lines += code.function(f"event_{k}", values, result=f"x.at[_EVENT{k}].set({code.stack(values)})")
    source = "\n".join(lines)
    namespace = {"jax": jax, "_f": _f, "math": math, **constants}
    exec(compile(source, f"<sbml model {model_id!r}>", "exec"), namespace)  # generated code
    return {"source": source, "namespace": namespace, "events": events, "state_events": bool(state_events),
            "switches": switches, "switch_times": switch_times}


def _vector_field(code: _Codegen, symbols: _Symbols, rate_exprs, rules, rule_states, scale_exprs):
    """The source of ``rhs(t, x, p, c, t_switch) -> (rates, 1 / compartment size per state,
    rate-rule values)`` and its constant arrays. Array operations: polynomial kinetic laws
    (mass action) become monomials ``coef * prod(v[idx])`` over one vector ``v`` of all
    values, summed per reaction by ``segment_sum``; the other kinetic laws are scalar
    expressions."""
    v_layout = ([_symbol(s) for s in symbols.states] + [_symbol(n) for n, _ in symbols.theta]
                + [_condition(n) for n in symbols.conditions])
    v_index = {symbol: i for i, symbol in enumerate(v_layout)}
    derived_in_v: list[sp.Symbol] = []

    def index_of(symbol):
        while symbol in code.definitions and isinstance(code.definitions[symbol], sp.Symbol):  # aliases (sizes)
            symbol = code.definitions[symbol]
        if symbol not in v_index:
            derived_in_v.append(symbol)
            v_index[symbol] = -1 - len(derived_in_v)  # placed after x, p, c; fixed below
        return symbol

    poly_reactions, poly_terms, scalar_reactions = [], [], []
    for j, expr in enumerate(rate_exprs):
        terms = _monomials(expr)
        if terms is None:
            scalar_reactions.append(j)
        else:
            poly_terms += [(len(poly_reactions), coef, [index_of(f) for f in factors]) for coef, factors in terms]
            poly_reactions.append(j)
    scale_symbols = [None if e.is_number else index_of(1 / e) for e in scale_exprs]  # 1 or 1 / size
    n_base = len(v_layout)
    for k, symbol in enumerate(derived_in_v):
        v_index[symbol] = n_base + k
    one = n_base + len(derived_in_v)
    width = max([len(f) for _, _, f in poly_terms], default=1)
    term_index = np.full((len(poly_terms), width), one, dtype=np.int32)
    for m, (_, _, factors) in enumerate(poly_terms):
        term_index[m, :len(factors)] = [v_index[f] for f in factors]
    constants = {
        "_COEF": np.array([coef for _, coef, _ in poly_terms], dtype=np.float64),
        "_IDX": term_index,
        "_TERM": np.array([r for r, _, _ in poly_terms], dtype=np.int32),
        "_ORDER": np.argsort(np.array(poly_reactions + scalar_reactions, dtype=np.int32)).astype(np.int32),
        "_SCALE": np.array([one if s is None else v_index[s] for s in scale_symbols], dtype=np.int32),
        "_RULES": np.array(rule_states, dtype=np.int32),
        "_ONE": np.ones(1),
    }
    scalar_rates = [rate_exprs[j] for j in scalar_reactions]
    lines = [
        "def rhs(t, x, p, c, t_switch):",
        *code.body(scalar_rates + rules + derived_in_v),
        f"    v = jax.numpy.concatenate([x, p, c, {code.stack(derived_in_v)}, _ONE])",
        "    terms = _COEF * jax.numpy.prod(v[_IDX], axis=1)",
        f"    rates = jax.ops.segment_sum(terms, _TERM, num_segments={len(poly_reactions)})",
        f"    rates = jax.numpy.concatenate([rates, {code.stack(scalar_rates)}])[_ORDER]",
        f"    rate_rules = jax.numpy.zeros({len(symbols.states)}).at[_RULES].set({code.stack(rules)})",
        "    return rates, 1.0 / v[_SCALE], rate_rules",
        "",
    ]
    return lines, constants
