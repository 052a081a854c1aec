"""The contract every calibration problem fulfils, and how problems' calls are compiled.

`AbstractProblem` declares what a problem provides (equinox abstract variables and abstract
methods: a class lacking one cannot be created) and implements what all problems share on top
of it: coordinate maps, residuals, Jacobian, loss and log densities of ``theta_internal``,
each compiled once per problem structure (`compiled_call`). `jcalib.problems.CalibrationProblem`,
`jcalib.problems.JointProblem` and `jcalib.io.petab.PetabCalibrationProblem` implement it.

(No ``from __future__ import annotations`` here: equinox reads ``AbstractVar`` from evaluated
annotations.)
"""

import abc
import functools
import weakref
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jcalib.parameters import ParameterSpace
from jcalib.probability.priors import GaussianPrior

__all__ = ["AbstractProblem", "compiled_call", "quoted", "residual_offset"]


class AbstractProblem(eqx.Module):
    """What every calibration problem offers the methods: residuals, their Jacobian, loss and
    log densities of ``theta_internal`` (internal coordinates of the free parameters, ordered as
    ``free_names``), and the maps between internal and physical values.

    Implemented by `CalibrationProblem` (one model, one experiment),
    `jcalib.problems.JointProblem` (several experiments) and
    `jcalib.io.petab.PetabCalibrationProblem`. What a subclass provides is declared below: the
    abstract variables (fields or properties) and the abstract methods; equinox refuses to
    create a problem that lacks one.
    """

    space: eqx.AbstractVar[ParameterSpace]  # the free parameters (noise parameters last)
    free_names: eqx.AbstractVar[tuple[str, ...]]  # = space.names
    noise_names: eqx.AbstractVar[tuple[str, ...]]  # sampled noise levels, the last entries
    prior: eqx.AbstractVar[object]  # GaussianPrior, ParameterPriors or None (uniform on the box)
    noise_prior: eqx.AbstractVar[object]  # ParameterPriors of the noise parameters, or None
    n_observed: eqx.AbstractVar[int]  # residuals per evaluation
    sigma_available: eqx.AbstractVar[bool]  # whether every residual has a noise level
    fixed: eqx.AbstractVar[dict[str, float]]  # parameters held at a value, {name: physical value}

    @abc.abstractmethod
    def forward_mode(self) -> "AbstractProblem":
        """This problem with forward-mode adjoints, as ``jax.jacfwd`` through diffrax needs."""

    @abc.abstractmethod
    def solve_status(self, theta_internal: Float[ArrayLike, " n_free"]) -> int:
        """The `jcalib.model.SolveStatus` code of the (first failed) simulation at a point."""

    @abc.abstractmethod
    def _residuals_impl(self, z: Float[Array, " n_free"]) -> Float[Array, " n_observed"]:
        """Weighted residuals (pure, traced; `residuals` compiles it)."""

    @abc.abstractmethod
    def _jacobian_impl(self, z: Float[Array, " n_free"]) -> Float[Array, "n_observed n_free"]:
        """d residuals / d z (pure, traced; `jacobian` compiles it)."""

    @abc.abstractmethod
    def _log_likelihood_terms(self, z: Float[Array, " n_free"]) -> Float[Array, " n_terms"]:
        """Log-likelihood of each measured entry (pure, traced); NaN where a solve failed."""

    @property
    def n_free(self) -> int:
        return len(self.free_names)

    @property
    def n_noise(self) -> int:
        """Number of sampled noise levels (the last ``n_noise`` entries of theta_internal)."""
        return len(self.noise_names)

    @property
    def n_model_free(self) -> int:
        return len(self.free_names) - len(self.noise_names)

    @property
    def model_free_names(self) -> tuple[str, ...]:
        """The free model parameters (``free_names`` without the noise parameters)."""
        return self.free_names[: self.n_model_free]

    @property
    def model_space(self) -> ParameterSpace:
        """The free model parameters (``space`` without the noise parameters)."""
        return ParameterSpace(tuple(self.space)[: self.n_model_free])

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
    def residuals(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_observed"]:
        """Weighted residuals of the measured entries; NaN if the solve failed."""
        return compiled_call(type(self)._residuals_impl, self, self._check(theta_internal))

    def jacobian(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, "n_observed n_free"]:
        """d residuals / d theta_internal by forward-mode autodiff through the solver.

        Raises:
            ValueError: the problem samples noise levels (use `without_noise_parameters`).
        """
        if self.n_noise:
            raise ValueError(
                f"jacobian: this problem samples the noise levels {quoted(self.noise_names)}, "
                "which the residuals do not depend on (zero Jacobian columns); estimators and "
                "sensitivities need problem.without_noise_parameters()"
            )
        return compiled_call(type(self)._jacobian_impl, self, self._check(theta_internal))

    def loss(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Mean squared residual; for ``"relative"`` this is R_X (Wulkow 2021, eq. 6)."""
        return compiled_call(type(self)._loss_impl, self, self._check(theta_internal))

    # --- probability ----------------------------------------------------------------------
    def log_likelihood(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Log likelihood of the measured entries under ``self.likelihood``; -inf when the
        solve fails.

        The default (``likelihood=None``) keeps the weighting's noise model: for
        ``"relative"``, F ~ N(X, (σ X)²) per entry, i.e. exp(-R_X n_obs / (2σ²)) for a
        constant σ as in Wulkow 2021, normalised as a density:
        -½ Σ r²/σ² - Σ log(σ |X|) - n/2 log 2π; for ``"absolute"`` and ``"sigma"``,
        X ~ N(F, σ²). See `jcalib.probability.likelihoods` for all noise models; sampled σ come
        from the last ``n_noise`` entries of ``theta_internal``.

        Raises:
            ValueError: no noise level for some output (``measurements.sigma`` and
                ``likelihood.sigma`` are None and it is not a noise parameter).
        """
        self._check_sigma("log_likelihood")
        return compiled_call(type(self)._log_likelihood_impl, self, self._check(theta_internal))

    def log_prior(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Log prior density in internal coordinates (log-Jacobian included for priors
        given in physical units); -inf outside the box (uniform and per-parameter priors)."""
        return self._log_prior_impl(self._check(theta_internal))

    def log_posterior(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, ""]:
        """Unnormalised log posterior, ``log_prior + log_likelihood``.

        With the uniform or per-parameter priors the model is not evaluated where the
        prior is zero (outside the box; the likelihood is taken at the box centre and
        discarded), so the value there is -inf, never NaN, and the gradient there is
        finite (zero). A failed solve inside the box gives -inf.

        Raises:
            ValueError: no noise level for some output (see `log_likelihood`).
        """
        self._check_sigma("log_posterior")
        return compiled_call(type(self)._log_posterior_impl, self, self._check(theta_internal))

    # --- implementations (pure; called through one filter_jit, so eager calls compile once) --
    def _check_sigma(self, what: str) -> None:
        if not self.sigma_available:
            raise ValueError(
                f"{what}: measurements.sigma is None, but the likelihood needs the noise "
                "level; pass sigma to Measurements, fix it with likelihood=...(sigma=...), or "
                "sample it with noise_parameters=True"
            )

    def _log_likelihood_impl(self, z):
        """The sum of `_log_likelihood_terms`, -inf where it is NaN (a failed solve)."""
        value = jnp.sum(self._log_likelihood_terms(z))
        return jnp.where(jnp.isnan(value), -jnp.inf, value)

    def _loss_impl(self, z):
        return jnp.mean(self._residuals_impl(z) ** 2)

    def _log_prior_impl(self, z):
        n_model = self.n_model_free
        z_model = z[:n_model]
        if isinstance(self.prior, GaussianPrior):
            lp = self.prior.log_prob(z_model)
        elif self.prior is not None:
            lp = self.prior.log_prob_internal(z_model)
        else:
            space = self.model_space
            for p in space:
                if not p.has_box:
                    raise ValueError(
                        f"log_prior: the default prior='uniform' (uniform in internal coordinates on the "
                        f"bounds) is improper for {p.name!r}, whose bounds [{p.lower}, {p.upper}] leave its "
                        f"internal coordinate unbounded; pass a proper prior for it, e.g. CalibrationProblem(..., "
                        f"prior={{{p.name!r}: Normal(mean, std)}}) (jcalib.probability.priors)"
                    )
            lower, upper = space.lower_internal, space.upper_internal
            inside = jnp.all((z_model >= jnp.asarray(lower)) & (z_model <= jnp.asarray(upper)))
            lp = jnp.where(inside, -float(np.sum(np.log(upper - lower))), -jnp.inf)
        if self.noise_prior is not None:
            lp = lp + self.noise_prior.log_prob_internal(z[n_model:])
        return lp

    def _log_posterior_impl(self, z):
        lp = self._log_prior_impl(z)
        if isinstance(self.prior, GaussianPrior):
            return lp + self._log_likelihood_impl(z)
        inside = jnp.isfinite(lp)
        # where the prior is zero the model is evaluated at the nominal values instead (always
        # inside the bounds, finite in internal coordinates), so it never sees values outside
        nominal = jnp.asarray(self.space.nominal_internal)
        z_safe = jnp.where(jnp.broadcast_to(inside, z.shape), z, nominal)
        return jnp.where(inside, lp + self._log_likelihood_impl(z_safe), -jnp.inf)


def residual_offset(problem: AbstractProblem, points) -> float | None:
    """``c`` with ``|r|^2 / 2 + c = -log-likelihood`` at every point, where the residuals are the
    likelihood's (Gaussian noise of known level); None where they are not (e.g. relative
    weighting, whose residuals are not divided by the noise level: ``c`` differs from point to
    point), where fewer than two distinct ``points`` (internal coordinates) give finite values
    to check it on, or without a log-likelihood."""
    if not problem.sigma_available:
        return None
    seen, offsets = set(), []
    for z in points:
        z = np.asarray(z, dtype=np.float64)
        if z.tobytes() in seen:
            continue
        seen.add(z.tobytes())
        r = np.asarray(problem.residuals(jnp.asarray(z)))
        nll = -float(problem.log_likelihood(jnp.asarray(z)))
        if np.isfinite(nll) and np.all(np.isfinite(r)):
            offsets.append((nll - 0.5 * float(r @ r), nll))
    if len(offsets) < 2:
        return None
    c, nll = offsets[0]
    same = all(abs(ci - c) <= 1e-9 * max(1.0, abs(c), abs(nll), abs(nlli)) for ci, nlli in offsets[1:])
    return c if same else None


def compiled_call(method: Callable, problem: AbstractProblem, theta_internal):
    """``method(problem, theta_internal)`` compiled once per problem structure (``method``: a
    function of the problem's class, e.g. ``type(problem)._residuals_impl``).

    What ``eqx.filter_jit`` does, with the problem's partition into arrays and structure made
    once per problem object (`_prepared`) instead of on every call: flattening a large PEtab
    problem and hashing its static parts can cost more than evaluating its residuals, and
    estimators call the problem hundreds of times (TRF, Gauss-Newton).
    """
    leaves, structure = _prepared(problem)
    return _compiled(method, structure, leaves, theta_internal)


class _Structure:
    """A problem's static part (tree structure and non-array leaves), hashed once and interned
    (`_prepared`), so that the compiled-function cache compares it by identity."""

    __slots__ = ("treedef", "static", "_key", "_hash")

    def __init__(self, treedef, static):
        self.treedef, self.static = treedef, static
        static_leaves, static_treedef = jax.tree_util.tree_flatten(static)
        self._key = (treedef, static_treedef, tuple(static_leaves))
        self._hash = hash(self._key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (
            isinstance(other, _Structure) and self._hash == other._hash and self._key == other._key)


_PREPARED: dict[int, tuple] = {}  # id(problem) -> (weak reference, array leaves, structure)
_STRUCTURES: dict[_Structure, _Structure] = {}


def _prepared(problem: AbstractProblem) -> tuple[list, "_Structure"]:
    """The problem's array leaves (as JAX arrays) and its interned `_Structure`, cached per
    problem object for as long as it lives."""
    entry = _PREPARED.get(id(problem))
    if entry is not None and entry[0]() is problem:
        return entry[1], entry[2]
    dynamic, static = eqx.partition(problem, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(dynamic)
    structure = _Structure(treedef, static)
    structure = _STRUCTURES.setdefault(structure, structure)
    key = id(problem)
    reference = weakref.ref(problem, lambda _, key=key: _PREPARED.pop(key, None))
    leaves = [jnp.asarray(leaf) for leaf in leaves]
    _PREPARED[key] = (reference, leaves, structure)
    return leaves, structure


@functools.partial(jax.jit, static_argnums=(0, 1))
def _compiled(method: Callable, structure: _Structure, leaves, theta_internal):
    problem = eqx.combine(jax.tree_util.tree_unflatten(structure.treedef, leaves), structure.static)
    return method(problem, theta_internal)


def quoted(names) -> str:
    """Names as a comma-separated list of quoted strings, for messages."""
    return ", ".join(repr(n) for n in names)
