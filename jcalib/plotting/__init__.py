"""Matplotlib figures for jcalib results, one module per subpackage whose results they draw (Agg backend
unless the user chose one)."""

from jcalib.plotting.bayes import (
    plot_autocorrelation,
    plot_bands,
    plot_contraction,
    plot_marginals,
    plot_pair,
    plot_recovery,
    plot_sbc,
    plot_trace,
)
from jcalib.plotting.estimation import (
    plot_cost_versus_parameters,
    plot_fit,
    plot_multistart_waterfall,
    plot_profile,
    plot_residuals,
)
from jcalib.plotting.nn import (
    plot_impu_error_histograms,
    plot_impu_error_plane,
    plot_impu_error_versus_training_size,
    plot_impu_test_zones,
    plot_mae_versus_training_size,
    plot_reconstructions,
    plot_training_history,
)
from jcalib.plotting.sensitivity import (
    plot_sensitivity_functions,
    plot_sigma_min_spectrum,
    plot_singular_values,
    plot_sobol_over_time,
    plot_sorted_indices,
)
from jcalib.plotting.simulation import plot_simulation
from jcalib.plotting.workflows import plot_identification, plot_identification_recovery, plot_impu_updating

__all__ = [
    "plot_autocorrelation", "plot_bands", "plot_contraction", "plot_cost_versus_parameters", "plot_fit",
    "plot_identification", "plot_identification_recovery", "plot_impu_error_histograms", "plot_impu_error_plane",
    "plot_impu_error_versus_training_size", "plot_impu_test_zones", "plot_impu_updating",
    "plot_mae_versus_training_size", "plot_marginals", "plot_multistart_waterfall", "plot_pair", "plot_profile",
    "plot_recovery", "plot_reconstructions", "plot_residuals", "plot_sbc", "plot_sensitivity_functions",
    "plot_sigma_min_spectrum", "plot_simulation", "plot_singular_values", "plot_sobol_over_time",
    "plot_sorted_indices", "plot_trace", "plot_training_history",
]
