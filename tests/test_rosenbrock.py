"""jcalib.rosenbrock.Rodas5P against analytic solutions, its convergence order, finite
differences and jit/vmap consistency."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jcalib.rosenbrock import SMALL_SYSTEM, JacobianTerm, Rodas5P, _lu_solver, state_jacobian
from tests.helpers import central_differences

TIGHT = dfx.PIDController(rtol=1e-13, atol=1e-13)


def _nonlinear(t, y, args):
    """A non-autonomous nonlinear test problem (both df/dy and df/dt matter)."""
    return jnp.stack([-y[1] + 0.1 * jnp.cos(t) * y[0], y[0] - 0.5 * y[1] ** 3 + 0.2 * t])


Y0 = jnp.array([1.0, 0.5])


@pytest.fixture(scope="module")
def nonlinear_reference():
    ts = jnp.linspace(0.0, 2.0, 41)
    sol = dfx.diffeqsolve(dfx.ODETerm(_nonlinear), dfx.Dopri8(), 0.0, 2.0, 1e-3, Y0, saveat=dfx.SaveAt(ts=ts),
                          stepsize_controller=TIGHT, max_steps=100_000)
    return ts, np.asarray(sol.ys)


@jax.jit
def _constant_steps(dt, ts):
    return dfx.diffeqsolve(dfx.ODETerm(_nonlinear), Rodas5P(), 0.0, 2.0, dt, Y0,
                           saveat=dfx.SaveAt(ts=ts), max_steps=1000).ys


@pytest.mark.slow
def test_order_five_at_steps_and_in_between(nonlinear_reference):
    """Global error with constant steps falls as h^5 (Rodas5P is order 5), at the step ends and
    at observation times inside steps (dense output)."""
    ts, ref = nonlinear_reference
    at_ends = [np.max(np.abs(np.asarray(_constant_steps(2.0 / n, ts[-1:])) - ref[-1])) for n in (10, 20, 40)]
    between = [np.max(np.abs(np.asarray(_constant_steps(2.0 / n, ts)) - ref)) for n in (7, 14, 28)]  # inside steps
    for errors in (at_ends, between):
        slopes = np.log2(np.asarray(errors[:-1]) / np.asarray(errors[1:]))
        assert np.all((slopes > 4.6) & (slopes < 5.6)), slopes


def test_stiff_linear_system_against_expm():
    """y' = A y with eigenvalues -0.1 ... -1e4 (stiff): adaptive Rodas5P at rtol 1e-8 matches
    expm(A t) y0 and takes far fewer steps than the stiffness would force on an explicit method."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    a = q @ np.diag(-np.logspace(-1, 4, 6)) @ q.T
    y0 = rng.standard_normal(6)
    ts = np.array([0.0, 0.01, 0.1, 1.0, 5.0, 10.0])
    sol = dfx.diffeqsolve(dfx.ODETerm(lambda t, y, m: m @ y), Rodas5P(), 0.0, 10.0, None, jnp.asarray(y0),
                          args=jnp.asarray(a), saveat=dfx.SaveAt(ts=jnp.asarray(ts)),
                          stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-10), max_steps=10_000)
    exact = np.stack([scipy.linalg.expm(a * t) @ y0 for t in ts])
    np.testing.assert_allclose(np.asarray(sol.ys), exact, rtol=1e-6, atol=1e-9)
    assert int(sol.stats["num_steps"]) < 500  # explicit stability would need ~1e4 * 10 / 3 steps


