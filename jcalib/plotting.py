"""Matplotlib figures for jcalib results (Agg backend unless the user chose one)."""

from __future__ import annotations

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_bands",
           "plot_cost_versus_parameters", "plot_fit", "plot_multistart_waterfall", "plot_profile",
           "plot_residuals",
           "plot_mae_versus_training_size", "plot_reconstructions", "plot_training_history",
           "plot_autocorrelation", "plot_marginals", "plot_pair", "plot_trace",
           "plot_sensitivity_functions", "plot_sigma_min_spectrum", "plot_simulation",
           "plot_singular_values", "plot_sobol_over_time", "plot_sorted_indices",
           "plot_contraction", "plot_recovery", "plot_sbc"]


def plot_simulation(ts, values, output_names, *, data=None, title="", units=None, time_unit=""):
    """One panel per output (at most 4 per row): simulated curves ``values`` (n_times,
    n_outputs) or a dict ``{label: values}``, plus optional measurements (an object with
    ``ts``, ``values``, ``mask``) as markers. Returns the figure."""
    curves = values if isinstance(values, dict) else {"model": values}
    n_out = len(output_names)
    n_cols = min(n_out, 4)
    n_rows = -(-n_out // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.4 * n_rows), squeeze=False)
    for ax in axes.flat[n_out:]:
        ax.set_visible(False)
    ts = np.asarray(ts)
    for j, (ax, name) in enumerate(zip(axes.flat, output_names)):
        for label, y in curves.items():
            ax.plot(ts, np.asarray(y)[:, j], "-", lw=1.5, label=label)
        if data is not None:
            mask = np.ones_like(data.values, bool) if data.mask is None else np.asarray(data.mask)
            ax.plot(np.asarray(data.ts)[mask[:, j]], np.asarray(data.values)[mask[:, j], j],
                    "o", ms=4, mfc="none", label="data")
        unit = f" [{units[j]}]" if units else ""
        ax.set(xlabel=f"t [{time_unit}]" if time_unit else "t", ylabel=f"{name}{unit}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_singular_values(spectra: dict[str, np.ndarray], title="Jacobian singular values"):
    """Singular values (normalised by the largest) per labelled case on a log axis."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for label, s in spectra.items():
        s = np.asarray(s)
        ax.semilogy(np.arange(1, s.size + 1), s / s[0], "o-", label=label)
    ax.set(xlabel="index k", ylabel="s_k / s_1", title=title)
    ax.axhline(1e-2, color="gray", ls="--", lw=1, label="s_1/s_k = 100")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_sobol_over_time(result, ts, output_names, *, which="first", conf=True, title=""):
    """Sobol' indices over time (Aka et al. 2023, app. B): one panel per output, one line per
    parameter, optional bootstrap bands. ``result`` is a `SobolResult` of a model, indices
    ``(n_params, n_times, n_outputs)``; ``which`` is ``"first"`` or ``"total"``."""
    if which not in ("first", "total"):
        raise ValueError(f"plot_sobol_over_time: which must be 'first' or 'total'; got {which!r}")
    values = np.asarray(getattr(result, f"{which}_order"))
    half = np.asarray(getattr(result, f"{which}_order_conf"))
    ts = np.asarray(ts)
    if values.ndim != 3 or values.shape[1:] != (ts.size, len(output_names)):
        raise ValueError(
            f"plot_sobol_over_time: indices of shape (n_params, n_times={ts.size}, "
            f"n_outputs={len(output_names)}) expected; got {values.shape}"
        )
    n_out = len(output_names)
    n_cols = min(n_out, 2)
    n_rows = -(-n_out // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.8 * n_cols + 2.2, 3.4 * n_rows),
                             squeeze=False, sharey=True)
    for ax in axes.flat[n_out:]:
        ax.set_visible(False)
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, 20))
    for j, (ax, name) in enumerate(zip(axes.flat, output_names)):
        for i, param in enumerate(result.names):
            color = colors[i % 20]
            ax.plot(ts, values[i, :, j], "-", lw=1.2, color=color, label=param)
            if conf:
                ax.fill_between(ts, values[i, :, j] - half[i, :, j], values[i, :, j] + half[i, :, j],
                                color=color, alpha=0.15, lw=0)
        ax.set(xlabel="t", title=name)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{which}-order Sobol' index")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1 - 2.0 / fig.get_figwidth(), 1))
    return fig


def plot_sorted_indices(selection, *, title=""):
    """Zhang & Mikelsons (2023), Fig. 4: a `Selection` (Algorithm 1). Top: log10 of the sorted
    averaged first-order indices with the delta line; bottom: the drop ratios r(i-1, i) with
    the K line. Selected parameters are highlighted; non-positive indices sit at the bottom
    edge (open markers)."""
    names = list(selection.sorted_names)
    s = np.asarray(selection.sorted_indices, dtype=float)
    ratios = np.asarray(selection.ratios, dtype=float)
    x = np.arange(len(names))
    chosen = np.isin(names, list(selection.selected))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(5.0, 0.42 * len(names) + 1.5), 5.6),
                                      sharex=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_s = np.where(s > 0, np.log10(np.where(s > 0, s, 1.0)), np.nan)
    floor = np.nanmin(np.append(log_s, np.log10(selection.delta))) - 0.5
    top.bar(x, np.where(np.isfinite(log_s), log_s, floor) - floor, bottom=floor,
            color=np.where(chosen, "tab:red", "tab:gray"))
    top.plot(x[~np.isfinite(log_s)], np.full((~np.isfinite(log_s)).sum(), floor), "o", mfc="none",
             color="k")
    top.axhline(np.log10(selection.delta), color="k", ls="--", lw=1,
                label=f"delta = {selection.delta:g}")
    top.set(ylabel="log10 averaged S_i", title=title or f"selected: {len(selection.selected)} "
            f"of {len(names)} (stop: {selection.stop_reason})")
    top.legend(fontsize=8)
    finite = np.where(np.isfinite(ratios), ratios, np.nan)
    bottom.bar(x, np.nan_to_num(finite, nan=0.0), color=np.where(chosen, "tab:red", "tab:gray"))
    if np.isfinite(selection.K):
        bottom.axhline(selection.K, color="k", ls="--", lw=1, label=f"K = {selection.K:.2f}")
        bottom.legend(fontsize=8)
    bottom.set(ylabel="r(i-1, i)")
    bottom.set_xticks(x, names, rotation=75, ha="right", fontsize=8)
    for ax in (top, bottom):
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_sensitivity_functions(ts, sensitivities, output_names, parameter_names, *,
                               outputs=None, parameters=None, reference=None, title="",
                               ylabel="sensitivity", time_unit="", n_cols=4):
    """Sensitivity functions over time, one panel per parameter (Bastogne 2007, Figure 5).

    Args:
        ts: times, ``(n_times,)``.
        sensitivities: ``(n_times, n_outputs, n_params)`` (e.g. `output_sensitivities`).
        output_names, parameter_names: labels of the last two axes.
        outputs, parameters: names to show (default all); each panel draws every output.
        reference: optional array like ``sensitivities`` (e.g. finite differences), drawn
            dotted over the solid curves, as the paper compares numeric with symbolic ones.
        title, ylabel, time_unit: labels.
        n_cols: panels per row.

    Returns:
        The figure.
    """
    s = np.asarray(sensitivities)
    ts = np.asarray(ts)
    outputs = list(output_names) if outputs is None else list(outputs)
    parameters = list(parameter_names) if parameters is None else list(parameters)
    out_idx = [list(output_names).index(o) for o in outputs]
    par_idx = [list(parameter_names).index(p) for p in parameters]
    n_cols = min(n_cols, len(par_idx))
    n_rows = -(-len(par_idx) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.1 * n_cols, 2.3 * n_rows),
                             squeeze=False, sharex=True)
    for ax in axes.flat[len(par_idx):]:
        ax.set_visible(False)
    for ax, j, name in zip(axes.flat, par_idx, parameters):
        for c, i in enumerate(out_idx):
            color = f"C{c}"
            ax.plot(ts, s[:, i, j], "-", color=color, lw=1.2, label=outputs[c])
            if reference is not None:
                ax.plot(ts, np.asarray(reference)[:, i, j], ":", color="k", lw=1.2,
                        label="reference" if c == 0 else None)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel(f"t [{time_unit}]" if time_unit else "t", fontsize=8)
    for row in axes:
        row[0].set_ylabel(ylabel, fontsize=8)
    axes[0][0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_sigma_min_spectrum(report_or_spectrum, parameter_names=None, *, threshold=None,
                            relative=True, title="Smallest singular value spectrum"):
    """σ_min of the first j selected sensitivity columns against j (Bastogne 2007, Figure 8).

    Args:
        report_or_spectrum: an `IdentifiabilityReport`, a `CorrelationRanking` or the σ_min
            values themselves.
        parameter_names: x tick labels when a bare spectrum is given (the ranking's order
            otherwise).
        threshold: horizontal line of the subset threshold (default: the report's).
        relative: plot σ_min(j)/σ_min(1) (False: σ_min itself).
        title: axes title.

    Returns:
        The figure.
    """
    ranking = getattr(report_or_spectrum, "correlation", report_or_spectrum)
    if threshold is None:
        threshold = getattr(report_or_spectrum, "sigma_min_threshold", None)
    if hasattr(ranking, "sigma_min"):
        spectrum = np.asarray(ranking.sigma_min, dtype=float)
        names = list(ranking.order)
    else:
        spectrum = np.asarray(report_or_spectrum, dtype=float)
        names = list(parameter_names) if parameter_names is not None else None
    values = spectrum / spectrum[0] if relative else spectrum
    x = np.arange(1, values.size + 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.38 * values.size + 1.5), 3.8))
    floor = np.min(values[values > 0]) / 10 if np.any(values > 0) else 1e-16
    ax.semilogy(x, np.maximum(values, floor), "o-")
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.legend(fontsize=8)
    if names is not None:
        ax.set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    ax.set(xlabel="parameter added at step j", title=title,
           ylabel="σ_min(Σ_1..j) / σ_min(Σ_1)" if relative else "σ_min(Σ_1..j)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_multistart_waterfall(result, *, title=""):
    """Waterfall plot of a multistart (`jcalib.estimation.global_search.multistart`): the
    final losses of all starts sorted ascending against their rank, on a log axis. A flat
    first step means several starts reached the same (best) minimum; further plateaus are
    other local minima (Aka et al. 2023, §3.3.2). Failed starts (``inf``) are left out and
    counted in the legend. Returns the figure."""
    losses = np.asarray(result.sorted_losses, dtype=float)
    finite = np.isfinite(losses)
    rank = np.arange(1, losses.size + 1)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    label = f"{result.method}, {losses.size} starts"
    if not finite.all():
        label += f" ({int((~finite).sum())} failed)"
    ax.plot(rank[finite], losses[finite], "o-", ms=4, label=label)
    if finite.any():
        ax.axhline(losses[finite][0], color="gray", ls="--", lw=1, label="best")
    ax.set_yscale("log")
    ax.set(xlabel="start (sorted by final loss)", ylabel="final loss",
           title=title or f"multistart: {result.n_simulations} simulations")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_fit(problem, result, *, n_dense=200, title="", units=None, time_unit=""):
    """Fit versus data: the model at ``result``'s estimate (an `EstimationResult` of
    ``problem``) with the measurements, one panel per output (wraps `plot_simulation`).

    ``n_dense`` points between the first and last measurement time give smooth curves (one
    extra compile of the re-timed model); None plots at the measurement times only."""
    import equinox as eqx
    import jax.numpy as jnp

    z = jnp.asarray(np.asarray(result.theta_internal))
    ts = np.asarray(problem.measurements.ts)
    if n_dense:
        ts = np.linspace(ts[0], ts[-1], int(n_dense))
        model = problem.model.with_times(ts)
        values = np.asarray(eqx.filter_jit(lambda m, th: m.simulate(th))(model, problem.theta_full(z)))
    else:
        values = np.asarray(problem.simulate(z))  # the problem's compiled solve
    label = f"{result.method} fit (loss {result.loss:.3g})"
    return plot_simulation(ts, {label: values}, problem.model.output_names,
                           data=problem.measurements, title=title, units=units,
                           time_unit=time_unit)


def plot_residuals(problem, result, *, title=""):
    """Weighted residuals at ``result``'s estimate over time, one marker series per output."""
    import jax.numpy as jnp

    r = np.asarray(problem.residuals(jnp.asarray(np.asarray(result.theta_internal))))
    index = np.asarray(problem.observed_index)
    n_out = problem.measurements.n_outputs
    rows, cols = index // n_out, index % n_out
    ts = np.asarray(problem.measurements.ts)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for j, name in enumerate(problem.model.output_names):
        sel = cols == j
        if sel.any():
            ax.plot(ts[rows[sel]], r[sel], "o", ms=4, label=name)
    ax.axhline(0.0, color="gray", lw=1)
    ax.set(xlabel="t", ylabel=f"residual ({problem.weighting})",
           title=title or f"residuals, loss {float(np.mean(r**2)):.3g}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_profile(profile, *, level=0.95, title=""):
    """A `ProfileLikelihood`: -2 Δlog L over the grid, the covariance's quadratic
    approximation, the χ²₁ ``level`` threshold and the estimate (log x-axis for log-scale
    parameters)."""
    from scipy import stats

    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = np.asarray(profile.values)
    ax.plot(x, profile.delta_chi2, "o-", ms=4, label="profile")
    if np.isfinite(profile.std_internal) and profile.std_internal > 0:
        ax.plot(x, profile.quadratic(), "--", lw=1, label="covariance (quadratic)")
    ax.axhline(float(stats.chi2.ppf(level, 1)), color="gray", ls=":", lw=1,
               label=f"χ²₁ {level:.0%}")
    ax.axvline(profile.estimate, color="k", lw=0.8)
    if profile.log_scale:
        ax.set_xscale("log")
    ax.set(xlabel=profile.name, ylabel="-2 Δ log L", title=title or f"profile of {profile.name}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_cost_versus_parameters(result, *, log=True, title=""):
    """Cost against the number of estimated parameters of a `BottomUpResult`
    (`jcalib.estimation.bottom_up.bottom_up`; Bastogne et al. 2007, Figure 9): J_0 at 0
    (nothing estimated), J_j after adding the j-th ranked parameter, named on the x-axis,
    and the knee marked. ``log``: logarithmic cost axis. Returns the figure."""
    costs = np.concatenate([[result.initial_loss], np.asarray(result.costs, dtype=float)])
    j = np.arange(costs.size)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * costs.size + 2.5), 4.0))
    ax.plot(j, costs, "o-", ms=5, label=f"{result.method}, warm starts")
    knee = int(result.knee)
    rule = result.knee_rule + ("" if result.knee_threshold is None
                               else f" {result.knee_threshold:g}")
    ax.plot([knee], [costs[knee]], "s", ms=11, mfc="none", mec="C3", mew=2,
            label=f"knee: {knee} parameters ({rule})")
    ax.axvline(knee, color="C3", ls="--", lw=1)
    if log and np.all(costs > 0):
        ax.set_yscale("log")
    ax.set_xticks(j, ["start"] + [f"+{n}" for n in result.ranking], rotation=45, ha="right")
    ax.set(xlabel="parameter added (in ranking order)", ylabel="cost (mean squared residual)",
           title=title or f"bottom-up estimation: selected {', '.join(result.selected)}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_bands(bands, data=None, *, title="", units=None, time_unit=""):
    """Posterior predictive bands (`jcalib.bayes.predictive.PredictiveBands`), one panel per
    output (at most 4 per row): the outermost quantiles shaded, the inner ones as lines
    (the median solid), optional measurements (an object with ``ts``, ``values``, ``mask``)
    as markers. Returns the figure."""
    ts = np.asarray(bands.ts)
    values = np.asarray(bands.values)
    qs = list(bands.quantiles)
    names = list(bands.output_names)
    n = len(names)
    n_cols = min(n, 4)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.6 * n_cols + 0.6, 3.0 * n_rows),
                             squeeze=False)
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
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    label = f" ({bands.experiment})" if bands.experiment else ""
    fig.suptitle(title or f"posterior predictive {bands.kind} bands{label}, {bands.n_draws} draws")
    fig.tight_layout()
    return fig


