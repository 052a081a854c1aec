"""JointProblem: one calibration over several experiments (recipes, days, conditions).

Each experiment is a model (observed through its own `jcalib.model.Experiment`: times,
conditions, mask) with its own `jcalib.data.Measurements`. The problem's parameter vector
``theta_internal`` holds

- **shared** parameters (``free``): one value for every experiment that has them;
- **per-experiment** parameters (``per_experiment``): one copy per experiment, named
  ``name[experiment]`` (``offset_Mw[recipe 2]``), e.g. a scaling, an offset or an initial
  concentration per experiment;

and every other parameter is **fixed** (``fixed``: one value for all, or ``{experiment:
value}``) or keeps its nominal value. Conditions that a model reads from its experiment
(``Experiment(conditions=...)``) stay the experiment's.

Residuals and the Jacobian stack the experiments' in experiment order (each experiment's
measured entries in row-major (time, output) order, as in `CalibrationProblem`); the
log-likelihood sums them. Experiments with the same structure (same model class, settings,
free/fixed pattern and noise model) are simulated together: their time grids and measured
entries are padded to a common length (repeating the last time, masked out) and one
``vmap`` solves them all, so a problem of 100 experiments compiles once, like one of 10.
A group of one experiment is evaluated without padding or ``vmap``, so a joint problem of one
experiment equals the `CalibrationProblem` of that experiment exactly.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> model = jcalib.models.get("four_substance_reactions")
    >>> data = jcalib.synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, sigma=0.01)
    >>> exp = model.experiment
    >>> again = model.with_experiment(jcalib.Experiment(exp.ts, t0=float(exp.t0), t1=float(exp.t1), name="batch 2",
    ...                                                 conditions={k: float(v) for k, v in exp.conditions.items()}))
    >>> problem = JointProblem([(model, data), (again, data)], free=["kab", "kac"], fixed={"kad": 5e-5})
    >>> problem.n_observed
    176
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jcalib.data import Measurements
from jcalib.model import AbstractModel, Experiment, SolveStatus
from jcalib.parameters import Parameter, ParameterSpace, check_names
from jcalib.probability.priors import AbstractPrior, GaussianPrior, bind_priors, quiet_truncation
from jcalib.problems.contract import AbstractProblem
from jcalib.problems.single import CalibrationProblem
from jcalib.stacking import map_stacked, padded, stack

__all__ = ["JointProblem"]


class JointProblem(AbstractProblem):
    """A calibration problem over several experiments (``jcalib.JointProblem``).

    Args:
        experiments: ``[(model, measurements), ...]``: each model observed through its own
            experiment (``model.with_experiment(Experiment(ts, conditions=..., name=...))``),
            each measurements with that model's outputs. Experiment names (``experiment.name``,
            else ``"experiment <k>"``, counting from 1) must be unique.
        free: shared parameters, in the order of ``theta_internal``; each must be a
            parameter of at least one experiment's model (experiments whose model lacks it
            ignore it).
        per_experiment: parameters with one copy per experiment (after the shared ones in
            ``theta_internal``, grouped by parameter, then by experiment), named
            ``name[experiment]``; their bounds and nominal values are the model's.
        fixed: ``{name: value}`` (the same physical value in every experiment) or
            ``{name: {experiment: value}}`` (one per experiment; experiments left out keep
            the nominal value, or, for a ``per_experiment`` parameter, their free copy), or
            ``{name: "condition"}``: in each experiment the value of that condition of its
            experiment (``Experiment(conditions=...)``).
            Neither free nor fixed: the nominal value.
        weighting: as in `CalibrationProblem`, one for all experiments (σ per experiment from
            its measurements or its likelihood).
        likelihood: as in `CalibrationProblem`, for every experiment, or ``{experiment:
            likelihood}`` (experiments left out: the weighting's default), e.g. a relative
            Gaussian for one instrument and a log-normal one for another.
        prior: ``"uniform"`` on the box, a `GaussianPrior`, or ``{name: prior}`` in physical
            units, where a per-experiment parameter's plain name gives every copy that prior
            and ``name[experiment]`` one copy.

    Raises:
        ValueError: no experiments; a pair that is not (model, Measurements); duplicate
            experiment names; an unknown, duplicate or both-free-and-fixed name; a fixed
            value for an unknown experiment; no free parameter; whatever `CalibrationProblem`
            refuses for one experiment (the message names the experiment).
    """

    experiment_problems: tuple[CalibrationProblem, ...]
    groups: tuple[CalibrationProblem, ...]  # stacked (leading axis: the group's experiments), padded
    group_columns: tuple[Int[Array, "n_members n_sub"], ...]  # joint column of each member parameter
    group_valid: tuple[Int[Array, " n_valid"], ...]  # real entries in the flattened (members, padded)
    order: Int[Array, " n_observed"]  # group-stacked entries -> experiment order
    prior: GaussianPrior | object | None
    space: ParameterSpace = eqx.field(static=True)
    free_names: tuple[str, ...] = eqx.field(static=True)
    experiment_names: tuple[str, ...] = eqx.field(static=True)
    group_members: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    fixed_values: tuple[tuple[str, object], ...] = eqx.field(static=True)  # hashable form of ``fixed``
    shared_names: tuple[str, ...] = eqx.field(static=True)
    per_experiment_names: tuple[str, ...] = eqx.field(static=True)
    weighting: str = eqx.field(static=True)
    noise_names: tuple[str, ...] = eqx.field(static=True, default=())
    noise_prior: None = None

    def __init__(self, experiments: Sequence[tuple[AbstractModel, Measurements]],
                 free: Sequence[str] | None = None, per_experiment: Sequence[str] = (),
                 fixed: Mapping[str, object] | None = None, weighting: str = "relative",
                 prior: str | GaussianPrior | Mapping[str, AbstractPrior] = "uniform", likelihood=None):
        pairs = _check_pairs(experiments)
        names = _experiment_names([m for m, _ in pairs])
        if isinstance(likelihood, Mapping):
            unknown = sorted(set(likelihood) - set(names))
            if unknown:
                raise ValueError(f"JointProblem: likelihood names unknown experiments {unknown}; known: {list(names)}")
        free = () if free is None else ((free,) if isinstance(free, str) else tuple(free))
        per_experiment = (per_experiment,) if isinstance(per_experiment, str) else tuple(per_experiment)
        fixed = dict(fixed or {})
        _check_names(pairs, names, free, per_experiment, fixed)

        # the joint space: shared parameters, then each per-experiment parameter's copies
        params, columns_of = [], []
        for name in free:
            params.append(_first_parameter(pairs, name))
        for name in per_experiment:
            held = fixed.get(name, {})
            for k, (model, _) in enumerate(pairs):
                if name in model.parameters.names and names[k] not in held:
                    p = model.parameters[name]
                    params.append(Parameter(f"{name}[{names[k]}]", p.nominal, p.lower, p.upper, p.unit, p.log_scale))
        space = ParameterSpace(tuple(params))
        index = {p.name: i for i, p in enumerate(space)}

        problems, padded_inputs = [], []
        for k, (model, data) in enumerate(pairs):
            own = model.parameters.names
            sub_free = [n for n in free if n in own] + [n for n in per_experiment if n in own
                                                         and names[k] not in fixed.get(n, {})]
            if not sub_free:
                raise ValueError(f"JointProblem: experiment {names[k]!r} has none of the free parameters")
            sub_fixed = _experiment_fixed(model, names[k], fixed)
            columns_of.append([index[n] if n in free else index[f"{n}[{names[k]}]"] for n in sub_free])
            own_likelihood = likelihood.get(names[k]) if isinstance(likelihood, Mapping) else likelihood
            settings = dict(free=sub_free, fixed=sub_fixed, weighting=weighting, likelihood=own_likelihood)
            try:
                with quiet_truncation():  # the joint prior's check speaks for them (below)
                    problems.append(CalibrationProblem(model, data, **settings))
            except ValueError as e:
                raise ValueError(f"JointProblem: experiment {names[k]!r}: {e}") from None
            padded_inputs.append((model, data, settings))

        groups, members, columns, valid, positions = _build_groups(problems, padded_inputs, columns_of)
        offsets = np.cumsum([0] + [p.n_observed for p in problems])
        stacked_position = np.concatenate(positions)  # experiment-order position of each stacked entry
        order = np.empty(stacked_position.size, dtype=np.int64)
        order[stacked_position] = np.arange(stacked_position.size)
        assert stacked_position.size == offsets[-1]

        self.experiment_problems = tuple(problems)
        self.groups = tuple(groups)
        self.group_columns = tuple(jnp.asarray(c) for c in columns)
        self.group_valid = tuple(jnp.asarray(v) for v in valid)
        self.order = jnp.asarray(order)
        self.prior = _joint_prior(prior, space)
        self.space = space
        self.free_names = space.names
        self.experiment_names = names
        self.group_members = tuple(tuple(m) for m in members)
        self.fixed_values = tuple((n, tuple((e, float(x)) for e, x in v.items()) if isinstance(v, Mapping)
                                   else v if isinstance(v, str) else float(v)) for n, v in fixed.items())
        self.shared_names = free
        self.per_experiment_names = per_experiment
        self.weighting = weighting
        self.noise_names = ()
        self.noise_prior = None

    # --- static description ----------------------------------------------------------------
    @property
    def n_experiments(self) -> int:
        return len(self.experiment_problems)

    @property
    def n_observed(self) -> int:
        """Number of residuals: the measured entries of all experiments."""
        return int(self.order.shape[0])

    @property
    def fixed(self) -> dict[str, object]:
        """``{name: value}`` or ``{name: {experiment: value}}`` as given."""
        return {n: dict(v) if isinstance(v, tuple) else v for n, v in self.fixed_values}

    def fix(self, values: Mapping[str, float]) -> JointProblem:
        """A new problem with the free parameters in ``values`` (physical) fixed too: shared
        names in every experiment, ``name[experiment]`` in that experiment only.

        Raises:
            ValueError: a name that is not free; nothing left free.
        """
        if not isinstance(values, Mapping):
            raise ValueError(f"fix(): expected a {{name: value}} dict; got {values!r}")
        fixed = self.fixed
        for name, value in values.items():
            if name not in self.free_names:
                raise ValueError(f"fix(): {name!r} is not free; free: {', '.join(self.free_names)}")
            base, _, experiment = name.partition("[")
            if experiment:
                fixed[base] = {**fixed.get(base, {}), experiment[:-1]: float(value)}
            else:
                fixed[name] = float(value)
        if len(values) >= self.n_free:
            raise ValueError(f"fix(): fixing {list(values)} leaves no free parameter")
        pairs = [(p.model, p.measurements) for p in self.experiment_problems]
        prior = "uniform" if self.prior is None else (
            self.prior if isinstance(self.prior, GaussianPrior)
            else {n: p for n, p in self.prior.as_dict().items() if n not in values})
        with quiet_truncation():  # the priors were checked (and said) when this problem was made
            return JointProblem(pairs, free=[n for n in self.shared_names if n not in values],
                                per_experiment=self.per_experiment_names, fixed=fixed, weighting=self.weighting,
                                prior=prior, likelihood={name: p.likelihood for name, p in
                                                         zip(self.experiment_names, self.experiment_problems)})

    @property
    def sigma_available(self) -> bool:
        return all(p.sigma_available for p in self.experiment_problems)

    @property
    def experiment_rows(self) -> tuple[slice, ...]:
        """The rows of `residuals`/`jacobian` that belong to each experiment."""
        ends = np.cumsum([p.n_observed for p in self.experiment_problems])
        return tuple(slice(int(a), int(b)) for a, b in zip(np.concatenate([[0], ends[:-1]]), ends))

    def experiment_index(self, experiment: str | int) -> int:
        """The position of an experiment given by name or index.

        Raises:
            ValueError: an unknown name or an index out of range.
        """
        if isinstance(experiment, str):
            if experiment not in self.experiment_names:
                raise ValueError(f"unknown experiment {experiment!r}; known: {list(self.experiment_names)}")
            return self.experiment_names.index(experiment)
        if isinstance(experiment, (int, np.integer)) and 0 <= int(experiment) < self.n_experiments:
            return int(experiment)
        raise ValueError(f"experiment must be a name from {list(self.experiment_names)} or an index below "
                         f"{self.n_experiments}; got {experiment!r}")

    def experiment_columns(self, experiment: str | int) -> np.ndarray:
        """The positions in ``theta_internal`` of an experiment's free parameters, in the order
        of its `experiment_problems` entry's ``free_names``."""
        k = self.experiment_index(experiment)
        for members, cols in zip(self.group_members, self.group_columns):
            if k in members:
                return np.asarray(cols)[members.index(k)]
        raise AssertionError(k)

    def experiment_internal(self, theta_internal: Float[ArrayLike, " n_free"]) -> list[Float[Array, " n_sub"]]:
        """Each experiment's ``theta_internal`` (its `experiment_problems` entry's coordinates)."""
        z = self._check(theta_internal)
        return [z[self.experiment_columns(k)] for k in range(self.n_experiments)]

    def simulate(self, theta_internal: Float[ArrayLike, " n_free"]) -> list[Float[Array, "n_times n_outputs"]]:
        """Each experiment's outputs at its measurement times (NaN where a solve failed)."""
        return [p.simulate(zk) for p, zk in zip(self.experiment_problems, self.experiment_internal(theta_internal))]

    def forward_mode(self) -> JointProblem:
        """This problem with every model in forward mode (for ``jax.jacfwd`` through the solver)."""
        groups = tuple(g.forward_mode() for g in self.groups)
        return eqx.tree_at(lambda p: p.groups, self, groups)

    def solve_status(self, theta_internal: Float[ArrayLike, " n_free"]) -> int:
        """The first experiment's non-SUCCESS `jcalib.model.SolveStatus` code, else SUCCESS."""
        for p, zk in zip(self.experiment_problems, self.experiment_internal(theta_internal)):
            code = p.solve_status(zk)
            if code != SolveStatus.SUCCESS:
                return code
        return int(SolveStatus.SUCCESS)

    # --- implementations --------------------------------------------------------------------
    def _per_group(self, fn, z):
        """``fn(problem, z_k)`` for every experiment, group by group: a list of
        ``(n_members, ...)`` arrays (groups of one: ``(1, ...)`` without vmap)."""
        out = []
        for group, cols in zip(self.groups, self.group_columns):
            zs = z[cols]
            if cols.shape[0] == 1:
                out.append(fn(group, zs[0])[None])
            else:
                out.append(map_stacked(lambda member: fn(*member), (group, zs), batch_size=None))
        return out

    def _gather(self, blocks):
        """Stacked per-group ``(n_members, n_padded, ...)`` blocks -> ``(n_observed, ...)`` in
        experiment order."""
        flat = [b.reshape((-1,) + b.shape[2:])[v] for b, v in zip(blocks, self.group_valid)]
        return jnp.concatenate(flat, axis=0)[self.order]

    def _residuals_impl(self, z):
        return self._gather(self._per_group(lambda p, zk: p._residuals_impl(zk), z))

    def _jacobian_impl(self, z):
        blocks = []
        for jac, cols in zip(self._per_group(lambda p, zk: p._jacobian_impl(zk), z), self.group_columns):
            scatter = jax.nn.one_hot(cols, self.n_free, dtype=jac.dtype)  # (members, n_sub, n_free)
            blocks.append(jnp.einsum("kns,ksf->knf", jac, scatter))
        return self._gather(blocks)

    def _log_likelihood_terms(self, z):
        return self._gather(self._per_group(lambda p, zk: p._log_likelihood_terms(zk), z))


# --- construction helpers ------------------------------------------------------------------
def _check_pairs(experiments):
    if isinstance(experiments, tuple) and len(experiments) == 2 and isinstance(experiments[1], Measurements):
        raise ValueError("JointProblem: experiments must be a list of (model, measurements) pairs; got one pair "
                         "(wrap it in a list)")
    pairs = list(experiments)
    if not pairs:
        raise ValueError("JointProblem: no experiments given")
    for k, pair in enumerate(pairs):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], AbstractModel)
                or not isinstance(pair[1], Measurements)):
            raise ValueError(f"JointProblem: experiments[{k}] must be a (model, Measurements) pair; got "
                             f"{type(pair).__name__}")
    return [tuple(p) for p in pairs]


