"""Bayesian sampling: jcalib prescaled MALA and NUTS versus finite-difference MALA over scipy and blackjax NUTS.

Two posteriors (``--case``):

- ``polymerization`` (default): the polymerization paper's Test 2 posterior (Wulkow et al. 2021,
  §3.2.2). Data from the "real" model (recipe 1, nominal parameters) with 5 % multiplicative
  noise on [M] (30 times) and Mw (500, 1000, 2000, 5000 s); the simple model with quasi-steady
  radicals (Tsit5, rtol 1e-8, atol 1e-10 on scaled states) is fitted in f and kt,c (kt,d = 0),
  internal coordinates (f, log kt,c), relative-Gaussian likelihood with σ = 0.05, uniform prior
  on the box. Every chain starts at the Gauss-Newton estimate (start f = 1, kt,c = 1e6, as in the
  paper). 2 parameters: finite differences cost 1 + 2·2 cheap solves per step.
- ``cabin_thermal``: the 20-state cabin model (Zhang & Mikelsons 2023 stand-in, 200 x 4
  temperatures, Tsit5 at rtol = atol = 1e-6) with 13 free correction factors, where gradients
  matter: synthetic data at the nominal parameters plus additive Gaussian noise σ = 0.1 K (the
  model spec's noise level for noisy experiments), absolute-Gaussian likelihood with that σ,
  uniform prior on the box, the other 6 factors fixed at their nominal values. The 13 are the
  subset `jcalib.sensitivity.identifiability` proposes for this problem at the nominal point
  (Bastogne's correlation ranking, stopped where the relative σ_min falls below its threshold;
  also the number of essential directions, 13 of 19): with all 19 free, the Fisher information
  at σ = 0.1 K has condition number 2e6, posterior correlations up to 0.995 and posterior sd up
  to 0.43 of the box width (CF_airExchangeLR, the three CF_zeta*, CF_coolDown): a posterior
  shaped by the box, not by the data; with the 13, every posterior sd is at most 0.026 of its
  box width (sampled; the Laplace estimate at the start gives up to 0.044) and the largest
  correlation is 0.89 (the full run recomputes this: ``identifiability`` and
  ``laplace_sd_over_box_width`` in the report). Every chain starts at the nominal values
  (the truth; the noise moves the mode by about one posterior sd, which the warm-up and
  burn-in absorb).

Samplers in the same run:

- jcalib: `jcalib.bayes.mala.sample`, prescaled MALA (``Prescaled(fraction)``: 1/200 of the prior
  range for Test 2, the paper's value; 1/50, jcalib's default, for the cabin) with ``warmup``
  steps of dual averaging of one global factor (prescaling alone accepts ~0 % on Test 2),
  ``burn_in`` discarded steps, ``n_steps`` kept steps per chain, chains vmapped, gradients by
  reverse-mode autodiff through the diffrax solve, all jitted. Run twice with the same key: the
  first call compiles, the second is timed (``run_s``; ``compile_in_run_s`` is what it still
  traces and compiles, see `run_jcalib`; the ``*_compiled`` rates leave that out).
- jcalib_laplace: the same, preconditioned by the Laplace covariance at the start
  (``preconditioner=Laplace()``, not in the paper): the proposal follows the posterior's
  correlations (the f / kt,c ridge; the cabin's correlated exchange factors).
- jcalib_nuts (Test 2 only): ``jcalib.bayes.nuts.sample``, blackjax's NUTS kernel whitened by
  the same Laplace covariance (inverse mass matrix), the step size adapted by dual averaging over
  ``warmup`` steps, then ``burn_in`` and ``n_steps`` as jcalib's MALA; timed the same way.
- fd: the same algorithm written as a user without autodiff would: the case's NumPy right-hand
  side solved by ``scipy.integrate.solve_ivp`` (Test 2: the same QSS model, LSODA, the same
  rtol/atol on the same scaled states; cabin: `benchmarks.scipy_reference.cabin_thermal`, RK45
  restarted at the two phase switches, rtol = atol = 1e-6 as the model), the same log posterior
  (likelihood, prior, internal coordinates; `ScipyPosterior`, the simulation injected), its
  gradient by finite differences, and the same MALA transition in a NumPy loop (`fd_mala`), one
  chain. Test 2: central differences (1 + 2 n solves per evaluation, 5), the prescaled kernel
  (proposal N(θ + P∇log π, 2P)), compared with ``jcalib``. Cabin: forward differences (1 + n
  solves, 14: the cheap n + 1 of the issue; with a step of 1e-7 of the box width they agree
  with autodiff as closely as central ones do, ~1 %: the gap between the scipy and diffrax
  discretisations), the Laplace-preconditioned kernel (proposal N(θ + hC∇log π, 2hC), C = L Lᵀ),
  compared with ``jcalib_laplace``: the kernel that mixes on 13 correlated parameters (diagonal
  prescaling needs far more steps per effective draw, and an fd chain of affordable length would
  give no usable ESS). Either way fd gets jcalib's final step sizes (and Laplace covariance)
  after the warm-up for free and runs no warm-up, burn-in or Hessian of its own: its time is
  sampling only, while jcalib's includes prescaling or the Laplace covariance, warm-up and
  burn-in (the comparison favours fd). Only ``fd_steps`` steps are run; its ESS is ArviZ's bulk
  ESS of that chain. A short chain gives a noisy ESS, so the report also gives fd's ESS/s under
  the assumption that it mixes per step exactly like the jcalib chains of the same kernel
  (``ess_per_second_at_jcalib_ess_per_step``); both ratios are reported.
- nuts (Test 2 only): blackjax NUTS on ``problem.log_posterior`` (the same jitted autodiff log
  density), ``blackjax.window_adaptation`` (diagonal mass matrix, target acceptance 0.8) for
  ``warmup`` steps from the same start, then ``n_steps`` draws per chain, the same number
  of chains (vmapped), compiled ahead of time (compile and run timed separately). The NUTS rows
  are left out on the cabin, where each draw costs tens of gradients (minutes per row).

Per method: compile time, run time (compiled code), minimum bulk ESS over the parameters,
ESS/s = min ESS / run time, acceptance, gradient evaluations, posterior mean and sd by
parameter. Ratios of ESS/s: ``same_algorithm_vs_fd`` (and ``..._at_equal_ess_per_step``)
compare fd with the jcalib row of the same kernel (``jcalib`` on Test 2, ``jcalib_laplace`` on
the cabin): the issue's 100x target; ``jcalib_vs_fd``, ``jcalib_laplace_vs_fd`` and the NUTS
ratios compare the other rows with the same fd chain. ``jcalib_chain_scaling`` repeats the
same-kernel jcalib run with more chains (``--scaling``): vmapped chains share each compiled
step, so ESS/s grows with the chain count until the CPU is saturated; the fd loop runs one
chain at a time. The scipy log posterior is checked against jcalib's log density at a few of
its draws (max abs difference) and, in full runs (always on the cabin), the finite-difference
gradient against the autodiff gradient. ``profile`` gives each side's seconds and solves
(jcalib: gradient evaluations) per chain step. Writes JSON (default
results/benchmarks/mala.json).

``--quick`` runs a few dozen steps (CI smoke run; its ESS and ratios say little); on Test 2 it
generates the data with the real model's QSS variant (Tsit5, 1.2e-4 relative from the full stiff
model, far below the 5 % noise) to skip the full model's ~15 s compile.

Usage:
    python -m benchmarks.mala [--case polymerization|cabin_thermal] [--quick] [--chains 4]
                              [--scaling 16,64] [--seed 0] [--out PATH]
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402
from scipy.linalg import solve_triangular  # noqa: E402

import jcalib  # noqa: E402
from benchmarks import common  # noqa: E402
from benchmarks.scipy_reference import SCIPY_CASES  # noqa: E402
from benchmarks.scipy_reference.radical_polymerization_simple import build as simple_qss_build  # noqa: E402
from jcalib.bayes import Laplace, Prescaled, diagnostics, mala, nuts  # noqa: E402  # noqa: E402
from jcalib.data import Measurements  # noqa: E402
from jcalib.estimation.gauss_newton import gauss_newton  # noqa: E402
from jcalib.probability.likelihoods import AbsoluteGaussian, RelativeGaussian  # noqa: E402
from jcalib.problems import CalibrationProblem  # noqa: E402
from jcalib.sensitivity import identifiability  # noqa: E402

TARGET = 100.0  # issue: jcalib >= 100x the ESS/s of the finite-difference loop

# Test 2 (polymerization)
OUTPUTS = ("M", "Mw")
SIGMA = 0.05
GN_START = {"f": 1.0, "ktc": 1e6}
FRACTION = 1 / 200  # prescaling target step length (the paper's polymerization tests)
SCIPY_METHOD, RTOL, ATOL = "LSODA", 1e-8, 1e-10  # the jcalib model's controller tolerances
FD_STEP = 1e-5  # central differences: h_i = FD_STEP * (upper_i - lower_i), internal coordinates

# cabin_thermal
CABIN_SIGMA = 0.1  # K, additive: the model spec's noise level for noisy experiments
CABIN_FREE = (  # identifiability's proposed subset at the nominal point (module doc), model order
    "CF_alpha_internal", "CF_alpha_external", "CF_hull_capacity", "CF_airExchangeFBT", "CF_airExchangeRBT",
    "CF_airExchangeTFR", "CF_airExchangeBFR", "CF_alpha_mass", "CF_zeta_rear", "ratioBottomUp",
    "ratioFrontRear", "CF_coolDown", "CF_heatUp")
CABIN_FRACTION = 1 / 50  # jcalib's default prescaling fraction (the warm-up adapts a global factor)
# forward differences: h_i = 1e-7 (upper_i - lower_i). The RK45 solve keeps its step sequence
# under such perturbations, so the quotient is smooth: forward differences at 1e-6..1e-9 and
# central ones at 1e-4..1e-6 all agree with autodiff to ~0.9 % (max over the components,
# relative; 4e-4 in norm) at the nominal point: the scipy-vs-diffrax discretisation gap, not
# the difference step; at 1e-6 truncation starts to show
CABIN_FD_STEP = 1e-7

# full / quick
SIZES = {
    "polymerization": {"n_chains": (4, 2), "warmup": (300, 50), "burn_in": (200, 0), "n_steps": (2000, 50),
                       "fd_steps": (1000, 20), "n_check": (5, 3), "scaling": ("16,64", "")},
    # 16 chains: on 2 cores a vmapped gradient costs ~7 ms per chain at 16-32 chains, ~20 ms at 1-4
    "cabin_thermal": {"n_chains": (16, 2), "warmup": (200, 10), "burn_in": (100, 0), "n_steps": (2000, 10),
                      "fd_steps": (150, 5), "n_check": (5, 2), "scaling": ("", "")},
}


# --- the problems --------------------------------------------------------------------------------
def build_polymerization(seed: int, quick: bool):
    """Test-2 problem on noisy real-model data; (problem, data info, start z0, start info)."""
    real = jcalib.models.get("radical_polymerization_real", recipe=1, qss=quick)
    theta_real = jnp.asarray(real.parameters.nominal)
    data = jcalib.synthetic_measurements(jax.random.key(seed), real, theta_real, sigma=SIGMA,
                                         noise="multiplicative")
    columns = [real.output_names.index(o) for o in OUTPUTS]
    mask = np.asarray(real.experiment.mask)[:, columns]
    data = Measurements(real.ts, np.asarray(data.values)[:, columns], mask=mask, sigma=SIGMA,
                        output_names=OUTPUTS)
    model = jcalib.models.get("radical_polymerization_simple", recipe=1, outputs=OUTPUTS, qss=True)
    problem = CalibrationProblem(model, data, free=["f", "ktc"], fixed={"ktd": 0.0},
                                 likelihood="relative_gaussian")
    info = {"model": "radical_polymerization_real" + (" (qss)" if quick else ""), "recipe": 1,
            "theta": real.parameters.to_dict(np.asarray(theta_real)), "noise": "multiplicative",
            "sigma": SIGMA, "outputs": list(OUTPUTS), "seed": seed, "n_observed": problem.n_observed}
    gn = gauss_newton(problem, GN_START)
    start = {"gauss_newton_from": GN_START, "estimate": gn.estimate, "R_X": gn.loss}
    print(f"Test 2: {problem.n_observed} observations, GN estimate {gn.estimate} (R_X {gn.loss:.3g})", flush=True)
    return problem, info, jnp.asarray(gn.theta_internal), start


def build_cabin(seed: int, quick: bool):
    """Cabin problem on noisy data at the nominal values; (problem, data info, start z0, start info)."""
    model = jcalib.models.get("cabin_thermal")
    theta = jnp.asarray(model.parameters.nominal)
    data = jcalib.synthetic_measurements(jax.random.key(seed), model, theta, sigma=CABIN_SIGMA, noise="additive")
    problem = CalibrationProblem(model, data, free=list(CABIN_FREE), likelihood="absolute_gaussian")
    info = {"model": "cabin_thermal", "theta": model.parameters.to_dict(np.asarray(theta)), "noise": "additive",
            "sigma": CABIN_SIGMA, "outputs": list(model.output_names), "seed": seed,
            "n_observed": problem.n_observed,
            "fixed": {n: v for n, v in model.parameters.to_dict(np.asarray(theta)).items() if n not in CABIN_FREE}}
    print(f"cabin_thermal: {problem.n_observed} observations, {problem.n_free} free parameters", flush=True)
    z0 = problem.initial_internal()
    return problem, info, z0, {"nominal_values": problem.estimate_dict(z0)}


def cabin_identifiability(problem) -> dict:
    """`identifiability` of the cabin problem with all 19 parameters free, at the nominal point
    (the data of ``problem``): what the choice of `CABIN_FREE` rests on."""
    full = CalibrationProblem(problem.model, problem.measurements, likelihood="absolute_gaussian")
    rep = identifiability(full, np.asarray(full.space.nominal))
    return {"n_params": full.n_free, "rank": rep.rank, "n_essential": rep.jacobian.n_essential,
            "condition_number": rep.jacobian.condition_number, "null_parameters": list(rep.null_parameters),
            "proposed_subset": list(rep.proposed_subset),
            "free_is_proposed_subset": set(rep.proposed_subset) == set(CABIN_FREE)}


def polymerization_simulate(model) -> Callable:
    """``theta -> ([M], Mw)`` at the model's times by one LSODA solve of the QSS model (None on failure)."""

    def simulate(theta):
        rhs, y0, observe = simple_qss_build(theta, model)
        sol = solve_ivp(rhs, (float(model.experiment.t0), float(model.experiment.t1)), y0,
                        method=SCIPY_METHOD, t_eval=np.asarray(model.ts), rtol=RTOL, atol=ATOL)
        return observe(sol.y.T) if sol.success else None

    return simulate


