"""`jcalib` command line: list models, show parameter tables, simulate and plot, analyse
sensitivity and identifiability, calibrate, sample posteriors.

A user mistake (bad option value, unknown parameter, out-of-bounds --set/--start,
unusable --out/--csv/--plot path, bad --data file, failed simulation, an estimator without a
finite answer) ends in one line ``error: ...`` on stderr that names the problem and the fix,
with exit code 2 and no traceback (``JCALIB_DEBUG=1`` shows it). A --fix value outside the
parameter's bounds is allowed (a `CalibrationProblem` admits fixed values outside the bounds
on purpose, e.g. a rate fixed to 0) and gets a one-line ``note: ...`` on stderr. Output
folders and files are checked and created before any computation, and every result file is
written atomically.
"""

from __future__ import annotations

import math
import os
import pathlib
import warnings as warnings_module
from typing import Annotated

import jax

jax.config.update("jax_enable_x64", True)  # entry point: simulations run in float64

import numpy as np  # noqa: E402
import typer  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from jcalib import fileio  # noqa: E402
from jcalib import models as registry  # noqa: E402
from jcalib.model import SimulationError  # noqa: E402

try:  # typer >= 0.20 vendors click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - typer with an external click
    from click.exceptions import NoArgsIsHelpError, UsageError

USER_ERRORS = (ValueError, OSError, SimulationError)
"""Exceptions that mean a user mistake (bad option, file or value): one line, exit code 2."""


class _OneLineErrors(TyperGroup):
    """Every user mistake in a command ends in one line ``error: ...`` on stderr and exit
    code 2, without a traceback: click's usage errors (missing or malformed options) and the
    `USER_ERRORS` jcalib raises for bad values, files and paths. Other exceptions are bugs and
    keep their traceback; ``JCALIB_DEBUG=1`` keeps the traceback of user errors too."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except UsageError as err:
            plain = isinstance(err, typer.BadParameter) and err.param is None and err.param_hint is None
            message = err.message if plain else err.format_message()
            hint = f" (see {err.ctx.command_path} --help)" if err.ctx is not None and not plain else ""
            _fail(f"{message}{hint}")
        except USER_ERRORS as err:
            if os.environ.get("JCALIB_DEBUG"):
                raise
            _fail(_error_text(err))


def _fail(message: str):
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(2)


def _error_text(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {os.fspath(err.filename)!r}; check the path"
    return str(err) or type(err).__name__


app = typer.Typer(help="Calibrate dynamic simulation models with JAX.", no_args_is_help=True,
                  pretty_exceptions_enable=False, cls=_OneLineErrors)
models_app = typer.Typer(help="Built-in models.", invoke_without_command=True)
app.add_typer(models_app, name="models")


def _parse_assignments(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"{what} expects name=value; got {item!r}")
        name, value = item.split("=", 1)
        out[name.strip()] = value.strip()
    return out


def _number(text: str, what: str) -> float:
    """A finite float from the text of an option ("what" names the option and its item)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number; give a value such as 2e-4") from None
    if not math.isfinite(value):
        raise ValueError(f"{what}: {text!r} is not a finite number; give a finite value") from None
    return value


def _parameter_values(space, items: list[str] | None, what: str, check_bounds: bool = True) -> dict[str, float]:
    """``{name: value}`` from name=value options, refused unless every name is a parameter of
    ``space`` and every value a finite number, inside its bounds when ``check_bounds`` (the one
    check of --set, --start and --fix; the model refuses out-of-bounds values too, while a
    `CalibrationProblem` admits fixed values outside the bounds, e.g. a rate fixed to 0)."""
    values = {}
    for name, text in _parse_assignments(items, what).items():
        try:
            space.index(name)
        except ValueError as err:
            raise ValueError(f"{what}: {err}") from None
        values[name] = value = _number(text, f"{what} {name}={text}")
        p = space[name]
        if check_bounds and not p.lower <= value <= p.upper:
            raise ValueError(f"{what}: {name} = {value:g} lies outside its bounds [{p.lower:g}, {p.upper:g}]; "
                             "give a value inside them")
    return values


