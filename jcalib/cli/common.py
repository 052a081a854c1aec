"""What every command shares: one-line errors for user mistakes (`USER_ERRORS`, exit code 2), option
parsing and checks, output folders and result files, and the problem a command's data define."""

from __future__ import annotations

import json
import math
import os
import pathlib
import warnings as warnings_module

import numpy as np
import typer
from typer.core import TyperGroup

from jcalib import fileio
from jcalib import models as registry
from jcalib.model import SimulationError

try:  # typer >= 0.20 vendors click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - typer with an external click
    from click.exceptions import NoArgsIsHelpError, UsageError


__all__ = ["USER_ERRORS"]


USER_ERRORS = (ValueError, OSError, SimulationError)
"""Exceptions that mean a user mistake (bad option, file or value): one line, exit code 2."""


class _OneLineErrors(TyperGroup):
    """Every user mistake in a command ends in one line ``error: ...`` on stderr and exit
    code 2, without a traceback: click's usage errors (missing or malformed options) and the
    `USER_ERRORS` jcalib raises for bad values, files and paths. A Ctrl-C ends in one line
    ``interrupted (Ctrl-C): ...`` and exit code 130. Other exceptions are bugs and keep their
    traceback; ``JCALIB_DEBUG=1`` keeps the traceback of user errors too. Whatever the end, the
    command's --out folder is released (`jcalib.fileio.lock_output_dir`)."""

    def invoke(self, ctx):
        try:
            return self._invoke(ctx)
        finally:  # the --out folder is free for the next run, however this one ended
            while _HELD_FOLDERS:
                _HELD_FOLDERS.pop()()

    def _invoke(self, ctx):
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
        except KeyboardInterrupt as err:  # a command that kept something reports it itself (exit 130)
            _interrupted(f"{err}" if str(err) else "the command stopped before it finished")


def _fail(message: str):
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(2)


def _error_text(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {os.fspath(err.filename)!r}; check the path"
    return str(err) or type(err).__name__


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


_HELD_FOLDERS: list = []  # releases of the --out folders this command holds (`_OneLineErrors.invoke`)


def _output_dir(out: pathlib.Path | None, default: pathlib.Path) -> pathlib.Path:
    """The --out folder, created (or checked) before any computation."""
    path = fileio.prepare_output_dir(default if out is None else out, "--out folder")
    _HELD_FOLDERS.append(fileio.lock_output_dir(path, "--out folder"))
    return path


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
        return registry.get(name, **opts)  # names an option the factory does not take
    except TypeError as err:  # a value of the wrong type inside the factory
        raise ValueError(f"--option: {err}") from None


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


def _exit_if_interrupted(starts, out: pathlib.Path, metrics: dict) -> None:
    """After a multistart that a Ctrl-C stopped: metrics.json with what finished (each start's
    result and reason, ``status: interrupted``), one line on stderr saying so, exit code 130."""
    if starts.extra.get("status") != "interrupted":
        return
    metrics.update(status="interrupted", multistart=starts.to_dict())
    _write_results(out, metrics, {})
    _interrupted(f"{starts.extra['n_finished_starts']} of {len(starts.results)} starts had finished; their results "
                 f"(and why the others have none) are in {out / 'metrics.json'}")


def _interrupted(line: str) -> None:
    """A Ctrl-C stopped the run and what it had was written: one line on stderr, exit code 130."""
    typer.echo(f"interrupted (Ctrl-C): {line}", err=True)
    raise typer.Exit(130)


def _sampler_warnings(result, caught, advice) -> list[str]:
    """The sampler's warnings: those of its adaptation (e.g. a Laplace covariance capped), then
    the run's diagnostics with the command's own options as ``advice``
    (`jcalib.bayes.diagnostics.sampling_warnings`); other warnings caught while sampling are
    shown again."""
    from jcalib.bayes import diagnostics

    messages = []
    for w in caught:
        if not issubclass(w.category, diagnostics.SamplingWarning):
            warnings_module.showwarning(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in result.warnings and str(w.message) not in messages:
            messages.append(str(w.message))
    return messages + list(diagnostics.sampling_warnings(result.names, result.acceptance_rate, result.rhat,
                                                         result.ess_bulk, advice))


def _data_json(path: pathlib.Path, what: str) -> dict:
    """The JSON object in a file (a metrics.json), with one-line errors."""
    data = fileio.read_input_bytes(path, what)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{what} {os.fspath(path)!r} is not a JSON file ({err})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} {os.fspath(path)!r} holds a JSON {type(obj).__name__}, not an object")
    return obj


def _problem(m, data: pathlib.Path, free: str | None, fix: list[str] | None, start: list[str] | None,
             **problem_options):
    """CalibrationProblem from the CLI options, and the start {name: value} (default nominal).

    Raises ValueError (bad CSV, names or values) or OSError (unreadable file)."""
    from jcalib.problems import CalibrationProblem

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
    from jcalib.model import Experiment
    from jcalib.problems import JointProblem

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
