"""The diffrax solve of every jcalib model, with reverse-mode derivatives along the steps it took.

Reverse mode through an adaptive solve (``diffrax.RecursiveCheckpointAdjoint``) recomputes the
steps in the backward pass, in a second compiled program, and decides again whether each step is
accepted. On stiff models the two programs' step results differ in the last digits, which a step
matrix with condition numbers near 1e15 (Lang_PLOSComputBiol2024's) magnifies to relative
differences of 1e-4 in the error estimate: a step with scaled error 0.9969 in one program can be
rejected in the other, and the backward pass then differentiates a step sequence that the solve
never took. The gradient was off by up to 30 % on Lang, and by 12 % on twenty stiff van der Pol
oscillators (the test). Forward mode and ``diffrax.DirectAdjoint`` do not recompute decisions.

`solve` therefore differentiates in reverse mode along the recorded steps (behind a
``PIDController``; a ``ClipStepSizeController``'s jumps also restart the solver's first stage,
which is not recorded, so it keeps diffrax's backward pass): the forward pass is
the adaptive solve, which also records where its accepted steps ended; the backward pass replays
exactly those steps (`Replay`, no accept/reject decision left) under
``RecursiveCheckpointAdjoint`` and takes its vector-Jacobian product. It costs one more
simulation per gradient (the replay's forward sweep) and memory for ``max_steps`` step times.

Example:
    >>> import jax, jax.numpy as jnp, diffrax as dfx
    >>> jax.config.update("jax_enable_x64", True)
    >>> term = dfx.ODETerm(lambda t, y, k: -k * y)
    >>> def end(k):
    ...     sol = solve(term, dfx.Tsit5(), 0.0, 1.0, None, jnp.ones(1), k, dfx.SaveAt(t1=True),
    ...                 dfx.PIDController(rtol=1e-10, atol=1e-12), dfx.RecursiveCheckpointAdjoint(), 1000)
    ...     return sol.ys[-1, 0]
    >>> round(float(jax.grad(end)(2.0)), 8)  # d/dk exp(-k) = -exp(-2)
    -0.13533528
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, Float, Int

__all__ = ["Replay", "solve"]


class Replay(dfx.AbstractAdaptiveStepSizeController):
    """Steps to recorded times and accepts every step: ``ends[k]`` is where step ``k`` ends
    (``(max_steps,)``, padded with ``inf`` after the last, as ``SaveAt(steps=True)`` records).
    ``rtol``, ``atol``, ``norm``: the recorded solve's, which implicit solvers (Kvaerno5) take
    for their stage equations from an adaptive controller."""

    ends: Float[Array, " max_steps"]
    rtol: float
    atol: float
    norm: Callable = optx.rms_norm

    def wrap(self, direction):
        return self

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        del terms, t0, t1, y0, dt0, args, func, error_order
        return self.ends[0], jnp.asarray(0)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        del t0, y0, y1_candidate, args, y_error, error_order
        index = controller_state + 1
        next_end = self.ends[jnp.minimum(index, self.ends.shape[0] - 1)]
        return True, t1, next_end, False, index, dfx.RESULTS.successful


def solve(term: dfx.AbstractTerm, solver: dfx.AbstractSolver, t0, t1, dt0, y0: Float[Array, " n_states"], args,
          saveat: dfx.SaveAt, controller: dfx.AbstractStepSizeController, adjoint: dfx.AbstractAdjoint,
          max_steps: int) -> dfx.Solution:
    """``diffrax.diffeqsolve(...)`` without throwing; with ``RecursiveCheckpointAdjoint`` and a
    ``PIDController``, reverse-mode derivatives replay the accepted steps (module docstring; other
    controllers, e.g. ``ClipStepSizeController`` with ``jump_ts``, keep diffrax's own backward pass).
    ``saveat``: ``ts`` and/or ``t1`` (one `diffrax.SaveAt` without ``subs``, ``steps`` or ``fn``)."""
    # a PIDController only: a ClipStepSizeController's jumps also tell the solver to restart its
    # first stage (made_jump), which the replay would have to record as well
    replayed = isinstance(adjoint, dfx.RecursiveCheckpointAdjoint) and type(controller) is dfx.PIDController
    if not replayed:
        return dfx.diffeqsolve(term, solver, t0, t1, dt0, y0, args=args, saveat=saveat,
                               stepsize_controller=controller, adjoint=adjoint, max_steps=max_steps, throw=False)
    sub = saveat.subs
    if not isinstance(sub, dfx.SubSaveAt) or sub.steps or sub.t0 or saveat.dense:
        raise ValueError(f"jcalib.solve.solve: saveat must save at ts and/or t1 only; got {saveat}")
    t0, t1 = jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(t1, dtype=jnp.float64)
    ts = jnp.zeros((0,)) if sub.ts is None else jnp.asarray(sub.ts, dtype=jnp.float64)
    ys, result, steps = _replayed((term, t0, t1, y0, args, ts), solver, dt0, controller, adjoint, max_steps,
                                  bool(sub.t1))
    return dfx.Solution(t0=t0, t1=t1, ts=None, ys=ys, interpolation=None, stats={"num_steps": steps},
                        result=_result(result),
                        solver_state=None, controller_state=None, made_jump=None, event_mask=None)


def _result(code: Int[Array, ""]) -> dfx.RESULTS:
    """The `diffrax.RESULTS` item of a code."""
    return eqx.tree_at(lambda r: r._value, dfx.RESULTS.successful, code)


def _saved(ts, save_t1: bool) -> dfx.SubSaveAt:
    """What the caller's `diffrax.SaveAt` saves: ``ts`` (none when empty) and/or ``t1``."""
    return dfx.SubSaveAt(ts=ts if ts.shape[0] else None, t1=save_t1)


def _adaptive(inputs, solver, dt0, controller, max_steps, save_t1: bool, record: bool):
    """The adaptive solve: ``(ys, result code, number of steps)`` and, where ``record``, the
    times where its accepted steps ended (``(max_steps,)``, ``inf``-padded)."""
    term, t0, t1, y0, args, ts = inputs
    subs = [_saved(ts, save_t1)]
    if record:
        subs.append(dfx.SubSaveAt(steps=True, fn=lambda t, y, a: jnp.zeros((), dtype=y.dtype)))
    sol = dfx.diffeqsolve(term, solver, t0, t1, dt0, y0, args=args, saveat=dfx.SaveAt(subs=subs),
                          stepsize_controller=controller, adjoint=dfx.ForwardMode(), max_steps=max_steps,
                          throw=False)
    out = (sol.ys[0], sol.result._value, sol.stats["num_steps"])
    return (out, sol.ts[1]) if record else out


@eqx.filter_custom_vjp
def _replayed(inputs, solver, dt0, controller, adjoint, max_steps, save_t1):
    del adjoint  # the backward pass's
    return _adaptive(inputs, solver, dt0, controller, max_steps, save_t1, record=False)


@_replayed.def_fwd
def _replayed_fwd(perturbed, inputs, solver, dt0, controller, adjoint, max_steps, save_t1):
    del perturbed, adjoint
    out, ends = _adaptive(inputs, solver, dt0, controller, max_steps, save_t1, record=True)
    return out, ends


@_replayed.def_bwd
def _replayed_bwd(ends, grad_out, perturbed, inputs, solver, dt0, controller, adjoint, max_steps, save_t1):
    del perturbed, dt0
    stepping = Replay(jax.lax.stop_gradient(ends), controller.rtol, controller.atol, controller.norm)

    def replay(inputs):
        term, t0, t1, y0, args, ts = inputs
        return dfx.diffeqsolve(term, solver, t0, t1, None, y0, args=args, saveat=dfx.SaveAt(subs=_saved(ts, save_t1)),
                               stepsize_controller=stepping, adjoint=adjoint, max_steps=max_steps, throw=False).ys

    grad_ys = grad_out[0]
    # Python floats (a plain float argument, differentiated) as arrays, so filter_vjp sees them
    inputs = jax.tree_util.tree_map(lambda x: jnp.asarray(x) if isinstance(x, float) else x, inputs)
    if grad_ys is None:
        return jax.tree_util.tree_map(jnp.zeros_like, eqx.filter(inputs, eqx.is_inexact_array))
    _, vjp = eqx.filter_vjp(replay, inputs)
    return vjp(grad_ys)[0]
