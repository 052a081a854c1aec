"""Fides's interior trust-region reflective method in JAX, as a `jcalib.algorithm.Algorithm`.

The algorithm of Fides (Fröhlich & Sorger 2022; pyPESTO's default optimiser for ODE models), after
Coleman & Li (1994, 1996), step by step as fides 0.8 computes it, with fixed array shapes so that
many starts run in one ``vmap``:

- **Affine scaling** by the distance to the bound the gradient points at: ``v = x - bound``,
  ``D = diag(sqrt|v|)``; the subproblem is posed on ``ss = D^-1 s`` with the matrix
  ``D B D + diag(|g| dv)`` and the gradient ``D g``.
- **The step** on a two-dimensional subspace (the Newton direction, or the eigenvector of the
  most negative eigenvalue, and the gradient), with the trust-region subproblem solved exactly
  there (eigen-decomposition and the secular equation; the hard case too). A step that would
  cross a bound is cut back to ``theta`` times the distance to it, and then competes, by the
  value of the quadratic model, with a scaled gradient step and the **reflections** of the step at
  the bounds it hits (up to ``n`` of them, Fides's default ``"reflect"`` strategy).
- **The radius**: ``gamma2 = 2`` times larger after a good step on the boundary (ratio of actual
  to predicted decrease ``>= eta = 0.75``), ``gamma1 = 1/4`` times (or a quarter of the step)
  after a poor one (``<= mu = 0.25``); a step is accepted when the ratio is positive.
- **The matrix** ``B``: the Fisher information / Gauss-Newton matrix ``J^T J`` of the residuals
  from the second iteration on (the first uses the identity, as Fides's hybrid scheme does), and
  a BFGS matrix, updated in the background from the identity, once the radius has not changed for
  ``switch_iteration = 20`` iterations (``fides.HybridFixed``: residuals too large for ``J^T J``).
- **Stopping** (Fides's defaults): ``|f_new - f| < fatol + frtol |f|`` after a step whose ratio
  exceeds ``mu``, ``|g| <= gatol``, ``|g| <= grtol |f|``, a scaled step shorter than ``xtol``, the
  radius below machine precision, or a value or derivative that is not finite. scipy's tests
  (``least_squares``'s ``ftol``, ``xtol``, ``gtol``) are options: `scipy_stop_options`.

As Fides, the result is the best point evaluated (`TrustRegionState.x_min`), accepted or not.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> from jcalib.algorithm import run
    >>> def rosenbrock(x):  # residuals r, f = |r|^2 / 2: (f, gradient J^T r, J^T J)
    ...     r = jnp.array([10 * (x[1] - x[0] ** 2), 1 - x[0]])
    ...     j = jnp.array([[-20 * x[0], 10.0], [-1.0, 0.0]])
    ...     return 0.5 * r @ r, j.T @ r, j.T @ j
    >>> tr = trust_region_algorithm(rosenbrock, jnp.array([-2.0, -2.0]), jnp.array([2.0, 0.5]))
    >>> out = run(None, tr, tr.init(jnp.array([-1.2, 0.3])), 200, stop=lambda s: s.done)
    >>> [round(float(v), 4) for v in out.state.x_min], int(out.state.exitflag) > 0  # x1 <= 0.5 binds
    ([0.7086, 0.5], True)

References:
    F. Fröhlich, P. K. Sorger, "Fides: Reliable trust-region optimization for parameter
    estimation of ordinary differential equation models", PLoS Comput. Biol. 18 (2022) e1010322.
    T. F. Coleman, Y. Li, "On the convergence of interior-reflective Newton methods for nonlinear
    minimization subject to bounds", Math. Program. 67 (1994) 189-224; "An interior trust region
    approach for nonlinear minimization subject to bounds", SIAM J. Optim. 6 (1996) 418-445.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int
from tqdm.auto import tqdm

from jcalib import distributed
from jcalib.algorithm import Algorithm
from jcalib.estimation.failures import jacobian_failure, point_failure
from jcalib.estimation.least_squares import STOP_RULES, _inside
from jcalib.estimation.result import INTERRUPTED, EstimationResult, MultistartResult, multistart_result
from jcalib.problems import AbstractProblem, residual_offset
from jcalib.starts import start_internal

__all__ = ["CPU_LANES", "EXIT_FLAGS", "TrustRegionInfo", "TrustRegionOptions", "TrustRegionState", "n_lanes",
           "scipy_stop_options", "trust_region_algorithm", "trust_region_batch"]

EXIT_FLAGS = {0: "running", -1: "maximum number of iterations reached", -3: "a value or derivative is not finite",
              -4: "the start is outside the bounds",
              -5: "trust-region radius below machine precision",
              1: "converged: the objective changed by less than fatol + frtol |f|",
              2: "converged: step shorter than xtol (+ xrtol |x|)",
              3: "converged: gradient norm below gatol (or grtol |f|, or the scaled gradient below gstol)"}
"""Fides's exit flags (``fides.constants.ExitFlag``) and what they mean; 0 while iterating."""

_EPS = float(np.finfo(np.float64).eps)


class TrustRegionOptions(NamedTuple):
    """Fides's options (``fides.constants.DEFAULT_OPTIONS``, fides 0.8) and its hybrid scheme's switch;
    ``xrtol`` and ``gstol`` (0: off) are scipy's relative step and scaled gradient tests
    (`scipy_stop_options`)."""

    fatol: float = 1e-8
    frtol: float = 1e-8
    xtol: float = 0.0
    gatol: float = 1e-6
    grtol: float = 0.0
    theta_max: float = 0.95
    delta_init: float = 1.0
    mu: float = 0.25
    eta: float = 0.75
    gamma1: float = 0.25
    gamma2: float = 2.0
    switch_iteration: int = 20
    xrtol: float = 0.0
    gstol: float = 0.0