# --- posterior samples (jcalib.bayes) ----------------------------------------------------------
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


def _grid_axes(n: int, width: float = 3.6, height: float = 3.0):
    n_cols = min(n, 4)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width * n_cols + 0.6, height * n_rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    return fig, axes


def plot_marginals(results, *, truth=None, internal=False, rule="paper", n_grid=200, title=""):
    """Marginal posterior densities by Gaussian KDE (Wulkow et al. 2021, Figure 6), one
    panel per parameter (at most 4 per row).

    Args:
        results: a `jcalib.bayes.PosteriorResult`, a list of them, or ``{label: result}``
            (overlaid, e.g. σ = 0.1 against σ = 0.03; same parameter names).
        truth: true values, ``{name: physical value}`` or an array (vertical lines).
        internal: KDE of the internal coordinates (log for log-scale parameters, often
            smoother) instead of the physical values.
        rule: bandwidth rule of `jcalib.bayes.kde` (``"paper"``: eq. A28; ``"scott"``, ...).
        n_grid: grid points per panel.
        title: figure title.

    Each curve has its 5 % and 95 % quantiles dotted. Returns the figure.
    """
    from jcalib.bayes.kde import kde_1d

    if isinstance(results, dict):
        items = list(results.items())
    elif isinstance(results, (list, tuple)):
        items = [(f"run {i}", r) for i, r in enumerate(results)]
    else:
        items = [("", results)]
    first = items[0][1]
    fig, axes = _grid_axes(len(first.names))
    true = _truth_vector(first, truth, internal)
    for k, (label, result) in enumerate(items):
        values, labels = _posterior_values(result, internal)
        flat = values.reshape(-1, values.shape[-1])
        for i in range(flat.shape[1]):
            ax = axes.flat[i]
            grid, density = kde_1d(flat[:, i], rule=rule, n_grid=n_grid)
            ax.plot(grid, density, color=f"C{k}", lw=1.6, label=label or None)
            for q in np.quantile(flat[:, i], [0.05, 0.95]):
                ax.axvline(q, color=f"C{k}", ls=":", lw=1)
            ax.set(xlabel=labels[i], ylabel="density")
            ax.grid(alpha=0.3)
    if true is not None:
        for i, v in enumerate(true):
            if np.isfinite(v):
                axes.flat[i].axvline(v, color="k", ls="--", lw=1.2, label="true" if i == 0 else None)
    if len(items) > 1 or true is not None:
        axes.flat[0].legend(fontsize=8)
    fig.suptitle(title or f"marginal posterior densities (KDE, {rule} bandwidth)")
    fig.tight_layout()
    return fig


