"""Attention dissection (Song & Zhong §4, App. D): QK decomposition (eq. 7), induction-head study,
W structure (eq. 8), attention entropy.

**Which vector is decomposed.** LayerNorm is nonlinear, so LN(μ + pos + cvec) is not
LN(μ) + LN(pos) + LN(cvec) (the source code applied ``ln_1`` to each part separately — and twice to
the query in two terms — so its four terms did not add up to the scores). geomjax decomposes the
vector the query/key projections actually multiply: the *attention input*

* pre-LN models (GPT-2, the pre-LN toy): x = ln_1(h), the LayerNorm OUTPUT of the block's residual
  input h, computed once by the model's own parameters;
* post-LN / LayerNorm-free models (BERT/MiniLM, post-LN or no-LN toys): x = h, the block's input.

Across C contexts, x_{c,t} = μ + pos_t + cvec_{c,t} (eq. 2 applied to x): μ the global mean,
pos_t = mean_c x_{c,t} − μ, and for a probe sequence cvec_t = x_t − μ − pos_t. Because the model's
scores are bilinear in x, the decomposition below is exact (no linearisation):

    score_{ts} = (x_t W_q + b_q)·(x_s W_k + b_k)/√K
               = x_tᵀ W x_s + x_tᵀ u + vᵀ x_s + β,  W = W_q W_kᵀ/√K, u = W_q b_k/√K, v = W_k b_q/√K,
                                                    β = b_q·b_k/√K
               = pos_tᵀW pos_s + pos_tᵀW cvec_s + cvec_tᵀW pos_s + cvec_tᵀW cvec_s      (eq. 7)
                 + [μᵀW x_s + (x_t − μ)ᵀW μ]                                             ("mean")
                 + [x_tᵀ u + vᵀ x_s + β]                                                   ("bias")

With ``remove_mean=False`` (App. D.1, Fig. 28: "global mean not removed"; the source code's
cvec = h − pos) μ is folded into cvec (cvec_t = x_t − pos_t) and the mean term is zero. Either way
pos_pos + pos_cvec + cvec_pos + cvec_cvec + mean + bias equals the model's pre-softmax scores
exactly (up to rounding); ``tests/unit/test_attention.py`` checks it against the model's own attention
probabilities and a NumPy re-implementation.

**Rotary models (Llama, Mistral).** Positions do not enter x: they rotate the projected queries
and keys, q̃_t = R_t(W_qᵀx_t + b_q), k̃_s = R_s(W_kᵀx_s + b_k), so score_{ts} = q̃_t·k̃_s/√K =
x_tᵀ W_q R_{s−t} W_kᵀ x_s + (bias terms) depends on s − t even for two identical inputs. "pos" here
is still the positional component of the *pre-rotation* attention input x (eq. 2 applied to
RMSNorm(h)); each part of x is projected and rotated by its own position (rotation is linear, so the
six terms still add up to the model's scores exactly). pos_pos then measures how the positional
part of x, *after* the model's rotation, shapes the scores; the purely rotational (relative
position) effect on cvec_cvec is inside that term too, not in pos_pos. **ALiBi (BLOOM)** adds
m_h·s to every score of key s; that term is part of ``bias``.

**Per-head q/k norms (Qwen 3, Gemma 3), soft-capping and other scales (Gemma 2/3).** A q/k RMSNorm
divides the projected query of token t by its root mean square r_t and multiplies by the gain g:
q̃_t = g ⊙ (W_qᵀx_t + b_q) / r_t. With the model's normalisers r_t held at their values, every part is
scaled the same way (g ⊙ part / r_t) and the six terms still add up to the model's scores exactly; they
are then the parts of the *normalised* query and key (the normaliser itself depends on all parts of x_t).
Scores scaled by query_pre_attn_scalar^(−1/2) instead of K^(−1/2) take that scale; with soft-capping the
parts add up to the scores before the cap, c · tanh(total / c) is what the softmax reads (``attention``).

Everything here acts on arrays (attention inputs, weights, scores); the model-facing half — reading
a model's attention inputs, per-head weights and estimating μ/pos over windows of a corpus — is
:mod:`geomjax.tools.attention_probe`, which calls these functions. Rotary tables and ALiBi slopes come
from :mod:`geomjax.theory.positional`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from geomjax.base._checks import as_real_array, float64_aware
from geomjax.errors import GeomjaxError
from geomjax.theory.positional import apply_rotary, rotary_from_inv_freq
from geomjax.typing import Array, Float, Int, Key, Scalar

__all__ = [
    "AttentionBasis",
    "COMPONENTS",
    "HEAD_TYPES",
    "QKParts",
    "attention_entropy",
    "causal_softmax",
    "classify_heads",
    "component_strength",
    "haar_orthogonal",
    "hard_threshold",
    "head_pattern_scores",
    "layer_qk_decomposition",
    "low_rank_diag_fit",
    "matrix_smoothness",
    "ov_copying_scores",
    "qk_decomposition",
    "repeated_random_tokens",
    "rotate_offdiagonal",
    "topleft_energy_fraction",
    "universal_threshold",
    "w_matrix",
    "w_structure",
]

COMPONENTS = ("pos_pos", "pos_cvec", "cvec_pos", "cvec_cvec")
"""The four terms of Song & Zhong eq. (7), in order (query part first)."""

HEAD_TYPES = ("self_token", "neighbours", "copying")
"""Song & Zhong §4.1's three head types: attention to previous identical tokens (cvec-cvec),
to neighbouring tokens (pos-pos), and to the token being copied (shifted diagonal)."""


# ------------------------------------------------------------------------------ QK decomposition


@struct.dataclass
class AttentionBasis:
    """Global mean and positional basis of every block's attention input (eq. 2 applied to x).

    Attributes:
      mean: (L, d) μ per layer.
      pos: (L, T, d) pos_t per layer (sums to 0 over t).
      n_contexts: number of windows averaged.
    """

    mean: Array
    pos: Array
    n_contexts: int = struct.field(pytree_node=False, default=0)

    @property
    def n_positions(self) -> int:
        """T, the number of positions the basis was estimated on."""
        return int(self.pos.shape[1])


@struct.dataclass
class QKParts:
    """Song & Zhong eq. (7) parts of one head's pre-softmax scores, each (..., T, T) [query, key].

    ``pos_pos + pos_cvec + cvec_pos + cvec_cvec + mean + bias == total`` (see the module docstring);
    ``attention`` is the (causal) softmax of ``total``.
    """

    pos_pos: Array
    pos_cvec: Array
    cvec_pos: Array
    cvec_cvec: Array
    mean: Array
    bias: Array
    total: Array
    attention: Array

    def sum_of_parts(self) -> Array:
        """pos_pos + pos_cvec + cvec_pos + cvec_cvec + mean + bias (equals ``total``)."""
        return self.pos_pos + self.pos_cvec + self.cvec_pos + self.cvec_cvec + self.mean + self.bias


@float64_aware(arrays=('scores',))
@functools.partial(jax.jit, static_argnames=("causal",))
def causal_softmax(scores: Float[Array, "... T S"], causal: bool = True) -> Float[Array, "... T S"]:
    """Causal attention softmax(scores) per row (Vaswani et al. eq. 1), keys s > t masked when causal.

    Masked scores become the dtype minimum before the softmax, as the geomjax models (and Hugging
    Face eager attention) do, so this reproduces the models' probabilities. Shapes (..., T, S).
    """
    if causal:
        T, S = scores.shape[-2:]
        mask = jnp.tril(jnp.ones((T, S), bool))
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    return jax.nn.softmax(scores, axis=-1)


def _rotate(a: Float[Array, "T K"], cos: Array | None, sin: Array | None) -> Array:
    """Rotate row t of a by position t (rotary models); identity when cos is None."""
    return a if cos is None else apply_rotary(a, cos, sin)


def _normalizer(full, gain, eps):
    """part -> gain ⊙ part / r_t with r_t = RMS of the whole projection (T, K) row t (identity without a gain)."""
    if gain is None:
        return lambda a: a
    r = jax.lax.rsqrt(jnp.mean(full * full, axis=-1, keepdims=True) + eps)
    return lambda a: gain[None] * (a * r)


@float64_aware(arrays=('x', 'mean', 'pos', 'W_q', 'W_k', 'b_q', 'b_k', 'rope_inv_freq', 'q_norm', 'k_norm'))
@functools.partial(jax.jit, static_argnames=("remove_mean", "causal"))
def qk_decomposition(
    x: Float[Array, "T d"],
    mean: Float[Array, " d"],
    pos: Float[Array, "Tp d"],
    W_q: Float[Array, "d K"],
    W_k: Float[Array, "d K"],
    b_q: Float[Array, " K"] | None = None,
    b_k: Float[Array, " K"] | None = None,
    *,
    remove_mean: bool = True,
    causal: bool = True,
    rope_inv_freq: Float[Array, " K2"] | None = None,
    alibi_slope: Float[Array, ""] | None = None,
    scale: Float[Array, ""] | None = None,
    q_norm: Float[Array, " K"] | None = None,
    k_norm: Float[Array, " K"] | None = None,
    norm_eps: float | Float[Array, ""] = 1e-6,
    softcap: Float[Array, ""] | None = None,
) -> QKParts:
    """Decompose one head's scores into pos/cvec cross terms (Song & Zhong eq. (7)), exactly.

    With m = μ (``remove_mean``) or 0, p_t = pos_t, c_t = x_t − m − p_t, each part is projected and
    (rotary models) rotated by its own position: Q_p = R(p W_q), Q_c = R(c W_q), Q_m = R(m W_q),
    Q_b = R(b_q) (R = identity without rotary), likewise K_* for keys; with 1/√K:
    pos_pos = Q_p K_pᵀ, pos_cvec = Q_p K_cᵀ, cvec_pos = Q_c K_pᵀ, cvec_cvec = Q_c K_cᵀ,
    mean = Q_m (K_p + K_c + K_m)ᵀ + (Q_p + Q_c) K_mᵀ (= mᵀW x_s + (x_t − m)ᵀW m without rotary),
    bias = (Q_p + Q_c + Q_m) K_bᵀ + Q_b (K_p + K_c + K_m + K_b)ᵀ, plus BLOOM's ALiBi m_h·s;
    total = the model's scores; the parts sum to the total. With q/k norms every query part is
    g_q ⊙ part / r_t before the rotation (r_t the model's RMS of the whole query; keys likewise).

    Args:
      x: (T, d) attention input of one sequence (norm output for pre-norm models; see module doc).
      mean: (d,) global mean of the attention input.
      pos: (Tp, d) positional basis estimated on Tp >= T positions (the first T are used).
      W_q, W_k: (d, K) the head's projections (W_k: the shared kv head for grouped-query models).
      b_q, b_k: (K,) biases or None.
      remove_mean: True: μ is its own term (App. D.1 Fig. 27); False: μ stays inside cvec (Fig. 28).
      causal: mask keys after the query in ``attention``.
      rope_inv_freq: (R/2,) rotary inverse frequencies (Llama / Mistral / Qwen / Gemma: R = K; GPT-NeoX: R < K,
        the first R coordinates rotated), or None.
      alibi_slope: the head's ALiBi slope (BLOOM), or None.
      scale: the score scale (Gemma 2/3: query_pre_attn_scalar^(−1/2)); None: 1/√K.
      q_norm, k_norm: (K,) gains of per-head q/k RMSNorms (Qwen 3; Gemma 3: 1 + w), or None.
      norm_eps: their eps.
      softcap: Gemma 2's c: ``attention`` is the softmax of c · tanh(total / c); None: of total.

    Returns:
      :class:`QKParts` with (T, T) arrays.

    Raises:
      ValueError: T larger than the positions pos was estimated on, or mismatched widths.
    """
    T, d = x.shape
    if pos.ndim != 2 or pos.shape[1] != d or mean.shape != (d,):
        raise GeomjaxError(f"qk_decomposition: x is (T, d) = {x.shape} but pos is {pos.shape} and mean {mean.shape}; "
                         "they must share d")
    if T > pos.shape[0]:
        raise GeomjaxError(f"qk_decomposition: the sequence has {T} positions but the positional basis was estimated "
                         f"on only {pos.shape[0]}; estimate pos on windows of at least {T} tokens "
                         "(attention_probe.estimate_attention_basis) or use a shorter sequence")
    K = W_q.shape[-1]
    s = 1.0 / math.sqrt(K) if scale is None else scale
    cos, sin = (None, None) if rope_inv_freq is None else rotary_from_inv_freq(rope_inv_freq, T, x.dtype)
    m = mean if remove_mean else jnp.zeros_like(mean)
    p = pos[:T]
    c = x - m[None] - p
    bq = jnp.zeros((K,), x.dtype) if b_q is None else b_q
    bk = jnp.zeros((K,), x.dtype) if b_k is None else b_k
    ones = jnp.ones((T, 1), x.dtype)
    qn = _normalizer(x @ W_q + bq[None], q_norm, norm_eps)
    kn = _normalizer(x @ W_k + bk[None], k_norm, norm_eps)
    Q = {n: _rotate(qn(v), cos, sin) for n, v in
         dict(p=p @ W_q, c=c @ W_q, m=ones * (m @ W_q)[None], b=ones * bq[None]).items()}
    Kk = {n: _rotate(kn(v), cos, sin) for n, v in
          dict(p=p @ W_k, c=c @ W_k, m=ones * (m @ W_k)[None], b=ones * bk[None]).items()}
    xk = Kk["p"] + Kk["c"] + Kk["m"]
    alibi = 0.0 if alibi_slope is None else alibi_slope * jnp.arange(T, dtype=x.dtype)[None, :]
    parts = dict(
        pos_pos=(Q["p"] @ Kk["p"].T) * s,
        pos_cvec=(Q["p"] @ Kk["c"].T) * s,
        cvec_pos=(Q["c"] @ Kk["p"].T) * s,
        cvec_cvec=(Q["c"] @ Kk["c"].T) * s,
        mean=(Q["m"] @ xk.T + (Q["p"] + Q["c"]) @ Kk["m"].T) * s,
        bias=((Q["p"] + Q["c"] + Q["m"]) @ Kk["b"].T + Q["b"] @ (xk + Kk["b"]).T) * s + alibi,
    )
    qx = _rotate(qn(x @ W_q + bq[None]), cos, sin)
    kx = _rotate(kn(x @ W_k + bk[None]), cos, sin)
    total = (qx @ kx.T) * s + alibi
    capped = total if softcap is None else jnp.tanh(total / softcap) * softcap
    return QKParts(**parts, total=total, attention=causal_softmax(capped, causal))


@functools.partial(jax.jit, static_argnames=("layer", "remove_mean", "causal"))
def layer_qk_decomposition(x: Float[Array, "T d"], basis: AttentionBasis, weights: dict, layer: int, *,
                           remove_mean: bool = True, causal: bool = True) -> QKParts:
    """eq. (7) parts for every head of one layer: :class:`QKParts` of (H, T, T) arrays.

    Args:
      x: (T, d) the layer's attention input for one sequence.
      basis: from :func:`geomjax.tools.attention_probe.estimate_attention_basis`.
      weights: :func:`geomjax.tools.attention_probe.qk_weights` of that layer (its rotary frequencies / ALiBi slopes are used
        when present and non-zero; its score scale, q/k norm gains and soft-cap when present).
      layer: index into ``basis``.
    """
    if not 0 <= layer < basis.mean.shape[0]:
        raise GeomjaxError(f"layer_qk_decomposition: layer must lie in [0, {basis.mean.shape[0]}), got {layer}")
    if x.shape[0] > basis.n_positions:
        raise GeomjaxError(f"layer_qk_decomposition: the sequence has {x.shape[0]} positions but the positional basis "
                         f"covers {basis.n_positions}; estimate it on longer windows or shorten the sequence")
    inv = weights.get("rope_inv_freq")
    slopes = weights.get("alibi_slope", jnp.zeros(weights["W_q"].shape[0], x.dtype))
    extra = {k: weights[k] for k in ("scale", "q_norm", "k_norm", "norm_eps", "softcap") if k in weights}
    f = lambda wq, wk, bq, bk, sl: qk_decomposition(x, basis.mean[layer], basis.pos[layer], wq, wk, bq, bk,
                                                    remove_mean=remove_mean, causal=causal,
                                                    rope_inv_freq=inv, alibi_slope=sl, **extra)
    return jax.vmap(f)(weights["W_q"], weights["W_k"], weights["b_q"], weights["b_k"], slopes)


# ------------------------------------------------------------------------- induction-head study


def repeated_random_tokens(key: Key, n_tokens: int = 8, n_repeats: int = 3, *, low: int = 0,
                           high: int, n_sequences: int = 1) -> Int[Array, "S T"]:
    """Song & Zhong Fig. 4 probe: n_tokens distinct random ids in [low, high), repeated n_repeats times.

    The source used 8 ids in [1000, 10000) repeated 3 times (T = 24) for GPT-2.

    Returns:
      (n_sequences, n_tokens * n_repeats) int32 ids.

    Raises:
      ValueError: fewer than n_tokens ids in the range, or n_repeats < 2.
    """
    if n_tokens < 2 or n_repeats < 2:
        raise GeomjaxError(f"repeated_random_tokens: need n_tokens >= 2 and n_repeats >= 2 (a repeat to copy from), "
                         f"got {n_tokens}, {n_repeats}")
    if high - low < n_tokens:
        raise GeomjaxError(f"repeated_random_tokens: the id range [{low}, {high}) has fewer than n_tokens={n_tokens} ids")
    return _repeated(key, int(n_tokens), int(n_repeats), int(low), int(high), int(n_sequences))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5))
def _repeated(key, n_tokens, n_repeats, low, high, n_sequences):
    keys = jax.random.split(key, n_sequences)
    seqs = jax.vmap(lambda k: jax.random.choice(k, high - low, (n_tokens,), replace=False))(keys) + low
    return jnp.tile(seqs.astype(jnp.int32), (1, n_repeats))


def _pattern_masks(ids: np.ndarray, window: int) -> dict[str, np.ndarray]:
    """Boolean (T, T) [query, key] masks of the three head types for one id sequence."""
    ids = np.asarray(ids)
    T = ids.shape[0]
    t = np.arange(T)[:, None]
    s = np.arange(T)[None, :]
    same = (ids[None, :] == ids[:, None]) & (s < t)
    prev = np.zeros((T, T), bool)
    prev[:, 1:] = ids[None, :-1] == ids[:, None]
    copy = prev & (s <= t) & (s >= 1)
    neigh = (s <= t) & (s >= t - window)
    return {"self_token": same, "neighbours": neigh, "copying": copy}


@float64_aware(arrays=('attn', 'ids'))
def head_pattern_scores(attn: Float[Array, "H T T"], ids: Int[Array, " T"], *, window: int = 2,
                        causal: bool = True) -> dict[str, np.ndarray]:
    """Attention mass of each head on the three §4.1 patterns (Song & Zhong Fig. 4), per head.

    Over the query rows t that have an earlier occurrence of their token: ``self_token`` = mass on
    the earlier occurrences (s < t, ids_s = ids_t); ``copying`` (prefix matching, Olsson et al.) =
    mass on the tokens right after an earlier occurrence (ids_{s−1} = ids_t, 1 <= s <= t);
    ``neighbours`` = mass on t − window <= s <= t. ``*_baseline``: the same for uniform attention
    over the visible keys (causal: s <= t).

    Args:
      attn: (H, T, T) attention probabilities of one sequence.
      ids: (T,) its token ids.

    Returns:
      dict of (H,) float arrays: the three scores and their baselines.

    Raises:
      ValueError: shapes disagree, or no token repeats (nothing to score).
    """
    a = np.asarray(attn, np.float64)
    ids = np.asarray(ids)
    if a.ndim != 3 or a.shape[1:] != (ids.shape[0], ids.shape[0]):
        raise GeomjaxError(f"head_pattern_scores: attn must be (H, T, T) with T = len(ids) = {ids.shape[0]}, got {a.shape}")
    masks = _pattern_masks(ids, window)
    rows = masks["self_token"].any(axis=1)
    if not rows.any():
        raise GeomjaxError("head_pattern_scores: no token occurs twice in ids; use a repeated sequence "
                         "(repeated_random_tokens)")
    T = ids.shape[0]
    visible = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
    uni = visible / visible.sum(axis=1, keepdims=True)
    out = {}
    for name, mk in masks.items():
        mk = mk & visible
        out[name] = (a[:, rows] * mk[rows]).sum(-1).mean(-1)
        out[name + "_baseline"] = np.full(a.shape[0], (uni[rows] * mk[rows]).sum(-1).mean())
    return out


def component_strength(parts: QKParts, causal: bool = True) -> dict[str, Float[Array, "..."]]:
    """How much each eq. (7) component varies within a query row (per head): what decides softmax.

    A constant added to a row does not change the attention (App. D.1), so the strength of a
    component is the root-mean-square over visible (query, key) pairs of its row-centered values,
    query rows t >= 1.

    Returns:
      dict component -> (H,) array (also for "mean" and "bias"), plus "dominant": (H,) index into
      :data:`COMPONENTS` of the strongest of the four.
    """
    out = {}
    for name in COMPONENTS + ("mean", "bias"):
        v = np.asarray(getattr(parts, name), np.float64)
        if v.ndim == 2:
            v = v[None]
        T = v.shape[-1]
        vis = np.tril(np.ones((T, T), bool)) if causal else np.ones((T, T), bool)
        vis[0] = False
        n_row = vis.sum(1, keepdims=True)
        rm = (v * vis).sum(-1, keepdims=True) / np.maximum(n_row, 1)
        out[name] = np.sqrt((((v - rm) ** 2) * vis).sum((-2, -1)) / vis.sum())
    out["dominant"] = np.argmax(np.stack([out[c] for c in COMPONENTS]), axis=0)
    return out


def classify_heads(scores: dict[str, Float[Array, "..."]], *, min_lift: float = 0.15) -> list[str]:
    """Assign each head a §4.1 type: the pattern whose attention mass most exceeds its uniform baseline.

    Args:
      scores: :func:`head_pattern_scores` output (possibly averaged over probe sequences).
      min_lift: a head whose best lift (score − baseline) is below this is ``"other"``.

    Returns:
      list of H labels from :data:`HEAD_TYPES` or ``"other"``.
    """
    lifts = np.stack([np.asarray(scores[n]) - np.asarray(scores[n + "_baseline"]) for n in HEAD_TYPES])
    best = np.argmax(lifts, axis=0)
    return [HEAD_TYPES[b] if lifts[b, h] >= min_lift else "other" for h, b in enumerate(best)]


@float64_aware(arrays=('W_E', 'W_v', 'W_o', 'W_U'))
def ov_copying_scores(W_E: Float[Array, "V d"], W_v: Float[Array, "H d K"], W_o: Float[Array, "H K d"],
                      W_U: Float[Array, "d V"]) -> np.ndarray:
    """Copying score of each head's OV circuit (Elhage et al. 2021): Σ Re λ / Σ |λ| of W_E W_v W_o W_U.

    The nonzero eigenvalues of the (V, V) circuit equal those of the (K, K) matrix W_o W_U W_E W_v,
    which is what is diagonalised. 1 means the head raises the logit of the token it attends to.
    LayerNorms are not folded in.

    Returns:
      (H,) array in [-1, 1].
    """
    E = np.asarray(W_E, np.float64)
    U = np.asarray(W_U, np.float64)
    UE = U @ E  # (d, d)
    out = []
    for h in range(np.shape(W_v)[0]):
        M = np.asarray(W_o[h], np.float64) @ UE @ np.asarray(W_v[h], np.float64)
        lam = np.linalg.eigvals(M)
        out.append(float(lam.real.sum() / max(np.abs(lam).sum(), 1e-300)))
    return np.asarray(out)


@float64_aware(arrays=('attn',))
@functools.partial(jax.jit, static_argnames=("skip_first",))
def attention_entropy(attn: Float[Array, "... T S"], *, skip_first: int = 1) -> Array:
    """Mean Shannon entropy (nats) of attention rows, −Σ_s p_s log p_s, over query rows t >= skip_first.

    Args:
      attn: (..., T, S) probabilities (rows sum to 1).
      skip_first: leading query rows left out (row 0 of a causal head has entropy 0).

    Returns:
      (...,) mean entropy per leading index.
    """
    a = jnp.asarray(attn)
    ent = -jnp.sum(jnp.where(a > 0, a * jnp.log(jnp.where(a > 0, a, 1.0)), 0.0), axis=-1)
    return jnp.mean(ent[..., skip_first:], axis=-1)


# ---------------------------------------------------------------------------------- W structure


@float64_aware(arrays=('W_q', 'W_k'))
@jax.jit
def w_matrix(W_q: Float[Array, "... d K"], W_k: Float[Array, "... d K"]) -> Float[Array, "... d d"]:
    """W = W_q W_kᵀ / √d_head per head (Song & Zhong eq. (8)); LayerNorm and biases not folded in."""
    K = W_q.shape[-1]
    return jnp.einsum("...ik,...jk->...ij", W_q, W_k) / math.sqrt(K)


@float64_aware(arrays=('W', 'V'))
@jax.jit
def rotate_offdiagonal(W: Float[Array, "d d"], V: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """Vᵀ (W − diag W) V: the off-diagonal part of W in the basis of V's columns (Song & Zhong Fig. 5).

    With V the full right singular basis of the positional basis P, entry (i, j) is v_iᵀ (W − D) v_j,
    so the top-left block is W's action within P's leading directions.
    """
    Wo = W - jnp.diag(jnp.diag(W))
    return V.T @ Wo @ V


@float64_aware(arrays=('R',))
def universal_threshold(R: Float[Array, "d d"], n: int | None = None) -> Array:
    """√(2 log n²) · std(R), the threshold of Song & Zhong Fig. 5 (the authors' released code: √(2 log C²)·std).

    n defaults to the side of R, so n² is the number of entries (Donoho–Johnstone's universal
    threshold √(2 log N) σ for N entries); std is the population standard deviation of all entries.
    """
    n = R.shape[0] if n is None else int(n)
    return math.sqrt(2.0 * math.log(n * n)) * _std(jnp.asarray(R))


@jax.jit
def _std(R):
    return jnp.std(R)


@float64_aware(arrays=('R',))
@jax.jit
def hard_threshold(R: Float[Array, "..."], tau: Scalar) -> Float[Array, "..."]:
    """Hard-threshold a matrix (Song & Zhong Fig. 5 denoising): keep entries with |R| > tau, zero the rest."""
    return jnp.where(jnp.abs(R) > tau, R, 0.0)


@float64_aware(arrays=('R',))
def topleft_energy_fraction(R: Float[Array, "d d"], Ks: Sequence[int]) -> np.ndarray:
    """Energy fraction Σ_{i,j<K} R_ij² / Σ R_ij² of the top-left K×K block of R (d, d), per K (Song & Zhong §4.2).

    Returns a (len(Ks),) float64 array (NaN if R is zero).
    """
    R2 = np.asarray(R, np.float64) ** 2
    tot = R2.sum()
    return np.asarray([R2[:k, :k].sum() / tot if tot > 0 else np.nan for k in Ks])


@functools.partial(jax.jit, static_argnames=("d",))
def haar_orthogonal(key: Key, d: int) -> Array:
    """A Haar-distributed random (d, d) orthogonal matrix (QR of a Gaussian with the sign fix; Mezzadri 2007).

    Used as the random-rotation baseline of the Song & Zhong Fig. 5 energy fractions.
    """
    Z = jax.random.normal(key, (d, d))
    Q, R = jnp.linalg.qr(Z)
    return Q * jnp.sign(jnp.diag(R))[None, :]


@functools.partial(jax.jit, static_argnums=2)
def _low_rank_diag_fit(W, V_K, n_iter):
    def body(_, D):
        L = V_K.T @ (W - jnp.diag(D)) @ V_K
        return jnp.diag(W - V_K @ L @ V_K.T)

    D = jax.lax.fori_loop(0, n_iter - 1, body, jnp.diag(W))
    L = V_K.T @ (W - jnp.diag(D)) @ V_K
    D = jnp.diag(W - V_K @ L @ V_K.T)
    res = W - V_K @ L @ V_K.T - jnp.diag(D)
    return L, D, jnp.linalg.norm(res) / jnp.linalg.norm(W)


@float64_aware(arrays=('W', 'V_K'))
def low_rank_diag_fit(W: Float[Array, "d d"], V_K: Float[Array, "d K"], n_iter: int = 50
                      ) -> tuple[Array, Array, float]:
    """Least-squares fit W ≈ V_K L V_Kᵀ + D (Song & Zhong eq. (8)), D diagonal, by block coordinate descent.

    Starting from D = diag(W): L = V_Kᵀ (W − D) V_K (exact minimiser for orthonormal V_K), then
    D = diag(W − V_K L V_Kᵀ), repeated ``n_iter`` times; the objective never increases.

    Returns:
      (L (K, K), D (d,) the diagonal, relative residual ‖W − V L Vᵀ − D‖_F / ‖W‖_F).
    """
    L, D, r = _low_rank_diag_fit(jnp.asarray(W), jnp.asarray(V_K), max(1, int(n_iter)))
    return L, D, float(r)


def _surviving_fraction(R_thr, Ks) -> np.ndarray:
    """Top-left energy fraction of a thresholded matrix; 0 when no entry survived the threshold
    (no energy anywhere, so none concentrated in the block — typical of a random rotation)."""
    f = topleft_energy_fraction(R_thr, Ks)
    return np.where(np.isnan(f), 0.0, f)


@float64_aware(arrays=('W', 'P'))
def w_structure(W: Float[Array, "d d"], P: Float[Array, "T d"], key: Key, *,
                Ks: Sequence[int] = (10, 20, 30, 40, 50, 60), n_random: int = 8, fit_K: int = 20) -> dict[str, Any]:
    """Song & Zhong §4.2 / Fig. 5 analysis of one head's W against the positional basis P.

    Rotates the off-diagonal of W by the full right singular basis V of P, thresholds at
    √(2 log d²)·std, and measures the fraction of thresholded energy in the top-left K×K block;
    the baseline repeats this with ``n_random`` Haar-random rotations. Also fits eq. (8),
    W ≈ V_K L V_Kᵀ + D with K = ``fit_K``, against the same fit on a random K-dim subspace.

    Returns:
      dict with ``R`` (d, d) rotated off-diagonal, ``R_thr`` thresholded, ``tau``, ``diag`` (d,),
      ``Ks``, ``frac`` / ``frac_random`` (len(Ks),) thresholded top-left energy fractions (0 when no
      entry survives the threshold, which is common for random rotations), ``n_survivors``,
      ``frac_raw`` / ``frac_raw_random`` (unthresholded), ``fit_residual`` and
      ``fit_residual_random`` (relative residuals), ``diag_energy`` (‖diag W‖² / ‖W‖²).
    """
    W = as_real_array(W, "w_structure", "W")
    P = as_real_array(P, "w_structure", "P")
    d = W.shape[0]
    if W.shape != (d, d) or P.ndim != 2 or P.shape[1] != d:
        raise GeomjaxError(f"w_structure: W must be (d, d) and P (T, d) with the same d, got {W.shape} and {P.shape}")
    Ks = [int(k) for k in Ks if int(k) <= d]
    _, _, Vh = jnp.linalg.svd(P, full_matrices=True)
    V = Vh.T
    R = rotate_offdiagonal(W, V)
    tau = universal_threshold(R)
    R_thr = hard_threshold(R, tau)
    fr, fr_raw, res_rand = [], [], []
    keys = jax.random.split(key, n_random)
    for k in keys:
        Q = haar_orthogonal(k, d)
        Rq = rotate_offdiagonal(W, Q)
        fr.append(_surviving_fraction(hard_threshold(Rq, universal_threshold(Rq)), Ks))
        fr_raw.append(topleft_energy_fraction(Rq, Ks))
        res_rand.append(low_rank_diag_fit(W, Q[:, :fit_K])[2])
    _, _, res = low_rank_diag_fit(W, V[:, :fit_K])
    return dict(R=R, R_thr=R_thr, tau=float(tau), diag=jnp.diag(W), Ks=Ks,
                frac=_surviving_fraction(R_thr, Ks), frac_random=np.mean(fr, axis=0),
                n_survivors=int(jnp.sum(R_thr != 0)),
                frac_raw=topleft_energy_fraction(R, Ks), frac_raw_random=np.mean(fr_raw, axis=0),
                fit_residual=res, fit_residual_random=float(np.mean(res_rand)),
                diag_energy=float(jnp.sum(jnp.diag(W) ** 2) / jnp.sum(W**2)))


# ------------------------------------------------------------------------------- smoothness


@float64_aware(arrays=('M',))
def matrix_smoothness(M: Float[Array, "T S"], *, hf_cutoff: float = 0.25) -> dict[str, float]:
    """Smoothness of a score map such as the pos-pos component (Song & Zhong §5.2 "fractured" patterns).

    * ``tv``: normalised total variation, the mean absolute difference between vertically and
      horizontally adjacent entries divided by the standard deviation of all entries (0 for a
      constant-slope-free smooth map; about 2/√π ≈ 1.13 for i.i.d. entries).
    * ``hf_dct``: the fraction of the non-DC energy of the orthonormal 2-D DCT-II, D M Dᵀ, at
      frequencies (k1, k2) with max(k1 / T, k2 / S) >= ``hf_cutoff`` (0 for a smooth map; about
      1 − hf_cutoff² for i.i.d. entries).

    Args:
      M: (T, S) matrix, T, S >= 2.
      hf_cutoff: relative frequency that counts as "high".

    Returns:
      dict with ``tv`` and ``hf_dct``.
    """
    import scipy.fft

    M = np.asarray(M, np.float64)
    if M.ndim != 2 or min(M.shape) < 2:
        raise GeomjaxError(f"matrix_smoothness: M must be 2-D with both sides >= 2, got shape {M.shape}")
    if not np.isfinite(M).all():
        raise GeomjaxError("matrix_smoothness: M has NaN/Inf entries; mask with a finite value instead")
    sd = M.std()
    diffs = np.concatenate([np.abs(np.diff(M, axis=0)).ravel(), np.abs(np.diff(M, axis=1)).ravel()])
    tv = float(diffs.mean() / sd) if sd > 0 else 0.0
    F = scipy.fft.dctn(M, type=2, norm="ortho")
    E = F**2
    E[0, 0] = 0.0
    T, S = M.shape
    k1 = np.arange(T)[:, None] / T
    k2 = np.arange(S)[None, :] / S
    hi = np.maximum(k1, k2) >= hf_cutoff
    tot = E.sum()
    return {"tv": tv, "hf_dct": float(E[hi].sum() / tot) if tot > 0 else 0.0}
