"""Figures of the workflows' results (`jcalib.workflows`): twin updating, iterative identification."""

from __future__ import annotations

import numpy as np

from jcalib.plotting._grid import grid_axes, plt

__all__ = ["plot_identification", "plot_identification_recovery", "plot_impu_updating"]


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
    fig, axes = grid_axes(len(panels), width=2.6, height=2.5, max_cols=5)
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