def scipy_stop_options(ftol: float = 1e-8, xtol: float = 1e-8, gtol: float = 1e-8) -> TrustRegionOptions:
    """Fides's method stopped by the tests of ``scipy.optimize.least_squares`` (its defaults) in
    place of Fides's: an accepted step with ratio ``> mu = 0.25`` that lowered the cost by less
    than ``ftol`` times the cost (``frtol``, with the cost ``|r|^2 / 2`` as the objective:
    `trust_region_batch` with ``stop="scipy"``), a scaled step shorter than ``xtol (xtol + |x|)``
    and a scaled gradient ``max_i |v_i g_i|`` (Coleman-Li's ``v``) below ``gtol``.

    Example:
        >>> o = scipy_stop_options()
        >>> o.frtol, o.fatol, o.xrtol, o.gstol, o.gatol
        (1e-08, 0.0, 1e-08, 1e-08, 0.0)
    """
    return TrustRegionOptions(fatol=0.0, frtol=ftol, xtol=xtol * xtol, xrtol=xtol, gatol=0.0, gstol=gtol)


class TrustRegionState(NamedTuple):
    """One start's iterate (vmapped: a leading axis of starts on every field).

    Attributes:
        x: the current point, ``(n,)``; ``f``, ``g``: objective and gradient there.
        hess: the matrix of the quadratic model, ``(n, n)``; ``bfgs``: the BFGS matrix kept
            beside it until the switch.
        delta: trust-region radius (in the scaled coordinates).
        iteration: iterations taken; ``since_radius_update``: iterations since the radius last
            changed (the hybrid scheme's switch counter); ``switched``: BFGS in use.
        x_min, f_min: the best point evaluated and its value (the result).
        exitflag: `EXIT_FLAGS` key (0 while running).
        n_evaluations: objective evaluations (each with gradient and ``J^T J``).
        fim_min: ``J^T J`` at ``x_min``, ``(n, n)``.
    """

    x: Float[Array, " n"]
    f: Float[Array, ""]
    g: Float[Array, " n"]
    hess: Float[Array, "n n"]
    bfgs: Float[Array, "n n"]
    delta: Float[Array, ""]
    iteration: Int[Array, ""]
    since_radius_update: Int[Array, ""]
    switched: Bool[Array, ""]
    x_min: Float[Array, " n"]
    f_min: Float[Array, ""]
    exitflag: Int[Array, ""]
    n_evaluations: Int[Array, ""]
    fim_min: Float[Array, "n n"]

    @property
    def done(self) -> Bool[Array, "*starts"]:
        """The start has stopped (converged or failed)."""
        return self.exitflag != 0


class TrustRegionInfo(NamedTuple):
    """One iteration: the point tried, the objective at the current point, the ratio of actual to
    predicted decrease, whether the step was accepted, the radius and whether the start was running."""

    trial: Float[Array, " n"]
    f: Float[Array, ""]
    ratio: Float[Array, ""]
    accepted: Bool[Array, ""]
    delta: Float[Array, ""]
    active: Bool[Array, ""]


class _Step(NamedTuple):
    """A proposed step (Fides's ``Step``): ``s`` (unscaled) and ``ss`` (scaled) after the
    step-back, ``s0``/``ss0`` where it starts (nonzero for reflections), the uncut ``og_s``,
    ``og_ss``, the fraction ``minbr`` to the first bound and which components reach it, the
    step-back factor ``alpha`` and the model's value ``qpval``."""

    s: Array
    ss: Array
    s0: Array
    ss0: Array
    og_s: Array
    og_ss: Array
    minbr: Array
    hits: Array
    alpha: Array
    qpval: Array


def _normalize(v):
    norm = jnp.linalg.norm(v)
    return jnp.where(norm > 0, v / jnp.where(norm > 0, norm, 1.0), v)


def _quadratic(b, g, x):
    return 0.5 * x @ b @ x + g @ x


def _boundary_1d(b, g, s, s0, delta):
    """Fides's ``get_1d_trust_region_boundary_solution``: of the two ``t`` with
    ``|s0 + t s| = delta``, the one with the lower model value."""
    a, bc, c = s @ s, 2 * s0 @ s, s0 @ s0 - delta ** 2
    aux = bc + jnp.where(bc >= 0, 1.0, -1.0) * jnp.sqrt(jnp.maximum(bc ** 2 - 4 * a * c, 0.0))
    safe_aux = jnp.where(aux == 0, 1.0, aux)
    t1, t2 = -aux / (2 * jnp.where(a == 0, 1.0, a)), -2 * c / safe_aux
    t2 = jnp.where(aux == 0, t1, t2)
    return jnp.where(_quadratic(b, g, s0 + t1 * s) <= _quadratic(b, g, s0 + t2 * s), t1, t2)


def _solve_1d(b, g, s, delta, s0):
    """Fides's ``solve_1d_trust_region_subproblem``: the step length along ``s`` from ``s0``."""
    a = 0.5 * s @ b @ s
    bc = s @ (b @ s0 + g)
    minq = -bc / (2 * jnp.where(a == 0, 1.0, a))
    interior = (a > 0) & (jnp.linalg.norm(minq * s + s0) <= delta)
    tau = jnp.where(interior, minq, _boundary_1d(b, g, s, s0, delta))
    return jnp.where((delta == 0) | jnp.all(s == 0), 0.0, tau)


