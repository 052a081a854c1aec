"""Figures of the neural-surrogate results (jcalib.plotting): training curves, reconstructions
against the simulation, test error against the training-set size; bad input."""

import matplotlib.figure
import numpy as np
import pytest

from jcalib import plotting

TS = np.linspace(0.0, 10.0, 25)
NAMES = ("T1", "T3", "T5")


def _trajectories(n=6, seed=0):
    rng = np.random.default_rng(seed)
    truth = np.sin(TS[None, :, None] * rng.uniform(0.5, 1.5, (n, 1, len(NAMES))))
    return truth, truth + 0.05 * rng.standard_normal(truth.shape)


def _history(n_epochs=12):
    e = np.arange(1, n_epochs + 1)
    return {"train_loss": list(1.0 / e), "val_loss": list(1.2 / e), "train_kl": list(0.1 * e),
            "val_kl": list(0.1 * e), "learning_rate": [1e-3] * 8 + [2e-4] * (n_epochs - 8),
            "epoch_time_s": [0.1] * n_epochs}


def test_training_history():
    fig = plotting.plot_training_history(_history(), metrics=("loss", "kl"))
    assert isinstance(fig, matplotlib.figure.Figure)
    ax, lr_ax = fig.axes
    assert len(ax.lines) == 4 and len(lr_ax.lines) == 1  # train/val of 2 metrics; learning rate
    assert [line.get_linestyle() for line in ax.lines] == ["-", "--", "-", "--"]
    assert ax.get_xlabel() == "epoch" and ax.get_yscale() == "log"
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), _history()["val_loss"])


def test_training_history_of_a_result_marks_the_best_epoch():
    class Result:  # the attributes of a TrainingResult that the plot reads
        history = {k: v for k, v in _history().items() if not k.startswith("val")}
        best_epoch = 7

    fig = plotting.plot_training_history(Result())
    ax = fig.axes[0]
    assert len(ax.lines) == 2  # train loss, best-epoch line
    assert list(ax.lines[1].get_xdata()) == [7, 7]
    with pytest.raises(ValueError, match="no train_recon or val_recon.*known metrics: kl, loss"):
        plotting.plot_training_history(_history(), metrics=("recon",))


def test_reconstructions():
    truth, predicted = _trajectories()
    fig = plotting.plot_reconstructions(TS, truth, predicted, NAMES, samples=3, units=["degC"] * 3)
    assert isinstance(fig, matplotlib.figure.Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == len(NAMES)
    for j, ax in enumerate(axes):
        assert len(ax.lines) == 2 * 3  # truth and surrogate for each shown sample
        np.testing.assert_array_equal(ax.lines[0].get_ydata(), truth[0, :, j])
        np.testing.assert_array_equal(ax.lines[1].get_ydata(), predicted[0, :, j])
        mae = np.mean(np.abs(predicted - truth)[:, :, j])  # over all samples, not only those shown
        assert ax.get_title() == f"{NAMES[j]}: MAE {mae:.3g} [degC]"
        assert ax.get_ylabel() == f"{NAMES[j]} [degC]"
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["simulation", "surrogate"]


def test_reconstructions_chosen_samples_and_one_trajectory():
    truth, predicted = _trajectories()
    fig = plotting.plot_reconstructions(TS, truth, predicted, NAMES, samples=[5, 2])
    np.testing.assert_array_equal(fig.axes[1].lines[2].get_ydata(), truth[2, :, 1])
    fig = plotting.plot_reconstructions(TS, truth[0], predicted[0], NAMES, samples=10)
    assert len(fig.axes[0].lines) == 2
    with pytest.raises(ValueError, match=r"must both have shape \(n, n_times=25, n_outputs=3\)"):
        plotting.plot_reconstructions(TS, truth, predicted[:, :-1], NAMES)
    with pytest.raises(ValueError, match="n_outputs=2"):
        plotting.plot_reconstructions(TS, truth, predicted, NAMES[:2])


def test_mae_versus_training_size_one_curve():
    sizes = [32, 128, 512, 2048]
    fig = plotting.plot_mae_versus_training_size(sizes, [2.0, 0.6, 0.15, 0.08])
    assert isinstance(fig, matplotlib.figure.Figure)
    (ax,) = fig.axes
    assert len(ax.lines) == 1 and ax.get_legend() is None  # one curve, no best markers
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "training samples" and ax.get_ylabel() == "MAE"


def test_mae_versus_training_size_several_curves_with_best():
    sizes = [32, 128, 512]
    maes = {"latent 8": [2.0, 0.7, np.nan], "latent 64": [2.5, 0.5, 0.1]}
    fig = plotting.plot_mae_versus_training_size(sizes, maes, ylabel="MAE [K]")
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # two curves and the best markers
    np.testing.assert_array_equal(ax.lines[2].get_ydata(), [2.0, 0.5, 0.1])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["latent 8", "latent 64", "best"]
    fig = plotting.plot_mae_versus_training_size(sizes, np.ones((2, 3)), labels=["a", "b"], mark_best=False,
                                                 log=False)
    assert len(fig.axes[0].lines) == 2 and fig.axes[0].get_xscale() == "linear"
    with pytest.raises(ValueError, match="2 curves but 1 labels"):
        plotting.plot_mae_versus_training_size(sizes, np.ones((2, 3)), labels=["a"])
    with pytest.raises(ValueError, match=r"one value per size \(3\); curve 'b' has shape \(2,\)"):
        plotting.plot_mae_versus_training_size(sizes, {"a": [1, 2, 3], "b": [1, 2]})
