"""Uncertainty at the optimum: Gauss-Newton (Fisher) covariance and profile likelihoods.

Covariance. Linearising the residuals at the estimate, E(θ) ≈ E(θ̂) + J (θ - θ̂), with
independent residual errors of variance σ², the least-squares estimate has covariance

    C = σ² (JᵀJ)⁻¹ = σ² V S⁻² Vᵀ            (J = U S Vᵀ, internal coordinates),

the inverse Fisher information of the Gaussian likelihood. σ² is given (in residual units:
the relative noise level for ``weighting="relative"``, 1 for ``"sigma"``) or estimated from
the residual, σ̂² = ‖E‖² / (n_obs - p) with p the number of directions kept (the unbiased
OLS estimate). When J is numerically singular (s_k < ``rcond`` s_1, default 1e-6: the
sensitivities of an adaptive solve at rtol 1e-8 do not resolve smaller singular values),
the inverse is replaced by the **pseudo-inverse on the kept (essential) subspace**,
C = σ² Σ_{l ≤ p} v_l v_lᵀ / s_l²; the result says so (``singular``, ``note``): the variance
along the dropped directions is unbounded by the data and is not in C. Standard errors in
physical units follow by the delta method, sd(θ_i) = |dθ_i/dz_i| sd(z_i) (θ_i sd(z_i) for
log-scale parameters); the correlation matrix is the same in both coordinates.

Profile likelihood. For one parameter, a grid of values is fixed one at a time and the
other free parameters are re-optimised by `gauss_newton` (warm-started from the neighbouring
grid point, walking outwards from the estimate). With Gaussian residual errors,
-2 Δlog L = n_obs (R(θ) - R(θ̂)) / σ², which `ProfileLikelihood.delta_chi2` returns; its
crossings of the χ²₁ quantile give a likelihood-based confidence interval that, unlike the
covariance, follows the nonlinearity. For a linear model it is exactly the parabola
((θ_i - θ̂_i)/sd_i)².
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float
from scipy import stats

from jcalib.estimation.failures import FailedStartError, jacobian_failure, point_failure
from jcalib.estimation.gauss_newton import gauss_newton
from jcalib.estimation.result import EstimationResult
from jcalib.jsonable import to_jsonable
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import AbstractProblem
from jcalib.starts import start_internal

__all__ = ["ParameterCovariance", "ProfileLikelihood", "parameter_covariance",
           "profile_likelihood"]

RCOND = 1e-6
"""Singular values below ``RCOND * s_1`` are treated as zero (see the module doc)."""


class ParameterCovariance(eqx.Module):
    """Gauss-Newton/Fisher covariance of an estimate (module doc).

    Attributes:
        names: free parameter names.
        theta: estimate, physical units, ``(n_free,)``.
        theta_internal: the same in internal coordinates.
        space: the free parameters (their coordinate maps, `jcalib.parameters`).
        covariance_internal: ``(n_free, n_free)`` in internal coordinates.
        covariance: in physical units (delta method).
        std_internal, std: standard errors, internal and physical.
        correlation: ``(n_free, n_free)`` correlation matrix (NaN rows for zero variance).
        sigma: residual noise level used (σ, residual units).
        sigma_source: ``"given"`` or ``"estimated"`` (from the residual, n_obs - p dof).
        n_observed: number of residuals.
        n_directions: directions kept in the (pseudo-)inverse, p.
        singular: True when p < n_free (pseudo-inverse on the kept subspace).
        singular_values: of J at the estimate.
        dropped_directions: right singular vectors not kept, ``[{name: component}]``.
        note: how the covariance was computed, in words.
    """

    names: tuple[str, ...]
    theta: np.ndarray
    theta_internal: np.ndarray
    space: ParameterSpace = eqx.field(static=True)
    covariance_internal: np.ndarray
    covariance: np.ndarray
    std_internal: np.ndarray
    std: np.ndarray
    correlation: np.ndarray
    sigma: float
    sigma_source: str
    n_observed: int
    n_directions: int
    singular: bool
    singular_values: np.ndarray
    dropped_directions: list
    note: str

    @property
    def log_scale(self) -> np.ndarray:
        """Per parameter, whether its internal coordinate is log."""
        return self.space.log_scale

    @property
    def standard_errors(self) -> dict[str, float]:
        """``{name: physical standard error}``."""
        return {n: float(s) for n, s in zip(self.names, np.asarray(self.std))}

    def confidence_intervals(self, level: float = 0.95) -> dict[str, tuple[float, float]]:
        """Wald intervals ẑ ± q sd(z) in internal coordinates, mapped to physical values
        (asymmetric for log-scale and half-open parameters, which keeps them inside)."""
        if not 0 < level < 1:
            raise ValueError(f"confidence_intervals: level must be in (0, 1); got {level}")
        q = float(stats.norm.ppf(0.5 + level / 2))
        z, sd = np.asarray(self.theta_internal), np.asarray(self.std_internal)
        lo, hi = z - q * sd, z + q * sd
        lo, hi = np.asarray(self.space.to_physical(lo)), np.asarray(self.space.to_physical(hi))
        return {n: (float(a), float(b)) for n, a, b in zip(self.names, lo, hi)}

    def to_dict(self) -> dict:
        return to_jsonable({
            "names": list(self.names), "estimate": dict(zip(self.names, np.asarray(self.theta))),
            "standard_errors": self.standard_errors,
            "std_internal": dict(zip(self.names, np.asarray(self.std_internal))),
            "correlation": self.correlation, "covariance_internal": self.covariance_internal,
            "sigma": self.sigma, "sigma_source": self.sigma_source,
            "n_observed": self.n_observed, "n_directions": self.n_directions,
            "singular": self.singular, "singular_values": self.singular_values,
            "dropped_directions": self.dropped_directions, "note": self.note,
            "confidence_intervals_95": self.confidence_intervals(0.95),
        })


def parameter_covariance(
    problem: AbstractProblem,
    estimate: EstimationResult | Float[ArrayLike, " n_free"] | Mapping[str, float],
    *,
    sigma: float | None = None,
    coordinates: str = "physical",
    rcond: float = RCOND,
    n_directions: int | None = None,
) -> ParameterCovariance:
    """Covariance, standard errors and correlations of an estimate of ``problem``.

    Args:
        problem: the fitted problem.
        estimate: an `EstimationResult` of ``problem`` or the estimate itself (physical
            array ordered as ``problem.free_names``, or ``{name: value}``).
        sigma: residual noise level σ in residual units (the relative noise level for
            relative weighting, 1.0 for sigma weighting); None estimates it from the
            residual, σ̂² = ‖E‖²/(n_obs - p).
        coordinates: ``"physical"`` (default) or ``"internal"``: the system an array
            ``estimate`` is given in.
        rcond: singular values below ``rcond * s_1`` are dropped (pseudo-inverse).
        n_directions: keep exactly this many singular directions instead (e.g. a Gauss-Newton
            result's ``n_essential_directions``).

    Returns:
        A `ParameterCovariance`.

    Raises:
        ValueError: a result for other parameters, bad ``sigma``/``rcond``/``n_directions``,
            too few residuals to estimate σ, or no finite residuals and Jacobian at the
            estimate: the message says whether the simulation failed there (with its
            `jcalib.model.SolveStatus`), the loss overflows or only the Jacobian is NaN.

    Long for its documented options; the body is 61 lines.
    """
    z = _estimate_internal(problem, estimate, coordinates, "parameter_covariance")
    d = problem.n_free
    if sigma is not None and not (math.isfinite(float(sigma)) and float(sigma) > 0):
        raise ValueError(f"parameter_covariance: sigma must be positive and finite, or None to "
                         f"estimate it; got {sigma!r}")
    if not 0 <= rcond < 1:
        raise ValueError(f"parameter_covariance: rcond must be in [0, 1); got {rcond!r}")
    if n_directions is not None and (int(n_directions) != n_directions
                                     or not 1 <= n_directions <= d):
        raise ValueError(f"parameter_covariance: n_directions must be None or an integer in "
                         f"[1, n_free={d}]; got {n_directions!r}")
    r = np.asarray(problem.residuals(z))
    jac = np.asarray(problem.jacobian(z))
    fix = "no covariance there; check the estimate"
    failure = (point_failure(problem, z, r, "parameter_covariance", "the estimate", fix=fix)
               or jacobian_failure(problem, z, jac, "parameter_covariance", "the estimate", fix=fix))
    if failure:
        raise ValueError(failure)
    _, s, vt = np.linalg.svd(jac, full_matrices=False)
    s = np.concatenate([s, np.zeros(d - s.size)])
    vt = np.concatenate([vt, np.zeros((d - vt.shape[0], d))]) if vt.shape[0] < d else vt
    if n_directions is None:
        p = int(np.sum(s > rcond * s[0])) if s[0] > 0 else 0
    else:
        p = int(n_directions)
    if p == 0:
        raise ValueError("parameter_covariance: the Jacobian is zero at the estimate; the data "
                         "do not depend on the free parameters")
    n_obs = int(r.size)
    if sigma is None:
        if n_obs <= p:
            raise ValueError(
                f"parameter_covariance: cannot estimate sigma from {n_obs} residuals and {p} "
                "parameter directions (needs n_observed > p); pass sigma"
            )
        sigma_value, source = math.sqrt(float(np.sum(r**2)) / (n_obs - p)), "estimated"
    else:
        sigma_value, source = float(sigma), "given"
    v = vt[:p].T
    cov_z = sigma_value**2 * (v / s[:p] ** 2) @ v.T
    theta = np.asarray(problem.to_physical(z))
    scale = np.asarray(problem.space.jacobian_diagonal(z))  # dθ/dz
    cov = cov_z * np.outer(scale, scale)
    sd_z = np.sqrt(np.clip(np.diag(cov_z), 0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = cov_z / np.outer(sd_z, sd_z)
    names = problem.free_names
    dropped = [{n: float(c) for n, c in zip(names, vt[k])} for k in range(p, d)]
    if p < d:
        note = (f"J is singular at the estimate (s_k < {rcond:g} s_1 for {d - p} direction(s)"
                if n_directions is None else f"{n_directions} of {d} directions kept (given")
        note += "): pseudo-inverse on the kept subspace; the variance along the dropped "
        note += "directions is not bounded by the data and is not included"
    else:
        note = "sigma^2 (J^T J)^-1 at the estimate (internal coordinates), delta method to physical"
    return ParameterCovariance(
        names=names, theta=theta, theta_internal=z, space=problem.space, covariance_internal=cov_z,
        covariance=cov, std_internal=sd_z, std=np.abs(scale) * sd_z, correlation=corr,
        sigma=sigma_value, sigma_source=source, n_observed=n_obs, n_directions=p,
        singular=p < d, singular_values=s, dropped_directions=dropped, note=note,
    )


class ProfileLikelihood(eqx.Module):
    """Profile of one parameter (module doc).

    Attributes:
        name: the profiled parameter.
        parameter: the profiled `Parameter` (its coordinate map).
        values: grid of its physical values, increasing, ``(n_points,)``.
        loss: re-optimised loss at each grid value.
        theta: the free parameters' physical values at each grid point, ``(n_points, n_free)``
            (ordered as ``names``; the profiled one is the grid value).
        names: the problem's free parameter names.
        estimate: the profiled parameter at the optimum.
        loss_min: the loss at the optimum.
        n_observed: number of residuals.
        sigma: residual noise level used for `delta_chi2` (given or from the covariance).
        std_internal: the covariance's standard error of the internal coordinate (for the
            quadratic approximation; NaN if unavailable).
        converged: per grid point, whether the re-optimisation converged. A grid point
            where the re-optimisation cannot start (the simulation fails, the loss overflows
            or the Jacobian is NaN there) has ``loss`` NaN and ``converged`` False.
        n_simulations, n_jacobians: totals over the profile.
        wall_time_s: seconds.
    """

    name: str
    parameter: Parameter = eqx.field(static=True)
    values: np.ndarray
    loss: np.ndarray
    theta: np.ndarray
    names: tuple[str, ...]
    estimate: float
    loss_min: float
    n_observed: int
    sigma: float
    std_internal: float
    converged: np.ndarray
    n_simulations: int
    n_jacobians: int
    wall_time_s: float

    @property
    def delta_chi2(self) -> np.ndarray:
        """-2 Δlog L = n_obs (loss - loss_min) / σ² at each grid point."""
        return self.n_observed * (np.asarray(self.loss) - self.loss_min) / self.sigma**2

    def quadratic(self) -> np.ndarray:
        """The covariance's approximation ((z - ẑ)/sd(z))² at the grid points."""
        z = self._internal(np.asarray(self.values))
        return ((z - self._internal(np.array(self.estimate))) / self.std_internal) ** 2

    @property
    def log_scale(self) -> bool:
        """Whether its internal coordinate is log."""
        return self.parameter.log_scale

    def _internal(self, x):
        return np.asarray(self.parameter.to_internal(x))

    def confidence_interval(self, level: float = 0.95) -> tuple[float, float]:
        """Where `delta_chi2` crosses the χ²₁ ``level`` quantile (linear interpolation in
        internal coordinates); NaN on a side where the grid does not reach the crossing."""
        if not 0 < level < 1:
            raise ValueError(f"confidence_interval: level must be in (0, 1); got {level}")
        threshold = float(stats.chi2.ppf(level, 1))
        x = self._internal(np.asarray(self.values))
        y = self.delta_chi2
        i0 = int(np.argmin(y))
        bounds = []
        for idx in (range(i0, -1, -1), range(i0, x.size)):
            idx = list(idx)
            value = math.nan
            for a, b in zip(idx[:-1], idx[1:]):
                if y[a] < threshold <= y[b]:
                    t = (threshold - y[a]) / (y[b] - y[a])
                    value = float(x[a] + t * (x[b] - x[a]))
                    break
            bounds.append(float(self.parameter.to_physical(value)) if math.isfinite(value) else value)
        return bounds[0], bounds[1]

    def to_dict(self) -> dict:
        return to_jsonable({
            "name": self.name, "values": self.values, "loss": self.loss,
            "delta_chi2": self.delta_chi2, "theta": self.theta, "names": list(self.names),
            "estimate": self.estimate, "loss_min": self.loss_min, "sigma": self.sigma,
            "n_observed": self.n_observed, "converged": self.converged,
            "confidence_interval_95": self.confidence_interval(0.95),
            "n_simulations": self.n_simulations, "n_jacobians": self.n_jacobians,
            "wall_time_s": self.wall_time_s,
        })


