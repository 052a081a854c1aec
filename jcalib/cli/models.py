"""``jcalib models`` (the built-in models, one model's parameter table) and ``jcalib simulate``."""

from __future__ import annotations

import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib import fileio
from jcalib import models as registry
from jcalib.cli.common import _build, _check_solves, _parameter_values, _with_times

__all__ = ["models_list", "models_show", "simulate"]


def models_list(ctx: typer.Context):
    """Table of the built-in models."""
    if ctx.invoked_subcommand is not None:
        return
    names = registry.available()
    w = max(len("model"), *map(len, names))
    typer.echo(f"{'model':{w}s} {'params':>6s} {'outputs':>7s} {'times':>5s}  description")
    for name in names:
        m = registry.get(name)
        typer.echo(f"{name:{w}s} {m.parameters.n_params:6d} {m.n_outputs:7d} "
                   f"{m.experiment.n_times:5d}  {registry.describe(name)}")


def models_show(name: str, option: Annotated[list[str] | None, typer.Option(
        help="factory option name=value, e.g. recipe=2")] = None):
    """Parameter table, outputs and experiment of one model."""
    m = _build(name, option)
    typer.echo(f"{name}: {registry.describe(name)}")
    typer.echo(f"outputs: {', '.join(m.output_names)}   states: {', '.join(m.state_names)}")
    exp = m.experiment
    typer.echo(f"experiment {exp.name!r}: t0={float(exp.t0):g}, t1={float(exp.t1):g}, "
               f"{exp.n_times} observation times; solver {type(m.solver).__name__}")
    constants = m.constants()
    w = max(len("name"), *(len(n) for n in [*m.parameters.names, *constants]))
    typer.echo(f"\n{'name':{w}s} {'nominal':>12s} {'lower':>12s} {'upper':>12s} {'log':>4s}  unit")
    for p in m.parameters:
        typer.echo(f"{p.name:{w}s} {p.nominal:12.5g} {p.lower:12.5g} {p.upper:12.5g} "
                   f"{'yes' if p.log_scale else 'no':>4s}  {p.unit}")
    if constants:
        typer.echo(f"\nfixed constants\n{'name':{w}s} {'value':>12s}  unit")
        for cname, (value, unit) in constants.items():
            typer.echo(f"{cname:{w}s} {value:12.6g}  {unit}")


def simulate(
    name: str,
    set_: Annotated[list[str] | None, typer.Option("--set", help="parameter name=value")] = None,
    times: Annotated[str | None, typer.Option(help="comma-separated observation times")] = None,
    csv: Annotated[pathlib.Path | None, typer.Option(help="write outputs to this CSV")] = None,
    plot: Annotated[pathlib.Path | None, typer.Option(help="write a figure (png/pdf)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
):
    """Simulate a model at its nominal parameters (or --set values) and print/save outputs."""
    m = _build(name, option)
    theta = m.parameters.to_vector(_parameter_values(m.parameters, set_, "--set"))
    m = _with_times(m, times)
    if csv:
        fileio.check_output_file(csv, "--csv file")
    if plot:
        fileio.check_figure_path(plot, "--plot figure")
    y = _check_solves(m, jax.numpy.asarray(theta))
    ts = np.asarray(m.ts)
    header = ["t", *m.output_names]
    if csv:
        from jcalib.data import Measurements

        # undefined outputs (e.g. Mw before any polymer exists) become empty cells
        Measurements(ts, y, mask=np.isfinite(y), output_names=m.output_names).to_csv(csv)
        typer.echo(f"wrote {csv}")
    if plot:
        from jcalib.plotting import plot_simulation

        fig = plot_simulation(ts, y, m.output_names, title=name)
        fileio.save_figure(fig, plot, dpi=120)
        typer.echo(f"wrote {plot}")
    if not csv and not plot:
        typer.echo("  ".join(f"{h:>12s}" for h in header))
        for row in np.column_stack([ts, y]):
            typer.echo("  ".join(f"{v:12.6g}" for v in row))