def _with_times(m, times: str | None):
    """The model observed at the comma-separated ``--times`` (unchanged when None)."""
    if times is None:
        return m
    items = [t.strip() for t in times.split(",")]
    ts = [_number(t, f"--times item {k + 1}") for k, t in enumerate(items)]
    try:
        return m.with_times(ts)
    except ValueError as err:
        raise ValueError(f"--times: {err}") from None


def _output_dir(out: pathlib.Path | None, default: pathlib.Path) -> pathlib.Path:
    """The --out folder, created (or checked) before any computation."""
    return fileio.prepare_output_dir(default if out is None else out, "--out folder")


def _data_file(path: pathlib.Path, what: str = "--data"):
    """Measurements from a CSV, with a clear message for a missing path or a folder."""
    from jcalib.data import Measurements

    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"{what} {os.fspath(path)!r}: no such file; give the path of a measurements CSV")
    if path.is_dir():
        raise ValueError(f"{what} {os.fspath(path)!r} is a folder; give the path of a measurements CSV")
    try:
        return Measurements.from_csv(path)
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None


def _option_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _build(name: str, options: list[str] | None):
    opts = {k: _option_value(v) for k, v in _parse_assignments(options, "--option").items()}
    try:
        return registry.get(name, **opts)
    except (ValueError, TypeError) as err:
        if isinstance(err, TypeError):  # an unknown keyword of the model's factory
            raise ValueError(f"--option: {err}; give options the factory of {name!r} takes") from None
        raise ValueError(str(err)) from None


@models_app.callback()
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


@models_app.command("show")
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


@app.command()
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


SENSITIVITY_METHODS = ("sobol", "local", "identifiability")


@app.command()
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
    from jcalib.problem import CalibrationProblem

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


def _check_solves(m, theta) -> np.ndarray:
    """The outputs at ``theta``; `SimulationError` when the solve fails (outputs and
    sensitivities there would be NaN)."""
    from jcalib.model import SolveStatus

    y, status = m.simulate_with_status(theta)
    if int(status) != SolveStatus.SUCCESS:
        raise SimulationError(f"simulation failed at {m.parameters.to_dict(theta)}: "
                              f"{SolveStatus.describe(int(status))}; choose other --set values or solver "
                              "settings (--option)", np.asarray(y)[None], np.array([int(status)]))
    return np.asarray(y)


def _write_results(out: pathlib.Path, metrics: dict, figures: dict, dpi: int = 110):
    """metrics.json (strict JSON) and the figures, each written atomically into ``out``."""
    from jcalib.jsonable import to_jsonable

    fileio.write_json(out / "metrics.json", to_jsonable(metrics))
    for fname, fig in figures.items():
        fileio.save_figure(fig, out / fname, dpi=dpi)


def _problem(m, data: pathlib.Path, free: str | None, fix: list[str] | None, start: list[str] | None,
             **problem_options):
    """CalibrationProblem from the CLI options, and the start {name: value} (default nominal).

    Raises ValueError (bad CSV, names or values) or OSError (unreadable file)."""
    from jcalib.problem import CalibrationProblem

    fixed = _parameter_values(m.parameters, fix, "--fix", check_bounds=False)
    for pname, value in fixed.items():
        p = m.parameters[pname]
        if not p.lower <= value <= p.upper:
            typer.echo(f"note: --fix {pname}={value:g} lies outside its bounds [{p.lower:g}, {p.upper:g}]; allowed "
                       "for a fixed value (the problem widens its bounds to include it)", err=True)
    theta0 = _parameter_values(m.parameters, start, "--start")
    measurements = _data_file(data)
    problem = CalibrationProblem(m, measurements, fixed=fixed,
                                 free=None if free is None else [f.strip() for f in free.split(",")],
                                 **problem_options)
    free = problem.model_free_names
    unknown = sorted(set(theta0) - set(free))
    if unknown:
        raise ValueError(f"--start: {', '.join(unknown)} not free; free: {', '.join(free)}")
    return problem, {n: theta0.get(n, m.parameters[n].nominal) for n in free}


