"""The one training loop for every network in jcalib (PELS-VAE, coupling flows, IMPU MLPs).

``fit(key, model, loss_fn, train, val, config)`` trains a flax nnx module with an optax
optimizer on minibatches and returns a `TrainingResult` holding the model with the best
weights restored:

- **Loss.** ``loss_fn(key, model, batch) -> loss`` or ``(loss, {name: metric})``: a JAX
  function of a ``jax.random`` key (for any randomness of the forward pass, e.g. VAE
  sampling), the module and a minibatch (the same pytree layout as ``train``, leading axis
  ``batch_size``). Metrics are averaged per epoch into the history.
- **Speed.** One epoch is one jitted `jax.lax.scan` over its minibatches (shuffled by a key
  derived from ``key`` and the epoch; the last partial batch is dropped so every
  step has one shape). Validation is one jitted call on the whole validation set.
- **Devices.** With several devices (``jax.devices()``, of one process or of all processes
  after `jcalib.distributed.initialize`) training is data-parallel: weights, optimizer state
  and data are replicated on every device, each minibatch is split over the devices
  (`jcalib.distributed.shard_rows`) and the compiler turns the minibatch mean into a
  cross-device reduction, so every device applies the same averaged gradient. The result
  equals one device's up to round-off (the order in which the gradient mean adds up); every
  process must call `fit` with the same data and key. With one device nothing changes.
- **Optimizer.** Adam (AdamW with ``weight_decay``) with a constant, multi-step
  (``milestones``, factor ``decay``; zhang2023, aka2023) or exponential (``decay`` per
  epoch; zhang2023's BayesFlow) learning-rate schedule, optional gradient clipping.
- **Early stopping.** After each epoch the monitored loss (validation, else training) is
  compared with the best so far; after ``patience`` epochs without an improvement of more
  than ``min_delta`` training stops. The best weights are restored either way.
- **Checkpoints** (``checkpoint=path``): after every ``checkpoint_every`` epochs the weights,
  optimizer state, best weights, history, epoch counter, configuration, a fingerprint of the
  data and the caller's ``extra`` (normalisation statistics, network configuration) are
  written to one msgpack file (atomically: a temporary file, then a rename; never pickle).
  ``fit`` with the same path resumes from it: an interrupted run continues where it stopped,
  with the same shuffling as an uninterrupted one; a finished run is returned as it is
  (``n_epochs_run == 0``). A checkpoint resumes only the run it was written by: the
  fingerprint (SHA-256 over the float32 bytes, shapes and pytree structure of ``train`` and
  ``val``, for online training of the first epoch's data, the ``key``, plus the caller's
  ``fingerprint`` data such as normalisation statistics) and the configuration must match, else `fit`
  raises; ``fresh_start=True`` ignores the old checkpoint and overwrites it. `save_model` /
  `load_model` store trained weights plus ``extra`` for inference.
- **Files.** Checkpoints and model files carry a SHA-256 checksum verified on reading
  (`jcalib.fileio.pack_checked`): a damaged file raises ``ValueError`` ("checksum") instead
  of loading wrong weights; a missing one `FileNotFoundError`. Files written by jcalib
  versions without checksums do not load: train or save them again.
- **Report.** `TrainingResult.n_epochs_run` counts the epochs this call trained; every fit
  logs it (logger ``jcalib.nn.training``, level INFO), and a resumed run also says so on
  the progress bar.

Networks train in float32 (DESIGN.md): floating-point arrays of ``train`` and ``val`` are
cast to float32. Modules must be deterministic given their parameters and the ``key``
(no batch statistics); only `nnx.Param` variables are trained and saved.

Example:
    >>> import jax
    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from jcalib.nn.layers import MLP
    >>> x = jnp.linspace(-3, 3, 256)[:, None]
    >>> net = MLP(1, (32, 32), 1, rngs=nnx.Rngs(0))
    >>> mse = lambda key, model, batch: jnp.mean((model(batch["x"]) - batch["y"]) ** 2)
    >>> config = TrainingConfig(epochs=5, progress=False)
    >>> result = fit(jax.random.key(0), net, mse, {"x": x, "y": jnp.sin(x)}, config=config)
    >>> len(result.history["train_loss"])
    5
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, serialization
from jaxtyping import PRNGKeyArray
from tqdm.auto import tqdm

from jcalib import distributed, fileio
from jcalib.jsonable import to_jsonable

__all__ = ["SCHEDULES", "NetworkConfig", "TrainingConfig", "TrainingResult", "fit", "load_model", "make_optimizer",
           "read_model_extra",
           "save_model"]

SCHEDULES = ("constant", "multistep", "exponential")
_FORMAT = "jcalib-training-checkpoint-2"  # 2: with the data fingerprint
_logger = logging.getLogger(__name__)
_MODEL_FORMAT = "jcalib-model-1"


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Settings of `fit`.

    Attributes:
        epochs: maximum number of passes over the training set.
        batch_size: minibatch size (capped at the training-set size).
        learning_rate: initial learning rate of Adam.
        schedule: ``"constant"``, ``"multistep"`` (multiply by ``decay`` at each epoch in
            ``milestones``) or ``"exponential"`` (multiply by ``decay`` every epoch,
            smoothly per step).
        milestones: epochs of the multi-step schedule, increasing.
        decay: the schedule's factor, in (0, 1].
        weight_decay: decoupled weight decay (AdamW) when > 0.
        clip_norm: clip gradients to this global norm (None: no clipping).
        patience: epochs without improvement before stopping (None: never stop early).
        min_delta: improvement of the monitored loss that counts.
        checkpoint_every: epochs between checkpoints (with ``fit(checkpoint=...)``).
        progress: show a progress bar with the losses.
    """

    epochs: int = 100
    batch_size: int = 64
    learning_rate: float = 1e-3
    schedule: str = "constant"
    milestones: tuple[int, ...] = ()
    decay: float = 0.1
    weight_decay: float = 0.0
    clip_norm: float | None = None
    patience: int | None = None
    min_delta: float = 0.0
    checkpoint_every: int = 1
    progress: bool = True

    def __post_init__(self):
        for name in ("epochs", "batch_size", "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TrainingConfig: {name} must be a positive integer; got {value!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainingConfig: schedule must be one of {SCHEDULES}; got {self.schedule!r}")
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"TrainingConfig: learning_rate must be positive; got {self.learning_rate!r}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"TrainingConfig: decay must lie in (0, 1]; got {self.decay!r}")
        milestones = tuple(int(m) for m in self.milestones)
        if any(m < 1 for m in milestones) or list(milestones) != sorted(set(milestones)):
            raise ValueError(f"TrainingConfig: milestones must be increasing positive epochs; got {self.milestones!r}")
        object.__setattr__(self, "milestones", milestones)
        if self.patience is not None and (not isinstance(self.patience, (int, np.integer)) or self.patience < 1):
            raise ValueError(f"TrainingConfig: patience must be None or a positive integer; got {self.patience!r}")
        if self.weight_decay < 0 or self.min_delta < 0:
            raise ValueError("TrainingConfig: weight_decay and min_delta must be non-negative")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"TrainingConfig: clip_norm must be None or positive; got {self.clip_norm!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> TrainingConfig:
        """The inverse of `to_dict` (also after a JSON round trip, which turns tuples into lists)."""
        settings = dict(d)
        settings["milestones"] = tuple(settings.get("milestones", ()))
        return cls(**settings)


