"""rigid_double_beam: the spec's sanity checks and reference values
(``shared/models/rigid_double_beam.md``), the forward-mode Jacobian and batched simulation.

Compile time dominates, so the solves share the compiled functions of `tests.models.harness`: `run` (states and outputs)
and `JACOBIAN` take the model as an argument, and every model variant used here (tight
tolerances, inputs off, perturbed start) differs from the default one only in array leaves.
"""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.signal import find_peaks

import jcalib
from jcalib.models import rigid_double_beam as mod
from tests.helpers import central_differences
from tests.models.harness import JACOBIAN, run

NAME = "rigid_double_beam"
REFERENCE = {  # spec table at p_c: t [s] -> (y1 [m], y2 [rad]); DOP853, rtol 1e-12
    0.203125: (0.0500223, -0.1885419),
    0.250000: (0.0554979, 0.1045902),
    0.500000: (0.0764236, -0.6892225),
    1.000000: (0.0369148, 0.1678525),
    2.000000: (0.0471436, -0.0498925),
}
EIGENVALUES = np.array([-0.8548 + 18.3671j, -0.8548 - 18.3671j,
                        -1.3636 + 5.8740j, -1.3636 - 5.8740j])  # spec, 4 decimals, 1/s
TIGHT = 1e-11  # rtol = atol for the finite-difference and energy checks
OTHER_POINT = np.array([2.0, 6.5e-4, 30.0, 0.07])  # inside the box, k2 != k2_c


LINEARISATION = eqx.filter_jit(
    lambda model, x, theta: jax.jacfwd(model.vector_field, argnums=1)(0.0 * x[0], x, theta))


@pytest.fixture(scope="module")
def model():
    return jcalib.models.get(NAME)


@pytest.fixture(scope="module")
def tight():
    return jcalib.models.get(NAME, rtol=TIGHT, atol=TIGHT)


@pytest.fixture(scope="module")
def p_c(model):
    return model.parameters.nominal


@pytest.fixture(scope="module")
def centre_run(model, p_c):
    return run(model, p_c)


@pytest.fixture(scope="module")
def pre_pulse(model):
    return np.asarray(model.ts) < 0.2


# --- construction --------------------------------------------------------------------------------
def test_factory_parameters_constants_and_grid(model):
    assert mod.rigid_double_beam.__doc__.strip().splitlines()[0] == jcalib.models.describe(NAME)
    space = model.parameters
    assert space.names == ("d1", "d2", "k1", "k2")
    np.testing.assert_array_equal(space.nominal, [3.0, 5e-4, 40.0, 0.1])
    np.testing.assert_array_equal(space.lower, [1.5, 2.5e-4, 20.0, 0.05])
    np.testing.assert_array_equal(space.upper, [4.5, 7.5e-4, 60.0, 0.15])
    assert space.units == ("N*s/m", "N*m*s/rad", "N/m", "N*m/rad")
    assert not space.log_scale.any()
    assert model.output_names == ("y1", "y2") and len(model.state_names) == 4
    ts = np.asarray(model.ts)
    np.testing.assert_array_equal(ts, np.arange(1, 257) * (2.0 / 256))
    assert float(model.experiment.t0) == 0.0 and float(model.experiment.t1) == 2.0
    consts = model.constants()
    for name, value in [("m1", 1.0), ("m2", 0.1), ("I_CoM2", 2.5e-4), ("l_CoM1", 0.02),
                        ("l_CoM2", 0.005), ("l_k1", 0.05), ("g", 9.81)]:
        assert consts[name][0] == value
    np.testing.assert_allclose(consts["theta_k2"][0], 0.012130533051458, rtol=1e-13)
    np.testing.assert_allclose(float(model.rotational_inertia), 2.925e-4, rtol=1e-14)
    a, b = (float(v) for v in model.lever_arms(jnp.asarray(mod.THETA_EQUILIBRIUM)))
    np.testing.assert_allclose(0.1 * 9.81 * a, 0.0201930533051458, rtol=1e-13)
    # weak coupling at equilibrium: b = 1.14e-3 m, m2 b = 0.6 % of sqrt((m1 + m2) J)
    np.testing.assert_allclose(b, 1.14e-3, atol=5e-6)
    np.testing.assert_allclose(0.1 * b / np.sqrt(1.1 * 2.925e-4), 0.006, atol=5e-4)


