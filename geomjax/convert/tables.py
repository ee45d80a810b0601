"""Explicit Hugging Face -> geomjax tables: config whitelists and per-tensor name/layout maps.

Config: every ``config.json`` key is either *used* (becomes a config field), *checked* (must have
the one value the port implements), or *ignored* (does not change the inference forward pass:
dropout rates, initialisation, token ids, bookkeeping). Any other key is rejected, so a variant
the port does not implement can never load silently.

Weights: one table per model lists, for every Hugging Face tensor name, the geomjax parameter(s)
it fills and the layout change:

* GPT-2 ``Conv1D`` weights are stored (in, out); the fused ``c_attn`` (d, 3d) is split into q, k, v
  and each reshaped to (d, H, K); ``c_proj`` (d, d) becomes (H, K, d).
* BERT ``nn.Linear`` weights are stored (out, in) and are transposed; q, k, v become (d, H, K),
  the attention output dense becomes (H, K, d).
* Llama / Mistral ``nn.Linear`` weights likewise; k and v have H_kv heads (grouped-query
  attention): (H_kv·K, d) -> (d, H_kv, K). An untied ``lm_head.weight`` (V, d) becomes (d, V).
* BLOOM's fused ``query_key_value`` (3d, d) is laid out per head as (H, 3, K) on the output axis
  (Hugging Face ``BloomAttention._reshape``): transposed to (d, H, 3, K) and split into q, k, v.

``convert_tensors`` then checks that every parameter of the Flax model was filled exactly once
with the right shape and dtype and that no tensor was left unused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.models.bert import BertConfig
from geomjax.models.bloom import BloomConfig
from geomjax.models.gpt2 import GPT2Config
from geomjax.models.interface import model_from_config
from geomjax.models.llama import LlamaConfig
from geomjax.models.common import HFConfig
from geomjax.theory.positional import ROPE_TYPES
from geomjax.typing import Array, Params, PyTree, Shaped

__all__ = [
    "BERT_LAYER_TABLE",
    "BLOOM_LAYER_TABLE",
    "GPT2_LAYER_TABLE",
    "LLAMA_LAYER_TABLE",
    "MODEL_TYPES",
    "bert_config_from_hf",
    "bloom_config_from_hf",
    "llama_config_from_hf",
    "config_from_hf",
    "convert_tensors",
    "expected_param_shapes",
    "gpt2_config_from_hf",
    "model_from_config",
    "with_pooler",
]

# Keys of a config.json that do not change the inference forward pass (both models).
_IGNORED_COMMON = frozenset(
    {
        "_name_or_path", "_num_labels", "architectures", "model_type", "transformers_version",
        "dtype", "torch_dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
        "sep_token_id", "decoder_start_token_id", "initializer_range", "gradient_checkpointing",
        "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
        "task_specific_params", "tokenizer_class", "prefix", "return_dict", "output_hidden_states",
        "output_attentions", "torchscript", "use_return_dict", "max_length", "min_length",
        "classifier_dropout", "chunk_size_feed_forward", "tie_encoder_decoder",
        "_attn_implementation_autoset", "output_past",
    }
)
# Keys that must hold exactly this value (anything else changes the forward pass).
_CHECKED_COMMON: dict[str, object] = {
    "add_cross_attention": False,
    "is_encoder_decoder": False,
    "pruned_heads": {},
}

_GPT2_USED = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
              "activation_function", "layer_norm_epsilon")
_GPT2_CHECKED: dict[str, object] = {
    **_CHECKED_COMMON,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "tie_word_embeddings": True,
    "is_decoder": None,  # GPT-2 is always causal; any value is accepted but not used
}
_GPT2_IGNORED = _IGNORED_COMMON | {
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "n_ctx",
    "n_special", "predict_special_tokens",
}
_GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")

_BERT_USED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size",
              "layer_norm_eps", "hidden_act")
_BERT_CHECKED: dict[str, object] = {
    **_CHECKED_COMMON,
    "position_embedding_type": "absolute",
}
_BERT_IGNORED = _IGNORED_COMMON | {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                   "tie_word_embeddings"}


def _check_keys(cfg: Mapping, used, checked, ignored, what: str, extra_ignore: Iterable[str]) -> None:
    bad = []
    for key, want in checked.items():
        if key in cfg and want is not None and cfg[key] != want:
            bad.append(f"{key}={cfg[key]!r} (only {want!r} is implemented)")
    if bad:
        raise GeomjaxError(
            f"{what} config: unsupported attribute value(s): {'; '.join(bad)}. geomjax's port does "
            "not implement this variant; use a checkpoint with the standard architecture"
        )
    known = set(used) | set(checked) | set(ignored) | set(extra_ignore)
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        raise GeomjaxError(
            f"{what} config: unknown attribute(s) {unknown}; geomjax does not know whether they "
            "change the forward pass. If they do not, pass ignore_config_keys="
            f"{tuple(unknown)!r} to load_pretrained"
        )


def gpt2_config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> GPT2Config:
    """Build a :class:`GPT2Config` from a Hugging Face GPT-2 ``config.json`` dict, rejecting variants.

    Raises:
      ValueError: unsupported values (``scale_attn_by_inverse_layer_idx``,
        ``reorder_and_upcast_attn``, ``scale_attn_weights=False``, untied embeddings, cross
        attention, an activation other than ``gelu_new``) or unknown keys.
    """
    _check_keys(cfg, _GPT2_USED, _GPT2_CHECKED, _GPT2_IGNORED, "GPT-2", ignore_config_keys)
    act = cfg.get("activation_function", "gelu_new")
    if act not in _GPT2_ACTIVATIONS:
        raise GeomjaxError(
            f"GPT-2 config: activation_function={act!r} is not implemented (only "
            f"{_GPT2_ACTIVATIONS}); use a standard GPT-2 checkpoint"
        )
    missing = [k for k in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions") if k not in cfg]
    if missing:
        raise GeomjaxError(f"GPT-2 config: missing required attribute(s) {missing}")
    kw = {k: cfg[k] for k in _GPT2_USED if k in cfg}
    return GPT2Config(**kw)


def bert_config_from_hf(
    cfg: Mapping, ignore_config_keys: Iterable[str] = (), add_pooling_layer: bool = True
) -> BertConfig:
    """Build a :class:`BertConfig` from a Hugging Face BERT ``config.json`` dict, rejecting variants.

    ``is_decoder`` becomes ``BertConfig.causal``.

    Raises:
      ValueError: unsupported values (``position_embedding_type != "absolute"``, an activation
        other than ``gelu``, cross attention, ``embedding_size != hidden_size``) or unknown keys.
    """
    extra = set(ignore_config_keys) | {"is_decoder", "embedding_size"}
    _check_keys(cfg, _BERT_USED, _BERT_CHECKED, _BERT_IGNORED, "BERT", extra)
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu":
        raise GeomjaxError(
            f"BERT config: hidden_act={act!r} is not implemented (only 'gelu', the erf form); use "
            "a standard BERT checkpoint"
        )
    if "embedding_size" in cfg and cfg["embedding_size"] != cfg.get("hidden_size"):
        raise GeomjaxError(
            f"BERT config: embedding_size={cfg['embedding_size']} differs from hidden_size "
            "(factorised embeddings, ALBERT-style) and is not implemented"
        )
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "max_position_embeddings") if k not in cfg]
    if missing:
        raise GeomjaxError(f"BERT config: missing required attribute(s) {missing}")
    kw = {k: cfg[k] for k in _BERT_USED if k in cfg}
    return BertConfig(**kw, causal=bool(cfg.get("is_decoder", False)),
                      add_pooling_layer=add_pooling_layer)


_LLAMA_USED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
               "rope_parameters", "rope_scaling", "attention_bias", "mlp_bias", "tie_word_embeddings",
               "bos_token_id")
_LLAMA_CHECKED: dict[str, object] = {**_CHECKED_COMMON, "hidden_act": "silu", "partial_rotary_factor": 1.0}
# pretraining_tp > 1 only slices the same matmuls (Llama-2's configs carry it); not a different function.
_LLAMA_IGNORED = _IGNORED_COMMON | {"attention_dropout", "pretraining_tp", "tie_encoder_decoder"}


def _rope_from_hf(cfg: Mapping, what: str) -> dict:
    """rope_theta / rope_type / rope_factor from ``rope_parameters`` (transformers >= 5) or the older
    top-level ``rope_theta`` + ``rope_scaling``; a type geomjax does not implement is rejected by name."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or {}
    if not isinstance(params, Mapping) or not isinstance(scaling, Mapping):
        raise GeomjaxError(f"{what} config: rope_parameters / rope_scaling must be objects")
    if "sliding_attention" in params or "full_attention" in params:
        raise GeomjaxError(f"{what} config: per-layer-type rope_parameters are not implemented")
    merged = {**scaling, **params}
    rtype = merged.get("rope_type", merged.get("type", "default"))
    if rtype not in ROPE_TYPES:
        raise GeomjaxError(
            f"{what} config: rope type {rtype!r} is not implemented (geomjax implements {ROPE_TYPES}, exactly as "
            "transformers computes them); use a checkpoint without that rope scaling")
    extra = sorted(set(merged) - {"rope_type", "type", "rope_theta", "factor"})
    if extra:
        raise GeomjaxError(f"{what} config: rope parameter(s) {extra} are not implemented")
    theta = float(merged.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    factor = float(merged.get("factor", 1.0)) if rtype == "linear" else 1.0
    if rtype == "linear" and "factor" not in merged:
        raise GeomjaxError(f"{what} config: linear rope scaling needs a 'factor'")
    return {"rope_theta": theta, "rope_type": rtype, "rope_factor": factor}


def llama_config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> LlamaConfig:
    """Build a :class:`LlamaConfig` from a Hugging Face Llama or Mistral ``config.json`` dict.

    Mistral's ``sliding_window`` is honoured (None: full causal attention); for ``model_type``
    "llama" a sliding window is not a Llama attribute and is rejected as unknown.

    Raises:
      GeomjaxError: an activation other than silu, a rope type other than default/linear, partial
        rotary factors, unknown keys, missing sizes.
    """
    mt = cfg.get("model_type")
    what = "Mistral" if mt == "mistral" else "Llama"
    used = _LLAMA_USED + (("sliding_window",) if mt == "mistral" else ())
    _check_keys(cfg, used, _LLAMA_CHECKED, _LLAMA_IGNORED, what, ignore_config_keys)
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in cfg]
    if missing:
        raise GeomjaxError(f"{what} config: missing required attribute(s) {missing}")
    # an absent (or null) num_key_value_heads / head_dim is derived by LlamaConfig as transformers does
    kv, K = cfg.get("num_key_value_heads"), cfg.get("head_dim")
    kw = dict(
        model_type=mt, vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
        intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=int(cfg["num_hidden_layers"]),
        num_attention_heads=int(cfg["num_attention_heads"]), num_key_value_heads=None if kv is None else int(kv),
        head_dim=None if K is None else int(K),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        attention_bias=bool(cfg.get("attention_bias", False)), mlp_bias=bool(cfg.get("mlp_bias", False)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_window=cfg.get("sliding_window") if mt == "mistral" else None,
        bos_token_id=cfg.get("bos_token_id"), **_rope_from_hf(cfg, what),
    )
    try:
        return LlamaConfig(**kw)
    except ValueError as e:
        raise GeomjaxError(f"{what} config: {e}") from None


_BLOOM_USED = ("vocab_size", "hidden_size", "n_embed", "n_layer", "num_hidden_layers", "n_head",
               "num_attention_heads", "layer_norm_epsilon", "tie_word_embeddings", "bos_token_id")
_BLOOM_CHECKED: dict[str, object] = {
    **_CHECKED_COMMON,
    "apply_residual_connection_post_layernorm": False,
    "slow_but_exact": False,
}
# Megatron-DeepSpeed training switches that bigscience's configs carry and transformers ignores
# (fused kernels, softmax precision, tensor-parallel slicing); n_inner is ignored by BloomMLP (4d).
_BLOOM_IGNORED = _IGNORED_COMMON | {
    "attention_dropout", "hidden_dropout", "pretraining_tp", "attention_softmax_in_fp32",
    "bias_dropout_fusion", "masked_softmax_fusion", "offset_alibi", "skip_bias_add", "skip_bias_add_qkv",
    "unk_token_id", "seq_length", "n_inner", "layer_norm_eps_fp32",
}


def bloom_config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> BloomConfig:
    """Build a :class:`BloomConfig` from a Hugging Face BLOOM ``config.json`` dict, rejecting variants.

    Raises:
      GeomjaxError: ``apply_residual_connection_post_layernorm``, ``slow_but_exact``, unknown keys.
    """
    _check_keys(cfg, _BLOOM_USED, _BLOOM_CHECKED, _BLOOM_IGNORED, "BLOOM", ignore_config_keys)
    d = cfg.get("hidden_size", cfg.get("n_embed"))
    L = cfg.get("n_layer", cfg.get("num_hidden_layers"))
    H = cfg.get("n_head", cfg.get("num_attention_heads"))
    if None in (d, L, H) or "vocab_size" not in cfg:
        raise GeomjaxError("BLOOM config: needs vocab_size, hidden_size (n_embed), n_layer and n_head")
    try:
        return BloomConfig(vocab_size=int(cfg["vocab_size"]), hidden_size=int(d), n_layer=int(L), n_head=int(H),
                           layer_norm_epsilon=float(cfg.get("layer_norm_epsilon", 1e-5)),
                           tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                           bos_token_id=cfg.get("bos_token_id"))
    except ValueError as e:
        raise GeomjaxError(f"BLOOM config: {e}") from None


MODEL_TYPES = ("gpt2", "bert", "llama", "mistral", "bloom")
"""``config.json`` model types geomjax ports."""


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> HFConfig:
    """Dispatch on ``model_type`` (one of :data:`MODEL_TYPES`) to the matching config builder."""
    mt = cfg.get("model_type")
    if mt == "gpt2":
        return gpt2_config_from_hf(cfg, ignore_config_keys)
    if mt == "bert":
        return bert_config_from_hf(cfg, ignore_config_keys)
    if mt in ("llama", "mistral"):
        return llama_config_from_hf(cfg, ignore_config_keys)
    if mt == "bloom":
        return bloom_config_from_hf(cfg, ignore_config_keys)
    raise GeomjaxError(
        f"config.json has model_type={mt!r}; geomjax ports {', '.join(MODEL_TYPES)} (use the toy "
        "model family for other architectures)"
    )


# ----------------------------------------------------------------------------------------------
# Weight tables. A transform maps (array, config) -> list of (relative geomjax path, array).

Transform = Callable[[np.ndarray, object], list[tuple[tuple[str, ...], np.ndarray]]]


def _copy(*path: str) -> Transform:
    return lambda a, c: [(path, a)]


def _transpose(*path: str) -> Transform:
    return lambda a, c: [(path, np.ascontiguousarray(a.T))]


def _gpt2_split_qkv_kernel(a: np.ndarray, c: GPT2Config):
    d, H, K = c.n_embd, c.n_head, c.head_dim
    _expect(a, (d, 3 * d), "attn.c_attn.weight")
    return [(("attn", n, "kernel"), np.ascontiguousarray(a[:, i * d:(i + 1) * d]).reshape(d, H, K))
            for i, n in enumerate("qkv")]


def _gpt2_split_qkv_bias(a: np.ndarray, c: GPT2Config):
    d, H, K = c.n_embd, c.n_head, c.head_dim
    _expect(a, (3 * d,), "attn.c_attn.bias")
    return [(("attn", n, "bias"), a[i * d:(i + 1) * d].reshape(H, K)) for i, n in enumerate("qkv")]


def _heads_out_kernel(transpose: bool) -> Transform:
    def f(a, c):
        w = a.T if transpose else a  # -> (in = H*K, out = d)
        return [(("attn", "o", "kernel"), np.ascontiguousarray(w).reshape(c.num_heads, c.head_dim, -1))]
    return f


def _bert_heads_in_kernel(name: str) -> Transform:
    def f(a, c):  # Linear (out = H*K, in = d) -> (d, H, K)
        return [(("attn", name, "kernel"),
                 np.ascontiguousarray(a.T).reshape(-1, c.num_heads, c.head_dim))]
    return f


def _bert_heads_bias(name: str) -> Transform:
    return lambda a, c: [(("attn", name, "bias"), a.reshape(c.num_heads, c.head_dim))]


def _expect(a: np.ndarray, shape: tuple, name: str) -> None:
    if a.shape != shape:
        raise GeomjaxError(f"tensor {name}: expected shape {shape} from config.json, got {a.shape}; "
                         "the weights do not belong to this config")


GPT2_TOP_TABLE: dict[str, Transform] = {
    "wte.weight": _copy("wte", "embedding"),
    "wpe.weight": _copy("wpe", "embedding"),
    "ln_f.weight": _copy("ln_f", "scale"),
    "ln_f.bias": _copy("ln_f", "bias"),
}
GPT2_LAYER_TABLE: dict[str, Transform] = {
    # under "h.{l}." -> under "h_{l}/"
    "ln_1.weight": _copy("ln_1", "scale"),
    "ln_1.bias": _copy("ln_1", "bias"),
    "attn.c_attn.weight": _gpt2_split_qkv_kernel,  # Conv1D (d, 3d) -> q, k, v (d, H, K)
    "attn.c_attn.bias": _gpt2_split_qkv_bias,  # (3d,) -> q, k, v (H, K)
    "attn.c_proj.weight": _heads_out_kernel(transpose=False),  # Conv1D (d, d) -> (H, K, d)
    "attn.c_proj.bias": _copy("attn", "o", "bias"),
    "ln_2.weight": _copy("ln_2", "scale"),
    "ln_2.bias": _copy("ln_2", "bias"),
    "mlp.c_fc.weight": _copy("mlp", "fc", "kernel"),  # Conv1D (d, F) is already (in, out)
    "mlp.c_fc.bias": _copy("mlp", "fc", "bias"),
    "mlp.c_proj.weight": _copy("mlp", "proj", "kernel"),  # (F, d)
    "mlp.c_proj.bias": _copy("mlp", "proj", "bias"),
}
# Non-parameter buffers some GPT-2 checkpoints carry (the old causal-mask constants).
GPT2_LAYER_BUFFERS = ("attn.bias", "attn.masked_bias")

BERT_TOP_TABLE: dict[str, Transform] = {
    "embeddings.word_embeddings.weight": _copy("word_embeddings", "embedding"),
    "embeddings.position_embeddings.weight": _copy("position_embeddings", "embedding"),
    "embeddings.token_type_embeddings.weight": _copy("token_type_embeddings", "embedding"),
    "embeddings.LayerNorm.weight": _copy("embeddings_ln", "scale"),
    "embeddings.LayerNorm.bias": _copy("embeddings_ln", "bias"),
}
BERT_POOLER_TABLE: dict[str, Transform] = {
    "pooler.dense.weight": _transpose("pooler", "kernel"),  # Linear (out, in)
    "pooler.dense.bias": _copy("pooler", "bias"),
}
BERT_LAYER_TABLE: dict[str, Transform] = {
    # under "encoder.layer.{l}." -> under "layer_{l}/"
    "attention.self.query.weight": _bert_heads_in_kernel("q"),  # (HK, d) -> (d, H, K)
    "attention.self.query.bias": _bert_heads_bias("q"),
    "attention.self.key.weight": _bert_heads_in_kernel("k"),
    "attention.self.key.bias": _bert_heads_bias("k"),
    "attention.self.value.weight": _bert_heads_in_kernel("v"),
    "attention.self.value.bias": _bert_heads_bias("v"),
    "attention.output.dense.weight": _heads_out_kernel(transpose=True),  # (d, HK) -> (H, K, d)
    "attention.output.dense.bias": _copy("attn", "o", "bias"),
    "attention.output.LayerNorm.weight": _copy("attn_ln", "scale"),
    "attention.output.LayerNorm.bias": _copy("attn_ln", "bias"),
    "intermediate.dense.weight": _transpose("mlp", "fc", "kernel"),  # (F, d) -> (d, F)
    "intermediate.dense.bias": _copy("mlp", "fc", "bias"),
    "output.dense.weight": _transpose("mlp", "proj", "kernel"),  # (d, F) -> (F, d)
    "output.dense.bias": _copy("mlp", "proj", "bias"),
    "output.LayerNorm.weight": _copy("out_ln", "scale"),
    "output.LayerNorm.bias": _copy("out_ln", "bias"),
}
# Non-parameter buffers (position / token-type index constants).
BERT_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def _linear_heads_in(name: str, kv: bool) -> Transform:
    def f(a, c):  # Linear (out = H·K, in = d) -> (d, H, K); H_kv heads for k, v
        H = c.num_kv_heads if kv else c.num_heads
        _expect(a, (H * c.head_dim, c.d_model), f"{name}_proj.weight")
        return [(("attn", name, "kernel"), np.ascontiguousarray(a.T).reshape(c.d_model, H, c.head_dim))]
    return f


def _linear_heads_bias(name: str, kv: bool) -> Transform:
    def f(a, c):
        H = c.num_kv_heads if kv else c.num_heads
        _expect(a, (H * c.head_dim,), f"{name}_proj.bias")
        return [(("attn", name, "bias"), a.reshape(H, c.head_dim))]
    return f


def _bloom_split_qkv_kernel(a: np.ndarray, c: BloomConfig):
    d, H, K = c.hidden_size, c.n_head, c.head_dim
    _expect(a, (3 * d, d), "self_attention.query_key_value.weight")
    w = np.ascontiguousarray(a.T).reshape(d, H, 3, K)  # output axis laid out (H, 3, K)
    return [(("attn", n, "kernel"), np.ascontiguousarray(w[:, :, i, :])) for i, n in enumerate("qkv")]


def _bloom_split_qkv_bias(a: np.ndarray, c: BloomConfig):
    H, K = c.n_head, c.head_dim
    _expect(a, (3 * H * K,), "self_attention.query_key_value.bias")
    b = a.reshape(H, 3, K)
    return [(("attn", n, "bias"), np.ascontiguousarray(b[:, i, :])) for i, n in enumerate("qkv")]


LLAMA_TOP_TABLE: dict[str, Transform] = {
    # under "model."
    "embed_tokens.weight": _copy("embed_tokens", "embedding"),
    "norm.weight": _copy("norm", "scale"),
}
LLAMA_LM_HEAD_TABLE: dict[str, Transform] = {
    "lm_head.weight": _transpose("lm_head", "kernel"),  # Linear (V, d) -> (d, V); untied models only
}
LLAMA_LAYER_TABLE: dict[str, Transform] = {
    # under "model.layers.{l}." -> under "layers_{l}/"
    "input_layernorm.weight": _copy("input_norm", "scale"),
    "post_attention_layernorm.weight": _copy("post_norm", "scale"),
    "self_attn.q_proj.weight": _linear_heads_in("q", kv=False),  # (H K, d) -> (d, H, K)
    "self_attn.k_proj.weight": _linear_heads_in("k", kv=True),  # (H_kv K, d) -> (d, H_kv, K)
    "self_attn.v_proj.weight": _linear_heads_in("v", kv=True),
    "self_attn.o_proj.weight": _heads_out_kernel(transpose=True),  # (d, H K) -> (H, K, d)
    "mlp.gate_proj.weight": _transpose("mlp", "gate", "kernel"),  # (F, d) -> (d, F)
    "mlp.up_proj.weight": _transpose("mlp", "up", "kernel"),
    "mlp.down_proj.weight": _transpose("mlp", "down", "kernel"),  # (d, F) -> (F, d)
}
LLAMA_ATTN_BIAS_TABLE: dict[str, Transform] = {  # attention_bias=True
    "self_attn.q_proj.bias": _linear_heads_bias("q", kv=False),
    "self_attn.k_proj.bias": _linear_heads_bias("k", kv=True),
    "self_attn.v_proj.bias": _linear_heads_bias("v", kv=True),
    "self_attn.o_proj.bias": _copy("attn", "o", "bias"),
}
LLAMA_MLP_BIAS_TABLE: dict[str, Transform] = {  # mlp_bias=True
    "mlp.gate_proj.bias": _copy("mlp", "gate", "bias"),
    "mlp.up_proj.bias": _copy("mlp", "up", "bias"),
    "mlp.down_proj.bias": _copy("mlp", "down", "bias"),
}
# Rotary inverse-frequency buffers older checkpoints saved.
LLAMA_LAYER_BUFFERS = ("self_attn.rotary_emb.inv_freq",)

BLOOM_TOP_TABLE: dict[str, Transform] = {
    # under "transformer."
    "word_embeddings.weight": _copy("word_embeddings", "embedding"),
    "word_embeddings_layernorm.weight": _copy("word_embeddings_ln", "scale"),
    "word_embeddings_layernorm.bias": _copy("word_embeddings_ln", "bias"),
    "ln_f.weight": _copy("ln_f", "scale"),
    "ln_f.bias": _copy("ln_f", "bias"),
}
BLOOM_LAYER_TABLE: dict[str, Transform] = {
    # under "transformer.h.{l}." -> under "h_{l}/"
    "input_layernorm.weight": _copy("ln_1", "scale"),
    "input_layernorm.bias": _copy("ln_1", "bias"),
    "self_attention.query_key_value.weight": _bloom_split_qkv_kernel,  # (3d, d) -> q, k, v (d, H, K)
    "self_attention.query_key_value.bias": _bloom_split_qkv_bias,  # (3d,) -> q, k, v (H, K)
    "self_attention.dense.weight": _heads_out_kernel(transpose=True),  # (d, d) -> (H, K, d)
    "self_attention.dense.bias": _copy("attn", "o", "bias"),
    "post_attention_layernorm.weight": _copy("ln_2", "scale"),
    "post_attention_layernorm.bias": _copy("ln_2", "bias"),
    "mlp.dense_h_to_4h.weight": _transpose("mlp", "fc", "kernel"),  # (4d, d) -> (d, 4d)
    "mlp.dense_h_to_4h.bias": _copy("mlp", "fc", "bias"),
    "mlp.dense_4h_to_h.weight": _transpose("mlp", "proj", "kernel"),  # (d, 4d) -> (4d, d)
    "mlp.dense_4h_to_h.bias": _copy("mlp", "proj", "bias"),
}


def _strip_prefix(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, str]:
    """{name without the head model's prefix: the checkpoint's name} (names only: nothing is read)."""
    out: dict[str, str] = {}
    for k in tensors:
        base = k[len(prefix):] if k.startswith(prefix) else k
        if base in out:
            raise GeomjaxError(
                f"tensor {base!r} appears both with and without the {prefix!r} prefix; the "
                "checkpoint mixes two models: re-save it"
            )
        out[base] = k
    return out


def _under(prefix: tuple[str, ...], t: Transform) -> Transform:
    """``t`` with its geomjax paths moved below ``prefix``."""
    return lambda a, c: [(prefix + p, x) for p, x in t(a, c)]


def _per_layer(table: dict[str, Transform], n_layers: int, hf: str, ours: str,
               layer_table: dict[str, Transform]) -> None:
    """Add ``layer_table`` once per layer: HF ``{hf}.{i}.{name}`` -> geomjax ``{ours}_{i}/...``."""
    for layer in range(n_layers):
        for k, t in layer_table.items():
            table[f"{hf}.{layer}.{k}"] = _under((f"{ours}_{layer}",), t)


def _full_table(config) -> tuple[dict[str, Transform], set[str]]:
    """Flat {hf_name: transform to absolute geomjax path} and the set of ignorable buffer names."""
    table: dict[str, Transform] = {}
    buffers: set[str] = set()
    if isinstance(config, GPT2Config):
        table.update(GPT2_TOP_TABLE)
        _per_layer(table, config.n_layer, "h", "h", GPT2_LAYER_TABLE)
        buffers.update(f"h.{i}.{b}" for i in range(config.n_layer) for b in GPT2_LAYER_BUFFERS)
    elif isinstance(config, BertConfig):
        table.update(BERT_TOP_TABLE)
        if config.add_pooling_layer:
            table.update(BERT_POOLER_TABLE)
        _per_layer(table, config.num_hidden_layers, "encoder.layer", "layer", BERT_LAYER_TABLE)
        buffers.update(BERT_BUFFERS)
    elif isinstance(config, LlamaConfig):
        table.update(LLAMA_TOP_TABLE)
        if not config.tie_word_embeddings:
            table.update(LLAMA_LM_HEAD_TABLE)
        layer_table = dict(LLAMA_LAYER_TABLE)
        if config.attention_bias:
            layer_table.update(LLAMA_ATTN_BIAS_TABLE)
        if config.mlp_bias:
            layer_table.update(LLAMA_MLP_BIAS_TABLE)
        _per_layer(table, config.num_hidden_layers, "layers", "layers", layer_table)
        buffers.update(f"layers.{i}.{b}" for i in range(config.num_hidden_layers) for b in LLAMA_LAYER_BUFFERS)
    elif isinstance(config, BloomConfig):
        table.update(BLOOM_TOP_TABLE)
        if not config.tie_word_embeddings:
            table.update(LLAMA_LM_HEAD_TABLE)
        _per_layer(table, config.n_layer, "h", "h", BLOOM_LAYER_TABLE)
    else:
        raise TypeError(f"no conversion table for {type(config).__name__}")
    return table, buffers


def expected_param_shapes(config: HFConfig) -> PyTree[jax.ShapeDtypeStruct]:
    """Return the parameter tree of the Flax model as ``jax.ShapeDtypeStruct`` leaves (no compute)."""
    model = model_from_config(config)
    ids = np.zeros((1, 1), np.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), ids))
    return shapes["params"]


