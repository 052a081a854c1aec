"""A model linear in its parameters, for exact least-squares references.

y1(t) = a + b t and y2(t) = b t + c t²/2, as the ODE dy1/dt = b, dy2/dt = b + c t with
y1(0) = a, y2(0) = 0. Tsit5 (order 5) integrates these polynomials exactly, so the outputs
are linear in θ = (a, b, c) to round-off: y = A θ with the design matrix `design`.
"""

import diffrax as dfx
import jax.numpy as jnp
import numpy as np

from jcalib.data import Measurements
from jcalib.model import AbstractModel, Experiment
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import CalibrationProblem

TS = np.array([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0])
THETA_TRUE = np.array([1.0, -0.5, 0.3])


class LinearModel(AbstractModel):
    def vector_field(self, t, y, theta):
        return jnp.stack([theta[1], theta[1] + theta[2] * t])

    def initial_state(self, theta):
        return jnp.stack([theta[0], jnp.zeros_like(theta[0])])

    def observe(self, t, y, theta):
        return y


def linear_model() -> LinearModel:
    space = ParameterSpace([
        Parameter("a", 0.0, -10.0, 10.0),
        Parameter("b", 0.0, -10.0, 10.0),
        Parameter("c", 0.0, -10.0, 10.0),
    ])
    return LinearModel(
        parameters=space, output_names=("y1", "y2"), state_names=("y1", "y2"),
        experiment=Experiment(TS, t0=0.0), solver=dfx.Tsit5(),
        controller=dfx.PIDController(rtol=1e-10, atol=1e-12), adjoint=dfx.RecursiveCheckpointAdjoint(),
        dt0=None, max_steps=4096,
    )


def design() -> np.ndarray:
    """A with rows ordered (time, output) as the problem's residuals: (2 n_times, 3)."""
    rows = []
    for t in TS:
        rows.append([1.0, t, 0.0])
        rows.append([0.0, t, 0.5 * t**2])
    return np.array(rows)


def linear_problem(seed: int = 0, noise: float = 0.05) -> tuple[CalibrationProblem, np.ndarray]:
    """Absolute-weighted problem on noisy data, and the data vector in residual order."""
    rng = np.random.default_rng(seed)
    y = (design() @ THETA_TRUE).reshape(TS.size, 2) + noise * rng.standard_normal((TS.size, 2))
    data = Measurements(TS, y, output_names=("y1", "y2"))
    return CalibrationProblem(linear_model(), data, weighting="absolute"), y.reshape(-1)