def plot_pair(result, *, truth=None, internal=False, rule="paper", n_grid=60, max_points=2000, title=""):
    """Pair plot of a `jcalib.bayes.PosteriorResult`: 1-D KDE marginals on the diagonal,
    draws (at most ``max_points``, evenly thinned) with 2-D KDE contours below it.

    Args:
        result: the posterior.
        truth: true values, ``{name: physical value}`` or an array (marked in red).
        internal: plot internal coordinates (log for log-scale parameters).
        rule: bandwidth rule of `jcalib.bayes.kde`.
        n_grid: grid points per axis of the 2-D KDE.
        max_points: draws shown as dots.
        title: figure title.

    Returns the figure.
    """
    from jcalib.bayes.kde import kde_1d, kde_2d

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
                ax.set_xlabel(labels[j])
            if j == 0 and i > 0:
                ax.set_ylabel(labels[i])
            ax.tick_params(labelsize=7)
    fig.suptitle(title or f"posterior pairs ({result.n_chains} chains x {result.n_draws} draws)")
    fig.tight_layout()
    return fig


def plot_trace(result, *, internal=False, title=""):
    """Trace plot of a `jcalib.bayes.PosteriorResult`: one row per parameter and a last
    row with the log density, one line per chain (acceptance and R-hat in the legend and
    titles). Returns the figure."""
    values, labels = _posterior_values(result, internal)
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


