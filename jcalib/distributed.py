"""Large jobs across processes and machines with `jax.distributed` (JAX's multi-controller runtime).

Every process runs the same script. After `initialize`, ``jax.devices()`` lists the devices of
all processes and ``jax.local_devices()`` this process's own; every process holds the same
inputs (they draw from the same ``key``), takes its block of the rows (`process_rows`), works
on it with its local devices, and gets the whole result back (`gather_rows`, one all-gather).
This is how `jcalib.simulate_batch` (and with it Sobol' indices and training sets) and the
multistarts (`jcalib.estimation.multistart`) spread their work; a job whose results are Python
objects takes its rows with `process_slice` and gathers them with `gather_objects`. Network
training (`jcalib.nn.training.fit`) is data-parallel instead: parameters and data are
replicated on all devices (`replicate`), each minibatch is split over them (`shard_rows`), and
the gradient mean becomes a cross-device reduction.

With one process nothing changes: `process_rows` returns the rows unchanged and
`gather_rows` gathers nothing; with one device in all, `replicate` and `shard_rows` are
identities.

Example (two processes on one machine; on a SLURM cluster ``initialize()`` without
arguments reads the job's environment)::

    # process 0 and process 1 run the same script, with PROCESS_ID = 0 and 1
    import jax
    import jcalib
    jcalib.distributed.initialize("127.0.0.1:12355", num_processes=2, process_id=PROCESS_ID)
    jax.config.update("jax_enable_x64", True)
    model = jcalib.models.get("four_substance_reactions")
    thetas = model.parameters.sample(jax.random.key(0), 10_000, "lhs")  # the same on both
    ys = jcalib.simulate_batch(model, thetas)  # each solves half; both get all (10000, 22, 4)
"""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = [
    "gather_objects",
    "gather_rows",
    "global_mesh",
    "initialize",
    "is_initialized",
    "process_rows",
    "process_slice",
    "replicate",
    "shard_rows",
    "to_local",
]

AXIS = "batch"
"""The name of the one axis of `global_mesh`."""


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    initialization_timeout: int = 300,
) -> None:
    """Join this process to a multi-process JAX run (wraps `jax.distributed.initialize`).

    Call it first, before any JAX computation (``jax.devices()`` included). Without
    arguments JAX reads the cluster's environment (SLURM, Open MPI, TPU pods; e.g. under
    ``srun``); otherwise give all three of ``coordinator_address``, ``num_processes`` and
    ``process_id``. On CPUs the cross-process collectives use gloo (set unless
    ``jax_cpu_collectives_implementation`` is already chosen, e.g. ``"mpi"``).

    Args:
        coordinator_address: ``"host:port"`` of process 0, reachable from every process
            (``"127.0.0.1:port"`` for processes on one machine).
        num_processes: the number of processes (>= 1).
        process_id: this process's number, ``0 <= process_id < num_processes``.
        local_device_ids: the local accelerators this process uses (e.g. one GPU per
            process); None: JAX's default (all, or one per process under SLURM/Open MPI).
        initialization_timeout: seconds to wait for the other processes.

    Raises:
        ValueError: ``num_processes`` < 1, ``process_id`` outside ``[0, num_processes)``,
            only some of the three arguments, or an address without a port.
        RuntimeError: (from JAX) called twice, or after JAX has run a computation.
    """
    given = {"coordinator_address": coordinator_address, "num_processes": num_processes, "process_id": process_id}
    if any(v is not None for v in given.values()) and any(v is None for v in given.values()):
        missing = [k for k, v in given.items() if v is None]
        raise ValueError(f"jcalib.distributed.initialize: give all of coordinator_address, num_processes and "
                         f"process_id, or none (a cluster's environment supplies them); missing {missing}")
    if num_processes is not None:
        if isinstance(num_processes, bool) or not isinstance(num_processes, (int, np.integer)) or num_processes < 1:
            raise ValueError(f"jcalib.distributed.initialize: num_processes must be a positive integer; "
                             f"got {num_processes!r}")
        if (isinstance(process_id, bool) or not isinstance(process_id, (int, np.integer))
                or not 0 <= process_id < num_processes):
            raise ValueError(f"jcalib.distributed.initialize: process_id must be an integer in [0, num_processes="
                             f"{num_processes}); got {process_id!r} (processes are numbered 0 to "
                             f"{num_processes - 1})")
        if not isinstance(coordinator_address, str) or not re.fullmatch(r".+:\d+", coordinator_address):
            raise ValueError(f"jcalib.distributed.initialize: coordinator_address must be 'host:port' (e.g. "
                             f"'127.0.0.1:12355'); got {coordinator_address!r}")
        num_processes, process_id = int(num_processes), int(process_id)
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id, local_device_ids=local_device_ids,
                               initialization_timeout=initialization_timeout)


def is_initialized() -> bool:
    """Whether `initialize` (or `jax.distributed.initialize`) has run in this process."""
    return jax.distributed.is_initialized()


def global_mesh() -> Mesh:
    """A one-axis mesh (axis `AXIS`) over ``jax.devices()``: every device of every process."""
    return Mesh(np.array(jax.devices()), (AXIS,))


def _block(n: int) -> int:
    return math.ceil(n / jax.process_count())


