"""Phi-3 / Phi-4-mini (Abdin et al. 2024) on the rotary decoder of :mod:`geomjax.models.llama`, numerically equal to
Hugging Face's Phi3ForCausalLM (eager attention).

Llama's block (pre-RMSNorm, rotary, SwiGLU, grouped-query attention) with two fused projections in the
checkpoint: ``qkv_proj`` (H·K + 2·H_kv·K, d) holds q, k and v one after the other, ``gate_up_proj`` (2F, d) the
gate and the up projection; they are split into Llama's parameter tree. Rotary on the first
R = ``partial_rotary_factor``·K coordinates of every head (Phi-4-mini: 0.75); a ``sliding_window`` applies to
every layer (as Mistral's). The long-context rope (``longrope``) is not implemented and is rejected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import ClassVar

import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.models import hf_tables as ht
from geomjax.models import llama
from geomjax.models.llama import RotaryConfig, build_config, rotary_config_kwargs, rotary_family
from geomjax.theory.positional import rope_inv_freq
from geomjax.typing import Array, Float

__all__ = ["Phi3Config"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Phi3Config(RotaryConfig):
    """Hyperparameters of a Phi-3 model (:class:`~geomjax.models.llama.RotaryConfig` with partial rotary)."""

    model_type: str = "phi3"
    partial_rotary_factor: float = 1.0
    rms_norm_eps: float = 1e-5
    bos_token_id: int | None = None

    MODEL_TYPES: ClassVar[tuple[str, ...]] = ("phi3",)
    DISPLAY_NAMES: ClassVar[dict[str, str]] = {"phi3": "Phi3"}

    def __post_init__(self):
        super().__post_init__()
        R = int(self.head_dim * self.partial_rotary_factor)
        if not 0 < R <= self.head_dim or R % 2:
            raise ValueError(f"Phi3Config: partial_rotary_factor={self.partial_rotary_factor} gives {R} rotated "
                             f"coordinates of head_dim={self.head_dim}; it must be even and in [2, head_dim]")

    def layer_inv_freq(self, layer: int) -> Float[Array, " R2"]:
        """Rotary inverse frequencies (R/2,), R = int(K · partial_rotary_factor), as transformers truncates it."""
        R = int(self.head_dim * self.partial_rotary_factor)
        return rope_inv_freq(R, self.rope_theta, self.rope_type, self.rope_factor)


_USED = llama.USED + ("sliding_window", "partial_rotary_factor", "hidden_act")
_IGNORED = llama.IGNORED | {"resid_pdrop", "embd_pdrop", "original_max_position_embeddings"}


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> Phi3Config:
    """Build a :class:`Phi3Config` from a Hugging Face Phi-3 ``config.json`` dict (``rope_parameters`` with
    ``partial_rotary_factor``, or the older top-level ``partial_rotary_factor`` / ``rope_theta`` / ``rope_scaling``).

    Raises:
      GeomjaxError: an activation other than silu, a rope type other than default/linear (``longrope``), unknown
        keys, missing sizes.
    """
    ht.check_keys(cfg, _USED, {**ht.CHECKED_COMMON, "hidden_act": "silu"}, _IGNORED, "Phi3", ignore_config_keys)
    params = dict(cfg.get("rope_parameters") or {})
    pct = params.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rope = ht.rope_from_hf(params, cfg.get("rope_scaling"), cfg.get("rope_theta", 10000.0), "Phi3")
    kw = rotary_config_kwargs(cfg, "Phi3", rope=rope) | {"rms_norm_eps": float(cfg.get("rms_norm_eps", 1e-5))}
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise GeomjaxError("Phi3 config: Phi-3 has no biases; attention_bias / mlp_bias are not implemented")
    return build_config(Phi3Config, "Phi3", **kw, sliding_window=cfg.get("sliding_window"),
                        partial_rotary_factor=float(pct))


def _split_qkv(a: np.ndarray, c: Phi3Config) -> list:
    """qkv_proj (H·K + 2·H_kv·K, d): rows q, then k, then v -> kernels (d, H, K), (d, H_kv, K) x 2."""
    H, Hkv, K, d = c.num_heads, c.num_kv_heads, c.head_dim, c.d_model
    ht.expect(a, ((H + 2 * Hkv) * K, d), "self_attn.qkv_proj.weight")
    bounds, heads = np.cumsum([0, H * K, Hkv * K, Hkv * K]), (H, Hkv, Hkv)
    return [(("attn", n, "kernel"), np.ascontiguousarray(a[bounds[i]:bounds[i + 1]].T).reshape(d, heads[i], K))
            for i, n in enumerate("qkv")]


def _split_gate_up(a: np.ndarray, c: Phi3Config) -> list:
    """gate_up_proj (2F, d): rows gate, then up -> kernels (d, F) each."""
    F = c.d_mlp
    ht.expect(a, (2 * F, c.d_model), "mlp.gate_up_proj.weight")
    return [(("mlp", "gate", "kernel"), np.ascontiguousarray(a[:F].T)),
            (("mlp", "up", "kernel"), np.ascontiguousarray(a[F:].T))]


LAYER_TABLE: dict[str, ht.Transform] = {
    # under "model.layers.{l}." -> under "layers_{l}/"
    "input_layernorm.weight": ht.copy("input_norm", "scale"),
    "post_attention_layernorm.weight": ht.copy("post_norm", "scale"),
    "self_attn.qkv_proj.weight": ht.Transform(_split_qkv, lambda c, n, look: (
        (c.num_heads + 2 * c.num_kv_heads) * c.head_dim, c.d_model)),
    "self_attn.o_proj.weight": ht.heads_out_kernel(transpose=True),  # (d, H K) -> (H, K, d)
    "mlp.gate_up_proj.weight": ht.Transform(_split_gate_up, lambda c, n, look: (2 * c.d_mlp, c.d_model)),
    "mlp.down_proj.weight": ht.transpose("mlp", "down", "kernel"),  # (d, F) -> (F, d)
}


def weight_table(c: Phi3Config) -> tuple[dict[str, ht.Transform], set[str]]:
    """{Hugging Face name below "model.": transform} (``lm_head`` when untied); no buffers."""
    table = dict(llama.TOP_TABLE) | ({} if c.tie_word_embeddings else ht.LM_HEAD_TABLE)
    ht.per_layer(table, c.num_hidden_layers, "layers", "layers", LAYER_TABLE)
    return table, set()


FAMILY = dataclasses.replace(rotary_family("phi3", ("phi3",), Phi3Config, config_from_hf, prepends_bos=False, tiny={
    "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 64, "partial_rotary_factor": 0.5, "sliding_window": 4, "bos_token_id": 1,
    "eos_token_id": 2, "pad_token_id": 0}), weight_table=weight_table)
