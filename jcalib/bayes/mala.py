"""Prescaled MALA: Metropolis-adjusted Langevin with a diagonal preconditioner
(Wulkow et al. 2021, §2.3.2-2.3.3 and Appendix A.1-A.2).

The target is π(θ) ∝ exp(-S_X(θ)) = exp(logdensity_fn(θ)) in the problem's *internal*
coordinates θ (log for log-scale parameters, see `jcalib.parameters`); in practice
``logdensity_fn`` is `jcalib.problem.CalibrationProblem.log_posterior`. One step (eq. A17)
proposes, with P = diag(p) the prescaled step sizes,

    θ' = θ + P ∇log π(θ) + √(2P) r,   r ~ N(0, I),

i.e. a Gaussian q(θ'|θ) = N(θ + P ∇log π(θ), 2P) (eq. A18), and accepts it with the
Metropolis-Hastings probability (eq. A15)

    α(θ, θ') = min{1, π(θ') q(θ|θ') / (π(θ) q(θ'|θ))}.

Equivalently, this is plain MALA with unit step size on the rescaled density
π_u(u) = π(P^{1/2} u), θ = P^{1/2} u (`blackjax_mala` runs blackjax's kernel that way;
the two give the same chain for the same key).

**Prescaling** (`jcalib.bayes.adaptation.prescaling`, re-exported here; Appendix A.2).
For target mean step lengths τ_i (a fraction of each parameter's prior range, e.g. 1/50
in the paper's reaction example, 1/200 in its polymerization tests), n = 100 points θ_k
are drawn (uniformly from the prior box, the paper's step 2, or around a given centre),
the gradients of S_X = -log π are weighted by the posterior, mean |∂S/∂θ_i| = Σ_k π(θ_k)
|∂_i S(θ_k)| / Σ_k π(θ_k) (eq. A22), and P_ii solves the bound on the mean step length
P_ii mean|∂_i S| + 2 √(P_ii/π) = τ_i (eq. A23), whose positive root is eq. A26.

**Rejections.** A proposal where the log density is -inf (outside a uniform prior box) or
NaN, or its gradient is not finite (a failed ODE solve), is rejected: the acceptance
probability is 0 and neither the value nor the gradient enters the chain (NaN gradients
are replaced through `jnp.where`, so they cannot leak into later arithmetic).

**Dense preconditioner** (optional, not in the paper): with a symmetric positive definite
matrix C = L Lᵀ (e.g. the Gauss-Newton covariance at the estimate,
`jcalib.estimation.uncertainty.parameter_covariance`), `sample` proposes

    θ' = θ + h C ∇log π(θ) + √(2h) L r,

which is plain MALA with step size h on u = L⁻¹(θ - θ̄), a linear change of variables with
a constant Jacobian (so the chain targets the same π). A diagonal P cannot follow a
posterior ridge (strongly correlated parameters); C can. With C = diag(p) and h = 1 the
chain is the prescaled one, draw for draw.

**Warm-up** (optional, not in the paper): a global factor s on P (P = s P_0) is adapted by
dual averaging (blackjax's `dual_averaging_adaptation`, Hoffman & Gelman 2014) towards a
target acceptance rate, using the mean acceptance probability over chains; then s is
frozen (its averaged iterate) and the warm-up draws are discarded, so the sampling phase
is a fixed, valid Metropolis-Hastings chain as in the paper ("the time step is not
adaptively chosen but still determined in advance").

The algorithm is a ``PrescaledMALA(init, step)`` pair, ``step(key, state) -> (state,
info)`` as in blackjax; `sample` runs several chains (vmapped, `jax.lax.scan` in chunks,
optional progress bar) and returns a `jcalib.bayes.result.PosteriorResult`. The
preconditioner is a strategy object (`jcalib.bayes.preconditioning`: `Prescaled`,
`DenseMetric`, `Laplace`), computed before sampling by `jcalib.bayes.adaptation`, and
``sample(..., kernel="nuts")`` (or ``"hmc"``) runs blackjax's NUTS/HMC on the same problem
with the same result type (`jcalib.bayes.hmc`; Laplace whitening by default).

Example:
    >>> import jax, jax.numpy as jnp
    >>> jax.config.update("jax_enable_x64", True)
    >>> logdensity_fn = lambda x: -0.5 * jnp.sum((x / jnp.array([1.0, 100.0])) ** 2)
    >>> result = sample(jax.random.key(0), logdensity_fn, jnp.zeros(2), 1000, n_chains=2,
    ...                 bounds=(jnp.full(2, -1e3), jnp.full(2, 1e3)), preconditioner=Prescaled(0.002))
    >>> result.samples.shape
    (2, 1000, 2)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray
from tqdm.auto import tqdm

from jcalib._precision import as_float64
from jcalib.bayes import hmc
from jcalib.bayes._target import (
    _check_start,
    _evaluate,
    _evaluate_batch,  # noqa: F401  (re-exported for the tests' and benchmarks' convenience)
    _physical_fn,
    _positive,
    _resolve_bounds,
    _resolve_names,
    _resolve_target,
)
from jcalib.bayes.adaptation import (
    DualAveragingState,
    Prescaling,
    dual_averaging_init,
    dual_averaging_update,
    prescaling,
    step_sizes,
)
from jcalib.bayes.preconditioning import (
    AbstractPreconditioner,
    DenseMetric,
    Prescaled,
    _cholesky_factor,
    as_preconditioner,
)
from jcalib.bayes.result import PosteriorResult
from jcalib.parameters import ParameterSpace
from jcalib.problem import CalibrationProblem

__all__ = [
    "BACKENDS",
    "MALAInfo",
    "MALAState",
    "Prescaling",
    "PrescaledMALA",
    "blackjax_mala",
    "build_kernel",
    "log_acceptance_ratio",
    "prescaled_mala",
    "prescaling",
    "proposal_log_density",
    "sample",
    "step_sizes",
]

BACKENDS = ("jcalib", "blackjax")
_DENSE_STEP = 1.65**2 / 2  # h n^(1/3): √(2h) = 1.65 n^(-1/6), optimal MALA scale (Roberts & Rosenthal 1998)


class MALAState(NamedTuple):
    """One chain's state (blackjax's layout, in internal coordinates).

    Attributes:
        position: θ, ``(n_params,)``.
        logdensity: log π(θ); always finite in a running chain.
        logdensity_grad: ∇log π(θ), ``(n_params,)``.
    """

    position: Float[Array, " n_params"]
    logdensity: Float[Array, ""]
    logdensity_grad: Float[Array, " n_params"]


class MALAInfo(NamedTuple):
    """What one transition did (stacked into a trace by `jax.lax.scan`).

    Attributes:
        acceptance_rate: the Metropolis-Hastings probability min(1, α) of the proposal.
        is_accepted: whether the chain moved to the proposal.
        is_valid: False if the proposal's log density was -inf/NaN or its gradient not
            finite (then ``acceptance_rate`` is 0).
    """

    acceptance_rate: Float[Array, ""]
    is_accepted: Bool[Array, ""]
    is_valid: Bool[Array, ""]


class PrescaledMALA(NamedTuple):
    """``init(theta_internal) -> state`` and ``step(key, state) -> (state, info)``."""

    init: Callable[[Float[Array, " n_params"]], MALAState]
    step: Callable[[PRNGKeyArray, MALAState], tuple[MALAState, MALAInfo]]


# --- the kernel --------------------------------------------------------------------------------
def _init_state(logdensity_fn: Callable, position: Float[ArrayLike, " n"]) -> MALAState:
    logdensity, grad, _ = _evaluate(logdensity_fn, jnp.asarray(position))
    return MALAState(jnp.asarray(position), logdensity, grad)


def proposal_log_density(state: MALAState, position: Float[Array, " n_params"],
                         step_sizes: Float[Array, " n_params"]) -> Float[Array, ""]:
    """log q(position | state): the normalised Gaussian N(θ + P ∇log π(θ), 2P) of eq. A18.

    Args:
        state: the current state θ (with its gradient).
        position: the proposed θ'.
        step_sizes: the diagonal of P, positive.
    """
    mean = state.position + step_sizes * state.logdensity_grad
    return (-0.25 * jnp.sum((position - mean) ** 2 / step_sizes)
            - 0.5 * jnp.sum(jnp.log(4.0 * math.pi * step_sizes)))


def log_acceptance_ratio(state: MALAState, proposal: MALAState,
                         step_sizes: Float[Array, " n_params"]) -> Float[Array, ""]:
    """log α(θ, θ') = min(0, log π(θ') + log q(θ|θ') - log π(θ) - log q(θ'|θ)) (eq. A15);
    -inf where the proposal's log density is not finite or the ratio is NaN."""
    log_ratio = (proposal.logdensity + proposal_log_density(proposal, state.position, step_sizes)
                 - state.logdensity - proposal_log_density(state, proposal.position, step_sizes))
    ok = jnp.isfinite(proposal.logdensity) & ~jnp.isnan(log_ratio)
    return jnp.where(ok, jnp.minimum(log_ratio, 0.0), -jnp.inf)


