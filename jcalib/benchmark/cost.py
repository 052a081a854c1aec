"""What a run costs, counted where the method meets the problem, and budgets that stop it.

`CountedProblem` wraps any `jcalib.problems.AbstractProblem`: every evaluation a method makes
through it, compiled or not, inside loops, vmapped lanes and derivatives, reports to the active
`CostCounter` by a host callback (`jax.debug.callback`). Counted:

- ``objective``: log-likelihood evaluations (also those inside a gradient or a log posterior);
- ``residuals``: residual-vector evaluations (also those carrying forward-mode directions);
- ``gradients``: reverse-mode passes of the log-likelihood (one per gradient);
- ``jvps`` and ``vjps``: forward-mode directions and reverse-mode passes of the residuals
  (``jax.jacfwd`` over ``n_free`` parameters: ``n_free`` JVPs);
- ``jacobians``: ``problem.jacobian`` calls (each also counts ``n_free`` JVPs) and the number of
  Jacobian entries computed (``jacobian_entries``);
- ``simulations``: simulations through a `CountedSimulator` (the training data of an amortized
  method);
- ``solver_steps``: the ODE solver's steps in the simulations of the problem's evaluations
  (`jcalib.model.solver_steps_reported`: the main solve of each experiment, in the forward pass;
  not the pre-equilibrations' or the steady states' solves). diffrax does not report its
  right-hand-side evaluations; a step of Rodas5P (the SBML default) evaluates it a fixed number
  of times plus one Jacobian.

Two cost units derive from them: ``evaluations`` (model simulations: objective, residual and
Jacobian calls and simulations) and ``gradients`` in gradient equivalents (reverse passes plus forward directions
divided by ``n_free``, so a full forward-mode Jacobian counts 1). Time is wall time and CPU time
of the process, with the compile time (JAX tracing, lowering and compiling, from
``jax.monitoring``) kept apart, and so is the counting's own time: each callback costs a host
round trip (about 0.1-0.2 ms on a CPU, measured once per process by `callback_dispatch_s`) plus
the time spent in it. ``seconds`` is the wall time spent neither compiling nor counting (an
estimate where the round trips dominate, e.g. on analytic problems that evaluate in
microseconds; ``callback_s`` says how much was taken off).

A budget (``{"evaluations": 100, "gradients": 50, "seconds": 10.0}``) is enforced: the
evaluation that would exceed it raises `BudgetExhausted` inside the callback, which aborts the
compiled computation; the run's trace holds every improvement within the budget and nothing
after it. Budgets are checked at each evaluation: a method that spends seconds without evaluating
the problem is stopped at its next evaluation.

Example:
    >>> from jcalib.benchmark.problems import get_problem
    >>> problem = CountedProblem(get_problem("rosenbrock-4").build())
    >>> with CostCounter({"evaluations": 3}) as counter:
    ...     for _ in range(5):
    ...         try:
    ...             _ = problem.log_likelihood(problem.initial_internal())
    ...         except Exception:
    ...             break
    >>> counter.counts["objective"], counter.exhausted
    (3, 'evaluations')
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import types
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jcalib._simulator import AbstractSimulator
from jcalib.model import solver_steps_reported
from jcalib.parameters import ParameterSpace
from jcalib.problems.contract import AbstractProblem

__all__ = ["BUDGET_UNITS", "BudgetExhausted", "CostCounter", "CountedProblem", "CountedSimulator",
           "callback_dispatch_s", "check_budget"]

BUDGET_UNITS = ("evaluations", "gradients", "seconds")
_COUNTS = ("objective", "residuals", "gradients", "jvps", "vjps", "jacobians", "jacobian_entries", "simulations",
           "solver_steps")
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_active = types.SimpleNamespace(counter=None)  # process-wide: XLA runs host callbacks on its own threads


class BudgetExhausted(RuntimeError):
    """An evaluation would have exceeded the run's budget (raised inside the host callback)."""


def check_budget(budget: Mapping[str, float] | None) -> dict[str, float]:
    """``budget`` as ``{unit: amount}`` with units from `BUDGET_UNITS` and amounts > 0; else a ValueError."""
    budget = {} if budget is None else budget
    if not isinstance(budget, Mapping) or not all(
            k in BUDGET_UNITS and isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0 for k, v in budget.items()):
        raise ValueError(f"budget must be a dict of units {BUDGET_UNITS} to finite amounts > 0; got {budget!r}")
    return {k: float(v) for k, v in budget.items()}


