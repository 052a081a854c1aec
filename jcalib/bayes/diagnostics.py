"""MCMC diagnostics through ArviZ: acceptance, effective sample size, R-hat, Monte Carlo
standard errors, autocorrelation.

Samples are arrays by chain, ``(n_chains, n_draws, n_params)`` (as in
`jcalib.bayes.result.PosteriorResult`); every function turns them into an
``arviz.InferenceData`` (one variable per parameter) and calls ArviZ, so the numbers are
ArviZ's: rank-normalised split R-hat and bulk/tail ESS (Vehtari et al. 2021), MCSE of the
mean and sd. An R-hat above 1.01 or a bulk ESS below ~100 per chain signal that the chains
have not mixed (Vehtari et al. 2021, §4).

`sampling_warnings` turns the numbers into one-line warnings (acceptance below 5 %, R-hat
above 1.05, bulk ESS below 100); every `jcalib.bayes.result.PosteriorResult` built from
chains records them (``result.warnings``) and emits them as `SamplingWarning`.

Example:
    >>> import numpy as np
    >>> draws = np.random.default_rng(0).normal(size=(4, 500, 2))
    >>> d = chain_diagnostics(draws)
    >>> bool(np.all(d.rhat < 1.01)), d.ess_bulk.shape
    (True, (2,))
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from jaxtyping import ArrayLike, Bool, Float

if TYPE_CHECKING:
    import arviz as az

__all__ = [
    "MAX_RHAT",
    "MIN_ACCEPTANCE",
    "MIN_ESS_BULK",
    "ChainDiagnostics",
    "SamplingWarning",
    "acceptance_rate",
    "autocorrelation",
    "chain_diagnostics",
    "ess",
    "mcse",
    "rhat",
    "sampling_advice",
    "sampling_warnings",
    "summary",
    "to_inference_data",
]


MIN_ACCEPTANCE = 0.05
"""Acceptance below this (per chain) means the chain barely moves: its draws are a handful of
points (the issue's stalled run accepted 0 of 2000 proposals per chain)."""
MAX_RHAT = 1.05
"""R-hat above this means the chains disagree (not mixed). Vehtari et al. 2021, §4 recommend
1.01 for final results; 1.05 flags only clear failures, so short exploratory runs stay quiet."""
MIN_ESS_BULK = 100
"""Bulk ESS below this makes means, sds and intervals unreliable (Vehtari et al. 2021, §4)."""
WARMUP_ADVICE = 500
"""The warm-up the advice of `sampling_advice` suggests when a run had less."""


def sampling_advice(warmup: int | None = None, metric: str | None = None) -> tuple[str, ...]:
    """What to try after an unhealthy run, as options of the samplers (``sample``), given the
    run's ``warmup`` and preconditioner class name ``metric``: only what the run did not do.

    Example:
        >>> sampling_advice(warmup=500, metric="Laplace")
        ('a warmup longer than 500', 'more draws (n_steps)')
    """
    warm = (f"warmup={WARMUP_ADVICE} (adapts the step sizes)" if not warmup or warmup < WARMUP_ADVICE
            else f"a warmup longer than {warmup}")
    whiten = () if metric in ("Laplace", "DenseMetric") else ("preconditioner=Laplace() (whitens a correlated "
                                                              "posterior)",)
    return (warm, *whiten, "more draws (n_steps)")


def _hint(advice: Sequence[str]) -> str:
    return "use " + (f"{', '.join(advice[:-1])} or {advice[-1]}" if len(advice) > 1 else advice[0])


class SamplingWarning(UserWarning):
    """A sampler's diagnostics say its draws are not a reliable picture of the posterior
    (stalled chains, chains that disagree, too few effective draws); see `sampling_warnings`."""


def _listing(labels: Sequence[str], values: np.ndarray, fmt: str) -> str:
    return ", ".join(f"{label} ({format(float(v), fmt)})" for label, v in zip(labels, values))


def sampling_warnings(
    names: Sequence[str],
    acceptance_rate: Float[ArrayLike, " n_chains"],
    rhat: Float[ArrayLike, " n_params"],
    ess_bulk: Float[ArrayLike, " n_params"],
    advice: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """One-line warnings about a sampling run; empty when it looks healthy.

    A run is healthy when every chain accepts at least `MIN_ACCEPTANCE` of its proposals
    and every parameter has R-hat <= `MAX_RHAT` and bulk ESS >= `MIN_ESS_BULK`. R-hat is
    only checked with two or more chains (a single chain's split R-hat compares its halves,
    which says little); NaN R-hat or ESS (chains stuck at one value, fewer than 4 draws)
    count as failures. Each message names the chains or parameters, their values, the
    threshold and what to try.

    Args:
        names: parameter names, ``(n_params,)``.
        acceptance_rate: accepted fraction per chain, ``(n_chains,)``.
        rhat: R-hat per parameter.
        ess_bulk: bulk ESS per parameter.
        advice: what each message suggests (default `sampling_advice()`); the command line
            passes its own options.

    Returns:
        A tuple of strings (at most three: acceptance, R-hat, ESS).

    Example:
        >>> sampling_warnings(["k"], np.zeros(2), np.array([2.0]), np.array([400.0]))[0][:48]
        'sampling: acceptance below 5 % in chain 0 (0.0 %'
    """
    acc = np.asarray(acceptance_rate, dtype=np.float64).reshape(-1)
    r = np.asarray(rhat, dtype=np.float64).reshape(-1)
    e = np.asarray(ess_bulk, dtype=np.float64).reshape(-1)
    names = [str(n) for n in names]
    hint = _hint(sampling_advice() if advice is None else tuple(advice))
    out = []
    low = ~(acc >= MIN_ACCEPTANCE)
    if np.any(low):
        chains = [f"chain {i}" for i in np.flatnonzero(low)]
        listing = ", ".join(f"{c} ({100 * a:.1f} %)" for c, a in zip(chains, acc[low]))
        out.append(f"sampling: acceptance below {100 * MIN_ACCEPTANCE:.0f} % in {listing}; the chains barely "
                   f"move (step sizes too large for the posterior): {hint}")
    bad = ~(r <= MAX_RHAT)
    if acc.size > 1 and np.any(bad):
        out.append(f"sampling: R-hat above {MAX_RHAT} (or undefined) for "
                   f"{_listing([names[i] for i in np.flatnonzero(bad)], r[bad], '.4g')}; the chains disagree "
                   f"(not mixed): {hint}, or start the chains near an estimate")
    bad = ~(e >= MIN_ESS_BULK)
    if np.any(bad):
        out.append(f"sampling: bulk ESS below {MIN_ESS_BULK} for "
                   f"{_listing([names[i] for i in np.flatnonzero(bad)], e[bad], '.1f')}; too few independent "
                   f"draws for reliable means and intervals: {hint}")
    return tuple(out)


class ChainDiagnostics(NamedTuple):
    """Per-parameter convergence numbers, each ``(n_params,)``.

    Attributes:
        ess_bulk: bulk effective sample size (rank-normalised).
        ess_tail: tail ESS (of the 5 % and 95 % quantiles, the smaller).
        rhat: rank-normalised split R-hat.
        mcse_mean: Monte Carlo standard error of the posterior mean.
        mcse_sd: Monte Carlo standard error of the posterior sd.
    """

    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    rhat: np.ndarray
    mcse_mean: np.ndarray
    mcse_sd: np.ndarray


def _check(samples, where: str) -> np.ndarray:
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[1] < 1 or arr.shape[2] < 1:
        raise ValueError(
            f"{where}: samples must have shape (n_chains, n_draws, n_params) (or (n_chains, n_draws)); "
            f"got shape {np.shape(samples)}"
        )
    return arr


def _names(names, n: int, where: str) -> list[str]:
    if names is None:
        return [f"x{i}" for i in range(n)]
    names = [names] if isinstance(names, str) else [str(x) for x in names]
    if len(names) != n or len(set(names)) != n:
        raise ValueError(f"{where}: names must be {n} distinct strings, one per parameter; got {names!r}")
    return names


def to_inference_data(
    samples: Float[ArrayLike, "n_chains n_draws n_params"],
    names: Sequence[str] | None = None,
    *,
    logdensity: Float[ArrayLike, "n_chains n_draws"] | None = None,
    sample_stats: dict | None = None,
    attrs: dict | None = None,
) -> "az.InferenceData":
    """Samples by chain as an ``arviz.InferenceData`` (``az.from_dict``).

    Args:
        samples: ``(n_chains, n_draws, n_params)``.
        names: one variable name per parameter (default ``x0, x1, ...``).
        logdensity: log density of each draw, stored as ``sample_stats.lp``.
        sample_stats: further ``{name: (n_chains, n_draws) array}`` statistics.
        attrs: attributes of the groups (JSON-able scalars and strings).

    Raises:
        ValueError: bad shapes or names.
    """
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "to_inference_data")
    names = _names(names, arr.shape[2], "to_inference_data")
    stats = dict(sample_stats or {})
    if logdensity is not None:
        lp = np.asarray(logdensity, dtype=np.float64)
        if lp.shape != arr.shape[:2]:
            raise ValueError(
                f"to_inference_data: logdensity must have shape (n_chains, n_draws) = {arr.shape[:2]}; got "
                f"shape {lp.shape}"
            )
        stats["lp"] = lp
    return az.from_dict(posterior={n: arr[:, :, i] for i, n in enumerate(names)},
                        sample_stats=stats or None, attrs=attrs)


class _DropShapeValidation(logging.Filter):
    """Drops ArviZ's "Shape validation failed ..." log line (R-hat of one chain, fewer than 4
    draws): ArviZ returns NaN there, and `sampling_warnings` and the CLI say why."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Shape validation failed")


@contextlib.contextmanager
def _quiet_shape_validation():
    import arviz as az  # imported on use: arviz takes ~1 s to import

    logger = getattr(az, "_log", None) or logging.getLogger("arviz")  # ArviZ's own Logger("arviz")
    drop = _DropShapeValidation()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _per_parameter(dataset, names: list[str]) -> np.ndarray:
    return np.array([float(dataset[n].values) for n in names], dtype=np.float64)


def ess(samples: Float[ArrayLike, "n_chains n_draws n_params"], method: str = "bulk") -> np.ndarray:
    """Effective sample size per parameter (``az.ess``; ``method`` "bulk", "tail", "mean",
    ...), ``(n_params,)``."""
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "ess")
    names = _names(None, arr.shape[2], "ess")
    return _per_parameter(az.ess(to_inference_data(arr), method=method), names)


def rhat(samples: Float[ArrayLike, "n_chains n_draws n_params"]) -> np.ndarray:
    """Rank-normalised split R-hat per parameter (``az.rhat``), ``(n_params,)``."""
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "rhat")
    with _quiet_shape_validation():  # one chain: NaN, without ArviZ's log line
        return _per_parameter(az.rhat(to_inference_data(arr)), _names(None, arr.shape[2], "rhat"))


def mcse(samples: Float[ArrayLike, "n_chains n_draws n_params"], method: str = "mean") -> np.ndarray:
    """Monte Carlo standard error per parameter (``az.mcse``; ``method`` "mean", "sd",
    "median"), ``(n_params,)``."""
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "mcse")
    return _per_parameter(az.mcse(to_inference_data(arr), method=method), _names(None, arr.shape[2], "mcse"))


def chain_diagnostics(samples: Float[ArrayLike, "n_chains n_draws n_params"]) -> ChainDiagnostics:
    """Bulk and tail ESS, R-hat and MCSE of mean and sd in one pass over one
    ``InferenceData``; NaN where ArviZ cannot compute them (e.g. fewer than 4 draws) and for
    every parameter in which some chain never moved (ArviZ reports a constant chain's ESS as
    its full length, which would pass a stalled sampler as perfectly mixed)."""
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "chain_diagnostics")
    names = _names(None, arr.shape[2], "chain_diagnostics")
    idata = to_inference_data(arr)
    # constant chains: NaN by design, no RuntimeWarning; one chain: R-hat NaN without ArviZ's log line
    with np.errstate(divide="ignore", invalid="ignore"), _quiet_shape_validation():
        values = {
            "ess_bulk": _per_parameter(az.ess(idata, method="bulk"), names),
            "ess_tail": _per_parameter(az.ess(idata, method="tail"), names),
            "rhat": _per_parameter(az.rhat(idata), names),
            "mcse_mean": _per_parameter(az.mcse(idata, method="mean"), names),
            "mcse_sd": _per_parameter(az.mcse(idata, method="sd"), names),
        }
    stuck = np.any(np.ptp(arr, axis=1) == 0, axis=0)  # (n_params,): a chain with one value throughout
    return ChainDiagnostics(**{k: np.where(stuck, np.nan, v) for k, v in values.items()})


def summary(samples: Float[ArrayLike, "n_chains n_draws n_params"], names: Sequence[str] | None = None,
            *, hdi_prob: float = 0.9):
    """``az.summary`` table (a pandas DataFrame: mean, sd, HDI, MCSE, ESS, R-hat) by name."""
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "summary")
    names = _names(names, arr.shape[2], "summary")
    return az.summary(to_inference_data(arr, names), hdi_prob=hdi_prob).loc[names]  # ArviZ sorts by name


def acceptance_rate(is_accepted: Bool[ArrayLike, "n_chains n_steps"]) -> np.ndarray:
    """Fraction of accepted proposals per chain, ``(n_chains,)``.

    Raises:
        ValueError: not a ``(n_chains, n_steps)`` array with at least one step.
    """
    arr = np.asarray(is_accepted)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"acceptance_rate: is_accepted must have shape (n_chains, n_steps); got shape {arr.shape}")
    return arr.astype(np.float64).mean(axis=1)


def autocorrelation(samples: Float[ArrayLike, "n_chains n_draws n_params"], max_lag: int | None = None) -> np.ndarray:
    """Autocorrelation of each chain and parameter (``az.autocorr`` along the draws),
    ``(n_chains, max_lag + 1, n_params)``; lag 0 is 1 (``max_lag`` default: n_draws - 1).

    Raises:
        ValueError: bad shape or ``max_lag``.
    """
    import arviz as az  # imported on use: arviz takes ~1 s to import

    arr = _check(samples, "autocorrelation")
    n_draws = arr.shape[1]
    max_lag = n_draws - 1 if max_lag is None else max_lag
    if not isinstance(max_lag, (int, np.integer)) or not 0 <= max_lag < n_draws:
        raise ValueError(f"autocorrelation: max_lag must be an integer in [0, n_draws={n_draws}); got {max_lag!r}")
    rho = az.autocorr(np.swapaxes(arr, 1, 2), axis=-1)  # (n_chains, n_params, n_draws)
    return np.swapaxes(rho, 1, 2)[:, : max_lag + 1, :]
