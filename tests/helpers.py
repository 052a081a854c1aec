"""Shared test helpers: analytic references and finite differences."""

import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jcalib.model import AbstractSimulator
from jcalib.parameters import Parameter, ParameterSpace


def central_differences(fn, x, rel_step=1e-6):
    """Jacobian of ``fn`` at ``x`` by central differences, shape ``fn(x).shape + x.shape``."""
    x = np.asarray(x, dtype=np.float64)
    columns = []
    for i in range(x.size):
        h = rel_step * max(abs(x[i]), 1e-300)
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        columns.append((np.asarray(fn(up)) - np.asarray(fn(down))) / (2 * h))
    return np.stack(columns, axis=-1)


class LinearModel(AbstractSimulator):
    """The linear test case y = A θ: ``simulate(theta)[k, i] = Σ_j A[k, i, j] θ_j``, so the
    absolute output sensitivities are exactly ``A`` (a simulator without an ODE, always
    successful). ``space`` replaces the default box ``[lower, upper]`` (nominal 1) per parameter;
    ``ts`` defaults to ``0, 1, ..., n_times - 1``."""

    matrix: jax.Array  # (n_times, n_outputs, n_params)
    parameters: ParameterSpace = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    ts: jax.Array

    def __init__(self, matrix, lower=-2.0, upper=3.0, space: ParameterSpace | None = None, ts=None):
        matrix = jnp.asarray(np.asarray(matrix, dtype=np.float64))
        self.matrix = matrix
        self.parameters = space if space is not None else ParameterSpace(
            Parameter(f"p{j}", 1.0, lower, upper) for j in range(matrix.shape[2]))
        self.output_names = tuple(f"y{i}" for i in range(matrix.shape[1]))
        self.ts = jnp.arange(float(matrix.shape[0])) if ts is None else jnp.asarray(ts)

    def simulate_with_status(self, theta):
        return jnp.einsum("kij,j->ki", self.matrix, jnp.asarray(theta)), jnp.zeros((), jnp.int32)


def load_script(relative):
    """Import a script of the repository (e.g. ``"experiments/demo.py"``) as the module it is
    run as (``python -m experiments.demo``): ``experiments`` and ``benchmarks`` are packages
    of the repository root, which pytest puts on ``sys.path``."""
    import importlib

    return importlib.import_module(relative.removesuffix(".py").replace("/", "."))


NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"


def execute_notebook(name, tmp_path):
    """Run ``notebooks/<name>`` top to bottom in a fresh kernel (working directory ``tmp_path``);
    it must be committed without outputs. It runs at full size, as a reader runs it."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code"), \
        "commit notebooks without outputs"
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()


def shared_petab(*parts: str) -> pathlib.Path:
    """``../shared/petab/<parts>`` beside the checkout, or under /work/shared where the checkout
    is a copy elsewhere (a fresh clone); tests skip when neither exists."""
    beside = pathlib.Path(__file__).resolve().parents[2] / "shared" / "petab"
    root = beside if beside.exists() else pathlib.Path("/work/shared/petab")
    return root.joinpath(*parts)


def interrupt_run(monkeypatch, n: int, compiled: bool = True) -> None:
    """A Ctrl-C at the ``n``-th chunk of `jcalib.algorithm.run` (counted over all runs from now):
    its compiled chunks (`jax.lax.scan` under jit) or, with ``compiled=False``, its Python-loop ones."""
    import jcalib.algorithm as algorithm

    name = "_compiled_chunk" if compiled else "_python_chunk"
    calls, real = {"n": 0}, getattr(algorithm, name)

    def patched(*args):
        chunk = real(*args)

        def wrapped(key, carry, length):
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt
            return chunk(key, carry, length)

        return wrapped

    monkeypatch.setattr(algorithm, name, patched)
