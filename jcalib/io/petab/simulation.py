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
from jcalib.stacking import map_stacked


# --- the computation ------------------------------------------------------------------------
def _table(names, conditions: list[dict], index: Mapping[str, int], by_name: bool):
    """Per condition and name, ``(n_conditions, n_names)`` numpy arrays built while tracing:
    the position in the value vector of the parameter it reads (``-1``: none) and the number
    it is set to, if any: from ``condition[name]`` (a number or a parameter id), else (where
    ``by_name``) the parameter of that name in ``index``."""
    ref = np.full((len(conditions), len(names)), -1, dtype=np.int64)
    const = np.zeros((len(conditions), len(names)))
    given = np.zeros((len(conditions), len(names)), dtype=bool)
    for i, condition in enumerate(conditions):
        for j, name in enumerate(names):
            source = condition.get(name, name if by_name and name in index else None)
            if isinstance(source, str):
                ref[i, j] = index[source]
            elif source is not None:
                const[i, j], given[i, j] = float(source), True
    return ref, const, given


def _settings(model: sbml.SBMLModel, plan: _Plan, conditions: list[dict], values) -> Setting:
    """The stacked `jcalib.model.Setting` of each condition (leading axis: the conditions):
    parameters, the model's conditions and the species a condition sets (a reset mask), each
    gathered from one vector of ``values`` by a table of positions (`_table`), so that the
    traced program does not grow with conditions times parameters."""
    index = {name: i for i, name in enumerate(values)}
    vector = jnp.stack([jnp.asarray(v, dtype=jnp.float64) for v in values.values()] or [jnp.zeros(())])

    def gather(names, defaults, by_name: bool = False):
        ref, const, given = _table(names, conditions, index, by_name)
        return jnp.where(ref >= 0, vector[np.maximum(ref, 0)], jnp.where(given, const, defaults))

    theta = gather(model.parameters.names, jnp.asarray(plan["sbml_nominal"]), by_name=True)
    names = tuple(model.condition_names)
    defaults = (jnp.stack([jnp.asarray(model.experiment.conditions[n], dtype=jnp.float64) for n in names])
                if names else jnp.zeros((0,)))
    condition_values = gather(names, defaults)
    reset = np.array([[name in condition for name in model.state_names] for condition in conditions])
    state_values = gather(model.state_names, 0.0)
    return jax.vmap(lambda th, c, r, v: Setting(th, dict(zip(names, c)), r, v))(
        theta, condition_values, jnp.asarray(reset), state_values)


def _solve_group(model: sbml.SBMLModel, plan: _Plan, group: dict, values):
    """The group's simulations (`jcalib.model.simulate_setting` from ``t = 0``),
    ``(n_pairs * n_slots, n_outputs)`` outputs and ``(n_pairs,)`` statuses, by one
    `jcalib.stacking.map_stacked` over the stacked settings (one after the other, or vmapped
    in batches of ``plan["batch_size"]``), after the group's distinct pre-equilibrations
    (`jcalib.model.preequilibrate`, each once)."""
    settings = _settings(model, plan, [pair["condition"] for pair in group["pairs"]], values)
    t0 = jnp.asarray(0.0)
    preequilibration = None
    if group["preequilibrations"]:
        pre = _settings(model, plan, list(group["preequilibrations"]), values)
        solved = map_stacked(lambda setting: preequilibrate(model, setting, t0), pre,
                             batch_size=plan["batch_size"] or 1)
        preequilibration = jax.tree_util.tree_map(lambda a: a[jnp.asarray(group["preequilibration_index"])], solved)

    def solve(x):
        main, before, ts, t1, used = x
        return simulate_setting(model, main, before, t0, t1, ts, steady=group["steady"], used=used)

    xs = (settings, preequilibration, jnp.asarray(group["ts"]), jnp.asarray(group["t1"]),
          jnp.asarray(group["used"]))
    outputs, status = map_stacked(solve, xs, batch_size=plan["batch_size"] or 1)
    return outputs.reshape((-1, outputs.shape[-1])), status


def _row_values(spec, values, n_rows: int) -> Array:
    """Per-row values of one placeholder or parameter: each row's number (``base``) or the
    parameter its mask marks, by one gather."""
    kind, data = spec
    if kind == "rows":
        base, refs = data
        if not refs:
            return jnp.asarray(base)
        ref = np.full(n_rows, -1, dtype=np.int64)
        for j, mask in enumerate(refs.values()):
            ref[np.asarray(mask) != 0] = j
        referenced = jnp.stack([jnp.asarray(values[name], dtype=jnp.float64) for name in refs])
        return jnp.where(ref >= 0, referenced[np.maximum(ref, 0)], jnp.asarray(base))
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
