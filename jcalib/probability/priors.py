"""Per-parameter priors: uniform, log-uniform, normal, log-normal, half-normal; and
`GaussianPrior`, independent normals on the internal coordinates (not truncated).

A prior is given per parameter in PHYSICAL units, ``{name: prior}``, and passed to
``CalibrationProblem(prior=...)`` (Wulkow et al. 2021, §2.3 use uniform and Gaussian
priors). Every prior is **truncated to the parameter's bounds and renormalised**, so the
posterior never leaves the bounds, the model is never evaluated outside them (the bounds are
where it is valid) and posterior draws can go straight into `jcalib.simulate_batch`.
An infinite bound truncates nothing: a parameter on ``(0, inf)`` or ``(-inf, inf)`` (see
`jcalib.parameters`) keeps its prior as written on that side. Widen finite bounds
(``space.replace(name, lower=..., upper=...)``) for a prior that is practically untruncated.

Uniform priors need finite limits: ``Uniform()``/``LogUniform()`` (and the default prior
of a parameter without one) take the parameter's bounds, and on an infinite interval (or
``LogUniform`` down to 0) that density does not normalise; such a prior is refused with a
`ValueError` naming the parameter. Give such a parameter a proper prior (``Normal``,
``LogNormal``, ``HalfNormal``, or ``Uniform(low, high)`` with finite limits).

Samplers work on the problem's *internal* coordinates ``z = T(θ)`` (`Parameter.transform`:
``log θ`` for log-scale parameters, ``θ`` for boxed or real-line ones, ``log(θ - a)`` /
``-log(b - θ)`` for half-open ones), so the density there carries the log-Jacobian of the
map: ``log p_z(z) = log p_θ(T⁻¹(z)) + log |dθ/dz|`` (`AbstractPrior.log_prob_internal`,
`ParameterSpace.log_jacobian`), e.g. ``+ z`` for log-scale parameters.

Support checks happen when a prior meets a parameter (`bind_priors`):

- ``LogNormal`` and ``HalfNormal`` live on θ ≥ 0: a parameter whose lower bound is
  negative raises ``ValueError`` (a lower bound of exactly 0 is fine: the density is 0
  there).
- ``Uniform(low, high)`` and ``LogUniform(low, high)`` must lie inside the bounds
  (``low``/``high`` default to the bounds).
- ``Normal``, ``LogNormal``, ``HalfNormal``: a prior that puts more than 1 %
  (`TRUNCATION_WARNING_FRACTION`) of its mass outside the bounds gives a
  `PriorTruncationWarning` naming the parameter and the fraction (e.g. the default noise
  bounds (1e-3, 1) cut 15.9 % off a ``LogNormal(-1, 1)`` prior on σ), since the prior
  actually used is then not the one written down; a Normal mean outside the bounds is
  named too (the truncated prior piles up at one bound). A prior with (numerically) no
  mass inside the bounds raises ``ValueError``.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> from jcalib.parameters import Parameter, ParameterSpace
    >>> space = ParameterSpace([Parameter("k", 1e-3, 1e-5, 1e-1, log_scale=True),
    ...                         Parameter("x0", 1.0, 0.0, 5.0)])
    >>> priors = bind_priors({"k": LogNormal(mu=-7.0, sigma=1.0), "x0": HalfNormal(2.0)}, space)
    >>> priors.names
    ('k', 'x0')
"""

from __future__ import annotations

import abc
import contextlib
import math
import warnings
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float
from scipy import special, stats

from jcalib._warnings import warn_user
from jcalib.parameters import Parameter, ParameterSpace, check_names

