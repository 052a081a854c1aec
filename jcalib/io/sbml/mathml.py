"""SBML MathML as sympy: ids renamed to ``S_<id>`` (values) and ``C_<id>`` (experiment conditions), function
definitions expanded, and definitions put in evaluation order."""

from __future__ import annotations

import graphlib
from collections.abc import Mapping

import libsbml
import sbmlmath
import sympy as sp
from sympy.core.function import AppliedUndef

_TIME = sp.Symbol("t")


_SWITCH = sp.Symbol("t_switch")
"""The time at which piecewise switches in time are evaluated (`_time_switches`): the middle of
the solver's current segment while integrating, the time itself everywhere else."""


def _unsupported(feature: str, element: str) -> ValueError:
    return ValueError(f"model_from_sbml: unsupported SBML feature: {feature} ({element}); jcalib.io.sbml does not "
                      "simulate it, and would rather refuse the model than simulate something else")


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


def _ordered(definitions: Mapping[sp.Symbol, sp.Expr], needed, where: str) -> list[sp.Symbol]:
    """The defined symbols that ``needed`` depends on, in evaluation order; the same order in
    every process (symbols sorted by name, not in the hash order of sets, so that the generated
    code and JAX's persistent-cache keys do not change with ``PYTHONHASHSEED``)."""
    graph, stack, seen = {}, sorted(needed, key=str), set()
    while stack:
        symbol = stack.pop()
        if symbol in seen or symbol not in definitions:
            continue
        seen.add(symbol)
        deps = sorted((s for s in definitions[symbol].free_symbols if s in definitions), key=str)
        graph[symbol] = deps
        stack.extend(deps)
    try:
        return list(graph_order for graph_order in graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        names = ", ".join(str(s)[2:] for s in error.args[1])
        raise ValueError(f"model_from_sbml: the rules and initial assignments of {where} form a cycle: "
                         f"{names}") from None
