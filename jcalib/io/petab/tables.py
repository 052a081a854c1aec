"""The PEtab tables read, checked and turned into a plan: estimated parameters and their scales, bounds and
priors, conditions, observable and noise formulas, and which measurement rows each simulation serves."""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pandas as pd
import petab.v1 as petab
import sympy as sp
from petab.v1.math import sympify_petab

from jcalib.io import sbml
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.probability.priors import LogNormal, LogUniform, Normal, PriorTruncationWarning, Uniform, bind_priors
from jcalib.stacking import padded

_SCALES = ("lin", "log", "log10")


_TRANSFORMATIONS = ("lin", "log", "log10")


_DISTRIBUTIONS = ("normal", "laplace")


def _unsupported(feature: str) -> ValueError:
    return ValueError(f"petab.load: unsupported PEtab feature: {feature}; jcalib.io.petab would rather refuse the "
                      "problem than compute something else")


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip() == "" or value.strip().lower() == "nan"
    return isinstance(value, float) and math.isnan(value)


def _source(value) -> float | str:
    """A table entry as a number or a parameter id."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value.strip()
    return float(value)


def _split(value) -> list[float | str]:
    """An ``observableParameters`` / ``noiseParameters`` entry (``a;b;c``) as sources."""
    if _is_missing(value):
        return []
    if not isinstance(value, str):
        return [float(value)]
    return [_source(part) for part in value.split(";")]


class _Plan(dict):
    """The tables of one PEtab problem as numpy arrays and JAX functions. Hashed by identity,
    so it can be a static field of `PetabCalibrationProblem` (one compilation per problem)."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


def _internal_factor(scale: str) -> float:
    """``z_petab = z_jcalib / factor``: jcalib's internal coordinate of a log-scale parameter is
    the natural log, PEtab's log10 scale is ``log10``."""
    return math.log(10.0) if scale == "log10" else 1.0


def _pair_groups(pairs: list[dict], times: np.ndarray, n_rows: int) -> tuple[list[dict], np.ndarray]:
    """The simulations in (at most) two groups, without and with pre-equilibration, each solved
    in one vmap (one compilation however many conditions), on time grids padded to the group's
    longest by repeating the last time, plus one slot for the steady state where a member has
    measurements at ``t = inf``, with the group's distinct pre-equilibration conditions and which
    one each member starts from; and each measurement row's index into the stacked
    ``(pairs x slots)`` outputs of the groups."""
    groups, offset, global_index = [], 0, np.zeros(n_rows, dtype=np.int64)
    for with_preequilibration in (False, True):
        members = [p for p in pairs if (p["preequilibration"] is not None) == with_preequilibration]
        if not members:
            continue
        n_times = max(p["ts"].size for p in members)
        steady = any(p["steady"] for p in members)
        n_slots = n_times + steady
        ts = np.stack([padded(p["ts"], n_times) for p in members])
        for k, pair in enumerate(members):
            for i in pair["rows"]:
                slot = n_times if np.isinf(times[i]) else int(np.searchsorted(pair["ts"], times[i]))
                global_index[i] = offset + k * n_slots + slot
        # each pre-equilibration condition is solved once for every simulation that starts from it
        preequilibrations = list(dict.fromkeys(p["preequilibration_id"] for p in members if with_preequilibration))
        groups.append({"pairs": members, "ts": ts, "steady": steady,
                       "t1": np.array([max(p["ts"].max(), 0.0) or 1.0 for p in members]),
                       "preequilibrations": [next(p["preequilibration"] for p in members
                                                  if p["preequilibration_id"] == c) for c in preequilibrations],
                       "preequilibration_index": np.array([preequilibrations.index(p["preequilibration_id"])
                                                           for p in members] if with_preequilibration else [],
                                                          dtype=np.int64)})
        offset += len(members) * n_slots
    return groups, global_index


