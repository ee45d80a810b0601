"""Shared pieces of the geomjax transformer ports: configs, Intermediates, LayerNorm, embeddings, attention.

Everything here is a pure function or a Flax linen module with explicit parameters. The Hugging Face
ports (``gpt2.py``, ``bert.py``, ``llama.py``, ``bloom.py``) and the toy transformer build on these:
:class:`HFConfig` (the family-neutral sizes of every port's config), :func:`pre_norm_block` (the
residual updates of a pre-norm block) and :class:`CausalLM` (the one forward of the causal decoders).

Parameter layout of one attention block (``MultiHeadAttention``), chosen so that every head can be
read directly for analysis (Song & Zhong eqs. (7)-(8), QK circuits):

* ``q/kernel``, ``k/kernel``, ``v/kernel``: (d, H, K); ``q/bias``, ``k/bias``, ``v/bias``: (H, K)
* ``o/kernel``: (H, K, d); ``o/bias``: (d,)

so that ``q_h = x @ q/kernel[:, h, :] + q/bias[h]`` and ``out = sum_h z_h @ o/kernel[h] + o/bias``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from flax.errors import ScopeParamNotFoundError

from geomjax.base._repr import with_compact_repr
from geomjax.errors import GeomjaxError
from geomjax.typing import Array, ArrayLike, Bool, Float, Int

__all__ = [
    "ACTIVATIONS",
    "ATTENTION_HOOKS",
    "BLOCK_HOOKS",
    "CausalLM",
    "Embed",
    "HFConfig",
    "HFStandardConfig",
    "HookPoint",
    "Intermediates",
    "LayerNorm",
    "MLP",
    "MLP_HOOKS",
    "MultiHeadAttention",
    "READ_ONLY_HOOKS",
    "PreLNBlock",
    "attention_mask_4d",
    "scaled_dot_product_attention",
    "check_input_ids",
    "check_segment_ids",
    "embed_lookup",
    "gelu_erf",
    "head_results",
    "hook_points",
    "layer_norm",
    "parallel_block",
    "positions_from_mask",
    "missing_head_message",
    "norm_scale_hook",
    "pre_norm_block",
    "run_blocks",
]


class HFConfig:
    """Base of the Hugging Face ports' configs: one family-neutral view of their sizes.

    A subclass is a frozen dataclass whose fields keep Hugging Face's own names (``n_embd``,
    ``hidden_size``, ...), so that a ``config.json`` maps onto it key for key:
    ``geomjax.convert.config_from_hf`` builds one (and rejects attributes the port does not implement).
    Its ``HF_FIELDS`` names the field that holds each neutral size, and these properties answer
    with it (the names :mod:`geomjax.models.interface`, the conversion tables and the blocks read):

    * ``d_model`` (d), ``num_layers`` (L), ``num_heads`` (H), ``d_mlp`` (F): the mapped fields;
    * ``num_kv_heads`` (H_kv): the mapped field, else H (no grouped-query attention);
    * ``head_dim`` (K): d / H, unless the subclass has a ``head_dim`` field (Llama);
    * ``max_positions`` (P): the mapped field, else None (positions unbounded: rotary, ALiBi).

    A family whose F is a formula (GPT-2's ``n_inner or 4d``, BLOOM's 4d) overrides ``d_mlp``.
    """

    HF_FIELDS: ClassVar[dict[str, str]] = {}
    DISPLAY_NAME: ClassVar[str] = ""

    @property
    def display_name(self) -> str:
        """The family's name in messages."""
        return self.DISPLAY_NAME

    def _hf(self, name: str, default=None):
        field = self.HF_FIELDS.get(name)
        return default if field is None else getattr(self, field)

    @property
    def d_model(self) -> int:
        return self._hf("d_model")

    @property
    def num_layers(self) -> int:
        return self._hf("num_layers")

    @property
    def num_heads(self) -> int:
        return self._hf("num_heads")

    @property
    def num_kv_heads(self) -> int:
        return self._hf("num_kv_heads", self.num_heads)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def d_mlp(self) -> int:
        return self._hf("d_mlp")

    @property
    def max_positions(self) -> int | None:
        return self._hf("max_positions")

    def check_sizes(self, *extra: str) -> None:
        """Raise ValueError unless ``vocab_size``, every mapped size and the ``extra`` fields are >= 1
        (a None field means "derived" and is skipped) and, where K is derived, d is divisible by H."""
        what = type(self).__name__
        for f in ("vocab_size", *self.HF_FIELDS.values(), *extra):
            v = getattr(self, f)
            if v is not None and int(v) < 1:
                raise ValueError(f"{what}: {f} must be >= 1, got {v}")
        if "head_dim" not in {f.name for f in dataclasses.fields(self)} and self.d_model % self.num_heads:
            raise ValueError(f"{what}: {self.HF_FIELDS['d_model']}={self.d_model} is not divisible by "
                             f"{self.HF_FIELDS['num_heads']}={self.num_heads}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFStandardConfig(HFConfig):
    """An :class:`HFConfig` whose sizes carry transformers' standard names (BERT, Llama, Mistral): the
    six sizes, declared once here, and their ``HF_FIELDS``.

    Like every port's sizes they have no defaults: a config names them (keywords only) or is read
    from a checkpoint's ``config.json`` (``geomjax.convert.config_from_hf``); a default would
    silently build a reference-size model (BERT-base, a 7B Llama) where a size was forgotten.

    Attributes:
      vocab_size, hidden_size, num_hidden_layers, num_attention_heads: V, d, L, H.
      intermediate_size: the MLP width F.
      max_position_embeddings: P, the longest sequence the model was trained for.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int

    HF_FIELDS: ClassVar[dict[str, str]] = {
        "d_model": "hidden_size", "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
        "d_mlp": "intermediate_size", "max_positions": "max_position_embeddings"}


# a pytree: JAX rebuilds it with non-array leaves (ArgInfo when lowering, None or sentinels in tree maps),
# so the test-time shape hook must not check its __init__ (docs/DESIGN.md, Shapes)
@typing.no_type_check
@with_compact_repr
@struct.dataclass
class Intermediates:
    """Everything a geomjax model exposes besides its output (a pytree; jit/vmap friendly).

    Attributes:
      hidden_states: L+1 arrays (B, T, d), exactly Hugging Face's ``output_hidden_states``: the
        embedding output, then the output of every block; for GPT-2 the last entry has the final
        LayerNorm ``ln_f`` applied (as ``transformers`` returns it).
      residual: L+1 arrays (B, T, d): the residual stream before any final LayerNorm (the
        convention of the Song & Zhong code, which did not apply ``ln_f``). For BERT (post-LN, no
        final LayerNorm) this is the same tuple as ``hidden_states``.
      final_ln: (B, T, d) output of the final LayerNorm (GPT-2 ``ln_f``), or None if the model
        has none.
      attentions: None, or L arrays (B, H, T, T) of attention probabilities (rows sum to one) when
        the model was called with ``return_attention=True``.
      pooler_output: None, or (B, d) BERT pooler output ``tanh(W h[:, 0] + b)`` when the
        checkpoint has pooler weights.
    """

    hidden_states: tuple[Array, ...]
    residual: tuple[Array, ...] = ()
    final_ln: Array | None = None
    attentions: tuple[Array, ...] | None = None
    pooler_output: Array | None = None


class HookPoint(nn.Module):
    """Identity on an activation, named for :mod:`geomjax.analysis.lens` (``run_with_cache`` / ``run_with_hooks``).

    No parameters: adding hook points changes neither the parameter tree nor the numbers. The lens
    intercepts its ``__call__`` (``flax.linen.intercept_methods``) to record or replace ``x``;
    ``hook_name`` is the name inside the block (``attn.q``, ``hook_resid_pre``, ...), prefixed by
    ``blocks.{l}.`` from the enclosing block's index.
    """

    hook_name: str

    def __call__(self, x: Array) -> Array:
        return x


def hook_points(*names: str) -> dict[str, HookPoint]:
    """``{name with '.' -> '_': HookPoint(name)}`` for a module's ``setup`` (Flax names them ``<attr>_<key>``)."""
    return {n.replace(".", "_"): HookPoint(n) for n in names}


def _gelu_tanh(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=True)


def gelu_erf(x: Float[Array, "..."]) -> Float[Array, "..."]:
    """Exact GELU x·Φ(x) (Hendrycks & Gimpel eq. 1), elementwise, any shape: the one used by BERT, the toy
    model and the grokking trainer's last-position shortcut (``jax.nn.gelu(approximate=False)``, erfc form).

    Measured and not adopted: torch's form x/2 · (1 + erf(x/√2)) runs faster on XLA:CPU (at (2048, 512):
    forward 1.76 -> 0.77 ms, gradient 2.0 -> 1.47 ms of CPU; MiniLM forward ~2-4%, toy training step ~2.5%),
    but its float32 rounding differs, which moves the demo's metrics by up to 3e-6 relative (the golden
    test's tolerance is 1e-6) and would make the committed trained-model reports irreproducible.
    """
    return jax.nn.gelu(x, approximate=False)


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    # Hugging Face names -> exact same formula.
    "gelu_new": _gelu_tanh,  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu": gelu_erf,  # x Phi(x), erf form
}
"""Activations implemented exactly, keyed by their Hugging Face ``ACT2FN`` name."""


