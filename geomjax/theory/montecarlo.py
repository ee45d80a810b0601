"""Monte Carlo estimates that merge exactly, and a chunked, sharded Monte Carlo driver.

An :class:`Estimate` holds the sufficient statistics of a sample: the count ``n``, the mean and
``m2`` = sum of squared deviations from the mean (elementwise, for every leaf of a pytree of
arrays). Two estimates merge with Chan, Golub & LeVeque's parallel formula::

    n = n_a + n_b,   delta = mean_b - mean_a
    mean = mean_a + delta * n_b / n
    m2   = m2_a + m2_b + delta**2 * n_a * n_b / n

which is exact in real arithmetic: merging the estimates of any chunking of a sample gives the
estimate of the concatenated sample up to float rounding. The standard error of the mean is
``sem = std(ddof=1) / sqrt(n)``.

:func:`estimate` draws ``n_samples`` independent samples of ``sample_fn(key) -> pytree``. Sample
``i`` always uses the key ``jax.random.fold_in(key, i)``, so the result does not depend on the chunk
size or on the number of devices (up to float rounding). Chunks of keys are vmapped and the chunks
are scanned (``jax.lax.scan``); with a mesh, every chunk is split over the ``"data"`` axis inside
``jax.shard_map`` and the per-device statistics are combined with ``psum``::

    n = psum(n_i),  mean = psum(n_i mean_i) / n,  m2 = psum(m2_i + n_i (mean_i - mean)**2)

A sample count that is not a multiple of the chunk size is handled exactly: the last chunk is
masked (its surplus draws are computed and discarded, never counted), so no sample is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec as P

from geomjax.base._checks import check_int, check_prng_key, compiled_cache, x64_context
from geomjax.base._repr import with_compact_repr
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from geomjax.base.parallel import AXIS
from geomjax.typing import Array, Key, PyTree, Shaped

__all__ = ["Estimate", "merge", "merge_all", "from_samples", "estimate"]

_DTYPES = ("float32", "float64")


def _count_dtype():
    return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


# ----------------------------------------------------------------------------------------------
# Pure statistics (usable under jit / shard_map)
# ----------------------------------------------------------------------------------------------


def _stats_from_samples(x, valid=None, dtype=None):
    """(n, mean, m2) of a pytree whose leaves have a leading sample axis; ``valid`` masks rows."""
    leaves = jax.tree_util.tree_leaves(x)
    if not leaves:
        raise GeomjaxError("Estimate: the sample pytree has no array leaves")
    s = leaves[0].shape[0]
    if valid is None:
        valid = jnp.ones((s,), bool)
    n = jnp.sum(valid).astype(_count_dtype())

    def prep(leaf):
        return leaf.astype(dtype) if dtype is not None else leaf

    def mask(leaf):
        return valid.reshape((s,) + (1,) * (leaf.ndim - 1))

    def mean_leaf(leaf):
        leaf = prep(leaf)
        nf = jnp.maximum(n, 1).astype(leaf.dtype)
        return jnp.sum(jnp.where(mask(leaf), leaf, jnp.zeros((), leaf.dtype)), axis=0) / nf

    def m2_leaf(leaf, mean):
        leaf = prep(leaf)
        dev = jnp.where(mask(leaf), leaf - mean[None], jnp.zeros((), leaf.dtype))
        return jnp.sum(dev * dev, axis=0)

    mean = jax.tree_util.tree_map(mean_leaf, x)
    m2 = jax.tree_util.tree_map(m2_leaf, x, mean)
    return n, mean, m2


def _merge_stats(a, b):
    """Chan et al. parallel merge of (n, mean, m2) triples; exact, safe when a count is 0."""
    na, ma, sa = a
    nb, mb, sb = b
    n = na + nb

    def mean_leaf(x, y):
        nf = jnp.maximum(n, 1).astype(x.dtype)
        return x + (y - x) * (nb.astype(x.dtype) / nf)

    def m2_leaf(x, y, u, v):
        nf = jnp.maximum(n, 1).astype(x.dtype)
        d = y - x
        return u + v + d * d * (na.astype(x.dtype) * nb.astype(x.dtype) / nf)

    mean = jax.tree_util.tree_map(mean_leaf, ma, mb)
    m2 = jax.tree_util.tree_map(m2_leaf, ma, mb, sa, sb)
    return n, mean, m2


def _psum_stats(st, axis_name: str):
    """Combine per-device (n, mean, m2) into the statistics of the union, with two psums."""
    n_i, mean_i, m2_i = st
    n = jax.lax.psum(n_i, axis_name)

    def mean_leaf(x):
        return jax.lax.psum(n_i.astype(x.dtype) * x, axis_name) / jnp.maximum(n, 1).astype(x.dtype)

    mean = jax.tree_util.tree_map(mean_leaf, mean_i)

    def m2_leaf(x, u, mu):
        d = x - mu
        return jax.lax.psum(u + n_i.astype(x.dtype) * d * d, axis_name)

    m2 = jax.tree_util.tree_map(m2_leaf, mean_i, m2_i, mean)
    return n, mean, m2


_stats_jit = jax.jit(_stats_from_samples, static_argnames=("dtype",))
_merge_jit = jax.jit(_merge_stats)

# ----------------------------------------------------------------------------------------------
# Estimate
# ----------------------------------------------------------------------------------------------


@with_compact_repr
@struct.dataclass
class Estimate:
    """Mergeable Monte Carlo estimate of the mean of a (pytree-valued) random quantity.

    Attributes:
      mean: pytree of arrays, the sample mean (elementwise).
      m2: pytree of arrays with the structure of ``mean``: sum of squared deviations from the mean.
      n: scalar integer array, the number of samples.
      dtype: "float32" or "float64", the dtype the statistics were accumulated in (static).

    Properties ``var`` (ddof = 1), ``std``, ``sem`` = std / sqrt(n) are elementwise pytrees.
    Float64 estimates keep float64 leaves; their properties and :meth:`merge` enable float64
    locally, so nothing is truncated when JAX x64 is off.

    Example (E[U] = 1/2 for U uniform on [0, 1]):
      >>> import jax, geomjax as gj
      >>> est = gj.montecarlo.estimate(lambda k: jax.random.uniform(k), jax.random.key(0), 4096, chunk=1024)
      >>> isinstance(est, gj.Estimate), int(est.n), bool(abs(float(est.mean) - 0.5) < 5 * float(est.sem))
      (True, 4096, True)
    """

    mean: Any
    m2: Any
    n: Array
    dtype: str = struct.field(pytree_node=False, default="float32")

    # -- derived quantities --------------------------------------------------------------------
    def _map(self, fn, *trees):
        with x64_context(self.dtype):
            return jax.tree_util.tree_map(fn, *trees)

    @property
    def var(self):
        """Unbiased sample variance m2 / (n - 1) (NaN when n < 2)."""
        n = self.n
        return self._map(lambda s: jnp.where(n > 1, s / jnp.maximum(n - 1, 1).astype(s.dtype), jnp.nan), self.m2)

    @property
    def std(self):
        """Sample standard deviation, ddof = 1."""
        return self._map(jnp.sqrt, self.var)

    @property
    def sem(self):
        """Standard error of the mean, std(ddof=1) / sqrt(n)."""
        n = self.n
        return self._map(lambda v: jnp.sqrt(v / n.astype(v.dtype)), self.var)

    def z_score(self, predicted):
        """(mean - predicted) / sem, elementwise; ``predicted`` has the structure of ``mean``."""
        sem = self.sem
        return self._map(lambda m, p, s: (m - jnp.asarray(p, m.dtype)) / s, self.mean, predicted, sem)

    def merge(self, other: "Estimate") -> "Estimate":
        """Exact merge with ``other`` (Chan et al.); equals the estimate of the pooled samples."""
        return merge(self, other)

    @classmethod
    def from_samples(cls, samples, dtype: str | None = None) -> "Estimate":
        """Estimate from a pytree of arrays with a leading sample axis (two-pass, exact)."""
        return from_samples(samples, dtype=dtype)

    def as_numpy(self) -> dict:
        """Plain NumPy copies: {"mean", "sem", "std", "n", "dtype"} (pytrees of np.ndarray)."""
        to_np = lambda t: jax.tree_util.tree_map(np.asarray, t)
        return {
            "mean": to_np(self.mean),
            "sem": to_np(self.sem),
            "std": to_np(self.std),
            "n": int(self.n),
            "dtype": self.dtype,
        }


def merge(a: Estimate, b: Estimate) -> Estimate:
    """Merge two estimates exactly (Chan, Golub & LeVeque parallel formula).

    Args:
      a, b: estimates of samples of the same quantity (same pytree structure and shapes).

    Returns:
      The estimate of the concatenated sample; dtype float64 if either input is float64.

    Raises:
      ValueError: different pytree structures or leaf shapes.
    """
    if jax.tree_util.tree_structure(a.mean) != jax.tree_util.tree_structure(b.mean):
        raise GeomjaxError("merge: the two estimates have different pytree structures")
    for x, y in zip(jax.tree_util.tree_leaves(a.mean), jax.tree_util.tree_leaves(b.mean)):
        if jnp.shape(x) != jnp.shape(y):
            raise GeomjaxError(f"merge: leaf shapes differ, {jnp.shape(x)} vs {jnp.shape(y)}")
    dtype = "float64" if "float64" in (a.dtype, b.dtype) else "float32"
    with x64_context(dtype):
        cast = lambda t: jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), t)
        cd = _count_dtype()
        n, mean, m2 = _merge_jit(
            (jnp.asarray(a.n, cd), cast(a.mean), cast(a.m2)),
            (jnp.asarray(b.n, cd), cast(b.mean), cast(b.m2)),
        )
    return Estimate(mean=mean, m2=m2, n=n, dtype=dtype)


def merge_all(estimates: Sequence[Estimate]) -> Estimate:
    """Merge a non-empty sequence of estimates left to right (exact, see :func:`merge`)."""
    estimates = list(estimates)
    if not estimates:
        raise GeomjaxError("merge_all: got no estimates")
    out = estimates[0]
    for e in estimates[1:]:
        out = merge(out, e)
    return out


def _leaf_dtype_name(leaves) -> str:
    return "float64" if any(np.dtype(getattr(l, "dtype", np.float32)) == np.float64 for l in leaves) else "float32"


def from_samples(samples: PyTree[Shaped[Array, "S ..."]], dtype: str | None = None) -> Estimate:
    """Estimate of the mean of each leaf of ``samples`` (leading axis S = samples), two-pass.

    Args:
      samples: pytree of arrays, each of shape (S, ...), S >= 1.
      dtype: "float32" or "float64"; default float64 if any leaf is float64, else float32.

    Returns:
      :class:`Estimate` with ``n = S``.

    Raises:
      ValueError: empty pytree, S = 0, leaves with different S, unknown dtype, or a float64 leaf
        with dtype="float32" (that would silently lose precision).
      TypeError: complex (or other non-real) leaves.
    """
    leaves = jax.tree_util.tree_leaves(samples)
    if not leaves:
        raise GeomjaxError("from_samples: the sample pytree has no array leaves")
    sizes = {int(np.shape(l)[0]) if np.ndim(l) else -1 for l in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise GeomjaxError(f"from_samples: every leaf needs the same leading sample axis, got {sizes}")
    if sizes == {0}:
        raise GeomjaxError("from_samples: no samples (S = 0)")
    kinds = {np.dtype(getattr(l, "dtype", np.asarray(l).dtype)).kind for l in leaves}
    if not kinds <= {"f", "i", "u", "b"}:
        raise GeomjaxTypeError(f"from_samples: samples must be real (float/int/bool) arrays, got dtype kinds {sorted(kinds)}")
    inferred = _leaf_dtype_name(leaves)
    dtype = inferred if dtype is None else dtype
    if dtype not in _DTYPES:
        raise GeomjaxError(f"from_samples: dtype must be one of {_DTYPES}, got {dtype!r}")
    if inferred == "float64" and dtype == "float32":
        raise GeomjaxError("from_samples: float64 samples with dtype='float32' would lose precision")
    with x64_context(dtype):
        samples = jax.tree_util.tree_map(lambda l: jnp.asarray(l, dtype), samples)
        n, mean, m2 = _stats_jit(samples, dtype=dtype)
    return Estimate(mean=mean, m2=m2, n=n, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _make_driver(sample_fn, n_samples: int, chunk: int, mesh, dtype: str):
    """Jitted ``key -> (n, mean, m2)`` for fixed (sample_fn, n_samples, chunk, mesh, dtype)."""
    n_dev = 1 if mesh is None else int(mesh.shape[AXIS])
    n_chunks = math.ceil(n_samples / chunk)
    per_dev = chunk // n_dev

    def chunk_stats(key, c, offset, start):
        idx = c * chunk + offset + jnp.arange(per_dev, dtype=jnp.int32)
        valid = idx < n_samples
        keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(idx + start)
        x = jax.vmap(sample_fn)(keys)
        return _stats_from_samples(x, valid, dtype=dtype)

    def run_chunks(key, start):
        probe = jax.eval_shape(sample_fn, jax.random.fold_in(key, 0))
        if mesh is None:
            offset = jnp.int32(0)
        else:
            offset = jax.lax.axis_index(AXIS).astype(jnp.int32) * per_dev

        def body(carry, c):
            st = chunk_stats(key, c, offset, start)
            if mesh is not None:
                st = _psum_stats(st, AXIS)
            return _merge_stats(carry, st), None

        zeros = lambda leaf: jnp.zeros(leaf.shape, dtype)
        init = (
            jnp.zeros((), _count_dtype()),
            jax.tree_util.tree_map(zeros, probe),
            jax.tree_util.tree_map(zeros, probe),
        )
        out, _ = jax.lax.scan(body, init, jnp.arange(n_chunks, dtype=jnp.int32))
        return out

    if mesh is None:
        return jax.jit(run_chunks)
    return jax.jit(jax.shard_map(run_chunks, mesh=mesh, in_specs=(P(), P()), out_specs=P()))


@compiled_cache(maxsize=64)
def _cached_driver(sample_fn, n_samples: int, chunk: int, mesh, dtype: str):
    return _make_driver(sample_fn, n_samples, chunk, mesh, dtype)


def _driver(sample_fn, n_samples: int, chunk: int, mesh, dtype: str):
    """The compiled driver, cached per (sample_fn, n_samples, chunk, mesh, dtype) when hashable,
    so repeated calls with the same sampler do not retrace."""
    try:
        return _cached_driver(sample_fn, n_samples, chunk, mesh, dtype)
    except TypeError:  # unhashable sampler (e.g. a callable object defining __eq__ only)
        return _make_driver(sample_fn, n_samples, chunk, mesh, dtype)


def estimate(
    sample_fn: Callable[[Key], Any],
    key: Key,
    n_samples: int,
    *,
    chunk: int = 4096,
    mesh: Mesh | None = None,
    dtype: str | None = None,
    start: int = 0,
) -> Estimate:
    """Monte Carlo estimate of E[sample_fn(key)] from ``n_samples`` independent draws.

    Sample ``i`` (start <= i < start + n_samples) is ``sample_fn(jax.random.fold_in(key, i))``: keys are never
    reused and do not depend on ``chunk`` or the mesh, so every chunking and device count sees the
    SAME samples and the results agree up to the rounding of the (exact) merges. Each chunk of
    ``chunk`` keys is vmapped; chunks are scanned (``jax.lax.scan``); with ``mesh`` each chunk is
    split over the mesh's ``"data"`` axis (``jax.shard_map``) and per-device statistics are
    combined with ``psum``. The estimate of the mean of every leaf is ``mean`` with standard
    error ``sem = std(ddof=1)/sqrt(n)`` (the Monte Carlo rule of DESIGN.md: a prediction agrees
    when |mean − prediction| ≤ 5·sem).

    The compiled driver is cached per (sample_fn, n_samples, chunk, mesh, dtype); ``estimate`` can
    also be called inside ``jax.jit`` (with a traced key) as long as ``dtype`` matches JAX's
    global x64 setting.

    Args:
      sample_fn: pure function ``key -> pytree of arrays`` drawing ONE sample (jit-able); leaf
        shapes are arbitrary (scalars, vectors, ...), the mean is elementwise.
      key: ONE PRNG key (``jax.random.key`` or legacy ``PRNGKey``).
      n_samples: S, number of samples, 2 <= S < 2**31. Any value is handled exactly: the
        surplus draws of the last chunk are masked out (computed, never counted).
      chunk: samples per vmapped chunk (memory ~ chunk x sample size). With a mesh it must be a
        multiple of the number of devices. Clipped to ``n_samples`` (rounded up to a multiple of
        the device count) when larger.
      mesh: optional 1-D mesh with axis ``"data"`` (``geomjax.base.parallel.data_mesh``).
      dtype: accumulation dtype, "float32" or "float64" (float64 is enabled locally for the
        whole computation, so ``sample_fn`` also draws in float64 by default; the draws then
        differ from a float32 run with the same key). Default: float64 if the samples are
        float64, else float32. Float64 samples with dtype="float32" raise.
      start: index of the first sample (default 0): ``estimate(f, key, n, start=m)`` draws the samples
        m … m + n − 1, so consecutive calls extend one sample (the claims' sequential rounds) and their
        :func:`merge` equals one call over the union; the compiled driver does not depend on it.

    Returns:
      :class:`Estimate` with ``n = n_samples``; ``.dtype`` records the dtype used.

    Raises:
      ValueError: n_samples not an integer, < 2 or too large, chunk < 1, chunk not a multiple
        of the device count, a mesh without a "data" axis, unknown dtype, float64 samples with
        dtype="float32", or dtype="float64" inside ``jit`` while JAX x64 is off.
      TypeError: ``key`` is not a single PRNG key.
    """
    check_prng_key(key, "estimate")
    n_samples = check_int(n_samples, "n_samples", "estimate", minimum=2)  # 2: a standard error
    chunk = check_int(chunk, "chunk", "estimate")
    n_dev = 1
    if mesh is not None:
        if not isinstance(mesh, Mesh) or AXIS not in mesh.shape:
            raise GeomjaxError(
                f"estimate: `mesh` must be a jax Mesh with a {AXIS!r} axis "
                f"(geomjax.base.parallel.data_mesh()), got {mesh!r}"
            )
        n_dev = int(mesh.shape[AXIS])
        if chunk % n_dev:
            raise GeomjaxError(
                f"estimate: chunk={chunk} is not a multiple of the {n_dev} devices of the "
                f"{AXIS!r} mesh; use a multiple of {n_dev} (e.g. {math.ceil(chunk / n_dev) * n_dev})"
            )
    if chunk > n_samples:
        chunk = math.ceil(n_samples / n_dev) * n_dev
    start = check_int(start, "start", "estimate", minimum=0)
    if start + math.ceil(n_samples / chunk) * chunk >= 2**31:
        raise GeomjaxError(
            f"estimate: n_samples={n_samples} with chunk={chunk} needs sample indices >= 2**31 "
            "(int32); use fewer samples per call and merge the estimates"
        )
    if dtype is not None and dtype not in _DTYPES:
        raise GeomjaxError(f"estimate: dtype must be one of {_DTYPES} or None, got {dtype!r}")
    tracing = isinstance(key, jax.core.Tracer)
    if tracing and dtype == "float64" and not jax.config.jax_enable_x64:
        raise GeomjaxError(
            "estimate: dtype='float64' inside jit needs JAX x64 enabled globally "
            "(jax.config.update('jax_enable_x64', True)); or call estimate outside jit"
        )

    with x64_context(dtype or "float32"):
        probe = jax.eval_shape(sample_fn, jax.random.fold_in(key, 0))
    leaves = jax.tree_util.tree_leaves(probe)
    if not leaves:
        raise GeomjaxError("estimate: sample_fn returned no array leaves")
    bad = [l.dtype for l in leaves if not (jnp.issubdtype(l.dtype, jnp.floating) or jnp.issubdtype(l.dtype, jnp.integer) or l.dtype == bool)]
    if bad:
        raise GeomjaxTypeError(f"estimate: sample_fn must return real (float/int/bool) arrays, got dtypes {bad}")
    inferred = _leaf_dtype_name(leaves)
    if dtype is None:
        dtype = inferred
    elif inferred == "float64" and dtype == "float32":
        raise GeomjaxError(
            "estimate: sample_fn returns float64 but dtype='float32' would truncate it; "
            "pass dtype='float64' (or return float32)"
        )

    with x64_context(dtype):
        n, mean, m2 = _driver(sample_fn, n_samples, chunk, mesh, dtype)(key, jnp.int32(start))
    return Estimate(mean=mean, m2=m2, n=n, dtype=dtype)
