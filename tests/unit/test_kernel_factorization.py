"""geomjax.theory.kernel_factorization (Song & Zhong Theorem 2, eq. (12)) and its claims.

Expected values come from closed forms (χ² law, E cos² = 1/d, E|cos|, Gaussian tails,
Cov(pᵀZq, p'ᵀZq') = (pᵀp')(qᵀq')/d) or from NumPy recomputations in R^d of the same quantities
(explicit matrices W_αβ, brute-force enumeration of every input of eq. (10)).
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats

import geomjax.claims as claims
from geomjax import kernel_factorization as kf
from geomjax import montecarlo
from tests.unit.test_shapes import unchecked_shapes

def X64():
    """float64 for the block (the module's computations are meant for float64)."""
    return jax.enable_x64(True)


# one small setting shared by the single-instance tests (one compilation of each function)
ST = kf.Theorem2Setting(n1=2, n2=3, s=2, noise=1.0)


def _batch(key, n, d, setting, coherence=None):
    """n instances (vmapped sampler) as NumPy pytrees."""
    keys = jax.random.split(key, n)
    if coherence is None:
        f = jax.vmap(lambda k: kf._sample(k, float(d), 0.0, False, setting))
    else:
        f = jax.vmap(lambda k: kf._sample(k, float(d), coherence, True, setting))
    return jax.tree_util.tree_map(np.asarray, f(keys))


def _one(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def _np_weights(inst, with_noise=True):
    """W_αβ in frame coordinates from the instance fields, eq. (11) (+ noise), in NumPy."""
    bases = (np.asarray(inst.basis1), np.asarray(inst.basis2))
    W = np.zeros((2, 2) + np.asarray(inst.noise).shape[2:])
    for a, b in itertools.product(range(2), range(2)):
        for k in range(np.asarray(inst.coef).shape[-1]):
            u = bases[a][int(inst.u_index[a, b, k])]
            v = bases[b][int(inst.v_index[a, b, k])]
            W[a, b] += float(inst.coef[a, b, k]) * np.outer(u, v)
        if with_noise:
            W[a, b] += np.asarray(inst.noise[a, b])
    return W


# ----------------------------------------------------------------------------------------------
# Sampler statistics
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("df", [1.0, 7.0, 500.0, 2.0**20])
def test_chi2_sampler_is_the_chi2_law(df):
    """The Bartlett diagonal R_ii² ~ χ²_{d−i+1}: Kolmogorov–Smirnov against SciPy's χ²."""
    N = 20000
    with X64():
        k1, k2 = jax.random.split(jax.random.key(int(df) % 9973))
        z = jax.random.normal(k1, (kf._MT_ROUNDS, N), jnp.float64)
        u = jax.random.uniform(k2, (kf._MT_ROUNDS + 1, N), jnp.float64)
        x = np.asarray(jax.jit(kf._chi2)(jnp.full((N,), df), z, u))
    assert scipy.stats.kstest(x, scipy.stats.chi2(df).cdf).pvalue > 1e-3
    assert abs(x.mean() / df - 1) < 5 * math.sqrt(2 / df / N)


D_BATCH = 40


@pytest.fixture(scope="module")
def batch():
    """4000 independent instances of ST at d = 40, their noise forms and worst-case noise-free errors."""
    with X64():
        b = _batch(jax.random.key(1), 4000, D_BATCH, ST)
        N = np.asarray(jax.vmap(kf._noise_forms)(b))
        sup_det = np.asarray(jax.vmap(lambda i: kf._worst_case(i, False))(b))
    return b, N, sup_det


def test_basis_inner_products_match_closed_forms(batch):
    """Unit rows; E⟨c, t⟩² = 1/d and E|⟨c, t⟩| = Γ(d/2)/(√π Γ((d+1)/2)) (cos² ~ Beta(1/2, (d−1)/2))."""
    b, d = batch[0], D_BATCH
    np.testing.assert_allclose(np.linalg.norm(b.basis1, axis=-1), 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(b.basis2, axis=-1), 1.0, rtol=0, atol=1e-13)
    ip = np.einsum("sia,sja->sij", b.basis1, b.basis2)  # (S, n1, n2)
    same = np.einsum("sia,sja->sij", b.basis2, b.basis2)[:, 0, 1:]  # within B_2⁰
    e_abs = math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)
    for sample, target in ((ip**2, 1 / d), (same**2, 1 / d), (np.abs(ip), e_abs)):
        per = sample.reshape(len(sample), -1).mean(axis=1)  # one value per independent instance
        assert abs(per.mean() - target) <= 5 * per.std(ddof=1) / math.sqrt(len(per))


def test_incoherence_matches_explicit_random_unit_vectors(batch):
    """incoh of the frame representation vs NumPy unit vectors in R^d; scale √(2 log(n1 n2)/d)."""
    b, d, n1, n2 = batch[0], D_BATCH, ST.n1, ST.n2
    S = len(b.basis1)
    ours = np.abs(np.einsum("sia,sja->sij", b.basis1, b.basis2)).max(axis=(1, 2))
    with X64():
        assert float(kf.incoherence(b.basis1[0], b.basis2[0])) == pytest.approx(ours[0], rel=1e-14)
    rng = np.random.default_rng(0)
    g = rng.standard_normal((S, n1 + n2, d))
    g /= np.linalg.norm(g, axis=-1, keepdims=True)
    ref = np.abs(np.einsum("sia,sja->sij", g[:, :n1], g[:, n1:])).max(axis=(1, 2))
    se = math.sqrt(ours.var(ddof=1) / S + ref.var(ddof=1) / S)
    assert abs(ours.mean() - ref.mean()) <= 5 * se
    assert 0.7 < ours.mean() / math.sqrt(2 * math.log(n1 * n2) / d) < 1.3


def test_noise_forms_have_the_covariance_of_z_over_sqrt_d(batch):
    """Bilinear forms of Z/√d on unit vectors: E[N_pq N_p'q'] = (pᵀp')(qᵀq')/d, independent across αβ."""
    b, N, _ = batch
    d = D_BATCH
    Y = np.concatenate([b.basis1, b.basis2], axis=1)  # (S, n, n): rows 0-1 = c, 2-4 = t
    G = np.einsum("sia,sja->sij", Y, Y)
    checks = [
        (N[:, 0, 0, 0, 3] ** 2 * d, np.ones(len(N))),  # c_0ᵀ Z_11 t_1: variance 1/d
        (N[:, 0, 1, 0, 2] * N[:, 0, 1, 1, 4] * d, G[:, 0, 1] * G[:, 2, 4]),  # (pᵀp')(qᵀq')
        (N[:, 1, 0, 2, 2] * N[:, 1, 0, 2, 3] * d, G[:, 2, 3]),  # p = p', ‖p‖ = 1
        (N[:, 0, 0, 1, 1] * N[:, 1, 1, 1, 1] * d, np.zeros(len(N))),  # different Z_αβ: independent
    ]
    for sample, target in checks:
        diff = sample - target
        assert abs(diff.mean()) <= 5 * diff.std(ddof=1) / math.sqrt(len(diff))


def test_planted_coherence_is_exact():
    d, rho = 4096, 0.3
    with X64():
        inst = kf.sample_instance(jax.random.key(4), d, ST, coherence=rho)
        inc = float(kf.incoherence(inst.basis1, inst.basis2))
    B1, B2 = np.asarray(inst.basis1), np.asarray(inst.basis2)
    np.testing.assert_allclose(np.linalg.norm(B2, axis=1), 1.0, atol=1e-13)
    planted = np.array([B1[j % 2] @ B2[j] for j in range(3)])
    np.testing.assert_allclose(planted, rho, atol=1e-13)
    assert inc == pytest.approx(rho, abs=1e-13)  # the unplanted pairs are O(d^{-1/2}) ≈ 0.016


# ----------------------------------------------------------------------------------------------
# Exact quantities against NumPy in R^d
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_kernel_and_factorization_match_numpy_in_r_d():
    d, st = 48, ST
    with X64():
        inst = kf.sample_instance(jax.random.key(5), d, st)
        n = st.n
        O, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((d, n)))
        E = {k: np.asarray(v) for k, v in kf.embed(inst, O).items()}
        # eq. (11) from the instance fields, lifted to R^d with NumPy
        W_np = np.einsum("ia,xyab,jb->xyij", O, _np_weights(inst), O)
        np.testing.assert_allclose(E["W"], W_np, rtol=0, atol=1e-13)
        B1 = np.asarray(inst.basis1) @ O.T
        a, iu, iv = np.asarray(inst.coef), np.asarray(inst.u_index), np.asarray(inst.v_index)
        np.testing.assert_allclose(
            np.asarray(kf.sparse_matrix(a[0, 0], B1[iu[0, 0]], B1[iv[0, 0]])),
            sum(a[0, 0, k] * np.outer(B1[iu[0, 0, k]], B1[iv[0, 0, k]]) for k in range(st.s)),
            atol=1e-14,
        )
        i, j, k, l = np.asarray(inst.x_index)
        lam = np.asarray(inst.x_scale)
        cq, tq = lam[0] * B1[i], lam[1] * (np.asarray(inst.basis2) @ O.T)[j]
        ck, tk = lam[2] * B1[k], lam[3] * (np.asarray(inst.basis2) @ O.T)[l]
        np.testing.assert_allclose(E["cq"], cq, atol=1e-14)
        W = W_np.sum(axis=(0, 1))
        full = (cq + tq) @ W @ (ck + tk)
        fact = cq @ W_np[0, 0] @ ck + cq @ W_np[0, 1] @ tk + tq @ W_np[1, 0] @ ck + tq @ W_np[1, 1] @ tk
        args = (jnp.asarray(W_np), jnp.asarray(cq), jnp.asarray(tq), jnp.asarray(ck), jnp.asarray(tk))
        assert float(kf.log_kernel(jnp.asarray(W), jnp.asarray(cq + tq), jnp.asarray(ck + tk))) == pytest.approx(full, abs=1e-13)
        assert float(kf.kernel(jnp.asarray(W), jnp.asarray(cq + tq), jnp.asarray(ck + tk))) == pytest.approx(math.exp(full), rel=1e-12)
        assert float(kf.factorized_log_kernel(*args)) == pytest.approx(fact, abs=1e-13)
        assert float(kf.log_factorization_error(*args)) == pytest.approx(full - fact, abs=1e-13)
        assert float(kf.relative_error(*args)) == pytest.approx(abs(math.exp(full) / math.exp(fact) - 1), rel=1e-10)
        stats = kf.instance_statistics(inst)
        assert float(stats["log_error"]) == pytest.approx(abs(full - fact), abs=1e-13)


