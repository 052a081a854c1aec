"""One contract for iterative methods: `Algorithm(init, step)` and one driver, `run`.

Every iterative method in jcalib (Gauss-Newton, Levenberg-Marquardt, differential evolution,
MALA, HMC/NUTS, the extended Kalman filter) is a pair of pure functions, as in blackjax and
optax:

- ``init(...) -> state``: the starting state (its arguments depend on the method);
- ``step(state) -> (state, info)`` for deterministic methods, ``step(key, state) -> (state,
  info)`` for stochastic ones (``Algorithm.stochastic``), the key first as in blackjax.

States and infos are pytrees (NamedTuples). `run` drives any of them: ``n_steps`` steps in
compiled `jax.lax.scan` chunks (or a Python loop for steps that cannot be traced), a progress
bar per chunk, an optional stopping rule, thinning, and a status saying why it stopped. The
key of step ``i`` is ``jax.random.fold_in(key, i)``, so the draws do not depend on the
chunking; an interrupted run (Ctrl-C) returns the chunks it finished.

Example:
    >>> import jax.numpy as jnp
    >>> halve = Algorithm(init=lambda x: jnp.asarray(x), step=lambda x: (x / 2, x))
    >>> out = run(None, halve, halve.init(8.0), 3)
    >>> float(out.state), out.trace.tolist(), out.status
    (1.0, [8.0, 4.0, 2.0], 'completed')
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PRNGKeyArray
from tqdm.auto import tqdm

__all__ = ["Algorithm", "RunResult", "run", "vmap_chains"]

STATUSES = ("completed", "converged", "interrupted")


class Algorithm(NamedTuple):
    """An iterative method as two pure functions.

    Attributes:
        init: ``init(...) -> state``.
        step: ``step(state) -> (state, info)``, or ``step(key, state) -> (state, info)``
            when ``stochastic``.
        stochastic: whether ``step`` takes a key.
    """

    init: Callable[..., Any]
    step: Callable[..., tuple[Any, Any]]
    stochastic: bool = False


class RunResult(NamedTuple):
    """What `run` returns.

    Attributes:
        state: the last state.
        trace: the recorded infos (or ``trace_fn`` outputs), stacked along a leading axis of
            length ``n_steps // thin`` (fewer when the run stopped early).
        n_steps: steps actually taken.
        status: ``"completed"`` (all ``n_steps``), ``"converged"`` (``stop`` said so) or
            ``"interrupted"`` (KeyboardInterrupt between chunks; the finished chunks are kept).
    """

    state: Any
    trace: Any
    n_steps: int
    status: str


def vmap_chains(algorithm: Algorithm) -> Algorithm:
    """The same algorithm on a batch of independent states (chains, starts).

    ``init`` is vmapped over its arguments' leading axis; a stochastic ``step(key, states)``
    splits ``key`` into one key per state.
    """
    init = jax.vmap(algorithm.init)
    if not algorithm.stochastic:
        return Algorithm(init, jax.vmap(algorithm.step), False)

    def step(key, states):
        n = jax.tree_util.tree_leaves(states)[0].shape[0]
        return jax.vmap(algorithm.step)(jax.random.split(key, n), states)

    return Algorithm(init, step, True)


def run(
    key: PRNGKeyArray | None,
    algorithm: Algorithm,
    state: Any,
    n_steps: int,
    *,
    chunk_size: int | None = None,
    thin: int = 1,
    stop: Callable[[Any], Any] | None = None,
    trace_fn: Callable[[Any, Any], Any] | None = None,
    compiled: bool = True,
    progress: bool = False,
    desc: str = "",
) -> RunResult:
    """Run ``n_steps`` steps of ``algorithm`` from ``state``.

    Args:
        key: a `jax.random` key for stochastic algorithms (``None`` for deterministic ones).
        algorithm: the method.
        state: the starting state (from ``algorithm.init``).
        n_steps: number of steps (an upper bound when ``stop`` is given).
        chunk_size: steps per compiled chunk (a multiple of ``thin``; default all at once).
            The progress bar advances and ``stop`` is checked between chunks, and inside a
            compiled chunk the state is frozen once ``stop`` holds.
        thin: record every ``thin``-th step's trace entry.
        stop: ``stop(state) -> bool``, e.g. convergence; the run ends after the first step
            whose state satisfies it.
        trace_fn: ``trace_fn(state, info) -> recorded`` (default: the info).
        compiled: run chunks as `jax.lax.scan` under `jax.jit`; ``False`` loops in Python
            (for steps with host-side control flow).
        progress: show a tqdm progress bar.
        desc: the progress bar's label.

    Returns:
        A `RunResult`.

    Raises:
        ValueError: a missing or superfluous key, ``n_steps`` < 0, ``thin`` < 1 or a
            ``chunk_size`` that is not a positive multiple of ``thin``.
    """
    n_steps, thin, chunk_size = _check(key, algorithm, n_steps, thin, chunk_size)
    trace_fn = trace_fn or _info
    if compiled:
        chunk_fn = _compiled_chunk(algorithm, stop, trace_fn, thin)
    else:
        chunk_fn = _python_chunk(_one_step(algorithm, stop, trace_fn), thin)
    done = jnp.asarray(False) if stop is None else jnp.asarray(stop(state), dtype=bool)
    carry = (state, done, jnp.asarray(0))
    traces, status, taken = [], "completed", 0
    with tqdm(total=n_steps, desc=desc or "run", unit="step", disable=not progress) as bar:
        while taken < n_steps and not bool(carry[1]):
            length = min(chunk_size, n_steps - taken)
            try:
                new_carry, trace = chunk_fn(key, carry, length)
                jax.block_until_ready(new_carry)
            except KeyboardInterrupt:
                status = "interrupted"
                break
            n_new = int(new_carry[2]) - int(carry[2])
            carry, taken = new_carry, taken + length
            if trace is not None:
                traces.append(jax.tree_util.tree_map(lambda a, k=-(-n_new // thin): a[:k], trace))
            bar.update(n_new)
    if status != "interrupted" and stop is not None and bool(carry[1]):
        status = "converged"
    n_taken = int(carry[2])
    if traces:
        trace = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *traces)
    else:
        trace = jax.tree_util.tree_map(lambda a: a[:0], _empty_trace(algorithm, trace_fn, key, state))
    return RunResult(carry[0], trace, n_taken, status)


def _check(key, algorithm, n_steps, thin, chunk_size):
    if not isinstance(algorithm, Algorithm):
        raise ValueError(f"run: algorithm must be an Algorithm(init, step); got {type(algorithm).__name__}")
    if algorithm.stochastic and key is None:
        raise ValueError("run: this algorithm is stochastic; pass a jax.random key as the first argument")
    if not algorithm.stochastic and key is not None:
        raise ValueError("run: this algorithm is deterministic; pass key=None")
    n_steps, thin = int(n_steps), int(thin)
    if n_steps < 0:
        raise ValueError(f"run: n_steps must be >= 0; got {n_steps}")
    if thin < 1:
        raise ValueError(f"run: thin must be >= 1; got {thin}")
    chunk_size = max(n_steps, thin) if chunk_size is None else int(chunk_size)
    if chunk_size < 1 or chunk_size % thin:
        raise ValueError(f"run: chunk_size must be a positive multiple of thin={thin}; got {chunk_size}")
    return n_steps, thin, chunk_size


def _one_step(algorithm, stop, trace_fn):
    """``(key, (state, done, count), i) -> ((state, done, count), recorded)``; frozen once done."""

    def advance(key, state, i):
        if algorithm.stochastic:
            return algorithm.step(jax.random.fold_in(key, i), state)
        return algorithm.step(state)

    def one(key, carry, i):
        state, done, count = carry
        new_state, info = advance(key, state, i)
        recorded = trace_fn(new_state, info)
        if stop is None:
            return (new_state, done, count + 1), recorded
        new_done = jnp.asarray(stop(new_state), dtype=bool)
        keep = jnp.logical_not(done)
        state = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), new_state, state)
        return (state, jnp.logical_or(done, new_done), count + keep.astype(count.dtype)), recorded

    return one


def _info(state, info):
    return info


def _compiled_chunk(algorithm, stop, trace_fn, thin):
    """``chunk(key, carry, length)``: through the module-level compiled `_scan_chunk` when every
    function is reusable (see `_reusable`), else through a jit of this call only, so that the
    compiled program and what its closures hold are freed with the call (no cache that grows
    with every `run` of a notebook session)."""
    if all(_reusable(fn) for fn in (algorithm.init, algorithm.step, stop, trace_fn)):
        return lambda key, carry, length: _scan_chunk(key, carry, algorithm, stop, trace_fn, thin, length)
    scan = _scan_chunk.__wrapped__
    return jax.jit(lambda key, carry, length: scan(key, carry, algorithm, stop, trace_fn, thin, length),
                   static_argnums=2)


def _reusable(fn) -> bool:
    """A function the module-level cache may keep: None, an `eqx.Module` (its arrays are
    traced), a module-level function without a closure, or a `jax.tree_util.Partial` of a
    module-level function whose arguments hold no function defined inside another (a Partial
    of or over a local closure or lambda would keep a compiled program per closure)."""
    if fn is None or isinstance(fn, eqx.Module):
        return True
    if isinstance(fn, jax.tree_util.Partial):
        return _module_level(fn.func) and all(
            _module_level(leaf) for leaf in jax.tree_util.tree_leaves(fn) if isinstance(leaf, types.FunctionType))
    return getattr(fn, "__closure__", True) is None and _module_level(fn)


def _module_level(fn) -> bool:
    """Defined at a module's top level (decorated ones included), not inside a function."""
    return "<locals>" not in getattr(fn, "__qualname__", "<locals>")