def _set(tree: dict, path: tuple[str, ...], value) -> bool:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    if path[-1] in tree:
        return False
    tree[path[-1]] = value
    return True


def _flatten(tree: Mapping, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, prefix + (k,)))
        else:
            out[prefix + (k,)] = v
    return out


# Per family: the prefix Hugging Face's head models write, a name for messages, and the embedding a
# tied lm_head.weight (when a checkpoint saves it anyway) must equal.
_FAMILY = {
    GPT2Config: ("transformer.", "GPT-2", ("wte", "embedding")),
    BertConfig: ("bert.", "BERT", None),
    LlamaConfig: ("model.", "Llama", ("embed_tokens", "embedding")),
    BloomConfig: ("transformer.", "BLOOM", ("word_embeddings", "embedding")),
}


def _tied(config) -> bool:
    return isinstance(config, GPT2Config) or bool(getattr(config, "tie_word_embeddings", False))


def convert_tensors(
    tensors: Mapping[str, Shaped[Array, "..."]],
    config: HFConfig,
    *,
    dtype: str | np.dtype | None = None,
    ignore: Iterable[str] = (),
    place: Callable[[np.ndarray], Array] | None = None,
) -> Params:
    """Convert Hugging Face tensors into a geomjax parameter tree through the explicit tables.

    Accepts the prefixes Hugging Face writes for head models ("transformer." for GPT2LMHeadModel and
    BloomForCausalLM, "bert." for BertFor*, "model." for LlamaForCausalLM / MistralForCausalLM).
    A tied model's ``lm_head.weight``, when saved, must equal the token embedding; an untied one's
    fills ``lm_head/kernel``. A checkpoint of an untied family saved without its head (the base
    ``LlamaModel`` / ``MistralModel`` / ``BloomModel`` classes, as embedding models ship) converts
    to a tree without ``lm_head``: the model gives every hidden state, and asking it for logits
    raises :class:`~geomjax.errors.GeomjaxError` naming the missing head.

    Args:
      tensors: Hugging Face name -> array.
      config: the model config (GPT2Config, BertConfig, LlamaConfig or BloomConfig).
      dtype: None keeps the checkpoint's floating dtype (bfloat16 / float16 stay so; it must be
        the same for every tensor); otherwise every parameter is converted to this dtype.
      ignore: name prefixes of tensors to drop on purpose (e.g. ``("cls.",)`` for BERT's MLM/NSP
        heads, which geomjax does not implement).
      place: applied to every parameter as soon as it is converted (e.g. ``jnp.asarray``: onto the
        device). With a lazy ``tensors`` mapping (:class:`~geomjax.convert.safetensors_io.ShardedTensors`,
        which reads a tensor when it is looked up and names its dtypes in ``.dtypes``), the checkpoint
        is read, converted and placed tensor by tensor, never whole in host memory.

    Returns:
      Nested dict of NumPy arrays matching the Flax model's ``params``.

    Raises:
      GeomjaxError: missing parameters, unused tensors, wrong shapes, mixed or non-float dtypes,
        an lm_head different from the embedding of a tied model. The message lists the names.
    """
    ignore = tuple(ignore)
    prefix, what, tied_to = _FAMILY.get(type(config), (None, None, None))
    if prefix is None:
        raise TypeError(f"no conversion table for {type(config).__name__}")
    names = _strip_prefix(tensors, prefix)
    table, buffers = _full_table(config)
    lm_head = names.pop("lm_head.weight", None) if (tied_to and _tied(config)) else None
    headless = "lm_head.weight" in table and "lm_head.weight" not in names
    if headless:  # a base checkpoint (LlamaModel, MistralModel, BloomModel): every hidden state, no logits
        del table["lm_head.weight"]
    kept = sorted(n for n in names if n not in buffers and not n.startswith(ignore))
    dtypes = getattr(tensors, "dtypes", None)
    target = _target_dtype({n: np.dtype(dtypes[names[n]] if dtypes is not None else tensors[names[n]].dtype)
                            for n in kept if n in table}, dtype, what)
    place = place or (lambda v: v)

    params: dict = {}
    unused, dupes = [n for n in kept if n not in table], []
    for name in kept:
        if name in table:
            for path, value in table[name](tensors[names[name]], config):
                if not _set(params, path, place(np.asarray(value, dtype=target))):
                    dupes.append("/".join(path))
    _check_filled(params, table, names, unused, dupes, config, what, headless)

    if lm_head is not None:
        lm_head = tensors[lm_head]
        emb = np.asarray(params[tied_to[0]][tied_to[1]])
        if lm_head.shape != emb.shape or not np.array_equal(lm_head.astype(target), emb):
            raise GeomjaxError(
                f"{what} checkpoint has an lm_head.weight different from its token embedding (an untied unembedding) but "
                "config.json says the embeddings are tied (tie_word_embeddings); fix config.json or the weights"
            )
    return params