def _joint_problem(m, data: list[pathlib.Path], free: str | None, fix: list[str] | None, start: list[str] | None,
                   conditions: list[str] | None, per_experiment: list[str] | None, **problem_options):
    """JointProblem of one experiment per --data file (named by the file's stem; its times
    from the file, its conditions the model's with --condition STEM:name=value applied), and
    the start {name: value} (a copy name[STEM] starts at its parameter's start).

    Raises ValueError (bad CSV, names, conditions or values) or OSError (unreadable file)."""
    from jcalib.joint_problem import JointProblem
    from jcalib.model import Experiment

    names = [pathlib.Path(path).stem for path in data]
    if len(set(names)) < len(names):
        raise ValueError(f"--data: the files' names {names} must differ (each names its experiment)")
    overrides: dict[str, dict[str, float]] = {n: {} for n in names}
    for item in conditions or []:
        target, sep, assignment = item.partition(":")
        if not sep or target not in overrides:
            raise ValueError(f"--condition {item!r}: expected EXPERIMENT:name=value with EXPERIMENT one of {names}")
        for key, text in _parse_assignments([assignment], "--condition").items():
            if key not in m.experiment.conditions:
                raise ValueError(f"--condition {item!r}: the model has no condition {key!r}; its conditions: "
                                 f"{sorted(m.experiment.conditions)}")
            overrides[target][key] = _number(text, f"--condition {item}")
    fixed = _parameter_values(m.parameters, fix, "--fix", check_bounds=False)
    theta0 = _parameter_values(m.parameters, start, "--start")
    pairs = []
    for name, path in zip(names, data):
        measurements = _data_file(path)
        cond = {k: float(v) for k, v in m.experiment.conditions.items()} | overrides[name]
        try:
            model = m.with_experiment(Experiment(np.asarray(measurements.ts), t0=float(m.experiment.t0),
                                                 conditions=cond, name=name))
        except ValueError as err:
            raise ValueError(f"--data {os.fspath(path)!r}: {err}") from None
        pairs.append((model, measurements))
    copies = [p.strip() for p in per_experiment or []]
    shared = ([f.strip() for f in free.split(",")] if free is not None
              else [n for n in m.parameters.names if n not in fixed and n not in copies])
    problem = JointProblem(pairs, free=shared, per_experiment=copies, fixed=fixed, **problem_options)
    unknown = sorted(set(theta0) - set(shared) - set(copies))
    if unknown:
        raise ValueError(f"--start: {', '.join(unknown)} not free; free: {', '.join(shared + copies)}")
    base = {n: theta0.get(n, m.parameters[n].nominal) for n in shared + copies}
    return problem, {n: base[n.split("[")[0]] for n in problem.free_names}


CALIBRATION_METHODS = ("gauss-newton", "trf", "de", "multistart")


@app.command()
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


LIKELIHOOD_WEIGHTING = {"relative": "relative", "absolute": "absolute", "lognormal": "relative"}


