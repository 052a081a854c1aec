"""Figures of the IMPU results (jcalib.plotting, Kessels et al. 2023 Figs. 9, 10/16, 15, 17 and the
digital-twin history) on synthetic arrays; bad input."""

import types

import matplotlib.figure
import numpy as np
import pytest

from jcalib import plotting

NAMES = ("d1", "d2", "k1", "k2")
LOWER = np.array([1.5, 2.5e-4, 20.0, 0.05])
UPPER = np.array([4.5, 7.5e-4, 60.0, 0.15])


def _errors(n=200, seed=0):
    rng = np.random.default_rng(seed)
    thetas = LOWER + (UPPER - LOWER) * rng.uniform(size=(n, 4))
    return thetas, rng.normal(0.01, 0.03, (n, 4))


def test_error_histograms_give_the_paper_metrics():
    _, errors = _errors()
    fig = plotting.plot_impu_error_histograms(errors, NAMES)
    assert isinstance(fig, matplotlib.figure.Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 4
    for j, ax in enumerate(axes):
        heights = [p.get_height() for p in ax.patches]
        assert sum(heights) == errors.shape[0]  # every sample in one bin
        e = 100 * errors[:, j]
        title = ax.get_title()
        assert title.startswith(NAMES[j])
        # eqs. 19-21: bias, sample standard deviation, mean absolute error (percent)
        assert f"μ {np.mean(e):.2g}" in title and f"σ {np.std(e, ddof=1):.2g}" in title
        assert f"μ|ε| {np.mean(np.abs(e)):.2g}" in title
        assert "[%]" in ax.get_xlabel()


def test_error_histograms_of_a_metrics_object():
    _, errors = _errors(50)
    metrics = types.SimpleNamespace(relative_errors=errors, names=NAMES)
    fig = plotting.plot_impu_error_histograms(metrics, percent=False)
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == list(NAMES)
    with pytest.raises(ValueError, match="4 parameters in errors but 3 names"):
        plotting.plot_impu_error_histograms(errors, NAMES[:3])
    with pytest.raises(ValueError, match="NetworkMetrics with relative_errors; got object"):
        plotting.plot_impu_error_histograms(object())


def test_error_plane_with_training_points_and_zones():
    thetas, errors = _errors()
    training = LOWER + (UPPER - LOWER) * np.random.default_rng(1).uniform(size=(30, 4))
    zones = {1: [(1.5, 2.7, 2.5e-4, 4.5e-4)], 2: [(2.7, 3.3, 2.5e-4, 4.5e-4), (1.5, 2.7, 4.5e-4, 5.5e-4)]}
    fig = plotting.plot_impu_error_plane(thetas, errors, NAMES, plane=("d1", "d2"), training=training, zones=zones)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 4 and len(fig.axes) == 8  # a colour bar per panel
    for j, ax in enumerate(panels):
        scatter = ax.collections[0]
        np.testing.assert_allclose(scatter.get_offsets(), thetas[:, :2])
        np.testing.assert_allclose(scatter.get_array(), 100 * np.abs(errors[:, j]))
        np.testing.assert_array_equal(ax.lines[0].get_xdata(), training[:, 0])
        assert len(ax.patches) == 3  # three zone rectangles
        assert ax.get_xlabel() == "d1" and ax.get_ylabel() == "d2"
    # errors above vmax (10 %) are orange, as in the paper's Fig. 16
    cmap = panels[0].collections[0].get_cmap()
    assert cmap.get_over()[:3] == pytest.approx(matplotlib.colors.to_rgb("orange"))


def test_error_plane_bad_input():
    thetas, errors = _errors(20)
    with pytest.raises(ValueError, match="unknown plane parameter 'x'; known: d1, d2, k1, k2"):
        plotting.plot_impu_error_plane(thetas, errors, NAMES, plane=("x", "d2"))
    with pytest.raises(ValueError, match="two different parameters"):
        plotting.plot_impu_error_plane(thetas, errors, NAMES, plane=(1, 1))
    with pytest.raises(ValueError, match=r"thetas must have the errors' shape \(20, 4\).*got \(19, 4\)"):
        plotting.plot_impu_error_plane(thetas[:19], errors, NAMES)


def test_error_versus_training_size():
    sizes = np.array([50, 100, 200, 500, 1000])
    curves = {"RI-FBoI": np.outer(1 / np.sqrt(sizes), [1, 2, 3, 4]),
              "TE": np.outer(np.full(sizes.size, 0.1), [1, 1, 1, 1])}
    curves["TE"][2, 0] = np.nan  # a size not trained: a gap
    fig = plotting.plot_impu_error_versus_training_size(sizes, curves, NAMES)
    axes = fig.axes
    assert len(axes) == 4
    for j, ax in enumerate(axes):
        assert [line.get_label() for line in ax.lines] == ["RI-FBoI", "TE"]
        np.testing.assert_allclose(ax.lines[0].get_ydata(), 100 * curves["RI-FBoI"][:, j])
        np.testing.assert_array_equal(ax.lines[0].get_xdata(), sizes)
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match=r"errors\['TE'\] must have shape \(n_sizes=5, n_params=4\)"):
        plotting.plot_impu_error_versus_training_size(sizes, {"TE": np.ones((5, 3))}, NAMES)
    with pytest.raises(ValueError, match=r"needs one row per training size \(5\)"):
        plotting.plot_impu_error_versus_training_size(sizes, {"TE": np.ones((4, 4))}, NAMES)
    with pytest.raises(ValueError, match="must be a dict"):
        plotting.plot_impu_error_versus_training_size(sizes, np.ones((5, 4)), NAMES)


