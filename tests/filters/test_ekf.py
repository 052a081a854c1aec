"""Extended Kalman filter: analytic references first (linear Gaussian = exact Kalman filter
and Bayesian least squares; scalar decay against a hand-written EKF with closed-form
propagation and Jacobians), then the roll-plane check of the IMPU comparison, then bad input."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jcalib
from jcalib.algorithm import run
from jcalib.filters.ekf import (
    RelativeMeasurementNoise,
    augmented_covariance,
    extended_kalman_filter,
    propagate_state,
    run_ekf,
)
from jcalib.model import AbstractModel, Experiment, SimulationError
from jcalib.models.roll_plane import P_REF
from jcalib.parameters import Parameter, ParameterSpace
from tests.estimation.linear_case import THETA_TRUE, design, linear_model
from tests.estimation.linear_case import TS as LINEAR_TS


# --- 1. linear Gaussian system: the EKF is the Kalman filter --------------------------------
def _kalman_numpy(z0, p0, phi_fn, q_fn, c, r, t0, ts, ys, masks):
    """Textbook Kalman filter (numpy, standard covariance update), dropping unmeasured rows."""
    z, p, t_prev = z0.copy(), p0.copy(), t0
    means, covs, lls = [], [], []
    for t, y, m in zip(ts, ys, masks):
        phi = phi_fn(t - t_prev)
        z, p = phi @ z, phi @ p @ phi.T + q_fn(t_prev, t)
        h, rr = c[m], r[np.ix_(m, m)]
        s = h @ p @ h.T + rr
        k = p @ h.T @ np.linalg.inv(s)
        v = y[m] - h @ z
        z = z + k @ v
        p = (np.eye(z.size) - k @ h) @ p
        lls.append(-0.5 * (v @ np.linalg.solve(s, v) + np.linalg.slogdet(s)[1] + m.sum() * np.log(2 * np.pi)))
        means.append(z)
        covs.append(p)
        t_prev = t
    return np.array(means), np.array(covs), np.array(lls)


def _upper_triangular_expm(dt):
    """expm(A dt) for A = [[-0.5, 1], [0, -0.2]] in closed form."""
    e1, e2 = np.exp(-0.5 * dt), np.exp(-0.2 * dt)
    return np.array([[e1, (e2 - e1) / 0.3], [0.0, e2]])


@pytest.mark.slow
def test_linear_gaussian_ekf_equals_kalman_filter():
    """A linear system (exact discretisation expm(A dt) in closed form), two outputs with
    correlated noise, some entries missing: the EKF's linearisation is exact, so it is the
    Kalman filter to round-off."""
    c = np.array([[1.0, 0.0], [0.3, 1.0]])
    r = np.array([[0.04, 0.01], [0.01, 0.09]])
    q_discrete = np.array([[1e-3, 2e-4], [2e-4, 5e-3]])
    ts = np.array([0.1, 0.25, 0.25, 0.7, 1.0, 1.6, 2.0])  # uneven, one repeated time
    rng = np.random.default_rng(0)
    ys = rng.standard_normal((ts.size, 2))
    masks = np.ones((ts.size, 2), bool)
    masks[2, 1] = masks[4, 0] = False
    ys[2, 1] = np.nan  # a missing entry may hold anything

    def transition(z, t0, t1):
        dt = t1 - t0
        e1, e2 = jnp.exp(-0.5 * dt), jnp.exp(-0.2 * dt)
        return jnp.stack([e1 * z[0] + (e2 - e1) / 0.3 * z[1], e2 * z[1]])

    def q_fn(t0, t1):
        return jnp.asarray(q_discrete)

    observe = lambda z, t: jnp.asarray(c) @ z  # noqa: E731
    ekf = extended_kalman_filter(transition, observe, q_fn, jnp.asarray(r), ts, np.nan_to_num(ys), masks)
    z0, p0 = np.array([1.0, -0.5]), np.array([[0.5, 0.1], [0.1, 0.3]])
    state = ekf.init(jnp.asarray(z0), jnp.asarray(p0), 0.0)

    def body(s, _):
        new, info = ekf.step(s)
        return new, (new.mean, new.covariance, info.log_likelihood)

    final, (means, covs, lls) = jax.jit(lambda s: jax.lax.scan(body, s, None, length=ts.size))(state)
    ref_means, ref_covs, ref_lls = _kalman_numpy(
        z0, p0, _upper_triangular_expm,
        lambda t0, t1: q_discrete, c, r, 0.0, ts, ys, masks)
    np.testing.assert_allclose(means, ref_means, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(covs, ref_covs, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(lls, ref_lls, rtol=1e-12)
    assert float(final.log_likelihood) == pytest.approx(ref_lls.sum(), rel=1e-12)
    assert int(final.index) == ts.size
    # jcalib.algorithm.run drives the same Algorithm: the same states, chunked or not
    for chunk_size in (None, 3):
        out = run(None, ekf, state, ts.size, chunk_size=chunk_size,
                  trace_fn=lambda s, info: (s.mean, s.covariance, info.log_likelihood))
        assert out.status == "completed" and out.n_steps == ts.size
        np.testing.assert_allclose(out.trace[0], means, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(out.trace[1], covs, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(out.trace[2], lls, rtol=1e-13)
    # jit and eager steps agree, and a fully masked step changes only the time
    eager, _ = ekf.step(state)
    np.testing.assert_allclose(eager.mean, means[0], rtol=1e-13)
    masked = extended_kalman_filter(transition, observe, q_fn, jnp.asarray(r), [0.0], jnp.zeros((1, 2)),
                                    jnp.zeros((1, 2), bool))
    skipped, info = masked.step(state)
    np.testing.assert_allclose(skipped.mean, z0, rtol=1e-15)
    assert float(info.log_likelihood) == 0.0 and float(info.normalized_innovation_squared) == 0.0


def test_run_ekf_on_a_linear_model_is_bayesian_least_squares():
    """y1 = a + b t, y2 = b t + c t²/2 as an ODE (tests/estimation/linear_case.py): with the
    parameters in the state the system is linear and Gaussian, so after all updates the
    EKF's parameter mean and covariance are the posterior of Bayesian linear regression,
    (AᵀR⁻¹A + P⁻¹)⁻¹, and its log likelihood the evidence log N(y; A θ0, A P Aᵀ + R)."""
    model = linear_model()
    a_mat = design()
    rng = np.random.default_rng(1)
    sigma = 0.05
    y = a_mat @ THETA_TRUE + sigma * rng.standard_normal(a_mat.shape[0])
    theta0 = np.array([0.5, 0.0, 0.1])
    p_theta = np.diag([0.8, 0.5, 0.3]) ** 2
    # initial state [y1, y2] = [a, 0]: y1 is a itself, so it shares a's prior (jitter 1e-14
    # keeps P0 positive definite)
    jac0 = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    p0 = np.block([[jac0 @ p_theta @ jac0.T + 1e-14 * np.eye(2), jac0 @ p_theta], [p_theta @ jac0.T, p_theta]])
    result = run_ekf(model, y.reshape(LINEAR_TS.size, 2), theta0, P0=p0, R=sigma**2 * np.eye(2),
                     parameters="physical")
    precision = a_mat.T @ a_mat / sigma**2 + np.linalg.inv(p_theta)
    cov = np.linalg.inv(precision)
    mean = cov @ (a_mat.T @ y / sigma**2 + np.linalg.solve(p_theta, theta0))
    np.testing.assert_allclose(result.theta, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(result.parameter_covariance[-1], cov, rtol=1e-7, atol=1e-12)
    marginal = a_mat @ p_theta @ a_mat.T + sigma**2 * np.eye(a_mat.shape[0])
    resid = y - a_mat @ theta0
    evidence = -0.5 * (resid @ np.linalg.solve(marginal, resid) + np.linalg.slogdet(marginal)[1]
                       + y.size * np.log(2 * np.pi))
    assert result.log_likelihood == pytest.approx(evidence, rel=1e-8)
    assert result.theta_trajectory.shape == (LINEAR_TS.size + 1, 3) and result.ts[0] == 0.0
    np.testing.assert_allclose(result.theta_trajectory[0], theta0)
    assert result.success and not result.outside_bounds


# --- 2. nonlinear: scalar decay against a hand-written EKF -----------------------------------
class Decay(AbstractModel):
    """dx/dt = -a x, x(0) = 2, observed directly; theta = [a]."""

    def vector_field(self, t, y, theta):
        return -theta[0] * y

    def initial_state(self, theta):
        return jnp.full(1, 2.0, dtype=theta.dtype)

    def observe(self, t, y, theta):
        return y


DECAY_TS = np.array([0.2, 0.5, 0.9, 1.4, 2.0, 2.5, 3.0])


def decay_model(max_steps=4096):
    return Decay(parameters=ParameterSpace([Parameter("a", 1.0, 0.1, 10.0, "1/s", log_scale=True)]),
                 output_names=("x",), state_names=("x",), experiment=Experiment(DECAY_TS, t0=0.0),
                 solver=dfx.Tsit5(), controller=dfx.PIDController(rtol=1e-12, atol=1e-12),
                 adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=max_steps)


def _decay_ekf_numpy(z0, p0, q_density, r, ts, ys):
    """EKF on z = [x, log a] with x(t1) = x exp(-a dt) and its closed-form Jacobian."""
    z, p, t_prev = z0.copy(), p0.copy(), 0.0
    means = []
    for t, y in zip(ts, ys):
        dt = t - t_prev
        x, a = z[0], np.exp(z[1])
        decay = np.exp(-a * dt)
        f = np.array([[decay, -x * a * dt * decay], [0.0, 1.0]])
        z = np.array([x * decay, z[1]])
        p = f @ p @ f.T + q_density * dt
        h = np.array([[1.0, 0.0]])
        s = h @ p @ h.T + r
        k = p @ h.T / s
        z = z + (k * (y - z[0])).ravel()
        i_kh = np.eye(2) - k @ h
        p = i_kh @ p @ i_kh.T + k @ k.T * r
        means.append(z.copy())
        t_prev = t
    return np.array(means), p


@pytest.mark.slow
def test_decay_matches_hand_written_ekf():
    """Propagation by diffrax and Jacobians by jacfwd through the solve equal the closed
    forms to the solver's tolerance; log coordinates keep a positive."""
    model = decay_model()
    truth = 1.3
    rng = np.random.default_rng(2)
    ys = 2.0 * np.exp(-truth * DECAY_TS) + 0.02 * rng.standard_normal(DECAY_TS.size)
    p0 = augmented_covariance([1e-10], [0.5**2])
    q = augmented_covariance([1e-5], [1e-4])
    result = run_ekf(model, ys[:, None], [0.7], P0=p0, Q=q, R=[[0.02**2]])
    z0 = np.array([2.0, np.log(0.7)])
    ref, ref_cov = _decay_ekf_numpy(z0, p0, q, 0.02**2, DECAY_TS, ys)
    np.testing.assert_allclose(result.state_trajectory[1:, 0], ref[:, 0], rtol=1e-8)
    np.testing.assert_allclose(result.parameters_filter[1:, 0], ref[:, 1], rtol=1e-8)
    np.testing.assert_allclose(result.parameter_covariance[-1], ref_cov[1:, 1:], rtol=1e-7)
    np.testing.assert_allclose(result.theta, np.exp(ref[-1, 1]), rtol=1e-8)
    # delta method: sd(theta) = theta sd(log theta)
    assert result.theta_sd[-1, 0] == pytest.approx(result.theta[0] * np.sqrt(ref_cov[1, 1]), rel=1e-7)
    assert abs(result.theta[0] - truth) < abs(0.7 - truth)
    # the same filter through the generic propagation hook
    x1 = propagate_state(model, jnp.ones(1) * 2.0, jnp.asarray([truth]), 0.0, 1.5)
    assert float(x1[0]) == pytest.approx(2.0 * np.exp(-truth * 1.5), rel=1e-10)


