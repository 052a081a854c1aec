"""Filter-based parameter updating: the extended Kalman filter (the IMPU paper's baseline)."""

from jcalib.filters.ekf import (
    EKFInfo,
    EKFResult,
    EKFState,
    RelativeMeasurementNoise,
    augmented_covariance,
    extended_kalman_filter,
    propagate_state,
    run_ekf,
)

__all__ = ["EKFInfo", "EKFResult", "EKFState", "RelativeMeasurementNoise",
           "augmented_covariance", "extended_kalman_filter", "propagate_state", "run_ekf"]
