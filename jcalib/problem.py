"""CalibrationProblem: a model, measurements, which parameters are free, and how to weigh misfit.

Every method of a problem works on ``theta_internal``, the *internal* coordinates of the
free parameters (``log`` for log-scale parameters, see `jcalib.parameters`), ordered as
``problem.free_names``; fixed parameters keep their physical values. Residuals are taken
over the measured entries only (``measurements.mask``), in row-major (time, output) order.

Weightings (X measured, F simulated, σ from ``measurements.sigma``):

- ``"relative"``: r = (X - F) / X; ``loss`` is R_X = 1/(mT) Σ ((X - F)/X)² of Wulkow et al.
  2021, eq. 6 (mean over the measured entries); σ is the relative noise level.
- ``"absolute"``: r = X - F; σ is the standard deviation.
- ``"sigma"``: r = (X - F) / σ.

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> model = jcalib.models.get("four_substance_reactions")
    >>> data = jcalib.synthetic_measurements(jax.random.key(0), model,
    ...                                      model.parameters.nominal, sigma=0.01)
    >>> problem = CalibrationProblem(model, data, fixed={"kad": 5e-5})
    >>> problem.free_names, problem.n_observed
    (('kab', 'kac'), 88)
    >>> problem.residuals(problem.initial_internal()).shape
    (88,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jcalib.data import Measurements
from jcalib.model import AbstractModel
from jcalib.parameters import ParameterSpace

__all__ = ["CalibrationProblem", "GaussianPrior", "WEIGHTINGS"]

WEIGHTINGS = ("relative", "absolute", "sigma")
_LOG_2PI = math.log(2.0 * math.pi)


class GaussianPrior(eqx.Module):
    """Independent Gaussian priors on the *internal* coordinates of the free parameters.

    For a log-scale parameter the prior is on ``log(theta)`` (a log-normal in physical
    units). The prior is not truncated to the parameter bounds.

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
        return -0.5 * jnp.sum(z**2) - jnp.sum(jnp.log(self.std)) - 0.5 * n * _LOG_2PI

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
        for n in self.names:
            if n not in known:
                raise ValueError(f"prior: unknown parameter {n!r}; known: {_quoted(known)}")
        missing = [n for n in free_names if n not in self.names]
        if missing:
            raise ValueError(
                f"prior: GaussianPrior has no entry for the free parameter(s) {_quoted(missing)}"
            )
        idx = [self.names.index(n) for n in free_names]
        return GaussianPrior(np.asarray(self.mean)[idx], np.asarray(self.std)[idx],
                             names=free_names)