def test_options_reach_the_model():
    m = jcalib.models.get(NAME, force=0.0, torque=0.1, pulse=(0.5, 0.6), x0=[0.06, 0.3, 0, 1],
                          m2=0.2, theta_k2=0.01)
    assert float(m.force) == 0.0 and float(m.torque) == 0.1
    assert (float(m.t_on), float(m.t_off)) == (0.5, 0.6) and float(m.m2) == 0.2
    np.testing.assert_array_equal(np.asarray(m.controller.jump_ts), [0.5, 0.6])
    np.testing.assert_array_equal(np.asarray(m.x0), [0.06, 0.3, 0.0, 1.0])
    assert float(m.theta_k2) == 0.01
    u = [np.asarray(m.inputs(jnp.asarray(t))) for t in (0.49, 0.5, 0.55, 0.6)]
    np.testing.assert_array_equal(u, [[0, 0], [0, 0.1], [0, 0.1], [0, 0]])


def test_bad_options_and_theta_raise(model):
    with pytest.raises(ValueError, match="pulse must satisfy 0 < t_on < t_off < 2"):
        jcalib.models.get(NAME, pulse=(0.25, 0.2))
    with pytest.raises(ValueError, match="masses and inertia must be positive"):
        jcalib.models.get(NAME, m1=-1.0)
    with pytest.raises(ValueError, match="x0 must be 4 finite numbers"):
        jcalib.models.get(NAME, x0=[0.05, 0.0, 0.0])
    with pytest.raises(ValueError, match="rtol, atol and max_step must be positive"):
        jcalib.models.get(NAME, rtol=0.0)
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\) with n_params=4"):
        model.simulate(jnp.ones(3))
    with pytest.raises(ValueError, match=r"thetas must have shape \(n, n_params\)"):
        jcalib.simulate_batch(model, np.ones((5, 3)))


# --- 1. equilibrium ------------------------------------------------------------------------------
def test_equilibrium_at_centre(model, p_c, centre_run, pre_pulse):
    x0 = np.asarray(model.x0)
    np.testing.assert_array_equal(x0, [0.05, -0.1898, 0.0, 0.0])
    rhs = np.asarray(model.vector_field(jnp.asarray(0.1), model.x0, jnp.asarray(p_c)))
    assert np.abs(rhs).max() < 1e-10
    np.testing.assert_array_equal(np.asarray(model.equilibrium(jnp.asarray(p_c))), x0)
    outputs = centre_run[1]
    assert pre_pulse.sum() == 25
    np.testing.assert_array_equal(outputs[pre_pulse], np.broadcast_to(x0[:2], (25, 2)))
    assert np.all(outputs[~pre_pulse] != x0[:2])  # the pulse moves both beams


def test_equilibrium_moves_with_k2(model):
    for k2, expected in [(0.05, -0.388), (0.15, -0.122)]:  # spec, 3 decimals
        x_eq = model.equilibrium(jnp.array([3.0, 5e-4, 40.0, k2]))
        np.testing.assert_allclose(float(x_eq[1]), expected, atol=5e-4)
        rhs = model.vector_field(jnp.asarray(0.1), x_eq, jnp.array([3.0, 5e-4, 40.0, k2]))
        assert float(jnp.abs(rhs).max()) < 1e-12


# --- 2. linearisation ----------------------------------------------------------------------------
def _analytic_linearisation(model, x_eq, theta):
    """[[0, I], [-M^-1 K, -M^-1 D]] from the mass, stiffness and damping matrices."""
    d1, d2, k1, k2 = theta
    m1, m2, g = float(model.m1), float(model.m2), float(model.g)
    _, b = (float(v) for v in model.lever_arms(jnp.asarray(x_eq[1])))
    mass = np.array([[m1 + m2, -m2 * b], [-m2 * b, float(model.rotational_inertia)]])
    stiffness = np.diag([k1, k2 - m2 * g * b])  # d(m2 g a)/d theta = -m2 g b
    damping = np.diag([d1, d2])
    top = np.hstack([np.zeros((2, 2)), np.eye(2)])
    bottom = -np.linalg.solve(mass, np.hstack([stiffness, damping]))
    return np.vstack([top, bottom])


def _sorted_eigenvalues(matrix):
    ev = np.linalg.eigvals(np.asarray(matrix))
    return ev[np.lexsort((ev.imag, ev.real))]


def test_linearisation_at_centre(model, p_c):
    x_eq = model.equilibrium(jnp.asarray(p_c))
    ev = _sorted_eigenvalues(LINEARISATION(model, x_eq, jnp.asarray(p_c)))
    analytic = _sorted_eigenvalues(_analytic_linearisation(model, np.asarray(x_eq), p_c))
    np.testing.assert_allclose(ev, analytic, rtol=1e-6)
    # the spec prints 4 decimals: agreement to half a unit of the last digit
    np.testing.assert_allclose(ev, _sorted_eigenvalues(np.diag(EIGENVALUES)), rtol=0, atol=5e-5)
    # sorted by real part: the y1 mode (-1.36 +- 5.87i) first, then the y2 mode
    freq = np.abs(ev.imag[::2]) / (2 * np.pi)  # Hz
    np.testing.assert_allclose(freq, [0.9349, 2.9232], atol=5e-5)
    np.testing.assert_allclose(-ev.real[::2] / (2 * np.pi * freq), [0.232, 0.0465], atol=5e-4)


