"""GPT-2 (Radford et al. 2019) as a Flax linen module, numerically equal to Hugging Face's GPT2LMHeadModel.

Pre-LN decoder: x_0 = wte[ids] + wpe[0..T-1]; x_{l+1} = x_l + attn(ln_1(x_l)) then
+ mlp(ln_2(·)); logits = ln_f(x_L) @ wteᵀ (tied). Inference only (no dropout).

``model.apply({"params": params}, input_ids)`` returns ``(logits (B, T, V), Intermediates)``:

* ``inter.hidden_states``: L+1 states, Hugging Face convention (last one after ``ln_f``);
* ``inter.residual``: L+1 states, all before ``ln_f`` (the Song & Zhong code's convention);
* ``inter.final_ln``: ``ln_f(x_L)``.

Parameter tree::

    wte/embedding (V, d)   wpe/embedding (P, d)   ln_f/{scale, bias} (d,)
    h_<l>/ln_1, h_<l>/ln_2: {scale, bias} (d,)
    h_<l>/attn/{q,k,v}/kernel (d, H, K), bias (H, K);  h_<l>/attn/o/kernel (H, K, d), bias (d,)
    h_<l>/mlp/fc/kernel (d, F), bias (F,);  h_<l>/mlp/proj/kernel (F, d), bias (d,)
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import flax.linen as nn

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
)
from geomjax.typing import Array, ArrayLike, Float, Int

__all__ = ["GPT2", "GPT2Block", "GPT2Config"]


@dataclasses.dataclass(frozen=True)
class GPT2Config(HFConfig):
    """Hyperparameters of a GPT-2 model (hashable; Hugging Face ``GPT2Config`` names).

    Build one from a ``config.json`` with ``geomjax.convert.gpt2_config_from_hf`` (which rejects
    attributes this port does not implement).

    Attributes:
      vocab_size: V.
      n_positions: P, the number of learned positions (longest allowed sequence).
      n_embd: d.
      n_layer: L.
      n_head: H (K = d / H).
      n_inner: MLP width F; None means 4 d.
      activation_function: one of ``gelu_new`` / ``gelu_pytorch_tanh`` (same formula).
      layer_norm_epsilon: LayerNorm eps.
    """

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    activation_function: str = "gelu_new"
    layer_norm_epsilon: float = 1e-5

    model_type: ClassVar[str] = "gpt2"
    HF_FIELDS: ClassVar[dict[str, str]] = {
        "d_model": "n_embd", "num_layers": "n_layer", "num_heads": "n_head", "max_positions": "n_positions"}

    def __post_init__(self):
        self.check_sizes()
        if self.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(
                f"GPT2Config: activation_function={self.activation_function!r} is not implemented; "
                "use 'gelu_new' (or 'gelu_pytorch_tanh')"
            )

    @property
    def d_mlp(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd


class GPT2Block(nn.Module):
    """One pre-LN GPT-2 block: x + attn(ln_1 x), then + mlp(ln_2 ·)."""

    config: GPT2Config

    def setup(self):
        c = self.config
        self.ln_1 = LayerNorm(c.layer_norm_epsilon)
        self.attn = MultiHeadAttention(c.n_head, c.head_dim, c.n_embd)
        self.ln_2 = LayerNorm(c.layer_norm_epsilon)
        self.mlp = MLP(c.d_mlp, c.n_embd, c.activation_function)
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x, mask):
        return pre_norm_block(self.hp, x, self.ln_1, self.attn, self.ln_2, self.mlp, mask)


class GPT2(nn.Module):
    """GPT-2 language model (tied unembedding), returning ``(logits, Intermediates)``."""

    config: GPT2Config

    def setup(self):
        c = self.config
        self.wte = Embed(c.vocab_size, c.n_embd, init_std=0.02)
        self.wpe = Embed(c.n_positions, c.n_embd, init_std=0.01)
        self.h = [GPT2Block(c) for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.hook_ln_final = HookPoint("ln_final")

    def __call__(
        self,
        input_ids: Int[ArrayLike, "B T"],
        attention_mask: Int[ArrayLike, "B T"] | None = None,
        *,
        return_attention: bool = False,
        compute_logits: bool = True,
    ) -> tuple[Float[Array, "B T V"] | None, Intermediates]:
        """Compute GPT-2 logits and every residual-stream state for token ids (B, T).

        Args:
          input_ids: (B, T) integer ids in [0, vocab_size), T <= n_positions.
          attention_mask: optional (B, T), 1 for real tokens and 0 for padding keys (Hugging Face
            convention); combined with the causal mask.
          return_attention: also return the L attention-probability arrays (B, H, T, T).
          compute_logits: if False, skip the (B, T, V) unembedding and return None as output.

        Returns:
          ``(logits (B, T, V) or None, Intermediates)``.

        Raises:
          ValueError: bad shape, T > n_positions, ids outside [0, vocab_size) (checked eagerly;
            under ``jit`` a bad id gives NaN outputs instead).
        """
        c = self.config
        ids = check_input_ids(input_ids, c.vocab_size, c.n_positions, what="GPT2")
        am = check_segment_ids(attention_mask, ids.shape, 2, "attention_mask", "GPT2")
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe.embedding[:T][None]
        residual, probs = run_blocks(self.h, x, attention_mask_4d(T, am, causal=True))
        return decoder_head(residual, probs, lambda h: self.hook_ln_final(self.ln_f(h)), self.wte.attend,
                            return_attention=return_attention, compute_logits=compute_logits)

