"""Calibration problems: the declared contract (`AbstractProblem`), the single-experiment problem
(`CalibrationProblem`) and the multi-experiment problem (`JointProblem`); every method of jcalib
takes any of them (a PEtab problem, `jcalib.io.petab`, fulfils the same contract)."""

from jcalib.probability.priors import GaussianPrior
from jcalib.problems.contract import AbstractProblem, residual_offset
from jcalib.problems.joint import JointProblem
from jcalib.problems.single import (
    WEIGHTINGS,
    CalibrationProblem,
    InitialStateParameters,
    initial_state_from_parameters,
    with_initial_state_parameters,
)

__all__ = [
    "WEIGHTINGS", "AbstractProblem", "CalibrationProblem", "GaussianPrior", "InitialStateParameters", "JointProblem",
    "initial_state_from_parameters", "residual_offset", "with_initial_state_parameters",
]