def _experiment_names(models) -> tuple[str, ...]:
    names = tuple(m.experiment.name or f"experiment {k + 1}" for k, m in enumerate(models))
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"JointProblem: duplicate experiment names {duplicates}; give each experiment its own "
                         "name (Experiment(..., name=...))")
    for n in names:
        if "[" in n or "]" in n:
            raise ValueError(f"JointProblem: experiment name {n!r} contains a bracket")
    return names


def _check_names(pairs, names, free, per_experiment, fixed):
    known = sorted({n for m, _ in pairs for n in m.parameters.names})
    for what, group in (("free", free), ("per_experiment", per_experiment), ("fixed", tuple(fixed))):
        check_names(f"JointProblem: {what}", group, known)
    fixed_everywhere = tuple(n for n, v in fixed.items() if not isinstance(v, Mapping))
    groups = {"free": free, "per_experiment": per_experiment, "fixed": tuple(fixed)}
    for a, b in (("free", "per_experiment"), ("free", "fixed"), ("per_experiment", "fixed")):
        both = sorted(set(groups[a]) & set(fixed_everywhere if b == "fixed" and a == "per_experiment" else groups[b]))
        if both:
            raise ValueError(f"JointProblem: {both} both {a} and {b}; name each parameter once (a per_experiment "
                             "parameter may be fixed in some experiments: fixed={name: {experiment: value}})")
    if not free and not per_experiment:
        raise ValueError("JointProblem: no free parameter (give free= or per_experiment=)")
    for name, value in fixed.items():
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise ValueError(f"JointProblem: fixed[{name!r}] names unknown experiments {unknown}; known: "
                                 f"{list(names)}")
            values = list(value.values())
        elif isinstance(value, str):
            continue  # a condition's name: checked per experiment
        else:
            values = [value]
        for v in values:
            if not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(float(v)):
                raise ValueError(f"JointProblem: fixed[{name!r}] must be a finite number or {{experiment: number}}; "
                                 f"got {v!r}")