def _solve_nd(b, g, delta, iterations: int = 100):
    """Fides's ``solve_nd_trust_region_subproblem``: ``argmin s^T b s / 2 + g^T s`` with
    ``|s| <= delta``, from the eigen-decomposition of ``b``: the Newton step inside the region,
    else ``s(lam) = -(b + lam I)^-1 g`` on its boundary (the root of the secular equation,
    by safeguarded Newton steps on ``1/|s| - 1/delta``), else the hard case."""
    e, vecs = jnp.linalg.eigh(b)
    w = -vecs.T @ g
    mineig = e[0]

    def s_of(lam, w=w):
        el = e + lam
        return vecs @ jnp.where(el != 0, w / jnp.where(el != 0, el, 1.0), 0.0)

    interior = (mineig > 0) & (jnp.linalg.norm(s_of(0.0)) <= delta + jnp.sqrt(_EPS))
    lo = jnp.where(mineig > 0, 0.0, -mineig)
    el = e + lo  # Fides's secular equation at ``lo`` keeps the coefficient of a zero ``e + lo`` undivided
    root_case = jnp.linalg.norm(jnp.where(el != 0, w / jnp.where(el != 0, el, 1.0), w)) > delta
    hi = lo + jnp.linalg.norm(w) / delta + 1.0  # |s(hi)| <= delta

    def newton(_, bracket):
        lo_, hi_, lam = bracket
        s = s_of(lam)
        el = e + lam
        ds = vecs @ jnp.where(el != 0, -w / jnp.where(el != 0, el, 1.0) ** 2, 0.0)
        norm = jnp.linalg.norm(s)
        phi = 1 / norm - 1 / delta
        lo_, hi_ = jnp.where(phi < 0, lam, lo_), jnp.where(phi < 0, hi_, lam)
        step = lam - phi / (-(s @ ds) / norm ** 3)
        inside = jnp.isfinite(step) & (step > lo_) & (step < hi_)
        return lo_, hi_, jnp.where(inside, step, 0.5 * (lo_ + hi_))

    _, _, lam = jax.lax.fori_loop(0, iterations, newton, (lo, hi, 0.5 * (lo + hi)))
    hard_w = jnp.where(e - mineig == 0, 0.0, w)
    hard = s_of(-mineig, hard_w)
    hard = hard + jnp.sqrt(jnp.maximum(delta ** 2 - hard @ hard, 0.0)) * vecs[:, 0]
    s = jnp.where(interior, s_of(0.0), jnp.where(root_case, s_of(lam), hard))
    return jnp.where(delta == 0, 0.0, s)


class _Frame(NamedTuple):
    """What every step of one iteration shares: the point, bounds, the scaling ``D`` (as its
    diagonal), the scaled model (``shess``, ``sg``), the radius and the step-back factor."""

    x: Array
    lower: Array
    upper: Array
    scaling: Array
    shess: Array
    sg: Array
    delta: Array
    theta: Array


def _step_back(frame: _Frame, ss, s0, ss0) -> _Step:
    """Fides's ``Step.step_back`` and ``qpval``: the scaled step ``ss`` from ``s0``, cut to
    ``theta`` times the fraction that reaches the first bound."""
    s = frame.scaling * ss
    x = frame.x + s0
    moving = jnp.abs(s) > 0
    safe = jnp.where(moving, s, 1.0)
    br = jnp.where(moving, jnp.maximum((frame.upper - x) / safe, (frame.lower - x) / safe), jnp.inf)
    minbr = jnp.min(br)
    alpha = jnp.minimum(1.0, frame.theta * minbr)
    qpval = _quadratic(frame.shess, frame.sg, alpha * ss + ss0)
    return _Step(alpha * s, alpha * ss, s0, ss0, s, ss, minbr, br == minbr, alpha, qpval)


def _along(frame: _Frame, direction, s0=None, ss0=None) -> _Step:
    """The 1-D subproblem along ``direction`` (scaled, unit or zero) from ``ss0``, stepped back."""
    s0 = jnp.zeros_like(frame.x) if s0 is None else s0
    ss0 = jnp.zeros_like(frame.x) if ss0 is None else ss0
    tau = _solve_1d(frame.shess, frame.sg, direction, frame.delta, ss0)
    return _step_back(frame, tau * direction, s0, ss0)


def _subspace_step(frame: _Frame) -> _Step:
    """Fides's ``TRStep2D``: the Newton step if the matrix is positive definite and the step
    lies inside the region; else the subproblem on the span of the Newton direction (the
    eigenvector of the smallest eigenvalue if not positive definite) and the gradient (its signs,
    scaled, if not)."""
    b, sg = frame.shess, frame.sg
    e, vecs = jnp.linalg.eigh(b)
    posdef = e[0] > -_EPS * jnp.max(jnp.abs(e))
    newton = -jnp.linalg.lstsq(b, sg)[0]
    newton_inside = posdef & (jnp.linalg.norm(newton) < frame.delta)
    first = _normalize(jnp.where(posdef, newton, vecs[:, 0]))
    second = jnp.where(posdef, sg, frame.scaling * (jnp.sign(sg) + (sg == 0).astype(sg.dtype)))
    second = second - first * (first @ second)
    two = ~newton_inside & (jnp.linalg.norm(second) > _EPS)
    if sg.shape[0] == 1:  # Fides: the Newton step along the one axis
        first, two = _normalize(-sg / jnp.where(b[0, 0] == 0, 1.0, b[0, 0])), jnp.asarray(False)
    subspace = jnp.stack([first, jnp.where(two, _normalize(second), 0.0)], axis=1)
    sc = _solve_nd(subspace.T @ b @ subspace, subspace.T @ sg, frame.delta)
    one = _along(frame, first)
    two_d = _step_back(frame, subspace @ sc, jnp.zeros_like(sg), jnp.zeros_like(sg))
    return jax.tree_util.tree_map(lambda a, c: jnp.where(two, a, c), two_d, one)


def _reflected(frame: _Frame, step: _Step) -> _Step:
    """Fides's ``TRStepReflected``: from where ``step`` first meets a bound, on along its
    direction with the components that hit the bound reversed."""
    alpha = jnp.minimum(step.minbr, 1.0)
    s0, ss0 = alpha * step.og_s + step.s0, alpha * step.og_ss + step.ss0
    return _along(frame, _normalize(jnp.where(step.hits, -step.og_ss, step.og_ss)), s0, ss0)


