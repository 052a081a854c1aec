"""The harness of the model tests: one jitted solve and one jitted Jacobian for every built-in model.

Each takes the model as an argument (``eqx.filter_jit``), so model variants of one structure
(``with_times``, ``eqx.tree_at`` on an array field, other parameter values) reuse the compiled
function instead of compiling again.
"""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


@eqx.filter_jit
def _solve(model, theta, observe: bool, physical: bool):
    sol = model.solve(theta)
    states = model.physical_states(sol.ys, theta) if physical else sol.ys
    outputs = jax.vmap(model.observe, in_axes=(0, 0, None))(model.ts, sol.ys, theta) if observe else None
    return states, outputs, sol.result == dfx.RESULTS.successful


JACOBIAN = eqx.filter_jit(lambda model, theta: model.jacobian(theta))
"""``model.jacobian(theta)``, jitted with the model as an argument."""


def solve_states(model, theta):
    """``(states (n_times, n_states), success flag)`` as JAX arrays, without asserting success."""
    states, _, ok = _solve(model, jnp.asarray(theta, dtype=jnp.float64), False, False)
    return states, ok


def states(model, theta) -> np.ndarray:
    """The solver states ``(n_times, n_states)`` as NumPy; asserts the solve succeeded."""
    ys, ok = solve_states(model, theta)
    assert bool(ok)
    return np.asarray(ys)


def run(model, theta, physical: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(states, outputs)`` ``(n_times, n_states)``, ``(n_times, n_outputs)`` as NumPy; asserts the
    solve succeeded. ``physical``: the states through ``model.physical_states`` (scaled models)."""
    states, outputs, ok = _solve(model, jnp.asarray(theta, dtype=jnp.float64), True, physical)
    assert bool(ok)
    return np.asarray(states), np.asarray(outputs)


def jacobian(model, theta) -> np.ndarray:
    """``model.jacobian(theta)`` ``(n_times, n_outputs, n_params)`` as NumPy."""
    return np.asarray(JACOBIAN(model, jnp.asarray(theta, dtype=jnp.float64)))


def with_field(model, name: str, value):
    """``model`` with the array field ``name`` replaced (same compiled functions)."""
    return eqx.tree_at(lambda m: getattr(m, name), model, jnp.asarray(value, dtype=jnp.float64))
