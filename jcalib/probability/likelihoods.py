"""Measurement-noise models: Gaussian on absolute errors, Gaussian on relative errors, log-normal.

A likelihood compares a measured value X with the simulated F through a noise level σ
per entry. All three have the form (elementwise, r the likelihood's residual)

    log p = -½ (r/σ)² - log σ - log c(X) - ½ log 2π

=====================  ======================  ===================  ==========================
class                  noise model             r                    c(X)
=====================  ======================  ===================  ==========================
`AbsoluteGaussian`     X ~ N(F, σ²)            X - F                1
`RelativeGaussian`     F ~ N(X, (σX)²)         (X - F)/X            |X|
`LogNormalLikelihood`  log X ~ N(log F, σ²)    log X - log F        X  (X > 0 required)
=====================  ======================  ===================  ==========================

`RelativeGaussian` is the likelihood of Wulkow et al. 2021, §2.3: with one σ for all
entries, Σ log p = -R_X n/(2σ²) + const, R_X = 1/n Σ ((X-F)/X)² (their eq. 6), i.e. the
posterior ∝ exp(-R_X n/(2σ²)) × prior; the normaliser is that of the density of F given X.
`LogNormalLikelihood` is the multiplicative noise model X = F e^{σε} (named apart from the
log-normal *prior* `jcalib.probability.priors.LogNormal`).

**The noise level σ** is, per output, either

- fixed: ``likelihood.sigma`` (a scalar or one value per output) when given, else
  ``measurements.sigma`` (scalar, per output or per entry); or
- sampled: ``CalibrationProblem(..., noise_parameters=...)`` appends one parameter
  ``sigma_<output>`` per named output to the free parameters, log-scale (internal
  coordinate log σ), with its own prior (``prior={"sigma_prey": HalfNormal(0.3)}``;
  default: log-uniform on its bounds). The log posterior then includes the σ-dependent
  normaliser -Σ log σ, so σ is estimated together with the model parameters; its
  maximum-likelihood value given θ is the RMS of the output's residuals r.

Example:
    >>> lik = LogNormalLikelihood()        # σ from measurements.sigma or sampled
    >>> lik = AbsoluteGaussian(sigma=0.5)  # σ fixed to 0.5 for every output
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jcalib.parameters import Parameter, ParameterSpace

__all__ = [
    "AbsoluteGaussian",
    "AbstractLikelihood",
    "LIKELIHOODS",
    "LogNormalLikelihood",
    "NOISE_MODELS",
    "RelativeGaussian",
    "add_noise",
    "get_likelihood",
    "noise_parameter_space",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
DEFAULT_RELATIVE_NOISE_BOUNDS = (1e-3, 1.0)
"""Default bounds of a sampled σ for relative and log-normal noise (0.1 % to 100 %)."""


class AbstractLikelihood(eqx.Module):
    """An elementwise noise model with level σ (see the module doc).

    Attributes:
        sigma: fixed noise level, a scalar or one value per output (a tuple), or None to
            take ``measurements.sigma`` (or sampled noise parameters).
    """

    sigma: float | tuple[float, ...] | None = eqx.field(static=True)
    name: str = eqx.field(static=True, default="")

    def __init__(self, sigma: float | Sequence[float] | None = None):
        self.sigma = _check_fixed_sigma(sigma, type(self).__name__)
        self.name = _NAMES.get(type(self), type(self).__name__)

    @abc.abstractmethod
    def residual(self, x: Float[Array, " n"], f: Float[Array, " n"]) -> Float[Array, " n"]:
        """The residual r whose square the noise level scales (X measured, F simulated)."""

    @abc.abstractmethod
    def log_scale_factor(self, x: Float[Array, " n"]) -> Float[Array, " n"]:
        """log c(X), the σ-independent part of the normaliser."""

    @abc.abstractmethod
    def add_noise(self, key: PRNGKeyArray, f: Float[Array, "..."],
                  sigma: Float[Array, "..."]) -> Float[Array, "..."]:
        """Simulated measurements around ``f`` (for prediction bands)."""

    def log_density(self, x: Float[Array, " n"], f: Float[Array, " n"],
                    sigma: Float[Array, " n"]) -> Float[Array, " n"]:
        """Elementwise log density (NaN ``f`` gives NaN; the problem turns that into -inf)."""
        z = self.residual(x, f) / sigma
        return -0.5 * z**2 - jnp.log(sigma) - self.log_scale_factor(x) - _LOG_SQRT_2PI

    def check_data(self, x: np.ndarray) -> int | None:
        """Index of the first measured value this noise model cannot take, or None."""
        return None

    def data_requirement(self) -> str:
        return ""

    def default_noise_bounds(self, x_output: np.ndarray) -> tuple[float, float]:
        """Bounds of a sampled σ for one output with measured values ``x_output``."""
        return DEFAULT_RELATIVE_NOISE_BOUNDS


class AbsoluteGaussian(AbstractLikelihood):
    """X ~ N(F, σ²): additive Gaussian noise, σ in the output's unit."""

    def residual(self, x, f):
        return x - f

    def log_scale_factor(self, x):
        return jnp.zeros_like(x)

    def add_noise(self, key, f, sigma):
        return add_noise(key, f, sigma, "additive")

    def default_noise_bounds(self, x_output):
        """From 0.1 % to 100 % of the output's largest measured magnitude."""
        scale = float(np.max(np.abs(x_output))) if x_output.size else 1.0
        scale = scale if scale > 0 else 1.0
        return 1e-3 * scale, scale


