"""Workflows that chain methods: surrogate screening + polish (Aka et al. 2023)."""

from jcalib.workflows.surrogate_calibration import (SurrogateCalibrationResult, surrogate_calibration,
                                                    surrogate_problem)

__all__ = ["SurrogateCalibrationResult", "surrogate_calibration", "surrogate_problem"]