@pytest.mark.slow
def test_measurement_noise_per_time_and_callable_agree():
    """R given once, once per time, or as a callable: the same filter."""
    model = decay_model()
    ys = 2.0 * np.exp(-1.3 * DECAY_TS)[:, None] * (1.0 + 0.01 * np.random.default_rng(3).standard_normal((7, 1)))
    constant = run_ekf(model, ys, [0.7], R=[[1e-4]])
    per_time = run_ekf(model, ys, [0.7], R=np.full((DECAY_TS.size, 1, 1), 1e-4))
    as_callable = run_ekf(model, ys, [0.7], R=lambda t, y: jnp.full((1, 1), 1e-4))
    for other in (per_time, as_callable):
        np.testing.assert_allclose(other.theta_trajectory, constant.theta_trajectory, rtol=1e-12)
        np.testing.assert_allclose(other.parameter_covariance, constant.parameter_covariance, rtol=1e-12)


def test_failed_solve_raises_or_flags():
    """a = 1e9 makes the explicit solver hit max_steps (stability needs ~1e8 steps): NaN,
    then an error or ``success=False`` (the compiled filter of the test above is reused)."""
    model = decay_model()
    ys = np.ones((DECAY_TS.size, 1))
    with pytest.raises(SimulationError, match="filter step at t = 0.2 gave non-finite numbers"):
        run_ekf(model, ys, [1e9], R=[[0.01]])
    result = run_ekf(model, ys, [1e9], R=[[0.01]], throw=False)
    assert not result.success and np.isnan(result.theta).all()