def plot_autocorrelation(result, *, max_lag=50, internal=False, title=""):
    """Autocorrelation of each parameter's draws against the lag (in kept draws), one
    panel per parameter, one line per chain (`jcalib.bayes.diagnostics.autocorrelation`).
    Returns the figure."""
    from jcalib.bayes.diagnostics import autocorrelation

    values, labels = _posterior_values(result, internal)
    max_lag = min(int(max_lag), values.shape[1] - 1)
    rho = autocorrelation(values, max_lag)
    fig, axes = _grid_axes(values.shape[-1], width=3.4, height=2.8)
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


# --- neural surrogates (jcalib.nn) -------------------------------------------------------------
def plot_training_history(history, *, metrics=("loss",), log=True, title=""):
    """Training curves of a `jcalib.nn.training.TrainingResult` (or its ``history`` dict):
    ``train_<metric>`` solid and ``val_<metric>`` dashed per epoch, one colour per metric,
    the learning rate on a second axis (dotted, grey) and the best validation epoch marked.

    Args:
        history: a `TrainingResult` or its ``history`` (per-epoch lists).
        metrics: names without the ``train_``/``val_`` prefix (``"loss"``, and for a PELS-VAE
            ``"reconstruction"``, ``"kl"``, ``"student"``, ``"generation"``).
        log: logarithmic loss axis (used only when every plotted value is positive).
        title: axes title.

    Returns:
        The figure.
    """
    best_epoch = getattr(history, "best_epoch", None)
    history = getattr(history, "history", history)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    plotted = []
    for c, name in enumerate(metrics):
        found = False
        for split, style in (("train", "-"), ("val", "--")):
            values = history.get(f"{split}_{name}")
            if values is None:
                continue
            values = np.asarray(values, dtype=float)
            ax.plot(np.arange(1, values.size + 1), values, style, color=f"C{c}", lw=1.3,
                    label=f"{split} {name}")
            plotted.append(values)
            found = True
        if not found:
            known = sorted({k.split("_", 1)[1] for k in history if k.startswith(("train_", "val_"))})
            raise ValueError(f"plot_training_history: no train_{name} or val_{name} in the history; "
                             f"known metrics: {', '.join(known)}")
    if best_epoch:
        ax.axvline(best_epoch, color="k", ls=":", lw=1, label=f"best epoch {best_epoch}")
    if log and all(np.all(v[np.isfinite(v)] > 0) for v in plotted):
        ax.set_yscale("log")
    ax.set(xlabel="epoch", ylabel="loss", title=title or f"training, {len(plotted[0])} epochs")
    ax.grid(alpha=0.3, which="both")
    if "learning_rate" in history:
        lr_ax = ax.twinx()
        lr = np.asarray(history["learning_rate"], dtype=float)
        lr_ax.plot(np.arange(1, lr.size + 1), lr, ":", color="gray", lw=1.2)
        lr_ax.set_yscale("log")
        lr_ax.set_ylabel("learning rate", color="gray")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reconstructions(ts, truth, predicted, output_names, *, samples=4,
                         labels=("simulation", "surrogate"), units=None, time_unit="", title=""):
    """A surrogate against the simulated model for a few parameter sets (Zhang & Mikelsons
    2023, Fig. 5; Aka et al. 2023, Fig. 8): one panel per output (at most 4 per row), each
    shown sample in its own colour, ``truth`` solid and ``predicted`` dashed. Each panel's
    title gives the MAE of that output over all samples passed.

    Args:
        ts: times, ``(n_times,)``.
        truth: simulated trajectories, ``(n, n_times, n_outputs)`` (or one, ``(n_times,
            n_outputs)``).
        predicted: the surrogate's trajectories of the same parameter sets, same shape.
        output_names: labels of the last axis.
        samples: how many samples to draw (the first ones), or their indices.
        labels: legend names of the two line styles.
        units, time_unit, title: labels.

    Returns:
        The figure.

    Raises:
        ValueError: ``truth`` and ``predicted`` of other shapes, or not matching ``ts`` and
            ``output_names``.
    """
    truth = np.asarray(truth, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    truth = truth[None] if truth.ndim == 2 else truth
    predicted = predicted[None] if predicted.ndim == 2 else predicted
    ts = np.asarray(ts)
    n_out = len(output_names)
    expected = (ts.size, n_out)
    if truth.ndim != 3 or truth.shape[1:] != expected or predicted.shape != truth.shape:
        raise ValueError(f"plot_reconstructions: truth and predicted must both have shape (n, n_times={ts.size}, "
                         f"n_outputs={n_out}); got {truth.shape} and {predicted.shape}")
    index = np.arange(min(int(samples), truth.shape[0])) if np.ndim(samples) == 0 else np.asarray(samples, int)
    mae = np.mean(np.abs(predicted - truth), axis=(0, 1))
    n_cols = min(n_out, 4)
    n_rows = -(-n_out // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.2 * n_cols, 3.4 * n_rows), squeeze=False)
    for ax in axes.flat[n_out:]:
        ax.set_visible(False)
    for j, (ax, name) in enumerate(zip(axes.flat, output_names)):
        for c, i in enumerate(index):
            ax.plot(ts, truth[i, :, j], "-", color=f"C{c % 10}", lw=1.5)
            ax.plot(ts, predicted[i, :, j], "--", color=f"C{c % 10}", lw=1.5)
        unit = f" [{units[j]}]" if units else ""
        ax.set(xlabel=f"t [{time_unit}]" if time_unit else "t", ylabel=f"{name}{unit}",
               title=f"{name}: MAE {mae[j]:.3g}{unit}")
        ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="k", ls="-", label=labels[0]),
               Line2D([], [], color="k", ls="--", label=labels[1])]
    axes[0][0].legend(handles=handles, fontsize=8)
    fig.suptitle(title or f"{labels[1]} versus {labels[0]}, {index.size} of {truth.shape[0]} samples")
    fig.tight_layout()
    return fig


