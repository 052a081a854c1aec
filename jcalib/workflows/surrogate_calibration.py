"""Surrogate screening + polish: a global search on a cheap surrogate, then least squares on the model.

The two-phase calibration of Aka et al. 2023 (Table 2, "GA with PELS-VAE + Polish"; Table 4):

1. **Screening.** `differential_evolution` (the paper's "genetic algorithm", scipy's
   DE/best/1/bin defaults) minimises the loss of a `CalibrationProblem` built on the
   *surrogate* (a trained PELS-VAE, `jcalib.nn.pelsvae.Surrogate`, or any model-like
   stand-in) with the problem's measurements, free and fixed parameters and weighting,
   over the surrogate's box of the free parameters. No true-model call; thousands of
   surrogate evaluations, one vmapped call per generation. Its best member is the
   surrogate optimum θ̂_opt.
2. **Polish.** `least_squares_trf` on the *true* problem from θ̂_opt: trust-region
   reflective least squares with the exact Jacobian by forward-mode autodiff through the
   ODE solve (the paper's LS-TRF on the FMU, which used finite differences). It removes the
   surrogate's prediction error: the loss of the true model at θ̂_opt, MSE_f(θ̂_opt), can be
   far above the surrogate's own MSE_φ(θ̂_opt) (the "gap", Table 4: 1.05-3.44 for n_train =
   32-128, 0.02-0.22 for 512-4096) while the polished MSE_f(θ_opt) is that of a good local fit.

Model calls are counted apart (`SurrogateCalibrationResult`): true-model simulations = those
that built the surrogate's training set (``n_training_simulations``; the paper's n_train)
plus the polish's; true-model Jacobians (the polish's; each is one forward-mode solve
carrying n_free tangents); surrogate evaluations (the screening's). The paper's n_total =
n_train + n_opt is ``n_true_simulations`` here, with the Jacobians reported beside it.

The paper counts FMU calls with finite-difference Jacobians. Its currency is
``n_true_calls_fd``: every forward-mode Jacobian of the n_free parameters counts as n_free
model calls (forward differences, the residuals at the point being already known), so
``n_true_calls_fd = n_true_simulations + n_free * n_true_jacobians``, what the same run
would cost with ``jac="2-point"``.

To stop the polish once it stops improving (the plateau of the loss after a few steps),
pass ``polish_options={"plateau_window": w, "plateau_rtol": r}`` (see `least_squares_trf`).

With ``weighting="absolute"`` every loss is the MSE of eq. 1 of the paper.

Example:
    >>> import jax, jcalib                                                   # doctest: +SKIP
    >>> from jcalib.nn import PELSVAE, simulate_training_set                 # doctest: +SKIP
    >>> jax.config.update("jax_enable_x64", True)                            # doctest: +SKIP
    >>> model = jcalib.models.get("thermal_office_r7c4")                     # doctest: +SKIP
    >>> data = simulate_training_set(jax.random.key(0), model, 256, sampler="lhs")  # doctest: +SKIP
    >>> vae = PELSVAE(model).fit(jax.random.key(2), *data)                   # doctest: +SKIP
    >>> problem = jcalib.CalibrationProblem(model, data, weighting="absolute")  # doctest: +SKIP
    >>> result = surrogate_calibration(jax.random.key(1), problem, vae)      # doctest: +SKIP
    >>> result.surrogate_loss, result.true_loss_at_surrogate_optimum, result.loss  # doctest: +SKIP
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from jcalib.estimation.global_search import differential_evolution
from jcalib.estimation.least_squares import least_squares_trf
from jcalib.estimation.result import EstimationResult
from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractSimulator
from jcalib.nn.pelsvae import PELSVAE
from jcalib.problems import CalibrationProblem

__all__ = ["SurrogateCalibrationResult", "surrogate_calibration", "surrogate_problem"]

_BOUND_RTOL = 1e-9
"""Relative slack of the box comparisons: bounds that went through log/exp (log-scale
parameters, saved surrogates) may differ from the model's by a few ulps."""