def build_kernel(logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]]):
    """The prescaled MALA transition ``kernel(key, state, step_sizes) -> (state, info)``.

    The step sizes are an argument (not a closure constant) so that a warm-up can adapt
    them under `jax.lax.scan`. Random numbers follow blackjax's MALA: ``key`` is split into
    (noise key, accept key); the noise is ``jax.random.normal(noise_key, (n_params,))`` and
    the proposal is accepted when ``jax.random.bernoulli(accept_key, min(1, α))``.

    Args:
        logdensity_fn: log π(θ) up to a constant, a JAX function ``(n_params,) -> ()``.
    """

    def kernel(key: PRNGKeyArray, state: MALAState,
               step_sizes: Float[Array, " n_params"]) -> tuple[MALAState, MALAInfo]:
        key_noise, key_accept = jax.random.split(key)
        x = state.position
        noise = jax.random.normal(key_noise, x.shape, dtype=x.dtype)
        y = x + step_sizes * state.logdensity_grad + jnp.sqrt(2.0 * step_sizes) * noise
        logdensity, grad, valid = _evaluate(logdensity_fn, y)
        proposal = MALAState(y, logdensity, grad)
        log_alpha = jnp.where(valid, log_acceptance_ratio(state, proposal, step_sizes), -jnp.inf)
        p_accept = jnp.exp(log_alpha)
        accept = jax.random.bernoulli(key_accept, p_accept) & valid
        new_state = jax.tree_util.tree_map(lambda new, old: jnp.where(accept, new, old), proposal, state)
        return new_state, MALAInfo(p_accept, accept, valid)

    return kernel


