"""Sensitivity and identifiability: local (autodiff) sensitivities, Sobol indices, rank tests."""

from jcalib.sensitivity.identifiability import (
    CorrelationRanking,
    ExperimentContributions,
    IdentifiabilityReport,
    JacobianAnalysis,
    correlation_ranking,
    experiment_contributions,
    identifiability,
    jacobian_analysis,
    n_essential_directions,
    noise_rank_rtol,
    null_parameters,
    numerical_rank,
)
from jcalib.sensitivity.local import (
    j_sensitivity,
    j_sensitivity_functions,
    output_sensitivities,
    sensitivity_matrix,
)
from jcalib.sensitivity.sobol import Selection, SobolResult, saltelli_design, select_identifiable, sobol_indices

__all__ = [
    "CorrelationRanking", "ExperimentContributions", "IdentifiabilityReport", "JacobianAnalysis", "Selection",
    "SobolResult",
    "correlation_ranking", "experiment_contributions", "identifiability", "j_sensitivity",
    "j_sensitivity_functions", "jacobian_analysis", "n_essential_directions", "noise_rank_rtol", "null_parameters",
    "numerical_rank", "output_sensitivities", "saltelli_design", "select_identifiable", "sensitivity_matrix",
    "sobol_indices",
]