class CalibrationProblem(eqx.Module):
    """What to fit: model, measurements, free parameters, weighting and prior.

    Jittable and vmappable: pass a problem through ``eqx.filter_jit`` or close over it
    (``jax.jit(lambda z: problem.loss(z))``); ``jax.jit(problem.loss)`` does not work
    because JAX hashes the bound method's arrays.

    Args:
        model: any `AbstractModel`; it is re-timed to ``measurements.ts`` when they differ
            (its own ``experiment.mask`` is then not used; ``measurements.mask`` is).
        measurements: the data; its outputs must be the model's outputs.
        free: names of the estimated parameters, in the order of ``theta_internal``;
            None: all parameters not in ``fixed``, in model order.
        fixed: ``{name: physical value}`` of held parameters (finite; may lie outside
            the bounds, e.g. a rate fixed to 0); parameters neither free nor fixed keep
            their nominal values.
        weighting: ``"relative"``, ``"absolute"`` or ``"sigma"`` (see the module doc).
        prior: ``"uniform"`` (uniform in internal coordinates on the bounds, i.e.
            log-uniform for log-scale parameters) or a `GaussianPrior`.

    Raises:
        ValueError: outputs of measurements and model differ; unknown names in ``free``
            or ``fixed``; a name both free and fixed; no free parameter; unknown
            weighting; ``"sigma"`` weighting without ``measurements.sigma``;
            ``"relative"`` weighting with a measured value of 0; bad prior.
    """

    model: AbstractModel
    measurements: Measurements
    theta_fixed: Float[Array, " n_params"]
    observed_index: Int[Array, " n_observed"]
    x_observed: Float[Array, " n_observed"]
    sigma_observed: Float[Array, " n_observed"] | None
    prior: GaussianPrior | None  # None: uniform on the box
    free_names: tuple[str, ...] = eqx.field(static=True)
    weighting: str = eqx.field(static=True)

    def __init__(self, model: AbstractModel, measurements: Measurements,
                 free: Sequence[str] | None = None, fixed: Mapping[str, float] | None = None,
                 weighting: str = "relative", prior: str | GaussianPrior = "uniform"):
        if not isinstance(measurements, Measurements):
            raise ValueError(
                f"CalibrationProblem: measurements must be a Measurements; got "
                f"{type(measurements).__name__}"
            )
        if weighting not in WEIGHTINGS:
            raise ValueError(
                f"CalibrationProblem: weighting must be one of {WEIGHTINGS}; got {weighting!r}"
            )
        if measurements.n_outputs != model.n_outputs:
            raise ValueError(
                f"CalibrationProblem: measurements have {measurements.n_outputs} outputs but the "
                f"model has {model.n_outputs} ({', '.join(model.output_names)})"
            )
        if (measurements.output_names is not None
                and tuple(measurements.output_names) != tuple(model.output_names)):
            raise ValueError(
                f"CalibrationProblem: measurement output names {measurements.output_names} do not "
                f"match model.output_names {tuple(model.output_names)}"
            )
        ts = np.asarray(measurements.ts)
        if ts.shape != np.shape(model.ts) or not np.array_equal(ts, np.asarray(model.ts)):
            try:
                model = model.with_times(ts)
            except ValueError as e:
                raise ValueError(
                    f"CalibrationProblem: cannot observe the model at the measurement times: {e}"
                ) from None

        space = model.parameters
        known = space.names
        fixed = {} if fixed is None else fixed
        if not isinstance(fixed, Mapping):
            raise ValueError(f"fixed: expected a {{name: value}} dict; got {fixed!r}")
        for name, value in fixed.items():
            if name not in known:
                raise ValueError(f"fixed: unknown parameter {name!r}; known: {_quoted(known)}")
            if not math.isfinite(float(value)):
                raise ValueError(f"fixed: the value of {name!r} must be finite; got {value}")
        if free is None:
            free = tuple(n for n in known if n not in fixed)
        else:
            free = (free,) if isinstance(free, str) else tuple(free)
            for name in free:
                if name not in known:
                    raise ValueError(f"free: unknown parameter {name!r}; known: {_quoted(known)}")
            duplicates = sorted({n for n in free if free.count(n) > 1})
            if duplicates:
                raise ValueError(f"free: duplicate names {_quoted(duplicates)}")
        both = [n for n in free if n in fixed]
        if both:
            raise ValueError(
                f"CalibrationProblem: parameter(s) {_quoted(both)} both free and fixed; remove "
                "them from one of the two"
            )
        if not free:
            raise ValueError(
                "CalibrationProblem: no free parameters (every parameter is fixed); leave at "
                "least one out of fixed"
            )

        sigma_full = measurements.sigma_full()
        if weighting == "sigma" and sigma_full is None:
            raise ValueError(
                "CalibrationProblem: weighting='sigma' needs measurements.sigma; pass sigma to "
                "Measurements or use weighting='relative' or 'absolute'"
            )
        mask = np.asarray(measurements.mask).reshape(-1)
        index = np.flatnonzero(mask)
        x_obs = np.asarray(measurements.values).reshape(-1)[index]
        if weighting == "relative" and np.any(x_obs == 0):
            k = int(index[np.flatnonzero(x_obs == 0)[0]])
            i, j = divmod(k, measurements.n_outputs)
            raise ValueError(
                f"CalibrationProblem: weighting='relative' divides by the measured values, but "
                f"X = 0 at t={np.asarray(measurements.ts)[i]}, output "
                f"{model.output_names[j]!r}; use weighting='absolute' or 'sigma', or mask the "
                "entry out"
            )

        if isinstance(prior, str):
            if prior != "uniform":
                raise ValueError(
                    f"CalibrationProblem: prior must be 'uniform' or a GaussianPrior; got {prior!r}"
                )
            prior = None
        elif isinstance(prior, GaussianPrior):
            prior = prior._resolve(free, known)
        else:
            raise ValueError(
                f"CalibrationProblem: prior must be 'uniform' or a GaussianPrior; got "
                f"{type(prior).__name__}"
            )

        self.model = model
        self.measurements = measurements
        self.theta_fixed = jnp.asarray(space.to_vector({n: float(v) for n, v in fixed.items()}))
        self.observed_index = jnp.asarray(index)
        self.x_observed = jnp.asarray(x_obs)
        self.sigma_observed = (None if sigma_full is None
                               else jnp.asarray(np.asarray(sigma_full).reshape(-1)[index]))
        self.prior = prior
        self.free_names = free
        self.weighting = weighting

    # --- static description ----------------------------------------------------------------
    @property
    def space(self) -> ParameterSpace:
        """The free parameters (``model.parameters.subset(free_names)``)."""
        return self.model.parameters.subset(self.free_names)

    @property
    def n_free(self) -> int:
        return len(self.free_names)

    @property
    def n_observed(self) -> int:
        """Number of residuals: the measured entries."""
        return int(self.observed_index.shape[0])

    @property
    def fixed(self) -> dict[str, float]:
        """``{name: physical value}`` of every parameter that is not free."""
        theta = np.asarray(self.theta_fixed)
        return {n: float(theta[i]) for i, n in enumerate(self.model.parameters.names)
                if n not in self.free_names}

    def fix(self, values: Mapping[str, float]) -> CalibrationProblem:
        """A new problem with the parameters in ``values`` (physical) fixed too.

        Example: ``problem.fix({"kad": 5e-5})``. Names already fixed get the new value.
        """
        known = self.model.parameters.names
        if not isinstance(values, Mapping):
            raise ValueError(f"fix(): expected a {{name: value}} dict; got {values!r}")
        for name in values:
            if name not in known:
                raise ValueError(f"fix(): unknown parameter {name!r}; known: {_quoted(known)}")
        free = tuple(n for n in self.free_names if n not in values)
        if not free:
            raise ValueError(
                f"fix(): fixing {_quoted(list(values))} leaves no free parameter"
            )
        fixed = {**self.fixed, **{n: float(v) for n, v in values.items()}}
        return CalibrationProblem(self.model, self.measurements, free=free, fixed=fixed,
                                  weighting=self.weighting,
                                  prior="uniform" if self.prior is None else self.prior)

    # --- coordinates ----------------------------------------------------------------------
    def _check(self, theta_internal, what: str = "theta_internal"):
        z = jnp.asarray(theta_internal)
        self.space.check_shape(z, what)
        if z.dtype != jnp.float64:
            raise ValueError(
                f"{what} must be float64 (got {z.dtype}); call "
                "jax.config.update('jax_enable_x64', True) before creating arrays"
            )
        return z

    def theta_full(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_params"]:
        """The model's full physical parameter vector: free values mapped, fixed values kept."""
        z = self._check(theta_internal)
        index = np.array([self.model.parameters.index(n) for n in self.free_names])
        return self.theta_fixed.at[index].set(self.space.to_physical(z))

    def to_physical(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_free"]:
        """Internal -> physical values of the free parameters."""
        return self.space.to_physical(self._check(theta_internal))

    def to_internal(self, theta: Float[ArrayLike, " n_free"]) -> Float[Array, " n_free"]:
        """Physical values of the free parameters -> internal coordinates."""
        return self.space.to_internal(self._check(theta, "theta"))

    def initial_internal(self) -> Float[Array, " n_free"]:
        """Internal coordinates of the nominal values (a starting point)."""
        return self.space.to_internal(jnp.asarray(self.space.nominal))

    def estimate_dict(self, theta_internal: Float[ArrayLike, " n_free"],
                      include_fixed: bool = False) -> dict[str, float]:
        """``{name: physical value}`` of the free parameters (and the fixed ones if asked)."""
        theta = np.asarray(self.to_physical(theta_internal))
        out = {n: float(v) for n, v in zip(self.free_names, theta)}
        return {**out, **self.fixed} if include_fixed else out

    # --- misfit ---------------------------------------------------------------------------
    def simulate(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, "n_times n_outputs"]:
        """Model outputs at the measurement times (NaN if the solve failed)."""
        return _jitted("_simulate_impl", self, self._check(theta_internal))

    def residuals(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_observed"]:
        """Weighted residuals of the measured entries; NaN if the solve failed."""
        return _jitted("_residuals_impl", self, self._check(theta_internal))

    def jacobian(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, "n_observed n_free"]:
        """d residuals / d theta_internal by forward-mode autodiff through the solver."""
        return _jitted("_jacobian_impl", self, self._check(theta_internal))

    def loss(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Mean squared residual; for ``"relative"`` this is R_X (Wulkow 2021, eq. 6)."""
        return _jitted("_loss_impl", self, self._check(theta_internal))

    # --- probability ----------------------------------------------------------------------
    def log_likelihood(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Gaussian log likelihood of the measured entries; -inf when the solve fails.

        ``"relative"``: F ~ N(X, (σ X)²) per entry, i.e. exp(-R_X n_obs / (2σ²)) for a
        constant σ as in Wulkow 2021, normalised as a density:
        -½ Σ r²/σ² - Σ log(σ |X|) - n/2 log 2π. ``"absolute"``: X ~ N(F, σ²).
        ``"sigma"``: the same, with r = (X - F)/σ.

        Raises:
            ValueError: ``measurements.sigma`` is None (the noise level is needed).
        """
        self._check_sigma("log_likelihood")
        return _jitted("_log_likelihood_impl", self, self._check(theta_internal))

    def log_prior(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Log prior density in internal coordinates; -inf outside the box (uniform prior)."""
        return self._log_prior_impl(self._check(theta_internal))

    def log_posterior(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Unnormalised log posterior, ``log_prior + log_likelihood``.

        With the uniform prior the model is not evaluated outside the box (the likelihood
        is taken at the box centre and discarded), so the value there is -inf, never NaN,
        and the gradient there is finite (zero). A failed solve inside the box gives -inf.

        Raises:
            ValueError: ``measurements.sigma`` is None (the noise level is needed).
        """
        self._check_sigma("log_posterior")
        return _jitted("_log_posterior_impl", self, self._check(theta_internal))

    # --- implementations (pure; called through one filter_jit, so eager calls compile once) --
    def _check_sigma(self, what: str) -> None:
        if self.sigma_observed is None:
            raise ValueError(
                f"{what}: measurements.sigma is None, but the likelihood needs the noise "
                "level; pass sigma to Measurements"
            )

    def _residuals_with(self, model: AbstractModel, z) -> Float[Array, " n_observed"]:
        f = model.simulate(self.theta_full(z)).reshape(-1)[self.observed_index]
        x = self.x_observed
        if self.weighting == "relative":
            return (x - f) / x
        if self.weighting == "absolute":
            return x - f
        return (x - f) / self.sigma_observed

    def _simulate_impl(self, z):
        return self.model.simulate(self.theta_full(z))

    def _residuals_impl(self, z):
        return self._residuals_with(self.model, z)

    def _jacobian_impl(self, z):
        forward = self.model.forward_mode()
        return jax.jacfwd(lambda zz: self._residuals_with(forward, zz))(z)

    def _loss_impl(self, z):
        return jnp.mean(self._residuals_impl(z) ** 2)

    def _log_likelihood_impl(self, z):
        r = self._residuals_impl(z)
        sigma = self.sigma_observed
        if self.weighting == "sigma":
            scaled, scale = r, sigma
        elif self.weighting == "relative":
            scaled, scale = r / sigma, sigma * jnp.abs(self.x_observed)
        else:
            scaled, scale = r / sigma, sigma
        n = self.n_observed
        value = -0.5 * jnp.sum(scaled**2) - jnp.sum(jnp.log(scale)) - 0.5 * n * _LOG_2PI
        return jnp.where(jnp.isnan(value), -jnp.inf, value)

    def _log_prior_impl(self, z):
        if self.prior is not None:
            return self.prior.log_prob(z)
        lower, upper = self.space.lower_internal, self.space.upper_internal
        inside = jnp.all((z >= jnp.asarray(lower)) & (z <= jnp.asarray(upper)))
        return jnp.where(inside, -float(np.sum(np.log(upper - lower))), -jnp.inf)

    def _log_posterior_impl(self, z):
        lp = self._log_prior_impl(z)
        if self.prior is not None:
            return lp + self._log_likelihood_impl(z)
        inside = jnp.isfinite(lp)
        space = self.space
        centre = jnp.asarray(0.5 * (space.lower_internal + space.upper_internal))
        z_safe = jnp.where(jnp.broadcast_to(inside, z.shape), z, centre)
        return jnp.where(inside, lp + self._log_likelihood_impl(z_safe), -jnp.inf)


@eqx.filter_jit
def _jitted(method: str, problem: CalibrationProblem, theta_internal):
    """``problem.<method>(theta_internal)`` compiled once per problem structure."""
    return getattr(problem, method)(theta_internal)


def _quoted(names) -> str:
    return ", ".join(repr(n) for n in names)
