"""Neural networks: the shared training loop, layers and scalers (PELS-VAE, flows and IMPU
build on them)."""

from jcalib.nn.layers import MLP, MinMaxScaler, SequenceEncoder, Standardizer
from jcalib.nn.training import TrainingConfig, TrainingResult, fit, load_model, make_optimizer, save_model

__all__ = ["MLP", "MinMaxScaler", "SequenceEncoder", "Standardizer", "TrainingConfig", "TrainingResult", "fit",
           "load_model", "make_optimizer", "save_model"]