def cabin_simulate(model) -> Callable:
    """``theta -> (200, 4)`` by the cabin's scipy baseline (RK45, restarted per phase; None on failure)."""
    case = SCIPY_CASES["cabin_thermal"]
    return lambda theta: case.run(theta, model)


@dataclasses.dataclass(frozen=True)
class Case:
    """One posterior of the benchmark: the problem and the scipy side's settings."""

    description: str
    build: Callable  # (seed, quick) -> (problem, data info, z0, start info)
    scipy_simulate: Callable  # (model) -> (theta_full -> outputs (n_times, n_outputs) or None)
    scipy_solver: str
    differences: str  # "central" or "forward"
    fd_step: float  # relative to the internal box width
    preconditioner: str  # the fd chain's kernel: "prescaled" (vs jcalib) or "laplace" (vs jcalib_laplace)
    fraction: float  # Prescaled(fraction) of the jcalib row
    nuts: bool  # run the NUTS rows
    internal_coordinates: str


CASES = {
    "polymerization": Case(
        "polymerization Test 2: radical_polymerization_simple (qss), free f, ktc; ktd = 0; [M] + Mw",
        build_polymerization, polymerization_simulate, f"{SCIPY_METHOD}, rtol {RTOL:g}, atol {ATOL:g}", "central",
        FD_STEP, "prescaled", FRACTION, True, "f linear, log ktc"),
    "cabin_thermal": Case(
        f"cabin_thermal: 13 of 19 correction factors free (identifiability's subset), T1, T3, T5, T7 at "
        f"200 times, additive noise sigma {CABIN_SIGMA} K",
        build_cabin, cabin_simulate, "RK45 restarted at the phase switches, rtol = atol = 1e-6", "forward",
        CABIN_FD_STEP, "laplace", CABIN_FRACTION, False, "all linear (physical values)"),
}


