"""`SBMLModel`: an SBML model as a jcalib model, integrated with a solver restart at each event and each
piecewise switch in time."""

from __future__ import annotations

from collections.abc import Mapping

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, Float

from jcalib.model import AbstractModel
from jcalib.rosenbrock import JacobianTerm
from jcalib.solve import solve

__all__ = ["MAX_EVENT_RESTARTS", "SBMLModel"]


MAX_EVENT_RESTARTS = 100
"""State-dependent events: the most restarts of the solver in one simulation (more events end it
with ``max_steps_reached``, so it is reported as failed, never truncated silently)."""


def _solution(t0, t1, ts, ys, result, steps) -> dfx.Solution:
    """A diffrax Solution of states ``ys`` at ``ts`` pieced together from several solves."""
    return dfx.Solution(t0=t0, t1=t1, ts=ts, ys=ys, interpolation=None, stats={"num_steps": steps}, result=result,
                        solver_state=None, controller_state=None, made_jump=None, event_mask=None)


class SBMLModel(AbstractModel):
    """An SBML model as a jcalib model (build it with `model_from_sbml`).

    Attributes (besides `AbstractModel`'s):
        stoichiometry: ``(n_states, n_reactions)`` stoichiometric matrix (0 rows for states set
            by rate rules).
        conservation: ``(n_conserved, n_states)`` the conserved moieties of the reactions, as
            weights of the states' amounts (`conserved_moieties`).
        condition_names: the ids held in ``experiment.conditions`` (compartment sizes,
            species initial values, constant parameters moved there), in code order.
        reaction_ids: the SBML reaction ids, columns of `stoichiometry`.
        source: the generated JAX code, for reading and debugging.
        event_ids: the SBML events: `integrate` restarts the solver at each (module docstring).
        switch_conditions: the piecewise conditions that switch at a time ``T`` constant in time
            (e.g. ``tau - time > 0``): `integrate` restarts the solver at each ``T`` too.
    """

    stoichiometry: Float[Array, "n_states n_reactions"]
    conservation: Float[Array, "n_conserved n_states"]
    condition_names: tuple[str, ...] = eqx.field(static=True)
    reaction_ids: tuple[str, ...] = eqx.field(static=True)
    source: str = eqx.field(static=True)
    _rhs_fn: object = eqx.field(static=True)
    _init_fn: object = eqx.field(static=True)
    _observe_fn: object = eqx.field(static=True)
    _jacobian_fn: object = eqx.field(static=True, default=None)
    _output_fns: tuple = eqx.field(static=True, default=())
    event_ids: tuple[str, ...] = eqx.field(static=True, default=())
    _event_fns: tuple = eqx.field(static=True, default=())
    _event_fires_at_t0: tuple[bool, ...] = eqx.field(static=True, default=())
    _event_triggers_fn: object = eqx.field(static=True, default=None)
    _state_events: bool = eqx.field(static=True, default=False)
    switch_conditions: tuple[str, ...] = eqx.field(static=True, default=())
    _switch_times_fn: object = eqx.field(static=True, default=None)

    def _conditions(self):
        conditions = self.experiment.conditions
        if not self.condition_names:
            return jnp.zeros((0,))
        return jnp.stack([jnp.asarray(conditions[name], dtype=jnp.float64) for name in self.condition_names])

    def vector_field(self, t, y, theta):
        return self._field(t, y, theta, t)

    def _field(self, t, y, theta, t_switch):
        """dy/dt with the piecewise switches in time (`switch_conditions`) evaluated at ``t_switch``."""
        rates, scale, rate_rules = self._rhs_fn(t, y, theta, self._conditions(), t_switch)
        return (self.stoichiometry @ rates) * scale + rate_rules

    def _segment_field(self, t, y, args):
        """`_field` with ``args = (theta, t_switch)``, for the solves between events."""
        return self._field(t, y, *args)

    def _segment_jacobian(self, t, y, args):
        return self._field_jacobian(t, y, *args)

    def state_jacobian(self, t, y, theta):
        """``d vector_field / dy``, assembled from the reactions' structure (`jcalib.io.sbml.codegen`)
        where the compartment sizes do not depend on the state, else ``jax.jacfwd``."""
        return self._field_jacobian(t, y, theta, t)

    def _field_jacobian(self, t, y, theta, t_switch):
        if self._jacobian_fn is None:
            return jax.jacfwd(lambda x: self._field(t, x, theta, t_switch))(y)
        return jnp.asarray(self._jacobian_fn(t, y, theta, self._conditions(), t_switch), dtype=y.dtype)

    def initial_state(self, theta):
        t0 = jnp.asarray(self.experiment.t0, dtype=jnp.float64)
        return self._init_fn(t0, theta, self._conditions(), t0)

    def observe(self, t, y, theta):
        return self._observe_fn(t, y, theta, self._conditions(), t)

    def observe_used(self, t, y, theta, used):
        """`observe`, each output computed alone (generated per output), from ``y`` where it is
        ``used``, else from a state of ones."""
        conditions, ones = self._conditions(), jnp.ones_like(y)
        return jnp.stack([jnp.asarray(fn(t, jnp.where(used[k], y, ones), theta, conditions, t)[0], dtype=y.dtype)
                          for k, fn in enumerate(self._output_fns)])

    def integrate(self, y0, theta, t0, t1, ts) -> dfx.Solution:
        """`AbstractModel.integrate`, restarting the solver at each event and each time switch:
        these times in order split ``[t0, t1]`` into segments (one ``lax.scan`` over them, one
        compiled solve); at an event's time ``T`` its assignments change the state, and a state
        saved at ``T`` is the one after the event. An event with ``T > t1`` does not happen; one
        with ``T <= t0`` happens at ``t0`` only if its trigger's ``initialValue`` is false (SBML).
        Within a segment the time switches are evaluated at its middle, where they are
        constant (`switch_conditions`)."""
        if not self._event_fns and self._switch_times_fn is None:
            return super().integrate(y0, theta, t0, t1, ts)
        if self._state_events:
            return self._integrate_state_events(y0, theta, t0, t1, ts)
        conditions = self._conditions()
        t0, t1 = jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(t1, dtype=jnp.float64)
        # time events: the "triggers" are their times T (functions of parameters and conditions only);
        # time switches are events without assignments
        times = jnp.asarray(self._event_triggers_fn(t0, y0, theta, conditions, t0), dtype=jnp.float64)
        fires = (times <= t1) & ((times > t0) | jnp.asarray(self._event_fires_at_t0, dtype=bool))
        if self._switch_times_fn is not None:
            switch_times = jnp.asarray(self._switch_times_fn(t0, y0, theta, conditions, t0), dtype=jnp.float64)
            times = jnp.concatenate([times, switch_times])
            fires = jnp.concatenate([fires, jnp.zeros(switch_times.shape, dtype=bool)])
        order = jnp.argsort(times)
        bounds = jnp.clip(times[order], t0, t1)
        starts = jnp.concatenate([t0[None], bounds])
        ends = jnp.concatenate([bounds, t1[None]])
        events = jnp.concatenate([order, jnp.zeros(1, dtype=order.dtype)])
        event_fires = jnp.concatenate([fires[order], jnp.zeros(1, dtype=bool)])
        term = JacobianTerm(self._segment_field, self._segment_jacobian)  # bound methods are pytrees

        def segment(carry, xs):
            y, ys, result, steps = carry
            start, end, event, fire = xs
            sol = solve(term, self.solver, start, end, self.dt0, y, (theta, 0.5 * (start + end)),
                        dfx.SaveAt(ts=jnp.clip(ts, start, end), t1=True), self.controller, self.adjoint, self.max_steps)
            ys = jnp.where((ts >= start)[:, None], sol.ys[:-1], ys)
            result = dfx.RESULTS.where(result == dfx.RESULTS.successful, sol.result, result)
            which = (jnp.arange(len(self._event_fns)) == event) & fire  # a switch (event >= n_events): none
            return (self._assign(end, sol.ys[-1], theta, conditions, which), ys, result,
                    steps + sol.stats["num_steps"]), None

        init = (y0, jnp.full((ts.shape[0], y0.shape[0]), jnp.nan), dfx.RESULTS.successful, jnp.asarray(0))
        (_, ys, result, steps), _ = jax.lax.scan(segment, init, (starts, ends, events, event_fires))
        return _solution(t0, t1, ts, ys, result, steps)

    def _assign(self, t, y, theta, conditions, which):
        """The state after the assignments of the events flagged in ``which`` ``(n_events,)``,
        all computed from ``y``, the state before them."""
        new = y
        for k, assign in enumerate(self._event_fns):
            changed = assign(t, y, theta, conditions, t)
            new = jnp.where(which[k] & (changed != y), changed, new)
        return new

    def _integrate_state_events(self, y0, theta, t0, t1, ts) -> dfx.Solution:
        """Events whose triggers ``h(t, x) > 0`` depend on the state: diffrax's event
        detection (root finding on the dense output) stops the solve where some ``h`` changes
        sign; the events whose trigger became true apply their assignments; the solve
        restarts there (a ``lax.while_loop``, at most `MAX_EVENT_RESTARTS` restarts, else the
        result is ``max_steps_reached``). At ``t0`` an event whose trigger is true fires if
        its ``initialValue`` is false. Forward-mode derivatives only (the loop has no reverse
        mode)."""
        conditions = self._conditions()
        t0, t1 = jnp.asarray(t0, dtype=jnp.float64), jnp.asarray(t1, dtype=jnp.float64)
        term = self.term()
        n_events = len(self._event_fns)

        def triggers(t, y):
            return jnp.asarray(self._event_triggers_fn(t, y, theta, conditions, t), dtype=jnp.float64)

        def cond_fn(k):
            return lambda t, y, args, **kwargs: triggers(t, y)[k]

        event = dfx.Event([cond_fn(k) for k in range(n_events)],
                          root_finder=optx.Newton(rtol=self.controller.rtol, atol=self.controller.atol))
        y0 = self._assign(t0, y0, theta, conditions, (triggers(t0, y0) > 0) & jnp.asarray(self._event_fires_at_t0))

        def body(carry):
            start, y, ys, result, steps, n, _ = carry
            sol = dfx.diffeqsolve(
                term, self.solver, start, t1, self.dt0, y, args=theta,
                saveat=dfx.SaveAt(subs=[dfx.SubSaveAt(ts=jnp.clip(ts, start, t1)), dfx.SubSaveAt(t1=True)]),
                stepsize_controller=self.controller, adjoint=self.adjoint, max_steps=self.max_steps, event=event,
                throw=False)
            (_, end), (saved, y_end) = (sol.ts[0], sol.ts[1][0]), (sol.ys[0], sol.ys[1][0])
            stopped = sol.result == dfx.RESULTS.event_occurred
            take = (ts >= start) & jnp.where(stopped, ts < end, ts <= end)
            ys = jnp.where(take[:, None], saved, ys)
            # the events whose h changed sign upwards (their trigger became true): h <= 0 at the start
            which = jnp.stack([jnp.asarray(m) for m in sol.event_mask]) & (triggers(start, y) <= 0)
            y_next = self._assign(end, y_end, theta, conditions, which & stopped)
            ok = (sol.result == dfx.RESULTS.successful) | stopped
            result = dfx.RESULTS.where(ok, result, sol.result)
            done = ~stopped | ~ok | (n + 1 >= MAX_EVENT_RESTARTS)
            result = dfx.RESULTS.where(stopped & (n + 1 >= MAX_EVENT_RESTARTS), dfx.RESULTS.max_steps_reached, result)
            return end, y_next, ys, result, steps + sol.stats["num_steps"], n + 1, done

        init = (t0, y0, jnp.full((ts.shape[0], y0.shape[0]), jnp.nan), dfx.RESULTS.successful, jnp.asarray(0),
                jnp.asarray(0), jnp.asarray(False))
        _, _, ys, result, steps, _, _ = jax.lax.while_loop(lambda c: ~c[-1], body, init)
        return _solution(t0, t1, ts, ys, result, steps)

    def with_conditions(self, values: Mapping[str, float]) -> SBMLModel:
        """A copy with other compartment sizes, initial values or constant parameters (see
        `condition_names`); the pytree structure stays the same, so compiled solves are reused.

        Raises:
            ValueError: an id that is not a condition of the model.
        """
        unknown = sorted(set(values) - set(self.condition_names))
        if unknown:
            raise ValueError(f"with_conditions(): {unknown} are not conditions of the model; known: "
                             f"{list(self.condition_names)}")
        conditions = dict(self.experiment.conditions)
        conditions.update({k: jnp.asarray(float(v)) for k, v in values.items()})
        return eqx.tree_at(lambda m: m.experiment.conditions, self, conditions)

    def conserved_moieties(self, y, theta) -> Float[Array, " n_conserved"]:
        """The quantities the reactions conserve, ``conservation @ amounts`` (an amount is a
        concentration times its compartment's size); constant along every trajectory, so a
        steady state depends on the initial state through them."""
        t0 = jnp.asarray(self.experiment.t0, dtype=jnp.float64)
        scale = self._rhs_fn(t0, y, theta, self._conditions(), t0)[1]  # 1 / compartment size or 1
        return self.conservation @ (y / scale)

    def reaction_rates(self, t, y, theta) -> Float[Array, " n_reactions"]:
        """The reaction rates (kinetic laws, substance / time) at one state."""
        return self._rhs_fn(t, y, theta, self._conditions(), t)[0]