def _brute_sup(inst, with_noise):
    """max |L| over every basis choice and λ ∈ {±1}⁴ (the vertices of [−1, 1]⁴), by enumeration."""
    W = _np_weights(inst, with_noise)
    B1, B2 = np.asarray(inst.basis1), np.asarray(inst.basis2)
    best = 0.0
    for i, j, k, l in itertools.product(range(len(B1)), range(len(B2)), range(len(B1)), range(len(B2))):
        parts_q, parts_k = (B1[i], B2[j]), (B1[k], B2[l])
        F = np.array([[[[parts_q[p] @ W[a, b] @ parts_k[q] for q in range(2)] for p in range(2)]
                       for b in range(2)] for a in range(2)])
        for lam in itertools.product((-1.0, 1.0), repeat=4):
            L = sum(lam[p] * lam[2 + q] * F[a, b, p, q] for a, b, p, q in itertools.product(range(2), repeat=4)
                    if (p, q) != (a, b))
            best = max(best, abs(L))
    return best


@pytest.mark.parametrize("with_noise", [False, True])
def test_worst_case_error_is_the_brute_force_supremum(with_noise):
    st = ST
    with X64():
        inst = kf.sample_instance(jax.random.key(6), 12, st)
        sup = float(kf.worst_case_log_error(inst, include_noise=with_noise))
        # interior points of [−1, 1]⁴ never exceed the vertex maximum
        O = np.eye(st.n)
        E = kf.embed(inst, O)
        Ws = E["W"] if with_noise else E["W_sparse"]
        rng = np.random.default_rng(6)
        B1, B2 = np.asarray(inst.basis1), np.asarray(inst.basis2)
        for _ in range(50):
            lam = rng.uniform(-1, 1, 4)
            i, k = rng.integers(0, 2, 2)
            j, l = rng.integers(0, 3, 2)
            L = kf.log_factorization_error(Ws, lam[0] * B1[i], lam[1] * B2[j], lam[2] * B1[k], lam[3] * B2[l])
            assert abs(float(L)) <= sup * (1 + 1e-12)
    assert sup == pytest.approx(_brute_sup(inst, with_noise), rel=1e-12)


def test_deterministic_bound_of_the_proof_holds(batch):
    """Noise-free: sup|L| ≤ (2·incoh + incoh²)·Σ|a| (App. F.2), incoh and Σ|a| recomputed in NumPy."""
    b, _, sup = batch
    inc = np.abs(np.einsum("sia,sja->sij", b.basis1, b.basis2)).max(axis=(1, 2))
    bound = (2 * inc + inc**2) * np.abs(b.coef).sum(axis=(1, 2, 3))
    assert np.all(sup <= bound * (1 + 1e-12))
    assert np.max(sup / bound) > 0.3  # the bound is not vacuous at d = 40


def test_error_shrinks_with_d_on_a_fixed_seed():
    """Same key, d = 2^8, 2^12, 2^16: the worst-case error scales like d^{-1/2} (factor 4 per 16×)."""
    with X64():
        errs = [float(kf.worst_case_log_error(kf.sample_instance(jax.random.key(8), d, ST))) for d in (2**8, 2**12, 2**16)]
    assert errs[0] > errs[1] > errs[2]
    for a, b in zip(errs, errs[1:]):
        assert 3.0 < a / b < 5.5


def test_noise_cross_terms_and_union_counts_by_enumeration():
    with X64():
        inst = kf.sample_instance(jax.random.key(9), 30, ST)
        N = np.asarray(kf._noise_forms(inst))
        got_all = float(kf.noise_cross_max(inst, "all"))
        got_printed = float(kf.noise_cross_max(inst, "printed"))
    Y = np.concatenate([inst.basis1, inst.basis2])
    np.testing.assert_allclose(N, np.einsum("ia,xyab,jb->xyij", Y, np.asarray(inst.noise), Y), atol=1e-14)
    side = [0, 0, 1, 1, 1]
    cross_all, cross_printed = [], []
    for a, b, p, q in itertools.product(range(2), range(2), range(5), range(5)):
        if (side[p], side[q]) != (a, b):  # a cross term of Z_ab
            cross_all.append(abs(N[a, b, p, q]))
            if side[p] != side[q]:
                cross_printed.append(abs(N[a, b, p, q]))
    assert len(cross_all) == kf.n_noise_cross_terms(2, 3, "all") == 3 * 5**2
    assert len(cross_printed) == kf.n_noise_cross_terms(2, 3, "printed") == 6 * 2 * 3
    assert got_all == max(cross_all) and got_printed == max(cross_printed)
    with X64():
        assert float(kf.union_bound(0.3, 100.0, 1, 31, "printed")) == pytest.approx(2 * 6 * 31 * math.exp(-9.0), rel=1e-12)
        assert float(kf.union_bound(0.2, 100.0, 1, 31, "corrected")) == 1.0
        assert float(kf.union_bound(0.5, 100.0, 1, 31, "corrected")) == pytest.approx(6 * 32**2 * math.exp(-25.0), rel=1e-12)


def test_exceedance_count_is_the_gaussian_tail():
    """Planted n1 = 1 (incoh = ρ exactly): E #{cross terms > √2·incoh} = 3(n1+n2)²·erfc(√(ρ²d))."""
    d, x, st = 256, 3.0, kf.Theorem2Setting(n1=1, n2=5, s=1, noise=1.0)
    rho = math.sqrt(x / d)

    def one(key):
        s = kf._noise_statistics(kf._sample(key, float(d), rho, True, st))
        return jnp.stack([s["n_exceed_all"].astype(jnp.float64), s["x"]])

    est = montecarlo.estimate(one, jax.random.key(10), 4096, chunk=1024, dtype="float64").as_numpy()
    pred = 3 * 6**2 * scipy.special.erfc(math.sqrt(x))
    assert est["mean"][1] == pytest.approx(x, rel=1e-12) and est["sem"][1] < 1e-12
    assert abs(est["mean"][0] - pred) <= 5 * est["sem"][0]


def test_replanting_and_the_event_helpers_agree_with_the_statistics():
    """with_planted_coherence(draw at ρ = 0, ρ) is the draw at ρ; the single-purpose helpers match."""
    key = jax.random.key(11)
    with X64():
        base = kf.sample_instance(key, 300, ST, coherence=0.0)
        direct = kf.sample_instance(key, 300, ST, coherence=0.2)
        replanted = kf.with_planted_coherence(base, 0.2)
        for a, b in zip(jax.tree_util.tree_leaves(replanted), jax.tree_util.tree_leaves(direct)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-15)
        with pytest.raises(ValueError, match="coherence=0.0"):
            kf.with_planted_coherence(direct, 0.3)
        s = kf.instance_statistics(direct)
        assert float(s["incoh"]) == pytest.approx(0.2, abs=1e-14)
        assert float(kf.deterministic_bound(direct)) == pytest.approx(float(s["deterministic_bound"]), rel=1e-13)
        assert float(kf.worst_case_log_error(direct)) == pytest.approx(float(s["sup_log_error"]), rel=1e-13)
        assert float(kf.worst_case_log_error(direct, False)) == pytest.approx(float(s["sup_log_error_det"]), rel=1e-13)
        assert bool(kf.proof_event(direct, "all")) == bool(s["proof_event_all"])
        assert bool(kf.proof_event(direct, "printed")) == bool(s["proof_event_printed"])
        assert bool(kf.theorem_event(direct)) == bool(s["theorem_event"])
        small = float(s["sup_log_error"]) > float(s["deterministic_bound"]) + 1e-6 * 0.2
        assert bool(kf.theorem_event(direct, constant=1e-6)) == small
        ns = kf.noise_statistics(direct)
        assert float(ns["noise_max_all"]) == pytest.approx(float(s["noise_max_all"]), rel=1e-13)
        assert float(kf.noise_cross_max(direct, "all")) == pytest.approx(float(s["noise_max_all"]), rel=1e-13)
        W = np.asarray(kf.weight_matrices(direct))
        np.testing.assert_allclose(W, _np_weights(direct), atol=1e-15)
        L = kf.log_factorization_error(jnp.asarray(W), *kf.decomposed_inputs(direct))
        assert abs(float(L)) == pytest.approx(float(s["log_error"]), abs=1e-15)


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