def _check_filled(params, table, tensors, unused, dupes, config, what, headless: bool = False) -> dict:
    """Every parameter filled once with its shape, every table name present (``headless``: but the
    untied ``lm_head``); returns the flat tree."""
    expected = _flatten(expected_param_shapes(config))
    if headless:
        expected = {p: v for p, v in expected.items() if p[0] != "lm_head"}
    got = _flatten(params)
    missing = sorted("/".join(p) for p in expected if p not in got)
    surplus = sorted("/".join(p) for p in got if p not in expected)
    hf_missing = sorted(n for n in table if n not in tensors)
    problems = []
    if hf_missing:
        problems.append(f"missing tensors: {_clip(hf_missing)}")
    if missing:
        problems.append(f"unfilled parameters: {_clip(missing)}")
    if unused:
        hint = " (BERT task heads: pass ignore=('cls.',) to drop them)" if any(
            n.startswith("cls.") for n in unused) else ""
        problems.append(f"unused tensors: {_clip(unused)}{hint}")
    if surplus or dupes:
        problems.append(f"internal table error, extra/duplicate parameters {_clip(surplus + dupes)}")
    if problems:
        raise GeomjaxError(
            f"{what} checkpoint does not match its config.json: " + "; ".join(problems)
            + ". Use the weights saved together with this config.json"
        )
    shape_err = [
        f"{'/'.join(p)}: expected {tuple(expected[p].shape)}, got {tuple(np.shape(v))}"
        for p, v in got.items() if tuple(np.shape(v)) != tuple(expected[p].shape)
    ]
    if shape_err:
        raise GeomjaxError(f"{what} weights have wrong shapes for config.json: {_clip(shape_err)}; "
                           "the weights do not belong to this config")
    return got


