"""Parameters and parameter spaces: bounds, units, log scale, coordinate maps, samplers.

Three coordinates are used throughout jcalib:

- *physical*: the values a user reads and writes, in the parameter's unit;
- *internal*: what methods iterate on (`Parameter.transform`):

  - log-scale parameter on ``[a, b]`` (``0 <= a < b <= inf``): ``z = log(theta)``
    (natural log), internal bounds ``[log a, log b]`` (``log 0 = -inf``);
  - linear parameter on a finite ``[a, b]`` or on ``(-inf, inf)``: ``z = theta``;
  - linear parameter on ``(a, inf)``: ``z = log(theta - a)``, unbounded;
  - linear parameter on ``(-inf, b)``: ``z = -log(b - theta)``, unbounded;

  so a parameter with an infinite bound (a rate constant > 0, a location on the real line)
  has unconstrained internal coordinates and no artificial box. Densities in internal
  coordinates carry the log-Jacobian ``log |dtheta/dz|`` (`ParameterSpace.log_jacobian`:
  ``z`` for log-scale and ``(a, inf)`` parameters, ``-z`` for ``(-inf, b)``, 0 otherwise);
- *unit cube*: ``[0, 1]`` per parameter, linear in the internal coordinate (so a
  log-scale parameter is log-uniform between its bounds). Only parameters with a finite
  internal box have one: `ParameterSpace.to_unit`, `~ParameterSpace.from_unit` and
  `~ParameterSpace.sample` (uniform, LHS, Sobol; hence Sobol indices, training sets and
  differential evolution) refuse the others (`ParameterSpace.check_box`).

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> space = ParameterSpace([Parameter("k", 1e-4, 1e-6, 1e-3, "1/s", log_scale=True),
    ...                         Parameter("f", 0.5, 0.1, 1.0)])
    >>> space.names
    ('k', 'f')
    >>> [float(v) for v in space.from_unit(np.array([0.5, 0.5]))]  # doctest: +ELLIPSIS
    [3.16...e-05, 0.55]
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray
from scipy.stats import qmc

__all__ = ["Parameter", "ParameterSpace", "check_names"]


_TINY = float(np.finfo(np.float64).tiny)  # smallest normal float64, 2.2e-308
_COPY_NAME = re.compile(r"[A-Za-z_]\w*\[[^\[\]]+\]")  # one experiment's copy: "offset[recipe 2]"


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One model parameter.

    Args:
        name: identifier, unique within a space; or ``identifier[label]``, the name of one
            experiment's copy of a parameter in a joint problem (``offset[recipe 2]``).
        nominal: default value in physical units (finite, inside the bounds; strictly inside
            on an open side: above 0 for a log-scale parameter, above ``lower`` / below
            ``upper`` for a half-open linear one).
        lower: lower bound in physical units, finite or ``-inf`` (``>= 0`` when
            ``log_scale``; 0 means unbounded below in ``log(theta)``).
        upper: upper bound in physical units (> ``lower``), finite or ``inf``.
        unit: unit string for tables and plots.
        log_scale: work on ``log(theta)`` internally (parameters spanning decades).

    Raises:
        ValueError: NaN or infinite values where they are not allowed, ``lower >= upper``,
            nominal outside the bounds or a negative bound of a log-scale parameter; the
            message names the parameter.

    Example:
        >>> Parameter("rate", 0.3, 0.0, math.inf, log_scale=True).transform
        'log'
        >>> Parameter("offset", 2.0, 1.0, math.inf).transform
        'lower'
    """

    name: str
    nominal: float
    lower: float
    upper: float
    unit: str = ""
    log_scale: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not (self.name.isidentifier() or _COPY_NAME.fullmatch(self.name)):
            raise ValueError(f"Parameter name must be an identifier string (or 'identifier[label]'); got "
                             f"{self.name!r}")
        allowed = {"nominal": "finite", "lower": "finite or -inf", "upper": "finite or inf"}
        for field, what in allowed.items():
            value = float(getattr(self, field))
            if math.isnan(value) or (math.isinf(value) and (field == "nominal"
                                                            or (value > 0) == (field == "lower"))):
                raise ValueError(f"Parameter {self.name!r}: {field} must be {what}; got {value}")
            if value != 0.0 and abs(value) < _TINY:  # XLA flushes subnormals to zero on CPU and GPU
                raise ValueError(f"Parameter {self.name!r}: {field} = {value} is subnormal (|value| < "
                                 f"{_TINY:.4g}), which JAX computes as 0; use 0 or rescale the parameter's unit")
            object.__setattr__(self, field, value)
        if not self.lower < self.upper:
            raise ValueError(
                f"Parameter {self.name!r}: lower < upper required; got lower={self.lower}, "
                f"upper={self.upper}"
            )
        if not self.lower <= self.nominal <= self.upper:
            raise ValueError(
                f"Parameter {self.name!r}: nominal {self.nominal} lies outside its bounds "
                f"[{self.lower}, {self.upper}]"
            )
        if self.log_scale and self.lower < 0:
            raise ValueError(
                f"Parameter {self.name!r}: log-scale parameters need bounds >= 0; got "
                f"lower={self.lower} (use log_scale=False or a lower bound >= 0)"
            )
        open_side = {"log": self.lower == 0.0, "lower": True, "upper": True}.get(self.transform, False)
        edge = self.upper if self.transform == "upper" else self.lower
        if open_side and self.nominal == edge:
            raise ValueError(
                f"Parameter {self.name!r}: nominal {self.nominal} sits on the open bound {edge}, which "
                f"the internal coordinate ({self.transform!r} transform) maps to infinity; pick a nominal "
                "strictly inside the bounds"
            )

    # --- coordinate map of this parameter ---------------------------------------------------
    @property
    def transform(self) -> str:
        """The map to the internal coordinate (see the module doc): ``"log"`` (log-scale),
        ``"identity"`` (linear, both bounds finite or both infinite), ``"lower"`` (linear on
        ``(a, inf)``: ``log(theta - a)``) or ``"upper"`` (linear on ``(-inf, b)``:
        ``-log(b - theta)``)."""
        if self.log_scale:
            return "log"
        lower_finite, upper_finite = math.isfinite(self.lower), math.isfinite(self.upper)
        if lower_finite == upper_finite:
            return "identity"
        return "lower" if lower_finite else "upper"

    @property
    def lower_internal(self) -> float:
        """The lower bound in internal coordinates (``-inf`` where unbounded)."""
        if self.transform == "log":
            return math.log(self.lower) if self.lower > 0 else -math.inf
        return self.lower if self.transform == "identity" else -math.inf

    @property
    def upper_internal(self) -> float:
        """The upper bound in internal coordinates (``inf`` where unbounded)."""
        if self.transform == "log":
            return math.log(self.upper) if math.isfinite(self.upper) else math.inf
        return self.upper if self.transform == "identity" else math.inf

    @property
    def nominal_internal(self) -> float:
        """The nominal value in internal coordinates (a Python float, finite)."""
        kind = self.transform
        if kind == "log":
            return math.log(self.nominal)
        if kind == "lower":
            return math.log(self.nominal - self.lower)
        if kind == "upper":
            return -math.log(self.upper - self.nominal)
        return self.nominal

    @property
    def has_box(self) -> bool:
        """Whether both internal bounds are finite (what uniform, LHS and Sobol sampling need)."""
        return math.isfinite(self.lower_internal) and math.isfinite(self.upper_internal)

    def to_internal(self, theta: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """Physical -> internal, elementwise (see `transform`)."""
        theta = jnp.asarray(theta)
        kind = self.transform
        if kind == "log":
            return jnp.log(theta)
        if kind == "lower":
            return jnp.log(theta - self.lower)
        if kind == "upper":
            return -jnp.log(self.upper - theta)
        return theta

    def to_physical(self, theta_internal: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """Internal -> physical, elementwise, the inverse of `to_internal`."""
        z = jnp.asarray(theta_internal)
        kind = self.transform
        if kind == "log":
            return jnp.exp(z)
        if kind == "lower":
            return self.lower + jnp.exp(z)
        if kind == "upper":
            return self.upper - jnp.exp(-z)
        return z

    def log_jacobian(self, theta_internal: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
        """``log |d theta / d z|`` at ``z = theta_internal``, elementwise: ``z`` for the
        ``"log"`` and ``"lower"`` transforms, ``-z`` for ``"upper"``, 0 for ``"identity"``."""
        z = jnp.asarray(theta_internal)
        kind = self.transform
        if kind in ("log", "lower"):
            return z
        if kind == "upper":
            return -z
        return jnp.zeros_like(z)


@dataclasses.dataclass(frozen=True)
class ParameterSpace:
    """An ordered, immutable tuple of `Parameter`s (hashable, so it can be a static field).

    Vectors ``theta`` are ordered as ``names``; batched functions take ``(n, n_params)``.
    """

    parameters: tuple[Parameter, ...]

    def __init__(self, parameters: Iterable[Parameter]):
        parameters = tuple(parameters)  # none: a model with nothing to calibrate (it still simulates)
        for p in parameters:
            if not isinstance(p, Parameter):
                raise ValueError(f"ParameterSpace takes Parameter objects; got {p!r}")
        names = [p.name for p in parameters]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"ParameterSpace: duplicate parameter names {duplicates}")
        object.__setattr__(self, "parameters", parameters)

    # --- static description -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.parameters)

    def __iter__(self):
        return iter(self.parameters)

    def __getitem__(self, name: str) -> Parameter:
        return self.parameters[self.index(name)]

    def _per_parameter(self, field: str) -> np.ndarray:
        """One float64 entry per parameter: its ``field``."""
        return np.array([getattr(p, field) for p in self.parameters], dtype=np.float64)

    @property
    def n_params(self) -> int:
        return len(self.parameters)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(p.unit for p in self.parameters)

    @property
    def nominal(self) -> np.ndarray:
        """Nominal values, shape ``(n_params,)``, float64 NumPy."""
        return self._per_parameter("nominal")

    @property
    def lower(self) -> np.ndarray:
        return self._per_parameter("lower")

    @property
    def upper(self) -> np.ndarray:
        return self._per_parameter("upper")

    @property
    def log_scale(self) -> np.ndarray:
        """Boolean mask, shape ``(n_params,)``."""
        return np.array([p.log_scale for p in self.parameters], dtype=bool)

    def index(self, name: str) -> int:
        """Position of ``name``; ``ValueError`` listing the known names otherwise."""
        try:
            return self.names.index(name)
        except ValueError:
            known = ", ".join(repr(n) for n in self.names)
            raise ValueError(f"unknown parameter {name!r}; known: {known}") from None

    def subset(self, names: Sequence[str]) -> ParameterSpace:
        """The parameters ``names`` in the given order."""
        if isinstance(names, str):
            names = [names]
        return ParameterSpace(self.parameters[self.index(n)] for n in names)

    def replace(self, name: str, **changes) -> ParameterSpace:
        """A copy with one parameter's fields changed, e.g. ``replace("k", lower=1e-8)``."""
        i = self.index(name)
        new = dataclasses.replace(self.parameters[i], **changes)
        return ParameterSpace(self.parameters[:i] + (new,) + self.parameters[i + 1 :])

    def to_vector(self, values: Mapping[str, float], default: ArrayLike | None = None) -> np.ndarray:
        """Physical vector from a ``{name: value}`` mapping; missing names take ``default``
        (nominal values when None)."""
        theta = self.nominal if default is None else np.array(default, dtype=np.float64)
        for name, value in values.items():
            theta[self.index(name)] = float(value)
        return theta

    def to_dict(self, theta: ArrayLike) -> dict[str, float]:
        """``{name: value}`` of one physical vector."""
        theta = np.asarray(self.check_shape(theta, "theta"))
        return {n: float(v) for n, v in zip(self.names, theta)}

    def table(self) -> list[dict]:
        """Rows for printing: name, nominal, lower, upper, unit, log_scale."""
        return [dataclasses.asdict(p) for p in self.parameters]

    def check_shape(self, theta: ArrayLike, what: str = "theta", batched: bool = False):
        """Return ``theta`` after checking its last axis is ``n_params`` (and ``ndim``)."""
        ndim = 2 if batched else 1
        shape = jnp.shape(theta)
        if len(shape) != ndim or shape[-1] != self.n_params:
            expected = "(n, n_params)" if batched else "(n_params,)"
            raise ValueError(
                f"{what} must have shape {expected} with n_params={self.n_params} "
                f"({', '.join(self.names)}); got shape {shape}"
            )
        return theta

    # --- coordinate maps (jittable) -------------------------------------------------------
    def to_internal(self, theta: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """Physical -> internal, per parameter (`Parameter.transform`: ``log`` on log-scale
        parameters, identity on boxed linear ones, a log map on half-open ones)."""
        theta = jnp.asarray(theta)
        if all(p.transform == "identity" for p in self.parameters):
            return theta
        return jnp.stack([p.to_internal(theta[..., i]) for i, p in enumerate(self.parameters)], axis=-1)

    def to_physical(self, theta_internal: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """Internal -> physical, the inverse of `to_internal`."""
        z = jnp.asarray(theta_internal)
        if all(p.transform == "identity" for p in self.parameters):
            return z
        return jnp.stack([p.to_physical(z[..., i]) for i, p in enumerate(self.parameters)], axis=-1)

    def jacobian_diagonal(self, theta_internal: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """``d theta_j / d theta_internal_j`` per parameter (the map is elementwise and
        increasing): ``theta`` for log-scale parameters, ``theta - a`` / ``b - theta`` for
        half-open ones, 1 otherwise; e.g. the delta method's factor from internal to physical
        standard errors."""
        z = jnp.asarray(theta_internal)
        return jnp.stack([jnp.exp(p.log_jacobian(z[..., i])) for i, p in enumerate(self.parameters)], axis=-1)

    def log_jacobian(self, theta_internal: Float[ArrayLike, "... n_params"]) -> Float[Array, "..."]:
        """``log |det d theta / d theta_internal|``, shape ``theta_internal.shape[:-1]``: what a
        density in physical units gains when it is written in internal coordinates
        (``log p_z(z) = log p_theta(to_physical(z)) + log_jacobian(z)``)."""
        z = jnp.asarray(theta_internal)
        total = jnp.zeros(z.shape[:-1], dtype=z.dtype)
        for i, p in enumerate(self.parameters):
            total = total + p.log_jacobian(z[..., i])
        return total

    @property
    def lower_internal(self) -> np.ndarray:
        """Lower bounds in internal coordinates, ``-inf`` where unbounded."""
        return self._per_parameter("lower_internal")

    @property
    def upper_internal(self) -> np.ndarray:
        """Upper bounds in internal coordinates, ``inf`` where unbounded."""
        return self._per_parameter("upper_internal")

    @property
    def nominal_internal(self) -> np.ndarray:
        """Nominal values in internal coordinates, shape ``(n_params,)``, float64 NumPy."""
        return self._per_parameter("nominal_internal")

    @property
    def has_box(self) -> bool:
        """Whether every parameter has finite internal bounds (`Parameter.has_box`)."""
        return all(p.has_box for p in self.parameters)

    def check_box(self, method: str) -> None:
        """Refuse parameters without a finite internal box, for a method that draws from it.

        Args:
            method: the method, for the message (e.g. ``"sobol_indices"``).

        Raises:
            ValueError: naming the method, the first such parameter, its bounds and the fix.
        """
        for p in self.parameters:
            if not p.has_box:
                raise ValueError(
                    f"{method} needs finite bounds, but parameter {p.name!r} has "
                    f"bounds [{p.lower}, {p.upper}]{' on a log scale' if p.log_scale else ''}; give it "
                    f"finite bounds for this method (space.replace({p.name!r}, lower=..., upper=...); "
                    "> 0 on a log scale) or fix it"
                )

    def to_unit(self, theta: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """Physical -> unit cube (linear in the internal coordinate); needs a finite box."""
        self.check_box("ParameterSpace.to_unit")
        z = self.to_internal(theta)
        lo, hi = _like(self.lower_internal, z), _like(self.upper_internal, z)
        return (z - lo) / (hi - lo)

    def from_unit(self, u: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """Unit cube -> physical; the result is clipped into the bounds against round-off.
        Needs a finite box."""
        self.check_box("ParameterSpace.from_unit")
        u = jnp.asarray(u)
        lo, hi = _like(self.lower_internal, u), _like(self.upper_internal, u)
        theta = self.to_physical(lo + u * (hi - lo))
        return jnp.clip(theta, _like(self.lower, u), _like(self.upper, u))

    def contains(self, theta: Float[ArrayLike, "... n_params"]) -> Array:
        """True where every component lies within the bounds, shape ``theta.shape[:-1]``."""
        theta = jnp.asarray(theta)
        return jnp.all((theta >= _like(self.lower, theta)) & (theta <= _like(self.upper, theta)),
                       axis=-1)

    # --- samplers -------------------------------------------------------------------------
    def sample(
        self, key: PRNGKeyArray, n: int, method: str = "uniform"
    ) -> Float[Array, "n n_params"]:
        """``n`` physical samples inside the bounds (uniform in internal coordinates).

        Args:
            key: a ``jax.random`` key; the same key gives the same samples.
            n: number of samples.
            method: ``"uniform"`` (i.i.d.), ``"lhs"`` (Latin hypercube: each of the ``n``
                equal strata of every parameter holds exactly one sample) or ``"sobol"``
                (scrambled Sobol sequence; ``n`` a power of two keeps its balance).

        Raises:
            ValueError: a parameter without a finite internal box (`check_box`), bad ``n``
                or ``method``.
        """
        self.check_box(f"ParameterSpace.sample(method={method!r})")
        return self.from_unit(unit_samples(key, n, self.n_params, method))


def check_names(what: str, names: Sequence[str], known: Sequence[str]) -> None:
    """Refuse a name that is not ``known`` or that ``names`` gives twice.

    Raises:
        ValueError: ``"{what}: unknown parameter 'x'; known: 'a', 'b'"`` or
            ``"{what}: duplicate names 'a'"``.

    Example:
        >>> check_names("free", ["a"], ["a", "b"])
        >>> check_names("free", ["c"], ["a", "b"])
        Traceback (most recent call last):
        ValueError: free: unknown parameter 'c'; known: 'a', 'b'
    """
    for name in names:
        if name not in known:
            raise ValueError(f"{what}: unknown parameter {name!r}; known: {', '.join(repr(n) for n in known)}")
    duplicates = sorted({n for n in names if list(names).count(n) > 1})
    if duplicates:
        raise ValueError(f"{what}: duplicate names {', '.join(repr(n) for n in duplicates)}")


def unit_samples(key: PRNGKeyArray, n: int, n_dims: int, method: str = "uniform") -> Float[Array, "n n_dims"]:
    """Samples in ``[0, 1)^n_dims`` by ``method`` (see `ParameterSpace.sample`)."""
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"sample(): n must be a positive integer; got {n!r}")
    if method == "uniform":
        return jax.random.uniform(key, (n, n_dims), dtype=_float_dtype())
    if method == "lhs":
        perm_key, jitter_key = jax.random.split(key)
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(perm_key, n_dims))
        jitter = jax.random.uniform(jitter_key, (n_dims, n), dtype=_float_dtype())
        return ((perms.astype(jitter.dtype) + jitter) / n).T
    if method == "sobol":
        seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
        sampler = qmc.Sobol(n_dims, scramble=True, rng=np.random.default_rng(seed))
        return jnp.asarray(sampler.random(n), dtype=_float_dtype())
    raise ValueError(f"sample(): unknown method {method!r}; use 'uniform', 'lhs' or 'sobol'")


def _like(values: np.ndarray, x: Array) -> Array:
    """Broadcast per-parameter ``values`` to ``x``'s shape (and float dtype) explicitly."""
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) or values.dtype == bool else None
    return jnp.broadcast_to(jnp.asarray(values, dtype=dtype), x.shape)


def _float_dtype():
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
