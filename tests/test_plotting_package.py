"""The jcalib.plotting package: one shared panel grid (`_grid.grid_axes`) and an __init__ that only re-exports
the figure functions of its modules (one per subpackage whose results they draw)."""

import importlib
import inspect

import numpy as np
import pytest

from jcalib import plotting
from jcalib.plotting._grid import grid_axes

MODULES = ("bayes", "estimation", "nn", "sensitivity", "simulation", "workflows")


@pytest.mark.parametrize(("n", "max_cols", "shape"), [(1, 4, (1, 1)), (4, 4, (1, 4)), (5, 4, (2, 4)), (5, 2, (3, 2)),
                                                       (7, 5, (2, 5))])
def test_grid_axes_layout(n, max_cols, shape):
    fig, axes = grid_axes(n, width=3.0, height=2.0, max_cols=max_cols, extra_width=0.5)
    assert axes.shape == shape
    np.testing.assert_allclose(fig.get_size_inches(), (3.0 * shape[1] + 0.5, 2.0 * shape[0]))
    visible = [ax.get_visible() for ax in axes.flat]
    assert visible == [True] * n + [False] * (axes.size - n)  # the panels come first, row by row


def test_grid_axes_passes_subplot_options():
    _, axes = grid_axes(3, width=3.0, height=2.0, sharex=True)
    axes.flat[0].set_xlim(2.0, 5.0)
    assert axes.flat[2].get_xlim() == (2.0, 5.0)


def test_grid_axes_refuses_no_panels():
    with pytest.raises(ValueError, match=r"grid_axes: n must be at least 1 panel; got 0"):
        grid_axes(0, width=3.0, height=2.0)
    with pytest.raises(ValueError, match=r"grid_axes: max_cols must be at least 1; got 0"):
        grid_axes(3, width=3.0, height=2.0, max_cols=0)


def test_figures_with_panels_use_the_grid():
    """A figure made through grid_axes keeps its layout: 5 outputs in rows of 4, the last 3 cells hidden."""
    ts = np.linspace(0.0, 1.0, 5)
    fig = plotting.plot_simulation(ts, np.ones((5, 5)), list("abcde"))
    assert [ax.get_visible() for ax in fig.axes] == [True] * 5 + [False] * 3
    np.testing.assert_allclose(fig.get_size_inches(), (4.2 * 4, 3.4 * 2))


def test_init_only_reexports_the_modules():
    exported = set()
    for name in MODULES:
        module = importlib.import_module(f"jcalib.plotting.{name}")
        assert not exported & set(module.__all__), f"{name} exports a name another module exports"
        exported |= set(module.__all__)
        for public in module.__all__:
            assert getattr(module, public).__module__ == module.__name__  # defined there, not imported
    assert set(plotting.__all__) == exported
    for public in plotting.__all__:
        assert inspect.isfunction(getattr(plotting, public))
    own = {n for n, v in vars(plotting).items() if inspect.isfunction(v) and v.__module__ == plotting.__name__}
    assert not own, f"jcalib/plotting/__init__.py defines {own}; it should only re-export"