def plot_mae_versus_training_size(sizes, maes, *, labels=None, mark_best=None, log=True,
                                  ylabel="MAE", title=""):
    """Test error against the number of training samples (Aka et al. 2023, Fig. 6): one
    curve per network configuration (or per test set, or per error measure).

    Args:
        sizes: training-set sizes, ``(n_sizes,)``.
        maes: errors, ``(n_sizes,)`` for one curve, ``(n_curves, n_sizes)``, or
            ``{label: (n_sizes,)}``; NaN leaves a gap (a size not trained).
        labels: curve labels when ``maes`` is an array.
        mark_best: star the smallest error at each size (as the paper marks the best
            hyperparameters); default: when there are several curves.
        log: logarithmic axes (base 2 for the sizes).
        ylabel, title: labels.

    Returns:
        The figure.

    Raises:
        ValueError: a curve whose length differs from ``sizes``, or labels of another count.
    """
    sizes = np.asarray(sizes, dtype=float)
    if isinstance(maes, dict):
        curves = {str(k): np.asarray(v, dtype=float) for k, v in maes.items()}
    else:
        values = np.atleast_2d(np.asarray(maes, dtype=float))
        if labels is None:
            labels = [None] if values.shape[0] == 1 else [f"curve {i}" for i in range(values.shape[0])]
        if len(labels) != values.shape[0]:
            raise ValueError(f"plot_mae_versus_training_size: {values.shape[0]} curves but {len(labels)} labels")
        curves = dict(zip(labels, values))
    for label, v in curves.items():
        if v.shape != sizes.shape:
            raise ValueError(f"plot_mae_versus_training_size: every curve needs one value per size "
                             f"({sizes.size}); curve {label!r} has shape {v.shape}")
    fig, ax = plt.subplots(figsize=(5.4, 3.8))
    for c, (label, v) in enumerate(curves.items()):
        ax.plot(sizes, v, "o-", ms=4, color=f"C{c % 10}", label=label)
    if mark_best is None:
        mark_best = len(curves) > 1
    if mark_best:
        stacked = np.stack(list(curves.values()))
        has = np.any(np.isfinite(stacked), axis=0)
        best = np.full(sizes.shape, np.nan)
        best[has] = np.nanmin(stacked[:, has], axis=0)
        ax.plot(sizes, best, "*", ms=13, mfc="none", mec="k", label="best")
    if log:
        ax.set_xscale("log", base=2)
        if all(np.all(v[np.isfinite(v)] > 0) for v in curves.values()):
            ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:g}" for s in sizes])
    ax.set(xlabel="training samples", ylabel=ylabel, title=title or f"{ylabel} versus training-set size")
    if any(label is not None for label in curves) or mark_best:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


# --- IMPU (jcalib.nn.impu, jcalib.workflows.impu_updating) ------------------------------------
__all__ += ["plot_impu_error_histograms", "plot_impu_error_plane", "plot_impu_error_versus_training_size",
            "plot_impu_test_zones", "plot_impu_updating"]

_ZONE_COLORS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9")


