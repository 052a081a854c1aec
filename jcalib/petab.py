"""PEtab problems (format version 1) as jcalib objectives.

`load` reads a PEtab problem with the community's ``petab`` package (``petab.v1``), validates it
with ``petab.v1.lint_problem``, builds the SBML model with `jcalib.sbml.model_from_sbml`, and returns a
`PetabProblem`:

- ``pp.problem``: a `PetabCalibrationProblem`, the jcalib problem every method takes
  (Gauss-Newton, multistart, identifiability, MALA/NUTS ...); free = the estimated parameters,
  internal coordinates jcalib's (natural log for PEtab's log and log10 scales);
- ``pp.log_likelihood``, ``pp.chi2``, ``pp.simulation_table``: PEtab's objective as functions
  of the estimated parameters in PEtab's parameter scales (lin, log or log10), as
  ``pp.nominal_internal``; ``pp.to_problem_internal`` maps these to ``pp.problem``'s
  coordinates. The log-likelihood is plain JAX, so ``jax.grad(pp.log_likelihood)`` works.

What becomes what (PEtab v1 semantics):

- one simulation per (pre-equilibration condition, simulation condition) pair of the
  measurement table, from ``t = 0`` to its last measurement time; the simulations with and
  those without pre-equilibration are each solved by one ``jax.lax.map`` (compiled once,
  however many conditions), on time grids padded to the longest: one after the other by
  default (stiff solves of different conditions need different steps; vmapped lanes would run
  in lockstep until the slowest ends), in vmapped batches with ``load(..., batch_size=n)``
  (for accelerators);
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
- measurements at ``t = inf`` (steady-state data): the observables at the steady state the
  simulation reaches from its initial state (after its pre-equilibration, if any), found by
  diffrax's steady-state event; a simulation that reaches none has status NO_STEADY_STATE;
- parameters not in the parameter table keep their SBML values; non-estimated parameters
  their ``nominalValue``.

Not yet supported, refused with a ``ValueError`` that names the PEtab feature: more than one
SBML model, a mapping table, pre-equilibration conditions that change compartment sizes, and
condition-table columns that are not SBML entities. Condition-table parameters with a numeric
initial assignment are conditions of the model (the assignment is their default). Objective
priors (``objectivePriorType`` uniform, normal, logNormal, parameterScaleUniform,
parameterScaleNormal) are ``pp.problem``'s prior, truncated to the
bounds (with laplace priors, ``log_prior`` and ``log_posterior`` raise; the likelihood and
least-squares methods work); without them the prior is uniform on the bounds in the
parameter scale. PEtab's log-likelihood (``pp.log_likelihood``) is without priors.
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
from jaxtyping import Array, ArrayLike, Float
from petab.v1.math import sympify_petab

from jcalib import sbml
from jcalib.model import Setting, SolveStatus, simulate_setting
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import LogNormal, LogUniform, Normal, PriorTruncationWarning, Uniform, bind_priors
from jcalib.problem import AbstractProblem
from jcalib.stacking import map_stacked, padded, stack

__all__ = ["PetabCalibrationProblem", "PetabProblem", "load"]

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


class _Plan(dict):
    """The tables of one PEtab problem as numpy arrays and JAX functions. Hashed by identity,
    so it can be a static field of `PetabCalibrationProblem` (one compilation per problem)."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def _internal_factor(scale: str) -> float:
    """``z_petab = z_jcalib / factor``: jcalib's internal coordinate of a log-scale parameter is
    the natural log, PEtab's log10 scale is ``log10``."""
    return math.log(10.0) if scale == "log10" else 1.0