class SurrogateCalibrationResult(eqx.Module):
    """Both phases of `surrogate_calibration`, with the numbers of Aka et al. 2023, Table 4.

    Attributes:
        method: ``"surrogate-de+trf"`` (``"surrogate-de"`` without the polish).
        names: free parameter names, in the order of the vectors.
        surrogate_theta: the surrogate optimum θ̂_opt (best DE member), physical units.
        surrogate_loss: the surrogate problem's loss there, MSE_φ(θ̂_opt) ("MSE PELS-VAE + GA").
        true_loss_at_surrogate_optimum: the true problem's loss there, MSE_f(θ̂_opt) ("MSE with
            FMU"); minus ``surrogate_loss`` it is the prediction `gap`.
        theta: the polished estimate θ_opt, physical units (θ̂_opt without the polish).
        loss: the true problem's loss at ``theta``, MSE_f(θ_opt) ("MSE after polish").
        n_polish_steps: accepted TRF steps of the polish (0 without it).
        n_training_simulations: true-model simulations that built the surrogate (n_train).
        n_true_simulations: all true-model simulations: ``n_training_simulations`` plus the
            polish's (plus one for the gap without the polish); the paper's n_total.
        n_true_jacobians: true-model forward-mode Jacobians (the polish's).
        n_true_calls_fd: (property) ``n_true_simulations + n_free * n_true_jacobians``, the
            model calls in the paper's finite-difference currency.
        n_surrogate_evaluations: surrogate evaluations of the screening.
        converged: the polish's convergence test held (without the polish: the DE's).
        durations: seconds per phase: ``screening_s``, ``polish_s``, ``workflow_s`` (this
            call), ``training_s`` (the PELS-VAE's training, when known) and any passed in.
        screening: the DE's `EstimationResult` on the surrogate problem.
        polish: the TRF's `EstimationResult` on the true problem (None without the polish).
    """

    method: str
    names: tuple[str, ...]
    surrogate_theta: np.ndarray
    surrogate_loss: float
    true_loss_at_surrogate_optimum: float
    theta: np.ndarray
    loss: float
    n_polish_steps: int
    n_training_simulations: int
    n_true_simulations: int
    n_true_jacobians: int
    n_surrogate_evaluations: int
    converged: bool
    durations: dict
    screening: EstimationResult
    polish: EstimationResult | None

    @property
    def estimate(self) -> dict[str, float]:
        """``{name: physical value}`` of the final (polished) estimate."""
        return {n: float(v) for n, v in zip(self.names, np.asarray(self.theta))}

    @property
    def surrogate_estimate(self) -> dict[str, float]:
        """``{name: physical value}`` of the surrogate optimum."""
        return {n: float(v) for n, v in zip(self.names, np.asarray(self.surrogate_theta))}

    @property
    def n_true_calls_fd(self) -> int:
        """True-model calls with every Jacobian counted as n_free forward-difference simulations."""
        return self.n_true_simulations + len(self.names) * self.n_true_jacobians

    @property
    def gap(self) -> float:
        """MSE_f(θ̂_opt) - MSE_φ(θ̂_opt): what the surrogate's prediction error costs at its optimum."""
        return self.true_loss_at_surrogate_optimum - self.surrogate_loss

    def to_dict(self) -> dict:
        """JSON-able summary with both phases' results (non-finite numbers become None)."""
        return to_jsonable({
            "method": self.method, "surrogate_estimate": self.surrogate_estimate,
            "surrogate_loss": self.surrogate_loss,
            "true_loss_at_surrogate_optimum": self.true_loss_at_surrogate_optimum, "gap": self.gap,
            "estimate": self.estimate, "loss": self.loss, "n_polish_steps": self.n_polish_steps,
            "n_training_simulations": self.n_training_simulations,
            "n_true_simulations": self.n_true_simulations, "n_true_jacobians": self.n_true_jacobians,
            "n_true_calls_fd": self.n_true_calls_fd,
            "n_surrogate_evaluations": self.n_surrogate_evaluations, "converged": self.converged,
            "durations": self.durations, "screening": self.screening.to_dict(),
            "polish": None if self.polish is None else self.polish.to_dict(),
        })


