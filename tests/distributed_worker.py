"""The large jobs of `tests/test_distributed.py`, run in one process or in each of several.

``python tests/distributed_worker.py OUT.npz [PORT PROCESS_ID NUM_PROCESSES [batch]]``: with a
port, joins a multi-process run on 127.0.0.1 (`jcalib.distributed.initialize`) first; then runs
`jobs` (only `batch_job` with ``batch``) and writes its arrays to ``OUT.npz`` and its network checkpoint to
``OUT.npz.checkpoint`` (the test gives each process its own files).
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set by the test) gives each process N
CPU devices. The test process imports `jobs` for the single-process reference.
"""

from __future__ import annotations

import sys

import jax
import numpy as np


def jobs(checkpoint: str) -> dict[str, np.ndarray]:
    """Tiny instances of every job that `jcalib.distributed` spreads: a batch of simulations,
    Sobol' indices, multistarts (LM and TRF), a training set and three epochs of network training (written
    to the file ``checkpoint``, then resumed from it)."""
    import jax.numpy as jnp
    from flax import nnx

    import jcalib
    from jcalib.data import synthetic_measurements
    from jcalib.estimation import multistart
    from jcalib.nn import MLP, TrainingConfig, fit
    from jcalib.nn.data import simulate_training_set
    from jcalib.sensitivity import sobol_indices

    model = jcalib.models.get("four_substance_reactions")
    out = batch_job()

    sobol = sobol_indices(jax.random.key(1), model, None, 16, n_bootstrap=20, chunk_size=4, progress=False)
    out["sobol_first"], out["sobol_total"] = np.asarray(sobol.first_order), np.asarray(sobol.total_order)

    data = synthetic_measurements(jax.random.key(2), model, model.parameters.nominal, sigma=0.05)
    problem = jcalib.CalibrationProblem(model, data)
    starts = multistart(jax.random.key(3), problem, 5, "lm", "lhs", max_steps=8)
    out["multistart_theta"] = np.stack([np.asarray(r.theta) for r in starts.results])
    out["multistart_loss"] = np.array([r.loss for r in starts.results])
    out["multistart_steps"] = np.array([r.n_steps for r in starts.results])
    trf = multistart(jax.random.key(3), problem, 3, "trf", "lhs", max_steps=5)  # one start after another
    out["trf_theta"] = np.stack([np.asarray(r.theta) for r in trf.results])
    out["trf_steps"] = np.array([r.n_steps for r in trf.results])

    training = simulate_training_set(jax.random.key(4), model, 48, chunk_size=4)
    out["training_thetas"], out["training_trajectories"] = training.thetas, training.trajectories

    x = np.log(training.trajectories[:, ::4, :].reshape(48, -1) + 1e-3)  # (48, 24) features
    y = np.log(training.thetas)
    x, y = (x - x.mean(0)) / x.std(0), (y - y.mean(0)) / y.std(0)
    net = MLP(x.shape[1], (16,), y.shape[1], rngs=nnx.Rngs(0))

    def mse(key, network, batch):
        return jnp.mean((network(batch["x"]) - batch["y"]) ** 2)

    config = TrainingConfig(epochs=3, batch_size=16, learning_rate=1e-2, progress=False)
    result = fit(jax.random.key(5), net, mse, {"x": x, "y": y}, config=config, checkpoint=checkpoint)
    out["train_loss"] = np.asarray(result.history["train_loss"])
    out["network_weights"] = _weights(result.model)
    again = fit(jax.random.key(5), MLP(x.shape[1], (16,), y.shape[1], rngs=nnx.Rngs(1)), mse, {"x": x, "y": y},
                config=config, checkpoint=checkpoint)  # a finished run: its best weights, no training
    out["resumed_epochs_run"], out["resumed_weights"] = np.array(again.n_epochs_run), _weights(again.model)
    return out


def batch_job() -> dict[str, np.ndarray]:
    """The smallest job (`make test`'s two-process smoke run): the process and device counts and
    13 four_substance_reactions simulations in chunks of 4, a padded block (13 = 7 + 6 over two
    processes) and a padded chunk; every simulate_batch of `jobs` uses chunks of 4, so one
    compiled solve serves them all."""
    import jcalib

    model = jcalib.models.get("four_substance_reactions")
    out = {"n_devices": np.array(jax.device_count()), "n_processes": np.array(jax.process_count())}
    thetas = np.asarray(model.parameters.sample(jax.random.key(0), 13, "lhs"))
    out["batch_values"], out["batch_status"] = jcalib.simulate_batch(
        model, thetas, chunk_size=4, return_status=True, progress=False)
    return out


def _weights(network) -> np.ndarray:
    from flax import nnx

    return np.concatenate([np.ravel(np.asarray(w)) for w in jax.tree_util.tree_leaves(nnx.state(network, nnx.Param))])


if __name__ == "__main__":
    if len(sys.argv) > 2:
        import jcalib

        jcalib.distributed.initialize(f"127.0.0.1:{sys.argv[2]}", int(sys.argv[4]), int(sys.argv[3]),
                                      initialization_timeout=60)
    jax.config.update("jax_enable_x64", True)
    smoke = sys.argv[5:] == ["batch"]
    np.savez(sys.argv[1], **(batch_job() if smoke else jobs(sys.argv[1] + ".checkpoint")))
