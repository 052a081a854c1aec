"""Simulation-based calibration (SBC) of posterior approximations.

For parameters drawn from the prior, ``θ_i ~ p(θ)``, data ``x_i ~ p(x | θ_i)`` and ``L``
draws from the approximate posterior ``q(θ | x_i)``, the rank of ``θ_i`` among the draws,
``r_i = #{l : θ_il < θ_i}`` (per parameter), is uniform on ``{0, ..., L}`` when ``q`` is the
true posterior (Talts et al. 2018, "Validating Bayesian inference algorithms with
simulation-based calibration"). Deviations have shapes: a U-shaped histogram means an
overconfident posterior, a hump an underconfident one, a slope a biased one.

Two checks of uniformity are provided:

- `sbc_uniformity`: a p-value per parameter, by default Pearson's chi-square test on the
  rank histogram (``n_bins`` contiguous groups of rank values, expected counts from the
  discrete uniform law, ``n_bins - 1`` degrees of freedom); or ``method="ks"``: the
  Kolmogorov-Smirnov test of the randomised fractional ranks ``(r + U) / (L + 1)``,
  ``U ~ Uniform(0, 1)``, which are exactly Uniform(0, 1) under the null hypothesis.
- `ecdf_band`: a simultaneous band for the empirical CDF of the fractional ranks (Säilynoja,
  Bürkner & Vehtari 2022, "Graphical test for discrete uniformity and its applications in
  goodness-of-fit evaluation and multiple sample comparison", the simulation method): the
  pointwise binomial level ``γ`` is adjusted by simulating uniform samples so that the whole
  ECDF stays inside the band with probability ``confidence``. Plotting ECDF − z with the
  band gives the ECDF-difference plot (`jcalib.plotting.plot_sbc`).

Example:
    >>> rng = np.random.default_rng(0)
    >>> truths = rng.standard_normal((500, 1))
    >>> draws = rng.standard_normal((500, 99, 1))  # draws of the prior = the exact posterior without data
    >>> ranks = sbc_ranks(draws, truths)
    >>> bool(sbc_uniformity(None, ranks, 99)[0] > 0.01)
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import numpy as np
import scipy.stats
from jaxtyping import ArrayLike, PRNGKeyArray

from jcalib.jsonable import to_jsonable

__all__ = ["ECDFBand", "SBCResult", "ecdf_band", "rank_ecdf", "run_sbc", "sbc_ranks", "sbc_result", "sbc_uniformity"]

METHODS = ("chi2", "ks")
_MAX_BINS = 20  # default histogram: at most 20 bins ...
_MIN_EXPECTED = 5  # ... with an expected count of at least 5 each (the chi-square rule of thumb)
_MAX_EVAL = 100  # default evaluation points of the continuous ECDF band


def sbc_ranks(draws: ArrayLike, truths: ArrayLike) -> np.ndarray:
    """Ranks of the true values among the posterior draws.

    Args:
        draws: ``(n_sims, n_draws, n_params)`` posterior draws, one set per simulation.
        truths: ``(n_sims, n_params)`` the parameters the data were simulated with.

    Returns:
        ``(n_sims, n_params)`` integers in ``0 .. n_draws``: the number of draws below the truth
        (ranks are invariant under monotone maps, so physical or log coordinates give the same).

    Raises:
        ValueError: shapes that do not match, NaN.
    """
    draws, truths = np.asarray(draws, np.float64), np.asarray(truths, np.float64)
    if draws.ndim != 3 or truths.ndim != 2 or draws.shape[0] != truths.shape[0] or draws.shape[2] != truths.shape[1]:
        raise ValueError(f"sbc_ranks: draws must be (n_sims, n_draws, n_params) and truths (n_sims, n_params); got "
                         f"{draws.shape} and {truths.shape}")
    if not (np.all(np.isfinite(draws)) and np.all(np.isfinite(truths))):
        raise ValueError("sbc_ranks: draws and truths must be finite")
    return np.sum(draws < truths[:, None, :], axis=1).astype(np.int64)


def _check_ranks(ranks, n_draws, where: str) -> np.ndarray:
    ranks = np.asarray(ranks)
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ValueError(f"{where}: n_draws must be a positive integer; got {n_draws!r}")
    if ranks.ndim == 1:
        ranks = ranks[:, None]
    if ranks.ndim != 2 or ranks.shape[0] < 1:
        raise ValueError(f"{where}: ranks must have shape (n_sims, n_params); got {ranks.shape}")
    if not np.issubdtype(ranks.dtype, np.integer) or ranks.min() < 0 or ranks.max() > n_draws:
        raise ValueError(f"{where}: ranks must be integers in 0..n_draws={n_draws}; got values in "
                         f"[{ranks.min()}, {ranks.max()}] of dtype {ranks.dtype}")
    return ranks


def default_bins(n_sims: int, n_draws: int) -> int:
    """Histogram bins: at most 20, at most ``n_draws + 1``, expected count >= 5 (at least 2)."""
    return int(max(2, min(_MAX_BINS, n_draws + 1, n_sims // _MIN_EXPECTED)))


def _bin_edges(n_draws: int, n_bins: int) -> np.ndarray:
    """Edges (in rank values) of ``n_bins`` contiguous groups of ``0 .. n_draws``."""
    return np.floor(np.linspace(0, n_draws + 1, n_bins + 1) + 1e-9).astype(np.int64)


def rank_histogram(ranks: ArrayLike, n_draws: int, n_bins: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Counts ``(n_bins, n_params)`` of the ranks and the expected count of every bin ``(n_bins,)``."""
    ranks = _check_ranks(ranks, n_draws, "rank_histogram")
    n_bins = default_bins(ranks.shape[0], n_draws) if n_bins is None else int(n_bins)
    if not 2 <= n_bins <= n_draws + 1:
        raise ValueError(f"rank_histogram: n_bins must lie in 2..n_draws+1={n_draws + 1}; got {n_bins}")
    edges = _bin_edges(n_draws, n_bins)
    which = np.searchsorted(edges, ranks, side="right") - 1  # bin of every rank
    counts = np.stack([np.bincount(which[:, j], minlength=n_bins) for j in range(ranks.shape[1])], axis=1)
    expected = ranks.shape[0] * np.diff(edges) / (n_draws + 1)
    return counts, expected