class NetworkConfig:
    """Mixin of the networks' frozen config dataclasses (`PELSVAEConfig`, `BayesFlowConfig`,
    `InverseMappingConfig`): a ``training`` field holding a `TrainingConfig` (a mapping is
    converted), ``to_dict`` for JSON and ``from_dict`` its inverse (lists back to the tuples named
    in ``_TUPLES``)."""

    _TUPLES: tuple[str, ...] = ()

    def _check_training(self) -> None:
        if isinstance(self.training, Mapping):
            object.__setattr__(self, "training", TrainingConfig.from_dict(self.training))
        if not isinstance(self.training, TrainingConfig):
            raise ValueError(f"{type(self).__name__}: training must be a TrainingConfig; got "
                             f"{type(self.training).__name__}")

    def to_dict(self) -> dict:
        return to_jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping):
        """The inverse of `to_dict` (also after a JSON round trip)."""
        settings = dict(d)
        for name in cls._TUPLES:
            if name in settings:
                settings[name] = tuple(settings[name])
        if "training" in settings:
            settings["training"] = TrainingConfig.from_dict(settings["training"])
        return cls(**settings)


def make_optimizer(config: TrainingConfig, steps_per_epoch: int) -> optax.GradientTransformation:
    """Adam(W) with the configured learning-rate schedule (steps counted in minibatches)."""
    lr = _schedule(config, steps_per_epoch)
    opt = optax.adamw(lr, weight_decay=config.weight_decay) if config.weight_decay else optax.adam(lr)
    if config.clip_norm is not None:
        opt = optax.chain(optax.clip_by_global_norm(config.clip_norm), opt)
    return opt