# --- 3. roll plane (Kessels et al. 2023, §5): the EKF moves towards p_ref -----------------
N_DRAWS = 5


@pytest.mark.slow
def test_roll_plane_ekf_moves_towards_p_ref():
    """Started at the nominal stiffnesses with the paper's 1 % noise, the final EKF
    estimate is closer to p_ref than the start, on average over noise draws and per
    parameter, and its reported standard deviation shrinks."""
    model = jcalib.models.get("roll_plane")
    p_ref = np.asarray(P_REF)
    start = model.parameters.nominal
    noise = RelativeMeasurementNoise(relative=0.01, floor=1e-6)
    errors = []
    for i in range(N_DRAWS):
        data = jcalib.synthetic_measurements(jax.random.key(i), model, jnp.asarray(p_ref), 0.01)
        result = run_ekf(model, data, start, R=noise)
        errors.append(result.relative_error(p_ref))
        assert result.success and not result.outside_bounds
        assert np.all(result.theta_sd[-1] < 0.2 * result.theta_sd[0])
    initial = np.abs(start - p_ref) / p_ref  # 4.4 % and 8.4 %
    mean_error = np.mean(errors, axis=0)
    assert np.all(mean_error < initial), (mean_error, initial)
    assert np.all(mean_error < 0.25 * initial), (mean_error, initial)