def _check_tables(problem) -> None:
    if getattr(problem, "mapping_df", None) is not None and len(problem.mapping_df):
        raise _unsupported("the mapping table")
    measurements = problem.measurement_df
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    if np.any(np.isnan(times) | (times == -np.inf)):
        raise _unsupported("measurement times that are NaN or -inf")
    observables = problem.observable_df
    if petab.OBSERVABLE_TRANSFORMATION in observables:
        for obs_id, value in observables[petab.OBSERVABLE_TRANSFORMATION].items():
            if not _is_missing(value) and value not in _TRANSFORMATIONS:
                raise _unsupported(f"observableTransformation {value!r} (observable {obs_id!r})")
    if petab.NOISE_DISTRIBUTION in observables:
        for obs_id, value in observables[petab.NOISE_DISTRIBUTION].items():
            if not _is_missing(value) and value not in _DISTRIBUTIONS:
                raise _unsupported(f"noiseDistribution {value!r} (observable {obs_id!r})")
    for pid, scale in problem.parameter_df[petab.PARAMETER_SCALE].items():
        if scale not in _SCALES:
            raise _unsupported(f"parameterScale {scale!r} (parameter {pid!r})")


# --- the steps of load ----------------------------------------------------------------------
def _read(yaml_path, validate: bool):
    """The ``petab.v1.Problem`` (linted and checked by `_check_tables`) and its SBML file's path."""
    path = os.fspath(yaml_path)
    if not os.path.exists(path):
        raise ValueError(f"petab.load: no such file {path!r}")
    import yaml  # petab's own dependency

    with open(path) as stream:
        try:
            config = yaml.safe_load(stream)
        except yaml.YAMLError as err:
            raise ValueError(f"petab.load: {path!r} is not a YAML file ({err})") from None
    version = str(config.get("format_version", "")) if isinstance(config, dict) else ""
    if version.startswith("2"):
        raise ValueError(f"petab.load: {path!r} is a PEtab {version} problem; jcalib reads PEtab version 1 "
                         "(convert it with petab's tools, or use its v1 files)")
    problems = config.get("problems") if isinstance(config, dict) else None
    if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
        raise ValueError(f"petab.load: {path!r} is not a PEtab problem file (no 'problems' list; see the PEtab v1 "
                         "YAML format)")
    if len(problems) != 1 or len(problems[0].get("sbml_files", [])) != 1:
        raise _unsupported("more than one problem or SBML model in the YAML file")
    with warnings.catch_warnings():  # petab's pandas deprecation warnings are not the user's concern
        warnings.filterwarnings("ignore", module=r"petab\.")
        problem = petab.Problem.from_yaml(path)
    for obs_id, row in problem.observable_df.iterrows():  # before the linter, which crashes on some
        for column in (petab.OBSERVABLE_FORMULA, petab.NOISE_FORMULA):
            _formula(obs_id, column, row.get(column, 1.0))
    if len(problem.measurement_df) == 0:
        raise ValueError(f"petab.load: the measurement table of {path!r} has no rows; a PEtab problem needs "
                         "measurements")
    if validate and _lint(problem):
        raise ValueError(f"petab.load: {path!r} does not pass petab.v1.lint_problem (see its log messages)")
    _check_tables(problem)
    return problem, os.path.join(os.path.dirname(path), problems[0]["sbml_files"][0])


def _lint(problem) -> bool:
    """``petab.v1.lint_problem`` (True: errors, which it logs), without its note that the optional
    visualization table is absent."""
    def relevant(record: logging.LogRecord) -> bool:
        return "Visualization table not available" not in record.getMessage()

    logger = logging.getLogger("petab.v1.lint")
    logger.addFilter(relevant)
    try:
        return bool(petab.lint_problem(problem))
    finally:
        logger.removeFilter(relevant)


def _scaled(value: float, scale: str) -> float:
    """A physical value in a PEtab scale; a log-scale 0 (a nominal value "switched off") is -inf."""
    if scale != "lin" and value == 0.0:
        return -math.inf
    return value if scale == "lin" else math.log(value) if scale == "log" else math.log10(value)


