"""BLOOM (BigScience 2022) as a Flax linen module, numerically equal to Hugging Face's BloomForCausalLM.

Pre-LN decoder without position embeddings: x_0 = LN_emb(E[ids]) (the embedding LayerNorm);
x_{l+1} = x_l + attn(ln_1 x_l), then + mlp(ln_2 ·) with mlp = proj(gelu_tanh(fc ·)); logits =
ln_f(x_L) @ Eᵀ (tied). Positions enter only through ALiBi (Press et al. 2022, eq. (1)): head h adds
m_h · s to the score of key s (softmax-equivalent to −m_h (t − s); Hugging Face's form), with the
slopes of :func:`geomjax.positional.alibi_slopes` (the geometric sequence 2^(−8h/n) for the largest power of two
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

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from geomjax.models.common import (
    BLOCK_HOOKS,
    MLP,
    Embed,
    HookPoint,
    Intermediates,
    LayerNorm,
    MultiHeadAttention,
    attention_mask_4d,
    check_input_ids,
    check_segment_ids,
    hook_points,
    scaled_dot_product_attention,
)
from geomjax.positional import alibi_slopes
from geomjax.typing import Array, ArrayLike, Float, Int

__all__ = ["Bloom", "BloomConfig", "alibi_bias"]


@dataclasses.dataclass(frozen=True)
class BloomConfig:
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

    def __post_init__(self):
        if self.hidden_size % self.n_head:
            raise ValueError(f"BloomConfig: hidden_size={self.hidden_size} is not divisible by n_head={self.n_head}")

    @property
    def d_model(self) -> int:
        return self.hidden_size

    @property
    def num_layers(self) -> int:
        return self.n_layer

    @property
    def num_heads(self) -> int:
        return self.n_head

    @property
    def num_kv_heads(self) -> int:
        return self.n_head

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_head

    @property
    def d_mlp(self) -> int:
        return 4 * self.hidden_size

    @property
    def max_positions(self) -> None:
        """None: ALiBi positions are unbounded."""
        return None


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
        hp = self.hp
        x = hp["hook_resid_pre"](x)
        a, probs = self.attn(hp["ln1"](self.ln_1(x)), mask, bias)
        x = hp["hook_resid_mid"](x + hp["attn_out"](a))
        return hp["hook_resid_post"](x + hp["mlp_out"](self.mlp(hp["ln2"](self.ln_2(x))))), probs


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
        bias = alibi_bias(c.n_head, T, x.dtype)
        residual, probs = [x], []
        for block in self.h:
            x, p = block(x, mask, bias)
            residual.append(x)
            probs.append(p)
        final = self.hook_ln_final(self.ln_f(x))
        logits = None
        if compute_logits:
            logits = self.word_embeddings.attend(final) if c.tie_word_embeddings else self.lm_head(final)
        inter = Intermediates(
            hidden_states=tuple(residual[:-1]) + (final,),
            residual=tuple(residual),
            final_ln=final,
            attentions=tuple(probs) if return_attention else None,
        )
        return logits, inter