@pytest.mark.slow
def test_robertson_matches_kvaerno5_with_fewer_steps():
    """The stiff Robertson kinetics to t = 1e5: the same solution as diffrax's Kvaerno5 at
    tight tolerances, and mass conservation (the sum of the three species stays 1)."""
    def robertson(t, y, args):
        return jnp.stack([-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
                          3e7 * y[1] ** 2])

    ts = jnp.logspace(-4, 5, 10)
    kwargs = dict(saveat=dfx.SaveAt(ts=ts), max_steps=200_000)
    ours = dfx.diffeqsolve(dfx.ODETerm(robertson), Rodas5P(), 0.0, 1e5, 1e-6, jnp.array([1.0, 0.0, 0.0]),
                           stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-12), **kwargs)
    ref = dfx.diffeqsolve(dfx.ODETerm(robertson), dfx.Kvaerno5(), 0.0, 1e5, 1e-6, jnp.array([1.0, 0.0, 0.0]),
                          stepsize_controller=dfx.PIDController(rtol=1e-11, atol=1e-15), **kwargs)
    np.testing.assert_allclose(np.asarray(ours.ys), np.asarray(ref.ys), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(np.asarray(ours.ys).sum(axis=1), 1.0, rtol=1e-10)
    assert int(ours.stats["num_steps"]) < int(ref.stats["num_steps"])


def _decay_solve(adjoint):
    @jax.jit
    def solve(k):
        """y' = -k0 y + k1 sin(t): outputs at three times, as a function of (k0, k1)."""
        return dfx.diffeqsolve(dfx.ODETerm(lambda t, y, k: -k[0] * y + k[1] * jnp.sin(t)), Rodas5P(), 0.0, 3.0,
                               None, jnp.array([1.0]), args=k, saveat=dfx.SaveAt(ts=jnp.array([0.5, 1.7, 3.0])),
                               stepsize_controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                               adjoint=adjoint).ys[:, 0]
    return solve


@pytest.mark.slow
def test_derivatives_forward_reverse_and_finite_differences():
    k = jnp.array([2.0, 0.7])
    forward = np.asarray(jax.jit(jax.jacfwd(_decay_solve(dfx.ForwardMode())))(k))
    solve = _decay_solve(dfx.RecursiveCheckpointAdjoint())
    reverse = np.asarray(jax.jit(jax.jacrev(solve))(k))
    fd = central_differences(lambda x: solve(jnp.asarray(x)), k)
    np.testing.assert_allclose(forward, fd, rtol=1e-6, atol=1e-9)
    # the same discrete derivative, summed in another order over ~100 steps: round-off apart
    np.testing.assert_allclose(reverse, forward, rtol=1e-9, atol=1e-12)
    # the analytic solution: y = e^{-k0 t} + k1 (k0 sin t - cos t + e^{-k0 t}) / (1 + k0^2)
    t = np.array([0.5, 1.7, 3.0])
    k0, k1 = 2.0, 0.7
    exact = np.exp(-k0 * t) + k1 * (k0 * np.sin(t) - np.cos(t) + np.exp(-k0 * t)) / (1 + k0**2)
    np.testing.assert_allclose(np.asarray(solve(k)), exact, rtol=1e-8)


@pytest.mark.slow
def test_jit_and_vmap_agree_with_eager_loop():
    solve = _decay_solve(dfx.RecursiveCheckpointAdjoint())
    ks = jnp.array([[2.0, 0.7], [50.0, 1.0], [0.1, -0.3]])
    batched = np.asarray(jax.vmap(solve)(ks))
    looped = np.stack([np.asarray(solve(k)) for k in ks])
    np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("n", [3, SMALL_SYSTEM + 4])
def test_both_linear_solves_and_their_derivatives(n):
    """Both branches of `_lu_solver` (explicit inverse up to SMALL_SYSTEM states, triangular
    solves above) solve a system that needs row pivoting, and their custom derivative is the
    analytic one, d(A^-1 b) = A^-1 (db - dA A^-1 b), in forward and reverse mode."""
    rng = np.random.default_rng(n)
    matrix = rng.standard_normal((n, n))
    matrix[0, 0] = 1e-14  # a zero-ish first pivot: fails without row exchanges
    b = rng.standard_normal(n)
    dmatrix, db = rng.standard_normal((n, n)), rng.standard_normal(n)

    def solve(a, rhs):
        return _lu_solver(a)(rhs)

    x = np.asarray(solve(jnp.asarray(matrix), jnp.asarray(b)))
    np.testing.assert_allclose(matrix @ x, b, rtol=1e-9, atol=1e-9)
    _, dx = jax.jvp(solve, (jnp.asarray(matrix), jnp.asarray(b)), (jnp.asarray(dmatrix), jnp.asarray(db)))
    np.testing.assert_allclose(np.asarray(dx), np.linalg.solve(matrix, db - dmatrix @ x), rtol=1e-8, atol=1e-10)
    cotangent = rng.standard_normal(n)
    grad_a, grad_b = jax.grad(lambda a, rhs: solve(a, rhs) @ cotangent, argnums=(0, 1))(jnp.asarray(matrix),
                                                                                        jnp.asarray(b))
    adjoint = np.linalg.solve(matrix.T, cotangent)  # d(c.x)/db = A^-T c, d(c.x)/dA = -(A^-T c) x^T
    np.testing.assert_allclose(np.asarray(grad_b), adjoint, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.asarray(grad_a), -np.outer(adjoint, x), rtol=1e-8, atol=1e-10)


def test_non_finite_vector_field_is_a_failed_solve_not_numbers():
    """A vector field that turns NaN is rejected step after step: the solve ends with
    max_steps_reached (jcalib reports MAX_STEPS and NaN outputs), never with numbers."""
    term = dfx.ODETerm(lambda t, y, args: jnp.where(t > 0.5, jnp.nan, -y))
    sol = dfx.diffeqsolve(term, Rodas5P(), 0.0, 1.0, 0.1, jnp.ones(2), max_steps=50, throw=False,
                          stepsize_controller=dfx.PIDController(rtol=1e-6, atol=1e-8))
    assert sol.result == dfx.RESULTS.max_steps_reached


def test_refuses_a_state_that_is_not_one_array():
    term = dfx.ODETerm(lambda t, y, args: {"a": -y["a"]})
    with pytest.raises(ValueError, match="Rodas5P: the state must be one 1-D array"):
        dfx.diffeqsolve(term, Rodas5P(), 0.0, 1.0, 0.1, {"a": jnp.ones(2)})


def test_the_term_s_own_jacobian_is_the_one_a_step_uses():
    """`JacobianTerm`: a correct Jacobian gives the jacfwd solution; a NaN Jacobian (which jacfwd
    would never give for this field) makes every step fail, so the solver did use it."""
    field = lambda t, y, k: -k * y  # noqa: E731
    controller = dfx.PIDController(rtol=1e-8, atol=1e-10)

    def solve(term):
        return dfx.diffeqsolve(term, Rodas5P(), 0.0, 1.0, None, jnp.ones(3), args=jnp.array([1.0, 10.0, 100.0]),
                               stepsize_controller=controller, max_steps=200, throw=False)

    own = solve(JacobianTerm(field, lambda t, y, k: -jnp.diag(k)))
    plain = solve(dfx.ODETerm(field))
    np.testing.assert_array_equal(own.ys, plain.ys)
    np.testing.assert_allclose(own.ys[-1], np.exp(-np.array([1.0, 10.0, 100.0])), rtol=1e-6, atol=1e-9)
    broken = solve(JacobianTerm(field, lambda t, y, k: jnp.full((3, 3), jnp.nan)))
    assert broken.result != dfx.RESULTS.successful
    assert state_jacobian(JacobianTerm(field, lambda t, y, k: -jnp.diag(k)), 0.0, jnp.ones(3),
                          jnp.array([1.0, 2.0, 3.0])).shape == (3, 3)


def test_a_step_of_zero_length_is_the_identity_with_finite_reverse_derivatives():
    """A finished lane of a vmapped solve steps on in place; its discarded step must not put a
    NaN into the other lanes' reverse-mode derivatives (0 * NaN)."""
    term = dfx.ODETerm(_nonlinear)

    def step(y):
        y1, error, _, _, _ = Rodas5P().step(term, jnp.asarray(2.0), jnp.asarray(2.0), y, None, None, False)
        return y1, error

    y1, error = step(Y0)
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(Y0))
    np.testing.assert_array_equal(np.asarray(error), 0.0)
    grad = jax.grad(lambda y: jnp.sum(step(y)[0] * 0.0))(Y0)  # the lane's zero cotangent
    np.testing.assert_array_equal(np.asarray(grad), 0.0)
