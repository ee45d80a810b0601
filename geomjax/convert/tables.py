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

``convert_tensors`` then checks that every parameter of the Flax model was filled exactly once
with the right shape and dtype and that no tensor was left unused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import jax
import numpy as np

from geomjax.models.bert import Bert, BertConfig
from geomjax.models.gpt2 import GPT2, GPT2Config

__all__ = [
    "BERT_LAYER_TABLE",
    "GPT2_LAYER_TABLE",
    "bert_config_from_hf",
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
        raise ValueError(
            f"{what} config: unsupported attribute value(s): {'; '.join(bad)}. geomjax's port does "
            "not implement this variant; use a checkpoint with the standard architecture"
        )
    known = set(used) | set(checked) | set(ignored) | set(extra_ignore)
    unknown = sorted(k for k in cfg if k not in known)
    if unknown:
        raise ValueError(
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
        raise ValueError(
            f"GPT-2 config: activation_function={act!r} is not implemented (only "
            f"{_GPT2_ACTIVATIONS}); use a standard GPT-2 checkpoint"
        )
    missing = [k for k in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions") if k not in cfg]
    if missing:
        raise ValueError(f"GPT-2 config: missing required attribute(s) {missing}")
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
        raise ValueError(
            f"BERT config: hidden_act={act!r} is not implemented (only 'gelu', the erf form); use "
            "a standard BERT checkpoint"
        )
    if "embedding_size" in cfg and cfg["embedding_size"] != cfg.get("hidden_size"):
        raise ValueError(
            f"BERT config: embedding_size={cfg['embedding_size']} differs from hidden_size "
            "(factorised embeddings, ALBERT-style) and is not implemented"
        )
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "max_position_embeddings") if k not in cfg]
    if missing:
        raise ValueError(f"BERT config: missing required attribute(s) {missing}")
    kw = {k: cfg[k] for k in _BERT_USED if k in cfg}
    return BertConfig(**kw, causal=bool(cfg.get("is_decoder", False)),
                      add_pooling_layer=add_pooling_layer)


def config_from_hf(cfg: Mapping, ignore_config_keys: Iterable[str] = ()) -> GPT2Config | BertConfig:
    """Dispatch on ``model_type`` ("gpt2" or "bert") to the matching config builder."""
    mt = cfg.get("model_type")
    if mt == "gpt2":
        return gpt2_config_from_hf(cfg, ignore_config_keys)
    if mt == "bert":
        return bert_config_from_hf(cfg, ignore_config_keys)
    raise ValueError(
        f"config.json has model_type={mt!r}; geomjax ports only 'gpt2' and 'bert' (use the toy "
        "model family for other architectures)"
    )


def model_from_config(config: GPT2Config | BertConfig):
    """Return the Flax module for a config (GPT2 or Bert)."""
    if isinstance(config, GPT2Config):
        return GPT2(config)
    if isinstance(config, BertConfig):
        return Bert(config)
    raise TypeError(f"no geomjax model for config type {type(config).__name__}")


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
        raise ValueError(f"tensor {name}: expected shape {shape} from config.json, got {a.shape}; "
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


def _strip_prefix(tensors: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for k, v in tensors.items():
        base = k[len(prefix):] if k.startswith(prefix) else k
        if base in out:
            raise ValueError(
                f"tensor {base!r} appears both with and without the {prefix!r} prefix; the "
                "checkpoint mixes two models: re-save it"
            )
        out[base] = v
    return out


def _full_table(config) -> tuple[dict[str, Transform], set[str]]:
    """Flat {hf_name: transform to absolute geomjax path} and the set of ignorable buffer names."""
    table: dict[str, Transform] = {}
    buffers: set[str] = set()

    def under(prefix: tuple[str, ...], t: Transform) -> Transform:
        return lambda a, c: [(prefix + p, x) for p, x in t(a, c)]

    if isinstance(config, GPT2Config):
        table.update(GPT2_TOP_TABLE)
        for layer in range(config.n_layer):
            for k, t in GPT2_LAYER_TABLE.items():
                table[f"h.{layer}.{k}"] = under((f"h_{layer}",), t)
            buffers.update(f"h.{layer}.{b}" for b in GPT2_LAYER_BUFFERS)
    elif isinstance(config, BertConfig):
        table.update(BERT_TOP_TABLE)
        if config.add_pooling_layer:
            table.update(BERT_POOLER_TABLE)
        for layer in range(config.num_hidden_layers):
            for k, t in BERT_LAYER_TABLE.items():
                table[f"encoder.layer.{layer}.{k}"] = under((f"layer_{layer}",), t)
        buffers.update(BERT_BUFFERS)
    else:
        raise TypeError(f"no conversion table for {type(config).__name__}")
    return table, buffers


def expected_param_shapes(config) -> dict:
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


def convert_tensors(
    tensors: Mapping[str, np.ndarray],
    config: GPT2Config | BertConfig,
    *,
    dtype: str | np.dtype | None = None,
    ignore: Iterable[str] = (),
) -> dict:
    """Convert Hugging Face tensors into a geomjax parameter tree through the explicit tables.

    Accepts the prefixes Hugging Face writes for head models ("transformer." for GPT2LMHeadModel,
    "bert." for BertFor*). GPT-2's ``lm_head.weight``, when saved, must equal ``wte`` (tied).

    Args:
      tensors: Hugging Face name -> array.
      config: the model config (decides the expected names and shapes).
      dtype: None keeps the checkpoint's floating dtype (it must be the same for every tensor);
        otherwise every parameter is converted to this dtype (an explicit request).
      ignore: name prefixes of tensors to drop on purpose (e.g. ``("cls.",)`` for BERT's MLM/NSP
        heads, which geomjax does not implement).

    Returns:
      Nested dict of NumPy arrays matching the Flax model's ``params``.

    Raises:
      ValueError: missing parameters, unused tensors, wrong shapes, mixed or non-float dtypes,
        untied lm_head. The message lists the offending names.
    """
    ignore = tuple(ignore)
    if isinstance(config, GPT2Config):
        tensors = _strip_prefix(tensors, "transformer.")
        what = "GPT-2"
    else:
        tensors = _strip_prefix(tensors, "bert.")
        what = "BERT"
    table, buffers = _full_table(config)

    tensors = dict(tensors)
    lm_head = tensors.pop("lm_head.weight", None) if isinstance(config, GPT2Config) else None

    params: dict = {}
    unused, dupes = [], []
    for name, arr in sorted(tensors.items()):
        if name in buffers or name.startswith(ignore):
            continue
        t = table.get(name)
        if t is None:
            unused.append(name)
            continue
        for path, value in t(arr, config):
            if not _set(params, path, value):
                dupes.append("/".join(path))

    expected = _flatten(expected_param_shapes(config))
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
        raise ValueError(
            f"{what} checkpoint does not match its config.json: " + "; ".join(problems)
            + ". Use the weights saved together with this config.json"
        )

    shape_err = [
        f"{'/'.join(p)}: expected {tuple(expected[p].shape)}, got {tuple(np.shape(v))}"
        for p, v in got.items() if tuple(np.shape(v)) != tuple(expected[p].shape)
    ]
    if shape_err:
        raise ValueError(f"{what} weights have wrong shapes for config.json: {_clip(shape_err)}; "
                         "the weights do not belong to this config")

    dtypes = {np.dtype(v.dtype) for v in got.values()}
    nonfloat = sorted("/".join(p) for p, v in got.items() if not np.issubdtype(v.dtype, np.floating))
    if nonfloat:
        raise ValueError(f"{what} weights must be floating point; non-float tensors: {_clip(nonfloat)}")
    if dtype is None:
        if len(dtypes) != 1:
            raise ValueError(
                f"{what} weights have mixed dtypes {sorted(map(str, dtypes))}; pass dtype='float32' "
                "to convert them explicitly"
            )
        target = dtypes.pop()
    else:
        target = np.dtype(dtype)
        if not np.issubdtype(target, np.floating):
            raise ValueError(f"dtype must be a floating dtype, got {target}")
    params = jax.tree.map(lambda v: np.asarray(v, dtype=target), params)

    if lm_head is not None:
        wte = params["wte"]["embedding"]
        if lm_head.shape != wte.shape or not np.array_equal(lm_head.astype(target), wte):
            raise ValueError(
                "GPT-2 checkpoint has an lm_head.weight different from wte.weight; untied "
                "unembeddings are not implemented (GPT-2 ties them)"
            )
    return params


def _clip(names: list[str], n: int = 12) -> str:
    return ", ".join(names[:n]) + (f" ... ({len(names)} in all)" if len(names) > n else "")


def with_pooler(config: BertConfig, tensors: Mapping[str, np.ndarray]) -> BertConfig:
    """Return ``config`` with ``add_pooling_layer`` set by whether pooler weights are present."""
    has = any(k.removeprefix("bert.").startswith("pooler.") for k in tensors)
    return dataclasses.replace(config, add_pooling_layer=has)