def _schedule(config: TrainingConfig, steps_per_epoch: int) -> optax.Schedule:
    """The learning rate as a function of the minibatch step (also recorded in the history)."""
    if config.schedule == "multistep":
        return optax.piecewise_constant_schedule(
            config.learning_rate, {m * steps_per_epoch: config.decay for m in config.milestones})
    if config.schedule == "exponential":
        return optax.exponential_decay(config.learning_rate, transition_steps=steps_per_epoch,
                                       decay_rate=config.decay)
    return optax.constant_schedule(config.learning_rate)


class TrainingResult(eqx.Module):
    """What `fit` returns.

    Attributes:
        model: the module with the best weights (lowest monitored loss) restored.
        history: per-epoch lists: ``train_loss``, ``val_loss`` (with validation data),
            ``learning_rate``, ``epoch_time_s`` and the means of ``loss_fn``'s metrics
            (``train_<name>``, ``val_<name>``).
        best_epoch: 1-based epoch of the best weights.
        best_loss: the monitored loss there.
        n_epochs: epochs trained in total (including those before a resume).
        n_epochs_run: epochs trained by this call (``n_epochs - resumed_from`` after a
            resume; 0 when the checkpoint held a finished run).
        stopped_early: whether early stopping ended the run.
        resumed_from: the epoch of the checkpoint the run resumed from, or None.
        wall_time_s: seconds of this call, including compilation.
        samples_per_second: training samples processed per second over this call's epochs
            after the first (compilation excluded), NaN with fewer than two epochs.
    """

    model: Any
    history: dict
    best_epoch: int
    best_loss: float
    n_epochs: int
    n_epochs_run: int
    stopped_early: bool
    resumed_from: int | None
    wall_time_s: float
    samples_per_second: float

    def to_dict(self) -> dict:
        return to_jsonable({k: getattr(self, k) for k in (
            "history", "best_epoch", "best_loss", "n_epochs", "n_epochs_run", "stopped_early", "resumed_from",
            "wall_time_s", "samples_per_second")})


