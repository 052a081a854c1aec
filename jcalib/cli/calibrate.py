"""``jcalib calibrate``: estimate a model's parameters from measurements (Gauss-Newton, TRF, differential
evolution, multistart)."""

from __future__ import annotations

import math
import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib.cli.common import (
    _build,
    _exit_if_interrupted,
    _interrupted,
    _joint_problem,
    _output_dir,
    _problem,
    _write_results,
)

__all__ = ["CALIBRATION_METHODS", "calibrate"]


CALIBRATION_METHODS = ("gauss-newton", "trf", "de", "multistart")


def calibrate(
    name: str,
    data: Annotated[list[pathlib.Path], typer.Option(help="measurements CSV (as written by `jcalib simulate --csv` "
                                                          "or Measurements.to_csv); repeat for several experiments "
                                                          "fitted jointly, each named by its file's stem")],
    method: Annotated[str, typer.Option(help="gauss-newton | trf | de | multistart")] = "gauss-newton",
    free: Annotated[str | None, typer.Option(help="comma-separated free parameters "
                                                  "(default: all not fixed)")] = None,
    fix: Annotated[list[str] | None, typer.Option(help="fixed parameter name=value")] = None,
    start: Annotated[list[str] | None, typer.Option(help="start value name=value "
                                                         "(default nominal)")] = None,
    weighting: Annotated[str, typer.Option(help="relative | absolute | sigma")] = "relative",
    n_starts: Annotated[int, typer.Option(help="multistart: number of starts")] = 16,
    seed: Annotated[int, typer.Option(help="random seed (de, multistart)")] = 0,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/calibrate/NAME_METHOD)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
    condition: Annotated[list[str] | None, typer.Option(help="experiment condition STEM:name=value (several "
                                                             "--data; STEM: the data file's stem)")] = None,
    per_experiment: Annotated[list[str] | None, typer.Option(help="parameter with one copy per experiment, "
                                                                  "named name[STEM] (several --data)")] = None,
):
    """Estimate parameters from measured data (one or several experiments); writes metrics.json, fit and
    residual plots."""
    from jcalib import estimation, plotting

    if method not in CALIBRATION_METHODS:
        raise ValueError(f"--method must be one of {', '.join(CALIBRATION_METHODS)}; got {method!r}")
    m = _build(name, option)
    if len(data) == 1 and not condition and not per_experiment:
        problem, theta0 = _problem(m, data[0], free, fix, start, weighting=weighting)
    else:
        problem, theta0 = _joint_problem(m, data, free, fix, start, condition, per_experiment, weighting=weighting)
    out = _output_dir(out, pathlib.Path("results") / "calibrate" / f"{name}_{method}")
    key = jax.random.key(seed)
    if method == "gauss-newton":
        result = estimation.gauss_newton(problem, theta0, progress=True)
    elif method == "trf":
        result = estimation.least_squares_trf(problem, theta0)
    elif method == "de":
        result = estimation.differential_evolution(key, problem, progress=True)
    else:
        starts = estimation.multistart(key, problem, n_starts, theta0=theta0, progress=True)
        _exit_if_interrupted(starts, out, {"model": name, "method": method, "start": theta0})
        result = starts.best
    if not (math.isfinite(result.loss) and np.all(np.isfinite(np.asarray(result.theta)))):
        why = (starts.extra.get("failure") if method == "multistart" else None) or result.reason
        raise ValueError(f"--method {method} found no finite answer (loss {result.loss}): {why}")
    metrics = {"model": name, "data": [str(d) for d in data] if len(data) > 1 else str(data[0]),
               "weighting": weighting, "fixed": problem.fixed, "start": theta0, "result": result.to_dict()}
    figures = {"fit.png": plotting.plot_fit(problem, result, title=f"{name}: {method}"),
               "residuals.png": plotting.plot_residuals(problem, result)}
    if method == "multistart":
        metrics["multistart"] = starts.to_dict()
        figures["waterfall.png"] = plotting.plot_multistart_waterfall(starts)
    _write_results(out, metrics, figures)
    for pname, value in result.estimate.items():
        typer.echo(f"  {pname:24s} {value:14.6g}  {m.parameters[pname.split('[')[0]].unit}")
    cond = result.condition_number
    typer.echo(f"loss {result.loss:.6g}; condition {cond:.4g}; essential directions "
               f"{result.n_essential_directions} of {len(result.names)}; {result.n_steps} steps, "
               f"{result.n_simulations} simulations + {result.n_jacobians} Jacobians; {result.reason}")
    typer.echo(f"wrote {out}/metrics.json and {', '.join(figures)}")
    if result.interrupted:
        _interrupted(f"{result.reason}: the estimate above is the last iterate, not converged")
