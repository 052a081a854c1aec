"""Inverse mapping parameter updating (IMPU): an MLP from response features to parameters.

Kessels, Fey & van de Wouw (2023), "Real-time parameter updating for nonlinear digital twins
using inverse mapping models and transient-based features", Sec. 2-4:

- **Offline** (`InverseMapping.fit`): parameter sets ``p_s`` are drawn over the parameter
  box (Latin hypercube for training, uniform for validation), the model simulates the
  experiment for each and measurement noise is added (the paper adds it to training, validation
  and test data alike: it makes the network robust): `jcalib.nn.simulate_training_set` with
  ``noise=paper_noise(model)``. ``fit(key, thetas, trajectories, *, val=...)`` then extracts
  features ``ψ(p_s)`` (`jcalib.nn.features`, one of the seven types of the paper's Table 5),
  min-max normalises features and parameters per entry with the *training* data's minimum and
  maximum (Appendix A), and trains an MLP with ReLU hidden layers and a linear output layer (so
  estimates can leave the training box) on the mean squared error with Adam and
  patience-based early stopping on the validation loss, best weights restored
  (`jcalib.nn.training.fit`).
- **Online** (`InverseMapping.infer`): features of a measurement, normalised with the stored
  training bounds, go through the network; the output is denormalised to physical
  parameters. One jitted call, deterministic; `InverseMapping.inference_fn` gives the bare
  jitted function for the tightest loops.
- **Accuracy** (`InverseMapping.evaluate`): relative errors ``ε = (p̂ − p̄) / p̄`` (eq. 18) of
  noisy test measurements (`simulate_training_set` uniformly over the box, or a region of it,
  or beyond it); bias (eq. 19), unbiased standard deviation (eq. 20), mean absolute relative
  error (eq. 21) and the largest absolute relative error per parameter (`NetworkMetrics`).

Defaults (paper, Sec. 4.1.3): 1,000 Latin-hypercube training samples and 1,000 uniform
validation samples (`simulate_training_set` with ``sampler="lhs"`` and ``"uniform"``), Adam
(learning rate 1e-3, the Keras default), at most 200 epochs of batches of 50, early stopping
after 40 epochs without improvement, two hidden ReLU layers. The paper's Table 4 (the layer
widths) is not available to us: the default ``hidden=(64, 64)`` is **chosen here** (see
`DEFAULT_HIDDEN`).

Measurement noise: `paper_noise` gives the paper's noise from the model's ``impu_settings()``
(rigid_double_beam: additive Gaussian, σ = 2e-4 m on y1 and 2e-2 rad on y2; roll_plane: 1 % of
each noise-free value, ``ε ~ N(0, (0.01 y)²)``), to pass to `simulate_training_set`.

Outside the training range. A measurement whose normalised features leave
``[−margin, 1 + margin]`` (any feature) or whose normalised estimate does
(any parameter) is flagged `IMPUEstimate.outside_training_range`: the network extrapolates
there (the paper, Sec. 4.3: "it is advised to treat parameter estimates outside the training
space with caution ... one can often recognize that the true system lies outside"). Margins
are fractions of the training range of each entry: ``feature_margin=0.25`` (noise-dominated
features, e.g. high-frequency bins, exceed the training extremes of 1,000 noisy samples by a
few percent of their range now and then; 0.25 keeps such false alarms rare) and
``theta_margin=0.1`` (an in-box estimate near the box edge misses by its error, a few percent
of the range).

Example:
    >>> import jax, jcalib                                                  # doctest: +SKIP
    >>> jax.config.update("jax_enable_x64", True)                            # doctest: +SKIP
    >>> beam = jcalib.models.get("rigid_double_beam")                        # doctest: +SKIP
    >>> std, relative = paper_noise(beam)                                    # doctest: +SKIP
    >>> noise = dict(noise=std, noise_model="multiplicative" if relative else "additive")  # doctest: +SKIP
    >>> train = jcalib.nn.simulate_training_set(jax.random.key(0), beam, 1000, sampler="lhs", **noise)  # doctest: +SKIP
    >>> val = jcalib.nn.simulate_training_set(jax.random.key(1), beam, 1000, **noise)  # doctest: +SKIP
    >>> impu = InverseMapping(beam).fit(jax.random.key(2), *train, val=val)  # doctest: +SKIP
    >>> estimate = impu.infer(measured)        # measured: (256, 2)          # doctest: +SKIP
    >>> impu.evaluate(*jcalib.nn.simulate_training_set(jax.random.key(3), beam, 1000, **noise)).mare  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractSimulator, check_simulator
from jcalib.nn import training as _training
from jcalib.nn.data import NOT_TRAINED, AbstractNetwork, NetworkMetrics, check_training_data, network_metrics
from jcalib.nn.features import FEATURE_TYPES, FeatureExtractor
from jcalib.nn.layers import MLP, MinMaxScaler
from jcalib.nn.training import NetworkConfig, TrainingConfig, load_model, save_model
from jcalib.parameters import Parameter, ParameterSpace

__all__ = [
    "DEFAULT_HIDDEN",
    "IMPUEstimate",
    "InverseMapping",
    "InverseMappingConfig",
    "paper_noise",
    "paper_training",
]

DEFAULT_HIDDEN = (64, 64)
"""Two ReLU hidden layers as in the paper (n_r = 2); their widths (the paper's Table 4) are not
available to us, 64 each is chosen here (quick rigid_double_beam runs: see the tests and the
README for the accuracy it reaches)."""

FEATURE_MARGIN = 0.25
THETA_MARGIN = 0.1
_FORMAT = "jcalib-impu-2"  # 2: the InverseMappingConfig


def paper_training() -> TrainingConfig:
    """The paper's training settings (Sec. 4.1.3): Adam with learning rate 1e-3 (Keras'
    default), at most 200 epochs of minibatches of 50, early stopping after 40 epochs without
    a lower validation loss (best weights restored)."""
    return TrainingConfig(epochs=200, batch_size=50, learning_rate=1e-3, patience=40, progress=False)


def paper_noise(model) -> tuple[np.ndarray, bool]:
    """The IMPU paper's measurement noise for ``model``: ``(std per output, relative)``.

    Read from the model's ``impu_settings()`` (the paper's settings belong to the models, not to
    this module): rigid_double_beam: additive, σ = (2e-4 m, 2e-2 rad); roll_plane: relative, 1 %
    of the noise-free value on every output. A model of your own gets its paper settings by
    defining ``impu_settings()`` returning ``{"noise_std": one σ per output, "relative_noise":
    bool, "fboi_options": FeatureExtractor options for the FBoI kinds}``.

    Raises:
        ValueError: a model without ``impu_settings()``.
    """
    settings = _paper_settings(model)
    if settings is None:
        raise ValueError(f"paper_noise: needs a model with the paper's settings (a method impu_settings(), as "
                         f"rigid_double_beam and roll_plane have); got {type(model).__name__}: pass your own noise "
                         "to simulate_training_set(..., noise=<std per output>, noise_model='additive' or "
                         "'multiplicative')")
    return np.asarray(settings["noise_std"], np.float64), bool(settings["relative_noise"])


def _paper_settings(model) -> dict | None:
    """``model.impu_settings()``, or None for a model (or None) without the paper's settings."""
    settings = getattr(model, "impu_settings", None)
    return None if settings is None else dict(settings())


