"""Bayesian estimation: likelihoods and priors, prescaled MALA (Wulkow et al. 2021), HMC and NUTS
(blackjax) as `jcalib.algorithm.Algorithm` s (`mala_algorithm`, `hmc_algorithm`, `nuts_algorithm`,
for any log density) and `sample` for a `CalibrationProblem`, with preconditioner strategies
(`Prescaled`, `DenseMetric`, `Laplace`) and the adaptation that computes them before sampling,
posterior results, MCMC diagnostics (ArviZ), kernel density estimates of marginals and predictive
bands; simulation-based calibration and recovery metrics of amortized posteriors.

Priors and likelihoods live in `jcalib.probability` (below `jcalib.problems`) and are re-exported here.
The log-normal *likelihood* is `jcalib.probability.LogNormalLikelihood` (or ``likelihood="lognormal"``);
`LogNormal` here is the prior."""

from jcalib.bayes.adaptation import (
    DualAveragingState,
    dual_averaging_algorithm,
    dual_averaging_init,
    dual_averaging_update,
    prior_prescaling,
)
from jcalib.bayes.chains import KERNELS
from jcalib.bayes.diagnostics import (
    ChainDiagnostics,
    SamplingWarning,
    acceptance_rate,
    autocorrelation,
    chain_diagnostics,
    ess,
    mcse,
    rhat,
    sampling_warnings,
    summary,
    to_inference_data,
)
from jcalib.bayes.hmc import HMCInfo, hmc_algorithm
from jcalib.bayes.kde import default_grid, gaussian_kde, kde_1d, kde_2d, kernel_covariance
from jcalib.bayes.mala import (
    MALAInfo,
    MALAState,
    Prescaling,
    build_kernel,
    log_acceptance_ratio,
    mala_algorithm,
    prescaling,
    proposal_log_density,
    sample,
    step_sizes,
)
from jcalib.bayes.nuts import nuts_algorithm
from jcalib.bayes.preconditioning import (
    AbstractPreconditioner,
    DenseMetric,
    Laplace,
    Prescaled,
    laplace_covariance,
)
from jcalib.bayes.predictive import PredictiveBands, expand_draws, output_bands, prediction_bands
from jcalib.bayes.recovery import RecoveryResult, recovery_metrics
from jcalib.bayes.result import PosteriorResult
from jcalib.bayes.sbc import ECDFBand, SBCResult, ecdf_band, run_sbc, sbc_ranks, sbc_uniformity
from jcalib.probability import (
    AbsoluteGaussian,
    GaussianPrior,
    HalfNormal,
    LogNormal,
    LogUniform,
    Normal,
    PriorTruncationWarning,
    RelativeGaussian,
    Uniform,
    bind_priors,
    get_likelihood,
    truncation_fraction,
)

__all__ = [
    "AbsoluteGaussian", "GaussianPrior", "HalfNormal", "LogNormal", "LogUniform", "Normal", "PredictiveBands",
    "PriorTruncationWarning", "truncation_fraction",
    "RelativeGaussian", "Uniform", "bind_priors", "expand_draws", "get_likelihood", "output_bands",
    "prediction_bands",
    "AbstractPreconditioner", "DenseMetric", "DualAveragingState", "KERNELS", "Laplace", "Prescaled",
    "dual_averaging_init", "dual_averaging_update", "dual_averaging_algorithm", "prior_prescaling",
    "HMCInfo", "hmc_algorithm", "nuts_algorithm", "mala_algorithm",
    "ChainDiagnostics", "MALAInfo", "MALAState", "PosteriorResult", "Prescaling",
    "SamplingWarning", "sampling_warnings",
    "acceptance_rate", "autocorrelation", "build_kernel", "chain_diagnostics",
    "default_grid", "ess", "laplace_covariance", "gaussian_kde", "kde_1d", "kde_2d", "kernel_covariance",
    "log_acceptance_ratio",
    "mcse", "prescaling", "proposal_log_density", "rhat", "sample", "step_sizes", "summary",
    "to_inference_data",
    "ECDFBand", "RecoveryResult", "SBCResult", "ecdf_band", "recovery_metrics", "run_sbc", "sbc_ranks",
    "sbc_uniformity",
]