def layer_norm(
    x: Float[Array, "... d"], scale: Float[Array, " d"], bias: Float[Array, " d"], eps: float
) -> Float[Array, "... d"]:
    """Compute LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * scale + bias.

    The variance is the biased two-pass variance mean((x - mean)^2), as ``torch.nn.LayerNorm``.

    Args:
      x: (..., d) input.
      scale: (d,) gain (Hugging Face ``weight``).
      bias: (d,) shift.
      eps: added to the variance.

    Returns:
      (..., d) normalized array.
    """
    mean = jnp.mean(x, axis=-1, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    bshape = (1,) * (x.ndim - 1) + (-1,)
    return xc * jax.lax.rsqrt(var + eps) * scale.reshape(bshape) + bias.reshape(bshape)


class LayerNorm(nn.Module):
    """LayerNorm with parameters ``scale`` (d,) and ``bias`` (d,); see :func:`layer_norm`."""

    eps: float = 1e-5

    @nn.compact
    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        d = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (d,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (d,), jnp.float32)
        return layer_norm(x, scale, bias, self.eps)

    def norm_scale(self, x: Float[Array, "... d"]) -> Float[Array, "... 1"]:
        """The divisor sqrt(var(x) + eps) (..., 1) of :func:`layer_norm` (TransformerLens ``hook_scale``)."""
        xc = x - jnp.mean(x, axis=-1, keepdims=True)
        return jnp.sqrt(jnp.mean(xc * xc, axis=-1, keepdims=True) + self.eps)


def embed_lookup(table: Float[Array, "V d"], ids: Int[Array, "*batch"]) -> Float[Array, "*batch d"]:
    """Look up rows of an embedding table; out-of-range ids give NaN rows (never wrapped/clipped).

    Under ``jit`` ids cannot be checked eagerly, so an id < 0 or >= V yields a NaN row that
    propagates to every output instead of silently reading another token's embedding.

    Args:
      table: (V, d) embedding matrix.
      ids: integer array of any shape.

    Returns:
      (*ids.shape, d) embeddings.
    """
    n = table.shape[0]
    valid = (ids >= 0) & (ids < n)
    rows = jnp.take(table, jnp.clip(ids, 0, n - 1), axis=0)
    return jnp.where(valid[..., None], rows, jnp.asarray(jnp.nan, table.dtype))


class Embed(nn.Module):
    """Embedding table ``embedding`` (num_embeddings, features), N(0, 0.02) at init."""

    num_embeddings: int
    features: int
    init_std: float = 0.02

    def setup(self):
        self.embedding = self.param(
            "embedding",
            nn.initializers.normal(self.init_std),
            (self.num_embeddings, self.features),
            jnp.float32,
        )

    def __call__(self, ids: Int[Array, "*batch"]) -> Float[Array, "*batch d"]:
        return embed_lookup(self.embedding, ids)

    def attend(self, x: Float[Array, "*batch d"]) -> Float[Array, "*batch V"]:
        """Tied read-out: x @ embeddingᵀ."""
        return jnp.einsum("...d,vd->...v", x, self.embedding)


def attention_mask_4d(
    T: int, attention_mask: Int[ArrayLike, "B T"] | Bool[ArrayLike, "B T"] | None, causal: bool
) -> Bool[Array, "#B 1 #T T"] | None:
    """Build the boolean (B or 1, 1, T or 1, T) mask "query t may attend key s" (True = attend).

    Args:
      T: sequence length.
      attention_mask: None or (B, T) with 1/True for real tokens and 0/False for padding (keys
        marked 0 are never attended; Hugging Face convention).
      causal: if True, also require s <= t.

    Returns:
      None when nothing is masked, else a boolean array broadcastable to (B, H, T, T): (1, 1, T, T)
      causal only, (B, 1, 1, T) padding only, (B, 1, T, T) both.
    """
    mask = None
    if causal:
        mask = jnp.tril(jnp.ones((T, T), dtype=bool))[None, None]
    if attention_mask is not None:
        keys = (jnp.asarray(attention_mask) != 0)[:, None, None, :]
        mask = keys if mask is None else (mask & keys)
    return mask


BLOCK_HOOKS = ("hook_resid_pre", "ln1", "attn.out", "hook_resid_mid", "ln2", "mlp.out", "hook_resid_post",
               "ln1.scale", "ln2.scale")
"""Hook points of every block (post-LN BERT has no ln1/ln2: its resid_mid/post are the LayerNorm outputs)."""

ATTENTION_HOOKS = ("attn.q", "attn.k", "attn.v", "attn.scores", "attn.pattern", "attn.z", "attn.result")
"""Hook points of every attention module (:mod:`geomjax.analysis.lens` documents the shapes)."""

MLP_HOOKS = ("mlp.pre", "mlp.post")
"""Hook points of every MLP: the neurons before and after the nonlinearity (B, T, F)."""

READ_ONLY_HOOKS = ("attn.result", "ln1.scale", "ln2.scale", "ln_final.scale")
"""Hook points computed beside the forward pass, not on it (a replacement would change nothing
downstream, so :mod:`geomjax.analysis.lens` refuses hooks on them): each head's output written to the
residual stream, and the norms' divisors. Unused, XLA drops them: they cost nothing unless cached."""


def head_results(z: Float[Array, "B T H K"], o_kernel: Float[Array, "H K d"]) -> Float[Array, "B T H d"]:
    """Each head's output written to the residual stream, z_h W_o[h] (B, T, H, d), without the output
    bias: sum over h plus b_o is the attention output (Elhage et al. 2021, "A Mathematical Framework",
    the per-head decomposition; TransformerLens ``attn.hook_result``)."""
    return jnp.einsum("bthk,hkd->bthd", z, o_kernel)


def norm_scale_hook(hp: Mapping[str, Callable], key: str, norm: Callable, x: Float[Array, "B T d"]) -> None:
    """Offer the norm's divisor (B, T, 1) to the read-only hook point ``key`` when the norm module
    exposes one (``norm_scale``: LayerNorm, RMSNorm); the result is not used by the forward pass."""
    if hasattr(norm, "norm_scale") and key in hp:
        hp[key](norm.norm_scale(x))


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention, per-head parameters (see module docstring for the layout).

    Scores are q·k / sqrt(K); masked scores are replaced by the float32 minimum before the
    softmax, as Hugging Face's eager attention adds it (a query with every key masked then
    attends uniformly, again as Hugging Face eager).
    """

    n_head: int
    head_dim: int
    d_model: int
    use_bias: bool = True
    init_std: float = 0.02

    def setup(self):
        init = nn.initializers.normal(self.init_std)
        hk = (self.n_head, self.head_dim)
        self.q = nn.DenseGeneral(hk, use_bias=self.use_bias, kernel_init=init, name="q")
        self.k = nn.DenseGeneral(hk, use_bias=self.use_bias, kernel_init=init, name="k")
        self.v = nn.DenseGeneral(hk, use_bias=self.use_bias, kernel_init=init, name="v")
        self.o = nn.DenseGeneral(
            self.d_model, axis=(-2, -1), use_bias=self.use_bias, kernel_init=init, name="o"
        )
        self.hp = hook_points(*ATTENTION_HOOKS)

    def __call__(
        self,
        x: Float[Array, "B T d"],
        mask: Bool[Array, "#B 1 #T T"] | None,
        score_bias: Float[Array, "#B H 1 T"] | None = None,
    ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        """(out (B, T, d), probs (B, H, T, T)); ``score_bias`` is BLOOM's ALiBi (added to the scaled scores)."""
        hp = self.hp
        q = hp["attn_q"](self.q(x))  # (B, T, H, K)
        k = hp["attn_k"](self.k(x))
        v = hp["attn_v"](self.v(x))
        z, probs = scaled_dot_product_attention(q, k, v, mask, self.head_dim**-0.5, score_bias=score_bias, hooks=hp)
        z = hp["attn_z"](z)
        out = self.o(z)
        hp["attn_result"](head_results(z, self.o.variables["params"]["kernel"]))
        return out, probs


