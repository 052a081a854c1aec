"""Probability building blocks below `jcalib.problems`: per-parameter priors, the Gaussian prior
on internal coordinates and measurement-noise likelihoods. Imports only `jcalib.parameters`, so
`jcalib.problems` imports it at module top and `jcalib.bayes` re-exports it.

The log-normal *likelihood* is `LogNormalLikelihood` (or ``likelihood="lognormal"``); `LogNormal`
is the prior."""

from jcalib.probability.likelihoods import (
    LIKELIHOODS,
    NOISE_MODELS,
    AbsoluteGaussian,
    AbstractLikelihood,
    LogNormalLikelihood,
    RelativeGaussian,
    add_noise,
    get_likelihood,
    noise_parameter_space,
)
from jcalib.probability.priors import (
    TRUNCATION_WARNING_FRACTION,
    AbstractPrior,
    GaussianPrior,
    HalfNormal,
    LogNormal,
    LogUniform,
    Normal,
    ParameterPriors,
    PriorTruncationWarning,
    Uniform,
    bind_priors,
    default_prior,
    truncation_fraction,
)

__all__ = [
    "LIKELIHOODS", "NOISE_MODELS", "TRUNCATION_WARNING_FRACTION", "AbsoluteGaussian", "AbstractLikelihood",
    "AbstractPrior", "GaussianPrior", "HalfNormal", "LogNormal", "LogNormalLikelihood", "LogUniform", "Normal",
    "ParameterPriors", "PriorTruncationWarning", "RelativeGaussian", "Uniform", "add_noise", "bind_priors",
    "default_prior", "get_likelihood", "noise_parameter_space", "truncation_fraction",
]