@eqx.filter_jit
def _scan_chunk(key, carry, algorithm, stop, trace_fn, thin, length):
    """``length`` steps in one `jax.lax.scan`, recording every ``thin``-th.

    Compiled once per structure: arrays (the carry, the key, arrays inside the algorithm's
    functions when they are `jax.tree_util.Partial` or `eqx.Module` callables) are traced,
    everything else (plain functions, ``thin``, ``length``) is static. An algorithm built
    from module-level functions and array arguments is therefore compiled once and reused
    by later `run` calls on arrays of the same shapes; closures compile per call.
    """
    one = _one_step(algorithm, stop, trace_fn)

    def thinned(carry, _):
        def inner(c, _):
            c, _rec = one(key, c, c[2])
            return c, None

        carry, _ = jax.lax.scan(inner, carry, None, length=thin - 1)
        return one(key, carry, carry[2])

    return jax.lax.scan(thinned, carry, None, length=-(-length // thin))


def _python_chunk(one, thin):
    def chunk(key, carry, length):
        records = []
        for j in range(length):
            if bool(carry[1]):
                break
            carry, rec = one(key, carry, carry[2])
            if (j + 1) % thin == 0:
                records.append(rec)
        if not records:
            return carry, None
        return carry, jax.tree_util.tree_map(lambda *a: jnp.stack([jnp.asarray(x) for x in a]), *records)

    return chunk


def _empty_trace(algorithm, trace_fn, key, state):
    def probe(state):
        if algorithm.stochastic:
            new, info = algorithm.step(jax.random.PRNGKey(0) if key is None else key, state)
        else:
            new, info = algorithm.step(state)
        return trace_fn(new, info)

    shapes = jax.eval_shape(probe, state)
    return jax.tree_util.tree_map(lambda s: jnp.zeros((1, *s.shape), s.dtype), shapes)
