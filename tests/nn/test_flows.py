"""CouplingFlow: exact inversion, log-determinants against autodiff Jacobians, a normalised
density, ActNorm initialisation, jit/vmap consistency, sampling shapes and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcalib.nn.flows import CouplingFlow, soft_clamp

N_CONTEXT = 3
CASES = [(1, False), (1, True), (3, False), (3, True)]


def _random_flow(n_params, actnorm, seed=0, scale=0.3):
    """A flow with every weight perturbed (a fresh one is the identity: zero output layers)."""
    flow = CouplingFlow(n_params, N_CONTEXT, n_blocks=3, hidden=(16, 16), actnorm=actnorm, rngs=nnx.Rngs(seed))
    params = nnx.state(flow, nnx.Param)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
    leaves = [a + scale * jax.random.normal(k, a.shape, a.dtype) for a, k in zip(leaves, keys)]
    nnx.update(flow, jax.tree_util.tree_unflatten(treedef, leaves))
    return flow


def _inputs(n_params, n=6, seed=1):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return (jax.random.normal(k1, (n, n_params), jnp.float32),
            jax.random.normal(k2, (n, N_CONTEXT), jnp.float32))


@pytest.mark.slow
@pytest.mark.parametrize("n_params,actnorm", CASES)
def test_inverts_and_log_det_matches_jacobian(n_params, actnorm):
    flow = _random_flow(n_params, actnorm)
    theta, context = _inputs(n_params)
    graphdef, state = nnx.split(flow)

    @jax.jit  # one compiled program per case (eager distrax ops are slow)
    def check(state, theta, context):
        f = nnx.merge(graphdef, state)
        z, log_det = f.forward(theta, context)
        back, log_det_inv = f.inverse(z, context)
        again = f.forward(f.inverse(theta, context)[0], context)[0]  # inverse then forward
        jac = jax.vmap(jax.jacfwd(lambda t, c: f.forward(t, c)[0]))(theta, context)
        jac_inv = jax.vmap(jax.jacfwd(lambda t, c: f.inverse(t, c)[0]))(z, context)
        return z, log_det, back, log_det_inv, again, jnp.linalg.slogdet(jac)[1], jnp.linalg.slogdet(jac_inv)[1]

    z, log_det, back, log_det_inv, again, autodiff, autodiff_inv = check(state, theta, context)
    assert float(jnp.max(jnp.abs(z - theta))) > 0.1  # not the identity
    # float32: 1e-5 absolute or relative (values up to ~5 pass through 2-3 affine steps a block)
    np.testing.assert_allclose(back, theta, rtol=1e-5, atol=1e-5)
    # inverse then forward: the inverse's round-off is amplified by the forward map's Lipschitz
    # constant (up to e^clamp per coupling step), so allow 5e-5 absolute
    np.testing.assert_allclose(again, theta, rtol=1e-5, atol=5e-5)
    np.testing.assert_allclose(log_det_inv, -log_det, rtol=1e-5, atol=1e-5)
    # log|det dz/dθ| against slogdet of the autodiff Jacobian (float32 agreement)
    np.testing.assert_allclose(log_det, autodiff, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(log_det_inv, autodiff_inv, rtol=1e-5, atol=2e-5)
    assert float(jnp.max(jnp.abs(log_det))) > 0.1  # a non-trivial volume change


@pytest.mark.slow
def test_fresh_flow_is_the_identity_and_density_is_normalised():
    flow = CouplingFlow(2, N_CONTEXT, n_blocks=2, hidden=(8,), rngs=nnx.Rngs(0))
    theta, context = _inputs(2)
    z, log_det = flow.forward(theta, context)
    np.testing.assert_array_equal(z, theta)
    np.testing.assert_array_equal(log_det, 0.0)
    # a trained-looking 1-D flow still integrates to one (trapezoid on a wide grid)
    graphdef, state = nnx.split(_random_flow(1, True))
    grid = jnp.linspace(-30.0, 30.0, 60001, dtype=jnp.float32)

    @jax.jit
    def mass(state, c):
        density = jnp.exp(nnx.merge(graphdef, state).log_prob(grid[:, None], c))
        return jnp.trapezoid(density, grid)

    for c in _inputs(1, n=3)[1]:
        assert float(mass(state, c)) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
def test_jit_vmap_and_broadcasting_are_consistent():
    flow = _random_flow(3, True)
    theta, context = _inputs(3)
    z, log_det = flow.forward(theta, context)
    graphdef, state = nnx.split(flow)

    @jax.jit
    def forward(state, t, c):
        return nnx.merge(graphdef, state).forward(t, c)

    zj, ldj = forward(state, theta, context)
    np.testing.assert_allclose(zj, z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ldj, log_det, rtol=1e-6, atol=1e-6)
    zv, ldv = jax.vmap(lambda t, c: flow.forward(t, c))(theta, context)  # one sample at a time
    np.testing.assert_allclose(zv, z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ldv, log_det, rtol=1e-6, atol=1e-6)
    zb, _ = flow.forward(theta, context[0])  # one context for the whole batch broadcasts
    np.testing.assert_allclose(zb[0], z[0], rtol=1e-6, atol=1e-6)
    lp = flow.log_prob(theta, context)
    np.testing.assert_allclose(lp, -0.5 * jnp.sum(z**2, -1) - 1.5 * float(np.log(2 * np.pi)) + log_det, atol=1e-5)


@pytest.mark.slow
def test_sample_shapes_keys_and_distribution():
    flow = _random_flow(2, False)
    _, context = _inputs(2, n=4)
    key = jax.random.key(3)
    graphdef, state = nnx.split(flow)
    sample = jax.jit(lambda state, k, c, n: nnx.merge(graphdef, state).sample(k, c, n), static_argnums=3)
    one = sample(state, key, context[0], 5)
    assert one.shape == (5, 2)
    many = sample(state, key, context, 5)
    assert many.shape == (4, 5, 2)
    np.testing.assert_allclose(many[2], sample(state, jax.random.split(key, 4)[2], context[2], 5), rtol=1e-6,
                               atol=1e-6)
    # draws pushed forward are standard normal: mean 0, variance 1 within 5 MCSE
    z = jax.jit(lambda state, t, c: nnx.merge(graphdef, state).forward(t, c)[0])(
        state, sample(state, key, context[1], 4000), context[1])
    assert np.all(np.abs(np.mean(z, 0)) < 5 / np.sqrt(4000))
    assert np.all(np.abs(np.var(z, 0) - 1.0) < 5 * np.sqrt(2 / 4000))


@pytest.mark.slow
def test_actnorm_data_initialisation_standardises_the_first_block_input():
    flow = CouplingFlow(3, N_CONTEXT, n_blocks=2, hidden=(8,), actnorm=True, rngs=nnx.Rngs(0))
    theta = 3.0 + 2.0 * jax.random.normal(jax.random.key(0), (500, 3), jnp.float32)
    context = jax.random.normal(jax.random.key(1), (500, N_CONTEXT), jnp.float32)
    flow.initialize_actnorm(theta, context)
    graphdef, state = nnx.split(flow)

    @jax.jit
    def there_and_back(state, theta, context):
        f = nnx.merge(graphdef, state)
        z = f.forward(theta, context)[0]
        return z, f.inverse(z, context)[0]

    z, back = there_and_back(state, theta, context)  # couplings start as the identity: z = standardised θ
    np.testing.assert_allclose(np.mean(z, 0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.std(z, 0), 1.0, atol=1e-4)
    np.testing.assert_allclose(back, theta, atol=1e-4)


def test_soft_clamp_is_bounded_odd_and_linear_near_zero():
    s = jnp.array([-1e3, -1.0, 0.0, 1e-3, 1e3], jnp.float32)
    out = soft_clamp(s, 1.9)
    assert float(jnp.max(jnp.abs(out))) < 1.9 and float(out[-1]) > 1.89
    assert float(out[3]) == pytest.approx(2e-3 / np.pi, rel=1e-5)  # slope 2/π at 0
    np.testing.assert_array_equal(soft_clamp(-s, 1.9), -out)


@pytest.mark.slow
def test_bad_input():
    flow = CouplingFlow(2, N_CONTEXT, n_blocks=1, hidden=(4,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"input must have shape \(..., n_params=2\); got \(5, 3\)"):
        flow.forward(jnp.zeros((5, 3)), jnp.zeros((5, N_CONTEXT)))
    with pytest.raises(ValueError, match=r"context must have shape \(..., n_context=3\)"):
        flow.inverse(jnp.zeros((5, 2)), jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match="batch axes .* do not broadcast"):
        flow.log_prob(jnp.zeros((5, 2)), jnp.zeros((4, N_CONTEXT)))
    with pytest.raises(ValueError, match="n must be a positive integer; got 0"):
        flow.sample(jax.random.key(0), jnp.zeros(N_CONTEXT), 0)
    with pytest.raises(ValueError, match=r"context must have shape \(n_context=3,\) or \(n_obs, n_context\)"):
        flow.sample(jax.random.key(0), jnp.zeros((2, 2, N_CONTEXT)), 3)
    with pytest.raises(ValueError, match="n_blocks must be an integer >= 1; got 0"):
        CouplingFlow(2, 3, n_blocks=0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="clamp must be positive"):
        CouplingFlow(2, 3, clamp=-1.0, rngs=nnx.Rngs(0))
