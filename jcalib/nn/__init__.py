"""Neural networks: the shared training loop, layers and scalers, the PELS-VAE surrogate, the
coupling-flow amortized posterior (BayesFlow) and inverse mapping parameter updating (IMPU)."""

from jcalib.nn.bayesflow import (
                                 AmortizedPosterior,
                                 BayesFlowConfig,
                                 OutsideTrainingRangeWarning,
                                 PosteriorLeakageWarning,
                                 PosteriorNetwork,
                                 SampleInfo,
                                 SummaryNetwork,
                                 bayesflow_loss,
)
from jcalib.nn.data import NetworkMetrics, TrainingSet, check_training_data, network_metrics, simulate_training_set
from jcalib.nn.features import (
                                 FEATURE_TYPES,
                                 FeatureExtractor,
                                 fft_magnitude_phase,
                                 fft_real_imaginary,
                                 frequency_bins_of_interest,
                                 time_extrema,
                                 time_samples,
)
from jcalib.nn.flows import CouplingFlow
from jcalib.nn.impu import IMPUEstimate, InverseMapping, InverseMappingConfig, paper_noise
from jcalib.nn.layers import MLP, MinMaxScaler, SequenceEncoder, Standardizer
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig, PELSVAENetwork, Surrogate, pelsvae_loss
from jcalib.nn.training import (
                                 TrainingConfig,
                                 TrainingResult,
                                 fit,
                                 load_model,
                                 make_optimizer,
                                 read_model_extra,
                                 save_model,
)

__all__ = ["AmortizedPosterior", "BayesFlowConfig", "CouplingFlow", "FEATURE_TYPES", "FeatureExtractor",
           "IMPUEstimate", "InverseMapping", "InverseMappingConfig", "MLP", "MinMaxScaler", "NetworkMetrics",
           "OutsideTrainingRangeWarning", "PELSVAE", "PELSVAEConfig", "PELSVAENetwork", "PosteriorLeakageWarning",
           "PosteriorNetwork", "SampleInfo", "SequenceEncoder", "Standardizer", "SummaryNetwork", "Surrogate",
           "TrainingConfig", "TrainingResult", "TrainingSet", "bayesflow_loss", "check_training_data",
           "fft_magnitude_phase", "fft_real_imaginary", "fit", "frequency_bins_of_interest", "load_model",
           "make_optimizer", "network_metrics", "paper_noise", "pelsvae_loss", "read_model_extra", "save_model",
           "simulate_training_set", "time_extrema", "time_samples"]