class PetabCalibrationProblem(AbstractProblem):
    """A PEtab problem as a jcalib `jcalib.problem.AbstractProblem` (``PetabProblem.problem``),
    so every method (Gauss-Newton, multistart, identifiability, MALA/NUTS ...) runs on it.

    Free parameters: the estimated ones of the parameter table, in its order. Internal
    coordinates are jcalib's: the value for ``lin``, the *natural* log for ``log`` and
    ``log10`` (``PetabProblem.to_problem_internal`` converts from PEtab's scales). Bounds are
    the table's; the prior is uniform on them unless the table has objective priors.

    - ``log_likelihood``: PEtab's (normal/laplace, lin/log/log10, normalisation constants);
      -inf when a solve fails.
    - ``residuals``: ``(h(m) - h(y)) / sigma`` per measurement row (data minus model, as
      `CalibrationProblem`); where a noise formula depends on estimated parameters (or on the
      model) one extra residual ``sqrt(log(2 pi sigma^2) + 50)`` per row follows, as AMICI does,
      so that ``0.5 * sum(residuals^2) = -log_likelihood + const`` (normal noise). Laplace
      noise is not least squares: ``residuals`` and ``jacobian`` refuse it.
    """

    model: sbml.SBMLModel
    prior: object | None
    plan: _Plan = eqx.field(static=True)
    space: ParameterSpace = eqx.field(static=True)
    free_names: tuple[str, ...] = eqx.field(static=True)
    factors: tuple[float, ...] = eqx.field(static=True)  # z_jcalib = factor * z_petab

    @property
    def noise_names(self) -> tuple[str, ...]:
        """None sampled: PEtab's noise parameters are ordinary estimated parameters."""
        return ()

    @property
    def noise_prior(self) -> None:
        return None

    @property
    def n_observed(self) -> int:
        return self.plan["n_rows"] * (2 if self.plan["sigma_varies"] else 1)

    @property
    def sigma_available(self) -> bool:
        return True

    @property
    def fixed(self) -> dict[str, float]:
        """``{id: value}`` of the parameter table's non-estimated parameters."""
        return dict(self.plan["fixed_values"])

    def fix(self, values: Mapping[str, float]) -> PetabCalibrationProblem:
        """A new problem with the estimated parameters in ``values`` (physical) fixed too
        (e.g. for a profile likelihood)."""
        if not isinstance(values, Mapping):
            raise ValueError(f"fix(): expected a {{name: value}} dict; got {values!r}")
        for name in values:
            if name not in self.free_names:
                raise ValueError(f"fix(): {name!r} is not an estimated parameter; estimated: "
                                 f"{', '.join(repr(n) for n in self.free_names)}")
        keep = [i for i, n in enumerate(self.free_names) if n not in values]
        if not keep:
            raise ValueError("fix(): fixing every estimated parameter leaves no free parameter")
        plan = _Plan(self.plan)
        plan["fixed_values"] = {**self.plan["fixed_values"], **{n: float(v) for n, v in values.items()}}
        names = tuple(self.free_names[i] for i in keep)
        prior = self.prior if self.prior is None or isinstance(self.prior, _UnsupportedPrior) else bind_priors(
            {n: p for n, p in self.prior.as_dict().items() if n in names}, self.space.subset(names), "PEtab prior")
        return PetabCalibrationProblem(model=self.model, prior=prior, plan=plan, space=self.space.subset(names),
                                       free_names=names, factors=tuple(self.factors[i] for i in keep))

    def forward_mode(self) -> PetabCalibrationProblem:
        """This problem with its model in forward mode (for ``jax.jacfwd`` through the solver)."""
        return eqx.tree_at(lambda p: p.model, self, self.model.forward_mode())

    def solve_status(self, theta_internal: Float[ArrayLike, " n_free"]) -> int:
        """The first simulation's non-SUCCESS `jcalib.model.SolveStatus` code, else SUCCESS."""
        z = self._check(theta_internal)
        if not bool(jnp.all(jnp.isfinite(z))):
            return int(SolveStatus.INVALID_INPUT)
        codes = np.asarray(_jitted_status(self, z))
        bad = codes[codes != SolveStatus.SUCCESS]
        return int(bad[0]) if bad.size else int(SolveStatus.SUCCESS)

    def simulation_table(self, theta_internal: Float[ArrayLike, " n_free"]) -> pd.DataFrame:
        """PEtab simulation table at ``theta_internal`` (see `PetabProblem.simulation_table`)."""
        simulation = np.asarray(_jitted_outputs(self, self._check(theta_internal))[0])
        measurements = self.plan["measurement_df"]
        return pd.DataFrame({
            petab.OBSERVABLE_ID: measurements[petab.OBSERVABLE_ID].to_numpy(),
            petab.SIMULATION_CONDITION_ID: measurements[petab.SIMULATION_CONDITION_ID].to_numpy(),
            petab.PREEQUILIBRATION_CONDITION_ID: list(self.plan["row_preeq"]),
            petab.TIME: measurements[petab.TIME].to_numpy(dtype=np.float64),
            petab.SIMULATION: simulation,
        })

    # --- implementations --------------------------------------------------------------------
    def _parameter_values(self, z) -> dict[str, Array]:
        """Physical values of every parameter-table id."""
        values = {name: jnp.asarray(v, dtype=jnp.float64) for name, v in self.plan["fixed_values"].items()}
        physical = self.space.to_physical(z)
        for i, name in enumerate(self.free_names):
            values[name] = physical[i]
        return values

    def _outputs(self, z):
        """(simulation, sigma, status per simulation) of every measurement row."""
        return _evaluate(self.model, self.plan, self._parameter_values(z))

    def _weighted(self, z):
        """``(h(m) - h(y)) / sigma`` per row, sigma, and the log-likelihood terms."""
        simulation, sigma, _ = self._outputs(z)
        return _likelihood_terms(self.plan, simulation, sigma)

    def _residuals_impl(self, z):
        if np.any(self.plan["laplace"]):
            raise ValueError("PetabCalibrationProblem.residuals: the problem has laplace noise, which is not a "
                             "least-squares problem; use log_likelihood / log_posterior (MALA, NUTS, "
                             "jcalib.estimation.scipy_minimize)")
        residual, sigma, _ = self._weighted(z)
        if not self.plan["sigma_varies"]:
            return residual
        return jnp.concatenate([residual, jnp.sqrt(jnp.log(2.0 * math.pi * sigma ** 2) + _SIGMA_OFFSET)])

    def _jacobian_impl(self, z):
        forward = self.forward_mode()
        return jax.jacfwd(forward._residuals_impl)(z)

    def _log_likelihood_terms(self, z):
        return _forward_differentiated(self, z, method="_log_likelihood_rows")

    def _log_likelihood_rows(self, z):
        return self._weighted(z)[2]


