"""Saved artefacts and checkpoints (issue 17, items 6-7 and the PosteriorResult.load errors).

Rows: every artefact kind with a ``load`` (PELS-VAE, BayesFlow and IMPU msgpack files,
training checkpoints, PosteriorResult and Measurements npz, twin-updating JSON) x {missing,
empty, random bytes, truncated, 4 flipped bytes, a file of another kind} -> the exact
exception type and a fragment of its message. Checkpoints: a refit on other data (or other
output statistics) is refused, ``fresh_start=True`` trains every epoch again, a finished run
on the same data is returned with 0 epochs run.
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jcalib.bayes.result import PosteriorResult
from jcalib.data import Measurements
from jcalib.model import FunctionSimulator
from jcalib.nn import MLP
from jcalib.nn.bayesflow import AmortizedPosterior, BayesFlowConfig
from jcalib.nn.impu import InverseMapping, InverseMappingConfig
from jcalib.nn.pelsvae import PELSVAE, PELSVAEConfig
from jcalib.nn.training import TrainingConfig, fit
from jcalib.parameters import Parameter, ParameterSpace
from jcalib.workflows.impu_updating import TwinUpdatingResult

SPACE = ParameterSpace([Parameter("a", 1.0, 0.5, 2.0), Parameter("k", 1.0, 0.1, 10.0, log_scale=True)])
TS = np.linspace(0.0, 1.0, 8)
TINY = TrainingConfig(epochs=2, batch_size=8, progress=False)
X = np.linspace(-1.0, 1.0, 32, dtype=np.float32)[:, None]
DECAY = FunctionSimulator(lambda th: (th[0] * jnp.exp(-th[1] * TS))[:, None], SPACE, ("y",), ts=TS)
KEY = jax.random.key(0)


def _decay(seed, n=16):
    thetas = np.asarray(SPACE.sample(jax.random.key(seed), n), np.float64)
    return thetas, (thetas[:, :1] * np.exp(-thetas[:, 1:] * TS))[:, :, None]


def _vae():
    return PELSVAE(DECAY, PELSVAEConfig(latent_size=2, hidden_size=4, n_dense_layers=1, n_passes=0, training=TINY))


def _mse(key, model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def _fit_mlp(train, checkpoint, **kwargs):
    return fit(KEY, MLP(1, (4,), 1, rngs=nnx.Rngs(0)), _mse, train, config=TINY, checkpoint=checkpoint, **kwargs)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """One good file of every artefact kind: {kind: path}."""
    folder = tmp_path_factory.mktemp("artefacts")
    thetas, xs = _decay(0)
    paths = {kind: folder / name for kind, name in (
        ("pelsvae", "vae.msgpack"), ("bayesflow", "flow.msgpack"), ("impu", "impu.msgpack"),
        ("checkpoint", "run.ckpt"), ("posterior", "posterior.npz"), ("measurements", "data.npz"),
        ("twin", "twin.json"))}
    _vae().fit(KEY, thetas, xs).save(paths["pelsvae"])
    AmortizedPosterior(DECAY, BayesFlowConfig(summary="mlp", summary_size=2, summary_hidden=4, n_blocks=1,
                                              coupling_hidden=(4,), training=TINY)).fit(KEY, thetas, xs).save(
        paths["bayesflow"])
    InverseMapping(DECAY, InverseMappingConfig(feature="TS-dense", hidden=(4,), training=TINY)).fit(
        KEY, thetas, xs).save(paths["impu"])
    _fit_mlp({"x": X, "y": np.sin(X)}, paths["checkpoint"])
    rng = np.random.default_rng(0)
    PosteriorResult.from_chains(rng.normal(size=(2, 200, 2)), rng.normal(size=(2, 200)), np.full(2, 0.5),
                                warn=False).save(paths["posterior"])
    Measurements(TS, xs[0], sigma=0.1, output_names=("y",)).to_npz(paths["measurements"])
    n, f = 2, np.zeros(2, bool)  # a two-step twin-updating history
    TwinUpdatingResult(names=("a", "k"), output_names=("y",), policy="always", feature="TS-dense",
                       theta_initial=np.array([1.25, 0.5]), theta_before=np.ones((n, 2)),
                       theta_inferred=np.ones((n, 2)), theta_after=np.ones((n, 2)), outside_training_range=f,
                       features_outside=f, theta_outside=f, accepted=~f, simulation_failed=f,
                       rmse_before=np.ones((n, 1)), rmse_after=np.ones((n, 1)), rmse_inferred=np.ones((n, 1)),
                       rmse_reference=np.ones((n, 1)), inference_time_s=np.ones(n), theta_true=None,
                       durations={"total_s": 1.0}).save(paths["twin"])
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*"))  # atomic writes leave nothing behind
    return paths


LOADERS = {
    "pelsvae": PELSVAE.load,
    "bayesflow": AmortizedPosterior.load,
    "impu": InverseMapping.load,
    "checkpoint": lambda path: _fit_mlp({"x": X, "y": np.sin(X)}, path),
    "posterior": PosteriorResult.load,
    "measurements": Measurements.from_npz,
    "twin": TwinUpdatingResult.load,
}
MSGPACK, NPZ, JSON = ("pelsvae", "bayesflow", "impu", "checkpoint"), ("posterior", "measurements"), ("twin",)


def _flip(data: bytes) -> bytes:
    """4 bytes in the middle inverted (in text files: one digit changed, still valid JSON)."""
    if data.lstrip().startswith(b"{"):
        i = data.index(b"1.25")
        return data[:i] + b"1.35" + data[i + 4:]
    i = len(data) // 2
    return data[:i] + bytes(b ^ 0xFF for b in data[i:i + 4]) + data[i + 4:]


CORRUPTIONS = {
    "empty": lambda data, files: b"",
    "random": lambda data, files: np.random.default_rng(1).bytes(512),
    "truncated": lambda data, files: data[: len(data) // 2],
    "flipped": lambda data, files: _flip(data),
    "other kind": lambda data, files: files["posterior" if data[:2] != b"PK" else "pelsvae"].read_bytes(),
}

ROWS = [
    *[(kind, "missing", FileNotFoundError, "does not exist; check the path") for kind in LOADERS
      if kind != "checkpoint"],  # a missing checkpoint starts a run
    *[(kind, "empty", ValueError, "not a jcalib .*or a damaged one") for kind in MSGPACK + JSON],
    *[(kind, "empty", ValueError, r"not an \.npz file; the file is empty") for kind in NPZ],
    *[(kind, "random", ValueError, "not a jcalib") for kind in LOADERS],
    *[(kind, "truncated", ValueError, "or a damaged one") for kind in LOADERS],
    *[(kind, "flipped", ValueError, "checksum mismatch.*the file is damaged") for kind in LOADERS],
    *[(kind, "other kind", ValueError, "not a jcalib .*or a damaged one") for kind in MSGPACK + JSON],
    *[(kind, "other kind", ValueError, r"not an \.npz file") for kind in NPZ],
]


@pytest.mark.slow
@pytest.mark.parametrize("kind, corruption, error, message", ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS])
def test_a_bad_file_is_refused(files, tmp_path, kind, corruption, error, message):
    path = tmp_path / files[kind].name
    if corruption != "missing":
        path.write_bytes(CORRUPTIONS[corruption](files[kind].read_bytes(), files))
    with pytest.raises(error, match=message) as info:
        LOADERS[kind](path)
    assert str(path) in str(info.value)  # every message names the file
    assert "allow_pickle" not in str(info.value)


@pytest.mark.parametrize("kind, source, message", [
    ("pelsvae", "bayesflow", "not a PELS-VAE file"),
    ("bayesflow", "impu", "not a BayesFlow posterior file"),
    ("impu", "pelsvae", "not an IMPU file"),
    ("checkpoint", "pelsvae", "not a jcalib training checkpoint"),
    ("pelsvae", "checkpoint", "not a jcalib model file"),
    ("posterior", "measurements", "has no metadata entry"),
    ("measurements", "posterior", "has no ts, values, mask entries"),
])
def test_a_jcalib_file_of_another_kind_is_refused(files, kind, source, message):
    with pytest.raises(ValueError, match=message):
        LOADERS[kind](files[source])


def test_good_files_load_and_a_folder_is_no_file(files, tmp_path):
    for kind in ("pelsvae", "bayesflow", "impu", "posterior", "measurements", "twin"):
        LOADERS[kind](files[kind])
    np.testing.assert_array_equal(Measurements.from_npz(files["measurements"]).ts, TS)
    with pytest.raises(ValueError, match="is a folder; give the file"):
        PosteriorResult.load(tmp_path)


def test_a_file_without_checksum_is_refused(files, tmp_path):
    """Files from jcalib versions without checksums (e.g. a plain np.savez) do not load."""
    path = tmp_path / "old.npz"
    with np.load(files["measurements"]) as data:
        np.savez(path, **{k: data[k] for k in data.files if k != "sha256"})
    with pytest.raises(ValueError, match="no checksum"):
        Measurements.from_npz(path)


# --- checkpoints ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vae_run(tmp_path_factory):
    """A finished PELS-VAE run with a checkpoint, and the same run without one."""
    path = tmp_path_factory.mktemp("checkpoints") / "vae.ckpt"
    thetas, xs = _decay(0)
    return path, _vae().fit(KEY, thetas, xs, checkpoint=path), _vae().fit(KEY, thetas, xs)


def _same_predictions(a, b):
    thetas = _decay(5, 4)[0]
    np.testing.assert_array_equal(np.asarray(a.generate(None, thetas)), np.asarray(b.generate(None, thetas)))


@pytest.mark.parametrize("change", ["other thetas and trajectories", "other output statistics",
                                    "other validation data"])
def test_a_refit_on_other_data_is_refused(vae_run, change):
    """Issue item 6: the refit used to return the old weights with the new scaler, silently.
    Affinely rescaled trajectories normalise to the same network data: the scaler is part of
    the fingerprint, so even then old weights never meet a new scaler."""
    path, _, _ = vae_run
    thetas, xs = _decay(0)
    kwargs = {"other thetas and trajectories": dict(zip(("thetas", "trajectories"), _decay(1))),
              "other output statistics": {"thetas": thetas, "trajectories": 2.0 * xs + 1.0},
              "other validation data": {"thetas": thetas, "trajectories": xs, "val": _decay(2, 8)}}[change]
    with pytest.raises(ValueError, match=re.escape(f"the checkpoint {path} was written for other training data")
                       + ".*fresh_start=True"):
        _vae().fit(KEY, **kwargs, checkpoint=path)
    assert path.exists()  # the old run is not touched


@pytest.mark.parametrize("change", [{"beta": 1.0}, {"hidden_size": 8}, "key"])
def test_a_refit_with_another_network_configuration_is_refused(vae_run, change):
    """A tester's find: other beta or seed (now: key) resumed the finished run (0 epochs, the old network), and
    another hidden size failed on weight shapes; the network configuration and the key are in the fingerprint."""
    path, _, _ = vae_run
    other = _vae() if change == "key" else PELSVAE(DECAY, dataclasses.replace(_vae().config, **change))
    key = jax.random.key(5) if change == "key" else KEY
    with pytest.raises(ValueError, match="written for other training data.*network configuration.*fresh_start=True"):
        other.fit(key, *_decay(0), checkpoint=path)


def test_the_same_data_resumes_the_finished_run(vae_run):
    path, first, _ = vae_run
    assert first.training.n_epochs_run == TINY.epochs and first.training.resumed_from is None
    again = _vae().fit(KEY, *_decay(0), checkpoint=path)
    assert again.training.n_epochs_run == 0 and again.training.resumed_from == TINY.epochs
    assert again.to_dict()["training"]["n_epochs_run"] == 0
    _same_predictions(again, first)


def test_fresh_start_trains_every_epoch_and_overwrites(vae_run, tmp_path):
    path, _, plain = vae_run
    copy = tmp_path / "vae.ckpt"
    copy.write_bytes(path.read_bytes())
    thetas, xs = _decay(1)
    fresh = _vae().fit(KEY, thetas, xs, checkpoint=copy, fresh_start=True)
    assert fresh.training.n_epochs_run == TINY.epochs and fresh.training.resumed_from is None
    _same_predictions(fresh, _vae().fit(KEY, thetas, xs))  # exactly a run without checkpoint
    resumed = _vae().fit(KEY, thetas, xs, checkpoint=copy)  # the checkpoint is now the new run's
    assert resumed.training.n_epochs_run == 0
    _same_predictions(resumed, fresh)


def test_a_damaged_checkpoint_is_refused_unless_fresh_start(files, tmp_path):
    path = tmp_path / "run.ckpt"
    path.write_bytes(_flip(files["checkpoint"].read_bytes()))
    train = {"x": X, "y": np.sin(X)}
    with pytest.raises(ValueError, match="checksum mismatch"):
        _fit_mlp(train, path)
    assert _fit_mlp(train, path, fresh_start=True).n_epochs_run == TINY.epochs
    assert _fit_mlp(train, path).n_epochs_run == 0


def test_online_training_fingerprints_the_first_epoch(tmp_path):
    """A data callable (online training): the first epoch's data identify the run."""
    path = tmp_path / "online.ckpt"

    def data(scale):
        return lambda epoch: {"x": X, "y": np.sin(scale * epoch * X)}

    assert _fit_mlp(data(1.0), path).n_epochs_run == TINY.epochs
    assert _fit_mlp(data(1.0), path).n_epochs_run == 0
    with pytest.raises(ValueError, match="written for other training data"):
        _fit_mlp(data(2.0), path)