# --- the scipy baseline --------------------------------------------------------------------------
_NUMPY_LIKELIHOODS = {  # residual r(X, F) and log c(X) of `jcalib.probability.likelihoods`, in NumPy
    RelativeGaussian: (lambda x, f: (x - f) / x, lambda x: np.log(np.abs(x))),
    AbsoluteGaussian: (lambda x, f: x - f, lambda x: np.zeros_like(x)),
}


class ScipyPosterior:
    """log π(z) of ``problem`` with the model simulated by ``simulate`` (scipy): the same internal
    coordinates, likelihood (relative or absolute Gaussian), σ and uniform prior; its gradient by
    central or forward finite differences; counts the solves.

    Args:
        problem: the `CalibrationProblem` (uniform prior, fixed σ, likelihood in `_NUMPY_LIKELIHOODS`).
        simulate: ``theta -> outputs (n_times, n_outputs)`` or None on a failed solve; theta is
            the model's full physical parameter vector.
        differences: ``"central"`` (2 n solves per gradient) or ``"forward"`` (n).
        fd_step: difference step relative to each parameter's internal box width.
    """

    def __init__(self, problem: CalibrationProblem, simulate: Callable, differences: str = "central",
                 fd_step: float = FD_STEP):
        if type(problem.likelihood) not in _NUMPY_LIKELIHOODS or differences not in ("central", "forward"):
            raise ValueError(f"ScipyPosterior: unsupported likelihood {type(problem.likelihood).__name__} or "
                             f"differences {differences!r}")
        self.simulate_fn, self.differences = simulate, differences
        self.residual, log_c = _NUMPY_LIKELIHOODS[type(problem.likelihood)]
        space = problem.space
        self.lower, self.upper = np.asarray(space.lower_internal), np.asarray(space.upper_internal)
        self.log_scale = np.asarray(space.log_scale, dtype=bool)
        self.log_prior = -float(np.sum(np.log(self.upper - self.lower)))
        self.x = np.asarray(problem.x_observed)
        self.index = np.asarray(problem.observed_index)
        self.sigma = np.asarray(problem.sigma_observed)
        self.const = float(np.sum(-np.log(self.sigma) - log_c(self.x) - 0.5 * math.log(2 * math.pi)))
        self.fixed = np.asarray(problem.theta_full(jnp.zeros(problem.n_free)))  # fixed values, free slots 0
        self.free_index = [problem.model.parameters.names.index(n) for n in problem.free_names]
        self.h = fd_step * (self.upper - self.lower)
        self.solves_per_gradient = (2 if differences == "central" else 1) * self.lower.size
        self.n_solves = 0

    def simulate(self, z):
        theta = self.fixed.copy()
        theta[self.free_index] = np.where(self.log_scale, np.exp(z), z)
        self.n_solves += 1
        return self.simulate_fn(theta)

    def __call__(self, z):
        z = np.asarray(z, dtype=np.float64)
        if not np.all((z >= self.lower) & (z <= self.upper)):
            return -np.inf
        out = self.simulate(z)
        if out is None:
            return -np.inf
        r = self.residual(self.x, out.reshape(-1)[self.index]) / self.sigma
        value = self.log_prior + self.const - 0.5 * float(np.sum(r * r))
        return value if np.isfinite(value) else -np.inf

    def value_and_grad(self, z, differences: str | None = None):
        """log π and its finite-difference gradient (n or 2 n extra solves; -inf/None outside);
        ``differences`` overrides the target's for one call."""
        central = (differences or self.differences) == "central"
        value = self(z)
        if not np.isfinite(value):
            return -np.inf, None
        grad = np.empty(z.size)
        for i in range(z.size):
            e = np.zeros(z.size)
            e[i] = self.h[i]
            hi = self(z + e)
            lo = self(z - e) if central else value
            if not (np.isfinite(hi) and np.isfinite(lo)):
                return -np.inf, None
            grad[i] = (hi - lo) / ((2 if central else 1) * self.h[i])
        return value, grad


