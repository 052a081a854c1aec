"""AbstractModel, Experiment and simulate_batch, on four_substance_reactions."""

import os
import subprocess
import sys
import textwrap

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import jcalib
from jcalib.model import Experiment, SimulationError, SolveStatus
from jcalib.sensitivity.local import output_sensitivities, sensitivity_matrix
from tests.helpers import central_differences

REFERENCE = {  # spec table, DOP853 rtol 1e-13
    10.0: [8.44012808, 0.08404150, 0.07732161, 0.38660803],
    100.0: [4.34820976, 0.39478956, 0.27012284, 1.35061420],
    1000.0: [1.33061141, 0.84180104, 0.38809925, 1.94049625],
}


@pytest.fixture(scope="module")
def model_a():
    return jcalib.models.get("four_substance_reactions", observe="A")


@pytest.fixture(scope="module")
def simulate(model):
    return jax.jit(lambda th: model.simulate(th))


def _scipy_reference(theta, ts, rtol=1e-12):
    kab, kac, kad = theta

    def rhs(t, y):
        a = y[0]
        r1, r2, r3 = kab * a**2, kac * a**3, kad * a**3
        return [-2 * r1 - 3 * r2 - 3 * r3, r1, r2, r3]

    sol = solve_ivp(rhs, (0.0, ts[-1]), [10.0, 0, 0, 0], method="Radau", t_eval=ts,
                    rtol=rtol, atol=1e-14)
    return sol.y.T


def test_matches_radau_reference(model, theta, simulate):
    y = np.asarray(simulate(theta))
    ref = _scipy_reference(np.asarray(theta), np.asarray(model.ts))
    np.testing.assert_allclose(y, ref, rtol=1e-6)


def test_matches_spec_table(model, theta):
    y = np.asarray(model.with_times(list(REFERENCE)).simulate(theta))
    np.testing.assert_allclose(y, np.array(list(REFERENCE.values())), rtol=1e-6)


def test_mass_balance_and_branching_ratio(theta, simulate):
    y = np.asarray(simulate(theta))
    a, b, c, d = y.T
    np.testing.assert_allclose(a + 2 * b + 3 * c + 3 * d, 10.0, rtol=0, atol=1e-9)
    np.testing.assert_allclose(d / c, 5.0, rtol=1e-9)


def test_initial_slope(model, theta):
    f0 = model.vector_field(0.0, model.initial_state(theta), theta)
    np.testing.assert_allclose(np.asarray(f0), [-0.2, 0.01, 0.01, 0.05], rtol=1e-12)


def test_jacobian_matches_finite_differences(model, theta, simulate):
    jac = np.asarray(model.jacobian(theta))
    assert jac.shape == (22, 4, 3)
    fd = central_differences(lambda th: simulate(jnp.asarray(th)), np.asarray(theta))
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-5 * np.abs(fd).max())


def _relative_log_jacobian(model, theta):
    """d log y / d log theta, flattened over times and outputs (spec sanity check 2)."""
    return sensitivity_matrix(output_sensitivities(model, theta, scaling="relative"))


def test_essential_directions_structure(model, model_a, theta):
    s_a = np.linalg.svd(_relative_log_jacobian(model_a, theta), compute_uv=False)
    s_all = np.linalg.svd(_relative_log_jacobian(model, theta), compute_uv=False)
    assert s_a[2] / s_a[0] < 1e-6  # A only: kac and kad enter through their sum
    assert s_a[1] / s_a[0] > 1e-3  # ... but kab is separable: 2 essential directions
    assert 1.5 < s_all[0] / s_all[2] < 4.0  # A..D: well conditioned (spec: about 2.3)


def test_jit_vmap_equals_loop(model, simulate):
    thetas = model.parameters.sample(jax.random.key(0), 6, "lhs")
    batched = np.asarray(jax.jit(jax.vmap(model.simulate))(thetas))
    looped = np.stack([np.asarray(simulate(t)) for t in thetas])
    np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=0)


def test_with_times(model, theta):
    m2 = model.with_times([1.0, 2.0, 700.0])
    assert m2.simulate(theta).shape == (3, 4)
    assert float(m2.experiment.t1) == 700.0
    assert model.simulate(theta).shape == (22, 4)  # the original is unchanged


@pytest.mark.slow
def test_simulate_batch_chunked_equals_unchunked(model):
    thetas = np.asarray(model.parameters.sample(jax.random.key(1), 37, "uniform"))
    whole = jcalib.simulate_batch(model, thetas)
    chunked = jcalib.simulate_batch(model, thetas, chunk_size=8, progress=False)
    assert whole.shape == (37, 22, 4)
    np.testing.assert_array_equal(whole, chunked)
    np.testing.assert_allclose(whole[5], np.asarray(model.simulate(thetas[5])), rtol=1e-12)


