"""BLOOM (BigScience 2022) as a Flax linen module, numerically equal to Hugging Face's BloomForCausalLM.

Pre-LN decoder without position embeddings: x_0 = LN_emb(E[ids]) (the embedding LayerNorm);
x_{l+1} = x_l + attn(ln_1 x_l), then + mlp(ln_2 ·) with mlp = proj(gelu_tanh(fc ·)); logits =
ln_f(x_L) @ Eᵀ (tied). Positions enter only through ALiBi (Press et al. 2022, eq. (1)): head h adds
m_h · s to the score of key s (softmax-equivalent to −m_h (t − s); Hugging Face's form), with the
slopes of :func:`geomjax.theory.positional.alibi_slopes` (the geometric sequence 2^(−8h/n) for the largest power of two
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
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from geomjax.models.common import CausalLM, Embed, HFConfig, HookPoint, LayerNorm, PreLNBlock
from geomjax.theory.positional import alibi_slopes
from geomjax.typing import Array, Bool, DType, Float, Int

__all__ = ["Bloom", "BloomConfig", "alibi_bias"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class BloomConfig(HFConfig):
    """Hyperparameters of a BLOOM model (hashable; Hugging Face ``BloomConfig`` names).

    Attributes:
      vocab_size, hidden_size, n_layer, n_head: V, d, L, H (K = d / H; MLP width 4d); required, as
        every port's sizes (:class:`geomjax.models.common.HFStandardConfig`).
      layer_norm_epsilon: LayerNorm eps.
      tie_word_embeddings: logits use the word embedding (BLOOM checkpoints do).
      bos_token_id: BOS id (BLOOM's tokenizer does not prepend it).
    """

    vocab_size: int
    hidden_size: int
    n_layer: int
    n_head: int
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


def alibi_bias(n_heads: int, T: int, dtype: DType = jnp.float32) -> Float[Array, "1 H 1 T"]:
    """ALiBi score bias m_h · s for key s (broadcast over queries), shape (1, H, 1, T)."""
    b = alibi_slopes(n_heads)[:, None] * np.arange(T, dtype=np.float32)[None]
    return jnp.asarray(b, dtype)[None, :, None, :]


class Bloom(CausalLM):
    """BLOOM causal language model returning ``(logits, Intermediates)`` (:class:`CausalLM`; any T:
    ALiBi is unbounded; without padding the ALiBi key positions are 0..T−1, and Hugging Face's
    cumulative-mask positions agree)."""

    config: BloomConfig
    PARTS: ClassVar[dict[str, str]] = {"blocks": "h", "final_norm": "ln_f", "embedding": "word_embeddings"}

    def setup(self):
        c = self.config
        self.word_embeddings = Embed(c.vocab_size, c.hidden_size)
        self.word_embeddings_ln = LayerNorm(c.layer_norm_epsilon)
        self.h = [PreLNBlock(c, "gelu_new") for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.hook_ln_final = HookPoint("ln_final")
        self.hook_ln_final_scale = HookPoint("ln_final.scale")
        self.hook_embed = HookPoint("hook_embed")
        if not c.tie_word_embeddings:
            self.lm_head = nn.Dense(c.vocab_size, use_bias=False, kernel_init=nn.initializers.normal(0.02))

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"]
              ) -> tuple[Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"], Float[Array, "1 H 1 T"]]]:
        """x_0 = LN_emb(E[ids]); the blocks take the causal mask and the ALiBi bias."""
        x = self.word_embeddings_ln(self.hook_embed(self.word_embeddings(ids)))
        return x, (mask, alibi_bias(self.config.n_head, ids.shape[1], x.dtype))
