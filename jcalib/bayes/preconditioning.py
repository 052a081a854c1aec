"""A covariance-shaped preconditioner for MALA: the Laplace approximation at a point.

`laplace_covariance(logdensity_fn, theta_internal)` returns C = (-∇²log π)⁻¹ at
``theta_internal`` (ideally the Gauss-Newton or MAP estimate), the covariance of the Gaussian
that matches the posterior's curvature there, for
`jcalib.bayes.mala.sample(..., preconditioner=C)` (``preconditioner="laplace"`` builds it
there). It works for every likelihood and prior, sampled noise levels included:

- the Hessian is central differences of the *gradient* (2 n gradient evaluations in one
  vmapped batch, the same autodiff gradient MALA uses), symmetrised;
- directions of small or negative curvature (flat directions the data do not determine,
  or a point that is not quite a mode) have their eigenvalues raised to 1/s_max², so that
  no direction gets a standard deviation above ``s_max`` (default: a tenth of the mean
  width of the box when ``bounds`` are given).

Only the shape of C matters (correlations and relative scales): the warm-up of `sample`
adapts the global step.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

__all__ = ["laplace_covariance"]


def laplace_covariance(
    logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]],
    theta_internal: Float[ArrayLike, " n"],
    *,
    bounds: tuple[Float[ArrayLike, " n"], Float[ArrayLike, " n"]] | None = None,
    rel_step: float = 1e-4,
    max_sd: float | None = None,
) -> np.ndarray:
    """C = (-∇²log π)⁻¹ at ``theta_internal``, ``(n, n)``, symmetric positive definite.

    Args:
        logdensity_fn: log π in internal coordinates, a JAX function ``(n,) -> ()``.
        theta_internal: the point, ``(n,)``, float64.
        bounds: ``(lower, upper)`` internal box: sets the difference steps (``rel_step``
            times the width) and the default ``max_sd`` (a tenth of the mean width).
        rel_step: difference step relative to the box width (or to max(1, |θ_i|)).
        max_sd: largest standard deviation allowed in any direction (module doc);
            default as above, or 1e4 × the smallest curvature-based sd without bounds.

    Raises:
        ValueError: wrong shape; a non-finite gradient at a difference point (failed solve,
            outside the support: move the point inside or give a smaller ``rel_step``).
    """
    z = np.asarray(theta_internal, dtype=np.float64)
    if z.ndim != 1:
        raise ValueError(f"laplace_covariance: theta_internal must be 1-D; got shape {z.shape}")
    n = z.size
    if bounds is not None:
        lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), (n,)) for b in bounds)
        width = upper - lower
    else:
        width = np.maximum(1.0, np.abs(z))
    h = rel_step * width
    points = np.concatenate([z[None, :] + np.diag(h), z[None, :] - np.diag(h)])
    grads = np.asarray(_gradients(logdensity_fn, jnp.asarray(points)))
    if not np.all(np.isfinite(grads)):
        bad = sorted({int(i) % n for i in np.flatnonzero(~np.all(np.isfinite(grads), axis=1))})
        raise ValueError(f"laplace_covariance: the gradient is not finite at θ ± h e_i for i in {bad}; start "
                         "inside the support (away from bounds and failed solves) or pass a smaller rel_step")
    hessian = (grads[:n] - grads[n:]).T / (2.0 * h[None, :])  # column i: d grad / d θ_i
    precision = -0.5 * (hessian + hessian.T)
    eigval, eigvec = np.linalg.eigh(precision)
    if max_sd is None:
        positive = eigval[eigval > 0]
        max_sd = float(np.mean(width)) / 10.0 if bounds is not None else (
            1e4 / np.sqrt(positive.max()) if positive.size else 1.0)
    eigval = np.maximum(eigval, 1.0 / max_sd**2)
    cov = (eigvec / eigval[None, :]) @ eigvec.T
    return 0.5 * (cov + cov.T)


@eqx.filter_jit
def _gradients(logdensity_fn, points):
    return jax.vmap(jax.grad(logdensity_fn))(points)
