"""jcalib: calibrate the parameters of dynamic simulation models with JAX.

Importing jcalib does not enable float64; entry points (CLI, experiments, notebooks,
tests) call ``jax.config.update("jax_enable_x64", True)`` themselves.
"""

from jcalib import models
from jcalib.model import AbstractModel, Experiment, SimulationError, SolveStatus, simulate_batch
from jcalib.parameters import Parameter, ParameterSpace

__all__ = [
    "AbstractModel",
    "Experiment",
    "Parameter",
    "ParameterSpace",
    "SimulationError",
    "SolveStatus",
    "models",
    "simulate_batch",
]
__version__ = "0.1.0"
