"""geomjax.theory.montecarlo: exact Chan/Welford merges and the chunked, sharded Monte Carlo driver.

References are independent: NumPy one-pass statistics (mean, var ddof=1, sem) of the same
samples, and closed forms (E[x²] = 1 for x ~ N(0, 1), E[U] = 1/2, Var U = 1/12, E[zzᵀ] = I).
Monte Carlo agreement uses the project rule |estimate − prediction| ≤ 5·sem with fixed seeds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from geomjax import montecarlo as mc
from geomjax.base.parallel import data_mesh
from tests.unit.test_shapes import unchecked_shapes
from tests._marks import slow_beyond_first

RTOL64 = 1e-10
RTOL32 = 1e-5


def np_stats(x: np.ndarray) -> dict:
    """One-pass reference statistics over the leading axis, float64 NumPy."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    var = x.var(axis=0, ddof=1)
    return {"mean": x.mean(axis=0), "var": var, "sem": np.sqrt(var / n), "n": n}


def assert_matches(est: mc.Estimate, samples, rtol: float):
    """Every leaf of ``est`` equals the NumPy statistics of the matching leaf of ``samples``."""
    leaves_s, tree_s = jax.tree_util.tree_flatten(samples)
    assert jax.tree_util.tree_structure(est.mean) == tree_s
    for m, v, s, x in zip(
        jax.tree_util.tree_leaves(est.mean),
        jax.tree_util.tree_leaves(est.var),
        jax.tree_util.tree_leaves(est.sem),
        leaves_s,
    ):
        ref = np_stats(x)
        assert int(est.n) == ref["n"]
        np.testing.assert_allclose(np.asarray(m), ref["mean"], rtol=rtol, atol=rtol * np.abs(x).max())
        np.testing.assert_allclose(np.asarray(v), ref["var"], rtol=rtol * 10)
        np.testing.assert_allclose(np.asarray(s), ref["sem"], rtol=rtol * 10)


def random_tree(rng, S: int, offset: float = 0.0) -> dict:
    """A pytree of float64 samples with scalar, vector and matrix leaves (leading axis S)."""
    return {
        "scalar": offset + rng.standard_normal(S),
        "vec": rng.standard_normal((S, 3)) * np.array([1.0, 10.0, 0.1]),
        "pair": (rng.uniform(size=(S, 2, 2)), rng.exponential(size=(S,))),
    }


def take(tree, sl):
    return jax.tree_util.tree_map(lambda x: x[sl], tree)


def random_split(rng, S: int, n_parts: int) -> list[int]:
    """Sorted cut points giving n_parts non-empty pieces of range(S)."""
    cuts = np.sort(rng.choice(np.arange(1, S), size=n_parts - 1, replace=False))
    return [0, *cuts.tolist(), S]


# ----------------------------------------------------------------------------------------------
# Estimate: from_samples and exact merges
# ----------------------------------------------------------------------------------------------


def test_from_samples_matches_numpy_float64():
    rng = np.random.default_rng(0)
    x = random_tree(rng, 257, offset=1e3)  # large offset: two-pass statistics stay exact
    est = mc.from_samples(x)
    assert est.dtype == "float64"
    assert all(np.asarray(l).dtype == np.float64 for l in jax.tree_util.tree_leaves(est.mean))
    assert_matches(est, x, RTOL64)


def test_from_samples_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((500, 4)).astype(np.float32)
    est = mc.from_samples(x)
    assert est.dtype == "float32" and np.asarray(est.mean).dtype == np.float32
    assert_matches(est, x, RTOL32)


@pytest.mark.parametrize("n_parts", [2, 3, 7, 40])
@pytest.mark.parametrize("seed", [0, 1])
def test_merge_of_random_split_equals_one_pass(n_parts, seed):
    rng = np.random.default_rng(100 + seed)
    S = 203
    x = random_tree(rng, S, offset=50.0)
    cuts = random_split(rng, S, n_parts)
    parts = [mc.from_samples(take(x, slice(a, b))) for a, b in zip(cuts[:-1], cuts[1:])]
    merged = mc.merge_all(parts)
    assert_matches(merged, x, RTOL64)
    # a single-sample piece (n = 1, m2 = 0) merges exactly too
    one = mc.merge(mc.from_samples(take(x, slice(0, 1))), mc.from_samples(take(x, slice(1, S))))
    assert_matches(one, x, RTOL64)


