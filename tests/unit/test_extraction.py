"""Fused extraction + streaming decomposition equals materialising every layer in NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.tools.extraction import decompose_model_stream
from geomjax.base.parallel import data_mesh
from tests.unit.test_decomposition import numpy_reference, rel
from tests.unit.test_shapes import unchecked_shapes
from tests._marks import slow_beyond_first


def make_forward():
    """A 2-block toy 'model': embeddings + positions, then two nonlinear residual blocks."""
    V, T, d = 50, 9, 6
    k = jax.random.split(jax.random.key(0), 4)
    params = {
        "emb": jax.random.normal(k[0], (V, d)),
        "pos": jax.random.normal(k[1], (T, d)) + 20.0,  # a large mean, as GPT-2 has
        "w1": jax.random.normal(k[2], (d, d)) / np.sqrt(d),
        "w2": jax.random.normal(k[3], (d, d)) / np.sqrt(d),
    }

    def forward(p, ids):
        h0 = p["emb"][ids] + p["pos"][None, : ids.shape[1], :]
        h1 = h0 + jnp.tanh(h0 @ p["w1"])
        h2 = h1 + jnp.tanh(jnp.cumsum(h1, axis=1) @ p["w2"])  # causal mixing over positions
        return (h0, h1, h2)

    return forward, params, V, T


def windows(V, T, C, seed=0):
    return np.random.default_rng(seed).integers(0, V, size=(C, T)).astype(np.int32)


@pytest.mark.parametrize("drop_first", slow_beyond_first([False, True]))
def test_matches_materialised(drop_first):
    forward, params, V, T = make_forward()
    ids = windows(V, T, 24)
    stats = decompose_model_stream(
        forward, params, (ids[i : i + 8] for i in range(0, 24, 8)), drop_first=drop_first
    )
    hs = [np.asarray(h, np.float64) for h in forward(params, jnp.asarray(ids))]
    assert len(stats) == 3
    for st, h in zip(stats, hs):
        ref = numpy_reference(h[:, 1:] if drop_first else h)
        assert st.n_contexts == 24 and st.n_positions == T - int(drop_first)
        assert rel(st.pos, ref["pos"]) < 1e-5
        assert rel(st.ctx, ref["ctx"]) < 1e-5
        assert rel(st.centered_second_moment, ref["centered"]) < 1e-5
        assert rel(st.resid_second_moment, ref["resid2"]) < 1e-5


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_sharded_equals_single():
    forward, params, V, T = make_forward()
    ids = windows(V, T, 32, seed=1)
    batches = lambda: (ids[i : i + 16] for i in range(0, 32, 16))  # noqa: E731
    single = decompose_model_stream(forward, params, batches(), accum_dtype="float64")
    sharded = decompose_model_stream(forward, params, batches(), accum_dtype="float64",
                                     mesh=data_mesh(4))
    for a, b in zip(single, sharded):
        # Shifts differ only by rounding of a mean of means; the statistics are exact.
        assert rel(b.resid_second_moment, a.resid_second_moment) < 1e-6
        assert rel(b.ctx, a.ctx) < 1e-6
        assert rel(b.pos, a.pos) < 1e-6


@unchecked_shapes()
def test_bad_input():
    forward, params, V, T = make_forward()
    with pytest.raises(ValueError, match="empty"):
        decompose_model_stream(forward, params, [])
    with pytest.raises(ValueError, match="integer token ids"):
        decompose_model_stream(forward, params, [np.zeros((2, T), np.float32)])
    with pytest.raises(ValueError, match="T=5"):
        decompose_model_stream(forward, params, [windows(V, T, 2), windows(V, 5, 2)])
    with pytest.raises(ValueError, match="not divisible"):
        decompose_model_stream(forward, params, [windows(V, T, 3)], mesh=data_mesh(2))