@eqx.filter_custom_jvp
def _forward_differentiated(problem: PetabCalibrationProblem, z, *, method: str):
    """``problem.<method>(z)`` whose derivatives come from forward sensitivities (``jax.jacfwd``
    through the model in forward mode, as AMICI's forward sensitivity analysis), so
    ``jax.grad`` never reverse-differentiates the stiff solver: diffrax's checkpointed
    backward pass through its implicit solvers' Newton iterations can meet non-finite
    operators (lineax then raises) on stiff PEtab models such as Boehm_JProteomeRes2014."""
    return getattr(problem, method)(z)


@_forward_differentiated.def_jvp
def _forward_differentiated_jvp(primals, tangents, *, method: str):
    problem, z = primals
    problem_tangent, dz = tangents
    if jax.tree_util.tree_leaves(problem_tangent):
        raise NotImplementedError("PetabCalibrationProblem: derivatives with respect to the problem's own arrays "
                                  "(the model) are not supported; differentiate with respect to theta_internal")
    forward = problem.forward_mode()

    def both(zz):
        value = getattr(forward, method)(zz)
        return value, value

    jac, value = jax.jacfwd(both, has_aux=True)(z)
    if dz is None:
        return value, jnp.zeros_like(value)
    return value, jnp.tensordot(jac, dz, axes=1)


_SIGMA_OFFSET = 50.0  # AMICI's offset in the sigma residuals sqrt(log(2 pi sigma^2) + offset)


@eqx.filter_jit
def _jitted_status(problem: PetabCalibrationProblem, z):
    return problem._outputs(z)[2]


@eqx.filter_jit
def _jitted_outputs(problem: PetabCalibrationProblem, z):
    """(simulation, residual) per measurement row."""
    simulation, sigma, _ = problem._outputs(z)
    residual, _, _ = _likelihood_terms(problem.plan, simulation, sigma)
    return simulation, residual


@eqx.filter_jit
def _jitted_log_likelihood(problem: PetabCalibrationProblem, z):
    return problem._log_likelihood_impl(z)