def scaled_dot_product_attention(
    q: Float[Array, "B T H K"],
    k: Float[Array, "B S H K"],
    v: Float[Array, "B S H K"],
    mask: Bool[Array, "#B #H #T S"] | None,
    scale: float,
    probs_fn: Callable[[Array], Array] | None = None,
    score_bias: Float[Array, "#B H #T S"] | None = None,
    hooks: Mapping[str, Callable] | None = None,
    softcap: float | None = None,
) -> tuple[Float[Array, "B T H K"], Float[Array, "B H T S"]]:
    """softmax(scale · q kᵀ [+ score_bias], masked) v per head (Vaswani et al. eq. 1); returns (z, probs).

    ``score_bias`` is added to the scaled scores before masking (BLOOM's ALiBi, Press et al. eq. (1)).
    ``softcap`` c (Gemma 2's attention logit soft-capping): scores -> c · tanh(scores / c) before masking.
    ``hooks``: the attention module's :func:`hook_points`; ``attn_scores`` sees the masked scaled
    scores (B, H, T, S) the softmax reads, ``attn_pattern`` the probabilities (B, H, T, S).

    Masked scores are replaced by the dtype minimum before the softmax (Hugging Face eager).
    ``probs_fn`` (e.g. dropout) is applied to the probabilities used for z; the returned probs
    are the undropped ones. The matmuls run in (B, H, T, K) layout: XLA:CPU runs them ~3x
    faster than the same einsums over the (B, T, H, K) projection layout (benchmarks/RESULTS.md).
    """
    qh, kh, vh = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
    scores = (qh @ kh.transpose(0, 1, 3, 2)) * jnp.asarray(scale, q.dtype)  # (B, H, T, S)
    if score_bias is not None:
        scores = scores + score_bias.astype(scores.dtype)
    if softcap is not None:
        scores = jnp.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    if hooks is not None:
        scores = hooks["attn_scores"](scores)
    probs = jax.nn.softmax(scores, axis=-1)
    if hooks is not None:
        probs = hooks["attn_pattern"](probs)
    used = probs if probs_fn is None else probs_fn(probs)
    return (used @ vh).transpose(0, 2, 1, 3), probs


