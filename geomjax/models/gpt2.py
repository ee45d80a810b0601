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
from collections.abc import Iterable, Mapping
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models.common import CausalLM, Embed, HFConfig, HookPoint, LayerNorm, PreLNBlock, layer_norm
from geomjax.models.family import Family
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
    DISPLAY_NAME: ClassVar[str] = "GPT2"
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

    def setup(self):
        c = self.config
        self.wte = Embed(c.vocab_size, c.n_embd, init_std=0.02)
        self.wpe = Embed(c.n_positions, c.n_embd, init_std=0.01)
        self.h = [PreLNBlock(c, c.activation_function) for _ in range(c.n_layer)]
        self.ln_f = LayerNorm(c.layer_norm_epsilon)
        self.hook_ln_final = HookPoint("ln_final")
        self.hook_ln_final_scale = HookPoint("ln_final.scale")
        self.hook_embed, self.hook_pos_embed = HookPoint("hook_embed"), HookPoint("hook_pos_embed")

    def embed(self, ids: Int[Array, "B T"], mask: Bool[Array, "#B 1 #T T"], positions: Int[Array, "B T"] | None
              ) -> tuple[Float[Array, "B T d"], tuple[Bool[Array, "#B 1 #T T"]]]:
        """x_0 = wte[ids] + wpe[positions] (None: 0..T-1); the blocks take the mask."""
        pos = (jnp.broadcast_to(self.wpe.embedding[: ids.shape[1]][None], ids.shape + (self.config.n_embd,))
               if positions is None else self.wpe.embedding[positions])
        return self.hook_embed(self.wte(ids)) + self.hook_pos_embed(pos), (mask,)


# -- conversion: config.json reader and weight table ------------------------------------------------
_USED = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
         "layer_norm_epsilon")
_CHECKED: dict[str, object] = {
    **ht.CHECKED_COMMON,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "tie_word_embeddings": True,
    "is_decoder": None,  # GPT-2 is always causal; any value is accepted but not used
}
_IGNORED = ht.IGNORED_COMMON | {
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "n_ctx",
    "n_special", "predict_special_tokens",
}
_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> GPT2Config:
    """Build a :class:`GPT2Config` from a Hugging Face GPT-2 ``config.json`` dict, rejecting variants.

    Raises:
      GeomjaxError: unsupported values (``scale_attn_by_inverse_layer_idx``,
        ``reorder_and_upcast_attn``, ``scale_attn_weights=False``, untied embeddings, cross
        attention, an activation other than ``gelu_new``) or unknown keys.
    """
    ht.check_keys(cfg, _USED, _CHECKED, _IGNORED, "GPT-2", ignore_config_keys)
    act = cfg.get("activation_function", "gelu_new")
    if act not in _ACTIVATIONS:
        raise GeomjaxError(
            f"GPT-2 config: activation_function={act!r} is not implemented (only "
            f"{_ACTIVATIONS}); use a standard GPT-2 checkpoint"
        )
    ht.require(cfg, ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions"), "GPT-2")
    return GPT2Config(**{k: cfg[k] for k in _USED if k in cfg})


def _split_qkv(a, c: GPT2Config):
    """Conv1D c_attn (d, 3d) -> q, k, v kernels (d, H, K); its bias (3d,) -> (H, K) each."""
    d, H, K = c.n_embd, c.n_head, c.head_dim
    if a.ndim == 2:
        ht.expect(a, (d, 3 * d), "attn.c_attn.weight")
        return [(("attn", n, "kernel"), np.ascontiguousarray(a[:, i * d:(i + 1) * d]).reshape(d, H, K))
                for i, n in enumerate("qkv")]
    ht.expect(a, (3 * d,), "attn.c_attn.bias")
    return [(("attn", n, "bias"), a[i * d:(i + 1) * d].reshape(H, K)) for i, n in enumerate("qkv")]


SPLIT_QKV = ht.Transform(_split_qkv, lambda c, n, look: (3 * c.n_embd,) if n.endswith("bias")
                         else (c.n_embd, 3 * c.n_embd))


TOP_TABLE: dict[str, ht.Transform] = {
    "wte.weight": ht.copy("wte", "embedding"),
    "wpe.weight": ht.copy("wpe", "embedding"),
    "ln_f.weight": ht.copy("ln_f", "scale"),
    "ln_f.bias": ht.copy("ln_f", "bias"),
}
LAYER_TABLE: dict[str, ht.Transform] = {
    # under "h.{l}." -> under "h_{l}/"
    "ln_1.weight": ht.copy("ln_1", "scale"),
    "ln_1.bias": ht.copy("ln_1", "bias"),
    "attn.c_attn.weight": SPLIT_QKV,  # Conv1D (d, 3d) -> q, k, v (d, H, K)
    "attn.c_attn.bias": SPLIT_QKV,  # (3d,) -> q, k, v (H, K)
    "attn.c_proj.weight": ht.heads_out_kernel(transpose=False),  # Conv1D (d, d) -> (H, K, d)
    "attn.c_proj.bias": ht.copy("attn", "o", "bias"),
    "ln_2.weight": ht.copy("ln_2", "scale"),
    "ln_2.bias": ht.copy("ln_2", "bias"),
    "mlp.c_fc.weight": ht.copy("mlp", "fc", "kernel"),  # Conv1D (d, F) is already (in, out)
    "mlp.c_fc.bias": ht.copy("mlp", "fc", "bias"),
    "mlp.c_proj.weight": ht.copy("mlp", "proj", "kernel"),  # (F, d)
    "mlp.c_proj.bias": ht.copy("mlp", "proj", "bias"),
}
LAYER_BUFFERS = ("attn.bias", "attn.masked_bias")
"""Non-parameter buffers some GPT-2 checkpoints carry (the old causal-mask constants)."""


def weight_table(c: GPT2Config) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "transformer.": transform} and the ignorable buffers."""
    table = dict(TOP_TABLE)
    ht.per_layer(table, c.n_layer, "h", "h", LAYER_TABLE)
    return table, {f"h.{i}.{b}" for i in range(c.n_layer) for b in LAYER_BUFFERS}


def layer_norm_input(c, blk, h):
    """norm_1(h) = ln_1(h), the attention input of a pre-LN block (GPT-2, BLOOM)."""
    return layer_norm(h, blk["ln_1"]["scale"], blk["ln_1"]["bias"], c.layer_norm_epsilon)


FAMILY = Family(
    name="gpt2", model_types=("gpt2",), config_cls=GPT2Config, module_cls=GPT2, config_from_hf=config_from_hf,
    weight_table=weight_table, hf_prefix="transformer.", blocks="h", final_norm="ln_f", embedding="wte",
    positions="learned", norm="layernorm", pre_norm=True, norms=(("ln_1", "ln_1"), ("ln_2", "ln_2")),
    attention_norm=layer_norm_input, study_final_norm=False, tokenizer="gpt2_bpe",
    tiny={"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 96, "n_positions": 32,
          "n_embd": 32, "n_layer": 2, "n_head": 4, "bos_token_id": 0, "eos_token_id": 0})