def prescaled_mala(logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]],
                   step_sizes: Float[ArrayLike, " n_params"]) -> PrescaledMALA:
    """Prescaled MALA (eqs. A17-A18) as ``init`` / ``step`` functions.

    Args:
        logdensity_fn: log π(θ) up to a constant, a JAX function ``(n_params,) -> ()``;
            -inf (or NaN) where π is zero or the model fails.
        step_sizes: the diagonal of P, ``(n_params,)`` (e.g. from `step_sizes`), positive.

    Returns:
        ``PrescaledMALA(init, step)``; ``init(theta_internal)`` evaluates log π and its
        gradient, ``step(key, state)`` is one transition.

    Example:
        >>> mala = prescaled_mala(lambda x: -0.5 * jnp.sum(x**2), jnp.full(2, 0.5))
        >>> state, info = mala.step(jax.random.key(1), mala.init(jnp.zeros(2)))
    """
    p = eqx.error_if(jnp.asarray(step_sizes), ~jnp.all(jnp.asarray(step_sizes) > 0),
                     "prescaled_mala: step_sizes must be positive")
    kernel = build_kernel(logdensity_fn)
    return PrescaledMALA(lambda theta_internal: _init_state(logdensity_fn, theta_internal),
                         lambda key, state: kernel(key, state, p))


def _blackjax_kernel(logdensity_fn: Callable):
    """``kernel(key, state, step_sizes)``: blackjax's MALA with step size 1 on the rescaled
    density u ↦ log π(√p u), states converted to and from θ = √p u."""

    import blackjax  # imported on use, as the blackjax backend is optional
    from blackjax.mcmc.mala import MALAState as BlackjaxMALAState

    def kernel(key, state: MALAState, step_sizes):
        scale = jnp.sqrt(step_sizes)
        algorithm = blackjax.mala(lambda u: logdensity_fn(scale * u), 1.0)
        u_state = BlackjaxMALAState(state.position / scale, state.logdensity,
                                   state.logdensity_grad * scale)
        with jax.numpy_dtype_promotion("standard"):  # blackjax mixes Python ints and floats
            u_state, info = algorithm.step(key, u_state)
        new_state = MALAState(scale * u_state.position, u_state.logdensity,
                              u_state.logdensity_grad / scale)
        # blackjax rejects NaN energies, but would accept a +inf log density (or keep a
        # non-finite gradient): such a state would stall the chain, so it is rejected here
        finite = jnp.isfinite(new_state.logdensity) & jnp.all(jnp.isfinite(new_state.logdensity_grad))
        new_state = jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old), new_state, state)
        p_accept = jnp.where(finite, info.acceptance_rate, 0.0)
        valid = p_accept > 0  # blackjax does not report invalid proposals as such
        return new_state, MALAInfo(p_accept, info.is_accepted & finite, valid)

    return kernel


def blackjax_mala(logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]],
                  step_sizes: Float[ArrayLike, " n_params"]) -> PrescaledMALA:
    """The same chain as `prescaled_mala`, run by blackjax's MALA kernel (step size 1) on
    the rescaled density π_u(u) = π(P^{1/2} u); states are reported in θ = P^{1/2} u.

    blackjax turns a NaN energy into a rejection; a proposal it would accept with a
    non-finite log density or gradient (e.g. +inf) is rejected here too, so as in
    `prescaled_mala` no invalid state enters the chain.

    Args:
        logdensity_fn: log π(θ), as for `prescaled_mala`.
        step_sizes: the diagonal of P, positive.
    """
    p = jnp.asarray(step_sizes)
    kernel = _blackjax_kernel(logdensity_fn)
    return PrescaledMALA(lambda theta_internal: _init_state(logdensity_fn, theta_internal),
                         lambda key, state: kernel(key, state, p))


