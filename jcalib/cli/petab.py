"""``jcalib petab``: simulate, analyse, fit or sample a PEtab problem."""

from __future__ import annotations

import math
import pathlib
from typing import Annotated

import jax
import numpy as np
import typer

from jcalib import fileio
from jcalib.cli.common import _exit_if_interrupted, _interrupted, _output_dir, _write_results

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
    rtol: Annotated[float, typer.Option(help="solver relative tolerance")] = 1e-8,
    atol: Annotated[float, typer.Option(help="solver absolute tolerance")] = 1e-10,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/petab/PROBLEM_METHOD)")] = None,
):
    """Import a PEtab problem (SBML model + tables) and simulate, analyse, fit or sample it; writes
    metrics.json and simulation.tsv (PEtab's simulation table at the nominal or fitted parameters)."""
    from jcalib import estimation, plotting
    from jcalib.bayes import Laplace, nuts
    from jcalib.io import petab as jpetab
    from jcalib.sensitivity import identifiability

    if method not in PETAB_METHODS:
        raise ValueError(f"--method must be one of {', '.join(PETAB_METHODS)}; got {method!r}")
    for flag, value in (("--n-starts", n_starts), ("--steps", steps), ("--chains", chains)):
        if value < 1:
            raise ValueError(f"{flag} must be a positive integer; got {value}")
    pp = jpetab.load(path, rtol=rtol, atol=atol)
    problem = pp.problem
    name = pathlib.Path(path).stem
    out = _output_dir(out, pathlib.Path("results") / "petab" / f"{name}_{method}")
    nominal = pp.to_problem_internal(pp.nominal_internal)
    llh_nominal = float(problem.log_likelihood(nominal))
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
        result = nuts.sample(jax.random.key(seed), problem, nominal, steps, coordinates="internal",
                             n_chains=chains, preconditioner=Laplace(), warmup=min(200, steps))
        result.save(out / "posterior.npz")
        metrics["posterior"] = result.to_dict()
        if result.extra["status"] == "interrupted":  # the draws so far, without a finished run's figures
            _write_results(out, metrics | {"status": "interrupted"}, {})
            _interrupted(f"kept {result.n_draws} draws per chain in {out / 'posterior.npz'}")
        figures["marginals.png"] = plotting.plot_marginals(result, title=f"{name}: posterior marginals")
        typer.echo(f"{'parameter':28s} {'mean':>12s} {'sd':>12s} {'R-hat':>7s}")
        for i, pname in enumerate(result.names):
            typer.echo(f"{pname:28s} {result.mean[i]:12.5g} {result.sd[i]:12.5g} {result.rhat[i]:7.3f}")
    llh = float(problem.log_likelihood(theta))
    metrics.update(llh=llh, estimate=problem.estimate_dict(theta), chi2=float(pp.chi2(pp.from_problem_internal(theta))))
    table = problem.simulation_table(theta)
    fileio.atomic_write_text(out / "simulation.tsv", table.to_csv(sep="\t", index=False))
    _write_results(out, metrics, figures)
    if method in ("gauss-newton", "trf", "multistart"):
        for pname, value in metrics["estimate"].items():
            typer.echo(f"  {pname:28s} {value:14.6g}")
    typer.echo(f"log-likelihood {llh:.6g} (nominal {llh_nominal:.6g}); chi2 {metrics['chi2']:.6g}")
    typer.echo(f"wrote {out}/metrics.json, simulation.tsv" + "".join(f", {f}" for f in figures))
    if stopped:
        _interrupted(f"{stopped}; the results above are those of the unfinished run")


def _petab_multistart(problem, seed: int, n_starts: int, llh_nominal: float, metrics: dict, figures: dict,
                      out: pathlib.Path):
    """`jcalib petab --method multistart`: TRF from uniform starts (the PEtab multistart of
    `experiments.petab_multistart` and `benchmarks.petab_tools`); the best start's internal
    parameters (its metrics and waterfall plot go to ``metrics`` and ``figures``)."""
    from jcalib import estimation, plotting

    starts = estimation.multistart(jax.random.key(seed), problem, n_starts, "trf", "uniform", progress=True)
    _exit_if_interrupted(starts, out, metrics)
    llh = estimation.final_log_likelihoods(problem, starts)
    reached = llh >= llh_nominal - estimation.LLH_TOLERANCE
    metrics["multistart"] = starts.to_dict(include_results=False)
    metrics.update(llh_starts=llh.tolist(), n_reaching_nominal=int(reached.sum()))
    figures["waterfall.png"] = plotting.plot_multistart_waterfall(starts)
    typer.echo(f"{int(reached.sum())} of {n_starts} starts reach the nominal log-likelihood {llh_nominal:.6g} "
               f"(within {estimation.LLH_TOLERANCE}) or better; best {llh.max():.6g}")
    return jax.numpy.asarray(starts.results[int(np.argmax(llh))].theta_internal)
