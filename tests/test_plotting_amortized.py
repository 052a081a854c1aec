"""Figures of amortized inference (jcalib.plotting): SBC rank histograms and ECDF differences,
recovery scatter with R² / NRMSE, contraction against z-score; bad input."""

import jax
import matplotlib.figure
import numpy as np
import pytest

from jcalib import plotting
from jcalib.bayes.recovery import recovery_metrics
from jcalib.bayes.sbc import sbc_ranks, sbc_result


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    truths = rng.standard_normal((n, 2))
    draws = truths[:, None, :] * 0.8 + 0.4 * rng.standard_normal((n, 49, 2))
    return truths, draws


def test_plot_sbc():
    truths, draws = _data()
    result = sbc_result(jax.random.key(0), sbc_ranks(draws, truths), 49, ("a", "b"))
    fig = plotting.plot_sbc(result)
    assert isinstance(fig, matplotlib.figure.Figure)
    top = fig.axes[0]
    assert top.get_title().startswith("a: p = ")
    np.testing.assert_allclose(fig.axes[2].lines[0].get_ydata(), result.ecdf[0] - result.band.z)


def test_plot_recovery_and_contraction():
    truths, draws = _data()
    result = recovery_metrics(truths, draws, names=("a", "b"))
    fig = plotting.plot_recovery(result)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2
    assert f"R² = {result.r2[0]:.3f}" in axes[0].get_title()
    assert f"NRMSE = {result.nrmse[0]:.3f}" in axes[0].get_title()
    fig = plotting.plot_recovery(truths, draws.mean(1), draws.std(1), ["a", "b"])
    assert "R² =" in fig.axes[1].get_title()
    fig = plotting.plot_contraction(result)
    assert fig.axes[0].get_xlabel() == "posterior contraction"
    with pytest.raises(ValueError, match="3 names for 2 parameters"):
        plotting.plot_recovery(truths, draws.mean(1), None, ["a", "b", "c"])
    with pytest.raises(ValueError, match="arrays of one shape"):
        plotting.plot_recovery(truths, draws.mean(1)[:5])