# --- 4. bad input -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def decay():
    return decay_model()


GOOD_Y = np.ones((DECAY_TS.size, 1))


@pytest.mark.parametrize("kwargs, match", [
    (dict(theta0=[1.0, 2.0]), r"theta0 must be 1 finite numbers \(a\)"),
    (dict(theta0=[np.nan]), "theta0 must be 1 finite"),
    (dict(theta0=[-1.0]), "theta0 must be positive for log coordinates"),
    (dict(parameters="logit"), "parameters must be one of"),
    (dict(measurements=np.ones((3, 1))), r"measurements must have shape \(n_times=7, n_outputs=1\)"),
    (dict(measurements=np.ones((DECAY_TS.size, 2))), "measurements must have 1 outputs"),
    (dict(measurements=np.where(np.arange(7)[:, None] == 3, np.nan, 1.0)),
     r"NaN or inf at measured entries \(time indices \[3\]\)"),
    (dict(R=None), "R .the measurement noise. is required"),
    (dict(R=[[0.0]]), "R must be positive definite"),
    (dict(R=np.ones((2, 2))), r"R must have shape \(1, 1\)"),
    (dict(R=np.ones((3, 1, 1))), r"R per time must have shape \(n_times=7, 1, 1\)"),
    (dict(P0=np.diag([1.0, -1e-3])), "P0 must be positive definite; its smallest eigenvalue is -0.001"),
    (dict(P0=np.array([[1.0, 0.5], [0.0, 1.0]])), "P0 must be symmetric"),
    (dict(P0=np.eye(3)), r"P0 must have shape \(2, 2\)"),
    (dict(Q=np.diag([1.0, -1.0])), "Q must be positive semi-definite"),
    (dict(Q=np.diag([np.inf, 1.0])), "Q contains NaN or inf"),
    (dict(x0=[1.0, 2.0]), r"x0 must be 1 finite numbers \(x\)"),
])
def test_bad_input(decay, kwargs, match):
    args = dict(measurements=GOOD_Y, theta0=[1.0], R=[[0.01]])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        run_ekf(decay, **args)


def test_bad_times_and_helpers(decay):
    early = jcalib.Measurements([-1.0, 0.5], np.ones((2, 1)), output_names=("x",))
    with pytest.raises(ValueError, match="measurement times must be >= the experiment's t0 = 0.0"):
        run_ekf(decay, early, [1.0], R=[[0.01]])
    with pytest.raises(ValueError, match="relative must be a positive finite number; got 0"):
        RelativeMeasurementNoise(relative=0)
    with pytest.raises(ValueError, match="floor must be a positive finite number; got nan"):
        RelativeMeasurementNoise(floor=float("nan"))
    with pytest.raises(ValueError, match=r"parameters must be variances \(n,\) or a square matrix"):
        augmented_covariance([1.0], np.ones((2, 3)))
    noise = RelativeMeasurementNoise(0.01, 1e-6)
    np.testing.assert_allclose(noise(0.0, jnp.asarray([-2.0, 0.0])), np.diag([0.020001**2, 1e-12]))
