"""The simulator protocol, the model base on diffrax, experiments, and batched simulation.

A simulator turns a physical parameter vector ``theta`` into observations at its times:
``simulate(theta) -> (n_times, n_outputs)``. `AbstractSimulator` is the one contract every
method takes (`check_simulator` refuses anything else); `AbstractModel` (an ODE solved by
diffrax), the PELS-VAE `jcalib.nn.Surrogate` and `FunctionSimulator` (a plain JAX function)
implement it. Models are immutable equinox modules; solver, controller and adjoint are
fields (swap with ``eqx.tree_at``).
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import enum
import math
from collections.abc import Callable, Mapping

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int
from tqdm.auto import tqdm

from jcalib import distributed
from jcalib._simulator import AbstractSimulator
from jcalib.parameters import ParameterSpace
from jcalib.rosenbrock import JacobianTerm
from jcalib.solve import solve
from jcalib.steady_state import steady_state

__all__ = [
    "AbstractModel",
    "AbstractSimulator",
    "Experiment",
    "FunctionSimulator",
    "Preequilibrated",
    "SimulationError",
    "Setting",
    "SolveStatus",
    "check_solver_settings",
    "preequilibrate",
    "simulate_batch",
    "simulate_setting",
    "solver_steps_reported",
]


class SolveStatus(enum.IntEnum):
    """Per-simulation outcome; anything but SUCCESS comes with NaN-filled outputs."""

    SUCCESS = 0
    MAX_STEPS = 1  # the solver hit max_steps before t1
    NONFINITE = 2  # the state became NaN or infinite
    SOLVER_FAILED = 3  # any other diffrax failure (step size collapse, Newton divergence)
    INVALID_INPUT = 4  # theta has NaN or inf (the solver was not run on it)
    OUT_OF_BOUNDS = 5  # a parameter lies outside its bounds while the model checks bounds
    NO_STEADY_STATE = 6  # the pre-equilibration reached no steady state within max_steps

    @classmethod
    def describe(cls, code: int) -> str:
        """One-line text of a status code, for messages and reports."""
        return {
            cls.SUCCESS: "success",
            cls.MAX_STEPS: "maximum number of solver steps reached",
            cls.NONFINITE: "non-finite state (NaN or inf)",
            cls.SOLVER_FAILED: "solver failure (step size or nonlinear solve)",
            cls.INVALID_INPUT: "invalid input: theta has NaN or inf",
            cls.OUT_OF_BOUNDS: ("a parameter lies outside its bounds (model.with_bounds_check(False) "
                                "simulates anyway)"),
            cls.NO_STEADY_STATE: ("the pre-equilibration reached no steady state within max_steps (check that "
                                  "the pre-equilibration condition has a stable steady state, or raise max_steps)"),
        }[cls(int(code))]


class SimulationError(RuntimeError):
    """Raised by `simulate_batch` (``throw=True``) when solves fail.

    Nothing is lost: ``values`` holds all outputs (NaN for the failed samples) and
    ``status`` the `SolveStatus` code of every sample.
    """

    def __init__(self, message: str, values: np.ndarray, status: np.ndarray):
        super().__init__(message)
        self.values = values
        self.status = status


class Experiment(eqx.Module):
    """Where and when a model is observed.

    Attributes:
        t0: start time of the simulation.
        t1: end time (>= the last observation time).
        ts: observation times, shape ``(n_times,)``, non-decreasing, within ``[t0, t1]``.
        conditions: experiment constants (recipe masses, initial concentrations ...),
            ``{name: scalar}``; they are arrays, so changing them does not recompile.
        mask: ``(n_times, n_outputs)`` booleans of the entries that are measured in
            this experiment (ragged observations), or None for all.
        name: label for plots and tables.
        preequilibration: None, or the conditions of a pre-equilibration: before t0 the
            model is simulated from its initial state under ``conditions`` updated by these
            values (``{}``: the experiment's own conditions) until it reaches a steady state
            (diffrax's steady-state event: |dy/dt| below the controller's tolerances, then
            polished by Newton, with the derivatives of the exact steady state:
            `jcalib.steady_state`), and that state is the experiment's initial state. No steady state within
            ``max_steps`` gives the status ``NO_STEADY_STATE`` (NaN outputs). Every key must
            be one of ``conditions``.
    """

    t0: Float[Array, ""]
    t1: Float[Array, ""]
    ts: Float[Array, " n_times"]
    conditions: dict[str, Float[Array, ""]]
    mask: Bool[Array, "n_times n_outputs"] | None
    preequilibration: dict[str, Float[Array, ""]] | None
    name: str = eqx.field(static=True)

    def __init__(self, ts: ArrayLike, t0: float | None = None, t1: float | None = None,
                 conditions: Mapping[str, float] | None = None, mask: ArrayLike | None = None,
                 name: str = "", preequilibration: Mapping[str, float] | None = None) -> None:
        ts_np = np.asarray(ts, dtype=np.float64)
        if ts_np.ndim != 1 or ts_np.size == 0:
            raise ValueError(f"Experiment: ts must be a non-empty 1-D array; got shape {ts_np.shape}")
        if not np.all(np.isfinite(ts_np)):
            raise ValueError("Experiment: ts contains NaN or inf")
        if np.any(np.diff(ts_np) < 0):
            raise ValueError("Experiment: ts must be non-decreasing")
        t0 = float(ts_np[0]) if t0 is None else float(t0)
        t1 = float(ts_np[-1]) if t1 is None else float(t1)
        if ts_np[0] < t0 or ts_np[-1] > t1:
            raise ValueError(
                f"Experiment: observation times must lie within [t0, t1] = [{t0}, {t1}]; got "
                f"[{ts_np[0]}, {ts_np[-1]}]"
            )
        if not t0 < t1:
            raise ValueError(f"Experiment: t0 < t1 required; got t0={t0}, t1={t1}")
        self.t0 = jnp.asarray(t0)
        self.t1 = jnp.asarray(t1)
        self.ts = jnp.asarray(ts_np)
        self.conditions = {k: jnp.asarray(float(v)) for k, v in (conditions or {}).items()}
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.ndim != 2 or mask.shape[0] != ts_np.size:
                raise ValueError(
                    f"Experiment: mask must have shape (n_times={ts_np.size}, n_outputs); got "
                    f"{mask.shape}"
                )
            mask = jnp.asarray(mask)
        self.mask = mask
        self.name = name
        if preequilibration is not None:
            unknown = sorted(set(preequilibration) - set(self.conditions))
            if unknown:
                raise ValueError(f"Experiment: preequilibration names {unknown}, which are not conditions of the "
                                 f"experiment ({sorted(self.conditions)}); give every condition a value there")
            preequilibration = {k: jnp.asarray(float(v)) for k, v in preequilibration.items()}
        self.preequilibration = preequilibration

    def preequilibration_conditions(self) -> dict[str, Float[Array, ""]]:
        """The conditions of the pre-equilibration (the experiment's, updated)."""
        return {**self.conditions, **(self.preequilibration or {})}

    @property
    def n_times(self) -> int:
        return int(self.ts.shape[0])


def check_simulator(simulator, where: str, argument: str = "simulator") -> AbstractSimulator:
    """``simulator`` itself when it is an `AbstractSimulator`.

    Raises:
        ValueError: anything else; the message names ``argument``, the type received and
            what to pass instead.
    """
    if not isinstance(simulator, AbstractSimulator):
        raise ValueError(
            f"{where}: {argument} must be a jcalib simulator (an AbstractModel, a PELS-VAE Surrogate or "
            f"a FunctionSimulator; any subclass of jcalib.AbstractSimulator); got {type(simulator).__name__}"
            + ("; wrap a plain function as jcalib.FunctionSimulator(fn, space)" if callable(simulator) else "")
        )
    return simulator


class FunctionSimulator(AbstractSimulator):
    """A JAX-traceable function of the parameters as a simulator, e.g. an analytic test
    function (Ishigami) for `jcalib.sensitivity.sobol_indices`.

    ``fn(theta)`` may return a scalar (one output at one time), an ``(n_outputs,)`` vector (at
    one time) or an ``(n_times, n_outputs)`` array; `simulate` returns it as
    ``(n_times, n_outputs)``. Outputs with NaN or inf count as a failed simulation
    (``SolveStatus.NONFINITE``, all outputs NaN).

    Example:
        >>> from jcalib.parameters import Parameter
        >>> space = ParameterSpace([Parameter("a", 0.0, -1.0, 1.0), Parameter("b", 0.0, -1.0, 1.0)])
        >>> simulator = FunctionSimulator(lambda th: th[0] + 2.0 * th[1], space)
        >>> simulator.simulate(jnp.array([0.5, 0.25])).tolist()
        [[1.0]]
    """

    fn: Callable
    parameters: ParameterSpace = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    ts: Float[Array, " n_times"]

    def __init__(self, fn: Callable, parameters: ParameterSpace, output_names: tuple[str, ...] | None = None,
                 ts: ArrayLike | None = None) -> None:
        """Check ``fn`` on the nominal parameters (traced, not run) and record its output shape.

        Raises:
            ValueError: ``fn`` not callable, ``parameters`` not a ParameterSpace, ``fn`` fails
                on one parameter vector or returns no real array, or ``output_names``/``ts``
                that do not match its output shape.
        """
        if not callable(fn):
            raise ValueError(f"FunctionSimulator: fn must be a callable fn(theta) -> array; got {type(fn).__name__}")
        if not isinstance(parameters, ParameterSpace):
            raise ValueError(f"FunctionSimulator: parameters must be a jcalib ParameterSpace; got "
                             f"{type(parameters).__name__}")
        probe = jnp.asarray(parameters.nominal)
        try:
            out = jax.eval_shape(fn, probe)
        except Exception as error:  # any tracing failure: report it with the expected input
            raise ValueError(f"FunctionSimulator: calling fn on one parameter vector of shape "
                             f"({parameters.n_params},) ({', '.join(parameters.names)}) failed: {error}") from error
        if not isinstance(out, jax.ShapeDtypeStruct):
            raise ValueError(f"FunctionSimulator: fn must return one array per theta; got "
                             f"{jax.tree_util.tree_structure(out)}")
        if not (jnp.issubdtype(out.dtype, jnp.floating) or jnp.issubdtype(out.dtype, jnp.integer)):
            raise ValueError(f"FunctionSimulator: fn must return real numbers; got dtype {out.dtype}")
        if out.ndim > 2 or math.prod(out.shape) == 0:
            raise ValueError(f"FunctionSimulator: fn must return a scalar, an (n_outputs,) vector or an "
                             f"(n_times, n_outputs) array, not empty; got shape {out.shape}")
        n_times, n_outputs = {0: (1, 1), 1: (1, *out.shape), 2: out.shape}[out.ndim]
        if output_names is None:
            output_names = ("y",) if n_outputs == 1 else tuple(f"y{j}" for j in range(n_outputs))
        output_names = tuple(output_names)
        if len(output_names) != n_outputs:
            raise ValueError(f"FunctionSimulator: output_names has {len(output_names)} names but fn returns "
                             f"{n_outputs} outputs (shape {out.shape}); give one name per output")
        ts = np.arange(n_times, dtype=np.float64) if ts is None else np.asarray(ts, dtype=np.float64)
        if ts.shape != (n_times,):
            raise ValueError(f"FunctionSimulator: ts must have shape (n_times,) = ({n_times},) for fn's output "
                             f"shape {out.shape}; got shape {ts.shape}")
        self.fn = fn
        self.parameters = parameters
        self.output_names = output_names
        self.ts = jnp.asarray(ts)

    def simulate_with_status(
        self, theta: Float[ArrayLike, " n_params"]
    ) -> tuple[Float[Array, "n_times n_outputs"], Int[Array, ""]]:
        """``fn(theta)`` as ``(n_times, n_outputs)`` and ``SUCCESS``, or NaN and ``NONFINITE``."""
        theta = jnp.asarray(theta)
        self.parameters.check_shape(theta, "theta")
        y = jnp.reshape(jnp.asarray(self.fn(theta)), (self.ts.shape[0], len(self.output_names)))
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(theta.dtype if jnp.issubdtype(theta.dtype, jnp.floating) else jnp.float32)
        finite = jnp.all(jnp.isfinite(y))
        status = jnp.where(finite, SolveStatus.SUCCESS, SolveStatus.NONFINITE).astype(jnp.int32)
        return jnp.where(finite, y, jnp.nan), status


class AbstractModel(AbstractSimulator):
    """Base class of every jcalib model: an ODE solved by diffrax and observed at ``ts``.

    Subclasses set the fields below (usually in a factory function) and implement
    `vector_field`, `initial_state` and `observe`; `inputs` is optional.

    Attributes:
        parameters: the calibratable parameters; ``theta`` is ordered as ``parameters.names``.
        output_names: names of the observed outputs (columns of ``simulate``).
        state_names: names of the ODE states.
        experiment: observation times, conditions and mask.
        solver, controller, adjoint: diffrax settings; `jacobian` swaps the adjoint to
            ``ForwardMode`` itself.
        dt0: initial step (None lets the controller choose).
        max_steps: solver step budget; reaching it is reported as ``MAX_STEPS``.
        check_bounds: refuse parameters outside their bounds (default True; keyword-only).
            `simulate_with_status` then returns NaN outputs and ``OUT_OF_BOUNDS``, eager
            `simulate`/`jacobian` raise ``ValueError``; `with_bounds_check` (False) returns
            a copy that simulates anyway, for deliberate extrapolation.

    Derivatives (``jacobian``, ``jax.grad`` through `simulate`) of a solve whose status is
    not ``SUCCESS`` are NaN in forward and reverse mode, never a silent zero.
    """

    parameters: ParameterSpace = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    state_names: tuple[str, ...] = eqx.field(static=True)
    experiment: Experiment
    solver: dfx.AbstractSolver
    controller: dfx.AbstractStepSizeController
    adjoint: dfx.AbstractAdjoint
    dt0: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    check_bounds: bool = eqx.field(static=True, default=True, kw_only=True)

    # --- what a model defines -------------------------------------------------------------
    @abc.abstractmethod
    def vector_field(self, t: Float[Array, ""], y: Float[Array, " n_states"],
                     theta: Float[Array, " n_params"]) -> Float[Array, " n_states"]:
        """dy/dt in the solver's (possibly scaled) state coordinates."""

    @abc.abstractmethod
    def initial_state(self, theta: Float[Array, " n_params"]) -> Float[Array, " n_states"]:
        """y(t0); may depend on ``theta`` and on ``experiment.conditions``."""

    @abc.abstractmethod
    def observe(self, t: Float[Array, ""], y: Float[Array, " n_states"],
                theta: Float[Array, " n_params"]) -> Float[Array, " n_outputs"]:
        """Outputs at one time from the solver state."""

    def observe_used(self, t: Float[Array, ""], y: Float[Array, " n_states"], theta: Float[Array, " n_params"],
                     used: Bool[Array, " n_outputs"]) -> Float[Array, " n_outputs"]:
        """`observe` where a caller reads only the ``used`` outputs: the others may be anything,
        but must not be non-finite through ``y``, whose zero cotangent would turn their NaN
        partials into NaN reverse-mode derivatives. By default the outputs come from ``y`` where
        any is used, else from a state of ones; a model that can compute its outputs one by one
        (`jcalib.io.sbml.SBMLModel`) does so per output."""
        return self.observe(t, jnp.where(jnp.any(used), y, jnp.ones_like(y)), theta)

    def state_jacobian(self, t: Float[Array, ""], y: Float[Array, " n_states"],
                       theta: Float[Array, " n_params"]) -> Float[Array, "n_states n_states"]:
        """``d vector_field / dy`` (``jax.jacfwd`` by default); a model that can assemble it more
        cheaply (`jcalib.io.sbml.SBMLModel` from its reactions' structure) overrides it. The
        stiff solver's steps and the steady states use it (`term`)."""
        return jax.jacfwd(lambda x: self.vector_field(t, x, theta))(y)

    def term(self) -> JacobianTerm:
        """The vector field with its `state_jacobian`, as diffrax's term (arguments: theta)."""
        return JacobianTerm(self.vector_field, self.state_jacobian)  # bound methods are pytrees

    def inputs(self, t: Float[Array, ""]):
        """Input signals u(t) (none by default); call it from `vector_field`."""
        return None

    def constants(self) -> dict[str, tuple[float, str]]:
        """Fixed (not calibrated) physical constants, ``{name: (value, unit)}``, for
        parameter tables such as ``jcalib models show`` (none by default)."""
        return {}

    # --- derived API ----------------------------------------------------------------------
    @property
    def ts(self) -> Float[Array, " n_times"]:
        return self.experiment.ts

    @property
    def input_horizon(self) -> float | None:
        """The last time [model time unit] at which the model's inputs are defined, for models
        whose inputs come from a table; None for models without tabulated inputs (inputs
        given by a formula for all times, or none). Experiments ending later are refused."""
        return None

    def check_horizon(self, experiment: Experiment, where: str = "experiment") -> None:
        """Refuse an ``experiment`` whose end time lies beyond `input_horizon`.

        Raises:
            ValueError: ``experiment.t1`` (or an observation time) > ``input_horizon``; the
                message names the horizon.
        """
        horizon = self.input_horizon
        if horizon is None:
            return
        if experiment.preequilibration is not None:
            raise ValueError(f"{where}: a pre-equilibration runs to a steady state (t -> inf), but this model's "
                             f"inputs end at t = {horizon:.12g}; pre-equilibrate a model without an input table")
        t_end = float(np.max(np.asarray(experiment.t1)))
        if t_end > horizon:
            raise ValueError(
                f"{where}: the experiment runs to t = {t_end:.12g}, beyond the input horizon "
                f"{horizon:.12g} of this model (its input table ends there); use times <= "
                f"{horizon:.12g} or supply a longer input table"
            )

    def with_times(self, ts: ArrayLike) -> AbstractModel:
        """The same model observed at ``ts`` (same t0; t1 becomes ``max(ts)``).

        Raises:
            ValueError: bad times (see `Experiment`), or times beyond `input_horizon`.
        """
        ts = np.asarray(ts, dtype=np.float64)
        exp = self.experiment
        t1 = float(ts.max()) if ts.size else float(exp.t1)
        new = Experiment(ts, t0=float(exp.t0), t1=t1,
                         conditions={k: float(v) for k, v in exp.conditions.items()},
                         name=exp.name, preequilibration=None if exp.preequilibration is None else
                         {k: float(v) for k, v in exp.preequilibration.items()})
        self.check_horizon(new, "with_times")
        return eqx.tree_at(lambda m: m.experiment, self, new, is_leaf=lambda x: x is None)

    def with_experiment(self, experiment: Experiment) -> AbstractModel:
        """The same model for another experiment (recipe, inputs, times).

        Raises:
            ValueError: the experiment ends beyond `input_horizon`; it lacks a condition of the
                model's own experiment (the model reads them: a missing one would fail inside the
                solve).
        """
        self.check_horizon(experiment, "with_experiment")
        missing = [name for name in self.experiment.conditions if name not in experiment.conditions]
        if missing:
            given = ", ".join(f"{name}={float(self.experiment.conditions[name]):g}" for name in missing)
            raise ValueError(f"with_experiment: experiment {experiment.name!r} lacks the conditions {missing} that "
                             f"the model reads; give them, e.g. Experiment(..., conditions={{...}}) with {given} "
                             "(the model's own values)")
        return eqx.tree_at(lambda m: m.experiment, self, experiment, is_leaf=lambda x: x is None)

    def with_bounds_check(self, enabled: bool = True) -> AbstractModel:
        """A copy that refuses (``enabled=True``, the default of every model) or accepts
        (``False``: deliberate extrapolation) parameters outside their bounds."""
        if not isinstance(enabled, (bool, np.bool_)):
            raise ValueError(f"with_bounds_check(): enabled must be True or False; got {enabled!r}")
        return dataclasses.replace(self, check_bounds=bool(enabled))

    def with_solver(self, **settings) -> AbstractModel:
        """A copy with other solver settings, e.g. ``with_solver(solver=dfx.Kvaerno5(),
        max_steps=10_000)``; keys: solver, controller, adjoint, dt0, max_steps."""
        allowed = ("solver", "controller", "adjoint", "dt0", "max_steps")
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise ValueError(f"with_solver(): unknown settings {unknown}; allowed: {allowed}")
        check_solver_settings("with_solver()", **settings)
        return dataclasses.replace(self, **settings)

    def solve(self, theta: Float[ArrayLike, " n_params"]) -> dfx.Solution:
        """The raw diffrax solution (states at ``ts``); never throws. With a
        pre-equilibration, from its steady state (see `Experiment`; whether it reached one is
        reported by `simulate_with_status`)."""
        theta = self._check_theta(theta)
        main, pre = self.settings(theta)
        y0 = start_state(self, main, pre, self.experiment.t0)[0]
        return self.integrate(y0, theta, self.experiment.t0, self.experiment.t1, self.experiment.ts)

    def settings(self, theta: Float[Array, " n_params"]) -> tuple[Setting, Setting | None]:
        """The `Setting` of this experiment's simulation and of its pre-equilibration (None
        without one), both with the parameters ``theta``."""
        exp = self.experiment
        pre = None if exp.preequilibration is None else Setting(theta, exp.preequilibration_conditions())
        return Setting(theta, exp.conditions), pre

    def integrate(self, y0: Float[Array, " n_states"], theta: Float[Array, " n_params"], t0, t1,
                  ts: Float[Array, " n_times"]) -> dfx.Solution:
        """The diffrax solve from state ``y0`` at ``t0`` to ``t1`` (time units of the model),
        states saved at ``ts``; never throws (failures are in ``result``). Models with
        discontinuities at known times (SBML events) override it to restart the solver there."""
        return solve(self.term(), self.solver, t0, t1, self.dt0, y0, theta, dfx.SaveAt(ts=ts), self.controller,
                     self.adjoint, self.max_steps)

    def conserved_moieties(self, y: Float[Array, " n_states"],
                           theta: Float[Array, " n_params"]) -> Float[Array, " n_conserved"]:
        """Quantities constant along every trajectory (none by default). A model with
        conservation laws returns them, so that its steady states (pre-equilibration, ``t =
        inf`` outputs) and their derivatives are those reached from the initial state."""
        return jnp.zeros((0,), dtype=y.dtype)

    def simulate_with_status(
        self, theta: Float[ArrayLike, " n_params"]
    ) -> tuple[Float[Array, "n_times n_outputs"], Int[Array, ""]]:
        """Outputs and a `SolveStatus` code; outputs are NaN unless the code is SUCCESS.

        Never raises for parameter *values* (works under jit and vmap): a theta with NaN or
        inf gives ``INVALID_INPUT``, one outside the bounds (while `check_bounds`)
        ``OUT_OF_BOUNDS``; the solver then runs on the nominal values instead, and the
        outputs are NaN. Derivatives of the outputs are NaN for every status but SUCCESS.
        """
        theta = self._check_theta(theta)
        finite = jnp.all(jnp.isfinite(theta))
        if self.check_bounds:
            lower, upper = _bounds_with_slack(self.parameters)
            inside = jnp.all((theta >= jnp.asarray(lower)) & (theta <= jnp.asarray(upper)))
        else:
            inside = jnp.asarray(True)
        safe_theta = jnp.where(finite & inside, theta, jnp.asarray(self.parameters.nominal, dtype=theta.dtype))
        exp = self.experiment
        y, status = simulate_setting(self, *self.settings(safe_theta), exp.t0, exp.t1, exp.ts)
        status = jnp.where(finite, jnp.where(inside, status, SolveStatus.OUT_OF_BOUNDS),
                           SolveStatus.INVALID_INPUT)
        return _nan_unless(status == SolveStatus.SUCCESS, y, theta), status

    def simulate(self, theta: Float[ArrayLike, " n_params"]) -> Float[Array, "n_times n_outputs"]:
        """Outputs at the observation times, ``(n_times, n_outputs)``; NaN if the solve failed.

        Raises:
            ValueError: called eagerly (not under jit/vmap/grad) with a theta that has NaN
                or inf, or (while `check_bounds`) a parameter outside its bounds; traced
                calls give NaN outputs instead (see `simulate_with_status`).
        """
        theta = self._check_theta(theta)
        self._refuse_bad_theta(theta, "simulate")
        return self.simulate_with_status(theta)[0]

    def forward_mode(self) -> AbstractModel:
        """This model with ``adjoint=ForwardMode()``, as ``jax.jacfwd`` through diffrax needs
        (the reverse-mode ``RecursiveCheckpointAdjoint`` does not support it)."""
        return eqx.tree_at(lambda m: m.adjoint, self, dfx.ForwardMode())

    def jacobian(self, theta: Float[ArrayLike, " n_params"]) -> Float[Array, "n_times n_outputs n_params"]:
        """d simulate / d theta by forward-mode autodiff (physical units); NaN when the solve
        fails.

        Raises:
            ValueError: as `simulate`, for a concrete theta with NaN/inf or out of bounds.
        """
        theta = self._check_theta(theta)
        self._refuse_bad_theta(theta, "jacobian")
        return jax.jacfwd(self.forward_mode().simulate)(theta)

    def _refuse_bad_theta(self, theta, where: str) -> None:
        """Raise for a concrete ``theta`` with NaN/inf or (when checked) outside the bounds;
        traced values pass (they get a status and NaN outputs instead)."""
        if isinstance(theta, jax.core.Tracer):
            return
        values = np.asarray(theta, dtype=np.float64)
        names = self.parameters.names
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{where}: theta has NaN or inf ({names[i]} = {values[i]}); pass finite "
                             "parameter values")
        if not self.check_bounds:
            return
        lower, upper = self.parameters.lower, self.parameters.upper
        lower_slack, upper_slack = _bounds_with_slack(self.parameters)
        outside = np.flatnonzero((values < lower_slack) | (values > upper_slack))
        if outside.size:
            i = int(outside[0])
            raise ValueError(
                f"{where}: {names[i]} = {values[i]:g} lies outside its bounds [{lower[i]:g}, "
                f"{upper[i]:g}]; pass model.with_bounds_check(False) to simulate anyway"
            )

    def _check_theta(self, theta):
        theta = jnp.asarray(theta)
        self.parameters.check_shape(theta, "theta")
        if theta.dtype != jnp.float64:
            raise ValueError(
                f"theta must be float64 (got {theta.dtype}); simulations need double precision: "
                "call jax.config.update('jax_enable_x64', True) before creating arrays"
            )
        return theta


BOUNDS_RTOL = 1e-12
"""Relative slack of the models' bounds check: ``exp(log(upper))`` can exceed ``upper`` by
an ulp or two (e.g. 1e-3 -> 1.0000000000000002e-3), and a parameter that an estimator
clipped onto its bound in internal coordinates must not count as outside."""


_SOLVER_SETTING_TYPES = {"solver": (dfx.AbstractSolver, "a diffrax solver instance such as dfx.Tsit5()"),
                         "controller": (dfx.AbstractStepSizeController, "a diffrax step-size controller instance "
                                        "such as dfx.PIDController(rtol=1e-8, atol=1e-10)"),
                         "adjoint": (dfx.AbstractAdjoint, "a diffrax adjoint instance such as "
                                     "dfx.RecursiveCheckpointAdjoint()")}


def check_solver_settings(where: str, **settings) -> None:
    """Refuse solver settings (``solver``, ``controller``, ``adjoint``, ``dt0``, ``max_steps``, as
    `AbstractModel.with_solver` takes them) that diffrax would misread, with a ValueError that
    names ``where``, the setting, the value and the fix: a controller's tolerances must be
    positive finite numbers, the step budget a positive integer.

    Example:
        >>> check_solver_settings("model_from_sbml", controller=dfx.PIDController(rtol=-1.0, atol=1e-10))
        Traceback (most recent call last):
        ...
        ValueError: model_from_sbml: the controller's rtol must be a positive finite number; got -1.0
    """
    for name, value in settings.items():
        _check_solver_setting(where, name, value)


def _check_solver_setting(where: str, name: str, value) -> None:
    if name in _SOLVER_SETTING_TYPES:
        kind, example = _SOLVER_SETTING_TYPES[name]
        if not isinstance(value, kind):
            got = f"the class {value.__name__}" if isinstance(value, type) else f"{value!r} ({type(value).__name__})"
            raise ValueError(f"{where}: {name} must be {example}; got {got}")
        if isinstance(value, dfx.PIDController):
            for tolerance in ("rtol", "atol"):
                number = getattr(value, tolerance)
                if not (isinstance(number, (int, float, np.integer, np.floating)) and math.isfinite(number)
                        and number > 0):
                    raise ValueError(f"{where}: the controller's {tolerance} must be a positive finite number; got "
                                     f"{number!r}")
    elif name == "max_steps":
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{where}: max_steps must be a positive integer (the solver's step budget, e.g. "
                             f"10_000); got {value!r}")
    elif name == "dt0":
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                                                    np.integer))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{where}: dt0 must be None (the controller chooses the first step) or a "
                             f"positive finite number; got {value!r}")