@pytest.mark.slow  # ~30 s: a subprocess with 4 host devices compiles its own solves
@pytest.mark.parametrize("solver", ["Tsit5", "Kvaerno5"])
def test_simulate_batch_on_four_host_devices(tmp_path, solver):
    """Spreading over 4 forced CPU devices (a subprocess) gives this process's single-device
    result, for an explicit and an implicit (Newton + linear solve) solver."""
    script = textwrap.dedent("""
        import sys, jax, numpy as np, diffrax
        jax.config.update("jax_enable_x64", True)
        import jcalib
        m = jcalib.models.get("four_substance_reactions").with_solver(solver=getattr(diffrax, sys.argv[2])())
        thetas = np.asarray(m.parameters.sample(jax.random.key(7), 30, "lhs"))
        np.save(sys.argv[1], jcalib.simulate_batch(m, thetas, chunk_size=12, progress=False))
        print(len(jax.devices()))
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    out = tmp_path / "y4.npy"
    proc = subprocess.run([sys.executable, "-c", script, str(out), solver], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "4"
    assert len(jax.devices()) == 1
    m = jcalib.models.get("four_substance_reactions").with_solver(solver=getattr(dfx, solver)())
    thetas = np.asarray(m.parameters.sample(jax.random.key(7), 30, "lhs"))
    y = jcalib.simulate_batch(m, thetas, chunk_size=12, progress=False)
    np.testing.assert_allclose(np.load(out), y, rtol=1e-13, atol=0)


@pytest.mark.slow
def test_failed_solve_is_flagged_not_silent(model, theta):
    starved = model.with_solver(max_steps=5)
    y, status = starved.simulate_with_status(theta)
    assert int(status) == SolveStatus.MAX_STEPS
    assert np.all(np.isnan(np.asarray(y)))
    thetas = np.stack([np.asarray(theta), np.asarray(theta) * 1.1])
    with pytest.raises(SimulationError, match="2 of 2 solves failed") as info:
        jcalib.simulate_batch(starved, thetas)
    assert info.value.values.shape == (2, 22, 4)
    np.testing.assert_array_equal(info.value.status, [SolveStatus.MAX_STEPS] * 2)


def test_blow_up_reported_per_sample(model, theta):
    """Negative cubic rate constants make A explode in finite time: that sample fails, others not."""
    bad = np.asarray(theta).copy()
    bad[1:] = -1e-2
    thetas = np.stack([np.asarray(theta), bad])
    y, status = jcalib.simulate_batch(model, thetas, throw=False, return_status=True,
                                      check_bounds=False)
    assert status[0] == SolveStatus.SUCCESS and status[1] != SolveStatus.SUCCESS
    assert np.all(np.isfinite(y[0])) and np.all(np.isnan(y[1]))


def test_bad_input_errors(model, theta):
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\) with n_params=3"):
        model.simulate(jnp.ones(2))
    with pytest.raises(ValueError, match="theta must be float64"):
        model.simulate(jnp.asarray(theta, dtype=jnp.float32))
    with pytest.raises(ValueError, match=r"thetas must have shape \(n, n_params\)"):
        jcalib.simulate_batch(model, np.ones(3))
    with pytest.raises(ValueError, match=r"NaN or inf in rows \[1\]"):
        jcalib.simulate_batch(model, np.array([np.asarray(theta), [np.nan, 1e-5, 1e-5]]))
    with pytest.raises(ValueError, match=r"row 0, kab = 0.1 not in \[1e-06, 0.001\]"):
        jcalib.simulate_batch(model, np.array([[0.1, 1e-5, 1e-5]]))
    with pytest.raises(ValueError, match="chunk_size must be positive"):
        jcalib.simulate_batch(model, np.asarray(theta)[None], chunk_size=0)
    with pytest.raises(ValueError, match=r"with_solver\(\): unknown settings \['rtol'\]"):
        model.with_solver(rtol=1e-3)
    with pytest.raises(ValueError, match="observe must be 'A' or 'ABCD'"):
        jcalib.models.get("four_substance_reactions", observe="B")
    with pytest.raises(ValueError, match="unknown model 'nope'; available: .*four_substance"):
        jcalib.models.get("nope")


def test_experiment_validation():
    with pytest.raises(ValueError, match="ts must be non-decreasing"):
        Experiment([2.0, 1.0])
    with pytest.raises(ValueError, match="ts contains NaN"):
        Experiment([1.0, np.nan])
    with pytest.raises(ValueError, match=r"within \[t0, t1\]"):
        Experiment([1.0, 5.0], t0=2.0, t1=10.0)
    with pytest.raises(ValueError, match=r"mask must have shape \(n_times=2"):
        Experiment([1.0, 2.0], mask=np.ones((3, 1)))


def test_solver_is_swappable(model, theta):
    implicit = model.with_solver(solver=dfx.Kvaerno5())
    np.testing.assert_allclose(np.asarray(implicit.simulate(theta)),
                               np.asarray(model.simulate(theta)), rtol=1e-6)
