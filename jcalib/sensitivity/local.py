"""Local sensitivities by forward-mode autodiff: output sensitivities and J-sensitivity.

Output sensitivities are the derivatives of every simulated output at every observation
time with respect to every parameter, ``S[k, i, j] = dy_i(t_k)/dθ_j`` (Bastogne et al.
2007, eq. 9-11: the sensitivity functions S_y(t, θ_j) whose matrix S_y(θ) decides practical
identifiability). They come from one ``jax.jacfwd`` through the diffrax solve, so they are
exact up to the solver's tolerance (no finite-difference step to choose, the problem
Bastogne et al. met for S_T3(Jp), S_T3(BP1), S_T3(BP3) in their Figure 5).

Scalings (``scaling=``), θ in physical units:

- ``"absolute"``: dy/dθ_j, in output units per parameter unit;
- ``"log"``: θ_j dy/dθ_j = dy/d ln θ_j, output units (the "semi-relative" sensitivity; the
  winding-process spec tabulates this one);
- ``"relative"``: (θ_j / y) dy/dθ_j = d ln y / d ln θ_j, dimensionless (the Jacobian of
  relative residuals with respect to log parameters, Wulkow et al. 2021 §2.2.1). Where the
  output is exactly zero (e.g. a product concentration at t = 0) the relative sensitivity
  is undefined; it is set to 0 there, so these entries carry no information, as they do
  for a relative residual that must leave such points out;
- ``"range"``: (upper_j - lower_j) dy/dθ_j, output units: the first-order change of y over
  the parameter's whole range. Outputs keep their units; `sensitivity_matrix` normalises
  per output (``output_scale``) when outputs of different units are compared.

The J-sensitivity (Bastogne et al. 2007, eq. 12) is L(θ_i) = |dJ/dθ_i| of the estimation
cost J, here a `CalibrationProblem`'s ``loss`` (the mean of its squared residuals;
Bastogne's J = Σ_k eᵀQe is ``n_observed`` times it for ``weighting="absolute"``, the same
ranking).

Example:
    >>> import jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> import jcalib
    >>> model = jcalib.models.get("four_substance_reactions")
    >>> s = output_sensitivities(model, model.parameters.nominal, scaling="relative")
    >>> s.shape
    (22, 4, 3)
    >>> sensitivity_matrix(s).shape
    (88, 3)
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jcalib._precision import as_float64
from jcalib.model import AbstractModel, AbstractSimulator, SolveStatus, check_simulator
from jcalib.problems import CalibrationProblem
from jcalib.starts import check_free

__all__ = [
    "J_SCALINGS",
    "SCALINGS",
    "failure_cause",
    "j_sensitivity",
    "j_sensitivity_functions",
    "loss_gradient",
    "running_loss_gradient",
    "output_sensitivities",
    "residual_jacobian",
    "sensitivity_matrix",
]

SCALINGS = ("absolute", "log", "relative", "range")
"""Scalings of `output_sensitivities` (see the module docstring)."""

COORDINATES = ("physical", "internal")
"""Values of ``coordinates=``: physical values or the problem's internal coordinates."""

J_SCALINGS = ("absolute", "log", "range", "internal")
"""Parameter scalings of `j_sensitivity` and of a problem's Jacobian in `identifiability`:
d/dθ (physical units), θ d/dθ = d/d ln θ, (upper - lower) d/dθ, d/dθ_internal."""


def output_sensitivities(
    simulator: AbstractSimulator, theta: Float[ArrayLike, " n_params"], *, scaling: str = "absolute"
) -> Float[Array, "n_times n_outputs n_params"]:
    """Sensitivities of every output at every observation time to every parameter.

    Computed by ``jax.jacfwd`` through one solve (the model's adjoint is switched to
    ``diffrax.ForwardMode``), compiled once per model structure and scaling; the function
    can itself be jitted and vmapped over ``theta``.

    Args:
        simulator: a `jcalib.model.AbstractSimulator` (a model, a PELS-VAE surrogate, a
            `jcalib.model.FunctionSimulator`) with a differentiable ``simulate``.
        theta: physical parameter vector, ``(n_params,)``, float64.
        scaling: ``"absolute"``, ``"log"``, ``"relative"`` or ``"range"`` (module docstring).

    Returns:
        ``S[k, i, j]``, the (scaled) derivative of output ``i`` at time ``t_k`` with respect
        to parameter ``j``; NaN everywhere if the solve failed (never zeros: a failed solve
        is not a flat direction). `failure_cause` says why in words.

    Raises:
        ValueError: not a simulator, unknown ``scaling``, ``"range"`` with a parameter without
            finite bounds, wrong shape or a dtype other than float64; called
            eagerly with a theta that has NaN or inf or (while the model checks bounds) lies
            outside the bounds, as `jcalib.model.AbstractModel.jacobian`.
    """
    check_simulator(simulator, "output_sensitivities")
    _check_choice(scaling, SCALINGS, "output_sensitivities", "scaling")
    if scaling == "range":
        simulator.parameters.check_box("output_sensitivities(scaling='range')")
    theta = as_float64(theta, "output_sensitivities", "theta")
    simulator.parameters.check_shape(theta, "theta")
    if isinstance(simulator, AbstractModel):
        simulator._refuse_bad_theta(theta, "output_sensitivities")  # eager calls only; traced: NaN
    return _output_sensitivities(simulator, theta, scaling)


