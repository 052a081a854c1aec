"""Classical estimation: Gauss-Newton with essential directions, trust-region least squares (scipy's
TRF, Fides's interior trust-region reflective method),
global search, bottom-up estimation and uncertainty at the optimum."""

from jcalib.estimation.bottom_up import BottomUpResult, bottom_up, find_knee
from jcalib.estimation.failures import FailedStartError
from jcalib.estimation.gauss_newton import gauss_newton
from jcalib.estimation.global_search import differential_evolution, scipy_minimize
from jcalib.estimation.least_squares import (
    STOP_RULES,
    least_squares_trf,
    levenberg_marquardt_batch,
    trf_stop_options,
)
from jcalib.estimation.multistart import LLH_TOLERANCE, clusters, final_log_likelihoods, multistart, sample_starts
from jcalib.estimation.result import EstimationResult, MultistartResult
from jcalib.estimation.trust_region import TrustRegionOptions, scipy_stop_options, trust_region_batch
from jcalib.estimation.uncertainty import (
    ParameterCovariance,
    ProfileLikelihood,
    parameter_covariance,
    profile_likelihood,
)

__all__ = [
    "BottomUpResult", "EstimationResult", "FailedStartError", "LLH_TOLERANCE", "MultistartResult",
    "ParameterCovariance", "ProfileLikelihood", "STOP_RULES", "TrustRegionOptions",
    "bottom_up", "clusters", "find_knee",
    "differential_evolution", "final_log_likelihoods", "gauss_newton", "least_squares_trf", "levenberg_marquardt_batch",
    "multistart", "parameter_covariance", "profile_likelihood", "sample_starts", "scipy_minimize",
    "scipy_stop_options", "trf_stop_options", "trust_region_batch",
]
