"""PELS-VAE: a physics-enhanced latent-space variational autoencoder as a simulation surrogate.

The network of Martínez-Palomera et al. (2020) with the regressor of Zhang & Mikelsons (2023,
Fig. 2) trained at the same time as a student of the encoder, as used by Aka et al. (2023) to
replace a simulation model in global calibration:

- **Encoder** (teacher) ``q(z | x, θ)``: LSTM layer(s) over the trajectory ``x``
  ``(n_times, n_outputs)``, their final state concatenated with ``θ``, then ReLU layers and a
  linear layer giving ``μ`` and ``log σ`` of the latent ``z``.
- **Decoder** ``p(x | z, θ)``: ReLU layers on ``[z, θ]``, a linear layer to the whole
  trajectory (one dense output per time and output).
- **Regressor** (student) ``θ -> (μ_re, σ_re)``: the encoder without the LSTM layer(s).

Loss (Zhang & Mikelsons 2023, eq. 10, with the ELBO of their eq. 9 and the MSE reconstruction
term of Aka et al. 2023, app. A), per minibatch::

    MSE(x̂, x) + β KL(N(μ, σ²) || N(0, I)) + MSE(μ, μ_re) + MSE(σ, σ_re),
    x̂ = decode(μ + σ ε, θ),  ε ~ N(0, I)

MSE is the mean over the batch, times and outputs (of standardised outputs), KL the sum over
the latent dimensions averaged over the batch. Gradients of the two student terms reach
both the regressor and the encoder: eq. 10 minimises over all three networks jointly. Aka
et al. (2023, eq. 4) put β on the reconstruction term instead of the KL term; that is the same
trade-off with β replaced by 1/β (up to the weight of the student terms).

Generation (Zhang & Mikelsons 2023, eq. 11; Aka et al. 2023, eqs. 6-7): the regressor replaces
the encoder, ``μ_re, σ_re = regress(θ)``, and the trajectory is the mean of ``n_passes``
decodings of ``z_l = μ_re + σ_re ε_l`` (20 passes in Zhang & Mikelsons 2023, Fig. 5).
``n_passes=0`` decodes ``z = μ_re`` itself.

Coordinates. Users pass physical ``θ`` (float64 from the rest of jcalib) and trajectories in
model units. Inside, ``θ`` is mapped to ``[-1, 1]`` per parameter (linear in the internal
coordinate, i.e. log for log-scale parameters: ``2 space.to_unit(θ) - 1``) and every output
is standardised with its mean and standard deviation over the training samples and times
(`Standardizer`). The networks run in float32; the statistics are saved with the weights.

Deterministic generation. With ``key=None`` the noise ``ε_l`` is drawn from the surrogate's
``noise_key`` (split from the key given to ``fit``; the same for every ``θ``: common random
numbers), so `Surrogate.simulate` is a smooth, deterministic function of ``θ`` that Sobol'
indices, differential evolution, Gauss-Newton and MALA can use like a model, and
``vmap(generate)`` equals ``generate`` on a batch.

Parameters outside the training box (the bounds of the `ParameterSpace`, which must contain
every training sample): ``outside="nan"`` (default) gives NaN outputs and, in
`Surrogate.simulate_with_status`, the status ``SolveStatus.SOLVER_FAILED``, like a failed
solve; ``"clip"`` evaluates at the nearest point of the box; ``"extrapolate"`` evaluates the
networks anyway. (`jcalib.simulate_batch` refuses such samples before either, unless
``check_bounds=False``.)

Example:
    >>> import jax, jcalib                                                  # doctest: +SKIP
    >>> jax.config.update("jax_enable_x64", True)  # simulations are float64  # doctest: +SKIP
    >>> model = jcalib.models.get("rigid_double_beam")                      # doctest: +SKIP
    >>> thetas = model.parameters.sample(jax.random.key(0), 512, "lhs")     # doctest: +SKIP
    >>> vae = PELSVAE(model).fit(jax.random.key(1), thetas,                 # doctest: +SKIP
    ...                          jcalib.simulate_batch(model, thetas))
    >>> surrogate = vae.surrogate                                           # doctest: +SKIP
    >>> jcalib.simulate_batch(surrogate, thetas[:4]).shape                  # doctest: +SKIP
    (4, 256, 2)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from jcalib.jsonable import to_jsonable
from jcalib.model import AbstractSimulator, Experiment, SolveStatus, check_simulator, simulate_batch
from jcalib.nn import training as _training
from jcalib.nn.data import NOT_TRAINED, AbstractNetwork, NetworkMetrics, check_training_data, network_metrics
from jcalib.nn.layers import MLP, SequenceEncoder, Standardizer
from jcalib.nn.training import NetworkConfig, TrainingConfig, load_model, save_model
from jcalib.parameters import Parameter, ParameterSpace

__all__ = ["OUTSIDE", "PELSVAE", "PELSVAEConfig", "PELSVAENetwork", "Surrogate", "pelsvae_loss"]

OUTSIDE = ("nan", "clip", "extrapolate")

BOX_TOLERANCE = 1e-9
"""Slack of the training-box test in unit-cube coordinates: bounds mapped through log/exp
(log-scale parameters) land within a few ulps of 0 or 1, and such round-off must not count as
leaving the box."""

_LOG_SIGMA_RANGE = (-15.0, 5.0)
"""Clip of the networks' ``log σ`` (σ from 3e-7 to 150 in standardised units): keeps
``exp`` finite in float32 early in training; a trained latent stays far inside."""

_FORMAT = "jcalib-pelsvae-2"  # 2: the generation noise key


def _default_training() -> TrainingConfig:
    # Adam with a multi-step schedule (Zhang & Mikelsons 2023); validation-based early
    # stopping is off by default because the small training sets of Aka et al. (2023, from 32
    # samples) give noisy validation losses.
    return TrainingConfig(epochs=400, batch_size=64, learning_rate=1e-3, schedule="multistep",
                          milestones=(250, 350), decay=0.2)


@dataclasses.dataclass(frozen=True)
class PELSVAEConfig(NetworkConfig):
    """Network sizes, loss weight, generation and training settings of a `PELSVAE`.

    Attributes:
        latent_size: dimension of ``z`` (Aka et al. 2023 found 64-256 best for a 14-parameter
            model with 1-week trajectories; small models need far less).
        hidden_size: width of the LSTM state and of every dense layer.
        n_lstm_layers: stacked LSTM layers of the encoder.
        n_dense_layers: ReLU layers of the encoder head, the decoder and the regressor.
        beta: weight of the KL term (eq. 10). The reconstruction term is a mean over
            standardised elements, so beta = 1 lets the KL term win: the posterior collapses
            to the prior (KL -> 0), the decoder ignores z and works from θ alone (then the
            generation and encoder paths coincide). The default 1e-3 keeps a few nats in the
            latent (rigid_double_beam, 32 times: KL ~ 4-9, and a 10 % lower test error
            than beta = 1 with 512 samples).
        n_passes: decodings averaged per trajectory at generation (eq. 11; 20 in Zhang &
            Mikelsons 2023, Fig. 5); 0 decodes the regressor's mean ``μ_re`` once.
        training: `TrainingConfig` of the shared training loop (Adam, multi-step schedule).
    """

    latent_size: int = 16
    hidden_size: int = 128
    n_lstm_layers: int = 1
    n_dense_layers: int = 2
    beta: float = 1e-3
    n_passes: int = 20
    training: TrainingConfig = dataclasses.field(default_factory=_default_training)

    def __post_init__(self):
        for name in ("latent_size", "hidden_size", "n_lstm_layers", "n_dense_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"PELSVAEConfig: {name} must be a positive integer; got {value!r}")
        if isinstance(self.n_passes, bool) or not isinstance(self.n_passes, (int, np.integer)) or self.n_passes < 0:
            raise ValueError(f"PELSVAEConfig: n_passes must be a non-negative integer; got {self.n_passes!r}")
        if not (np.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"PELSVAEConfig: beta must be finite and >= 0; got {self.beta!r}")
        self._check_training()


class PELSVAENetwork(nnx.Module):
    """Encoder, decoder and regressor in normalised coordinates (``u`` in [-1, 1]^n_params,
    standardised trajectories); `PELSVAE` and `Surrogate` wrap it in physical units.

    Example:
        >>> net = PELSVAENetwork(3, 50, 2, PELSVAEConfig(latent_size=4, hidden_size=8), rngs=nnx.Rngs(0))
        >>> mu, log_sigma = net.encode(jnp.ones((5, 50, 2)), jnp.zeros((5, 3)))
        >>> net.decode(mu, jnp.zeros((5, 3))).shape
        (5, 50, 2)
    """

    def __init__(self, n_params: int, n_times: int, n_outputs: int, config: PELSVAEConfig, *, rngs: nnx.Rngs):
        hidden, latent = config.hidden_size, config.latent_size
        layers = (hidden,) * config.n_dense_layers
        self.sequence = SequenceEncoder(n_outputs, hidden, cell="lstm", n_layers=config.n_lstm_layers, rngs=rngs)
        self.encoder_head = MLP(hidden + n_params, layers, 2 * latent, rngs=rngs)
        self.decoder = MLP(latent + n_params, layers, n_times * n_outputs, rngs=rngs)
        self.regressor = MLP(n_params, layers, 2 * latent, rngs=rngs)
        self.n_times, self.n_outputs, self.latent_size = int(n_times), int(n_outputs), int(latent)

    def _split(self, out):
        mu, log_sigma = jnp.split(out, 2, axis=-1)
        return mu, jnp.clip(log_sigma, *_LOG_SIGMA_RANGE)

    def encode(self, x: Float[Array, "... n_times n_outputs"], u: Float[Array, "... n_params"]):
        """``(μ, log σ)``, each ``(..., latent_size)``."""
        h = self.sequence(x)
        return self._split(self.encoder_head(jnp.concatenate([h, jnp.asarray(u, h.dtype)], axis=-1)))

    def regress(self, u: Float[Array, "... n_params"]):
        """``(μ_re, log σ_re)``, each ``(..., latent_size)``."""
        return self._split(self.regressor(u))

    def decode(self, z: Float[Array, "... latent"], u: Float[Array, "... n_params"]) -> Float[Array, "..."]:
        """Standardised trajectory ``(..., n_times, n_outputs)``."""
        z = jnp.asarray(z, jnp.float32)
        x = self.decoder(jnp.concatenate([z, jnp.asarray(u, jnp.float32)], axis=-1))
        return x.reshape(*x.shape[:-1], self.n_times, self.n_outputs)


def pelsvae_loss(key: PRNGKeyArray, network: PELSVAENetwork, batch: Mapping[str, Array], beta: float = 1e-3):
    """Eq. 10 of Zhang & Mikelsons (2023) on a normalised minibatch, for `training.fit`.

    Args:
        key: draws the reparameterisation noise ``ε``.
        network: the `PELSVAENetwork`.
        batch: ``{"u": (b, n_params), "x": (b, n_times, n_outputs)}`` (normalised, float32).
        beta: weight of the KL term.

    Returns:
        ``(loss, metrics)`` with the terms ``reconstruction``, ``kl``, ``student`` and
        ``generation`` (the MSE of ``decode(μ_re, θ)``: the surrogate path).
    """
    x, u = batch["x"], batch["u"]
    mu, log_sigma = network.encode(x, u)
    sigma = jnp.exp(log_sigma)
    eps = jax.random.normal(key, mu.shape, mu.dtype)
    reconstruction = jnp.mean((network.decode(mu + sigma * eps, u) - x) ** 2)
    kl = jnp.mean(jnp.sum(0.5 * (mu**2 + sigma**2 - 1.0) - log_sigma, axis=-1))
    mu_re, log_sigma_re = network.regress(u)
    student = jnp.mean((mu - mu_re) ** 2) + jnp.mean((sigma - jnp.exp(log_sigma_re)) ** 2)
    generation = jnp.mean((network.decode(mu_re, u) - x) ** 2)
    loss = reconstruction + beta * kl + student
    return loss, {"reconstruction": reconstruction, "kl": kl, "student": student, "generation": generation}


class Surrogate(AbstractSimulator):
    """A trained PELS-VAE as an immutable pytree: a `jcalib.model.AbstractSimulator` like the models.

    ``simulate(theta)`` generates the trajectory by eq. 11 with fixed noise (deterministic),
    in float64 when ``jax_enable_x64`` is on, so `jcalib.simulate_batch`, `sobol_indices`,
    `CalibrationProblem` (differential evolution, Gauss-Newton, MALA) run on it unchanged.
    The encoder path (`reconstruct`) and the parts (`encode`, `decode`, `regress`) are there
    too. All methods take any leading batch axes.

    Attributes:
        parameters: the parameter space of the training data (its bounds are the training box).
        output_names: names of the outputs.
        experiment: observation times (and the rest of the simulated model's experiment).
        n_passes: decodings averaged by `simulate` (``dataclasses.replace`` to change it).
        noise_key: the ``jax.random`` key of the fixed generation noise (``generate(None, ...)``).
        outside: what `simulate` does outside the training box: ``"nan"``, ``"clip"`` or
            ``"extrapolate"`` (see the module docstring).
    """

    graphdef: Any = eqx.field(static=True)
    weights: Any
    output_scaler: Standardizer
    experiment: Experiment
    parameters: ParameterSpace = eqx.field(static=True)
    output_names: tuple[str, ...] = eqx.field(static=True)
    n_passes: int = eqx.field(static=True)
    noise_key: PRNGKeyArray
    outside: str = eqx.field(static=True, default="nan")

    def __check_init__(self):
        if self.outside not in OUTSIDE:
            raise ValueError(f"Surrogate: outside must be one of {OUTSIDE}; got {self.outside!r}")

    # --- model API -------------------------------------------------------------------------
    @property
    def ts(self) -> Float[Array, " n_times"]:
        return self.experiment.ts

    @property
    def latent_size(self) -> int:
        return self._network().latent_size

    def simulate_with_status(
        self, theta: Float[ArrayLike, " n_params"]
    ) -> tuple[Float[Array, "n_times n_outputs"], Int[Array, ""]]:
        """Generated outputs and a `SolveStatus` code: ``SUCCESS``, or ``SOLVER_FAILED`` with
        NaN outputs outside the training box (``outside="nan"``) or for non-finite output."""
        theta = self._check(theta, "theta", batched=False)
        y = self.generate(None, theta)
        finite = jnp.all(jnp.isfinite(y))
        return y, jnp.where(finite, SolveStatus.SUCCESS, SolveStatus.SOLVER_FAILED).astype(jnp.int32)

    def simulate_batch(self, thetas: Float[ArrayLike, "n n_params"], **kwargs) -> np.ndarray:
        """`jcalib.simulate_batch` on this surrogate (same keywords)."""
        return simulate_batch(self, thetas, **kwargs)

    def jacobian(self, theta: Float[ArrayLike, " n_params"]) -> Float[Array, "n_times n_outputs n_params"]:
        """d simulate / d theta (forward mode; physical units)."""
        return jax.jacfwd(self.simulate)(self._check(theta, "theta", batched=False))

    def forward_mode(self) -> Surrogate:
        """Itself: networks differentiate in either mode (models swap their adjoint here)."""
        return self

    def with_times(self, ts: ArrayLike) -> Surrogate:
        """Itself when ``ts`` are its times; a surrogate cannot be observed at other times."""
        ts = np.asarray(ts, dtype=np.float64)
        if ts.shape == np.shape(self.ts) and np.array_equal(ts, np.asarray(self.ts)):
            return self
        raise ValueError(f"a PELS-VAE surrogate predicts only at its training times ({np.shape(self.ts)[0]} "
                         f"times from {float(self.ts[0])} to {float(self.ts[-1])}); train it on "
                         "trajectories at the times you need")

    # --- the networks in physical units --------------------------------------------------
    def unit(self, theta: Float[ArrayLike, "... n_params"]) -> Float[Array, "... n_params"]:
        """Physical ``θ`` -> the networks' input ``2 to_unit(θ) - 1`` after the ``outside``
        policy (clipped into the box unless ``"extrapolate"``), float32."""
        u = self.parameters.to_unit(self._check(theta, "theta"))
        if self.outside != "extrapolate":
            u = jnp.clip(jnp.where(jnp.isnan(u), 0.5, u), 0.0, 1.0)
        return jnp.asarray(2.0 * u - 1.0, jnp.float32)

    def inside(self, theta: Float[ArrayLike, "... n_params"]) -> Array:
        """Whether ``θ`` lies in the training box (up to `BOX_TOLERANCE`), shape ``θ.shape[:-1]``."""
        u = self.parameters.to_unit(self._check(theta, "theta"))
        return jnp.all((u >= -BOX_TOLERANCE) & (u <= 1.0 + BOX_TOLERANCE), axis=-1)

    def encode(self, x: Float[ArrayLike, "... n_times n_outputs"], theta: Float[ArrayLike, "... n_params"]):
        """Encoder (teacher): ``(μ, σ)`` of the latent, each ``(..., latent_size)``."""
        mu, log_sigma = self._network().encode(self._normalise_x(x), self.unit(theta))
        return mu, jnp.exp(log_sigma)

    def regress(self, theta: Float[ArrayLike, "... n_params"]):
        """Regressor (student): ``(μ_re, σ_re)`` of the latent, each ``(..., latent_size)``."""
        mu, log_sigma = self._network().regress(self.unit(theta))
        return mu, jnp.exp(log_sigma)

    def decode(self, z: Float[ArrayLike, "... latent"], theta: Float[ArrayLike, "... n_params"]):
        """Decoder: the trajectory ``(..., n_times, n_outputs)`` of ``z`` and ``θ``."""
        return self._physical(self._network().decode(z, self.unit(theta)), theta)

    def generate(self, key: PRNGKeyArray | None, theta: Float[ArrayLike, "... n_params"],
                 n_passes: int | None = None) -> Float[Array, "... n_times n_outputs"]:
        """Eq. 11: decode ``z = μ_re + σ_re ε`` and average over ``n_passes`` draws of ``ε``.

        Args:
            key: the noise; None uses the fixed noise of ``noise_key``, so the result is a
                deterministic function of ``θ``. One ``ε_l`` per pass is shared by all samples
                of a batch.
            theta: physical parameters, ``(..., n_params)``.
            n_passes: decodings to average (default ``self.n_passes``); 0 decodes ``μ_re``.
        """
        mu, sigma = self.regress(theta)
        return self._decode_passes(mu, sigma, theta, n_passes, key)

    def reconstruct(self, key: PRNGKeyArray | None, x: Float[ArrayLike, "... n_times n_outputs"],
                    theta: Float[ArrayLike, "... n_params"], n_passes: int | None = None):
        """The encoder path: as `generate` with ``(μ, σ)`` from the encoder of ``x``."""
        mu, sigma = self.encode(x, theta)
        return self._decode_passes(mu, sigma, theta, n_passes, key)

    # --- helpers ---------------------------------------------------------------------------
    def _network(self) -> PELSVAENetwork:
        return nnx.merge(self.graphdef, self.weights)

    def _check(self, theta, what, batched=None):
        theta = jnp.asarray(theta)
        n = self.parameters.n_params
        if theta.ndim < 1 or theta.shape[-1] != n or (batched is False and theta.ndim != 1):
            expected = "(n_params,)" if batched is False else "(..., n_params)"
            raise ValueError(f"{what} must have shape {expected} with n_params={n} "
                             f"({', '.join(self.parameters.names)}); got shape {theta.shape}")
        if not jnp.issubdtype(theta.dtype, jnp.floating):
            theta = theta.astype(_float_dtype())
        return theta

    def _normalise_x(self, x):
        x = jnp.asarray(x)
        expected = (int(self.ts.shape[0]), self.n_outputs)
        if x.ndim < 2 or tuple(x.shape[-2:]) != expected:
            raise ValueError(f"x must have shape (..., n_times, n_outputs) = (..., {expected[0]}, "
                             f"{expected[1]}); got shape {x.shape}")
        return self.output_scaler(x.astype(jnp.float32))

    def _physical(self, x_normalised, theta):
        x = jnp.asarray(self.output_scaler.inverse(x_normalised), _float_dtype())
        if self.outside == "nan":
            inside = self.inside(theta)
            x = jnp.where(inside.reshape(*inside.shape, 1, 1), x, jnp.nan)
        return x

    def _decode_passes(self, mu, sigma, theta, n_passes, key):
        n_passes = self.n_passes if n_passes is None else n_passes
        if isinstance(n_passes, bool) or not isinstance(n_passes, (int, np.integer)) or n_passes < 0:
            raise ValueError(f"n_passes must be a non-negative integer; got {n_passes!r}")
        network = self._network()
        u = self.unit(theta)
        if n_passes == 0:
            return self._physical(network.decode(mu, u), theta)
        if key is None:
            key = self.noise_key
        eps = jax.random.normal(key, (int(n_passes), mu.shape[-1]), jnp.float32)
        shape = (int(n_passes), *mu.shape)
        eps = jnp.broadcast_to(eps.reshape(int(n_passes), *(1,) * (mu.ndim - 1), mu.shape[-1]), shape)
        z = jnp.broadcast_to(mu[None], shape) + jnp.broadcast_to(sigma[None], shape) * eps
        u = jnp.broadcast_to(u[None], (int(n_passes), *u.shape))
        return self._physical(jnp.mean(network.decode(z, u), axis=0), theta)


class PELSVAE(AbstractNetwork):
    """A PELS-VAE for one simulator: train, evaluate, save and load; `surrogate` is the trained
    model stand-in.

    The lifecycle of every jcalib network (`jcalib.nn.data`): ``PELSVAE(simulator, config)``
    describes it (the simulator gives the parameter space, whose bounds are the training box,
    the experiment and the output names); ``fit(key, thetas, trajectories, *, val=...)``
    returns a new, immutable trained `PELSVAE`; ``save(path)`` / ``PELSVAE.load(path)``.

    Args:
        simulator: a `jcalib.AbstractSimulator` describing the data (for data without one, a
            `jcalib.FunctionSimulator` with the space, times and output names).
        config: `PELSVAEConfig`.

    Raises:
        ValueError: ``simulator`` is not a simulator, ``config`` not a `PELSVAEConfig`.

    Example:
        >>> from jcalib.model import FunctionSimulator
        >>> from jcalib.nn.data import simulate_training_set
        >>> space = ParameterSpace([Parameter("a", 1.0, 0.5, 2.0), Parameter("k", 1.0, 0.1, 10.0, log_scale=True)])
        >>> ts = jnp.linspace(0.0, 1.0, 20)
        >>> decay = FunctionSimulator(lambda th: (th[0] * jnp.exp(-th[1] * ts))[:, None], space, ts=ts)
        >>> data = simulate_training_set(jax.random.key(0), decay, 64)
        >>> config = PELSVAEConfig(latent_size=2, hidden_size=16, training=TrainingConfig(
        ...     epochs=2, batch_size=32, progress=False))
        >>> vae = PELSVAE(decay, config).fit(jax.random.key(1), *data)
        >>> vae.generate(None, data.thetas[:3]).shape
        (3, 20, 1)
    """

    def __init__(self, simulator: AbstractSimulator, config: PELSVAEConfig = PELSVAEConfig()):
        if not isinstance(config, PELSVAEConfig):
            raise ValueError(f"PELSVAE: config must be a PELSVAEConfig; got {type(config).__name__}")
        space, experiment, names = _describe(simulator)
        self._set(config=config, simulator=simulator, parameters=space, experiment=experiment, output_names=names,
                  network=None,
                  _surrogate=None, training=None, n_train=None)
        self._freeze()

    # --- training (fit: AbstractNetwork.fit) ----------------------------------------------------
    def _check_data(self, thetas, trajectories, where: str):
        """`check_training_data` against the space (bounds: the training box), times and outputs."""
        return check_training_data(self.parameters, thetas, trajectories, f"PELSVAE.{where}",
                                   n_times=self.experiment.n_times, output_names=self.output_names)

    def _fit(self, key, thetas, trajectories, val, checkpoint, fresh_start) -> PELSVAE:
        """`AbstractNetwork.fit`: the key gives the initial weights, the training loop's shuffling
        and noise and the surrogate's fixed generation noise (``noise_key``)."""
        space, experiment, names = self.parameters, self.experiment, self.output_names
        scaler = Standardizer.fit(trajectories, axis=(0, 1))
        train = _normalised(space, scaler, thetas, trajectories)
        val_data = None if val is None else _normalised(space, scaler, *val)
        config = self.config
        key_init, key_train, key_noise = jax.random.split(key, 3)
        network = PELSVAENetwork(space.n_params, experiment.n_times, len(names), config, rngs=nnx.Rngs(key_init))
        surrogate = _make_surrogate(network, scaler, experiment, space, names, config, key_noise)
        beta = float(config.beta)
        extra = _extra(surrogate, config)
        # the checkpoint's weights belong to its scaler, space and times: all in the fingerprint
        identity = {k: extra[k] for k in ("output_scaler", "parameters", "output_names", "experiment", "noise_key")}
        identity["network"] = {k: v for k, v in extra["config"].items() if k != "training"}  # beta, sizes
        training = _training.fit(key_train, network, lambda k, net, batch: pelsvae_loss(k, net, batch, beta),
                                 train, val_data, config.training, checkpoint=checkpoint, extra=extra,
                                 fingerprint=identity, fresh_start=fresh_start)
        return self._trained(network, _make_surrogate(network, scaler, experiment, space, names, config, key_noise),
                             training, int(thetas.shape[0]))

    def _trained(self, network, surrogate, training, n_train) -> PELSVAE:
        trained = object.__new__(type(self))
        trained._set(config=self.config, simulator=getattr(self, "simulator", None),
                     parameters=surrogate.parameters, experiment=surrogate.experiment,
                     output_names=surrogate.output_names, network=network, _surrogate=surrogate, training=training,
                     n_train=n_train)
        return trained._freeze()

    @property
    def surrogate(self) -> Surrogate:
        """The trained PELS-VAE as a model stand-in (``outside="nan"``; change with
        ``dataclasses.replace(vae.surrogate, outside="clip")``)."""
        if self._surrogate is None:
            raise ValueError(NOT_TRAINED.format(cls="PELSVAE"))
        return self._surrogate

    # --- the networks (physical units; see Surrogate) -----------------------------------------
    def encode(self, x, theta):
        """`Surrogate.encode`: ``(μ, σ)`` of the encoder."""
        return self.surrogate.encode(x, theta)

    def decode(self, z, theta):
        """`Surrogate.decode`: the trajectory of ``z`` and ``θ``."""
        return self.surrogate.decode(z, theta)

    def regress(self, theta):
        """`Surrogate.regress`: ``(μ_re, σ_re)`` of the regressor."""
        return self.surrogate.regress(theta)

    def generate(self, key: PRNGKeyArray | None, theta, n_passes: int | None = None):
        """`Surrogate.generate` (eq. 11): trajectories ``(..., n_times, n_outputs)``; ``key=None``:
        the fixed noise."""
        return self.surrogate.generate(key, theta, n_passes)

    def reconstruct(self, key: PRNGKeyArray | None, x, theta, n_passes: int | None = None):
        """`Surrogate.reconstruct`: the encoder path."""
        return self.surrogate.reconstruct(key, x, theta, n_passes)

    def evaluate(self, thetas: Float[ArrayLike, "n n_params"], trajectories: Float[ArrayLike, "n n_times n_outputs"],
                 *, path: str = "generate", n_passes: int | None = None) -> NetworkMetrics:
        """Errors of the generated (or reconstructed) trajectories on a test set (physical
        units, fixed noise).

        Args:
            thetas: test parameters ``(n, n_params)`` inside the training box.
            trajectories: their simulated outputs ``(n, n_times, n_outputs)``.
            path: ``"generate"`` (the regressor: the surrogate) or ``"reconstruct"`` (the
                encoder of the true trajectory).
            n_passes: decodings averaged (default ``config.n_passes``).

        Returns:
            `NetworkMetrics` per output (``scale``: each output's training standard deviation,
            so ``scaled_mae`` is the error in those units); ``outside`` flags test samples
            outside the training box.

        Raises:
            ValueError: untrained; shapes that do not match; NaN/inf; an unknown ``path``.
        """
        if path not in ("generate", "reconstruct"):
            raise ValueError(f"PELSVAE.evaluate: path must be 'generate' or 'reconstruct'; got {path!r}")
        s = self.surrogate
        thetas, trajectories = self._check_data(thetas, trajectories, "evaluate")
        predicted = (s.generate(None, thetas, n_passes) if path == "generate"
                     else s.reconstruct(None, trajectories, thetas, n_passes))
        return network_metrics(trajectories, predicted, s.output_names, scale=np.asarray(s.output_scaler.std),
                               outside=~np.asarray(s.inside(thetas)))

    def to_dict(self) -> dict:
        """Configuration, sizes and (after training) the training history, for JSON."""
        d = {"config": self.config.to_dict(), "n_train": self.n_train, "parameters": list(self.parameters.names),
             "output_names": list(self.output_names), "n_times": int(self.experiment.n_times)}
        if self._surrogate is not None:
            d["n_weights"] = _n_weights(self._surrogate.weights)
        if self.training is not None:
            d["training"] = self.training.to_dict()
        return to_jsonable(d)

    # --- persistence ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Weights, configuration, parameter space, times, output statistics and the generation
        noise key in one msgpack file with a SHA-256 checksum, written atomically
        (`jcalib.nn.training.save_model`)."""
        s = self.surrogate
        save_model(path, self.network, _extra(s, self.config) | {"n_train": self.n_train})

    @classmethod
    def load(cls, path: str | os.PathLike) -> PELSVAE:
        """A trained `PELSVAE` from `save`; its predictions equal the saved one's exactly
        (``training`` is None).

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a PELS-VAE file, or a damaged one ("checksum").
        """
        # load_model needs a network of the saved structure, which the saved extra describes
        extra = _training.read_model_extra(path)
        if extra.get("format") != _FORMAT:
            raise ValueError(f"{path}: not a PELS-VAE file (format {extra.get('format')!r}); save it again with "
                             "this jcalib")
        config = PELSVAEConfig.from_dict(extra["config"])
        space = ParameterSpace(Parameter(**p) for p in extra["parameters"])
        e = extra["experiment"]
        experiment = Experiment(e["ts"], t0=e["t0"], t1=e["t1"], conditions=e["conditions"], mask=e.get("mask"),
                                name=e["name"])
        names = tuple(extra["output_names"])
        network = PELSVAENetwork(space.n_params, experiment.n_times, len(names), config, rngs=nnx.Rngs(0))
        load_model(path, network)
        noise_key = jax.random.wrap_key_data(jnp.asarray(np.asarray(extra["noise_key"], np.uint32)))
        surrogate = _make_surrogate(network, Standardizer.from_dict(extra["output_scaler"]), experiment, space, names,
                                    config, noise_key)
        vae = object.__new__(cls)
        vae._set(config=config)
        return vae._trained(network, surrogate, None, extra.get("n_train"))


# --- helpers -------------------------------------------------------------------------------------
def _float_dtype():
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _make_surrogate(network, scaler, experiment, space, names, config, noise_key) -> Surrogate:
    graphdef, weights = nnx.split(network)
    return Surrogate(graphdef=graphdef, weights=weights, output_scaler=scaler, experiment=experiment,
                     parameters=space, output_names=tuple(names), n_passes=int(config.n_passes),
                     noise_key=noise_key)


def _n_weights(weights) -> int:
    return int(sum(np.size(w) for w in jax.tree_util.tree_leaves(weights)))


def _extra(surrogate: Surrogate, config: PELSVAEConfig) -> dict:
    e = surrogate.experiment
    experiment = {"ts": np.asarray(e.ts), "t0": float(e.t0), "t1": float(e.t1), "name": e.name,
                  "conditions": {k: float(v) for k, v in e.conditions.items()}}
    if e.mask is not None:
        experiment["mask"] = np.asarray(e.mask)
    return {"format": _FORMAT, "config": config.to_dict(), "parameters": surrogate.parameters.table(),
            "output_names": list(surrogate.output_names), "experiment": experiment,
            "output_scaler": surrogate.output_scaler.to_dict(),
            "noise_key": np.asarray(jax.random.key_data(surrogate.noise_key))}


def _describe(simulator):
    """(space, experiment, output names) of a simulator."""
    check_simulator(simulator, "PELSVAE")
    experiment = getattr(simulator, "experiment", None)  # models and surrogates keep the conditions
    if not isinstance(experiment, Experiment):
        ts = np.asarray(simulator.ts, dtype=np.float64)
        experiment = Experiment(ts, t1=ts[-1] if ts[-1] > ts[0] else ts[0] + 1.0, name="pelsvae")
    return simulator.parameters, experiment, tuple(simulator.output_names)


def _normalised(space, scaler, thetas, trajectories) -> dict:
    u = 2.0 * np.asarray(space.to_unit(jnp.asarray(thetas)), np.float64) - 1.0
    return {"u": u.astype(np.float32), "x": np.asarray(scaler(jnp.asarray(trajectories, jnp.float32)), np.float32)}