def _impu_relative_errors(errors, names, where: str) -> tuple[np.ndarray, list[str]]:
    """``(n_test, n_params)`` relative errors (eq. 18) and the parameter names, from an array or
    an `IMPUMetrics`-like object (``relative_errors`` or ``errors``, plus ``names``)."""
    if not isinstance(errors, (np.ndarray, list, tuple)) and not hasattr(errors, "__array__"):
        obj = errors
        errors = getattr(obj, "relative_errors", None)
        if errors is None:
            errors = getattr(obj, "errors", None)
        if errors is None:
            raise ValueError(f"{where}: errors must be an (n_test, n_params) array or an IMPUMetrics with "
                             f"relative_errors; got {type(obj).__name__}")
        names = names if names is not None else getattr(obj, "names", None)
    errors = np.asarray(errors, dtype=float)
    if errors.ndim == 1:
        errors = errors[:, None]
    if errors.ndim != 2:
        raise ValueError(f"{where}: errors must have shape (n_test, n_params); got {errors.shape}")
    names = [f"p{j}" for j in range(errors.shape[1])] if names is None else [str(n) for n in names]
    if len(names) != errors.shape[1]:
        raise ValueError(f"{where}: {errors.shape[1]} parameters in errors but {len(names)} names {names}")
    return errors, names


def plot_impu_error_histograms(errors, names=None, *, bins=30, percent=True, title=""):
    """Histograms of the relative errors of inferred parameters, one panel per parameter
    (Kessels et al. 2023, Fig. 9). Each panel's title gives the paper's three metrics: the
    bias μ_ε (eq. 19), the sample standard deviation σ_ε (eq. 20) and the mean absolute
    relative error μ_|ε| (eq. 21).

    Args:
        errors: relative errors ε = (p̂ - p̄) / p̄ (eq. 18), ``(n_test, n_params)`` (fractions,
            not percent), or an `IMPUMetrics` (its ``relative_errors`` and ``names``).
        names: parameter names (default: the metrics' names, else p0, p1, ...).
        bins: histogram bins (number or edges).
        percent: show the errors in percent.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: errors of another shape, or names of another count.
    """
    errors, names = _impu_relative_errors(errors, names, "plot_impu_error_histograms")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    n = len(names)
    n_cols = min(n, 4)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(3.4 * n_cols, 2.9 * n_rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        e = errors[:, j][np.isfinite(errors[:, j])] * scale
        ax.hist(e, bins=bins, color="C0", alpha=0.8)
        ax.axvline(0.0, color="k", lw=0.8)
        sd = np.std(e, ddof=1) if e.size > 1 else np.nan
        ax.set(xlabel=f"relative error of {name}{unit}", ylabel="test samples" if j % n_cols == 0 else "",
               title=f"{name}: μ {np.mean(e):.2g}, σ {sd:.2g}, μ|ε| {np.mean(np.abs(e)):.2g}")
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"relative errors of the inferred parameters, {errors.shape[0]} test samples")
    fig.tight_layout()
    return fig


def plot_impu_error_plane(thetas, errors, names=None, *, plane=(0, 1), training=None, zones=None,
                          vmax=10.0, percent=True, title=""):
    """Absolute relative error of every test sample over a plane of the parameter space
    (Kessels et al. 2023, Figs. 10 and 16: the d1-d2 plane): one panel per inferred
    parameter, test samples coloured by |ε|, training samples as red plus signs, optional
    test-zone rectangles. Errors above ``vmax`` are drawn in orange (the paper's Fig. 16).

    Args:
        thetas: true parameters of the test samples, ``(n_test, n_params)`` (physical units).
        errors: their relative errors, ``(n_test, n_params)``, or an `IMPUMetrics`.
        names: parameter names (default: the metrics' names, else p0, p1, ...).
        plane: the two parameters spanning the plane, as indices or names.
        training: training parameters ``(n_train, n_params)`` to mark (None: none).
        zones: test zones to outline: ``{zone: [(x0, x1, y0, y1), ...]}`` rectangles in the
            plane's physical coordinates, ``zone`` a label such as 1..6.
        vmax: top of the colour scale, in the units shown (percent by default).
        percent: errors in percent.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: shapes that do not match, or an unknown plane parameter.
    """
    where = "plot_impu_error_plane"
    errors, names = _impu_relative_errors(errors, names, where)
    thetas = np.asarray(thetas, dtype=float)
    if thetas.shape != errors.shape:
        raise ValueError(f"{where}: thetas must have the errors' shape {errors.shape} (one true parameter "
                         f"vector per test sample); got {thetas.shape}")
    axes_index = []
    for p in plane:
        if isinstance(p, str):
            if p not in names:
                raise ValueError(f"{where}: unknown plane parameter {p!r}; known: {', '.join(names)}")
            p = names.index(p)
        if not 0 <= int(p) < len(names):
            raise ValueError(f"{where}: plane index {p} out of range for {len(names)} parameters")
        axes_index.append(int(p))
    if len(axes_index) != 2 or axes_index[0] == axes_index[1]:
        raise ValueError(f"{where}: plane must name two different parameters; got {plane!r}")
    ix, iy = axes_index
    scale, unit = (100.0, "%") if percent else (1.0, "")
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    cmap = plt.get_cmap("viridis").with_extremes(over="orange")
    norm = Normalize(0.0, vmax)
    n = len(names)
    n_cols = min(n, 2)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols, 3.8 * n_rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        sc = ax.scatter(thetas[:, ix], thetas[:, iy], c=np.abs(errors[:, j]) * scale, s=9, cmap=cmap, norm=norm)
        if training is not None:
            training = np.asarray(training, dtype=float)
            ax.plot(training[:, ix], training[:, iy], "+", color="red", ms=4, mew=0.8, label="training")
        for c, (zone, boxes) in enumerate((zones or {}).items()):
            for k, (x0, x1, y0, y1) in enumerate(boxes):
                ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, lw=1.3,
                                       ec=_ZONE_COLORS[c % 10], label=f"zone {zone}" if k == 0 else None))
        ax.set(xlabel=names[ix], ylabel=names[iy], title=f"|ε| of {name} [{unit}]" if unit else f"|ε| of {name}")
        fig.colorbar(sc, ax=ax, extend="max")
    if training is not None or zones:
        axes[0][0].legend(fontsize=7, loc="upper left", framealpha=0.7)
    fig.suptitle(title or f"absolute relative errors over the {names[ix]}-{names[iy]} plane")
    fig.tight_layout()
    return fig


