"""BayesFlow: amortized posterior estimation with a summary network and a coupling flow.

The network of Radev et al. (2020) as used by Zhang & Mikelsons (2023, Fig. 1) to identify
the parameters of a simulation model from its trajectories:

- **Summary network** ``h_ψ(x)``: compresses a trajectory ``x`` ``(n_times, n_outputs)``
  into ``summary_size`` statistics. ``"lstm"`` (the paper's choice) and ``"gru"`` run a
  recurrent layer over time and map its final state linearly; ``"conv"`` uses two 1-D
  convolutions (kernel 5 and 3, stride 2, "SAME" padding, ``summary_hidden`` channels, ReLU;
  computed by `jcalib.nn.layers.patch_conv1d`), mean pooling over time and a linear map;
  ``"mlp"`` applies a ReLU MLP to every time step (its outputs and the step's position
  ``t / (n_times - 1)``), averages over time and maps linearly.
- **Conditional invertible network** ``f_φ(θ; h_ψ(x))``: `CouplingFlow` (affine coupling
  blocks, standard-normal base).

Both are trained jointly by maximum likelihood (eq. 6: the Monte-Carlo estimate of the
expected KL divergence between the true and the approximate posterior, up to a constant)::

    L(φ, ψ) = 1/M Σ_m [ ||f_φ(θ_m; h_ψ(x_m))||² / 2 - log|det J_f| ] + D/2 log 2π

(`bayesflow_loss`: the mean negative log posterior density; the constant makes it a proper
negative log-likelihood of the normalised parameters). The estimate of eq. 7 is the mean of
``B`` posterior draws ``θ_b = f⁻¹(z_b; h(x))``, ``z_b ~ N(0, I)`` (`AmortizedPosterior.estimate`).
Training uses the shared loop `jcalib.nn.training.fit` (Adam with an exponentially decaying
learning rate, as in the paper, and validation-based early stopping).

Coordinates. Users pass physical ``θ`` and trajectories in model units. Inside, ``θ`` is
mapped to the space's internal coordinate (log for log-scale parameters) and standardised
with the training mean and standard deviation; every output is standardised with its mean
and standard deviation over the training samples and times. The statistics are float64,
the networks float32; both are saved with the weights. Posterior draws are returned in
physical units and always inside the parameter bounds: draws outside them (zero prior density,
sbi's "leakage", a sign of a poorly trained network or of data unlike the training data) are
rejected and redrawn, with a `PosteriorLeakageWarning` when more than 10 % were rejected. The
range of every output over the training trajectories is saved with the network; an observation
outside it (`TRAINING_RANGE_MARGIN`) gets an `OutsideTrainingRangeWarning`.

The prior. The posterior is amortized over the distribution of the training ``θ``: `fit`
learns the posterior under whatever prior the ``thetas`` were drawn from; `fit_online` draws
them with `simulate_training_set`'s ``sampler`` (default ``simulator.parameters.sample``: uniform in
the internal coordinate, i.e. log-uniform for log-scale parameters).

Example:
    >>> from jcalib.model import FunctionSimulator
    >>> from jcalib.parameters import Parameter, ParameterSpace
    >>> space = ParameterSpace([Parameter("a", 0.0, -5.0, 5.0)])
    >>> simulator = FunctionSimulator(lambda th: jnp.broadcast_to(th, (4, 1)), space, ts=jnp.arange(4.0))
    >>> data = simulate_training_set(jax.random.key(0), simulator, 256, noise=0.5)
    >>> config = BayesFlowConfig(summary="mlp", summary_size=4, summary_hidden=16, n_blocks=2,
    ...                          coupling_hidden=(16,), training=TrainingConfig(epochs=2, progress=False))
    >>> posterior = AmortizedPosterior(simulator, config).fit(jax.random.key(1), *data)
    >>> posterior.sample(jax.random.key(2), data.trajectories[0], 100).shape
    (100, 1)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jcalib._warnings import warn_user
from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractSimulator, check_simulator
from jcalib.nn import training as _training
from jcalib.nn.data import (
    NOT_TRAINED,
    AbstractNetwork,
    NetworkMetrics,
    check_training_data,
    network_metrics,
    simulate_training_set,
)
from jcalib.nn.flows import CouplingFlow
from jcalib.nn.layers import MLP, SequenceEncoder, Standardizer, patch_conv1d
from jcalib.nn.training import NetworkConfig, TrainingConfig, load_model, save_model
from jcalib.parameters import Parameter, ParameterSpace

__all__ = ["SUMMARIES", "TRAINING_RANGE_MARGIN", "AmortizedPosterior", "BayesFlowConfig", "OutsideTrainingRangeWarning",
           "PosteriorLeakageWarning", "PosteriorNetwork", "SampleInfo", "SummaryNetwork", "bayesflow_loss",
           "outside_training_range"]

SUMMARIES = ("lstm", "gru", "conv", "mlp")
COORDINATES = ("physical", "internal")
_FORMAT = "jcalib-bayesflow-2"  # 2: the flow's permutation key
_LOG_2PI = float(np.log(2.0 * np.pi))
_CONSTANT_RTOL = 1e-12
"""A parameter or output whose standard deviation over the training set is at most this times
its magnitude does not vary (`Standardizer.fit`'s ``rtol``): it is centred, not rescaled."""
_ACTNORM_INIT_SAMPLES = 1024  # samples of the data-dependent ActNorm initialisation
_MAX_REJECTION_ROUNDS = 50  # sample: rounds of n draws to find n inside the bounds (acceptance >= 2 %)
LEAKAGE_WARNING_ACCEPTANCE = 0.9  # sample warns when fewer draws than this fall inside the bounds
TRAINING_RANGE_MARGIN = 0.1
"""Observations are flagged outside the training range when an output leaves the range of that
output over the training trajectories (all samples and times) widened by this fraction of the
range on each side. The widening is for noise and for the prior's tails: a new trajectory from
the training prior exceeds the maximum of ``n`` training draws with probability about
``1 / (n + 1)`` per output, and then mostly by a small part of the range; 10 % keeps such false
alarms rare while data in other units or scales (a factor 10, 1e10, a 1e300 entry) is caught.
Being inside says nothing about the network's accuracy there."""


class PosteriorLeakageWarning(UserWarning):
    """Posterior draws fell outside the parameter bounds (zero prior density) and were rejected."""


class OutsideTrainingRangeWarning(UserWarning):
    """An observation lies outside the range of the training trajectories: the network extrapolates."""


class SampleInfo(NamedTuple):
    """Diagnostics of `AmortizedPosterior.sample` (``return_info=True``), per observation
    (scalars for one trajectory).

    Attributes:
        acceptance: fraction of the network's draws inside the parameter bounds (the others
            were rejected and redrawn, as sbi does for "leakage").
        outside_training_range: the observation leaves the training data's range
            (`outside_training_range`).
    """

    acceptance: np.ndarray
    outside_training_range: np.ndarray


def outside_training_range(x: Float[ArrayLike, "... n_times n_outputs"], x_min: Float[ArrayLike, " n_outputs"],
                           x_max: Float[ArrayLike, " n_outputs"], margin: float = TRAINING_RANGE_MARGIN
                           ) -> np.ndarray:
    """Per trajectory: True when an entry is not finite or an output leaves ``[x_min, x_max]``
    widened by ``margin`` times its width on each side (a constant output: ``margin`` times its
    magnitude, at least ``margin``). See `TRAINING_RANGE_MARGIN`.

    Args:
        x: ``(n_times, n_outputs)`` or ``(n_obs, n_times, n_outputs)``.
        x_min, x_max: per output, the training trajectories' extremes.
        margin: the widening, a fraction of the range.

    Returns:
        A boolean array of shape ``x.shape[:-2]``.
    """
    x = np.asarray(x, np.float64)
    x_min, x_max = np.asarray(x_min, np.float64), np.asarray(x_max, np.float64)
    width = x_max - x_min
    width = np.where(width > 0, width, np.maximum(np.maximum(np.abs(x_min), np.abs(x_max)), 1.0))
    with np.errstate(invalid="ignore"):
        inside = (x >= x_min - margin * width) & (x <= x_max + margin * width)
    return ~np.all(inside, axis=(-2, -1))


def _default_training() -> TrainingConfig:
    # Adam with an exponentially decaying learning rate (Zhang & Mikelsons 2023, "Training"):
    # 1e-3, times 0.97 per epoch (0.05 after 100 epochs); early stopping after 15 epochs
    # without a better validation loss (a no-op without validation data).
    return TrainingConfig(epochs=100, batch_size=64, learning_rate=1e-3, schedule="exponential", decay=0.97,
                          patience=15)


@dataclasses.dataclass(frozen=True)
class BayesFlowConfig(NetworkConfig):
    """Network sizes and training settings of an `AmortizedPosterior`.

    Attributes:
        summary: summary network, one of ``"lstm"``, ``"gru"``, ``"conv"``, ``"mlp"`` (see the
            module docstring).
        summary_size: dimension of the summary statistics (the flow's condition).
        summary_hidden: width of the recurrent state / convolution channels / MLP layer.
        n_blocks: coupling blocks of the flow.
        coupling_hidden: hidden widths of every coupling MLP.
        clamp: bound of the soft-clamped log-scales of the couplings.
        actnorm: ActNorm in front of every block (data-initialised from the training set).
        training: `TrainingConfig` of the shared training loop.
    """

    _TUPLES = ("coupling_hidden",)

    summary: str = "lstm"
    summary_size: int = 32
    summary_hidden: int = 64
    n_blocks: int = 6
    coupling_hidden: tuple[int, ...] = (128, 128)
    clamp: float = 1.9
    actnorm: bool = False
    training: TrainingConfig = dataclasses.field(default_factory=_default_training)

    def __post_init__(self):
        if self.summary not in SUMMARIES:
            raise ValueError(f"BayesFlowConfig: summary must be one of {SUMMARIES}; got {self.summary!r}")
        for name in ("summary_size", "summary_hidden", "n_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"BayesFlowConfig: {name} must be a positive integer; got {value!r}")
        hidden = tuple(self.coupling_hidden)
        if not hidden or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1 for h in hidden):
            raise ValueError(f"BayesFlowConfig: coupling_hidden must be a non-empty tuple of positive integers; "
                             f"got {self.coupling_hidden!r}")
        object.__setattr__(self, "coupling_hidden", tuple(int(h) for h in hidden))
        if not (np.isfinite(self.clamp) and self.clamp > 0):
            raise ValueError(f"BayesFlowConfig: clamp must be positive and finite; got {self.clamp!r}")
        self._check_training()


class SummaryNetwork(nnx.Module):
    """``h_ψ``: trajectories ``(..., n_times, n_outputs)`` -> statistics ``(..., size)``."""

    def __init__(self, kind: str, n_times: int, n_outputs: int, hidden: int, size: int, *, rngs: nnx.Rngs):
        if kind not in SUMMARIES:
            raise ValueError(f"SummaryNetwork: kind must be one of {SUMMARIES}; got {kind!r}")
        self.kind, self.n_times = kind, int(n_times)
        if kind in ("lstm", "gru"):
            self.body = SequenceEncoder(n_outputs, hidden, cell=kind, rngs=rngs)
        elif kind == "conv":
            # nnx.Conv's layers and weights, computed as patch matmuls (fast gradients inside fit's scan on CPU)
            self.body = nnx.List([nnx.Conv(n_outputs, hidden, 5, strides=2, conv_general_dilated=patch_conv1d,
                                           rngs=rngs),
                                  nnx.Conv(hidden, hidden, 3, strides=2, conv_general_dilated=patch_conv1d,
                                           rngs=rngs)])
        else:  # per-time-step MLP of (x_t, t position), mean-pooled
            self.body = MLP(n_outputs + 1, (hidden,), hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, size, rngs=rngs)

    def __call__(self, x: Float[Array, "... n_times n_outputs"]) -> Float[Array, "... size"]:
        x = jnp.asarray(x, jnp.float32)
        if self.kind in ("lstm", "gru"):
            h = self.body(x)
        elif self.kind == "conv":
            batch = x.shape[:-2]
            h = x.reshape(-1, *x.shape[-2:])
            for conv in self.body:
                h = nnx.relu(conv(h))
            h = jnp.mean(h, axis=-2).reshape(*batch, -1)
        else:
            position = jnp.linspace(0.0, 1.0, x.shape[-2], dtype=jnp.float32)
            position = jnp.broadcast_to(position.reshape(-1, 1), (*x.shape[:-1], 1))
            h = jnp.mean(nnx.relu(self.body(jnp.concatenate([x, position], axis=-1))), axis=-2)
        return self.head(h)


class PosteriorNetwork(nnx.Module):
    """Summary network and coupling flow in normalised coordinates (standardised internal
    ``θ``, standardised trajectories); `AmortizedPosterior` wraps it in physical units.

    Example:
        >>> net = PosteriorNetwork(2, 10, 3, BayesFlowConfig(summary="gru", n_blocks=2), rngs=nnx.Rngs(0))
        >>> net.log_prob(jnp.zeros((4, 2)), jnp.ones((4, 10, 3))).shape
        (4,)
    """

    def __init__(self, n_params: int, n_times: int, n_outputs: int, config: BayesFlowConfig, *, rngs: nnx.Rngs,
                 permutation_key: PRNGKeyArray | None = None) -> None:
        self.summary = SummaryNetwork(config.summary, n_times, n_outputs, config.summary_hidden,
                                      config.summary_size, rngs=rngs)
        self.flow = CouplingFlow(n_params, config.summary_size, n_blocks=config.n_blocks,
                                 hidden=config.coupling_hidden, clamp=config.clamp, actnorm=config.actnorm,
                                 permutation_key=permutation_key, rngs=rngs)
        self.n_params, self.n_times, self.n_outputs = int(n_params), int(n_times), int(n_outputs)

    def summarize(self, x: Float[Array, "... n_times n_outputs"]) -> Float[Array, "... summary_size"]:
        """Summary statistics ``h_ψ(x)``."""
        return self.summary(x)

    def log_prob(self, theta: Float[Array, "... n_params"], x: Float[Array, "... n_times n_outputs"]
                 ) -> Float[Array, "..."]:
        """``log p(θ | x)`` of normalised ``θ`` (batch axes of ``θ`` and ``x`` broadcast)."""
        return self.flow.log_prob(theta, self.summarize(x))


def bayesflow_loss(key: PRNGKeyArray | None, network: PosteriorNetwork, batch: Mapping[str, Array]):
    """Eq. 6 of Zhang & Mikelsons (2023) on a normalised minibatch, for `training.fit`.

    Args:
        key: unused (the loss is deterministic); there for the networks' common loss signature.
        network: the `PosteriorNetwork`.
        batch: ``{"theta": (b, n_params), "x": (b, n_times, n_outputs)}`` (normalised, float32).

    Returns:
        ``(loss, metrics)``: the mean negative log posterior density; ``z2`` (mean of
        ``||z||² / n_params``, 1 for a calibrated flow) and ``log_det`` (mean log-determinant).
    """
    del key
    z, log_det = network.flow.forward(batch["theta"], network.summarize(batch["x"]))
    half_z2 = 0.5 * jnp.sum(z**2, axis=-1)
    n_params = z.shape[-1]
    loss = jnp.mean(half_z2 - log_det) + 0.5 * n_params * _LOG_2PI
    return loss, {"z2": jnp.mean(2.0 * half_z2) / n_params, "log_det": jnp.mean(log_det)}


class AmortizedPosterior(AbstractNetwork):
    """A BayesFlow posterior for one simulator: train, sample, evaluate, save and load (physical
    units outside).

    The lifecycle of every jcalib network (`jcalib.nn.data`): ``AmortizedPosterior(simulator,
    config)`` describes it (the simulator gives the parameter space and the shape of the
    trajectories); ``fit(key, thetas, trajectories, *, val=...)`` (or `fit_online`) returns a new,
    immutable trained posterior; ``save(path)`` / ``AmortizedPosterior.load(path)``.

    Args:
        simulator: a `jcalib.AbstractSimulator` (for data without one, a
            `jcalib.FunctionSimulator` with the space, times and output names).
        config: `BayesFlowConfig`.

    Raises:
        ValueError: ``simulator`` is not a simulator, ``config`` not a `BayesFlowConfig`.

    Example: see the module docstring.
    """

    def __init__(self, simulator: AbstractSimulator, config: BayesFlowConfig = BayesFlowConfig()):
        if not isinstance(config, BayesFlowConfig):
            raise ValueError(f"AmortizedPosterior: config must be a BayesFlowConfig; got {type(config).__name__}")
        simulator = check_simulator(simulator, "AmortizedPosterior")
        self._set(config=config, simulator=simulator, network=None, _space=simulator.parameters, _stats=None,
                  training=None, _n_train=None, _fns={}, _permutation=None)
        self._freeze()

    def _blank(self) -> AmortizedPosterior:
        """An unfrozen copy of this (untrained) description for `fit` to fill."""
        new = object.__new__(type(self))
        new._set(config=self.config, simulator=self.simulator, network=None, _space=self._space, _stats=None,
                 training=None, _n_train=None, _fns={}, _permutation=None)
        return new

    # --- properties ----------------------------------------------------------------------------
    @property
    def space(self) -> ParameterSpace:
        self._require()
        return self._space

    @property
    def names(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def n_train(self) -> int | None:
        """Training samples (per epoch for `fit_online`)."""
        return self._n_train

    @property
    def n_times(self) -> int:
        self._require()
        return self.network.n_times

    @property
    def n_outputs(self) -> int:
        self._require()
        return self.network.n_outputs

    def _require(self):
        if self.network is None:
            raise ValueError(NOT_TRAINED.format(cls="AmortizedPosterior") + " (or fit_online(key, ...))")

    # --- training (fit: AbstractNetwork.fit) ----------------------------------------------------
    def _fit(self, key, thetas, trajectories, val, checkpoint, fresh_start) -> AmortizedPosterior:
        """`AbstractNetwork.fit` (eq. 6): the key gives the initial weights, the flow's
        permutations and the training loop's shuffling. The distribution of ``thetas`` is the
        prior the posterior is amortized over."""
        new = self._blank()
        key_init, key_train = jax.random.split(key)
        new._setup(key_init, thetas, trajectories)
        train = new._normalised(thetas, trajectories)
        val_data = None if val is None else new._normalised(*val)
        new._train(key_train, train, val_data, self.config.training, checkpoint, fresh_start)
        new._set(_n_train=int(thetas.shape[0]))
        return new._freeze()

    def fit_online(
        self,
        key: PRNGKeyArray,
        *,
        n_per_epoch: int,
        n_val: int,
        epochs: int | None = None,
        checkpoint: str | os.PathLike | None = None,
        sampler: str | Callable = "uniform",
        noise: float | ArrayLike | Callable | None = None,
        chunk_size: int | None = None,
        fresh_start: bool = False,
    ) -> AmortizedPosterior:
        """Train on fresh simulations of the simulator every epoch (online learning: no sample
        is seen twice).

        Every epoch simulates ``n_per_epoch`` draws of the prior ``sampler`` with
        `simulate_training_set` (failed solves replaced by fresh draws, ``noise`` added). A
        fixed validation set of ``n_val`` draws is made the same way. Epoch ``e`` uses
        ``jax.random.fold_in(key, e)``, so a resumed run sees the data an uninterrupted one
        would. The normalisation statistics come from the first epoch's draw.

        Args:
            key: a ``jax.random`` key (data, initial weights, shuffling).
            n_per_epoch: simulations per epoch (>= 2).
            n_val: validation simulations (0: monitor the training loss).
            epochs: overrides ``config.training.epochs``.
            checkpoint: resumable checkpoint file of the training loop; it resumes only the
                run that wrote it (see `fit`).
            sampler: the prior of the training parameters (`simulate_training_set`).
            noise: observation noise added to the simulations (`simulate_training_set`).
            chunk_size: `simulate_batch` chunk size.
            fresh_start: train from scratch even when ``checkpoint`` exists, overwriting it.

        Returns:
            A new trained, immutable `AmortizedPosterior`.

        Raises:
            ValueError: bad sizes, sampler or noise, simulations that keep failing; a checkpoint
                of another run or a damaged one.
        """
        for name, value, low in (("n_per_epoch", n_per_epoch, 2), ("n_val", n_val, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"AmortizedPosterior.fit_online: {name} must be an integer >= {low}; got {value!r}")
        config = self.config.training
        if epochs is not None:
            config = dataclasses.replace(config, epochs=epochs)
        key_val, key_data, key_init, key_train = jax.random.split(key, 4)

        def draw(k, n):
            data = simulate_training_set(k, self.simulator, n, sampler=sampler, noise=noise, chunk_size=chunk_size)
            return self._check_data(*data, "fit_online")

        new = self._blank()
        first = draw(jax.random.fold_in(key_data, 1), n_per_epoch)
        new._setup(key_init, *first)
        first_data = new._normalised(*first)

        def data(epoch: int) -> dict:
            return first_data if epoch == 1 else new._normalised(*draw(jax.random.fold_in(key_data, epoch),
                                                                       n_per_epoch))

        val_data = new._normalised(*draw(key_val, n_val)) if n_val > 0 else None
        new._train(key_train, data, val_data, config, checkpoint, fresh_start)
        new._set(_n_train=int(n_per_epoch))
        return new._freeze()

    def _check_data(self, thetas, trajectories, where: str) -> tuple[np.ndarray, np.ndarray]:
        simulator = self.simulator
        return check_training_data(self._space, thetas, trajectories, f"AmortizedPosterior.{where}",
                                   n_times=None if simulator is None else int(np.shape(simulator.ts)[0]),
                                   output_names=None if simulator is None else tuple(simulator.output_names))

    def _setup(self, key: PRNGKeyArray, thetas: np.ndarray, trajectories: np.ndarray) -> None:
        space = self._space
        internal = np.asarray(space.to_internal(thetas), np.float64)
        theta_scaler = Standardizer.fit(internal, 0, rtol=_CONSTANT_RTOL, dtype=_float_dtype())
        x_scaler = Standardizer.fit(trajectories, (0, 1), rtol=_CONSTANT_RTOL, dtype=_float_dtype())  # per output
        stats = {"theta_mean": np.asarray(theta_scaler.mean, np.float64),
                 "theta_std": np.asarray(theta_scaler.std, np.float64),
                 "x_mean": np.asarray(x_scaler.mean, np.float64), "x_std": np.asarray(x_scaler.std, np.float64),
                 "x_min": trajectories.min(axis=(0, 1)), "x_max": trajectories.max(axis=(0, 1))}  # training range
        key_weights, key_permutation = jax.random.split(key)
        network = PosteriorNetwork(space.n_params, trajectories.shape[1], trajectories.shape[2], self.config,
                                   rngs=nnx.Rngs(key_weights), permutation_key=key_permutation)
        self._set(_stats=stats, network=network, _permutation=key_permutation, _fns={})

    def _normalised(self, thetas: np.ndarray, trajectories: np.ndarray) -> dict:
        theta_scaler, x_scaler = self._scalers()
        u = theta_scaler(jnp.asarray(self._space.to_internal(thetas), _float_dtype()))
        return {"theta": np.asarray(u, np.float32),
                "x": np.asarray(x_scaler(jnp.asarray(trajectories, _float_dtype())), np.float32)}

    def _scalers(self) -> tuple[Standardizer, Standardizer]:
        """The standardisers of the internal parameters and of the observations (per output)."""
        s = {k: jnp.asarray(v, _float_dtype()) for k, v in self._stats.items()}
        return Standardizer(s["theta_mean"], s["theta_std"]), Standardizer(s["x_mean"], s["x_std"])

    def _train(self, key, train, val, config: TrainingConfig, checkpoint, fresh_start: bool = False) -> None:
        first = train(1) if callable(train) else train
        m = min(_ACTNORM_INIT_SAMPLES, first["theta"].shape[0])
        network = self.network
        if self.config.actnorm:  # data-dependent initialisation needs the summaries of a first batch
            network.flow.initialize_actnorm(first["theta"][:m], network.summarize(first["x"][:m]))
        extra = self._extra()
        # the checkpoint's weights belong to its normalisation statistics and space
        identity = {k: extra[k] for k in ("parameters", "theta_mean", "theta_std", "x_mean", "x_std", "permutation")}
        identity["network"] = {k: v for k, v in extra["config"].items() if k != "training"}  # sizes
        training = _training.fit(key, network, bayesflow_loss, train, val, config, checkpoint=checkpoint,
                                 extra=extra, fingerprint=identity, fresh_start=fresh_start)
        self._set(training=training, _fns={})

    # --- inference -----------------------------------------------------------------------------
    def _check_x(self, x, what: str) -> tuple[Array, bool]:
        self._require()
        x = np.asarray(x, np.float64)
        shape = (self.n_times, self.n_outputs)
        if x.ndim not in (2, 3) or x.shape[-2:] != shape:
            raise ValueError(f"AmortizedPosterior.{what}: x must have shape (n_times, n_outputs) = {shape} or "
                             f"(n_obs, {shape[0]}, {shape[1]}); got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"AmortizedPosterior.{what}: x contains NaN or inf; the network needs complete "
                             "trajectories")
        return jnp.asarray(x, _float_dtype()), x.ndim == 3

    def _fn(self, name: str) -> Callable:
        """Jitted inference functions of the current weights (rebuilt after training)."""
        if name not in self._fns:
            graphdef, state = nnx.split(self.network)
            stats = {k: jnp.asarray(v, _float_dtype()) for k, v in self._stats.items()}
            theta_scaler, x_scaler = self._scalers()
            space = self._space

            def normalise_x(x):
                return x_scaler(x).astype(jnp.float32)

            def sample(state, key, x, n):
                net = nnx.merge(graphdef, state)
                u = net.flow.sample(key, net.summarize(normalise_x(x)), n).astype(x.dtype)
                return space.to_physical(theta_scaler.inverse(u))

            def log_prob(state, theta, x, internal):
                net = nnx.merge(graphdef, state)
                context = net.summarize(normalise_x(x))
                if x.ndim == 3:  # (n_obs, S) against theta (n_obs, [k,] n_params)
                    context = context.reshape(context.shape[0], *(1,) * (theta.ndim - 2), context.shape[-1])
                theta_int = space.to_internal(theta)
                u = theta_scaler(theta_int)
                lp = net.flow.log_prob(u, context).astype(theta.dtype) - jnp.sum(jnp.log(stats["theta_std"]))
                if not internal:  # density of θ: p(log θ) / θ for log-scale parameters
                    log_scale = _lead(jnp.asarray(space.log_scale), theta)
                    lp = lp - jnp.sum(jnp.where(log_scale, theta_int, jnp.zeros_like(theta_int)), axis=-1)
                return lp

            fns = {"sample": jax.jit(sample, static_argnames="n"),
                   "log_prob": jax.jit(log_prob, static_argnames="internal")}
            self._fns.update({k: functools.partial(f, state) for k, f in fns.items()})
        return self._fns[name]

    def sample(self, key: PRNGKeyArray, x: Float[ArrayLike, "... n_times n_outputs"], n: int, *,
               return_info: bool = False) -> Float[Array, "... n n_params"]:
        """Posterior draws in physical units, all inside the parameter bounds.

        The network's draws outside the bounds (zero prior density: "leakage" in sbi's words,
        a sign of an under-trained network or of data unlike the training data) are rejected
        and redrawn, in rounds of ``n`` vectorised draws (at most 50), until ``n`` per
        observation are inside. A `PosteriorLeakageWarning` says when fewer than 90 % of all the
        draws were inside, an `OutsideTrainingRangeWarning` when an observation leaves the
        training data's range (`outside_training_range`).

        Args:
            key: a ``jax.random`` key (the same key, the same draws, also after `load`).
            x: one trajectory ``(n_times, n_outputs)`` -> ``(n, n_params)``; a batch
                ``(n_obs, n_times, n_outputs)`` -> ``(n_obs, n, n_params)`` (observation ``i``
                drawn with ``jax.random.split(key, n_obs)[i]`` in the first round).
            n: draws per trajectory.
            return_info: also return a `SampleInfo` (acceptance, outside the training range).

        Returns:
            The draws, or ``(draws, SampleInfo)`` with ``return_info``.

        Raises:
            ValueError: untrained, wrong shapes, NaN in ``x``, ``n`` not a positive integer,
                fewer than ``n`` draws inside the bounds after all rounds.
        """
        x, batched = self._check_x(x, "sample")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"AmortizedPosterior.sample: n must be a positive integer; got {n!r}")
        n = int(n)
        outside = self.outside_training_range(x)
        if np.any(outside):
            n_out = int(np.sum(outside))
            what = "the observation lies" if not batched else f"{n_out} of {outside.size} observations lie"
            warn_user(f"AmortizedPosterior: {what} outside the range of the training trajectories (widened by "
                      f"{TRAINING_RANGE_MARGIN:.0%}); the network extrapolates and its posterior is not to be "
                      "trusted there; check the data's units and scale", OutsideTrainingRangeWarning)
        draws, acceptance = self._inside_bounds(key, x, n, batched)
        # over all draws: single observations near a bound leak more even from a good network (a flow
        # has no hard edge); SampleInfo gives each observation's acceptance
        if float(np.mean(acceptance)) < LEAKAGE_WARNING_ACCEPTANCE:
            worst = "" if not batched else f" (worst observation: {1 - np.min(acceptance):.1%})"
            warn_user(f"AmortizedPosterior: {1 - float(np.mean(acceptance)):.1%} of the posterior draws fell outside "
                      f"the parameter bounds and were rejected{worst}; the network may be under-trained",
                      PosteriorLeakageWarning)
        if return_info:
            return draws, SampleInfo(acceptance if batched else acceptance[0], outside)
        return draws

    def outside_training_range(self, x: Float[ArrayLike, "... n_times n_outputs"]) -> np.ndarray:
        """Per trajectory, True when ``x`` leaves the range of the training trajectories or is
        not finite (module function `outside_training_range`, margin `TRAINING_RANGE_MARGIN`)."""
        self._require()
        return outside_training_range(x, self._stats["x_min"], self._stats["x_max"])

    def _inside_bounds(self, key, x: Array, n: int, batched: bool) -> tuple[Array, np.ndarray]:
        """``n`` draws per observation inside the bounds, and the fraction of draws inside.

        Each rejection round after the first draws ``n`` more for the observations still short
        of ``n`` only (their number padded to a power of two, so that few shapes compile):
        redrawing all of them made 400 observations, one of which accepted 5 %, cost 60 full
        rounds."""
        fn = self._fn("sample")
        lower, upper = np.asarray(self._space.lower, np.float64), np.asarray(self._space.upper, np.float64)
        n_obs, p = (x.shape[0] if batched else 1), self._space.n_params
        out, count = None, np.zeros(n_obs, np.int64)
        n_inside, n_drawn = np.zeros(n_obs, np.int64), np.zeros(n_obs, np.int64)
        raw_dtype = None
        for attempt in range(_MAX_REJECTION_ROUNDS):
            short = np.flatnonzero(count < n)
            if short.size == 0:
                break
            pad = 0 if attempt == 0 else (1 << int(np.ceil(np.log2(short.size)))) - short.size
            rows = np.concatenate([short, np.repeat(short[:1], pad)])
            round_key = key if attempt == 0 else jax.random.fold_in(key, attempt)
            raw = fn(round_key, x[rows] if batched else x, n=n)
            raw_dtype = raw.dtype
            d = np.asarray(raw, np.float64).reshape(rows.size, n, p)[:short.size]
            inside = np.all((d >= lower) & (d <= upper), axis=-1)  # NaN draws are outside too
            n_drawn[short] += n
            n_inside[short] += inside.sum(axis=1)
            if attempt == 0 and inside.all():
                return raw, np.ones(n_obs)
            if out is None:
                out = np.empty((n_obs, n, p))
            rank = count[short, None] + np.cumsum(inside, axis=1) - 1  # slot of each accepted draw
            keep = inside & (rank < n)
            obs, draw = np.nonzero(keep)
            out[short[obs], rank[obs, draw]] = d[obs, draw]
            count[short] = np.minimum(n, count[short] + inside.sum(axis=1))
        acceptance = n_inside / n_drawn
        if np.any(count < n):
            raise ValueError(f"AmortizedPosterior.sample: only {int(count.min())} of {n} draws fell inside the "
                             f"parameter bounds after {_MAX_REJECTION_ROUNDS} rounds (acceptance "
                             f"{float(acceptance.min()):.2%}); the network is under-trained or the data unlike its "
                             "training data: train longer or on more data, or check the data")
        shape = (n_obs, n, p) if batched else (n, p)
        return jnp.asarray(out.reshape(shape), raw_dtype), acceptance

    def estimate(self, key: PRNGKeyArray, x: Float[ArrayLike, "... n_times n_outputs"], n: int = 1000
                 ) -> tuple[Float[Array, "... n_params"], Float[Array, "... n_params"]]:
        """Eq. 7: the posterior mean of ``n`` draws and their standard deviation, physical units
        (``(n_params,)`` each for one trajectory, ``(n_obs, n_params)`` for a batch). The draws
        are those of `sample` (inside the bounds; same warnings and errors)."""
        draws = self.sample(key, x, n)
        return jnp.mean(draws, axis=-2), jnp.std(draws, axis=-2, ddof=1 if n > 1 else 0)

    def log_prob(self, theta: Float[ArrayLike, "... n_params"], x: Float[ArrayLike, "... n_times n_outputs"],
                 coordinates: str = "physical") -> Float[Array, "..."]:
        """Log posterior density of ``θ`` (physical values) given ``x``.

        Args:
            theta: physical parameters: any ``(..., n_params)`` for one trajectory; for a batch
                of ``n_obs`` trajectories ``(n_obs, n_params)`` or ``(n_obs, k, n_params)``.
            x: ``(n_times, n_outputs)`` or ``(n_obs, n_times, n_outputs)``.
            coordinates: ``"physical"``: the density with respect to physical ``θ`` (for a
                log-scale parameter ``p(θ) = p(log θ) / θ``); ``"internal"``: with respect to
                the internal coordinate (log for log-scale parameters).

        Raises:
            ValueError: untrained, bad shapes, non-positive values of log-scale parameters,
                unknown coordinates.
        """
        if coordinates not in COORDINATES:
            raise ValueError(f"AmortizedPosterior.log_prob: coordinates must be one of {COORDINATES}; "
                             f"got {coordinates!r}")
        x, batched = self._check_x(x, "log_prob")
        theta = np.asarray(theta, np.float64)
        n = self.space.n_params
        if theta.ndim < 1 or theta.shape[-1] != n or (batched and (theta.ndim not in (2, 3)
                                                                   or theta.shape[0] != x.shape[0])):
            expected = f"(n_obs={x.shape[0]}, [k,] {n})" if batched else f"(..., {n})"
            raise ValueError(f"AmortizedPosterior.log_prob: theta must have shape {expected}; got {theta.shape}")
        if np.any(theta[..., self.space.log_scale] <= 0):
            raise ValueError("AmortizedPosterior.log_prob: log-scale parameters must be positive")
        return self._fn("log_prob")(jnp.asarray(theta, _float_dtype()), x, internal=coordinates == "internal")

    def evaluate(self, key: PRNGKeyArray, thetas: Float[ArrayLike, "n n_params"],
                 trajectories: Float[ArrayLike, "n n_times n_outputs"], *, n_draws: int = 1000) -> NetworkMetrics:
        """Parameter recovery on a test set: the posterior means (eq. 7, ``n_draws`` draws each)
        against the true parameters.

        Returns:
            `NetworkMetrics` per parameter (``scale``: the width of the parameter's bounds, 1
            where they are infinite); ``outside`` flags trajectories outside the training range.

        Raises:
            ValueError: untrained; shapes that do not match; NaN/inf (see `sample`).
        """
        self._require()
        thetas, trajectories = check_training_data(self._space, thetas, trajectories, "AmortizedPosterior.evaluate",
                                                   n_times=self.n_times, check_bounds=False)
        means, _ = self.estimate(key, trajectories, n_draws)
        width = np.asarray(self._space.upper, np.float64) - np.asarray(self._space.lower, np.float64)
        return network_metrics(thetas, np.asarray(means), self.names, scale=np.where(np.isfinite(width), width, 1.0),
                               outside=self.outside_training_range(trajectories))

    # --- persistence ---------------------------------------------------------------------------
    def _extra(self) -> dict:
        return {"format": _FORMAT, "config": self.config.to_dict(), "parameters": self._space.table(),
                "n_times": self.network.n_times, "n_outputs": self.network.n_outputs,
                "permutation": np.asarray(jax.random.key_data(self._permutation)),  # the flow's fixed permutations
                **{k: np.asarray(v, np.float64) for k, v in self._stats.items()}}

    def to_dict(self) -> dict:
        """Configuration, sizes and (after training) the training history, for JSON."""
        d = {"config": self.config.to_dict(), "n_train": self._n_train}
        if self.network is not None:
            d |= {"parameters": list(self._space.names), "n_times": self.n_times, "n_outputs": self.n_outputs,
                  "n_weights": int(sum(np.size(w) for w in jax.tree_util.tree_leaves(
                      nnx.state(self.network, nnx.Param))))}
        if self.training is not None:
            d["training"] = self.training.to_dict()
        return to_jsonable(d)

    def save(self, path: str | os.PathLike) -> None:
        """Weights, configuration, parameter space and normalisation statistics in one msgpack
        file with a SHA-256 checksum, written atomically (`jcalib.nn.training.save_model`)."""
        self._require()
        save_model(path, self.network, self._extra() | {"n_train": self._n_train})

    @classmethod
    def load(cls, path: str | os.PathLike) -> AmortizedPosterior:
        """An `AmortizedPosterior` from `save`; the same key gives the same draws as before.

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a BayesFlow posterior file, or a damaged one ("checksum").
        """
        extra = _training.read_model_extra(path)
        if extra.get("format") != _FORMAT:
            raise ValueError(f"{path}: not a BayesFlow posterior file (format {extra.get('format')!r})")
        if "x_min" not in extra or "x_max" not in extra or "permutation" not in extra:
            raise ValueError(f"{path}: a BayesFlow posterior file of an older jcalib (without the training data's "
                             "range or the flow's permutation); train the network again and save it")
        config = BayesFlowConfig.from_dict(extra["config"])
        space = ParameterSpace(Parameter(**p) for p in extra["parameters"])
        posterior = object.__new__(cls)
        posterior._set(config=config, simulator=None, _space=space, training=None, _n_train=extra.get("n_train"),
                       _fns={}, _permutation=jax.random.wrap_key_data(np.asarray(extra["permutation"], np.uint32)),
                       _stats={k: np.asarray(extra[k], np.float64) for k in ("theta_mean", "theta_std", "x_mean",
                                                                             "x_std", "x_min", "x_max")})
        network = PosteriorNetwork(space.n_params, int(extra["n_times"]), int(extra["n_outputs"]), config,
                                   rngs=nnx.Rngs(0), permutation_key=posterior._permutation)
        load_model(path, network)
        posterior._set(network=network)
        return posterior._freeze()


# --- helpers -------------------------------------------------------------------------------------
def _float_dtype():
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _lead(stat: Array, x: Array) -> Array:
    """Per-feature ``stat`` broadcast explicitly against ``x`` (strict rank promotion)."""
    return jnp.broadcast_to(jnp.reshape(stat, (1,) * (x.ndim - stat.ndim) + stat.shape), x.shape)
