"""One 1-D device mesh with axis ``"data"``: shardings and host-local -> global arrays.

Parameters are replicated, batches and Monte Carlo samples are sharded along their leading
axis, and sufficient statistics combine with ``jax.lax.psum`` inside ``jax.shard_map``.

Multi-host: every process calls :func:`initialize` (``jax.distributed.initialize``) before
anything else touches the devices; the mesh then spans the devices of all processes. A batch
reaches :func:`shard_batch` in one of two forms:

* ``process_local=False`` (default): every process holds the same *global* batch (B, ...) — e.g.
  all processes draw the same seeded windows — and each transfers only the rows of its own
  devices (``jax.make_array_from_callback``);
* ``process_local=True``: each process holds only its own rows (B / n_processes, ...), read from its
  own data shard, and the global array is assembled with ``jax.make_array_from_process_local_data``.

:func:`to_host` brings a global result (sharded or replicated) back to every process as NumPy.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from geomjax.errors import GeomjaxError
from geomjax.base.io import cache_root

AXIS = "data"

__all__ = ["AXIS", "data_mesh", "batch_sharding", "replicated", "shard_batch", "check_divisible",
           "initialize", "local_device_count", "to_host", "replicate", "shard_params", "fsdp_spec", "enable_compilation_cache"]


def enable_compilation_cache(path: str | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache (compiled programs reused across runs).

    The directory is ``path``, else ``$GEOMJAX_CACHE_DIR``, else ``<root>/jax`` where the root of
    geomjax's caches is ``$GEOMJAX_CACHE`` or ``~/.cache/geomjax`` (the clock claims keep their
    trained runs under ``<root>/grokking``);
    ``GEOMJAX_NO_COMPILE_CACHE=1`` leaves the cache off. Every program is stored, however quick
    its compile (with a 0.5 s threshold a warm demo read only ~30 programs from the cache and compiled
    the rest again; all of the demo's programs take 2.6 MB). Called by the ``geomjax`` command and the
    experiment scripts; library functions never change global JAX configuration themselves.

    Returns:
      The cache directory, or None when disabled.
    """
    import os

    if os.environ.get("GEOMJAX_NO_COMPILE_CACHE", "") not in ("", "0"):
        return None
    d = path or os.environ.get("GEOMJAX_CACHE_DIR") or str(cache_root() / "jax")
    os.makedirs(d, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return d


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> tuple[int, int]:
    """Start multi-process JAX (``jax.distributed.initialize``); returns (process_id, n_processes).

    With no arguments JAX detects the cluster (SLURM, Open MPI, TPU/GKE); on plain machines pass
    all three: the coordinator ``host:port`` (process 0's address), the number of processes and
    this process's index. On CPU, the devices per process come from
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (or ``jax_num_cpu_devices``) set before
    this call; cross-process CPU collectives use gloo.

    Raises:
      GeomjaxError: only some of the three arguments given, or process_id outside [0, n).
    """
    given = [a is not None for a in (coordinator_address, num_processes, process_id)]
    if any(given) and not all(given):
        raise GeomjaxError("initialize: pass coordinator_address, num_processes and process_id "
                         "together (or none of them to let JAX detect the cluster)")
    if all(given) and not 0 <= int(process_id) < int(num_processes):
        raise GeomjaxError(f"initialize: process_id {process_id} outside [0, {num_processes})")
    if all(given):
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=int(num_processes), process_id=int(process_id))
    else:
        jax.distributed.initialize()
    return jax.process_index(), jax.process_count()


def local_device_count(mesh: Mesh) -> int:
    """Number of the mesh's devices that belong to this process."""
    me = jax.process_index()
    return sum(d.process_index == me for d in mesh.devices.flat)