class CostCounter:
    """The counts, times and trace of one run; a context manager that makes it the counter
    `CountedProblem`'s evaluations report to (one at a time per process: XLA calls the host
    callbacks from its own threads).

    Args:
        budget: ``{unit: amount}`` (units: `BUDGET_UNITS`), None for no limit.
        offset: ``c`` with ``-log-likelihood = |r|^2 / 2 + c`` (see
            `jcalib.problems.residual_offset`) so that residual evaluations enter the trace as
            negative log-likelihoods; None: residual evaluations are counted but not traced.
        n_free: the problem's free parameters (forward directions per gradient equivalent).

    Attributes:
        counts: `_COUNTS` -> int.
        trace: ``[(evaluations, gradients, seconds, -log-likelihood)]``, one entry per
            evaluation that improved on the best so far (a value computed together with its
            derivatives, as in a forward-mode Jacobian pass, may be traced at the cost with them:
            XLA orders the callbacks of one pass freely).
        exhausted: the unit whose budget stopped the run, or None.
        interrupted: whether a Ctrl-C arrived during a callback (JAX passes it on as a runtime
            error; `jcalib.benchmark.runner` raises KeyboardInterrupt again).
    """

    def __init__(self, budget: Mapping[str, float] | None = None, offset: float | None = None, n_free: int = 1):
        self.budget, self.offset, self.n_free = check_budget(budget), offset, n_free
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.trace: list[tuple[float, float, float, float]] = []
        self.exhausted: str | None = None
        self.interrupted = False
        self._compiles: list[list[float]] = []  # disjoint (start, end) wall-clock intervals of compiling
        self._best = math.inf
        self._lock = threading.Lock()
        self.n_callbacks, self.in_callback_s, self._dispatch_s = 0, 0.0, 0.0
        self._wall0 = self._cpu0 = 0.0
        self.wall_s = self.cpu_s = 0.0

    def __enter__(self) -> CostCounter:
        if _active.counter is not None:
            raise RuntimeError("CostCounter: another counter is active in this process; runs are counted one at a "
                               "time per process")
        _listen_to_compiles()
        self._dispatch_s = callback_dispatch_s()
        logging.getLogger("jax._src.debugging").addFilter(_quiet_budget_stops)
        _active.counter = self
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        jax.effects_barrier()  # callbacks of computations still running report before the counter closes
        self.wall_s, self.cpu_s = time.perf_counter() - self._wall0, time.process_time() - self._cpu0
        logging.getLogger("jax._src.debugging").removeFilter(_quiet_budget_stops)
        _active.counter = None

    def cost(self) -> dict[str, float]:
        """The cost so far in each unit of `BUDGET_UNITS`."""
        c = self.counts
        return {"evaluations": float(c["objective"] + c["residuals"] + c["jacobians"] + c["simulations"]),
                "gradients": c["gradients"] + c["vjps"] + c["jvps"] / self.n_free,
                "seconds": max(time.perf_counter() - self._wall0 - self.compile_s - self.callback_s, 0.0)}

    @property
    def compile_s(self) -> float:
        """Wall seconds spent tracing, lowering or compiling since the counter opened (the union
        of JAX's compile events: nested and concurrent ones are not counted twice)."""
        return sum(end - max(start, self._wall0) for start, end in self._compiles if end > self._wall0)

    def add_compile(self, duration: float) -> None:
        """A compile event of ``duration`` seconds that ended now (`_listen_to_compiles`)."""
        end = time.perf_counter()
        merged = [end - duration, end]
        kept = []
        for interval in self._compiles:
            if interval[1] < merged[0] or interval[0] > merged[1]:
                kept.append(interval)
            else:
                merged = [min(merged[0], interval[0]), max(merged[1], interval[1])]
        self._compiles = sorted([*kept, merged])

    @property
    def callback_s(self) -> float:
        """Seconds the counting itself took: round trips (`callback_dispatch_s` each) and host work."""
        return self.n_callbacks * self._dispatch_s + self.in_callback_s

    def record(self, kind: str, value: np.ndarray | None = None) -> None:
        """Count one event of ``kind`` (`CountedProblem`'s callbacks), refusing it with
        `BudgetExhausted` when it would exceed the budget."""
        start = time.perf_counter()
        try:
            with self._lock:
                try:
                    self._record(kind, value)
                finally:
                    self.n_callbacks += 1
                    self.in_callback_s += time.perf_counter() - start
        except KeyboardInterrupt:  # JAX hands it on wrapped in a runtime error: remember it was a Ctrl-C
            self.interrupted = True
            raise

    def _record(self, kind: str, value: np.ndarray | None) -> None:
        counts = dict(self.counts)
        counts[kind] += int(value) if kind == "solver_steps" else 1
        if kind == "jacobians":  # value: the Jacobian's shape
            counts["jvps"] += int(value[1])
            counts["jacobian_entries"] += int(value[0] * value[1])
        before, self.counts = self.counts, counts
        cost = self.cost()
        over = next((unit for unit, limit in self.budget.items() if cost[unit] > limit), None)
        if over is not None:
            self.counts, self.exhausted = before, over
            raise BudgetExhausted(f"the run's budget of {self.budget[over]:g} {over} is spent")
        negative_llh = _negative_log_likelihood(kind, value, self.offset)
        if negative_llh is not None and negative_llh < self._best:
            self._best = negative_llh
            seconds = max(cost["seconds"], self.trace[-1][2] if self.trace else 0.0)  # an estimate: kept cumulative
            self.trace.append((cost["evaluations"], cost["gradients"], seconds, negative_llh))