def sbc_uniformity(key: PRNGKeyArray | None, ranks: ArrayLike, n_draws: int, *, n_bins: int | None = None,
                   method: str = "chi2") -> np.ndarray:
    """p-values of the hypothesis "the ranks are uniform on 0..n_draws", per parameter.

    Args:
        key: randomises the fractional ranks of ``method="ks"`` (needed there; None for
            ``"chi2"``, which draws nothing).
        ranks: ``(n_sims, n_params)`` from `sbc_ranks` (or ``(n_sims,)``).
        n_draws: posterior draws per simulation (``L``).
        n_bins: histogram bins of the chi-square test (default `default_bins`).
        method: ``"chi2"`` (Pearson's chi-square on the histogram) or ``"ks"``
            (Kolmogorov-Smirnov on the randomised fractional ranks; uses ``key``).

    Returns:
        ``(n_params,)`` p-values.

    Raises:
        ValueError: bad ranks; an unknown ``method``; ``method="ks"`` without a key.
    """
    ranks = _check_ranks(ranks, n_draws, "sbc_uniformity")
    if method == "chi2":
        counts, expected = rank_histogram(ranks, n_draws, n_bins)
        stat = np.sum((counts - expected[:, None]) ** 2 / expected[:, None], axis=0)
        return scipy.stats.chi2.sf(stat, df=counts.shape[0] - 1)
    if method == "ks":
        if key is None:
            raise ValueError("sbc_uniformity: method='ks' randomises the ranks; pass a jax.random key as the first "
                             "argument")
        u = (ranks + np.asarray(jax.random.uniform(key, ranks.shape), np.float64)) / (n_draws + 1)
        return np.array([scipy.stats.kstest(u[:, j], "uniform").pvalue for j in range(ranks.shape[1])])
    raise ValueError(f"sbc_uniformity: method must be one of {METHODS}; got {method!r}")


class ECDFBand(eqx.Module):
    """A simultaneous band for the ECDF of ``n_sims`` uniform (fractional) ranks.

    Attributes:
        z: evaluation points in (0, 1).
        lower, upper: the band of the ECDF at ``z`` (subtract ``z`` for the difference plot).
        gamma: the adjusted pointwise level of the binomial intervals.
        confidence: the simultaneous coverage.
        n_sims: the sample size the band is for.
    """

    z: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    gamma: float
    confidence: float
    n_sims: int

    def contains(self, ecdf: ArrayLike) -> np.ndarray:
        """Whether ECDF values at ``z`` (``(..., len(z))``) lie inside the band everywhere."""
        ecdf = np.asarray(ecdf)
        return np.all((ecdf >= self.lower - 1e-12) & (ecdf <= self.upper + 1e-12), axis=-1)

    def to_dict(self) -> dict:
        return to_jsonable({k: getattr(self, k) for k in ("z", "lower", "upper", "gamma", "confidence", "n_sims")})


