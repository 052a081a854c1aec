"""HMC and NUTS (blackjax's kernels) as `jcalib.algorithm.Algorithm` s: `hmc_algorithm` and
`nuts_algorithm` for any log density (driven by `jcalib.algorithm.run`), and the ``kernel="hmc"``
and ``kernel="nuts"`` paths of `jcalib.bayes.mala.sample`, with the same problem, result type,
diagnostics and warnings as MALA.

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
    >>> nuts = vmap_chains(nuts_algorithm(lambda x: -0.5 * jnp.sum(x**2), 0.8, jnp.ones(2)))
    >>> out = run(jax.random.key(0), nuts, nuts.init(jnp.zeros((4, 2))), 100)
    >>> out.trace.acceptance_rate.shape
    (100, 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from jcalib.algorithm import Algorithm
from jcalib.bayes.preconditioning import AbstractPreconditioner, Laplace, as_preconditioner

__all__ = ["KERNELS", "HMCInfo", "default_preconditioner", "hmc_algorithm", "nuts_algorithm"]

KERNELS = ("mala", "hmc", "nuts")
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


def transition(kind: str, logdensity_fn: Callable, inverse_mass_matrix, max_num_doublings: int = 10):
    """``kernel(key, state, step_size) -> (state, HMCInfo)`` of one chain (``kind`` is
    ``"hmc"`` or ``"nuts"``); a non-finite new state is a rejection (module doc). The kernel is
    a `jax.tree_util.Partial` of module-level functions: with a pytree ``logdensity_fn`` (a
    problem's posterior) `jcalib.algorithm.run` compiles it once for later runs."""
    inv_mass = jnp.asarray(inverse_mass_matrix)
    if kind == "nuts":
        step = jax.tree_util.Partial(_nuts_step, logdensity_fn, inv_mass, int(max_num_doublings))
    else:
        step = jax.tree_util.Partial(_hmc_step, logdensity_fn, inv_mass)
    return jax.tree_util.Partial(_safe_step, step)


def _nuts_step(logdensity_fn, inv_mass, max_num_doublings: int, key, state, eps):
    import blackjax  # imported on use: blackjax is needed only for these kernels

    with jax.numpy_dtype_promotion("standard"):  # blackjax mixes Python ints and floats
        new, info = blackjax.mcmc.nuts.build_kernel()(key, state, logdensity_fn, eps, inv_mass, max_num_doublings)
    return new, info.acceptance_rate, info.acceptance_rate, info.is_divergent, info.num_integration_steps


def _hmc_step(logdensity_fn, inv_mass, key, state, eps):
    import blackjax

    key_length, key_step = jax.random.split(key)
    u = jax.random.uniform(key_length, (), dtype=eps.dtype)
    n_steps = jnp.clip(jnp.ceil(u * math.pi / eps), 1, _MAX_INTEGRATION_STEPS).astype(jnp.int32)
    with jax.numpy_dtype_promotion("standard"):
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


def _algorithm(kind, logdensity_fn, step_size, inverse_mass_matrix, max_num_doublings):
    eps = float(step_size)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{kind}_algorithm: step_size must be a positive number; got {step_size!r}")
    kernel = transition(kind, logdensity_fn, inverse_mass_matrix, max_num_doublings)
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
    return _algorithm("hmc", logdensity_fn, step_size, inverse_mass_matrix, 10)


def nuts_algorithm(logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]], step_size: float,
                   inverse_mass_matrix: Float[ArrayLike, " n"] | Float[ArrayLike, "n n"], *,
                   max_num_doublings: int = 10) -> Algorithm:
    """NUTS (blackjax's kernel) as ``Algorithm(init, step, stochastic=True)``; as
    `hmc_algorithm`, with at most 2^``max_num_doublings`` leapfrog steps per transition.

    Raises:
        ValueError: ``step_size`` not a positive number.
    """
    return _algorithm("nuts", logdensity_fn, step_size, inverse_mass_matrix, int(max_num_doublings))


def default_preconditioner(preconditioner) -> AbstractPreconditioner:
    """HMC/NUTS: `Laplace()` unless another strategy (or its short form) is given."""
    if preconditioner is None:
        return Laplace()
    return as_preconditioner(preconditioner)
