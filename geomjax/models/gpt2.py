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

import jax.numpy as jnp

from geomjax.models.common import CausalLM, Embed, HFConfig, HookPoint, LayerNorm, PreLNBlock
from geomjax.typing import Array, Bool, Float, Int

__all__ = ["GPT2", "GPT2Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPT2Config(HFConfig):
    """Hyperparameters of a GPT-2 model (hashable; Hugging Face ``GPT2Config`` names).

    Attributes:
      vocab_size, n_positions, n_embd, n_layer, n_head: V, P (the number of learned positions, the
        longest allowed sequence), d, L, H (K = d / H); required, as every port's sizes
        (:class:`geomjax.models.common.HFStandardConfig`).
      n_inner: MLP width F; None means 4 d.
      activation_function: one of ``gelu_new`` / ``gelu_pytorch_tanh`` (same formula).
      layer_norm_epsilon: LayerNorm eps.
    """

    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
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


class GPT2(CausalLM):
    """GPT-2 language model (tied unembedding), returning ``(logits, Intermediates)`` (:class:`CausalLM`)."""

    config: GPT2Config
    PARTS: ClassVar[dict[str, str]] = {"blocks": "h", "final_norm": "ln_f", "embedding": "wte"}

    def setup(self):
        c = self.config
        self.wte = Embed(c.vocab_size, c.n_embd, init_std=0.02)
        self.wpe = Embed(c.n_positions, c.n_embd, init_std=0.01)
        self.h = [PreLNBlock(c, c.activation_function) for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.hook_ln_final = HookPoint("ln_final")
        self.hook_ln_final_scale = HookPoint("ln_final.scale")
        self.hook_embed, self.hook_pos_embed = HookPoint("hook_embed"), HookPoint("hook_pos_embed")

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"]
              ) -> tuple[Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"]]]:
        """x_0 = wte[ids] + wpe[0..T-1]; the blocks take the causal mask."""
        pos = jnp.broadcast_to(self.wpe.embedding[: ids.shape[1]][None], ids.shape + (self.config.n_embd,))
        return self.hook_embed(self.wte(ids)) + self.hook_pos_embed(pos), (mask,)