def surrogate_problem(problem: CalibrationProblem, surrogate) -> CalibrationProblem:
    """The problem with the surrogate in place of the model (same data, free/fixed, weighting).

    Args:
        problem: the true calibration problem (without noise parameters).
        surrogate: a `jcalib.nn.pelsvae.Surrogate`, a trained `jcalib.nn.pelsvae.PELSVAE`
            (its ``surrogate``) or any other `jcalib.AbstractSimulator`.

    Returns:
        A `CalibrationProblem` on the surrogate; its box of the free parameters is the
        surrogate's (its training box), which must lie within the problem's.

    Raises:
        ValueError: the surrogate is not a simulator; its parameters (names, order), outputs
            or observation times differ from the problem's; its box of a free parameter is
            not within the problem's bounds; a fixed parameter lies outside its box (a
            PELS-VAE gives NaN there); the problem has noise parameters.
    """
    surrogate = _unwrap(surrogate)
    where = "surrogate_calibration"
    if problem.n_noise:
        raise ValueError(
            f"{where}: the problem samples noise levels {problem.noise_names}; estimators fit model "
            "parameters only: pass problem.without_noise_parameters()"
        )
    model = problem.model
    names, theirs = tuple(model.parameters.names), tuple(surrogate.parameters.names)
    if names != theirs:
        raise ValueError(
            f"{where}: the surrogate's parameters {theirs} are not the model's {names}; train the "
            "surrogate on the model's parameter space (same names, same order)"
        )
    if tuple(surrogate.output_names) != tuple(model.output_names):
        raise ValueError(
            f"{where}: the surrogate predicts outputs {tuple(surrogate.output_names)} but the problem "
            f"fits {tuple(model.output_names)}; train the surrogate on the measured outputs"
        )
    ts, sts = np.asarray(problem.measurements.ts), np.asarray(surrogate.ts)
    if ts.shape != sts.shape or not np.array_equal(ts, sts):
        raise ValueError(
            f"{where}: the surrogate predicts at {sts.size} times ({_span(sts)}) but the measurements "
            f"are at {ts.size} times ({_span(ts)}); train it on trajectories at the measurement times "
            "(model.with_times(measurements.ts))"
        )
    space, box = model.parameters, surrogate.parameters
    for name in problem.model_free_names:
        p, q = space[name], box[name]
        if q.lower < p.lower - _slack(p.lower) or q.upper > p.upper + _slack(p.upper):
            raise ValueError(
                f"{where}: the surrogate's box of {name!r}, [{q.lower}, {q.upper}], is not within the "
                f"problem's bounds [{p.lower}, {p.upper}]; train the surrogate inside the bounds"
            )
    for name, value in problem.fixed.items():
        q = box[name]
        if not q.lower - _slack(q.lower) <= value <= q.upper + _slack(q.upper):
            raise ValueError(
                f"{where}: the fixed parameter {name!r} = {value} lies outside the surrogate's box "
                f"[{q.lower}, {q.upper}], where it cannot predict; fix it inside the box or retrain"
            )
    return CalibrationProblem(surrogate, problem.measurements, free=problem.model_free_names,
                              fixed=problem.fixed, weighting=problem.weighting)


