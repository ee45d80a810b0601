"""Per-layer geometry metrics from streaming decomposition statistics (Song & Zhong Tables 1-5).

:func:`layer_metrics` turns one layer's ``DecompositionStats`` (and optional context labels)
into the numbers of Song & Zhong's tables; :func:`summarize_layers` gives the mean ± std across
layers (Tables 1-2). Everything is computed from the O(d² + T d + C d) statistics: no C x T x d
tensor is needed, and the incoherence the paper reports but its code never computed is exact.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from geomjax import geometry, spectral
from geomjax.decomposition import DecompositionStats, _x64_context

__all__ = ["StudyOptions", "layer_metrics", "summarize_layers", "top_singular_values"]


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """Conventions of the per-layer study, recorded in config.json.

    Attributes:
      screenot_k: ScreeNOT's upper bound on the rank (k = 20 in the source code).
      screenot_strategy: ScreeNOT imputation strategy ("i" in the source code).
      n_singular: how many top singular values to keep for Fig. 3 (60 in the paper).
      n_freq: DCT frequencies kept for the low-frequency energy (10 in the paper).
      centered_relative_norm: relative norm against the centred states (default) or, as the
        source code, against the raw states with the mean included (needs the mean).
    """

    screenot_k: int = 20
    screenot_strategy: str = "i"
    n_singular: int = 60
    n_freq: int = 10
    centered_relative_norm: bool = True


def top_singular_values(stats: DecompositionStats, n: int) -> dict[str, np.ndarray]:
    """Top-n singular values of P tiled over C contexts, of Cvec and of R (Song & Zhong Fig. 3).

    The three matrices have C·T rows (P repeated for every context), so their singular values
    are comparable: σ(P_tiled) = √C σ(P); σ(Cvec) and σ(R) come from the exact d×d second
    moments Σ cvec cvecᵀ and Σ resid residᵀ.
    """
    with _x64_context(stats.accum_dtype):
        sp = np.sqrt(stats.n_contexts) * np.asarray(spectral.singular_values(stats.pos), np.float64)
        sc = np.asarray(spectral.singular_values_from_second_moment(stats.cvec_second_moment))
        sr = np.asarray(spectral.singular_values_from_second_moment(stats.resid_second_moment))
    return {"P": sp[:n], "Cvec": sc[:n], "R": sr[:n]}


def layer_metrics(
    stats: DecompositionStats,
    labels: np.ndarray | None = None,
    options: StudyOptions = StudyOptions(),
) -> dict:
    """Song & Zhong's per-layer numbers for one layer.

    Args:
      stats: the layer's streaming decomposition (pos (T, d), ctx (C, d), second moments).
      labels: optional (C,) document label of every context, for the cluster similarity.
      options: study conventions.

    Returns:
      dict with ``screenot_rank`` and ``screenot_threshold`` (Table 3, rank of P), ``stable_rank``
      (Table 4), ``explained_ratio``, ``relative_norm`` (Table 5), ``incoherence_max`` and
      ``incoherence_mean`` (Table 1, last column), ``intra_similarity``/``inter_similarity``
      (Table 1, when labels are given), ``dct_low_freq_energy`` (Fig. 3 right), and the
      variance shares of pos, ctx and resid in the ANOVA identity.
    """
    pos = jnp.asarray(np.asarray(stats.pos, np.float32))
    ctx = jnp.asarray(np.asarray(stats.ctx, np.float32))
    T, d = pos.shape
    out: dict = {"n_contexts": stats.n_contexts, "n_positions": T}
    k = options.screenot_k
    if 2 * k + 1 < min(T, d):
        res = spectral.screenot(np.asarray(stats.pos, np.float64), k, options.screenot_strategy)
        out["screenot_rank"] = int(res.rank)
        out["screenot_threshold"] = float(res.threshold)
        sig = np.asarray(res.singular_values, np.float64)
        out["explained_ratio"] = float(spectral.explained_ratio(sig, int(res.rank)))
    else:
        out["screenot_rank"] = None
        out["screenot_threshold"] = None
        out["explained_ratio"] = None
    out["stable_rank"] = float(spectral.stable_rank(pos))
    with _x64_context(stats.accum_dtype):
        S = stats.centered_second_moment
        if not options.centered_relative_norm:
            # raw states, μ included (source code): Σ h hᵀ = S + C·T·μμᵀ
            n_tok = stats.n_contexts * stats.n_positions
            S = S + n_tok * jnp.outer(stats.mean, stats.mean)
        out["relative_norm"] = float(
            spectral.relative_norm_from_moments(stats.pos, S, stats.n_contexts)
        )
        tr_tot = float(jnp.trace(stats.centered_second_moment))
        out["share_pos"] = float(jnp.trace(stats.pos_second_moment)) / tr_tot
        out["share_ctx"] = float(jnp.trace(stats.ctx_second_moment)) / tr_tot
        out["share_resid"] = float(jnp.trace(stats.resid_second_moment)) / tr_tot
    inc = geometry.incoherence_stats(pos, ctx)
    out["incoherence_max"] = float(inc[0])
    out["incoherence_mean"] = float(inc[1])
    if labels is not None:
        intra, inter = geometry.cluster_similarity(ctx, np.asarray(labels))
        out["intra_similarity"] = float(intra)
        out["inter_similarity"] = float(inter)
    F = spectral.dct_gram(pos)
    out["dct_low_freq_energy"] = float(spectral.low_frequency_energy(F, options.n_freq))
    return out


def summarize_layers(per_layer: list[dict], keys: list[str] | None = None) -> dict[str, dict]:
    """Mean ± std across layers of each numeric metric (Song & Zhong Tables 1-2)."""
    keys = keys or [k for k, v in per_layer[0].items() if isinstance(v, (int, float))]
    out = {}
    for k in keys:
        vals = [m[k] for m in per_layer if m.get(k) is not None]
        if vals:
            v = np.asarray(vals, np.float64)
            out[k] = {"mean": float(v.mean()), "std": float(v.std()), "n_layers": len(v)}
    return out