class RelativeGaussian(AbstractLikelihood):
    """F ~ N(X, (σX)²), the relative error model of Wulkow et al. 2021 (eq. 6); X ≠ 0."""

    def residual(self, x, f):
        return (x - f) / x

    def log_scale_factor(self, x):
        return jnp.log(jnp.abs(x))

    def add_noise(self, key, f, sigma):
        # the generative reading X = F (1 + σ ε) (as synthetic_measurements' "multiplicative")
        return add_noise(key, f, sigma, "multiplicative")

    def check_data(self, x):
        bad = np.flatnonzero(x == 0)
        return int(bad[0]) if bad.size else None

    def data_requirement(self) -> str:
        return "divides by the measured values, but X = 0"


class LogNormalLikelihood(AbstractLikelihood):
    """log X ~ N(log F, σ²): multiplicative noise X = F e^{σε}; X > 0 required, and a
    simulated F ≤ 0 has likelihood 0."""

    def residual(self, x, f):
        positive = f > 0
        log_f = jnp.log(jnp.where(positive, f, 1.0))
        return jnp.where(positive, jnp.log(x) - log_f, jnp.inf)

    def log_scale_factor(self, x):
        return jnp.log(x)

    def add_noise(self, key, f, sigma):
        return add_noise(key, f, sigma, "lognormal")

    def check_data(self, x):
        bad = np.flatnonzero(~(x > 0))
        return int(bad[0]) if bad.size else None

    def data_requirement(self) -> str:
        return "needs positive measured values, but X"


_NAMES = {AbsoluteGaussian: "absolute_gaussian", RelativeGaussian: "relative_gaussian",
          LogNormalLikelihood: "lognormal"}
LIKELIHOODS = {
    "absolute_gaussian": AbsoluteGaussian, "absolute": AbsoluteGaussian,
    "relative_gaussian": RelativeGaussian, "relative": RelativeGaussian,
    "lognormal": LogNormalLikelihood,
}
"""Names accepted by ``CalibrationProblem(likelihood=...)``."""