def _best_step(frame: _Frame) -> _Step:
    """Fides's ``trust_region`` with the ``"reflect"` strategy: the subspace step; if it was cut
    back, also the gradient step and up to ``n`` successive reflections; the one with the lowest
    model value."""
    tr = _subspace_step(frame)
    n = frame.x.shape[0]
    if n == 1:
        return tr
    cut = tr.alpha < 1.0

    def keep_lower(a: _Step, b: _Step, use_b) -> _Step:
        better = use_b & (b.qpval < a.qpval)
        return jax.tree_util.tree_map(lambda u, v: jnp.where(better, v, u), a, b)

    best = keep_lower(tr, _along(frame, _normalize(frame.sg)), cut)

    def reflect(_, carry):
        best, current, going = carry
        new = _reflected(frame, current)
        best = keep_lower(best, new, going)
        return best, jax.tree_util.tree_map(lambda u, v: jnp.where(going, v, u), current, new), going & (new.alpha < 1)

    best, _, _ = jax.lax.fori_loop(0, n, reflect, (best, tr, cut))
    return best


def _frame(x, g, hess, delta, lower, upper, theta_max) -> tuple[_Frame, Array]:
    """Coleman and Li's affine scaling at ``x`` (Fides's ``get_affine_scaling``) and the scaled
    model; also ``dv``, the derivative of the scaling vector."""
    v, dv = _scaling_vector(x, g, lower, upper)
    scaling = jnp.sqrt(jnp.abs(v))
    theta = jnp.maximum(theta_max, 1 - jnp.max(jnp.abs(v * g)))
    shess = scaling[:, None] * hess * scaling[None, :] + jnp.diag(jnp.abs(g) * dv)
    return _Frame(x, lower, upper, scaling, shess, scaling * g, delta, theta), dv


def _scaling_vector(x, g, lower, upper):
    """Coleman and Li's ``v`` (the signed distance to the bound the gradient points at; ``sign(g)``
    where there is none) and its derivative ``dv``."""
    bound = jnp.where(g < 0, upper, lower)
    bounded = jnp.isfinite(bound)
    v = jnp.where(bounded, x - bound, jnp.sign(g) + (g == 0).astype(g.dtype))
    return v, bounded.astype(x.dtype)


def _bfgs(mat, s, y):
    """Fides's BFGS update (``broyden_class_update``, phi = 0), skipped where ``y^T s <= 0``."""
    u = mat @ s
    c, b = u @ s, y @ s
    update = jnp.outer(y, y) / jnp.where(b > 0, b, 1.0) - jnp.outer(u, u) / jnp.where(c != 0, c, 1.0)
    return jnp.where(b > 0, mat + update, mat)


def _off_bounds(x, lower, upper):
    """Fides's ``make_non_degenerate``: 100 machine epsilons off a bound it sits on."""
    eps = 1e2 * _EPS
    x = jnp.where(upper - x < eps, x - eps, x)
    return jnp.where(x - lower < eps, x + eps, x)


def trust_region_algorithm(
    objective: Callable[[Float[Array, " n"]], tuple[Float[Array, ""], Float[Array, " n"], Float[Array, "n n"]]],
    lower: Float[ArrayLike, " n"],
    upper: Float[ArrayLike, " n"],
    options: TrustRegionOptions | None = None,
) -> Algorithm:
    """Fides's trust-region reflective iteration (module docstring) as a deterministic
    `jcalib.algorithm.Algorithm`: ``init(x0)``, ``step(state)``; a stopped start is left as it
    is, so a vmapped batch (`jcalib.algorithm.vmap_chains`) stops start by start.

    Args:
        objective: ``x -> (f, gradient, J^T J)`` in one call (for least squares ``f =
            |r|^2 / 2 + const``, the gradient ``J^T r`` and ``J^T J`` from one Jacobian).
        lower, upper: the box, ``(n,)``, finite or infinite.
        options: `TrustRegionOptions` (None: Fides's defaults).

    Returns:
        ``Algorithm(init, step)`` with `TrustRegionState` and `TrustRegionInfo`; run it with
        ``stop=lambda s: s.done`` (``jnp.all(s.done)`` for a batch) and a number of steps that
        is the iteration budget (Fides's ``maxiter``, 1,000 by default).
    """
    lower, upper = jnp.asarray(lower, dtype=jnp.float64), jnp.asarray(upper, dtype=jnp.float64)
    o = TrustRegionOptions() if options is None else options

    def init(x0) -> TrustRegionState:
        x = _off_bounds(jnp.asarray(x0, dtype=jnp.float64), lower, upper)
        return _start(x, _evaluation(objective, x), lower, upper, o)

    def step(state: TrustRegionState) -> tuple[TrustRegionState, TrustRegionInfo]:
        proposed = _propose(state, lower, upper, o)
        return _finish_step(state, proposed, _evaluation(objective, proposed[2]), lower, upper, o)

    return Algorithm(init, step)


def _evaluation(objective, x):
    """``objective(x)`` as float64 ``(f, gradient, J^T J)``."""
    return tuple(jnp.asarray(v, dtype=jnp.float64) for v in objective(x))


def _start(x, evaluation, lower, upper, o: TrustRegionOptions) -> TrustRegionState:
    """The first state at ``x`` (already off the bounds) from the objective's value there: exit
    flag -3 where it is not finite, -4 outside the box."""
    f, g, fim = evaluation
    eye = jnp.eye(x.shape[0], dtype=x.dtype)
    finite = jnp.isfinite(f) & jnp.all(jnp.isfinite(g))
    inside = jnp.all((x >= lower) & (x <= upper))
    return TrustRegionState(x, f, g, eye, eye, jnp.asarray(o.delta_init, dtype=x.dtype), jnp.array(0),
                            jnp.array(0), jnp.asarray(False), x, jnp.where(finite & inside, f, jnp.inf),
                            jnp.where(inside, jnp.where(finite, 0, -3), -4), jnp.array(1), fim)


def _propose(state: TrustRegionState, lower, upper, o: TrustRegionOptions) -> tuple[_Step, Array, Array]:
    """The step of the scaled subproblem, the scaling's derivative ``dv`` and the point to try."""
    frame, dv = _frame(state.x, state.g, state.hess, state.delta, lower, upper, o.theta_max)
    proposal = _best_step(frame)
    return proposal, dv, state.x + proposal.s + proposal.s0


