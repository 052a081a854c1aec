"""Figures of Bayesian results (`jcalib.bayes`): posterior draws, predictive bands, SBC and recovery."""

from __future__ import annotations

import numpy as np

from jcalib.bayes.result import is_internal
from jcalib.plotting._grid import grid_axes, plt

__all__ = [
    "plot_autocorrelation", "plot_bands", "plot_contraction", "plot_marginals", "plot_pair", "plot_recovery",
    "plot_sbc", "plot_trace",
]


def plot_bands(bands, data=None, *, title="", units=None, time_unit=""):
    """Posterior predictive bands (`jcalib.bayes.predictive.PredictiveBands`), one panel per
    output (at most 4 per row): the outermost quantiles shaded, the inner ones as lines
    (the median solid), optional measurements (an object with ``ts``, ``values``, ``mask``)
    as markers. Returns the figure."""
    ts = np.asarray(bands.ts)
    values = np.asarray(bands.values)
    qs = list(bands.quantiles)
    names = list(bands.output_names)
    fig, axes = grid_axes(len(names), width=3.6, height=3.0, extra_width=0.6)
    for j, name in enumerate(names):
        ax = axes.flat[j]
        if len(qs) > 1:
            ax.fill_between(ts, values[0, :, j], values[-1, :, j], color="C0", alpha=0.25, lw=0,
                            label=f"{bands.kind} band {100 * qs[0]:g}-{100 * qs[-1]:g} %")
        for k in range(1 if len(qs) > 1 else 0, len(qs) - 1 if len(qs) > 1 else 1):
            style = "-" if abs(qs[k] - 0.5) < 1e-12 else "--"
            ax.plot(ts, values[k, :, j], style, color="C0", lw=1.5, label=f"{100 * qs[k]:g} %")
        if data is not None:
            mask = np.asarray(data.mask)[:, j]
            ax.plot(np.asarray(data.ts)[mask], np.asarray(data.values)[mask, j], "o", color="k",
                    ms=3.5, label="data")
        unit = f" [{units[j]}]" if units else ""
        ax.set(xlabel=f"t{f' [{time_unit}]' if time_unit else ''}", ylabel=f"{name}{unit}")
        ax.grid(alpha=0.3)
        if j == 0:
            ax.legend(fontsize=8)
    label = f" ({bands.experiment})" if bands.experiment else ""
    fig.suptitle(title or f"posterior predictive {bands.kind} bands{label}, {bands.n_draws} draws")
    fig.tight_layout()
    return fig


def _posterior_values(result, internal: bool) -> tuple[np.ndarray, list[str]]:
    """Draws (n_chains, n_draws, n_params) and axis labels, physical or internal."""
    values = np.asarray(result.samples_internal if internal else result.samples)
    labels = []
    for name, unit, log in zip(result.names, result.units, result.log_scale):
        if internal and log:
            labels.append(f"log {name}")
        else:
            labels.append(f"{name} [{unit}]" if unit else name)
    return values, labels


def _truth_vector(result, truth, internal: bool):
    """``truth`` ({name: physical value} or an array of physical values) as an array in the
    plotted coordinates (NaN for names not given), or None."""
    if truth is None:
        return None
    if isinstance(truth, dict):
        vector = np.array([float(truth.get(n, np.nan)) for n in result.names])
    else:
        vector = np.asarray(truth, dtype=float).reshape(-1)
        if vector.size != len(result.names):
            raise ValueError(f"truth: expected {len(result.names)} values ({', '.join(result.names)}); "
                             f"got {vector.size}")
    if internal:
        log = np.asarray(result.log_scale, dtype=bool)
        vector = np.where(log, np.log(np.where(log, vector, 1.0)), vector)
    return vector


_LINESTYLES = ("-", "--", "-.", (0, (1, 1)))


def _marginal_axis(values: np.ndarray, log: bool, rule, n_grid: int):
    """KDE of one parameter's draws: ``(x, density)`` to plot. ``log``: the KDE of log10 of
    the draws (a density per decade), its grid mapped back to positive values for a log axis,
    so a positive parameter gets no density at or below zero."""
    from jcalib.bayes.kde import kde_1d

    if not log:
        return kde_1d(values, rule=rule, n_grid=n_grid)
    grid, density = kde_1d(np.log10(values), rule=rule, n_grid=n_grid)
    return 10.0**grid, density