@eqx.filter_jit
def _output_sensitivities(model, theta, scaling):
    simulate = model.forward_mode().simulate if isinstance(model, AbstractModel) else model.simulate
    def with_value(th):
        y = simulate(th)
        return y, y

    jac, y = jax.jacfwd(with_value, has_aux=True)(theta)  # one solve gives y and dy/dθ
    space = model.parameters
    if scaling == "absolute":
        return jac
    if scaling == "log":
        return jac * theta[None, None, :]
    if scaling == "range":
        width = jnp.asarray(space.upper - space.lower, dtype=jac.dtype)
        return jac * width[None, None, :]
    zero = (y == 0)[:, :, None]
    safe_y = jnp.where(y == 0, 1.0, y)[:, :, None]
    return jnp.where(zero, 0.0, jac * theta[None, None, :] / safe_y)


def sensitivity_matrix(
    sensitivities: Float[ArrayLike, "n_times n_outputs n_params"],
    *,
    mask: Bool[ArrayLike, "n_times n_outputs"] | None = None,
    output_scale: str | Float[ArrayLike, " n_outputs"] | None = None,
) -> Float[np.ndarray, "n_rows n_params"]:
    """Flatten output sensitivities to the matrix S_y(θ) of Bastogne et al. 2007 (eq. 10-11).

    Rows are ordered (time, output) row-major, as a `CalibrationProblem`'s residuals.

    Args:
        sensitivities: from `output_sensitivities`.
        mask: measured entries (e.g. ``model.experiment.mask``); unmeasured rows are
            dropped. None keeps every row.
        output_scale: per-output normalisation, so that outputs in different units weigh
            alike: None (none), ``"rms"`` (each output's rows divided by their root mean
            square over times and parameters, so every output contributes a block of unit
            RMS) or an array ``(n_outputs,)`` of positive scales to divide by (e.g. the
            noise standard deviation of each output).

    Returns:
        NumPy float64 array ``(n_rows, n_params)``.

    Raises:
        ValueError: wrong shapes, unknown ``output_scale``, non-positive scales or an
            output whose sensitivities are all zero with ``output_scale="rms"``.
    """
    s = np.asarray(sensitivities, dtype=np.float64)
    if s.ndim != 3:
        raise ValueError(
            f"sensitivity_matrix: sensitivities must have shape (n_times, n_outputs, "
            f"n_params); got shape {s.shape}"
        )
    n_times, n_outputs, n_params = s.shape
    if output_scale is not None:
        if isinstance(output_scale, str):
            if output_scale != "rms":
                raise ValueError(
                    f"sensitivity_matrix: output_scale must be None, 'rms' or an array of "
                    f"{n_outputs} positive scales; got {output_scale!r}"
                )
            measured = (np.ones((n_times, n_outputs), bool) if mask is None
                        else np.asarray(mask, dtype=bool))
            scale = np.array([np.sqrt(np.mean(s[measured[:, i], i] ** 2))
                              if measured[:, i].any() else 1.0 for i in range(n_outputs)])
            if np.any(scale == 0):
                i = int(np.flatnonzero(scale == 0)[0])
                raise ValueError(
                    f"sensitivity_matrix: output {i} has all-zero sensitivities, so "
                    "output_scale='rms' cannot normalise it; pass explicit scales"
                )
        else:
            scale = np.asarray(output_scale, dtype=np.float64)
            if scale.shape != (n_outputs,) or not np.all(scale > 0):
                raise ValueError(
                    f"sensitivity_matrix: output_scale must be None, 'rms' or an array of "
                    f"{n_outputs} positive scales; got {output_scale!r}"
                )
        s = s / scale[None, :, None]
    if mask is None:
        return s.reshape(n_times * n_outputs, n_params)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (n_times, n_outputs):
        raise ValueError(
            f"sensitivity_matrix: mask must have shape (n_times, n_outputs) = "
            f"{(n_times, n_outputs)}; got {mask.shape}"
        )
    return s.reshape(n_times * n_outputs, n_params)[mask.reshape(-1)]


