"""HMC (blackjax's kernel): `hmc_algorithm` for any log density (driven by `jcalib.algorithm.run`)
and `sample` for a problem's posterior, with the same result type, diagnostics and warnings as
`jcalib.bayes.mala.sample`; and what HMC and NUTS (`jcalib.bayes.nuts`) share: the metric, the
step size, the treatment of failed solves and the sampling run (`_sample_hamiltonian`).

**Metric.** The inverse mass matrix is a preconditioner strategy
(`jcalib.bayes.preconditioning`): by default `Laplace()`, the inverse Hessian of the log
posterior at the chains' mean start (start at an estimate, e.g. Gauss-Newton's), so that the
sampler moves in coordinates where the posterior is close to N(0, I). On stiff, correlated
ODE posteriors this whitening made NUTS about 20x more efficient than blackjax's plain window
adaptation (issue 18). `DenseMetric(cov)` uses a given covariance; `Prescaled(fraction)` the
paper's diagonal step sizes P (only their relative scales matter).

**Step size.** A global step size ε = s ε_0 with ε_0 = n^(-1/4) (the leapfrog step that keeps
the energy error O(1) on an n-dimensional standard normal, Beskos et al. 2013), s adapted
during ``warmup`` by dual averaging of the chains' mean acceptance probability towards
``target_acceptance`` (`jcalib.bayes.adaptation.dual_averaging_algorithm`; Hoffman & Gelman
2014), then frozen at its
averaged iterate: the sampling phase is a fixed, valid Markov chain.

**HMC trajectory.** Each HMC transition integrates for L = ⌈u π / ε⌉ leapfrog steps with
u ~ U(0, 1) per transition and chain (a jittered trajectory of mean length π/2, a quarter
period of a unit-variance Gaussian in whitened coordinates, which avoids the periodicities of
a fixed length; Neal 2011, §5.4.2.2). NUTS chooses its own trajectory (at most
2^``max_num_doublings`` steps).

**Failed solves.** A point where the log density is -inf or NaN has infinite (or NaN) energy:
blackjax counts the transition as divergent and never selects it; a state whose log density
or gradient is still not finite after a transition is replaced by the previous state (a
rejection). Divergences per chain are reported in ``extra["divergences"]``.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jcalib.algorithm import run, vmap_chains
    >>> jax.config.update("jax_enable_x64", True)
    >>> hmc = vmap_chains(hmc_algorithm(lambda x: -0.5 * jnp.sum(x**2), 0.8, jnp.ones(2)))
    >>> out = run(jax.random.key(0), hmc, hmc.init(jnp.zeros((4, 2))), 100)
    >>> out.trace.acceptance_rate.shape
    (100, 4)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from jcalib.algorithm import Algorithm
from jcalib.bayes._target import problem_logdensity
from jcalib.bayes.chains import KernelSetup, _metric, _scaled_step, sample_chains
from jcalib.bayes.preconditioning import AbstractPreconditioner, Laplace, as_preconditioner
from jcalib.bayes.result import PosteriorResult
from jcalib.problems import AbstractProblem

__all__ = ["HMCInfo", "default_preconditioner", "hmc_algorithm", "sample", "transition"]

_MAX_INTEGRATION_STEPS = 1024  # cap of one HMC trajectory (as NUTS's 2^10)


class HMCInfo(NamedTuple):
    """What one HMC/NUTS transition did.

    Attributes:
        acceptance_rate: the acceptance probability (NUTS: blackjax's mean acceptance
            probability over the trajectory); 0 for a rejected non-finite state.
        is_accepted: HMC: 1.0 if accepted; NUTS: the acceptance statistic (as a float).
        is_divergent: an energy error above 1000 or a non-finite state (a failed solve).
        num_integration_steps: leapfrog steps (gradient evaluations).
    """

    acceptance_rate: Float[Array, ""]
    is_accepted: Float[Array, ""]
    is_divergent: Bool[Array, ""]
    num_integration_steps: Array


def transition(step: Callable, logdensity_fn: Callable, inverse_mass_matrix, *step_args):
    """``kernel(key, state, step_size) -> (state, HMCInfo)`` of one chain, running
    ``step(logdensity_fn, inverse_mass, *step_args, key, state, eps)`` (`_hmc_step`, NUTS's
    step); a non-finite new state is a rejection (module doc). The kernel is a
    `jax.tree_util.Partial` of module-level functions: with a pytree ``logdensity_fn`` (a
    problem's posterior) `jcalib.algorithm.run` compiles it once for later runs."""
    step = jax.tree_util.Partial(step, logdensity_fn, jnp.asarray(inverse_mass_matrix), *step_args)
    return jax.tree_util.Partial(_safe_step, step)


def _hmc_step(logdensity_fn, inv_mass, key, state, eps):
    import blackjax  # imported on use: blackjax is needed only for these kernels

    key_length, key_step = jax.random.split(key)
    u = jax.random.uniform(key_length, (), dtype=eps.dtype)
    n_steps = jnp.clip(jnp.ceil(u * math.pi / eps), 1, _MAX_INTEGRATION_STEPS).astype(jnp.int32)
    with jax.numpy_dtype_promotion("standard"):  # blackjax mixes Python ints and floats
        new, info = blackjax.mcmc.hmc.build_kernel()(key_step, state, logdensity_fn, eps, inv_mass, n_steps)
    return (new, info.acceptance_rate, info.is_accepted.astype(eps.dtype), info.is_divergent,
            info.num_integration_steps)


def _safe_step(step, key, state, step_size):
    """One transition of ``step``; a non-finite new state is a rejection."""
    eps = jnp.asarray(step_size, dtype=state.position.dtype)
    new, p_accept, accepted, divergent, n_steps = step(key, state, eps)
    finite = jnp.isfinite(new.logdensity) & jnp.all(jnp.isfinite(new.logdensity_grad))
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(finite, a, b), new, state)
    p_accept = jnp.where(finite & jnp.isfinite(p_accept), p_accept, 0.0)
    accepted = jnp.where(finite & jnp.isfinite(accepted), accepted, 0.0)
    return new, HMCInfo(p_accept, accepted, divergent | ~finite, n_steps)


