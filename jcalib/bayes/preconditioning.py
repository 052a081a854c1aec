"""Preconditioners as small strategy objects, passed to `jcalib.bayes.mala.sample`
(``preconditioner=``) for every kernel (MALA, HMC, NUTS):

- `Prescaled(fraction)`: the paper's diagonal prescaling (Wulkow et al. 2021, Appendix A.2):
  step sizes P_ii from target mean step lengths, ``fraction`` of each parameter's prior range
  (`jcalib.bayes.adaptation.prior_prescaling`: the box for the default uniform prior, the
  prior's spread otherwise, so infinite bounds work). MALA's default.
- `DenseMetric(cov)`: a fixed symmetric positive definite covariance C in internal
  coordinates (e.g. the Gauss-Newton covariance at the estimate): MALA proposes
  θ + h C ∇log π + √(2h) L r (C = L Lᵀ); HMC/NUTS use C as the inverse mass matrix.
- `Laplace()`: C = (-∇²log π)⁻¹ at the chains' mean start
  (`jcalib.bayes.adaptation.laplace_covariance`), then as `DenseMetric`; start at an estimate
  (Gauss-Newton's or the MAP). The default of HMC and NUTS: whitening by the Laplace covariance
  is what makes NUTS efficient on stiff, correlated ODE posteriors.

The objects only *describe* the preconditioner; the numbers are computed before sampling by
the functions of `jcalib.bayes.adaptation` (`Laplace.covariance`, `Prescaled.prescaling`).

Example:
    >>> import jax, jax.numpy as jnp
    >>> jax.config.update("jax_enable_x64", True)
    >>> cov = Laplace().covariance(lambda x: -0.5 * jnp.sum(x**2 / jnp.array([1.0, 4.0])), jnp.zeros(2))
    >>> cov.round(6).tolist()
    [[1.0, 0.0], [0.0, 4.0]]
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float, PRNGKeyArray

from jcalib.bayes.adaptation import Prescaling, laplace_covariance, prior_prescaling

__all__ = ["AbstractPreconditioner", "DenseMetric", "Laplace", "Prescaled", "as_preconditioner",
           "laplace_covariance"]


class AbstractPreconditioner(eqx.Module):
    """A preconditioner strategy (`Prescaled`, `DenseMetric` or `Laplace`)."""


class Prescaled(AbstractPreconditioner):
    """The paper's diagonal prescaling (Wulkow et al. 2021, Appendix A.2).

    Attributes:
        fraction: target mean step length τ_i as a fraction of each parameter's prior range
            (scalar or per parameter, > 0); the paper used 1/50 and 1/200.
    """

    fraction: float | np.ndarray = 0.02

    def __check_init__(self):
        f = np.asarray(self.fraction, dtype=np.float64) if _is_numeric(self.fraction) else None
        if f is None or f.ndim > 1 or not np.all(np.isfinite(f) & (f > 0)):
            raise ValueError(f"Prescaled: fraction must be positive and finite (a number or one per parameter); "
                             f"got {self.fraction!r}")

    def prescaling(self, key: PRNGKeyArray, problem) -> Prescaling:
        """`jcalib.bayes.adaptation.prior_prescaling` with this fraction: the paper's 100
        uniform box draws for the default uniform prior on finite bounds, the prior's draws and
        spread otherwise."""
        return prior_prescaling(key, problem, fraction=self.fraction)


class DenseMetric(AbstractPreconditioner):
    """A fixed covariance C (internal coordinates), symmetric positive definite.

    Attributes:
        cov: ``(n_params, n_params)``; checked (shape, symmetry, definiteness) by `sample`.
    """

    cov: np.ndarray = eqx.field(converter=lambda c: np.asarray(c, dtype=np.float64))


class Laplace(AbstractPreconditioner):
    """C = (-∇²log π)⁻¹ at the chains' mean start (`laplace_covariance`).

    Attributes:
        rel_step: difference step of the Hessian relative to the box width.
        max_sd: the largest standard deviation allowed in any direction (None: a tenth of the
            mean box width, see `laplace_covariance`).
    """

    rel_step: float = 1e-4
    max_sd: float | None = None

    def __check_init__(self):
        if not (_is_number(self.rel_step) and 0 < self.rel_step < 1):
            raise ValueError(f"Laplace: rel_step must lie in (0, 1); got {self.rel_step!r}")
        if self.max_sd is not None and not (_is_number(self.max_sd) and 0 < self.max_sd < np.inf):
            raise ValueError(f"Laplace: max_sd must be a positive number or None; got {self.max_sd!r}")

    def covariance(self, logdensity_fn: Callable, theta_internal: Float[ArrayLike, " n"],
                   bounds=None, widths=None) -> np.ndarray:
        """C at ``theta_internal`` (``bounds``: the internal box, or None; ``widths``: the
        parameters' scales where the box is not finite)."""
        return laplace_covariance(logdensity_fn, theta_internal, bounds=bounds, rel_step=self.rel_step,
                                  max_sd=self.max_sd, widths=widths)


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _is_numeric(x) -> bool:
    try:
        return np.asarray(x).dtype.kind in "iuf"
    except (TypeError, ValueError):
        return False


def as_preconditioner(preconditioner, where: str = "sample") -> AbstractPreconditioner:
    """A strategy object from ``preconditioner``: an `AbstractPreconditioner` as it is; the
    short forms None (`Prescaled()`), ``"laplace"`` (`Laplace()`) and a matrix
    (`DenseMetric`).

    Raises:
        ValueError: anything else, naming the three strategies.
    """
    if isinstance(preconditioner, AbstractPreconditioner):
        return preconditioner
    if preconditioner is None:
        return Prescaled()
    if isinstance(preconditioner, str):
        if preconditioner == "laplace":
            return Laplace()
    elif _is_numeric(preconditioner) and np.ndim(preconditioner) == 2:
        return DenseMetric(preconditioner)
    raise ValueError(
        f"{where}: preconditioner must be Prescaled(fraction), DenseMetric(cov) or Laplace() (or None, a matrix "
        f"or 'laplace'); got {preconditioner!r}")


def _cholesky_factor(cov, n: int) -> np.ndarray:
    """The Cholesky factor of a symmetric positive definite ``(n, n)`` covariance."""
    c = np.asarray(cov, dtype=np.float64)
    if c.shape != (n, n):
        raise ValueError(f"sample: preconditioner must have shape ({n}, {n}); got shape {c.shape}")
    if not np.all(np.isfinite(c)) or not np.allclose(c, c.T, rtol=1e-10, atol=0.0):
        raise ValueError("sample: preconditioner must be a finite symmetric matrix")
    try:
        return np.linalg.cholesky(c)
    except np.linalg.LinAlgError:
        raise ValueError("sample: preconditioner must be positive definite (its Cholesky factorization "
                         f"failed; eigenvalues {np.linalg.eigvalsh(c).tolist()})") from None
