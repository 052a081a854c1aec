"""The problems a benchmark runs on, with what is known about them, grouped in suites.

A `BenchmarkProblem` is an id, keywords, a function that builds the calibration problem (on
demand: a PEtab import takes seconds), and its references: the best known
log-likelihood and where it comes from, and reference posterior moments (and exact draws) where
they are known.
`register_problem` adds one (to a suite of the user's or a built-in one), `suite` lists a suite.

Built in, the ``"analytic"`` suite: problems whose optimum and posterior are known in closed form,
each a `jcalib.CalibrationProblem` over a `jcalib.model.FunctionSimulator`, so every method runs
on them as on an ODE model:

- ``rosenbrock-4``: the extended Rosenbrock function of 4 parameters as least squares (residuals
  ``10 (x_{i+1} - x_i^2)`` and ``1 - x_i``, unit noise), optimum ``x = 1``.
- ``gaussian-2``: a linear model of 2 parameters with Gaussian noise and a flat prior on a box
  wide enough (±12 posterior sds) to leave the Gaussian posterior untouched; ``gaussian-8`` the
  same with 8 correlated parameters (12 observations).
- ``banana-2``: Haario's banana, ``x0 ~ N(0, 1)`` and ``x1 - b x0^2 ~ N(0, 0.5^2)`` with ``b = 1``,
  as two residuals; posterior mean ``(0, b)`` and sds ``(1, sqrt(0.25 + 2 b^2))``.

The ``"ode"`` suite: ``linear-gaussian-ode``, an ODE (``x' = v, v' = 0``) whose output
``x0 + v0 t`` is linear in its parameters, so its posterior under the flat prior is Gaussian and
known (ten fixed noisy observations, noise level 0.2); ``four-substance-reactions``, the
case-study model of Wulkow 2021 (three log-scale rates) on synthetic data with additive noise
0.05, whose best value is not known in closed form. `register_petab_collection` adds the PEtab
benchmark collection's problems as the ``"petab"`` suite.

Example:
    >>> [p.id for p in suite("analytic")]
    ['banana-2', 'gaussian-2', 'gaussian-8', 'rosenbrock-4']
    >>> problem = get_problem("rosenbrock-4").build()
    >>> float(problem.log_likelihood(problem.to_internal(jnp.ones(4)))) == get_problem("rosenbrock-4").reference_value
    True
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import pathlib
from collections.abc import Callable, Mapping, Sequence

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from jcalib.data import Measurements
from jcalib.model import AbstractModel, Experiment, FunctionSimulator
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import AbstractProblem, CalibrationProblem

__all__ = ["BenchmarkProblem", "get_problem", "register_petab_collection", "register_problem", "suite"]


@dataclasses.dataclass(frozen=True)
class BenchmarkProblem:
    """One problem of a suite.

    Attributes:
        id: a unique name, e.g. ``"Boehm_JProteomeRes2014"``.
        build: ``() -> AbstractProblem``, called when a run needs the problem.
        keywords: e.g. ``("ode", "petab", "stiff")``.
        reference_value: the best known log-likelihood (higher is better; None: unknown, or
            ``reference_at_nominal``).
        reference_source: where it comes from, in words.
        reference_at_nominal: the reference is the log-likelihood at the built problem's nominal
            values (a PEtab collection problem's nominal values are its published optimum),
            computed when a run first needs it.
        reference_mean, reference_sd: the posterior's means and standard deviations per free
            parameter (physical units), where known.
        reference_draws: ``(rng, n) -> (n, n_free)`` independent draws of the reference
            posterior (physical units, ``rng`` a `numpy.random.Generator`), where it can be
            sampled exactly; a sampler's 2-D marginals are tested against them
            (`jcalib.benchmark.metrics.c2st_marginals`).
    """

    id: str
    build: Callable[[], AbstractProblem]
    keywords: tuple[str, ...] = ()
    reference_value: float | None = None
    reference_source: str = ""
    reference_mean: tuple[float, ...] | None = None
    reference_sd: tuple[float, ...] | None = None
    reference_at_nominal: bool = False
    reference_draws: Callable[[np.random.Generator, int], np.ndarray] | None = None


_SUITES: dict[str, dict[str, BenchmarkProblem]] = {}


def register_problem(problem: BenchmarkProblem, suite_name: str = "user") -> BenchmarkProblem:
    """Add ``problem`` to the suite ``suite_name`` (created if new) and return it.

    Raises:
        ValueError: not a `BenchmarkProblem`, ``build`` not callable, or an id that a suite holds already.
    """
    if not isinstance(problem, BenchmarkProblem) or not callable(problem.build):
        raise ValueError(f"register_problem: expected a BenchmarkProblem with a callable build; got {problem!r}")
    _check_references(problem)
    if not isinstance(suite_name, str) or not suite_name:
        raise ValueError(f"register_problem: suite_name must be a non-empty string; got {suite_name!r}")
    for name, problems in _SUITES.items():
        if problem.id in problems:
            raise ValueError(f"register_problem: a problem {problem.id!r} is in suite {name!r} already; ids are unique")
    _SUITES.setdefault(suite_name, {})[problem.id] = problem
    return problem


def _check_references(problem: BenchmarkProblem) -> None:
    """Refuse an id or keywords that are not strings and references that cannot be right."""
    if not isinstance(problem.id, str) or not problem.id or isinstance(problem.keywords, str) \
            or not all(isinstance(k, str) for k in problem.keywords):
        raise ValueError(f"register_problem: the id must be a non-empty string and keywords a tuple of strings; got "
                         f"{problem.id!r}, {problem.keywords!r}")
    if problem.reference_value is not None and not math.isfinite(problem.reference_value):
        raise ValueError(f"register_problem: {problem.id}: reference_value must be finite or None")
    if problem.reference_at_nominal and problem.reference_value is not None:
        raise ValueError(f"register_problem: {problem.id}: give reference_value or reference_at_nominal, not both")
    if (problem.reference_mean is None) != (problem.reference_sd is None) or (
            problem.reference_sd is not None and (len(problem.reference_mean) != len(problem.reference_sd)
                                                  or not all(sd > 0 for sd in problem.reference_sd))):
        raise ValueError(f"register_problem: {problem.id}: reference_mean and reference_sd go together, one "
                         "each per free parameter, the sds > 0")
    if problem.reference_draws is not None and not callable(problem.reference_draws):
        raise ValueError(f"register_problem: {problem.id}: reference_draws must be a function (rng, n) -> (n, n_free) "
                         f"or None; got {type(problem.reference_draws).__name__}")


def suite(name: str) -> list[BenchmarkProblem]:
    """The problems of a suite, sorted by id.

    Raises:
        ValueError: an unknown suite (the message lists the known ones).
    """
    if name not in _SUITES:
        raise ValueError(f"suite: unknown suite {name!r}; known: {sorted(_SUITES)}")
    return [_SUITES[name][k] for k in sorted(_SUITES[name])]


def get_problem(problem_id: str) -> BenchmarkProblem:
    """The registered problem of that id, from any suite.

    Raises:
        ValueError: an unknown id.
    """
    for problems in _SUITES.values():
        if problem_id in problems:
            return problems[problem_id]
    raise ValueError(f"get_problem: no problem {problem_id!r}; known: {sorted(k for s in _SUITES.values() for k in s)}")


# --- the analytic suite ------------------------------------------------------------------------
def _function_problem(fn, names, lower, upper, data, sigma) -> CalibrationProblem:
    """A `CalibrationProblem` of the residuals ``(data - fn(x)) / sigma`` (one time, one output per
    residual; ``weighting="sigma"``), flat prior on the box."""
    space = ParameterSpace([Parameter(n, 0.5 * (lo + hi), lo, hi) for n, lo, hi in zip(names, lower, upper)])
    simulator = FunctionSimulator(fn, space)
    measurements = Measurements(np.asarray(simulator.ts), np.asarray(data, dtype=np.float64)[None, :],
                                sigma=np.asarray(sigma, dtype=np.float64))
    return CalibrationProblem(simulator, measurements, weighting="sigma")


def _gaussian_constant(sigma) -> float:
    """The log-likelihood of residuals all zero: ``-sum log(sqrt(2 pi) sigma)``."""
    return float(-np.sum(np.log(math.sqrt(2 * math.pi) * np.asarray(sigma, dtype=np.float64))))


def _rosenbrock(n: int = 4) -> CalibrationProblem:
    return _function_problem(lambda x: jnp.concatenate([-10 * (x[1:] - x[:-1] ** 2), x[:-1]]),
                             [f"x{i}" for i in range(n)], [-2.0] * n, [2.0] * n,
                             np.r_[np.zeros(n - 1), np.ones(n - 1)], np.ones(2 * (n - 1)))


_GAUSSIAN_DESIGN = np.array([[1.0, 0.5], [0.0, 1.0], [1.0, -1.0]])
_GAUSSIAN_DATA, _GAUSSIAN_SIGMA = np.array([1.0, 2.0, -0.5]), np.array([0.5, 0.5, 1.0])


def _linear_posterior(design, data, sigma) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean and covariance of a linear model under a flat prior, and the maximal log-likelihood."""
    a = design / sigma[:, None]
    cov = np.linalg.inv(a.T @ a)
    mean = cov @ a.T @ (data / sigma)
    r = (data - design @ mean) / sigma
    return mean, cov, _gaussian_constant(sigma) - 0.5 * float(r @ r)


def _linear_moments(design, data, sigma) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean and sds of a linear model under a flat prior, and the maximal log-likelihood."""
    mean, cov, best = _linear_posterior(design, data, sigma)
    return mean, np.sqrt(np.diag(cov)), best


def _linear_draws(design, data, sigma, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` exact draws ``(n, n_params)`` of a linear model's Gaussian posterior (flat prior)."""
    mean, cov, _ = _linear_posterior(np.asarray(design), np.asarray(data), np.asarray(sigma))
    return rng.multivariate_normal(mean, cov, size=n)


def _banana_draws(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` exact draws of ``banana-2``'s posterior: ``x0 ~ N(0, 1)``, ``x1 = b x0^2 + N(0, 0.5^2)``."""
    x0 = rng.normal(0.0, _BANANA_SIGMA[0], n)
    return np.stack([x0, _BANANA_B * x0 ** 2 + rng.normal(0.0, _BANANA_SIGMA[1], n)], axis=1)


def _gaussian() -> CalibrationProblem:
    mean, sd, _ = _linear_moments(_GAUSSIAN_DESIGN, _GAUSSIAN_DATA, _GAUSSIAN_SIGMA)
    return _function_problem(lambda x: jnp.asarray(_GAUSSIAN_DESIGN) @ x, ["a", "b"], mean - 12 * sd, mean + 12 * sd,
                             _GAUSSIAN_DATA, _GAUSSIAN_SIGMA)


def _gaussian_8_setup() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Design ``(12, 8)``, data and noise levels of ``gaussian-8`` (fixed draws)."""
    rng = np.random.default_rng(8)
    design = rng.normal(size=(12, 8)) + 0.8 * rng.normal(size=(12, 1))  # correlated columns
    return design, rng.normal(size=12), np.full(12, 0.5)


def _gaussian_8() -> CalibrationProblem:
    design, data, sigma = _gaussian_8_setup()
    mean, sd, _ = _linear_moments(design, data, sigma)
    return _function_problem(lambda x: jnp.asarray(design) @ x, [f"b{i}" for i in range(8)], mean - 12 * sd,
                             mean + 12 * sd, data, sigma)


_BANANA_B, _BANANA_SIGMA = 1.0, np.array([1.0, 0.5])


def _banana() -> CalibrationProblem:
    return _function_problem(lambda x: jnp.stack([x[0], x[1] - _BANANA_B * x[0] ** 2]), ["x0", "x1"],
                             [-8.0, -6.0], [8.0, 40.0], [0.0, 0.0], _BANANA_SIGMA)


def _register_analytic() -> None:
    mean, sd, best = _linear_moments(_GAUSSIAN_DESIGN, _GAUSSIAN_DATA, _GAUSSIAN_SIGMA)
    mean_8, sd_8, best_8 = _linear_moments(*_gaussian_8_setup())
    for problem in (
        BenchmarkProblem("gaussian-8", _gaussian_8, ("analytic", "posterior", "linear", "correlated"), best_8,
                         "weighted linear least squares", tuple(mean_8), tuple(sd_8),
                         reference_draws=functools.partial(_linear_draws, *_gaussian_8_setup())),
        BenchmarkProblem("rosenbrock-4", _rosenbrock, ("analytic", "least-squares", "curved-valley"),
                         _gaussian_constant(np.ones(6)), "all residuals zero at x = 1"),
        BenchmarkProblem("gaussian-2", _gaussian, ("analytic", "posterior", "linear"), best,
                         "weighted linear least squares", tuple(mean), tuple(sd),
                         reference_draws=functools.partial(_linear_draws, _GAUSSIAN_DESIGN, _GAUSSIAN_DATA,
                                                           _GAUSSIAN_SIGMA)),
        BenchmarkProblem("banana-2", _banana, ("analytic", "posterior", "banana"), _gaussian_constant(_BANANA_SIGMA),
                         "both residuals zero at x = (0, 0)", (0.0, _BANANA_B),
                         (1.0, math.sqrt(_BANANA_SIGMA[1] ** 2 + 2 * _BANANA_B ** 2)), reference_draws=_banana_draws),
    ):
        register_problem(problem, "analytic")


# --- ODE problems --------------------------------------------------------------------------
class _Ballistic(AbstractModel):
    """``x' = v, v' = 0``: ``x(t) = x0 + v0 t``, linear in the parameters ``(x0, v0)``."""

    def vector_field(self, t, y, theta):
        return jnp.stack([y[1], jnp.zeros_like(y[1])])

    def initial_state(self, theta):
        return theta

    def observe(self, t, y, theta):
        return y[:1]


_ODE_TIMES, _ODE_SIGMA = np.linspace(0.5, 5.0, 10), 0.2


def _ballistic_data() -> tuple[np.ndarray, np.ndarray]:
    """Fixed noisy observations of ``x = 1 + 0.5 t`` (noise level 0.2) and the design ``[1, t]``."""
    noise = np.random.default_rng(3).normal(0.0, _ODE_SIGMA, _ODE_TIMES.size)
    return 1.0 + 0.5 * _ODE_TIMES + noise, np.stack([np.ones_like(_ODE_TIMES), _ODE_TIMES], axis=1)


def _linear_gaussian_ode() -> CalibrationProblem:
    data, _ = _ballistic_data()
    space = ParameterSpace([Parameter("x0", 1.0, -4.0, 6.0), Parameter("v0", 0.5, -2.0, 3.0)])
    model = _Ballistic(parameters=space, output_names=("x",), state_names=("x", "v"),
                       experiment=Experiment(tuple(_ODE_TIMES), t0=0.0, t1=float(_ODE_TIMES[-1])),
                       solver=dfx.Tsit5(), controller=dfx.PIDController(rtol=1e-10, atol=1e-12),
                       adjoint=dfx.RecursiveCheckpointAdjoint(), dt0=None, max_steps=4096)
    return CalibrationProblem(model, Measurements(_ODE_TIMES, data[:, None], sigma=_ODE_SIGMA), weighting="sigma")


def _four_substance_reactions() -> CalibrationProblem:
    from jcalib.data import synthetic_measurements
    from jcalib.models import get

    model = get("four_substance_reactions")
    data = synthetic_measurements(jax.random.key(0), model, model.parameters.nominal, sigma=0.05, noise="additive")
    return CalibrationProblem(model, data, weighting="sigma")


def _register_ode() -> None:
    data, design = _ballistic_data()
    mean, sd, best = _linear_moments(design, data, np.full(data.size, _ODE_SIGMA))
    register_problem(BenchmarkProblem(
        "linear-gaussian-ode", _linear_gaussian_ode, ("ode", "posterior", "linear"), best,
        "weighted linear least squares of x(t) = x0 + v0 t", tuple(mean), tuple(sd),
        reference_draws=functools.partial(_linear_draws, design, data, np.full(data.size, _ODE_SIGMA))), "ode")
    register_problem(BenchmarkProblem(
        "four-substance-reactions", _four_substance_reactions, ("ode", "case-study", "log-scale"),
        reference_source="none known (synthetic data at the nominal rates, additive noise 0.05): the best run"), "ode")


# --- the PEtab collection ------------------------------------------------------------------
def register_petab_collection(root: str | os.PathLike, names: Sequence[str] | None = None, suite_name: str = "petab",
                              options: Mapping[str, Mapping[str, object]] | None = None) -> list[BenchmarkProblem]:
    """Register the problems of a Benchmark-Models-PEtab checkout (one folder per problem, its
    YAML file named after the folder or the folder's only YAML file) as the suite
    ``suite_name``; each is imported by `jcalib.io.petab.load` when a run needs it, its reference
    the log-likelihood at the nominal values (the published optimum; not every problem's is one:
    Giordano_Nature2020's noise levels are placeholders, 1 for data of order 1e-4, and runs go far
    beyond it, so a report's best there is the best run's).

    Args:
        root: the collection's folder (e.g. ``benchmark_models``).
        names: the problems (folder names); None: every folder with a YAML file.
        suite_name: the suite.
        options: per problem, keyword arguments of `jcalib.io.petab.load` (e.g. ``{"Beer_MolBioSystems2014":
            {"atol": 1e-14}}``).

    Raises:
        ValueError: no such folder, or a named problem without its folder or YAML file.
    """
    root = pathlib.Path(root)
    if isinstance(names, str):
        raise ValueError(f"register_petab_collection: names is a list of problem folders; got the string {names!r}")
    if not root.is_dir():
        raise ValueError(f"register_petab_collection: {os.fspath(root)!r} is not a folder of PEtab problems")
    found = {p.name: _petab_yaml(p) for p in sorted(root.iterdir()) if p.is_dir() and _petab_yaml(p) is not None}
    missing = sorted(set(names or ()) - set(found))
    if missing:
        raise ValueError(f"register_petab_collection: no PEtab problem {missing} in {os.fspath(root)!r}; found "
                         f"{sorted(found)}")
    options = options or {}
    return [register_problem(BenchmarkProblem(
        name, functools.partial(_petab_problem, found[name], dict(options.get(name, {}))), ("petab", "ode"),
        reference_source="the log-likelihood at the collection's nominal values (the published optimum)",
        reference_at_nominal=True), suite_name) for name in (names or sorted(found))]


def _petab_yaml(folder: pathlib.Path) -> pathlib.Path | None:
    """The folder's problem file: ``<folder>.yaml``, else its one YAML file (None: none or several)."""
    yaml = folder / f"{folder.name}.yaml"
    if yaml.is_file():
        return yaml
    candidates = sorted(folder.glob("*.yaml"))
    return candidates[0] if len(candidates) == 1 else None


def _petab_problem(yaml: pathlib.Path, options: dict) -> AbstractProblem:
    from jcalib.io import petab

    return petab.load(yaml, **options).problem


_register_analytic()
_register_ode()