def _negative_log_likelihood(kind: str, value, offset: float | None) -> float | None:
    """The -log-likelihood an evaluation shows (NaN: a failed solve, never an improvement)."""
    if kind == "objective":
        total = -float(np.sum(value))
    elif kind == "residuals" and offset is not None:
        total = 0.5 * float(np.sum(np.square(value))) + offset
    else:
        return None
    return total if math.isfinite(total) else None


def _quiet_budget_stops(record: logging.LogRecord) -> bool:
    """A logging filter: JAX logs every exception a callback raises with its traceback; a spent
    budget is how a run ends, not a failure."""
    return not (record.exc_info and isinstance(record.exc_info[1], BudgetExhausted))


def _on_host(kind: str, value=None) -> None:
    counter = _active.counter
    if counter is not None:
        counter.record(kind, None if value is None else np.asarray(value))


@functools.cache
def callback_dispatch_s(n: int = 2000) -> float:
    """The round-trip seconds of one host callback from a compiled loop (the median of three
    loops of ``n``, against the same loop without callbacks), measured once per process."""
    def loop(with_callback: bool):
        def body(c, _):
            if with_callback:
                jax.debug.callback(_nothing, c)
            return c + 1.0, None
        f = jax.jit(lambda c: jax.lax.scan(body, c, None, length=n)[0])
        f(0.0).block_until_ready()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            f(0.0).block_until_ready()
            times.append(time.perf_counter() - start)
        return float(np.median(times))
    return max(loop(True) - loop(False), 0.0) / n


def _nothing(_value) -> None:
    pass