def get_likelihood(likelihood: str | AbstractLikelihood | None,
                   weighting: str = "relative") -> AbstractLikelihood:
    """A likelihood from a name, an instance, or None (the one matching ``weighting``:
    ``"relative"`` → `RelativeGaussian`, ``"absolute"``/``"sigma"`` → `AbsoluteGaussian`)."""
    if likelihood is None:
        return RelativeGaussian() if weighting == "relative" else AbsoluteGaussian()
    if isinstance(likelihood, AbstractLikelihood):
        return likelihood
    if isinstance(likelihood, str) and likelihood in LIKELIHOODS:
        return LIKELIHOODS[likelihood]()
    got = repr(likelihood) if isinstance(likelihood, str) else type(likelihood).__name__
    raise ValueError(
        f"likelihood must be one of {tuple(LIKELIHOODS)} or an AbstractLikelihood (e.g. "
        f"LogNormalLikelihood(sigma=0.1)); got {got}"
    )


NOISE_MODELS = ("additive", "multiplicative", "lognormal")
"""Noise models of `add_noise` (ε ~ N(0, 1)): X = F + σε, X = F (1 + σε), X = F e^{σε}."""


def add_noise(key: PRNGKeyArray, values: Float[ArrayLike, "..."], sigma: Float[ArrayLike, "..."] | float,
              noise: str = "additive") -> Float[Array, "..."] | Float[np.ndarray, "..."]:
    """Gaussian measurement noise on noise-free ``values``: the one noise-adding function of jcalib.

    With ε ~ N(0, 1) i.i.d. per entry, drawn as ``jax.random.normal(key, values.shape)``
    (the same key gives the same ε for every noise model):

    - ``"additive"``: X = F + σε, σ in the output's unit (`AbsoluteGaussian`);
    - ``"multiplicative"``: X = F (1 + σε), σ a fraction of F (`RelativeGaussian`,
      Wulkow 2021, eq. 6);
    - ``"lognormal"``: X = F e^{σε} (`LogNormalLikelihood`).

    `jcalib.data.synthetic_measurements`, the likelihoods' ``add_noise`` (prediction bands),
    `jcalib.nn.impu.InverseMapping`, `jcalib.nn.bayesflow.AmortizedPosterior.fit_online` and
    `jcalib.workflows.iterative_identification` all call it. Pure JAX: works under ``jit`` and
    ``vmap``.

    Args:
        key: a ``jax.random`` key.
        values: noise-free values F, e.g. ``(..., n_times, n_outputs)``; the noise is drawn in
            their floating dtype.
        sigma: noise level broadcastable to ``values``: a scalar, one per output
            ``(n_outputs,)`` or one per entry ``(n_times, n_outputs)``.
        noise: one of `NOISE_MODELS`.

    Returns:
        the noisy values X in the shape and dtype of ``values``: a NumPy array when ``values``
        is one (or a list) and nothing is traced, else a JAX array.

    Raises:
        ValueError: unknown ``noise``; ``sigma`` that does not broadcast to ``values``.

    Example:
        >>> x = add_noise(jax.random.key(0), jnp.ones((3, 2)), jnp.array([0.1, 0.2]), "multiplicative")
        >>> x.shape
        (3, 2)
    """
    if noise not in NOISE_MODELS:
        raise ValueError(f"add_noise: noise must be one of {NOISE_MODELS}; got {noise!r}")
    numpy_in = not isinstance(values, jax.Array)
    values = jnp.asarray(values)
    if not jnp.issubdtype(values.dtype, jnp.floating):
        values = values.astype(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    sigma = jnp.asarray(sigma, dtype=values.dtype)
    try:
        sigma = jnp.broadcast_to(sigma, values.shape)
    except ValueError:
        raise ValueError(f"add_noise: sigma of shape {sigma.shape} does not broadcast to the values' shape "
                         f"{values.shape}; give a scalar, one per output or one per entry") from None
    eps = jax.random.normal(key, values.shape, dtype=values.dtype)
    if noise == "additive":
        noisy = values + sigma * eps
    elif noise == "multiplicative":
        noisy = values * (1.0 + sigma * eps)
    else:
        noisy = values * jnp.exp(sigma * eps)
    return np.asarray(noisy) if numpy_in and not isinstance(noisy, jax.core.Tracer) else noisy


def _check_fixed_sigma(sigma, owner: str):
    if sigma is None:
        return None
    arr = np.array(sigma, dtype=np.float64)
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(
            f"{owner}: sigma must be a scalar or one value per output; got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr) & (arr > 0)):
        raise ValueError(f"{owner}: sigma must be positive and finite; got {arr.tolist()}")
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr)


def noise_parameter_space(
    spec: bool | str | Sequence[str] | Mapping[str, Sequence[float]],
    output_names: Sequence[str],
    likelihood: AbstractLikelihood,
    x_by_output: Sequence[np.ndarray],
) -> tuple[ParameterSpace, tuple[int, ...]]:
    """Parse ``CalibrationProblem(noise_parameters=...)``.

    Args:
        spec: ``True`` (every output), an output name or a list of them (default bounds,
            see `AbstractLikelihood.default_noise_bounds`), or ``{output: (lower, upper)}``
            / ``{output: (nominal, lower, upper)}`` (physical σ, ``0 <= lower < upper <=
            inf``; open bounds, ``0`` or ``inf``, need the nominal σ, and a proper prior in
            ``CalibrationProblem(prior=...)``, e.g. ``HalfNormal``).
        output_names: the model's outputs.
        likelihood: gives the default bounds.
        x_by_output: measured values of each output.

    Returns:
        The log-scale parameters ``sigma_<output>`` and the output index of each.
    """
    outputs = tuple(output_names)
    if spec is True:
        spec = outputs
    elif spec is False or spec is None:
        raise ValueError("noise_parameters: nothing to sample; pass None for a fixed sigma")
    if isinstance(spec, str):
        spec = (spec,)
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, Sequence):
        items = [(name, None) for name in spec]
    else:
        raise ValueError(
            "noise_parameters: expected True, output names or {output: (lower, upper)}; got "
            f"{type(spec).__name__}"
        )
    if not items:
        raise ValueError("noise_parameters: no outputs named; pass None for a fixed sigma")
    names = [name for name, _ in items]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"noise_parameters: duplicate outputs {duplicates}")
    params, index = [], []
    for name, bounds in items:
        if name not in outputs:
            known = ", ".join(repr(o) for o in outputs)
            raise ValueError(f"noise_parameters: unknown output {name!r}; outputs: {known}")
        j = outputs.index(name)
        if bounds is None:
            lower, upper = likelihood.default_noise_bounds(np.asarray(x_by_output[j]))
            nominal = math.sqrt(lower * upper)
        else:
            values = [float(v) for v in np.atleast_1d(np.asarray(bounds, dtype=np.float64))]
            if len(values) == 2:
                lower, upper = values
                if lower == 0.0 or math.isinf(upper):
                    raise ValueError(
                        f"noise_parameters: bounds of {name!r} are open ([{lower}, {upper}]), so their "
                        f"geometric mean cannot be the nominal σ; pass {{{name!r}: (nominal, {lower}, "
                        f"{upper})}} with a nominal σ inside"
                    )
                nominal = math.sqrt(lower * upper) if lower > 0 and upper > 0 else lower
            elif len(values) == 3:
                nominal, lower, upper = values
            else:
                raise ValueError(
                    f"noise_parameters: bounds of {name!r} must be (lower, upper) or (nominal, "
                    f"lower, upper); got {bounds!r}"
                )
            if not (lower >= 0 and upper > lower):
                raise ValueError(
                    f"noise_parameters: bounds of {name!r} must satisfy 0 <= lower < upper <= inf (σ is "
                    f"sampled in log coordinates; 0 and inf leave it unbounded); got lower={lower}, "
                    f"upper={upper}"
                )
        params.append(Parameter(f"sigma_{_identifier(name)}", nominal, lower, upper,
                                unit="", log_scale=True))
        index.append(j)
    return ParameterSpace(params), tuple(index)


def _identifier(name: str) -> str:
    """An output name as part of a parameter identifier (non-identifier characters -> _)."""
    return "".join(c if (c.isalnum() or c == "_") else "_" for c in name)