def _estimated(estimated: pd.DataFrame) -> dict:
    """The estimated parameters' ids, scales, and bounds and nominal values in those scales."""
    scales = tuple(estimated[petab.PARAMETER_SCALE])

    def column(name):
        return np.array([_scaled(float(v), s) for v, s in zip(estimated[name], scales, strict=True)])

    return {"parameter_ids": tuple(estimated.index), "scales": scales, "lower": column(petab.LOWER_BOUND),
            "upper": column(petab.UPPER_BOUND), "nominal_internal": column(petab.NOMINAL_VALUE)}


def _conditions(condition_df: pd.DataFrame, sbml_model, table_ids: set) -> dict[str, dict[str, float | str]]:
    """``{condition id: {SBML id: number or parameter id}}`` without the missing entries."""
    conditions = {}
    for cid, row in condition_df.iterrows():
        entries = {}
        for column, value in row.items():
            if column == petab.CONDITION_NAME or _is_missing(value):
                continue
            if sbml_model.getElementBySId(column) is None:
                raise _unsupported(f"condition-table column {column!r}, which is not an SBML entity")
            source = _source(value)
            if isinstance(source, str) and source not in table_ids:
                raise ValueError(f"petab.load: condition {cid!r} sets {column!r} to {source!r}, which is not in the "
                                 "parameter table")
            entries[column] = source
        conditions[cid] = entries
    return conditions


def _formulas(observable_df: pd.DataFrame, sbml_model, table_ids: set) -> tuple[dict, list[str]]:
    """``{observable id: (observable formula, noise formula)}`` as sympy expressions, and the
    SBML ids they read (the model's outputs)."""
    formulas, outputs = {}, []
    for obs_id, row in observable_df.iterrows():
        pair = tuple(_formula(obs_id, column, row.get(column, 1.0))
                     for column in (petab.OBSERVABLE_FORMULA, petab.NOISE_FORMULA))
        formulas[obs_id] = pair
        for expr in pair:
            for symbol in sorted(expr.free_symbols, key=str):
                name = str(symbol)
                if name.startswith(("observableParameter", "noiseParameter")):
                    continue
                if sbml_model.getElementBySId(name) is None:
                    if name in table_ids:
                        continue
                    raise ValueError(f"petab.load: observable {obs_id!r} uses {name!r}, which is neither an SBML "
                                     "id, a parameter-table id nor an observable/noise placeholder")
                if name not in outputs:
                    outputs.append(name)
    return formulas, outputs


def _formula(obs_id: str, column: str, text) -> sp.Expr:
    """One formula of the observable table as sympy (PEtab's parser), refused when it does not
    parse or is not finite whatever the parameters (a division by zero)."""
    try:
        expr = sympify_petab(text)
    except Exception as err:  # petab's parser raises whatever sympy does (ZeroDivisionError for 0/0)
        raise ValueError(f"petab.load: observable {obs_id!r}: the {column} {text!r} cannot be read "
                         f"({type(err).__name__}: {err}); correct the formula") from None
    if expr.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
        raise ValueError(f"petab.load: observable {obs_id!r}: the {column} {text!r} is {expr}, not finite whatever "
                         "the parameters; correct the formula")
    return expr


def _model(sbml_path: str, sbml_model, conditions: dict, outputs: list[str], options: dict) -> sbml.SBMLModel:
    """The SBML model observing ``outputs``; parameters with a numeric initial assignment that
    conditions set are conditions of the model. Every condition entry must be a parameter,
    condition or state of it."""
    assigned = {ia.getSymbol() for ia in sbml_model.getListOfInitialAssignments()}
    overridden = sorted({name for entries in conditions.values() for name in entries
                         if name in assigned and sbml_model.getParameter(name) is not None})
    model = sbml.model_from_sbml(sbml_path, outputs=outputs or None, constant_parameters=overridden, **options)
    for cid, entries in conditions.items():
        for name in entries:
            if not (name in model.parameters.names or name in model.condition_names or name in model.state_names):
                raise _unsupported(f"condition {cid!r} sets {name!r}, which jcalib.io.sbml does not expose as a "
                                   "parameter, condition or state")
    return model