def _listen_to_compiles() -> None:
    """Register (once) the listener that adds JAX's compile durations to the active counter."""
    if getattr(_listen_to_compiles, "done", False):
        return

    def listen(event: str, duration: float, **_kwargs) -> None:
        counter = _active.counter
        if counter is not None and event in _COMPILE_EVENTS:
            counter.add_compile(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    _listen_to_compiles.done = True


def _report(kind: str, value) -> None:
    jax.debug.callback(functools.partial(_on_host, kind), value)


def _report_steps(steps) -> None:
    _report("solver_steps", steps)


def _counted(method, kind: str, derivative: str, forward: bool):
    """``method(problem, z) -> array`` reporting each primal evaluation as ``kind`` and each
    derivative pass as ``derivative``: a custom JVP (one report per direction) where ``forward``,
    else a custom VJP (one report per cotangent), so the problem's own mode of differentiation is
    kept. (equinox's filtered versions take the problem's arrays as arguments, not closed over.)"""
    def primal(z, problem):
        with solver_steps_reported(_report_steps):
            out = method(problem, z)
        _report(kind, out)
        return out

    if forward:
        f = eqx.filter_custom_jvp(primal)

        @f.def_jvp
        def f_jvp(primals, tangents):
            z, problem = primals
            if tangents[0] is None:
                out = primal(z, problem)
                return out, jnp.zeros_like(out)
            with solver_steps_reported(_report_steps):
                out, tangent_out = jax.jvp(lambda z: method(problem, z), (z,), (tangents[0],))
            _report(kind, out)
            _report("jvps", tangents[0])
            return out, tangent_out
        return f

    g = eqx.filter_custom_vjp(primal)

    @g.def_fwd
    def g_fwd(perturbed, z, problem):
        with solver_steps_reported(_report_steps):
            out, pullback = jax.vjp(lambda z: method(problem, z), z)
        _report(kind, out)
        return out, pullback

    @g.def_bwd
    def g_bwd(pullback, cotangent, perturbed, z, problem):
        _report(derivative, cotangent)
        return pullback(cotangent)[0]
    return g


class CountedProblem(AbstractProblem):
    """``problem`` with every evaluation counted by the active `CostCounter` (module docstring).

    Derivatives are counted in the problem's own mode: reverse mode (``jax.grad``, ``jax.vjp``,
    ``jax.jacrev``) on the problem, forward mode (``jax.jvp``, ``jax.jacfwd``) on
    ``problem.forward_mode()``, which a method differentiating in forward mode must call (as
    jcalib's do; an ODE problem needs it anyway: forward mode on the problem itself is refused).
    Not counted: reverse mode through ``forward_mode()`` (``jax.grad`` of its functions counts the
    evaluation, not the derivative) and a Hessian's second derivative passes (``jax.hessian``
    counts one gradient).

    Args:
        problem: any calibration problem.
        start: the run's start ``(n_free,)``, internal coordinates; `initial_internal` returns it
            (None: the nominal values). Methods evaluate there for their own settings (TRF's and
            Fides's objective scale), and a PEtab problem's nominal values are its published
            optimum, which a benchmarked method must not be handed.
        forward: whether derivatives are taken in forward mode (`forward_mode` sets it).
    """

    problem: AbstractProblem
    start: Float[Array, " n_free"] | None = None
    forward: bool = eqx.field(static=True, default=False)

    @property
    def space(self) -> ParameterSpace:
        return self.problem.space

    @property
    def free_names(self) -> tuple[str, ...]:
        return self.problem.free_names

    @property
    def noise_names(self) -> tuple[str, ...]:
        return self.problem.noise_names

    @property
    def prior(self):
        return self.problem.prior

    @property
    def noise_prior(self):
        return self.problem.noise_prior

    @property
    def n_observed(self) -> int:
        return self.problem.n_observed

    @property
    def sigma_available(self) -> bool:
        return self.problem.sigma_available

    @property
    def fixed(self) -> dict[str, float]:
        return self.problem.fixed

    def forward_mode(self) -> CountedProblem:
        return CountedProblem(self.problem.forward_mode(), self.start, forward=True)

    def initial_internal(self) -> Float[Array, " n_free"]:
        return self.problem.initial_internal() if self.start is None else self.start

    def solve_status(self, theta_internal: Float[ArrayLike, " n_free"]) -> int:
        return self.problem.solve_status(theta_internal)

    def _residuals_impl(self, z: Float[Array, " n_free"]) -> Float[Array, " n_observed"]:
        return _counted(type(self.problem)._residuals_impl, "residuals", "vjps", self.forward)(z, self.problem)

    def _log_likelihood_terms(self, z: Float[Array, " n_free"]) -> Float[Array, " n_terms"]:
        terms = type(self.problem)._log_likelihood_terms
        return _counted(terms, "objective", "gradients", self.forward)(z, self.problem)

    def _jacobian_impl(self, z: Float[Array, " n_free"]) -> Float[Array, "n_observed n_free"]:
        with solver_steps_reported(_report_steps):
            jac = self.problem._jacobian_impl(z)
        shape = np.asarray(jac.shape)  # static; the reported entry is batched, so each vmapped lane counts
        jax.debug.callback(lambda _: _on_host("jacobians", shape), jnp.sum(jac[:1, :1]))
        return jac


class CountedSimulator(AbstractSimulator):
    """``simulator`` with every simulation (also each vmapped lane, the padding lanes of a chunked
    batch included: they are computed) counted as ``simulations`` by the active `CostCounter`:
    what an amortized method's training data cost.

    Example:
        >>> from jcalib.benchmark.problems import get_problem
        >>> simulator = CountedSimulator(get_problem("gaussian-2").build().model)
        >>> with CostCounter() as counter:
        ...     _ = jax.vmap(simulator.simulate)(jnp.zeros((5, 2)))
        >>> counter.counts["simulations"]
        5
    """

    simulator: AbstractSimulator

    @property
    def parameters(self) -> ParameterSpace:
        return self.simulator.parameters

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.simulator.output_names

    @property
    def ts(self) -> Float[Array, " n_times"]:
        return self.simulator.ts

    def simulate_with_status(self, theta):
        out, status = self.simulator.simulate_with_status(theta)
        _report("simulations", status)
        return out, status
