"""BLOOM (BigScience 2022) as a Flax linen module, numerically equal to Hugging Face's BloomForCausalLM.

Pre-LN decoder without position embeddings: x_0 = LN_emb(E[ids]) (the embedding LayerNorm);
x_{l+1} = x_l + attn(ln_1 x_l), then + mlp(ln_2 ·) with mlp = proj(gelu_tanh(fc ·)); logits =
ln_f(x_L) @ Eᵀ (tied). Positions enter only through ALiBi (Press et al. 2022, eq. (1)): head h adds
m_h · s to the score of key s (softmax-equivalent to −m_h (t − s); Hugging Face's form), with the
slopes of :func:`alibi_slopes` (the geometric sequence 2^(−8h/n) for the largest power of two
n ≤ H, then every other slope of the 2n sequence for the remaining heads).

``model.apply({"params": params}, ids)`` returns ``(logits, Intermediates)``; ``hidden_states`` is
Hugging Face's ``output_hidden_states`` (the first entry after the embedding LayerNorm, the last after
``ln_f``), ``residual`` the same stream before ``ln_f``.

Parameter tree::

    word_embeddings/embedding (V, d)  word_embeddings_ln/{scale, bias}  ln_f/{scale, bias}
    [lm_head/kernel (d, V) when untied]
    h_<l>/ln_1, h_<l>/ln_2: {scale, bias}
    h_<l>/attn/{q,k,v}/kernel (d, H, K), bias (H, K);  h_<l>/attn/o/kernel (H, K, d), bias (d,)
    h_<l>/mlp/fc/kernel (d, 4d), bias;  h_<l>/mlp/proj/kernel (4d, d), bias
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from geomjax.models.common import (
    BLOCK_HOOKS,
    MLP,
    Embed,
    HFConfig,
    HookPoint,
    Intermediates,
    LayerNorm,
    MultiHeadAttention,
    attention_mask_4d,
    check_input_ids,
    check_segment_ids,
    decoder_head,
    hook_points,
    pre_norm_block,
    run_blocks,
    scaled_dot_product_attention,
)
from geomjax.typing import Array, ArrayLike, Float, Int

__all__ = ["Bloom", "BloomConfig", "alibi_bias", "alibi_slopes"]


@dataclasses.dataclass(frozen=True)
class BloomConfig(HFConfig):
    """Hyperparameters of a BLOOM model (hashable; Hugging Face ``BloomConfig`` names).

    Attributes:
      vocab_size, hidden_size, n_layer, n_head: V, d, L, H (K = d / H; MLP width 4d).
      layer_norm_epsilon: LayerNorm eps.
      tie_word_embeddings: logits use the word embedding (BLOOM checkpoints do).
      bos_token_id: BOS id (BLOOM's tokenizer does not prepend it).
    """

    vocab_size: int = 250880
    hidden_size: int = 1024
    n_layer: int = 24
    n_head: int = 16
    layer_norm_epsilon: float = 1e-5
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 1

    model_type = "bloom"
    HF_FIELDS: ClassVar[dict[str, str]] = {"d_model": "hidden_size", "num_layers": "n_layer", "num_heads": "n_head"}

    def __post_init__(self):
        self.check_sizes()

    @property
    def d_mlp(self) -> int:
        return 4 * self.hidden_size


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi slopes (H,) float32, as Hugging Face's ``_get_alibi_slopes`` (Press et al. §3).

    With n the largest power of two ≤ H: slopes 2^(−8/n · h) for h = 1..n; if H > n, the
    remaining H − n heads take 2^(−4/n · h) for the odd h = 1, 3, 5, ... (every other slope of the
    2n-head sequence).
    """
    n = 2 ** math.floor(math.log2(n_heads))
    base = np.float32(2 ** (-(2 ** -(math.log2(n) - 3))))
    slopes = base ** np.arange(1, n + 1, dtype=np.float32)
    if n != n_heads:
        extra = np.float32(2 ** (-(2 ** -(math.log2(2 * n) - 3))))
        rem = min(n, n_heads - n)
        slopes = np.concatenate([slopes, extra ** np.arange(1, 1 + 2 * rem, 2, dtype=np.float32)])
    return slopes.astype(np.float32)


def alibi_bias(n_heads: int, T: int, dtype=jnp.float32) -> Float[Array, "1 H 1 T"]:
    """ALiBi score bias m_h · s for key s (broadcast over queries), shape (1, H, 1, T)."""
    b = alibi_slopes(n_heads)[:, None] * np.arange(T, dtype=np.float32)[None]
    return jnp.asarray(b, dtype)[None, :, None, :]


class BloomAttention(MultiHeadAttention):
    """Multi-head attention with the ALiBi score bias (same parameters as ``MultiHeadAttention``)."""

    def __call__(self, x, mask, bias=None):
        hp = self.hp
        q, k, v = hp["attn_q"](self.q(x)), hp["attn_k"](self.k(x)), hp["attn_v"](self.v(x))
        z, probs = scaled_dot_product_attention(q, k, v, mask, self.head_dim ** -0.5, score_bias=bias, hooks=hp)
        return self.o(hp["attn_z"](z)), probs


class BloomBlock(nn.Module):
    """One pre-LN BLOOM block: x + attn(ln_1 x), then + mlp(ln_2 ·)."""

    config: BloomConfig

    def setup(self):
        c = self.config
        self.ln_1 = LayerNorm(c.layer_norm_epsilon)
        self.attn = BloomAttention(c.n_head, c.head_dim, c.hidden_size)
        self.ln_2 = LayerNorm(c.layer_norm_epsilon)
        self.mlp = MLP(c.d_mlp, c.hidden_size, "gelu_new")
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x, mask, bias):
        return pre_norm_block(self.hp, x, self.ln_1, self.attn, self.ln_2, self.mlp, mask, bias)


class Bloom(nn.Module):
    """BLOOM causal language model returning ``(logits, Intermediates)``."""

    config: BloomConfig

    def setup(self):
        c = self.config
        self.word_embeddings = Embed(c.vocab_size, c.hidden_size)
        self.word_embeddings_ln = LayerNorm(c.layer_norm_epsilon)
        self.h = [BloomBlock(c) for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.hook_ln_final = HookPoint("ln_final")
        if not c.tie_word_embeddings:
            self.lm_head = nn.Dense(c.vocab_size, use_bias=False, kernel_init=nn.initializers.normal(0.02))

    def __call__(
        self,
        input_ids: Int[ArrayLike, "B T"],
        attention_mask: Int[ArrayLike, "B T"] | None = None,
        *,
        return_attention: bool = False,
        compute_logits: bool = True,
    ) -> tuple[Float[Array, "B T V"] | None, Intermediates]:
        """Compute logits and every hidden state for token ids (B, T) (any T: ALiBi is unbounded).

        Args:
          input_ids: (B, T) integer ids in [0, vocab_size).
          attention_mask: optional (B, T), 1 for real tokens, 0 for padding keys. Without padding
            the ALiBi key positions are 0..T−1 (Hugging Face's cumulative-mask positions agree).
          return_attention: also return the L attention-probability arrays (B, H, T, T).
          compute_logits: if False, skip the unembedding and return None.
        """
        c = self.config
        ids = check_input_ids(input_ids, c.vocab_size, np.iinfo(np.int32).max, what="BLOOM")
        am = check_segment_ids(attention_mask, ids.shape, 2, "attention_mask", "BLOOM")
        T = ids.shape[1]
        x = self.word_embeddings_ln(self.word_embeddings(ids))
        mask = attention_mask_4d(T, am, causal=True)
        residual, probs = run_blocks(self.h, x, mask, alibi_bias(c.n_head, T, x.dtype))
        unembed = self.word_embeddings.attend if c.tie_word_embeddings else self.lm_head
        return decoder_head(residual, probs, lambda h: self.hook_ln_final(self.ln_f(h)), unembed,
                            return_attention=return_attention, compute_logits=compute_logits)