def test_merge_method_and_mixed_dtypes():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 2))
    b = rng.standard_normal((25, 2)) + 3.0
    ea32 = mc.from_samples(a.astype(np.float32))
    eb64 = mc.from_samples(b)
    m = ea32.merge(eb64)
    assert m.dtype == "float64"  # never silently demoted
    assert np.asarray(m.mean).dtype == np.float64
    # the float32 part's own statistics carry float32 rounding (~1e-7); the merge adds none
    ref = np_stats(np.concatenate([a.astype(np.float32).astype(np.float64), b]))
    np.testing.assert_allclose(np.asarray(m.mean), ref["mean"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m.sem), ref["sem"], rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=3, max_size=3),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    shift=st.sampled_from([0.0, 1.0, -1e4]),
)
def test_merge_is_associative(sizes, seed, scale, shift):
    """merge(merge(a, b), c) == merge(a, merge(b, c)) == one pass over the concatenation."""
    rng = np.random.default_rng(seed)
    xs = [shift + scale * rng.standard_normal((s, 2)) for s in sizes]
    a, b, c = (mc.from_samples(x) for x in xs)
    left = mc.merge(mc.merge(a, b), c)
    right = mc.merge(a, mc.merge(b, c))
    ref = np_stats(np.concatenate(xs))
    # Chan's merge needs the mean difference delta (~scale) from means of size ~|shift|: its
    # float64 rounding eps*|shift| enters m2 relatively as ~eps*|shift|/scale (the problem's
    # condition number), so m2 is compared at rtol 1e-9 plus that conditioning term.
    m2_rtol = 1e-9 + 1e-14 * abs(shift) / scale
    for e in (left, right):
        assert int(e.n) == sum(sizes)
        np.testing.assert_allclose(np.asarray(e.mean), ref["mean"], rtol=1e-12, atol=1e-12 * scale)
        m2_ref = ref["var"] * (ref["n"] - 1) if ref["n"] > 1 else np.zeros(2)
        np.testing.assert_allclose(np.asarray(e.m2), m2_ref, rtol=m2_rtol, atol=1e-9 * scale**2)
    np.testing.assert_allclose(np.asarray(left.mean), np.asarray(right.mean), rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(np.asarray(left.m2), np.asarray(right.m2), rtol=m2_rtol, atol=1e-9 * scale**2)


def test_single_sample_has_nan_variance_and_z_score():
    e = mc.from_samples(np.array([2.0]))
    assert int(e.n) == 1 and float(e.mean) == 2.0
    assert math.isnan(float(e.var)) and math.isnan(float(e.sem))
    x = np.array([1.0, 2.0, 4.0, 7.0])
    e = mc.from_samples(x)
    ref = np_stats(x)
    np.testing.assert_allclose(float(e.z_score(3.0)), (ref["mean"] - 3.0) / ref["sem"], rtol=1e-12)
    d = e.as_numpy()
    assert d["n"] == 4 and d["dtype"] == "float64"
    np.testing.assert_allclose(d["std"], np.sqrt(ref["var"]), rtol=1e-12)


@unchecked_shapes()
def test_from_samples_and_merge_errors():
    with pytest.raises(ValueError, match="no array leaves"):
        mc.from_samples({})
    with pytest.raises(ValueError, match="S = 0"):
        mc.from_samples(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="same leading sample axis"):
        mc.from_samples({"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(ValueError, match="same leading sample axis"):
        mc.from_samples({"a": np.zeros(3), "b": np.float64(1.0)})
    with pytest.raises(ValueError, match="dtype"):
        mc.from_samples(np.zeros(3), dtype="float16")
    with pytest.raises(ValueError, match="lose precision"):
        mc.from_samples(np.zeros(3), dtype="float32")
    with pytest.raises(TypeError, match="real"):
        mc.from_samples(np.zeros(3, np.complex128))
    with pytest.raises(ValueError, match="got no estimates"):
        mc.merge_all([])
    a = mc.from_samples(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="leaf shapes differ"):
        mc.merge(a, mc.from_samples(np.zeros((3, 3))))
    with pytest.raises(ValueError, match="pytree structures"):
        mc.merge(a, mc.from_samples({"x": np.zeros((3, 2))}))


# ----------------------------------------------------------------------------------------------
# estimate(): closed forms, exact bookkeeping, chunking, sharding, jit/eager, errors
# ----------------------------------------------------------------------------------------------


def normal_sq(key):
    return jax.random.normal(key, ()) ** 2


def uniform(key):
    return jax.random.uniform(key, ())


def vector_and_outer(key):
    z = jax.random.normal(key, (3,))
    return {"z": z, "zz": jnp.outer(z, z)}


def all_samples(sample_fn, key, n):
    """The samples estimate() promises to use: sample_fn(fold_in(key, i)), i = 0..n-1."""
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(n, dtype=jnp.int32))
    return jax.tree_util.tree_map(np.asarray, jax.vmap(sample_fn)(keys))


def test_closed_form_normal_square():
    n = 2**14
    e = mc.estimate(normal_sq, jax.random.key(0), n, chunk=4096)
    assert int(e.n) == n and e.dtype == "float32"
    mean, sem = float(e.mean), float(e.sem)
    assert abs(mean - 1.0) <= 5 * sem  # E[x²] = 1
    # sem ≈ σ/√n with σ = √Var(x²) = √2; the sample std of x² has relative sd ≈ 0.02 at this n
    np.testing.assert_allclose(sem, math.sqrt(2.0 / n), rtol=0.1)


def test_closed_form_uniform_float64():
    n = 10_000
    e = mc.estimate(uniform, jax.random.key(1), n, chunk=1024, dtype="float64")
    assert e.dtype == "float64" and np.asarray(e.mean).dtype == np.float64
    assert abs(float(e.mean) - 0.5) <= 5 * float(e.sem)  # E[U] = 1/2
    np.testing.assert_allclose(float(e.sem), math.sqrt(1 / 12 / n), rtol=0.03)  # Var U = 1/12
    np.testing.assert_allclose(float(e.var), 1 / 12, rtol=0.03)


def test_closed_form_pytree_vector_leaves():
    n = 8192
    e = mc.estimate(vector_and_outer, jax.random.key(2), n, chunk=1000)
    z, zz = np.asarray(e.mean["z"]), np.asarray(e.mean["zz"])
    sz, szz = np.asarray(e.sem["z"]), np.asarray(e.sem["zz"])
    assert z.shape == (3,) and zz.shape == (3, 3)
    assert np.all(np.abs(z - 0.0) <= 5 * sz)  # E z = 0
    assert np.all(np.abs(zz - np.eye(3)) <= 5 * szz)  # E zzᵀ = I
    # Var(z_i z_j) = 2 on the diagonal, 1 off it
    np.testing.assert_allclose(szz, np.sqrt((1.0 + np.eye(3)) / n), rtol=0.1)


@pytest.mark.parametrize("n, chunk", [(1000, 96), (257, 4096), (2, 1)])
def test_estimate_equals_numpy_on_the_same_samples(n, chunk):
    """Masked last chunk, clipping and merging: exactly the statistics of samples 0..n-1."""
    key = jax.random.key(7)
    e = mc.estimate(vector_and_outer, key, n, chunk=chunk, dtype="float64")
    with jax.enable_x64(True):  # estimate(dtype="float64") draws in float64
        x = all_samples(vector_and_outer, key, n)
    assert_matches(e, x, RTOL64)


def test_estimate_float32_equals_numpy_on_the_same_samples():
    key = jax.random.key(8)
    e = mc.estimate(normal_sq, key, 3001, chunk=512)
    x = all_samples(normal_sq, key, 3001)
    assert_matches(e, x, 1e-5)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_chunk_size_independence():
    """Sample i always uses fold_in(key, i): every chunking sees the same samples."""
    key = jax.random.key(11)
    ests = [mc.estimate(vector_and_outer, key, 1500, chunk=c, dtype="float64") for c in (7, 64, 1500, 4096)]
    for e in ests[1:]:
        assert int(e.n) == int(ests[0].n) == 1500
        for a, b in zip(jax.tree_util.tree_leaves((ests[0].mean, ests[0].m2)), jax.tree_util.tree_leaves((e.mean, e.m2))):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_dev", slow_beyond_first([8, 4]))
def test_sharded_equals_single_device(n_dev, n_devices):
    if n_devices < n_dev:
        pytest.skip(f"needs {n_dev} devices")
    mesh = data_mesh(n_dev)
    key = jax.random.key(5)
    n = 1001  # not a multiple of the chunk or of the device count
    single = mc.estimate(vector_and_outer, key, n, chunk=96, dtype="float64")
    sharded = mc.estimate(vector_and_outer, key, n, chunk=96, mesh=mesh, dtype="float64")
    assert int(sharded.n) == n
    for a, b in zip(jax.tree_util.tree_leaves((single.mean, single.m2)), jax.tree_util.tree_leaves((sharded.mean, sharded.m2))):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-12)
    # float32 sharded run against NumPy on the same samples
    e32 = mc.estimate(normal_sq, key, 999, chunk=64, mesh=mesh)
    assert_matches(e32, all_samples(normal_sq, key, 999), 1e-5)


@pytest.mark.slow
def test_jit_and_eager_agree():
    key = jax.random.key(21)
    ref = mc.estimate(uniform, key, 300, chunk=64)
    jitted = jax.jit(lambda k: mc.estimate(uniform, k, 300, chunk=64))(key)
    assert isinstance(jitted, mc.Estimate) and int(jitted.n) == 300
    np.testing.assert_allclose(float(jitted.mean), float(ref.mean), rtol=1e-6)
    np.testing.assert_allclose(float(jitted.sem), float(ref.sem), rtol=1e-5)
    with jax.disable_jit():
        eager = mc.estimate(uniform, key, 300, chunk=64)
    np.testing.assert_allclose(float(eager.mean), float(ref.mean), rtol=1e-6)
    np.testing.assert_allclose(float(eager.sem), float(ref.sem), rtol=1e-5)
    x = all_samples(uniform, key, 300)
    np.testing.assert_allclose(float(ref.mean), x.mean(), rtol=1e-6)


def test_legacy_key_gives_the_same_samples():
    a = mc.estimate(normal_sq, jax.random.key(3), 100, chunk=32)
    b = mc.estimate(normal_sq, jax.random.PRNGKey(3), 100, chunk=32)
    np.testing.assert_allclose(float(b.mean), float(a.mean), rtol=1e-6)
    assert int(b.n) == 100


def test_different_keys_give_different_samples():
    a = mc.estimate(normal_sq, jax.random.key(0), 64)
    b = mc.estimate(normal_sq, jax.random.key(1), 64)
    assert float(a.mean) != float(b.mean)


@unchecked_shapes()
def test_estimate_bad_input():
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="PRNG key"):
        mc.estimate(uniform, 0, 10)
    with pytest.raises(TypeError, match="PRNG key"):
        mc.estimate(uniform, np.zeros(2, np.float32), 10)
    with pytest.raises(ValueError, match="single PRNG key"):
        mc.estimate(uniform, jax.random.split(key, 3), 10)
    for bad_n in (1, 0, -5):
        with pytest.raises(ValueError, match=">= 2"):
            mc.estimate(uniform, key, bad_n)
    for bad_n in (2.5, True, "10"):
        with pytest.raises(ValueError, match="integer"):
            mc.estimate(uniform, key, bad_n)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        mc.estimate(uniform, key, 2**31)
    for bad_chunk in (0, -1, 1.5):
        with pytest.raises(ValueError, match="chunk"):
            mc.estimate(uniform, key, 10, chunk=bad_chunk)
    with pytest.raises(ValueError, match="dtype"):
        mc.estimate(uniform, key, 10, dtype="float16")
    mesh = data_mesh(4)
    with pytest.raises(ValueError, match="multiple of 4"):
        mc.estimate(uniform, key, 100, chunk=30, mesh=mesh)
    other = jax.make_mesh((2,), ("model",), devices=jax.devices()[:2])
    with pytest.raises(ValueError, match="'data' axis"):
        mc.estimate(uniform, key, 100, chunk=30, mesh=other)
    with pytest.raises(TypeError, match="real"):
        mc.estimate(lambda k: jax.random.normal(k, (), jnp.complex64), key, 10)
    with pytest.raises(ValueError, match="no array leaves"):
        mc.estimate(lambda k: {}, key, 10)
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match="truncate"):
            mc.estimate(lambda k: jax.random.normal(k, (), jnp.float64), key, 10, dtype="float32")
    if not jax.config.jax_enable_x64:
        with pytest.raises(ValueError, match="inside jit"):
            jax.jit(lambda k: mc.estimate(uniform, k, 10, dtype="float64").mean)(key)