def _positive_crossing_zero(results, i: int, rule, n_grid: int) -> bool:
    """Whether parameter ``i`` has only positive draws in every result while a linear KDE of
    one of them reaches zero or below (a rate sampled in linear coordinates): it then gets
    the log axis of a log-scale parameter."""
    from jcalib.bayes.kde import kde_1d

    draws = [np.asarray(r.samples)[..., i].reshape(-1) for r in results]
    return all(np.all(d > 0) for d in draws) and any(kde_1d(d, rule=rule, n_grid=n_grid)[0][0] <= 0 for d in draws)


def _readable_ticks(ax, log: bool) -> None:
    """At most about 5 short tick labels on the x axis: decades (or 1-2-5 steps within a
    decade) as ``1e-05`` on a log axis, 4 bins with a scientific offset on a linear one."""
    from matplotlib import ticker

    if not log:
        ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=4))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useMathText=True)
        return
    lo, hi = ax.get_xlim()
    decades = np.log10(hi) - np.log10(lo)
    if decades >= 1.5:
        major = ticker.LogLocator(base=10.0, subs=(1.0,), numticks=5)
    else:
        steps = ticker.MaxNLocator(nbins=3, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi)
        major = ticker.FixedLocator([v for v in steps if lo <= v <= hi and v > 0])
    ax.xaxis.set_major_locator(major)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.2g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def plot_marginals(results, *, truth=None, coordinates="physical", rule="paper", n_grid=200, title="",
                   normalize="auto"):
    """Marginal posterior densities by Gaussian KDE (Wulkow et al. 2021, Figure 6), one
    panel per parameter (at most 4 per row).

    Args:
        results: a `jcalib.bayes.PosteriorResult`, a list of them, or ``{label: result}``
            (overlaid, e.g. σ = 0.1 against σ = 0.03; same parameter names).
        truth: true values, ``{name: physical value}`` or an array (vertical lines).
        coordinates: ``"physical"`` (default) or ``"internal"``: KDE of the internal
            coordinates (log for log-scale parameters, often smoother). In physical
            coordinates a log-scale parameter, and one whose draws are all positive
            while its linear KDE would reach zero, is drawn on a log axis with the KDE of
            log10 of its draws (density per decade): a linear KDE of a positive,
            decades-wide parameter would put density at and below zero.
        rule: bandwidth rule of `jcalib.bayes.kde` (``"paper"``: eq. A28; ``"scott"``, ...).
        n_grid: grid points per panel.
        title: figure title.
        normalize: ``True``: every curve divided by its maximum (shapes and locations
            compared, not heights); ``False``: densities; ``"auto"`` (default): ``True`` for
            panels whose curves' peaks differ by more than a factor 10 (a broad posterior
            would otherwise be a flat line under a narrow one), as the y label says.

    Each curve has its own line style, a light fill and its 5 % and 95 % quantiles dotted; the
    narrower curves are drawn on top, so overlaid posteriors stay visible. Returns the figure.
    """
    if isinstance(results, dict):
        items = list(results.items())
    elif isinstance(results, (list, tuple)):
        items = [(f"run {i}", r) for i, r in enumerate(results)]
    else:
        items = [("", results)]
    first = items[0][1]
    internal = is_internal(coordinates, "plot_marginals")
    log_axis = [not internal and (bool(log) or _positive_crossing_zero([r for _, r in items], i, rule, n_grid))
                for i, log in enumerate(first.log_scale)]
    fig, axes = grid_axes(len(first.names), width=3.6, height=3.0, extra_width=0.6)
    true = _truth_vector(first, truth, internal)
    if normalize not in (True, False, "auto"):
        raise ValueError(f"plot_marginals: normalize must be True, False or 'auto'; got {normalize!r}")
    curves = []  # per result: (labels, flat draws, [(x, density) per parameter])
    for _, result in items:
        values, labels = _posterior_values(result, internal)
        flat = values.reshape(-1, values.shape[-1])
        curves.append((labels, flat, [_marginal_axis(flat[:, i], log_axis[i], rule, n_grid)
                                      for i in range(flat.shape[1])]))
    for i in range(len(first.names)):
        peaks = np.array([float(np.max(kde[i][1])) for _, _, kde in curves])
        scaled = normalize is True or (normalize == "auto" and peaks.max() > 10.0 * peaks.min())
        unit = "density per decade" if log_axis[i] else "density"
        ax = axes.flat[i]
        for k, ((label, _), (labels, flat, kde)) in enumerate(zip(items, curves)):
            x, density = kde[i]
            density = density / peaks[k] if scaled else density
            z = 2.0 + peaks[k] / (1.0 + peaks[k])  # taller (narrower) curves on top
            style = _LINESTYLES[k % len(_LINESTYLES)]
            ax.fill_between(x, density, color=f"C{k}", alpha=0.12, lw=0, zorder=z)
            ax.plot(x, density, color=f"C{k}", ls=style, lw=1.8, label=label or None, zorder=z)
            for q in np.quantile(flat[:, i], [0.05, 0.95]):
                ax.axvline(q, color=f"C{k}", ls=":", lw=0.9, alpha=0.8, zorder=z)
            ax.set(xlabel=labels[i], ylabel=f"{unit} / its maximum" if scaled else unit)
        ax.grid(alpha=0.3)
    if true is not None:
        for i, v in enumerate(true):
            if np.isfinite(v):
                axes.flat[i].axvline(v, color="k", ls="--", lw=1.2, label="true" if i == 0 else None, zorder=5)
    for i, ax in enumerate(axes.flat[:len(first.names)]):
        ax.set_ylim(bottom=0.0)
        if log_axis[i]:
            ax.set_xscale("log")
        _readable_ticks(ax, log_axis[i])
    if len(items) > 1 or true is not None:
        axes.flat[0].legend(fontsize=8)
    fig.suptitle(title or f"marginal posterior densities (KDE, {rule} bandwidth)")
    fig.tight_layout()
    return fig


