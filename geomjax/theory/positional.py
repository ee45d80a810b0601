"""Position encodings that act on attention scores, as plain arrays (no model, no parameters).

* Rotary (Su et al., RoFormer §3.4.2, eq. (34), in Hugging Face's "rotate_half" layout): query and
  key t are rotated by the angles t·θ_i, θ_i = theta^(−2i/K) for i < K/2 (divided by ``factor`` for
  linear position scaling). :func:`rope_inv_freq` gives θ, :func:`rotary_from_inv_freq` the
  (T, K) cos/sin tables; Llama/Mistral (``geomjax.models.llama``) and the eq. (7) decomposition of
  rotary heads (``geomjax.theory.attention.qk_decomposition``) both use them.
* ALiBi (Press et al., "Train short, test long", §3, eq. (1)): head h adds m_h·s to the score of
  key s; :func:`alibi_slopes` gives m (BLOOM, ``geomjax.models.bloom``).

Shapes: K head dim, K2 = K/2, T positions, H heads.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.typing import Array, DType, Float, Int

__all__ = ["ROPE_TYPES", "alibi_slopes", "apply_rotary", "rope_inv_freq", "rotary_at", "rotary_from_inv_freq"]

ROPE_TYPES = ("default", "linear")
"""The rotary scalings implemented (transformers' ``rope_type`` names): none, or linear (positions / factor)."""


def rope_inv_freq(head_dim: int, theta: float, rope_type: str = "default", factor: float = 1.0
                  ) -> Float[Array, " K2"]:
    """Rotary inverse frequencies θ_i = 1 / theta^(2i/K), i < K/2, float32 (RoFormer eq. (34)).

    Divided by ``factor`` when ``rope_type`` is ``"linear"`` (transformers'
    ``_compute_default_rope_parameters`` / ``_compute_linear_scaling_rope_parameters``).

    Args:
      head_dim: K, even.
      theta: the rotary base (``rope_theta``).
      rope_type: one of :data:`ROPE_TYPES`.
      factor: the linear scaling factor (ignored for ``"default"``).

    Returns:
      (K/2,) float32 NumPy array.

    Raises:
      GeomjaxError: odd head_dim or an unknown rope_type.
    """
    K = int(head_dim)
    if K < 2 or K % 2:
        raise GeomjaxError(f"rope_inv_freq: head_dim must be even and >= 2 (pairs of rotated coordinates), "
                           f"got {head_dim}")
    if rope_type not in ROPE_TYPES:
        raise GeomjaxError(f"rope_inv_freq: rope_type={rope_type!r} is not implemented (only {ROPE_TYPES})")
    inv = 1.0 / (theta ** (np.arange(0, K, 2, dtype=np.int64).astype(np.float32) / K))
    if rope_type == "linear":
        inv = inv / factor
    return inv.astype(np.float32)


def rotary_from_inv_freq(inv_freq: Float[Array, " K2"], T: int, dtype: DType = jnp.float32
                         ) -> tuple[Float[Array, "T K"], Float[Array, "T K"]]:
    """cos, sin tables (T, K) of the rotary embedding at positions 0..T-1 (RoFormer eq. (34)).

    Angles t · inv_freq in float32, duplicated to K = 2·len(inv_freq) columns as Hugging Face's
    LlamaRotaryEmbedding does, then cast to ``dtype``.
    """
    ang = jnp.arange(T, dtype=jnp.float32)[:, None] * jnp.asarray(inv_freq, jnp.float32)[None]
    emb = jnp.concatenate([ang, ang], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def rotary_at(inv_freq: Float[Array, " R2"], positions: Int[Array, "*b T"], dtype: DType = jnp.float32
              ) -> tuple[Float[Array, "*b T R"], Float[Array, "*b T R"]]:
    """cos, sin tables (..., T, R) of the rotary embedding at the given position ids (RoFormer eq. (34)).

    As :func:`rotary_from_inv_freq` at any positions (a padded batch's ids, counted over real tokens):
    angles p · inv_freq in float32, duplicated to R = 2·len(inv_freq) columns, cast to ``dtype``.
    """
    pos = jnp.asarray(positions, jnp.float32)
    ang = pos[..., None] * jnp.asarray(inv_freq, jnp.float32).reshape((1,) * pos.ndim + (-1,))
    emb = jnp.concatenate([ang, ang], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def apply_rotary(x: Float[Array, "*b K"], cos: Float[Array, "*#b R"], sin: Float[Array, "*#b R"]
                 ) -> Float[Array, "*b K"]:
    """Rotate x by its position: x cos + rotate_half(x) sin on the first R ≤ K coordinates (RoFormer eq. (34),
    Hugging Face's layout); the other K − R pass unchanged (GPT-NeoX's partial rotary, ``rotary_pct``).

    rotate_half([x1, x2]) = [−x2, x1] over the two halves of the R rotated coordinates. ``cos``/``sin``
    broadcast against x[..., :R]. Linear in x, so the eq. (7) parts of a query can be rotated separately.
    """
    R = cos.shape[-1]
    xr = x[..., :R]
    half = R // 2
    out = xr * cos + jnp.concatenate([-xr[..., half:], xr[..., :half]], axis=-1) * sin
    return out if R == x.shape[-1] else jnp.concatenate([out, x[..., R:]], axis=-1)


def alibi_slopes(n_heads: int) -> Float[Array, " H"]:
    """ALiBi slopes m_h (H,) float32, as Hugging Face's ``_get_alibi_slopes`` (Press et al. §3).

    With n the largest power of two ≤ H: slopes 2^(−8/n · h) for h = 1..n; if H > n, the
    remaining H − n heads take 2^(−4/n · h) for the odd h = 1, 3, 5, ... (every other slope of the
    2n-head sequence).
    """
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise GeomjaxError(f"alibi_slopes: n_heads must be a positive int, got {n_heads!r}")
    n = 2 ** math.floor(math.log2(n_heads))
    base = np.float32(2 ** (-(2 ** -(math.log2(n) - 3))))
    slopes = base ** np.arange(1, n + 1, dtype=np.float32)
    if n != n_heads:
        extra = np.float32(2 ** (-(2 ** -(math.log2(2 * n) - 3))))
        rem = min(n, n_heads - n)
        slopes = np.concatenate([slopes, extra ** np.arange(1, 1 + 2 * rem, 2, dtype=np.float32)])
    return slopes.astype(np.float32)
