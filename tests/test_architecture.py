"""The import graph of jcalib (issue 18 §5, "layers that point one way").

Every module of ``jcalib/`` is parsed with `ast` (nothing is imported); its edges are all of its
``import`` statements naming a jcalib module, at module level, inside functions or under
``if TYPE_CHECKING:`` alike, plus the packages that such an import runs on the way
(``from jcalib.bayes.priors import X`` runs ``jcalib/bayes/__init__.py`` first, which is how a
function-local import used to hide the cycle problem -> bayes.priors -> bayes -> bayes.mala ->
problem). The root package ``jcalib/__init__.py`` is above everything (it re-exports) and is
only an edge where a module names it explicitly (``import jcalib``).

Checked: no cycles; the lower layers (`LOWER`) reach none of the upper ones (`UPPER`), even
through other modules; `jcalib.nn` reaches nothing of `jcalib.models` (paper settings live in the
models, e.g. ``impu_settings()``).
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
from collections import deque

import pytest

import jcalib

ROOT = pathlib.Path(jcalib.__file__).parent

LOWER = ("jcalib.parameters", "jcalib.model", "jcalib.steady_state", "jcalib.data", "jcalib.probability",
         "jcalib.fileio", "jcalib.jsonable", "jcalib.stacking", "jcalib.rosenbrock", "jcalib.solve")
UPPER = ("jcalib.problems", "jcalib.bayes", "jcalib.estimation", "jcalib.sensitivity",
         "jcalib.nn", "jcalib.workflows", "jcalib.cli", "jcalib.plotting", "jcalib.benchmark")

# Edges allowed to close a cycle although they should not (issue 18: report, do not hide): none.
KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _sources(root: pathlib.Path) -> dict[str, tuple[str, bool]]:
    """``{module name: (source, is_package)}`` of every ``.py`` file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path.read_text(encoding="utf-8"), is_package)
    return out


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _import_graph(sources: dict[str, tuple[str, bool]], top: str = "jcalib") -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` over the modules of ``sources`` (see the module doc)."""

    def resolve(name: str) -> str | None:  # the module that a dotted name lives in
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, (source, is_package) in sources.items():
        targets: dict[str, int] = {}
        for node in ast.walk(ast.parse(source)):
            names = []
            if isinstance(node, ast.Import):
                names = [resolve(alias.name) for alias in node.names if _within(alias.name, top)]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                if _within(base, top):
                    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else resolve(base)
                             for a in node.names]
            for name in names:
                if name is None:
                    continue
                # the packages on the way run too, except those this module is already inside
                for target in {name} | (_ancestors(name) - _ancestors(module)):
                    if target != module:
                        targets.setdefault(target, node.lineno)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _path(graph: dict[str, dict[str, int]], start: str, goal) -> list[str] | None:
    """The shortest import chain from ``start`` to a module satisfying ``goal`` ("a:line -> b")."""
    previous, queue = {start: None}, deque([start])
    while queue:
        node = queue.popleft()
        for child in graph.get(node, {}):
            if goal(child):
                chain = [node]
                while previous[chain[-1]] is not None:
                    chain.append(previous[chain[-1]])
                chain = chain[::-1] + [child]
                return [f"{a} (line {graph[a][b]})" for a, b in zip(chain, chain[1:])] + [child]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return None


@pytest.fixture(scope="module")
def graph():
    return _import_graph(_sources(ROOT))


def test_graph_sees_the_imports(graph):
    """The parser finds module-level, function-local and relative imports and the packages run on
    the way (so the checks below cannot pass on an empty graph)."""
    assert len(graph) > 50
    assert "jcalib.probability.priors" in graph["jcalib.problems.single"]
    assert "jcalib.probability" in graph["jcalib.problems.single"]  # the package __init__ runs first
    assert "jcalib.problems" in graph["jcalib.bayes.mala"]
    assert "jcalib.models" not in graph["jcalib.nn.impu"]
    synthetic = _import_graph({
        "pkg": ("", True),
        "pkg.problem": ("def f():\n    from pkg.bayes.priors import Prior\n", False),
        "pkg.bayes": ("from pkg.bayes.mala import sample\nfrom .priors import Prior\n", True),
        "pkg.bayes.mala": ("import pkg.problem\n", False),
        "pkg.bayes.priors": ("from ..parameters import Parameter\n", False),
        "pkg.parameters": ("", False),
    }, top="pkg")
    assert synthetic["pkg.problem"] == {"pkg.bayes.priors": 2, "pkg.bayes": 2}
    assert synthetic["pkg.bayes"] == {"pkg.bayes.mala": 1, "pkg.bayes.priors": 2}
    assert synthetic["pkg.bayes.priors"] == {"pkg.parameters": 1}
    # the cycle that a function-local import hid before issue 18
    assert _cycles(synthetic) == [["pkg.bayes", "pkg.bayes.mala", "pkg.problem"]]


def test_no_import_cycles(graph):
    """No module imports itself through others, function-local imports included."""
    pruned = {m: {t: line for t, line in targets.items() if (m, t) not in KNOWN_CYCLE_EDGES}
              for m, targets in graph.items()}
    cycles = _cycles(pruned)
    chains = [" -> ".join(_path(pruned, c[0], lambda m, c=c: m == c[0]) or c) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(chains)


@pytest.mark.parametrize("lower", LOWER)
def test_lower_layers_do_not_import_upper_ones(graph, lower):
    """parameters, model, data, probability, fileio and jsonable reach nothing of problem, bayes,
    estimation, sensitivity, nn, workflows, cli or plotting, directly or through other modules."""
    modules = [m for m in graph if _within(m, lower)]
    assert modules, f"no module {lower}"
    for module in modules:
        chain = _path(graph, module, lambda m: any(_within(m, upper) for upper in UPPER))
        assert chain is None, f"{module} imports an upper layer: {' -> '.join(chain)}"


def test_probability_is_below_problem(graph):
    """Priors and likelihoods sit below `jcalib.problems`, which imports them at module top."""
    for module in (m for m in graph if _within(m, "jcalib.probability")):
        chain = _path(graph, module, lambda m: _within(m, "jcalib.problems") or _within(m, "jcalib.bayes"))
        assert chain is None, " -> ".join(chain)
    tree = ast.parse((ROOT / "problems" / "single.py").read_text(encoding="utf-8"))
    top_level = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert {"jcalib.probability.priors", "jcalib.probability.likelihoods"} <= top_level


def test_nn_does_not_import_models(graph):
    """Network code holds no model-specific settings: jcalib.nn reaches nothing of jcalib.models."""
    for module in (m for m in graph if _within(m, "jcalib.nn")):
        chain = _path(graph, module, lambda m: _within(m, "jcalib.models"))
        assert chain is None, f"{module} imports a model: {' -> '.join(chain)}"


MEASUREMENTS_BY_FIELDS = re.compile(r'hasattr\([^()]*,\s*"(values|mask|ts)"\)')


def test_measurements_are_recognised_by_type():
    """`jcalib.Measurements` is recognised by ``isinstance``, never by its fields
    (``hasattr(x, "values")`` and the like), so each function says what it accepts (issue 34 §4)."""
    assert MEASUREMENTS_BY_FIELDS.search('if hasattr(m, "values") and hasattr(m, "mask"):')
    found = [f"{module}: {match.group(0)}" for module, (source, _) in _sources(ROOT).items()
             for match in MEASUREMENTS_BY_FIELDS.finditer(source)]
    assert not found, "Measurements recognised by its fields:\n" + "\n".join(found)


START_PARSING = re.compile(r"isinstance\((theta0|estimate|start)\b[^)]*Mapping")


def test_start_points_are_parsed_in_one_place():
    """``theta0`` is read by `jcalib.starts.start_internal` alone: no other module turns a
    ``{name: value}`` start into a vector its own way (issue 34 §4: there were three parsers,
    with three meanings of a missing name)."""
    assert START_PARSING.search("elif isinstance(theta0, Mapping):")
    found = [f"{module}: {match.group(0)}" for module, (source, _) in _sources(ROOT).items()
             if module != "jcalib.starts" for match in START_PARSING.finditer(source)]
    assert not found, "start points parsed outside jcalib.starts:\n" + "\n".join(found)


@pytest.mark.slow
def test_importing_jcalib_turns_equinox_runtime_errors_into_nan():
    """Without EQX_ON_ERROR in the environment, importing jcalib sets it to nan (failed solver
    internals become NaN and a SolveStatus, not an exception that aborts a whole batch); a
    value the user set is kept."""
    import os
    import subprocess
    import sys

    code = "import jcalib, equinox._config as c; print(c.EQX_ON_ERROR)"
    env = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "nan"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "EQX_ON_ERROR": "raise"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "raise"


_OPENBLAS_THREADS = """
import ctypes, jcalib, jax, jax.numpy as jnp
jax.scipy.linalg.lu_factor(jnp.eye(3))  # loads scipy's OpenBLAS, which JAX's CPU LU calls
path = next(line.split()[-1] for line in open("/proc/self/maps") if "scipy.libs/libscipy_openblas" in line)
print(ctypes.CDLL(path).scipy_openblas_get_num_threads())
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_importing_jcalib_runs_the_lu_factorisations_on_one_openblas_thread():
    """Without OPENBLAS_NUM_THREADS in the environment, the OpenBLAS that JAX's CPU LU
    factorisations call runs one thread after ``import jcalib``; a value the user set is kept."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", _OPENBLAS_THREADS], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "1"
    if (os.cpu_count() or 1) > 1:
        out = subprocess.run([sys.executable, "-c", _OPENBLAS_THREADS], env={**env, "OPENBLAS_NUM_THREADS": "2"},
                             capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "2"


def test_the_problem_contract_is_declared():
    """`AbstractProblem` declares what a problem provides (abstract variables and methods, issue
    34 §2): a class that lacks one cannot be created, and the three problem classes lack none."""
    from jcalib.io.petab import PetabCalibrationProblem
    from jcalib.problems import AbstractProblem, CalibrationProblem, JointProblem

    assert {"space", "free_names", "n_observed", "fixed"} <= set(AbstractProblem.__abstractvars__)
    assert {"forward_mode", "solve_status", "_residuals_impl"} <= set(AbstractProblem.__abstractmethods__)

    class Partial(AbstractProblem):
        def forward_mode(self):
            return self

    with pytest.raises(TypeError, match="abstract"):
        Partial()
    for cls in (CalibrationProblem, JointProblem, PetabCalibrationProblem):
        assert not cls.__abstractmethods__ and not cls.__abstractvars__, cls.__name__
