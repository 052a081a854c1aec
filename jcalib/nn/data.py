"""What jcalib's networks share: the training data, its one input check, the one metrics type
and the lifecycle of a trained network.

- `simulate_training_set(key, simulator, n, ...)` draws parameters, simulates them with
  `jcalib.simulate_batch` (failed solves are redrawn), optionally drops an excluded zone and
  adds measurement noise; it returns a `TrainingSet` ``(thetas, trajectories)`` that
  `PELSVAE.fit`, `AmortizedPosterior.fit`, `InverseMapping.fit` and the workflows take.
- `check_training_data` is the one input check of such data.
- `NetworkMetrics` (from `network_metrics`) is what every network's ``evaluate`` returns.
- The lifecycle, the same for the three networks: ``Network(simulator, config)`` describes the
  network (the simulator gives the parameter space, times and output names);
  ``fit(key, thetas, trajectories, *, val=(thetas, trajectories))`` trains on arrays and
  returns a new, immutable trained network (the weights are initialised from ``key``; the
  object ``fit`` is called on is left as it was); ``training`` is the `TrainingResult` of the
  fit (None after ``load``); ``save(path)`` / ``Network.load(path)`` round-trip it without
  the simulator.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from jcalib.bayes.recovery import relative_errors
from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractSimulator, SolveStatus, check_simulator, simulate_batch
from jcalib.parameters import ParameterSpace
from jcalib.probability.likelihoods import NOISE_MODELS, add_noise

__all__ = ["AbstractNetwork", "NetworkMetrics", "TrainingSet", "check_training_data", "network_metrics",
           "simulate_training_set"]

_MAX_ROUNDS = 100  # rounds of redrawing failed or excluded samples
NOT_TRAINED = "{cls}: not trained yet; call {cls}(simulator, config).fit(key, thetas, trajectories) or {cls}.load(path)"


class TrainingSet(NamedTuple):
    """Parameter samples and their simulated trajectories: what the networks train on.

    Attributes:
        thetas: physical parameters ``(n, n_params)``.
        trajectories: simulated (and possibly noisy) outputs ``(n, n_times, n_outputs)``.
    """

    thetas: np.ndarray
    trajectories: np.ndarray


def simulate_training_set(
    key: PRNGKeyArray,
    simulator: AbstractSimulator,
    n: int,
    *,
    sampler: str | Callable = "uniform",
    exclude: Callable | Mapping[str, tuple[float, float]] | None = None,
    noise: float | ArrayLike | Callable | None = None,
    noise_model: str = "additive",
    chunk_size: int | None = None,
    progress: bool = False,
) -> TrainingSet:
    """``n`` parameter samples and their simulated (noisy) trajectories.

    Failed simulations and excluded samples are replaced by fresh draws (``jax.random.fold_in``
    of the sampling key), so exactly ``n`` samples come back; the same key gives the same set.

    Args:
        key: a ``jax.random`` key (the samples and the noise).
        simulator: a `jcalib.AbstractSimulator` (a model, a surrogate, a `jcalib.FunctionSimulator`).
        n: samples (>= 1).
        sampler: ``"uniform"``, ``"lhs"`` or ``"sobol"`` (`ParameterSpace.sample` over the
            simulator's bounds), or a callable ``(key, n) -> (n, n_params)`` physical draws (any
            prior or region; they may leave the bounds: the simulation does not check them).
        exclude: a zone to leave out (generalisation studies): a box ``{name: (low, high)}``
            (samples with every named parameter inside are dropped) or a callable
            ``thetas (n, n_params) -> bool (n,)``, True = drop.
        noise: measurement noise added to the trajectories: standard deviations (a scalar or
            one per output) of ``noise_model``, or a callable ``(key, trajectories) -> noisy``;
            None for none.
        noise_model: of `jcalib.probability.add_noise`: ``"additive"`` (σ in the output's
            unit) or ``"multiplicative"`` (σ a fraction of the noise-free value) or ``"lognormal"``.
        chunk_size: `jcalib.simulate_batch` chunk size.
        progress: show the simulation's progress bar.

    Returns:
        `TrainingSet` ``(thetas, trajectories)``, float64 NumPy arrays.

    Raises:
        ValueError: not a simulator; ``n`` not a positive integer; an invalid ``sampler``,
            ``exclude``, ``noise`` or ``noise_model``; simulations that keep failing; an exclude
            zone that leaves (almost) nothing.

    Long for its documented options; the body is 46 lines.
    """
    where = "simulate_training_set"
    simulator = check_simulator(simulator, where)
    space = simulator.parameters
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{where}: n must be a positive integer; got {n!r}")
    if not callable(sampler) and sampler not in ("uniform", "lhs", "sobol"):
        raise ValueError(f"{where}: sampler must be 'uniform', 'lhs', 'sobol' or a callable (key, n) -> thetas; "
                         f"got {sampler!r}")
    noise_fn = _noise_fn(noise, noise_model, len(simulator.output_names), where)
    dropped = exclusion(space, exclude, where)
    n = int(n)
    key_theta, key_noise = jax.random.split(key)

    def draw(k, m):
        if callable(sampler):
            thetas = np.array(sampler(k, m), dtype=np.float64)
            space.check_shape(thetas, f"{where}: sampler(key, n)", batched=True)
            if thetas.shape[0] != m:
                raise ValueError(f"{where}: sampler(key, {m}) returned {thetas.shape[0]} samples")
            return thetas
        return np.array(space.sample(k, m, sampler), dtype=np.float64)

    kept_thetas, kept_trajectories, total, n_failed = [], [], 0, 0
    for attempt in range(_MAX_ROUNDS):
        m = n - total
        thetas = draw(key_theta if attempt == 0 else jax.random.fold_in(key_theta, attempt), m)
        if dropped is not None:
            thetas = thetas[~dropped(thetas)]
        if thetas.shape[0]:
            values, status = simulate_batch(simulator, thetas, chunk_size, throw=False, return_status=True,
                                            check_bounds=not callable(sampler), progress=progress)
            ok = np.asarray(status) == SolveStatus.SUCCESS
            n_failed += int((~ok).sum())
            kept_thetas.append(thetas[ok])
            kept_trajectories.append(np.asarray(values, np.float64)[ok])
            total += int(ok.sum())
        if total >= n:
            break
    else:
        raise ValueError(f"{where}: only {total} of {n} samples after {_MAX_ROUNDS} rounds ({n_failed} simulations "
                         "failed, the rest excluded); narrow the parameter bounds or shrink the exclude zone")
    if n_failed:
        warnings.warn(f"{where}: {n_failed} simulations failed and were replaced by fresh draws", stacklevel=2)
    thetas = np.concatenate(kept_thetas)[:n]
    trajectories = np.concatenate(kept_trajectories)[:n]
    return TrainingSet(thetas, noise_fn(key_noise, trajectories))


def exclusion(space: ParameterSpace, exclude, where: str) -> Callable | None:
    """The drop function ``thetas -> bool (n,)`` of an ``exclude`` argument (None for none)."""
    if exclude is None:
        return None
    if callable(exclude):
        def fn(thetas):
            drop = np.asarray(exclude(thetas), bool)
            if drop.shape != (thetas.shape[0],):
                raise ValueError(f"{where}: exclude(thetas) must return one bool per sample, shape "
                                 f"({thetas.shape[0]},); got {drop.shape}")
            return drop
        return fn
    box = exclusion_box(space, exclude, where)
    index = {space.index(name): bounds for name, bounds in box.items()}

    def in_box(thetas):
        inside = np.ones(thetas.shape[0], bool)
        for i, (low, high) in index.items():
            inside &= (thetas[:, i] >= low) & (thetas[:, i] <= high)
        return inside
    return in_box


def exclusion_box(space: ParameterSpace, exclude, where: str) -> dict[str, list[float]]:
    """A box ``{name: (low, high)}`` checked against ``space``, as ``{name: [low, high]}``."""
    if not isinstance(exclude, Mapping) or not exclude:
        raise ValueError(f"{where}: exclude must be a box {{name: (low, high)}} or a callable; got {exclude!r}")
    box = {}
    for name, bounds in exclude.items():
        space.index(name)  # ValueError naming the known parameters
        low, high = (float(b) for b in bounds)
        if not low < high:
            raise ValueError(f"{where}: exclude box for {name!r} needs low < high; got {bounds!r}")
        box[name] = [low, high]
    return box


def _noise_fn(noise, noise_model: str, n_outputs: int, where: str) -> Callable:
    if noise_model not in NOISE_MODELS:
        raise ValueError(f"{where}: noise_model must be one of {NOISE_MODELS}; got {noise_model!r}")
    if noise is None:
        return lambda key, trajectories: trajectories
    if callable(noise):
        return lambda key, trajectories: np.asarray(noise(key, trajectories), np.float64)
    sd = np.asarray(noise, np.float64)
    if sd.ndim > 1 or not np.all(np.isfinite(sd)) or np.any(sd < 0) or (sd.ndim == 1 and sd.size != n_outputs):
        raise ValueError(f"{where}: noise must be None, a callable (key, trajectories) -> noisy, or non-negative "
                         f"standard deviations (a scalar or one per output: {n_outputs}); got {noise!r}")
    return lambda key, trajectories: np.asarray(add_noise(key, trajectories, sd, noise_model), np.float64)


class NetworkMetrics(eqx.Module):
    """Errors of a network's predictions on a test set: what every network's ``evaluate`` returns.

    The last axis of ``truth`` and ``prediction`` is the quantity (a parameter of the inverse
    networks, an output of the surrogate); the errors are pooled over all other axes.

    Attributes:
        names: the quantities (parameter or output names).
        truth: true values ``(n, ..., n_quantities)``.
        prediction: the network's values, same shape.
        scale: per quantity, the unit of `scaled_mae` (the surrogate: each output's training
            standard deviation; the inverse networks: the parameter's training range).
        outside: per test sample, outside the network's training range (see each network).

    Properties (per quantity): ``errors = prediction - truth``, `mae`, `rmse`, `scaled_mae`,
    and the relative errors of the IMPU paper (Kessels et al. 2023, eqs. 18-21):
    ``relative_errors = (prediction - truth) / truth``, `bias`, `sd` (unbiased), `mare`,
    `max_are` (NaN where a true value is 0).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    truth: Float[Array, "n ... n_quantities"]
    prediction: Float[Array, "n ... n_quantities"]
    scale: Float[Array, " n_quantities"]
    outside: Bool[Array, " n"]

    @property
    def n_test(self) -> int:
        return int(self.truth.shape[0])

    def _pooled(self, x) -> np.ndarray:
        x = np.asarray(x, np.float64)
        return x.reshape(-1, x.shape[-1])

    @property
    def errors(self) -> np.ndarray:
        return np.asarray(self.prediction, np.float64) - np.asarray(self.truth, np.float64)

    @property
    def mae(self) -> np.ndarray:
        return np.abs(self._pooled(self.errors)).mean(axis=0)

    @property
    def rmse(self) -> np.ndarray:
        return np.sqrt((self._pooled(self.errors) ** 2).mean(axis=0))

    @property
    def scaled_mae(self) -> np.ndarray:
        return self.mae / np.asarray(self.scale, np.float64)

    @property
    def relative_errors(self) -> np.ndarray:
        """``(prediction - truth) / truth`` (`jcalib.bayes.recovery.relative_errors`), NaN at a zero truth."""
        return relative_errors(self.truth, self.prediction)

    @property
    def bias(self) -> np.ndarray:
        return self._pooled(self.relative_errors).mean(axis=0)

    @property
    def sd(self) -> np.ndarray:
        return self._pooled(self.relative_errors).std(axis=0, ddof=1)

    @property
    def mare(self) -> np.ndarray:
        return np.abs(self._pooled(self.relative_errors)).mean(axis=0)

    @property
    def max_are(self) -> np.ndarray:
        return np.abs(self._pooled(self.relative_errors)).max(axis=0)

    def table(self) -> list[dict]:
        """One row per quantity: ``name, mae, rmse, scaled_mae`` and the relative errors in
        percent ``bias_%, sd_%, mare_%, max_are_%``."""
        columns = {"mae": self.mae, "rmse": self.rmse, "scaled_mae": self.scaled_mae, "bias_%": 100 * self.bias,
                   "sd_%": 100 * self.sd, "mare_%": 100 * self.mare, "max_are_%": 100 * self.max_are}
        return [{"name": name, **{k: float(v[i]) for k, v in columns.items()}} for i, name in enumerate(self.names)]

    def to_dict(self, include_errors: bool = False) -> dict:
        """Summary for JSON (relative errors as fractions); ``include_errors`` adds the
        per-sample arrays."""
        d = {"names": list(self.names), "n_test": self.n_test,
             **{k: getattr(self, k) for k in ("mae", "rmse", "scaled_mae", "bias", "sd", "mare", "max_are")},
             "scale": np.asarray(self.scale),
             "outside_rate": float(np.mean(np.asarray(self.outside))) if self.n_test else float("nan")}
        if include_errors:
            d |= {"truth": np.asarray(self.truth), "prediction": np.asarray(self.prediction),
                  "errors": self.errors, "outside": np.asarray(self.outside)}
        return to_jsonable(d)


def network_metrics(truth: Float[ArrayLike, "n ... n_quantities"], prediction: Float[ArrayLike, "n ... n_quantities"],
                    names: Sequence[str], *, scale: Float[ArrayLike, " n_quantities"] | None = None,
                    outside: Bool[ArrayLike, " n"] | None = None) -> NetworkMetrics:
    """`NetworkMetrics` of predictions against the true values.

    Args:
        truth: true values, ``(n, ..., n_quantities)``.
        prediction: predictions, same shape.
        names: one name per quantity.
        scale: the unit of `NetworkMetrics.scaled_mae` per quantity (default 1).
        outside: per sample, outside the training range (default: none).

    Raises:
        ValueError: shapes that differ or do not match ``names``; fewer than 2 samples;
            non-finite values; a ``scale`` that is not positive.
    """
    truth = np.asarray(truth, np.float64)
    prediction = np.asarray(prediction, np.float64)
    names = tuple(names)
    if truth.ndim < 2 or truth.shape != prediction.shape or truth.shape[-1] != len(names):
        raise ValueError(f"network_metrics: truth and prediction must both have shape (n, ..., {len(names)}) (one "
                         f"column per name); got {truth.shape} and {prediction.shape}")
    if truth.shape[0] < 2:
        raise ValueError(f"network_metrics: needs at least 2 test samples; got {truth.shape[0]}")
    if not (np.all(np.isfinite(truth)) and np.all(np.isfinite(prediction))):
        raise ValueError("network_metrics: truth and prediction must be finite; drop failed samples first")
    scale = np.ones(len(names)) if scale is None else np.broadcast_to(np.asarray(scale, np.float64), (len(names),))
    if not np.all(scale > 0):
        raise ValueError(f"network_metrics: scale must be positive; got {scale.tolist()}")
    outside = np.zeros(truth.shape[0], bool) if outside is None else np.asarray(outside, bool)
    if outside.shape != (truth.shape[0],):
        raise ValueError(f"network_metrics: outside must have shape ({truth.shape[0]},); got {outside.shape}")
    return NetworkMetrics(names=names, truth=jnp.asarray(truth), prediction=jnp.asarray(prediction),
                          scale=jnp.asarray(scale), outside=jnp.asarray(outside))


class Frozen:
    """Mixin of the trained networks: attributes are set by ``__init__`` / ``fit`` / ``load``
    only (through `_set`); afterwards the object is immutable."""

    _frozen: bool = False

    def __setattr__(self, name, value):
        if self._frozen:
            raise AttributeError(f"{type(self).__name__} is immutable: fit(...) returns a new trained network "
                                 f"instead of changing this one (tried to set {name!r})")
        object.__setattr__(self, name, value)

    def _set(self, **values) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _freeze(self):
        object.__setattr__(self, "_frozen", True)
        return self


class AbstractNetwork(Frozen):
    """The lifecycle every jcalib network shares (module docstring): `fit` checks the arrays and
    hands them to the subclass's ``_fit``, which returns a new trained, frozen network.

    Subclasses set ``simulator`` (the one the network was described with; None after
    ``load``), ``training`` (the `TrainingResult` of the fit, None before and after ``load``)
    and ``n_train``, and implement ``_check_data(thetas, trajectories, where)`` and
    ``_fit(key, thetas, trajectories, val, checkpoint, fresh_start)``.
    """

    def fit(
        self,
        key: PRNGKeyArray,
        thetas: Float[ArrayLike, "n n_params"],
        trajectories: Float[ArrayLike, "n n_times n_outputs"],
        *,
        val: tuple[ArrayLike, ArrayLike] | None = None,
        checkpoint: str | os.PathLike | None = None,
        fresh_start: bool = False,
    ):
        """Train on simulated ``(θ, trajectory)`` pairs with `jcalib.nn.training.fit`.

        Args:
            key: a ``jax.random`` key: the initial weights, the training loop's shuffling and
                any other randomness of the network (the same key and data, the same network).
            thetas: physical parameters of the training samples ``(n, n_params)``.
            trajectories: their (simulated, possibly noisy) outputs ``(n, n_times, n_outputs)``,
                all finite (e.g. a `TrainingSet` from `simulate_training_set`: ``*data``).
            val: ``(thetas, trajectories)`` of a validation set (best weights, early stopping),
                e.g. a `TrainingSet`, or None (then the training loss is monitored).
            checkpoint: resumable checkpoint file of the training loop. It resumes only the run
                that wrote it: another key, data, validation data, normalisation or configuration
                raise ``ValueError`` (see ``fresh_start``); a finished run is returned as it is
                (``training.n_epochs_run == 0``).
            fresh_start: train from scratch even when ``checkpoint`` exists, overwriting it.

        Returns:
            A new trained, immutable network of this class (this one is left as it was).

        Raises:
            ValueError: shapes that do not match the simulator's, fewer than 2 samples, NaN or
                inf, samples outside the bounds (where the network needs them inside); a
                checkpoint of another run or a damaged one.
        """
        where = f"{type(self).__name__}.fit"
        thetas, trajectories = self._check_data(thetas, trajectories, "fit")
        if thetas.shape[0] < 2:
            raise ValueError(f"{where}: needs at least 2 training samples; got {thetas.shape[0]}")
        if val is not None:
            if not (isinstance(val, (tuple, list)) and len(val) == 2):
                raise ValueError(f"{where}: val must be a (thetas, trajectories) pair (e.g. a TrainingSet) or None; "
                                 f"got {type(val).__name__}")
            val = self._check_data(*val, "fit (val)")
        return self._fit(key, thetas, trajectories, val, checkpoint, fresh_start)

    def _check_data(self, thetas, trajectories, where: str) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _fit(self, key, thetas, trajectories, val, checkpoint, fresh_start):
        raise NotImplementedError


def check_training_data(
    space: ParameterSpace,
    thetas: Float[ArrayLike, "n n_params"],
    trajectories: Float[ArrayLike, "n n_times n_outputs"],
    where: str,
    *,
    n_times: int | None = None,
    output_names: Sequence[str] | None = None,
    check_bounds: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 NumPy copies of ``(thetas, trajectories)`` after checking shapes, finiteness and the bounds.

    Args:
        space: the parameter space of ``thetas``.
        thetas: physical parameter samples ``(n, n_params)``.
        trajectories: the simulated (or measured) trajectories at those samples ``(n, n_times, n_outputs)``.
        where: the caller for the messages, e.g. ``"PELSVAE.fit"``.
        n_times: the number of times the network expects, or None for any.
        output_names: the outputs the network expects, or None for any number.
        check_bounds: refuse samples outside the space's bounds (the training box).

    Returns:
        ``(thetas, trajectories)`` as float64 NumPy arrays.

    Raises:
        ValueError: a shape that does not match; NaN or inf (failed simulations must be dropped
            first); with ``check_bounds``, samples outside the bounds.
    """
    what = "trajectories"
    xs = trajectories

    thetas = np.asarray(thetas, dtype=np.float64)
    xs = np.asarray(xs, dtype=np.float64)
    space.check_shape(thetas, f"{where}: thetas", batched=True)
    n = thetas.shape[0]
    if xs.ndim != 3 or xs.shape[0] != n:
        raise ValueError(f"{where}: {what} must have shape (n, n_times, n_outputs) with n = {n} (the rows of "
                         f"thetas); got {xs.shape}")
    if n_times is not None and xs.shape[1] != n_times:
        raise ValueError(f"{where}: {what} have {xs.shape[1]} times, the model {n_times}")
    if output_names is not None and xs.shape[2] != len(output_names):
        raise ValueError(f"{where}: {what} have {xs.shape[2]} outputs, expected {len(output_names)} "
                         f"({', '.join(output_names)})")
    bad = np.flatnonzero(~np.all(np.isfinite(thetas), axis=1))
    if bad.size:
        raise ValueError(f"{where}: thetas has NaN or inf in rows {bad[:10].tolist()}")
    bad = np.flatnonzero(~np.all(np.isfinite(xs.reshape(n, -1)), axis=1))
    if bad.size:
        raise ValueError(f"{where}: {what} have NaN or inf in samples {bad[:10].tolist()} ({bad.size} of {n}); "
                         "drop failed simulations first (simulate_batch(..., throw=False, return_status=True) "
                         "marks them; simulate_training_set replaces them)")
    if check_bounds:
        outside = (thetas < space.lower) | (thetas > space.upper)
        if outside.any():
            row, col = np.argwhere(outside)[0]
            p = space.parameters[col]
            raise ValueError(f"{where}: {int(outside.any(axis=1).sum())} samples lie outside the parameter bounds, "
                             f"first: row {row}, {p.name} = {thetas[row, col]} not in [{p.lower}, {p.upper}]; "
                             "widen the bounds (space.replace(name, lower=..., upper=...))")
    return thetas, xs
