"""Prescaled MALA: Metropolis-adjusted Langevin with a diagonal preconditioner
(Wulkow et al. 2021, §2.3.2-2.3.3 and Appendix A.1-A.2).

The target is π(θ) ∝ exp(-S_X(θ)) = exp(logdensity_fn(θ)) in the problem's *internal*
coordinates θ (log for log-scale parameters, see `jcalib.parameters`); in practice
``logdensity_fn`` is `jcalib.problems.CalibrationProblem.log_posterior`. One step (eq. A17)
proposes, with P = diag(p) the prescaled step sizes,

    θ' = θ + P ∇log π(θ) + √(2P) r,   r ~ N(0, I),

i.e. a Gaussian q(θ'|θ) = N(θ + P ∇log π(θ), 2P) (eq. A18), and accepts it with the
Metropolis-Hastings probability (eq. A15)

    α(θ, θ') = min{1, π(θ') q(θ|θ') / (π(θ) q(θ'|θ))}.

Equivalently, this is plain MALA with unit step size on the rescaled density
π_u(u) = π(P^{1/2} u), θ = P^{1/2} u (``mala_algorithm(..., backend="blackjax")`` runs
blackjax's kernel that way; the two give the same chain for the same key).

**Prescaling** (`jcalib.bayes.adaptation.prescaling`, re-exported here; Appendix A.2).
For target mean step lengths τ_i (a fraction of each parameter's prior range, e.g. 1/50
in the paper's reaction example, 1/200 in its polymerization tests), n = 100 points θ_k
are drawn (uniformly from the prior box, the paper's step 2, or around a given centre;
for a problem, `jcalib.bayes.adaptation.prior_prescaling` takes ranges and draws from the
prior where it is not the default uniform one on finite bounds, e.g. on infinite bounds),
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

The algorithm is ``mala_algorithm(logdensity_fn, step_sizes)``, a `jcalib.algorithm.Algorithm`
with ``step(key, state) -> (state, info)`` as in blackjax; `sample` runs several chains of a
problem's posterior (`jcalib.algorithm.vmap_chains`, driven by `jcalib.algorithm.run` in
compiled chunks with an optional progress bar) and returns a
`jcalib.bayes.result.PosteriorResult`. The
preconditioner is a strategy object (`jcalib.bayes.preconditioning`: `Prescaled`,
`DenseMetric`, `Laplace`), computed before sampling by `jcalib.bayes.adaptation`, and
`jcalib.bayes.hmc.sample` and `jcalib.bayes.nuts.sample` run blackjax's HMC and NUTS on the same
problem with the same result type (`jcalib.bayes.chains`; Laplace whitening by default).

Example (a raw log density: the algorithm and `jcalib.algorithm.run`; a problem: `sample`):
    >>> import jax, jax.numpy as jnp
    >>> from jcalib.algorithm import run, vmap_chains
    >>> jax.config.update("jax_enable_x64", True)
    >>> logdensity_fn = lambda x: -0.5 * jnp.sum((x / jnp.array([1.0, 100.0])) ** 2)
    >>> p = prescaling(jax.random.key(0), logdensity_fn, (jnp.full(2, -1e3), jnp.full(2, 1e3)),
    ...                fraction=0.002).step_sizes
    >>> chains = vmap_chains(mala_algorithm(logdensity_fn, p))
    >>> out = run(jax.random.key(1), chains, chains.init(jnp.zeros((2, 2))), 1000,
    ...           trace_fn=lambda state, info: state.position)
    >>> out.trace.shape
    (1000, 2, 2)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from jcalib.algorithm import Algorithm
from jcalib.bayes._target import (
    _evaluate,
    _positive,
    problem_logdensity,
)
from jcalib.bayes.adaptation import (
    Prescaling,
    prescaling,
    step_sizes,
)
from jcalib.bayes.chains import KernelSetup, _metric, _scaled_step, sample_chains
from jcalib.bayes.preconditioning import (
    AbstractPreconditioner,
    as_preconditioner,
)
from jcalib.bayes.result import PosteriorResult
from jcalib.problems import AbstractProblem

__all__ = [
    "BACKENDS",
    "MALAInfo",
    "MALAState",
    "Prescaling",
    "build_kernel",
    "log_acceptance_ratio",
    "mala_algorithm",
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
    the proposal is accepted when ``jax.random.bernoulli(accept_key, min(1, α))``. The kernel
    is a `jax.tree_util.Partial` of a module-level function: with a pytree ``logdensity_fn``
    (e.g. a problem's posterior) `jcalib.algorithm.run` compiles it once for later runs.

    Args:
        logdensity_fn: log π(θ) up to a constant, a JAX function ``(n_params,) -> ()``.
    """
    return jax.tree_util.Partial(_mala_transition, logdensity_fn)