def _finish_step(state: TrustRegionState, proposed, evaluation, lower, upper,
                 o: TrustRegionOptions) -> tuple[TrustRegionState, TrustRegionInfo]:
    """The next state from the tried point's ``evaluation``; a stopped start is left as it is."""
    proposal, dv, x_new = proposed
    new, ratio, accepted = _advance(state, proposal, dv, x_new, evaluation, lower, upper, o)
    active = ~state.done
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), new, state)
    return new, TrustRegionInfo(x_new, new.f, ratio, active & accepted, new.delta, active)


def _ratio(state: TrustRegionState, proposal: _Step, dv, f_new, g_new):
    """Actual over predicted decrease (Fides's ``update_tr_radius``), 0 where nothing was predicted
    or the new value is not finite."""
    stepsx = proposal.ss + proposal.ss0
    actual = state.f - f_new - 0.5 * stepsx @ (dv * jnp.abs(g_new) * stepsx)
    predicted = -proposal.qpval
    ratio = jnp.where(predicted > 0, actual / jnp.where(predicted > 0, predicted, 1.0), 0.0)
    return jnp.where(jnp.isfinite(f_new), ratio, 0.0)


def _advance(state: TrustRegionState, proposal: _Step, dv, x_new, evaluation, lower, upper,
             o: TrustRegionOptions) -> tuple[TrustRegionState, Array, Array]:
    """Fides's ``update_tr_radius``, ``check_convergence``, ``track_minimum`` and ``update``:
    the next state, the ratio of actual to predicted decrease and whether the step is accepted."""
    f_new, g_new, fim_new = evaluation
    nsx = jnp.linalg.norm(proposal.ss + proposal.ss0)
    finite = jnp.isfinite(f_new)
    ratio = _ratio(state, proposal, dv, f_new, g_new)
    grow = finite & (ratio >= o.eta) & ~(nsx < 0.9 * state.delta)
    shrink = ~finite | (ratio <= o.mu)
    delta = jnp.where(grow, o.gamma2 * state.delta,
                      jnp.where(shrink, jnp.minimum(state.delta * o.gamma1, nsx / 4), state.delta))
    since = jnp.where(grow | shrink, 0, state.since_radius_update + 1)
    accepted = finite & (ratio > 0)
    iteration = state.iteration + 1
    gnorm = jnp.linalg.norm(g_new)
    scaled_g = jnp.max(jnp.abs(_scaling_vector(x_new, g_new, lower, upper)[0] * g_new))
    small_g = (gnorm <= o.gatol) | (gnorm <= o.grtol * jnp.abs(state.f)) | (scaled_g < o.gstol)
    flag = jnp.where((ratio > o.mu) & (jnp.abs(f_new - state.f) < o.fatol + o.frtol * jnp.abs(state.f)), 1,
                     jnp.where((iteration > 1) & (nsx < o.xtol + o.xrtol * jnp.linalg.norm(state.x)), 2,
                               jnp.where(small_g, 3, 0)))
    derivatives_finite = jnp.all(jnp.isfinite(g_new)) & jnp.all(jnp.isfinite(fim_new))
    flag = jnp.where(finite & ~derivatives_finite, -3, flag)
    better = finite & (f_new < state.f_min)
    x_min, f_min = jnp.where(better, x_new, state.x_min), jnp.where(better, f_new, state.f_min)
    s, y = proposal.s + proposal.s0, g_new - state.g
    bfgs = jnp.where(accepted, _bfgs(state.bfgs, s, y), state.bfgs)
    hess = jnp.where(accepted, jnp.where(state.switched, bfgs, fim_new), state.hess)
    switched = state.switched | (accepted & (since >= o.switch_iteration))
    x = jnp.where(accepted, _off_bounds(x_new, lower, upper), state.x)
    flag = jnp.where((flag == 0) & (delta < _EPS), -5, flag)
    new = TrustRegionState(x, jnp.where(accepted, f_new, state.f), jnp.where(accepted, g_new, state.g), hess, bfgs,
                           delta, iteration, since, switched, x_min, f_min, flag, state.n_evaluations + 1,
                           jnp.where(better, fim_new, state.fim_min))
    return new, ratio, accepted


# --- on a calibration problem -------------------------------------------------------------------
def _least_squares(problem: AbstractProblem, offset):
    """``z -> (|r|^2 / 2 + offset, J^T r, J^T J)`` from one forward-mode Jacobian of the residuals:
    one simulation carrying its sensitivities (``jax.jacfwd``, the residuals as its aux; a
    ``jax.linearize`` would run the simulation again inside its tangent map: Armistead's
    objective 8.7 ms against 6.0 ms, the same numbers)."""
    def objective(z):
        jac, r = jax.jacfwd(lambda x: (problem.residuals(x),) * 2, has_aux=True)(z)
        return 0.5 * r @ r + offset, jac.T @ r, jac.T @ jac
    return objective


@eqx.filter_jit
def _tr_evaluate(problem, offset, zs):
    """The objective of every lane, ``(f, J^T r, J^T J)``: the one compiled simulation (with its
    sensitivities) that the first state and every iteration share."""
    return jax.vmap(lambda z: _evaluation(_least_squares(problem, offset), z))(zs)


@eqx.filter_jit
def _tr_start(lower, upper, options, zs, evaluation):
    return jax.vmap(lambda z, e: _start(z, e, lower, upper, options))(zs, evaluation)


@eqx.filter_jit
def _tr_propose(lower, upper, options, states):
    return jax.vmap(lambda s: _propose(s, lower, upper, options))(states)


@eqx.filter_jit
def _tr_finish(lower, upper, options, states, proposed, evaluation):
    return jax.vmap(lambda s, p, e: _finish_step(s, p, e, lower, upper, options))(states, proposed, evaluation)