def test_test_zones_lines_and_bars():
    sizes = np.array([100, 300, 1000])
    rng = np.random.default_rng(2)
    zone_errors = {"RI-FBoI": rng.uniform(0.01, 0.1, (3, 6, 4)), "RI": rng.uniform(0.05, 0.3, (3, 6, 4))}
    fig = plotting.plot_impu_test_zones(sizes, zone_errors, NAMES)
    for j, ax in enumerate(fig.axes):
        assert len(ax.lines) == 2 * 6  # two feature types x six zones
        styles = {line.get_linestyle() for line in ax.lines}
        assert styles == {"-", "--"}
        np.testing.assert_allclose(ax.lines[7].get_ydata(), 100 * zone_errors["RI"][:, 1, j])
    # one training size: grouped bars, one per zone and feature type
    fig = plotting.plot_impu_test_zones([645], {k: v[:1] for k, v in zone_errors.items()}, NAMES)
    ax = fig.axes[0]
    assert len(ax.patches) == 12
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"zone {z}" for z in range(1, 7)]
    heights = sorted(p.get_height() for p in ax.patches)
    np.testing.assert_allclose(heights, np.sort(100 * np.concatenate([v[0, :, 0] for v in zone_errors.values()])))
    with pytest.raises(ValueError, match="6 zones in zone_errors but 2 zone labels"):
        plotting.plot_impu_test_zones(sizes, zone_errors, NAMES, zones=(1, 2))
    with pytest.raises(ValueError, match=r"shape \(n_sizes=3, n_zones, n_params=4\)"):
        plotting.plot_impu_test_zones(sizes, {"RI": np.ones((3, 6))}, NAMES)


def test_updating_history():
    n = 6
    initial = np.array([3.0, 5e-4, 40.0, 0.1])
    truth = initial * np.linspace(1.0, 1.3, n)[:, None]
    inferred = truth * 1.02
    flagged = np.array([False, False, False, False, True, False])
    after = inferred.copy()
    after[4] = after[3]  # the flagged update is not taken
    result = types.SimpleNamespace(
        names=NAMES, output_names=("y1", "y2"), theta_initial=initial, theta_inferred=inferred,
        theta_after=after, theta_true=truth, outside_training_range=flagged,
        rmse_before=np.full((n, 2), 2e-3), rmse_after=np.full((n, 2), 1e-3))
    fig = plotting.plot_impu_updating(result)
    top, bottom = fig.axes
    steps = [line for line in top.lines if line.get_drawstyle() == "steps-post"]
    assert len(steps) == 4
    np.testing.assert_allclose(steps[0].get_ydata(), np.concatenate([[1.0], after[:, 0] / initial[0]]))
    crosses = [line for line in top.lines if line.get_marker() == "x"]
    assert len(crosses) == 4 and all(len(c.get_xdata()) == 1 and c.get_xdata()[0] == 5 for c in crosses)
    assert len(bottom.lines) == 4 and bottom.get_yscale() == "log"
    assert "1 flagged" in fig._suptitle.get_text()
