"""``jcalib sample``: sample a posterior (MALA, HMC or NUTS) from measurements."""

from __future__ import annotations

import math
import pathlib
import warnings as warnings_module
from typing import Annotated

import jax
import typer

from jcalib.cli.common import (
    _build,
    _interrupted,
    _joint_problem,
    _output_dir,
    _problem,
    _sampler_warnings,
    _write_results,
)

__all__ = ["LIKELIHOOD_WEIGHTING", "sample"]


LIKELIHOOD_WEIGHTING = {"relative": "relative", "absolute": "absolute", "lognormal": "relative"}


def sample(
    name: str,
    data: Annotated[list[pathlib.Path], typer.Option(help="measurements CSV (as for `jcalib calibrate`); repeat "
                                                          "for several experiments sampled jointly")],
    sigma: Annotated[float | None, typer.Option(help="fixed noise level of every output (relative "
                                                     "for relative/lognormal); default: the CSV's "
                                                     "sigma columns")] = None,
    sample_sigma: Annotated[bool, typer.Option("--sample-sigma", help="sample one noise level per "
                                               "output (log-uniform prior) instead of fixing it")] = False,
    likelihood: Annotated[str, typer.Option(help="relative | absolute | lognormal")] = "relative",
    steps: Annotated[int, typer.Option(help="recorded steps per chain")] = 6000,
    burn: Annotated[int, typer.Option(help="steps discarded after warm-up")] = 1000,
    chains: Annotated[int, typer.Option(help="chains, run in parallel")] = 4,
    thin: Annotated[int, typer.Option(help="keep every THIN-th step")] = 1,
    warmup: Annotated[int, typer.Option(help="steps adapting a global step factor towards "
                                             "--target-acceptance; 0: the paper's prescaling only")] = 500,
    target_acceptance: Annotated[float | None, typer.Option(help="warm-up target (default 0.6 for mala, "
                                                                 "0.8 for hmc and nuts)")] = None,
    fraction: Annotated[float, typer.Option(help="prescaling step length, fraction of each "
                                                 "parameter's range")] = 0.02,
    free: Annotated[str | None, typer.Option(help="comma-separated free parameters "
                                                  "(default: all not fixed)")] = None,
    fix: Annotated[list[str] | None, typer.Option(help="fixed parameter name=value")] = None,
    start: Annotated[list[str] | None, typer.Option(help="start value name=value (default nominal)")] = None,
    gauss_newton: Annotated[bool, typer.Option(help="start the chains at the Gauss-Newton "
                                                    "estimate from --start")] = True,
    preconditioner: Annotated[str | None, typer.Option(help="diagonal (the paper's prescaling; default of "
                                                            "mala) | laplace (dense: the inverse Hessian at "
                                                            "the start; follows correlated parameters; "
                                                            "default of hmc and nuts)")] = None,
    kernel: Annotated[str, typer.Option(help="mala (the paper's prescaled MALA) | hmc | nuts (blackjax, "
                                             "whitened by the Laplace covariance)")] = "mala",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    out: Annotated[pathlib.Path | None, typer.Option(
        help="output folder (default results/sample/NAME)")] = None,
    option: Annotated[list[str] | None, typer.Option(help="factory option name=value")] = None,
    condition: Annotated[list[str] | None, typer.Option(help="experiment condition STEM:name=value (several "
                                                             "--data, as for calibrate)")] = None,
    per_experiment: Annotated[list[str] | None, typer.Option(help="parameter with one copy per experiment "
                                                                  "(several --data)")] = None,
):
    """Sample the posterior by prescaled MALA (Wulkow et al. 2021), HMC or NUTS; writes posterior.npz,
    metrics.json, KDE marginals, pair, trace and 90 % band plots. Sampler warnings (low
    acceptance, R-hat, ESS) are printed as ``warning: ...`` lines and kept in metrics.json.
    \f
    (Not shown by --help.) Long for its 22 command-line options; the body is 68 lines."""
    import jax.numpy as jnp

    from jcalib import estimation, plotting
    from jcalib.bayes import Laplace, Prescaled, hmc, mala, nuts
    from jcalib.bayes.diagnostics import WARMUP_ADVICE
    from jcalib.probability.likelihoods import LIKELIHOODS

    if likelihood not in LIKELIHOOD_WEIGHTING:
        raise ValueError(f"--likelihood must be one of {', '.join(LIKELIHOOD_WEIGHTING)}; got {likelihood!r}")
    if sigma is not None and sample_sigma:
        raise ValueError("give either --sigma (fixed noise) or --sample-sigma, not both")
    preconditioner = _sampler_options(kernel, preconditioner, dict(steps=steps, chains=chains, thin=thin, burn=burn,
                                                                   warmup=warmup), target_acceptance, fraction)
    m = _build(name, option)
    lik = LIKELIHOODS[likelihood](sigma)
    joint = len(data) > 1 or bool(condition) or bool(per_experiment)
    if joint and sample_sigma:
        raise ValueError("--sample-sigma samples one noise level per output of one experiment; with several --data "
                         "give --sigma or sigma columns in the CSVs")
    if joint:
        problem, theta0 = _joint_problem(m, data, free, fix, start, condition, per_experiment,
                                         weighting=LIKELIHOOD_WEIGHTING[likelihood], likelihood=lik)
    else:
        problem, theta0 = _problem(m, data[0], free, fix, start, weighting=LIKELIHOOD_WEIGHTING[likelihood],
                                   likelihood=lik, noise_parameters=True if sample_sigma else None)
    if not problem.sigma_available:
        raise ValueError("no noise level: give --sigma, sigma_<output> columns in the CSV, or --sample-sigma")
    out = _output_dir(out, pathlib.Path("results") / "sample" / name)
    z0 = problem.to_internal(jnp.concatenate([
        jnp.asarray([theta0[n] for n in problem.model_free_names]),
        problem.to_physical(problem.initial_internal())[problem.n_model_free:]]))
    fit = None
    if gauss_newton:
        fit = estimation.gauss_newton(problem.without_noise_parameters() if problem.n_noise else problem, theta0,
                                      progress=True)
        z0 = z0.at[:problem.n_model_free].set(jnp.asarray(fit.theta_internal))
    with warnings_module.catch_warnings(record=True) as caught:
        warnings_module.simplefilter("always")
        sampler = {"mala": mala.sample, "hmc": hmc.sample, "nuts": nuts.sample}[kernel]
        result = sampler(jax.random.key(seed), problem, z0, steps, coordinates="internal", n_chains=chains,
                         burn_in=burn, thin=thin, warmup=warmup,
                         preconditioner=Prescaled(fraction) if preconditioner == "diagonal" else Laplace(),
                         target_acceptance=target_acceptance, progress=kernel == "mala")
    advice = (f"--warmup {WARMUP_ADVICE}" if warmup < WARMUP_ADVICE else f"a --warmup longer than {warmup}",
              *(("--preconditioner laplace",) if preconditioner != "laplace" else ()), "more draws (--steps)")
    sampler_warnings = _sampler_warnings(result, caught, advice)
    result.save(out / "posterior.npz")
    metrics = {"model": name, "data": [str(d) for d in data] if joint else str(data[0]), "likelihood": likelihood,
               "sigma": sigma, "sample_sigma": sample_sigma, "fixed": problem.fixed, "start": theta0,
               "gauss_newton": None if fit is None else fit.to_dict(), "posterior": result.to_dict(),
               "warnings": sampler_warnings}
    if result.extra["status"] == "interrupted":  # the draws so far, without the figures of a finished run
        _write_results(out, metrics | {"status": "interrupted"}, {})
        _interrupted(f"kept the {result.n_draws} draws per chain of the sampling steps that had finished, in "
                     f"{out / 'posterior.npz'}")
    draws = result.samples_internal[:, :: max(1, result.n_draws // 250)]
    figures = {"marginals.png": plotting.plot_marginals(result, title=f"{name}: KDE marginals"),
               "trace.png": plotting.plot_trace(result)}
    band_metrics, coverage = _posterior_bands(problem, draws, name, joint, figures)
    metrics.update(bands_90=band_metrics if joint else band_metrics[name],
                   band_coverage_of_data=coverage if joint else coverage[name])
    if result.n_params > 1:
        figures["pair.png"] = plotting.plot_pair(result)
    _write_results(out, metrics, figures)
    _print_posterior(result)
    for message in sampler_warnings:
        typer.echo(f"warning: {message}", err=True)
    typer.echo(f"wrote {out}/posterior.npz, metrics.json and {', '.join(figures)}")


def _sampler_options(kernel: str, preconditioner: str | None, counts: dict[str, int],
                     target_acceptance: float | None, fraction: float) -> str:
    """The preconditioner (default: diagonal for mala, laplace for hmc and nuts), after
    checking the sampler's options."""
    from jcalib.bayes import KERNELS

    if kernel not in KERNELS:
        raise ValueError(f"--kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
    if preconditioner is None:
        preconditioner = "diagonal" if kernel == "mala" else "laplace"
    if preconditioner not in ("diagonal", "laplace"):
        raise ValueError(f"--preconditioner must be diagonal or laplace; got {preconditioner!r}")
    for flag, what, least in (("steps", "n_steps", 1), ("chains", "n_chains", 1), ("thin", "thin", 1),
                              ("burn", "burn_in", 0), ("warmup", "warmup", 0)):
        if counts[flag] < least:
            kind = "a positive integer" if least else "a non-negative integer"
            raise ValueError(f"--{flag}: {what} must be {kind}; got {counts[flag]}")
    if target_acceptance is not None and not 0 < target_acceptance < 1:
        raise ValueError(f"--target-acceptance must lie in (0, 1); got {target_acceptance}")
    if not (fraction > 0 and math.isfinite(fraction)):
        raise ValueError(f"--fraction must be a positive number; got {fraction}")
    return preconditioner


def _posterior_bands(problem, draws, name: str, joint: bool, figures: dict) -> tuple[dict, dict]:
    """90 % output bands of each experiment from internal ``draws``: their metrics and the
    share of the data inside them, by experiment (or model) name; the plots go to ``figures``."""
    from jcalib import plotting
    from jcalib.bayes import predictive

    band_metrics, coverage = {}, {}
    for k, experiment in enumerate(problem.experiment_names if joint else [None]):
        single = problem.experiment_problems[k] if joint else problem
        bands = predictive.output_bands(problem, draws, coordinates="internal", experiment=experiment)
        band_metrics[experiment or name] = bands.to_dict()
        coverage[experiment or name] = bands.coverage(single.measurements)
        suffix = f"_{experiment}" if joint else ""
        figures[f"bands{suffix}.png"] = plotting.plot_bands(bands, single.measurements,
                                                            title=f"{experiment or name}: 90 % band")
    return band_metrics, coverage


def _print_posterior(result) -> None:
    """The posterior summary table: mean, sd, 90 % interval, ESS and R-hat per parameter."""
    lo, hi = result.interval(0.9)
    typer.echo(f"{'parameter':24s} {'mean':>12s} {'sd':>12s} {'5 %':>12s} {'95 %':>12s} {'ESS':>8s} {'R-hat':>6s}")
    for i, pname in enumerate(result.names):
        rhat = f"{result.rhat[i]:6.3f}" if result.n_chains > 1 else f"{'n/a':>6s}"  # R-hat compares chains
        typer.echo(f"{pname:24s} {result.mean[i]:12.5g} {result.sd[i]:12.5g} {lo[i]:12.5g} {hi[i]:12.5g} "
                   f"{result.ess_bulk[i]:8.0f} {rhat}")
    typer.echo(f"acceptance {result.acceptance:.1%}; {result.n_chains} chains x {result.n_draws} draws; "
               f"{result.wall_time_s:.1f} s")
    if result.n_chains < 2:
        typer.echo("note: R-hat needs at least 2 chains (it compares them); run --chains 2 or more to check "
                   "convergence", err=True)