def fit(
    key: PRNGKeyArray,
    model: nnx.Module,
    loss_fn: Callable,
    train: Any,
    val: Any = None,
    config: TrainingConfig = TrainingConfig(),
    *,
    checkpoint: str | os.PathLike | None = None,
    extra: Mapping | None = None,
    fingerprint: Mapping | None = None,
    fresh_start: bool = False,
) -> TrainingResult:
    """Train ``model`` (in place, best weights restored at the end) on ``train``.

    Args:
        key: a ``jax.random`` key: the shuffling and the per-step keys given to ``loss_fn``
            (the same key and data, the same run; part of the checkpoint's fingerprint).
        model: a flax nnx module; its `nnx.Param` variables are trained.
        loss_fn: ``(key, model, batch) -> loss`` or ``(loss, {name: metric})``.
        train: a pytree of arrays with a common leading axis (the samples), e.g.
            ``{"x": (n, ...), "theta": (n, ...)}``; or a callable ``epoch -> data`` (epochs
            counted from 1) giving fresh data of one layout and size every epoch (online
            training, e.g. new simulations). It is called once per epoch, plus once with 1
            up front for the layout, so it should cache epoch 1; the time it takes is
            recorded as ``data_time_s`` and left out of ``epoch_time_s`` and the throughput.
        val: validation data of the same layout, or None (then the training loss is
            monitored).
        config: `TrainingConfig`.
        checkpoint: a file path: resume from it when it exists (same model structure,
            configuration and data fingerprint), and write it every
            ``config.checkpoint_every`` epochs and at the end.
        extra: JSON-like data (arrays, numbers, strings, nested dicts) saved in the
            checkpoint, e.g. normalisation statistics.
        fingerprint: JSON-like data that identifies the run besides ``train`` and ``val``
            (e.g. the normalisation statistics, so that a checkpoint never pairs its weights
            with other statistics); hashed into the checkpoint's data fingerprint.
        fresh_start: train from scratch even when ``checkpoint`` exists (it is overwritten
            at the first checkpoint write).

    Returns:
        `TrainingResult`.

    Raises:
        ValueError: empty or ragged data, non-finite inputs, a validation set of another
            layout, a checkpoint of another model, configuration or data (unless
            ``fresh_start``), a damaged checkpoint, a non-finite loss at the first epoch.

    Long for its documented options; the body is 75 lines.
    """
    start_time = time.perf_counter()
    data_fn, train, val, n_train = _fit_data(train, val)
    batch_size = min(config.batch_size, n_train)
    n_batches = n_train // batch_size
    optimizer = make_optimizer(config, n_batches)

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    with jax.numpy_dtype_promotion("standard"):
        opt_state = optimizer.init(params)
    state = {"params": params, "opt_state": opt_state, "best_params": params, "epoch": 0, "best_epoch": 0,
             "best_loss": float("inf"), "bad_epochs": 0, "history": {}}
    resumed_from = None
    path = None if checkpoint is None else pathlib.Path(checkpoint)
    base_key = _check_key(key)
    data_hash = None if path is None else _fingerprint(train, val, dict(fingerprint or {}) | {
        "__key": np.asarray(jax.random.key_data(base_key))})
    if path is not None and path.exists() and not fresh_start:
        state = _load_checkpoint(path, state, config, data_hash)
        resumed_from = state["epoch"]

    rest = distributed.replicate(rest)  # on every device when data-parallel (identity with one device)
    train_epoch, evaluate = _compiled_steps(loss_fn, graphdef, rest, optimizer, n_train, batch_size)
    schedule = _schedule(config, n_batches)
    history = state["history"]
    p, o = distributed.replicate((state["params"], state["opt_state"]))
    train_on_devices, val_on_devices = distributed.replicate((train, val))
    stopped_early = False
    timed_epochs, timed_s, first_epoch = 0, 0.0, state["epoch"] + 1
    bar = tqdm(total=config.epochs, initial=state["epoch"], desc="training", unit="epoch",
               disable=not config.progress)
    with bar:
        if resumed_from is not None and config.progress:
            bar.write(f"fit: resuming from epoch {resumed_from} of the checkpoint {path}")
        for epoch in range(state["epoch"] + 1, config.epochs + 1):
            if data_fn is not None and epoch > 1:
                t = time.perf_counter()
                train = _epoch_data(data_fn, epoch, train)
                train_on_devices = distributed.replicate(train)
                history.setdefault("data_time_s", []).append(time.perf_counter() - t)
            elif data_fn is not None:
                history.setdefault("data_time_s", []).append(0.0)
            t = time.perf_counter()
            key_train, key_val = jax.random.split(jax.random.fold_in(base_key, epoch))
            p, o, train_loss, train_metrics = train_epoch(p, o, train_on_devices, key_train)
            row = {"train_loss": float(train_loss), **{f"train_{k}": float(v) for k, v in train_metrics.items()}}
            if val is not None:
                val_loss, val_metrics = evaluate(p, val_on_devices, key_val)
                row |= {"val_loss": float(val_loss), **{f"val_{k}": float(v) for k, v in val_metrics.items()}}
            elapsed = time.perf_counter() - t
            if epoch > first_epoch:  # the first epoch of a call includes compilation
                timed_epochs, timed_s = timed_epochs + 1, timed_s + elapsed
            with jax.numpy_dtype_promotion("standard"):  # optax schedules mix Python floats and ints
                lr = float(schedule((epoch - 1) * n_batches))
            row |= {"learning_rate": lr, "epoch_time_s": elapsed}
            for k, v in row.items():
                history.setdefault(k, []).append(v)
            diverged = _monitor(state, row["val_loss" if val is not None else "train_loss"], p, epoch, config)
            state |= {"params": p, "opt_state": o, "epoch": epoch}
            bar.update(1)
            bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k in ("train_loss", "val_loss")})
            stop = diverged or (config.patience is not None and state["bad_epochs"] >= config.patience)
            if path is not None and (epoch % config.checkpoint_every == 0 or stop or epoch == config.epochs):
                _save_checkpoint(path, state, config, extra, data_hash)
            if stop:
                stopped_early = True
                break
    nnx.update(model, distributed.to_local(state["best_params"]))
    n_epochs_run = int(state["epoch"]) - (resumed_from or 0)
    _log_end(resumed_from, path, n_epochs_run, int(state["best_epoch"]))
    return TrainingResult(
        model=model, history=history, best_epoch=int(state["best_epoch"]), best_loss=float(state["best_loss"]),
        n_epochs=int(state["epoch"]), stopped_early=stopped_early, resumed_from=resumed_from,
        wall_time_s=time.perf_counter() - start_time,
        samples_per_second=timed_epochs * n_batches * batch_size / timed_s if timed_epochs else float("nan"),
        n_epochs_run=n_epochs_run)