def profile_likelihood(
    problem: AbstractProblem,
    result: EstimationResult,
    name: str,
    n_points: int = 21,
    *,
    values: Sequence[float] | None = None,
    span: float = 3.0,
    sigma: float | None = None,
    progress: bool = False,
    **gauss_newton_options,
) -> ProfileLikelihood:
    """Profile likelihood of parameter ``name`` around the estimate in ``result``.

    Args:
        problem: the fitted problem.
        result: its estimate (e.g. from `gauss_newton`).
        name: a free parameter of ``problem``.
        n_points: grid size (>= 3) when ``values`` is not given; the grid is uniform in
            internal coordinates over ẑ ± ``span`` standard errors (from
            `parameter_covariance`), clipped to the bounds, and contains the estimate's
            neighbourhood on both sides.
        values: explicit physical grid values (within the bounds) instead.
        span: half-width of the default grid in standard errors.
        sigma: residual noise level for `ProfileLikelihood.delta_chi2` (None: estimated,
            as in `parameter_covariance`).
        progress: progress bar of each re-optimisation.
        **gauss_newton_options: passed to `gauss_newton` (e.g. ``max_steps``).

    Returns:
        A `ProfileLikelihood`.

    Raises:
        ValueError: unknown ``name``, a result of another problem, a bad grid.

    Long for its documented options; the body is 78 lines.
    """
    t_start = time.perf_counter()
    names = problem.free_names
    if name not in names:
        raise ValueError(f"profile_likelihood: {name!r} is not a free parameter; free: "
                         f"{', '.join(repr(n) for n in names)}")
    z_hat = _estimate_internal(problem, result, "physical", "profile_likelihood")
    i = names.index(name)
    space = problem.space
    parameter = space.parameters[i]
    cov = parameter_covariance(problem, z_hat, coordinates="internal", sigma=sigma)
    sd = float(cov.std_internal[i])
    lo, hi = float(space.lower_internal[i]), float(space.upper_internal[i])
    if values is None:
        if int(n_points) != n_points or n_points < 3:
            raise ValueError(f"profile_likelihood: n_points must be an integer >= 3; got "
                             f"{n_points!r}")
        if not (isinstance(span, (int, float)) and span > 0):
            raise ValueError(f"profile_likelihood: span must be positive; got {span!r}")
        half = span * sd if math.isfinite(sd) and sd > 0 else (hi - lo) / 2
        if not math.isfinite(half):
            raise ValueError(f"profile_likelihood: {name!r} has no finite standard error and no finite bounds to "
                             "span; pass the grid as values=[...]")
        grid_z = np.linspace(max(lo, z_hat[i] - half), min(hi, z_hat[i] + half), int(n_points))
        grid = np.asarray(parameter.to_physical(grid_z))
        grid = np.clip(grid, space.lower[i], space.upper[i])
    else:
        grid = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
        if grid.size < 2 or not np.all(np.isfinite(grid)):
            raise ValueError("profile_likelihood: values must hold at least 2 finite numbers")
        if np.any(grid < space.lower[i]) or np.any(grid > space.upper[i]):
            raise ValueError(
                f"profile_likelihood: values of {name!r} must lie within its bounds "
                f"[{space.lower[i]:g}, {space.upper[i]:g}]; got [{grid[0]:g}, {grid[-1]:g}]"
            )
    theta_hat = np.asarray(problem.to_physical(z_hat))
    loss_min = float(np.mean(np.asarray(problem.residuals(z_hat)) ** 2))
    n = grid.size
    losses, thetas = np.full(n, np.nan), np.full((n, len(names)), np.nan)
    converged = np.zeros(n, bool)
    n_sim, n_jac = 1, 1
    others = [k for k in range(len(names)) if k != i]
    centre = int(np.searchsorted(grid, theta_hat[i]))
    # walk outwards from the estimate, warm-starting each fit from its neighbour
    for order in (range(centre, n), range(centre - 1, -1, -1)):
        start = theta_hat[others]
        for k in order:
            if not others:
                z = np.asarray(problem.to_internal(np.array([grid[k]])))
                with np.errstate(over="ignore", invalid="ignore"):
                    loss_k = float(np.mean(np.asarray(problem.residuals(z)) ** 2))
                losses[k] = loss_k if math.isfinite(loss_k) else math.nan
                thetas[k] = grid[k]
                converged[k] = math.isfinite(loss_k)
                n_sim += 1
                continue
            sub = problem.fix({name: float(grid[k])})
            start = np.clip(start, sub.space.lower, sub.space.upper)
            try:
                fit = gauss_newton(sub, start, progress=progress, **gauss_newton_options)
            except FailedStartError:  # the model fails there: a gap in the profile, not an error
                thetas[k, i] = grid[k]
                n_sim += 1
                continue
            losses[k] = fit.loss
            full = np.empty(len(names))
            full[i] = grid[k]
            full[others] = fit.theta
            thetas[k] = full
            converged[k] = fit.converged
            n_sim += fit.n_simulations
            n_jac += fit.n_jacobians
            start = np.asarray(fit.theta)
    return ProfileLikelihood(
        name=name, parameter=parameter, values=grid, loss=losses, theta=thetas, names=names,
        estimate=float(theta_hat[i]), loss_min=loss_min, n_observed=problem.n_observed,
        sigma=float(cov.sigma), std_internal=sd, converged=converged, n_simulations=n_sim,
        n_jacobians=n_jac, wall_time_s=time.perf_counter() - t_start,
    )


def _estimate_internal(problem, estimate, coordinates, where) -> np.ndarray:
    if isinstance(estimate, EstimationResult):
        if tuple(estimate.names) != tuple(problem.free_names):
            raise ValueError(
                f"{where}: the result is for parameters {tuple(estimate.names)} but the problem's "
                f"free parameters are {problem.free_names}; pass the problem that was fitted"
            )
        return np.asarray(estimate.theta_internal, dtype=np.float64)
    return start_internal(problem, estimate, coordinates=coordinates, where=where, what="estimate")
