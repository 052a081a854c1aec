"""Large jobs across processes with `jax.distributed` (issue 22 §3).

Two local CPU processes (127.0.0.1, two CPU devices each, so four devices in all) run
`tests/distributed_worker.py`: a batch of simulations, Sobol' indices, a multistart, a training
set and three epochs of network training. Both must hold the whole result, equal to this
(single-process, one-device) process's: bit for bit where the work is split by rows (every
row is solved alone, so no sum changes order), to float32 round-off for the data-parallel
training, whose gradient mean adds the four devices' partial sums in another order.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import jcalib
from jcalib import distributed
from jcalib.model import _simulate_vmapped
from tests.distributed_worker import batch_job, jobs

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
TIMEOUT_S = 300  # a hung collective fails the test instead of the suite

ROW_WISE = ("batch_values", "batch_status", "sobol_first", "sobol_total", "multistart_theta", "multistart_loss",
            "multistart_steps", "trf_theta", "trf_steps", "training_thetas", "training_trajectories")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_processes(tmp: pathlib.Path, reference, *job: str):
    """``(single, [process 0, process 1])``: the arrays of ``reference()`` computed here while two
    processes run ``tests/distributed_worker.py`` with ``job`` (none: every job; ``"batch"``: the
    batch of simulations only)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(tmp / f"process{i}.npz"), str(port), str(i), "2", *job],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        single = reference()
        logs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i} failed:\n{log[-4000:]}"
    return single, [dict(np.load(tmp / f"process{i}.npz")) for i in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every job, in two processes and in this one (`make test-all`)."""
    tmp = tmp_path_factory.mktemp("distributed")
    return _run_two_processes(tmp, lambda: jobs(str(tmp / "single.checkpoint")))


def test_two_processes_simulate_a_batch_as_one(tmp_path):
    """`make test`'s smoke run: two processes (four devices) initialise, split 13 simulations and
    both hold all of them, bit for bit this process's."""
    single, parts = _run_two_processes(tmp_path, batch_job, "batch")
    for part in parts:
        assert int(part["n_processes"]) == 2 and int(part["n_devices"]) == 4
        np.testing.assert_array_equal(part["batch_values"], single["batch_values"])
        np.testing.assert_array_equal(part["batch_status"], single["batch_status"])


@pytest.mark.slow  # every job in two processes: ~95 s of compiling (make test-all)
def test_two_processes_see_four_devices(runs):
    single, parts = runs
    assert int(single["n_processes"]) == 1 and int(single["n_devices"]) == 1
    for part in parts:
        assert int(part["n_processes"]) == 2 and int(part["n_devices"]) == 4


@pytest.mark.slow
@pytest.mark.parametrize("name", ROW_WISE)
def test_row_wise_jobs_equal_one_process_bit_for_bit(runs, name):
    single, parts = runs
    for part in parts:
        np.testing.assert_array_equal(part[name], single[name])


@pytest.mark.slow
def test_data_parallel_training_equals_one_device_to_round_off(runs):
    single, parts = runs
    np.testing.assert_array_equal(parts[0]["network_weights"], parts[1]["network_weights"])  # one model
    for part in parts:
        np.testing.assert_allclose(part["train_loss"], single["train_loss"], rtol=1e-5)
        np.testing.assert_allclose(part["network_weights"], single["network_weights"], rtol=1e-5, atol=1e-6)
    assert single["train_loss"][-1] < single["train_loss"][0]  # it did train


@pytest.mark.slow
def test_checkpoints_written_and_resumed_across_processes(runs):
    single, parts = runs
    for run in (single, *parts):
        assert int(run["resumed_epochs_run"]) == 0
        np.testing.assert_array_equal(run["resumed_weights"], run["network_weights"])


def test_without_initialize_nothing_changes(model):
    assert not distributed.is_initialized()
    assert jax.process_count() == 1
    thetas = np.asarray(model.parameters.sample(jax.random.key(0), 5, "lhs"))
    tree = {"thetas": thetas, "status": np.arange(5)}
    assert distributed.process_rows(tree) is tree
    gathered = distributed.gather_rows(tree, 5)
    np.testing.assert_array_equal(gathered["thetas"], thetas)
    if jax.device_count() == 1:
        assert distributed.replicate(tree) is tree
        assert distributed.shard_rows(tree) is tree
    assert distributed.global_mesh().devices.size == jax.device_count()
    y = jcalib.simulate_batch(model, thetas[:4], chunk_size=4, progress=False)  # one vmapped solve, as before
    np.testing.assert_array_equal(y, np.asarray(_simulate_vmapped(model, jax.numpy.asarray(thetas[:4]))[0]))


@pytest.mark.parametrize("kwargs, match", [
    (dict(coordinator_address="127.0.0.1:1234", num_processes=2, process_id=2),
     r"process_id must be an integer in \[0, num_processes=2\); got 2"),
    (dict(coordinator_address="127.0.0.1:1234", num_processes=2, process_id=-1),
     r"process_id must be an integer in \[0, num_processes=2\); got -1"),
    (dict(coordinator_address="127.0.0.1:1234", num_processes=0, process_id=0),
     "num_processes must be a positive integer; got 0"),
    (dict(coordinator_address="127.0.0.1", num_processes=2, process_id=0),
     "coordinator_address must be 'host:port'"),
    (dict(num_processes=2, process_id=0), r"give all of .* or none .*missing \['coordinator_address'\]"),
])
def test_initialize_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        distributed.initialize(**kwargs)
    assert not distributed.is_initialized()


def test_initialize_after_a_computation_is_refused():
    jax.devices()  # the backend is up in this process
    with pytest.raises(RuntimeError, match="must be called before"):
        distributed.initialize("127.0.0.1:1234", 2, 0)
    assert not distributed.is_initialized()
