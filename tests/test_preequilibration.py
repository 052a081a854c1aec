"""Pre-equilibration (issue 20): simulate to a steady state under one condition, then the
experiment under its own, checked against the analytic solution of a linear production /
degradation model; no steady state gives NO_STEADY_STATE and NaN, never numbers."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcalib.data import Measurements
from jcalib.model import AbstractModel, Experiment, SolveStatus
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import CalibrationProblem, JointProblem
from tests.helpers import central_differences

TS = np.linspace(0.5, 10.0, 12)


class Production(AbstractModel):
    """dy/dt = k_in u - k_out y (condition u, y(0) = y0); with ``oscillate``, a harmonic
    oscillator that has no attracting steady state."""

    def vector_field(self, t, y, theta):
        k_in, k_out = theta
        u = self.experiment.conditions["u"]
        if self.state_names == ("y", "v"):
            return jnp.stack([y[1], -k_out * y[0]])
        return jnp.stack([k_in * u - k_out * y[0]])

    def initial_state(self, theta):
        if self.state_names == ("y", "v"):
            return jnp.stack([self.experiment.conditions["y0"], jnp.zeros_like(theta[0])])
        return jnp.stack([self.experiment.conditions["y0"] + jnp.zeros_like(theta[0])])

    def observe(self, t, y, theta):
        return y[:1]


def _model(pre=None, u=2.0, oscillate=False, max_steps=4096):
    space = ParameterSpace([Parameter("k_in", 1.5, 0.1, 10.0, log_scale=True),
                            Parameter("k_out", 0.7, 0.1, 10.0, log_scale=True)])
    return Production(parameters=space, output_names=("y",), state_names=("y", "v") if oscillate else ("y",),
                      experiment=Experiment(TS, t0=0.0, conditions={"u": u, "y0": 0.3}, name=f"u={u}",
                                            preequilibration=pre),
                      solver=dfx.Kvaerno5(), controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                      adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=max_steps)


def _analytic(theta, u_pre, u):
    k_in, k_out = theta
    y_pre, y_inf = k_in * u_pre / k_out, k_in * u / k_out
    return y_inf + (y_pre - y_inf) * np.exp(-k_out * TS)


@pytest.fixture(scope="module")
def pre_model():
    return _model(pre={"u": 1.0})


@pytest.mark.slow
def test_simulation_starts_from_the_steady_state(pre_model):
    theta = np.array([1.5, 0.7])
    y = np.asarray(pre_model.simulate(jnp.asarray(theta)))[:, 0]
    np.testing.assert_allclose(y, _analytic(theta, 1.0, 2.0), rtol=1e-7)
    without = np.asarray(_model().simulate(jnp.asarray(theta)))[:, 0]
    assert abs(without[0] - y[0]) > 0.1  # without pre-equilibration it starts from y0 = 0.3


@pytest.mark.slow
def test_sensitivities_through_the_preequilibration(pre_model):
    """Forward-mode Jacobian (through the steady-state event) against the analytic
    derivatives of y(t) and against central differences."""
    theta = np.array([1.5, 0.7])
    jac = np.asarray(pre_model.jacobian(jnp.asarray(theta)))[:, 0, :]
    fd = central_differences(lambda th: np.asarray(pre_model.simulate(jnp.asarray(th)))[:, 0], theta)
    np.testing.assert_allclose(jac, fd, rtol=1e-5, atol=1e-7)
    k_in, k_out = theta
    e = np.exp(-k_out * TS)
    d_kin = 2.0 / k_out + (1.0 / k_out - 2.0 / k_out) * e
    np.testing.assert_allclose(jac[:, 0], d_kin, rtol=1e-6)


@pytest.mark.slow
def test_no_steady_state_is_a_failed_solve_not_numbers():
    model = _model(pre={"u": 1.0}, oscillate=True, max_steps=500)
    y, status = model.simulate_with_status(jnp.asarray([1.5, 0.7]))
    assert int(status) == SolveStatus.NO_STEADY_STATE
    assert np.all(np.isnan(np.asarray(y)))
    assert "steady state" in SolveStatus.describe(int(status))


def test_bad_preequilibration_is_refused():
    with pytest.raises(ValueError, match="not conditions of the experiment"):
        Experiment(TS, conditions={"u": 1.0}, preequilibration={"w": 2.0})


@pytest.mark.slow  # ~50 s cold
def test_joint_problem_with_preequilibrated_experiments(pre_model):
    """Two experiments stepping from u = 1 to u = 2 and to u = 4 share k_in, k_out: the joint
    fit of their noise-free data recovers them (a single one too, but the pair is one vmap)."""
    theta = np.array([1.5, 0.7])
    pairs = []
    for u in (2.0, 4.0):
        model = _model(pre={"u": 1.0}, u=u)
        pairs.append((model, Measurements(TS, _analytic(theta, 1.0, u)[:, None], output_names=("y",))))
    joint = JointProblem(pairs, weighting="absolute", free=["k_in", "k_out"])
    assert joint.group_members == ((0, 1),)
    z = joint.to_internal(jnp.asarray(theta))
    np.testing.assert_allclose(np.asarray(joint.residuals(z)), 0.0, atol=1e-7)
    single = CalibrationProblem(*pairs[1], weighting="absolute")
    np.testing.assert_allclose(np.asarray(joint.jacobian(z))[joint.experiment_rows[1]],
                               np.asarray(single.jacobian(z)), rtol=1e-9, atol=1e-12)
    from jcalib.estimation import gauss_newton
    fit = gauss_newton(joint, {"k_in": 1.0, "k_out": 1.0})
    np.testing.assert_allclose(fit.theta, theta, rtol=1e-6)


class Exchange(AbstractModel):
    """A <-> B at rates s k1 a and k2 b (condition s, a stimulus), a(0) = a0 (a parameter),
    b(0) = b0 (a condition); a + b is conserved."""

    def vector_field(self, t, y, theta):
        k1, k2, _ = theta
        flux = self.experiment.conditions["s"] * k1 * y[0] - k2 * y[1]
        return jnp.stack([-flux, flux])

    def initial_state(self, theta):
        return jnp.stack([theta[2], self.experiment.conditions["b0"] + jnp.zeros_like(theta[2])])

    def observe(self, t, y, theta):
        return y[:1]

    def conserved_moieties(self, y, theta):
        return jnp.sum(y, keepdims=True)


SLOW_TS = np.linspace(0.0, 600.0, 7)


def _exchange_analytic(theta, b0=0.5, s_pre=1.0, s=2.0):
    """a(t) after pre-equilibration at s_pre, then at s from t = 0 (closed form, JAX)."""
    k1, k2, a0 = theta[0], theta[1], theta[2]
    total = a0 + b0
    a_pre, a_inf = total * k2 / (s_pre * k1 + k2), total * k2 / (s * k1 + k2)
    return a_inf + (a_pre - a_inf) * jnp.exp(-(s * k1 + k2) * jnp.asarray(SLOW_TS))


@pytest.mark.slow  # ~20 s cold (forward and reverse mode through Kvaerno5)
def test_preequilibration_derivatives_are_those_of_the_exact_steady_state():
    """Slow exchange (k1 = 2e-3, k2 = 1e-3 per s): the steady-state event stops the
    pre-equilibration while the slowest mode, and more so its sensitivities, still converge.
    The forward Jacobian and the reverse-mode gradient of a native pre-equilibrated experiment
    match the closed form's on every component (a0 acts through the conserved a + b), as the
    PEtab path does (the polished steady state and its implicit-function derivative)."""
    space = ParameterSpace([Parameter("k1", 2e-3, 1e-4, 1.0, log_scale=True),
                            Parameter("k2", 1e-3, 1e-4, 1.0, log_scale=True),
                            Parameter("a0", 1.0, 0.1, 10.0)])
    model = Exchange(parameters=space, output_names=("a",), state_names=("a", "b"),
                     experiment=Experiment(SLOW_TS, conditions={"s": 2.0, "b0": 0.5}, preequilibration={"s": 1.0}),
                     solver=dfx.Kvaerno5(), controller=dfx.PIDController(rtol=1e-8, atol=1e-10),
                     adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=4096)
    theta = jnp.asarray(space.nominal)
    y, exact_y = np.asarray(model.simulate(theta))[:, 0], np.asarray(_exchange_analytic(theta))
    jac, exact = np.asarray(model.jacobian(theta))[:, 0, :], np.asarray(jax.jacfwd(_exchange_analytic)(theta))
    # t = 0 is the steady state itself: exact to round-off (through the simulation: 2e-6, 2e-5)
    np.testing.assert_allclose(y[0], exact_y[0], rtol=1e-10)
    np.testing.assert_allclose(jac[0], exact[0], rtol=1e-10)
    # later times carry the main simulation's error (controller rtol 1e-8: 3e-7)
    np.testing.assert_allclose(y, exact_y, rtol=1e-6)
    np.testing.assert_allclose(jac, exact, rtol=1e-6, atol=1e-6 * np.abs(exact).max())
    weights = jnp.linspace(1.0, 2.0, SLOW_TS.size)
    grad = jax.grad(lambda th: jnp.sum(weights * model.simulate(th)[:, 0]))(theta)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(weights) @ exact, rtol=1e-6)
