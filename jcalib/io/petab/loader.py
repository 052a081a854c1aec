"""`load`: a PEtab problem's YAML file to a `PetabProblem`."""

from __future__ import annotations

import os

import diffrax as dfx
import numpy as np
import petab.v1 as petab

from jcalib.io.petab.problem import PetabCalibrationProblem, PetabProblem
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
)

__all__ = ["load"]


def load(yaml_path: str | os.PathLike, *, solver: dfx.AbstractSolver | None = None, rtol: float = 1e-8,
         atol: float = 1e-10, max_steps: int = 100_000, validate: bool = True,
         batch_size: int | None = None) -> PetabProblem:
    """Read a PEtab (v1) problem.

    Args:
        yaml_path: the problem's YAML file.
        solver, rtol, atol, max_steps: passed to `jcalib.io.sbml.model_from_sbml`.
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
