"""roll_plane: the spec's sanity checks and reference values (shared/models/roll_plane.md).

Compile time dominates, so the tests share the compiled functions of `tests.models.harness`: `run` (states and
outputs of one solve; compiled once per road kind and time grid, constants and bump
positions are traced arrays) and `JACOBIAN` (forward mode), plus one vmapped solve for
the batch and one for the vmap check.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.models import roll_plane as mod
from tests.helpers import central_differences
from tests.models.harness import jacobian, run

KT = mod.KT_NOMINAL
NOMINAL = np.array([KT, KT])
P_REF = np.array(mod.P_REF)
OTHER_POINT = np.array([85_000.0, 110_000.0])  # N/m, inside the box, kt1 != kt2
TIMES = np.asarray(mod.OBSERVATION_TIMES)
DENSE_TIMES = np.arange(1, 3001) * 1e-3  # s, 1 ms grid for the extrema of the response

# Spec table "Reference outputs" (DOP853-class, rtol 1e-10, max step 2 ms): t -> (y1..y4).
REFERENCE = {
    "nominal": (NOMINAL, {
        0.3: (-9.247508e-03, 2.873654e-02, 2.944395e-01, -4.525664e-01),
        0.6: (-1.302086e-03, -4.045962e-03, -1.348723e-01, 5.655443e-03),
        0.9: (-3.310878e-03, -4.814223e-03, 4.480761e-02, 5.162665e-02),
        1.5: (-2.931710e-03, -2.868967e-03, -2.084152e-02, -2.249832e-02),
        3.0: (7.681550e-04, 7.681727e-04, -7.704274e-03, -7.706349e-03),
    }),
    "p_ref": (P_REF, {
        0.3: (-8.867145e-03, 2.931015e-02, 4.108904e-01, -3.087340e-01),
        0.6: (-1.373086e-03, -4.405388e-03, -1.394846e-01, -2.545299e-03),
        0.9: (-3.254902e-03, -4.841315e-03, 4.354342e-02, 5.058166e-02),
        1.5: (-2.868695e-03, -2.815789e-03, -2.100033e-02, -2.280430e-02),
        3.0: (8.012312e-04, 8.042034e-04, -7.541789e-03, -7.588796e-03),
    }),
}
# Spec "Solver notes": linearised (ks3 = 0) eigenvalues at the nominal tires (upper halves).
EIGENVALUES = np.array([-0.8480 + 7.4349j, -4.5110 + 17.0841j, -11.8049 + 53.6710j,
                        -10.1774 + 55.3431j])


@pytest.fixture(scope="module")
def model():
    return jcalib.models.get("roll_plane")


@pytest.fixture(scope="module")
def outputs(model):
    """Outputs ``(10, 4)`` at the nominal point, p_ref and `OTHER_POINT`."""
    return {name: run(model, theta)[1] for name, theta in
            [("nominal", NOMINAL), ("p_ref", P_REF), ("other", OTHER_POINT)]}


@pytest.fixture(scope="module")
def nominal_jacobian(model):
    return jacobian(model, NOMINAL)


@pytest.fixture(scope="module")
def dense(model):
    """Outputs on a 1 ms grid at the nominal point for ks3 = 3e6 (default), 1.5e4 and 0."""
    dense_model = model.with_times(DENSE_TIMES)
    return {ks3: run(eqx.tree_at(lambda m: m.ks3, dense_model, jnp.asarray(ks3)), NOMINAL)[1]
            for ks3 in (3.0e6, 1.5e4, 0.0)}


# --- construction ------------------------------------------------------------------------------
def test_factory_parameters_outputs_and_constants(model):
    space = model.parameters
    assert space.names == ("kt1", "kt2") and space.units == ("N/m", "N/m")
    np.testing.assert_array_equal(space.nominal, [96319.76, 96319.76])
    np.testing.assert_allclose(space.lower, [77055.808, 77055.808], rtol=1e-15)
    np.testing.assert_allclose(space.upper, [115583.712, 115583.712], rtol=1e-15)
    assert not space.log_scale.any()
    assert model.output_names == ("y1", "y2", "y3", "y4") and len(model.state_names) == 8
    np.testing.assert_allclose(np.asarray(model.ts), 0.3 * np.arange(1, 11), rtol=1e-15)
    assert float(model.experiment.t0) == 0.0 and float(model.experiment.t1) == 3.0
    np.testing.assert_allclose(np.asarray(model.controller.jump_ts), [0.10, 0.15, 0.20, 0.25])
    constants = model.constants()
    expected = {"m": (580.0, "kg"), "I": (63.3316, "kg*m^2"), "l": (1.524, "m"),
                "mt1": (36.26, "kg"), "mt2": (36.26, "kg"), "ks": (19357.2, "N/m"),
                "ks3": (3.0e6, "N/m^3"), "cs": (710.70, "N*s/m"), "v": (5.0, "m/s"),
                "L_b": (0.5, "m"), "h1": (0.05, "m"), "h2": (0.03, "m"), "t1": (0.10, "s"),
                "t2": (0.15, "s")}
    assert constants == expected
    assert jcalib.models.describe("roll_plane").startswith("Vehicle roll-plane model")
    step = jcalib.models.get("roll_plane", road="step", ks3=1.5e4, starts=(0.2, 0.3))
    np.testing.assert_allclose(np.asarray(step.controller.jump_ts), [0.2, 0.3])
    assert step.constants()["ks3"] == (1.5e4, "N/m^3") and "v" not in step.constants()


def test_bad_options_and_theta_raise(model):
    cases = [({"road": "gravel"}, "road must be one of"),
             ({"heights": (0.05,)}, "heights must be two finite numbers"),
             ({"starts": (0.1, float("nan"))}, "starts must be two finite numbers"),
             ({"starts": (-0.1, 0.1)}, "starts must be >= 0"),
             ({"speed": 0.0}, "speed must be positive"),
             ({"bump_length": -0.5}, "bump_length must be positive"),
             ({"ks3": -1.0}, "ks3 must be finite and >= 0"),
             ({"rtol": 0.0}, "rtol must be positive"),
             ({"max_step": -1e-3}, "max_step must be positive")]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            jcalib.models.get("roll_plane", **options)
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\)"):
        model.simulate(jnp.ones(3))
    with pytest.raises(ValueError, match="theta must have shape"):
        model.jacobian(jnp.ones((2, 2)))


def test_noise_sigma():
    values = jnp.asarray([[-2.0, 0.0], [3e-4, 1.0]])
    np.testing.assert_allclose(np.asarray(mod.noise_sigma(values)),
                               [[0.02 + 1e-6, 1e-6], [3e-6 + 1e-6, 0.01 + 1e-6]], rtol=1e-15)


# --- spec sanity checks -----------------------------------------------------------------------
@pytest.mark.parametrize("point", ["nominal", "p_ref"])
def test_reference_values(point, outputs):  # check 6
    _, table = REFERENCE[point]
    for t, expected in table.items():
        row = int(np.flatnonzero(np.isclose(TIMES, t))[0])
        np.testing.assert_allclose(outputs[point][row], expected, rtol=1e-5,
                                   err_msg=f"{point}, t = {t}")


def test_rest_without_road_input(model):  # check 1
    # u = 0 through zero bump heights: reuses the compiled default solve (the road kind is
    # static, road="none" would compile another); road="none" gives the same zero input
    flat = jcalib.models.get("roll_plane", heights=(0.0, 0.0))
    states, outputs = run(flat, OTHER_POINT)
    assert np.all(states == 0.0) and np.all(outputs == 0.0)
    quiet = jcalib.models.get("roll_plane", road="none")
    for t in (0.0, 0.125, 0.2, 1.0):
        assert np.all(np.asarray(quiet.inputs(jnp.asarray(t))) == 0.0)
        assert np.all(np.asarray(flat.inputs(jnp.asarray(t))) == 0.0)
    assert np.asarray(model.inputs(jnp.asarray(0.125)))[0] > 0.0  # the default road is not flat


@pytest.fixture(scope="module")
def symmetric_model():
    """Identical, simultaneous bumps under both wheels (4 cm at 0.1 s)."""
    return jcalib.models.get("roll_plane", heights=(0.04, 0.04), starts=(0.1, 0.1))


def test_symmetric_bumps_give_no_roll(symmetric_model, outputs):  # check 2
    theta = np.array([1.05e5, 1.05e5])
    states, y = run(symmetric_model, theta)
    assert np.abs(y).max() > 1e-3  # a real response ...
    np.testing.assert_array_equal(y[:, 0], y[:, 1])  # ... exactly without roll
    np.testing.assert_array_equal(y[:, 2], y[:, 3])
    np.testing.assert_array_equal(states[:, 0], states[:, 1])
    jac = jacobian(symmetric_model, theta)
    assert np.abs(jac[:, 0, 1]).max() > 1e-3 * np.abs(jac[:, 0, 0]).max()  # kt2 acts on y1
    # mirror symmetry of the sensitivities; the forward-mode tangents of the two directions
    # go through the same operations mirrored, up to round-off in the step-size control
    np.testing.assert_allclose(jac[:, 0, 0], jac[:, 1, 1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(jac[:, 0, 1], jac[:, 1, 0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(jac[:, 2, 0], jac[:, 3, 1], rtol=1e-12, atol=0)
    # the spec's asymmetric bump does roll
    assert np.abs(outputs["nominal"][0, 0] - outputs["nominal"][0, 1]) > 1e-2


@eqx.filter_jit
def _state_matrix(model, theta):
    """d f / d x at x = 0, t = 0 (the road input is zero before the bump)."""
    return jax.jacfwd(model.vector_field, argnums=1)(jnp.asarray(0.0), jnp.zeros(8), theta)


def test_linearisation_eigenvalues():  # check 3
    linear = jcalib.models.get("roll_plane", ks3=0.0)
    theta = jnp.asarray(NOMINAL)
    a = np.asarray(_state_matrix(linear, theta))
    eigenvalues = np.linalg.eigvals(a)
    upper = eigenvalues[eigenvalues.imag > 0]
    upper = upper[np.argsort(upper.imag)]  # by frequency, as in the spec
    assert upper.size == 4  # four underdamped modes
    np.testing.assert_allclose(upper, EIGENVALUES, rtol=1e-4)
    np.testing.assert_allclose(np.sort(upper.imag) / (2 * np.pi), [1.183, 2.719, 8.542, 8.808],
                               rtol=1e-3)  # the spec's Hz, rounded to 4 digits
    # the cubic term has no slope at x = 0: the nominal model has the same linearisation
    nominal = jcalib.models.get("roll_plane")
    np.testing.assert_array_equal(np.asarray(_state_matrix(nominal, theta)), a)


def test_static_limit_of_step_input():  # check 4
    h = 0.04
    step = jcalib.models.get("roll_plane", road="step", heights=(h, h), starts=(0.1, 0.1))
    states, y = run(step.with_times([3.0, 20.0, 30.0]), OTHER_POINT)
    assert np.abs(states[0, :4] - h).max() > 1e-4  # still moving at 3 s (heave decays ~0.85/s)
    # After 30 s the slowest mode has decayed by exp(-0.848 * 29.9) ~ 1e-11, so what is left
    # is the solver's global error: ~1e-9 m in positions (atol), i.e. ~55 rad/s * 1e-9 m
    # ~ 6e-8 m/s in the velocities of the 9 Hz wheel-hop modes.
    np.testing.assert_allclose(states[-1, :4], h, rtol=0, atol=1e-8)
    np.testing.assert_allclose(y[-1, :2], 0.0, rtol=0, atol=1e-8)
    np.testing.assert_allclose(states[-1, 4:], 0.0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(y[-1, 2:], 0.0, rtol=0, atol=1e-6)


def test_identifiability(nominal_jacobian):  # check 5
    sensitivity = (nominal_jacobian * NOMINAL).reshape(40, 2)  # d y / d ln kt
    singular_values = np.linalg.svd(sensitivity, compute_uv=False)
    ratio = singular_values[0] / singular_values[1]
    assert singular_values[1] > 1e-3 * singular_values[0]  # full rank
    assert 1.55 < ratio < 1.60, ratio  # singular-value ratio (not a timing); spec: ~1.6; this model: 1.574


def test_kt_difference_information_is_early(nominal_jacobian):
    """Spec: kt1 vs kt2 information sits mostly in the first 2-3 samples."""
    difference = (nominal_jacobian[..., 0] - nominal_jacobian[..., 1]) * KT  # (10, 4)
    energy = np.sum(difference**2, axis=1)
    assert energy[:3].sum() > 0.9 * energy.sum(), energy / energy.sum()


def test_expected_behaviour(dense, outputs):
    y = dense[3.0e6]
    # the wheels go up first: both suspensions compress, the left one earlier and more
    first_left = np.argmax(np.abs(y[:, 0]) > 1e-3)
    first_right = np.argmax(np.abs(y[:, 1]) > 1e-3)
    assert first_left < first_right and y[first_left, 0] < 0 and y[first_right, 1] < 0
    bump = DENSE_TIMES < 0.3
    assert y[bump, 0].min() < y[bump, 1].min() < 0
    # spec: max |delta| ~ 4.5 cm (left), 3.8 cm (right), max |delta'| ~ 2.4 m/s (2 digits)
    np.testing.assert_allclose(np.abs(y[:, :2]).max(axis=0), [0.045, 0.038], atol=5e-4)
    np.testing.assert_allclose(np.abs(y[:, 2:]).max(), 2.4, atol=0.05)
    # spec: the cubic force is ~32 % of the linear one at the largest deflection
    largest = np.abs(y[:, :2]).max()
    assert 3.0e6 * largest**3 / (19357.2 * largest) == pytest.approx(0.32, abs=0.005)
    # after ~1 s left and right are nearly identical (heave dominated); not at 0.3 s
    late = outputs["nominal"][TIMES >= 1.5]
    for left, right in ((0, 1), (2, 3)):
        assert np.all(np.abs(late[:, left] - late[:, right])
                      <= 0.1 * np.maximum(np.abs(late[:, left]), np.abs(late[:, right])))
    first = outputs["nominal"][0]
    assert abs(first[0] - first[1]) > 0.5 * max(abs(first[0]), abs(first[1]))


def test_weakly_nonlinear_variant(dense):
    """ks3 = 1.5e4 N/m^3 (the parameter file's value) is nearly linear, ks3 = 3e6 is not."""
    scale = np.abs(dense[0.0]).max(axis=0)
    weak = np.abs(dense[1.5e4] - dense[0.0]).max(axis=0) / scale
    strong = np.abs(dense[3.0e6] - dense[0.0]).max(axis=0) / scale
    assert np.all(weak < 2e-3) and np.all(strong > 0.03), (weak, strong)


# --- derivatives and batches ------------------------------------------------------------------
@pytest.mark.parametrize("point", ["nominal", "other"])
def test_jacobian_matches_finite_differences(point, model, nominal_jacobian):
    theta = NOMINAL if point == "nominal" else OTHER_POINT
    jac = nominal_jacobian if point == "nominal" else jacobian(model, theta)
    fd = central_differences(lambda th: run(model, th)[1], theta)
    assert np.all(np.isfinite(jac)) and jac.shape == (10, 4, 2)
    # Absolute floor: 1e-4 of the largest |FD derivative| of the same output. Entries far
    # below it (near-zero samples of an oscillation) carry only the FD noise of an adaptive
    # solve (step-size changes between the perturbed solves, ~1e-6 of the scale) and are
    # irrelevant next to the output's large sensitivities.
    floor = 1e-4 * np.abs(fd).max(axis=(0, 2))
    for k in range(4):
        np.testing.assert_allclose(jac[:, k], fd[:, k], rtol=1e-4, atol=floor[k],
                                   err_msg=f"output {model.output_names[k]}")


@pytest.mark.slow
def test_simulate_batch_over_the_box(model):
    thetas = model.parameters.sample(jax.random.key(0), 1000, "uniform")
    values, status = jcalib.simulate_batch(model, thetas, return_status=True, progress=False)
    assert values.shape == (1000, 10, 4)
    assert np.all(status == 0) and np.all(np.isfinite(values))


def test_vmap_equals_single_simulations(model, outputs):
    thetas = jnp.asarray(np.stack([NOMINAL, P_REF, OTHER_POINT]))
    batched = np.asarray(jax.jit(jax.vmap(model.simulate))(thetas))
    for row, name in enumerate(("nominal", "p_ref", "other")):
        np.testing.assert_allclose(batched[row], outputs[name], rtol=1e-12, atol=1e-15)
