"""jcalib: calibrate the parameters of dynamic simulation models with JAX.

Importing jcalib does not enable float64; entry points (CLI, experiments, notebooks,
tests) call ``jax.config.update("jax_enable_x64", True)`` themselves.
"""

from jcalib import models
from jcalib.data import Measurements, synthetic_measurements
from jcalib.joint_problem import JointProblem
from jcalib.model import (
    AbstractModel,
    AbstractSimulator,
    Experiment,
    FunctionSimulator,
    SimulationError,
    SolveStatus,
    simulate_batch,
)
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.problem import CalibrationProblem, GaussianPrior

__all__ = [
    "AbstractModel",
    "AbstractSimulator",
    "CalibrationProblem",
    "Experiment",
    "FunctionSimulator",
    "GaussianPrior",
    "JointProblem",
    "Measurements",
    "Parameter",
    "ParameterSpace",
    "SimulationError",
    "SolveStatus",
    "models",
    "simulate_batch",
    "synthetic_measurements",
]
__version__ = "0.1.0"
