"""Posterior predictive bands: posterior draws → `simulate_batch` → percentile bands.

Wulkow et al. 2021, §2.4 show 90 % bands of the model outputs over the posterior, for the
fitted recipe and for one that was not fitted. Two kinds:

- **output band** (`output_bands`, ``kind="confidence"``): credible bands of the model
  output, quantiles over draws of the simulated F(t; θ) without measurement noise, the
  spread the parameter uncertainty causes;
- **prediction band** (`prediction_bands`, with a key): quantiles of F plus measurement
  noise from the problem's likelihood (each draw with its own σ when σ is sampled), where
  new measurements are expected to fall.

Draws are of a problem's free parameters (noise parameters included), ``(n, n_free)`` or
``(n_chains, n_draws, n_free)``, physical (``PosteriorResult.samples``, the default) or
internal (``coordinates="internal"``, ``samples_internal``); `expand_draws` turns them into
full physical parameter vectors. ``experiment`` predicts for another experiment: an
`Experiment` (other times, conditions) or another model with the same parameters, e.g.
``jcalib.models.get("radical_polymerization_simple", recipe=2)``.

Example:
    >>> bands = output_bands(problem, post.samples)            # doctest: +SKIP
    >>> lo, hi = bands.band()                                  # doctest: +SKIP
    >>> other = output_bands(problem, post.samples,            # doctest: +SKIP
    ...     experiment=jcalib.models.get("radical_polymerization_simple", recipe=2))
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jcalib.bayes.result import is_internal
from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractModel, Experiment, SolveStatus, simulate_batch
from jcalib.problems import AbstractProblem, CalibrationProblem, JointProblem

__all__ = ["PredictiveBands", "expand_draws", "output_bands", "prediction_bands"]

DEFAULT_QUANTILES = (0.05, 0.5, 0.95)
"""5 %, 50 % and 95 %: the median and the 90 % band of Wulkow et al. 2021, §2.4."""


class PredictiveBands(eqx.Module):
    """Quantiles of model outputs over posterior draws.

    Attributes:
        ts: times of the bands.
        quantiles: the probabilities, increasing.
        values: the quantiles, ``(n_quantiles, n_times, n_outputs)``.
        mean: mean over the draws, ``(n_times, n_outputs)``.
        output_names: column names.
        kind: ``"confidence"`` (model output only) or ``"prediction"`` (with noise).
        n_draws: draws whose simulation succeeded (the quantiles use these).
        n_failed: draws whose simulation failed (left out).
        experiment: name of the predicted experiment.
    """

    ts: Float[Array, " n_times"]
    values: Float[Array, "n_quantiles n_times n_outputs"]
    mean: Float[Array, "n_times n_outputs"]
    quantiles: tuple[float, ...] = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    n_draws: int = eqx.field(static=True)
    n_failed: int = eqx.field(static=True)
    experiment: str = eqx.field(static=True)

    def quantile(self, q: float) -> Float[Array, "n_times n_outputs"]:
        """The band at probability ``q`` (one of ``quantiles``)."""
        matches = [i for i, p in enumerate(self.quantiles) if abs(p - q) < 1e-12]
        if not matches:
            raise ValueError(f"quantile(): {q} is not among the computed quantiles "
                             f"{self.quantiles}; pass it to output_bands(quantiles=...)")
        return self.values[matches[0]]

    def band(self) -> tuple[Float[Array, "n_times n_outputs"], Float[Array, "n_times n_outputs"]]:
        """The outermost band: (lowest quantile, highest quantile)."""
        return self.values[0], self.values[-1]

    def coverage(self, measurements) -> float:
        """Fraction of the measured entries inside the outermost band (same times)."""
        ts = np.asarray(measurements.ts)
        if ts.shape != np.shape(self.ts) or not np.allclose(ts, np.asarray(self.ts)):
            raise ValueError("coverage(): the measurements must be at the band's times ts")
        lo, hi = (np.asarray(v) for v in self.band())
        x, mask = np.asarray(measurements.values), np.asarray(measurements.mask)
        inside = (x >= lo) & (x <= hi)
        return float(inside[mask].mean())

    def to_dict(self) -> dict:
        """JSON-ready numbers (lists; NaN/inf as None)."""
        return to_jsonable({
            "kind": self.kind, "experiment": self.experiment, "ts": np.asarray(self.ts),
            "quantiles": list(self.quantiles), "output_names": list(self.output_names),
            "values": np.asarray(self.values), "mean": np.asarray(self.mean),
            "n_draws": self.n_draws, "n_failed": self.n_failed,
        })


def expand_draws(problem: AbstractProblem, draws: Float[ArrayLike, "... n_free"],
                 coordinates: str = "physical") -> np.ndarray:
    """Full physical model parameter vectors ``(n, n_params)`` from draws of the free
    parameters (fixed values filled in, noise parameters dropped).

    Args:
        problem: the problem the draws belong to.
        draws: ``(..., n_free)``; leading axes (chains, draws) are flattened.
        coordinates: ``"physical"`` (values of the free parameters, e.g.
            ``PosteriorResult.samples``) or ``"internal"`` (``samples_internal``).

    Raises:
        ValueError: bad shapes or non-finite draws; unknown ``coordinates``.
    """
    if isinstance(problem, JointProblem):
        raise ValueError("expand_draws: a JointProblem has one parameter vector per experiment; expand the draws of "
                         "one experiment: expand_draws(problem.experiment_problems[k], draws[..., "
                         "problem.experiment_columns(k)], coordinates='internal') with internal draws")
    z = _internal_draws(problem, draws, coordinates, "expand_draws")
    return np.asarray(_theta_full_batch(problem, jnp.asarray(z)))


@eqx.filter_jit
def _theta_full_batch(problem, z):
    return jax.vmap(problem.theta_full)(z)


def output_bands(
    problem: AbstractProblem,
    thetas: Float[ArrayLike, "... n_free"],
    *,
    coordinates: str = "physical",
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    experiment: Experiment | AbstractModel | None = None,
    chunk_size: int | None = None,
) -> PredictiveBands:
    """Credible bands of the model output (no measurement noise): quantiles of the simulated
    outputs F(t; θ) over posterior draws, the spread the parameter uncertainty causes.

    Args:
        problem: the `CalibrationProblem` the draws belong to.
        thetas: draws of its free parameters, ``(n, n_free)`` or ``(n_chains, n_draws,
            n_free)`` (leading axes are flattened).
        coordinates: ``"physical"`` (default; ``PosteriorResult.samples``) or ``"internal"``
            (``samples_internal``).
        quantiles: probabilities in (0, 1), increasing (default 5 %, 50 %, 95 %).
        experiment: None (the measurement times), an `Experiment` of the same model, or
            another model with the same parameter names (another recipe); for a
            `jcalib.problems.JointProblem`, the name (or index) of one of its
            experiments: the bands of that experiment at its measurement times.
        chunk_size: passed to `simulate_batch`.

    Returns:
        `PredictiveBands` with ``kind="confidence"``. Draws whose simulation fails are
        left out and counted (``n_failed``); draws outside the bounds are simulated
        anyway (an untruncated prior may put them there).

    Raises:
        ValueError: ``problem`` not a `CalibrationProblem`; bad shapes, quantiles,
            ``coordinates`` or experiment; every simulation failed.
    """
    q = _check_quantiles(quantiles)
    problem, thetas, coordinates, experiment = _one_experiment(problem, thetas, coordinates, experiment,
                                                               "output_bands")
    model, _, values, ok = _simulated_draws(problem, thetas, coordinates, experiment, chunk_size, "output_bands")
    return _bands(model, values[ok], q, "confidence", int((~ok).sum()))


def prediction_bands(
    key: PRNGKeyArray,
    problem: AbstractProblem,
    thetas: Float[ArrayLike, "... n_free"],
    *,
    coordinates: str = "physical",
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    experiment: Experiment | AbstractModel | None = None,
    chunk_size: int | None = None,
) -> PredictiveBands:
    """Prediction bands, where new measurements are expected: like `output_bands`, plus one
    draw of measurement noise per posterior draw and entry from ``problem.likelihood``
    (`AbstractLikelihood.add_noise`).

    σ per output comes from each draw's noise parameters when sampled, else from
    ``likelihood.sigma`` or ``measurements.sigma`` (per entry only for the fitted
    experiment).

    Args:
        key: a ``jax.random`` key; the same key gives the same bands.
        problem, thetas, coordinates, quantiles, experiment, chunk_size: as in `output_bands`.

    Raises:
        ValueError: as `output_bands`; no noise level known for some output; per-entry
            ``measurements.sigma`` with another experiment.
    """
    problem, thetas, coordinates, experiment = _one_experiment(problem, thetas, coordinates, experiment,
                                                               "prediction_bands")
    if isinstance(problem, CalibrationProblem):
        problem._check_sigma("prediction_bands")
    q = _check_quantiles(quantiles)
    model, z, values, ok = _simulated_draws(problem, thetas, coordinates, experiment, chunk_size,
                                            "prediction_bands")
    if tuple(model.output_names) != tuple(problem.model.output_names):
        raise ValueError(
            f"prediction_bands: the experiment's outputs {tuple(model.output_names)} differ from "
            f"the problem's {tuple(problem.model.output_names)}; the noise model is per output"
        )
    sigma = _noise_levels(problem, z, values.shape[1:], experiment is None)
    noisy = problem.likelihood.add_noise(key, jnp.asarray(values), jnp.asarray(sigma))
    return _bands(model, np.asarray(noisy)[ok], q, "prediction", int((~ok).sum()))


# --- helpers --------------------------------------------------------------------------------
def _check_quantiles(quantiles) -> tuple[float, ...]:
    q = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if q.ndim != 1 or q.size == 0 or not np.all((q > 0) & (q < 1)) or np.any(np.diff(q) <= 0):
        raise ValueError(
            f"quantiles must be increasing probabilities in (0, 1), e.g. (0.05, 0.5, 0.95); got "
            f"{np.asarray(quantiles).tolist()}"
        )
    return tuple(float(v) for v in q)


def _flat_draws(draws, n: int, what: str, names: str) -> np.ndarray:
    arr = np.asarray(draws, dtype=np.float64)
    if arr.ndim < 2 or arr.shape[-1] != n or arr.size == 0:
        raise ValueError(
            f"{what} must have shape (n_draws, {n}) or (n_chains, n_draws, {n}) {names}; got "
            f"shape {arr.shape}"
        )
    arr = arr.reshape(-1, n)
    bad = np.flatnonzero(~np.all(np.isfinite(arr), axis=1))
    if bad.size:
        raise ValueError(f"{what} has NaN or inf in draws {bad[:10].tolist()}")
    return arr


def _one_experiment(problem, thetas, coordinates, experiment, where):
    """A joint problem's draws as draws of its experiment ``experiment`` (name or index):
    ``(that experiment's CalibrationProblem, its internal draws, "internal", None)``; a
    single-experiment problem passes through."""
    if not isinstance(problem, JointProblem):
        return problem, thetas, coordinates, experiment
    if experiment is None or isinstance(experiment, (Experiment, AbstractModel)):
        raise ValueError(f"{where}: for a JointProblem pass experiment=<name> (one of {problem.experiment_names}); "
                         "the bands are per experiment")
    k = problem.experiment_index(experiment)
    z = _internal_draws(problem, thetas, coordinates, where)
    return problem.experiment_problems[k], z[:, problem.experiment_columns(k)], "internal", None


def _internal_draws(problem, draws, coordinates: str, where: str) -> np.ndarray:
    """The draws of the free parameters as internal coordinates, ``(n, n_free)``."""
    if not isinstance(problem, AbstractProblem):
        raise ValueError(f"{where}: problem must be a CalibrationProblem; got {type(problem).__name__}")
    internal = is_internal(coordinates, where)
    z = _flat_draws(draws, problem.n_free, "thetas", f"free parameters {problem.free_names}")
    return z if internal else np.asarray(problem.space.to_internal(jnp.asarray(z)))


def _simulated_draws(problem, thetas, coordinates, experiment, chunk_size, where):
    """(model of the experiment, internal draws, simulated outputs, success flags)."""
    z = _internal_draws(problem, thetas, coordinates, where)
    model = _experiment_model(problem.model, experiment)
    values, ok = _simulate(model, np.asarray(_theta_full_batch(problem, jnp.asarray(z))), chunk_size)
    return model, z, values, ok


def _experiment_model(model, experiment):
    if experiment is None:
        return model
    if isinstance(experiment, Experiment):
        return model.with_experiment(experiment)
    if isinstance(experiment, AbstractModel):
        if experiment.parameters.names != model.parameters.names:
            raise ValueError(
                f"experiment: the other model's parameters {experiment.parameters.names} differ "
                f"from the fitted model's {model.parameters.names}; pass a model of the same "
                "family (e.g. another recipe) or an Experiment"
            )
        return experiment
    raise ValueError(
        f"experiment must be None, an Experiment or a model; got {type(experiment).__name__}"
    )


def _simulate(model, full, chunk_size):
    values, status = simulate_batch(model, full, chunk_size, throw=False, return_status=True,
                                    check_bounds=False, progress=False)
    ok = status == SolveStatus.SUCCESS
    if not ok.any():
        raise ValueError(
            f"output_bands: all {ok.size} simulations failed (first: "
            f"{SolveStatus.describe(int(status[0]))}); check the draws and the solver settings"
        )
    return values, ok


def _noise_levels(problem: AbstractProblem, z: np.ndarray, shape, fitted: bool) -> np.ndarray:
    """σ per draw, time and output, ``(n_draws, n_times, n_outputs)``."""
    n_times, n_out = shape
    n = z.shape[0]
    sigma = np.ones((n, n_times, n_out))
    lik_sigma = problem.likelihood.sigma
    meas_sigma = problem.measurements.sigma
    if lik_sigma is not None:
        sigma = sigma * np.broadcast_to(np.asarray(lik_sigma, dtype=np.float64), (n_out,))
    elif meas_sigma is not None:
        meas_sigma = np.asarray(meas_sigma)
        if meas_sigma.ndim == 2:
            if not fitted:
                raise ValueError(
                    "prediction_bands: measurements.sigma is given per entry, which does not "
                    "carry over to another experiment; fix sigma per output with "
                    "likelihood=...(sigma=...) or sample it (noise_parameters=True)"
                )
            sigma = sigma * meas_sigma[None]
        else:
            sigma = sigma * np.broadcast_to(meas_sigma, (n_out,))
    if problem.n_noise:
        noise = np.exp(z[:, problem.n_model_free:])  # (n, n_noise), log-scale parameters
        outputs = list(problem.model.output_names)
        for k, name in enumerate(problem.noise_outputs):
            sigma[:, :, outputs.index(name)] = noise[:, k, None]
    return sigma


def _bands(model, values: np.ndarray, q, kind: str, n_failed: int) -> PredictiveBands:
    return PredictiveBands(
        ts=jnp.asarray(np.asarray(model.ts)),
        values=jnp.asarray(np.quantile(values, np.asarray(q), axis=0)),
        mean=jnp.asarray(values.mean(axis=0)),
        quantiles=q, output_names=tuple(model.output_names), kind=kind,
        n_draws=int(values.shape[0]), n_failed=n_failed, experiment=model.experiment.name,
    )