@unchecked_shapes()
def test_bad_inputs_raise_clear_errors():
    st = ST
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="d >= n1 \\+ n2"):
        kf.sample_instance(key, 4, st)
    with pytest.raises(ValueError, match="integer dimension"):
        kf.sample_instance(key, 10.5, st)
    for rho in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="coherence"):
            kf.sample_instance(key, 16, st, coherence=rho)
    with pytest.raises(TypeError, match="PRNG key"):
        kf.sample_instance(0, 16, st)
    with pytest.raises(TypeError, match="Theorem2Setting"):
        kf.sample_instance(key, 16, (2, 2))
    for bad in ({"n1": 0}, {"s": 1.5}, {"noise": 2.0}, {"noise": -0.1}, {"n2": True}):
        with pytest.raises(ValueError, match="Theorem2Setting"):
            kf.Theorem2Setting(**bad)
    with pytest.raises(ValueError, match="norm <= 1"):
        kf.incoherence(np.ones((2, 3), np.float32), np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match="expected B1"):
        kf.incoherence(np.eye(3, dtype=np.float32), np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        kf.incoherence(np.array([[np.nan, 0.0]], np.float32), np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="a_k"):
        kf.sparse_matrix(np.array([1.5], np.float32), np.eye(1, 3, dtype=np.float32), np.eye(1, 3, dtype=np.float32))
    with pytest.raises(ValueError, match="expected W"):
        kf.log_kernel(np.eye(3, dtype=np.float32), np.ones(2, np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="Ws"):
        kf.factorized_log_kernel(np.zeros((2, 3, 3), np.float32), *(np.zeros(3, np.float32),) * 4)
    with pytest.raises(ValueError, match="count"):
        kf.union_bound(0.1, 10, 1, 1, count="other")
    with X64():
        inst = kf.sample_instance(key, 16, st)
        with pytest.raises(ValueError, match="pairs"):
            kf.noise_cross_max(inst, "some")
        with pytest.raises(ValueError, match="orthonormal"):
            kf.embed(inst, 2 * np.eye(16, 5))
        with pytest.raises(ValueError, match="ONE instance"):
            kf.instance_statistics(jax.tree_util.tree_map(lambda a: a[None], inst))
        with pytest.raises(ValueError, match="positive"):
            kf.theorem_event(inst, constant=0.0)
    with pytest.raises(TypeError, match="Theorem2Instance"):
        kf.worst_case_log_error({"basis1": 0})
    if not jax.config.jax_enable_x64:  # the dtype rule: float64 input is computed in float64, not refused
        out = kf.incoherence(np.eye(2), np.eye(2))
        assert out.dtype == np.float64 and float(out) == 1.0


# ----------------------------------------------------------------------------------------------
# Claims
# ----------------------------------------------------------------------------------------------

EXPECTED = {
    "song_zhong.theorem2.deterministic": "holds",
    "song_zhong.theorem2.rate_in_d": "holds",
    "song_zhong.theorem2.error_vs_incoherence": "holds",
    "song_zhong.theorem2.failure_probability": "holds",
    # decided at quick since quick draws 2^15 per point on full's grid (the fitted rate's 5·sem was ≈ 0.5 at 2,048)
    "song_zhong.theorem2.failure_decay": "holds",
    # refuted by the Monte Carlo and by a NumPy estimator of the Gaussian cross terms (P ≈ 0.44 > 0.34)
    "song_zhong.theorem2.union_bound.printed": "does not hold",
    "song_zhong.theorem2.union_bound.corrected": "holds",
    # the "moreover" statement with its constants left to exist: C = 2 exhibits one (issue 33)
    "song_zhong.theorem2.union_bound.intended": "holds",
}


@pytest.mark.slow
def test_theorem2_claims_quick_verdicts(quick_claims):
    res = {r.id: r for r in quick_claims("song_zhong.theorem2")}  # claims.run(select=..., budget="quick"), once per session
    assert {i: r.verdict for i, r in res.items()} == EXPECTED
    assert set(EXPECTED) <= {c.id for c in claims.select_claims("song_zhong")}
    for r in res.values():
        assert r.source.startswith("Song & Zhong"), r.source
    rate = res["song_zhong.theorem2.rate_in_d"].details
    assert abs(rate["fitted_exponent"] + 0.5) + 5 * rate["fitted_exponent_sem"] <= 0.1 and rate["fitted_exponent_sem"] > 0
    u = res["song_zhong.theorem2.union_bound.printed"]
    assert [w["verdict"] for w in u.witnesses] == ["does not hold", "does not hold"]
    assert "NumPy" in u.witnesses[1]["method"]
    # the printed count is violated at incoh²·d = 7 (n1 = 1, n2 = 31): P ≈ 1 − exp(−3072·erfc(√7)) > 12·31·e^{-7}
    printed = res["song_zhong.theorem2.union_bound.printed"].details
    p7 = printed["points"][0]
    # the noise-only group runs in float32 at quick (geomjax.sources.song_zhong.theorem2._dtype): x and the bound to float32 rounding
    assert p7["x"] == pytest.approx(7.0, rel=1e-6)
    assert p7["union_printed"] == pytest.approx(12 * 31 * math.exp(-7.0), rel=1e-6)
    assert printed["n_terms_all"] == 3 * 32**2 and printed["n_terms_printed_pairs"] == 6 * 31
    m = 3 * 32**2 * scipy.special.erfc(math.sqrt(7.0))  # expected exceedances (independence heuristic)
    assert abs(p7["proof_event_all"] - (1 - math.exp(-m))) < 0.05
    assert printed["event_restricted_to_printed_pairs_holds"]