class PetabProblem:
    """A PEtab problem (build it with `load`): the jcalib problem and PEtab's own objective.

    Functions of ``z`` take the estimated parameters in PEtab's parameter scales (lin, log,
    log10), as ``nominal_internal``; `problem` (a `PetabCalibrationProblem`) takes jcalib's
    internal coordinates (natural log for log-scale parameters): `to_problem_internal` maps.

    Attributes:
        petab_problem: the ``petab.v1.Problem`` that was read.
        problem: the `PetabCalibrationProblem` (free = estimated parameters).
        model: the `jcalib.sbml.SBMLModel` (its outputs are the SBML ids the formulas use).
        parameter_ids: the estimated parameters, in the order of ``z``.
        scales: their PEtab ``parameterScale`` (lin, log or log10).
        lower, upper: their bounds in PEtab's scales.
        nominal_internal: their nominal values in PEtab's scales.
    """

    def __init__(self, petab_problem, problem: PetabCalibrationProblem, plan: _Plan):
        self.petab_problem = petab_problem
        self.problem = problem
        self.model = problem.model
        self.parameter_ids: tuple[str, ...] = problem.free_names
        self.scales: tuple[str, ...] = plan["scales"]
        self.lower = jnp.asarray(plan["lower"])
        self.upper = jnp.asarray(plan["upper"])
        self.nominal_internal = jnp.asarray(plan["nominal_internal"])
        self._factors = jnp.asarray(problem.factors)

    def to_problem_internal(self, z: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """PEtab parameter scales -> ``problem``'s internal coordinates (log10 values times ln 10)."""
        return jnp.asarray(z, dtype=jnp.float64) * self._factors

    def from_problem_internal(self, theta_internal: Float[ArrayLike, "... n_params"]
                              ) -> Float[Array, "... n_params"]:
        """``problem``'s internal coordinates -> PEtab parameter scales."""
        return jnp.asarray(theta_internal, dtype=jnp.float64) / self._factors

    def to_physical(self, z: Float[ArrayLike, " n_params"]) -> Float[Array, " n_params"]:
        """Estimated parameters from PEtab's scales to physical values."""
        return self.problem.to_physical(self.to_problem_internal(z))

    def log_likelihood(self, z: Float[ArrayLike, " n_params"]) -> Float[Array, ""]:
        """PEtab's log-likelihood (with normalisation constants, without priors); -inf when a
        solve fails."""
        return _jitted_log_likelihood(self.problem, self.to_problem_internal(self._check(z)))

    def chi2(self, z: Float[ArrayLike, " n_params"]) -> Float[Array, ""]:
        """Sum of squared weighted residuals, ``((h(y) - h(m)) / sigma)^2`` with the observable
        transformation ``h``."""
        return jnp.sum(self._evaluate(z)[1] ** 2)

    def simulate(self, z: Float[ArrayLike, " n_params"]) -> Float[Array, " n_measurements"]:
        """The simulated observables, one per measurement row (untransformed)."""
        return self._evaluate(z)[0]

    def simulation_table(self, z: Float[ArrayLike, " n_params"]) -> pd.DataFrame:
        """PEtab simulation table: observableId, simulationConditionId,
        preequilibrationConditionId, time, simulation (one row per measurement row)."""
        return self.problem.simulation_table(self.to_problem_internal(z))

    def _check(self, z):
        z = jnp.asarray(z, dtype=jnp.float64)
        if z.shape != (len(self.parameter_ids),):
            raise ValueError(f"PetabProblem: z must have shape ({len(self.parameter_ids)},) (the estimated "
                             f"parameters {', '.join(self.parameter_ids)}); got {z.shape}")
        return z

    def _evaluate(self, z):
        return _jitted_outputs(self.problem, self.to_problem_internal(self._check(z)))


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


def _pair_groups(pairs: list[dict], times: np.ndarray, n_rows: int) -> tuple[list[dict], np.ndarray]:
    """The simulations in (at most) two groups, without and with pre-equilibration, each solved
    in one vmap (one compilation however many conditions), on time grids padded to the group's
    longest by repeating the last time, plus one slot for the steady state where a member has
    measurements at ``t = inf``; and each measurement row's index into the stacked
    ``(pairs x slots)`` outputs of the groups."""
    groups, offset, global_index = [], 0, np.zeros(n_rows, dtype=np.int64)
    for with_preequilibration in (False, True):
        members = [p for p in pairs if (p["preequilibration"] is not None) == with_preequilibration]
        if not members:
            continue
        n_times = max(p["ts"].size for p in members)
        steady = any(p["steady"] for p in members)
        n_slots = n_times + steady
        ts = np.stack([padded(p["ts"], n_times) for p in members])
        for k, pair in enumerate(members):
            for i in pair["rows"]:
                slot = n_times if np.isinf(times[i]) else int(np.searchsorted(pair["ts"], times[i]))
                global_index[i] = offset + k * n_slots + slot
        groups.append({"pairs": members, "ts": ts, "steady": steady,
                       "t1": np.array([max(p["ts"].max(), 0.0) or 1.0 for p in members])})
        offset += len(members) * n_slots
    return groups, global_index


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
    in batches of ``plan["batch_size"]``)."""
    settings = [_setting_arrays(model, plan, pair["condition"], values) for pair in group["pairs"]]
    pre = [None if pair["preequilibration"] is None else
           _setting_arrays(model, plan, pair["preequilibration"], values) for pair in group["pairs"]]
    preequilibration = None if pre[0] is None else stack(pre)
    t0 = jnp.asarray(0.0)

    def solve(x):
        main, before, ts, t1 = x
        return simulate_setting(model, main, before, t0, t1, ts, steady=group["steady"])

    xs = (stack(settings), preequilibration, jnp.asarray(group["ts"]), jnp.asarray(group["t1"]))
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
    """``(h(m) - h(y)) / sigma``, sigma, and the log-likelihood of each measurement row."""
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
    residual = (h_m - h_y) / sigma
    llh_normal = -0.5 * jnp.log(2.0 * math.pi * sigma ** 2) - 0.5 * residual ** 2
    llh_laplace = -jnp.log(2.0 * sigma) - jnp.abs(residual)
    llh = jnp.where(laplace, llh_laplace, llh_normal) + log_jacobian
    return residual, sigma, llh


def _check_tables(problem) -> None:
    if getattr(problem, "mapping_df", None) is not None and len(problem.mapping_df):
        raise _unsupported("the mapping table")
    measurements = problem.measurement_df
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    if np.any(np.isnan(times) | (times == -np.inf)):
        raise _unsupported("measurement times that are NaN or -inf")
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
         atol: float = 1e-10, max_steps: int = 100_000, validate: bool = True,
         batch_size: int | None = None) -> PetabProblem:
    """Read a PEtab (v1) problem.

    Args:
        yaml_path: the problem's YAML file.
        solver, rtol, atol, max_steps: passed to `jcalib.sbml.model_from_sbml`.
        validate: run ``petab.v1.lint_problem`` first.
        batch_size: solve this many simulations at once (vmapped; suits GPUs); default: one
            after the other in one compiled loop (on CPUs: stiff lanes of a vmap run in
            lockstep, Fujita_SciSignal2010's 6 conditions took 9.3 s vmapped, 0.2 s in turn).

    Returns:
        A `PetabProblem`.

    Raises:
        ValueError: the problem does not pass PEtab's linter, or uses an unsupported feature
            (the message names it; see the module docstring).

    Example:
        >>> pp = load("path/to/problem.yaml")  # doctest: +SKIP
        >>> pp.log_likelihood(pp.nominal_internal)  # doctest: +SKIP
    """
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"petab.load: batch_size must be a positive int or None; got {batch_size!r}")
    problem, sbml_path = _read(yaml_path, validate)
    sbml_model = problem.model.sbml_model
    parameters = problem.parameter_df
    estimated = parameters[parameters[petab.ESTIMATE] == 1]
    table_ids = set(parameters.index)
    conditions = _conditions(problem.condition_df, sbml_model, table_ids)
    formulas, outputs = _formulas(problem.observable_df, sbml_model, table_ids)
    model = _model(sbml_path, sbml_model, conditions, outputs,
                   dict(solver=solver, rtol=rtol, atol=atol, max_steps=max_steps))
    measurements = problem.measurement_df.reset_index(drop=True)
    pairs, times, row_preeq = _simulation_pairs(measurements, conditions, model, sbml_model)
    pair_groups, global_index = _pair_groups(pairs, times, len(measurements))
    groups = _row_groups(measurements, formulas, outputs, global_index, table_ids)
    plan = _Plan({
        **_estimated(estimated),
        "fixed_values": {pid: float(row[petab.NOMINAL_VALUE]) for pid, row in parameters.iterrows()
                         if row[petab.ESTIMATE] != 1},
        "sbml_nominal": np.asarray(model.parameters.nominal, dtype=np.float64),
        "pair_groups": pair_groups,
        "n_rows": len(measurements),
        "batch_size": batch_size,
        "row_preeq": row_preeq,
        "measurement": measurements[petab.MEASUREMENT].to_numpy(dtype=np.float64),
        **_noise_model(problem.observable_df, measurements),
        "groups": groups,
        "sigma_varies": _sigma_varies(groups, set(estimated.index)),
        "measurement_df": measurements,
    })
    space = _space(estimated)
    calibration = PetabCalibrationProblem(
        model=model, prior=_priors(estimated, space), plan=plan, space=space, free_names=space.names,
        factors=tuple(_internal_factor(s) for s in plan["scales"]))
    return PetabProblem(problem, calibration, plan)


# --- the steps of load ----------------------------------------------------------------------
def _read(yaml_path, validate: bool):
    """The ``petab.v1.Problem`` (linted and checked by `_check_tables`) and its SBML file's path."""
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
    return problem, os.path.join(os.path.dirname(path), problems[0]["sbml_files"][0])


def _scaled(value: float, scale: str) -> float:
    """A physical value in a PEtab scale; a log-scale 0 (a nominal value "switched off") is -inf."""
    if scale != "lin" and value == 0.0:
        return -math.inf
    return value if scale == "lin" else math.log(value) if scale == "log" else math.log10(value)


def _estimated(estimated: pd.DataFrame) -> dict:
    """The estimated parameters' ids, scales, and bounds and nominal values in those scales."""
    scales = tuple(estimated[petab.PARAMETER_SCALE])

    def column(name):
        return np.array([_scaled(float(v), s) for v, s in zip(estimated[name], scales, strict=True)])

    return {"parameter_ids": tuple(estimated.index), "scales": scales, "lower": column(petab.LOWER_BOUND),
            "upper": column(petab.UPPER_BOUND), "nominal_internal": column(petab.NOMINAL_VALUE)}


def _conditions(condition_df: pd.DataFrame, sbml_model, table_ids: set) -> dict[str, dict[str, float | str]]:
    """``{condition id: {SBML id: number or parameter id}}`` without the missing entries."""
    conditions = {}
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
    return conditions


def _formulas(observable_df: pd.DataFrame, sbml_model, table_ids: set) -> tuple[dict, list[str]]:
    """``{observable id: (observable formula, noise formula)}`` as sympy expressions, and the
    SBML ids they read (the model's outputs)."""
    formulas, outputs = {}, []
    for obs_id, row in observable_df.iterrows():
        pair = (sympify_petab(row[petab.OBSERVABLE_FORMULA]), sympify_petab(row.get(petab.NOISE_FORMULA, 1.0)))
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
    return formulas, outputs


def _model(sbml_path: str, sbml_model, conditions: dict, outputs: list[str], options: dict) -> sbml.SBMLModel:
    """The SBML model observing ``outputs``; parameters with a numeric initial assignment that
    conditions set are conditions of the model. Every condition entry must be a parameter,
    condition or state of it."""
    assigned = {ia.getSymbol() for ia in sbml_model.getListOfInitialAssignments()}
    overridden = sorted({name for entries in conditions.values() for name in entries
                         if name in assigned and sbml_model.getParameter(name) is not None})
    model = sbml.model_from_sbml(sbml_path, outputs=outputs or None, constant_parameters=overridden, **options)
    for cid, entries in conditions.items():
        for name in entries:
            if not (name in model.parameters.names or name in model.condition_names or name in model.state_names):
                raise _unsupported(f"condition {cid!r} sets {name!r}, which jcalib.sbml does not expose as a "
                                   "parameter, condition or state")
    return model


def _simulation_pairs(measurements: pd.DataFrame, conditions: dict, model, sbml_model):
    """One simulation per (pre-equilibration, simulation condition) pair of the measurement
    table: its conditions, finite time grid, whether it has ``t = inf`` data, and its rows;
    plus every row's time and pre-equilibration condition id ("" for none)."""
    n_rows = len(measurements)
    preeq_column = measurements.get(petab.PREEQUILIBRATION_CONDITION_ID)
    row_preeq = ["" if preeq_column is None or _is_missing(v) else str(v)
                 for v in (preeq_column if preeq_column is not None else [None] * n_rows)]
    row_sim = [str(v) for v in measurements[petab.SIMULATION_CONDITION_ID]]
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    pairs = []
    for preeq, sim in dict.fromkeys(zip(row_preeq, row_sim, strict=True)):
        rows = [i for i in range(n_rows) if (row_preeq[i], row_sim[i]) == (preeq, sim)]
        if preeq:
            changed = [name for name in model.condition_names
                       if name in conditions[preeq] and name not in model.state_names
                       and conditions[preeq].get(name) != conditions[sim].get(name)]
            compartments = [name for name in changed if sbml_model.getCompartment(name) is not None]
            if compartments:
                raise _unsupported(f"pre-equilibration condition {preeq!r} changing compartment sizes {compartments}")
        finite = np.unique(times[rows][np.isfinite(times[rows])])
        pairs.append({"condition": conditions[sim], "preequilibration": conditions[preeq] if preeq else None,
                      "ts": finite if finite.size else np.zeros(1), "steady": bool(np.any(np.isinf(times[rows]))),
                      "rows": rows})
    if model.event_ids and (any(p["steady"] for p in pairs) or any(p["preequilibration"] is not None for p in pairs)):
        raise _unsupported(f"steady states (pre-equilibration or t = inf data) of a model with events "
                           f"{list(model.event_ids)}: the steady-state solve does not apply events")
    return pairs, times, row_preeq


def _noise_model(observable_df: pd.DataFrame, measurements: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per measurement row: the observable ``transform`` (index into ``_TRANSFORMATIONS``)
    and whether the noise is ``laplace``."""
    def per_observable(column, default):
        if column not in observable_df:
            return {}
        return {obs_id: default if _is_missing(v) else v for obs_id, v in observable_df[column].items()}

    transformation_of = per_observable(petab.OBSERVABLE_TRANSFORMATION, "lin")
    distribution_of = per_observable(petab.NOISE_DISTRIBUTION, "normal")
    row_obs = [str(v) for v in measurements[petab.OBSERVABLE_ID]]
    return {"transform": np.array([_TRANSFORMATIONS.index(transformation_of.get(o, "lin")) for o in row_obs],
                                  dtype=np.int32),
            "laplace": np.array([distribution_of.get(o, "normal") == "laplace" for o in row_obs])}


def _placeholder_spec(rows, per_row, index: int, kind: str, obs_id: str, table_ids: set):
    """``("rows", (base, {parameter id: mask}))``: a placeholder's value per row, a number
    or a parameter (`_row_values`)."""
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


def _row_groups(measurements: pd.DataFrame, formulas: dict, outputs: list[str], global_index: np.ndarray,
                table_ids: set) -> list[dict]:
    """The measurement rows per observable, each group with its rows, their index into the
    simulations' outputs, and its observable and noise formulas as JAX functions with the
    specs of their arguments (model outputs, placeholders, parameters)."""
    n_rows = len(measurements)
    row_obs = [str(v) for v in measurements[petab.OBSERVABLE_ID]]
    placeholders = {kind: [_split(v) for v in measurements.get(column, [None] * n_rows)] for kind, column in
                    (("observableParameter", petab.OBSERVABLE_PARAMETERS), ("noiseParameter", petab.NOISE_PARAMETERS))}
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
                for kind, per_row in placeholders.items():
                    prefix, suffix = kind, f"_{obs_id}"
                    if name.startswith(prefix) and name.endswith(suffix) and name[len(prefix):-len(suffix)].isdigit():
                        index = int(name[len(prefix):-len(suffix)]) - 1
                        specs.append(_placeholder_spec(rows, per_row, index, kind, obs_id, table_ids))
                        break
                else:
                    specs.append(("output", outputs.index(name)) if name in outputs else ("parameter", name))
            group[f"{key}_args"] = specs
            group[f"{key}_fn"] = _jax_function(symbols, expr)
        groups.append(group)
    return groups


def _sigma_varies(groups: list[dict], estimated_ids: set) -> bool:
    """Whether a noise formula depends on the model or on an estimated parameter."""
    def varies(spec) -> bool:
        kind, item = spec
        if kind == "output":
            return True
        if kind == "rows":
            return any(name in estimated_ids for name in item[1])
        return item in estimated_ids

    return any(varies(spec) for group in groups for spec in group["noise_args"])


def _space(estimated: pd.DataFrame) -> ParameterSpace:
    """The estimated parameters as jcalib parameters (log-scale for PEtab's log and log10)."""
    parameters = []
    for pid, row in estimated.iterrows():
        scale = row[petab.PARAMETER_SCALE]
        lower, upper = float(row[petab.LOWER_BOUND]), float(row[petab.UPPER_BOUND])
        if scale == "lin" and math.isfinite(lower) != math.isfinite(upper):
            raise _unsupported(f"a lin-scale estimated parameter with one infinite bound ({pid!r})")
        nominal = float(row[petab.NOMINAL_VALUE])
        if not lower <= nominal <= upper:  # e.g. 0 on a log scale; PEtab's linter lets it pass
            inside = min(max(nominal, lower), upper)
            warnings.warn(f"petab.load: the nominal value {nominal} of {pid!r} lies outside its bounds [{lower}, "
                          f"{upper}]; pp.problem's default start uses {inside} (pp.nominal_internal keeps "
                          f"{nominal})", stacklevel=3)
            nominal = inside
        try:
            parameters.append(Parameter(str(pid), nominal, lower, upper, log_scale=scale != "lin"))
        except ValueError as error:
            raise ValueError(f"petab.load: parameter-table row {pid!r}: {error}") from None
    return ParameterSpace(parameters)


class _UnsupportedPrior(eqx.Module):
    """The prior of a problem whose objective priors jcalib cannot represent: the likelihood,
    residuals and least-squares methods work; the prior density refuses (it would be another
    prior)."""

    feature: str = eqx.field(static=True)

    def log_prob_internal(self, theta_internal):
        raise ValueError(f"PetabCalibrationProblem.log_prior: unsupported PEtab feature: {self.feature}; the "
                         "likelihood and least-squares methods work, priors and posteriors do not")


_PRIOR_TYPES = ("parameterScaleUniform", "parameterScaleNormal", "uniform", "normal", "logNormal")


def _priors(estimated: pd.DataFrame, space: ParameterSpace):
    """PEtab's objective priors as jcalib priors (truncated to the bounds), None when the table
    has none (uniform on the bounds in the parameter scale, jcalib's default)."""
    column = petab.OBJECTIVE_PRIOR_TYPE
    if column not in estimated:
        return None
    priors = {}
    for pid, row in estimated.iterrows():
        kind = row[column]
        if _is_missing(kind):
            continue
        if kind not in _PRIOR_TYPES:
            return _UnsupportedPrior(f"objectivePriorType {kind!r} (parameter {pid!r}); supported: {_PRIOR_TYPES}")
        values = [float(v) for v in _split(row.get(petab.OBJECTIVE_PRIOR_PARAMETERS))]
        if len(values) != 2:
            raise ValueError(f"petab.load: parameter {pid!r}: objectivePriorParameters must be two numbers "
                             f"'a;b'; got {row.get(petab.OBJECTIVE_PRIOR_PARAMETERS)!r}")
        a, b = values
        scale = row[petab.PARAMETER_SCALE]
        factor = _internal_factor(scale)
        if kind == "uniform" or (kind == "parameterScaleUniform" and scale == "lin"):
            priors[str(pid)] = Uniform(a, b)
        elif kind == "parameterScaleUniform":
            priors[str(pid)] = LogUniform(math.exp(a * factor), math.exp(b * factor))
        elif kind == "normal" or (kind == "parameterScaleNormal" and scale == "lin"):
            priors[str(pid)] = Normal(a, b)
        elif kind == "parameterScaleNormal":
            priors[str(pid)] = LogNormal(a * factor, b * factor)
        else:
            priors[str(pid)] = LogNormal(a, b)
    if not priors:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PriorTruncationWarning)  # PEtab's priors are truncated by design
        return bind_priors(priors, space, "PEtab objective prior")


def _jax_function(symbols, expr) -> Callable:
    """A sympy expression as a function of its symbols' (per-row) values, in float64 JAX."""
    fn = sp.lambdify(symbols, expr, modules="jax")

    def wrapped(*args):
        return jnp.asarray(fn(*args), dtype=jnp.float64)

    return wrapped
