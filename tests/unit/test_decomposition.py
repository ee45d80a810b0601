"""Decomposition (Song & Zhong eqs. (2)-(3)): planted data, streaming == in-memory, sharding.

References are plain NumPy float64 computations from the definitions.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import geomjax as gj
from geomjax import decomposition as dec
from geomjax.base.parallel import data_mesh
from tests.unit.test_shapes import unchecked_shapes
from tests._marks import slow_beyond_first


def numpy_reference(h):
    """Eqs. (2)-(3) and the two second moments in float64 NumPy."""
    h = np.asarray(h, np.float64)
    C, T, d = h.shape
    mu = h.mean((0, 1))
    pos = h.mean(0) - mu
    ctx = h.mean(1) - mu
    resid = h - mu - pos[None] - ctx[:, None]
    cen = (h - mu).reshape(-1, d)
    r = resid.reshape(-1, d)
    return dict(mean=mu, pos=pos, ctx=ctx, resid=resid, centered=cen.T @ cen, resid2=r.T @ r)


def planted(rng, C, T, d, offset=0.0, resid_scale=0.1):
    """h = mu + pos + ctx + resid with exactly centred parts (float64)."""
    mu = rng.normal(size=d) * offset if offset else rng.normal(size=d)
    pos = rng.normal(size=(T, d))
    pos -= pos.mean(0)
    ctx = rng.normal(size=(C, d))
    ctx -= ctx.mean(0)
    r = rng.normal(size=(C, T, d)) * resid_scale
    r = r - r.mean(0, keepdims=True) - r.mean(1, keepdims=True) + r.mean((0, 1), keepdims=True)
    h = mu + pos[None] + ctx[:, None] + r
    return h, (mu, pos, ctx, r)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def test_planted_recovery_float64():
    rng = np.random.default_rng(0)
    h, (mu, pos, ctx, r) = planted(rng, 12, 9, 5)
    with jax.enable_x64(True):
        dec = gj.decompose(jnp.asarray(h))
        assert dec.mean.dtype == jnp.float64
        np.testing.assert_allclose(dec.mean, mu, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.pos, pos, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.ctx, ctx, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.resid, r, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.cvec, ctx[:, None] + r, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dec.reconstruct(), h, rtol=1e-12, atol=1e-12)


def test_decompose_float32_large_mean_matches_numpy():
    rng = np.random.default_rng(1)
    h, _ = planted(rng, 32, 16, 8, offset=1000.0)
    h32 = h.astype(np.float32)
    ref = numpy_reference(h32)
    dec = gj.decompose(h32)
    assert dec.resid.dtype == jnp.float32
    # The parts are O(1) while |mean| ~ 1e3: f32 accuracy relative to the parts.
    assert rel(dec.pos, ref["pos"]) < 1e-5
    assert rel(dec.ctx, ref["ctx"]) < 1e-5
    assert rel(dec.resid, ref["resid"]) < 1e-4  # resid ~ 0.1: 1e-4 of its max is ~1 ulp of 1.0


def test_drop_first():
    rng = np.random.default_rng(2)
    h = rng.normal(size=(5, 7, 3)).astype(np.float32)
    dec = gj.decompose(h, drop_first=True)
    ref = numpy_reference(h[:, 1:])
    assert dec.pos.shape == (6, 3)
    np.testing.assert_allclose(dec.pos, ref["pos"], rtol=1e-5, atol=1e-6)


def test_jit_equals_eager():
    rng = np.random.default_rng(3)
    h = jnp.asarray(rng.normal(size=(6, 5, 4)), jnp.float32)
    eager = gj.decompose(h)
    jitted = jax.jit(gj.decompose, static_argnames="drop_first")(h)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    with jax.disable_jit():
        nojit = gj.decompose(h)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(nojit)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def chunks(h, sizes):
    out, i = [], 0
    for s in sizes:
        out.append(h[i : i + s])
        i += s
    assert i == h.shape[0]
    return out


@pytest.mark.parametrize("accum", ["float32", "float64"])
@pytest.mark.parametrize("offset", [0.0, 1000.0])
def test_stream_equals_in_memory(accum, offset):
    rng = np.random.default_rng(4)
    C, T, d = 40, 12, 6
    h, _ = planted(rng, C, T, d, offset=offset)
    h32 = h.astype(np.float32)
    ref = numpy_reference(h32)
    sizes = [7, 1, 13, 19]  # uneven chunking, including a single-context batch
    st = gj.decompose_stream(chunks(h32, sizes), accum_dtype=accum)
    assert st.accum_dtype == accum
    assert st.n_contexts == C and st.n_positions == T
    tol = 1e-10 if accum == "float64" else 2e-6
    assert rel(st.mean, ref["mean"]) < (1e-12 if accum == "float64" else 1e-6)
    assert rel(st.pos, ref["pos"]) < tol
    assert rel(st.ctx, ref["ctx"]) < tol
    assert rel(st.centered_second_moment, ref["centered"]) < tol
    assert rel(st.resid_second_moment, ref["resid2"]) < tol


def test_stream_float64_input():
    rng = np.random.default_rng(5)
    h, _ = planted(rng, 10, 6, 4, offset=1e4, resid_scale=1e-3)
    ref = numpy_reference(h)
    with jax.enable_x64(True):
        st = gj.decompose_stream(chunks(jnp.asarray(h), [3, 3, 4]), accum_dtype="float64")
    assert rel(st.resid_second_moment, ref["resid2"]) < 1e-9
    assert rel(st.centered_second_moment, ref["centered"]) < 1e-10


def test_stream_drop_first_and_anova_identity():
    rng = np.random.default_rng(6)
    h = rng.normal(size=(9, 8, 5)).astype(np.float32) + 3.0
    st = gj.decompose_stream(chunks(h, [4, 5]), drop_first=True, accum_dtype="float64")
    ref = numpy_reference(h[:, 1:])
    assert rel(st.pos, ref["pos"]) < 1e-10
    # Two-way ANOVA: centred = C sum pos pos^T + T sum ctx ctx^T + sum resid resid^T.
    total = st.pos_second_moment + st.ctx_second_moment + st.resid_second_moment
    assert rel(total, st.centered_second_moment) < 1e-10


@pytest.mark.parametrize("n_dev", slow_beyond_first([8, 1, 2, 4]))
def test_sharded_equals_single_device(n_dev):
    rng = np.random.default_rng(7)
    C, T, d = 32, 10, 6
    h, _ = planted(rng, C, T, d, offset=100.0)
    h32 = h.astype(np.float32)
    single = gj.decompose_stream(chunks(h32, [8, 8, 16]))
    sharded = gj.decompose_sharded(h32, data_mesh(n_dev), batch_size=8)
    for name in ("mean", "pos", "ctx", "centered_second_moment", "resid_second_moment"):
        a, b = getattr(sharded, name), getattr(single, name)
        assert rel(a, b) < 1e-6, name
    assert sharded.n_contexts == C


def test_sharded_float64_identical():
    rng = np.random.default_rng(8)
    h = rng.normal(size=(16, 6, 4)).astype(np.float32)
    a = gj.decompose_stream(chunks(h, [8, 8]), accum_dtype="float64")
    b = gj.decompose_sharded(h, data_mesh(4), batch_size=8, accum_dtype="float64")
    np.testing.assert_allclose(b.resid_second_moment, a.resid_second_moment, rtol=1e-12)
    np.testing.assert_allclose(b.ctx, a.ctx, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    C=st.integers(2, 6),
    T=st.integers(2, 6),
    d=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
)
def test_property_invariants(C, T, d, seed, scale):
    """sum_t pos = 0, sum_c ctx = 0, sum_t resid = 0, sum_c resid = 0 (Song & Zhong eq. 3)."""
    h = np.random.default_rng(seed).normal(size=(C, T, d)) * scale + scale
    with jax.enable_x64(True):
        dec = gj.decompose(jnp.asarray(h))
        tol = 1e-11 * scale * max(C, T)
        np.testing.assert_allclose(dec.pos.sum(0), 0, atol=tol)
        np.testing.assert_allclose(dec.ctx.sum(0), 0, atol=tol)
        np.testing.assert_allclose(dec.resid.sum(1), 0, atol=tol)
        np.testing.assert_allclose(dec.resid.sum(0), 0, atol=tol)
        np.testing.assert_allclose(dec.reconstruct(), h, rtol=1e-12, atol=tol)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n_chunks=st.integers(1, 5))
def test_property_stream_any_chunking(seed, n_chunks):
    rng = np.random.default_rng(seed)
    C = 12
    h = rng.normal(size=(C, 4, 3)) * 10 + 50
    cuts = np.sort(rng.choice(np.arange(1, C), size=n_chunks - 1, replace=False))
    sizes = np.diff(np.concatenate([[0], cuts, [C]])).tolist()
    ref = numpy_reference(h)
    with jax.enable_x64(True):
        st_ = gj.decompose_stream(chunks(jnp.asarray(h), sizes), accum_dtype="float64")
    assert rel(st_.resid_second_moment, ref["resid2"]) < 1e-9
    assert rel(st_.ctx, ref["ctx"]) < 1e-10


# ------------------------------------------------------------------------------ bad input


@unchecked_shapes()
def test_bad_rank():
    with pytest.raises(ValueError, match=r"shape \(C, T, d\)"):
        gj.decompose(np.zeros((3, 4), np.float32))


def test_too_few_contexts_and_positions():
    with pytest.raises(ValueError, match="C >= 2"):
        gj.decompose(np.zeros((1, 4, 2), np.float32))
    with pytest.raises(ValueError, match="at least 2 positions"):
        gj.decompose(np.zeros((3, 2, 2), np.float32), drop_first=True)


def test_nan_rejected():
    h = np.ones((3, 4, 2), np.float32)
    h[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN/Inf"):
        gj.decompose(h)
    with pytest.raises(ValueError, match="batch 1 contains NaN"):
        gj.decompose_stream([np.ones((2, 4, 2), np.float32), h[:2]])


def test_float64_without_x64_is_computed_in_float64_not_cast():
    """The dtype rule (geomjax.base._checks): float64 / list input switches float64 on locally."""
    h = np.random.default_rng(0).normal(size=(3, 4, 2)) * 1e-9 + 1.0  # float32 would lose it
    dec = gj.decompose(h)
    assert dec.pos.dtype == np.float64
    np.testing.assert_allclose(dec.pos, h.mean(0) - h.mean((0, 1)), rtol=0, atol=1e-14)  # float32 would err by ~1e-7
    assert gj.decompose(h.tolist()).pos.dtype == np.float64
    st = gj.decompose_stream([h], accum_dtype="float64")
    np.testing.assert_allclose(st.pos, dec.pos, rtol=0, atol=1e-14)  # float32 would err by ~1e-7
    with pytest.raises(TypeError, match="float64"):  # a float64 batch after a float32 stream began
        gj.decompose_stream([h.astype(np.float32), h])


@unchecked_shapes()
def test_integer_input_rejected():
    with pytest.raises(TypeError, match="floating point"):
        gj.decompose(np.zeros((3, 4, 2), np.int32))


def test_stream_errors():
    with pytest.raises(ValueError, match="empty"):
        gj.decompose_stream([])
    with pytest.raises(ValueError, match=r"same positions and width"):
        gj.decompose_stream([np.ones((2, 4, 2), np.float32), np.ones((2, 5, 2), np.float32)])
    with pytest.raises(ValueError, match="at least 2 contexts"):
        gj.decompose_stream([np.ones((1, 4, 2), np.float32)])
    with pytest.raises(ValueError, match="not divisible"):
        gj.decompose_stream([np.ones((3, 4, 2), np.float32)], mesh=data_mesh(2))
    with pytest.raises(ValueError, match="accum_dtype"):
        gj.decompose_stream([np.ones((3, 4, 2), np.float32)], accum_dtype="float16")


# ------------------------------------------------------------------------------ the accumulator


class TestStreamAccumulator(chex.TestCase):
    """stream_init / stream_update / stream_merge / stream_finalize, the one streaming engine, with
    and without jit (chex variants); two streams merged equal one stream and the NumPy reference."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_merge_of_two_streams_equals_one_stream(self):
        rng = np.random.default_rng(3)
        h = (rng.normal(size=(12, 6, 5)) + 30.0).astype(np.float32)
        ref = numpy_reference(h)
        init = self.variant(lambda b: dec.stream_init(b, "float32"))
        update = self.variant(dec.stream_update)
        merge = self.variant(dec.stream_merge)
        s0 = init(jnp.asarray(h[:4]))
        one, ctx_one = s0, []
        for i in range(0, 12, 4):
            one, m, finite = update(one, jnp.asarray(h[i:i + 4]))
            ctx_one.append(m)
            assert bool(finite)
        a, ma, _ = update(s0, jnp.asarray(h[:8]))  # same shifts, different split
        b, mb, _ = update(s0, jnp.asarray(h[8:]))
        both = merge(a, b)
        chex.assert_trees_all_close(both, one, rtol=2e-6, atol=2e-4)
        st1 = dec.stream_finalize(one, jnp.concatenate(ctx_one), 6, "float32")
        st2 = dec.stream_finalize(both, jnp.concatenate([ma, mb]), 6, "float32")
        chex.assert_trees_all_close(st1, st2, rtol=2e-6, atol=2e-4)
        assert st1.n_contexts == 12 and st2.n_contexts == 12
        assert rel(st2.pos, ref["pos"]) < 1e-5 and rel(st2.resid_second_moment, ref["resid2"]) < 1e-4
        assert rel(st2.centered_second_moment, ref["centered"]) < 1e-5
