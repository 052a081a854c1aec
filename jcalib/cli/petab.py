"""``jcalib petab``: simulate, analyse, fit or sample a PEtab problem."""

from __future__ import annotations

import math
import pathlib
import time
import warnings as warnings_module
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib import fileio
from jcalib.cli.common import (
    _data_json,
    _exit_if_interrupted,
    _interrupted,
    _output_dir,
    _sampler_warnings,
    _write_results,
)
from jcalib.starts import start_internal

__all__ = ["PETAB_METHODS", "petab"]


PETAB_METHODS = ("simulate", "identifiability", "gauss-newton", "trf", "multistart", "sample")


def petab(
    path: Annotated[pathlib.Path, typer.Argument(help="the PEtab problem's YAML file")],
    method: Annotated[str, typer.Option(help="simulate | identifiability | gauss-newton | trf | multistart | "
                                             "sample")] = "simulate",
    n_starts: Annotated[int, typer.Option(help="multistart: starts, uniform over the PEtab bounds")] = 20,
    steps: Annotated[int, typer.Option(help="sample: recorded NUTS steps per chain")] = 500,
    chains: Annotated[int, typer.Option(help="sample: chains")] = 4,
    seed: Annotated[int, typer.Option(help="random seed (multistart, sample)")] = 0,
    start: Annotated[pathlib.Path | None, typer.Option(
        help="sample: start the chains at the estimate in this metrics.json of a jcalib petab fit "
             "(default: the PEtab nominal values)")] = None,
    rtol: Annotated[float, typer.Option(help="solver relative tolerance")] = 1e-8,
    atol: Annotated[float, typer.Option(help="solver absolute tolerance")] = 1e-10,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/petab/FOLDER_PROBLEM_METHOD; PROBLEM_METHOD where the YAML "
             "file is named after its folder)")] = None,
):
    """Import a PEtab problem (SBML model + tables) and simulate, analyse, fit or sample it; writes
    metrics.json and simulation.tsv (PEtab's simulation table at the nominal or fitted parameters)."""
    from jcalib import estimation
    from jcalib.sensitivity import identifiability

    if method not in PETAB_METHODS:
        raise ValueError(f"--method must be one of {', '.join(PETAB_METHODS)}; got {method!r}")
    for flag, value in (("--n-starts", n_starts), ("--steps", steps), ("--chains", chains)):
        if value < 1:
            raise ValueError(f"{flag} must be a positive integer; got {value}")
    if not pathlib.Path(path).is_file():  # before the output folder is made
        raise ValueError(f"{str(path)!r}: no such file; give the PEtab problem's YAML file")
    folder, stem = pathlib.Path(path).resolve().parent.name, pathlib.Path(path).stem
    name = stem if stem == folder else f"{folder}_{stem}"  # problem.yaml files of other folders: other names
    out = _output_dir(out, pathlib.Path("results") / "petab" / f"{name}_{method}")
    pp, nominal, llh_nominal = _petab_import(path, rtol, atol)
    problem = pp.problem
    metrics: dict = {"problem": str(path), "method": method, "parameters": list(problem.free_names),
                     "n_measurements": len(pp.petab_problem.measurement_df), "llh_nominal": llh_nominal,
                     "rtol": rtol, "atol": atol}
    figures: dict = {}
    theta, stopped = nominal, None
    if not math.isfinite(llh_nominal):
        typer.echo(f"warning: the log-likelihood at the nominal parameters is {llh_nominal}: "
                   f"{problem.why_not_finite(nominal)}", err=True)
    if method == "identifiability":
        report = identifiability(problem, nominal, coordinates="internal")
        metrics["identifiability"] = report.to_dict()
        null = ", ".join(report.null_parameters) or "none"
        typer.echo(f"rank {report.rank} of {len(report.parameter_names)} (Jacobian {report.matrix_shape}); essential "
                   f"directions {report.jacobian.n_essential}; null parameters: {null}; proposed subset: "
                   f"{', '.join(report.proposed_subset)}")
    elif method in ("gauss-newton", "trf"):
        fit = (estimation.gauss_newton(problem, nominal, coordinates="internal", progress=True) if method ==
               "gauss-newton" else estimation.least_squares_trf(problem, nominal, coordinates="internal"))
        metrics["result"] = fit.to_dict()
        theta = jax.numpy.asarray(fit.theta_internal)
        stopped = fit.reason if fit.interrupted else None
    elif method == "multistart":
        theta = _petab_multistart(problem, seed, n_starts, llh_nominal, metrics, figures, out)
    elif method == "sample":
        theta = _petab_sample(problem, _petab_start(problem, start, nominal), seed, steps, chains, out, metrics,
                              figures)
    llh = float(problem.log_likelihood(theta))
    metrics.update(llh=llh, estimate=problem.estimate_dict(theta), chi2=float(pp.chi2(pp.from_problem_internal(theta))))
    table = problem.simulation_table(theta)
    fileio.atomic_write_text(out / "simulation.tsv", table.to_csv(sep="\t", index=False))
    _write_results(out, metrics, figures)
    if method in ("gauss-newton", "trf", "multistart"):
        for pname, value in metrics["estimate"].items():
            typer.echo(f"  {pname:28s} {value:14.6g}")
    at = " at the posterior's best draw" if method == "sample" else ""
    typer.echo(f"log-likelihood{at} {llh:.6g} (nominal {llh_nominal:.6g}); chi2 {metrics['chi2']:.6g}")
    typer.echo(f"wrote {out}/metrics.json, simulation.tsv" + "".join(f", {f}" for f in figures))
    if stopped:
        _interrupted(f"{stopped}; the results above are those of the unfinished run")