def test_damped_frequencies_below_4_hz_on_box_corners(model):
    space = model.parameters
    frequencies = []
    for corner in itertools.product(*zip(space.lower, space.upper)):
        theta = jnp.asarray(corner)
        x_eq = model.equilibrium(theta)
        ev = np.linalg.eigvals(np.asarray(LINEARISATION(model, x_eq, theta)))
        assert np.all(ev.real < 0) and np.all(ev.imag != 0)  # damped oscillations
        frequencies.append(np.abs(ev.imag) / (2 * np.pi))
    frequencies = np.concatenate(frequencies)
    assert frequencies.max() < 4.0
    np.testing.assert_allclose([frequencies.min(), frequencies.max()], [0.595, 3.574],
                               atol=5e-4)


# --- 3. energy -----------------------------------------------------------------------------------
def test_energy_conserved_without_damping_and_input():
    free = jcalib.models.get(NAME, force=0.0, torque=0.0, x0=[0.07, 0.4, -0.1, 2.0],
                             rtol=TIGHT, atol=TIGHT)
    theta = jnp.array([0.0, 0.0, 40.0, 0.1])  # d1 = d2 = 0 lies outside the box on purpose
    states, outputs = run(free, theta)
    energy = np.asarray(jax.vmap(free.energy, in_axes=(0, None))(jnp.asarray(states), theta))
    e0 = float(free.energy(free.x0, theta))
    assert np.ptp(outputs[:, 1]) > 1.0  # a large, nonlinear swing of beam 2
    assert np.abs(energy - e0).max() / abs(e0) < 1e-8


def _power_error(model, t, x, theta):
    """(grad E . f, and -d1 y1'^2 - d2 theta'^2 + u1 y1' + u2 theta' term by term)."""
    de_dt = jax.grad(model.energy)(x, theta) @ model.vector_field(t, x, theta)
    u = model.inputs(t)
    terms = jnp.stack([-theta[0] * x[2] ** 2, -theta[1] * x[3] ** 2, u[0] * x[2], u[1] * x[3]])
    return de_dt, terms


POWER = eqx.filter_jit(jax.vmap(_power_error, in_axes=(None, 0, 0, 0)))


def test_power_balance(model, p_c):
    """dE/dt = -d1 y1'^2 - d2 theta'^2 + u1 y1' + u2 theta' at random states, before, during
    and after the pulse, for p_c and random parameters (an identity of the equations)."""
    rng = np.random.default_rng(1)
    thetas = np.vstack([p_c, np.asarray(model.parameters.sample(jax.random.key(1), 4))])
    states = np.column_stack([rng.uniform(0.02, 0.08, 8), rng.uniform(-1.2, 1.2, 8),
                              rng.uniform(-0.5, 0.5, 8), rng.uniform(-15, 15, 8)])
    combos = list(itertools.product(range(5), range(8), (0.1, 0.22, 1.0)))
    de_dt, terms = POWER(model, jnp.array([c[2] for c in combos]),
                         jnp.asarray(states[[c[1] for c in combos]]),
                         jnp.asarray(thetas[[c[0] for c in combos]]))
    de_dt, terms = np.asarray(de_dt), np.asarray(terms)
    assert np.all(terms[:, 2:][[c[2] == 0.22 for c in combos]] != 0)  # input power in pulse
    # an identity: equal to round-off of the largest term
    assert np.all(np.abs(de_dt - terms.sum(axis=1)) <= 1e-12 * np.abs(terms).sum(axis=1))


# --- 4. static sensitivities ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def jacobian_centre(model, p_c):
    return np.asarray(JACOBIAN(model, jnp.asarray(p_c)))


@pytest.mark.slow
def test_static_sensitivities_at_rest(model, jacobian_centre, pre_pulse):
    """With k2 = k2_c the system rests before the pulse whatever d1, d2, k1 are."""
    theta = np.array([2.0, 3e-4, 50.0, 0.1])
    for jac in (jacobian_centre, np.asarray(JACOBIAN(model, jnp.asarray(theta)))):
        scale = np.abs(jac).max(axis=0)  # (output, parameter) magnitude over the whole run
        assert np.all(jac[pre_pulse, :, 2] == 0.0)  # d/dk1: y1 - l_k1 is exactly 0 at rest
        # d/dd1, d/dd2 are driven by velocities that are round-off (the jitted equilibrium
        # residual is ~5e-16 rad/s^2), so they are zero to ~1e-15 of their later size
        for p in (0, 1):
            assert np.all(np.abs(jac[pre_pulse, :, p]) <= 1e-12 * scale[:, p])
        assert np.all(np.abs(jac[pre_pulse, 1, 3]) > 0)  # k2 still moves beam 2 (d theta_eq)