def _batch_algorithm(problem: AbstractProblem, lower, upper, offset, o: TrustRegionOptions) -> Algorithm:
    """`trust_region_algorithm` on ``problem``'s residuals, vmapped over lanes, with the objective
    compiled apart from the bookkeeping (once per problem structure and number of lanes)."""

    def init(zs):
        zs = jax.vmap(lambda z: _off_bounds(z, lower, upper))(jnp.asarray(zs, dtype=jnp.float64))
        return _tr_start(lower, upper, o, zs, _tr_evaluate(problem, offset, zs))

    def step(states):
        proposed = _tr_propose(lower, upper, o, states)
        return _tr_finish(lower, upper, o, states, proposed, _tr_evaluate(problem, offset, proposed[2]))

    return Algorithm(init, step)


def trust_region_batch(
    problem: AbstractProblem,
    theta0: Float[ArrayLike, "n_starts n_free"],
    *,
    coordinates: str = "physical",
    max_steps: int = 1000,
    stop: str = "fides",
    options: TrustRegionOptions | None = None,
    lanes: int | None = None,
    start_distribution: str = "given",
    progress: bool = False,
) -> MultistartResult:
    """Fides's trust-region reflective method (`trust_region_algorithm`) from many starts at once.

    The objective is ``f = |r|^2 / 2 + c`` of the problem's residuals, its gradient ``J^T r``
    and matrix ``J^T J`` from one forward-mode Jacobian per iteration; ``c`` makes ``f`` the
    negative log-likelihood where the residuals are the likelihood's (Gaussian noise of known
    level, e.g. PEtab problems; checked at the first and last start and the initial point; else
    ``c = 0``), so that Fides's relative stopping tolerance refers to the value pyPESTO gives Fides.
    Bounds are the problem's box in internal coordinates, reached exactly (reflections). The
    starts run through ``lanes`` lanes of one vmapped iteration; a lane whose start stopped takes
    the next start. The objective (the simulation with its sensitivities) is compiled once per
    problem structure and number of lanes, apart from the method's bookkeeping. After
    `jcalib.distributed.initialize` with several processes, each process runs its block of the
    starts and every process gets all results.

    Args:
        problem: the calibration problem.
        theta0: starts, ``(n_starts, n_free)``, within the bounds, in ``coordinates``
            (``"physical"`` or ``"internal"``).
        max_steps: Fides's ``maxiter``, the iteration budget per start.
        stop: ``"fides"`` (Fides's default tests, ``f`` the negative log-likelihood as above) or
            ``"scipy"`` (`scipy_stop_options`, ``f = |r|^2 / 2``: scipy's ``ftol`` is relative to
            the cost); one of `jcalib.estimation.least_squares.STOP_RULES`.
        options: the method's options (`TrustRegionOptions`; None: those of ``stop``).
        lanes: starts iterated at once (None: on a CPU `CPU_LANES`, then one from the point
            where each running start, stepped alone, takes less CPU time per iteration than a
            start in the lanes did and the rest of the run outweighs compiling it, measured after
            `MEASURED_ITERATIONS` and 4x as many each time; on an accelerator every start at
            once). Lanes move in lockstep, each iteration's simulation as long as the slowest
            lane's: few lanes where starts differ in stiffness (a CPU), many where a wide batch is
            nearly free (a GPU).
        start_distribution: label stored in the result (`jcalib.estimation.multistart`).
        progress: a progress bar over the finished starts.

    Returns:
        `MultistartResult` with ``method="fides"``: per start the best point evaluated (as
        Fides), its loss (mean squared residual), ``n_steps`` iterations, one simulation and
        one Jacobian per iteration plus the start's, ``converged`` for Fides's positive exit
        flags, the reason in words and ``extra["exitflag"]``. A start where the objective
        or its derivatives are not finite gets ``loss = inf`` and the reason. A Ctrl-C keeps
        every start's best point so far, not converged, ``extra["status"] == "interrupted"``.
        ``extra["lanes_at_end"]``: this process's lanes when it finished (1 after a switch).

    Raises:
        ValueError: a free parameter without finite bounds; ``theta0`` not ``(n_starts,
            n_free)``, not finite or outside the bounds; ``max_steps`` or ``lanes`` not a positive
            integer; ``stop`` not one of `jcalib.estimation.least_squares.STOP_RULES`.
    """
    start = time.perf_counter()
    if not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"trust_region_batch: max_steps must be a positive integer; got {max_steps!r}")
    n_lanes(lanes, 1)  # refuses a bad value before any work
    if stop not in STOP_RULES:
        raise ValueError(f"trust_region_batch: stop must be one of {STOP_RULES}; got {stop!r}")
    options = options if options is not None else scipy_stop_options() if stop == "scipy" else TrustRegionOptions()
    algorithm, z0s, offset = _prepared(problem, theta0, coordinates, options, stop == "fides")
    local = np.asarray(distributed.process_rows(z0s))
    fields, interrupted, width = _run_lanes(algorithm.init, algorithm.step, local, n_lanes(lanes, len(local)),
                                            int(max_steps), progress,
                                            one_lane=lanes is None and jax.default_backend() == "cpu")
    x_min, f_min, flags, steps, evaluations, fims = distributed.gather_rows(fields, len(z0s))
    wall = time.perf_counter() - start
    results = [_start_result(problem, z0s[i], x_min[i], f_min[i] - offset, fims[i], int(flags[i]), int(steps[i]),
                             int(evaluations[i]), interrupted, wall / len(z0s), max_steps, i)
               for i in range(len(z0s))]
    status = "interrupted" if interrupted else "completed"
    return multistart_result("fides", start_distribution, problem, theta0, results, wall, status=status,
                              extra={"max_steps_taken": int(steps.max()), "objective_offset": offset,
                                     "lanes_at_end": width})


