"""PEtab problems (format version 1) as jcalib objectives.

`load` reads a PEtab problem with the community's ``petab`` package (``petab.v1``), validates it
with ``petab.v1.lint_problem``, builds the SBML model with `jcalib.sbml.model_from_sbml`, and returns a
`PetabProblem` whose `PetabProblem.log_likelihood`, `PetabProblem.chi2` and
`PetabProblem.simulation_table` are functions of the estimated parameters in internal
coordinates (their PEtab ``parameterScale``: lin, log or log10). The log-likelihood is plain JAX,
so ``jax.grad(pp.log_likelihood)`` works.

What becomes what (PEtab v1 semantics):

- one simulation per (pre-equilibration condition, simulation condition) pair of the
  measurement table, from ``t = 0`` to its last measurement time;
- condition-table columns set SBML parameters, compartment sizes and species initial values
  (numbers, or ids of the parameter table); ``NaN`` keeps the model's value (or, after a
  pre-equilibration, the pre-equilibrated one). A species override replaces the species'
  initial value, initial assignments included;
- pre-equilibration: the model is simulated under the pre-equilibration condition to a steady
  state (diffrax's steady-state event); then the simulation condition's parameters apply and
  its non-``NaN`` species overrides reset those species;
- observable and noise formulas are sympy expressions (``petab.v1.math.sympify_petab``) of SBML
  ids (observed from the model), parameter-table ids, and the placeholders
  ``observableParameter<n>_<observableId>`` / ``noiseParameter<n>_<observableId>``, which the
  measurement table sets per row (numbers or parameter ids, so timepoint-specific overrides
  work);
- noise distributions normal and laplace, observable transformations lin, log and log10, with
  PEtab's normalisation constants;
- parameters not in the parameter table keep their SBML values; non-estimated parameters
  their ``nominalValue``.

Not yet supported, refused with a ``ValueError`` that names the PEtab feature: more than one
SBML model, a mapping table, measurements at ``t = inf`` (steady-state data), pre-equilibration
conditions that change compartment sizes, and condition-table columns that are not SBML
entities. Objective priors are read but not part of `PetabProblem.log_likelihood` (PEtab's
likelihood is without priors). `PetabProblem.problem` (a `jcalib.JointProblem`) is not built
yet: observable formulas with their parameters do not fit the joint problem's direct
output-to-measurement comparison.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import petab.v1 as petab
import sympy as sp
from jaxtyping import Array, Float
from petab.v1.math import sympify_petab

from jcalib import sbml

__all__ = ["PetabProblem", "load"]

_SCALES = ("lin", "log", "log10")
_TRANSFORMATIONS = ("lin", "log", "log10")
_DISTRIBUTIONS = ("normal", "laplace")


def _unsupported(feature: str) -> ValueError:
    return ValueError(f"petab.load: unsupported PEtab feature: {feature}; jcalib.petab would rather refuse the "
                      "problem than compute something else")


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip() == "" or value.strip().lower() == "nan"
    return isinstance(value, float) and math.isnan(value)


def _source(value) -> float | str:
    """A table entry as a number or a parameter id."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value.strip()
    return float(value)


def _split(value) -> list[float | str]:
    """An ``observableParameters`` / ``noiseParameters`` entry (``a;b;c``) as sources."""
    if _is_missing(value):
        return []
    if not isinstance(value, str):
        return [float(value)]
    return [_source(part) for part in value.split(";")]