def _is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def check_input_ids(
    input_ids: ArrayLike, vocab_size: int, n_positions: int, *, what: str = "model"
) -> Int[Array, "B T"]:
    """Check token ids (B, T) against the model's vocabulary and positions; return them as int32.

    Shape is always checked. Values are checked when the array is concrete (outside ``jit``);
    under ``jit`` an out-of-range id produces NaN outputs (see :func:`embed_lookup`).

    Args:
      input_ids: (B, T) integer token ids.
      vocab_size: number of rows of the token embedding.
      n_positions: number of learned positions.
      what: model name used in messages.

    Returns:
      (B, T) int32 array.

    Raises:
      ValueError: wrong rank, empty, T > n_positions, non-integer dtype, or ids outside
        [0, vocab_size).
    """
    shape = np.shape(input_ids)
    if len(shape) != 2:
        raise ValueError(
            f"{what}: input_ids must be a 2-D (batch, seq_len) integer array, got shape {shape}; "
            "add a batch axis with ids[None, :]"
        )
    B, T = shape
    if B == 0 or T == 0:
        raise ValueError(f"{what}: input_ids is empty (shape {shape})")
    if T > n_positions:
        raise ValueError(
            f"{what}: sequence length {T} exceeds the model's {n_positions} positions "
            f"(n_positions / max_position_embeddings); split the text into windows of at most "
            f"{n_positions} tokens (nothing is truncated)"
        )
    dtype = np.dtype(input_ids.dtype if hasattr(input_ids, "dtype") else np.asarray(input_ids).dtype)
    if not np.issubdtype(dtype, np.integer):
        raise ValueError(f"{what}: input_ids must have an integer dtype, got {dtype}")
    if _is_tracer(input_ids):
        return input_ids.astype(jnp.int32)
    arr = np.asarray(input_ids)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{what}: token ids must lie in [0, {vocab_size}) (the model's vocab_size), got "
            f"min {lo}, max {hi}; the tokenizer does not match this model (see "
            "geomjax.convert.tokenizers.check_tokenizer)"
        )
    return jnp.asarray(arr.astype(np.int32))


