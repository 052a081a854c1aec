"""``jcalib identify``: iterative identification with a surrogate (Zhang et al. 2023)."""

from __future__ import annotations

import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib import fileio
from jcalib.cli.amortize import GENERATORS, _bayesflow_config, _simulated_pairs
from jcalib.cli.common import _build, _data_file, _output_dir

__all__ = ["identify"]


def identify(
    name: str,
    data: Annotated[pathlib.Path, typer.Option(help="measurements CSV at the model's observation times, every "
                                                    "entry measured (as written by `jcalib simulate --csv`)")],
    n_train: Annotated[int, typer.Option(help="simulated training samples of step 1")] = 1600,
    n_val: Annotated[int, typer.Option(help="simulated validation samples (trial R², recovery metrics)")] = 399,
    epochs: Annotated[int, typer.Option(help="training epochs of each formal inference")] = 100,
    trial_epochs: Annotated[int | None, typer.Option(help="epochs of a trial inference (default epochs/4)")] = None,
    batch_size: Annotated[int, typer.Option(help="minibatch size")] = 64,
    learning_rate: Annotated[float, typer.Option(help="initial Adam learning rate (x0.99 per epoch)")] = 1e-3,
    summary: Annotated[str, typer.Option(help="summary network: lstm | gru | conv | mlp")] = "lstm",
    n_blocks: Annotated[int, typer.Option(help="affine coupling blocks")] = 6,
    hidden: Annotated[int, typer.Option(help="width of the two hidden layers of each coupling")] = 128,
    generator: Annotated[str, typer.Option(help="data of later steps: surrogate (a PELS-VAE, as in "
                                                "zhang2023) | model")] = "surrogate",
    r2_threshold: Annotated[float, typer.Option(help="trial inference keeps candidates with validation "
                                                     "R² at least this")] = 0.7,
    delta: Annotated[float, typer.Option(help="Algorithm 1 threshold on the averaged Sobol index")] = 1e-3,
    n_sobol: Annotated[int, typer.Option(help="Sobol base samples S per step (a power of 2)")] = 64,
    noise_sigma: Annotated[float | None, typer.Option(help="additive Gaussian noise (model units) put on "
                                                           "the training trajectories")] = None,
    max_steps: Annotated[int | None, typer.Option(help="a cap (not the paper's): at this step all remaining "
                                                       "parameters are identified together; default: none, "
                                                       "steps until every parameter is identified")] = None,
    allow_outside_training_range: Annotated[bool, typer.Option(
        "--allow-outside-training-range", help="run even when the data leave the range of the simulated "
        "training trajectories (the networks then extrapolate); by default that is an error")] = False,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/identify/NAME)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
):
    """Sensitivity-guided iterative identification (zhang2023, Algorithm 3) of all parameters from
    measured data; writes metrics.json, estimates.csv, identification.png, recovery.png, fit.png."""
    import csv as csv_module
    import io

    from jcalib import plotting
    from jcalib.workflows.iterative_identification import IdentificationConfig, iterative_identification

    m = _build(name, option)
    if generator not in GENERATORS:
        raise ValueError(f"--generator must be one of {', '.join(GENERATORS)}; got {generator!r}")
    posterior = _bayesflow_config(summary, epochs, batch_size, learning_rate, n_blocks, hidden)
    config = IdentificationConfig(posterior=posterior, trial_epochs=trial_epochs, r2_threshold=r2_threshold,
                                  delta=delta, n_sobol=n_sobol, max_steps=max_steps, generator=generator,
                                  noise_sigma=noise_sigma, allow_outside_training_range=allow_outside_training_range)
    measurements = _data_file(data)
    out = _output_dir(out, pathlib.Path("results") / "identify" / name)
    k_run, k_train, k_val = jax.random.split(jax.random.key(seed), 3)
    train = _simulated_pairs(k_train, m, n_train, "--n-train")
    val = _simulated_pairs(k_val, m, n_val, "--n-val")
    result = iterative_identification(k_run, m, measurements, train, val, config=config)
    result.save(out / "metrics.json")
    table = io.StringIO(newline="")
    writer = csv_module.writer(table)
    writer.writerow(["parameter", "estimate", "sd", "lower_95", "upper_95", "step", "unit"])
    for i, pname in enumerate(result.names):
        step = next(k + 1 for k, g in enumerate(result.groups) if pname in g)
        writer.writerow([pname, repr(float(result.estimate[i])), repr(float(result.sd[i])),
                         repr(float(result.lower[i])), repr(float(result.upper[i])), step,
                         m.parameters[pname].unit])
    fileio.atomic_write_text(out / "estimates.csv", table.getvalue())
    theta = jax.numpy.asarray(np.clip(result.estimate, m.parameters.lower, m.parameters.upper))
    figures = {"identification.png": plotting.plot_identification(result,
                                                                  title=f"{name}: iterative identification"),
               "recovery.png": plotting.plot_identification_recovery(result),
               "fit.png": plotting.plot_simulation(np.asarray(m.ts), np.asarray(m.simulate(theta)), m.output_names,
                                                   data=measurements, title=f"{name} at the estimate")}
    for fname, fig in figures.items():
        fileio.save_figure(fig, out / fname, dpi=110)
    typer.echo(result.summary())
    typer.echo(f"wrote {out}/metrics.json, estimates.csv and {', '.join(figures)}")