def plot_pair(result, *, truth=None, coordinates="physical", rule="paper", n_grid=60, max_points=2000, title=""):
    """Pair plot of a `jcalib.bayes.PosteriorResult`: 1-D KDE marginals on the diagonal,
    draws (at most ``max_points``, evenly thinned) with 2-D KDE contours below it.

    Args:
        result: the posterior.
        truth: true values, ``{name: physical value}`` or an array (marked in red).
        coordinates: ``"physical"`` (default) or ``"internal"`` (log for log-scale parameters).
        rule: bandwidth rule of `jcalib.bayes.kde`.
        n_grid: grid points per axis of the 2-D KDE.
        max_points: draws shown as dots.
        title: figure title.

    Returns the figure.
    """
    from jcalib.bayes.kde import kde_1d, kde_2d

    internal = is_internal(coordinates, "plot_pair")
    values, labels = _posterior_values(result, internal)
    flat = values.reshape(-1, values.shape[-1])
    n = flat.shape[1]
    true = _truth_vector(result, truth, internal)
    shown = flat[:: max(1, flat.shape[0] // max_points)]
    fig, axes = plt.subplots(n, n, figsize=(2.6 * n + 0.6, 2.4 * n + 0.4), squeeze=False)
    for i in range(n):
        for j in range(n):
            ax = axes[i, j]
            if j > i:
                ax.set_visible(False)
                continue
            if i == j:
                grid, density = kde_1d(flat[:, i], rule=rule)
                ax.plot(grid, density, color="C0")
                if true is not None and np.isfinite(true[i]):
                    ax.axvline(true[i], color="C3", ls="--", lw=1)
            else:
                ax.plot(shown[:, j], shown[:, i], ".", ms=1.5, color="C0", alpha=0.3)
                gx, gy, density = kde_2d(flat[:, [j, i]], rule=rule, n_grid=n_grid)
                ax.contour(gx, gy, density.T, levels=5, colors="k", linewidths=0.7)
                if true is not None and np.all(np.isfinite(true[[j, i]])):
                    ax.plot(true[j], true[i], "*", color="C3", ms=9)
            if i == n - 1:
                ax.set_xlabel(labels[j], fontsize=8)
            if j == 0 and i > 0:
                ax.set_ylabel(labels[i], fontsize=8)
            ax.tick_params(labelsize=7)
            _readable_ticks(ax, False)  # at most ~5 x labels with a scientific offset
            if i != j:
                from matplotlib import ticker

                ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=4))
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useMathText=True)
    fig.suptitle(title or f"posterior pairs ({result.n_chains} chains x {result.n_draws} draws)")
    fig.tight_layout()
    return fig