__all__ = [
    "AbstractPrior",
    "GaussianPrior",
    "HalfNormal",
    "LogNormal",
    "LogUniform",
    "Normal",
    "ParameterPriors",
    "PriorTruncationWarning",
    "quiet_truncation",
    "TRUNCATION_WARNING_FRACTION",
    "Uniform",
    "bind_priors",
    "default_prior",
    "truncation_fraction",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_MIN_LOG_MASS = math.log(1e-12)  # less prior mass than this inside the bounds: an error
TRUNCATION_WARNING_FRACTION = 0.01
"""More prior mass than this outside a parameter's bounds gives a `PriorTruncationWarning`."""


class PriorTruncationWarning(UserWarning):
    """A prior loses a noticeable part of its mass to the parameter's bounds: the prior in
    effect (truncated and renormalised) differs from the one written down."""


class AbstractPrior(eqx.Module):
    """A univariate prior in physical units (before truncation to the bounds)."""

    @abc.abstractmethod
    def log_prob(self, theta: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """Elementwise log density in physical units, untruncated (as ``scipy.stats``);
        -inf outside the distribution's support."""

    @abc.abstractmethod
    def _scipy(self):
        """The equivalent frozen ``scipy.stats`` distribution (for the truncation mass)."""

    def _bind(self, parameter: Parameter) -> AbstractPrior:
        """This prior for ``parameter`` (defaults resolved), after support checks."""
        return self

    def log_prob_internal(self, theta_internal: Float[ArrayLike, "..."],
                          parameter: Parameter) -> Float[Array, "..."]:
        """Log density of ``parameter``'s internal coordinate ``z`` (untruncated):
        ``log p(θ(z)) + log |dθ/dz|``, e.g. ``log p(e^z) + z`` for a log-scale parameter."""
        z = jnp.asarray(theta_internal)
        return self.log_prob(parameter.to_physical(z)) + parameter.log_jacobian(z)

    def _name(self) -> str:
        return type(self).__name__


def _normal_log_pdf(x, mean: float, std: float):
    """log N(x; mean, std²), elementwise."""
    z = (x - mean) / std
    return -0.5 * z**2 - math.log(std) - _LOG_SQRT_2PI


def _location_scale(prior: str, **values: float) -> tuple[float, float]:
    """The (finite location, positive finite scale) pair of a normal-type prior, checked; the
    keyword names are the prior's argument names (for the messages)."""
    (location_name, location), (scale_name, scale) = values.items()
    return _finite(location, location_name, prior), _positive(scale, scale_name, prior)


def _positive(value, what: str, prior: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{prior}: {what} must be positive and finite; got {value}")
    return value


def _finite(value, what: str, prior: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{prior}: {what} must be finite; got {value}")
    return value


def _inside(theta, low: float, high: float):
    return (theta >= low) & (theta <= high)


class Uniform(AbstractPrior):
    """Uniform on ``[low, high]`` in physical units (None: the parameter's bounds).

    For a log-scale parameter this is *not* the problem's default ``"uniform"`` prior,
    which is uniform in the internal coordinate (log-uniform): use `LogUniform` for that.
    """

    low: float | None
    high: float | None

    def __init__(self, low: float | None = None, high: float | None = None):
        self.low, self.high = _interval("Uniform", low, high, _finite)

    def log_prob(self, theta):
        theta = jnp.asarray(theta)
        _check_set(self)
        return jnp.where(_inside(theta, self.low, self.high), -math.log(self.high - self.low),
                         -jnp.inf)

    def _scipy(self):
        return stats.uniform(loc=self.low, scale=self.high - self.low)

    def _bind(self, parameter):
        low, high = _limits(self, parameter)
        _check_within(self._name(), parameter, low, high)
        return Uniform(low, high)


class LogUniform(AbstractPrior):
    """Uniform in ``log θ`` on ``[low, high]`` (None: the bounds), ``low > 0``; density
    ``1 / (θ log(high/low))``. The default prior of a log-scale parameter."""

    low: float | None
    high: float | None

    def __init__(self, low: float | None = None, high: float | None = None):
        self.low, self.high = _interval("LogUniform", low, high, _positive)

    def log_prob(self, theta):
        theta = jnp.asarray(theta)
        _check_set(self)
        inside = _inside(theta, self.low, self.high)
        safe = jnp.where(inside, theta, 1.0)
        return jnp.where(inside, -jnp.log(safe) - math.log(math.log(self.high / self.low)),
                         -jnp.inf)

    def _scipy(self):
        return stats.loguniform(self.low, self.high)

    def _bind(self, parameter):
        low, high = _limits(self, parameter)
        if low <= 0:
            raise ValueError(
                f"LogUniform prior on {parameter.name!r}: needs positive values, but the lower "
                f"bound is {low}; pass LogUniform(low=...) with low > 0 or use Uniform"
            )
        _check_within(self._name(), parameter, low, high)
        return LogUniform(low, high)


class Normal(AbstractPrior):
    """Normal ``N(mean, std²)`` in physical units, truncated to the bounds."""

    mean: float
    std: float

    def __init__(self, mean: float, std: float):
        self.mean, self.std = _location_scale("Normal", mean=mean, std=std)

    def log_prob(self, theta):
        return _normal_log_pdf(jnp.asarray(theta), self.mean, self.std)

    def _scipy(self):
        return stats.norm(self.mean, self.std)

    def _bind(self, parameter):
        return self  # a mean outside the bounds is reported by bind_priors with the lost mass


class LogNormal(AbstractPrior):
    """Log-normal: ``log θ ~ N(mu, sigma²)`` (scipy: ``lognorm(s=sigma, scale=exp(mu))``);
    the median is ``exp(mu)``. Needs a parameter with ``lower >= 0``."""

    mu: float
    sigma: float

    def __init__(self, mu: float, sigma: float):
        self.mu, self.sigma = _location_scale("LogNormal", mu=mu, sigma=sigma)

    def log_prob(self, theta):
        theta = jnp.asarray(theta)
        positive = theta > 0
        log_theta = jnp.log(jnp.where(positive, theta, 1.0))
        return jnp.where(positive, _normal_log_pdf(log_theta, self.mu, self.sigma) - log_theta, -jnp.inf)

    def log_prob_internal(self, theta_internal, parameter):
        if parameter.transform == "log":  # exactly Normal(mu, sigma) in z = log θ, without exp/log round-off
            return _normal_log_pdf(jnp.asarray(theta_internal), self.mu, self.sigma)
        return super().log_prob_internal(theta_internal, parameter)

    def _scipy(self):
        return stats.lognorm(s=self.sigma, scale=math.exp(self.mu))

    def _bind(self, parameter):
        _check_nonnegative(self._name(), parameter)
        return self


class HalfNormal(AbstractPrior):
    """Half-normal on θ ≥ 0 with scale ``scale`` (scipy: ``halfnorm(scale=scale)``), e.g.
    for noise levels. Needs a parameter with ``lower >= 0``."""

    scale: float

    def __init__(self, scale: float):
        self.scale = _positive(scale, "scale", "HalfNormal")

    def log_prob(self, theta):
        theta = jnp.asarray(theta)
        return jnp.where(theta >= 0, _normal_log_pdf(theta, 0.0, self.scale) + math.log(2.0), -jnp.inf)

    def _scipy(self):
        return stats.halfnorm(scale=self.scale)

    def _bind(self, parameter):
        _check_nonnegative(self._name(), parameter)
        return self


def _interval(prior: str, low, high, check) -> tuple[float | None, float | None]:
    """``(low, high)`` of a uniform-type prior, each None or passing ``check``, ``low < high``."""
    low = None if low is None else check(low, "low", prior)
    high = None if high is None else check(high, "high", prior)
    if low is not None and high is not None and not low < high:
        raise ValueError(f"{prior}: low < high required; got low={low}, high={high}")
    return low, high


def _check_set(prior: Uniform | LogUniform) -> None:
    if prior.low is None or prior.high is None:
        raise ValueError(f"{prior._name()}.log_prob: low and high are unset; bind the prior to a "
                         "parameter (bind_priors) or pass them")


def _limits(prior: Uniform | LogUniform, parameter: Parameter) -> tuple[float, float]:
    """``(low, high)`` of a uniform prior, the parameter's bounds where unset; ValueError when
    that leaves an improper (non-normalisable) prior."""
    low = parameter.lower if prior.low is None else prior.low
    high = parameter.upper if prior.high is None else prior.high
    if not (math.isfinite(low) and math.isfinite(high)):
        name = prior._name()
        raise ValueError(
            f"{name} prior on {parameter.name!r}: {name.lower()} on [{low}, {high}] (the parameter's bounds "
            f"[{parameter.lower}, {parameter.upper}]) is improper (it does not normalise); give "
            f"{parameter.name!r} a proper prior, e.g. prior={{{parameter.name!r}: Normal(mean, std)}} "
            f"(or LogNormal/HalfNormal, or {name}(low, high) with finite limits)"
        )
    return low, high


def _check_within(prior: str, parameter: Parameter, low: float, high: float) -> None:
    if not low < high:
        raise ValueError(f"{prior} prior on {parameter.name!r}: low < high required; got "
                         f"low={low}, high={high}")
    if low < parameter.lower or high > parameter.upper:
        raise ValueError(
            f"{prior} prior on {parameter.name!r}: [{low}, {high}] is not inside the parameter "
            f"bounds [{parameter.lower}, {parameter.upper}]; widen the bounds "
            "(space.replace(name, lower=..., upper=...)) or narrow the prior"
        )


def _check_nonnegative(prior: str, parameter: Parameter) -> None:
    if parameter.lower < 0:
        raise ValueError(
            f"{prior} prior on {parameter.name!r}: the distribution lives on values >= 0, but "
            f"the bounds [{parameter.lower}, {parameter.upper}] include negative values; raise "
            "the lower bound to >= 0 or use Normal/Uniform"
        )


def default_prior(parameter: Parameter) -> AbstractPrior:
    """The prior a parameter gets when none is named: uniform in its internal coordinate
    on the bounds (`LogUniform` for log-scale parameters, `Uniform` otherwise), as the
    problem's ``prior="uniform"``.

    Raises:
        ValueError: the parameter has an infinite bound (or a log-scale one reaches 0), where
            that prior is improper.
    """
    prior = LogUniform() if parameter.log_scale else Uniform()
    return prior._bind(parameter)


class ParameterPriors(eqx.Module):
    """Priors bound to parameters: the joint (independent) prior, truncated to the bounds.

    Built by `bind_priors`; ``names`` are ordered like the vectors it takes.
    """

    priors: tuple[AbstractPrior, ...]
    parameters: tuple[Parameter, ...] = eqx.field(static=True)
    log_mass: tuple[float, ...] = eqx.field(static=True)  # log P(lower <= θ <= upper)

    @property
    def n(self) -> int:
        return len(self.parameters)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def as_dict(self) -> dict[str, AbstractPrior]:
        """``{name: prior}`` (bound, defaults resolved)."""
        return dict(zip(self.names, self.priors))

    def log_prob(self, theta: Float[ArrayLike, " n"]) -> Float[Array, ""]:
        """Joint log density in physical units, truncated to the bounds (-inf outside)."""
        theta = jnp.asarray(theta)
        total = jnp.zeros((), dtype=theta.dtype)
        for i, (prior, p) in enumerate(zip(self.priors, self.parameters)):
            inside = _inside(theta[i], p.lower, p.upper)
            safe = jnp.where(inside, theta[i], p.nominal)  # no NaN gradients from outside
            total = total + jnp.where(inside, prior.log_prob(safe) - self.log_mass[i], -jnp.inf)
        return total

    def log_prob_internal(self, theta_internal: Float[ArrayLike, " n"]) -> Float[Array, ""]:
        """Joint log density of the internal coordinates (log-Jacobian included), -inf
        outside the internal bounds; there the gradient is 0, never NaN."""
        z = jnp.asarray(theta_internal)
        total = jnp.zeros((), dtype=z.dtype)
        for i, (prior, p) in enumerate(zip(self.priors, self.parameters)):
            inside = _inside(z[i], p.lower_internal, p.upper_internal)
            safe = jnp.where(inside, z[i], p.nominal_internal)
            value = prior.log_prob_internal(safe, p) - self.log_mass[i]
            total = total + jnp.where(inside, value, -jnp.inf)
        return total


def bind_priors(priors: Mapping[str, AbstractPrior], space: ParameterSpace,
                what: str = "prior") -> ParameterPriors:
    """Bind ``{name: prior}`` to the parameters of ``space`` (missing names get
    `default_prior`), check supports and compute the truncation masses.

    Args:
        priors: ``{name: AbstractPrior}``; every name must be in ``space``.
        space: the parameters, in the order of the vectors the result takes.
        what: label for error messages.

    Returns:
        `ParameterPriors` over ``space.names``.

    Raises:
        ValueError: a name not in ``space``; a value that is not a prior; a support that
            does not fit the bounds (see the module doc); no prior mass inside the bounds.

    Warns:
        PriorTruncationWarning: a prior puts more than 1 % of its mass outside the bounds
            (message: the parameter, the percentage, the fix).
    """
    if not isinstance(priors, Mapping):
        raise ValueError(f"{what}: expected a {{name: prior}} dict; got {type(priors).__name__}")
    for name, prior in priors.items():
        check_names(what, [name], space.names)
        if not isinstance(prior, AbstractPrior):
            raise ValueError(
                f"{what}: the prior of {name!r} must be a jcalib.probability prior (Uniform, "
                f"LogUniform, Normal, LogNormal, HalfNormal); got {type(prior).__name__}"
            )
    bound, log_mass = [], []
    for p in space:
        if p.name not in priors and not p.has_box:
            raise ValueError(
                f"{what}: {p.name!r} has no prior and its default (uniform in the internal coordinate "
                f"on the bounds [{p.lower}, {p.upper}]) is improper, that coordinate being unbounded; give "
                f"it a proper prior, e.g. prior={{{p.name!r}: Normal(mean, std)}} (jcalib.probability.priors)"
            )
        prior = priors[p.name]._bind(p) if p.name in priors else default_prior(p)
        log_m = _log_mass(prior, p)
        if not log_m > _MIN_LOG_MASS:
            raise ValueError(
                f"{what}: the {prior._name()} prior on {p.name!r} has (almost) no mass inside the "
                f"bounds [{p.lower}, {p.upper}] (probability {math.exp(log_m):.3g}); move the "
                "prior or widen the bounds"
            )
        _warn_truncation(what, prior, p, log_m)
        bound.append(prior)
        log_mass.append(log_m)
    return ParameterPriors(priors=tuple(bound), parameters=space.parameters, log_mass=tuple(log_mass))


def truncation_fraction(prior: AbstractPrior, parameter: Parameter) -> float:
    """The fraction of ``prior``'s mass outside ``parameter``'s bounds (0 for the default
    priors and for `Uniform`/`LogUniform` inside the bounds).

    Example:
        >>> p = Parameter("sigma", 0.1, 1e-3, 1.0, log_scale=True)
        >>> round(truncation_fraction(LogNormal(-1.0, 1.0), p), 4)
        0.1587
    """
    return -math.expm1(_log_mass(prior._bind(parameter), parameter))


def _log_mass(prior: AbstractPrior, p: Parameter) -> float:
    """log P(lower <= θ <= upper) under the (bound) prior."""
    if isinstance(prior, Normal):  # accurate in the far tails
        return float(_log_diff_ndtr((p.lower - prior.mean) / prior.std, (p.upper - prior.mean) / prior.std))
    dist = prior._scipy()
    mass = dist.cdf(p.upper) - dist.cdf(p.lower)
    return float(np.log(mass)) if mass > 0 else -math.inf


def _warn_truncation(what: str, prior: AbstractPrior, p: Parameter, log_m: float) -> None:
    fraction = -math.expm1(log_m)
    if not fraction > TRUNCATION_WARNING_FRACTION:
        return
    bounds = f"[{p.lower}, {p.upper}]"
    if (p.lower == 0 and math.isinf(p.upper)) or (math.isinf(p.lower) and p.upper == 0):  # a half-line already
        warn_user(f"{what}: {prior._name()} prior on {p.name!r}: {100 * fraction:.1f} % of its mass lies outside the "
                  f"half-line {bounds} of the parameter, so the prior is truncated to it (as Stan does for a "
                  "constrained parameter); for a prior that lives there, use LogNormal, LogUniform or HalfNormal",
                  PriorTruncationWarning)
        return
    if isinstance(prior, Normal) and not p.lower <= prior.mean <= p.upper:
        what_happens = (f"the mean {prior.mean} lies outside the bounds {bounds}, so {100 * fraction:.1f} % of its "
                        "mass lies outside them and the truncated prior piles up at one bound")
    else:
        what_happens = (f"{100 * fraction:.1f} % of its mass lies outside the bounds {bounds} (the prior is "
                        "truncated to them and renormalised)")
    warn_user(
        f"{what}: {prior._name()} prior on {p.name!r}: {what_happens}; widen the bounds (space.replace(name, "
        "lower=..., upper=...), or noise_parameters={output: (lower, upper)} for a noise level) or change the prior",
        PriorTruncationWarning)


@contextlib.contextmanager
def quiet_truncation():
    """No `PriorTruncationWarning` inside: for problems derived from one whose priors were
    already checked (its `fix`, a joint problem's experiments), which would repeat the warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PriorTruncationWarning)
        yield


class GaussianPrior(eqx.Module):
    """Independent Gaussian priors on the *internal* coordinates of the free parameters.

    For a log-scale parameter the prior is on ``log(theta)`` (a log-normal in physical
    units). The prior is not truncated to the parameter bounds, but the model refuses
    parameters outside them (its bounds check), so the log likelihood is -inf there; build
    the problem on ``model.with_bounds_check(False)`` to let the posterior extend beyond.

    Args:
        mean: ``{name: mean}`` or an array ordered as the problem's ``free_names``.
        std: ``{name: std}`` (same names as ``mean``), a scalar for all, or an array like
            ``mean``; positive.
        names: names of array entries (None: the problem's ``free_names``).

    With dicts, names of parameters that a problem fixes are ignored, so the same prior
    serves after `CalibrationProblem.fix`.

    Example:
        >>> prior = GaussianPrior({"kab": -9.2, "kac": -11.5}, 1.0)
        >>> prior.names
        ('kab', 'kac')
    """

    mean: Float[Array, " n"]
    std: Float[Array, " n"]
    names: tuple[str, ...] | None = eqx.field(static=True)

    def __init__(self, mean, std, names: Sequence[str] | None = None):
        if isinstance(mean, Mapping):
            if names is not None:
                raise ValueError("GaussianPrior: pass names only with array mean and std")
            names = tuple(mean)
            mean_np = np.array([float(mean[n]) for n in names], dtype=np.float64)
            if isinstance(std, Mapping):
                if set(std) != set(names):
                    raise ValueError(
                        f"GaussianPrior: mean and std must name the same parameters; got mean "
                        f"{sorted(names)}, std {sorted(std)}"
                    )
                std_np = np.array([float(std[n]) for n in names], dtype=np.float64)
            else:
                std_np = np.array(std, dtype=np.float64)
        else:
            if isinstance(std, Mapping):
                raise ValueError("GaussianPrior: std is a dict but mean is not; pass both by name")
            mean_np = np.array(mean, dtype=np.float64)
            std_np = np.array(std, dtype=np.float64)
            if mean_np.ndim != 1 or mean_np.size == 0:
                raise ValueError(
                    f"GaussianPrior: mean must be a dict or a non-empty 1-D array; got shape "
                    f"{mean_np.shape}"
                )
            if names is not None:
                names = (names,) if isinstance(names, str) else tuple(names)
                if len(names) != mean_np.size:
                    raise ValueError(
                        f"GaussianPrior: {len(names)} names for {mean_np.size} means"
                    )
        if std_np.ndim == 0:
            std_np = np.full(mean_np.shape, float(std_np))
        if std_np.shape != mean_np.shape:
            raise ValueError(
                f"GaussianPrior: std must be a scalar or have the shape of mean {mean_np.shape}; "
                f"got shape {std_np.shape}"
            )
        if not np.all(np.isfinite(mean_np)):
            raise ValueError(f"GaussianPrior: mean must be finite; got {mean_np}")
        if not np.all(np.isfinite(std_np) & (std_np > 0)):
            raise ValueError(f"GaussianPrior: std must be positive and finite; got {std_np}")
        self.mean = jnp.asarray(mean_np)
        self.std = jnp.asarray(std_np)
        self.names = names

    def log_prob(self, theta_internal: Float[Array, " n"]) -> Float[Array, ""]:
        """Sum of the normal log densities."""
        z = (theta_internal - self.mean) / self.std
        n = self.mean.shape[0]
        return -0.5 * jnp.sum(z**2) - jnp.sum(jnp.log(self.std)) - 0.5 * n * math.log(2.0 * math.pi)

    def _resolve(self, free_names: tuple[str, ...], known: tuple[str, ...]) -> GaussianPrior:
        """This prior for exactly ``free_names``, in that order."""
        if self.names is None:
            if self.mean.shape[0] != len(free_names):
                raise ValueError(
                    f"prior: GaussianPrior has {self.mean.shape[0]} entries but there are "
                    f"{len(free_names)} free parameters ({', '.join(free_names)}); give mean "
                    "and std by name"
                )
            return GaussianPrior(self.mean, self.std, names=free_names)
        check_names("prior", self.names, known)
        missing = [n for n in free_names if n not in self.names]
        if missing:
            raise ValueError(
                f"prior: GaussianPrior has no entry for the free parameter(s) {', '.join(repr(k) for k in missing)}"
            )
        idx = [self.names.index(n) for n in free_names]
        return GaussianPrior(np.asarray(self.mean)[idx], np.asarray(self.std)[idx],
                             names=free_names)


def _log_diff_ndtr(a: float, b: float) -> float:
    """log(Φ(b) - Φ(a)) for a < b, stable in both tails."""
    if a > 0:  # use the upper tail: Φ(b) - Φ(a) = Φ(-a) - Φ(-b)
        a, b = -b, -a
    log_b, log_a = special.log_ndtr(b), special.log_ndtr(a)
    return float(log_b + np.log1p(-np.exp(log_a - log_b)))
