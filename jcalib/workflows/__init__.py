"""Workflows that chain methods: surrogate screening + polish (Aka et al. 2023), sensitivity-guided
iterative identification with BayesFlow (Zhang & Mikelsons 2023, Algorithm 3) and the IMPU
digital-twin updating loop."""

from jcalib.workflows.impu_updating import DigitalTwin, TwinUpdate, TwinUpdatingResult, impu_updating
from jcalib.workflows.iterative_identification import (
                                                       IdentificationConfig,
                                                       IdentificationResult,
                                                       IdentificationStep,
                                                       iterative_identification,
                                                       one_shot_identification,
)
from jcalib.workflows.surrogate_calibration import SurrogateCalibrationResult, surrogate_calibration, surrogate_problem

__all__ = ["DigitalTwin", "IdentificationConfig", "IdentificationResult", "IdentificationStep",
           "SurrogateCalibrationResult", "TwinUpdate", "TwinUpdatingResult", "impu_updating",
           "iterative_identification", "one_shot_identification", "surrogate_calibration", "surrogate_problem"]
