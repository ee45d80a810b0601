"""The building blocks of the families' Hugging Face tables: config-key whitelists and tensor transforms.

Every family module (``gpt2.py``, ``llama.py``, ``gpt_neox.py``, ...) states its own ``config.json``
reader and its weight table with these pieces; :mod:`geomjax.convert.tables` runs them.

Config: every ``config.json`` key is either *used* (becomes a config field), *checked* (must have the
one value the port implements), or *ignored* (does not change the inference forward pass: dropout rates,
initialisation, token ids, bookkeeping). Any other key is rejected by name (:func:`check_keys`), so a
variant the port does not implement can never load silently.

Weights: a table maps every Hugging Face tensor name (below the family's prefix) to a
:class:`Transform` ``(array, config) -> [(geomjax path, array), ...]`` that says where it goes and how its
layout changes (``nn.Linear`` weights are stored (out, in) and are transposed; per-head projections
become (d, H, K) / (H, K, d)), and the tensor's Hugging Face shape, so that a table also runs backwards
(:func:`geomjax.convert.writer.save_checkpoint` writes a checkpoint transformers reads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.theory.positional import ROPE_TYPES

Lookup = Callable[[tuple[str, ...]], tuple[int, ...]]
"""geomjax parameter path -> its shape (the model's parameter tree)."""


@dataclasses.dataclass(frozen=True)
class Transform:
    """A table entry: ``fn(Hugging Face array, config) -> [(geomjax parameter path, array)]`` (pure reshapes,
    transposes and slices of the array) and ``shape(config, Hugging Face name, lookup) -> the array's shape``
    (``lookup``: a geomjax path's shape). Calling it runs ``fn``."""

    fn: Callable[[np.ndarray, object], list[tuple[tuple[str, ...], np.ndarray]]]
    shape: Callable[[object, str, Lookup], tuple[int, ...]]

    def __call__(self, a: np.ndarray, c) -> list[tuple[tuple[str, ...], np.ndarray]]:
        return self.fn(a, c)

IGNORED_COMMON = frozenset(
    {
        "_name_or_path", "_num_labels", "architectures", "model_type", "transformers_version",
        "dtype", "torch_dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
        "sep_token_id", "decoder_start_token_id", "initializer_range", "gradient_checkpointing",
        "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
        "task_specific_params", "tokenizer_class", "prefix", "return_dict", "output_hidden_states",
        "output_attentions", "torchscript", "use_return_dict", "max_length", "min_length",
        "classifier_dropout", "chunk_size_feed_forward", "tie_encoder_decoder",
        "_attn_implementation_autoset", "output_past",
        # transformers 5.0 writes the keys its rope-parameter validation skips; validation only
        "ignore_keys_at_rope_validation",
    }
)
"""Keys of every config.json that do not change the inference forward pass."""

CHECKED_COMMON: dict[str, object] = {
    "add_cross_attention": False,
    "is_encoder_decoder": False,
    "pruned_heads": {},
}
"""Keys that must hold exactly this value (anything else changes the forward pass)."""


def check_keys(cfg: Mapping, used, checked, ignored, what: str, extra_ignore: Iterable[str]) -> None:
    """Reject a config.json with a checked key of another value or a key in none of the lists (by name)."""
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


def require(cfg: Mapping, keys: Iterable[str], what: str) -> None:
    """Raise unless every size in ``keys`` is in the config.json (sizes have no defaults)."""
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise GeomjaxError(f"{what} config: missing required attribute(s) {missing}")


def rope_from_hf(params: Mapping | None, scaling: Mapping | None, default_theta, what: str,
                 allowed_extra: Iterable[str] = ()) -> dict:
    """rope_theta / rope_type / rope_factor from one ``rope_parameters`` object (transformers >= 5) or the
    older ``rope_scaling``; a rope type geomjax does not implement is rejected by name.

    ``allowed_extra``: further keys the family reads itself (GPT-NeoX's ``partial_rotary_factor``).
    """
    params, scaling = params or {}, scaling or {}
    if not isinstance(params, Mapping) or not isinstance(scaling, Mapping):
        raise GeomjaxError(f"{what} config: rope_parameters / rope_scaling must be objects")
    merged = {**scaling, **params}
    rtype = merged.get("rope_type", merged.get("type", "default"))
    if rtype not in ROPE_TYPES:
        raise GeomjaxError(
            f"{what} config: rope type {rtype!r} is not implemented (geomjax implements {ROPE_TYPES}, exactly as "
            "transformers computes them); use a checkpoint without that rope scaling")
    extra = sorted(set(merged) - {"rope_type", "type", "rope_theta", "factor", *allowed_extra})
    if extra:
        raise GeomjaxError(f"{what} config: rope parameter(s) {extra} are not implemented")
    theta = float(merged.get("rope_theta", default_theta))
    factor = float(merged.get("factor", 1.0)) if rtype == "linear" else 1.0
    if rtype == "linear" and "factor" not in merged:
        raise GeomjaxError(f"{what} config: linear rope scaling needs a 'factor'")
    return {"rope_theta": theta, "rope_type": rtype, "rope_factor": factor}


def expect(a: np.ndarray, shape: tuple, name: str) -> None:
    """Raise unless a tensor has the shape its config implies."""
    if a.shape != shape:
        raise GeomjaxError(f"tensor {name}: expected shape {shape} from config.json, got {a.shape}; "
                           "the weights do not belong to this config")


def copy(*path: str) -> Transform:
    """The tensor as is, at ``path``."""
    return Transform(lambda a, c: [(path, a)], lambda c, n, look: look(path))


def transpose(*path: str) -> Transform:
    """A ``nn.Linear`` weight (out, in) as a kernel (in, out) at ``path``."""
    return Transform(lambda a, c: [(path, np.ascontiguousarray(a.T))], lambda c, n, look: look(path)[::-1])


def heads_out_kernel(transpose: bool) -> Transform:
    """The attention output projection as ``attn/o/kernel`` (H, K, d) (from (H·K, d), or (d, H·K) transposed)."""
    def f(a, c):
        w = a.T if transpose else a  # -> (in = H*K, out = d)
        return [(("attn", "o", "kernel"), np.ascontiguousarray(w).reshape(c.num_heads, c.head_dim, -1))]

    def shape(c, n, look):
        hk = c.num_heads * c.head_dim
        return (c.d_model, hk) if transpose else (hk, c.d_model)
    return Transform(f, shape)


def heads_in(name: str, kv: bool, check: bool = True) -> Transform:
    """A Linear weight (H·K, d) as ``attn/{name}/kernel`` (d, H, K), its bias (H·K,) as ``attn/{name}/bias`` (H, K);
    H_kv heads for k, v (``kv``); ``check``: the shape against the config, naming ``{name}_proj``."""
    def f(a, c):
        H = c.num_kv_heads if kv else c.num_heads
        if a.ndim == 1:
            if check:
                expect(a, (H * c.head_dim,), f"{name}_proj.bias")
            return [(("attn", name, "bias"), a.reshape(H, c.head_dim))]
        if check:
            expect(a, (H * c.head_dim, c.d_model), f"{name}_proj.weight")
        return [(("attn", name, "kernel"), np.ascontiguousarray(a.T).reshape(c.d_model, H, c.head_dim))]

    def shape(c, n, look):
        hk = (c.num_kv_heads if kv else c.num_heads) * c.head_dim
        return (hk,) if n.endswith("bias") else (hk, c.d_model)
    return Transform(f, shape)


def linear_heads_in(name: str, kv: bool) -> Transform:
    """``{name}_proj.weight`` (H·K, d) as ``attn/{name}/kernel`` (d, H, K); H_kv heads for k, v (``kv``)."""
    return heads_in(name, kv)


def linear_heads_bias(name: str, kv: bool) -> Transform:
    """``{name}_proj.bias`` (H·K,) as ``attn/{name}/bias`` (H, K); H_kv heads for k, v (``kv``)."""
    return heads_in(name, kv)


def fused_qkv_per_head(name: str) -> Transform:
    """A fused ``query_key_value`` Linear whose output axis is laid out per head as (H, 3, K) (BLOOM's
    ``_reshape``, GPT-NeoX's ``view(..., H, 3K)``): weight (3d, d) -> q, k, v kernels (d, H, K); bias
    (3d,) -> q, k, v biases (H, K)."""
    def f(a, c):
        d, H, K = c.d_model, c.num_heads, c.head_dim
        if a.ndim == 2:
            expect(a, (3 * H * K, d), name + ".weight")
            w = np.ascontiguousarray(a.T).reshape(d, H, 3, K)
            return [(("attn", n, "kernel"), np.ascontiguousarray(w[:, :, i, :])) for i, n in enumerate("qkv")]
        expect(a, (3 * H * K,), name + ".bias")
        b = a.reshape(H, 3, K)
        return [(("attn", n, "bias"), np.ascontiguousarray(b[:, i, :])) for i, n in enumerate("qkv")]

    def shape(c, n, look):
        hk3 = 3 * c.num_heads * c.head_dim
        return (hk3,) if n.endswith("bias") else (hk3, c.d_model)
    return Transform(f, shape)


def under(prefix: tuple[str, ...], t: Transform) -> Transform:
    """``t`` with its geomjax paths moved below ``prefix``."""
    return Transform(lambda a, c: [(prefix + p, x) for p, x in t(a, c)],
                     lambda c, n, look: t.shape(c, n, lambda p: look(prefix + p)))


def per_layer(table: dict[str, Transform], n_layers: int, hf: str, ours: str,
              layer_table: Mapping[str, Transform]) -> None:
    """Add ``layer_table`` once per layer: HF ``{hf}.{i}.{name}`` -> geomjax ``{ours}_{i}/...``."""
    for layer in range(n_layers):
        for k, t in layer_table.items():
            table[f"{hf}.{layer}.{k}"] = under((f"{ours}_{layer}",), t)


LM_HEAD_TABLE: dict[str, Transform] = {
    "lm_head.weight": transpose("lm_head", "kernel"),  # Linear (V, d) -> (d, V); untied models only
}
"""The untied read-out of the causal decoders."""
