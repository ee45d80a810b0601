"""Second witnesses of the clock and Bao refutations (issue 16, item 5) agree with the first computations on
small instances, and inequality claims report a nonzero margin (the float64 rounding floor or the
threshold's own tolerance)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geomjax import fourier as fx
from geomjax import localization as loc
from geomjax.claims import Claim, Evaluation, Inequality, run_claim
from geomjax.sources.bao import claims as bao
from geomjax.sources.clock import claims as clock
from geomjax.models.toy import ToyTransformer, clock_activations, nanda_config

P = 11


@pytest.fixture(scope="module")
def tiny():
    """A random (untrained) Nanda-architecture model at p = 11, d 32, 2 heads, d_mlp 64, with MLP biases."""
    mcfg = nanda_config(P, d_model=32, n_heads=2, d_mlp=64)
    ids = jnp.zeros((1, 3), jnp.int32)
    params = ToyTransformer(mcfg).lazy_init(jax.random.key(3), jax.ShapeDtypeStruct(ids.shape, ids.dtype))["params"]
    # nonzero MLP biases so that the ReLU matters
    params["block_0"]["mlp"]["fc"]["bias"] = jax.random.normal(jax.random.key(4), (64,))
    P64 = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), jax.device_get(params))
    return mcfg, params, P64


@pytest.mark.parametrize("relu,pos", [(True, "learned"), (False, "learned"), (True, "none")])
def test_numpy_forward_matches_the_flax_model(tiny, relu, pos):
    mcfg, params, P64 = tiny
    m = (mcfg if relu else mcfg.replace(activation="none")).replace(pos_embedding=pos)
    if pos == "none":  # the clock blog's model: the same parameters without pos_embed
        params = {k: v for k, v in params.items() if k != "pos_embed"}
        P64 = {k: v for k, v in P64.items() if k != "pos_embed"}
    a, b = np.divmod(np.arange(P * P), P)
    ids = jnp.asarray(np.stack([a, b, np.full_like(a, P)], 1), jnp.int32)
    with jax.default_matmul_precision("highest"):
        flax_logits = np.asarray(ToyTransformer(m).apply({"params": params}, ids)[0][:, -1, :P])
    out = clock.numpy_clock_forward(P64, P, relu=relu)
    np.testing.assert_allclose(out["logits"], flax_logits, rtol=1e-4, atol=1e-4)
    A = clock_activations(params, m, P)
    np.testing.assert_allclose(out["o_heads"], np.asarray(A.o_heads).reshape(P * P, 2, -1), rtol=1e-4, atol=1e-5)


def test_dft_restriction_and_key_frequencies_match_fourier(tiny):
    _, params, P64 = tiny
    rng = np.random.default_rng(0)
    a, b = np.divmod(np.arange(P * P), P)
    # logits with planted waves of a + b at frequencies 2 and 3, plus noise
    L = sum(np.cos(2 * np.pi * w * ((a + b)[:, None] - np.arange(P)) / P) for w in (2, 3)) + 0.3 * rng.normal(size=(P * P, P))
    for freqs in ([2], [3], [2, 3], [1, 4]):
        assert clock.dft_restricted_accuracy(L, P, freqs) == pytest.approx(fx.restricted_accuracy(L, P, freqs), abs=1e-12)
    kE = fx.key_frequencies_embed(params["embed"]["embedding"], P)
    kL = fx.key_frequencies_embed(fx.unembed_matrix(params), P)
    assert clock.numpy_key_frequencies(P64, P) == ([k for k in kE if k in kL] or kE)
    o = clock.numpy_clock_forward(P64, P)["o_heads"]
    A = clock_activations(params, nanda_config(P, d_model=32, n_heads=2, d_mlp=64), P)
    for k in (1, 2, 5):
        first = float(fx.complex_peak_fraction(fx.petal_fourier_projection(A.o_heads[4], k)["total"])["freq_fraction"])
        assert clock.numpy_summed_petal_fraction(o, P, 4, k) == pytest.approx(first, abs=1e-4)


@pytest.mark.slow  # compiles empirical_rho (x64) and runs two Monte Carlo estimators
def test_bao_rho_witness_closed_forms_match_localization():
    d, T, lam = 4, 8, 2.0
    with jax.enable_x64(True):
        Sig, F = loc.anisotropic_covariance(jax.random.key(0), d, dtype=jnp.float64)
        W, _ = loc.random_wqk(jax.random.key(1), d, 0.1, 0.5, dtype=jnp.float64)
        mu, v = loc.exact_moments(W, Sig, T, lam)
        gauss = np.asarray(loc.gaussian_rho(mu, v))
        xi, eta = loc.xi_eta(W, Sig, lam)
        printed = np.asarray(loc.rho_theta(jnp.arange(1, T + 1) / T, xi, eta, "printed"))
    W, Sig, F = (np.asarray(x, float) for x in (W, Sig, F))
    np.testing.assert_allclose(bao.kron_gaussian_rho(W, Sig, lam, T), gauss, atol=1e-12)
    np.testing.assert_allclose(bao.printed_eq6_rho(W, Sig, lam, T), printed, atol=1e-12)
    # the two Monte Carlo estimators of Def. 1 agree within their binomial errors
    rho2, se2 = bao.numpy_rho_walks(np.random.default_rng(0), W, F, lam, T, 4000)
    first = loc.empirical_rho(jax.random.key(2), jnp.asarray(W, jnp.float32), jnp.asarray(F, jnp.float32), lam, T=T, n_seq=4000)
    se = np.sqrt(se2**2 + np.asarray(first["sem"]) ** 2)
    assert np.all(np.abs(rho2 - np.asarray(first["rho"])) <= 5 * se + 1e-9)


def test_inequality_margins_are_reported():
    exact = Claim(id="test.ineq.exact", source="t", statement="1 ≤ 2", predicted="2",
                  evaluate=lambda b, k: Evaluation(lhs=np.array([1.0]), rhs=np.array([2.0])), rule=Inequality())
    r = run_claim(exact)
    assert r.verdict == "holds" and r.margin == pytest.approx(2e-12)  # float64 rounding floor, 1e-12·max(|lhs|, |rhs|)
    thr = Claim(id="test.ineq.threshold", source="t", statement="acc ≥ 0.99", predicted="≥ 0.99",
                evaluate=lambda b, k: Evaluation(lhs=np.array([0.99]), rhs=np.array([0.995])),
                rule=Inequality(origin="threshold admits 1%", margin=0.01))
    r = run_claim(thr)
    assert r.verdict == "holds" and r.margin == 0.01 and r.margin_origin == "threshold admits 1%"
    # the margin is reported, not added again: 0.98 < 0.99 is still refuted (no witness: inconclusive)
    bad = Claim(id="test.ineq.bad", source="t", statement="acc ≥ 0.99", predicted="≥ 0.99",
                evaluate=lambda b, k: Evaluation(lhs=np.array([0.99]), rhs=np.array([0.98])),
                rule=Inequality(origin="threshold admits 1%", margin=0.01))
    r = run_claim(bad)
    assert r.verdict == "inconclusive" and "no second witness" in r.reason
    with pytest.raises(ValueError):
        Inequality(margin=-1.0)
