"""PEtab problems (format version 1) as jcalib objectives.

`load` reads a PEtab problem with the community's ``petab`` package (``petab.v1``), validates it
with ``petab.v1.lint_problem``, builds the SBML model with `jcalib.io.sbml.model_from_sbml`, and returns a
`PetabProblem`:

- ``pp.problem``: a `PetabCalibrationProblem`, the jcalib problem every method takes
  (Gauss-Newton, multistart, identifiability, MALA/NUTS ...); free = the estimated parameters,
  internal coordinates jcalib's (natural log for PEtab's log and log10 scales);
- ``pp.log_likelihood``, ``pp.chi2``, ``pp.simulation_table``: PEtab's objective as functions
  of the estimated parameters in PEtab's parameter scales (lin, log or log10), as
  ``pp.nominal_internal``; ``pp.to_problem_internal`` maps these to ``pp.problem``'s
  coordinates. The log-likelihood is plain JAX, so ``jax.grad(pp.log_likelihood)`` works (in
  reverse mode through the solver with the default Rosenbrock solver, else by forward
  sensitivities: ``load(..., gradient=)``).

What becomes what (PEtab v1 semantics):

- one simulation per (pre-equilibration condition, simulation condition) pair of the
  measurement table, from ``t = 0`` to its last measurement time; the simulations with and
  those without pre-equilibration are each solved by one ``jax.lax.map`` (compiled once,
  however many conditions), on time grids padded to the longest (each pre-equilibration condition
  solved once for all the simulations that start from it): one after the other by
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
parameter scale. PEtab's log-likelihood (``pp.log_likelihood``) is without priors."""

from jcalib.io.petab.loader import load
from jcalib.io.petab.problem import PetabCalibrationProblem, PetabProblem

__all__ = ["PetabCalibrationProblem", "PetabProblem", "load"]