def _experiment_fixed(model: AbstractModel, name: str, fixed: Mapping[str, object]) -> dict[str, float]:
    """The physical values ``fixed`` holds in the experiment ``name`` (of ``model``): one value
    for all, this experiment's entry of ``{experiment: value}``, or its condition's value."""
    own = model.parameters.names
    sub_fixed = {}
    for parameter, value in fixed.items():
        if parameter not in own:
            continue
        if isinstance(value, str):
            conditions = model.experiment.conditions
            if value not in conditions:
                raise ValueError(f"JointProblem: fixed[{parameter!r}] = {value!r}: experiment {name!r} has no "
                                 f"condition {value!r}; its conditions: {sorted(conditions)}")
            sub_fixed[parameter] = float(conditions[value])
        elif isinstance(value, Mapping):
            if name in value:
                sub_fixed[parameter] = float(value[name])
        else:
            sub_fixed[parameter] = float(value)
    return sub_fixed


def _first_parameter(pairs, name) -> Parameter:
    for model, _ in pairs:
        if name in model.parameters.names:
            return model.parameters[name]
    raise AssertionError(name)


def _padded_problem(model, data, settings, n_times, n_observed):
    """The experiment's problem on a time grid padded to ``n_times`` (last time repeated,
    masked out) and measured entries padded to ``n_observed`` (repeats of the first entry,
    dropped by the joint problem), with a nameless experiment so that experiments of the
    same structure stack."""
    exp = model.experiment
    model = model.with_experiment(Experiment(np.asarray(exp.ts), t0=float(exp.t0), t1=float(exp.t1),
                                             conditions={k: float(v) for k, v in exp.conditions.items()},
                                             mask=exp.mask, name="",
                                             preequilibration=None if exp.preequilibration is None else
                                             {k: float(v) for k, v in exp.preequilibration.items()}))
    pad = n_times - data.n_times
    if pad:
        mask = np.concatenate([np.asarray(data.mask), np.zeros((pad, data.n_outputs), dtype=bool)])
        sigma = data.sigma
        if sigma is not None and np.ndim(sigma) == 2:
            sigma = padded(sigma, n_times)
        data = Measurements(padded(data.ts, n_times), padded(data.values, n_times), mask=mask, sigma=sigma,
                            output_names=data.output_names)
    with quiet_truncation():
        problem = CalibrationProblem(model, data, **settings)
    extra = n_observed - problem.n_observed
    if extra:
        def grow(a):
            return None if a is None else jnp.concatenate([a, jnp.repeat(a[:1], extra)])

        problem = eqx.tree_at(lambda p: (p.observed_index, p.x_observed, p.sigma_observed),
                              problem, tuple(grow(a) for a in (problem.observed_index, problem.x_observed,
                                                               problem.sigma_observed)),
                              is_leaf=lambda x: x is None)
    return problem


