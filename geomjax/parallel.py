"""One 1-D device mesh with axis ``"data"``: shardings and host-local -> global arrays.

Parameters are replicated, batches and Monte Carlo samples are sharded along their leading
axis, and sufficient statistics combine with ``jax.lax.psum`` inside ``jax.shard_map``.
Multi-host runs call ``jax.distributed.initialize()`` first (see README); each process then
passes its host-local slice to :func:`shard_batch`, which assembles the global array with
``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "data"

__all__ = ["AXIS", "data_mesh", "batch_sharding", "replicated", "shard_batch", "check_divisible"]


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
        raise ValueError(
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


def shard_batch(x, mesh: Mesh) -> jax.Array:
    """Place a batch (leading axis B) on ``mesh``, sharded along ``"data"``.

    Single process: ``x`` is the global batch (B, ...). Multi-process: ``x`` is this process's
    local slice and the global batch is assembled with ``make_array_from_process_local_data``.
    """
    sharding = batch_sharding(mesh)
    if jax.process_count() == 1:
        check_divisible(int(np.shape(x)[0]), mesh)
        return jax.device_put(x, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))
