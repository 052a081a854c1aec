"""jcalib.solve: reverse-mode derivatives along the steps the adaptive solve took (`Replay`),
against forward mode and central differences on every component; statuses, jit/vmap."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.rosenbrock import Rodas5P
from jcalib.solve import Replay, solve
from tests.helpers import central_differences

CONTROLLER = dfx.PIDController(rtol=1e-8, atol=1e-10)


def _oscillators(t, y, mu):
    """Stiff van der Pol oscillators, one per entry of ``mu``: ``x'' = mu (1 - x^2) x' - x``."""
    k = mu.shape[0]
    x, v = y[:k], y[k:]
    return jnp.concatenate([v, mu * (1 - x ** 2) * v - x])


def _end(y0, mu, t1, adjoint, controller=CONTROLLER):
    sol = solve(dfx.ODETerm(_oscillators), Rodas5P(), 0.0, t1, None, y0, mu, dfx.SaveAt(ts=jnp.asarray([0.5 * t1, t1])),
                controller, adjoint, 100_000)
    return sol.ys


Y0 = jnp.array([2.0, 1.5, 0.1, -0.2])
MU = jnp.array([30.0, 100.0])


def test_replay_takes_the_recorded_steps():
    term = dfx.ODETerm(_oscillators)
    adaptive = dfx.diffeqsolve(term, Rodas5P(), 0.0, 60.0, None, Y0, args=MU, saveat=dfx.SaveAt(steps=True),
                               stepsize_controller=CONTROLLER, max_steps=20_000)
    assert int(adaptive.stats["num_rejected_steps"]) > 10  # decisions that the replay must not take again
    ends = adaptive.ts
    replay = dfx.diffeqsolve(term, Rodas5P(), 0.0, 60.0, None, Y0, args=MU, saveat=dfx.SaveAt(steps=True),
                             stepsize_controller=Replay(ends, CONTROLLER.rtol, CONTROLLER.atol), max_steps=20_000)
    n = int(adaptive.stats["num_accepted_steps"])
    assert int(replay.stats["num_steps"]) == n and int(replay.stats["num_rejected_steps"]) == 0
    np.testing.assert_array_equal(np.asarray(replay.ts[:n]), np.asarray(ends[:n]))
    np.testing.assert_allclose(np.asarray(replay.ys[:n]), np.asarray(adaptive.ys[:n]), rtol=1e-9, atol=1e-12)


def _weighted_end(p, adjoint, controller=CONTROLLER):
    """A weighted sum of both saved states of the oscillators of ``p = (y0, mu)``."""
    return jnp.sum(_end(p[:4], p[4:], 60.0, adjoint, controller) * jnp.arange(1.0, 9.0).reshape(2, 4))


# one compiled reverse-mode gradient for both tests below (compiling it is most of their time)
REVERSE = jax.jit(jax.grad(lambda p: _weighted_end(p, dfx.RecursiveCheckpointAdjoint())))
P = jnp.concatenate([Y0, MU])


def test_reverse_mode_matches_forward_mode_and_central_differences_on_every_component():
    forward = jax.jit(jax.jacfwd(lambda p: _weighted_end(p, dfx.ForwardMode())))
    g_reverse, g_forward = np.asarray(REVERSE(P)), np.asarray(forward(P))
    np.testing.assert_allclose(g_reverse, g_forward, rtol=1e-6, atol=1e-9)
    tight = dfx.PIDController(rtol=1e-12, atol=1e-14)
    fd = central_differences(jax.jit(lambda p: _weighted_end(p, dfx.ForwardMode(), tight)), np.asarray(P), 1e-5)
    np.testing.assert_allclose(g_reverse, fd, rtol=1e-3)


def test_jit_and_vmap_of_the_reverse_gradient_agree_with_single_calls():
    ps = jnp.stack([P, P.at[4:].set(jnp.array([40.0, 80.0]))])
    batched = np.asarray(jax.jit(jax.vmap(REVERSE))(ps))
    single = np.stack([np.asarray(REVERSE(p)) for p in ps])
    np.testing.assert_allclose(batched, single, rtol=1e-9)


def test_a_plain_float_argument_is_differentiated():
    term = dfx.ODETerm(lambda t, y, k: -k * y)

    def end(k):
        return solve(term, dfx.Tsit5(), 0.0, 1.0, None, jnp.ones(1), k, dfx.SaveAt(t1=True), CONTROLLER,
                     dfx.RecursiveCheckpointAdjoint(), 1000).ys[-1, 0]

    assert float(jax.grad(end)(2.0)) == pytest.approx(-np.exp(-2.0), rel=1e-7)


def test_a_failed_solve_keeps_its_status_and_values_as_diffrax_returns_them():
    saveat = dfx.SaveAt(ts=jnp.asarray([1.0, 60.0]), t1=True)
    sol = jax.jit(lambda mu: solve(dfx.ODETerm(_oscillators), Rodas5P(), 0.0, 60.0, None, Y0, mu, saveat,
                                   CONTROLLER, dfx.RecursiveCheckpointAdjoint(), 20))(MU)
    plain = dfx.diffeqsolve(dfx.ODETerm(_oscillators), Rodas5P(), 0.0, 60.0, None, Y0, args=MU, saveat=saveat,
                            stepsize_controller=CONTROLLER, max_steps=20, throw=False)
    assert sol.result == dfx.RESULTS.max_steps_reached == plain.result
    assert int(sol.stats["num_steps"]) == 20
    np.testing.assert_array_equal(np.asarray(sol.ys), np.asarray(plain.ys))  # inf where not reached


def test_saveat_other_than_ts_and_t1_is_refused():
    with pytest.raises(ValueError, match="ts and/or t1"):
        solve(dfx.ODETerm(_oscillators), Rodas5P(), 0.0, 1.0, None, Y0, MU, dfx.SaveAt(steps=True), CONTROLLER,
              dfx.RecursiveCheckpointAdjoint(), 100)


@pytest.mark.slow
def test_reverse_mode_on_twenty_stiff_oscillators_agrees_with_forward_mode():
    """Without the replay, diffrax's checkpointed backward pass re-decided rejected steps and this
    gradient was off by 12 % (5e-5 with it: the problem's own sensitivity to round-off)."""
    mu = jnp.linspace(100.0, 1000.0, 20)
    y0 = jnp.concatenate([jnp.full(20, 2.0), jnp.zeros(20)])
    keys = jax.random.split(jax.random.key(1), 3)
    v_y, v_mu, u = (jax.random.normal(k, s) for k, s in zip(keys, (y0.shape, mu.shape, y0.shape)))

    def end(y0, mu, adjoint):
        return solve(dfx.ODETerm(_oscillators), Rodas5P(), 0.0, 3000.0, None, y0, mu, dfx.SaveAt(t1=True), CONTROLLER,
                     adjoint, 100_000).ys[-1]

    tangent = jax.jit(lambda: jax.jvp(lambda y, m: end(y, m, dfx.ForwardMode()), (y0, mu), (v_y, v_mu))[1])()
    c_y, c_mu = jax.jit(lambda: jax.vjp(lambda y, m: end(y, m, dfx.RecursiveCheckpointAdjoint()), y0, mu)[1](u))()
    forward = float(jnp.vdot(u, tangent))
    reverse = float(jnp.vdot(c_y, v_y) + jnp.vdot(c_mu, v_mu))
    assert reverse == pytest.approx(forward, rel=1e-3)
