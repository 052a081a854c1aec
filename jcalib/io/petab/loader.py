"""`load`: a PEtab problem's YAML file to a `PetabProblem`."""

from __future__ import annotations

import os

import diffrax as dfx
import jax.numpy as jnp
import numpy as np
import petab.v1 as petab

from jcalib.io.petab.problem import PetabCalibrationProblem, PetabProblem
from jcalib.io.petab.simulation import _args
from jcalib.io.petab.tables import (
    _conditions,
    _estimated,
    _formulas,
    _internal_factor,
    _model,
    _noise_model,
    _pair_groups,
    _Plan,
    _priors,
    _read,
    _row_groups,
    _sigma_varies,
    _simulation_pairs,
    _space,
    _used_outputs,
)
from jcalib.rosenbrock import Rodas5P

__all__ = ["GRADIENT_MODES", "load"]


def _row(measurements, i: int) -> str:
    """A measurement row in words: its number (1 = the first data row) and what it measures."""
    row = measurements.iloc[i]
    return (f"measurement table row {i + 1} (observable {row[petab.OBSERVABLE_ID]!r}, condition "
            f"{row[petab.SIMULATION_CONDITION_ID]!r}, time {row[petab.TIME]})")


def _check_rows(plan: _Plan, measurements) -> None:
    """Refuse rows that no simulation can match: a non-finite measurement, a time that is NaN or
    before ``t = 0``, and a noise level fixed by the tables (no model output or estimated
    parameter in its formula) that is not a positive finite number."""
    values = plan["measurement"]
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    for i in range(len(values)):
        if not np.isfinite(values[i]):
            raise ValueError(f"petab.load: {_row(measurements, i)}: the measurement {values[i]} is not a finite number")
        if np.isnan(times[i]) or times[i] < 0:
            raise ValueError(f"petab.load: {_row(measurements, i)}: the time {times[i]} is before the simulations' "
                             "start t = 0 (PEtab simulations start at 0; measure from there)")
    fixed = {name: jnp.asarray(v) for name, v in plan["fixed_values"].items()}
    for group in plan["groups"]:
        if any(kind == "output" or (kind == "parameter" and item not in fixed)
               or (kind == "rows" and set(item[1]) - set(fixed)) for kind, item in group["noise_args"]):
            continue  # the noise level depends on the model or on estimated parameters: checked where evaluated
        n_rows = int(group["rows"].size)
        sigma = np.broadcast_to(np.asarray(group["noise_fn"](*_args(group["noise_args"], jnp.zeros((n_rows, 0)),
                                                                        fixed)), dtype=np.float64), (n_rows,))
        bad = np.flatnonzero(~(np.isfinite(sigma) & (sigma > 0)))
        if bad.size:
            i = int(group["rows"][bad[0]])
            raise ValueError(f"petab.load: {_row(measurements, i)}: the noise level (noiseFormula with its "
                             f"noiseParameters) is {sigma[bad[0]]}; it must be a positive finite number")


GRADIENT_MODES = ("auto", "reverse", "forward")


def _gradient_mode(gradient: str, model) -> str:
    """``"reverse"`` or ``"forward"`` (see `load`)."""
    if gradient != "auto":
        return gradient
    return "reverse" if isinstance(model.solver, Rodas5P) and not model._state_events else "forward"


def load(yaml_path: str | os.PathLike, *, solver: dfx.AbstractSolver | None = None, rtol: float = 1e-8,
         atol: float = 1e-10, max_steps: int = 100_000, validate: bool = True,
         batch_size: int | None = None, gradient: str = "auto") -> PetabProblem:
    """Read a PEtab (v1) problem.

    Args:
        yaml_path: the problem's YAML file.
        solver, rtol, atol, max_steps: passed to `jcalib.io.sbml.model_from_sbml`.
        validate: run ``petab.v1.lint_problem`` first.
        batch_size: solve this many simulations at once (vmapped; suits GPUs); default: one
            after the other in one compiled loop (on CPUs: stiff lanes of a vmap run in
            lockstep, Fujita_SciSignal2010's 6 conditions took 9.3 s vmapped, 0.2 s in turn).
        gradient: how the log-likelihood is differentiated: ``"reverse"`` (reverse mode through
            the solver along the steps it took, `jcalib.solve`: the cost of a few simulations
            however many parameters), ``"forward"`` (forward sensitivities, one tangent per
            estimated parameter, as AMICI's forward mode) or ``"auto"`` (default): reverse with the
            Rosenbrock solver `jcalib.rosenbrock.Rodas5P` (linear algebra only), forward with
            other solvers (reverse mode through implicit stage solves can meet non-finite
            operators on stiff models) and for models with state-dependent events (their
            restarts have no reverse mode). Residual Jacobians (least squares) are always
            forward.

    Returns:
        A `PetabProblem`.

    Raises:
        ValueError: the problem does not pass PEtab's linter, or uses an unsupported feature
            (the message names it; see the module docstring); a measurement that is not a
            finite number, a time before the simulations' start ``t = 0`` (or NaN), a noise
            level that does not depend on estimated parameters or the model and is not a
            positive finite number (each names the measurement table's row).

    Example:
        >>> pp = load("path/to/problem.yaml")  # doctest: +SKIP
        >>> pp.log_likelihood(pp.nominal_internal)  # doctest: +SKIP
    """
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"petab.load: batch_size must be a positive int or None; got {batch_size!r}")
    if gradient not in GRADIENT_MODES:
        raise ValueError(f"petab.load: gradient must be one of {', '.join(map(repr, GRADIENT_MODES))}; "
                         f"got {gradient!r}")
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
    _used_outputs(pair_groups, groups, len(model.output_names))
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
        "gradient": _gradient_mode(gradient, model),
    })
    _check_rows(plan, measurements)
    space = _space(estimated)
    calibration = PetabCalibrationProblem(
        model=model, prior=_priors(estimated, space), plan=plan, space=space, free_names=space.names,
        factors=tuple(_internal_factor(s) for s in plan["scales"]))
    return PetabProblem(problem, calibration, plan)