def fd_mala(rng, target: ScipyPosterior, z0, p, n_steps: int, chol=None):
    """MALA in NumPy, one chain, the kernel of `jcalib.bayes.mala.build_kernel`: proposal
    N(z + P∇log π, 2P), Metropolis-Hastings correction. ``chol`` None: prescaled, P = diag(p)
    (eqs. A17-A18); else P = p L Lᵀ with L = ``chol`` and p a scalar (jcalib's dense metric:
    plain MALA on u = L⁻¹(z - z̄), the same chain written in z). Returns (draws (n_steps, n),
    log densities, accepted flags)."""
    z = np.asarray(z0, dtype=np.float64)
    factor = np.diag(np.sqrt(np.broadcast_to(p, z.shape))) if chol is None else math.sqrt(float(p)) * np.asarray(chol)
    metric = factor @ factor.T  # P = F Fᵀ

    def log_q(x_to, x_from, g_from):  # log q(x_to | x_from) up to a constant that cancels
        r = solve_triangular(factor, x_to - x_from - metric @ g_from, lower=True)
        return -0.25 * float(r @ r)

    lp, g = target.value_and_grad(z)
    if g is None:
        raise RuntimeError(f"fd_mala: the scipy log posterior is not finite at the start {z}")
    draws, lps, accepted = np.empty((n_steps, z.size)), np.empty(n_steps), np.zeros(n_steps, bool)
    for t in range(n_steps):
        y = z + metric @ g + math.sqrt(2.0) * factor @ rng.standard_normal(z.size)
        lp_y, g_y = target.value_and_grad(y)
        if g_y is not None:
            log_alpha = lp_y + log_q(z, y, g_y) - lp - log_q(y, z, g)
            if np.log(rng.uniform()) < min(0.0, log_alpha):
                z, lp, g, accepted[t] = y, lp_y, g_y, True
        draws[t], lps[t] = z, lp
    return draws, lps, accepted


# --- blackjax NUTS -------------------------------------------------------------------------------
def nuts_functions(logdensity_fn, n_warmup: int, n_steps: int):
    """Jittable (adapt(keys, z0s), draw(keys, states, step_size, inverse_mass_matrix)),
    vmapped over chains."""
    import blackjax

    def adapt_one(key, z0):
        warmup = blackjax.window_adaptation(blackjax.nuts, logdensity_fn, target_acceptance_rate=0.8)
        (state, params), _ = warmup.run(key, z0, num_steps=n_warmup)
        return state, params["step_size"], params["inverse_mass_matrix"]

    def draw_one(key, state, step_size, inverse_mass_matrix):
        nuts = blackjax.nuts(logdensity_fn, step_size=step_size, inverse_mass_matrix=inverse_mass_matrix)

        def body(s, k):
            s, info = nuts.step(k, s)
            return s, (s.position, s.logdensity, info.acceptance_rate, info.num_integration_steps,
                       info.is_divergent)

        return jax.lax.scan(body, state, jax.random.split(key, n_steps))[1]

    return jax.vmap(adapt_one), jax.vmap(draw_one)


def _permissive(fn):
    """Run ``fn`` with JAX's standard dtype/rank promotion (blackjax mixes Python scalars
    and ranks; the test suite switches both to strict)."""

    def wrapped(*args):
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            return fn(*args)

    return wrapped


def _aot(fn, *args):
    """(compiled fn, compile seconds): jit, lower and compile ahead of time."""
    t = time.perf_counter()
    compiled = _permissive(lambda *a: jax.jit(fn).lower(*a).compile())(*args)
    return compiled, time.perf_counter() - t


