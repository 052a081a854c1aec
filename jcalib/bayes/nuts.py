"""NUTS (blackjax's No-U-Turn kernel): `nuts_algorithm` for any log density (driven by
`jcalib.algorithm.run`) and `sample` for a problem's posterior. The metric (Laplace whitening by
default), the step size and its warm-up, failed solves and the result are HMC's
(`jcalib.bayes.hmc`); NUTS chooses its own trajectory, at most 2^``max_num_doublings`` leapfrog
steps.

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

from collections.abc import Callable, Mapping

import jax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jcalib.algorithm import Algorithm
from jcalib.bayes.hmc import _hamiltonian_algorithm, _sample_hamiltonian
from jcalib.bayes.preconditioning import AbstractPreconditioner
from jcalib.bayes.result import PosteriorResult
from jcalib.problems import AbstractProblem

__all__ = ["nuts_algorithm", "sample"]


def _nuts_step(logdensity_fn, inv_mass, max_num_doublings: int, key, state, eps):
    import blackjax  # imported on use: blackjax is needed only for these kernels

    with jax.numpy_dtype_promotion("standard"):  # blackjax mixes Python ints and floats
        new, info = blackjax.mcmc.nuts.build_kernel()(key, state, logdensity_fn, eps, inv_mass, max_num_doublings)
    return new, info.acceptance_rate, info.acceptance_rate, info.is_divergent, info.num_integration_steps


def nuts_algorithm(logdensity_fn: Callable[[Float[Array, " n"]], Float[Array, ""]], step_size: float,
                   inverse_mass_matrix: Float[ArrayLike, " n"] | Float[ArrayLike, "n n"], *,
                   max_num_doublings: int = 10) -> Algorithm:
    """NUTS as ``Algorithm(init, step, stochastic=True)``; as `jcalib.bayes.hmc.hmc_algorithm`,
    with at most 2^``max_num_doublings`` leapfrog steps per transition.

    Raises:
        ValueError: ``step_size`` not a positive number.
    """
    return _hamiltonian_algorithm("nuts_algorithm", _nuts_step, logdensity_fn, step_size, inverse_mass_matrix,
                                 int(max_num_doublings))


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
    max_num_doublings: int = 10,
    chunk_size: int | None = None,
    progress: bool = False,
) -> PosteriorResult:
    """Sample a problem's posterior with NUTS, several chains at once: the arguments, the run and
    the result of `jcalib.bayes.hmc.sample`, with NUTS's trajectories of at most
    2^``max_num_doublings`` leapfrog steps.

    Raises:
        ValueError: as `jcalib.bayes.hmc.sample`.
    """
    return _sample_hamiltonian("nuts", _nuts_step, (int(max_num_doublings),), key, problem, theta0, n_steps,
                              coordinates=coordinates, n_chains=n_chains, burn_in=burn_in, thin=thin,
                              preconditioner=preconditioner, step_sizes=step_sizes, warmup=warmup,
                              target_acceptance=target_acceptance, chunk_size=chunk_size, progress=progress)
