"""`PetabCalibrationProblem` (the jcalib problem contract over a PEtab problem) and `PetabProblem` (PEtab's
objective in PEtab's parameter scales, and the simulation table)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import petab.v1 as petab
from jaxtyping import Array, ArrayLike, Float

from jcalib.io import sbml
from jcalib.io.petab.simulation import _evaluate, _likelihood_terms
from jcalib.io.petab.tables import _Plan, _UnsupportedPrior
from jcalib.model import SolveStatus
from jcalib.parameters import ParameterSpace
from jcalib.probability.priors import bind_priors
from jcalib.problems import AbstractProblem

__all__ = ["PetabCalibrationProblem", "PetabProblem"]


class PetabCalibrationProblem(AbstractProblem):
    """A PEtab problem as a jcalib `jcalib.problems.AbstractProblem` (``PetabProblem.problem``),
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

    Derivatives of the log-likelihood: reverse or forward mode, as `jcalib.io.petab.load`'s
    ``gradient`` chose; the residuals' Jacobian: forward sensitivities.
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

    def why_not_finite(self, theta_internal: Float[ArrayLike, " n_free"]) -> str | None:
        """Why the log-likelihood at ``theta_internal`` is not finite, in words; None where it
        is. The first simulation that failed (its condition and `jcalib.model.SolveStatus` by
        name), else the first measurement row whose log-likelihood is not finite, with its
        measurement, simulation and noise level (a noise level that is not positive, or a term
        that overflows)."""
        z = self._check(theta_internal)
        measurements, preeq = self.plan["measurement_df"], self.plan["row_preeq"]
        pairs = [pair for group in self.plan["pair_groups"] for pair in group["pairs"]]
        simulation, sigma, llh, statuses = (np.asarray(a) for a in _jitted_rows(self, z))  # one solve
        for code, pair in zip(statuses, pairs):
            if code != SolveStatus.SUCCESS:
                first = pair["rows"][0]
                before = f" after pre-equilibration under {preeq[first]!r}" if preeq[first] else ""
                return (f"the simulation of condition {measurements.iloc[first][petab.SIMULATION_CONDITION_ID]!r}"
                        f"{before} failed: {SolveStatus(int(code)).name}")
        bad = np.flatnonzero(~np.isfinite(llh))
        if not bad.size:
            return None
        i = int(bad[0])
        row = measurements.iloc[i]
        what = (f"measurement table row {i + 1} (observable {row[petab.OBSERVABLE_ID]!r}, condition "
                f"{row[petab.SIMULATION_CONDITION_ID]!r}, time {row[petab.TIME]}): measurement "
                f"{self.plan['measurement'][i]:g}, simulation {simulation[i]:g}, noise level {sigma[i]:g}")
        cause = ("the noise level must be positive" if not sigma[i] > 0 else
                 "the simulation is not positive under a log transformation" if not simulation[i] > 0
                 and self.plan["transform"][i] else "its log-likelihood term overflows")
        return f"{what}: {cause}"

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
        if self.plan["gradient"] == "reverse":
            return self._log_likelihood_rows(z)
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
def _jitted_rows(problem: PetabCalibrationProblem, z):
    """(simulation, sigma, log-likelihood) per measurement row and the status of each simulation."""
    simulation, sigma, statuses = problem._outputs(z)
    return simulation, sigma, _likelihood_terms(problem.plan, simulation, sigma)[2], statuses


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
        model: the `jcalib.io.sbml.SBMLModel` (its outputs are the SBML ids the formulas use).
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