def j_sensitivity(
    problem,
    theta: Float[ArrayLike, " n_free"] | None = None,
    *,
    coordinates: str = "physical",
    scaling: str = "absolute",
) -> Float[np.ndarray, " n_free"]:
    """J-sensitivity L(θ_i) = |dJ/dθ_i| of a problem's loss (Bastogne et al. 2007, eq. 12).

    J is ``problem.loss`` (mean squared residual); its gradient is (2/n) Jᵀr from the
    forward-mode residual Jacobian, mapped to the requested parameter coordinates.

    Args:
        problem: a `CalibrationProblem`.
        theta: the free parameters (ordered as ``problem.free_names``) in ``coordinates``;
            None: the nominal values.
        coordinates: ``"physical"`` (default) or ``"internal"``, the coordinates of ``theta``.
        scaling: ``"absolute"`` (default, Bastogne's definition: dJ/dθ_i in units of J per
            physical unit of θ_i, so the ranking depends on the units), ``"log"``
            (|θ_i dJ/dθ_i| = |dJ/d ln θ_i|, unit-free ranking), ``"range"``
            (|(upper_i - lower_i) dJ/dθ_i|, finite bounds only) or ``"internal"``
            (|dJ/dθ_internal,i|).

    Returns:
        Non-negative NumPy array ``(n_free,)``.

    Raises:
        ValueError: a badly shaped point, unknown ``coordinates`` or ``scaling``, or a
            failed solve.
    """
    _check_choice(scaling, J_SCALINGS, "j_sensitivity", "scaling")
    z = problem_point(problem, theta, coordinates, "j_sensitivity")
    jac, residuals = residual_jacobian(problem, z)
    return np.abs(loss_gradient(problem, z, jac, residuals, scaling, "j_sensitivity"))


def j_sensitivity_functions(
    problem,
    theta: Float[ArrayLike, " n_free"] | None = None,
    *,
    coordinates: str = "physical",
    scaling: str = "absolute",
) -> Float[np.ndarray, "n_times n_free"]:
    """Sensitivity functions S_J(t_k, θ_i) of the running cost (Bastogne et al. 2007, §3.3).

    Bastogne et al. build J = Σ_j e(t_j)ᵀQe(t_j) as a Simulink block (their Figure 6) and
    differentiate its output signal, so S_J(θ_i) is a time function in R^N (§3.3.2: "the
    vectors S_J(Θ_i) ∈ R^N", the columns of the correlation classification's Σ); its final
    value is the J-sensitivity of eq. 12. Here J is ``problem.loss`` (mean squared residual,
    1/n times Bastogne's J for ``weighting="absolute"``), so

        S_J(t_k, θ_i) = (2/n) Σ_{rows at times t_j <= t_k} r · dr/dθ_i,

    and ``|S_J(t_N, θ_i)|`` equals `j_sensitivity`. Times without a measured entry repeat the
    previous value.

    Args:
        problem: a `CalibrationProblem`.
        theta: the free parameters in ``coordinates``; None: the nominal values.
        coordinates: ``"physical"`` (default) or ``"internal"``, the coordinates of ``theta``.
        scaling: parameter coordinates of the derivatives, one of `J_SCALINGS` (default
            ``"absolute"``, eq. 12).

    Returns:
        Signed NumPy array ``(n_times, n_free)`` in units of the loss per unit of θ.

    Raises:
        ValueError: as `j_sensitivity`.
    """
    _check_choice(scaling, J_SCALINGS, "j_sensitivity_functions", "scaling")
    z = problem_point(problem, theta, coordinates, "j_sensitivity_functions")
    jac, residuals = residual_jacobian(problem, z)
    return running_loss_gradient(problem, z, jac, residuals, scaling, "j_sensitivity_functions")


def running_loss_gradient(problem, theta_internal, jacobian, residuals, scaling: str = "absolute",
                          where: str = "running_loss_gradient"):
    """`j_sensitivity_functions` from a residual Jacobian: the cumulative sum over observation
    times of the per-row terms (2/n) r dr/dθ of `loss_gradient`; NumPy ``(n_times, n_free)``."""
    if not isinstance(problem, CalibrationProblem):
        raise ValueError(f"{where}: the running cost over observation times needs a single-experiment "
                         f"CalibrationProblem; got {type(problem).__name__} (use loss_gradient, or one of its "
                         "experiment_problems)")
    jacobian = _scale_problem_jacobian(problem, theta_internal, np.asarray(jacobian), scaling, where)
    residuals = np.asarray(residuals)
    terms = 2.0 / residuals.size * residuals[:, None] * jacobian
    n_times, n_outputs = np.shape(problem.measurements.values)
    time_of_row = np.asarray(problem.observed_index) // n_outputs
    per_time = np.zeros((n_times, jacobian.shape[1]))
    np.add.at(per_time, time_of_row, terms)
    return np.cumsum(per_time, axis=0)


