"""Calibration problems with analytic posteriors for the sampler tests: a linear model y = A θ
with Gaussian noise (`tests.helpers.LinearModel`), so that the posterior under a uniform box
prior far wider than the posterior is N(mean, cov) to machine precision."""

import jax.numpy as jnp
import numpy as np

from jcalib.data import Measurements
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.likelihoods import AbsoluteGaussian
from jcalib.problems import CalibrationProblem
from tests.helpers import LinearModel


def linear_problem(a, y, sigma, space, prior="uniform", model_cls=LinearModel):
    """y = A θ + ε, ε ~ N(0, σ² I): ``a`` is ``(n_obs, n_params)``, ``y`` ``(n_obs,)``."""
    a = np.asarray(a, dtype=np.float64)
    model = model_cls(a[:, None, :], space=space)
    data = Measurements(model.ts, np.asarray(y, dtype=np.float64)[:, None], output_names=model.output_names)
    return CalibrationProblem(model, data, weighting="absolute", likelihood=AbsoluteGaussian(sigma=float(sigma)),
                              prior=prior)


def gaussian_problem(mean, cov, *, half_width=1e3, names=None, model_cls=LinearModel):
    """A problem whose posterior is N(mean, cov) (uniform box prior ± ``half_width`` around the
    mean, nominal values at the mean): A = Lᵀ with cov⁻¹ = L Lᵀ, σ = 1, y = A mean."""
    mean = np.asarray(mean, dtype=np.float64)
    names = names or [f"x{i}" for i in range(mean.size)]
    a = np.linalg.cholesky(np.linalg.inv(np.asarray(cov, dtype=np.float64))).T
    space = ParameterSpace([Parameter(n, float(m), float(m - half_width), float(m + half_width))
                            for n, m in zip(names, mean)])
    return linear_problem(a, a @ mean, 1.0, space, model_cls=model_cls)


class CutLinearModel(LinearModel):
    """`LinearModel` whose "solve" fails (NaN outputs, status 1) where θ_0 > 0.5."""

    def simulate_with_status(self, theta):
        y, _ = super().simulate_with_status(theta)
        failed = jnp.asarray(theta)[0] > 0.5
        return jnp.where(failed, jnp.nan, y), failed.astype(jnp.int32)