@app.command()
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
    (Not shown by --help.) Long for its 22 command-line options; the body is 61 lines."""
    import jax.numpy as jnp

    from jcalib import estimation, plotting
    from jcalib.bayes import Laplace, Prescaled, mala
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
        result = mala.sample(jax.random.key(seed), problem, z0, steps, coordinates="internal", n_chains=chains,
                             burn_in=burn,
                             thin=thin, warmup=warmup,
                             preconditioner=Prescaled(fraction) if preconditioner == "diagonal" else Laplace(),
                             target_acceptance=target_acceptance, progress=kernel == "mala", kernel=kernel)
    sampler_warnings = _sampler_warnings(result, caught)
    result.save(out / "posterior.npz")
    draws = result.samples_internal[:, :: max(1, result.n_draws // 250)]
    figures = {"marginals.png": plotting.plot_marginals(result, title=f"{name}: KDE marginals"),
               "trace.png": plotting.plot_trace(result)}
    band_metrics, coverage = _posterior_bands(problem, draws, name, joint, figures)
    metrics = {"model": name, "data": [str(d) for d in data] if joint else str(data[0]), "likelihood": likelihood,
               "sigma": sigma, "sample_sigma": sample_sigma, "fixed": problem.fixed, "start": theta0,
               "gauss_newton": None if fit is None else fit.to_dict(), "posterior": result.to_dict(),
               "warnings": sampler_warnings,
               "bands_90": band_metrics if joint else band_metrics[name],
               "band_coverage_of_data": coverage if joint else coverage[name]}
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


def _sampler_warnings(result, caught) -> list[str]:
    """The sampler's diagnostics warnings (``PosteriorResult.warnings`` and the SamplingWarnings
    raised while sampling), each once; other warnings caught meanwhile are shown again."""
    messages = [str(w) for w in getattr(result, "warnings", ()) or ()]
    for w in caught:
        if w.category.__name__ == "SamplingWarning":
            if str(w.message) not in messages:
                messages.append(str(w.message))
        else:
            warnings_module.showwarning(w.message, w.category, w.filename, w.lineno)
    return messages


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


@app.command()
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


@app.command()
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
    max_steps: Annotated[int, typer.Option(help="at this step all remaining parameters are identified "
                                                "together")] = 10,
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


PETAB_METHODS = ("simulate", "identifiability", "gauss-newton", "trf", "multistart", "sample")


@app.command()
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
    from jcalib import petab as jpetab
    from jcalib.bayes import Laplace, mala
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
    theta = nominal
    if not math.isfinite(llh_nominal):
        code = problem.solve_status(nominal)
        typer.echo(f"warning: the simulation at the nominal parameters failed ({code}); the log-likelihood "
                   "there is -inf", err=True)
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
    elif method == "multistart":
        theta = _petab_multistart(problem, seed, n_starts, llh_nominal, metrics, figures)
    elif method == "sample":
        result = mala.sample(jax.random.key(seed), problem, nominal, steps, coordinates="internal",
                             n_chains=chains, kernel="nuts", preconditioner=Laplace(), warmup=min(200, steps))
        result.save(out / "posterior.npz")
        metrics["posterior"] = result.to_dict()
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


def _petab_multistart(problem, seed: int, n_starts: int, llh_nominal: float, metrics: dict, figures: dict):
    """`jcalib petab --method multistart`: LM from uniform starts; the best start's internal
    parameters (its metrics and waterfall plot go to ``metrics`` and ``figures``)."""
    from jcalib import estimation, plotting

    starts = estimation.multistart(jax.random.key(seed), problem, n_starts, "lm", "uniform")
    llh = np.array([float(problem.log_likelihood(r.theta_internal)) if math.isfinite(r.loss) else -np.inf
                    for r in starts.results])
    reached = llh >= llh_nominal - 1e-3 * max(1.0, abs(llh_nominal))
    metrics["multistart"] = starts.to_dict(include_results=False)
    metrics.update(llh_starts=llh.tolist(), n_reaching_nominal=int(reached.sum()))
    figures["waterfall.png"] = plotting.plot_multistart_waterfall(starts)
    typer.echo(f"{int(reached.sum())} of {n_starts} starts reach the nominal log-likelihood {llh_nominal:.6g} "
               f"or better; best {llh.max():.6g}")
    return jax.numpy.asarray(starts.results[int(np.argmax(llh))].theta_internal)


def main():  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