def init_state(logdensity_fn: Callable, position):
    """blackjax's ``HMCState`` (position, log density, gradient) at ``position``."""
    import blackjax

    return blackjax.mcmc.hmc.init(jnp.asarray(position), logdensity_fn)


def _hamiltonian_algorithm(name: str, step: Callable, logdensity_fn, step_size, inverse_mass_matrix,
                          *step_args) -> Algorithm:
    """``Algorithm(init, step, stochastic=True)`` of `transition` at a fixed step size (``name``
    prefixes the error)."""
    eps = float(step_size)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{name}: step_size must be a positive number; got {step_size!r}")
    kernel = transition(step, logdensity_fn, inverse_mass_matrix, *step_args)
    return Algorithm(jax.tree_util.Partial(init_state, logdensity_fn),
                     jax.tree_util.Partial(_fixed_step_size, kernel, jnp.asarray(eps)), True)


def _fixed_step_size(kernel, step_size, key, state):
    return kernel(key, state, step_size)


def hmc_algorithm(logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]], step_size: float,
                  inverse_mass_matrix: Float[ArrayLike, " n"] | Float[ArrayLike, "n n"]) -> Algorithm:
    """HMC with a jittered trajectory (module doc) as ``Algorithm(init, step, stochastic=True)``.

    Args:
        logdensity_fn: log π(θ), a JAX function ``(n,) -> ()``; -inf/NaN where π is zero or the
            model fails (a divergence, never accepted).
        step_size: the leapfrog step ε > 0.
        inverse_mass_matrix: ``(n,)`` diagonal or ``(n, n)`` dense (e.g. a Laplace covariance).

    Returns:
        ``init(position) -> state`` (blackjax's ``HMCState``), ``step(key, state) -> (state,
        HMCInfo)``.

    Raises:
        ValueError: ``step_size`` not a positive number.
    """
    return _hamiltonian_algorithm("hmc_algorithm", _hmc_step, logdensity_fn, step_size, inverse_mass_matrix)