def check_segment_ids(
    ids: ArrayLike | None, shape: tuple[int, int], n_values: int, name: str, what: str
) -> Int[Array, "B T"] | None:
    """Check an optional (B, T) integer side input (token types, attention mask); return int32.

    Args:
      ids: None or (B, T) integer/bool array.
      shape: expected (B, T).
      n_values: allowed values are 0..n_values-1.
      name: argument name for messages.
      what: model name for messages.

    Returns:
      None or the (B, T) int32 array.
    """
    if ids is None:
        return None
    if tuple(np.shape(ids)) != tuple(shape):
        raise ValueError(
            f"{what}: {name} must have shape {tuple(shape)} (like input_ids), got {np.shape(ids)}"
        )
    dtype = np.dtype(ids.dtype if hasattr(ids, "dtype") else np.asarray(ids).dtype)
    if not (np.issubdtype(dtype, np.integer) or dtype == np.bool_):
        raise ValueError(f"{what}: {name} must be integer or bool, got {dtype}")
    if _is_tracer(ids):
        return ids.astype(jnp.int32)
    arr = np.asarray(ids)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n_values):
        raise ValueError(
            f"{what}: {name} values must lie in [0, {n_values}), got min {int(arr.min())}, "
            f"max {int(arr.max())}"
        )
    return jnp.asarray(arr.astype(np.int32))