class IMPUEstimate(eqx.Module):
    """What `InverseMapping.infer` returns.

    Attributes:
        theta: estimated physical parameters, ``(n_params,)`` or ``(n, n_params)``.
        outside_training_range: per measurement, features or estimate outside the training
            box widened by the margins (the network extrapolates: treat with caution).
        features_outside: per measurement, some normalised feature outside
            ``[−feature_margin, 1 + feature_margin]``.
        theta_outside: per measurement, some normalised estimate outside
            ``[−theta_margin, 1 + theta_margin]``.
        names: parameter names.
    """

    theta: Float[Array, "*batch n_params"]
    outside_training_range: Bool[Array, "*batch"]
    features_outside: Bool[Array, "*batch"]
    theta_outside: Bool[Array, "*batch"]
    names: tuple[str, ...] = eqx.field(static=True)

    def to_dict(self) -> dict:
        theta = np.asarray(self.theta, np.float64)
        d = {"names": list(self.names), "theta": theta,
             "outside_training_range": np.asarray(self.outside_training_range),
             "features_outside": np.asarray(self.features_outside), "theta_outside": np.asarray(self.theta_outside)}
        if theta.ndim == 1:
            d["theta_by_name"] = dict(zip(self.names, theta.tolist()))
        return to_jsonable(d)