def _mala_transition(logdensity_fn: Callable, key: PRNGKeyArray, state: MALAState,
                     step_sizes: Float[Array, " n_params"]) -> tuple[MALAState, MALAInfo]:
    """One step of `build_kernel`'s kernel."""
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


def mala_algorithm(logdensity_fn: Callable[[Float[Array, " n_params"]], Float[Array, ""]],
                   step_sizes: Float[ArrayLike, " n_params"], *, backend: str = "jcalib") -> Algorithm:
    """Prescaled MALA (eqs. A17-A18) as ``Algorithm(init, step, stochastic=True)``, for any log
    density; drive it with `jcalib.algorithm.run` (several chains: `jcalib.algorithm.vmap_chains`).

    Args:
        logdensity_fn: log π(θ) up to a constant, a JAX function ``(n_params,) -> ()``;
            -inf (or NaN) where π is zero or the model fails.
        step_sizes: the diagonal of P, ``(n_params,)`` or a scalar (e.g. from
            `jcalib.bayes.adaptation.prescaling`), positive.
        backend: ``"jcalib"`` (`build_kernel`) or ``"blackjax"`` (blackjax's MALA with step size
            1 on the rescaled density π_u(u) = π(P^{1/2} u), states reported in θ = P^{1/2} u;
            the same chain for the same key).

    Returns:
        ``init(theta_internal) -> MALAState`` (log π and its gradient), ``step(key, state) ->
        (MALAState, MALAInfo)``.

    Raises:
        ValueError: ``step_sizes`` not positive and finite; an unknown ``backend``.

    Example:
        >>> from jcalib.algorithm import run, vmap_chains
        >>> logdensity_fn = lambda x: -0.5 * jnp.sum((x / jnp.array([1.0, 100.0])) ** 2)
        >>> mala = vmap_chains(mala_algorithm(logdensity_fn, jnp.array([0.5, 5000.0])))
        >>> out = run(jax.random.key(0), mala, mala.init(jnp.zeros((2, 2))), 1000,
        ...           trace_fn=lambda state, info: state.position)
        >>> out.trace.shape
        (1000, 2, 2)
    """
    if backend not in BACKENDS:
        raise ValueError(f"mala_algorithm: backend must be one of {BACKENDS}; got {backend!r}")
    p = np.asarray(step_sizes, dtype=np.float64)
    if not np.all(np.isfinite(p) & (p > 0)):
        raise ValueError(f"mala_algorithm: step_sizes must be positive and finite; got {p.tolist()}")
    kernel = _kernel(backend, logdensity_fn)
    return Algorithm(jax.tree_util.Partial(_init_state, logdensity_fn),
                     jax.tree_util.Partial(_fixed_step, kernel, jnp.asarray(p)), True)


def _fixed_step(kernel: Callable, step_sizes, key: PRNGKeyArray, state: MALAState):
    """``kernel(key, state, step_sizes)`` with scalar step sizes broadcast to the state."""
    return kernel(key, state, jnp.broadcast_to(step_sizes, state.position.shape))


def _blackjax_kernel(logdensity_fn: Callable):
    """``kernel(key, state, step_sizes)``: blackjax's MALA with step size 1 on the rescaled
    density u ↦ log π(√p u), states converted to and from θ = √p u."""
    return jax.tree_util.Partial(_blackjax_transition, logdensity_fn)


def _blackjax_transition(logdensity_fn: Callable, key: PRNGKeyArray, state: MALAState, step_sizes):
    """One step of `_blackjax_kernel`'s kernel."""
    import blackjax  # imported on use, as the blackjax backend is optional
    from blackjax.mcmc.mala import MALAState as BlackjaxMALAState

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