def _impu_curves(values, n_sizes: int, where: str, what: str) -> dict[str, np.ndarray]:
    if not isinstance(values, dict):
        raise ValueError(f"{where}: {what} must be a dict {{label: array}}; got {type(values).__name__}")
    curves = {str(k): np.asarray(v, dtype=float) for k, v in values.items()}
    for label, v in curves.items():
        if v.ndim < 2 or v.shape[0] != n_sizes:
            raise ValueError(f"{where}: {what}[{label!r}] needs one row per training size ({n_sizes}); "
                             f"got shape {v.shape}")
    return curves


def plot_impu_error_versus_training_size(sizes, errors, names, *, percent=True, log=True, title=""):
    """Mean absolute relative error μ_|ε| (eq. 21) against the number of training samples
    n_s, one panel per parameter and one curve per feature type (Kessels et al. 2023, Fig. 15).

    Args:
        sizes: training-set sizes n_s, ``(n_sizes,)``.
        errors: ``{feature type: (n_sizes, n_params)}`` mean absolute relative errors
            (fractions); NaN leaves a gap.
        names: parameter names, ``n_params``.
        percent: show percent.
        log: logarithmic axes.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: curves of the wrong shape.
    """
    where = "plot_impu_error_versus_training_size"
    sizes = np.asarray(sizes, dtype=float)
    curves = _impu_curves(errors, sizes.size, where, "errors")
    names = [str(n) for n in names]
    for label, v in curves.items():
        if v.shape != (sizes.size, len(names)):
            raise ValueError(f"{where}: errors[{label!r}] must have shape (n_sizes={sizes.size}, "
                             f"n_params={len(names)}); got {v.shape}")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    n = len(names)
    n_cols = min(n, 2)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols, 3.4 * n_rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        for c, (label, v) in enumerate(curves.items()):
            ax.plot(sizes, v[:, j] * scale, "o-", ms=3.5, lw=1.3, color=f"C{c % 10}", label=label)
        if log:
            ax.set_xscale("log")
            if all(np.all(v[np.isfinite(v[:, j]), j] > 0) for v in curves.values()):
                ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:g}" for s in sizes], minor=False)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set(xlabel="training samples n_s", ylabel=f"μ|ε| of {name}{unit}", title=name)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or "mean absolute relative error versus training-set size")
    fig.tight_layout()
    return fig


def plot_impu_test_zones(sizes, zone_errors, names, *, zones=None, percent=True, log=True, title=""):
    """Mean absolute relative error per test zone against n_s (Kessels et al. 2023, Fig. 17):
    one panel per parameter, one colour per zone, one line style per feature type (solid for
    the first, e.g. RI (FBoI), dashed for the second, e.g. RI, ...).

    Args:
        sizes: training-set sizes n_s, ``(n_sizes,)``; a single size gives a bar chart.
        zone_errors: ``{feature type: (n_sizes, n_zones, n_params)}`` mean absolute relative
            errors (fractions) per zone; NaN for an empty zone.
        names: parameter names, ``n_params``.
        zones: zone labels, ``n_zones`` (default 1, 2, ...).
        percent: show percent.
        log: logarithmic axes.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: arrays of the wrong shape, or zone labels of another count.
    """
    where = "plot_impu_test_zones"
    sizes = np.asarray(sizes, dtype=float)
    curves = _impu_curves(zone_errors, sizes.size, where, "zone_errors")
    names = [str(n) for n in names]
    shapes = {v.shape for v in curves.values()}
    first = next(iter(curves.values()))
    if len(shapes) != 1 or first.ndim != 3 or first.shape[2] != len(names):
        raise ValueError(f"{where}: every zone_errors entry must have shape (n_sizes={sizes.size}, n_zones, "
                         f"n_params={len(names)}); got {sorted(shapes)}")
    n_zones = first.shape[1]
    zones = list(range(1, n_zones + 1)) if zones is None else list(zones)
    if len(zones) != n_zones:
        raise ValueError(f"{where}: {n_zones} zones in zone_errors but {len(zones)} zone labels")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    styles = ("-", "--", ":", "-.")
    n = len(names)
    n_cols = min(n, 2)
    n_rows = -(-n // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols, 3.4 * n_rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    width = 0.8 / len(curves)  # bar width when there is one training size
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        for f, (label, v) in enumerate(curves.items()):
            for z, zone in enumerate(zones):
                color = _ZONE_COLORS[z % 10]
                if sizes.size == 1:  # bars: zone groups, one bar per feature type
                    ax.bar(z + (f - (len(curves) - 1) / 2) * width, v[0, z, j] * scale,
                           width=width, color=color, alpha=1.0 if f == 0 else 0.5,
                           hatch=None if f == 0 else "//", label=f"zone {zone}, {label}")
                else:
                    ax.plot(sizes, v[:, z, j] * scale, styles[f % 4], marker="o", ms=3, lw=1.2, color=color,
                            label=f"zone {zone}, {label}")
        if sizes.size == 1:
            ax.set_xticks(range(n_zones), [f"zone {z}" for z in zones])
            if log:
                ax.set_yscale("log")
        else:
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.set_xticks(sizes, [f"{s:g}" for s in sizes], minor=False)
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel("training samples n_s")
        ax.set(ylabel=f"μ|ε| of {name}{unit}", title=name)
        ax.grid(alpha=0.3, which="both")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_ZONE_COLORS[z % 10], lw=2, label=f"zone {zone}") for z, zone in enumerate(zones)]
    handles += [Line2D([], [], color="k", ls=styles[f % 4], label=label) for f, label in enumerate(curves)]
    axes[0][0].legend(handles=handles, fontsize=7, ncol=2)
    fig.suptitle(title or "mean absolute relative error per test zone")
    fig.tight_layout()
    return fig