def _fit_data(train, val):
    """(the data function or None, the first epoch's training data, the validation data,
    the number of training samples), as float32, checked."""
    data_fn = train if callable(train) else None
    train = _as_float32(train(1) if data_fn is not None else train, "train")
    n_train = _n_samples(train, "train")
    if val is not None:
        val = _as_float32(val, "val")
        _n_samples(val, "val")
        if jax.tree_util.tree_structure(val) != jax.tree_util.tree_structure(train):
            raise ValueError("fit: val must have the layout (pytree structure) of train")
    return data_fn, train, val, n_train


def _compiled_steps(loss_fn, graphdef, rest, optimizer, n_train: int, batch_size: int):
    """``train_epoch(params, opt_state, data, key) -> (params, opt_state, mean loss, mean
    metrics)`` (one shuffled pass in minibatches, a ``lax.scan``) and ``evaluate(params,
    data, key) -> (loss, metrics)``, both jitted."""
    n_batches = n_train // batch_size

    def loss_of(p, batch, key):
        out = loss_fn(key, nnx.merge(graphdef, p, rest), batch)
        loss, metrics = out if isinstance(out, tuple) else (out, {})
        return loss, metrics

    @jax.jit
    def train_epoch(p, o, data, key):
        key_perm, key_steps = jax.random.split(key)
        index = jax.random.permutation(key_perm, n_train)[: n_batches * batch_size].reshape(n_batches, batch_size)

        def step(carry, xs):
            p, o = carry
            idx, k = xs
            batch = distributed.shard_rows(jax.tree_util.tree_map(lambda a: a[idx], data))
            (loss, metrics), grads = jax.value_and_grad(loss_of, has_aux=True)(p, batch, k)
            with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counters
                updates, o = optimizer.update(grads, o, p)
            return (optax.apply_updates(p, updates), o), (loss, metrics)

        (p, o), (losses, metrics) = jax.lax.scan(step, (p, o), (index, jax.random.split(key_steps, n_batches)))
        return p, o, jnp.mean(losses), jax.tree_util.tree_map(jnp.mean, metrics)

    return train_epoch, jax.jit(loss_of)


def _monitor(state: dict, monitored: float, params, epoch: int, config: TrainingConfig) -> bool:
    """Update the best weights and the count of epochs without improvement from the
    monitored loss; True when it is not finite (the run stops, keeping the best weights).

    Raises:
        ValueError: the loss is not finite before any epoch improved it.
    """
    diverged = not np.isfinite(monitored)
    if diverged and state["best_epoch"] == 0:
        raise ValueError(f"fit: the loss is not finite at epoch {epoch} ({monitored}); check the data "
                         "scaling and the learning rate")
    if diverged:
        state["history"].setdefault("diverged_at_epoch", []).append(epoch)
    elif monitored < state["best_loss"] - config.min_delta:
        state |= {"best_params": params, "best_epoch": epoch, "best_loss": monitored, "bad_epochs": 0}
    else:
        state["bad_epochs"] += 1
    return diverged


def _log_end(resumed_from: int | None, path, n_epochs_run: int, best_epoch: int) -> None:
    if resumed_from is None:
        _logger.info("fit: trained %d epochs (best epoch %d)", n_epochs_run, best_epoch)
    else:
        _logger.info("fit: resumed from epoch %d of the checkpoint %s and trained %d more epochs%s (best epoch %d)",
                     resumed_from, path, n_epochs_run,
                     " (the checkpoint held a finished run; fresh_start=True trains again)" if n_epochs_run == 0
                     else "", best_epoch)