class PetabProblem:
    """A PEtab problem as functions of the estimated parameters (build it with `load`).

    Attributes:
        petab_problem: the ``petab.v1.Problem`` that was read.
        model: the `jcalib.sbml.SBMLModel` (its outputs are the SBML ids the formulas use).
        parameter_ids: the estimated parameters, in the order of ``z``.
        scales: their PEtab ``parameterScale`` (lin, log or log10).
        lower, upper: their bounds in internal coordinates.
        nominal_internal: their nominal values in internal coordinates.
    """

    def __init__(self, petab_problem, model: sbml.SBMLModel, plan: dict):
        self.petab_problem = petab_problem
        self.model = model
        self._plan = plan
        self.parameter_ids: tuple[str, ...] = plan["parameter_ids"]
        self.scales: tuple[str, ...] = plan["scales"]
        self.lower = jnp.asarray(plan["lower"])
        self.upper = jnp.asarray(plan["upper"])
        self.nominal_internal = jnp.asarray(plan["nominal_internal"])
        self._evaluate = jax.jit(self._evaluate_impl)

    @property
    def problem(self):
        """Not built in this version (see the module docstring)."""
        raise NotImplementedError("PetabProblem.problem: the multi-experiment jcalib problem is not built yet; use "
                                  "log_likelihood / chi2 / simulation_table")

    def to_physical(self, z: Float[Array, " n_params"]) -> Float[Array, " n_params"]:
        """Estimated parameters from internal coordinates (their scales) to physical values."""
        z = jnp.asarray(z, dtype=jnp.float64)
        values = [z[i] if s == "lin" else jnp.exp(z[i]) if s == "log" else jnp.power(10.0, z[i])
                  for i, s in enumerate(self.scales)]
        return jnp.stack(values) if values else jnp.zeros((0,))

    def log_likelihood(self, z: Float[Array, " n_params"]) -> Float[Array, ""]:
        """PEtab's log-likelihood (with normalisation constants, without priors)."""
        return jnp.sum(self._evaluate(z)[1])

    def chi2(self, z: Float[Array, " n_params"]) -> Float[Array, ""]:
        """Sum of squared weighted residuals, ``((h(y) - h(m)) / sigma)^2`` with the observable
        transformation ``h``."""
        return jnp.sum(self._evaluate(z)[2] ** 2)

    def residuals(self, z: Float[Array, " n_params"]) -> Float[Array, " n_measurements"]:
        """Weighted residuals ``(h(y) - h(m)) / sigma``, one per measurement row."""
        return self._evaluate(z)[2]

    def simulate(self, z: Float[Array, " n_params"]) -> Float[Array, " n_measurements"]:
        """The simulated observables, one per measurement row (untransformed)."""
        return self._evaluate(z)[0]

    def simulation_table(self, z: Float[Array, " n_params"]) -> pd.DataFrame:
        """PEtab simulation table: observableId, simulationConditionId,
        preequilibrationConditionId, time, simulation (one row per measurement row)."""
        measurements = self.petab_problem.measurement_df
        table = pd.DataFrame({
            petab.OBSERVABLE_ID: measurements[petab.OBSERVABLE_ID].to_numpy(),
            petab.SIMULATION_CONDITION_ID: measurements[petab.SIMULATION_CONDITION_ID].to_numpy(),
            petab.PREEQUILIBRATION_CONDITION_ID: list(self._plan["row_preeq"]),
            petab.TIME: measurements[petab.TIME].to_numpy(dtype=np.float64),
            petab.SIMULATION: np.asarray(self.simulate(z)),
        })
        return table

    # --- the computation ------------------------------------------------------------------
    def _parameter_values(self, z) -> dict[str, Array]:
        """Physical values of every parameter-table id."""
        values = {name: jnp.asarray(v, dtype=jnp.float64) for name, v in self._plan["fixed_values"].items()}
        physical = self.to_physical(z)
        for i, name in enumerate(self.parameter_ids):
            values[name] = physical[i]
        return values

    def _resolve(self, source: float | str, values: Mapping[str, Array]) -> Array:
        if isinstance(source, str):
            return values[source]
        return jnp.asarray(source, dtype=jnp.float64)

    def _setting(self, condition: dict, values):
        """(theta, conditions, species overrides {state index: value}) of one condition."""
        model = self.model
        theta = []
        for name, nominal in zip(model.parameters.names, self._plan["sbml_nominal"], strict=True):
            if name in condition:
                theta.append(self._resolve(condition[name], values))
            elif name in values:
                theta.append(values[name])
            else:
                theta.append(jnp.asarray(nominal, dtype=jnp.float64))
        conditions = dict(model.experiment.conditions)
        for name in model.condition_names:
            if name in condition:
                conditions[name] = self._resolve(condition[name], values)
        overrides = {model.state_names.index(name): self._resolve(source, values)
                     for name, source in condition.items() if name in model.state_names}
        theta = jnp.stack(theta) if theta else jnp.zeros((0,))
        return theta, conditions, overrides

    def _solve(self, pair, values):
        model = self.model
        t0 = jnp.asarray(0.0)
        theta, conditions, overrides = self._setting(pair["condition"], values)
        main = eqx.tree_at(lambda m: m.experiment.conditions, model, conditions)
        if pair["preequilibration"] is None:
            y0 = main.initial_state(theta)
            for index, value in overrides.items():
                y0 = y0.at[index].set(value)
        else:
            theta_pre, conditions_pre, overrides_pre = self._setting(pair["preequilibration"], values)
            pre = eqx.tree_at(lambda m: m.experiment.conditions, model, conditions_pre)
            y_pre = pre.initial_state(theta_pre)
            for index, value in overrides_pre.items():
                y_pre = y_pre.at[index].set(value)
            steady = dfx.diffeqsolve(
                dfx.ODETerm(pre.vector_field), model.solver, t0, jnp.inf, model.dt0, y_pre, args=theta_pre,
                saveat=dfx.SaveAt(t1=True), stepsize_controller=model.controller, adjoint=model.adjoint,
                max_steps=model.max_steps, event=dfx.Event(dfx.steady_state_event()), throw=False)
            y0 = steady.ys[-1]
            y0 = jnp.where(steady.result == dfx.RESULTS.event_occurred, y0, jnp.nan)
            for index, value in overrides.items():
                y0 = y0.at[index].set(value)
        ts = jnp.asarray(pair["ts"])
        t1 = float(max(pair["ts"].max(), 0.0)) or 1.0
        sol = dfx.diffeqsolve(
            dfx.ODETerm(main.vector_field), model.solver, t0, jnp.asarray(t1), model.dt0, y0, args=theta,
            saveat=dfx.SaveAt(ts=ts), stepsize_controller=model.controller, adjoint=model.adjoint,
            max_steps=model.max_steps, throw=False)
        ys = jnp.where(sol.result == dfx.RESULTS.successful, sol.ys, jnp.nan)
        return jax.vmap(main.observe, in_axes=(0, 0, None))(ts, ys, theta)

    def _row_values(self, spec, values, n_rows: int) -> Array:
        """Per-row values of one placeholder or parameter: ``base + sum_j mask_j * p_j``."""
        kind, data = spec
        if kind == "rows":
            base, refs = data
            out = jnp.asarray(base)
            for name, mask in refs.items():
                out = out + jnp.asarray(mask) * values[name]
            return out
        return jnp.broadcast_to(values[data], (n_rows,))

    def _args(self, specs, y_out, values) -> list[Array]:
        """The per-row arguments of a formula: model outputs, placeholders and parameters."""
        n_rows = y_out.shape[0]
        return [y_out[:, item] if kind == "output" else self._row_values((kind, item), values, n_rows)
                for kind, item in specs]

    def _evaluate_impl(self, z):
        plan = self._plan
        values = self._parameter_values(z)
        outputs = jnp.concatenate([self._solve(pair, values) for pair in plan["pairs"]], axis=0)
        n = plan["n_rows"]
        simulation = jnp.zeros((n,))
        sigma = jnp.ones((n,))
        for group in plan["groups"]:
            rows = jnp.asarray(group["rows"])
            n_rows = int(group["rows"].size)
            y_out = outputs[jnp.asarray(group["global_index"])]
            y = jnp.broadcast_to(group["observable_fn"](*self._args(group["observable_args"], y_out, values)),
                                 (n_rows,))
            s = jnp.broadcast_to(group["noise_fn"](*self._args(group["noise_args"], y_out, values)), (n_rows,))
            simulation = simulation.at[rows].set(jnp.asarray(y, dtype=jnp.float64))
            sigma = sigma.at[rows].set(jnp.asarray(s, dtype=jnp.float64))
        m = jnp.asarray(plan["measurement"])
        transform = jnp.asarray(plan["transform"])  # 0 lin, 1 log, 2 log10
        laplace = jnp.asarray(plan["laplace"])
        ln10 = math.log(10.0)
        h_y = jnp.where(transform == 0, simulation,
                        jnp.where(transform == 1, jnp.log(simulation), jnp.log10(simulation)))
        h_m = jnp.where(transform == 0, m, jnp.where(transform == 1, jnp.log(m), jnp.log10(m)))
        # the Jacobian of the transformation of the data: 1, 1/m or 1/(m ln 10)
        log_jacobian = jnp.where(transform == 0, 0.0,
                                 jnp.where(transform == 1, -jnp.log(m), -jnp.log(m * ln10)))
        residual = (h_y - h_m) / sigma
        llh_normal = -0.5 * jnp.log(2.0 * math.pi * sigma ** 2) - 0.5 * residual ** 2
        llh_laplace = -jnp.log(2.0 * sigma) - jnp.abs(residual)
        llh = jnp.where(laplace, llh_laplace, llh_normal) + log_jacobian
        return simulation, llh, residual