def run_nuts(problem, key, z0, n_chains, n_warmup, n_steps):
    adapt, draw = nuts_functions(problem.log_posterior, n_warmup, n_steps)
    key_adapt, key_draw = jax.random.split(key)
    keys_adapt = jax.random.split(key_adapt, n_chains)
    keys_draw = jax.random.split(key_draw, n_chains)
    starts = jnp.broadcast_to(z0[None, :], (n_chains, z0.size))
    adapt_c, adapt_compile = _aot(adapt, keys_adapt, starts)
    t = time.perf_counter()
    states, step_size, inv_mass = jax.block_until_ready(adapt_c(keys_adapt, starts))
    adapt_s = time.perf_counter() - t
    draw_c, draw_compile = _aot(draw, keys_draw, states, step_size, inv_mass)
    t = time.perf_counter()
    positions, logdensity, acc, n_int, divergent = jax.block_until_ready(
        draw_c(keys_draw, states, step_size, inv_mass))
    draw_s = time.perf_counter() - t
    return {"positions": np.asarray(positions), "logdensity": np.asarray(logdensity),
            "acceptance": float(np.mean(acc)), "n_integration_steps": np.asarray(n_int),
            "n_divergent": int(np.sum(divergent)), "step_size": np.asarray(step_size),
            "inverse_mass_matrix": np.asarray(inv_mass), "compile_s": adapt_compile + draw_compile,
            "adapt_s": adapt_s, "draw_s": draw_s}


# --- report helpers ------------------------------------------------------------------------------
def posterior_summary(problem, samples_internal):
    """Mean and sd by parameter, physical and internal; min bulk ESS and max R-hat."""
    z = np.asarray(samples_internal)
    theta = np.where(np.asarray(problem.space.log_scale, dtype=bool), np.exp(z), z)
    flat_z, flat_theta = z.reshape(-1, z.shape[-1]), theta.reshape(-1, z.shape[-1])
    ess = diagnostics.ess(z)
    out = {"n_chains": int(z.shape[0]), "n_draws_per_chain": int(z.shape[1]),
           "ess_bulk": dict(zip(problem.free_names, ess.tolist())), "ess_bulk_min": float(np.min(ess)),
           "mean": dict(zip(problem.free_names, flat_theta.mean(axis=0).tolist())),
           "sd": dict(zip(problem.free_names, flat_theta.std(axis=0, ddof=1).tolist())),
           "mean_internal": flat_z.mean(axis=0).tolist(), "sd_internal": flat_z.std(axis=0, ddof=1).tolist(),
           "all_finite": bool(np.all(np.isfinite(z)))}
    if z.shape[0] > 1:
        out["rhat_max"] = float(np.max(diagnostics.rhat(z)))
    return out


def check_scipy_posterior(problem, target: ScipyPosterior, points, logdensities, gradients: bool):
    """Max |scipy - jcalib| of log π at ``points`` (jcalib's values ``logdensities`` come
    with its draws, so no extra compile) and, with ``gradients``, the finite-difference gradient
    against jcalib's autodiff gradient: the max componentwise relative error |Δ| / max(|g|, 1)
    and the relative error of the vector, ‖Δ‖ / ‖g‖. Near the mode the gradient is small and
    the componentwise error measures the gap between the scipy and diffrax discretisations of
    log π (a smooth function, ~1e-2 on the cabin), not the differences; for forward differences
    the report therefore also compares them with central differences of the same scipy log π."""
    diffs = [abs(target(np.asarray(z)) - float(lp)) for z, lp in zip(points, logdensities)]
    out = {"n_points": len(diffs), "points": "jcalib posterior draws",
           "max_abs_logdensity_difference": max(diffs),
           "max_rel_logdensity_difference": max(d / abs(float(lp)) for d, lp in zip(diffs, logdensities)),
           "max_rel_gradient_error_fd_vs_autodiff": None, "max_norm_rel_gradient_error_fd_vs_autodiff": None,
           "max_rel_gradient_error_forward_vs_central": None}
    if gradients:
        value_and_grad = jax.jit(jax.value_and_grad(problem.log_posterior))
        errors, norm_errors, forward_errors = [], [], []
        for z in points:
            g_j = np.asarray(value_and_grad(jnp.asarray(z))[1])
            g_s = target.value_and_grad(np.asarray(z))[1]
            errors.append(float(np.max(np.abs(g_s - g_j) / np.maximum(np.abs(g_j), 1.0))))
            norm_errors.append(float(np.linalg.norm(g_s - g_j) / np.linalg.norm(g_j)))
            if target.differences == "forward":
                g_c = target.value_and_grad(np.asarray(z), "central")[1]
                forward_errors.append(float(np.max(np.abs(g_s - g_c) / np.maximum(np.abs(g_c), 1.0))))
        out.update({"max_rel_gradient_error_fd_vs_autodiff": max(errors),
                    "max_norm_rel_gradient_error_fd_vs_autodiff": max(norm_errors)})
        if forward_errors:
            out["max_rel_gradient_error_forward_vs_central"] = max(forward_errors)
    return out


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