def save_model(path: str | os.PathLike, model: nnx.Module, extra: Mapping | None = None) -> None:
    """Write the module's `nnx.Param` weights and ``extra`` (normalisation statistics,
    configuration) to a msgpack file, atomically and with a SHA-256 checksum."""
    payload = {"format": _MODEL_FORMAT, "params": _flat(nnx.state(model, nnx.Param)), "extra": _plain(extra or {})}
    _write(pathlib.Path(path), payload)


def load_model(path: str | os.PathLike, model: nnx.Module) -> dict:
    """Load weights written by `save_model` into ``model`` (a module of the same
    structure, e.g. freshly built from the saved configuration); returns ``extra``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not such a file; a damaged one ("checksum"); weights missing, unexpected
            or of other shapes.
    """
    payload = _read(pathlib.Path(path), _MODEL_FORMAT)
    nnx.update(model, _unflat(nnx.state(model, nnx.Param), payload["params"], "weights"))
    return payload["extra"]


def read_model_extra(path: str | os.PathLike) -> dict:
    """The ``extra`` of a `save_model` file without loading weights (e.g. the configuration
    to build the network before `load_model`)."""
    return _read(pathlib.Path(path), _MODEL_FORMAT)["extra"]


# --- helpers ---------------------------------------------------------------------------------
def _check_key(key) -> PRNGKeyArray:
    """``key`` as a typed ``jax.random`` key (legacy uint32 keys are wrapped)."""
    if isinstance(key, (int, np.integer)) or not hasattr(key, "dtype"):
        raise ValueError(f"fit: key must be a jax.random key (jax.random.key(seed)); got {type(key).__name__}")
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if np.shape(key) == (2,) and np.dtype(key.dtype) == np.uint32:
        return jax.random.wrap_key_data(key)
    raise ValueError(f"fit: key must be a jax.random key (jax.random.key(seed)); got an array of dtype {key.dtype}")


def _as_float32(data, what: str):
    def cast(x):
        x = jnp.asarray(x)
        if jnp.issubdtype(x.dtype, jnp.floating):
            if not bool(jnp.all(jnp.isfinite(x))):
                raise ValueError(f"fit: {what} contains NaN or inf; drop or impute those samples first")
            return x.astype(jnp.float32)
        return x
    return jax.tree_util.tree_map(cast, data)


def _epoch_data(data_fn: Callable, epoch: int, previous):
    """``data_fn(epoch)`` as float32, checked against the layout and size of ``previous``."""
    data = _as_float32(data_fn(epoch), f"train (epoch {epoch})")
    if jax.tree_util.tree_structure(data) != jax.tree_util.tree_structure(previous) or any(
            np.shape(a) != np.shape(b) for a, b in zip(jax.tree_util.tree_leaves(data),
                                                         jax.tree_util.tree_leaves(previous))):
        raise ValueError(f"fit: the train callable gave data of another layout or size at epoch {epoch}; every "
                         "epoch needs the same pytree structure and array shapes")
    return data


def _n_samples(data, what: str) -> int:
    leaves = jax.tree_util.tree_leaves(data)
    if not leaves:
        raise ValueError(f"fit: {what} holds no arrays")
    sizes = {int(np.shape(x)[0]) if np.ndim(x) else -1 for x in leaves}
    if len(sizes) != 1 or min(sizes) < 1:
        raise ValueError(f"fit: every array of {what} needs the same leading (sample) axis; got sizes {sorted(sizes)}")
    return sizes.pop()


def _flat(tree) -> dict[str, np.ndarray]:
    """``{path: array}`` of a pytree (paths as `jax.tree_util.keystr`)."""
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _unflat(template, flat: Mapping[str, np.ndarray], what: str):
    """``template`` with its leaves replaced by ``flat[path]`` (shapes checked)."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    names = [jax.tree_util.keystr(k) for k, _ in paths]
    missing, unexpected = sorted(set(names) - set(flat)), sorted(set(flat) - set(names))
    if missing or unexpected:
        raise ValueError(f"checkpoint: {what} do not match the model: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}; build the model with the configuration it was saved with")
    leaves = []
    for name, (_, leaf) in zip(names, paths):
        value = np.asarray(flat[name])
        if value.shape != np.shape(leaf):
            raise ValueError(f"checkpoint: {what} {name} has shape {value.shape}, the model {np.shape(leaf)}")
        leaves.append(jnp.asarray(value, dtype=jnp.asarray(leaf).dtype))
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _plain(value):
    """Nested dicts/lists of arrays, numbers and strings for msgpack (tuples become lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (jax.Array, np.ndarray)):
        return np.asarray(value)
    return value


