"""The model's JAX functions, printed from its sympy expressions by sympy's JAX printer (each common
subexpression once, `sympy.cse`): the vector field as array operations, its Jacobian (`_Jacobian`), the
initial state, the outputs and the events."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import sympy as sp
from sympy.printing.numpy import JaxPrinter

from jcalib.io.sbml.events import _Event, _time_switches
from jcalib.io.sbml.mathml import _TIME, _condition, _ordered, _symbol, _unsupported
from jcalib.io.sbml.reading import _check_symbols, _Entities, _Symbols


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


def _shared_lines(printer, shared, values, order) -> list[str]:
    """``symbol = value`` for each definition in ``order``, each common subexpression of
    ``shared`` (sympy.cse's, in its order) placed before the first line that reads it."""
    pending = dict(shared)
    lines = []

    def assign(symbol, value):
        emit(value)
        lines.append(f"    {symbol} = {printer.doprint(value)}")

    def emit(expr):  # the pending subexpressions ``expr`` reads, each after those it reads
        for symbol in sorted(expr.free_symbols & pending.keys(), key=str):
            if symbol in pending:  # not emitted by an earlier one's recursion
                assign(symbol, pending.pop(symbol))

    for symbol, value in zip(order, values, strict=True):
        assign(symbol, value)
    for symbol in list(pending):  # those only the returned expressions read
        emit(symbol)
    return lines


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

    def body(self, exprs, defs=None) -> tuple[list[str], list[sp.Expr]]:
        """Unpacking of the arguments and the definitions ``exprs`` need, in order, with their
        common subexpressions computed once (``sympy.cse``: repeated terms such as the square
        roots of an analytic steady state would otherwise be traced, differentiated and compiled
        once per occurrence); returns the lines and ``exprs`` in terms of them."""
        defs = self.definitions if defs is None else defs
        order = _ordered(defs, set().union(*(e.free_symbols for e in exprs)) if exprs else set(), "the model")
        used = set().union(set(), *(e.free_symbols for e in exprs), *(defs[d].free_symbols for d in order))
        unpacked = [f"    {symbol} = {slot}" for symbol, slot in self.slots.items()
                    if symbol in used and symbol not in defs]
        taken = used | set(order)
        names = (s for s in sp.numbered_symbols("_cse") if s not in taken)
        shared, reduced = sp.cse([defs[d] for d in order] + list(exprs), symbols=names, order="none")
        lines = _shared_lines(self.printer, shared, reduced[:len(order)], order)
        return unpacked + lines, reduced[len(order):]

    def function(self, name: str, exprs, result: str = "{}", defs=None,
                 arguments: str = "t, x, p, c, t_switch") -> list[str]:
        """``def name(arguments)`` returning ``result`` with the stacked ``exprs`` in its ``{}``."""
        lines, reduced = self.body(exprs, defs)
        return [f"def {name}({arguments}):", *lines, f"    return {result.format(self.stack(reduced))}", ""]

    def depends_on_state(self, expr) -> bool:
        """Whether ``expr`` varies with the state or time (through the definitions too)."""
        return self.depends_on(expr, self.state_symbols | {_TIME})

    def depends_on(self, expr, symbols) -> bool:
        """Whether ``expr`` (through the definitions too) reads any of ``symbols``."""
        needed = expr.free_symbols.union(
            *(self.definitions[d].free_symbols for d in _ordered(self.definitions, expr.free_symbols, "the model")))
        return bool(needed & set(symbols))


def _generate(model_id: str, entities: _Entities, symbols: _Symbols, events: list[_Event], rate_exprs,
              rate_rule_exprs, scale_exprs, outputs: tuple[str, ...], stoichiometry: np.ndarray) -> dict:
    """The model's functions, compiled from generated source: ``source``, ``namespace``
    (``rhs``, ``init``, ``observe``, ``event_triggers``, ``switch_times``, ``event_<k>``),
    the ``events`` (time events whose time depends on the state turned into state events),
    ``state_events`` (whether they are), the time ``switches`` and ``switch_times``, and the
    ``jacobian`` of the vector field (`_Jacobian`; None where a compartment size depends on the
    state)."""
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
    lines, constants, layout = _vector_field(code, symbols, rate_exprs, [rate_rule_exprs[i] for i in rule_states],
                                             rule_states, scale_exprs)
    state_scale = any(code.depends_on(e, code.state_symbols) for e in scale_exprs)
    if not state_scale:
        jacobian_lines, jacobian_constants = _jacobian_source(code, layout, stoichiometry)
        lines += jacobian_lines
        constants.update(jacobian_constants)
    state_list = [_symbol(s) for s in symbols.states]
    lines += code.function("init", state_list, defs={**code.definitions, **init_definitions},
                           arguments="t, p, c, t_switch")
    lines += code.function("observe", [_symbol(o) for o in outputs])
    for k, output in enumerate(outputs):  # each output alone (`jcalib.model.AbstractModel.observe_used`)
        lines += code.function(f"observe_{k}", [_symbol(output)])
    lines += code.function("event_triggers", [e.trigger for e in events])
    lines += code.function("switch_times", switch_times)
    state_index = {s: i for i, s in enumerate(symbols.states)}
    for k, event in enumerate(events):
        constants[f"_EVENT{k}"] = np.array([state_index[v] for v, _ in event.assignments], dtype=np.int32)
        values = [v for _, v in event.assignments]
        lines += code.function(f"event_{k}", values, result=f"x.at[_EVENT{k}].set({{}})")
    source = "\n".join(lines)
    namespace = {"jax": jax, "_f": _f, "math": math, **constants}
    exec(compile(source, f"<sbml model {model_id!r}>", "exec"), namespace)  # generated code
    jacobian = None if state_scale else _Jacobian(namespace, len(symbols.states))
    return {"source": source, "namespace": namespace, "events": events, "state_events": bool(state_events),
            "switches": switches, "switch_times": switch_times, "jacobian": jacobian}


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
    layout = {"poly_terms": poly_terms, "poly_reactions": poly_reactions, "scalar_reactions": scalar_reactions,
              "scalar_rates": scalar_rates, "rules": rules, "rule_states": rule_states, "derived": derived_in_v,
              "v_index": v_index, "term_index": term_index}
    body, reduced = code.body(scalar_rates + rules + derived_in_v)
    n_scalar, n_rules = len(scalar_rates), len(rules)
    lines = [
        "def rhs(t, x, p, c, t_switch):",
        *body,
        f"    v = jax.numpy.concatenate([x, p, c, {code.stack(reduced[n_scalar + n_rules:])}, _ONE])",
        "    terms = _COEF * jax.numpy.prod(v[_IDX], axis=1)",
        f"    rates = jax.ops.segment_sum(terms, _TERM, num_segments={len(poly_reactions)})",
        f"    rates = jax.numpy.concatenate([rates, {code.stack(reduced[:n_scalar])}])[_ORDER]",
        f"    rate_rules = jax.numpy.zeros({len(symbols.states)}).at[_RULES].set("
        f"{code.stack(reduced[n_scalar:n_scalar + n_rules])})",
        "    return rates, 1.0 / v[_SCALE], rate_rules",
        "",
    ]
    return lines, constants, layout


def _jacobian_source(code: _Codegen, layout: dict, stoichiometry: np.ndarray) -> tuple[list[str], dict]:
    """The source of ``values`` (the vector ``v`` of `_vector_field`) and ``rest`` (what depends on
    the state besides the monomials' factors: derived values, the scalar rates, the rate rules;
    ``None`` where nothing does) and the constants of `_Jacobian`: each monomial factor that is a
    state or a state-dependent derived value, times each stoichiometric coefficient of its
    reaction, as one sorted ``segment_sum`` into ``(n_states, n_states + n_derived)``."""
    n = stoichiometry.shape[0]
    derived = [d for d in layout["derived"] if code.depends_on(d, code.state_symbols)]
    column = {i: i for i in range(n)} | {layout["v_index"][d]: n + k for k, d in enumerate(derived)}
    width = layout["term_index"].shape[1]
    position, value, out = [], [], []
    for m, (poly_reaction, _, _) in enumerate(layout["poly_terms"]):
        reaction = layout["poly_reactions"][poly_reaction]
        for i, index in enumerate(layout["term_index"][m]):
            if int(index) in column:
                for s in np.flatnonzero(stoichiometry[:, reaction]):
                    position.append(m * width + i)
                    value.append(stoichiometry[s, reaction])
                    out.append(s * (n + len(derived)) + column[int(index)])
    order = np.argsort(np.asarray(out, dtype=np.int64), kind="stable")
    rest = derived + layout["scalar_rates"] + layout["rules"]
    constants = {"_JPOS": np.asarray(position, dtype=np.int32)[order],
                 "_JVAL": np.asarray(value, dtype=np.float64)[order], "_JOUT": np.asarray(out, dtype=np.int32)[order],
                 "_JDERIVED": np.asarray(len(derived)),
                 "_JSCALAR": np.asarray(stoichiometry[:, layout["scalar_reactions"]], dtype=np.float64)}
    lines = code.function("values", layout["derived"], result="jax.numpy.concatenate([x, p, c, {}, _ONE])")
    if rest:
        lines += code.function("rest", rest)
    return lines, constants


class _Jacobian:
    """``d rhs / dx`` of the generated vector field ``(S @ rates) * scale + rate_rules``: the
    monomials' derivatives in closed form (the product of the other factors, from prefix and
    suffix products) scattered through the stoichiometry, plus ``jax.jacfwd`` of ``rest`` (the
    derived values, scalar rates and rate rules, where there are any), chained."""

    def __init__(self, namespace: dict, n_states: int):
        self.namespace, self.n = namespace, n_states

    def __call__(self, t, x, p, c, t_switch):
        ns, n = self.namespace, self.n
        v = ns["values"](t, x, p, c, t_switch)
        factors = v[ns["_IDX"]]
        ones = jnp.ones_like(factors[:, :1])
        before = jnp.cumprod(jnp.concatenate([ones, factors[:, :-1]], axis=1), axis=1)
        after = jnp.cumprod(jnp.concatenate([ones, factors[:, :0:-1]], axis=1), axis=1)[:, ::-1]
        partial = (ns["_COEF"][:, None] * before * after).reshape(-1)
        n_derived = int(ns["_JDERIVED"])
        columns = n + n_derived
        entries = jax.ops.segment_sum(ns["_JVAL"] * partial[ns["_JPOS"]], ns["_JOUT"], num_segments=n * columns,
                                      indices_are_sorted=True).reshape(n, columns)
        jac = entries[:, :n]
        rest = ns.get("rest")
        if rest is not None:
            r = jax.jacfwd(lambda y: rest(t, y, p, c, t_switch))(x)
            n_scalar = ns["_JSCALAR"].shape[1]
            jac = jac + entries[:, n:] @ r[:n_derived] + ns["_JSCALAR"] @ r[n_derived:n_derived + n_scalar]
        jac = jac * (1.0 / v[ns["_SCALE"]])[:, None]
        if rest is not None and ns["_RULES"].size:
            jac = jac.at[ns["_RULES"]].add(r[n_derived + n_scalar:])
        return jac