def data_mesh(n_devices: int | None = None) -> Mesh:
    """A 1-D mesh with axis ``"data"`` over the first ``n_devices`` devices (default: all).

    Args:
      n_devices: number of devices; ``None`` uses ``jax.device_count()``.

    Returns:
      ``jax.sharding.Mesh`` of shape ``(n_devices,)`` named ``("data",)``.
    """
    available = jax.device_count()
    n = available if n_devices is None else int(n_devices)
    if n < 1 or n > available:
        raise GeomjaxError(
            f"data_mesh: asked for {n} devices but {available} are available "
            "(on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)"
        )
    # Auto axis types: shardings propagate through jit without per-op annotations.
    return jax.make_mesh(
        (n,), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:n]
    )


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding that splits the leading (batch / sample) axis over ``"data"``."""
    return NamedSharding(mesh, P(AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """Sharding that replicates an array on every device of ``mesh``."""
    return NamedSharding(mesh, P())


def check_divisible(n: int, mesh: Mesh, what: str = "batch size") -> None:
    """Raise a clear error unless ``n`` splits evenly over the mesh's ``"data"`` axis."""
    size = mesh.shape[AXIS]
    if n % size:
        raise ValueError(
            f"{what} {n} is not divisible by the {size} devices of the 'data' mesh; "
            f"use a multiple of {size} (nothing is dropped or padded silently)"
        )


def shard_batch(x, mesh: Mesh, *, process_local: bool = False) -> jax.Array:
    """Place a batch (leading axis B) on ``mesh``, sharded along ``"data"``.

    Args:
      x: host array. Single process: the global batch (B, ...). Multi-process: the global batch,
        identical in every process (``process_local=False``), or this process's own rows
        (``process_local=True``; the global batch is their concatenation in process order).
      mesh: the 1-D ``"data"`` mesh.
      process_local: see ``x``.

    Returns:
      A global ``jax.Array`` (B_global, ...) sharded along ``"data"``.

    Raises:
      ValueError: the rows do not split evenly over the (local) devices.
    """
    sharding = batch_sharding(mesh)
    x = np.asarray(x)
    if jax.process_count() == 1:
        check_divisible(int(x.shape[0]), mesh)
        return jax.device_put(x, sharding)
    if process_local:
        n_local = local_device_count(mesh)
        if x.shape[0] % n_local:
            raise ValueError(f"shard_batch: this process holds {x.shape[0]} rows, not divisible by "
                             f"its {n_local} devices of the 'data' mesh")
        return jax.make_array_from_process_local_data(sharding, x)
    check_divisible(int(x.shape[0]), mesh)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def replicate(tree, mesh: Mesh):
    """Put a pytree of host/local arrays on every device of ``mesh`` (all processes: same value)."""
    sharding = replicated(mesh)
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def put(a):
        if isinstance(a, jax.Array) and a.sharding == sharding:
            return a  # already placed
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])

    return jax.tree.map(put, tree)


def fsdp_spec(shape: tuple[int, ...], n: int, from_axis: int = 0) -> P:
    """The FSDP sharding of one parameter over ``n`` devices: its first axis at or after ``from_axis``
    whose size ``n`` divides, for arrays with at least two axes from ``from_axis`` on (matrices;
    vectors and matrices with no divisible axis are replicated, ``P()``).

    ``from_axis=1`` for parameters stacked over layers (L, ...): the layer axis stays whole, so a scan
    over it gathers one layer's weights at a time.
    """
    if len(shape) - from_axis < 2 or n == 1:
        return P()
    axis = next((i for i in range(from_axis, len(shape)) if shape[i] % n == 0), None)
    return P() if axis is None else P(*([None] * axis + [AXIS]))


def shard_params(tree, mesh: Mesh, *, from_axis: int = 0):
    """Place model parameters on ``mesh`` with every matrix split over ``"data"`` (FSDP; :func:`fsdp_spec`).

    Each array of rank >= 2 is split along its first axis (at or after ``from_axis``) whose size the
    mesh divides (so a 7B model's (d, H, K), (d, F) and (V, d) matrices spread over the devices);
    vectors and matrices with no divisible axis are replicated. Each device receives only its own
    slice; with several processes every process passes the same host values and transfers only its
    own devices' slices (``jax.make_array_from_callback``).
    """
    n = mesh.shape[AXIS]

    def put(a):
        sharding = NamedSharding(mesh, fsdp_spec(np.shape(a), n, from_axis))
        if isinstance(a, jax.Array) and a.sharding == sharding:
            return a  # already placed
        if jax.process_count() == 1:
            return jax.device_put(a, sharding)
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])

    return jax.tree.map(put, tree)


def to_host(x) -> np.ndarray:
    """A global array's full value as NumPy in every process (gathers shards across processes)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if x.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
