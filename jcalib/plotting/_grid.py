"""What every figure module shares: the Agg backend (unless the user chose one) and the grid of panels."""

from __future__ import annotations

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)

__all__ = ["grid_axes", "plt"]


def grid_axes(n: int, *, width: float, height: float, max_cols: int = 4, extra_width: float = 0.0,
              **subplots_kw):
    """A figure with ``n`` panels in rows of at most ``max_cols``, the unused cells of the last row hidden.

    Args:
        n: number of panels.
        width, height: size of one panel in inches.
        max_cols: panels per row at the most.
        extra_width: inches added to the figure's width (room for labels or a legend outside the grid).
        **subplots_kw: passed on to `matplotlib.pyplot.subplots` (e.g. ``sharex=True``).

    Returns:
        ``(figure, axes)``, the axes a 2-D array ``(n_rows, n_cols)`` whatever ``n``; the panels are
        ``axes.flat[:n]``, row by row.

    Raises:
        ValueError: ``n`` or ``max_cols`` below 1.
    """
    if int(n) < 1:
        raise ValueError(f"grid_axes: n must be at least 1 panel; got {n} (nothing to plot: pass at least one "
                         f"output or parameter)")
    if int(max_cols) < 1:
        raise ValueError(f"grid_axes: max_cols must be at least 1; got {max_cols}")
    n_cols = min(int(n), int(max_cols))
    n_rows = -(-int(n) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width * n_cols + extra_width, height * n_rows), squeeze=False,
                             **subplots_kw)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes
