"""geomjax.theory.geometry against brute-force NumPy references and planted cases.

Tolerances: float64 rtol 1e-10, float32 rtol 1e-5 (absolute 1e-6 where the true value is ~0).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from geomjax import geometry
from tests.unit.test_shapes import unchecked_shapes

RTOL64 = 1e-10
RTOL32 = 1e-5
DTYPES = [(np.float64, RTOL64), (np.float32, RTOL32)]


def _unit(X: np.ndarray) -> np.ndarray:
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _pos_ctx(seed: int, T: int, C: int, d: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, d)), rng.standard_normal((C, d))


# ----------------------------------------------------------------------------------------------
# Normalized Gram and incoherence
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,rtol", DTYPES)
def test_normalized_gram(dtype, rtol):
    pos, ctx = _pos_ctx(0, 9, 7, 5)
    X = np.concatenate([pos, ctx])
    G_ref = _unit(X) @ _unit(X).T
    G = geometry.normalized_gram(X.astype(dtype))
    assert G.dtype == dtype and G.shape == (16, 16)
    np.testing.assert_allclose(np.asarray(G), G_ref, rtol=rtol, atol=rtol)
    Xh = geometry.normalize_rows(X.astype(dtype))
    np.testing.assert_allclose(np.asarray(Xh), _unit(X), rtol=rtol)


@pytest.mark.parametrize("dtype,rtol", DTYPES)
@pytest.mark.parametrize("chunk_size", [1024, 7, 1])
def test_incoherence_vs_bruteforce(dtype, rtol, chunk_size):
    pos, ctx = _pos_ctx(1, 13, 30, 6)  # C = 30 is not a multiple of 7: last chunk overlaps
    A = np.abs(_unit(pos) @ _unit(ctx).T)
    st = geometry.incoherence_stats(pos.astype(dtype), ctx.astype(dtype), chunk_size=chunk_size)
    assert st.max.dtype == dtype
    np.testing.assert_allclose(float(st.max), A.max(), rtol=rtol)
    np.testing.assert_allclose(float(st.mean), A.mean(), rtol=rtol)
    got = geometry.incoherence(pos.astype(dtype), ctx.astype(dtype), chunk_size=chunk_size)
    np.testing.assert_allclose(float(got), A.max(), rtol=rtol)


def test_incoherence_jit_and_vmap_over_layers():
    rng = np.random.default_rng(2)
    pos = rng.standard_normal((3, 11, 8)).astype(np.float32)  # 3 layers
    ctx = rng.standard_normal((3, 20, 8)).astype(np.float32)
    f = jax.jit(jax.vmap(lambda p, c: geometry.incoherence_stats(p, c, chunk_size=6)))
    st = f(pos, ctx)
    for layer in range(3):
        A = np.abs(_unit(pos[layer].astype(np.float64)) @ _unit(ctx[layer].astype(np.float64)).T)
        np.testing.assert_allclose(float(st.max[layer]), A.max(), rtol=RTOL32)
        np.testing.assert_allclose(float(st.mean[layer]), A.mean(), rtol=RTOL32)


@pytest.mark.parametrize("dtype,atol", [(np.float64, 1e-14), (np.float32, 1e-6)])
def test_incoherence_planted_orthogonal_subspaces(dtype, atol):
    """pos in span(Q[:, :4]) and ctx in span(Q[:, 4:]) with Q orthogonal: incoherence 0."""
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    pos = rng.standard_normal((15, 4)) @ Q[:, :4].T
    ctx = rng.standard_normal((25, 6)) @ Q[:, 4:].T
    st = geometry.incoherence_stats(pos.astype(dtype), ctx.astype(dtype), chunk_size=8)
    assert float(st.max) <= atol and float(st.mean) <= atol
    # Sanity: adding a shared direction makes it positive.
    ctx2 = ctx + 3.0 * Q[:, 0]
    assert float(geometry.incoherence(pos.astype(dtype), ctx2.astype(dtype))) > 0.1


# ----------------------------------------------------------------------------------------------
# Cluster similarity
# ----------------------------------------------------------------------------------------------


def _clustered(seed: int, sizes, d: int, spread: float = 0.7):
    rng = np.random.default_rng(seed)
    centers = 2.0 * rng.standard_normal((len(sizes), d))
    labels = np.concatenate([np.full(n, k) for k, n in enumerate(sizes)])
    X = centers[labels] + spread * rng.standard_normal((labels.size, d))
    perm = rng.permutation(labels.size)
    return X[perm], labels[perm]


def _similarity_double_loop(ctx: np.ndarray, labels: np.ndarray):
    c = _unit(ctx)
    intra, n_intra, inter, n_inter = 0.0, 0, 0.0, 0
    for i in range(len(c)):
        for j in range(len(c)):
            a = abs(float(np.dot(c[i], c[j])))
            if labels[i] == labels[j]:
                intra, n_intra = intra + a, n_intra + 1
            else:
                inter, n_inter = inter + a, n_inter + 1
    return intra / n_intra, inter / n_inter


@pytest.mark.parametrize("dtype,rtol", DTYPES)
def test_cluster_similarity_vs_double_loop(dtype, rtol):
    ctx, labels = _clustered(4, (5, 9, 3, 7), 6)
    labels = labels * 10 + 3  # arbitrary ids
    intra_ref, inter_ref = _similarity_double_loop(ctx, labels)
    intra, inter = geometry.cluster_similarity(ctx.astype(dtype), labels)
    np.testing.assert_allclose([float(intra), float(inter)], [intra_ref, inter_ref], rtol=rtol)
    assert float(intra) > float(inter)


def test_cluster_similarity_source_block_mask_and_pca_variant():
    """Contiguous blocks: equals the source's kron(eye, ones) mask; PCA variant: U_k S_k rows."""
    rng = np.random.default_rng(5)
    B, n_topics, d = 8, 4, 12
    centers = np.repeat(3 * rng.standard_normal((n_topics, d)), B, axis=0)
    ctx = rng.standard_normal((B * n_topics, d)) + centers
    labels = np.repeat(np.arange(n_topics), B)
    mask = np.kron(np.eye(n_topics), np.ones((B, B)))
    for k in (None, 5):
        if k is None:
            c = ctx
        else:
            u, s, _ = np.linalg.svd(ctx)
            c = u[:, :k] @ np.diag(s[:k])
        A = np.abs(_unit(c) @ _unit(c).T)
        within = np.sum(np.where(mask == 1, A, 0)) / np.sum(mask == 1)
        between = np.sum(np.where(mask == 0, A, 0)) / np.sum(mask == 0)
        intra, inter = geometry.cluster_similarity(ctx, labels, n_components=k)
        np.testing.assert_allclose([float(intra), float(inter)], [within, between], rtol=RTOL64)
    # jit with traced labels
    intra, inter = jax.jit(geometry.cluster_similarity)(ctx.astype(np.float32), labels)
    A = np.abs(_unit(ctx) @ _unit(ctx).T)
    np.testing.assert_allclose(float(intra), np.sum(A * mask) / mask.sum(), rtol=RTOL32)


# ----------------------------------------------------------------------------------------------
# Cluster compactness
# ----------------------------------------------------------------------------------------------


def _compactness_numpy(X: np.ndarray, labels: np.ndarray, rcond=None) -> float:
    N, d = X.shape
    m = X.mean(0)
    Sw = np.zeros((d, d))
    Sb = np.zeros((d, d))
    for k in np.unique(labels):
        Xk = X[labels == k]
        mk = Xk.mean(0)
        Sw += (Xk - mk).T @ (Xk - mk)
        Sb += len(Xk) * np.outer(mk - m, mk - m)
    Sw, Sb = Sw / N, Sb / N
    inv = np.linalg.inv(Sw) if rcond is None else np.linalg.pinv(Sw, rcond=rcond, hermitian=True)
    return float(np.trace(Sb @ inv))


@pytest.mark.parametrize("dtype,rtol", DTYPES)
def test_cluster_compactness_vs_numpy(dtype, rtol):
    X, labels = _clustered(6, (20, 15, 25), 5)
    ref = _compactness_numpy(X, labels)
    got = geometry.cluster_compactness(X.astype(dtype), labels)
    np.testing.assert_allclose(float(got), ref, rtol=rtol)
    # Relabelling and traced labels with num_classes under jit give the same value.
    relabelled = geometry.cluster_compactness(X, 7 - 2 * labels)
    np.testing.assert_allclose(float(relabelled), ref, rtol=RTOL64)
    f = jax.jit(lambda x, lab: geometry.cluster_compactness(x, lab, num_classes=3))
    np.testing.assert_allclose(float(f(X.astype(np.float32), labels)), ref, rtol=RTOL32)
    # Tighter clusters score higher.
    X2, labels2 = _clustered(6, (20, 15, 25), 5, spread=0.2)
    assert float(geometry.cluster_compactness(X2, labels2)) > float(got)


def test_cluster_compactness_singular_within_covariance():
    """d > N - K: Σ_W is singular; the pseudo-inverse result matches NumPy's pinv."""
    rng = np.random.default_rng(7)
    # 3 classes of 3 points in R^10 -> rank(Σ_W) <= 6 < 10. The data also lie in a 7-dim subspace.
    basis, _ = np.linalg.qr(rng.standard_normal((10, 7)))
    labels = np.repeat(np.arange(3), 3)
    Z = rng.standard_normal((9, 7)) + 2.0 * rng.standard_normal((3, 7))[labels]
    X = Z @ basis.T
    W = X - np.stack([X[labels == k].mean(0) for k in range(3)])[labels]
    assert np.linalg.matrix_rank(W.T @ W) == 6
    rtol_cut = 10 * 10 * np.finfo(np.float64).eps  # geomjax's documented default cut-off
    ref = _compactness_numpy(X, labels, rcond=rtol_cut)
    got = float(geometry.cluster_compactness(X, labels))
    assert np.isfinite(got)
    np.testing.assert_allclose(got, ref, rtol=1e-8)  # pinv of a rank-deficient matrix: 1e-8


# ----------------------------------------------------------------------------------------------
# PCA projections
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,rtol", DTYPES)
def test_pca_projections_vs_numpy_svd(dtype, rtol):
    rng = np.random.default_rng(8)
    P = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 9))
    P += 0.1 * rng.standard_normal((20, 9))
    cvec = rng.standard_normal((4, 20, 9))
    _, s, vt = np.linalg.svd(P, full_matrices=False)
    V = vt[:2] * np.sign(vt[:2][np.arange(2), np.argmax(np.abs(vt[:2]), axis=1)])[:, None]
    out = geometry.pca_projections(P.astype(dtype), [cvec.astype(dtype)], n_components=2)
    atol = rtol  # coordinates near 0 carry absolute, not relative, error
    np.testing.assert_allclose(np.asarray(out.components), V, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.asarray(out.singular_values), s[:2], rtol=rtol)
    np.testing.assert_allclose(np.asarray(out.pos), P @ V.T, rtol=rtol, atol=atol)
    assert out.others[0].shape == (4, 20, 2)
    np.testing.assert_allclose(np.asarray(out.others[0]), cvec @ V.T, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype,rtol", DTYPES)
def test_pca_projections_centered_is_principal_coordinates(dtype, rtol):
    """center=True: the principal coordinates of a point cloud (NumPy SVD of the centred rows)."""
    rng = np.random.default_rng(9)
    X = 5.0 + rng.standard_normal((30, 2)) @ rng.standard_normal((2, 6)) + 0.1 * rng.standard_normal((30, 6))
    Y = rng.standard_normal((3, 6))
    m = X.mean(0)
    _, s, vt = np.linalg.svd(X - m, full_matrices=False)
    V = vt[:2] * np.sign(vt[:2][np.arange(2), np.argmax(np.abs(vt[:2]), axis=1)])[:, None]
    out = geometry.pca_projections(X.astype(dtype), [Y.astype(dtype)], center=True)
    atol = 10 * rtol
    np.testing.assert_allclose(np.asarray(out.singular_values), s[:2], rtol=rtol)
    np.testing.assert_allclose(np.asarray(out.pos), (X - m) @ V.T, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.asarray(out.others[0]), (Y - m) @ V.T, rtol=rtol, atol=atol)


def test_mean_abs_cos_isotropic_against_quadrature():
    """E|cos| = ∫|x| (1 − x²)^((d−3)/2) dx / ∫(1 − x²)^((d−3)/2) dx (the density of cos(u, v) for
    isotropic u, v in R^d), by SciPy quadrature; d = 1 gives |cos| = 1."""
    from scipy import integrate

    assert geometry.mean_abs_cos_isotropic(1) == pytest.approx(1.0, rel=1e-14)
    for d in (2, 3, 10, 384):
        w = lambda x, d=d: (1 - x * x) ** ((d - 3) / 2)  # noqa: E731
        num = integrate.quad(lambda x: x * w(x), 0, 1, limit=200)[0]
        den = integrate.quad(w, 0, 1, limit=200)[0]
        assert geometry.mean_abs_cos_isotropic(d) == pytest.approx(num / den, rel=1e-7), d
    with pytest.raises(ValueError, match="d must be >= 1"):
        geometry.mean_abs_cos_isotropic(0)


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------


@unchecked_shapes()
def test_geometry_bad_input():
    pos, ctx = _pos_ctx(9, 5, 6, 4)
    labels = np.array([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match="labels has length 5 but there are 6 rows"):
        geometry.cluster_similarity(ctx, labels[:5])
    with pytest.raises(ValueError, match="at least 2 contexts"):
        geometry.cluster_similarity(ctx[:1], labels[:1])
    with pytest.raises(ValueError, match="single distinct value"):
        geometry.cluster_similarity(ctx, np.zeros(6, int))
    with pytest.raises(ValueError, match="rank-2"):
        geometry.incoherence(pos[None], ctx)
    with pytest.raises(ValueError, match="same width d"):
        geometry.incoherence(pos, ctx[:, :3])
    bad = ctx.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="ctx contains 1 NaN/Inf"):
        geometry.incoherence(pos, bad)
    bad[2] = 0.0
    with pytest.raises(ValueError, match="zero norm .*row 2"):
        geometry.incoherence(pos, bad)
    with pytest.raises(ValueError, match="at least two distinct classes"):
        geometry.cluster_compactness(ctx, np.zeros(6, int))
    with pytest.raises(ValueError, match="labels has length"):
        geometry.cluster_compactness(ctx, labels[:4])
    with pytest.raises(ValueError, match=r"\[0, num_classes=2\)"):
        geometry.cluster_compactness(ctx, labels + 1, num_classes=2)
    with pytest.raises(TypeError, match="integers"):
        geometry.cluster_compactness(ctx, labels.astype(float))
    with pytest.raises(ValueError, match="n_components"):
        geometry.pca_projections(pos, n_components=5)
    with pytest.raises(ValueError, match="last axis d = 4"):
        geometry.pca_projections(pos, [np.ones((3, 5))])
    with pytest.raises(ValueError, match="chunk_size"):
        geometry.incoherence(pos, ctx, chunk_size=0)


def test_expected_max_abs_cos_isotropic_against_monte_carlo():
    """E max over n independent pairs: n = 1 is E|cos| (closed form); larger n against a NumPy Monte Carlo of
    Gaussian directions (4,000 draws of n pairs; the tolerance is 5 standard errors of the draws' mean)."""
    assert geometry.expected_max_abs_cos_isotropic(384, 1) == pytest.approx(geometry.mean_abs_cos_isotropic(384), rel=1e-8)
    assert geometry.expected_max_abs_cos_isotropic(1, 7) == 1.0
    rng = np.random.default_rng(0)
    for d, n in ((8, 5), (64, 200)):
        u, v = rng.normal(size=(2, 4000, n, d))
        c = np.abs(np.sum(u * v, -1)) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
        m = c.max(-1)
        assert geometry.expected_max_abs_cos_isotropic(d, n) == pytest.approx(m.mean(), abs=5 * m.std() / np.sqrt(m.size))
    assert geometry.expected_max_abs_cos_isotropic(384, 127 * 256) > 3 * geometry.mean_abs_cos_isotropic(384)
    with pytest.raises(ValueError, match="n must be >= 1"):
        geometry.expected_max_abs_cos_isotropic(4, 0)