def _prepared(problem: AbstractProblem, theta0, coordinates: str, options: TrustRegionOptions,
              with_offset: bool) -> tuple[Algorithm, np.ndarray, float]:
    """`trust_region_batch`'s checked starts (internal), its vmapped algorithm and the objective's
    offset ``c`` (`jcalib.problems.residual_offset`; 0 where there is none or without ``with_offset``)."""
    problem.space.check_box("trust_region_batch")
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.ndim != 2 or theta0.shape[0] == 0:
        raise ValueError(f"trust_region_batch: theta0 must be (n_starts, n_free={problem.n_free}) with at least one "
                         f"start; got shape {theta0.shape}")
    problem.space.check_shape(theta0, "trust_region_batch: theta0", batched=True)
    z0s = start_internal(problem, theta0, coordinates=coordinates, where="trust_region_batch", rows="n_starts")
    offset = (residual_offset(problem, [z0s[0], z0s[-1], problem.initial_internal()]) or 0.0) if with_offset else 0.0
    algorithm = _batch_algorithm(problem.forward_mode(), jnp.asarray(problem.space.lower_internal),  # arrays:
                                 jnp.asarray(problem.space.upper_internal), jnp.asarray(offset), options)  # traced
    return algorithm, np.asarray(z0s), offset


CPU_LANES = 8
"""Lanes on a CPU unless one lane is measured cheaper (`_run_lanes`). Lanes vectorise small
simulations and hold each other to the stiffest start's step count; which wins depends on the
problem (README, "Multistart against pyPESTO + Fides")."""

MEASURED_ITERATIONS = 10
"""Iterations of the vmapped lanes whose CPU time decides whether the run goes on in one lane
(`_run_lanes`); where it does not, the lanes are measured again over 4x as many, and so on (their
cost grows as the starts move apart in stiffness)."""

NOMINAL_ITERATIONS = 100
"""Iterations per start assumed when the rest of a run is weighed against a compilation (a
typical count for Fides on ODE problems)."""

LEAST_COMPILE_S = 10.0
"""The least a compilation is taken to cost (s) when the rest of a run is weighed against one:
the lanes' first iteration measures it, unless it was compiled before."""


def n_lanes(lanes: int | None, n_starts: int) -> int:
    """The vmapped lanes `trust_region_batch` starts with for ``n_starts`` starts in a process:
    ``lanes`` (None: `CPU_LANES` on a CPU, then one where that is measured cheaper; every start at
    once on an accelerator), at most ``n_starts``.

    Example:
        >>> n_lanes(4, 3), n_lanes(4, 10)
        (3, 4)
    """
    if lanes is None:
        return min(CPU_LANES, n_starts) if jax.default_backend() == "cpu" else n_starts
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
        raise ValueError(f"trust_region_batch: lanes must be a positive integer or None; got {lanes!r}")
    return min(int(lanes), n_starts)


def _one_lane_cheaper(n_left: int, lanes_cpu: float, compile_s: float, one_lane_cpu: Callable[[], float]) -> bool:
    """Whether the rest of a run (``n_left`` starts, `NOMINAL_ITERATIONS` each) goes on in one
    lane: ``one_lane_cpu()`` (its CPU time per iteration, s; timed only where the rest of the run
    at the lanes' measured ``lanes_cpu`` per start and iteration outweighs a compilation,
    ``compile_s``) below ``lanes_cpu``."""
    if n_left * NOMINAL_ITERATIONS * lanes_cpu <= compile_s:
        return False
    return one_lane_cpu() < lanes_cpu


class _LaneClock:
    """CPU time per running start and iteration of the vmapped lanes over ``window`` iterations
    after the first; the wall time from its creation (before the lanes' first state) to the end of
    the first iteration (which compile, in a run's first clock) is ``compile_s``."""

    def __init__(self, window: int):
        self.iterations, self.cpu, self.start_iterations, self.compile_s = 0, 0.0, 0, 0.0
        self.window, self.began = window, time.perf_counter()

    def step(self, step, state, running: int):
        cpu = time.process_time()
        state = jax.block_until_ready(step(state)[0])
        if self.iterations == 0:
            self.compile_s = time.perf_counter() - self.began
        else:
            self.cpu += time.process_time() - cpu
            self.start_iterations += running
        self.iterations += 1
        return state

    @property
    def measured(self) -> bool:
        return self.iterations == self.window + 1


def _run_lanes(init, step, z0s: np.ndarray, lanes: int, max_steps: int, progress: bool = False,
               one_lane: bool = False) -> tuple[list[np.ndarray], bool, int]:
    """The starts ``z0s`` (``(n, n_free)``, internal) through ``lanes`` vmapped lanes: each start
    iterates until it stops or reaches ``max_steps``, and a lane whose start stopped takes the next
    start, so no lane waits for the slowest start and one compiled iteration serves them all.
    ``one_lane``: after `MEASURED_ITERATIONS` (and 4x as many after each measurement that kept the
    lanes), the running starts go on one at a time (in one lane) where `_one_lane_cheaper` (each of
    them stepped alone is the measurement).

    Returns:
        ``[x_min, f_min, exitflag, iteration, n_evaluations, fim_min]``, one row per start,
        recorded after every iteration; whether a Ctrl-C ended the run (running starts keep their best point
        so far; a start not begun has 0 evaluations); the lanes at the end.
    """
    n = len(z0s)
    fields, queue, parked, held = _fields(z0s), list(range(n)), {}, np.full(lanes, -1)
    clock = _LaneClock(MEASURED_ITERATIONS) if one_lane and lanes > 1 else None
    bar = tqdm(total=n, desc=f"multistart fides ({lanes} lanes)", unit="start", disable=not progress)
    state = None
    try:
        while True:
            if state is not None:
                values = [np.asarray(a) for a in (state.x_min, state.f_min, state.exitflag, state.iteration,
                                                  state.n_evaluations, state.fim_min)]
                for field, value in zip(fields, values):
                    field[held[held >= 0]] = value[held >= 0]
                stopped = (held >= 0) & ((values[2] != 0) | (values[3] >= max_steps))
                bar.update(int(stopped.sum()))
                held[stopped] = -1
            free = np.flatnonzero(held < 0)[:len(queue)]
            if free.size:
                held[free] = [queue.pop(0) for _ in free]
                state = _refill(init, state, free, held[free], z0s, parked)
                continue
            if np.all(held < 0):
                return fields, False, held.size
            if clock is None:
                state = jax.block_until_ready(step(state)[0])
                continue
            state = clock.step(step, state, int(np.sum(held >= 0)))
            if clock.measured:
                state, held = _maybe_one_lane(step, state, held, queue, parked, clock, max_steps, bar)
                clock = _LaneClock(4 * clock.window) if held.size > 1 else None
    except KeyboardInterrupt:
        return fields, True, held.size
    finally:
        bar.close()


