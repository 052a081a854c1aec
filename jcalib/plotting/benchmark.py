"""Figures of method benchmarks (`jcalib.benchmark`): runtime distributions, profiles, waterfalls."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jcalib.plotting._grid import grid_axes, plt

__all__ = ["plot_profiles", "plot_runtime_ecdf", "plot_waterfalls"]


def plot_runtime_ecdf(budgets, fractions: Mapping[str, np.ndarray], *, unit: str = "gradients", title=""):
    """COCO's empirical cumulative distribution of runtimes: per method, the fraction of
    (run, target) pairs reached within each budget (``budgets`` in ``unit``, log axis).
    Returns the figure."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for method, fraction in fractions.items():
        ax.step(budgets, fraction, where="post", label=method)
    ax.set(xscale="log", xlabel=f"budget ({unit})", ylabel="fraction of (run, target) pairs reached", ylim=(0, 1.02),
           title=title or f"runtime to target ({unit})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_profiles(taus, performance: Mapping[str, np.ndarray], alphas, data: Mapping[str, np.ndarray], *,
                  unit: str = "gradients", title=""):
    """Dolan-Moré performance profiles (fraction of problems within ``tau`` of the best method)
    beside Moré-Wild data profiles (fraction solved within ``alpha`` ``unit``, per ``n + 1`` in
    evaluations: simplex gradients), per method. Returns the figure."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for method in performance:
        axes[0].step(taus, performance[method], where="post", label=method)
        axes[1].step(alphas, data[method], where="post", label=method)
    axes[0].set(xscale="log", xlabel="performance ratio tau", ylabel="fraction of problems", ylim=(0, 1.02),
                title="performance profile")
    data_axis = f"{unit} / (n + 1)" if unit == "evaluations" else unit
    axes[1].set(xscale="log", xlabel=data_axis, ylabel="fraction of problems", ylim=(0, 1.02),
                title="data profile")
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_waterfalls(finals: Mapping[str, Mapping[str, np.ndarray]], best: Mapping[str, float], *, title=""):
    """One panel per problem: each method's final values minus the best known, sorted, against
    the run's rank (log axis; 1e-8 is added so that the best shows). Runs without a value are
    left out and counted in the legend. Returns the figure."""
    fig, axes = grid_axes(len(finals), width=4.2, height=3.2, max_cols=3)
    for ax, (problem, by_method) in zip(axes.flat, finals.items()):
        for method, values in by_method.items():
            values = np.sort(np.asarray(values, dtype=float))
            finite = np.isfinite(values)
            missing = f" ({int((~finite).sum())} without)" if not finite.all() else ""
            ax.plot(np.arange(1, finite.sum() + 1), values[finite] - best[problem] + 1e-8, "o-", ms=3,
                    label=method + missing)
        ax.set(yscale="log", xlabel="run (sorted)", ylabel="-log L - best", title=problem)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