def _petab_import(path: pathlib.Path, rtol: float, atol: float):
    """The PEtab problem, its nominal point (internal) and log-likelihood there, with a status line
    per phase (the first evaluation compiles the model: minutes for large ones)."""
    from jcalib.io import petab as jpetab

    started = time.perf_counter()
    typer.echo(f"importing {path} ...", err=True)
    pp = jpetab.load(path, rtol=rtol, atol=atol)
    typer.echo(f"  {len(pp.model.state_names)} states, {pp.problem.n_free} estimated parameters, "
               f"{len(pp.petab_problem.measurement_df)} measurements ({time.perf_counter() - started:.1f} s); "
               "compiling the simulations and evaluating the nominal parameters ...", err=True)
    started = time.perf_counter()
    nominal = pp.to_problem_internal(pp.nominal_internal)
    llh_nominal = float(pp.problem.log_likelihood(nominal))
    typer.echo(f"  done ({time.perf_counter() - started:.1f} s)", err=True)
    return pp, nominal, llh_nominal


def _petab_start(problem, start: pathlib.Path | None, nominal):
    """The chains' start (internal coordinates): the ``estimate`` of a jcalib petab metrics.json,
    or the nominal values; says which."""
    if start is None:
        typer.echo("sampling from the PEtab nominal values (pass --start metrics.json of a fit to start there)")
        return nominal
    estimate = _data_json(start, "--start").get("estimate")
    if not isinstance(estimate, dict) or set(estimate) != set(problem.free_names):
        raise ValueError(f"--start {str(start)!r}: no 'estimate' of this problem's parameters (the metrics.json of "
                         "jcalib petab --method gauss-newton, trf or multistart)")
    typer.echo(f"sampling from the estimate in {start}")
    theta = jax.numpy.asarray([float(estimate[name]) for name in problem.free_names])
    return start_internal(problem, theta, where="--start")


def _petab_sample(problem, z0, seed: int, steps: int, chains: int, out: pathlib.Path, metrics: dict,
                  figures: dict):
    """`jcalib petab --method sample`: NUTS with Laplace whitening from ``z0``; the posterior's best
    draw (its metrics, marginals and warnings go to ``metrics``, ``figures`` and stderr)."""
    from jcalib import plotting
    from jcalib.bayes import Laplace, nuts

    with warnings_module.catch_warnings(record=True) as caught:
        warnings_module.simplefilter("always")
        result = nuts.sample(jax.random.key(seed), problem, z0, steps, coordinates="internal", n_chains=chains,
                             preconditioner=Laplace(), warmup=min(200, steps), progress=True)
    result.save(out / "posterior.npz")
    metrics["posterior"] = result.to_dict()
    if result.extra["status"] == "interrupted":  # the draws so far, without a finished run's figures
        _write_results(out, metrics | {"status": "interrupted"}, {})
        _interrupted(f"kept {result.n_draws} draws per chain in {out / 'posterior.npz'}")
    figures["marginals.png"] = plotting.plot_marginals(result, title=f"{problem.model.experiment.name}: posterior "
                                                                     "marginals")
    typer.echo(f"{'parameter':28s} {'mean':>12s} {'sd':>12s} {'R-hat':>7s}")
    for i, pname in enumerate(result.names):
        typer.echo(f"{pname:28s} {result.mean[i]:12.5g} {result.sd[i]:12.5g} {result.rhat[i]:7.3f}")
    for message in _sampler_warnings(result, caught, ("more draws (--steps)", "more chains (--chains)")):
        typer.echo(f"warning: {message}", err=True)
    return jax.numpy.asarray(result.best_internal)


def _petab_multistart(problem, seed: int, n_starts: int, llh_nominal: float, metrics: dict, figures: dict,
                      out: pathlib.Path):
    """`jcalib petab --method multistart`: `jcalib.estimation.multistart` with its default method
    (Fides's) from starts uniform over the bounds (the PEtab multistart of
    `experiments.petab_multistart` and `benchmarks.petab_multistart`); the best start's internal
    parameters (its metrics and waterfall plot go to ``metrics`` and ``figures``)."""
    from jcalib import estimation, plotting

    starts = estimation.multistart(jax.random.key(seed), problem, n_starts, start_distribution="uniform",
                                   progress=True)
    _exit_if_interrupted(starts, out, metrics)
    llh = estimation.final_log_likelihoods(problem, starts)
    reached = llh >= llh_nominal - estimation.LLH_TOLERANCE
    found = estimation.clusters(-llh)
    metrics["multistart"] = starts.to_dict(include_results=False)
    metrics.update(llh_starts=llh.tolist(), n_reaching_nominal=int(reached.sum()), optima_found=found)
    figures["waterfall.png"] = plotting.plot_multistart_waterfall(starts)
    typer.echo(f"{int(reached.sum())} of {n_starts} starts reach the nominal log-likelihood {llh_nominal:.6g} "
               f"(within {estimation.LLH_TOLERANCE}) or better; best {llh.max():.6g}, found by "
               f"{found[0]['n_starts'] if found else 0} starts")
    return jax.numpy.asarray(starts.results[int(np.argmax(llh))].theta_internal)