def test_k2_sensitivity_before_pulse_off_centre(model, pre_pulse):
    jac = np.asarray(JACOBIAN(model, jnp.asarray(OTHER_POINT)))
    dy2_dk2 = jac[pre_pulse, 1, 3]
    assert np.all(dy2_dk2 != 0.0) and np.abs(dy2_dk2).max() > 1.0  # rad per N m/rad
    # out of equilibrium, beam 2 moves before the pulse, so d1, d2, k1 act too
    assert np.abs(jac[pre_pulse, :, :3]).max() > 0


# --- 5. reference values and response shape ------------------------------------------------------
def test_reference_values(model, centre_run):
    ts = np.asarray(model.ts)
    outputs = centre_run[1]
    for t, expected in REFERENCE.items():
        row = np.flatnonzero(ts == t)
        assert row.size == 1
        np.testing.assert_allclose(outputs[row[0]], expected, rtol=0, atol=1e-6,
                                   err_msg=f"t = {t}")


def test_response_ranges_and_extrema(model, centre_run):
    y = centre_run[1]
    np.testing.assert_allclose([y[:, 0].min(), y[:, 0].max()], [0.0369, 0.0774], atol=5e-5)
    np.testing.assert_allclose([y[:, 1].min(), y[:, 1].max()], [-0.729, 0.456], atol=5e-4)
    counts = []
    for j in range(2):
        prominence = 0.15 * np.ptp(y[:, j])  # extrema of >= 15 % of the output's range
        counts.append([len(find_peaks(sign * y[:, j], prominence=prominence)[0])
                       for sign in (1, -1)])
    assert counts[0][0] == 2  # y1: 2 maxima
    assert counts[1] == [5, 5]  # y2: 5 maxima, 5 minima


def test_softest_corner_swings_further(model):
    _, outputs = run(model, model.parameters.lower)
    np.testing.assert_allclose(np.abs(outputs[:, 1]).max(), 1.1, atol=0.05)


# --- forward-mode Jacobian against finite differences --------------------------------------------
@pytest.mark.parametrize("point", ["centre", "other"])
def test_jacobian_matches_central_differences(tight, point):
    theta = tight.parameters.nominal if point == "centre" else OTHER_POINT
    jac = np.asarray(JACOBIAN(tight, jnp.asarray(theta)))
    fd = central_differences(lambda th: run(tight, th)[1], theta, rel_step=1e-4)
    # Columns (output, parameter) differ by 6 decades (d2 ~ 5e-4 vs k1 ~ 40), so each is
    # compared on its own. The absolute floor is 1e-4 of the column's largest |fd|: near the
    # zero crossings of a sensitivity a relative error is meaningless, and there the
    # finite differences carry absolute noise of ~tol/rel_step from the adaptive steps.
    for out, par in itertools.product(range(2), range(4)):
        floor = 1e-4 * np.abs(fd[:, out, par]).max()
        np.testing.assert_allclose(jac[:, out, par], fd[:, out, par], rtol=1e-4, atol=floor,
                                   err_msg=f"output {out}, parameter {par}")


# --- batches -------------------------------------------------------------------------------------
def test_vmap_equals_single_simulations(model):
    thetas = np.vstack([model.parameters.nominal, model.parameters.lower,
                        model.parameters.upper, OTHER_POINT])
    batched = np.asarray(jax.jit(jax.vmap(model.simulate))(jnp.asarray(thetas)))
    for theta, values in zip(thetas, batched, strict=True):
        np.testing.assert_allclose(values, run(model, theta)[1], rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_simulate_batch_uniform_box(model):
    """1,000 uniform samples (a training-set size) in one call: ~12 s with compilation on a
    loaded 2-core machine, so it stays in the default suite."""
    thetas = model.parameters.sample(jax.random.key(0), 1000, "uniform")
    values, status = jcalib.simulate_batch(model, thetas, return_status=True, progress=False)
    assert values.shape == (1000, 256, 2)
    assert np.all(status == 0) and np.all(np.isfinite(values))
    assert np.all((values[:, :, 0] > 0.0) & (values[:, :, 0] < 0.1))  # y1 stays near l_k1
    assert np.abs(values[:, :, 1]).max() < 1.5  # beam 2 swings ~1 rad at most
