"""Neural networks: the shared training loop, layers and scalers, and the PELS-VAE surrogate
(flows and IMPU build on the same pieces)."""

from jcalib.nn.layers import MLP, MinMaxScaler, SequenceEncoder, Standardizer
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig, PELSVAENetwork, Surrogate, pelsvae_loss
from jcalib.nn.training import (TrainingConfig, TrainingResult, fit, load_model, make_optimizer, read_model_extra,
                                save_model)

__all__ = ["MLP", "MinMaxScaler", "PELSVAE", "PELSVAEConfig", "PELSVAENetwork", "SequenceEncoder", "Standardizer",
           "Surrogate", "TrainingConfig", "TrainingResult", "fit", "load_model", "make_optimizer", "pelsvae_loss",
           "read_model_extra", "save_model"]