class MLP(nn.Module):
    """Position-wise feed-forward block: proj(act(fc(x))); kernels ``fc`` (d, F), ``proj`` (F, d)."""

    d_ff: int
    d_model: int
    activation: str
    init_std: float = 0.02

    def setup(self):
        init = nn.initializers.normal(self.init_std)
        self.fc = nn.Dense(self.d_ff, kernel_init=init, name="fc")
        self.proj = nn.Dense(self.d_model, kernel_init=init, name="proj")
        self.hp = hook_points(*MLP_HOOKS)

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        hp = self.hp
        return self.proj(hp["mlp_post"](ACTIVATIONS[self.activation](hp["mlp_pre"](self.fc(x)))))



def pre_norm_block(hp: Mapping[str, Callable], x: Float[Array, "B T d"], norm_1: Callable, attn: Callable,
                   norm_2: Callable, mlp: Callable, *attn_args, out_norms: tuple[Callable, Callable] | None = None,
                   ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
    """One pre-norm block (GPT-2, BLOOM, Llama): h = x + attn(norm_1 x, *attn_args); h + mlp(norm_2 h).

    ``out_norms``: Gemma 2/3's "sandwich" norms (n_a, n_m) on the branch outputs:
    h = x + n_a(attn(norm_1 x)); h + n_m(mlp(norm_2 h)) (``attn.out`` / ``mlp.out`` are then what is added).
    ``hp`` are the block's :data:`BLOCK_HOOKS` (see :func:`hook_points`); ``attn`` returns
    ``(out (B, T, d), probs (B, H, T, T))``. Returns the block output (B, T, d) and ``probs``.
    """
    post_a, post_m = out_norms if out_norms is not None else (lambda y: y, lambda y: y)
    x = hp["hook_resid_pre"](x)
    norm_scale_hook(hp, "ln1_scale", norm_1, x)
    a, probs = attn(hp["ln1"](norm_1(x)), *attn_args)
    x = hp["hook_resid_mid"](x + hp["attn_out"](post_a(a)))
    norm_scale_hook(hp, "ln2_scale", norm_2, x)
    return hp["hook_resid_post"](x + hp["mlp_out"](post_m(mlp(hp["ln2"](norm_2(x)))))), probs


def parallel_block(hp: Mapping[str, Callable], x: Float[Array, "B T d"], norm_1: Callable, attn: Callable,
                   norm_2: Callable, mlp: Callable, *attn_args
                   ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
    """One parallel-residual block (GPT-NeoX / Pythia, GPT-J): x + attn(norm_1 x) + mlp(norm_2 x).

    Both branches read the block input, so there is no ``hook_resid_mid``; the other :data:`BLOCK_HOOKS`
    are as in :func:`pre_norm_block`. Summed as transformers sums them (mlp + attn + x).
    """
    x = hp["hook_resid_pre"](x)
    norm_scale_hook(hp, "ln1_scale", norm_1, x)
    norm_scale_hook(hp, "ln2_scale", norm_2, x)
    a, probs = attn(hp["ln1"](norm_1(x)), *attn_args)
    m = hp["mlp_out"](mlp(hp["ln2"](norm_2(x))))
    return hp["hook_resid_post"](m + hp["attn_out"](a) + x), probs


def positions_from_mask(attention_mask: Int[Array, "B T"] | None, T: int) -> Int[Array, "#B T"]:
    """Position ids (B, T) of a padded batch: cumsum(mask) − 1 at real tokens (so left and right padding give
    every real token the position it has unpadded), the index t at padding (so a right-padded batch has
    Hugging Face's default positions 0..T−1 everywhere); (1, T) 0..T−1 without a mask."""
    index = jnp.arange(T, dtype=jnp.int32)[None]
    if attention_mask is None:
        return index
    m = jnp.asarray(attention_mask) != 0
    return jnp.where(m, jnp.cumsum(m.astype(jnp.int32), axis=1) - 1, index)


def run_blocks(blocks: Sequence, x: Float[Array, "B T d"], *args
               ) -> tuple[tuple[Float[Array, "B T d"], ...], tuple[Float[Array, "B H T T"], ...]]:
    """Run x (B, T, d) through the blocks (each ``block(x, *args) -> (x, probs)``).

    Returns the L+1 residual states (the input, then every block's output) and the L attention
    probabilities (B, H, T, T).
    """
    states, probs = [x], []
    for block in blocks:
        x, p = block(x, *args)
        states.append(x)
        probs.append(p)
    return tuple(states), tuple(probs)


def missing_head_message(config) -> str:
    """The one-line error of a base checkpoint (saved without its untied read-out) asked for logits; it names
    the family's head tensor and classes (its record's ``head_tensor`` and ``tiny["architectures"]``)."""
    fam, name = config.FAMILY, config.display_name
    head_cls = ((fam.tiny or {}).get("architectures") or [f"{name}ForCausalLM"])[0]
    base_cls = head_cls.replace("ForCausalLM", "Model").replace("LMHeadModel", "Model")
    return (f"this {name} checkpoint has no language-model head ({fam.head_tensor}; it was saved from the base "
            f"model class, e.g. {base_cls}): it gives hidden states and activations, not logits; load the "
            f"{head_cls} checkpoint for logits")


class CausalLM(nn.Module):
    """Base of the causal decoders (GPT-2, BLOOM, Llama / Mistral): one forward, one call signature.

    x_0, block inputs = embed(ids, causal mask); x_{l+1}, probs_l = block_l(x_l, *block inputs);
    logits = unembed(final_norm(x_L)). A subclass's ``setup`` builds its modules under Hugging
    Face's names (with a ``hook_ln_final`` HookPoint and, when the config has
    ``tie_word_embeddings=False``, an ``lm_head``) and says what differs:

    * ``embed(ids (B, T), mask (1|B, 1, T, T), positions (B, T) or None) -> (x_0 (B, T, d), block_args)``:
      the embedding and what every block takes after x (the mask, ALiBi's bias, the rotary tables), at the
      position ids :func:`positions_from_mask` derives from the attention mask (None without one: 0..T−1,
      computed as before masks existed, so the unpadded programs are unchanged);
    * a config with ``final_logit_softcapping`` c (Gemma 2) has its logits soft-capped, c · tanh(logits / c);
    * the names of the ``blocks`` list, the ``final_norm`` and the token ``embedding`` (the tied read-out is its
      ``attend``) are the family record's (``config.FAMILY``, :class:`geomjax.models.family.Family`).

    Error messages name the family by ``config.display_name``.
    """

    def part(self, role: str):
        """The submodule the family record names for ``role`` (``blocks``, ``final_norm``, ``embedding``)."""
        return getattr(self, getattr(self.config.FAMILY, role))

    def __call__(
        self,
        input_ids: Int[ArrayLike, "B T"],
        attention_mask: Int[ArrayLike, "B T"] | None = None,
        *,
        return_attention: bool = False,
        compute_logits: bool = True,
        stop_at_layer: int | None = None,
    ) -> tuple[Float[Array, "B T V"] | None, Intermediates]:
        """Compute logits and every residual-stream state for token ids (B, T).

        Args:
          input_ids: (B, T) integer ids in [0, vocab_size), T <= ``config.max_positions`` (None:
            any T, as rotary and ALiBi positions are unbounded).
          attention_mask: optional (B, T), 1 for real tokens, 0 for padding (Hugging Face
            convention): padded keys are never attended and the position ids count real tokens only
            (:func:`positions_from_mask`), so left or right padding gives every real token its unpadded
            states; padded positions get meaningless outputs.
          return_attention: also return the L attention-probability arrays (B, H, T, T).
          compute_logits: if False, skip the (B, T, V) unembedding and return None as output.
          stop_at_layer: run only blocks 0..stop_at_layer−1 (None: all): ``residual`` and
            ``hidden_states`` then hold stop_at_layer + 1 states, no final norm and no logits.

        Returns:
          ``(logits (B, T, V) or None, Intermediates)``: ``hidden_states`` as Hugging Face's
          ``output_hidden_states`` (the last entry after the final norm), ``residual`` the stream
          before it, ``final_ln`` the final norm's output.

        Raises:
          ValueError: bad shape, T > max_positions, ids outside [0, vocab_size) (checked eagerly;
            under ``jit`` a bad id gives NaN outputs instead).
        """
        c, what = self.config, self.config.display_name
        max_positions = np.iinfo(np.int32).max if c.max_positions is None else c.max_positions
        ids = check_input_ids(input_ids, c.vocab_size, max_positions, what=what)
        am = check_segment_ids(attention_mask, ids.shape, 2, "attention_mask", what)
        T = ids.shape[1]
        positions = None if am is None else positions_from_mask(am, T)
        x, block_args = self.embed(ids, attention_mask_4d(T, am, causal=True), positions)
        blocks = self.part("blocks")
        if stop_at_layer is not None:
            residual, probs = run_blocks(blocks[:stop_at_layer], x, *block_args)
            inter = Intermediates(hidden_states=residual, residual=residual,
                                  attentions=probs if return_attention else None)
            return None, inter
        residual, probs = run_blocks(blocks, x, *block_args)
        final_norm = self.part("final_norm")
        scale_hp = getattr(self, "hook_ln_final_scale", None)  # a family with its final norm's divisor
        norm_scale_hook({} if scale_hp is None else {"s": scale_hp}, "s", final_norm, residual[-1])
        final = self.hook_ln_final(final_norm(residual[-1]))
        inter = Intermediates(
            hidden_states=residual[:-1] + (final,),
            residual=residual,
            final_ln=final,
            attentions=probs if return_attention else None,
        )
        if not compute_logits:
            return None, inter
        logits = self.unembed(final)
        cap = getattr(self.config, "final_logit_softcapping", None)
        return (logits if cap is None else jnp.tanh(logits / cap) * cap), inter

    def setup_read_out(self, vocab_size: int, tied: bool) -> None:
        """Called from a family's ``setup``: the final norm's hook points (``ln_final``, ``ln_final.scale``),
        ``hook_embed``, and, when the embeddings are untied, ``lm_head`` (V, d read-out, N(0, 0.02) init)."""
        self.hook_ln_final = HookPoint("ln_final")
        self.hook_ln_final_scale = HookPoint("ln_final.scale")
        self.hook_embed = HookPoint("hook_embed")
        if not tied:
            self.lm_head = nn.Dense(vocab_size, use_bias=False, kernel_init=nn.initializers.normal(0.02))

    def scannable(self) -> bool:
        """Every block is the same function of its own parameters, so a forward may apply one block module
        (:meth:`scan_parts`) to every layer's weights. True unless a family's blocks differ by layer (Gemma 2/3:
        alternating windows and rotary bases)."""
        return True

    def scan_parts(self) -> tuple[nn.Module, nn.Module]:
        """Unbound copies of one block and of the final norm, for a forward that scans stacked blocks.

        Every block of a causal decoder has the same configuration, so one module applied with each
        layer's parameters (``block.apply({"params": params[family.layer_key.format(l)]}, x, *block_args)``)
        computes block l; ``geomjax.tools.extraction.ScanForward`` scans it over the stacked layers so
        that one layer's weights are gathered at a time. Call on the unbound model (no parameters needed).
        """
        bound = self.bind({"params": {}})
        return bound.part("blocks")[0].clone(parent=None), bound.part("final_norm").clone(parent=None)

    def unembed(self, h: Float[Array, "B T d"]) -> Float[Array, "B T V"]:
        """Logits (B, T, V): h @ Eᵀ with the token embedding E when tied (a config without
        ``tie_word_embeddings``, as GPT-2's, always is), else ``lm_head(h)``."""
        if getattr(self.config, "tie_word_embeddings", True):
            return self.part("embedding").attend(h)
        try:
            return self.lm_head(h)
        except ScopeParamNotFoundError:
            raise GeomjaxError(missing_head_message(self.config)) from None


class PreLNBlock(nn.Module):
    """One pre-LayerNorm block of GPT-2 and BLOOM: x + attn(ln_1 x), then + mlp(ln_2 ·) (:func:`pre_norm_block`).

    Parameters under Hugging Face's names ``ln_1``, ``attn`` (:class:`MultiHeadAttention`), ``ln_2``,
    ``mlp`` (:class:`MLP` with ``activation``); ``config`` is an :class:`HFConfig` with
    ``layer_norm_epsilon``. ``score_bias``: BLOOM's ALiBi bias (B or 1, H, 1, T), None for GPT-2.
    """

    config: HFConfig
    activation: str

    def setup(self):
        c = self.config
        self.ln_1 = LayerNorm(c.layer_norm_epsilon)
        self.attn = MultiHeadAttention(c.num_heads, c.head_dim, c.d_model)
        self.ln_2 = LayerNorm(c.layer_norm_epsilon)
        self.mlp = MLP(c.d_mlp, c.d_model, self.activation)
        self.hp = hook_points(*BLOCK_HOOKS)

    def __call__(self, x: Float[Array, "B T d"], mask: Bool[Array, "#B 1 #T T"] | None,
                 score_bias: Float[Array, "#B H 1 T"] | None = None
                 ) -> tuple[Float[Array, "B T d"], Float[Array, "B H T T"]]:
        return pre_norm_block(self.hp, x, self.ln_1, self.attn, self.ln_2, self.mlp, mask, score_bias)