# --- running chains ----------------------------------------------------------------------------
def sample(
    key: PRNGKeyArray,
    problem_or_logdensity_fn: CalibrationProblem | Callable[[Float[Array, " n_params"]], Float[Array, ""]],
    theta0_internal: Float[ArrayLike, " n_params"] | Float[ArrayLike, "n_chains n_params"],
    n_steps: int,
    *,
    n_chains: int = 4,
    burn_in: int = 0,
    thin: int = 1,
    step_sizes: str | Prescaling | float | Float[ArrayLike, " n_params"] = "prescaled",
    bounds: tuple[Float[ArrayLike, " n_params"], Float[ArrayLike, " n_params"]] | None = None,
    preconditioner: AbstractPreconditioner | str | Float[ArrayLike, "n_params n_params"] | None = None,
    warmup: int = 0,
    target_acceptance: float | None = None,
    to_physical: ParameterSpace | Callable | None = None,
    names: Sequence[str] | None = None,
    backend: str = "jcalib",
    chunk_size: int | None = None,
    progress: bool = False,
    kernel: str = "mala",
) -> PosteriorResult:
    """Sample a posterior with prescaled MALA, HMC or NUTS, several chains at once.

    ``kernel`` picks the transition: ``"mala"`` (the paper's prescaled MALA, default),
    ``"hmc"`` or ``"nuts"`` (blackjax's kernels, `jcalib.bayes.hmc`); ``preconditioner`` picks
    the scales as a strategy object (`jcalib.bayes.preconditioning`): `Prescaled(fraction)`,
    `DenseMetric(cov)` or `Laplace()`. The adaptation that computes them runs before sampling
    (`jcalib.bayes.adaptation`). Every kernel returns the same `PosteriorResult`.

    Every chain runs ``warmup`` adaptation steps (optional), ``burn_in`` discarded steps,
    then ``n_steps`` steps of which every ``thin``-th is kept: ``n_steps // thin`` draws
    per chain. Chains are vmapped; steps run in `jax.lax.scan` chunks (``chunk_size``
    kept draws each; a progress bar advances per chunk; MALA only). Random numbers depend
    only on ``key`` and the step index, so the chunking does not change the draws.

    Args:
        key: a ``jax.random`` key; the same key gives the same result.
        problem_or_logdensity_fn: a `CalibrationProblem` (its ``log_posterior``; names,
            box and physical units come from ``problem.space``) or log π(θ) in internal
            coordinates, a JAX function ``(n_params,) -> ()`` (``problem.log_posterior``
            itself works too); -inf or NaN where π is zero or the model fails.
        theta0_internal: start, ``(n_params,)`` for all chains (the paper starts at the
            Gauss-Newton estimate) or ``(n_chains, n_params)``; float64, with a finite
            log density and gradient.
        n_steps: steps per chain after warm-up and burn-in.
        n_chains: chains.
        burn_in: steps discarded before recording (the paper: 500 of 2500).
        thin: keep every ``thin``-th step.
        step_sizes: MALA with `Prescaled`: ``"prescaled"`` (`prescaling` with its fraction
            and ``bounds``), a `Prescaling`, or the diagonal of P (scalar or ``(n_params,)``),
            positive. MALA with a dense metric: the scalar h (below). HMC/NUTS: the leapfrog
            step ε, ``"prescaled"`` meaning ε = n_params^(-1/4).
        bounds: ``(lower, upper)`` in internal coordinates for the prescaling draws;
            default: the box of the problem or of ``to_physical`` (a `ParameterSpace`).
        preconditioner: `Prescaled(fraction)` (the diagonal P above; MALA's default is
            ``Prescaled()``, τ_i = 1/50 of the range; the paper used 1/50 and 1/200),
            `DenseMetric(cov)`: a symmetric positive definite ``(n_params, n_params)``
            covariance C in internal coordinates (module doc), or `Laplace()`: C from
            `jcalib.bayes.adaptation.laplace_covariance` at the mean start (start at an
            estimate, e.g. Gauss-Newton's; the default of HMC and NUTS, where C is the
            inverse mass matrix). None, a matrix and ``"laplace"`` are short forms. For
            MALA with C, ``step_sizes`` is the scalar h of the proposal
            θ + h C ∇log π + √(2h) L r; ``"prescaled"`` means h = 1.65²/(2 n^(1/3)), the
            optimal MALA scale for a Gaussian target of covariance C (Roberts &
            Rosenthal 1998); combine with ``warmup`` to adapt it.
        warmup: steps adapting a global factor on P (on ε for HMC/NUTS) towards
            ``target_acceptance`` (dual averaging), discarded; 0 keeps P as given (the
            paper's procedure).
        target_acceptance: in (0, 1); default 0.6 for MALA (the paper calls 50-70 % ideal),
            0.8 for HMC/NUTS (blackjax's and Stan's default).
        to_physical: internal -> physical map of the samples: a `ParameterSpace` (also
            names, units, log-scale flags and box) or a function ``(n_params,) ->
            (n_params,)``; None: identity (or the problem's space).
        names: parameter names (default: from the space, else ``x0, x1, ...``).
        backend: ``"jcalib"`` (`prescaled_mala`) or ``"blackjax"`` (`blackjax_mala`).
        chunk_size: kept draws per compiled chunk (default: all at once, or 20 chunks
            with ``progress``).
        progress: show a progress bar (MALA only; HMC/NUTS run in one compiled program).
        kernel: ``"mala"``, ``"hmc"`` or ``"nuts"`` (module doc of `jcalib.bayes.hmc`).

    Returns:
        `PosteriorResult`: samples by chain in internal and physical units, acceptance per
        chain, ESS, R-hat, MCSE, mean, sd, quantiles, the best sample, step sizes, and
        ``warnings`` (one line each) when a chain accepted < 5 %, R-hat > 1.05 or bulk
        ESS < 100 (`jcalib.bayes.diagnostics.sampling_warnings`). For HMC/NUTS,
        ``extra`` also holds the divergences per chain, the step size ε and the inverse mass
        matrix; NUTS's acceptance per chain is its mean acceptance statistic.

    Raises:
        ValueError: float64 not enabled; bad sizes, ``theta0_internal`` shape or a start
            with a non-finite log density or gradient; bad ``step_sizes``,
            ``bounds``, ``preconditioner``, ``target_acceptance``, ``backend``, ``kernel``,
            ``names`` or ``to_physical``; ``chunk_size`` or ``backend="blackjax"`` with HMC/NUTS.

    Warns:
        SamplingWarning: each of the result's ``warnings`` (a stalled or unmixed run).
    """
    start_time = time.perf_counter()
    if not jax.config.jax_enable_x64:
        raise ValueError("sample: MALA runs in float64; call jax.config.update('jax_enable_x64', True) first")
    logdensity_fn, space = _resolve_target(problem_or_logdensity_fn, to_physical, "sample")
    _check_settings(n_steps=n_steps, n_chains=n_chains, burn_in=burn_in, thin=thin, warmup=warmup)
    _check_options(kernel, backend, target_acceptance, chunk_size)
    theta0 = _starts(theta0_internal, n_chains, space)
    n = int(theta0.shape[1])
    names = _resolve_names(names, space, n)
    phys_fn = _physical_fn(to_physical, space)
    if kernel != "mala":
        return hmc.sample_chains(
            key, kernel, logdensity_fn, theta0, n_steps, burn_in=burn_in, thin=thin, warmup=warmup,
            preconditioner=hmc.default_preconditioner(preconditioner), step_size=step_sizes,
            target_acceptance=0.8 if target_acceptance is None else target_acceptance, bounds=bounds, space=space,
            names=names, phys_fn=phys_fn, start_time=start_time)
    return _sample_mala(key, logdensity_fn, theta0, n_steps, n_chains=n_chains, burn_in=burn_in, thin=thin,
                        step_sizes=step_sizes, bounds=bounds, preconditioner=as_preconditioner(preconditioner),
                        warmup=warmup, target_acceptance=0.6 if target_acceptance is None else target_acceptance,
                        space=space, names=names, phys_fn=phys_fn, backend=backend, chunk_size=chunk_size,
                        progress=progress, start_time=start_time)