@contextlib.contextmanager
def compile_seconds():
    """Yields a one-element list that sums JAX's trace, lowering and XLA compile seconds inside."""
    total = [0.0]

    def listener(event, duration, **_):
        if event in _COMPILE_EVENTS:
            total[0] += duration

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield total
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def run_jcalib(problem, key, z0, sizes, n_chains, preconditioner, kernel="mala"):
    """`sample` twice with the same key (compile + run, then run); summary row and result.

    The second call is the timed run (``run_s``). `sample`'s loop is compiled once
    (`jcalib.algorithm.run` reuses it); what the second call still traces or compiles is
    ``compile_in_run_s``, what JAX reports for tracing, lowering and compiling during that
    call; ``run_compiled_s`` = run_s - compile_in_run_s is the compiled code alone, and the
    ``*_compiled`` rates use it.
    """
    sample = {"mala": mala.sample, "nuts": nuts.sample}[kernel]
    settings = dict(n_chains=n_chains, burn_in=sizes["burn_in"], warmup=sizes["warmup"],
                    preconditioner=preconditioner)
    n_steps = sizes["n_steps"]
    t = time.perf_counter()
    first = sample(key, problem, z0, n_steps, coordinates="internal", **settings)
    first_s = time.perf_counter() - t
    with compile_seconds() as compiling:
        t = time.perf_counter()
        post = sample(key, problem, z0, n_steps, coordinates="internal", **settings)
        run_s = time.perf_counter() - t
    compile_in_run_s = min(compiling[0], run_s)
    assert np.array_equal(first.samples_internal, post.samples_internal)
    row = posterior_summary(problem, post.samples_internal)
    kind = ("prescaled MALA" if isinstance(preconditioner, Prescaled) else
            f"{kernel.upper()} {'preconditioned' if kernel == 'mala' else 'whitened'} by the Laplace covariance at "
            "the start")
    n_transitions = n_chains * (sizes["warmup"] + sizes["burn_in"] + n_steps)
    row.update({
        "method": f"jcalib.bayes.mala.sample: {kind}, autodiff gradients, jitted, chains vmapped",
        "compile_s": first_s - run_s, "run_s": run_s, "compile_plus_run_s": first_s,
        "run_includes": "prescaling draws or Laplace covariance, warm-up, burn-in, sampling, diagnostics",
        "ess_per_second": row["ess_bulk_min"] / run_s, "compile_in_run_s": compile_in_run_s,
        "run_compiled_s": run_s - compile_in_run_s,
        "ess_per_second_compiled": row["ess_bulk_min"] / (run_s - compile_in_run_s), "acceptance": post.acceptance,
        "warmup_acceptance": post.extra["warmup_acceptance_mean"], "step_sizes": post.step_sizes,
        "step_sizes_prescaled": post.extra.get("step_sizes_prescaled"),
        "step_size_factor": post.extra["step_size_factor"],
        "warmup": sizes["warmup"], "burn_in": sizes["burn_in"], "n_steps": n_steps,
        "gradient_evaluations": post.n_logdensity_evaluations,
        "s_per_chain_step": run_s / n_transitions,
        "s_per_chain_step_compiled": (run_s - compile_in_run_s) / n_transitions,
        "gradient_evaluations_per_chain_step": post.n_logdensity_evaluations / n_transitions,
        "ess_per_chain_step": row["ess_bulk_min"] / (n_chains * n_steps),
    })
    if isinstance(preconditioner, Prescaled):
        row["fraction"] = preconditioner.fraction
    elif kernel == "mala":
        row.update({"step_size_h": post.extra["step_size_h"], "preconditioner": post.extra["preconditioner"]})
    return row, post


def fd_kernel(case: Case, post):
    """fd_mala's (p, chol) for the jcalib result ``post`` of the case's kernel, after its warm-up."""
    if case.preconditioner == "prescaled":
        return np.asarray(post.step_sizes), None
    return (post.extra["step_size_h"] * post.extra["step_size_factor"],
            np.linalg.cholesky(np.asarray(post.extra["preconditioner"])))