def plot_trace(result, *, coordinates="physical", title=""):
    """Trace plot of a `jcalib.bayes.PosteriorResult`: one row per parameter (in ``coordinates``,
    ``"physical"`` or ``"internal"``) and a last row with the log density, one line per chain
    (acceptance and R-hat in the legend and titles). Returns the figure."""
    values, labels = _posterior_values(result, is_internal(coordinates, "plot_trace"))
    n = values.shape[-1]
    fig, axes = plt.subplots(n + 1, 1, figsize=(8.0, 1.9 * (n + 1) + 0.5), sharex=True, squeeze=False)
    draws = np.arange(values.shape[1]) * result.thin
    for c in range(values.shape[0]):
        for i in range(n):
            axes[i, 0].plot(draws, values[c, :, i], lw=0.6, color=f"C{c}")
        axes[n, 0].plot(draws, np.asarray(result.logdensity)[c], lw=0.6, color=f"C{c}",
                        label=f"chain {c}: acceptance {100 * result.acceptance_rate[c]:.0f} %")
    for i in range(n):
        axes[i, 0].set_ylabel(labels[i], fontsize=8)
        axes[i, 0].set_title(f"R-hat {result.rhat[i]:.3f}, bulk ESS {result.ess_bulk[i]:.0f}", fontsize=8,
                             loc="right")
        axes[i, 0].grid(alpha=0.3)
    axes[n, 0].set(ylabel="log density", xlabel="step after burn-in")
    axes[n, 0].grid(alpha=0.3)
    axes[n, 0].legend(fontsize=7, ncol=2)
    fig.suptitle(title or f"{result.method}: traces")
    fig.tight_layout()
    return fig


def plot_autocorrelation(result, *, max_lag=50, coordinates="physical", title=""):
    """Autocorrelation of each parameter's draws against the lag (in kept draws), one
    panel per parameter, one line per chain (`jcalib.bayes.diagnostics.autocorrelation`).
    Returns the figure."""
    from jcalib.bayes.diagnostics import autocorrelation

    values, labels = _posterior_values(result, is_internal(coordinates, "plot_autocorrelation"))
    max_lag = min(int(max_lag), values.shape[1] - 1)
    rho = autocorrelation(values, max_lag)
    fig, axes = grid_axes(values.shape[-1], width=3.4, height=2.8, extra_width=0.6)
    lags = np.arange(max_lag + 1)
    for i in range(values.shape[-1]):
        ax = axes.flat[i]
        for c in range(values.shape[0]):
            ax.plot(lags, rho[c, :, i], lw=1, color=f"C{c}", label=f"chain {c}" if i == 0 else None)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set(xlabel="lag (draws)", ylabel="autocorrelation", title=labels[i], ylim=(-0.2, 1.05))
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title or f"autocorrelation (thin = {result.thin})")
    fig.tight_layout()
    return fig


def plot_sbc(result, *, hist_confidence=0.99, title=""):
    """Simulation-based calibration (`jcalib.bayes.sbc.SBCResult`): per parameter, the rank
    histogram with the band that ``hist_confidence`` of the bin counts of uniform ranks fall
    into (pointwise binomial), and the ECDF difference ``ECDF(z) - z`` of the fractional
    ranks with the simultaneous band of Säilynoja et al. (2022). Titles give the p-value.
    """
    import scipy.stats

    ranks = np.asarray(result.ranks)
    n_sims, n_params = ranks.shape
    n_draws, n_bins = int(result.n_draws), int(result.n_bins)
    edges = np.floor(np.linspace(0, n_draws + 1, n_bins + 1) + 1e-9)
    probability = np.diff(edges) / (n_draws + 1)
    alpha = 0.5 * (1.0 - hist_confidence)
    low = scipy.stats.binom.ppf(alpha, n_sims, probability)
    high = scipy.stats.binom.ppf(1.0 - alpha, n_sims, probability)
    band = result.band
    fig, axes = plt.subplots(2, n_params, figsize=(3.4 * n_params + 0.6, 5.8), squeeze=False)
    for j, name in enumerate(result.names):
        ax, bx = axes[0, j], axes[1, j]
        counts = np.histogram(ranks[:, j], bins=edges)[0]
        ax.fill_between(edges, np.append(low, low[-1]), np.append(high, high[-1]), step="post", color="0.85",
                        label=f"{hist_confidence:.0%} uniform band")
        ax.stairs(counts, edges, color=f"C{j % 10}", lw=1.5)
        ax.set(title=f"{name}: p = {float(result.p_values[j]):.3g} ({result.method})", xlabel="rank",
               ylabel="count" if j == 0 else None)
        bx.fill_between(band.z, band.lower - band.z, band.upper - band.z, color="0.85",
                        label=f"{band.confidence:.0%} simultaneous band")
        bx.plot(band.z, np.asarray(result.ecdf)[j] - band.z, color=f"C{j % 10}", lw=1.5)
        bx.axhline(0.0, color="k", lw=0.6)
        inside = "inside" if bool(np.asarray(result.in_band)[j]) else "OUTSIDE"
        bx.set(title=f"ECDF difference ({inside} band)", xlabel="fractional rank",
               ylabel="ECDF - uniform" if j == 0 else None)
        if j == 0:
            ax.legend(fontsize=7)
            bx.legend(fontsize=7)
    fig.suptitle(title or f"simulation-based calibration: {n_sims} simulations, {n_draws} draws each")
    fig.tight_layout()
    return fig


