"""A configurable toy transformer (Flax linen) for the training experiments.

Covers the small models of the sources (the authors' released code):

* NanoGPT on Shakespeare characters (Song & Zhong §5): pre-LN, GELU, tied unembedding, no biases,
  GPT-2 init (N(0, 0.02), residual projections N(0, 0.02/√(2L))) — :func:`nanogpt_config`;
* Nanda et al.'s modular-addition model (clock blog): 1 layer, ReLU, no LayerNorm, untied, no
  attention biases, init randn/√d_model (W_U randn/√d_vocab) — :func:`nanda_config`; the ReLU-free
  variant of the blog is ``activation="none"``;
* Bao et al.'s 1-layer, single-head, post-LN model, width 128 — :func:`bao_config`.

``model.apply({"params": p}, ids) -> (logits (B, T, V_out), ToyIntermediates)``. Parameters, per
block ``block_{i}``::

    ln_1/{scale, bias}  attn/{q,k,v}/kernel (d, H, K)  attn/{q,k,v}/bias (H, K)
    attn/o/kernel (H, K, d)  attn/o/bias (d,)  ln_2/...  mlp/fc/kernel (d, F)  mlp/proj/kernel (F, d)

so head h reads ``W_q = attn/q/kernel[:, h, :]`` (d, K) and writes ``W_o = attn/o/kernel[h]`` (K, d);
:func:`head_weights` returns them stacked by head. Top level: ``embed/embedding`` (V, d),
``pos_embed/embedding`` (max_len, d) when positions are learned, ``ln_f`` (pre-LN only),
``unembed/kernel`` (d, V_out) when untied.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from geomjax.errors import GeomjaxError
from geomjax.models.common import (
    ATTENTION_HOOKS, BLOCK_HOOKS, HookPoint, embed_lookup, gelu_erf, scaled_dot_product_attention)
from geomjax.typing import Array, ArrayLike, Float, Int, Params

__all__ = [
    "ClockActivations",
    "ToyConfig",
    "ToyIntermediates",
    "ToyTransformer",
    "bao_config",
    "check_ids",
    "clock_activations",
    "check_one_layer",
    "clock_positions",
    "head_weights",
    "nanda_config",
    "nanogpt_config",
    "param_count",
]

_ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu": gelu_erf,  # exact erf form (torch nn.GELU default)
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "none": lambda x: x,  # ReLU-free (linear) MLP
}


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """Hyperparameters of :class:`ToyTransformer` (frozen: hashable, usable as a static argument).

    Attributes:
      vocab_size: V, rows of the token embedding.
      n_layers: L blocks.
      n_heads: H heads per block.
      d_model: residual width d.
      d_mlp: MLP width F; 0 gives an attention-only model.
      max_len: number of positions (longer inputs raise).
      d_head: K per head (default d_model // n_heads).
      vocab_out: output classes (default V; Nanda: 114 in and out).
      pos_embedding: ``"learned"``, ``"sinusoidal"`` (fixed, Vaswani et al.) or ``"none"``.
      layer_norm: ``"pre"`` (GPT-2; final LayerNorm ``ln_f`` before the unembedding), ``"post"``
        (original transformer / fairseq default: LN after each residual add) or ``"none"``.
      ln_bias: LayerNorm has a bias (NanoGPT's ``bias=False`` removes it).
      ln_eps: LayerNorm epsilon.
      activation: ``"relu"``, ``"gelu"`` (erf), ``"gelu_tanh"`` or ``"none"`` (ReLU-free MLP).
      dropout: rate on the embedding output, attention probabilities and each residual branch.
      tie_embeddings: unembedding = token embeddingᵀ (needs vocab_out == vocab_size).
      attn_bias: biases in q/k/v/o.
      mlp_bias: biases in the MLP.
      unembed_bias: bias in the (untied) unembedding.
      scale_embeddings: multiply token embeddings by √d (fairseq / Vaswani et al.).
      causal: causal self-attention mask.
      init: ``"gpt2"`` (N(0, 0.02); o and MLP-out N(0, 0.02/√(2L)) as NanoGPT/GPT-2),
        ``"nanda"`` (randn/√d_model everywhere, W_U randn/√vocab_out, biases 0) or ``"fairseq"``
        (fairseq's ``transformer_lm``: embeddings and output embedding N(0, 1/d); q, k, v Xavier-uniform
        with gain 1/√2, o and the MLP Xavier-uniform; biases 0).
    """

    vocab_size: int = 65
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 128
    d_mlp: int = 512
    max_len: int = 128
    d_head: int | None = None
    vocab_out: int | None = None
    pos_embedding: str = "learned"
    layer_norm: str = "pre"
    ln_bias: bool = True
    ln_eps: float = 1e-5
    activation: str = "gelu"
    dropout: float = 0.0
    tie_embeddings: bool = False
    attn_bias: bool = True
    mlp_bias: bool = True
    unembed_bias: bool = False
    scale_embeddings: bool = False
    causal: bool = True
    init: str = "gpt2"

    def __post_init__(self):
        def bad(msg):
            raise ValueError(f"ToyConfig: {msg}")

        for name in ("vocab_size", "n_layers", "n_heads", "d_model", "max_len"):
            if int(getattr(self, name)) < 1:
                bad(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_mlp < 0:
            bad(f"d_mlp must be >= 0 (0 = attention-only), got {self.d_mlp}")
        if self.d_head is None and self.d_model % self.n_heads:
            bad(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set d_head explicitly")
        if self.pos_embedding not in ("learned", "sinusoidal", "none"):
            bad(f"pos_embedding must be 'learned', 'sinusoidal' or 'none', got {self.pos_embedding!r}")
        if self.layer_norm not in ("pre", "post", "none"):
            bad(f"layer_norm must be 'pre', 'post' or 'none', got {self.layer_norm!r}")
        if self.activation not in _ACTIVATIONS:
            bad(f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")
        if not 0.0 <= self.dropout < 1.0:
            bad(f"dropout must lie in [0, 1), got {self.dropout}")
        if self.init not in ("gpt2", "nanda", "fairseq"):
            bad(f"init must be 'gpt2', 'nanda' or 'fairseq', got {self.init!r}")
        if self.tie_embeddings and self.n_out != self.vocab_size:
            bad(f"tie_embeddings needs vocab_out == vocab_size, got {self.vocab_out} vs {self.vocab_size}")

    @property
    def head_dim(self) -> int:
        """K, the per-head width."""
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    @property
    def n_out(self) -> int:
        """Number of output logits."""
        return self.vocab_out if self.vocab_out is not None else self.vocab_size

    def replace(self, **kw) -> "ToyConfig":
        """Copy with some fields changed."""
        return dataclasses.replace(self, **kw)


def nanogpt_config(vocab_size: int = 65, **overrides) -> ToyConfig:
    """NanoGPT ``shakespeare_char`` (Song & Zhong §5, the authors' released code): 6 layers, 6 heads, d 384, block 256,
    dropout 0.1, no biases (LayerNorm included), tied unembedding, GELU, GPT-2 init."""
    cfg = dict(vocab_size=vocab_size, n_layers=6, n_heads=6, d_model=384, d_mlp=4 * 384, max_len=256,
               pos_embedding="learned", layer_norm="pre", ln_bias=False, activation="gelu", dropout=0.1,
               tie_embeddings=True, attn_bias=False, mlp_bias=False, init="gpt2")
    return ToyConfig(**(cfg | overrides))


def nanda_config(p: int = 113, **overrides) -> ToyConfig:
    """Nanda et al.'s modular-addition transformer (the authors' released code): vocab p+1 in and out, d 128, 4 heads of
    32, d_mlp 512, 1 layer, ReLU, learned positions, no LayerNorm, untied, no attention biases, MLP
    biases, init randn/√d_model (W_U randn/√d_vocab). ``activation="none"`` gives the ReLU-free variant."""
    cfg = dict(vocab_size=p + 1, n_layers=1, n_heads=4, d_model=128, d_mlp=512, max_len=3,
               pos_embedding="learned", layer_norm="none", activation="relu", dropout=0.0,
               tie_embeddings=False, attn_bias=False, mlp_bias=True, unembed_bias=False, init="nanda")
    return ToyConfig(**(cfg | overrides))


def bao_config(vocab_size: int, max_len: int = 512, **overrides) -> ToyConfig:
    """Bao et al. §7 (fairseq): 1-layer, single-head, post-LN LM with embedding/attention/FFN width 128.

    The embeddings are tied here and dropout is 0; fairseq's ``transformer_lm`` default is an untied
    output embedding with dropout 0.1, which is what the LocATER experiment uses
    (:mod:`geomjax.train.locater` passes ``tie_embeddings=False, dropout=0.1``).
    """
    cfg = dict(vocab_size=vocab_size, n_layers=1, n_heads=1, d_model=128, d_mlp=128, max_len=max_len,
               pos_embedding="sinusoidal", layer_norm="post", activation="relu", tie_embeddings=True,
               scale_embeddings=True, init="gpt2")
    return ToyConfig(**(cfg | overrides))


# a pytree: JAX rebuilds it with non-array leaves (ArgInfo when lowering, None or sentinels in tree maps),
# so the test-time shape hook must not check its __init__ (docs/DESIGN.md, Shapes)
@typing.no_type_check
@struct.dataclass
class ToyIntermediates:
    """What :class:`ToyTransformer` exposes besides the logits (a pytree).

    Attributes:
      hidden_states: L+1 arrays (B, T, d): the embedding output, then each block's output; for a
        pre-LN model the last entry has ``ln_f`` applied (Hugging Face's convention, as in
        ``geomjax.models.common.Intermediates``).
      residual: L+1 arrays (B, T, d): the residual stream before any final LayerNorm.
      final_ln: (B, T, d) output of ``ln_f`` (pre-LN) or None.
      attentions: None, or L arrays (B, H, T, T) of attention probabilities (``return_attention``).
      mlp_post: None, or L arrays (B, T, F) of MLP activations after the nonlinearity
        (``return_mlp``; Nanda's key-frequency analysis uses them at the "=" position).
    """

    hidden_states: tuple[Array, ...]
    residual: tuple[Array, ...] = ()
    final_ln: Array | None = None
    attentions: tuple[Array, ...] | None = None
    mlp_post: tuple[Array, ...] | None = None


def _normal(std: float):
    return nn.initializers.normal(std)


def _inits(cfg: ToyConfig) -> dict[str, nn.initializers.Initializer]:
    if cfg.init == "nanda":
        s = 1.0 / math.sqrt(cfg.d_model)
        return dict(embed=_normal(s), pos=_normal(s), qkv=_normal(s), o=_normal(s), fc=_normal(s),
                    proj=_normal(s), unembed=_normal(1.0 / math.sqrt(cfg.n_out)))
    if cfg.init == "fairseq":  # fairseq MultiheadAttention.reset_parameters, Embedding, Linear (transformer_lm)
        s = cfg.d_model ** -0.5
        # flax's DenseGeneral draws its kernel as the flattened (fan_in, fan_out) matrix, so the fans are fairseq's
        xavier = lambda gain: nn.initializers.variance_scaling(gain ** 2, "fan_avg", "uniform")
        return dict(embed=_normal(s), pos=_normal(s), qkv=xavier(2 ** -0.5), o=xavier(1.0), fc=xavier(1.0),
                    proj=xavier(1.0), unembed=_normal(s))
    s, s_res = 0.02, 0.02 / math.sqrt(2 * cfg.n_layers)
    return dict(embed=_normal(s), pos=_normal(s), qkv=_normal(s), o=_normal(s_res), fc=_normal(s),
                proj=_normal(s_res), unembed=_normal(s))


def sinusoidal_positions(n: int, d: int) -> Float[Array, "n d"]:
    """Fixed sinusoidal positions (Vaswani et al. §3.5): sin on even, cos on odd features."""
    pos = np.arange(n)[:, None]
    i = np.arange(0, d, 2)[None, :]
    ang = pos / np.power(10000.0, i / d)
    out = np.zeros((n, d), dtype=np.float32)
    out[:, 0::2] = np.sin(ang)
    out[:, 1::2] = np.cos(ang[:, : d // 2])
    return jnp.asarray(out)


def check_ids(ids: ArrayLike, cfg: ToyConfig) -> Int[Array, "B T"]:
    """Check (B, T) ids against the config (rank, T <= max_len, integer, range when concrete); int32.

    Raises:
      ValueError: naming the problem and the fix.
    """
    shape = np.shape(ids)
    if len(shape) != 2:
        raise ValueError(f"ToyTransformer: ids must be (batch, seq_len), got shape {shape}; add a batch axis ids[None]")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"ToyTransformer: ids is empty (shape {shape})")
    if shape[1] > cfg.max_len:
        raise ValueError(
            f"ToyTransformer: sequence length {shape[1]} exceeds max_len={cfg.max_len}; use windows of "
            f"at most {cfg.max_len} tokens or a config with a larger max_len (nothing is truncated)"
        )
    dtype = np.dtype(ids.dtype if hasattr(ids, "dtype") else np.asarray(ids).dtype)
    if not np.issubdtype(dtype, np.integer):
        raise ValueError(f"ToyTransformer: ids must be integers, got dtype {dtype}")
    if isinstance(ids, jax.core.Tracer):
        return ids.astype(jnp.int32)
    arr = np.asarray(ids)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= cfg.vocab_size:
        raise ValueError(
            f"ToyTransformer: ids must lie in [0, {cfg.vocab_size}) (vocab_size), got min {lo}, max {hi}; "
            "the tokenizer does not match the model config"
        )
    return jnp.asarray(arr, jnp.int32)


def _hook_points(names) -> dict[str, HookPoint]:
    """Parameter-free :class:`~geomjax.models.common.HookPoint` s for a compact module (``hook_<name>``)."""
    return {n.replace(".", "_"): HookPoint(n, name="hook_" + n.replace(".", "_")) for n in names}


class _LayerNorm(nn.Module):
    eps: float
    use_bias: bool

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        mean = jnp.mean(x, axis=-1, keepdims=True)
        xc = x - mean
        var = jnp.mean(xc * xc, axis=-1, keepdims=True)
        bshape = (1,) * (x.ndim - 1) + (d,)  # explicit broadcast (strict rank promotion)
        y = xc * jax.lax.rsqrt(var + self.eps) * self.param("scale", nn.initializers.ones, (d,), jnp.float32).reshape(bshape)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (d,), jnp.float32).reshape(bshape)
        return y


class _Attention(nn.Module):
    cfg: ToyConfig

    @nn.compact
    def __call__(self, x, deterministic: bool):
        cfg = self.cfg
        ini = _inits(cfg)
        H, K = cfg.n_heads, cfg.head_dim
        dense = lambda name, init: nn.DenseGeneral((H, K), use_bias=cfg.attn_bias, kernel_init=init, name=name)
        hp = _hook_points(ATTENTION_HOOKS)
        # projections on (B·T, d) rows, as in _MLP: XLA:CPU's weight gradients are faster on 2-D inputs
        B, T = x.shape[0], x.shape[1]
        rows = x.reshape(B * T, x.shape[-1])
        q = hp["attn_q"](dense("q", ini["qkv"])(rows).reshape(B, T, H, K))  # (B, T, H, K)
        k = hp["attn_k"](dense("k", ini["qkv"])(rows).reshape(B, T, H, K))
        v = hp["attn_v"](dense("v", ini["qkv"])(rows).reshape(B, T, H, K))
        mask = jnp.tril(jnp.ones((T, T), dtype=bool))[None, None] if cfg.causal else None
        drop = nn.Dropout(cfg.dropout)
        z, probs = scaled_dot_product_attention(
            q, k, v, mask, 1.0 / math.sqrt(K), lambda p: drop(p, deterministic=deterministic), hooks=hp)
        out = nn.DenseGeneral(cfg.d_model, axis=(-2, -1), use_bias=cfg.attn_bias, kernel_init=ini["o"],
                              name="o")(hp["attn_z"](z).reshape(B * T, H, K))
        return out.reshape(B, T, cfg.d_model), probs


class _MLP(nn.Module):
    cfg: ToyConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        ini = _inits(cfg)
        # Position-wise, so run on (B·T, d) rows: XLA:CPU's backward of the two Dense layers is
        # markedly faster on 2-D inputs than on (B, T, d) (benchmarks/RESULTS.md).
        lead = x.shape[:-1]
        rows = x.reshape(-1, x.shape[-1])
        pre = nn.Dense(cfg.d_mlp, use_bias=cfg.mlp_bias, kernel_init=ini["fc"], name="fc")(rows)
        post = _ACTIVATIONS[cfg.activation](pre)
        out = nn.Dense(cfg.d_model, use_bias=cfg.mlp_bias, kernel_init=ini["proj"], name="proj")(post)
        return out.reshape(*lead, cfg.d_model), post.reshape(*lead, cfg.d_mlp)


class _Block(nn.Module):
    cfg: ToyConfig

    @nn.compact
    def __call__(self, x, deterministic: bool):
        cfg = self.cfg
        drop = lambda y: nn.Dropout(cfg.dropout)(y, deterministic=deterministic)
        ln = lambda name: _LayerNorm(cfg.ln_eps, cfg.ln_bias, name=name)
        attn = _Attention(cfg, name="attn")
        mlp = _MLP(cfg, name="mlp") if cfg.d_mlp > 0 else None
        post = None
        hp = _hook_points(BLOCK_HOOKS)
        x = hp["hook_resid_pre"](x)
        if cfg.layer_norm == "pre":
            a, probs = attn(hp["ln1"](ln("ln_1")(x)), deterministic)
            x = hp["hook_resid_mid"](x + drop(hp["attn_out"](a)))
            if mlp is not None:
                m, post = mlp(hp["ln2"](ln("ln_2")(x)))
                x = x + drop(hp["mlp_out"](m))
        elif cfg.layer_norm == "post":
            a, probs = attn(x, deterministic)
            x = hp["hook_resid_mid"](ln("ln_1")(x + drop(hp["attn_out"](a))))
            if mlp is not None:
                m, post = mlp(x)
                x = ln("ln_2")(x + drop(hp["mlp_out"](m)))
        else:
            a, probs = attn(x, deterministic)
            x = hp["hook_resid_mid"](x + drop(hp["attn_out"](a)))
            if mlp is not None:
                m, post = mlp(x)
                x = x + drop(hp["mlp_out"](m))
        x = hp["hook_resid_post"](x)
        return x, probs, post


class ToyTransformer(nn.Module):
    """Configurable decoder (or bidirectional, ``causal=False``) transformer; see :class:`ToyConfig`.

    ``__call__(ids (B, T) int, *, deterministic=True, return_attention=False, return_mlp=False)``
    returns ``(logits (B, T, V_out), ToyIntermediates)``. Dropout (``deterministic=False``) needs
    ``rngs={"dropout": key}``. Ids are checked outside ``jit``; inside ``jit`` an out-of-range id
    gives NaN outputs rather than another token's embedding.
    """

    cfg: ToyConfig

    @nn.compact
    def __call__(
        self,
        ids: Int[Array, "B T"],
        *,
        deterministic: bool = True,
        return_attention: bool = False,
        return_mlp: bool = False,
    ) -> tuple[Float[Array, "B T V"], ToyIntermediates]:
        cfg = self.cfg
        ids = check_ids(ids, cfg)
        T = ids.shape[1]
        ini = _inits(cfg)
        table = self.param("embed", lambda k: {"embedding": ini["embed"](k, (cfg.vocab_size, cfg.d_model), jnp.float32)})
        x = embed_lookup(table["embedding"], ids)
        if cfg.scale_embeddings:
            x = x * math.sqrt(cfg.d_model)
        if cfg.pos_embedding == "learned":
            pos = self.param("pos_embed", lambda k: {"embedding": ini["pos"](k, (cfg.max_len, cfg.d_model), jnp.float32)})
            x = x + pos["embedding"][None, :T]
        elif cfg.pos_embedding == "sinusoidal":
            x = x + sinusoidal_positions(T, cfg.d_model)[None]
        x = nn.Dropout(cfg.dropout)(x, deterministic=deterministic)
        states, probs_all, posts = [x], [], []
        for i in range(cfg.n_layers):
            x, probs, post = _Block(cfg, name=f"block_{i}")(x, deterministic)
            states.append(x)
            probs_all.append(probs)
            posts.append(post)
        final = None
        if cfg.layer_norm == "pre":
            final = HookPoint("ln_final", name="hook_ln_final")(_LayerNorm(cfg.ln_eps, cfg.ln_bias, name="ln_f")(x))
            x = final
        # the read-out on the flattened tokens (B·T, d): one plain GEMM, whose weight gradient XLA:CPU
        # computes ~2x faster than the same contraction over two batch axes (B, T)
        flat = x.reshape(-1, x.shape[-1])
        if cfg.tie_embeddings:
            logits = flat @ table["embedding"].T
        else:
            logits = nn.Dense(cfg.n_out, use_bias=cfg.unembed_bias, kernel_init=ini["unembed"], name="unembed")(flat)
        logits = logits.reshape(*x.shape[:-1], logits.shape[-1])
        hidden = tuple(states[:-1]) + ((final if final is not None else states[-1]),)
        inter = ToyIntermediates(
            hidden_states=hidden,
            residual=tuple(states),
            final_ln=final,
            attentions=tuple(probs_all) if return_attention else None,
            mlp_post=tuple(posts) if (return_mlp and cfg.d_mlp > 0) else None,
        )
        return logits, inter


def head_weights(params: Params, layer: int) -> dict[str, Float[Array, "..."]]:
    """Per-head attention weights of block ``layer``, stacked by head.

    Returns:
      dict with ``W_q``, ``W_k``, ``W_v`` (H, d, K), ``W_o`` (H, K, d) and, when present,
      ``b_q``, ``b_k``, ``b_v`` (H, K) and ``b_o`` (d,); head h computes
      ``q_h = x @ W_q[h] + b_q[h]`` and contributes ``z_h @ W_o[h]`` to the output.
    """
    key = f"block_{layer}"
    if key not in params:
        raise ValueError(f"head_weights: no {key!r} in params (blocks: {sorted(k for k in params if k.startswith('block_'))})")
    a = params[key]["attn"]
    out = {f"W_{n}": jnp.moveaxis(a[n]["kernel"], 1, 0) for n in ("q", "k", "v")}
    out["W_o"] = a["o"]["kernel"]
    for n in ("q", "k", "v", "o"):
        if "bias" in a[n]:
            out[f"b_{n}"] = a[n]["bias"]
    return out


def param_count(params: Params) -> int:
    """Total number of parameters in a pytree."""
    return int(sum(np.prod(np.shape(x)) for x in jax.tree_util.tree_leaves(params)))


def check_one_layer(mcfg: ToyConfig) -> None:
    """Raise ValueError unless ``mcfg`` is a 1-layer, LayerNorm-free, causal model with learned positions
    (Nanda et al.'s code) or none (the clock blog §3: "There are no positional embeddings") and no dropout:
    the architecture :func:`geomjax.train.grokking.last_position_logits` and :func:`clock_activations` implement."""
    bad = []
    if mcfg.n_layers != 1:
        bad.append(f"n_layers={mcfg.n_layers} (need 1)")
    if mcfg.layer_norm != "none":
        bad.append(f"layer_norm={mcfg.layer_norm!r} (need 'none')")
    if not mcfg.causal:
        bad.append("causal=False")
    if mcfg.pos_embedding not in ("learned", "none"):
        bad.append(f"pos_embedding={mcfg.pos_embedding!r} (need 'learned' or 'none')")
    if mcfg.tie_embeddings or mcfg.scale_embeddings or mcfg.dropout or mcfg.d_mlp == 0:
        bad.append("tied/scaled embeddings, dropout or no MLP")
    if bad:
        raise ValueError("last_position_logits: the model is not Nanda et al.'s 1-layer architecture: "
                         + "; ".join(bad) + "; use ToyTransformer.apply for other models")


def clock_positions(params: Params, mcfg: ToyConfig, T: int) -> Float[Array, "T d"]:
    """The position vectors added to the first ``T`` token embeddings of a :func:`check_one_layer` model:
    its learned ``pos_embed`` rows, or zeros where the model has none (the clock blog's model; adding
    zeros leaves every embedding bit-identical)."""
    if mcfg.pos_embedding == "none":
        return jnp.zeros((T, mcfg.d_model), params["embed"]["embedding"].dtype)
    return params["pos_embed"]["embedding"][:T]


# ------------------------------------------------------------------ the clock model's forward pass

class ClockActivations(NamedTuple):
    """Activations of the 1-layer model on all p² inputs (a, b, "="), at the "=" position.

    Attributes (leading axes (p, p) = [a, b]):
      logits: (p, p, V_out).
      attn: (p, p, H, T) attention of the "=" query on positions 0..T−1 (T = 3).
      z: (p, p, H, K) per-head attention outputs before W_O.
      o_heads: (p, p, H, d) per-head outputs z_h W_O[h].
      o: (p, p, d) their sum (plus b_O if any).
      pre: (p, p, F) MLP pre-activations; post: (p, p, F) after the activation.
      mlp_out: (p, p, d) MLP outputs (W_out post + b_out).
    """

    logits: Float[Array, "p p V"]
    attn: Float[Array, "p p H T"]
    z: Float[Array, "p p H K"]
    o_heads: Float[Array, "p p H d"]
    o: Float[Array, "p p d"]
    pre: Float[Array, "p p F"]
    post: Float[Array, "p p F"]
    mlp_out: Float[Array, "p p d"]


def clock_activations(params: Params, mcfg: ToyConfig, p: int) -> ClockActivations:
    """Run Nanda et al.'s 1-layer model on all p² inputs and keep the "=" position's activations.

    Computes the same function as ``ToyTransformer(mcfg).apply`` (a test checks the logits) with the
    per-head z / o vectors the blog analyses (§6–10).

    Args:
      params: ToyTransformer parameters of a 1-layer, LayerNorm-free, causal model.
      mcfg: its :class:`ToyConfig` (vocab p + 1).
      p: modulus.
    """
    check_one_layer(mcfg)
    if mcfg.vocab_size != p + 1:
        raise GeomjaxError(f"clock_activations: the model's vocab_size is {mcfg.vocab_size}, expected p + 1 = {p + 1}")
    if mcfg.activation not in ("relu", "none"):
        raise GeomjaxError(f"clock_activations: activation must be 'relu' or 'none', got {mcfg.activation!r}")
    return _clock_forward(params, mcfg, int(p))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _clock_forward(params: dict, mcfg: ToyConfig, p: int) -> ClockActivations:
    act = _ACTIVATIONS[mcfg.activation]
    a_, b_ = np.divmod(np.arange(p * p), p)
    x = jnp.asarray(np.stack([a_, b_, np.full_like(a_, p)], 1), jnp.int32)
    with jax.default_matmul_precision("highest"):
        h = params["embed"]["embedding"][x] + clock_positions(params, mcfg, 3)[None]  # (N, 3, d)
        at = params["block_0"]["attn"]
        bias = lambda n: at[n]["bias"][None, None] if "bias" in at[n] else 0.0
        q = jnp.einsum("nd,dhk->nhk", h[:, -1], at["q"]["kernel"]) + (at["q"]["bias"][None] if "bias" in at["q"] else 0.0)
        k = jnp.einsum("ntd,dhk->nthk", h, at["k"]["kernel"]) + bias("k")
        v = jnp.einsum("ntd,dhk->nthk", h, at["v"]["kernel"]) + bias("v")
        s = jnp.einsum("nhk,nthk->nht", q, k) / np.float32(math.sqrt(mcfg.head_dim))
        prob = jax.nn.softmax(s, axis=-1)
        z = jnp.einsum("nht,nthk->nhk", prob, v)
        o_heads = jnp.einsum("nhk,hkd->nhd", z, at["o"]["kernel"])
        o = o_heads.sum(axis=1) + (at["o"]["bias"][None] if "bias" in at["o"] else 0.0)
        r = h[:, -1] + o
        m = params["block_0"]["mlp"]
        pre = r @ m["fc"]["kernel"] + (m["fc"]["bias"][None] if "bias" in m["fc"] else 0.0)
        post = act(pre)
        out = post @ m["proj"]["kernel"] + (m["proj"]["bias"][None] if "bias" in m["proj"] else 0.0)
        logits = (r + out) @ params["unembed"]["kernel"]
    rs = lambda t: t.reshape(p, p, *t.shape[1:])
    return ClockActivations(rs(logits), rs(jnp.moveaxis(prob, 1, 1)), rs(z), rs(o_heads), rs(o), rs(pre), rs(post), rs(out))