_KINDS = {_FORMAT: "training checkpoint", _MODEL_FORMAT: "model file"}


def _write(path: pathlib.Path, payload: dict) -> None:
    """msgpack ``payload`` with a SHA-256 checksum, written atomically (an interrupted write
    never leaves a broken file)."""
    fileio.atomic_write_bytes(path, fileio.pack_checked(serialization.msgpack_serialize(payload)))


def _read(path: pathlib.Path, expected: str) -> dict:
    what = _KINDS.get(expected, "file")
    inner = fileio.unpack_checked(fileio.read_input_bytes(path, f"jcalib {what}"), path, what)
    try:
        payload = serialization.msgpack_restore(inner)
    except Exception as err:  # cannot happen with a matching checksum unless written by another program
        raise ValueError(f"{path}: not a jcalib {what} ({type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != expected:
        found = payload.get("format") if isinstance(payload, dict) else None
        raise ValueError(f"{path}: not a jcalib {what} (format {found!r}, expected {expected!r})")
    return payload


def _fingerprint(train, val, identity: Mapping | None) -> str:
    """SHA-256 over the pytree structure, dtypes, shapes and bytes of ``train`` and ``val``
    (already float32) and the msgpack bytes of ``identity``."""
    h = hashlib.sha256()
    for name, data in (("train", train), ("val", val)):
        leaves, treedef = jax.tree_util.tree_flatten(data)
        h.update(f"{name}\0{treedef}\0".encode())
        for leaf in leaves:
            a = np.ascontiguousarray(np.asarray(leaf))
            h.update(f"{a.dtype.str}\0{a.shape}\0".encode())
            h.update(a.tobytes())
    h.update(serialization.msgpack_serialize(_plain(dict(identity or {}))))
    return h.hexdigest()


def _save_checkpoint(path: pathlib.Path, state: dict, config: TrainingConfig, extra, data_hash: str) -> None:
    payload = {"format": _FORMAT, "config": _plain(config.to_dict()), "extra": _plain(extra or {}),
               "fingerprint": data_hash,
               "params": _flat(state["params"]), "best_params": _flat(state["best_params"]),
               "opt_state": _flat(state["opt_state"]), "history": _plain(state["history"]),
               **{k: state[k] for k in ("epoch", "best_epoch", "best_loss", "bad_epochs")}}
    _write(path, payload)


def _load_checkpoint(path: pathlib.Path, state: dict, config: TrainingConfig, data_hash: str) -> dict:
    payload = _read(path, _FORMAT)
    saved = {k: v for k, v in payload["config"].items() if k not in ("epochs", "progress", "patience")}
    current = _plain({k: v for k, v in config.to_dict().items() if k not in ("epochs", "progress", "patience")})
    if serialization.msgpack_serialize(saved) != serialization.msgpack_serialize(current):
        raise ValueError(f"fit: the checkpoint {path} was written with another configuration ({saved}); "
                         "pass the same TrainingConfig (epochs and patience may differ), another path, or "
                         "fresh_start=True to train from scratch and overwrite it")
    if payload.get("fingerprint") != data_hash:
        raise ValueError(f"fit: the checkpoint {path} was written for other training data (or validation data, "
                         "normalisation or network configuration); delete it, pass another path, or "
                         "fresh_start=True to train from scratch and overwrite it")
    return {"params": _unflat(state["params"], payload["params"], "weights"),
            "best_params": _unflat(state["params"], payload["best_params"], "weights"),
            "opt_state": _unflat(state["opt_state"], payload["opt_state"], "optimizer state"),
            "history": {k: list(v) for k, v in payload["history"].items()},
            **{k: payload[k] for k in ("epoch", "best_epoch", "best_loss", "bad_epochs")}}