def _grid(n_sims: int, n_draws: int | None, n_eval: int | None) -> np.ndarray:
    if n_draws is not None:  # discrete ranks: P(r < k) = k / (L + 1) exactly on this grid
        return np.arange(1, n_draws + 1) / (n_draws + 1)
    k = int(min(n_sims, _MAX_EVAL) if n_eval is None else n_eval)
    if k < 2:
        raise ValueError(f"ecdf_band: n_eval must be at least 2; got {n_eval}")
    return np.arange(1, k) / k


def ecdf_band(key: PRNGKeyArray, n_sims: int, n_draws: int | None = None, confidence: float = 0.95, *,
              n_eval: int | None = None, n_simulations: int = 2000) -> ECDFBand:
    """Simultaneous ``confidence`` band of the ECDF of ``n_sims`` uniform ranks (Säilynoja
    et al. 2022, simulation method).

    Under uniformity the ECDF count at ``z_k`` is Binomial(``n_sims``, ``z_k``). Each of
    ``n_simulations`` uniform samples gets the smallest two-sided binomial tail probability
    over the grid, ``min_k 2 min(P(X <= c_k), P(X >= c_k))``; their ``1 - confidence``
    quantile is the pointwise level ``γ``, and the band is the binomial ``γ/2`` and
    ``1 - γ/2`` quantiles divided by ``n_sims``.

    Args:
        key: a ``jax.random`` key for the simulations (the same key, the same band).
        n_sims: number of ranks (simulations).
        n_draws: posterior draws per simulation (``L``): the grid is ``k / (L + 1)``,
            ``k = 1..L``, where the discrete ranks' ECDF is exact. None: continuous fractional
            ranks on ``n_eval`` equal cells.
        confidence: simultaneous coverage in (0, 1).
        n_eval: cells of the continuous grid (default ``min(n_sims, 100)``).
        n_simulations: uniform samples simulated to adjust ``γ``.

    Returns:
        `ECDFBand`.
    """
    if isinstance(n_sims, bool) or not isinstance(n_sims, (int, np.integer)) or n_sims < 1:
        raise ValueError(f"ecdf_band: n_sims must be a positive integer; got {n_sims!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"ecdf_band: confidence must lie in (0, 1); got {confidence!r}")
    if n_draws is not None and (isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer))
                                or n_draws < 1):
        raise ValueError(f"ecdf_band: n_draws must be None or a positive integer; got {n_draws!r}")
    z = _grid(n_sims, n_draws, n_eval)
    rng = np.random.default_rng([int(x) for x in np.asarray(jax.random.key_data(key)).ravel()])
    cells = np.diff(np.concatenate([[0.0], z, [1.0]]))
    counts = np.cumsum(rng.multinomial(n_sims, cells, size=n_simulations), axis=1)[:, :-1]  # (n_sim, len(z))
    tails = np.minimum(scipy.stats.binom.cdf(counts, n_sims, z), scipy.stats.binom.sf(counts - 1, n_sims, z))
    gamma = float(np.quantile(np.min(2.0 * tails, axis=1), 1.0 - confidence))
    lower = scipy.stats.binom.ppf(gamma / 2, n_sims, z) / n_sims
    upper = scipy.stats.binom.ppf(1.0 - gamma / 2, n_sims, z) / n_sims
    return ECDFBand(z=z, lower=lower, upper=upper, gamma=gamma, confidence=float(confidence), n_sims=int(n_sims))


def rank_ecdf(ranks: ArrayLike, n_draws: int) -> tuple[np.ndarray, np.ndarray]:
    """ECDF of the fractional ranks ``r / (L + 1)`` on the grid ``z_k = k / (L + 1)``:
    ``(z (L,), ecdf (n_params, L))`` with ``ecdf[j, k-1] = mean(r_j < k)``."""
    ranks = _check_ranks(ranks, n_draws, "rank_ecdf")
    k = np.arange(1, n_draws + 1)
    return k / (n_draws + 1), np.mean(ranks.T[:, :, None] < k, axis=1)