def main(argv=None):
    parser = common.parser(__doc__, "mala")
    parser.add_argument("--case", choices=tuple(CASES), default="polymerization",
                        help="the posterior (default %(default)s; module doc)")
    parser.add_argument("--chains", type=int, default=None,
                        help="chains of jcalib and NUTS (default: polymerization 4, cabin_thermal 16; quick 2)")
    parser.add_argument("--scaling", default=None,
                        help="comma-separated chain counts of extra jcalib-only runs (default: polymerization "
                             "16,64, cabin_thermal none; quick none)")
    args = common.parse_args(parser, argv)
    case = CASES[args.case]
    sizes = {k: v[1 if args.quick else 0] for k, v in SIZES[args.case].items()}
    n_chains, n_steps = args.chains or sizes["n_chains"], sizes["n_steps"]
    scaling = sizes["scaling"] if args.scaling is None else args.scaling
    scaling = [int(c) for c in scaling.split(",") if c.strip()]
    load_at_start = common.load_average()

    t = time.perf_counter()
    problem, data_info, z0, start_info = case.build(args.seed, args.quick)
    setup_s = time.perf_counter() - t
    print(f"  setup {setup_s:.1f} s", flush=True)
    key_mala, key_nuts = jax.random.split(jax.random.key(args.seed + 1))
    prescaled, laplace = Prescaled(case.fraction), Laplace()

    # jcalib prescaled MALA: first call compiles, the second (same key) is timed
    jc, post = run_jcalib(problem, key_mala, z0, sizes, n_chains, prescaled)
    print(f"  jcalib: {jc['run_s']:.2f} s (of which {jc['compile_in_run_s']:.1f} s compiling; + "
          f"{jc['compile_s']:.1f} s first compile), acceptance {jc['acceptance']:.2f}, "
          f"min ESS {jc['ess_bulk_min']:.0f}, {jc['ess_per_second']:.1f} ESS/s", flush=True)

    # the same with the dense Laplace preconditioner (not in the paper; jcalib's option for ridges)
    lap, lap_post = run_jcalib(problem, key_mala, z0, sizes, n_chains, laplace)
    print(f"  jcalib (laplace): {lap['run_s']:.2f} s (of which {lap['compile_in_run_s']:.1f} s compiling; + "
          f"{lap['compile_s']:.1f} s first compile), acceptance "
          f"{lap['acceptance']:.2f}, min ESS {lap['ess_bulk_min']:.0f}, {lap['ess_per_second']:.1f} ESS/s", flush=True)
    lower, upper = np.asarray(problem.space.lower_internal), np.asarray(problem.space.upper_internal)
    laplace_sd = np.sqrt(np.diagonal(np.asarray(lap["preconditioner"])))
    same_name = "jcalib" if case.preconditioner == "prescaled" else "jcalib_laplace"
    same, same_post = (jc, post) if case.preconditioner == "prescaled" else (lap, lap_post)

    jnuts = None
    if case.nuts:  # jcalib's NUTS: blackjax's kernel whitened by the same Laplace covariance
        jnuts, jnuts_post = run_jcalib(problem, key_mala, z0, sizes, n_chains, laplace, kernel="nuts")
        jnuts.update({"n_divergent": int(np.sum(jnuts_post.extra["divergences"])),
                      "mean_integration_steps": jnuts_post.extra["mean_integration_steps"],
                      "all_finite": bool(np.all(np.isfinite(jnuts_post.samples)))})
        print(f"  jcalib (nuts, laplace): {jnuts['run_s']:.2f} s (+ {jnuts['compile_s']:.1f} s compile), acceptance "
              f"{jnuts['acceptance']:.2f}, min ESS {jnuts['ess_bulk_min']:.0f}, {jnuts['ess_per_second']:.1f} ESS/s",
              flush=True)

    # finite-difference MALA over scipy: the same kernel, step sizes and preconditioner as `same`
    target = ScipyPosterior(problem, case.scipy_simulate(problem.model), case.differences, case.fd_step)
    flat = same_post.samples_internal.reshape(-1, problem.n_free)
    flat_lp = same_post.logdensity.reshape(-1)
    picks = np.random.default_rng(args.seed).choice(flat.shape[0], sizes["n_check"], replace=False)
    check = check_scipy_posterior(problem, target, flat[picks], flat_lp[picks],
                                  gradients=not args.quick or args.case != "polymerization")
    check["points"] = f"{same_name} posterior draws"
    target.n_solves = 0
    rng = np.random.default_rng(args.seed)
    p, chol = fd_kernel(case, same_post)
    t = time.perf_counter()
    fd_draws, fd_lp, fd_acc = fd_mala(rng, target, np.asarray(z0), p, sizes["fd_steps"], chol)
    fd_run_s = time.perf_counter() - t
    fd = posterior_summary(problem, fd_draws[None])
    fd_s_per_step = fd_run_s / sizes["fd_steps"]
    kernel_text = ("prescaled kernel with jcalib's adapted step sizes" if chol is None else
                   "Laplace-preconditioned kernel with jcalib's covariance and adapted step h")
    fd.update({
        "method": f"NumPy MALA loop, scipy solve_ivp ({case.scipy_solver}), {case.differences} finite-difference "
                  f"gradients, {kernel_text}",
        "compile_s": 0.0, "run_s": fd_run_s, "run_includes": "sampling steps only (no warm-up, no burn-in)",
        "preconditioner": case.preconditioner, "compared_with": same_name, "differences": case.differences,
        "n_steps": sizes["fd_steps"], "step_sizes": same_post.step_sizes, "acceptance": float(np.mean(fd_acc)),
        "ess_per_second": fd["ess_bulk_min"] / fd_run_s,
        "ess_per_second_at_jcalib_ess_per_step": same["ess_per_chain_step"] / fd_s_per_step,
        "s_per_step": fd_s_per_step, "solves": target.n_solves, "s_per_solve": fd_run_s / target.n_solves,
        "solves_per_evaluation": 1 + target.solves_per_gradient,
        "fd_step_h": target.h.tolist(),
        "all_finite": bool(np.all(np.isfinite(fd_draws)) and np.all(np.isfinite(fd_lp))),
    })
    if chol is not None:
        fd["step_size_h"] = float(p)
    print(f"  fd: {fd_run_s:.2f} s for {sizes['fd_steps']} steps ({target.n_solves} solves), acceptance "
          f"{fd['acceptance']:.2f}, min ESS {fd['ess_bulk_min']:.1f}, {fd['ess_per_second']:.2f} ESS/s "
          f"({fd['ess_per_second_at_jcalib_ess_per_step']:.2f} at {same_name}'s ESS per step); log π check "
          f"max |diff| {check['max_abs_logdensity_difference']:.2e}; gradient fd vs autodiff "
          f"{check['max_rel_gradient_error_fd_vs_autodiff']} (max rel), "
          f"{check['max_norm_rel_gradient_error_fd_vs_autodiff']} (norm), forward vs central "
          f"{check['max_rel_gradient_error_forward_vs_central']}", flush=True)

    nuts = None
    if case.nuts:  # blackjax NUTS on the same log density
        nuts_run = run_nuts(problem, key_nuts, z0, n_chains, sizes["warmup"] + sizes["burn_in"], n_steps)
        nuts = posterior_summary(problem, nuts_run["positions"])
        nuts_run_s = nuts_run["adapt_s"] + nuts_run["draw_s"]
        nuts.update({
            "method": "blackjax NUTS on problem.log_posterior, window adaptation (diagonal mass matrix), "
                      "chains vmapped, jitted",
            "compile_s": nuts_run["compile_s"], "run_s": nuts_run_s, "adapt_s": nuts_run["adapt_s"],
            "draw_s": nuts_run["draw_s"], "run_includes": "window adaptation and sampling",
            "adaptation_steps": sizes["warmup"] + sizes["burn_in"], "n_steps": n_steps,
            "ess_per_second": nuts["ess_bulk_min"] / nuts_run_s,
            "ess_per_second_sampling_only": nuts["ess_bulk_min"] / nuts_run["draw_s"],
            "acceptance": nuts_run["acceptance"], "n_divergent": nuts_run["n_divergent"],
            "mean_integration_steps": float(np.mean(nuts_run["n_integration_steps"])),
            "gradient_evaluations_sampling": int(np.sum(nuts_run["n_integration_steps"])),
            "step_size": nuts_run["step_size"].tolist(),
            "inverse_mass_matrix": nuts_run["inverse_mass_matrix"].tolist(),
            "all_finite": bool(np.all(np.isfinite(nuts_run["positions"]))
                               and np.all(np.isfinite(nuts_run["logdensity"]))),
        })
        print(f"  nuts: {nuts_run_s:.2f} s (+ {nuts['compile_s']:.1f} s compile), acceptance "
              f"{nuts['acceptance']:.2f}, {nuts['mean_integration_steps']:.1f} leapfrog steps/draw, min ESS "
              f"{nuts['ess_bulk_min']:.0f}, {nuts['ess_per_second']:.1f} ESS/s", flush=True)

    # more jcalib chains of the same kernel: vmapped chains share each compiled step
    sweep = []
    for c in scaling:
        row, _ = run_jcalib(problem, key_mala, z0, sizes, c, prescaled if same_name == "jcalib" else laplace)
        sweep.append({k: row[k] for k in ("n_chains", "compile_s", "run_s", "ess_bulk_min", "ess_per_second",
                                          "acceptance", "s_per_chain_step", "ess_per_chain_step", "mean", "sd")}
                     | {"jcalib_vs_fd": row["ess_per_second"] / fd["ess_per_second"],
                        "jcalib_vs_fd_at_equal_ess_per_step":
                            row["ess_per_second"] / (row["ess_per_chain_step"] / fd_s_per_step)})
        print(f"  {same_name}, {c} chains: {row['run_s']:.2f} s (+ {row['compile_s']:.1f} s compile), min ESS "
              f"{row['ess_bulk_min']:.0f}, {row['ess_per_second']:.1f} ESS/s, "
              f"{sweep[-1]['jcalib_vs_fd_at_equal_ess_per_step']:.0f}x fd at equal ESS per step", flush=True)

    fd_at = fd["ess_per_second_at_jcalib_ess_per_step"]
    ratios = {
        "fd_compared_with": same_name,
        "same_algorithm_vs_fd": same["ess_per_second"] / fd["ess_per_second"],
        "same_algorithm_vs_fd_at_equal_ess_per_step": same["ess_per_second"] / fd_at,
        "same_algorithm_vs_fd_time_per_chain_step": fd_s_per_step / same["s_per_chain_step"],
        # the same without jcalib's per-call compile of the sampling loop (run_jcalib's doc)
        "same_algorithm_vs_fd_compiled": same["ess_per_second_compiled"] / fd["ess_per_second"],
        "same_algorithm_vs_fd_at_equal_ess_per_step_compiled": same["ess_per_second_compiled"] / fd_at,
        "jcalib_vs_fd": jc["ess_per_second"] / fd["ess_per_second"],
        "jcalib_vs_fd_at_equal_ess_per_step": jc["ess_per_second"] / fd_at,
        "jcalib_vs_fd_time_per_chain_step": fd_s_per_step / jc["s_per_chain_step"],
        "jcalib_laplace_vs_fd": lap["ess_per_second"] / fd["ess_per_second"],
        "jcalib_laplace_vs_fd_at_jcalib_ess_per_step": lap["ess_per_second"] / fd_at,
    }
    if case.nuts:
        ratios.update({"jcalib_vs_nuts": jc["ess_per_second"] / nuts["ess_per_second"],
                       "jcalib_laplace_vs_nuts": lap["ess_per_second"] / nuts["ess_per_second"],
                       "jcalib_nuts_vs_nuts": jnuts["ess_per_second"] / nuts["ess_per_second"]})
    ratios["target_100x_vs_fd_met"] = {
        "fd_own_ess": bool(ratios["same_algorithm_vs_fd"] >= TARGET),
        "equal_ess_per_step": bool(ratios["same_algorithm_vs_fd_at_equal_ess_per_step"] >= TARGET),
        "equal_ess_per_step_any_chain_count": bool(max(
            [ratios["same_algorithm_vs_fd_at_equal_ess_per_step"]]
            + [r["jcalib_vs_fd_at_equal_ess_per_step"] for r in sweep]) >= TARGET),
    }
    print(f"  ESS/s ratios: {same_name}/fd {ratios['same_algorithm_vs_fd']:.0f}x (fd's own ESS), "
          f"{ratios['same_algorithm_vs_fd_at_equal_ess_per_step']:.0f}x at equal ESS per step "
          f"({ratios['same_algorithm_vs_fd_time_per_chain_step']:.0f}x per chain step; compiled code only: "
          f"{ratios['same_algorithm_vs_fd_at_equal_ess_per_step_compiled']:.0f}x); jcalib/fd "
          f"{ratios['jcalib_vs_fd']:.0f}x, laplace/fd {ratios['jcalib_laplace_vs_fd']:.0f}x (fd's own ESS)"
          + (f"; jcalib/nuts {ratios['jcalib_vs_nuts']:.2f}x, laplace/nuts {ratios['jcalib_laplace_vs_nuts']:.2f}x, "
             f"jcalib nuts (laplace)/blackjax nuts {ratios['jcalib_nuts_vs_nuts']:.2f}x" if case.nuts else ""),
          flush=True)

    profile = {  # where the time goes, per chain step (one MALA transition of one chain)
        "fd_s_per_step": fd_s_per_step, "fd_solves_per_step": target.n_solves / sizes["fd_steps"],
        "fd_s_per_solve": fd["s_per_solve"],
        same_name + "_s_per_chain_step": same["s_per_chain_step"],
        same_name + "_s_per_chain_step_compiled": same["s_per_chain_step_compiled"],
        same_name + "_compile_in_run_s": same["compile_in_run_s"],
        same_name + "_gradient_evaluations_per_chain_step": same["gradient_evaluations_per_chain_step"],
        same_name + "_s_per_gradient_evaluation": same["run_s"] / same["gradient_evaluations"],
        "jcalib_sampling_share_of_steps": n_steps / (sizes["warmup"] + sizes["burn_in"] + n_steps),
    }
    report = {
        "benchmark": "mala",
        "quick": args.quick,
        "case_name": args.case,
        "case": case.description,
        "target": "jcalib ESS/s >= 100x the finite-difference MALA loop over scipy solve_ivp (same kernel)",
        "data": data_info,
        "likelihood": f"{problem.likelihood.name}, sigma {float(np.max(problem.sigma_observed)):g}",
        "prior": "uniform on the box (internal coordinates)",
        "internal_coordinates": case.internal_coordinates,
        "start": {**start_info, "theta_internal": np.asarray(z0).tolist()},
        "setup_s": setup_s,
        "laplace_sd_over_box_width": dict(zip(problem.free_names, (laplace_sd / (upper - lower)).tolist())),
        "identifiability": cabin_identifiability(problem) if args.case == "cabin_thermal" and not args.quick else None,
        "ess": "ArviZ bulk ESS (rank-normalised, split chains), minimum over the parameters",
        "methods": ["jcalib", "jcalib_laplace"] + (["jcalib_nuts"] if case.nuts else []) + ["fd"]
                   + (["nuts"] if case.nuts else []),
        "scipy_check": check,
        "jcalib": jc,
        "jcalib_laplace": lap,
        "jcalib_nuts": jnuts,
        "fd": fd,
        "nuts": nuts,
        "jcalib_chain_scaling": sweep,
        "ratios": ratios,
        "profile": profile,
        "machine": common.machine_info(load_at_start),
    }
    return common.write_report(args.out, report)  # what the file holds: plain JSON types, NaN -> None


if __name__ == "__main__":
    main()
