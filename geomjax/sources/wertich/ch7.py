"""Wertich chapter 7: attention outputs with fixed weights (§7.1.1) and the uniform embedding mixture
hypothesis in random attention stacks (§7.2.3)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import gaussian as G
from geomjax.claims import Evaluation, Tolerance
from geomjax.sources.wertich._shared import (SOURCE, blocks, det_claim, mc_claim, outer_flat,
                                            rng, spd, unblocks, x64)

# ==============================================================================================
# §7.1.1: attention outputs with fixed weights
# ==============================================================================================

_draws = rng(711)
_FIXED_T, _FIXED_D = 3, 2
_FIXED_MU = _draws.normal(size=(_FIXED_T, _FIXED_D))
_FIXED_COV = spd(_draws, _FIXED_T * _FIXED_D)
_FIXED_LAMBDA = _draws.dirichlet(np.ones(_FIXED_T), size=_FIXED_T)


def _fixed_weights_moments():
    m, c = G.mixture_moments(jnp.asarray(_FIXED_LAMBDA), jnp.asarray(_FIXED_MU), jnp.asarray(blocks(_FIXED_COV, _FIXED_T, _FIXED_D)))
    return m.reshape(-1), unblocks(c)


_FIXED_MEAN, _FIXED_OUTPUT_COV = x64(_fixed_weights_moments)()


def _s_weighted_sum(key):
    X = G.joint_gaussian(key, jnp.asarray(_FIXED_MU.reshape(-1)), jnp.asarray(_FIXED_COV)).reshape(_FIXED_T, _FIXED_D)
    Xh = (jnp.asarray(_FIXED_LAMBDA) @ X).reshape(-1)
    return jnp.concatenate([Xh, outer_flat(Xh - _FIXED_MEAN)])


mc_claim("s7_1_1.weighted_sum_moments", f"{SOURCE} §7.1.1",
    "X̂_k = Σ_i λ_i^{(k)}X_i with fixed weights: E X̂_k = Σ_iλ_i^{(k)}μ_i, Cov[X̂_k, X̂_l] = Σ_ij λ_i^{(k)}λ_j^{(l)}Σ_ij",
    np.concatenate([_FIXED_MEAN, _FIXED_OUTPUT_COV.reshape(-1)]), _s_weighted_sum,
    notes=f"T={_FIXED_T} tokens, d={_FIXED_D}, random λ rows on the simplex; 6 + 36 values. Holds; note X̂ is again Gaussian "
          "(a weighted SUM), not a Gaussian mixture as the text calls it (s7_1_1.mixture_reading)")


def _mixture_exact():
    m, c = G.mixture_moments_mixture_reading(jnp.asarray(_FIXED_LAMBDA[0]), jnp.asarray(_FIXED_MU), jnp.asarray(blocks(_FIXED_COV, _FIXED_T, _FIXED_D)))
    return jnp.concatenate([m.reshape(-1), c.reshape(-1)])


def _s_mixture(key):
    k1, k2 = jax.random.split(key)
    i = jax.random.categorical(k1, jnp.log(jnp.asarray(_FIXED_LAMBDA[0])))
    cov_blocks = jnp.asarray(blocks(_FIXED_COV, _FIXED_T, _FIXED_D))
    x = G.joint_gaussian(k2, jnp.asarray(_FIXED_MU)[i], cov_blocks[i, i])
    return jnp.concatenate([x, outer_flat(x - _FIXED_MEAN[:_FIXED_D])])


mc_claim("s7_1_1.mixture_reading", f"{SOURCE} §7.1.1 (the word 'mixture')",
    "the §7.1.1 formulas are the weighted sum's, not those of the Gaussian mixture the text names: the λ-mixture "
    "(token i with probability λ_i^{(1)}) has mean Σλ_iμ_i and covariance Σ_iλ_i(Σ_ii + μ_iμ_iᵀ) − μ̄μ̄ᵀ, not Σ_ij λ_iλ_jΣ_ij",
    lambda: _mixture_exact(), _s_mixture, reading="extension",
    notes="geomjax's reading of a word, not a statement of the thesis: the printed formulas (X̂ = Σλ_iX_i, its joint "
          "Gaussian, both moment formulas) hold (s7_1_1.weighted_sum_moments); only the noun 'mixture' is wrong, a "
          "notation remark (docs/findings.md). This claim checks the mixture's own moments "
          "(geomjax.theory.gaussian.mixture_moments_mixture_reading), which differ from the printed ones")

# ==============================================================================================
# §7.2.3: uniform embedding mixture hypothesis
# ==============================================================================================

STACK_T, STACK_D, STACK_LAYERS = 16, 32, 48
STACK_VARIANTS = {"no_skip": dict(beta=1.0, layernorm=False), "beta0.5": dict(beta=0.5, layernorm=False),
             "beta0.5_ln": dict(beta=0.5, layernorm=True), "beta0.9_ln": dict(beta=0.9, layernorm=True)}


def _ev_stack(variant):
    def ev(budget, key):
        seeds = 8 if budget == "quick" else 64
        st = G.random_attention_stacks(key, seeds, STACK_T, STACK_D, STACK_LAYERS, dtype="float64", **STACK_VARIANTS[variant])
        div, ent = np.asarray(st.diversity), np.asarray(st.entropy)
        value = np.array([np.max(div[:, -1] / div[:, 0]), np.max(np.log(STACK_T) - ent[:, -1])])
        return Evaluation(value=value, details={
            "T": STACK_T, "d": STACK_D, "layers": STACK_LAYERS, "seeds": seeds,
            "diversity_ratio_by_depth_mean": (div / div[:, :1]).mean(0)[:: 8].tolist(),
            "entropy_by_depth_mean": ent.mean(0)[:: 8].tolist(), "log_T": math.log(STACK_T)})
    return ev


_CONVERGE = ("'converge': after 48 layers the diversity ratio and log T − entropy must be three orders of magnitude "
             "below their initial O(1) values (a stack that does not converge keeps them O(1))")

det_claim("s7_2_3.uniform_mixture_no_skip", f"{SOURCE} §7.2.3 (hypothesis)",
     "L random self-attention layers (‖W_q‖, ‖W_k‖, ‖W_v‖ ≤ 2, no skip): all token distributions converge to one "
     "(token diversity → 0, attention entropy → log T)",
     0.0, _ev_stack("no_skip"), Tolerance(rtol=0.0, atol=1e-3, origin=_CONVERGE),
     notes=f"T={STACK_T}, d={STACK_D}, Xavier W (norm capped at 2), L={STACK_LAYERS}; value = (max over seeds of diversity(L)/diversity(0), "
           "max of log T − entropy of layer L); holds iff both ≤ 10⁻³")
det_claim("s7_2_3.uniform_mixture_skip_layernorm", f"{SOURCE} §7.2.3 (β variant)",
     "with skip X ← β·Attn(X) + (1−β)X (β = 0.5) and LayerNorm, the token distributions still converge to one",
     0.0, _ev_stack("beta0.5_ln"), Tolerance(rtol=0.0, atol=1e-3, origin=_CONVERGE),
     notes="same test with β = 0.5 and a parameter-free LayerNorm after each layer; other variants in the report")

# Readings (issue 33): the printed statement, the kind of error a refutation is, the intended statement's claim.
