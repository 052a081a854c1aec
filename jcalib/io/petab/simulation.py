"""A PEtab problem's simulations and likelihood: each condition's `jcalib.model.Setting` from the estimated
parameters, the groups of conditions solved by `jcalib.model.simulate_setting` (`jcalib.stacking`), the
observables and noise of every measurement row, and the per-row log-likelihood."""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from jcalib.io import sbml
from jcalib.io.petab.tables import _Plan
from jcalib.model import Setting, preequilibrate, simulate_setting
from jcalib.stacking import map_stacked, stack


# --- the computation ------------------------------------------------------------------------
def _resolve(source: float | str, values: Mapping[str, Array]) -> Array:
    if isinstance(source, str):
        return values[source]
    return jnp.asarray(source, dtype=jnp.float64)


def _setting(model: sbml.SBMLModel, plan: _Plan, condition: dict, values):
    """(theta, conditions, species overrides {state index: value}) of one condition."""
    theta = []
    for name, nominal in zip(model.parameters.names, plan["sbml_nominal"], strict=True):
        if name in condition:
            theta.append(_resolve(condition[name], values))
        elif name in values:
            theta.append(values[name])
        else:
            theta.append(jnp.asarray(nominal, dtype=jnp.float64))
    conditions = dict(model.experiment.conditions)
    for name in model.condition_names:
        if name in condition:
            conditions[name] = _resolve(condition[name], values)
    overrides = {model.state_names.index(name): _resolve(source, values)
                 for name, source in condition.items() if name in model.state_names}
    theta = jnp.stack(theta) if theta else jnp.zeros((0,))
    return theta, conditions, overrides


def _setting_arrays(model: sbml.SBMLModel, plan: _Plan, condition: dict, values) -> Setting:
    """`_setting` as the model's `Setting`, arrays of one shape for every condition (the species
    overrides as a reset mask), so that conditions stack for ``lax.map``/vmap."""
    theta, conditions, overrides = _setting(model, plan, condition, values)
    n_states = len(model.state_names)
    mask = np.zeros(n_states, dtype=bool)
    mask[list(overrides)] = True
    override = jnp.zeros(n_states)
    for index, value in overrides.items():
        override = override.at[index].set(value)
    conditions = {name: jnp.asarray(value, dtype=jnp.float64) for name, value in conditions.items()}
    return Setting(theta, conditions, jnp.asarray(mask), override)


def _solve_group(model: sbml.SBMLModel, plan: _Plan, group: dict, values):
    """The group's simulations (`jcalib.model.simulate_setting` from ``t = 0``),
    ``(n_pairs * n_slots, n_outputs)`` outputs and ``(n_pairs,)`` statuses, by one
    `jcalib.stacking.map_stacked` over the stacked settings (one after the other, or vmapped
    in batches of ``plan["batch_size"]``), after the group's distinct pre-equilibrations
    (`jcalib.model.preequilibrate`, each once)."""
    settings = [_setting_arrays(model, plan, pair["condition"], values) for pair in group["pairs"]]
    t0 = jnp.asarray(0.0)
    preequilibration = None
    if group["preequilibrations"]:
        pre = stack([_setting_arrays(model, plan, condition, values) for condition in group["preequilibrations"]])
        solved = map_stacked(lambda setting: preequilibrate(model, setting, t0), pre,
                             batch_size=plan["batch_size"] or 1)
        preequilibration = jax.tree_util.tree_map(lambda a: a[jnp.asarray(group["preequilibration_index"])], solved)

    def solve(x):
        main, before, ts, t1, used = x
        return simulate_setting(model, main, before, t0, t1, ts, steady=group["steady"], used=used)

    xs = (stack(settings), preequilibration, jnp.asarray(group["ts"]), jnp.asarray(group["t1"]),
          jnp.asarray(group["used"]))
    outputs, status = map_stacked(solve, xs, batch_size=plan["batch_size"] or 1)
    return outputs.reshape((-1, outputs.shape[-1])), status


def _row_values(spec, values, n_rows: int) -> Array:
    """Per-row values of one placeholder or parameter: ``base + sum_j mask_j * p_j``."""
    kind, data = spec
    if kind == "rows":
        base, refs = data
        out = jnp.asarray(base)
        for name, mask in refs.items():
            out = out + jnp.asarray(mask) * values[name]
        return out
    return jnp.broadcast_to(values[data], (n_rows,))


def _args(specs, y_out, values) -> list[Array]:
    """The per-row arguments of a formula: model outputs, placeholders and parameters."""
    n_rows = y_out.shape[0]
    return [y_out[:, item] if kind == "output" else _row_values((kind, item), values, n_rows)
            for kind, item in specs]


def _evaluate(model: sbml.SBMLModel, plan: _Plan, values):
    """(simulation, sigma) per measurement row and the status of each simulation."""
    solved = [_solve_group(model, plan, group, values) for group in plan["pair_groups"]]
    outputs = jnp.concatenate([out for out, _ in solved], axis=0)
    statuses = jnp.concatenate([status for _, status in solved])
    n = plan["n_rows"]
    simulation = jnp.zeros((n,))
    sigma = jnp.ones((n,))
    for group in plan["groups"]:
        rows = jnp.asarray(group["rows"])
        n_rows = int(group["rows"].size)
        y_out = outputs[jnp.asarray(group["global_index"])]
        y = jnp.broadcast_to(group["observable_fn"](*_args(group["observable_args"], y_out, values)), (n_rows,))
        s = jnp.broadcast_to(group["noise_fn"](*_args(group["noise_args"], y_out, values)), (n_rows,))
        simulation = simulation.at[rows].set(jnp.asarray(y, dtype=jnp.float64))
        sigma = sigma.at[rows].set(jnp.asarray(s, dtype=jnp.float64))
    return simulation, sigma, statuses


def _likelihood_terms(plan: _Plan, simulation, sigma):
    """``(h(m) - h(y)) / sigma``, sigma, and the log-likelihood of each measurement row; NaN
    (no likelihood) where the noise level is not positive, which would otherwise act as |sigma|."""
    m = jnp.asarray(plan["measurement"])
    transform = jnp.asarray(plan["transform"])  # 0 lin, 1 log, 2 log10
    laplace = jnp.asarray(plan["laplace"])
    ln10 = math.log(10.0)
    # the logs only where transformed: jnp.where's gradient through an unused log(0) is 0 * inf = NaN
    positive = jnp.where(transform == 0, 1.0, simulation)
    h_y = jnp.where(transform == 0, simulation, jnp.where(transform == 1, jnp.log(positive), jnp.log10(positive)))
    h_m = jnp.where(transform == 0, m, jnp.where(transform == 1, jnp.log(m), jnp.log10(m)))
    # the Jacobian of the transformation of the data: 1, 1/m or 1/(m ln 10)
    log_jacobian = jnp.where(transform == 0, 0.0, jnp.where(transform == 1, -jnp.log(m), -jnp.log(m * ln10)))
    residual = jnp.where(sigma > 0, (h_m - h_y) / sigma, jnp.nan)
    llh_normal = -0.5 * jnp.log(2.0 * math.pi * sigma ** 2) - 0.5 * residual ** 2
    llh_laplace = -jnp.log(2.0 * sigma) - jnp.abs(residual)
    llh = jnp.where(laplace, llh_laplace, llh_normal) + log_jacobian
    return residual, sigma, llh