def _structure(problem):
    """What must agree for two problems to be stacked: array shapes and dtypes, and the
    non-array leaves and static fields."""
    arrays, static = eqx.partition(problem, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(arrays)
    static_leaves, static_def = jax.tree_util.tree_flatten(static)
    return treedef, tuple((a.shape, a.dtype) for a in leaves), static_def, static_leaves


def _same(a, b) -> bool:
    try:
        return bool(a[0] == b[0] and a[1] == b[1] and a[2] == b[2] and len(a[3]) == len(b[3])
                    and all(x is y or bool(x == y) for x, y in zip(a[3], b[3])))
    except Exception:  # a leaf whose == is not a plain bool: treat as different
        return False


def _build_groups(problems, padded_inputs, columns_of):
    """Group experiments that can be simulated in one vmap; returns the stacked problems,
    members, column tables, valid-entry indices and each stacked entry's experiment-order
    position."""
    n_times = max(data.n_times for _, data, _ in padded_inputs)
    n_observed = max(p.n_observed for p in problems)
    offsets = np.cumsum([0] + [p.n_observed for p in problems])
    candidates, keys = [], []
    for model, data, settings in padded_inputs:
        try:
            padded = _padded_problem(model, data, settings, n_times, n_observed)
        except ValueError:  # e.g. an input table too short for the padded grid: simulate it alone
            padded = None
        candidates.append(padded)
        keys.append(None if padded is None else _structure(padded))
    members: list[list[int]] = []
    for k, key in enumerate(keys):
        for group in members:
            j = group[0]
            if key is not None and keys[j] is not None and _same(keys[j], key) \
                    and len(columns_of[j]) == len(columns_of[k]):
                group.append(k)
                break
        else:
            members.append([k])
    groups, columns, valid, positions = [], [], [], []
    for group in members:
        if len(group) == 1:
            k = group[0]
            groups.append(problems[k])
            width = problems[k].n_observed
        else:
            groups.append(stack([candidates[k] for k in group]))
            width = n_observed
        columns.append(np.asarray([columns_of[k] for k in group], dtype=np.int64))
        valid.append(np.concatenate([i * width + np.arange(problems[k].n_observed) for i, k in enumerate(group)]))
        positions.append(np.concatenate([offsets[k] + np.arange(problems[k].n_observed) for k in group]))
    return groups, members, columns, valid, positions


def _joint_prior(prior, space: ParameterSpace):
    """The prior over the joint parameters (None: uniform on the box)."""
    if isinstance(prior, str):
        if prior != "uniform":
            raise ValueError(f"JointProblem: prior must be 'uniform', a GaussianPrior or a {{name: prior}} dict; "
                             f"got {prior!r}")
        return None
    if isinstance(prior, GaussianPrior):
        return prior._resolve(space.names, space.names)
    if isinstance(prior, Mapping):
        bases = {n.split("[")[0] for n in space.names}
        check_names("prior", list(prior), space.names + tuple(sorted(bases - set(space.names))))
        spec = {}
        for p in space:
            base = p.name.split("[")[0]
            if p.name in prior:
                spec[p.name] = prior[p.name]
            elif base in prior:
                spec[p.name] = prior[base]
        return bind_priors(spec, space)
    raise ValueError(f"JointProblem: prior must be 'uniform', a GaussianPrior or a {{name: prior}} dict; got "
                     f"{type(prior).__name__}")