def _plain_options(options: Mapping) -> dict:
    out = {}
    for k, v in options.items():
        if isinstance(v, (np.ndarray, list, tuple)):
            v = [int(a) if isinstance(a, (int, np.integer)) else float(a) for a in np.asarray(v).tolist()]
        out[str(k)] = v
    return out


def _default_training() -> TrainingConfig:
    return paper_training()


@dataclasses.dataclass(frozen=True)
class InverseMappingConfig(NetworkConfig):
    """Feature type, network and training settings of an `InverseMapping`.

    Attributes:
        feature: one of `jcalib.nn.features.FEATURE_TYPES` (default RI (FBoI), the paper's best).
        hidden: widths of the ReLU hidden layers (`DEFAULT_HIDDEN`).
        training: `TrainingConfig` (default `paper_training`).
        feature_options: keywords of `FeatureExtractor.create` (``stride``, ``bins``,
            ``f_max``, ``n_bins``, ``threshold``, ``n_extrema``, ``prominence``). The FBoI
            kinds default to the simulator's ``impu_settings()["fboi_options"]``
            (rigid_double_beam: the paper's 0-4 Hz, ``f_max=4``).
        feature_margin, theta_margin: margins of the outside-the-training-range flag (module
            docstring).
    """

    _TUPLES = ("hidden",)

    feature: str = "RI-FBoI"
    hidden: tuple[int, ...] = DEFAULT_HIDDEN
    training: TrainingConfig = dataclasses.field(default_factory=_default_training)
    feature_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    feature_margin: float = FEATURE_MARGIN
    theta_margin: float = THETA_MARGIN

    def __post_init__(self):
        if self.feature not in FEATURE_TYPES:
            raise ValueError(f"InverseMappingConfig: unknown feature kind {self.feature!r}; use one of "
                             f"{FEATURE_TYPES}")
        hidden = tuple(self.hidden)
        if not hidden or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1 for h in hidden):
            raise ValueError(f"InverseMappingConfig: hidden must be positive layer widths; got {self.hidden!r}")
        object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
        self._check_training()
        if not isinstance(self.feature_options, Mapping):
            raise ValueError(f"InverseMappingConfig: feature_options must be a mapping of FeatureExtractor.create "
                             f"keywords; got {self.feature_options!r}")
        object.__setattr__(self, "feature_options", _plain_options(self.feature_options))
        for name in ("feature_margin", "theta_margin"):
            m = getattr(self, name)
            if not (np.isfinite(m) and m >= 0):
                raise ValueError(f"InverseMappingConfig: {name} must be finite and >= 0; got {m!r}")