def _maybe_one_lane(step, state: TrustRegionState, held: np.ndarray, queue: list, parked: dict,
                    clock: _LaneClock, max_steps: int, bar) -> tuple[TrustRegionState | None, np.ndarray]:
    """After the measured iterations: the lanes as they are, or, where `_one_lane_cheaper`, every
    running start parked (its one-lane state in ``parked``, first in ``queue``) and one empty lane.
    The measurement steps each running start alone, three iterations (the first compiles, then two
    timed ones; starts with fewer left in ``max_steps`` are not measured), and the lanes keep the
    results."""
    iteration = np.asarray(state.iteration)
    running = np.flatnonzero(held >= 0)
    measured = [int(k) for k in running if iteration[k] + 3 <= max_steps]
    alone = {}

    def one_lane_cpu() -> float:
        alone.update({k: jax.tree_util.tree_map(lambda a, k=k: a[k:k + 1], state) for k in measured})
        alone[measured[0]] = jax.block_until_ready(step(alone[measured[0]])[0])  # compiles one lane
        cpu = time.process_time()
        for k in measured:
            for _ in range(2):
                alone[k] = jax.block_until_ready(step(alone[k])[0])
        return (time.process_time() - cpu) / (2 * len(measured))

    lanes_cpu = clock.cpu / max(clock.start_iterations, 1)
    compile_s = max(clock.compile_s, LEAST_COMPILE_S)
    narrow = bool(measured) and _one_lane_cheaper(len(queue) + running.size, lanes_cpu, compile_s, one_lane_cpu)
    if alone:  # the lanes take their starts' iterations alone
        index = np.asarray(list(alone))
        state = jax.tree_util.tree_map(lambda a, *one: a.at[index].set(jnp.concatenate(one)), state, *alone.values())
    if not narrow:
        return state, held
    for k in running:
        parked[int(held[k])] = jax.tree_util.tree_map(lambda a, k=k: a[k:k + 1], state)
    queue[:0] = [int(held[k]) for k in running]
    bar.set_description("multistart fides (1 lane)")
    return None, np.full(1, -1)


def _fields(z0s: np.ndarray) -> list[np.ndarray]:
    """`_run_lanes`'s record before any start has begun."""
    n, n_free = z0s.shape
    return [z0s.copy(), np.full(n, np.inf), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.full((n, n_free, n_free), np.nan)]


def _refill(init, state: TrustRegionState | None, lanes: np.ndarray, starts: np.ndarray, z0s: np.ndarray,
            parked: dict) -> TrustRegionState:
    """``state`` with the lanes ``lanes`` given the starts ``starts``: a parked start's state (one
    lane), else the lanes started afresh at their ``z0s`` rows (one vmapped ``init`` of all lanes,
    kept where refilled; every lane where ``state`` is None)."""
    if int(starts[0]) in parked:
        return parked.pop(int(starts[0]))
    if state is None:
        return init(jnp.asarray(z0s[starts]))
    z = np.asarray(state.x).copy()
    z[lanes] = z0s[starts]
    fresh = np.isin(np.arange(z.shape[0]), lanes)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(fresh.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
                                  init(jnp.asarray(z)), state)


def _start_result(problem, z0, z, half_sum, fim, flag, steps, evaluations, interrupted, wall, max_steps, i):
    """One start's `EstimationResult` (``half_sum``: ``|r|^2 / 2`` at ``z``; ``fim``: ``J^T J`` there,
    whose eigenvalues are the squared singular values of the residuals' Jacobian)."""
    loss = 2 * float(half_sum) / problem.n_observed if math.isfinite(half_sum) else math.inf
    if not math.isfinite(loss) and not (interrupted and evaluations == 0):
        r0 = np.asarray(problem.residuals(jnp.asarray(z0)))
        why = point_failure(problem, z0, r0, "trust_region_batch", f"theta0[{i}]") or jacobian_failure(
            problem, z0, np.asarray(problem.jacobian(jnp.asarray(z0))), "trust_region_batch", f"theta0[{i}]")
        reason, z = "failed: " + (why or "the objective or its derivatives are not finite there"), z0
    elif interrupted and evaluations == 0:
        reason = f"{INTERRUPTED} (KeyboardInterrupt) before this start ran"
    elif interrupted and flag == 0:
        reason = f"{INTERRUPTED} (KeyboardInterrupt) after {steps} iterations: not converged; the best point so far"
    else:
        reason = EXIT_FLAGS[flag] if flag else f"stopped: max_steps={max_steps} iterations reached"
    z, theta = _inside(problem, z)
    singular = (np.sqrt(np.clip(np.linalg.eigvalsh(fim), 0.0, None))[::-1] if np.all(np.isfinite(fim))
                and math.isfinite(loss) else np.zeros(0))
    condition = float(singular[0] / singular[-1]) if singular.size and singular[-1] > 0 else math.inf
    return EstimationResult(
        method="fides", names=problem.free_names, theta=theta, theta_internal=z, loss=loss,
        singular_values=singular, condition_number=condition if singular.size else math.nan,
        n_essential_directions=problem.n_free,
        n_steps=steps, n_simulations=evaluations, n_jacobians=evaluations, wall_time_s=wall,
        converged=flag > 0 and math.isfinite(loss), reason=reason, history={}, extra={"exitflag": flag})
