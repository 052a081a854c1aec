"""The public signatures follow the README's conventions table (issue 18 §4).

Every public function, class and public method defined in a public jcalib module is inspected
(`inspect.signature`); a violation names the callable and the rule. The rules:

- randomness: a parameter named ``key`` is the first parameter (after ``self``); no integer seeds
  (no parameter named ``seed`` or ending in ``_seed``);
- one name per concept: start point ``theta0`` (not ``thetas0``, ``theta0_internal``, ``x0`` for
  parameters), coordinate system ``coordinates=`` (not ``internal=``, ``coordinate=``), step budget
  ``max_steps`` / ``n_steps`` (not ``max_iterations``, ``max_iter``, ``maxiter``, ``max_nfev``,
  ``max_generations``, ``n_generations``, ``n_iterations``);
- one type per argument: no parameter named ``<a>_or_<b>`` (a union of two kinds of input);
- a problem's start ``theta0`` comes with ``coordinates=`` (one parser, `jcalib.starts`);
- no clashing names: a public class or function name exported by two jcalib modules is one object.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil

import pytest

import jcalib

FORBIDDEN = {
    "seed": "randomness enters as a `key`, never an integer seed",
    "thetas0": "the start point is `theta0`",
    "theta0_internal": "the start point is `theta0` (with coordinates='internal')",
    "internal": "the coordinate system is `coordinates='physical'|'internal'`",
    "coordinate": "the coordinate system is `coordinates=`",
    "max_iterations": "a step budget is `max_steps`",
    "max_iter": "a step budget is `max_steps`",
    "maxiter": "a step budget is `max_steps`",
    "max_nfev": "a step budget is `max_steps`",
    "max_generations": "a step budget is `max_steps`",
    "n_generations": "a step budget is `max_steps`",
    "n_iterations": "a step budget is `max_steps` (or `n_steps` for an exact count)",
}

# Modules whose signatures are not jcalib's API: the CLI's (typer options are the command line's
# flags, checked in tests/cli/) and the built-in model factories' physical constants.
SKIP_MODULES = ("jcalib.cli",)


def _public_modules():
    for info in pkgutil.walk_packages(jcalib.__path__, "jcalib."):
        if any(part.startswith("_") for part in info.name.split(".")) or info.name.startswith(SKIP_MODULES):
            continue
        yield importlib.import_module(info.name)


def _callables():
    """``(qualified name, callable)`` of every public callable defined in jcalib."""
    seen = set()
    for module in _public_modules():
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isfunction(obj):
                yield f"{module.__name__}.{name}", obj
            elif inspect.isclass(obj):
                yield f"{module.__name__}.{name}", obj
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not inspect.isfunction(getattr(member, "__func__", member)):
                        continue
                    yield f"{module.__name__}.{name}.{attr}", getattr(member, "__func__", member)


def _parameters(fn) -> list[inspect.Parameter]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return params


CALLABLES = sorted(_callables(), key=lambda item: item[0])


def _violations():
    out = []
    for qualname, fn in CALLABLES:
        params = _parameters(fn)
        names = [p.name for p in params]
        if "key" in names and names.index("key") != 0:
            out.append(f"{qualname}: `key` must be the first parameter (is #{names.index('key') + 1})")
        for p in params:
            if p.name in FORBIDDEN:
                out.append(f"{qualname}({p.name}=...): {FORBIDDEN[p.name]}")
            elif p.name.endswith("_seed"):
                out.append(f"{qualname}({p.name}=...): {FORBIDDEN['seed']}")
            elif "_or_" in p.name:
                out.append(f"{qualname}({p.name}): one type per argument, not a union of two kinds")
        if "problem" in names and "theta0" in names and "coordinates" not in names:
            out.append(f"{qualname}(problem, theta0): a problem's start comes with `coordinates=` (jcalib.starts)")
    return out


def test_the_inspection_sees_the_api():
    names = {q for q, _ in CALLABLES}
    for expected in ("jcalib.sensitivity.sobol.sobol_indices", "jcalib.bayes.mala.sample", "jcalib.bayes.nuts.sample",
                     "jcalib.estimation.gauss_newton.gauss_newton", "jcalib.algorithm.run",
                     "jcalib.problems.contract.AbstractProblem.log_posterior"):
        assert expected in names


def test_public_signatures_follow_the_conventions():
    violations = _violations()
    assert not violations, "\n".join(violations)


# A name that is the common interface of sibling modules, one per method (as blackjax's
# ``blackjax.nuts``, ``blackjax.hmc``): the same arguments and result, another algorithm.
SHARED_INTERFACES = {"sample": ["jcalib.bayes.hmc", "jcalib.bayes.mala", "jcalib.bayes.nuts"]}


def test_a_public_name_means_one_thing():
    """No two public objects share a name, except the per-method interfaces of
    `SHARED_INTERFACES` (exactly those modules)."""
    owners: dict[str, dict[int, str]] = {}
    for module in _public_modules():
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # per-model constants (OBSERVATION_TIMES, CONSTANTS) are data of their module
            owners.setdefault(name, {})[id(obj)] = module.__name__
    clashes = {name: sorted(where.values()) for name, where in owners.items() if len(where) > 1}
    assert clashes.pop("sample") == SHARED_INTERFACES["sample"]
    assert not clashes, clashes


@pytest.mark.parametrize("bad", [
    ("f(x, key)", lambda x, key: None),
    ("f(seed)", lambda seed: None),
    ("f(model_or_problem)", lambda model_or_problem: None),
    ("f(problem, theta0)", lambda problem, theta0: None),
])
def test_the_rules_catch_violations(bad, monkeypatch):
    label, fn = bad
    monkeypatch.setattr(__import__(__name__), "CALLABLES", [(label, fn)], raising=False)
    global CALLABLES
    saved, CALLABLES = CALLABLES, [(label, fn)]
    try:
        assert _violations(), label
    finally:
        CALLABLES = saved


def test_the_version_is_written_once():
    """pyproject.toml reads the version from jcalib/__init__.py, so pip's metadata agrees with it."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((pathlib.Path(jcalib.__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("jcalib") == jcalib.__version__


SCREEN = 80  # lines of code a function may have (issue 34 §3)


def _function_lengths():
    """``(where, total lines, code lines after the docstring, docstring)`` of every function in jcalib."""
    import ast

    for path in sorted(pathlib.Path(jcalib.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                body = node.body[1:] if doc else node.body
                code = node.end_lineno - body[0].lineno + 1 if body else 0
                yield f"{path.name}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1, code, doc


def test_functions_are_a_screen_long():
    """No function has more than 80 lines of code; one that is longer than 80 lines with its
    docstring says why and how long its body is ("... the body is N lines"), and N is true."""
    import re

    bad = []
    for where, total, code, doc in _function_lengths():
        claim = re.search(r"the body is (\d+) lines", doc)
        if code > SCREEN:
            bad.append(f"{where}: {code} lines of code")
        elif total > SCREEN and not claim:
            bad.append(f"{where}: {total} lines with its docstring, which does not say why")
        if claim and int(claim.group(1)) != code:
            bad.append(f"{where}: the docstring says the body is {claim.group(1)} lines; it is {code}")
    assert not bad, "\n".join(bad)