class InverseMapping(AbstractNetwork):
    """An IMPU inverse mapping model for one simulator, experiment and feature type.

    The lifecycle of every jcalib network (`jcalib.nn.data`): ``InverseMapping(simulator,
    config)`` describes it; ``fit(key, thetas, trajectories, *, val=...)`` returns a new,
    immutable trained mapping; ``save(path)`` / ``InverseMapping.load(path)``.

    Args:
        simulator: a `jcalib.AbstractSimulator` (e.g. ``jcalib.models.get("rigid_double_beam")``;
            for data without one, a `jcalib.FunctionSimulator` with the space, times and output
            names): the parameter space, observation times and outputs of the data, and the
            default FBoI options of its ``impu_settings()``.
        config: `InverseMappingConfig`.

    Raises:
        ValueError: not a simulator, a config that is not an `InverseMappingConfig`, fewer than
            3 observation times.
    """

    def __init__(self, simulator: AbstractSimulator, config: InverseMappingConfig = InverseMappingConfig()):
        simulator = check_simulator(simulator, "InverseMapping")
        if not isinstance(config, InverseMappingConfig):
            raise ValueError(f"InverseMapping: config must be an InverseMappingConfig; got {type(config).__name__}")
        ts = np.asarray(simulator.ts, np.float64)
        if ts.ndim != 1 or ts.size < 3:
            raise ValueError(f"InverseMapping: the simulator's ts must be 1-D with at least 3 times; got shape "
                             f"{ts.shape}")
        options = _feature_defaults(simulator, config) | dict(config.feature_options)
        self._set(config=config, simulator=simulator, space=simulator.parameters, ts=ts,
                  output_names=tuple(simulator.output_names), _options=options, extractor=None, feature_scaler=None,
                  theta_scaler=None, network=None, training=None, n_train=None, timings={}, _cache={})
        self._freeze()

    # --- properties ----------------------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def feature(self) -> str:
        return self.config.feature

    @property
    def is_trained(self) -> bool:
        return self.network is not None

    @property
    def n_features(self) -> int:
        return self._trained_extractor().n_features

    # --- offline phase (fit: AbstractNetwork.fit) -----------------------------------------------
    def _fit(self, key, thetas, trajectories, val, checkpoint, fresh_start) -> InverseMapping:
        """`AbstractNetwork.fit`: features, scalers and the MLP trained on (noisy) simulated data.

        The trajectories are used as given: add the measurement noise first
        (`simulate_training_set(..., noise=...)`, `paper_noise`). The key gives the initial
        weights and the training loop's shuffling.
        """
        start = time.perf_counter()
        extractor = FeatureExtractor.create(self.config.feature, self.ts, training_trajectories=trajectories,
                                            **self._options)
        psi = np.asarray(extractor(trajectories), np.float32)
        feature_scaler = MinMaxScaler.fit(psi)
        theta_scaler = MinMaxScaler.fit(thetas)

        def normalised(thetas, trajectories, psi=None):
            psi = np.asarray(extractor(trajectories), np.float32) if psi is None else psi
            return {"psi": np.asarray(feature_scaler(psi), np.float32),
                    "theta": np.asarray(theta_scaler(thetas.astype(np.float32)), np.float32)}

        train = normalised(thetas, trajectories, psi)
        val_data = None if val is None else normalised(*val)
        features_s = time.perf_counter() - start
        key_init, key_train = jax.random.split(key)
        network = MLP(extractor.n_features, self.config.hidden, self.space.n_params, rngs=nnx.Rngs(key_init))
        new = self._copy()
        new._set(extractor=extractor, feature_scaler=feature_scaler, theta_scaler=theta_scaler)
        extra = new._extra()
        # the checkpoint's weights belong to its scalers, features and network
        identity = {k: extra[k] for k in ("config", "parameters", "extractor", "feature_scaler", "theta_scaler")}
        identity["config"] = {k: v for k, v in identity["config"].items() if k != "training"}
        training = _training.fit(key_train, network, _mse, train, val_data, self.config.training,
                                 checkpoint=checkpoint, extra=extra, fingerprint=identity, fresh_start=fresh_start)
        new._set(network=network, training=training, n_train=int(thetas.shape[0]),
                 timings={"features_s": features_s, "training_s": training.wall_time_s})
        return new._freeze()

    def _copy(self) -> InverseMapping:
        new = object.__new__(type(self))
        new._set(**{k: v for k, v in vars(self).items() if k != "_frozen"})
        new._set(_cache={}, timings={})
        return new

    # --- online phase ---------------------------------------------------------------------------------
    def inference_fn(self, structured: bool = False) -> Callable[[Array], Any]:
        """The bare jitted online map
        ``x -> (theta, outside_training_range, features_outside, theta_outside)``.

        ``x``: ``(n_times, n_outputs)`` or ``(n, n_times, n_outputs)`` float64 (or float32)
        measurements; a JAX array already on the device saves the host-to-device copy. No
        input checks (NaN gives NaN estimates); weights, scalers and margins are compiled in.
        With ``structured=True`` the function returns the `IMPUEstimate` itself (what `infer`
        calls after checking the input).
        """
        if "fn" not in self._cache:
            fn = _make_inference_fn(*self._trained_parts(), self.config.feature_margin, self.config.theta_margin)
            # IMPUEstimate.__init__ costs ~15 us (equinox's checks); rebuilding it from its
            # pytree structure costs ~1 us, a real share of a ~30 us online update
            treedef = jax.tree_util.tree_structure(IMPUEstimate(
                theta=jnp.zeros(1), outside_training_range=jnp.zeros((), bool), features_outside=jnp.zeros((), bool),
                theta_outside=jnp.zeros((), bool), names=self.names))

            def structured_fn(x):
                return jax.tree_util.tree_unflatten(treedef, fn(x))

            self._cache["fn"] = (fn, structured_fn)
        return self._cache["fn"][1] if structured else self._cache["fn"][0]

    def infer(self, measured: Float[ArrayLike, "*batch n_times n_outputs"]) -> IMPUEstimate:
        """Online phase: parameter estimates from measurement(s) (jitted, deterministic).

        Args:
            measured: ``(n_times, n_outputs)`` or ``(n, n_times, n_outputs)``, on the model's
                observation times, in the model's units.

        Returns:
            `IMPUEstimate` (physical ``theta``, float64 when ``jax_enable_x64`` is on).

        Raises:
            ValueError: untrained mapping; another shape; NaN or inf.
        """
        fn = self.inference_fn(structured=True)
        x = np.asarray(measured, dtype=np.float64)
        n_times, n_outputs = self.extractor.n_times, self.extractor.n_outputs
        if x.ndim not in (2, 3) or x.shape[-2:] != (n_times, n_outputs):
            raise ValueError(f"InverseMapping.infer: measured must have shape (n_times = {n_times}, n_outputs = "
                             f"{n_outputs}) or (n, {n_times}, {n_outputs}); got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("InverseMapping.infer: measured contains NaN or inf; impute or drop those samples")
        return fn(x)

    def features(self, trajectories: Float[ArrayLike, "*batch n_times n_outputs"]) -> np.ndarray:
        """Raw (not normalised) features of trajectories, ``(..., n_features)``."""
        return np.asarray(self._trained_extractor()(np.asarray(trajectories, np.float64)))

    # --- evaluation -----------------------------------------------------------------------------------
    def evaluate(self, thetas: Float[ArrayLike, "n n_params"],
                 trajectories: Float[ArrayLike, "n n_times n_outputs"]) -> NetworkMetrics:
        """Accuracy on test data (eqs. 18-21): the trajectories are used as given (make noisy
        test data with `simulate_training_set(..., noise=...)`; a region or a zone beyond the
        training box with its ``sampler``).

        Returns:
            `NetworkMetrics` per parameter (``bias``, ``sd``, ``mare``, ``max_are``: the paper's
            relative errors; ``scale``: the training range of each parameter; ``outside``:
            `IMPUEstimate.outside_training_range`).

        Raises:
            ValueError: untrained mapping; shapes that do not match; NaN or inf; fewer than 2
                samples.
        """
        thetas, trajectories = self._check_data(thetas, trajectories, "evaluate")
        estimate = self.infer(trajectories)
        scaler = self.theta_scaler
        return network_metrics(thetas, estimate.theta, self.names,
                               scale=np.asarray(scaler.high, np.float64) - np.asarray(scaler.low, np.float64),
                               outside=estimate.outside_training_range)

    # --- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Weights, scalers, feature extractor, space, times and configuration in one msgpack file
        with a SHA-256 checksum, written atomically (`jcalib.nn.training.save_model`)."""
        self._trained_parts()
        save_model(path, self.network, self._extra() | {"n_train": self.n_train, "timings": self.timings})

    @classmethod
    def load(cls, path: str | os.PathLike) -> InverseMapping:
        """A trained `InverseMapping` from `save`; its estimates equal the saved one's exactly
        (``training`` is None).

        Raises:
            FileNotFoundError: no such file.
            ValueError: not an IMPU file (or one of an older jcalib), or a damaged one ("checksum").
        """
        extra = _training.read_model_extra(path)
        if extra.get("format") != _FORMAT:
            raise ValueError(f"{path}: not an IMPU file of this jcalib (format {extra.get('format')!r}, expected "
                             f"{_FORMAT!r}); train and save the mapping again")
        config = InverseMappingConfig.from_dict(extra["config"])
        space = ParameterSpace(Parameter(**p) for p in extra["parameters"])
        extractor = FeatureExtractor.from_dict(extra["extractor"])
        network = MLP(extractor.n_features, config.hidden, space.n_params, rngs=nnx.Rngs(0))
        load_model(path, network)
        impu = object.__new__(cls)
        impu._set(config=config, simulator=None, space=space, ts=np.asarray(extra["ts"], np.float64),
                  output_names=tuple(extra["output_names"]), _options=dict(extra.get("feature_options") or {}),
                  extractor=extractor, feature_scaler=MinMaxScaler.from_dict(extra["feature_scaler"]),
                  theta_scaler=MinMaxScaler.from_dict(extra["theta_scaler"]), network=network, training=None,
                  n_train=extra.get("n_train"), timings=dict(extra.get("timings") or {}), _cache={})
        return impu._freeze()

    def to_dict(self) -> dict:
        """Configuration, sizes, timings and (after training) the training summary, for JSON."""
        d = {"config": self.config.to_dict(), "parameters": list(self.names), "n_train": self.n_train,
             "timings": self.timings}
        if self.extractor is not None:
            d |= {"n_features": self.extractor.n_features, "extractor": self.extractor.to_dict()}
        if self.training is not None:
            d["training"] = self.training.to_dict()
        return to_jsonable(d)

    # --- helpers -------------------------------------------------------------------------------------
    def _check_data(self, thetas, trajectories, where: str):
        """`check_training_data` against this mapping's times and outputs (no bounds: the min-max
        scalers span whatever the data span)."""
        return check_training_data(self.space, thetas, trajectories, f"InverseMapping.{where}", n_times=self.ts.size,
                                   output_names=self.output_names, check_bounds=False)

    def _trained_extractor(self) -> FeatureExtractor:
        if self.extractor is None:
            raise ValueError(NOT_TRAINED.format(cls="InverseMapping"))
        return self.extractor

    def _trained_parts(self):
        if self.network is None or self.extractor is None:
            raise ValueError(NOT_TRAINED.format(cls="InverseMapping"))
        return self.network, self.extractor, self.feature_scaler, self.theta_scaler

    def _extra(self) -> dict:
        return {"format": _FORMAT, "config": self.config.to_dict(), "feature_options": _plain_options(self._options),
                "parameters": self.space.table(), "output_names": list(self.output_names), "ts": np.asarray(self.ts),
                "extractor": self.extractor.to_dict(), "feature_scaler": self.feature_scaler.to_dict(),
                "theta_scaler": self.theta_scaler.to_dict()}


def _feature_defaults(simulator, config: InverseMappingConfig) -> dict:
    """The simulator's FBoI settings (``impu_settings()["fboi_options"]``) where the config gives none."""
    rules = ("bins", "f_max", "n_bins", "threshold")
    settings = _paper_settings(simulator)
    if settings is None or not config.feature.endswith("FBoI") or any(k in config.feature_options for k in rules):
        return {}
    return dict(settings.get("fboi_options") or {})  # rigid_double_beam: the paper's 0-4 Hz


def _mse(key: PRNGKeyArray, network: MLP, batch: Mapping[str, Array]) -> Array:
    """The paper's loss: mean squared error of the normalised parameters."""
    del key
    return jnp.mean((network(batch["psi"]) - batch["theta"]) ** 2)


def _make_inference_fn(network: MLP, extractor: FeatureExtractor, feature_scaler: MinMaxScaler,
                       theta_scaler: MinMaxScaler, feature_margin: float, theta_margin: float):
    """The jitted online map; weights, scalers and extractor settings are compile-time
    constants. Returns the leaves of an `IMPUEstimate` in its field order."""
    graphdef, weights = nnx.split(network)
    out_dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32

    def infer(x):
        psi = extractor.extract(jnp.asarray(x)).astype(jnp.float32)
        z = feature_scaler(psi)
        u = nnx.merge(graphdef, weights)(z)
        theta = theta_scaler.inverse(u).astype(out_dtype)
        features_outside = jnp.any((z < -feature_margin) | (z > 1.0 + feature_margin), axis=-1)
        theta_outside = jnp.any((u < -theta_margin) | (u > 1.0 + theta_margin), axis=-1)
        return theta, features_outside | theta_outside, features_outside, theta_outside

    return jax.jit(infer)
