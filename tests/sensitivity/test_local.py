"""Local sensitivities: y = Aθ exactly, four_substance_reactions against finite differences,
jit/vmap consistency, J-sensitivity against finite differences of the loss, bad input."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.sensitivity.local import (
    j_sensitivity,
    j_sensitivity_functions,
    loss_gradient,
    output_sensitivities,
    residual_jacobian,
    sensitivity_matrix,
)
from tests.helpers import LinearModel, central_differences

# y = A θ with 3 times, 2 outputs, 3 parameters; output y1 at t2 is A[2, 1] θ = 0 at θ = 1.
A = np.array([
    [[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]],
    [[0.0, 1.0, 1.0], [2.0, 2.0, -1.0]],
    [[4.0, 0.0, -2.0], [1.0, -2.0, 1.0]],
])


@pytest.fixture(scope="module")
def linear():
    return LinearModel(A)


@pytest.fixture(scope="module")
def relative(model, theta):
    """Relative sensitivities of four_substance_reactions (A..D) at the nominal point."""
    return np.asarray(output_sensitivities(model, theta, scaling="relative"))


@pytest.fixture(scope="module")
def problem(model):
    """Relative-weighted problem on noisy data from a point away from the nominal one, so
    that the loss gradient at the nominal point is far from zero."""
    truth = model.parameters.nominal * np.array([1.3, 0.8, 1.1])
    data = jcalib.synthetic_measurements(jax.random.key(3), model, jnp.asarray(truth),
                                         sigma=0.02)
    return jcalib.CalibrationProblem(model, data)


def test_linear_model_sensitivities_are_a(linear):
    theta = jnp.array([1.0, 0.5, 1.5])  # no output is zero here
    y = np.einsum("kij,j->ki", A, np.asarray(theta))
    width = linear.parameters.upper - linear.parameters.lower
    np.testing.assert_array_equal(output_sensitivities(linear, theta), A)
    np.testing.assert_allclose(output_sensitivities(linear, theta, scaling="log"),
                               A * np.asarray(theta), rtol=1e-15)
    np.testing.assert_allclose(output_sensitivities(linear, theta, scaling="range"),
                               A * width, rtol=1e-15)
    np.testing.assert_allclose(output_sensitivities(linear, theta, scaling="relative"),
                               A * np.asarray(theta) / y[:, :, None], rtol=1e-14)


def test_relative_sensitivity_is_zero_where_the_output_is_zero(linear):
    theta = jnp.ones(3)
    assert np.einsum("kij,j->ki", A, np.ones(3))[2, 1] == 0.0
    s = np.asarray(output_sensitivities(linear, theta, scaling="relative"))
    np.testing.assert_array_equal(s[2, 1], 0.0)
    assert np.all(np.isfinite(s))


def test_relative_matches_finite_differences_of_log_y(model, theta, relative):
    assert relative.shape == (22, 4, 3)
    simulate = jax.jit(lambda th: model.simulate(th))
    # d ln y / d ln θ by central differences in ln θ (1e-6 relative step); all outputs are
    # positive at the observation times (t >= 5 s).
    fd = central_differences(lambda u: np.log(np.asarray(simulate(jnp.asarray(np.exp(u))))),
                             np.log(np.asarray(theta)))
    # FD truncation and solver noise (rtol 1e-8 / 1e-6 step) stay below ~1e-5 here
    np.testing.assert_allclose(relative, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_jit_vmap_equals_loop(model, theta, relative):
    # output_sensitivities is compiled (filter_jit) when called eagerly; under an outer
    # jit(vmap(...)) it must give the same numbers as a loop of eager calls.
    thetas = jnp.concatenate([theta[None], model.parameters.sample(jax.random.key(0), 2, "lhs")])
    batched = np.asarray(jax.jit(jax.vmap(
        lambda th: output_sensitivities(model, th, scaling="relative")))(thetas))
    np.testing.assert_allclose(batched[0], relative, rtol=1e-10, atol=1e-14)
    for th, b in zip(thetas[1:], batched[1:]):
        np.testing.assert_allclose(
            b, np.asarray(output_sensitivities(model, th, scaling="relative")),
            rtol=1e-10, atol=1e-14)


def test_sensitivity_matrix_rows_mask_and_output_scale():
    s = np.arange(24.0).reshape(2, 3, 4)
    flat = sensitivity_matrix(s)
    np.testing.assert_array_equal(flat, s.reshape(6, 4))  # (time, output) row-major
    mask = np.array([[True, False, True], [False, True, True]])
    np.testing.assert_array_equal(sensitivity_matrix(s, mask=mask), s[mask])
    scaled = sensitivity_matrix(s, output_scale=np.array([1.0, 2.0, 4.0]))
    np.testing.assert_allclose(scaled.reshape(2, 3, 4), s / np.array([1.0, 2.0, 4.0])[:, None])
    rms = sensitivity_matrix(s, output_scale="rms").reshape(2, 3, 4)
    np.testing.assert_allclose(np.sqrt(np.mean(rms**2, axis=(0, 2))), 1.0, rtol=1e-14)


@pytest.mark.parametrize("scaling", ["absolute", "log", "internal"])
def test_j_sensitivity_matches_finite_differences_of_the_loss(problem, scaling):
    theta = problem.space.nominal
    got = j_sensitivity(problem, jnp.asarray(theta), scaling=scaling)
    assert got.shape == (3,) and np.all(got > 0)

    def loss_of(u):  # u: the coordinates of `scaling`; loss = mean(r²) (compiled residuals)
        phys = {"absolute": u, "log": np.exp(u), "internal": np.exp(u)}[scaling]
        return np.mean(np.asarray(problem.residuals(problem.to_internal(jnp.asarray(phys)))) ** 2)

    u0 = {"absolute": theta, "log": np.log(theta), "internal": np.log(theta)}[scaling]
    fd = central_differences(loss_of, u0, rel_step=1e-6 if scaling == "absolute" else 1e-5)
    np.testing.assert_allclose(got, np.abs(fd), rtol=1e-5)
    # the same point given in internal coordinates
    z = problem.to_internal(jnp.asarray(theta))
    np.testing.assert_allclose(j_sensitivity(problem, z, coordinates="internal", scaling=scaling), got,
                               rtol=1e-14)


@pytest.mark.parametrize("scaling", ["absolute", "log"])
def test_j_sensitivity_functions_are_the_running_cost_gradient(problem, scaling):
    """S_J(t_k) (Bastogne 2007 §3.3.2) = the gradient of the running mean-square cost
    (2/n) Σ_{t_j <= t_k} r_j dr_j/dθ, ending at the signed dJ/dθ of `j_sensitivity`."""
    theta = jnp.asarray(problem.space.nominal)
    functions = j_sensitivity_functions(problem, theta, scaling=scaling)
    n_times, n_outputs = np.shape(problem.measurements.values)
    assert functions.shape == (n_times, 3)
    z = problem.to_internal(theta)
    jac, r = residual_jacobian(problem, z)
    np.testing.assert_allclose(functions[-1], loss_gradient(problem, z, jac, r, scaling), rtol=1e-12)
    np.testing.assert_allclose(np.abs(functions[-1]), j_sensitivity(problem, theta, scaling=scaling),
                               rtol=1e-12)
    # by hand at t_2: the first two times' rows (all entries observed, rows time-major)
    factor = {"absolute": 1.0 / np.asarray(theta), "log": np.ones(3)}[scaling]  # log-scale internals
    rows = 2 * n_outputs
    by_hand = 2.0 / r.size * (r[:rows, None] * jac[:rows] * factor[None, :]).sum(axis=0)
    np.testing.assert_allclose(functions[1], by_hand, rtol=1e-12)


def test_j_sensitivity_functions_skip_unobserved_entries(model, theta):
    """A masked-out time adds nothing: S_J stays flat across it."""
    data = jcalib.synthetic_measurements(jax.random.key(5), model, jnp.asarray(theta) * 1.2, sigma=0.02)
    mask = np.ones(np.shape(data.values), bool)
    mask[3] = False
    masked = jcalib.CalibrationProblem(model, jcalib.Measurements(data.ts, data.values, mask=mask))
    functions = j_sensitivity_functions(masked, jnp.asarray(theta))
    np.testing.assert_array_equal(functions[3], functions[2])
    assert not np.allclose(functions[4], functions[3])
    np.testing.assert_allclose(np.abs(functions[-1]), j_sensitivity(masked, jnp.asarray(theta)), rtol=1e-12)


def test_bad_inputs_raise(model, theta, linear, problem):
    with pytest.raises(ValueError, match="scaling must be one of"):
        output_sensitivities(model, theta, scaling="percent")
    with pytest.raises(ValueError, match="theta must be float64"):
        output_sensitivities(model, np.asarray(theta, dtype=np.float32))
    with pytest.raises(ValueError, match=r"theta must have shape \(n_params,\)"):
        output_sensitivities(model, theta[:2])
    with pytest.raises(ValueError, match=r"output_sensitivities: simulator must be a jcalib simulator \(an "
                                         r"AbstractModel, a PELS-VAE Surrogate or a FunctionSimulator.*got object"):
        output_sensitivities(object(), theta)
    with pytest.raises(ValueError, match=r"output_sensitivities\(scaling='range'\) needs finite bounds, but "
                                         r"parameter 'kab' has bounds \[0.0, inf\] on a log scale"):
        open_kab = dataclasses.replace(model, parameters=model.parameters.replace("kab", lower=0.0, upper=np.inf))
        output_sensitivities(open_kab, theta, scaling="range")
    with pytest.raises(ValueError, match=r"shape \(n_times, n_outputs, n_params\)"):
        sensitivity_matrix(np.ones((4, 3)))
    with pytest.raises(ValueError, match="mask must have shape"):
        sensitivity_matrix(np.ones((2, 3, 4)), mask=np.ones((3, 2), bool))
    with pytest.raises(ValueError, match="output_scale must be None, 'rms' or an array"):
        sensitivity_matrix(np.ones((2, 3, 4)), output_scale="max")
    with pytest.raises(ValueError, match="output_scale must be None, 'rms' or an array"):
        sensitivity_matrix(np.ones((2, 3, 4)), output_scale=np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="output 1 has all-zero sensitivities"):
        sensitivity_matrix(np.stack([np.ones((2, 4)), np.zeros((2, 4))], axis=1),
                           output_scale="rms")
    with pytest.raises(ValueError, match=r"j_sensitivity: coordinates must be one of \('physical', 'internal'\); "
                                         r"got 'log'"):
        j_sensitivity(problem, jnp.asarray(problem.space.nominal), coordinates="log")
    with pytest.raises(ValueError, match="scaling must be one of"):
        j_sensitivity(problem, scaling="relative")
    with pytest.raises(ValueError, match="theta must be float64"):
        j_sensitivity(problem, np.float32(problem.space.nominal))