def _simulation_pairs(measurements: pd.DataFrame, conditions: dict, model, sbml_model):
    """One simulation per (pre-equilibration, simulation condition) pair of the measurement
    table: its conditions, finite time grid, whether it has ``t = inf`` data, and its rows;
    plus every row's time and pre-equilibration condition id ("" for none)."""
    n_rows = len(measurements)
    preeq_column = measurements.get(petab.PREEQUILIBRATION_CONDITION_ID)
    row_preeq = ["" if preeq_column is None or _is_missing(v) else str(v)
                 for v in (preeq_column if preeq_column is not None else [None] * n_rows)]
    row_sim = [str(v) for v in measurements[petab.SIMULATION_CONDITION_ID]]
    times = measurements[petab.TIME].to_numpy(dtype=np.float64)
    pairs = []
    for preeq, sim in dict.fromkeys(zip(row_preeq, row_sim, strict=True)):
        rows = [i for i in range(n_rows) if (row_preeq[i], row_sim[i]) == (preeq, sim)]
        if preeq:
            changed = [name for name in model.condition_names
                       if name in conditions[preeq] and name not in model.state_names
                       and conditions[preeq].get(name) != conditions[sim].get(name)]
            compartments = [name for name in changed if sbml_model.getCompartment(name) is not None]
            if compartments:
                raise _unsupported(f"pre-equilibration condition {preeq!r} changing compartment sizes {compartments}")
        finite = np.unique(times[rows][np.isfinite(times[rows])])
        pairs.append({"condition": conditions[sim], "preequilibration": conditions[preeq] if preeq else None,
                      "preequilibration_id": preeq,
                      "ts": finite if finite.size else np.zeros(1), "steady": bool(np.any(np.isinf(times[rows]))),
                      "rows": rows})
    if model.event_ids and (any(p["steady"] for p in pairs) or any(p["preequilibration"] is not None for p in pairs)):
        raise _unsupported(f"steady states (pre-equilibration or t = inf data) of a model with events "
                           f"{list(model.event_ids)}: the steady-state solve does not apply events")
    return pairs, times, row_preeq