class SBCResult(eqx.Module):
    """Ranks, uniformity tests and the ECDF band of a simulation-based calibration.

    Attributes:
        names: parameter names.
        ranks: ``(n_sims, n_params)`` ranks in ``0..n_draws``.
        n_draws: posterior draws per simulation.
        p_values: ``(n_params,)`` of `sbc_uniformity` (``method``).
        method: the test (``"chi2"`` or ``"ks"``).
        n_bins: histogram bins (of the chi-square test and the plot).
        band: `ECDFBand` on the grid ``k / (n_draws + 1)``.
        ecdf: ``(n_params, n_draws)`` ECDF of the fractional ranks on that grid.
        in_band: ``(n_params,)`` whether each ECDF stays inside the band.
    """

    names: tuple[str, ...]
    ranks: np.ndarray
    n_draws: int
    p_values: np.ndarray
    method: str
    n_bins: int
    band: ECDFBand
    ecdf: np.ndarray
    in_band: np.ndarray

    @property
    def n_sims(self) -> int:
        return int(self.ranks.shape[0])

    def passed(self, alpha: float = 0.01) -> np.ndarray:
        """``(n_params,)``: p-value above ``alpha`` and the ECDF inside the band."""
        return (self.p_values > alpha) & self.in_band

    def to_dict(self) -> dict:
        return to_jsonable({"names": list(self.names), "n_sims": self.n_sims, "n_draws": self.n_draws,
                            "method": self.method, "n_bins": self.n_bins,
                            "p_values": dict(zip(self.names, self.p_values.tolist())),
                            "in_band": dict(zip(self.names, self.in_band.tolist())),
                            "band_confidence": self.band.confidence, "ranks": self.ranks})


def sbc_result(key: PRNGKeyArray, ranks: ArrayLike, n_draws: int, names: Sequence[str] | None = None, *,
               method: str = "chi2", n_bins: int | None = None, confidence: float = 0.95) -> SBCResult:
    """`SBCResult` of ranks from `sbc_ranks` (tests, ECDF and band); ``key`` draws the
    band's simulations and the randomised ranks of ``method="ks"``."""
    ranks = _check_ranks(ranks, n_draws, "sbc_result")
    names = tuple(f"theta{j}" for j in range(ranks.shape[1])) if names is None else tuple(names)
    if len(names) != ranks.shape[1]:
        raise ValueError(f"sbc_result: {len(names)} names for {ranks.shape[1]} parameters")
    n_bins = default_bins(ranks.shape[0], n_draws) if n_bins is None else int(n_bins)
    key_test, key_band = jax.random.split(key)
    p_values = sbc_uniformity(key_test, ranks, n_draws, n_bins=n_bins, method=method)
    band = ecdf_band(key_band, ranks.shape[0], n_draws, confidence)
    _, ecdf = rank_ecdf(ranks, n_draws)
    return SBCResult(names=names, ranks=ranks, n_draws=int(n_draws), p_values=p_values, method=method,
                     n_bins=n_bins, band=band, ecdf=ecdf, in_band=band.contains(ecdf))


def run_sbc(key: PRNGKeyArray, posterior, thetas: ArrayLike, xs: ArrayLike, n_draws: int = 100, **kwargs
            ) -> SBCResult:
    """SBC of an amortized posterior on simulations ``(thetas, xs)`` drawn from its prior.

    Args:
        key: draws the posterior samples (and the band's simulations, `sbc_result`).
        posterior: anything with ``sample(key, xs, n) -> (n_sims, n, n_params)`` and
            ``names`` (e.g. `jcalib.nn.bayesflow.AmortizedPosterior`).
        thetas: ``(n_sims, n_params)`` true parameters, drawn from the training prior.
        xs: ``(n_sims, n_times, n_outputs)`` their simulated (noisy) data.
        n_draws: posterior draws per simulation.
        **kwargs: `sbc_result` options (``method``, ``n_bins``, ``confidence``).
    """
    key_draws, key_result = jax.random.split(key)
    draws = np.asarray(posterior.sample(key_draws, xs, n_draws))
    return sbc_result(key_result, sbc_ranks(draws, thetas), n_draws, getattr(posterior, "names", None), **kwargs)
