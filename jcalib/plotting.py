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
           "plot_singular_values", "plot_sobol_over_time", "plot_sorted_indices"]


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
