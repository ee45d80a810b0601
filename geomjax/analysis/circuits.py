"""Reading a model's computation as a sum of parts: residual decomposition, direct logit attribution,
the logit lens, factored QK / OV circuits and composition scores.

The residual stream of a pre-norm transformer is a sum (Elhage et al. 2021, "A Mathematical Framework
for Transformer Circuits", §2): x_L = x_0 + Σ_l (Σ_h z_h W_o[h] + b_o) + Σ_l mlp_l(·), so every
head and every MLP writes an additive component; through the final norm, frozen at its divisor s,
the logits are linear in them::

    model = gj.load("gpt2")
    parts = circuits.residual_decomposition(model, ids)      # labels, (n, B, T, d), sums to the stream
    dla = circuits.direct_logit_attribution(model, parts, answer, wrong)   # (n + 1, B): sums to the
                                                                           # logit difference
    qk, ov = circuits.qk_circuits(model, 0), circuits.ov_circuits(model, 0)   # FactoredMatrix (H, d, d)
    comp = circuits.composition_scores(model, "K")            # (L, H, L, H)

Every pre-norm family of :mod:`geomjax.models.registry` decomposes, exactly, from its family record
(:class:`~geomjax.models.family.Parts`): GPT-NeoX's parallel blocks add attention and MLP to the same input
(the same sum); Gemma's embedding component is E[ids] · √d (the stream entering block 0); Gemma 2/3's
"sandwich" norms n(a) = g ⊙ a / s(a) on the attention output are linear in the heads once their divisor s
is the run's, so head h contributes g ⊙ z_h W_o[h] / s. Post-LN models (BERT, post-LN toys) have no such sum
(every block renormalises the stream): the decomposition raises for them, as for the toys (no per-head
results recorded). TransformerLens folds the norm gains into the weights (``fold_ln``)
before reading circuits; geomjax reads the checkpoint's weights as they are (W_q, W_k, W_v, W_o of
:meth:`~geomjax.models.interface.ModelInterface.head_weights`), so a circuit here is the one the
unnormalised input direction meets after the norm's gain (multiply by diag(g) to fold it).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from geomjax.analysis.lens import ActivationCache, Model
from geomjax.base._repr import with_compact_repr
from geomjax.errors import GeomjaxError
from geomjax.models.interface import kv_expanded
from geomjax.typing import Array, Float, Int

__all__ = [
    "FactoredMatrix",
    "ResidualComponents",
    "accumulated_resid",
    "composition_scores",
    "direct_logit_attribution",
    "ov_circuits",
    "qk_circuits",
    "residual_decomposition",
]

@with_compact_repr
@dataclasses.dataclass(frozen=True)
class ResidualComponents:
    """The residual stream split into what each part of the model wrote.

    Attributes:
      labels: n names: ``embed`` (and ``pos_embed`` for learned positions; BLOOM's ``embed`` is after its
        embedding LayerNorm, Gemma's after its √d scale), then per block l ``L{l}H{h}`` (each head's
        z_h W_o[h]; sandwich norms: g ⊙ z_h W_o[h] / s), ``L{l}.attn_bias`` (b_o, likewise) and ``L{l}.mlp``
        (after its output norm when the family has one).
      components: (n, B, T, d); their sum is ``resid`` to float rounding.
      resid: (B, T, d) the stream they sum to (the last block's output, before the final norm).
      cache: the run's :class:`~geomjax.analysis.lens.ActivationCache` (with every ``hook_resid_pre``, the last
        ``hook_resid_post``, ``ln_final`` and ``ln_final.scale``: what :func:`accumulated_resid` reads).
    """

    labels: tuple[str, ...]
    components: Array
    resid: Array
    cache: ActivationCache


def _check_pre_norm(model: Model, what: str) -> None:
    parts = model.interface.parts
    if parts is None or not parts.pre_norm or parts.final_norm is None:
        kind = "a toy model (no per-head results)" if parts is None else "post-norm"
        raise GeomjaxError(f"{what} needs a pre-norm Hugging Face model (its residual stream is a sum of what each "
                           f"part writes); {model.name!r} is {model.facts.family}, {kind}")


def residual_decomposition(model: Model, text_or_ids, *, attention_mask=None) -> ResidualComponents:
    """Run the model and split its final residual stream into embeddings, every head, every attention bias
    and every MLP (Elhage et al. 2021, §2: x_L = x_0 + Σ_l Σ_h z_h W_o[h] + b_o + mlp_l).

    Args:
      model: a pre-norm :class:`~geomjax.analysis.lens.Model` (every registered family but BERT).
      text_or_ids: a text or ids (T,) / (B, T).
      attention_mask: (B, T) padding mask (:meth:`~geomjax.analysis.lens.Model.run_with_cache`); the
        components at real tokens are the unpadded row's.

    Returns:
      :class:`ResidualComponents` with components (n, B, T, d), n = 1 (+1 for GPT-2's positions) + L (H + 2).
    """
    _check_pre_norm(model, "residual_decomposition")
    f, iface = model.facts, model.interface
    learned = iface.parts.positions == "learned"
    names = ["hook_embed", "hook_pos_embed", "blocks.*.hook_resid_pre", "blocks.*.attn.result", "blocks.*.mlp.out",
             f"blocks.{f.n_layers - 1}.hook_resid_post", "ln_final.scale", "ln_final"]
    names = [n for n in names if n != "hook_pos_embed" or learned]
    _, cache = model.run_with_cache(text_or_ids, names=names, attention_mask=attention_mask)
    if learned and iface.parts.embed_norm is None and iface.parts.embed_scale is None:
        labels, parts = ["embed", "pos_embed"], [cache["hook_embed"], cache["hook_pos_embed"]]
    else:
        labels, parts = ["embed"], [cache["blocks.0.hook_resid_pre"]]
    for l in range(f.n_layers):
        heads, bias = _attention_parts(model, l, cache[f"blocks.{l}.attn.result"])
        labels += [f"L{l}H{h}" for h in range(f.n_heads)] + [f"L{l}.attn_bias", f"L{l}.mlp"]
        parts += [heads[:, :, h] for h in range(f.n_heads)] + [bias, cache[f"blocks.{l}.mlp.out"]]
    return ResidualComponents(tuple(labels), jnp.stack(parts), cache[f"blocks.{f.n_layers - 1}.hook_resid_post"], cache)


def _attention_parts(model: Model, layer: int, res: Float[Array, "B T H d"]
                     ) -> tuple[Float[Array, "B T H d"], Float[Array, "B T d"]]:
    """What each head and the output bias of block ``layer`` add to the stream: z_h W_o[h] and b_o, or through
    a sandwich norm g ⊙ (·) / s with s = sqrt(mean(a²) + eps) of the whole output a = Σ_h z_h W_o[h] + b_o."""
    iface = model.interface
    b_o = jnp.broadcast_to(iface.head_weights(model.params, layer)["b_o"].astype(res.dtype),
                           res.shape[:2] + res.shape[-1:])
    parts = iface.parts
    if parts.out_norms is None:
        return res, b_o
    a = (jnp.sum(res.astype(jnp.float32), axis=2) + b_o).astype(jnp.float32)
    s = jnp.sqrt(jnp.mean(a * a, axis=-1, keepdims=True) + parts.norm_eps)
    g, _ = iface.norm_affine(model.params, iface.layer_key(layer), parts.out_norms[0])
    return (res / s[:, :, None] * g[None, None, None]).astype(res.dtype), (b_o / s * g[None, None]).astype(res.dtype)


def _final_norm(model: Model) -> tuple[Array, Array | None]:
    return model.interface.norm_affine(model.params, model.interface.parts.final_norm)


def _frozen_norm(model: Model, x: Float[Array, "... T d"], scale: Float[Array, "... T 1"], bias: bool
                 ) -> Float[Array, "... T d"]:
    """The final norm with its divisor frozen at ``scale``: ((x − mean x) / s) g [+ b] (RMSNorm: x / s · g)."""
    g, b = _final_norm(model)
    if model.interface.parts.norm == "layernorm":
        x = x - jnp.mean(x, axis=-1, keepdims=True)
    shape = (1,) * (x.ndim - 1) + (-1,)
    y = x / scale * g.reshape(shape)
    return y + b.reshape(shape) if bias and b is not None else y


def direct_logit_attribution(model: Model, parts: ResidualComponents, answer: Int[Array, " B"] | int | list,
                             wrong: Int[Array, " B"] | int | list | None = None, pos: int = -1
                             ) -> tuple[tuple[str, ...], Float[Array, "n B"]]:
    """Each component's direct effect on the logit (difference) at position ``pos``.

    Through the final norm frozen at the run's divisor s (``ln_final.scale``), component c contributes
    ((c − mean c) / s ⊙ g) · u with u = W_U[:, answer] − W_U[:, wrong] (RMSNorm: (c / s ⊙ g) · u);
    the norm's bias contributes b · u (label ``ln_final.bias``). The contributions sum to
    logits[answer] − logits[wrong] exactly (up to float rounding): the norm is affine in x once s is
    fixed, and s is what the run used.

    A family whose logits are soft-capped (Gemma 2: logits = c · tanh(z / c), ``final_logit_softcapping``) is
    attributed before the cap: the contributions sum to z[answer] − z[wrong] with z = ln_final @ W_U, the
    logits before c · tanh(· / c), which is not additive.

    Args:
      model: the model of ``parts``.
      parts: :func:`residual_decomposition`'s result.
      answer, wrong: token ids (B,) or one id; ``wrong`` None attributes the answer's logit itself.
      pos: the position read.

    Returns:
      ``(labels, values)``: the n component labels plus ``ln_final.bias``, values (n + 1, B).
    """
    if not model.has_logits:
        model.logits([0])  # raises the one message naming the missing head
    _, W_U = model.interface.embed_unembed(model.params)
    B = parts.resid.shape[0]
    a = np.broadcast_to(np.asarray(answer, np.int32), (B,))
    u = W_U[:, a].T  # (B, d)
    if wrong is not None:
        u = u - W_U[:, np.broadcast_to(np.asarray(wrong, np.int32), (B,))].T
    s = parts.cache["ln_final.scale"][:, pos]  # (B, 1)
    comps = _frozen_norm(model, parts.components[:, :, pos], s[None], bias=False)  # (n, B, d)
    vals = jnp.einsum("nbd,bd->nb", comps, u)
    _, bias = _final_norm(model)
    b = jnp.zeros((1, B), vals.dtype) if bias is None else (u @ bias)[None]
    return parts.labels + ("ln_final.bias",), jnp.concatenate([vals, b])


def accumulated_resid(model: Model, cache: ActivationCache, apply_ln: bool = True) -> Float[Array, "_ B T d"]:
    """The residual stream before every block and after the last, (L + 1, B, T, d); with ``apply_ln`` each
    passes through the final norm frozen at the final stream's divisor (``ln_final.scale``), so entry L
    equals ``ln_final`` and ``@ W_U`` of entry l is the logit lens at depth l (nostalgebraist 2020;
    TransformerLens ``accumulated_resid(apply_ln=True)``). Needs ``hook_resid_pre``, the last
    ``hook_resid_post`` and (``apply_ln``) ``ln_final.scale`` in the cache."""
    L = model.facts.n_layers
    stack = jnp.stack([cache[f"blocks.{l}.hook_resid_pre"] for l in range(L)] + [cache[f"blocks.{L - 1}.hook_resid_post"]])
    if not apply_ln:
        return stack
    _check_pre_norm(model, "accumulated_resid(apply_ln=True)")
    return _frozen_norm(model, stack, cache["ln_final.scale"][None], bias=True)


@with_compact_repr
@dataclasses.dataclass(frozen=True)
class FactoredMatrix:
    """A (batched) low-rank matrix M = A B kept as its factors, A (..., m, k), B (..., k, n), k ≪ m, n.

    ``full()`` forms it; ``svd()`` gives its k singular triplets from two thin QRs and a k × k SVD
    (A = Q_a R_a, Bᵀ = Q_b R_b, R_a R_bᵀ = U S Vᵀ ⇒ M = (Q_a U) S (Q_b V)ᵀ), without forming M;
    ``norm()`` its Frobenius norm from the k × k Gram matrices (‖A B‖² = tr(AᵀA · B Bᵀ)).
    """

    A: Array
    B: Array

    def full(self) -> Float[Array, "... m n"]:
        return self.A @ self.B

    def svd(self) -> tuple[Float[Array, "... m k"], Float[Array, "... k"], Float[Array, "... k n"]]:
        """(U (..., m, k), S (..., k) descending, Vh (..., k, n)) with M = U diag(S) Vh."""
        qa, ra = jnp.linalg.qr(self.A)
        qb, rb = jnp.linalg.qr(jnp.swapaxes(self.B, -1, -2))
        u, s, vh = jnp.linalg.svd(ra @ jnp.swapaxes(rb, -1, -2), full_matrices=False)
        return qa @ u, s, vh @ jnp.swapaxes(qb, -1, -2)

    def norm(self) -> Float[Array, "..."]:
        """Frobenius norm (...,)."""
        ga = jnp.swapaxes(self.A, -1, -2) @ self.A
        gb = self.B @ jnp.swapaxes(self.B, -1, -2)
        return jnp.sqrt(jnp.maximum(jnp.sum(ga * jnp.swapaxes(gb, -1, -2), axis=(-2, -1)), 0.0))

    @property
    def T(self) -> FactoredMatrix:
        return FactoredMatrix(jnp.swapaxes(self.B, -1, -2), jnp.swapaxes(self.A, -1, -2))


def qk_circuits(model: Model, layer: int) -> FactoredMatrix:
    """W_QK = W_q[h] W_k[kv(h)]ᵀ per head as factors (H, d, K) (H, K, d): the bilinear form x_i W_QK x_jᵀ of
    the attention score before the 1/√K scale, biases and (rotary families) the rotation by i − j
    (Elhage et al. 2021, §3; Song & Zhong eq. (7)). Grouped-query heads share their key factor."""
    w = kv_expanded(model.interface.head_weights(model.params, layer))
    return FactoredMatrix(w["W_q"], jnp.swapaxes(w["W_k"], -1, -2))


def ov_circuits(model: Model, layer: int) -> FactoredMatrix:
    """W_OV = W_v[kv(h)] W_o[h] per head as factors (H, d, K) (H, K, d): what head h writes to the stream for
    each unit of attention to a token with input x is x W_OV (Elhage et al. 2021, §3)."""
    w = kv_expanded(model.interface.head_weights(model.params, layer))
    return FactoredMatrix(w["W_v"], w["W_o"])


def composition_scores(model: Model, kind: str) -> Float[Array, "L H L H"]:
    """Composition scores between every earlier head (l1, h1) and later head (l2, h2) (Elhage et al. 2021,
    "Q-, K- and V-composition"): ‖W_OV^{1} R‖_F / (‖W_OV^{1}‖_F ‖R‖_F) with R = W_QK^{2} (``"Q"``),
    W_QK^{2 T} (``"K"``) or W_OV^{2} (``"V"``), as TransformerLens's ``all_composition_scores``;
    (L, H, L, H), zero where l2 <= l1. Computed from the factors (k × k matrices only)."""
    if kind not in ("Q", "K", "V"):
        raise GeomjaxError(f"kind must be 'Q', 'K' or 'V', got {kind!r}")
    L = model.facts.n_layers
    ov = [ov_circuits(model, l) for l in range(L)]
    right = [ov[l] if kind == "V" else (qk_circuits(model, l) if kind == "Q" else qk_circuits(model, l).T)
             for l in range(L)]
    H = model.facts.n_heads
    out = np.zeros((L, H, L, H), np.float32)
    for l1 in range(L):
        for l2 in range(l1 + 1, L):
            left, r = ov[l1], right[l2]
            m = jnp.einsum("ikd,jdl->ijkl", left.B, r.A)  # B1 A2 (H1, H2, K, K)
            g1 = jnp.swapaxes(left.A, -1, -2) @ left.A  # (H1, K, K)
            g2 = r.B @ jnp.swapaxes(r.B, -1, -2)  # (H2, K, K)
            sq = jnp.einsum("ijkl,ikm,ijmn,jnl->ij", m, g1, m, g2)  # tr(Mᵀ G1 M G2)
            num = jnp.sqrt(jnp.maximum(sq, 0.0))
            out[l1, :, l2, :] = np.asarray(num / (left.norm()[:, None] * r.norm()[None, :]))
    return jnp.asarray(out)