def residual_jacobian(problem, theta_internal):
    """``problem.jacobian`` and ``problem.residuals`` at once, from one compiled forward-mode
    pass (the residuals are the primal of the Jacobian's tangents); NumPy arrays."""
    jac, residuals = _residual_jacobian(problem, problem._check(jnp.asarray(theta_internal)))
    return np.asarray(jac), np.asarray(residuals)


@eqx.filter_jit
def _residual_jacobian(problem, z):
    forward = problem.forward_mode()

    def with_value(zz):
        r = forward.residuals(zz)
        return r, r

    return jax.jacfwd(with_value, has_aux=True)(z)


def loss_gradient(problem, theta_internal, jacobian, residuals, scaling: str = "absolute",
                  where: str = "loss_gradient"):
    """Gradient of ``problem.loss`` = mean(r²) from a residual Jacobian: (2/n) Jᵀr, in the
    coordinates of ``scaling`` (see `j_sensitivity`); NumPy ``(n_free,)``."""
    jacobian = _scale_problem_jacobian(problem, theta_internal, np.asarray(jacobian), scaling, where)
    residuals = np.asarray(residuals)
    return 2.0 / residuals.size * (jacobian.T @ residuals)


# --- helpers shared with identifiability ------------------------------------------------------
def problem_point(problem, theta, coordinates: str, where: str):
    """Internal coordinates of a problem point ``theta`` given in ``coordinates`` (None: nominal)."""
    _check_choice(coordinates, COORDINATES, where, "coordinates")
    check_free(problem, where)
    if theta is None:
        return problem.initial_internal()
    theta = as_float64(theta, where, "theta")
    if coordinates == "internal":
        return problem._check(theta, "theta (internal coordinates)")
    return problem.to_internal(theta)


def _scale_problem_jacobian(problem, theta_internal, jacobian, scaling, where):
    """d r / d θ_internal -> the columns of ``scaling`` (J_SCALINGS)."""
    _check_choice(scaling, J_SCALINGS, where, "scaling")
    if not np.all(np.isfinite(jacobian)):
        cause = _cause_of_status(problem.solve_status(jnp.asarray(theta_internal)))
        raise ValueError(
            f"{where}: the residual Jacobian has NaN or inf entries at theta = "
            f"{problem.estimate_dict(theta_internal)}: {cause}; "
            "a failed solve has no sensitivities (choose another point or fix the solve)"
        )
    if scaling == "internal":
        return jacobian
    space = problem.space
    if scaling == "range":
        space.check_box(f"{where}(scaling='range')")
    z = np.asarray(theta_internal, dtype=np.float64)
    theta = np.asarray(problem.to_physical(z))
    dz_dtheta = 1.0 / np.asarray(space.jacobian_diagonal(z))  # 1/θ on log-scale parameters
    factor = {"absolute": dz_dtheta, "log": theta * dz_dtheta,
              "range": (space.upper - space.lower) * dz_dtheta}[scaling]
    return jacobian * factor[None, :]


def failure_cause(model, theta) -> str:
    """Why sensitivities at ``theta`` are not finite, in words: the simulation failed (with
    its `jcalib.model.SolveStatus` name and text) or only its derivatives are NaN."""
    if not isinstance(model, AbstractSimulator):
        return "the model's outputs or derivatives are not finite there"
    return _cause_of_status(int(_solve_status(model, jnp.asarray(theta))))


def _cause_of_status(code: int) -> str:
    if code != SolveStatus.SUCCESS:
        try:
            text = f"{SolveStatus(code).name}: {SolveStatus.describe(code)}"
        except (ValueError, KeyError):
            text = f"status {code}"
        return f"the simulation failed there ({text})"
    return ("the simulation succeeded (status SUCCESS) but its derivatives are NaN or inf (the model is "
            "not differentiable there or its sensitivity solve failed)")


@eqx.filter_jit
def _solve_status(model, theta):
    return model.simulate_with_status(theta)[1]


def _check_choice(value, allowed, where, what):
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{where}: {what} must be one of {allowed}; got {value!r}")
