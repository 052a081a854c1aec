"""Four-substance batch reaction 2A->B, 3A->C, 3A->D (Wulkow et al. 2021, Example 1).

Mass-action event rates (orders 2 and 3, see ``shared/models/four_substance_reactions.md``
for why the paper's "first order" cannot give its 2-of-3 essential directions):

    r1 = kab A^2,  r2 = kac A^3,  r3 = kad A^3
    dA/dt = -2 r1 - 3 r2 - 3 r3,  dB/dt = r1,  dC/dt = r2,  dD/dt = r3

States and outputs in mol/L, time in s; kab in L/(mol s), kac and kad in L^2/(mol^2 s).
A0 = 10 mol/L, B0 = C0 = D0 = 0. Observed at 22 times in [5, 1000] s (chosen in the spec).
Invariants: A + 2B + 3C + 3D = A0 and D/C = kad/kac.
"""

from __future__ import annotations

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp

from jcalib.model import AbstractModel, Experiment
from jcalib.models.registry import register
from jcalib.parameters import Parameter, ParameterSpace

__all__ = ["FourSubstanceReactions", "OBSERVATION_TIMES", "four_substance_reactions"]

OBSERVATION_TIMES = (5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 125, 150,
                     200, 250, 300, 400, 500, 600, 700, 800, 900, 1000)  # s, chosen in the spec

_OUTPUTS = {"A": (0,), "ABCD": (0, 1, 2, 3)}


class FourSubstanceReactions(AbstractModel):
    """2A->B, 3A->C, 3A->D with mass-action kinetics; ``observe`` is "A" or "ABCD"."""

    observed: tuple[int, ...] = eqx.field(static=True)

    def vector_field(self, t, y, theta):
        kab, kac, kad = theta
        a = y[0]
        r1, r2, r3 = kab * a**2, kac * a**3, kad * a**3
        return jnp.stack([-2 * r1 - 3 * r2 - 3 * r3, r1, r2, r3])

    def initial_state(self, theta):
        a0 = self.experiment.conditions["A0"]
        return jnp.stack([a0, jnp.zeros_like(a0), jnp.zeros_like(a0), jnp.zeros_like(a0)])

    def observe(self, t, y, theta):
        return y[jnp.array(self.observed)]


@register("four_substance_reactions")
def four_substance_reactions(observe: str = "ABCD", a0: float = 10.0,
                             rtol: float = 1e-8, atol: float = 1e-10) -> FourSubstanceReactions:
    """Four-substance reaction 2A->B, 3A->C, 3A->D (Wulkow 2021 Ex. 1); 3 rate constants.

    Args:
        observe: ``"ABCD"`` (outputs A, B, C, D) or ``"A"`` (A only).
        a0: initial concentration of A [mol/L].
        rtol, atol: tolerances of the Tsit5 PID controller.
    """
    if observe not in _OUTPUTS:
        raise ValueError(f"four_substance_reactions: observe must be 'A' or 'ABCD'; got {observe!r}")
    space = ParameterSpace([
        Parameter("kab", 1e-4, 1e-6, 1e-3, "L/(mol*s)", log_scale=True),
        Parameter("kac", 1e-5, 1e-6, 1e-4, "L^2/(mol^2*s)", log_scale=True),
        Parameter("kad", 5e-5, 1e-6, 1e-4, "L^2/(mol^2*s)", log_scale=True),
    ])
    return FourSubstanceReactions(
        parameters=space,
        output_names=tuple(observe),
        state_names=("A", "B", "C", "D"),
        experiment=Experiment(OBSERVATION_TIMES, t0=0.0, t1=1000.0, conditions={"A0": a0},
                              name="batch"),
        solver=dfx.Tsit5(),
        controller=dfx.PIDController(rtol=rtol, atol=atol),
        adjoint=dfx.RecursiveCheckpointAdjoint(),
        dt0=None,
        max_steps=16_384,
        observed=_OUTPUTS[observe],
    )