def _bounds_with_slack(space: ParameterSpace) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` widened by `BOUNDS_RTOL` of their magnitudes (0 stays 0)."""
    lower, upper = space.lower, space.upper
    return lower - BOUNDS_RTOL * np.abs(lower), upper + BOUNDS_RTOL * np.abs(upper)


def _nan_unless(ok: Array, y: Array, theta: Array) -> Array:
    """``y`` where ``ok``, NaN elsewhere, with NaN derivatives (forward and reverse mode)
    where not ``ok``.

    ``jnp.where(ok, y, nan)`` alone has a zero derivative for a failed solve, which
    estimators would read as flat ground; the added term is 0 (value and derivative) when
    ``ok`` and NaN * 0 * d(sum theta) = NaN otherwise.
    """
    nan_if_failed = jnp.where(ok, 0.0, jnp.nan)
    return jnp.where(ok, y, 0.0) + nan_if_failed * (0.0 * jnp.sum(theta))


class Setting(eqx.Module):
    """What one simulation (or its pre-equilibration) runs under: the parameters, the
    conditions, and the states it resets at its start.

    Attributes:
        theta: the model's parameters, ``(n_params,)``.
        conditions: ``{name: scalar}``, replacing the experiment's.
        reset: ``(n_states,)`` booleans of the states set to ``values`` at the start (after
            a pre-equilibration: replacing its steady state), or None for none.
        values: ``(n_states,)`` the values of the reset states (others are ignored).
    """

    theta: Float[Array, " n_params"]
    conditions: dict[str, Float[Array, ""]]
    reset: Bool[Array, " n_states"] | None = None
    values: Float[Array, " n_states"] | None = None

    def model(self, model: AbstractModel) -> AbstractModel:
        """``model`` under these conditions."""
        return eqx.tree_at(lambda m: m.experiment.conditions, model, dict(self.conditions))

    def start(self, y: Float[Array, " n_states"]) -> Float[Array, " n_states"]:
        """``y`` with the reset states replaced."""
        return y if self.reset is None else jnp.where(self.reset, self.values, y)


class Preequilibrated(eqx.Module):
    """A pre-equilibration already solved (`preequilibrate`), for simulations that share it.

    Attributes:
        state: the steady state, ``(n_states,)`` (NaN if none was reached).
        reached: whether it was reached.
    """

    state: Float[Array, " n_states"]
    reached: Bool[Array, ""]


def preequilibrate(model: AbstractModel, pre: Setting, t0: Float[Array, ""]) -> Preequilibrated:
    """The steady state under ``pre`` (`jcalib.steady_state.steady_state`, from the initial state
    under ``pre``, with its resets), with its implicit-function derivatives."""
    before = pre.model(model)
    y, _, reached = steady_state(before, pre.start(before.initial_state(pre.theta)), pre.theta, t0)
    return Preequilibrated(y, reached)


def start_state(model: AbstractModel, main: Setting, pre: Setting | Preequilibrated | None,
                t0: Float[Array, ""]) -> tuple[Float[Array, " n_states"], Bool[Array, ""]]:
    """The state a simulation starts from at ``t0`` and whether its pre-equilibration (if any)
    reached a steady state: the model's initial state under ``main``, or the steady state under
    ``pre`` (`preequilibrate`, or the one given), with ``main``'s resets applied."""
    if pre is None:
        return main.start(main.model(model).initial_state(main.theta)), jnp.asarray(True)
    if isinstance(pre, Setting):
        pre = preequilibrate(model, pre, t0)
    return main.start(pre.state), pre.reached


_STEP_REPORTERS: list[Callable[[Int[Array, ""]], None]] = []  # trace time: see `solver_steps_reported`


@contextlib.contextmanager
def solver_steps_reported(report: Callable[[Int[Array, ""]], None]):
    """Within it, every `simulate_setting` *traced* hands the solver steps of its main solve (a
    traced integer, from ``t0`` to ``t1``; not the pre-equilibration's or the steady state's) to
    ``report``, e.g. a host callback that counts them (`jcalib.benchmark.cost.CountedProblem`).
    It acts at trace time: a computation compiled outside it reports nothing, one compiled inside
    it reports at every run."""
    _STEP_REPORTERS.append(report)
    try:
        yield
    finally:
        _STEP_REPORTERS.pop()


def simulate_setting(model: AbstractModel, main: Setting, pre: Setting | Preequilibrated | None, t0: Float[Array, ""],
                     t1: Float[Array, ""], ts: Float[Array, " n_times"], *, steady: bool = False,
                     used: Bool[Array, "n_slots n_outputs"] | None = None,
                     ) -> tuple[Float[Array, "n_slots n_outputs"], Int[Array, ""]]:
    """One simulation, the one path from parameters to the solver: outputs at ``ts`` and, with
    ``steady``, one more row, the outputs at the steady state reached from the start
    (``t = inf``); and its `SolveStatus`. Outputs are NaN (with NaN derivatives) unless it is
    SUCCESS; a steady state not reached gives NO_STEADY_STATE.

    ``main``/``pre``: see `Setting`, `start_state` (``pre`` solved once for several simulations:
    `preequilibrate`); times in the model's unit, ``t0 <= ts <= t1``. ``used``: the outputs the
    caller reads, ``(n_slots, n_outputs)`` booleans; the others may then be meaningless
    (`AbstractModel.observe_used`), so that an output that is not finite where nobody reads it
    (``0 / 0`` at ``t = 0``) cannot make reverse-mode derivatives NaN.
    """
    y0, steady_ok = start_state(model, main, pre, t0)
    run = main.model(model)
    sol = run.integrate(y0, main.theta, t0, t1, ts)
    for report in _STEP_REPORTERS if "num_steps" in sol.stats else ():
        report(sol.stats["num_steps"])
    ys, times = sol.ys, ts
    if steady:
        y_inf, t_inf, reached = steady_state(run, y0, main.theta, t0)
        ys, times, steady_ok = jnp.concatenate([ys, y_inf[None]]), jnp.append(ts, t_inf), steady_ok & reached
    status = jnp.where(steady_ok, solve_status(sol.result, ys), SolveStatus.NO_STEADY_STATE)
    ok = status == SolveStatus.SUCCESS
    safe_ys = jnp.where(ok, ys, jnp.ones_like(ys))  # keep NaNs out of observe (and its gradient)
    if used is None:
        outputs = jax.vmap(run.observe, in_axes=(0, 0, None))(times, safe_ys, main.theta)
    else:
        outputs = jax.vmap(run.observe_used, in_axes=(0, 0, None, 0))(times, safe_ys, main.theta, used)
    return _nan_unless(ok, outputs, main.theta), status


def solve_status(result: dfx.RESULTS, ys: Float[Array, "..."]) -> Int[Array, ""]:
    """The `SolveStatus` of a diffrax result and the states it saved."""
    finite = jnp.all(jnp.isfinite(ys))
    return jnp.where(result == dfx.RESULTS.successful,
                     jnp.where(finite, SolveStatus.SUCCESS, SolveStatus.NONFINITE),
                     jnp.where(result == dfx.RESULTS.max_steps_reached, SolveStatus.MAX_STEPS,
                               SolveStatus.SOLVER_FAILED))


DEFAULT_CHUNK_PER_DEVICE = 512
"""Default samples per device per compiled call. A vmapped adaptive solve steps every
sample until the slowest one is done, so moderate chunks waste less work than one huge
batch (four_substance_reactions, 10,000 LHS samples on one CPU core: 0.24 s unchunked,
0.15 s in chunks of 1,000, 0.12 s in chunks of 500)."""


@eqx.filter_jit
def _simulate_vmapped(model: AbstractModel, thetas):
    return jax.vmap(model.simulate_with_status)(thetas)


def simulate_batch(
    model: AbstractSimulator,
    thetas: Float[ArrayLike, "n n_params"],
    chunk_size: int | None = None,
    *,
    throw: bool = True,
    return_status: bool = False,
    check_bounds: bool = True,
    progress: bool | None = None,
):
    """Simulate many parameter vectors with one jitted, vmapped solve.

    The batch is processed in chunks of ``chunk_size``, so memory stays bounded; each
    chunk is split into equal shares, one per visible device (``jax.devices()``).
    The last chunk is padded, so every chunk reuses one compiled function. After
    `jcalib.distributed.initialize` with several processes (each holding the same
    ``thetas``), each process solves its block of rows (`jcalib.distributed.process_rows`)
    on its own devices (``jax.local_devices()``), in chunks as above, and every process
    gets all ``n`` results back (`jcalib.distributed.gather_rows`).

    Args:
        model: any `AbstractSimulator` (a model, a surrogate, a `FunctionSimulator`).
        thetas: physical parameter vectors, ``(n, n_params)``.
        chunk_size: samples per compiled call (per process), rounded up to a multiple of
            the local device count (default: `DEFAULT_CHUNK_PER_DEVICE` per device).
        throw: raise `SimulationError` if any solve fails (it carries all results).
        return_status: also return the `SolveStatus` code per sample.
        check_bounds: raise ``ValueError`` for samples outside the parameter bounds;
            False simulates them (``model.with_bounds_check(False)``)
        progress: show a progress bar over chunks (default: when there are several).

    Returns:
        ``(n, n_times, n_outputs)`` float64 NumPy array (NaN rows for failed solves),
        plus the ``(n,)`` status codes when ``return_status``.

    Raises:
        ValueError: ``model`` is not an `AbstractSimulator`; bad ``thetas`` (shape, NaN/inf,
            outside the bounds while ``check_bounds``) or ``chunk_size``; float32 mode.
        SimulationError: solves failed while ``throw``.

    Long for its documented options; the body is 57 lines.
    """
    check_simulator(model, "simulate_batch", "model")
    space = model.parameters
    thetas = np.asarray(thetas, dtype=np.float64)
    space.check_shape(thetas, "thetas", batched=True)
    n = thetas.shape[0]
    if n == 0:
        raise ValueError("simulate_batch: thetas is empty")
    bad_rows = np.flatnonzero(~np.all(np.isfinite(thetas), axis=1))
    if bad_rows.size:
        raise ValueError(f"simulate_batch: thetas has NaN or inf in rows {bad_rows[:10].tolist()}")
    if check_bounds:
        _check_bounds(space, thetas)
    elif isinstance(model, AbstractModel):  # the model would refuse them itself
        model = model.with_bounds_check(False)
    if not jax.config.jax_enable_x64:
        raise ValueError("simulate_batch needs float64: call jax.config.update('jax_enable_x64', True)")

    devices = jax.local_devices()  # = jax.devices() with one process
    n_dev = len(devices)
    chunk = DEFAULT_CHUNK_PER_DEVICE * n_dev if chunk_size is None else int(chunk_size)
    if chunk < 1:
        raise ValueError(f"simulate_batch: chunk_size must be positive; got {chunk_size}")
    local = distributed.process_rows(thetas)  # all of thetas with one process
    n_local = local.shape[0]
    chunk = math.ceil(min(chunk, n_local) / n_dev) * n_dev

    starts = range(0, n_local, chunk)
    show = (len(starts) > 1 if progress is None else progress) and jax.process_index() == 0
    values, status = [], []
    for start in tqdm(starts, desc="simulate_batch", unit="chunk", disable=not show):
        block = local[start : start + chunk]
        n_real = block.shape[0]
        if n_real < chunk:  # pad with the last row so the compiled shape is reused
            block = np.concatenate([block, np.repeat(block[-1:], chunk - n_real, axis=0)])
        # one equal share per device, dispatched asynchronously: separate devices (GPUs) run
        # their own solves concurrently and never synchronise inside the solver's while loops
        # (XLA's CPU devices of one process run one after another: one process per core instead)
        # (shard_map trips lineax's structure checks in implicit solvers; a GSPMD-sharded
        # while loop synchronises every step).
        shares = [_simulate_vmapped(model, jax.device_put(part, device))
                  for part, device in zip(np.split(block, n_dev), devices)]
        values.append(np.concatenate([np.asarray(y) for y, _ in shares])[:n_real])
        status.append(np.concatenate([np.asarray(s) for _, s in shares])[:n_real])
    values, status = distributed.gather_rows((np.concatenate(values), np.concatenate(status)), n)

    failed = np.flatnonzero(status != SolveStatus.SUCCESS)
    if throw and failed.size:
        lines = [f"  sample {i}: {SolveStatus.describe(status[i])}; theta = "
                 f"{space.to_dict(thetas[i])}" for i in failed[:5]]
        more = f"\n  ... and {failed.size - 5} more" if failed.size > 5 else ""
        raise SimulationError(
            f"simulate_batch: {failed.size} of {n} solves failed:\n" + "\n".join(lines) + more
            + "\n(the error's .values and .status hold every result; pass throw=False to get "
            "NaN rows instead)",
            values, status,
        )
    return (values, status) if return_status else values


def _check_bounds(space: ParameterSpace, thetas: np.ndarray) -> None:
    lower, upper = _bounds_with_slack(space)  # the models' own check (round-off at the bounds)
    outside = (thetas < lower) | (thetas > upper)
    if outside.any():
        row, col = np.argwhere(outside)[0]
        p = space.parameters[col]
        raise ValueError(
            f"simulate_batch: {int(outside.any(axis=1).sum())} samples lie outside the bounds, "
            f"first: row {row}, {p.name} = {thetas[row, col]} not in [{p.lower}, {p.upper}] "
            "(pass check_bounds=False to simulate anyway)"
        )
