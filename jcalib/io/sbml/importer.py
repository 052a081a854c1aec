"""`model_from_sbml`: an SBML file or string to an `SBMLModel`; `stiff_solver`, its default solver."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

import diffrax as dfx
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import sympy as sp

from jcalib.io.sbml.codegen import _generate
from jcalib.io.sbml.events import _events
from jcalib.io.sbml.mathml import _Converter, _symbol
from jcalib.io.sbml.model import SBMLModel
from jcalib.io.sbml.reading import (
    DEFAULT_BOUND_FACTOR,
    _compartment_symbols,
    _conservation_laws,
    _entities,
    _local_parameters,
    _output_ids,
    _parameter_symbols,
    _reactions,
    _read_document,
    _sbml_space,
    _species_symbols,
    _Symbols,
)
from jcalib.model import Experiment, check_solver_settings
from jcalib.rosenbrock import Rodas5P

__all__ = ["STIFF_METHODS", "stiff_solver", "model_from_sbml"]


STIFF_METHODS = ("rodas5p", "kvaerno5")
"""The stiff solvers `stiff_solver` offers: jcalib's Rosenbrock method `jcalib.rosenbrock.Rodas5P`
(the default) and diffrax's implicit ``Kvaerno5``."""


def stiff_solver(rtol: float = 1e-8, atol: float = 1e-10, *, method: str = "rodas5p", newton: bool = False,
                 stage_tolerances: tuple[float, float] | None = None) -> dfx.AbstractSolver:
    """The default solver of SBML models.

    Args:
        rtol, atol: the step controller's tolerances (``kvaerno5`` with ``newton=True`` solves its
            stages to a tenth of them).
        method: ``"rodas5p"`` (default): the Rosenbrock method `jcalib.rosenbrock.Rodas5P`, one
            Jacobian and LU factorisation per step and no stage iterations; ``"kvaerno5"``: diffrax's
            implicit Kvaerno5 with chord stage solves.
        newton: (``kvaerno5`` only) full-Newton stage solves (optimistix.Newton).
        stage_tolerances: (``kvaerno5`` only) the chord method's own stopping tolerances ``(rtol,
            atol)`` instead of the controller's: on Lang_PLOSComputBiol2024 the controller's
            1e-8/1e-10 make the chord iterations fail and reject step after step (100,000 steps do
            not reach t = 1,000), (1e-3, 1e-6) reach it in 785.

    Raises:
        ValueError: an unknown ``method``; ``newton`` or ``stage_tolerances`` with ``rodas5p``; both
            together; stage tolerances that are not two positive numbers.
    """
    if method not in STIFF_METHODS:
        raise ValueError(f"stiff_solver: method must be one of {STIFF_METHODS}; got {method!r}")
    if method == "rodas5p":
        if newton or stage_tolerances is not None:
            raise ValueError("stiff_solver: newton and stage_tolerances set Kvaerno5's stage solves; a Rosenbrock "
                             "method has none (pass method='kvaerno5' to use them)")
        return Rodas5P()
    if newton and stage_tolerances is not None:
        raise ValueError("stiff_solver: give newton=True or stage_tolerances, not both")
    if newton:
        return dfx.Kvaerno5(root_finder=optx.Newton(rtol=rtol / 10, atol=atol / 10))
    if stage_tolerances is not None:
        stage_rtol, stage_atol = (float(v) for v in stage_tolerances)
        if not (stage_rtol > 0 and stage_atol > 0):
            raise ValueError(f"stiff_solver: stage_tolerances must be two positive numbers; got {stage_tolerances}")
        return dfx.Kvaerno5(root_finder=dfx.VeryChord(rtol=stage_rtol, atol=stage_atol))
    return dfx.Kvaerno5()