def _check_tables(problem) -> None:
    if getattr(problem, "mapping_df", None) is not None and len(problem.mapping_df):
        raise _unsupported("the mapping table")
    measurements = problem.measurement_df
    if np.any(np.isinf(measurements[petab.TIME].to_numpy(dtype=np.float64))):
        raise _unsupported("steady-state measurements (time = inf)")
    observables = problem.observable_df
    if petab.OBSERVABLE_TRANSFORMATION in observables:
        for obs_id, value in observables[petab.OBSERVABLE_TRANSFORMATION].items():
            if not _is_missing(value) and value not in _TRANSFORMATIONS:
                raise _unsupported(f"observableTransformation {value!r} (observable {obs_id!r})")
    if petab.NOISE_DISTRIBUTION in observables:
        for obs_id, value in observables[petab.NOISE_DISTRIBUTION].items():
            if not _is_missing(value) and value not in _DISTRIBUTIONS:
                raise _unsupported(f"noiseDistribution {value!r} (observable {obs_id!r})")
    for pid, scale in problem.parameter_df[petab.PARAMETER_SCALE].items():
        if scale not in _SCALES:
            raise _unsupported(f"parameterScale {scale!r} (parameter {pid!r})")


def load(yaml_path: str | os.PathLike, *, solver: dfx.AbstractSolver | None = None, rtol: float = 1e-8,
         atol: float = 1e-10, max_steps: int = 100_000, validate: bool = True) -> PetabProblem:
    """Read a PEtab (v1) problem.

    Args:
        yaml_path: the problem's YAML file.
        solver, rtol, atol, max_steps: passed to `jcalib.sbml.model_from_sbml`.
        validate: run ``petab.v1.lint_problem`` first.

    Returns:
        A `PetabProblem`.

    Raises:
        ValueError: the problem does not pass PEtab's linter, or uses an unsupported feature
            (the message names it; see the module docstring).

    Example:
        >>> pp = load("path/to/problem.yaml")  # doctest: +SKIP
        >>> pp.log_likelihood(pp.nominal_internal)  # doctest: +SKIP
    """
    path = os.fspath(yaml_path)
    if not os.path.exists(path):
        raise ValueError(f"petab.load: no such file {path!r}")
    import yaml  # petab's own dependency

    with open(path) as stream:
        config = yaml.safe_load(stream)
    problems = config.get("problems", [])
    if len(problems) != 1 or len(problems[0].get("sbml_files", [])) != 1:
        raise _unsupported("more than one problem or SBML model in the YAML file")
    with warnings.catch_warnings():  # petab's pandas deprecation warnings are not the user's concern
        warnings.filterwarnings("ignore", module=r"petab\.")
        problem = petab.Problem.from_yaml(path)
    if validate and petab.lint_problem(problem):
        raise ValueError(f"petab.load: {path!r} does not pass petab.v1.lint_problem (see its log messages)")
    _check_tables(problem)
    sbml_model = problem.model.sbml_model
    sbml_path = os.path.join(os.path.dirname(path), problems[0]["sbml_files"][0])

    parameters = problem.parameter_df
    estimated = parameters[parameters[petab.ESTIMATE] == 1]
    fixed_values = {pid: float(row[petab.NOMINAL_VALUE]) for pid, row in parameters.iterrows()
                    if row[petab.ESTIMATE] != 1}

    def scaled(value, scale):
        return value if scale == "lin" else math.log(value) if scale == "log" else math.log10(value)

    scales = tuple(estimated[petab.PARAMETER_SCALE])
    plan: dict = {
        "parameter_ids": tuple(estimated.index),
        "scales": scales,
        "lower": np.array([scaled(float(v), s) for v, s in zip(estimated[petab.LOWER_BOUND], scales, strict=True)]),
        "upper": np.array([scaled(float(v), s) for v, s in zip(estimated[petab.UPPER_BOUND], scales, strict=True)]),
        "nominal_internal": np.array([scaled(float(v), s) for v, s in
                                      zip(estimated[petab.NOMINAL_VALUE], scales, strict=True)]),
        "fixed_values": fixed_values,
    }
    table_ids = set(parameters.index)

    # --- conditions ----------------------------------------------------------------------
    condition_df = problem.condition_df
    conditions: dict[str, dict[str, float | str]] = {}
    for cid, row in condition_df.iterrows():
        entries = {}
        for column, value in row.items():
            if column == petab.CONDITION_NAME or _is_missing(value):
                continue
            if sbml_model.getElementBySId(column) is None:
                raise _unsupported(f"condition-table column {column!r}, which is not an SBML entity")
            source = _source(value)
            if isinstance(source, str) and source not in table_ids:
                raise ValueError(f"petab.load: condition {cid!r} sets {column!r} to {source!r}, which is not in the "
                                 "parameter table")
            entries[column] = source
        conditions[cid] = entries

    # --- observables: sympy formulas and the symbols they need -----------------------------
    observable_df = problem.observable_df
    formulas, outputs = {}, []
    for obs_id, row in observable_df.iterrows():
        noise = row.get(petab.NOISE_FORMULA, 1.0)
        pair = (sympify_petab(row[petab.OBSERVABLE_FORMULA]), sympify_petab(noise))
        formulas[obs_id] = pair
        for expr in pair:
            for symbol in sorted(expr.free_symbols, key=str):
                name = str(symbol)
                if name.startswith(("observableParameter", "noiseParameter")):
                    continue
                if sbml_model.getElementBySId(name) is None:
                    if name in table_ids:
                        continue
                    raise ValueError(f"petab.load: observable {obs_id!r} uses {name!r}, which is neither an SBML "
                                     "id, a parameter-table id nor an observable/noise placeholder")
                if name not in outputs:
                    outputs.append(name)

    model = sbml.model_from_sbml(sbml_path, outputs=outputs or None, solver=solver, rtol=rtol, atol=atol,
                            max_steps=max_steps)
    plan["sbml_nominal"] = np.asarray(model.parameters.nominal, dtype=np.float64)
    for cid, entries in conditions.items():
        for name in entries:
            if not (name in model.parameters.names or name in model.condition_names or name in model.state_names):
                raise _unsupported(f"condition {cid!r} sets {name!r}, which jcalib.sbml does not expose as a "
                                   "parameter, condition or state")

    # --- simulations: one per (preequilibration, simulation condition) pair ----------------
    measurements = problem.measurement_df.reset_index(drop=True)
    n_rows = len(measurements)
    preeq_column = measurements.get(petab.PREEQUILIBRATION_CONDITION_ID)
    row_preeq = ["" if preeq_column is None or _is_missing(v) else str(v)
                 for v in (preeq_column if preeq_column is not None else [None] * n_rows)]
    row_sim = [str(v) for v in measurements[petab.SIMULATION_CONDITION_ID]]
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    pair_keys = list(dict.fromkeys(zip(row_preeq, row_sim, strict=True)))
    pairs, offset, global_index = [], 0, np.zeros(n_rows, dtype=np.int64)
    for preeq, sim in pair_keys:
        rows = [i for i in range(n_rows) if (row_preeq[i], row_sim[i]) == (preeq, sim)]
        ts = np.unique(times[rows])
        if preeq:
            changed = [name for name in model.condition_names
                       if name in conditions[preeq] and name not in model.state_names
                       and conditions[preeq].get(name) != conditions[sim].get(name)]
            compartments = [name for name in changed if sbml_model.getCompartment(name) is not None]
            if compartments:
                raise _unsupported(f"pre-equilibration condition {preeq!r} changing compartment sizes {compartments}")
        pairs.append({"condition": conditions[sim], "preequilibration": conditions[preeq] if preeq else None,
                      "ts": ts})
        for i in rows:
            global_index[i] = offset + int(np.searchsorted(ts, times[i]))
        offset += ts.size
    plan["pairs"] = pairs
    plan["n_rows"] = n_rows
    plan["row_preeq"] = row_preeq
    plan["measurement"] = measurements[petab.MEASUREMENT].to_numpy(dtype=np.float64)

    # --- per-observable groups of rows, with their formulas as JAX functions ----------------
    transformation_of = {obs_id: ("lin" if _is_missing(v) else v) for obs_id, v in
                         (observable_df[petab.OBSERVABLE_TRANSFORMATION].items()
                          if petab.OBSERVABLE_TRANSFORMATION in observable_df else [])}
    distribution_of = {obs_id: ("normal" if _is_missing(v) else v) for obs_id, v in
                       (observable_df[petab.NOISE_DISTRIBUTION].items()
                        if petab.NOISE_DISTRIBUTION in observable_df else [])}
    row_obs = [str(v) for v in measurements[petab.OBSERVABLE_ID]]
    plan["transform"] = np.array([_TRANSFORMATIONS.index(transformation_of.get(o, "lin")) for o in row_obs],
                                 dtype=np.int32)
    plan["laplace"] = np.array([distribution_of.get(o, "normal") == "laplace" for o in row_obs])
    obs_params = [_split(v) for v in measurements.get(petab.OBSERVABLE_PARAMETERS, [None] * n_rows)]
    noise_params = [_split(v) for v in measurements.get(petab.NOISE_PARAMETERS, [None] * n_rows)]

    def placeholder_spec(rows, per_row, index, kind, obs_id):
        base, refs = np.zeros(len(rows)), {}
        for k, i in enumerate(rows):
            if index >= len(per_row[i]):
                raise ValueError(f"petab.load: measurement row {i} of observable {obs_id!r} gives "
                                 f"{len(per_row[i])} {kind}s; its formulas use {kind}{index + 1}_{obs_id}")
            source = per_row[i][index]
            if isinstance(source, str):
                if source not in table_ids:
                    raise ValueError(f"petab.load: measurement row {i} sets {kind}{index + 1}_{obs_id} to {source!r}, "
                                     "which is not in the parameter table")
                refs.setdefault(source, np.zeros(len(rows)))[k] = 1.0
            else:
                base[k] = source
        return ("rows", (base, refs))

    groups = []
    for obs_id in dict.fromkeys(row_obs):
        if obs_id not in formulas:
            raise ValueError(f"petab.load: measurements of unknown observable {obs_id!r}")
        rows = np.array([i for i in range(n_rows) if row_obs[i] == obs_id], dtype=np.int64)
        group = {"rows": rows, "global_index": global_index[rows]}
        for key, expr in zip(("observable", "noise"), formulas[obs_id], strict=True):
            symbols = sorted(expr.free_symbols, key=str)
            specs = []
            for symbol in symbols:
                name = str(symbol)
                for kind, per_row in (("observableParameter", obs_params), ("noiseParameter", noise_params)):
                    prefix, suffix = kind, f"_{obs_id}"
                    if name.startswith(prefix) and name.endswith(suffix) and name[len(prefix):-len(suffix)].isdigit():
                        index = int(name[len(prefix):-len(suffix)]) - 1
                        specs.append(placeholder_spec(rows, per_row, index, kind, obs_id))
                        break
                else:
                    if name in outputs:
                        specs.append(("output", outputs.index(name)))
                    else:
                        specs.append(("parameter", name))
            group[f"{key}_args"] = specs
            group[f"{key}_fn"] = _jax_function(symbols, expr)
        groups.append(group)
    plan["groups"] = groups
    return PetabProblem(problem, model, plan)


def _jax_function(symbols, expr) -> Callable:
    """A sympy expression as a function of its symbols' (per-row) values, in float64 JAX."""
    fn = sp.lambdify(symbols, expr, modules="jax")

    def wrapped(*args):
        return jnp.asarray(fn(*args), dtype=jnp.float64)

    return wrapped
