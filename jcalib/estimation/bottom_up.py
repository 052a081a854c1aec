"""Bottom-up estimation: add parameters in ranking order and re-estimate (Bastogne et al. 2007).

Bastogne et al. 2007, §3.4: "a bottom-up estimation procedure [...] starts by a small subset
of regressors p0 resulting from the previous selection step. The estimation step is then
repeated by adding parameters according to their rank [...]. The final estimates are chosen
according to a compromise between complexity (number of parameters) and performance
(estimation cost J)." In §4.6-4.7 each step is solved by a bounded reflective Newton
method (Coleman & Li 1996) with the exact gradient, and Figure 9 plots J against the
parameters included: beyond the fourth (cv1) "the cost function is quasi-constant", so the
first four are kept.

Here, for j = 1..μ, the first j names of ``ranking`` are free and every other parameter is
held at its *base* value (``theta0``, else the problem's nominal or fixed value). Step j
starts from the estimates of step j-1 plus the base value of the newly added parameter (a
warm start), so the subsets are nested and, with a monotone local method, the cost can
only go down: J_0 >= J_1 >= ... >= J_μ, J_0 the cost at the base values. Steps run
`least_squares_trf` (``method="trf"``: scipy's trust-region reflective method, the
bounded reflective Newton method of the paper, with the autodiff Jacobian) or
`gauss_newton` (``method="gauss-newton"``); both stay inside the parameter bounds. The
cost is the problem's loss (mean squared weighted residual, J/n of the paper's
J = Σ eᵀe: same curve up to a constant factor).

The knee (the paper chooses it by eye on Figure 9) is found by a stated rule:

- ``"plateau"`` (default; Bastogne's "beyond cv1 the cost function is quasi-constant"):
  the smallest j whose cost is within ``knee_threshold`` of the total decrease of the
  lowest cost reached from j on,

      J_j - min_{i >= j} J_i  <=  knee_threshold * (J_0 - min_i J_i),

  i.e. the parameters after the knee together lower the cost by at most that fraction of
  what the whole procedure achieved. Scale-free (any weighting, noise-free data too).
  ``KNEE_THRESHOLD`` = 0.01 (1 %).
- ``"max_curvature"``: the j in 1..μ of largest discrete curvature
  log J_{j-1} - 2 log J_j + log J_{j+1} of the log cost (the sharpest bend from falling to
  flat), the curve taken as flat after the last step (J_{μ+1} = J_μ, so a drop at the last
  step can be the knee); costs below 1e-16 J_0 count as 1e-16 J_0 (round-off).
  Threshold-free, but meaningful only when the curve has one clear bend.
- a callable ``rule(costs) -> j`` on the costs ``(J_0, J_1, ..., J_μ)``.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> model = jcalib.models.get("four_substance_reactions")
    >>> truth = model.parameters.nominal * [2.0, 1.0, 1.0]  # only kab off nominal
    >>> data = jcalib.Measurements(model.ts, model.simulate(jax.numpy.asarray(truth)),
    ...                            output_names=model.output_names)
    >>> result = bottom_up(jcalib.CalibrationProblem(model, data), ["kab", "kac", "kad"])
    >>> result.knee, result.selected
    (1, ('kab',))
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float
from tqdm.auto import tqdm

from jcalib.estimation.failures import FailedStartError
from jcalib.estimation.gauss_newton import gauss_newton
from jcalib.estimation.least_squares import least_squares_trf
from jcalib.estimation.result import EstimationResult
from jcalib.jsonable import to_jsonable
from jcalib.problems import AbstractProblem, CalibrationProblem
from jcalib.sensitivity.identifiability import IdentifiabilityReport
from jcalib.starts import start_internal

__all__ = ["BottomUpResult", "KNEE_RULES", "KNEE_THRESHOLD", "METHODS", "bottom_up", "find_knee"]

METHODS = ("trf", "gauss-newton")
KNEE_RULES = ("plateau", "max_curvature")
KNEE_THRESHOLD = 0.01  # "plateau": later parameters lower J by <= 1 % of the total decrease
_LOG_FLOOR = 1e-16  # "max_curvature": costs below 1e-16 J_0 are round-off


class BottomUpResult(eqx.Module):
    """Costs and estimates of a bottom-up estimation, the knee and the selected subset.

    Attributes:
        method: the estimator of every step, ``"trf"`` or ``"gauss-newton"``.
        ranking: the parameters added, in order (μ names; step j frees the first j).
        steps: one `EstimationResult` per step j = 1..μ (free: ``ranking[:j]``).
        starts: the start of each step in physical units, ``ranking[:j]`` order (the
            previous estimates plus the base value of the added parameter).
        base: ``{name: physical value}`` of every model parameter before estimation (the
            value each one holds while it is not free).
        initial_loss: J_0, the cost at ``base`` (no parameter estimated).
        costs: J_1..J_μ, the loss at each step's estimate, ``(μ,)``.
        knee: the selected number of parameters (1..μ).
        knee_rule: ``"plateau"``, ``"max_curvature"`` or ``"callable"``.
        knee_threshold: the threshold of ``"plateau"`` (None for the other rules).
        n_simulations: model solves of all steps (plus one for J_0).
        n_jacobians: Jacobian evaluations of all steps.
        wall_time_s: wall-clock seconds of the whole procedure, compilation included.
    """

    method: str
    ranking: tuple[str, ...]
    steps: tuple[EstimationResult, ...]
    starts: tuple[np.ndarray, ...]
    base: dict
    initial_loss: float
    costs: np.ndarray
    knee: int
    knee_rule: str
    knee_threshold: float | None
    n_simulations: int
    n_jacobians: int
    wall_time_s: float

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def selected(self) -> tuple[str, ...]:
        """The parameters kept: the first ``knee`` names of the ranking."""
        return self.ranking[: self.knee]

    @property
    def final(self) -> EstimationResult:
        """The estimate at the knee (the paper's final estimates, Table 4)."""
        return self.steps[self.knee - 1]

    @property
    def estimate(self) -> dict[str, float]:
        """``{name: physical value}`` of the selected parameters at the knee."""
        return self.final.estimate

    @property
    def condition_numbers(self) -> np.ndarray:
        """Condition number of the residual Jacobian at each step's estimate, ``(μ,)``."""
        return np.array([r.condition_number for r in self.steps])

    def parameters_at(self, n_params: int | None = None) -> dict[str, float]:
        """Every model parameter after step ``n_params`` (default: the knee): the estimates
        of the first ``n_params`` ranked parameters, the base values of all others.

        Raises:
            ValueError: ``n_params`` not in 1..μ.
        """
        j = self.knee if n_params is None else n_params
        if isinstance(j, bool) or int(j) != j or not 1 <= j <= self.n_steps:
            raise ValueError(
                f"parameters_at: n_params must be an integer in [1, {self.n_steps}] (the steps "
                f"run); got {n_params!r}"
            )
        return {**self.base, **self.steps[int(j) - 1].estimate}

    def to_dict(self, include_results: bool = False) -> dict:
        """JSON-able summary: costs, knee, one line per step and the final result in full;
        ``include_results=True`` adds every step's full `EstimationResult.to_dict`."""
        steps = []
        for j, (r, start) in enumerate(zip(self.steps, self.starts), start=1):
            steps.append({
                "n_params": j, "added": self.ranking[j - 1], "loss": r.loss,
                "estimate": r.estimate, "start": dict(zip(r.names, np.asarray(start).tolist())),
                "condition_number": r.condition_number, "n_steps": r.n_steps,
                "n_simulations": r.n_simulations, "n_jacobians": r.n_jacobians,
                "wall_time_s": r.wall_time_s, "converged": r.converged, "reason": r.reason,
            })
        out = {
            "method": self.method, "ranking": list(self.ranking), "knee": self.knee,
            "knee_rule": self.knee_rule, "knee_threshold": self.knee_threshold,
            "selected": list(self.selected), "estimate": self.estimate,
            "initial_loss": self.initial_loss, "costs": self.costs,
            "condition_numbers": self.condition_numbers, "base": self.base, "steps": steps,
            "final": self.final.to_dict(), "n_simulations": self.n_simulations,
            "n_jacobians": self.n_jacobians, "wall_time_s": self.wall_time_s,
        }
        if include_results:
            out["results"] = [r.to_dict() for r in self.steps]
        return to_jsonable(out)


def find_knee(costs: Float[ArrayLike, " n_steps_plus_1"], rule: str = "plateau", *,
              threshold: float = KNEE_THRESHOLD) -> int:
    """The knee of a cost curve ``(J_0, J_1, ..., J_μ)`` by ``rule`` (module docstring).

    Args:
        costs: J_0 (nothing estimated) and the cost after each step; finite, ``μ >= 1``.
        rule: ``"plateau"`` or ``"max_curvature"``.
        threshold: fraction of the total decrease for ``"plateau"``, in (0, 1).

    Returns:
        The number of parameters j at the knee, in 1..μ.

    Raises:
        ValueError: unknown rule, bad threshold, fewer than two costs or non-finite costs.

    Example:
        >>> find_knee([1.0, 0.5, 1e-6, 1e-6, 9e-7])
        2
    """
    if rule not in KNEE_RULES:
        raise ValueError(f"find_knee: rule must be one of {KNEE_RULES} or a callable; got "
                         f"{rule!r}")
    _check_threshold(threshold, "find_knee")
    c = np.asarray(costs, dtype=np.float64)
    if c.ndim != 1 or c.size < 2:
        raise ValueError(f"find_knee: costs must be (J_0, J_1, ..., J_mu) with mu >= 1; got "
                         f"shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"find_knee: costs must be finite; got {c.tolist()}")
    if rule == "plateau":
        lowest_from = np.minimum.accumulate(c[::-1])[::-1]  # min_{i >= j} J_i
        total = c[0] - lowest_from[0]
        if total <= 0:
            return 1  # no step lowered the cost: the smallest subset
        ok = c[1:] - lowest_from[1:] <= threshold * total
        return int(np.flatnonzero(ok)[0]) + 1  # ok[-1] is always True
    floor = _LOG_FLOOR * max(abs(c[0]), np.finfo(np.float64).tiny)
    logc = np.log10(np.maximum(c, floor))
    logc = np.concatenate([logc, logc[-1:]])  # flat after the last step: J_{μ+1} = J_μ
    curvature = logc[:-2] - 2.0 * logc[1:-1] + logc[2:]  # j = 1..μ
    return int(np.argmax(curvature)) + 1


def bottom_up(
    problem: AbstractProblem,
    ranking: Sequence[str] | IdentifiabilityReport,
    *,
    method: str = "trf",
    theta0: Float[ArrayLike, " n_free"] | Mapping[str, float] | None = None,
    coordinates: str = "physical",
    max_params: int | None = None,
    knee_rule: str | Callable[[np.ndarray], int] = "plateau",
    knee_threshold: float = KNEE_THRESHOLD,
    options: Mapping | None = None,
    progress: bool = False,
) -> BottomUpResult:
    """Estimate the first 1, 2, ..., μ ranked parameters in turn and find the knee.

    Args:
        problem: what to fit; its free parameters are the candidates (parameters it fixes
            stay fixed at their values).
        ranking: parameter names in the order to add them (e.g. a J-sensitivity or
            correlation ranking), or an `IdentifiabilityReport`, whose correlation order
            is used (Bastogne eq. 13-15: started at the most J-sensitive parameter with
            ``start="j_sensitivity"``; null parameters are not in it).
        method: ``"trf"`` (`least_squares_trf`, default) or ``"gauss-newton"``
            (`gauss_newton`).
        theta0: base values of the free parameters: an array ordered as
            ``problem.free_names`` or ``{name: value}`` (missing names: nominal); None:
            the nominal values. Within the bounds (`jcalib.starts`). Parameters not yet
            added are held here; each one starts here when added.
        coordinates: ``"physical"`` or ``"internal"``, the coordinates of ``theta0``.
        max_params: stop after this many parameters (μ = min(max_params, len(ranking)));
            None: the whole ranking.
        knee_rule: ``"plateau"``, ``"max_curvature"`` (module docstring) or a callable
            taking the costs ``(J_0, J_1, ..., J_μ)`` and returning the knee j in 1..μ.
        knee_threshold: the ``"plateau"`` fraction of the total decrease, in (0, 1).
        options: keyword arguments for every step's estimator (e.g. ``{"max_steps": 50}``
            for TRF or Gauss-Newton).
        progress: show a progress bar over the steps.

    Returns:
        A `BottomUpResult`.

    Raises:
        ValueError: ``problem`` is not a problem; an empty ranking, a duplicate, unknown
            or fixed name in it; unknown ``method`` or ``knee_rule``; bad ``max_params``,
            ``knee_threshold``, ``theta0`` or ``options``; a knee rule returning a j
            outside 1..μ.
        FailedStartError: (a ``ValueError``) a step cannot start: the simulation fails at
            its start (with the `jcalib.model.SolveStatus`), the loss overflows there or the
            Jacobian there is not finite; the message names the step and the parameter.

    Long for its documented options; the body is 69 lines.
    """
    t_start = time.perf_counter()
    if not isinstance(problem, CalibrationProblem):
        raise ValueError(f"bottom_up: problem must be a CalibrationProblem; got "
                         f"{type(problem).__name__}")
    if method not in METHODS:
        raise ValueError(f"bottom_up: method must be one of {METHODS}; got {method!r}")
    if not callable(knee_rule) and knee_rule not in KNEE_RULES:
        raise ValueError(f"bottom_up: knee_rule must be one of {KNEE_RULES} or a callable "
                         f"costs -> j; got {knee_rule!r}")
    _check_threshold(knee_threshold, "bottom_up")
    names = _ranking(problem, ranking)
    if max_params is not None:
        if (isinstance(max_params, bool) or not isinstance(max_params, (int, np.integer))
                or not 1 <= max_params <= len(names)):
            raise ValueError(f"bottom_up: max_params must be None or an integer in [1, "
                             f"{len(names)}] (the ranking's length); got {max_params!r}")
        names = names[: int(max_params)]
    estimator = least_squares_trf if method == "trf" else gauss_newton
    options = _options(options, estimator)
    z0 = start_internal(problem, theta0, coordinates=coordinates, where="bottom_up")
    free_base = dict(zip(problem.free_names, np.asarray(problem.to_physical(jnp.asarray(z0))).tolist()))
    base = {**dict(zip(problem.model.parameters.names, np.asarray(problem.theta_fixed).tolist())),
            **free_base}
    prior = "uniform" if problem.prior is None else problem.prior

    steps: list[EstimationResult] = []
    starts: list[np.ndarray] = []
    initial_loss = math.nan
    previous = np.zeros(0)
    bar = tqdm(names, desc="bottom_up", unit="param", disable=not progress)
    for j, name in enumerate(bar, start=1):
        free = names[:j]
        step_problem = CalibrationProblem(
            problem.model, problem.measurements, free=free,
            fixed={n: v for n, v in base.items() if n not in free},
            weighting=problem.weighting, prior=prior)
        start = np.concatenate([previous, [base[name]]])
        if j == 1:  # J_0: the cost at the base values (same compiled residuals as the step)
            r0 = np.asarray(step_problem.residuals(step_problem.to_internal(jnp.asarray(start))))
            initial_loss = float(np.mean(r0**2))
        try:
            result = estimator(step_problem, start, **options)
        except FailedStartError as e:
            raise FailedStartError(f"bottom_up: step {j} (adding {name!r}) cannot start: {e}") from e
        steps.append(result)
        starts.append(start)
        previous = np.asarray(result.theta, dtype=np.float64)
        bar.set_postfix(loss=f"{result.loss:.4g}", added=name)
    bar.close()

    costs = np.array([r.loss for r in steps])
    curve = np.concatenate([[initial_loss], costs])
    if callable(knee_rule):
        knee = knee_rule(curve)
        if isinstance(knee, bool) or int(knee) != knee or not 1 <= knee <= len(names):
            raise ValueError(f"bottom_up: the knee_rule callable must return an integer in "
                             f"[1, {len(names)}]; got {knee!r}")
        rule_name, threshold = "callable", None
    else:
        knee = find_knee(curve, knee_rule, threshold=knee_threshold)
        rule_name = knee_rule
        threshold = float(knee_threshold) if knee_rule == "plateau" else None
    return BottomUpResult(
        method=method, ranking=tuple(names), steps=tuple(steps), starts=tuple(starts),
        base=base, initial_loss=initial_loss, costs=costs, knee=int(knee), knee_rule=rule_name,
        knee_threshold=threshold, n_simulations=1 + sum(r.n_simulations for r in steps),
        n_jacobians=sum(r.n_jacobians for r in steps),
        wall_time_s=time.perf_counter() - t_start,
    )


# --- input checks -----------------------------------------------------------------------------
def _check_threshold(threshold, where: str) -> None:
    if isinstance(threshold, bool) or not (isinstance(threshold, (int, float))
                                           and 0 < threshold < 1):
        raise ValueError(f"{where}: knee_threshold must be a number in (0, 1) (a fraction of "
                         f"the total cost decrease); got {threshold!r}")


def _options(options, estimator) -> dict:
    """``options`` as a dict of keyword arguments that ``estimator`` accepts."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"bottom_up: options must be a dict of keyword arguments for "
                         f"{estimator.__name__}; got {options!r}")
    parameters = inspect.signature(estimator).parameters
    allowed = [n for n, p in parameters.items()
               if p.kind == inspect.Parameter.KEYWORD_ONLY and n != "coordinates"]
    bad = [n for n in options if n not in allowed]
    if bad:
        raise ValueError(f"bottom_up: options {', '.join(map(repr, bad))} are not keyword "
                         f"arguments of {estimator.__name__}; allowed: {', '.join(allowed)} "
                         "(theta0 is bottom_up's own argument)")
    return dict(options)


def _ranking(problem: AbstractProblem, ranking) -> tuple[str, ...]:
    """Validated ranking names (from a list, one name, or a report's correlation order)."""
    if isinstance(ranking, IdentifiabilityReport):
        names = tuple(ranking.correlation.order)
    elif isinstance(ranking, str):
        names = (ranking,)
    elif isinstance(ranking, Sequence) or isinstance(ranking, np.ndarray):
        names = tuple(ranking)
    else:
        raise ValueError(f"bottom_up: ranking must be a sequence of parameter names or an "
                         f"IdentifiabilityReport; got {type(ranking).__name__}")
    if not names:
        raise ValueError("bottom_up: ranking is empty; pass at least one parameter name (e.g. "
                         "report.correlation.order)")
    bad_type = [n for n in names if not isinstance(n, str)]
    if bad_type:
        raise ValueError(f"bottom_up: ranking must hold parameter names (str); got "
                         f"{bad_type[0]!r}")
    known = problem.model.parameters.names
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"bottom_up: ranking names unknown parameter(s) "
                         f"{', '.join(map(repr, unknown))}; known: {', '.join(map(repr, known))}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"bottom_up: ranking has duplicate names "
                         f"{', '.join(map(repr, duplicates))}; each parameter is added once")
    fixed = [n for n in names if n not in problem.free_names]
    if fixed:
        raise ValueError(f"bottom_up: ranking names parameter(s) {', '.join(map(repr, fixed))} "
                         f"that the problem fixes; free: "
                         f"{', '.join(map(repr, problem.free_names))} (build the problem "
                         "without fixing them)")
    return names
