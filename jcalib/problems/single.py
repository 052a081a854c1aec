"""CalibrationProblem: a model, measurements, which parameters are free, and how to weigh misfit.

Every method of a problem works on ``theta_internal``, the *internal* coordinates of the
free parameters (``log`` for log-scale parameters, a log map for half-open ones, unbounded
where a parameter has an infinite bound; see `jcalib.parameters`), ordered as
``problem.free_names``; fixed parameters keep their physical values. Residuals are taken
over the measured entries only (``measurements.mask``), in row-major (time, output) order.

Weightings (X measured, F simulated, σ from ``measurements.sigma``):

- ``"relative"``: r = (X - F) / X; ``loss`` is R_X = 1/(mT) Σ ((X - F)/X)² of Wulkow et al.
  2021, eq. 6 (mean over the measured entries); σ is the relative noise level.
- ``"absolute"``: r = X - F; σ is the standard deviation.
- ``"sigma"``: r = (X - F) / σ.

The weighting defines ``residuals`` and ``loss`` (what estimators minimise). The
probability side (``log_likelihood``, ``log_prior``, ``log_posterior``) takes a noise model
(``likelihood=``: Gaussian on absolute or relative errors, log-normal; see
`jcalib.probability.likelihoods`), noise levels σ that are fixed or sampled per output
(``noise_parameters=``) and priors per parameter in physical units (``prior={name:
prior}``; see `jcalib.probability.priors`).

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

import dataclasses
import math
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int

from jcalib.data import Measurements
from jcalib.model import AbstractModel, check_simulator
from jcalib.parameters import Parameter, ParameterSpace, check_names
from jcalib.probability.likelihoods import AbstractLikelihood, get_likelihood, noise_parameter_space
from jcalib.probability.priors import AbstractPrior, GaussianPrior, ParameterPriors, bind_priors, quiet_truncation
from jcalib.problems.contract import AbstractProblem, compiled_call, quoted

__all__ = ["CalibrationProblem", "InitialStateParameters", "WEIGHTINGS",
           "initial_state_from_parameters", "with_initial_state_parameters"]

WEIGHTINGS = ("relative", "absolute", "sigma")


class CalibrationProblem(AbstractProblem):
    """What to fit: model, measurements, free parameters, weighting, likelihood and prior.

    Jittable and vmappable: pass a problem through ``eqx.filter_jit`` or close over it
    (``jax.jit(lambda z: problem.loss(z))``); ``jax.jit(problem.loss)`` does not work
    because JAX hashes the bound method's arrays.

    **Noise parameters.** With ``noise_parameters`` the noise level σ of the named outputs
    is sampled: one log-scale parameter ``sigma_<output>`` per output is appended to the
    free parameters, so ``free_names``, ``space``, ``theta_internal`` (``n_free``
    entries) and ``estimate_dict`` include them, and ``log_prior``/``log_likelihood``/
    ``log_posterior`` use them. ``simulate``, ``residuals`` and ``loss`` take the same
    ``theta_internal`` but do not depend on its noise entries. Estimators (Gauss-Newton,
    least squares, global search) and sensitivities fit model parameters only: give them
    `without_noise_parameters` (``jacobian`` raises on a problem with noise parameters,
    whose Jacobian columns would be zero).

    **Initial states as parameters**: a model whose ``initial_state(theta)`` reads
    parameters named ``<state>0`` (see `initial_state_from_parameters`), or any model
    wrapped by `with_initial_state_parameters`, has estimable initial states; they are
    ordinary parameters here (free, fixed, priors).

    Args:
        model: any `AbstractModel`; it is re-timed to ``measurements.ts`` when they differ
            (its own ``experiment.mask`` is then not used; ``measurements.mask`` is).
        measurements: the data; its outputs must be the model's outputs.
        free: names of the estimated parameters, in the order of ``theta_internal``;
            None: all parameters not in ``fixed``, in model order.
        fixed: ``{name: physical value}`` of held parameters (finite; may lie outside
            the bounds, e.g. a rate fixed to 0: the problem's ``model`` then has those
            parameters' bounds widened to include the fixed value, and a log-scale one
            turned linear if the value is <= 0); parameters neither free nor fixed keep
            their nominal values. Free parameters are bounds-checked by the model (see
            `jcalib.model.AbstractModel.check_bounds`): outside their bounds, simulations,
            residuals, loss and their derivatives are NaN (log densities -inf); pass
            ``model.with_bounds_check(False)`` to extrapolate deliberately.
        weighting: ``"relative"``, ``"absolute"`` or ``"sigma"`` (see the module doc);
            it defines ``residuals``/``loss``, which estimators minimise.
        prior: ``"uniform"`` (uniform in internal coordinates on the bounds, i.e.
            log-uniform for log-scale parameters), a `GaussianPrior` (on the internal
            coordinates, untruncated), or ``{name: prior}`` with priors from
            `jcalib.probability.priors` (Uniform, LogUniform, Normal, LogNormal, HalfNormal) in
            physical units, truncated to the bounds; unnamed parameters get the uniform
            default, names of fixed parameters are ignored. Noise parameters take their
            priors from the dict too (default: log-uniform on their bounds). A parameter
            with an infinite bound (see `jcalib.parameters`) has no uniform default: it
            needs a proper prior in the dict (a dict without one is refused here;
            ``"uniform"`` is refused by ``log_prior``/``log_posterior``, while estimation,
            which needs no prior, works).
        likelihood: the noise model of ``log_likelihood``: ``"absolute_gaussian"``,
            ``"relative_gaussian"``, ``"lognormal"`` or an instance from
            `jcalib.probability.likelihoods` (which may fix σ); None: the one matching
            ``weighting`` (``"relative"`` → relative Gaussian, else absolute Gaussian).
        noise_parameters: None (σ fixed: ``likelihood.sigma`` or ``measurements.sigma``),
            ``True`` (sample σ of every output), a list of output names, or
            ``{output: (lower, upper)}`` / ``{output: (nominal, lower, upper)}`` bounds
            of σ (see `jcalib.probability.likelihoods.noise_parameter_space`).

    Raises:
        ValueError: outputs of measurements and model differ; unknown names in ``free``
            or ``fixed``; a name both free and fixed; no free parameter; unknown
            weighting; ``"sigma"`` weighting without ``measurements.sigma``;
            ``"relative"`` weighting or likelihood with a measured value of 0;
            ``"lognormal"`` likelihood with a measured value <= 0; bad prior, likelihood
            or noise parameters.
    """

    model: AbstractModel
    measurements: Measurements
    theta_fixed: Float[Array, " n_params"]
    observed_index: Int[Array, " n_observed"]
    x_observed: Float[Array, " n_observed"]
    sigma_observed: Float[Array, " n_observed"] | None  # fixed σ per entry (1 where sampled)
    prior: GaussianPrior | ParameterPriors | None  # model parameters; None: uniform on the box
    likelihood: AbstractLikelihood
    noise_prior: ParameterPriors | None
    noise_slot: Int[Array, " n_observed"] | None  # noise parameter of each entry, -1: fixed σ
    free_names: tuple[str, ...] = eqx.field(static=True)
    weighting: str = eqx.field(static=True)
    noise_names: tuple[str, ...] = eqx.field(static=True)
    noise_space: ParameterSpace | None = eqx.field(static=True)
    noise_outputs: tuple[str, ...] = eqx.field(static=True)
    sigma_available: bool = eqx.field(static=True)

    def __init__(self, model: AbstractModel, measurements: Measurements,
                 free: Sequence[str] | None = None, fixed: Mapping[str, float] | None = None,
                 weighting: str = "relative",
                 prior: str | GaussianPrior | Mapping[str, AbstractPrior] = "uniform",
                 likelihood: str | AbstractLikelihood | None = None,
                 noise_parameters=None):
        model, likelihood = _checked_inputs(model, measurements, weighting, likelihood)
        known = model.parameters.names
        model, free, fixed = _free_and_fixed(model, free, fixed)
        entries = _observed_entries(model, measurements, weighting, likelihood)
        noise = _noise_levels(model, measurements, likelihood, entries, noise_parameters)
        prior, noise_prior = _bound_priors(prior, free, known, model.parameters.subset(free), noise["space"])
        noise_names = () if noise["space"] is None else noise["space"].names

        self.model = model
        self.measurements = measurements
        self.theta_fixed = jnp.asarray(model.parameters.to_vector({n: float(v) for n, v in fixed.items()}))
        self.observed_index = jnp.asarray(entries["index"])
        self.x_observed = jnp.asarray(entries["x"])
        self.sigma_observed = None if noise["sigma"] is None else jnp.asarray(noise["sigma"])
        self.prior = prior
        self.likelihood = likelihood
        self.noise_prior = noise_prior
        self.noise_slot = None if noise["slot"] is None else jnp.asarray(noise["slot"])
        self.free_names = tuple(free) + noise_names
        self.weighting = weighting
        self.noise_names = noise_names
        self.noise_space = noise["space"]
        self.noise_outputs = tuple(model.output_names[j] for j in noise["outputs"])
        self.sigma_available = noise["available"]

    @classmethod
    def from_simulation(cls, model: AbstractModel, theta: Float[ArrayLike, " n_params"] | None = None, *,
                        weighting: str = "relative", sigma: float | Float[ArrayLike, " n_outputs"] | None = None,
                        free: Sequence[str] | None = None) -> CalibrationProblem:
        """A data-free problem: the model's own noise-free outputs at ``theta`` as measurements.

        Its residuals vanish at ``theta`` and its residual Jacobian there is the weighted
        output sensitivity, so methods that take a problem (`jcalib.sensitivity.identifiability`,
        `~jcalib.sensitivity.j_sensitivity`) analyse a model before any data exist:
        ``"relative"`` weighting gives rows d ln y / d θ_internal (with
        ``identifiability(..., scaling="log")``: d ln y / d ln θ), ``"absolute"`` gives dy/dθ,
        ``"sigma"`` divides each output by ``sigma``.

        Args:
            model: the model; its experiment's mask selects the entries.
            theta: physical parameter values ``(n_params,)``; None: the nominal values.
            weighting: as in `CalibrationProblem`. With ``"relative"``, entries where the
                simulated output is exactly 0 are masked out (their relative sensitivity is
                undefined; as rows of zeros they would not change rank or singular values).
            sigma: noise level per output (a scalar or ``(n_outputs,)``), needed for ``"sigma"``.
            free: the free parameters (None: all of them).

        Raises:
            ValueError: ``theta`` of the wrong shape, not finite or outside the bounds (the
                model refuses it), a failed solve, or the arguments `CalibrationProblem` refuses.
        """
        theta = model.parameters.nominal if theta is None else np.asarray(theta, dtype=np.float64)
        y = np.asarray(model.simulate(jnp.asarray(theta)), dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError(
                f"CalibrationProblem.from_simulation: the simulation at theta = "
                f"{model.parameters.to_dict(theta)} failed or gave NaN/inf; choose another theta or "
                "fix the solve (e.g. model.with_solver(max_steps=...))"
            )
        mask = model.experiment.mask
        mask = np.ones(y.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if weighting == "relative":
            mask = mask & (y != 0)
        if sigma is not None:
            sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (y.shape[1],))
        data = Measurements(np.asarray(model.ts), y, mask=mask, sigma=sigma, output_names=model.output_names)
        return cls(model, data, free=free, weighting=weighting)

    # --- static description ----------------------------------------------------------------
    @property
    def space(self) -> ParameterSpace:
        """The free parameters: ``model.parameters.subset(model_free_names)``, followed by
        the noise parameters."""
        model_space = self.model.parameters.subset(self.model_free_names)
        if self.noise_space is None:
            return model_space
        return ParameterSpace(tuple(model_space) + tuple(self.noise_space))

    @property
    def n_observed(self) -> int:
        """Number of residuals: the measured entries."""
        return int(self.observed_index.shape[0])

    @property
    def fixed(self) -> dict[str, float]:
        """``{name: physical value}`` of every model parameter that is not free."""
        theta = np.asarray(self.theta_fixed)
        return {n: float(theta[i]) for i, n in enumerate(self.model.parameters.names)
                if n not in self.free_names}

    def _rebuild(self, **changes) -> CalibrationProblem:
        """A new problem with the same settings except ``changes`` (constructor args)."""
        settings = dict(free=self.model_free_names, fixed=self.fixed, weighting=self.weighting,
                        prior=self._prior_spec(), likelihood=self.likelihood,
                        noise_parameters=self._noise_spec())
        settings.update(changes)
        with quiet_truncation():  # this problem's priors were checked (and said) when it was made
            return CalibrationProblem(self.model, self.measurements, **settings)

    def _prior_spec(self):
        if self.prior is None and self.noise_prior is None:
            return "uniform"
        if isinstance(self.prior, GaussianPrior):
            return self.prior
        spec = {} if self.prior is None else self.prior.as_dict()
        if self.noise_prior is not None:
            spec.update(self.noise_prior.as_dict())
        return spec

    def _noise_spec(self):
        if self.noise_space is None:
            return None
        return {o: (p.nominal, p.lower, p.upper) for o, p in zip(self.noise_outputs, self.noise_space)}

    def fix(self, values: Mapping[str, float]) -> CalibrationProblem:
        """A new problem with the parameters in ``values`` (physical) fixed too.

        Example: ``problem.fix({"kad": 5e-5})``. Names already fixed get the new value.
        Noise parameters cannot be fixed here: use `without_noise_parameters`.
        """
        known = self.model.parameters.names
        if not isinstance(values, Mapping):
            raise ValueError(f"fix(): expected a {{name: value}} dict; got {values!r}")
        for name in values:
            if name in self.noise_names:
                raise ValueError(
                    f"fix(): {name!r} is a sampled noise level; use "
                    "without_noise_parameters(sigma=...) to fix sigma"
                )
            check_names("fix()", [name], known)
        free = tuple(n for n in self.model_free_names if n not in values)
        if not free:
            raise ValueError(
                f"fix(): fixing {quoted(list(values))} leaves no free parameter"
            )
        fixed = {**self.fixed, **{n: float(v) for n, v in values.items()}}
        return self._rebuild(free=free, fixed=fixed)

    def without_noise_parameters(self, sigma: float | Sequence[float] | None = None
                                 ) -> CalibrationProblem:
        """This problem with σ fixed instead of sampled (for estimators and sensitivities).

        Args:
            sigma: the fixed noise level, a scalar or one value per output (e.g. a
                posterior mean of the ``sigma_<output>`` parameters); None: the
                likelihood's ``sigma`` or ``measurements.sigma`` (the problem then has no
                noise level if neither is set, which ``residuals``/``loss`` do not need).
        """
        spec = self._prior_spec()
        if isinstance(spec, dict):
            spec = {n: p for n, p in spec.items() if n not in self.noise_names}
        likelihood = self.likelihood if sigma is None else type(self.likelihood)(sigma)
        return self._rebuild(prior=spec, likelihood=likelihood, noise_parameters=None)

    # --- coordinates ----------------------------------------------------------------------
    def theta_full(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_params"]:
        """The model's full physical parameter vector: free values mapped, fixed values kept
        (noise parameters are not model parameters and are left out)."""
        z = self._check(theta_internal)
        names = self.model_free_names
        index = np.array([self.model.parameters.index(n) for n in names])
        model_z = z[: len(names)]
        return self.theta_fixed.at[index].set(self.model.parameters.subset(names).to_physical(model_z))

    def theta_full_batch(self, theta_internal: Float[ArrayLike, "n n_free"]) -> Float[Array, "n n_params"]:
        """`theta_full` of many draws (e.g. posterior samples) at once."""
        z = jnp.asarray(theta_internal)
        if z.ndim != 2:
            raise ValueError(
                f"theta_full_batch: expected draws of shape (n, n_free={self.n_free}); got shape "
                f"{z.shape}"
            )
        self._check(z[0] if z.shape[0] else jnp.zeros(self.n_free), "theta_internal[0]")
        return jax.vmap(self.theta_full)(z)

    def sigma_of(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, " n_observed"]:
        """The noise level σ of every measured entry (sampled ones from ``theta_internal``).

        Raises:
            ValueError: no noise level is known (see `log_likelihood`).
        """
        self._check_sigma("sigma_of")
        return self._sigma_impl(self._check(theta_internal))

    # --- misfit ---------------------------------------------------------------------------
    def simulate(self, theta_internal: Float[ArrayLike, " n_free"]) -> Float[Array, "n_times n_outputs"]:
        """Model outputs at the measurement times (NaN if the solve failed)."""
        return compiled_call(type(self)._simulate_impl, self, self._check(theta_internal))

    def forward_mode(self) -> CalibrationProblem:
        """This problem with its model in forward mode (``adjoint=ForwardMode()``), for
        ``jax.jacfwd`` through the solver (`jacobian` does this itself)."""
        return eqx.tree_at(lambda p: p.model, self, self.model.forward_mode())

    def solve_status(self, theta_internal: Float[ArrayLike, " n_free"]) -> int:
        """The `jcalib.model.SolveStatus` code of the simulation at ``theta_internal``."""
        return int(compiled_call(type(self)._status_impl, self, self._check(theta_internal)))

    # --- implementations (pure; called through one filter_jit, so eager calls compile once) --
    def _status_impl(self, z):
        return self.model.simulate_with_status(self.theta_full(z))[1]

    def _simulated_observed(self, model: AbstractModel, z) -> Float[Array, " n_observed"]:
        return model.simulate(self.theta_full(z)).reshape(-1)[self.observed_index]

    def _residuals_with(self, model: AbstractModel, z) -> Float[Array, " n_observed"]:
        f = self._simulated_observed(model, z)
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

    def _sigma_impl(self, z):
        if self.noise_slot is None:
            return self.sigma_observed
        sigma = jnp.exp(z[self.n_model_free:])  # noise parameters are log-scale
        sampled = sigma[jnp.maximum(self.noise_slot, 0)]
        return jnp.where(self.noise_slot >= 0, sampled, self.sigma_observed)

    def _log_likelihood_terms(self, z):
        f = self._simulated_observed(self.model, z)
        return self.likelihood.log_density(self.x_observed, f, self._sigma_impl(z))


def initial_state_from_parameters(
    model: AbstractModel, theta: Float[Array, " n_params"], y0: Float[ArrayLike, " n_states"]
) -> Float[Array, " n_states"]:
    """Initial states as parameters: ``y0`` with every state ``s`` for which the model has
    a parameter named ``<s>0`` replaced by that parameter's value.

    The convention that makes initial states estimable: name a parameter after the state
    with a trailing ``0`` (state ``prey`` → parameter ``prey0``) and call this from
    ``initial_state``; the parameter is then free, fixed or given a prior like any other.
    The value goes into the solver state as is (a model with scaled states divides by the
    scale itself).

    Example:
        >>> def initial_state(self, theta):  # doctest: +SKIP
        ...     return initial_state_from_parameters(self, theta, jnp.ones(2))

    Raises:
        ValueError: ``y0`` does not have one entry per state.
    """
    y0 = jnp.asarray(y0, dtype=theta.dtype)
    states = tuple(model.state_names)
    if y0.shape != (len(states),):
        raise ValueError(
            f"initial_state_from_parameters: y0 must have shape (n_states,) = ({len(states)},) "
            f"for states {states}; got shape {y0.shape}"
        )
    names = model.parameters.names
    for i, state in enumerate(states):
        if f"{state}0" in names:
            y0 = y0.at[i].set(theta[names.index(f"{state}0")])
    return y0


class InitialStateParameters(AbstractModel):
    """A model with some of its initial states turned into parameters (appended after the
    model's own); built by `with_initial_state_parameters`. It forwards the vector field,
    observation and inputs to ``base`` (observed through this model's experiment, so
    ``with_times``/``with_experiment`` work) and overwrites the chosen entries of
    ``base.initial_state``."""

    base: AbstractModel
    state_index: tuple[int, ...] = eqx.field(static=True)
    n_base: int = eqx.field(static=True)

    def _base(self) -> AbstractModel:
        return self.base.with_experiment(self.experiment)

    def vector_field(self, t, y, theta):
        return self._base().vector_field(t, y, theta[: self.n_base])

    def initial_state(self, theta):
        y0 = self._base().initial_state(theta[: self.n_base])
        return y0.at[jnp.asarray(self.state_index)].set(theta[self.n_base:].astype(y0.dtype))

    def observe(self, t, y, theta):
        return self._base().observe(t, y, theta[: self.n_base])

    def inputs(self, t):
        return self._base().inputs(t)

    @property
    def input_horizon(self) -> float | None:
        return self.base.input_horizon

    def constants(self) -> dict[str, tuple[float, str]]:
        return self.base.constants()


def with_initial_state_parameters(model: AbstractModel,
                                  parameters: Sequence[Parameter]) -> InitialStateParameters:
    """Make initial states of any model (built-in ones included) estimable.

    Each `Parameter` must be named ``<state>0`` for one of ``model.state_names`` (the
    same convention as `initial_state_from_parameters`); the parameters are appended to
    ``model.parameters`` and their values replace those states in ``initial_state``, in
    the solver's state coordinates (models that scale their states, such as the
    polymerization models, need the scaled value).

    Example:
        >>> import jcalib
        >>> model = jcalib.models.get("four_substance_reactions")
        >>> model = with_initial_state_parameters(model, [Parameter("A0", 10.0, 5.0, 20.0)])
        >>> model.parameters.names
        ('kab', 'kac', 'kad', 'A0')

    Raises:
        ValueError: a name that is not ``<state>0``; a state named twice; a name that a
            model parameter already has.
    """
    parameters = (parameters,) if isinstance(parameters, Parameter) else tuple(parameters)
    if not parameters:
        raise ValueError("with_initial_state_parameters: no parameters given")
    states = tuple(model.state_names)
    index = []
    for p in parameters:
        if not isinstance(p, Parameter):
            raise ValueError(
                f"with_initial_state_parameters: expected Parameter objects; got {p!r}")
        state = p.name[:-1] if p.name.endswith("0") else None
        if state not in states:
            raise ValueError(
                f"with_initial_state_parameters: {p.name!r} does not name an initial state; use "
                f"'<state>0' with a state from {states}"
            )
        if p.name in model.parameters.names:
            raise ValueError(
                f"with_initial_state_parameters: the model already has a parameter {p.name!r}")
        index.append(states.index(state))
    space = ParameterSpace(tuple(model.parameters) + parameters)  # checks duplicates
    return InitialStateParameters(
        parameters=space, output_names=model.output_names, state_names=states,
        experiment=model.experiment, solver=model.solver, controller=model.controller,
        adjoint=model.adjoint, dt0=model.dt0, max_steps=model.max_steps, base=model,
        state_index=tuple(index), n_base=model.parameters.n_params,
    )

# --- construction steps of CalibrationProblem ----------------------------------------------
def _checked_inputs(model, measurements, weighting, likelihood) -> tuple[AbstractModel, AbstractLikelihood]:
    """The model observed at the measurement times and the likelihood object, after the
    checks of model, measurements, weighting and likelihood."""
    check_simulator(model, "CalibrationProblem", "model")
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
    try:
        likelihood = get_likelihood(likelihood, weighting)
    except ValueError as e:
        raise ValueError(f"CalibrationProblem: {e}") from None
    ts = np.asarray(measurements.ts)
    if ts.shape != np.shape(model.ts) or not np.array_equal(ts, np.asarray(model.ts)):
        try:
            model = model.with_times(ts)
        except ValueError as e:
            raise ValueError(
                f"CalibrationProblem: cannot observe the model at the measurement times: {e}"
            ) from None
    elif isinstance(model, AbstractModel):
        model.check_horizon(model.experiment, "CalibrationProblem")
    return model, likelihood


def _free_and_fixed(model, free, fixed) -> tuple[AbstractModel, tuple[str, ...], Mapping[str, float]]:
    """The model admitting the fixed values (`_admit_fixed_values`), the free names and the
    fixed values, after checking both."""
    known = model.parameters.names
    fixed = {} if fixed is None else fixed
    if not isinstance(fixed, Mapping):
        raise ValueError(f"fixed: expected a {{name: value}} dict; got {fixed!r}")
    check_names("fixed", list(fixed), known)
    for name, value in fixed.items():
        if not math.isfinite(float(value)):
            raise ValueError(f"fixed: the value of {name!r} must be finite; got {value}")
    model = _admit_fixed_values(model, fixed)
    if free is None:
        free = tuple(n for n in known if n not in fixed)
    else:
        free = (free,) if isinstance(free, str) else tuple(free)
        check_names("free", free, known)
    both = [n for n in free if n in fixed]
    if both:
        raise ValueError(
            f"CalibrationProblem: parameter(s) {quoted(both)} both free and fixed; remove "
            "them from one of the two"
        )
    if not free:
        raise ValueError(
            "CalibrationProblem: no free parameters (every parameter is fixed); leave at "
            "least one out of fixed"
        )
    return model, free, fixed


def _observed_entries(model, measurements, weighting, likelihood) -> dict[str, np.ndarray]:
    """The measured entries: ``index`` into the flattened ``(n_times * n_outputs)`` grid,
    their values ``x`` and ``output`` index, after checking that the weighting and the
    likelihood accept them."""
    if weighting == "sigma" and measurements.sigma_full() is None:
        raise ValueError(
            "CalibrationProblem: weighting='sigma' needs measurements.sigma; pass sigma to "
            "Measurements or use weighting='relative' or 'absolute'"
        )
    n_out = measurements.n_outputs
    index = np.flatnonzero(np.asarray(measurements.mask).reshape(-1))
    x_obs = np.asarray(measurements.values).reshape(-1)[index]

    def where(k):
        i, j = divmod(int(index[k]), n_out)
        return f"t={np.asarray(measurements.ts)[i]}, output {model.output_names[j]!r}"

    if weighting == "relative" and np.any(x_obs == 0):
        raise ValueError(
            f"CalibrationProblem: weighting='relative' divides by the measured values, but "
            f"X = 0 at {where(np.flatnonzero(x_obs == 0)[0])}; use weighting='absolute' or 'sigma', "
            "or mask the entry out"
        )
    bad = likelihood.check_data(x_obs)
    if bad is not None:
        raise ValueError(
            f"CalibrationProblem: likelihood={likelihood.name!r} "
            f"{likelihood.data_requirement()} = {x_obs[bad]} at {where(bad)}; use "
            "likelihood='absolute_gaussian', or mask the entry out"
        )
    return {"index": index, "x": x_obs, "output": index % n_out}


def _noise_levels(model, measurements, likelihood, entries, noise_parameters) -> dict:
    """σ per measured entry (``sigma``: fixed values, 1 where sampled, or None), the noise
    parameters' ``space`` (or None), the ``outputs`` they belong to, each entry's ``slot``
    among them (-1: fixed σ; None without noise parameters), and whether every entry has a
    σ (``available``)."""
    n_out = measurements.n_outputs
    output_of_entry = entries["output"]
    sigma_full = measurements.sigma_full()
    if likelihood.sigma is not None:
        if np.ndim(likelihood.sigma) == 1 and len(likelihood.sigma) != n_out:
            raise ValueError(
                f"CalibrationProblem: likelihood.sigma has {len(likelihood.sigma)} values but "
                f"there are {n_out} outputs ({', '.join(model.output_names)})"
            )
        per_output = np.broadcast_to(np.asarray(likelihood.sigma, dtype=np.float64), (n_out,))
        sigma_obs = per_output[output_of_entry]
    elif sigma_full is not None:
        sigma_obs = np.asarray(sigma_full).reshape(-1)[entries["index"]]
    else:
        sigma_obs = None
    if noise_parameters is None or noise_parameters is False:
        noise_space, noise_index, slot = None, (), None
    else:
        x_by_output = [entries["x"][output_of_entry == j] for j in range(n_out)]
        noise_space, noise_index = noise_parameter_space(
            noise_parameters, model.output_names, likelihood, x_by_output)
        clash = [n for n in noise_space.names if n in model.parameters.names]
        if clash:
            raise ValueError(
                f"noise_parameters: the noise parameter name(s) {quoted(clash)} clash with "
                "model parameters; rename the model parameters"
            )
        slot_of_output = np.full(n_out, -1)
        slot_of_output[list(noise_index)] = np.arange(len(noise_index))
        slot = slot_of_output[output_of_entry]
    sampled = np.zeros(output_of_entry.size, dtype=bool) if slot is None else slot >= 0
    available = sigma_obs is not None or bool(np.all(sampled))
    if sigma_obs is None and slot is not None:
        sigma_obs = np.ones(output_of_entry.size)  # placeholder: every entry's σ is sampled
    return {"sigma": sigma_obs, "space": noise_space, "outputs": tuple(noise_index), "slot": slot,
            "available": available}


def _bound_priors(prior, free, known, model_space, noise_space) -> tuple:
    """(prior of the free model parameters or None for uniform, prior of the noise
    parameters or None)."""
    noise_names = () if noise_space is None else noise_space.names
    noise_prior_spec: dict = {}
    if isinstance(prior, ParameterPriors):
        prior = prior.as_dict()
    if isinstance(prior, str):
        if prior != "uniform":
            raise ValueError(
                f"CalibrationProblem: prior must be 'uniform' or a GaussianPrior; got {prior!r}; "
                "or pass a {name: prior} dict of jcalib.probability.priors"
            )
        prior = None
    elif isinstance(prior, GaussianPrior):
        prior = prior._resolve(free, known)
    elif isinstance(prior, Mapping):
        check_names("prior", list(prior), known + noise_names)
        noise_prior_spec = {n: p for n, p in prior.items() if n in noise_names}
        prior = bind_priors({n: p for n, p in prior.items() if n in free}, model_space)
    else:
        raise ValueError(
            f"CalibrationProblem: prior must be 'uniform' or a GaussianPrior; got "
            f"{type(prior).__name__}; or pass a {{name: prior}} dict of jcalib.probability.priors"
        )
    noise_prior = None if noise_space is None else bind_priors(noise_prior_spec, noise_space, "prior")
    return prior, noise_prior



def _admit_fixed_values(model: AbstractModel, fixed: Mapping[str, float]) -> AbstractModel:
    """``model`` with the bounds of fixed parameters widened to include their fixed values
    (a deliberate choice such as a rate fixed to 0), so that its bounds check applies to the
    free parameters only. A log-scale parameter fixed to a value <= 0 becomes linear."""
    params, changed = [], False
    for p in model.parameters:
        value = float(fixed[p.name]) if p.name in fixed else None
        if value is not None and not p.lower <= value <= p.upper:
            lower, upper = min(p.lower, value), max(p.upper, value)
            p = Parameter(p.name, p.nominal, lower, upper, p.unit, p.log_scale and lower > 0)
            changed = True
        params.append(p)
    if not changed:
        return model
    return dataclasses.replace(model, parameters=ParameterSpace(params))
