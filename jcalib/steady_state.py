"""Steady states of a model: simulated to diffrax's steady-state event, polished by Newton, and
differentiated by the implicit function theorem.

Used by every pre-equilibration and every steady-state output (``t = inf``), native and SBML
models alike (`jcalib.model.simulate_setting`). The simulation stops when |dy/dt| is within the
controller's tolerances, which leaves the slowest modes short of their limit, and their
sensitivities more so (on Isensee_JCB2018 differentiating the simulation changed
log-likelihood gradients by up to 25 %). So the state is polished by Gauss-Newton on
``f(y) = 0`` with the conserved moieties of the initial state held, and its derivatives come
from the implicit function theorem, not from the simulation.
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

__all__ = ["NEWTON_STEPS", "steady_state"]

NEWTON_STEPS = 3
"""Gauss-Newton steps that polish the steady state the simulation stopped at."""


def steady_state(model, y0: Float[Array, " n_states"], theta: Float[Array, " n_params"],
                 t0: Float[Array, ""]) -> tuple[Float[Array, " n_states"], Float[Array, ""], Bool[Array, ""]]:
    """The steady state ``model`` reaches from ``y0`` at ``t0`` (NaN if none), the time it was
    reached, and whether it was.

    ``model`` is an `jcalib.model.AbstractModel` with the conditions of this simulation; its
    ``conserved_moieties`` (none by default) fix the steady state among those of a model with
    conservation laws. Derivatives (forward and reverse mode) with respect to ``y0``,
    ``theta`` and the model's arrays (its conditions) are those of the exact steady state.
    """
    sol = dfx.diffeqsolve(
        model.term(), model.solver, t0, jnp.inf, model.dt0, jax.lax.stop_gradient(y0),
        args=jax.lax.stop_gradient(theta), saveat=dfx.SaveAt(t1=True), stepsize_controller=model.controller,
        adjoint=model.adjoint, max_steps=model.max_steps, event=dfx.Event(dfx.steady_state_event()), throw=False)
    reached = sol.result == dfx.RESULTS.event_occurred
    t0 = jax.lax.stop_gradient(t0)
    dynamic, static = eqx.partition(model, eqx.is_array)
    state = _polish(eqx.combine(jax.lax.stop_gradient(dynamic), static), jax.lax.stop_gradient(y0),
                    jax.lax.stop_gradient(theta), t0, sol.ys[-1])
    state = _exact_derivative(state, y0, theta, t0, model)
    return jnp.where(reached, state, jnp.nan), jax.lax.stop_gradient(sol.ts[-1]), reached


def _system(model, y0, theta, t0, y):
    """The residual ``[f(y); m(y) - m(y0)]`` of a steady state with the conserved moieties ``m``
    of ``y0``, and its Jacobian in ``y``, ``(n_states + n_conserved, n_states)``."""
    def moieties(x):
        return model.conserved_moieties(x, theta) - model.conserved_moieties(y0, theta)

    value = jnp.concatenate([model.vector_field(t0, y, theta), moieties(y)])
    return value, jnp.concatenate([model.state_jacobian(t0, y, theta), jax.jacfwd(moieties)(y)])


def _polish(model, y0, theta, t0, y):
    """`NEWTON_STEPS` Gauss-Newton steps on `_system`, each kept only where it lowers |f| (a step
    from a poorly conditioned Jacobian is dropped)."""
    value, jac = _system(model, y0, theta, t0, y)
    for _ in range(NEWTON_STEPS):
        candidate = y - jnp.linalg.lstsq(jac, value)[0]
        new_value, new_jac = _system(model, y0, theta, t0, candidate)  # reused by the next step
        better = (jnp.linalg.norm(new_value) < jnp.linalg.norm(value)) & jnp.all(jnp.isfinite(candidate))
        y, value, jac = (jnp.where(better, a, b) for a, b in ((candidate, y), (new_value, value), (new_jac, jac)))
    return y


@eqx.filter_custom_jvp
def _exact_derivative(state, y0, theta, t0, model):
    """``state`` (a steady state reached from ``y0``) with the derivatives of the exact steady
    state: the implicit function theorem on `_system`, ``J dy = -(df/dp dp)`` and
    ``dm(y) = dm(y0)`` for the conserved moieties, solved by least squares (the rows are
    consistent: the moieties span the left null space of ``J`` that the reactions create)."""
    return state


@_exact_derivative.def_jvp
def _exact_derivative_jvp(primals, tangents):
    state, y0, theta, t0, model = primals
    _, dy0, dtheta, _, dmodel = tangents
    if dmodel is None:
        dmodel = jax.tree_util.tree_map(lambda _: None, model)

    def residual(y_init, th, mdl):  # at the fixed steady state: its dependence on y0 and the parameters
        return _system(mdl, y_init, th, t0, state)[0]

    _, d_residual = eqx.filter_jvp(residual, (y0, theta, model), (dy0, dtheta, dmodel))
    if d_residual is None:
        return state, jnp.zeros_like(state)
    jac = _system(model, y0, theta, t0, state)[1]
    # the pseudo-inverse does not depend on the tangent: under jax.jacfwd (a vmap over tangents)
    # it is computed once, where lstsq would factor the matrix again for every tangent
    return state, -jnp.linalg.pinv(jac) @ d_residual
