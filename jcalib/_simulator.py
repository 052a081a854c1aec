"""The simulator protocol (`AbstractSimulator`), re-exported by `jcalib.model`.

Its own module because equinox's ``AbstractVar`` needs real (not stringified) annotations,
and `jcalib.model` uses ``from __future__ import annotations``.
"""

import abc

import equinox as eqx
from equinox import AbstractVar
from jaxtyping import Array, ArrayLike, Float, Int

from jcalib.parameters import ParameterSpace

__all__ = ["AbstractSimulator"]


class AbstractSimulator(eqx.Module):
    """What every jcalib method takes: parameters in, outputs at ``ts`` out, with a status.

    `jcalib.model.AbstractModel` (an ODE solved by diffrax), the PELS-VAE `jcalib.nn.Surrogate` and
    `jcalib.model.FunctionSimulator` (a plain JAX function) implement it, so `jcalib.simulate_batch`,
    `jcalib.sensitivity.sobol_indices`, the networks and the workflows run on any of them.

    Attributes:
        parameters: the parameter space; ``theta`` is ordered as ``parameters.names``.
        output_names: names of the outputs (columns of ``simulate``).
        ts: observation times, ``(n_times,)`` (rows of ``simulate``).

    Subclasses provide these three (fields or properties) and `simulate_with_status`;
    `n_outputs` and `simulate` follow from them.
    """

    parameters: AbstractVar[ParameterSpace]
    output_names: AbstractVar[tuple[str, ...]]
    ts: AbstractVar[Float[Array, " n_times"]]

    @abc.abstractmethod
    def simulate_with_status(
        self, theta: Float[ArrayLike, " n_params"]
    ) -> tuple[Float[Array, "n_times n_outputs"], Int[Array, ""]]:
        """Outputs ``(n_times, n_outputs)`` and a `jcalib.model.SolveStatus` code; the outputs are NaN
        unless the code is ``SUCCESS``. Never raises for parameter values (jit, vmap)."""

    def forward_mode(self) -> "AbstractSimulator":
        """This simulator as ``jax.jacfwd`` should see it: itself, unless it differentiates
        otherwise in forward mode (`jcalib.model.AbstractModel`'s solver adjoint)."""
        return self

    @property
    def n_outputs(self) -> int:
        return len(self.output_names)

    def simulate(self, theta: Float[ArrayLike, " n_params"]) -> Float[Array, "n_times n_outputs"]:
        """Outputs at `ts`, ``(n_times, n_outputs)``; NaN where the simulation failed."""
        return self.simulate_with_status(theta)[0]