def _noise_model(observable_df: pd.DataFrame, measurements: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per measurement row: the observable ``transform`` (index into ``_TRANSFORMATIONS``)
    and whether the noise is ``laplace``."""
    def per_observable(column, default):
        if column not in observable_df:
            return {}
        return {obs_id: default if _is_missing(v) else v for obs_id, v in observable_df[column].items()}

    transformation_of = per_observable(petab.OBSERVABLE_TRANSFORMATION, "lin")
    distribution_of = per_observable(petab.NOISE_DISTRIBUTION, "normal")
    row_obs = [str(v) for v in measurements[petab.OBSERVABLE_ID]]
    return {"transform": np.array([_TRANSFORMATIONS.index(transformation_of.get(o, "lin")) for o in row_obs],
                                  dtype=np.int32),
            "laplace": np.array([distribution_of.get(o, "normal") == "laplace" for o in row_obs])}


def _placeholder_spec(rows, per_row, index: int, kind: str, obs_id: str, table_ids: set):
    """``("rows", (base, {parameter id: mask}))``: a placeholder's value per row, a number
    or a parameter (`_row_values`)."""
    base, refs = np.zeros(len(rows)), {}
    for k, i in enumerate(rows):
        if index >= len(per_row[i]):
            raise ValueError(f"petab.load: measurement row {i} of observable {obs_id!r} gives "
                             f"{len(per_row[i])} {kind}s; its formulas use {kind}{index + 1}_{obs_id}")
        source = per_row[i][index]
        if isinstance(source, str):
            if source not in table_ids:
                raise ValueError(f"petab.load: measurement row {i} sets {kind}{index + 1}_{obs_id} to {source!r}, "
                                 "which is not in the parameter table")
            refs.setdefault(source, np.zeros(len(rows)))[k] = 1.0
        else:
            base[k] = source
    return ("rows", (base, refs))


def _row_groups(measurements: pd.DataFrame, formulas: dict, outputs: list[str], global_index: np.ndarray,
                table_ids: set) -> list[dict]:
    """The measurement rows per observable, each group with its rows, their index into the
    simulations' outputs, and its observable and noise formulas as JAX functions with the
    specs of their arguments (model outputs, placeholders, parameters)."""
    n_rows = len(measurements)
    row_obs = [str(v) for v in measurements[petab.OBSERVABLE_ID]]
    placeholders = {kind: [_split(v) for v in measurements.get(column, [None] * n_rows)] for kind, column in
                    (("observableParameter", petab.OBSERVABLE_PARAMETERS), ("noiseParameter", petab.NOISE_PARAMETERS))}
    groups = []
    for obs_id in dict.fromkeys(row_obs):
        if obs_id not in formulas:
            raise ValueError(f"petab.load: measurements of unknown observable {obs_id!r}")
        rows = np.array([i for i in range(n_rows) if row_obs[i] == obs_id], dtype=np.int64)
        group = {"rows": rows, "global_index": global_index[rows]}
        for key, expr in zip(("observable", "noise"), formulas[obs_id], strict=True):
            symbols = sorted(expr.free_symbols, key=str)
            specs = []
            for symbol in symbols:
                name = str(symbol)
                for kind, per_row in placeholders.items():
                    prefix, suffix = kind, f"_{obs_id}"
                    if name.startswith(prefix) and name.endswith(suffix) and name[len(prefix):-len(suffix)].isdigit():
                        index = int(name[len(prefix):-len(suffix)]) - 1
                        specs.append(_placeholder_spec(rows, per_row, index, kind, obs_id, table_ids))
                        break
                else:
                    specs.append(("output", outputs.index(name)) if name in outputs else ("parameter", name))
            group[f"{key}_args"] = specs
            group[f"{key}_fn"] = _jax_function(symbols, expr)
        groups.append(group)
    return groups


def _used_outputs(pair_groups: list[dict], groups: list[dict], n_outputs: int) -> None:
    """Mark in each pair group (``"used"``: ``(n_pairs, n_slots, n_outputs)`` booleans) the model
    outputs that some measurement row's observable or noise formula reads at each slot."""
    n_total = sum(len(g["pairs"]) * g["ts"].shape[1] + len(g["pairs"]) * g["steady"] for g in pair_groups)
    used = np.zeros((n_total, n_outputs), dtype=bool)
    for group in groups:
        outputs = [item for kind, item in group["observable_args"] + group["noise_args"] if kind == "output"]
        used[np.ix_(group["global_index"], outputs)] = True
    offset = 0
    for g in pair_groups:
        n_slots = g["ts"].shape[1] + g["steady"]
        g["used"] = used[offset:offset + len(g["pairs"]) * n_slots].reshape(len(g["pairs"]), n_slots, n_outputs)
        offset += len(g["pairs"]) * n_slots


def _sigma_varies(groups: list[dict], estimated_ids: set) -> bool:
    """Whether a noise formula depends on the model or on an estimated parameter."""
    def varies(spec) -> bool:
        kind, item = spec
        if kind == "output":
            return True
        if kind == "rows":
            return any(name in estimated_ids for name in item[1])
        return item in estimated_ids

    return any(varies(spec) for group in groups for spec in group["noise_args"])


def _space(estimated: pd.DataFrame) -> ParameterSpace:
    """The estimated parameters as jcalib parameters (log-scale for PEtab's log and log10)."""
    parameters = []
    for pid, row in estimated.iterrows():
        scale = row[petab.PARAMETER_SCALE]
        lower, upper = float(row[petab.LOWER_BOUND]), float(row[petab.UPPER_BOUND])
        if scale == "lin" and math.isfinite(lower) != math.isfinite(upper):
            raise _unsupported(f"a lin-scale estimated parameter with one infinite bound ({pid!r})")
        nominal = float(row[petab.NOMINAL_VALUE])
        if not lower <= nominal <= upper:  # e.g. 0 on a log scale; PEtab's linter lets it pass
            inside = min(max(nominal, lower), upper)
            warnings.warn(f"petab.load: the nominal value {nominal} of {pid!r} lies outside its bounds [{lower}, "
                          f"{upper}]; pp.problem's default start uses {inside} (pp.nominal_internal keeps "
                          f"{nominal})", stacklevel=3)
            nominal = inside
        try:
            parameters.append(Parameter(str(pid), nominal, lower, upper, log_scale=scale != "lin"))
        except ValueError as error:
            raise ValueError(f"petab.load: parameter-table row {pid!r}: {error}") from None
    return ParameterSpace(parameters)


class _UnsupportedPrior(eqx.Module):
    """The prior of a problem whose objective priors jcalib cannot represent: the likelihood,
    residuals and least-squares methods work; the prior density refuses (it would be another
    prior)."""

    feature: str = eqx.field(static=True)

    def log_prob_internal(self, theta_internal):
        raise ValueError(f"PetabCalibrationProblem.log_prior: unsupported PEtab feature: {self.feature}; the "
                         "likelihood and least-squares methods work, priors and posteriors do not")


_PRIOR_TYPES = ("parameterScaleUniform", "parameterScaleNormal", "uniform", "normal", "logNormal")


def _priors(estimated: pd.DataFrame, space: ParameterSpace):
    """PEtab's objective priors as jcalib priors (truncated to the bounds), None when the table
    has none (uniform on the bounds in the parameter scale, jcalib's default)."""
    column = petab.OBJECTIVE_PRIOR_TYPE
    if column not in estimated:
        return None
    priors = {}
    for pid, row in estimated.iterrows():
        kind = row[column]
        if _is_missing(kind):
            continue
        if kind not in _PRIOR_TYPES:
            return _UnsupportedPrior(f"objectivePriorType {kind!r} (parameter {pid!r}); supported: {_PRIOR_TYPES}")
        values = [float(v) for v in _split(row.get(petab.OBJECTIVE_PRIOR_PARAMETERS))]
        if len(values) != 2:
            raise ValueError(f"petab.load: parameter {pid!r}: objectivePriorParameters must be two numbers "
                             f"'a;b'; got {row.get(petab.OBJECTIVE_PRIOR_PARAMETERS)!r}")
        a, b = values
        scale = row[petab.PARAMETER_SCALE]
        factor = _internal_factor(scale)
        if kind == "uniform" or (kind == "parameterScaleUniform" and scale == "lin"):
            priors[str(pid)] = Uniform(a, b)
        elif kind == "parameterScaleUniform":
            priors[str(pid)] = LogUniform(math.exp(a * factor), math.exp(b * factor))
        elif kind == "normal" or (kind == "parameterScaleNormal" and scale == "lin"):
            priors[str(pid)] = Normal(a, b)
        elif kind == "parameterScaleNormal":
            priors[str(pid)] = LogNormal(a * factor, b * factor)
        else:
            priors[str(pid)] = LogNormal(a, b)
    if not priors:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PriorTruncationWarning)  # PEtab's priors are truncated by design
        return bind_priors(priors, space, "PEtab objective prior")


def _jax_function(symbols, expr) -> Callable:
    """A sympy expression as a function of its symbols' (per-row) values, in float64 JAX."""
    fn = sp.lambdify(symbols, expr, modules="jax")

    def wrapped(*args):
        return jnp.asarray(fn(*args), dtype=jnp.float64)

    return wrapped