def plot_impu_updating(result, *, truth=True, title=""):
    """A digital-twin updating history (`jcalib.workflows.impu_updating.TwinUpdatingResult`):
    top, each parameter over the updates (inferred estimates as dots, the twin's parameters
    after each update as steps, the true parameters dashed when known, outside-range
    updates marked with a red cross), normalised by the twin's initial value; bottom, the
    twin's RMSE per output against each new measurement before and after its update.

    Args:
        result: a `TwinUpdatingResult` (or an object with its ``names``, ``output_names``,
            ``theta_initial``, ``theta_inferred``, ``theta_after``, ``theta_true``,
            ``outside_training_range``, ``rmse_before``, ``rmse_after``).
        truth: draw the true parameters when the result has them.
        title: figure title.

    Returns:
        The figure.
    """
    names, outputs = list(result.names), list(result.output_names)
    ref = np.asarray(result.theta_initial, dtype=float)
    inferred = np.asarray(result.theta_inferred, dtype=float) / ref
    after = np.asarray(result.theta_after, dtype=float) / ref
    flagged = np.asarray(result.outside_training_range, dtype=bool)
    steps = np.arange(1, after.shape[0] + 1)
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7.0, 6.4), sharex=True)
    for j, name in enumerate(names):
        color = f"C{j % 10}"
        ax.step(np.concatenate([[0], steps]), np.concatenate([[1.0], after[:, j]]), where="post", color=color,
                lw=1.5, label=f"{name} twin")
        ax.plot(steps, inferred[:, j], "o", ms=4, color=color, mfc="none")
        if flagged.any():
            ax.plot(steps[flagged], inferred[flagged, j], "x", color="red", ms=7, mew=1.5,
                    label="outside training range" if j == 0 else None)
        if truth and getattr(result, "theta_true", None) is not None:
            ax.plot(steps, np.asarray(result.theta_true, dtype=float)[:, j] / ref[j], "--", color=color, lw=1)
    ax.set(ylabel="parameter / initial value", title="parameters: twin (steps), IMPU estimates (o), truth (--)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    before = np.asarray(result.rmse_before, dtype=float)
    rmse_after = np.asarray(result.rmse_after, dtype=float)
    for i, name in enumerate(outputs):
        color = f"C{i % 10}"
        bx.semilogy(steps, before[:, i], "s--", ms=4, color=color, mfc="none", label=f"{name} before update")
        bx.semilogy(steps, rmse_after[:, i], "o-", ms=4, color=color, label=f"{name} after update")
    bx.set(xlabel="measured experiment", ylabel="RMSE against the measurement")
    bx.grid(alpha=0.3, which="both")
    bx.legend(fontsize=7, ncol=2)
    fig.suptitle(title or f"digital-twin updating, {after.shape[0]} experiments ({int(flagged.sum())} flagged)")
    fig.tight_layout()
    return fig


# --- amortized inference (jcalib.nn.bayesflow, jcalib.bayes.sbc, jcalib.bayes.recovery) -------------
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
    fig, axes = _grid_axes(n_params, 3.4, 3.2)
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
    fig, axes = _grid_axes(n_params, 3.4, 3.0)
    for j, ax in enumerate(axes.flat[:n_params]):
        ax.scatter(c[:, j], z[:, j], s=8, alpha=0.5, color=f"C{j % 10}")
        ax.axhspan(-2.0, 2.0, color="0.9", zorder=0)
        ax.set(xlim=(min(0.0, c[:, j].min()), 1.0), title=f"{result.names[j]}: mean contraction "
               f"{float(result.contraction[j]):.2f}", xlabel="posterior contraction", ylabel="posterior z-score")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "posterior z-score against contraction")
    fig.tight_layout()
    return fig


# iterative identification --------------------------------------------------------------------
__all__ += ["plot_identification", "plot_identification_recovery"]


def plot_identification(result, *, title: str = ""):
    """An `IdentificationResult` (`jcalib.workflows.iterative_identification`): every
    parameter on its normalised range (the paper's Fig. 13 in one panel): the interval (bar),
    the estimate (dot) and the truth (cross), coloured by step; names in red where the
    interval misses the truth. Returns the figure."""
    names = result.names
    lo_b = np.asarray(result.bounds)[:, 0]
    hi_b = np.asarray(result.bounds)[:, 1]
    scale = lambda v: (np.asarray(v) - lo_b) / (hi_b - lo_b)  # noqa: E731
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(names) + 1.4))
    y = np.arange(len(names))[::-1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, group in enumerate(result.groups):
        idx = [names.index(n) for n in group]
        c = colors[k % len(colors)]
        ax.hlines(y[idx], scale(result.lower)[idx], scale(result.upper)[idx], color=c, lw=4, alpha=0.45)
        ax.plot(scale(result.estimate)[idx], y[idx], "o", color=c, ms=5, label=f"step {k + 1}")
    if result.truth is not None:
        ax.plot(scale(result.truth), y, "kx", ms=6, label="truth")
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    if result.covered is not None:
        for tick, ok in zip(ax.get_yticklabels(), result.covered):
            tick.set_color("black" if ok else "red")
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("position in the parameter range")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    extra = "" if result.mean_relative_error is None else (
        f" (mean ER {result.mean_relative_error:.2f} %, {result.n_covered}/{len(names)} covered)")
    ax.set_title(title or f"{result.method} identification{extra}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_identification_recovery(result, *, max_points: int = 400, title: str = ""):
    """An `IdentificationResult`'s validation posterior means against the true parameters, one panel per parameter, with
    R² and NRMSE (the paper's Fig. 14). Returns the figure."""
    panels = [(step, j, name) for step in result.steps for j, name in enumerate(step.kept)]
    n_cols = min(5, len(panels))
    n_rows = -(-len(panels) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(2.6 * n_cols, 2.5 * n_rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (step, j, name) in zip(axes.flat, panels):
        t, e = step.val_truth[:max_points, j], step.val_estimate[:max_points, j]
        ax.plot(t, e, ".", ms=2.5, alpha=0.6)
        lo, hi = np.asarray(result.bounds)[result.names.index(name)]
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        v = step.validation.get(name, {})
        ax.set_title(f"{name} (step {step.index})\nR² {v.get('r2', np.nan):.3f}, NRMSE {v.get('nrmse', np.nan):.3f}",
                     fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle(title or f"{result.method}: validation recovery", fontsize=10)
    fig.tight_layout()
    return fig
