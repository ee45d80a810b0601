"""geomjax.theory.fourier: the Fourier basis mod p, key frequencies on planted models, restriction/sufficiency,
principal angles, petals and the activations of the 1-layer model (independent NumPy references)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax import fourier as fx
from geomjax.models.toy import ToyTransformer, clock_activations, nanda_config


@pytest.mark.parametrize("p", [7, 10, 113])
def test_fourier_basis_orthonormal_and_matches_fft(p):
    B = np.asarray(fx.fourier_basis(p), np.float64)
    assert B.shape == (p, p)
    np.testing.assert_allclose(B @ B.T, np.eye(p), atol=1e-5)
    f = np.random.default_rng(p).normal(size=p)
    c = B @ f
    F = np.asarray(jnp.fft.rfft(jnp.asarray(f)))  # independent: the FFT
    np.testing.assert_allclose(c[0], F[0].real / math.sqrt(p), rtol=1e-5, atol=1e-5)
    for k in range(1, (p - 1) // 2 + 1):
        np.testing.assert_allclose(c[2 * k - 1], math.sqrt(2 / p) * F[k].real, atol=1e-4)
        np.testing.assert_allclose(c[2 * k], -math.sqrt(2 / p) * F[k].imag, atol=1e-4)
    if p % 2 == 0:
        np.testing.assert_allclose(c[-1], F[p // 2].real / math.sqrt(p), atol=1e-4)
    assert len(fx.fourier_basis_names(p)) == p
    with pytest.raises(ValueError, match="p must be"):
        fx.fourier_basis(2)


def _planted_embedding(p, d, freqs, noise, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    x = np.arange(p)
    W = np.zeros((p + 1, d))
    for i, k in enumerate(freqs):
        W[:p] += np.outer(np.cos(2 * np.pi * k * x / p), Q[:, 2 * i]) + np.outer(np.sin(2 * np.pi * k * x / p), Q[:, 2 * i + 1])
    W += noise * rng.normal(size=W.shape)
    return W.astype(np.float32)


def test_key_frequencies_embed_and_fraction_planted():
    p, d, K = 59, 32, [4, 17, 23]
    W = _planted_embedding(p, d, K, noise=0.02)
    assert fx.key_frequencies_embed(W, p) == K
    frac = float(fx.key_fraction(fx.fourier_coefficients(W, p), p, K))
    # independent: the energy of the noise-free planted part over the total non-constant energy (NumPy)
    Wn = W[:p] - W[:p].mean(0)
    x = np.arange(p)
    energy_k = 0.0
    for k in K:
        for f in (np.cos, np.sin):
            u = f(2 * np.pi * k * x / p)
            u /= np.linalg.norm(u)
            energy_k += np.sum((u @ Wn) ** 2)
    np.testing.assert_allclose(frac, energy_k / np.sum(Wn**2), rtol=1e-4)
    # random W_E: no key frequency, and k frequencies hold about 2k/(p-1) of the energy
    R = np.random.default_rng(1).normal(size=(p + 1, 64)).astype(np.float32)
    assert fx.key_frequencies_embed(R, p) == []
    assert abs(float(fx.key_fraction(fx.fourier_coefficients(R, p), p, K)) - 2 * len(K) / (p - 1)) < 0.05


def test_key_frequencies_neurons_planted():
    p, F = 31, 24
    rng = np.random.default_rng(0)
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    freqs = rng.choice([3, 7, 11], size=F)
    post = np.zeros((p, p, F))
    for n, k in enumerate(freqs):
        ph = rng.uniform(0, 2 * np.pi, 3)
        t = lambda v, f: np.cos(2 * np.pi * k * v / p + ph[f])
        post[:, :, n] = np.maximum(0.0, 0.5 + t(a, 0) + t(b, 1) + 0.8 * t(a + b, 2))
    post[:, :, 0] = 0.0  # a dead neuron
    res = fx.key_frequencies_neurons(jnp.asarray(post, jnp.float32), p)
    assert res.freq[0] == 0 and res.fraction[0] == 0
    np.testing.assert_array_equal(res.freq[1:], freqs[1:])
    assert res.key == sorted(set(freqs[1:].tolist()))
    # independent variance fraction of one neuron via explicit NumPy sums
    n = 5
    A = post[:, :, n] - post[:, :, n].mean()
    k = freqs[n]
    waves = [np.ones(p) / np.sqrt(p)] + [f(2 * np.pi * k * np.arange(p) / p) * np.sqrt(2 / p) for f in (np.cos, np.sin)]
    block = sum((wa @ A @ wb) ** 2 for wa in waves for wb in waves)
    np.testing.assert_allclose(res.fraction[n], block / np.sum(A**2), rtol=1e-4)


def _clock_logits(p, freqs, amp_noise, seed=0):
    """Planted clock logits L[a·p+b, c] = Σ_k A_kc cos(2πk(a+b−c)/p) with per-(k, c) amplitude noise."""
    rng = np.random.default_rng(seed)
    a, b = np.divmod(np.arange(p * p), p)
    c = np.arange(p)
    L = np.zeros((p * p, p))
    for k in freqs:
        A = 1.0 + amp_noise * rng.normal(size=p)
        L += A[None] * np.cos(2 * np.pi * k * ((a + b)[:, None] - c[None]) / p)
    return L


def test_restricted_logits_and_sufficiency_planted():
    p = 31
    clean = _clock_logits(p, [3, 7], 0.0)
    junk = _clock_logits(p, [11], 0.0, seed=3) * 0.5
    rest, excl = fx.restricted_logits(jnp.asarray(clean + junk, jnp.float32), p, [3, 7])
    # the restriction keeps exactly the planted frequencies plus the (zero) mean; the rest is excluded
    np.testing.assert_allclose(np.asarray(rest), clean + (clean + junk).mean(0), atol=1e-4)
    np.testing.assert_allclose(np.asarray(excl), junk, atol=1e-4)
    # noisy amplitudes: one circle's argmax is fragile, two coprime circles decide; independent argmax loop
    L = _clock_logits(p, [3, 7], 0.3, seed=1)
    a, b = np.divmod(np.arange(p * p), p)
    y = (a + b) % p
    s = fx.sufficiency(jnp.asarray(L, jnp.float32), p, [3, 7])
    want_single = {}
    rng = np.random.default_rng(1)
    amps = {k: 1.0 + 0.3 * rng.normal(size=p) for k in (3, 7)}
    for k in (3, 7):
        Lk = amps[k][None] * np.cos(2 * np.pi * k * ((a + b)[:, None] - np.arange(p)[None]) / p)
        want_single[k] = float(np.mean(np.argmax(Lk, axis=1) == y))
    for k in (3, 7):
        assert abs(s["single"][k] - want_single[k]) < 1e-6
    assert s["single"][3] < 1.0 and s["single"][7] < 1.0
    assert s["pairs"]["3,7"] == s["all"] == float(np.mean(np.argmax(L, axis=1) == y))


def test_principal_angles_and_petals():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(2, 6))
    th = np.deg2rad(30.0)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    A = np.stack([Q[:, 0], Q[:, 1]])
    Bm = np.stack([np.cos(th) * Q[:, 0] + np.sin(th) * Q[:, 2], Q[:, 1]])
    np.testing.assert_allclose(np.asarray(fx.principal_angles(A, Bm)), [0.0, 30.0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(fx.principal_angles(U, U)), [0.0, 0.0], atol=1e-5)
    # a circle traversed once has one complex-DFT bin; the predicted petal (α varying) has several
    p = 41
    circ = np.asarray(fx.predicted_petal(p, 3, 3, a=0, phase=0.0))
    t = np.arange(p)
    alpha = 0.5 * (1 + np.cos(2 * np.pi * 3 * t / p))
    x = lambda n: np.stack([np.cos(2 * np.pi * 3 * n / p), np.sin(2 * np.pi * 3 * n / p)], -1)
    np.testing.assert_allclose(circ, alpha[:, None] * x(np.zeros(p)) + (1 - alpha[:, None]) * x(t), atol=1e-5)
    ring = np.stack([np.cos(2 * np.pi * 5 * t / p), np.sin(2 * np.pi * 5 * t / p)], 1)
    r = fx.complex_peak_fraction(ring)
    assert abs(float(r["peak_fraction"]) - 1.0) < 1e-5 and r["peak_freq"] == 5
    assert float(fx.complex_peak_fraction(circ)["peak_fraction"]) < 0.9
    assert float(fx.circle_fit_r2(ring @ np.array([[2.0, 0.3], [0.1, 0.5]]), 5)) > 0.9999


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_clock_activations_match_model_and_rank():
    p = 11
    cfg = nanda_config(p, d_model=16, n_heads=2, d_mlp=24)
    model = ToyTransformer(cfg)
    params = jax.jit(lambda k: model.init(k, jnp.zeros((1, 3), jnp.int32))["params"])(jax.random.key(0))
    acts = clock_activations(params, cfg, p)
    a, b = np.divmod(np.arange(p * p), p)
    x = jnp.asarray(np.stack([a, b, np.full_like(a, p)], 1))
    logits, inter = jax.jit(lambda prm: model.apply({"params": prm}, x, return_attention=True, return_mlp=True))(params)
    np.testing.assert_allclose(np.asarray(acts.logits).reshape(p * p, -1), np.asarray(logits[:, -1]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(acts.attn).reshape(p * p, 2, 3), np.asarray(inter.attentions[0][:, :, -1]), atol=1e-6)
    np.testing.assert_allclose(np.asarray(acts.post).reshape(p * p, -1), np.asarray(inter.mlp_post[0][:, -1]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(acts.o_heads.sum(2)), np.asarray(acts.o), atol=1e-6)
    L = np.asarray(acts.logits).reshape(p * p, -1)[:, :p]
    y = (a + b) % p
    want = np.array([np.sum(L[i] > L[i, y[i]]) for i in range(p * p)])  # loop reference
    np.testing.assert_array_equal(np.asarray(fx.correct_logit_rank(L, y)), want)
    WL = np.asarray(fx.unembed_matrix(params))
    np.testing.assert_allclose(WL, (np.asarray(params["block_0"]["mlp"]["proj"]["kernel"]) @ np.asarray(params["unembed"]["kernel"])).T, rtol=1e-5, atol=1e-6)


def test_batched_analyses_equal_the_per_item_ones():
    """The vectorised forms the clock analysis runs as one program (all_circles, attention_spectra,
    complex_peak_stats, plane_svds, frequency_set_accuracies, restricted_excluded_terms, neuron_spectrum)
    give what the per-frequency / per-head functions give, item by item."""
    p, d, H, F = 13, 6, 3, 10
    rng = np.random.default_rng(0)
    W = jnp.asarray(rng.normal(size=(p + 1, d)), jnp.float32)
    xy, r2 = fx.all_circles(W, p)
    for k in range(1, (p - 1) // 2 + 1):
        np.testing.assert_allclose(np.asarray(xy[k - 1]), np.asarray(fx.circle_projection(W, p, k)), rtol=1e-5, atol=1e-6)
        assert abs(float(r2[k - 1]) - float(fx.circle_fit_r2(fx.circle_projection(W, p, k), k))) < 1e-5
    att = jnp.asarray(rng.uniform(size=(H, p, p)), jnp.float32)
    C, ea, eb = fx.attention_spectra(att)
    for h in range(H):
        one = fx.attention_spectrum(att[h])
        np.testing.assert_allclose(np.asarray(C[h]), np.asarray(one["coeffs"]), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ea[h]), np.asarray(one["energy_a"]), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(eb[h]), np.asarray(one["energy_b"]), rtol=1e-5)
    curves = jnp.asarray(rng.normal(size=(2, 4, p, 2)), jnp.float32)
    st = fx.complex_peak_stats(curves)
    for i in range(2):
        for j in range(4):
            one = fx.complex_peak_fraction(curves[i, j])
            assert int(st["peak_freq"][i, j]) == one["peak_freq"]
            assert abs(float(st["freq_fraction"][i, j]) - float(one["freq_fraction"])) < 1e-6
    act = jnp.asarray(rng.normal(size=(p, p, F)), jnp.float32)
    comps, svals = fx.plane_svds(act, jnp.asarray([2, 5]), n_components=3)
    for i, k in enumerate((2, 5)):
        c1, s1 = fx.mlp_plane_svd(act, k, n_components=3)
        np.testing.assert_allclose(np.abs(np.asarray(comps[i])), np.abs(np.asarray(c1)), atol=1e-5)
        np.testing.assert_allclose(np.asarray(svals[i]), np.asarray(s1), rtol=1e-5)
    L = jnp.asarray(_clock_logits(p, [2, 5], 0.3, seed=2), jnp.float32)
    sets = {"2": [2], "5": [5], "2,5": [2, 5], "none": []}
    acc = fx.frequency_set_accuracies(L, p, sets)
    for name, freqs in sets.items():
        assert acc[name] == fx.restricted_accuracy(L, p, freqs)
    tr = np.arange(0, p * p, 3)
    want = fx.restricted_excluded_loss(L, p, [2, 5], tr)
    a, b = np.divmod(np.arange(p * p), p)
    te = np.setdiff1d(np.arange(p * p), tr)
    got = fx.restricted_excluded_terms(L, jnp.asarray(fx.sum_waves(p, [2, 5]), jnp.float32), jnp.asarray((a + b) % p),
                                       jnp.asarray(tr), jnp.asarray(te))
    assert {k: float(v) for k, v in got.items()} == want
    post = np.asarray(act)
    sq = np.asarray(fx.neuron_spectrum(post, p), np.float64)
    B = np.asarray(fx.fourier_basis(p), np.float64)
    cen = post - post.mean((0, 1), keepdims=True)
    np.testing.assert_allclose(sq, np.einsum("ia,abn,jb->ijn", B, cen, B) ** 2, rtol=1e-4, atol=1e-6)
    e = np.asarray(fx.frequency_energy(fx.fourier_coefficients(W, p), p))
    assert fx.key_frequencies_from_energy(e) == fx.key_frequencies_embed(W, p)