# --- running chains ----------------------------------------------------------------------------
def sample(
    key: PRNGKeyArray,
    problem: AbstractProblem,
    theta0: Float[ArrayLike, " n_free"] | Float[ArrayLike, "n_chains n_free"] | Mapping[str, float] | None = None,
    n_steps: int = 1000,
    *,
    coordinates: str = "physical",
    n_chains: int = 4,
    burn_in: int = 0,
    thin: int = 1,
    preconditioner: AbstractPreconditioner | str | Float[ArrayLike, "n_free n_free"] | None = None,
    step_sizes: str | Prescaling | float | Float[ArrayLike, " n_free"] = "prescaled",
    warmup: int = 0,
    target_acceptance: float | None = None,
    backend: str = "jcalib",
    chunk_size: int | None = None,
    progress: bool = False,
) -> PosteriorResult:
    """Sample a problem's posterior with prescaled MALA, several chains at once.

    Validation, then adaptation (`jcalib.bayes.adaptation`: the preconditioner's scales, then
    ``warmup`` steps of dual averaging of a global step factor), then ``burn_in`` discarded
    steps and ``n_steps`` steps of which every ``thin``-th is kept (``n_steps // thin`` draws
    per chain): the chains of `jcalib.bayes.adaptation.dual_averaging_algorithm`, driven by one
    `jcalib.algorithm.run` in compiled chunks with an optional progress bar. Step t (counted
    from the first warm-up step) of chain c uses ``split(fold_in(k, t), n_chains)[c]`` of a key k
    derived from ``key``, so the same key gives the same draws and the chunking does not change
    them. `jcalib.bayes.hmc.sample` and `jcalib.bayes.nuts.sample` run the same way (`jcalib.bayes.chains`)
    and return the same `PosteriorResult`.

    A log density that is not a problem's goes through the algorithm builders
    (`mala_algorithm`, `jcalib.bayes.hmc.hmc_algorithm`, `jcalib.bayes.hmc.nuts_algorithm`) and
    `jcalib.algorithm.run` (see `mala_algorithm`'s example).

    Args:
        key: a ``jax.random`` key; the same key gives the same result.
        problem: the `CalibrationProblem` (its ``log_posterior``; names, units and the
            internal coordinates come from ``problem.space``).
        theta0: start, physical values (or internal with ``coordinates="internal"``): None
            (the nominal values), a ``{name: value}`` mapping (names not given: nominal),
            ``(n_free,)`` for all chains (the paper starts at the Gauss-Newton estimate) or
            ``(n_chains, n_free)``; inside the bounds (`jcalib.starts`), with a finite log
            posterior and gradient.
        n_steps: steps per chain after warm-up and burn-in.
        coordinates: ``"physical"`` (default) or ``"internal"``, the system of ``theta0``.
        n_chains: chains.
        burn_in: steps discarded before recording (the paper: 500 of 2500).
        thin: keep every ``thin``-th step.
        preconditioner: `Prescaled(fraction)` (MALA's default: the diagonal P of
            `jcalib.bayes.adaptation.prior_prescaling`, τ_i = 1/50 of each prior range; the paper
            used 1/50 and 1/200), `DenseMetric(cov)`: a symmetric positive definite covariance C
            in internal coordinates (MALA proposes θ + h C ∇log π + √(2h) L r), or `Laplace()`:
            C = `jcalib.bayes.adaptation.laplace_covariance` at the mean start. None, a matrix
            and ``"laplace"`` are short forms.
        step_sizes: MALA with `Prescaled`: ``"prescaled"``, a `Prescaling`, or the diagonal of P
            (scalar or ``(n_free,)``), positive. MALA with a dense metric: the scalar h,
            ``"prescaled"`` meaning h = 1.65²/(2 n^(1/3)) (Roberts & Rosenthal 1998).
        warmup: steps adapting a global factor on P towards
            ``target_acceptance`` (dual averaging), discarded; 0 keeps P as given (the
            paper's procedure).
        target_acceptance: in (0, 1); default 0.6 (the paper calls 50-70 % ideal).
        backend: MALA's implementation, ``"jcalib"`` or ``"blackjax"`` (`mala_algorithm`).
        chunk_size: kept draws per compiled chunk (default: all at once, or 20 chunks with
            ``progress``).
        progress: show progress bars.

    Returns:
        `PosteriorResult`: samples by chain in internal and physical units, acceptance per
        chain, ESS, R-hat, MCSE, mean, sd, quantiles, the best sample, step sizes, and
        ``warnings`` (`jcalib.bayes.diagnostics.sampling_warnings`). ``extra["status"]`` is
        `jcalib.algorithm.run`'s (``"interrupted"``: Ctrl-C while sampling, the finished chunks
        are kept; during warm-up or burn-in it raises KeyboardInterrupt).

    Raises:
        ValueError: float64 not enabled; ``problem`` not a `CalibrationProblem`; bad sizes,
            ``theta0`` or ``coordinates``, or a start with a non-finite log density or
            gradient; bad ``step_sizes``, ``preconditioner``, ``target_acceptance``,
            ``backend`` or ``chunk_size``.

    Warns:
        SamplingWarning: each of the result's ``warnings`` (a stalled or unmixed run).

    Example:
        >>> result = sample(jax.random.key(0), problem, n_steps=2000, warmup=500)  # doctest: +SKIP
        >>> result.summary()                                                     # doctest: +SKIP

    Long for its documented options; the body is 7 lines.
    """
    if backend not in BACKENDS:
        raise ValueError(f"sample: backend must be one of {BACKENDS}; got {backend!r}")
    build = functools.partial(_setup, backend, as_preconditioner(preconditioner), step_sizes)
    return sample_chains(key, problem, build, theta0, n_steps, kernel="mala", coordinates=coordinates,
                         n_chains=n_chains, burn_in=burn_in, thin=thin, warmup=warmup,
                         target_acceptance=target_acceptance, default_target=0.6, chunk_size=chunk_size,
                         progress=progress)


