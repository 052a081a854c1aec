"""Matplotlib figures for jcalib results (Agg backend unless the user chose one)."""

from __future__ import annotations

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["plot_simulation", "plot_singular_values"]


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
