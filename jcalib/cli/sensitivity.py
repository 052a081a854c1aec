"""``jcalib sensitivity``: Sobol indices, local sensitivities or identifiability of a model at a point."""

from __future__ import annotations

import math
import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib.cli.common import _build, _check_solves, _output_dir, _parameter_values, _write_results

__all__ = ["SENSITIVITY_METHODS", "sensitivity"]


SENSITIVITY_METHODS = ("sobol", "local", "identifiability")


def sensitivity(
    name: str,
    method: Annotated[str, typer.Option(help="sobol | local | identifiability")] = "sobol",
    n: Annotated[int, typer.Option(help="Sobol base sample size N (a power of 2); "
                                        "N(D+2) simulations")] = 1024,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/sensitivity/NAME_METHOD)")] = None,
    seed: Annotated[int, typer.Option(help="random seed of the Sobol design")] = 0,
    delta: Annotated[float, typer.Option(help="Algorithm 1 threshold on the averaged index")] = 1e-3,
    set_: Annotated[list[str] | None, typer.Option("--set", help="parameter name=value "
                                                   "(local/identifiability point)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
):
    """Sensitivity of a model's outputs: Sobol indices + Algorithm 1 selection (sobol),
    relative sensitivity functions (local) or rank, rankings and essential directions
    (identifiability). Writes metrics.json and figures to --out."""
    import jax.numpy as jnp

    from jcalib import plotting
    from jcalib import sensitivity as sens
    from jcalib.problems import CalibrationProblem

    if method not in SENSITIVITY_METHODS:
        raise ValueError(f"--method must be one of {', '.join(SENSITIVITY_METHODS)}; got {method!r}")
    if not (delta > 0 and math.isfinite(delta)):  # checked now, not after the Sobol simulations
        raise ValueError(f"--delta must be a positive number; got {delta}")
    if method == "sobol" and set_:
        raise ValueError("--set gives the point of --method local or identifiability; Sobol indices cover "
                         "the whole bounds, so drop --set")
    m = _build(name, option)
    theta = jnp.asarray(m.parameters.to_vector(_parameter_values(m.parameters, set_, "--set")))
    out = _output_dir(out, pathlib.Path("results") / "sensitivity" / f"{name}_{method}")
    ts, names = np.asarray(m.ts), m.parameters.names
    if method != "sobol":
        _check_solves(m, theta)
    if method == "sobol":
        result = sens.sobol_indices(jax.random.key(seed), m, None, n)
        selection = result.select(delta)
        metrics = {"sobol": result.to_dict(), "selection": selection.to_dict()}
        figures = {"sobol_over_time.png": plotting.plot_sobol_over_time(result, ts, m.output_names),
                   "sorted_indices.png": plotting.plot_sorted_indices(selection, title=name)}
        typer.echo(f"{result.n_simulations} simulations; averaged first-order indices:")
        for pname, s in zip(selection.sorted_names, selection.sorted_indices):
            typer.echo(f"  {pname:24s} {s:10.4g}{'  selected' if pname in selection.selected else ''}")
        typer.echo(f"K = {selection.K:.3g}, stop: {selection.stop_reason}")
    elif method == "local":
        s = np.asarray(sens.output_sensitivities(m, theta, scaling="relative"))
        metrics = {"theta": m.parameters.to_dict(theta), "scaling": "relative",
                   "rms_relative_sensitivity": dict(zip(names, np.sqrt(np.nanmean(s**2, axis=(0, 1))))),
                   "relative_sensitivities": s}
        figures = {"sensitivity_functions.png": plotting.plot_sensitivity_functions(
            ts, s, m.output_names, names, ylabel="θ/y · dy/dθ")}
        for pname, v in metrics["rms_relative_sensitivity"].items():
            typer.echo(f"  {pname:24s} rms θ/y·dy/dθ = {v:10.4g}")
    else:
        # no data: the model's own outputs at theta, relative weighting, d ln y / d ln θ columns
        report = sens.identifiability(CalibrationProblem.from_simulation(m, theta), theta, scaling="log")
        metrics = {"theta": m.parameters.to_dict(theta), "identifiability": report.to_dict()}
        figures = {"sigma_min_spectrum.png": plotting.plot_sigma_min_spectrum(report)}
        d = metrics["identifiability"]
        typer.echo(f"rank {d['rank']} of {len(names)}; null: {', '.join(d['null_parameters']) or 'none'}")
        jac = d["jacobian"]
        cond = jac['condition_number']
        typer.echo(f"condition number {'inf' if cond is None else f'{cond:.4g}'}; essential directions "
                   f"{jac['n_essential']} of {len(names)}")
        typer.echo(f"correlation ranking: {', '.join(d['correlation']['order'])}; "
                   f"proposed subset: {', '.join(d['proposed_subset'])}")
    _write_results(out, metrics, figures)
    typer.echo(f"wrote {out}/metrics.json and {', '.join(figures)}")
