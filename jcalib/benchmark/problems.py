"""The problems a benchmark runs on, with what is known about them, grouped in suites.

A `BenchmarkProblem` is an id, keywords, a function that builds the calibration problem (on
demand: a PEtab import takes seconds), and its references: the best known
log-likelihood and where it comes from, and reference posterior moments where they are known.
`register_problem` adds one (to a suite of the user's or a built-in one), `suite` lists a suite.

Built in, the ``"analytic"`` suite: problems whose optimum and posterior are known in closed form,
each a `jcalib.CalibrationProblem` over a `jcalib.model.FunctionSimulator`, so every method runs
on them as on an ODE model:

- ``rosenbrock-4``: the extended Rosenbrock function of 4 parameters as least squares (residuals
  ``10 (x_{i+1} - x_i^2)`` and ``1 - x_i``, unit noise), optimum ``x = 1``.
- ``gaussian-2``: a linear model of 2 parameters with Gaussian noise and a flat prior on a box
  wide enough (±12 posterior sds) to leave the Gaussian posterior untouched.
- ``banana-2``: Haario's banana, ``x0 ~ N(0, 1)`` and ``x1 - b x0^2 ~ N(0, 0.5^2)`` with ``b = 1``,
  as two residuals; posterior mean ``(0, b)`` and sds ``(1, sqrt(0.25 + 2 b^2))``.

Example:
    >>> [p.id for p in suite("analytic")]
    ['banana-2', 'gaussian-2', 'rosenbrock-4']
    >>> problem = get_problem("rosenbrock-4").build()
    >>> float(problem.log_likelihood(problem.to_internal(jnp.ones(4)))) == get_problem("rosenbrock-4").reference_value
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from jcalib.data import Measurements
from jcalib.model import FunctionSimulator
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problems import AbstractProblem, CalibrationProblem

__all__ = ["BenchmarkProblem", "get_problem", "register_problem", "suite"]


@dataclasses.dataclass(frozen=True)
class BenchmarkProblem:
    """One problem of a suite.

    Attributes:
        id: a unique name, e.g. ``"Boehm_JProteomeRes2014"``.
        build: ``() -> AbstractProblem``, called when a run needs the problem.
        keywords: e.g. ``("ode", "petab", "stiff")``.
        reference_value: the best known log-likelihood (higher is better; None: unknown).
        reference_source: where it comes from, in words.
        reference_mean, reference_sd: the posterior's means and standard deviations per free
            parameter (physical units), where known.
    """

    id: str
    build: Callable[[], AbstractProblem]
    keywords: tuple[str, ...] = ()
    reference_value: float | None = None
    reference_source: str = ""
    reference_mean: tuple[float, ...] | None = None
    reference_sd: tuple[float, ...] | None = None


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
    if (problem.reference_mean is None) != (problem.reference_sd is None) or (
            problem.reference_sd is not None and (len(problem.reference_mean) != len(problem.reference_sd)
                                                  or not all(sd > 0 for sd in problem.reference_sd))):
        raise ValueError(f"register_problem: {problem.id}: reference_mean and reference_sd go together, one "
                         "each per free parameter, the sds > 0")


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


def _gaussian_moments() -> tuple[np.ndarray, np.ndarray]:
    """The posterior mean and sds of ``gaussian-2``: weighted least squares, ``(A^T W A)^-1``."""
    a = _GAUSSIAN_DESIGN / _GAUSSIAN_SIGMA[:, None]
    cov = np.linalg.inv(a.T @ a)
    return cov @ a.T @ (_GAUSSIAN_DATA / _GAUSSIAN_SIGMA), np.sqrt(np.diag(cov))


def _gaussian() -> CalibrationProblem:
    mean, sd = _gaussian_moments()
    return _function_problem(lambda x: jnp.asarray(_GAUSSIAN_DESIGN) @ x, ["a", "b"], mean - 12 * sd, mean + 12 * sd,
                             _GAUSSIAN_DATA, _GAUSSIAN_SIGMA)


_BANANA_B, _BANANA_SIGMA = 1.0, np.array([1.0, 0.5])


def _banana() -> CalibrationProblem:
    return _function_problem(lambda x: jnp.stack([x[0], x[1] - _BANANA_B * x[0] ** 2]), ["x0", "x1"],
                             [-8.0, -6.0], [8.0, 40.0], [0.0, 0.0], _BANANA_SIGMA)


def _register_analytic() -> None:
    mean, sd = _gaussian_moments()
    for problem in (
        BenchmarkProblem("rosenbrock-4", _rosenbrock, ("analytic", "least-squares", "curved-valley"),
                         _gaussian_constant(np.ones(6)), "all residuals zero at x = 1"),
        BenchmarkProblem("gaussian-2", _gaussian, ("analytic", "posterior", "linear"),
                         _gaussian_constant(_GAUSSIAN_SIGMA) - 0.5 * float(np.sum(((_GAUSSIAN_DATA - _GAUSSIAN_DESIGN
                                                                                     @ mean) / _GAUSSIAN_SIGMA) ** 2)),
                         "weighted linear least squares", tuple(mean), tuple(sd)),
        BenchmarkProblem("banana-2", _banana, ("analytic", "posterior", "banana"), _gaussian_constant(_BANANA_SIGMA),
                         "both residuals zero at x = (0, 0)", (0.0, _BANANA_B),
                         (1.0, math.sqrt(_BANANA_SIGMA[1] ** 2 + 2 * _BANANA_B ** 2))),
    ):
        register_problem(problem, "analytic")


_register_analytic()
