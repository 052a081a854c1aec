"""``jcalib amortize``: train an amortized posterior (BayesFlow) on simulations and check its recovery."""

from __future__ import annotations

import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib.cli.common import _build, _output_dir, _write_results

__all__ = ["SUMMARY_NETWORKS", "GENERATORS", "amortize"]


SUMMARY_NETWORKS = ("lstm", "gru", "conv", "mlp")


GENERATORS = ("surrogate", "model")


def _bayesflow_config(summary: str, epochs: int, batch_size: int, learning_rate: float, n_blocks: int,
                      hidden: int):
    """A BayesFlowConfig from the CLI options (the exponential decay of zhang2023's BayesFlow)."""
    from jcalib.nn.bayesflow import BayesFlowConfig
    from jcalib.nn.training import TrainingConfig

    if summary not in SUMMARY_NETWORKS:
        raise ValueError(f"--summary must be one of {', '.join(SUMMARY_NETWORKS)}; got {summary!r}")
    for option, value in (("--epochs", epochs), ("--batch-size", batch_size), ("--n-blocks", n_blocks),
                          ("--hidden", hidden)):
        if value < 1:
            raise ValueError(f"{option} must be a positive integer; got {value}")
    training = TrainingConfig(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                              schedule="exponential", decay=0.99)
    return BayesFlowConfig(summary=summary, n_blocks=n_blocks, coupling_hidden=(hidden, hidden), training=training)


def _simulated_pairs(key, m, n: int, what: str):
    """`jcalib.nn.simulate_training_set`: ``n`` uniform draws over the bounds, simulated."""
    from jcalib.nn.data import simulate_training_set

    if n < 2:
        raise ValueError(f"{what} must be at least 2; got {n}")
    return simulate_training_set(key, m, n, progress=True)


def amortize(
    name: str,
    n_train: Annotated[int, typer.Option(help="simulated training samples (uniform over the bounds)")] = 2000,
    n_val: Annotated[int, typer.Option(help="simulated validation samples (recovery metrics, SBC)")] = 400,
    epochs: Annotated[int, typer.Option(help="training epochs")] = 100,
    batch_size: Annotated[int, typer.Option(help="minibatch size")] = 64,
    learning_rate: Annotated[float, typer.Option(help="initial Adam learning rate (x0.99 per epoch)")] = 1e-3,
    summary: Annotated[str, typer.Option(help="summary network: lstm | gru | conv | mlp")] = "lstm",
    n_blocks: Annotated[int, typer.Option(help="affine coupling blocks")] = 6,
    hidden: Annotated[int, typer.Option(help="width of the two hidden layers of each coupling")] = 128,
    n_samples: Annotated[int, typer.Option(help="posterior draws per validation sample")] = 100,
    seed: Annotated[int, typer.Option(help="random seed (data, networks, draws)")] = 0,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/amortize/NAME)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
):
    """Train an amortized posterior (coupling flow + summary network, BayesFlow) on simulations of
    a model; writes posterior.msgpack, metrics.json (validation R², NRMSE, coverage) and recovery.png."""
    import time

    from jcalib import plotting
    from jcalib.nn.bayesflow import AmortizedPosterior

    m = _build(name, option)
    key = jax.random.key(seed)
    k_train, k_val, k_draw, k_fit = jax.random.split(key, 4)
    config = _bayesflow_config(summary, epochs, batch_size, learning_rate, n_blocks, hidden)
    for flag, value in (("--n-samples", n_samples), ("--n-train", n_train), ("--n-val", n_val)):
        if value < 2:
            raise ValueError(f"{flag} must be at least 2; got {value}")
    out = _output_dir(out, pathlib.Path("results") / "amortize" / name)
    t0 = time.perf_counter()
    train = _simulated_pairs(k_train, m, n_train, "--n-train")
    val = _simulated_pairs(k_val, m, n_val, "--n-val")
    simulate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    posterior = AmortizedPosterior(m, config).fit(k_fit, *train, val=val)
    train_s = time.perf_counter() - t0
    posterior.save(out / "posterior.msgpack")
    recovery = _recovery(k_draw, posterior, m.parameters, *val, n_samples)
    metrics = {"model": name, "n_train": n_train, "n_val": n_val, "config": _asdict(config),
               "simulate_s": simulate_s, "train_s": train_s, "recovery": recovery.to_dict(),
               "training": posterior.training.to_dict() if posterior.training is not None else None}
    _write_results(out, metrics, {"recovery.png": plotting.plot_recovery(
        recovery, title=f"{name}: validation recovery")})
    typer.echo(f"{'parameter':24s} {'R²':>8s} {'NRMSE':>8s} {'coverage':>9s}")
    for i, pname in enumerate(recovery.names):
        typer.echo(f"{pname:24s} {recovery.r2[i]:8.4f} {recovery.nrmse[i]:8.4f} {recovery.coverage[i]:9.3f}")
    typer.echo(f"simulated {n_train + n_val} samples in {simulate_s:.1f} s, trained in {train_s:.1f} s")
    typer.echo(f"wrote {out}/posterior.msgpack, metrics.json and recovery.png")


def _asdict(config) -> dict:
    import dataclasses

    return config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)


def _recovery(key, posterior, space, thetas, xs, n_samples: int):
    """Validation recovery (R², RMSE, NRMSE, 95 % coverage per parameter; zhang2023, Fig. 14)."""
    from jcalib.bayes.recovery import recovery_metrics

    draws = np.asarray(posterior.sample(key, jax.numpy.asarray(xs), n_samples), np.float64)
    return recovery_metrics(thetas, draws.reshape(xs.shape[0], n_samples, space.n_params), space=space)