def _sample_mala(key, logdensity_fn, theta0, n_steps, *, n_chains, burn_in, thin, step_sizes, bounds,
                 preconditioner, warmup, target_acceptance, space, names, phys_fn, backend, chunk_size, progress,
                 start_time) -> PosteriorResult:
    """The ``kernel="mala"`` path of `sample` (arguments checked there): the step sizes from
    the preconditioner strategy, then warm-up, burn-in and draws in compiled chunks."""
    key_pre, key_warm, key_draw = jax.random.split(key, 3)
    n = int(theta0.shape[1])
    pre, dense, n_evaluations = None, None, 0
    if isinstance(preconditioner, Prescaled):
        pre, p0, start_valid, n_evaluations = _diagonal_step_sizes(key_pre, preconditioner, step_sizes, logdensity_fn,
                                                                   theta0, bounds, space)
    else:  # run plain MALA on u = L^-1 (θ - θ̄) (module doc)
        cov, n_evaluations = _covariance(preconditioner, logdensity_fn, theta0, bounds, space)
        dense = _Preconditioned(logdensity_fn, jnp.mean(theta0, axis=0), _cholesky(cov, n))
        theta0, logdensity_fn = dense.to_u(theta0), dense
        p0 = jnp.asarray(_positive(_dense_step(step_sizes, n), n, "sample", "step_sizes"))
        start_valid = None  # checked by the first sampling chunk (one compiled program)
    if p0.shape != (n,):
        raise ValueError(f"sample: step_sizes must have shape ({n},); got shape {p0.shape}")
    if start_valid is not None:
        _check_start(start_valid)

    # warm-up, burn-in and draws run in one compiled program (the kernel, with the model solve
    # and its gradient, is compiled once); the warm-up runs inside the first chunk
    positions = theta0
    da = dual_averaging_init(p0.dtype)
    warm_rate_sum = jnp.zeros((), p0.dtype)
    n_draws = int(n_steps) // int(thin)
    if chunk_size is None:
        chunk_size = -(-n_draws // 20) if progress else n_draws
    chunk = min(int(chunk_size), n_draws)
    n_chunks = -(-n_draws // chunk)
    traces = []
    with tqdm(total=int(warmup) + int(burn_in) + n_draws * int(thin), desc="prescaled MALA", unit="step",
              disable=not progress) as bar:
        for c in range(n_chunks):
            n_warm, n_burn = (int(warmup), int(burn_in)) if c == 0 else (0, 0)
            start = 0 if c == 0 else int(burn_in) + c * chunk * int(thin)
            positions, da, warm_rate_sum, valid0, trace = _segment(
                logdensity_fn, backend, key_warm, key_draw, positions, p0, da, warm_rate_sum,
                jnp.asarray(n_warm), jnp.asarray(n_burn), jnp.asarray(start), jnp.asarray(thin), chunk,
                jnp.asarray(float(target_acceptance), p0.dtype))
            if c == 0 and start_valid is None:
                _check_start(valid0)
            keep = min(chunk, n_draws - c * chunk)
            traces.append([np.asarray(x)[:keep] for x in trace])
            bar.update(n_warm + n_burn + keep * int(thin))
            if progress:
                rate = np.sum([t[2].sum() for t in traces]) / ((c * chunk + keep) * thin * n_chains)
                bar.set_postfix(acceptance=f"{rate:.2f}")
    factor = float(jnp.exp(da.log_x_avg))
    p = p0 * factor
    if warmup:
        n_evaluations += int(warmup) * int(n_chains)
    pos, lp, accepted, p_accept, invalid = (np.concatenate([t[i] for t in traces]) for i in range(5))
    if dense is not None:
        pos = np.asarray(dense.to_theta(jnp.asarray(pos)))
    n_evaluations += (int(burn_in) + n_chunks * (chunk * int(thin) + 1)) * int(n_chains)
    samples_internal = np.swapaxes(pos, 0, 1)  # (n_chains, n_draws, n)
    logdensity = np.swapaxes(lp, 0, 1)
    n_kept_steps = n_draws * int(thin)
    acceptance = accepted.sum(axis=0) / n_kept_steps
    mean_p_accept = p_accept.sum(axis=0) / n_kept_steps
    samples = np.asarray(phys_fn(jnp.asarray(samples_internal)))
    extra = {"backend": backend, "metric": type(preconditioner).__name__, "target_acceptance": float(target_acceptance),
             "step_size_factor": factor, "mean_acceptance_probability": mean_p_accept,
             "invalid_proposal_rate": invalid.sum(axis=0) / n_kept_steps,
             "warmup_acceptance_mean": float(warm_rate_sum) / int(warmup) if warmup else None}
    if dense is not None:
        extra.update({"preconditioner": np.asarray(dense.chol @ dense.chol.T), "step_size_h": float(p[0])})
        p = p * jnp.diagonal(dense.chol @ dense.chol.T)  # the diagonal of h C
    if pre is not None:
        extra.update({"tau": np.asarray(pre.tau), "mean_abs_grad": np.asarray(pre.mean_abs_grad),
                      "prescaling_n_valid": int(pre.n_valid), "step_sizes_prescaled": np.asarray(pre.step_sizes)})
    return PosteriorResult.from_chains(
        samples_internal, logdensity, acceptance, samples=samples, names=names,
        units=space.units if space is not None else None,
        log_scale=tuple(bool(b) for b in space.log_scale) if space is not None else None,
        step_sizes=np.asarray(p), n_steps=int(n_steps),
        method=f"{'preconditioned' if dense is not None else 'prescaled'}-mala ({backend})",
        burn_in=int(burn_in), thin=int(thin), warmup=int(warmup),
        n_logdensity_evaluations=n_evaluations, wall_time_s=time.perf_counter() - start_time, extra=extra,
    )


# --- compiled pieces (logdensity_fn is an argument: a pytree such as a problem's bound method
# or a Partial over a problem compiles once per problem structure) -------------------------------
def _kernel(backend: str, logdensity_fn: Callable):
    return build_kernel(logdensity_fn) if backend == "jcalib" else _blackjax_kernel(logdensity_fn)


def _step_all(kernel, key, t, states: MALAState, p):
    """One step of every chain; step t of chain c uses fold_in(key, t) split n_chains ways."""
    keys = jax.random.split(jax.random.fold_in(key, t), states.position.shape[0])
    return jax.vmap(kernel, in_axes=(0, 0, None))(keys, states, p)


def _init_all(logdensity_fn, positions) -> MALAState:
    return jax.vmap(lambda x: _init_state(logdensity_fn, x))(positions)


@eqx.filter_jit
def _segment(logdensity_fn, backend: str, key_warm, key, positions, p0, da: DualAveragingState, warm_rate_sum,
             n_warmup, n_burn, start, thin, n_records: int, target):
    """From ``positions``: ``n_warmup`` warm-up steps, ``n_burn`` discarded steps, then
    ``n_records`` kept draws ``thin`` steps apart, all in one loop over the step index t.

    Warm-up steps (t in [-n_warmup, 0)) use ``fold_in(key_warm, t + n_warmup)`` and the step
    sizes ``s p0`` with s adapted by dual averaging on the chains' mean acceptance
    probability towards ``target``; later steps (counted from ``start``) use ``fold_in(key,
    t)`` and the averaged factor ``s̄ p0``. So the program holds one copy of the kernel (with
    the model solve and its gradient) and compiles once for every chunk (the counts are
    traced); later chunks pass ``n_warmup = 0`` and the adapted ``da``. The state is
    re-evaluated at ``positions``, which is deterministic, so chunking does not change the
    chain. Counts exclude warm-up and burn-in steps. Also returns whether the log density
    and its gradient were finite at ``positions`` (per chain).
    """
    kernel = _kernel(backend, logdensity_fn)
    n_chains = positions.shape[0]
    zeros_int = jnp.zeros(n_chains, jnp.int32)
    offset = start + n_burn  # first counted step
    warm_data, draw_data = jax.random.key_data(key_warm), jax.random.key_data(key)

    def inner(t, carry):
        states, da, rate_sum, accepted, p_sum, invalid = carry
        warm = t < start
        step_key = jax.random.wrap_key_data(jnp.where(warm, warm_data, draw_data))
        step = jnp.where(warm, t - start + n_warmup, t)
        factor = jnp.exp(jnp.where(warm, da.log_x, da.log_x_avg))
        states, info = _step_all(kernel, step_key, step, states, factor * p0)
        rate = jnp.mean(info.acceptance_rate)
        da = jax.tree.map(lambda new, old: jnp.where(warm, new, old), dual_averaging_update(da, target, rate), da)
        counted = t >= offset
        return (states, da, rate_sum + jnp.where(warm, rate, 0.0),
                accepted + (counted & info.is_accepted).astype(jnp.int32),
                p_sum + jnp.where(counted, info.acceptance_rate, 0.0),
                invalid + (counted & ~info.is_valid).astype(jnp.int32))

    def outer(carry, r):
        states, da, rate_sum = carry
        first = jnp.where(r == 0, start - n_warmup, offset + r * thin)
        init = (states, da, rate_sum, zeros_int, jnp.zeros(n_chains, p0.dtype), zeros_int)
        states, da, rate_sum, accepted, p_sum, invalid = jax.lax.fori_loop(first, offset + (r + 1) * thin, inner,
                                                                           init)
        return (states, da, rate_sum), (states.position, states.logdensity, accepted, p_sum, invalid)

    states0 = _init_all(logdensity_fn, positions)
    valid0 = jnp.isfinite(states0.logdensity)  # _evaluate maps invalid values to -inf
    (states, da, warm_rate_sum), trace = jax.lax.scan(outer, (states0, da, warm_rate_sum), jnp.arange(n_records))
    return states.position, da, warm_rate_sum, valid0, trace


def _check_settings(**counts) -> None:
    """The step counts of `sample`: integers, positive (``n_steps``, ``n_chains``, ``thin``)
    or non-negative (``burn_in``, ``warmup``), and at least one kept draw."""
    for label, value in counts.items():
        minimum = 0 if label in ("burn_in", "warmup") else 1
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
            kind = "positive" if minimum else "non-negative"
            raise ValueError(f"sample: {label} must be a {kind} integer; got {value!r}")
    if counts["n_steps"] < counts["thin"]:
        raise ValueError(f"sample: n_steps={counts['n_steps']} keeps no draw with thin={counts['thin']}; use "
                         "n_steps >= thin")


def _check_options(kernel, backend, target_acceptance, chunk_size) -> None:
    if kernel not in hmc.KERNELS:
        raise ValueError(f"sample: kernel must be one of {hmc.KERNELS}; got {kernel!r}")
    if backend not in BACKENDS:
        raise ValueError(f"sample: backend must be one of {BACKENDS}; got {backend!r}")
    if kernel != "mala" and backend != "jcalib":
        raise ValueError(f"sample: backend={backend!r} selects MALA's implementation; kernel={kernel!r} always "
                         "runs blackjax's kernel: leave backend at 'jcalib'")
    if target_acceptance is not None and not (
            isinstance(target_acceptance, (int, float)) and 0.0 < target_acceptance < 1.0):
        raise ValueError(f"sample: target_acceptance must lie in (0, 1); got {target_acceptance!r}")
    if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1):
        raise ValueError(f"sample: chunk_size must be a positive integer or None; got {chunk_size!r}")
    if chunk_size is not None and kernel != "mala":
        raise ValueError(f"sample: chunk_size applies to kernel='mala' only (kernel={kernel!r} runs in one "
                         "compiled program); leave it at None")


def _starts(theta0_internal, n_chains: int, space) -> Array:
    """The starts as a float64 ``(n_chains, n_params)`` array."""
    theta0 = as_float64(theta0_internal, "sample", "theta0_internal")
    if theta0.ndim == 1:
        theta0 = jnp.broadcast_to(theta0[None, :], (int(n_chains), theta0.shape[0]))
    if theta0.ndim != 2 or theta0.shape[0] != n_chains:
        raise ValueError(
            f"sample: theta0_internal must have shape (n_params,) or (n_chains={n_chains}, n_params); "
            f"got shape {jnp.shape(theta0_internal)}"
        )
    n = int(theta0.shape[1])
    if space is not None and space.n_params != n:
        raise ValueError(
            f"sample: theta0_internal has {n} entries but the parameter space has {space.n_params} "
            f"({', '.join(space.names)})"
        )
    return theta0


def _diagonal_step_sizes(key, strategy: Prescaled, step_sizes, logdensity_fn, theta0, bounds, space):
    """(Prescaling or None, the diagonal P, the starts' validity or None, evaluations) for the
    diagonal sampler: `Prescaled.prescaling` for ``step_sizes="prescaled"``, else as given."""
    n = int(theta0.shape[1])
    if isinstance(step_sizes, Prescaling):
        return step_sizes, jnp.asarray(step_sizes.step_sizes), None, 0
    if not isinstance(step_sizes, str):
        return None, jnp.asarray(_positive(step_sizes, n, "sample", "step_sizes")), None, 0
    if step_sizes != "prescaled":
        raise ValueError(
            f"sample: step_sizes must be 'prescaled', a Prescaling or positive numbers; got {step_sizes!r}")
    if bounds is None and space is None:
        raise ValueError(
            "sample: step_sizes='prescaled' needs the prior box: pass bounds=(lower, upper) in internal "
            "coordinates, a ParameterSpace as to_physical, or explicit step_sizes"
        )
    # the starts are checked in the same compiled batch as the prescaling draws
    pre, start_valid = strategy.prescaling(key, logdensity_fn, bounds, space, extra_points=theta0)
    return pre, pre.step_sizes, start_valid, int(pre.draws.shape[0]) + int(theta0.shape[0])


def _covariance(strategy, logdensity_fn, theta0, bounds, space) -> tuple[np.ndarray, int]:
    """(C, log density evaluations spent on it) of a `DenseMetric` or `Laplace` strategy."""
    if isinstance(strategy, DenseMetric):
        return strategy.cov, 0
    box = _resolve_bounds(bounds, space, "sample") if (bounds is not None or space is not None) else None
    return strategy.covariance(logdensity_fn, jnp.mean(theta0, axis=0), bounds=box), 2 * int(theta0.shape[1])


def _dense_step(step_sizes, n: int):
    """The scalar h of the dense proposal: ``"prescaled"`` means h = 1.65²/(2 n^(1/3))."""
    if isinstance(step_sizes, Prescaling):
        raise ValueError("sample: with a preconditioner, step_sizes is the scalar h (or 'prescaled'), not a "
                         "Prescaling")
    if isinstance(step_sizes, str) and step_sizes != "prescaled":
        raise ValueError(f"sample: step_sizes must be 'prescaled' or a positive number; got {step_sizes!r}")
    if not isinstance(step_sizes, str) and np.ndim(step_sizes) != 0:
        raise ValueError("sample: with a preconditioner, step_sizes must be one positive number h (the "
                         f"preconditioner carries the per-parameter scales); got shape {np.shape(step_sizes)}")
    return _DENSE_STEP * n ** (-1.0 / 3.0) if isinstance(step_sizes, str) else step_sizes


class _Preconditioned(eqx.Module):
    """log π(θ̄ + L u) as a function of u (a pytree, so a new matrix does not recompile)."""

    logdensity_fn: Callable
    shift: Float[Array, " n"]
    chol: Float[Array, "n n"]

    def __call__(self, u: Float[Array, " n"]) -> Float[Array, ""]:
        return self.logdensity_fn(self.shift + self.chol @ u)

    def to_u(self, theta: Float[Array, "... n"]) -> Float[Array, "... n"]:
        flat = theta.reshape(-1, self.shift.shape[0]) - self.shift[None, :]
        u = jax.scipy.linalg.solve_triangular(self.chol, flat.T, lower=True).T
        return u.reshape(theta.shape)

    def to_theta(self, u: Float[Array, "... n"]) -> Float[Array, "... n"]:
        flat = u.reshape(-1, self.shift.shape[0]) @ self.chol.T + self.shift[None, :]
        return flat.reshape(u.shape)


def _cholesky(matrix, n: int) -> Array:
    return jnp.asarray(_cholesky_factor(matrix, n))


# --- argument handling -----------------------------------------------------------------------
