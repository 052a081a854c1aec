"""Figures of neural-network results (`jcalib.nn`): training curves, surrogates, IMPU errors."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import NullFormatter

from jcalib.plotting._grid import grid_axes, plt

__all__ = [
    "plot_impu_error_histograms", "plot_impu_error_plane", "plot_impu_error_versus_training_size",
    "plot_impu_test_zones", "plot_mae_versus_training_size", "plot_reconstructions", "plot_training_history",
]

_ZONE_COLORS = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9")  # one colour per IMPU test zone


def plot_training_history(history, *, metrics=("loss",), log=True, title=""):
    """Training curves of a `jcalib.nn.training.TrainingResult` (or its ``history`` dict):
    ``train_<metric>`` solid and ``val_<metric>`` dashed per epoch, one colour per metric,
    the learning rate on a second axis (dotted, grey) and the best validation epoch marked.

    Args:
        history: a `TrainingResult` or its ``history`` (per-epoch lists).
        metrics: names without the ``train_``/``val_`` prefix (``"loss"``, and for a PELS-VAE
            ``"reconstruction"``, ``"kl"``, ``"student"``, ``"generation"``).
        log: logarithmic loss axis (used only when every plotted value is positive).
        title: axes title.

    Returns:
        The figure.
    """
    best_epoch = getattr(history, "best_epoch", None)
    history = getattr(history, "history", history)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    plotted = []
    for c, name in enumerate(metrics):
        found = False
        for split, style in (("train", "-"), ("val", "--")):
            values = history.get(f"{split}_{name}")
            if values is None:
                continue
            values = np.asarray(values, dtype=float)
            ax.plot(np.arange(1, values.size + 1), values, style, color=f"C{c}", lw=1.3,
                    label=f"{split} {name}")
            plotted.append(values)
            found = True
        if not found:
            known = sorted({k.split("_", 1)[1] for k in history if k.startswith(("train_", "val_"))})
            raise ValueError(f"plot_training_history: no train_{name} or val_{name} in the history; "
                             f"known metrics: {', '.join(known)}")
    if best_epoch:
        ax.axvline(best_epoch, color="k", ls=":", lw=1, label=f"best epoch {best_epoch}")
    if log and all(np.all(v[np.isfinite(v)] > 0) for v in plotted):
        ax.set_yscale("log")
    ax.set(xlabel="epoch", ylabel="loss", title=title or f"training, {len(plotted[0])} epochs")
    ax.grid(alpha=0.3, which="both")
    if "learning_rate" in history:
        lr_ax = ax.twinx()
        lr = np.asarray(history["learning_rate"], dtype=float)
        lr_ax.plot(np.arange(1, lr.size + 1), lr, ":", color="gray", lw=1.2)
        lr_ax.set_yscale("log")
        lr_ax.set_ylabel("learning rate", color="gray")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reconstructions(ts, truth, predicted, output_names, *, samples=4,
                         labels=("simulation", "surrogate"), units=None, time_unit="", title=""):
    """A surrogate against the simulated model for a few parameter sets (Zhang & Mikelsons
    2023, Fig. 5; Aka et al. 2023, Fig. 8): one panel per output (at most 4 per row), each
    shown sample in its own colour, ``truth`` solid and ``predicted`` dashed. Each panel's
    title gives the MAE of that output over all samples passed.

    Args:
        ts: times, ``(n_times,)``.
        truth: simulated trajectories, ``(n, n_times, n_outputs)`` (or one, ``(n_times,
            n_outputs)``).
        predicted: the surrogate's trajectories of the same parameter sets, same shape.
        output_names: labels of the last axis.
        samples: how many samples to draw (the first ones), or their indices.
        labels: legend names of the two line styles.
        units, time_unit, title: labels.

    Returns:
        The figure.

    Raises:
        ValueError: ``truth`` and ``predicted`` of other shapes, or not matching ``ts`` and
            ``output_names``.
    """
    truth = np.asarray(truth, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    truth = truth[None] if truth.ndim == 2 else truth
    predicted = predicted[None] if predicted.ndim == 2 else predicted
    ts = np.asarray(ts)
    n_out = len(output_names)
    expected = (ts.size, n_out)
    if truth.ndim != 3 or truth.shape[1:] != expected or predicted.shape != truth.shape:
        raise ValueError(f"plot_reconstructions: truth and predicted must both have shape (n, n_times={ts.size}, "
                         f"n_outputs={n_out}); got {truth.shape} and {predicted.shape}")
    index = np.arange(min(int(samples), truth.shape[0])) if np.ndim(samples) == 0 else np.asarray(samples, int)
    mae = np.mean(np.abs(predicted - truth), axis=(0, 1))
    fig, axes = grid_axes(n_out, width=4.2, height=3.4)
    for j, (ax, name) in enumerate(zip(axes.flat, output_names)):
        for c, i in enumerate(index):
            ax.plot(ts, truth[i, :, j], "-", color=f"C{c % 10}", lw=1.5)
            ax.plot(ts, predicted[i, :, j], "--", color=f"C{c % 10}", lw=1.5)
        unit = f" [{units[j]}]" if units else ""
        ax.set(xlabel=f"t [{time_unit}]" if time_unit else "t", ylabel=f"{name}{unit}",
               title=f"{name}: MAE {mae[j]:.3g}{unit}")
        ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="k", ls="-", label=labels[0]),
               Line2D([], [], color="k", ls="--", label=labels[1])]
    axes[0][0].legend(handles=handles, fontsize=8)
    fig.suptitle(title or f"{labels[1]} versus {labels[0]}, {index.size} of {truth.shape[0]} samples")
    fig.tight_layout()
    return fig


def plot_mae_versus_training_size(sizes, maes, *, labels=None, mark_best=None, log=True,
                                  ylabel="MAE", title=""):
    """Test error against the number of training samples (Aka et al. 2023, Fig. 6): one
    curve per network configuration (or per test set, or per error measure).

    Args:
        sizes: training-set sizes, ``(n_sizes,)``.
        maes: errors, ``(n_sizes,)`` for one curve, ``(n_curves, n_sizes)``, or
            ``{label: (n_sizes,)}``; NaN leaves a gap (a size not trained).
        labels: curve labels when ``maes`` is an array.
        mark_best: star the smallest error at each size (as the paper marks the best
            hyperparameters); default: when there are several curves.
        log: logarithmic axes (base 2 for the sizes).
        ylabel, title: labels.

    Returns:
        The figure.

    Raises:
        ValueError: a curve whose length differs from ``sizes``, or labels of another count.
    """
    sizes = np.asarray(sizes, dtype=float)
    if isinstance(maes, dict):
        curves = {str(k): np.asarray(v, dtype=float) for k, v in maes.items()}
    else:
        values = np.atleast_2d(np.asarray(maes, dtype=float))
        if labels is None:
            labels = [None] if values.shape[0] == 1 else [f"curve {i}" for i in range(values.shape[0])]
        if len(labels) != values.shape[0]:
            raise ValueError(f"plot_mae_versus_training_size: {values.shape[0]} curves but {len(labels)} labels")
        curves = dict(zip(labels, values))
    for label, v in curves.items():
        if v.shape != sizes.shape:
            raise ValueError(f"plot_mae_versus_training_size: every curve needs one value per size "
                             f"({sizes.size}); curve {label!r} has shape {v.shape}")
    fig, ax = plt.subplots(figsize=(5.4, 3.8))
    for c, (label, v) in enumerate(curves.items()):
        ax.plot(sizes, v, "o-", ms=4, color=f"C{c % 10}", label=label)
    if mark_best is None:
        mark_best = len(curves) > 1
    if mark_best:
        stacked = np.stack(list(curves.values()))
        has = np.any(np.isfinite(stacked), axis=0)
        best = np.full(sizes.shape, np.nan)
        best[has] = np.nanmin(stacked[:, has], axis=0)
        ax.plot(sizes, best, "*", ms=13, mfc="none", mec="k", label="best")
    if log:
        ax.set_xscale("log", base=2)
        if all(np.all(v[np.isfinite(v)] > 0) for v in curves.values()):
            ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{s:g}" for s in sizes])
    ax.set(xlabel="training samples", ylabel=ylabel, title=title or f"{ylabel} versus training-set size")
    if any(label is not None for label in curves) or mark_best:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def _impu_relative_errors(errors, names, where: str) -> tuple[np.ndarray, list[str]]:
    """``(n_test, n_params)`` relative errors (eq. 18) and the parameter names, from an array or
    a `jcalib.nn.NetworkMetrics`-like object (``relative_errors`` or ``errors``, plus ``names``)."""
    if not isinstance(errors, (np.ndarray, list, tuple)) and not hasattr(errors, "__array__"):
        obj = errors
        errors = getattr(obj, "relative_errors", None)
        if errors is None:
            errors = getattr(obj, "errors", None)
        if errors is None:
            raise ValueError(f"{where}: errors must be an (n_test, n_params) array or a NetworkMetrics with "
                             f"relative_errors; got {type(obj).__name__}")
        names = names if names is not None else getattr(obj, "names", None)
    errors = np.asarray(errors, dtype=float)
    if errors.ndim == 1:
        errors = errors[:, None]
    if errors.ndim != 2:
        raise ValueError(f"{where}: errors must have shape (n_test, n_params); got {errors.shape}")
    names = [f"p{j}" for j in range(errors.shape[1])] if names is None else [str(n) for n in names]
    if len(names) != errors.shape[1]:
        raise ValueError(f"{where}: {errors.shape[1]} parameters in errors but {len(names)} names {names}")
    return errors, names


def plot_impu_error_histograms(errors, names=None, *, bins=30, percent=True, title=""):
    """Histograms of the relative errors of inferred parameters, one panel per parameter
    (Kessels et al. 2023, Fig. 9). Each panel's title gives the paper's three metrics: the
    bias μ_ε (eq. 19), the sample standard deviation σ_ε (eq. 20) and the mean absolute
    relative error μ_|ε| (eq. 21).

    Args:
        errors: relative errors ε = (p̂ - p̄) / p̄ (eq. 18), ``(n_test, n_params)`` (fractions,
            not percent), or a `jcalib.nn.NetworkMetrics` (its ``relative_errors`` and ``names``).
        names: parameter names (default: the metrics' names, else p0, p1, ...).
        bins: histogram bins (number or edges).
        percent: show the errors in percent.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: errors of another shape, or names of another count.
    """
    errors, names = _impu_relative_errors(errors, names, "plot_impu_error_histograms")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    fig, axes = grid_axes(len(names), width=3.4, height=2.9)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        e = errors[:, j][np.isfinite(errors[:, j])] * scale
        ax.hist(e, bins=bins, color="C0", alpha=0.8)
        ax.axvline(0.0, color="k", lw=0.8)
        sd = np.std(e, ddof=1) if e.size > 1 else np.nan
        ax.set(xlabel=f"relative error of {name}{unit}", ylabel="test samples" if j % axes.shape[1] == 0 else "",
               title=f"{name}: μ {np.mean(e):.2g}, σ {sd:.2g}, μ|ε| {np.mean(np.abs(e)):.2g}")
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"relative errors of the inferred parameters, {errors.shape[0]} test samples")
    fig.tight_layout()
    return fig


def plot_impu_error_plane(thetas, errors, names=None, *, plane=(0, 1), training=None, zones=None,
                          vmax=10.0, percent=True, title=""):
    """Absolute relative error of every test sample over a plane of the parameter space
    (Kessels et al. 2023, Figs. 10 and 16: the d1-d2 plane): one panel per inferred
    parameter, test samples coloured by |ε|, training samples as red plus signs, optional
    test-zone rectangles. Errors above ``vmax`` are drawn in orange (the paper's Fig. 16).

    Args:
        thetas: true parameters of the test samples, ``(n_test, n_params)`` (physical units).
        errors: their relative errors, ``(n_test, n_params)``, or a `jcalib.nn.NetworkMetrics`.
        names: parameter names (default: the metrics' names, else p0, p1, ...).
        plane: the two parameters spanning the plane, as indices or names.
        training: training parameters ``(n_train, n_params)`` to mark (None: none).
        zones: test zones to outline: ``{zone: [(x0, x1, y0, y1), ...]}`` rectangles in the
            plane's physical coordinates, ``zone`` a label such as 1..6.
        vmax: top of the colour scale, in the units shown (percent by default).
        percent: errors in percent.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: shapes that do not match, or an unknown plane parameter.
    """
    where = "plot_impu_error_plane"
    errors, names = _impu_relative_errors(errors, names, where)
    thetas = np.asarray(thetas, dtype=float)
    if thetas.shape != errors.shape:
        raise ValueError(f"{where}: thetas must have the errors' shape {errors.shape} (one true parameter "
                         f"vector per test sample); got {thetas.shape}")
    axes_index = []
    for p in plane:
        if isinstance(p, str):
            if p not in names:
                raise ValueError(f"{where}: unknown plane parameter {p!r}; known: {', '.join(names)}")
            p = names.index(p)
        if not 0 <= int(p) < len(names):
            raise ValueError(f"{where}: plane index {p} out of range for {len(names)} parameters")
        axes_index.append(int(p))
    if len(axes_index) != 2 or axes_index[0] == axes_index[1]:
        raise ValueError(f"{where}: plane must name two different parameters; got {plane!r}")
    ix, iy = axes_index
    scale, unit = (100.0, "%") if percent else (1.0, "")
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    cmap = plt.get_cmap("viridis").with_extremes(over="orange")
    norm = Normalize(0.0, vmax)
    fig, axes = grid_axes(len(names), width=4.6, height=3.8, max_cols=2)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        sc = ax.scatter(thetas[:, ix], thetas[:, iy], c=np.abs(errors[:, j]) * scale, s=9, cmap=cmap, norm=norm)
        if training is not None:
            training = np.asarray(training, dtype=float)
            ax.plot(training[:, ix], training[:, iy], "+", color="red", ms=4, mew=0.8, label="training")
        for c, (zone, boxes) in enumerate((zones or {}).items()):
            for k, (x0, x1, y0, y1) in enumerate(boxes):
                ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, lw=1.3,
                                       ec=_ZONE_COLORS[c % 10], label=f"zone {zone}" if k == 0 else None))
        ax.set(xlabel=names[ix], ylabel=names[iy], title=f"|ε| of {name} [{unit}]" if unit else f"|ε| of {name}")
        fig.colorbar(sc, ax=ax, extend="max")
    if training is not None or zones:
        axes[0][0].legend(fontsize=7, loc="upper left", framealpha=0.7)
    fig.suptitle(title or f"absolute relative errors over the {names[ix]}-{names[iy]} plane")
    fig.tight_layout()
    return fig


def _impu_curves(sizes, values, names, where: str, what: str):
    """``(sizes, {label: curve}, names)`` as float arrays and strings, every curve with one row per size."""
    sizes = np.asarray(sizes, dtype=float)
    n_sizes = sizes.size
    if not isinstance(values, dict):
        raise ValueError(f"{where}: {what} must be a dict {{label: array}}; got {type(values).__name__}")
    curves = {str(k): np.asarray(v, dtype=float) for k, v in values.items()}
    for label, v in curves.items():
        if v.ndim < 2 or v.shape[0] != n_sizes:
            raise ValueError(f"{where}: {what}[{label!r}] needs one row per training size ({n_sizes}); "
                             f"got shape {v.shape}")
    return sizes, curves, [str(n) for n in names]


def plot_impu_error_versus_training_size(sizes, errors, names, *, percent=True, log=True, title=""):
    """Mean absolute relative error μ_|ε| (eq. 21) against the number of training samples
    n_s, one panel per parameter and one curve per feature type (Kessels et al. 2023, Fig. 15).

    Args:
        sizes: training-set sizes n_s, ``(n_sizes,)``.
        errors: ``{feature type: (n_sizes, n_params)}`` mean absolute relative errors
            (fractions); NaN leaves a gap.
        names: parameter names, ``n_params``.
        percent: show percent.
        log: logarithmic axes.
        title: figure title.

    Returns:
        The figure: one panel per parameter, one curve per feature type.

    Raises:
        ValueError: curves of the wrong shape.
    """
    where = "plot_impu_error_versus_training_size"
    sizes, curves, names = _impu_curves(sizes, errors, names, where, "errors")
    for label, v in curves.items():
        if v.shape != (sizes.size, len(names)):
            raise ValueError(f"{where}: errors[{label!r}] must have shape (n_sizes={sizes.size}, "
                             f"n_params={len(names)}); got {v.shape}")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    fig, axes = grid_axes(len(names), width=4.6, height=3.4, max_cols=2)
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        for c, (label, v) in enumerate(curves.items()):
            ax.plot(sizes, v[:, j] * scale, "o-", ms=3.5, lw=1.3, color=f"C{c % 10}", label=label)
        if log:
            ax.set_xscale("log")
            if all(np.all(v[np.isfinite(v[:, j]), j] > 0) for v in curves.values()):
                ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:g}" for s in sizes], minor=False)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(xlabel="training samples n_s", ylabel=f"μ|ε| of {name}{unit}", title=name)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or "mean absolute relative error versus training-set size")
    fig.tight_layout()
    return fig


def plot_impu_test_zones(sizes, zone_errors, names, *, zones=None, percent=True, log=True, title=""):
    """Mean absolute relative error per test zone against n_s (Kessels et al. 2023, Fig. 17):
    one panel per parameter, one colour per zone, one line style per feature type (solid for
    the first, e.g. RI (FBoI), dashed for the second, e.g. RI, ...).

    Args:
        sizes: training-set sizes n_s, ``(n_sizes,)``; a single size gives a bar chart.
        zone_errors: ``{feature type: (n_sizes, n_zones, n_params)}`` mean absolute relative
            errors (fractions) per zone; NaN for an empty zone.
        names: parameter names, ``n_params``.
        zones: zone labels, ``n_zones`` (default 1, 2, ...).
        percent: show percent.
        log: logarithmic axes.
        title: figure title.

    Returns:
        The figure: one panel per parameter, a colour per zone and a line style (or, for one size, a bar
        shade) per feature type.

    Raises:
        ValueError: arrays of the wrong shape, or zone labels of another count.
    """
    where = "plot_impu_test_zones"
    sizes, curves, names = _impu_curves(sizes, zone_errors, names, where, "zone_errors")
    shapes = {v.shape for v in curves.values()}
    first = next(iter(curves.values()))
    if len(shapes) != 1 or first.ndim != 3 or first.shape[2] != len(names):
        raise ValueError(f"{where}: every zone_errors entry must have shape (n_sizes={sizes.size}, n_zones, "
                         f"n_params={len(names)}); got {sorted(shapes)}")
    n_zones = first.shape[1]
    zones = list(range(1, n_zones + 1)) if zones is None else list(zones)
    if len(zones) != n_zones:
        raise ValueError(f"{where}: {n_zones} zones in zone_errors but {len(zones)} zone labels")
    scale, unit = (100.0, " [%]") if percent else (1.0, "")
    styles = ("-", "--", ":", "-.")
    fig, axes = grid_axes(len(names), width=4.6, height=3.4, max_cols=2)
    width = 0.8 / len(curves)  # bar width when there is one training size
    for j, (ax, name) in enumerate(zip(axes.flat, names)):
        for f, (label, v) in enumerate(curves.items()):
            for z, zone in enumerate(zones):
                color = _ZONE_COLORS[z % 10]
                if sizes.size == 1:  # bars: zone groups, one bar per feature type
                    ax.bar(z + (f - (len(curves) - 1) / 2) * width, v[0, z, j] * scale,
                           width=width, color=color, alpha=1.0 if f == 0 else 0.5,
                           hatch=None if f == 0 else "//", label=f"zone {zone}, {label}")
                else:
                    ax.plot(sizes, v[:, z, j] * scale, styles[f % 4], marker="o", ms=3, lw=1.2, color=color,
                            label=f"zone {zone}, {label}")
        if sizes.size == 1:
            ax.set_xticks(range(n_zones), [f"zone {z}" for z in zones])
            if log:
                ax.set_yscale("log")
        else:
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.set_xticks(sizes, [f"{s:g}" for s in sizes], minor=False)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("training samples n_s")
        ax.set(ylabel=f"μ|ε| of {name}{unit}", title=name)
        ax.grid(alpha=0.3, which="both")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_ZONE_COLORS[z % 10], lw=2, label=f"zone {zone}") for z, zone in enumerate(zones)]
    handles += [Line2D([], [], color="k", ls=styles[f % 4], label=label) for f, label in enumerate(curves)]
    axes[0][0].legend(handles=handles, fontsize=7, ncol=2)
    fig.suptitle(title or "mean absolute relative error per test zone")
    fig.tight_layout()
    return fig
