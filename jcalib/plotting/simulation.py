"""Figures of simulated trajectories (`jcalib.model`): one panel per output."""

from __future__ import annotations

import numpy as np

from jcalib.plotting._grid import grid_axes

__all__ = ["plot_simulation"]


def plot_simulation(ts, values, output_names, *, data=None, title="", units=None, time_unit=""):
    """One panel per output (at most 4 per row): simulated curves ``values`` (n_times,
    n_outputs) or a dict ``{label: values}``, plus optional measurements (an object with
    ``ts``, ``values``, ``mask``) as markers. Returns the figure."""
    fig, axes = grid_axes(len(output_names), width=4.2, height=3.4)
    draw_outputs(list(axes.flat), ts, values, output_names, data=data, units=units, time_unit=time_unit)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def draw_outputs(axes, ts, values, output_names, *, data=None, units=None, time_unit=""):
    """Draw `plot_simulation`'s panels into ``axes`` (one per output, in order)."""
    curves = values if isinstance(values, dict) else {"model": values}
    ts = np.asarray(ts)
    for j, (ax, name) in enumerate(zip(axes, output_names)):
        for label, y in curves.items():
            ax.plot(ts, np.asarray(y)[:, j], "-", lw=1.5, label=label)
        if data is not None:
            mask = np.ones_like(data.values, bool) if data.mask is None else np.asarray(data.mask)
            ax.plot(np.asarray(data.ts)[mask[:, j]], np.asarray(data.values)[mask[:, j], j],
                    "o", ms=4, mfc="none", label="data")
        unit = f" [{units[j]}]" if units else ""
        ax.set(xlabel=f"t [{time_unit}]" if time_unit else "t", ylabel=f"{name}{unit}")
        ax.grid(alpha=0.3)
