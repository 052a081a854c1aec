"""SBML models (levels 2 and 3, core) as jcalib models.

`model_from_sbml` reads an SBML file or string with ``python-libsbml``, converts its MathML with
``sbmlmath`` to sympy, and prints the sympy expressions as JAX code (sympy's own
``JaxPrinter``); the result is an `SBMLModel`, an `AbstractModel` like any built-in one.

Symbols and units. Every SBML symbol has the value SBML gives it: species are concentrations
(amount / compartment size) unless ``hasOnlySubstanceUnits`` is true, then amounts; kinetic
laws are extensive (substance / time), so for a concentration species
``d[S]/dt = sum_j N_sj v_j / V`` and for an amount species ``dS/dt = sum_j N_sj v_j``. The
vector field is built as array operations: the reaction rates ``v`` (one vector), then
``(N @ v) * scale + rate_rules`` with the stoichiometric matrix ``N``, ``scale = 1/V`` or 1
per state, and the rate-rule derivatives; its size grows linearly with the model.

What becomes what:

- constant global parameters (and the local parameters of kinetic laws, renamed
  ``<reactionId>_<parameterId>``) are the calibrated parameters ``theta``, nominal = the SBML
  value; ``constant_parameters`` moves some of them to the experiment's conditions instead;
- compartment sizes, species initial values (as written: ``initialAmount`` or
  ``initialConcentration``) and the initial values of rate-rule variables are
  ``experiment.conditions``, keyed by their SBML ids (arrays: new values never recompile);
- states: species that are neither constant, boundary nor set by an assignment rule, and all
  targets of rate rules;
- assignment rules, initial assignments, function definitions and piecewise expressions are
  evaluated in the generated code (in dependency order).

Default bounds: a parameter with nominal ``v > 0`` gets ``[v / 1e3, v * 1e3]`` on a log scale
(`DEFAULT_BOUND_FACTOR`), ``v < 0`` gets ``[v * 1e3, v / 1e3]`` (linear) and ``v = 0`` gets
``[0, 1]`` (linear); pass ``bounds={id: (lower, upper)}`` for anything else.

Default solver: most SBML models of biology are stiff, so `model_from_sbml` uses jcalib's
Rosenbrock method `jcalib.rosenbrock.Rodas5P` (one Jacobian and LU factorisation per step, no
stage iterations) with ``PIDController(rtol=1e-8, atol=1e-10)`` (the tolerances of the built-in
models) and ``max_steps=100_000`` (`stiff_solver`); change them with the arguments or
`AbstractModel.with_solver`. ``stiff_solver(method="kvaerno5")`` gives diffrax's implicit
``Kvaerno5`` instead, with the chord method for its stage equations, full Newton
(``newton=True``, ``optimistix.Newton``: fewer rejected steps, less accurate forward-mode
derivatives) or the chord method with its own stopping tolerances (``stage_tolerances=(rtol,
atol)``, for models whose chord iterations fail at the controller's tolerances).

Events: those triggered at a time ``T`` (``time >= T``, ``T`` a constant or an expression of
parameters and conditions; Smith_BMCSystBiol2013's insulin pulses) restart the solver at ``T``
after their assignments; other triggers (one comparison that depends on the state, e.g.
Liu_IFACPapersOnLine2025's ``U < 1e-8``) are located by diffrax's event root finding and the
solver restarts there (at most `MAX_EVENT_RESTARTS` times; forward-mode derivatives only).
Event targets (species, non-constant parameters) become states with zero derivative; see
`SBMLModel.integrate`.

Not supported, each refused with a ``ValueError`` that names the feature and the SBML element:
events with delays, triggers other than one comparison, time and state-dependent events in one
model, algebraic rules, ``delay``, ``rateOf``, fast reactions, non-constant compartments
(rules on compartments), variable stoichiometry (``stoichiometryMath`` or rules on species
references), conversion factors, reactions without kinetic laws, and SBML packages
(``fbc`` ...) that change the model's meaning; hierarchical models (``comp``) are flattened by
libsbml's CompFlatteningConverter first."""

from jcalib.io.sbml.importer import STIFF_METHODS, model_from_sbml, stiff_solver
from jcalib.io.sbml.model import MAX_EVENT_RESTARTS, SBMLModel
from jcalib.io.sbml.reading import DEFAULT_BOUND_FACTOR

__all__ = [
    "DEFAULT_BOUND_FACTOR", "MAX_EVENT_RESTARTS", "STIFF_METHODS", "SBMLModel", "model_from_sbml", "stiff_solver",
]