def _setup(backend: str, preconditioner, step_sizes, key, problem, theta0) -> KernelSetup:
    """MALA on the preconditioner's numbers: prescaled (a diagonal P) or, with a covariance
    C = L Lᵀ, plain MALA on u = L⁻¹(θ - θ̄) (module doc)."""
    logdensity_fn = problem_logdensity(problem)
    n = int(theta0.shape[1])
    numbers = _metric(key, problem, theta0, preconditioner, step_sizes, explicit_diagonal=True)
    extra = {**numbers.extra, "backend": backend}
    if numbers.cov is None:
        base = jnp.asarray(numbers.diagonal)
        fn, positions, to_theta, step_diag, method = logdensity_fn, theta0, None, numbers.diagonal, "prescaled"
    else:
        h = _dense_step(step_sizes, n)
        dense = _Preconditioned(logdensity_fn, jnp.mean(theta0, axis=0), jnp.asarray(numbers.chol))
        fn, positions, to_theta = dense, dense.to_u(theta0), dense.to_theta
        base, step_diag, method = jnp.full(n, h), h * np.diagonal(numbers.cov), "preconditioned"
        extra.update({"preconditioner": np.asarray(numbers.cov), "step_size_h": h})
    return KernelSetup(fn, positions, jax.tree_util.Partial(_init_state, fn),
                       jax.tree_util.Partial(_scaled_step, _kernel(backend, fn), base), to_theta,
                       f"{method}-mala ({backend})", extra, numbers.n_evaluations,
                       functools.partial(_account, np.asarray(step_diag)))


def _account(step_diagonal, totals, n_counted: int, n_all: int, factor: float):
    """One log-density evaluation per transition; the step sizes P scaled by the warm-up."""
    invalid = (n_counted - totals[-1].is_valid) / n_counted
    return {"invalid_proposal_rate": invalid}, n_all, step_diagonal * factor


def _kernel(backend: str, logdensity_fn: Callable):
    return build_kernel(logdensity_fn) if backend == "jcalib" else _blackjax_kernel(logdensity_fn)


def _dense_step(step_sizes, n: int) -> float:
    """The scalar h of the dense proposal: ``"prescaled"`` means h = 1.65²/(2 n^(1/3))."""
    if isinstance(step_sizes, Prescaling):
        raise ValueError("sample: with a preconditioner, step_sizes is the scalar h (or 'prescaled'), not a "
                         "Prescaling")
    if isinstance(step_sizes, str) and step_sizes != "prescaled":
        raise ValueError(f"sample: step_sizes must be 'prescaled' or a positive number; got {step_sizes!r}")
    if not isinstance(step_sizes, str) and np.ndim(step_sizes) != 0:
        raise ValueError("sample: with a preconditioner, step_sizes must be one positive number h (the "
                         f"preconditioner carries the per-parameter scales); got shape {np.shape(step_sizes)}")
    h = _DENSE_STEP * n ** (-1.0 / 3.0) if isinstance(step_sizes, str) else step_sizes
    return float(_positive(h, 1, "sample", "step_sizes")[0])


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