def default_preconditioner(preconditioner) -> AbstractPreconditioner:
    """HMC/NUTS: `Laplace()` unless another strategy (or its short form) is given."""
    if preconditioner is None:
        return Laplace()
    return as_preconditioner(preconditioner)


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
    step_sizes: str | float = "prescaled",
    warmup: int = 0,
    target_acceptance: float | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
) -> PosteriorResult:
    """Sample a problem's posterior with HMC (blackjax's kernel, jittered trajectories), several
    chains at once; the run, the keys and the result as in `jcalib.bayes.mala.sample`.

    Args:
        key, problem, theta0, n_steps, coordinates, n_chains, burn_in, thin, chunk_size, progress:
            as in `jcalib.bayes.mala.sample`.
        preconditioner: the inverse mass matrix: `Laplace()` (default: the Laplace covariance at
            the chains' mean start), `DenseMetric(cov)` or `Prescaled(fraction)` (the paper's
            diagonal step sizes P as a diagonal inverse mass matrix).
        step_sizes: the leapfrog step ε: ``"prescaled"`` (ε = n^(-1/4)) or one positive number.
        warmup: steps adapting a global factor on ε towards ``target_acceptance`` (dual
            averaging), discarded.
        target_acceptance: in (0, 1); default 0.8 (blackjax's and Stan's).

    Returns:
        `jcalib.bayes.result.PosteriorResult`; ``extra`` also holds the divergences per chain,
        ε, the inverse mass matrix and the mean number of leapfrog steps per transition.

    Raises:
        ValueError: as `jcalib.bayes.mala.sample`; ``step_sizes`` not one positive number.
    """
    return _sample_hamiltonian("hmc", _hmc_step, (), key, problem, theta0, n_steps, coordinates=coordinates,
                              n_chains=n_chains, burn_in=burn_in, thin=thin, preconditioner=preconditioner,
                              step_sizes=step_sizes, warmup=warmup, target_acceptance=target_acceptance,
                              chunk_size=chunk_size, progress=progress)


def _sample_hamiltonian(kind: str, step: Callable, step_args: tuple, key, problem, theta0, n_steps: int, *,
                       coordinates: str, n_chains: int, burn_in: int, thin: int, preconditioner, step_sizes,
                       warmup: int, target_acceptance: float | None, chunk_size: int | None,
                       progress: bool) -> PosteriorResult:
    """`sample` of HMC (``kind="hmc"``) or NUTS (``"nuts"``, `jcalib.bayes.nuts.sample`) with
    the transition ``step`` (`transition`)."""
    build = functools.partial(_setup, kind, step, step_args, default_preconditioner(preconditioner), step_sizes)
    return sample_chains(key, problem, build, theta0, n_steps, kernel=kind, coordinates=coordinates,
                         n_chains=n_chains, burn_in=burn_in, thin=thin, warmup=warmup,
                         target_acceptance=target_acceptance, default_target=0.8, chunk_size=chunk_size,
                         progress=progress)


def _setup(kind: str, step: Callable, step_args: tuple, preconditioner, step_sizes, key, problem,
           theta0) -> KernelSetup:
    """The metric as the inverse mass matrix, ε_0 and the transition (`jcalib.bayes.chains`)."""
    logdensity_fn = problem_logdensity(problem)
    numbers = _metric(key, problem, theta0, preconditioner, step_sizes, explicit_diagonal=False)
    eps0 = _leapfrog_step(kind, step_sizes, int(theta0.shape[1]))
    inverse_mass = numbers.diagonal if numbers.cov is None else np.asarray(numbers.cov)
    kernel = transition(step, logdensity_fn, inverse_mass, *step_args)
    extra = {**numbers.extra, "kernel": kind, "inverse_mass_matrix": inverse_mass}
    diagonal = inverse_mass if inverse_mass.ndim == 1 else np.diagonal(inverse_mass)
    return KernelSetup(logdensity_fn, theta0, jax.tree_util.Partial(init_state, logdensity_fn),
                       jax.tree_util.Partial(_scaled_step, kernel, jnp.asarray(eps0)), None,
                       f"{kind} (blackjax), {type(preconditioner).__name__} metric", extra, numbers.n_evaluations,
                       functools.partial(_account, eps0, diagonal))


def _account(eps0: float, diagonal: np.ndarray, totals, n_counted: int, n_all: int, factor: float):
    """One log-density evaluation per leapfrog step; ε scaled by the warm-up, and its
    MALA-equivalent step sizes ε² M⁻¹ / 2 (one leapfrog step is MALA with them)."""
    del n_counted
    n_integration = float(sum(np.sum(t.num_integration_steps) for t in totals))
    eps = eps0 * factor
    extra = {"step_size": eps, "divergences": totals[-1].is_divergent.astype(int),
             "mean_integration_steps": n_integration / max(n_all, 1)}
    return extra, int(n_integration), eps**2 * diagonal / 2.0


def _leapfrog_step(kind: str, step_size, n: int) -> float:
    if isinstance(step_size, str) and step_size == "prescaled":
        return n ** -0.25
    if isinstance(step_size, (int, float, np.integer, np.floating)) and not isinstance(step_size, bool) \
            and 0 < step_size < np.inf:
        return float(step_size)
    raise ValueError(f"sample: with {kind}, step_sizes is the leapfrog step ε: 'prescaled' "
                     f"(n_params^(-1/4), adapted by warmup) or one positive number; got {step_size!r}")