def _is_float(dt) -> bool:
    return np.issubdtype(dt, np.floating) or dt == np.dtype(jnp.bfloat16)


def _target_dtype(got: Mapping[str, np.dtype], dtype, what: str) -> np.dtype:
    """The checkpoint's one floating dtype (bfloat16 included) over its used tensors ``{name: dtype}``, or the
    explicitly requested one."""
    dtypes = set(got.values())
    nonfloat = sorted(p for p, v in got.items() if not _is_float(v))
    if nonfloat:
        raise GeomjaxError(f"{what} weights must be floating point; non-float tensors: {_clip(nonfloat)}")
    if dtype is None:
        if len(dtypes) != 1:
            raise GeomjaxError(
                f"{what} weights have mixed dtypes {sorted(map(str, dtypes))}; pass dtype='float32' "
                "(--param-dtype float32) to convert them explicitly"
            )
        return dtypes.pop()
    target = np.dtype(jnp.bfloat16) if str(dtype) == "bfloat16" else np.dtype(dtype)
    if not _is_float(target):
        raise GeomjaxError(f"dtype must be a floating dtype, got {target}")
    return target


def _clip(names: list[str], n: int = 12) -> str:
    return ", ".join(names[:n]) + (f" ... ({len(names)} in all)" if len(names) > n else "")


def with_pooler(config: BertConfig, tensors: Mapping[str, Shaped[Array, "..."]]) -> BertConfig:
    """Return ``config`` with ``add_pooling_layer`` set by whether pooler weights are present."""
    has = any(k.removeprefix("bert.").startswith("pooler.") for k in tensors)
    return dataclasses.replace(config, add_pooling_layer=has)
