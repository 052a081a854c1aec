"""Parameter-recovery metrics of posterior estimates on a validation set (Zhang & Mikelsons 2023).

For simulations with known parameters ``θ_m`` (``m = 1..M``) and a posterior per simulation
(draws, or a mean and standard deviation), `recovery_metrics` reports per parameter:

- ``relative_error``: the relative error rate of Zhang & Mikelsons (2023, Fig. 6),
  ``ER = |estimate - truth| / |truth|``, averaged over the simulations (a fraction: multiply
  by 100 for the paper's percent; NaN where a truth is 0);
- ``sd_normalised``: the posterior standard deviation divided by the parameter's value range
  (the paper's ``σ̄``: the space's ``upper - lower`` when a space is given, else the range of
  the truths), averaged over the simulations;
- ``coverage``: the fraction of truths inside the central ``level`` interval (quantiles of
  the draws; ``mean ± z sd`` of a normal law when only means and sds are given);
- ``r2``, ``rmse``, ``nrmse`` of the estimates against the truths (Zhang & Mikelsons 2023,
  Fig. 14: ``R² = 1 - Σ(θ - θ̂)² / Σ(θ - θ̄)²``, ``NRMSE = RMSE / (θ_max - θ_min)`` with the
  same range as ``sd_normalised``);
- ``contraction``: posterior contraction ``1 - mean posterior variance / prior variance``
  (Schad, Betancourt & Vasishth 2021), in physical units. The prior variance is
  ``prior_variance`` if given, else that of the space's default prior (uniform in the
  internal coordinate: ``(upper - lower)² / 12``, or the log-uniform variance for log-scale
  parameters), else the variance of the truths (which are drawn from the prior).

The estimate is the posterior mean (eq. 7). Per-simulation z-scores ``(θ̂ - θ) / sd`` and
contractions are kept for `jcalib.plotting.plot_contraction`.

Example:
    >>> rng = np.random.default_rng(0)
    >>> truths = rng.uniform(1.0, 2.0, (200, 1))
    >>> result = recovery_metrics(truths, means=truths + 0.01, sds=np.full((200, 1), 0.05))
    >>> round(float(result.rmse[0]), 6), bool(result.coverage[0] == 1.0)
    (0.01, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import numpy as np
import scipy.stats
from jaxtyping import ArrayLike, Float

from jcalib.jsonable import to_jsonable
from jcalib.parameters import ParameterSpace

__all__ = ["RecoveryResult", "estimate_errors", "recovery_metrics", "relative_errors", "space_prior_variance"]

_PER_PARAMETER = ("relative_error", "sd_normalised", "coverage", "r2", "rmse", "nrmse", "contraction")


class RecoveryResult(eqx.Module):
    """Recovery metrics (per parameter, ``(n_params,)``) and the per-simulation values behind them.

    Attributes:
        names: parameter names.
        truths, estimates, sds: ``(n_sims, n_params)``: true values, posterior means,
            posterior standard deviations.
        lower, upper: ``(n_sims, n_params)`` the central ``level`` intervals.
        level: interval probability.
        relative_error, sd_normalised, coverage, r2, rmse, nrmse, contraction: see the
            module docstring.
        value_range: ``(n_params,)`` the ranges used by ``sd_normalised`` and ``nrmse``.
        prior_variance: ``(n_params,)`` used by ``contraction``.
    """

    names: tuple[str, ...]
    truths: np.ndarray
    estimates: np.ndarray
    sds: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    relative_error: np.ndarray
    sd_normalised: np.ndarray
    coverage: np.ndarray
    r2: np.ndarray
    rmse: np.ndarray
    nrmse: np.ndarray
    contraction: np.ndarray
    value_range: np.ndarray
    prior_variance: np.ndarray

    @property
    def n_sims(self) -> int:
        return int(self.truths.shape[0])

    @property
    def z_scores(self) -> np.ndarray:
        """``(n_sims, n_params)``: ``(estimate - truth) / sd``."""
        return (self.estimates - self.truths) / self.sds

    @property
    def contractions(self) -> np.ndarray:
        """``(n_sims, n_params)``: ``1 - sd² / prior variance`` per simulation."""
        return 1.0 - self.sds**2 / self.prior_variance

    @property
    def coverage_mcse(self) -> np.ndarray:
        """Monte Carlo standard error of ``coverage`` for a calibrated posterior:
        ``sqrt(level (1 - level) / n_sims)``."""
        return np.full(len(self.names), np.sqrt(self.level * (1.0 - self.level) / self.n_sims))

    def to_dict(self) -> dict:
        d = {"names": list(self.names), "n_sims": self.n_sims, "level": self.level}
        for key in _PER_PARAMETER + ("value_range", "prior_variance"):
            d[key] = dict(zip(self.names, np.asarray(getattr(self, key)).tolist()))
        d["mean_relative_error"] = float(np.nanmean(self.relative_error))
        d["mean_coverage"] = float(np.mean(self.coverage))
        return to_jsonable(d)


def space_prior_variance(space: ParameterSpace) -> np.ndarray:
    """Variance of each parameter (physical units) under the space's default prior: uniform in
    the internal coordinate, i.e. uniform on ``[lower, upper]`` or log-uniform for log-scale
    parameters (``E θ = (b - a) / ln(b/a)``, ``E θ² = (b² - a²) / (2 ln(b/a))``)."""
    a, b = space.lower, space.upper
    var = (b - a) ** 2 / 12.0
    log = space.log_scale
    if np.any(log):
        la = np.log(np.where(log, b / np.where(log, a, 1.0), 2.0))
        mean = (b - a) / la
        second = (b**2 - a**2) / (2.0 * la)
        var = np.where(log, second - mean**2, var)
    return var


def recovery_metrics(
    truths: ArrayLike,
    draws: ArrayLike | None = None,
    *,
    means: ArrayLike | None = None,
    sds: ArrayLike | None = None,
    space: ParameterSpace | None = None,
    names: Sequence[str] | None = None,
    level: float = 0.95,
    prior_variance: ArrayLike | None = None,
) -> RecoveryResult:
    """Recovery metrics of posterior estimates against known parameters.

    Args:
        truths: ``(n_sims, n_params)`` the parameters the validation data were simulated with
            (physical units).
        draws: ``(n_sims, n_draws, n_params)`` posterior draws (physical units); or None and
            ``means`` and ``sds``.
        means: ``(n_sims, n_params)`` posterior means (only without ``draws``).
        sds: ``(n_sims, n_params)`` posterior standard deviations (only without ``draws``).
        space: the parameter space: names, value ranges and the default prior variance.
        names: parameter names (default: the space's, else ``theta0, theta1, ...``).
        level: probability of the central intervals of ``coverage``.
        prior_variance: ``(n_params,)`` prior variances for ``contraction`` (see the module
            docstring for the default).

    Returns:
        `RecoveryResult`.

    Raises:
        ValueError: draws and means/sds both or neither given, shapes that do not match,
            non-finite values, non-positive sds, a level outside (0, 1).

    Long for its documented options; the body is 59 lines.
    """
    truths = np.asarray(truths, np.float64)
    if truths.ndim != 2 or truths.shape[0] < 2:
        raise ValueError(f"recovery_metrics: truths must have shape (n_sims >= 2, n_params); got {truths.shape}")
    n_sims, n_params = truths.shape
    if not 0 < level < 1:
        raise ValueError(f"recovery_metrics: level must lie in (0, 1); got {level!r}")
    alpha = 0.5 * (1.0 - level)
    if draws is not None:
        if means is not None or sds is not None:
            raise ValueError("recovery_metrics: pass either draws or means and sds, not both")
        draws = np.asarray(draws, np.float64)
        if draws.ndim != 3 or draws.shape[0] != n_sims or draws.shape[2] != n_params or draws.shape[1] < 2:
            raise ValueError(f"recovery_metrics: draws must have shape (n_sims={n_sims}, n_draws >= 2, "
                             f"n_params={n_params}); got {draws.shape}")
        _finite(draws, "draws")
        means, sds = draws.mean(axis=1), draws.std(axis=1, ddof=1)
        lower, upper = np.quantile(draws, [alpha, 1.0 - alpha], axis=1)
    else:
        if means is None or sds is None:
            raise ValueError("recovery_metrics: pass draws, or both means and sds")
        means, sds = np.asarray(means, np.float64), np.asarray(sds, np.float64)
        for name, value in (("means", means), ("sds", sds)):
            if value.shape != truths.shape:
                raise ValueError(f"recovery_metrics: {name} must have the shape of truths {truths.shape}; got "
                                 f"{value.shape}")
            _finite(value, name)
        half = scipy.stats.norm.ppf(1.0 - alpha) * sds
        lower, upper = means - half, means + half
    _finite(truths, "truths")
    if np.any(sds <= 0):
        raise ValueError("recovery_metrics: posterior standard deviations must be positive (a collapsed "
                         "posterior has no interval)")
    if names is None:
        names = space.names if space is not None else tuple(f"theta{j}" for j in range(n_params))
    names = tuple(names)
    if len(names) != n_params or (space is not None and space.n_params != n_params):
        raise ValueError(f"recovery_metrics: {len(names)} names / a space of "
                         f"{None if space is None else space.n_params} parameters for {n_params} columns")

    if space is not None:
        value_range = space.upper - space.lower
    else:
        value_range = truths.max(axis=0) - truths.min(axis=0)
    if prior_variance is not None:
        prior_var = np.broadcast_to(np.asarray(prior_variance, np.float64), (n_params,)).copy()
    elif space is not None:
        prior_var = space_prior_variance(space)
    else:
        prior_var = truths.var(axis=0, ddof=1)
    if np.any(~np.isfinite(prior_var) | (prior_var <= 0)):
        raise ValueError(f"recovery_metrics: prior variances must be positive; got {prior_var}")

    relative = np.abs(relative_errors(truths, means))
    rmse, r2, nrmse = estimate_errors(truths, means, value_range)
    return RecoveryResult(
        names=names, truths=truths, estimates=means, sds=sds, lower=lower, upper=upper, level=float(level),
        relative_error=np.mean(relative, axis=0), sd_normalised=np.mean(sds, axis=0) / value_range,
        coverage=np.mean((truths >= lower) & (truths <= upper), axis=0), r2=r2, rmse=rmse, nrmse=nrmse,
        contraction=1.0 - np.mean(sds**2, axis=0) / prior_var, value_range=value_range, prior_variance=prior_var)


def relative_errors(truths: Float[ArrayLike, "..."], estimates: Float[ArrayLike, "..."]) -> np.ndarray:
    """Signed relative errors ``ε = (estimate − truth) / truth``, elementwise (broadcast), NaN where
    a truth is 0: the IMPU paper's eq. 18 (`jcalib.nn.NetworkMetrics`, the digital
    twin's parameter errors) and, as ``|ε|``, Zhang & Mikelsons' error rate ER (`recovery_metrics`).

    Example:
        >>> relative_errors([2.0, 0.0, -4.0], [2.5, 1.0, -3.0]).tolist()
        [0.25, nan, -0.25]
    """
    truths, estimates = np.asarray(truths, np.float64), np.asarray(estimates, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(truths != 0, (estimates - truths) / truths, np.nan)


def estimate_errors(
    truths: Float[ArrayLike, "n_sims n_params"],
    estimates: Float[ArrayLike, "n_sims n_params"],
    value_range: Float[ArrayLike, " n_params"] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RMSE, R² = 1 − SS_res/SS_tot and NRMSE = RMSE / ``value_range`` (default: the range of
    the truths) per column (Zhang & Mikelsons 2023, Fig. 14); R² is NaN for a constant column."""
    truths, estimates = np.asarray(truths, np.float64), np.asarray(estimates, np.float64)
    if value_range is None:
        value_range = truths.max(axis=0) - truths.min(axis=0)
    err = estimates - truths
    rmse = np.sqrt(np.mean(err**2, axis=0))
    ss_tot = np.sum((truths - truths.mean(axis=0)) ** 2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(ss_tot > 0, 1.0 - np.sum(err**2, axis=0) / ss_tot, np.nan)
        nrmse = rmse / np.asarray(value_range, np.float64)
    return rmse, r2, nrmse


def _finite(x: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"recovery_metrics: {name} contains NaN or inf")
