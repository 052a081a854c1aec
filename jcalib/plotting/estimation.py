"""Figures of least-squares estimation results (`jcalib.estimation`)."""

from __future__ import annotations

import numpy as np

from jcalib.plotting._grid import plt
from jcalib.plotting.simulation import draw_outputs, plot_simulation
from jcalib.problems import JointProblem

__all__ = ["plot_cost_versus_parameters", "plot_fit", "plot_multistart_waterfall", "plot_profile", "plot_residuals"]


def plot_multistart_waterfall(result, *, title=""):
    """Waterfall plot of a multistart (`jcalib.estimation.multistart.multistart`): the
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
    ax.set(xlabel="start (sorted by final loss)", ylabel="final loss", yscale="log",
           title=title or f"multistart: {result.n_simulations} simulations")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_fit(problem, result, *, n_dense=200, title="", units=None, time_unit=""):
    """Fit versus data: the model at ``result``'s estimate (an `EstimationResult` of
    ``problem``) with the measurements, one panel per output (wraps `plot_simulation`); for a
    `jcalib.problems.JointProblem`, one row of panels per experiment.

    ``n_dense`` points between the first and last measurement time give smooth curves (one
    extra compile of the re-timed model); None plots at the measurement times only."""
    import jax.numpy as jnp

    z = jnp.asarray(np.asarray(result.theta_internal))
    label = f"{result.method} fit (loss {result.loss:.3g})"
    if not isinstance(problem, JointProblem):
        ts, values = _fit_curve(problem, z, n_dense)
        return plot_simulation(ts, {label: values}, problem.model.output_names,
                               data=problem.measurements, title=title, units=units,
                               time_unit=time_unit)
    n_out = max(p.model.n_outputs for p in problem.experiment_problems)
    fig, axes = plt.subplots(problem.n_experiments, n_out, figsize=(3.8 * n_out, 2.9 * problem.n_experiments),
                             squeeze=False)
    for k, (name, single) in enumerate(zip(problem.experiment_names, problem.experiment_problems)):
        ts, values = _fit_curve(single, z[problem.experiment_columns(k)], n_dense)
        draw_outputs(list(axes[k]), ts, {label: values}, single.model.output_names, data=single.measurements,
                     units=units, time_unit=time_unit)
        axes[k][0].set_title(name, fontsize=9, loc="left")
        for ax in axes[k][single.model.n_outputs:]:
            ax.set_visible(False)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _fit_curve(problem, z, n_dense):
    """(times, outputs) of a single-experiment problem at internal ``z``: dense or at the
    measurement times."""
    import equinox as eqx

    ts = np.asarray(problem.measurements.ts)
    if not n_dense:
        return ts, np.asarray(problem.simulate(z))  # the problem's compiled solve
    ts = np.linspace(ts[0], ts[-1], int(n_dense))
    model = problem.model.with_times(ts)
    return ts, np.asarray(eqx.filter_jit(lambda m, th: m.simulate(th))(model, problem.theta_full(z)))


def plot_residuals(problem, result, *, title=""):
    """Weighted residuals at ``result``'s estimate over time, one marker series per output;
    for a `jcalib.problems.JointProblem`, one panel per experiment."""
    import jax.numpy as jnp

    z = jnp.asarray(np.asarray(result.theta_internal))
    r = np.asarray(problem.residuals(z))
    if isinstance(problem, JointProblem):
        parts = [(name, single, r[rows]) for name, single, rows in
                 zip(problem.experiment_names, problem.experiment_problems, problem.experiment_rows)]
    else:
        parts = [("", problem, r)]
    fig, axes = plt.subplots(len(parts), 1, figsize=(6, 3.0 * len(parts) + 0.6), squeeze=False)
    for ax, (name, single, rk) in zip(axes[:, 0], parts):
        index = np.asarray(single.observed_index)
        n_out = single.measurements.n_outputs
        rows, cols = index // n_out, index % n_out
        ts = np.asarray(single.measurements.ts)
        for j, output in enumerate(single.model.output_names):
            sel = cols == j
            if sel.any():
                ax.plot(ts[rows[sel]], rk[sel], "o", ms=4, label=output)
        ax.axhline(0.0, color="gray", lw=1)
        ax.set(xlabel="t", ylabel=f"residual ({problem.weighting})")
        if name:
            ax.set_title(name, fontsize=9, loc="left")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"residuals, loss {float(np.mean(r**2)):.3g}")
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
