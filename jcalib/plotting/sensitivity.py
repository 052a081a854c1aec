"""Figures of sensitivity and identifiability results (`jcalib.sensitivity`)."""

from __future__ import annotations

import numpy as np

from jcalib.plotting._grid import grid_axes, plt
from jcalib.sensitivity.identifiability import IdentifiabilityReport

__all__ = [
    "plot_sensitivity_functions", "plot_sigma_min_spectrum", "plot_singular_values", "plot_sobol_over_time",
    "plot_sorted_indices",
]


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
    fig, axes = grid_axes(len(output_names), width=4.8, height=3.4, max_cols=2, extra_width=2.2, sharey=True)
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
    fig, axes = grid_axes(len(par_idx), width=3.1, height=2.3, max_cols=n_cols, sharex=True)
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


def plot_sigma_min_spectrum(report, *, threshold=None, relative=True, title="Smallest singular value spectrum"):
    """σ_min of the first j selected sensitivity columns against j (Bastogne 2007, Figure 8).

    Args:
        report: an `IdentifiabilityReport` (its correlation ranking is plotted).
        threshold: horizontal line of the subset threshold (default: the report's).
        relative: plot σ_min(j)/σ_min(1) (False: σ_min itself).
        title: axes title.

    Returns:
        The figure.

    Raises:
        ValueError: ``report`` is not an `IdentifiabilityReport`.
    """
    if not isinstance(report, IdentifiabilityReport):
        raise ValueError(
            f"plot_sigma_min_spectrum: report must be an IdentifiabilityReport (from "
            f"jcalib.sensitivity.identifiability); got {type(report).__name__}"
        )
    if threshold is None:
        threshold = report.sigma_min_threshold
    spectrum = np.asarray(report.correlation.sigma_min, dtype=float)
    names = list(report.correlation.order)
    values = spectrum / spectrum[0] if relative else spectrum
    x = np.arange(1, values.size + 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.38 * values.size + 1.5), 3.8))
    floor = np.min(values[values > 0]) / 10 if np.any(values > 0) else 1e-16
    ax.semilogy(x, np.maximum(values, floor), "o-")
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.legend(fontsize=8)
    ax.set_xticks(x, names, rotation=60, ha="right", fontsize=8)
    ax.set(xlabel="parameter added at step j", title=title,
           ylabel="σ_min(Σ_1..j) / σ_min(Σ_1)" if relative else "σ_min(Σ_1..j)")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
