"""jcalib: calibrate the parameters of dynamic simulation models with JAX.

Importing jcalib does not enable float64; entry points (CLI, experiments, notebooks,
tests) call ``jax.config.update("jax_enable_x64", True)`` themselves.

Importing jcalib sets ``EQX_ON_ERROR=nan`` unless it is set (import jcalib before equinox,
diffrax or optimistix for it to apply): jcalib reports failed solves through `SolveStatus` and
NaN, while equinox's default raises from inside solver internals (e.g. optimistix's
implicit-derivative linear solve after a failed implicit stage, in forward-mode derivatives),
which would abort a whole vmapped batch (a multistart, a sampler's chains) for one bad point.

Importing jcalib also sets ``OPENBLAS_NUM_THREADS=1`` unless it is set (it applies where scipy's
OpenBLAS, which JAX's CPU LU factorisations call, is not loaded yet): the implicit solvers
factorise small Jacobians (tens to hundreds of states) once per step, where OpenBLAS's threads
only contend with XLA's and with other processes (an order of magnitude slower per LU on a busy
2-core machine; CHANGELOG 0.1.0).
"""

import os

os.environ.setdefault("EQX_ON_ERROR", "nan")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from jcalib import distributed, models  # noqa: E402
from jcalib.data import Measurements, synthetic_measurements
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
from jcalib.problems import CalibrationProblem, GaussianPrior, JointProblem

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
    "distributed",
    "models",
    "simulate_batch",
    "synthetic_measurements",
]
__version__ = "0.1.0"
