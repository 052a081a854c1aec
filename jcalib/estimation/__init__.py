"""Classical estimation: Gauss-Newton with essential directions, trust-region least squares,
global search, bottom-up estimation and uncertainty at the optimum."""

from jcalib.estimation.result import EstimationResult

__all__ = ["EstimationResult"]