def surrogate_calibration(
    key: PRNGKeyArray,
    problem: CalibrationProblem,
    surrogate,
    *,
    polish: bool = True,
    n_training_simulations: int | None = None,
    screening_options: Mapping | None = None,
    polish_options: Mapping | None = None,
    durations: Mapping[str, float] | None = None,
) -> SurrogateCalibrationResult:
    """Differential evolution on the surrogate, then TRF on the true model (Aka et al. 2023).

    Args:
        key: a ``jax.random`` key for the differential evolution; same key, same result.
        problem: the true calibration problem (the polish simulates its model).
        surrogate: a trained `jcalib.nn.pelsvae.PELSVAE`, its `Surrogate`, or any cheap
            `jcalib.AbstractSimulator` observed at the measurement times (see `surrogate_problem`).
        polish: run the TRF polish (False: phase 1 only, one true-model simulation for the
            gap).
        n_training_simulations: true-model simulations spent on the surrogate (counted in
            ``n_true_simulations``); default: a `PELSVAE`'s ``n_train`` (pass more to count a
            validation set), else 0.
        screening_options: keyword arguments of `differential_evolution` (e.g.
            ``population_size``, ``max_steps``, ``tol``, ``strategy``, ``progress``);
            default: scipy's settings (population 15 n_free, 1000 generations, tol 0.01).
        polish_options: keyword arguments of `least_squares_trf` (e.g. ``max_steps``,
            ``ftol``, ``x_scale``, ``plateau_window`` and ``plateau_rtol`` for a plateau stop).
        durations: seconds of earlier phases to report with this call's, e.g.
            ``{"simulate_training_set_s": 12.3}``.

    Returns:
        `SurrogateCalibrationResult`.

    Raises:
        ValueError: a surrogate that does not fit the problem (see `surrogate_problem`);
            ``polish`` in ``screening_options`` (the polish here is on the true model);
            a bad ``n_training_simulations``; the true model's solve fails at the
            surrogate optimum (from `least_squares_trf`).

    Long for its documented options; the body is 49 lines.
    """
    start = time.perf_counter()
    screening_options = dict(screening_options or {})
    if "polish" in screening_options:
        raise ValueError(
            "surrogate_calibration: screening_options must not set 'polish' (that would polish on the "
            "surrogate); the true-model polish is surrogate_calibration(polish=True)"
        )
    if n_training_simulations is None:
        n_training_simulations = (surrogate.n_train if isinstance(surrogate, PELSVAE) else None) or 0
    if (isinstance(n_training_simulations, bool) or not isinstance(n_training_simulations, (int, np.integer))
            or n_training_simulations < 0):
        raise ValueError(
            f"surrogate_calibration: n_training_simulations must be a non-negative integer; got "
            f"{n_training_simulations!r}"
        )
    phases = {} if durations is None else {str(k): float(v) for k, v in durations.items()}
    training = surrogate.training if isinstance(surrogate, PELSVAE) else None
    if training is not None and "training_s" not in phases:
        phases["training_s"] = float(training.wall_time_s)
    cheap = surrogate_problem(problem, surrogate)

    screening = differential_evolution(key, cheap, **screening_options)
    space = problem.space  # the surrogate's box lies within it up to round-off
    theta_hat = np.clip(np.asarray(screening.theta), space.lower, space.upper)
    phases["screening_s"] = screening.wall_time_s
    if polish:
        polished = least_squares_trf(problem, theta_hat, **dict(polish_options or {}))
        phases["polish_s"] = polished.wall_time_s
        # the TRF's first recorded loss is at its start θ̂_opt (scipy moves a start on a bound
        # 1e-10 inside), so the gap costs no extra simulation
        losses = polished.history.get("loss", [])
        gap_loss = float(losses[0]) if losses else _loss(problem, theta_hat)
        n_sim, n_jac = polished.n_simulations + (0 if losses else 1), polished.n_jacobians
        theta, loss, steps, converged = polished.theta, polished.loss, polished.n_steps, polished.converged
    else:
        polished = None
        gap_loss = _loss(problem, theta_hat)
        n_sim, n_jac = 1, 0
        theta, loss, steps, converged = theta_hat, gap_loss, 0, screening.converged
    phases["workflow_s"] = time.perf_counter() - start
    return SurrogateCalibrationResult(
        method="surrogate-de+trf" if polish else "surrogate-de", names=problem.free_names,
        surrogate_theta=theta_hat, surrogate_loss=float(screening.loss),
        true_loss_at_surrogate_optimum=gap_loss, theta=np.asarray(theta), loss=float(loss),
        n_polish_steps=int(steps), n_training_simulations=int(n_training_simulations),
        n_true_simulations=int(n_training_simulations) + int(n_sim), n_true_jacobians=int(n_jac),
        n_surrogate_evaluations=int(screening.n_simulations), converged=bool(converged),
        durations=phases, screening=screening, polish=polished,
    )


# --- helpers ---------------------------------------------------------------------------------------
def _unwrap(surrogate) -> AbstractSimulator:
    """A PELSVAE's surrogate, or the simulator itself."""
    if isinstance(surrogate, PELSVAE):
        surrogate = surrogate.surrogate  # raises its own error when untrained
    if not isinstance(surrogate, AbstractSimulator):
        raise ValueError(
            f"surrogate_calibration: surrogate must be a trained PELSVAE or a jcalib simulator (its Surrogate, "
            f"a model, a FunctionSimulator: any jcalib.AbstractSimulator); got {type(surrogate).__name__}"
        )
    return surrogate


def _loss(problem: CalibrationProblem, theta: np.ndarray) -> float:
    """The true problem's loss at a physical ``theta`` (one simulation; NaN -> inf)."""
    value = float(problem.loss(problem.to_internal(jnp.asarray(theta))))
    return value if math.isfinite(value) else math.inf


def _slack(bound: float) -> float:
    return _BOUND_RTOL * max(abs(float(bound)), 1e-300)


def _span(ts: np.ndarray) -> str:
    return f"{float(ts[0]):g} to {float(ts[-1]):g}" if ts.size else "none"