def process_rows(x: Any) -> Any:
    """This process's block of the rows of ``x`` (every process holds the same ``x``).

    Process ``p`` of ``P`` takes rows ``p m`` to ``(p + 1) m - 1`` with ``m = ceil(n / P)``;
    a block past the end is padded by repeating the last row, so every block has ``m``
    rows (and the compiled shapes agree). With one process, ``x`` itself.

    Args:
        x: a pytree of arrays with a common leading axis ``n``, ``(n, ...)``.

    Returns:
        The same pytree of ``(m, ...)`` NumPy arrays.
    """
    if jax.process_count() == 1:
        return x
    leaves = jax.tree_util.tree_leaves(x)
    n = np.shape(leaves[0])[0]
    m, p = _block(n), jax.process_index()
    index = np.minimum(np.arange(p * m, (p + 1) * m), n - 1)
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[index], x)


def gather_rows(rows: Any, n: int) -> Any:
    """Every process's `process_rows` block, put back together: the inverse of `process_rows`.

    One all-gather (`jax.experimental.multihost_utils.process_allgather`) over the raw bytes,
    so every dtype arrives bit for bit (float64 too, whether or not ``jax_enable_x64`` is
    on). Every process must call it, with blocks of one shape, and all processes need the
    same number of local devices (the all-gather lays ``jax.devices()`` out as processes x
    local devices). With one process, ``rows`` as NumPy arrays.

    Args:
        rows: a pytree of ``(m, ...)`` arrays, this process's block of each leaf.
        n: the number of rows of the whole (unpadded) batch.

    Returns:
        The pytree of ``(n, ...)`` NumPy arrays, the same on every process.
    """
    if jax.process_count() == 1:
        return jax.tree_util.tree_map(np.asarray, rows)
    leaves, treedef = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.asarray, rows))
    for leaf in leaves:
        if leaf.ndim == 0 or leaf.shape[0] != _block(n):
            raise ValueError(f"gather_rows: every block must have ceil(n / process_count) = {_block(n)} rows; got "
                             f"shape {leaf.shape}")
    as_bytes = [np.ascontiguousarray(a).reshape(a.shape[0], -1).view(np.uint8) for a in leaves]
    gathered = multihost_utils.process_allgather(as_bytes, tiled=True)
    out = [g.view(a.dtype).reshape((-1,) + a.shape[1:])[:n] for g, a in zip(gathered, leaves)]
    return jax.tree_util.tree_unflatten(treedef, out)


def process_slice(n: int) -> slice:
    """This process's rows of ``n`` as a slice, `process_rows`'s block without its padding (the
    last blocks may be shorter or empty).

    Example:
        >>> process_slice(5)  # one process: every row
        slice(0, 5, None)
    """
    m, p = _block(n), jax.process_index()
    return slice(min(p * m, n), min((p + 1) * m, n))


def gather_objects(objects: Sequence[Any]) -> list[Any]:
    """Every process's ``objects`` (picklable, e.g. the results of its `process_slice` rows),
    concatenated in process order, the same list on every process (two all-gathers of the pickled
    bytes, `gather_rows`). Every process must call it. With one process, ``list(objects)``.

    Example:
        >>> gather_objects(["a", {"b": 1}])
        ['a', {'b': 1}]
    """
    if jax.process_count() == 1:
        return list(objects)
    data = np.frombuffer(pickle.dumps(list(objects)), dtype=np.uint8)
    sizes = gather_rows(np.array([data.size]), jax.process_count())
    rows = np.zeros((1, int(sizes.max())), dtype=np.uint8)
    rows[0, :data.size] = data
    gathered = gather_rows(rows, jax.process_count())
    return [item for row, size in zip(gathered, sizes) for item in pickle.loads(row[:size].tobytes())]


def replicate(tree: Any) -> Any:
    """Put every array of ``tree`` on every device (``NamedSharding(global_mesh(), P())``).

    Every process must pass the same values. With one device in all, ``tree`` itself.

    Args:
        tree: a pytree of arrays (NumPy or JAX).

    Returns:
        The pytree of replicated global `jax.Array`s.
    """
    if jax.device_count() == 1:
        return tree
    sharding = NamedSharding(global_mesh(), PartitionSpec())

    def put(a):
        if isinstance(a, jax.Array) and a.sharding == sharding:
            return a
        if _is_key(a):  # typed random keys (e.g. nnx.Rngs state) travel as their key data
            return jax.random.wrap_key_data(put(jax.random.key_data(a)), impl=jax.random.key_impl(a))
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])

    return jax.tree_util.tree_map(put, tree)


def shard_rows(tree: Any) -> Any:
    """Inside `jax.jit`: split the leading axis of every array over all devices.

    A sharding constraint (`jax.lax.with_sharding_constraint` with ``P(AXIS)`` on
    `global_mesh`); the compiler partitions what follows, e.g. a minibatch's forward and
    backward pass, and reduces across devices where the batch is summed or averaged. With
    one device in all, ``tree`` itself.

    Args:
        tree: a pytree of ``(batch, ...)`` traced arrays.

    Returns:
        The same values, constrained to be split over the devices along ``batch``.
    """
    if jax.device_count() == 1:
        return tree
    sharding = NamedSharding(global_mesh(), PartitionSpec(AXIS))
    return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


def to_local(tree: Any) -> Any:
    """Replicated arrays as this process's own single-device copies; other leaves unchanged.

    Use it for results that leave a distributed computation (e.g. trained weights), so that
    later work in one process does not need the others.

    Args:
        tree: a pytree whose `jax.Array` leaves are fully replicated.

    Returns:
        The pytree with those leaves as arrays on this process's default device.
    """
    def local(a):
        if not isinstance(a, jax.Array) or len(a.sharding.device_set) == 1:
            return a
        if _is_key(a):
            return jax.random.wrap_key_data(local(jax.random.key_data(a)), impl=jax.random.key_impl(a))
        return jnp.asarray(np.asarray(a.addressable_data(0)))

    return jax.tree_util.tree_map(local, tree)


def _is_key(a) -> bool:
    return isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