def plot_recovery(truths, estimates=None, sds=None, names=None, *, units=None, max_points=500, title=""):
    """Estimated (posterior mean ± sd) against true parameters, one panel per parameter, with
    the identity line; titles give R² and NRMSE (Zhang & Mikelsons 2023, Fig. 14).

    ``truths`` may be a `jcalib.bayes.recovery.RecoveryResult` (then the other arguments come
    from it); otherwise arrays ``(n_sims, n_params)``. NRMSE divides the RMSE by the range of
    the truths unless a `RecoveryResult` supplies its value range.
    """
    from jcalib.bayes.recovery import estimate_errors

    if hasattr(truths, "estimates"):
        result = truths
        truths, estimates, sds, names = result.truths, result.estimates, result.sds, result.names
        value_range = np.asarray(result.value_range, float)
    else:
        value_range = None
    truths = np.asarray(truths, float)
    estimates = np.asarray(estimates, float)
    if truths.ndim != 2 or estimates.shape != truths.shape:
        raise ValueError(f"plot_recovery: truths and estimates must be (n_sims, n_params) arrays of one shape; got "
                         f"{truths.shape} and {estimates.shape}")
    n_params = truths.shape[1]
    names = [f"theta{j}" for j in range(n_params)] if names is None else list(names)
    if len(names) != n_params:
        raise ValueError(f"plot_recovery: {len(names)} names for {n_params} parameters")
    sds = None if sds is None else np.asarray(sds, float)
    _, r2, nrmse = estimate_errors(truths, estimates, value_range)
    shown = np.arange(truths.shape[0])[: int(max_points)]
    fig, axes = grid_axes(n_params, width=3.4, height=3.2, extra_width=0.6)
    for j, ax in enumerate(axes.flat[:n_params]):
        ax.errorbar(truths[shown, j], estimates[shown, j], yerr=None if sds is None else sds[shown, j], fmt="o",
                    ms=3, alpha=0.6, elinewidth=0.8, color=f"C{j % 10}")
        lo = min(truths[:, j].min(), estimates[:, j].min())
        hi = max(truths[:, j].max(), estimates[:, j].max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        unit = f" [{units[j]}]" if units and units[j] else ""
        ax.set(title=f"{names[j]}: R² = {r2[j]:.3f}, NRMSE = {nrmse[j]:.3f}",
               xlabel=f"true{unit}", ylabel=f"estimate{unit}")
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"parameter recovery ({truths.shape[0]} validation simulations)")
    fig.tight_layout()
    return fig


def plot_contraction(result, *, title=""):
    """Posterior z-score ``(estimate - truth) / sd`` against posterior contraction
    ``1 - sd² / prior variance`` per simulation (Schad et al. 2021), one panel per parameter,
    from a `jcalib.bayes.recovery.RecoveryResult`. Good recovery sits at high contraction and
    |z| below about 2."""
    z, c = np.asarray(result.z_scores), np.asarray(result.contractions)
    n_params = z.shape[1]
    fig, axes = grid_axes(n_params, width=3.4, height=3.0, extra_width=0.6)
    for j, ax in enumerate(axes.flat[:n_params]):
        ax.scatter(c[:, j], z[:, j], s=8, alpha=0.5, color=f"C{j % 10}")
        ax.axhspan(-2.0, 2.0, color="0.9", zorder=0)
        ax.set(xlim=(min(0.0, c[:, j].min()), 1.0), title=f"{result.names[j]}: mean contraction "
               f"{float(result.contraction[j]):.2f}", xlabel="posterior contraction", ylabel="posterior z-score")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "posterior z-score against contraction")
    fig.tight_layout()
    return fig