def model_from_sbml(
    source: str | os.PathLike,
    *,
    outputs: Sequence[str] | None = None,
    ts: Sequence[float] | None = None,
    t0: float = 0.0,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    constant_parameters: Sequence[str] = (),
    bound_factor: float = DEFAULT_BOUND_FACTOR,
    solver: dfx.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 100_000,
) -> SBMLModel:
    """Build a jcalib model from an SBML model (levels 2 and 3, core).

    Args:
        source: path of an SBML file, or the SBML document itself as a string.
        outputs: SBML ids to observe (species, parameters, compartments, assignment-rule
            variables); default: the states (the dynamic species, then the other rate-rule
            variables), in SBML order.
        ts: observation times (default ``t0 + [0, 1, ..., 10]``; `AbstractModel.with_times`
            changes them later).
        t0: start time.
        bounds: ``{parameter id: (lower, upper)}``, overriding the default bounds (module
            docstring, `DEFAULT_BOUND_FACTOR`). A positive lower bound makes the parameter
            log-scale.
        constant_parameters: ids of global parameters that are experiment conditions instead of
            calibrated parameters.
        bound_factor: the factor of the default bounds.
        solver: diffrax solver (default `stiff_solver`: `jcalib.rosenbrock.Rodas5P`).
        rtol, atol: tolerances of the PID step-size controller.
        max_steps: the solver's step budget.

    Returns:
        An `SBMLModel`; its ``parameters`` are the calibrated SBML parameters at their SBML
        values, ``experiment.conditions`` the compartment sizes and initial values.

    Raises:
        ValueError: unreadable SBML; an unsupported feature (the message names it and the SBML
            element, see the module docstring); unknown ids in ``outputs``, ``bounds`` or
            ``constant_parameters``; a symbol without a value; tolerances that are not positive
            finite numbers, a ``max_steps`` that is not a positive integer.

    Example:
        >>> model = model_from_sbml("tests/data/decay.xml")  # doctest: +SKIP
        >>> model.simulate(model.parameters.nominal)  # doctest: +SKIP

    Long for its documented options; the body is 59 lines.
    """
    check_solver_settings("model_from_sbml", controller=dfx.PIDController(rtol=rtol, atol=atol), max_steps=max_steps,
                          **({} if solver is None else {"solver": solver}))
    document = _read_document(source)
    model = document.getModel()
    convert = _Converter(model)
    events = _events(model, convert)
    entities = _entities(model, events, tuple(constant_parameters))
    symbols = _Symbols()
    _compartment_symbols(entities, convert, symbols)
    _parameter_symbols(entities, convert, symbols, tuple(constant_parameters))
    local_renames = _local_parameters(model, entities, symbols)
    _species_symbols(entities, convert, symbols)
    states = symbols.states
    species = entities.species
    # species states first (SBML order), then the other rate-rule variables
    states.sort(key=lambda s: (s not in species, list(species).index(s) if s in species else 0))
    reaction_ids, rate_exprs, stoichiometry = _reactions(model, entities, convert, local_renames, states)
    scale_exprs = [sp.Float(1.0) if s in entities.rules or species.get(s) is None
                   or species[s].getHasOnlySubstanceUnits() else 1 / _symbol(species[s].getCompartment())
                   for s in states]
    rate_rule_exprs = [sp.Float(0.0) if entities.rules.get(s) is None
                       else convert(entities.rules[s], f"rateRule of '{s}'") for s in states]
    outputs = _output_ids(outputs, entities, states)
    space = _sbml_space(symbols.theta, bounds, bound_factor)
    code = _generate(model.getId(), entities, symbols, events, rate_exprs, rate_rule_exprs, scale_exprs, outputs,
                     np.asarray(stoichiometry, dtype=np.float64))
    t_obs = np.asarray(ts, dtype=np.float64) if ts is not None else t0 + np.arange(11.0)
    t1 = float(t_obs.max()) if t_obs.max() > t0 else t0 + 1.0
    experiment = Experiment(t_obs, t0=t0, t1=t1, conditions=symbols.conditions, name=model.getId() or "sbml")
    namespace, events = code["namespace"], code["events"]
    return SBMLModel(
        parameters=space,
        output_names=outputs,
        state_names=tuple(states),
        experiment=experiment,
        solver=stiff_solver(rtol, atol) if solver is None else solver,
        controller=dfx.PIDController(rtol=rtol, atol=atol),
        adjoint=dfx.RecursiveCheckpointAdjoint(),
        dt0=None,
        max_steps=max_steps,
        stoichiometry=jnp.asarray(stoichiometry),
        conservation=jnp.asarray(_conservation_laws(stoichiometry, [e.is_zero is True for e in rate_rule_exprs])),
        condition_names=tuple(symbols.conditions),
        reaction_ids=tuple(reaction_ids),
        source=code["source"],
        _rhs_fn=namespace["rhs"],
        _init_fn=namespace["init"],
        _observe_fn=namespace["observe"],
        _output_fns=tuple(namespace[f"observe_{k}"] for k in range(len(outputs))),
        _jacobian_fn=code["jacobian"],
        event_ids=tuple(e.id for e in events),
        _event_triggers_fn=namespace["event_triggers"],
        _state_events=code["state_events"],
        _event_fns=tuple(namespace[f"event_{k}"] for k in range(len(events))),
        _event_fires_at_t0=tuple(not e.initial_value for e in events),
        switch_conditions=tuple(sorted({re.sub(r"\bt\b", "time", re.sub(r"\b[SC]_", "", str(r)))
                                        for r in code["switches"]})),
        _switch_times_fn=namespace["switch_times"] if code["switch_times"] else None,
    )
