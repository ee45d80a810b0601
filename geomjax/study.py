"""Per-layer geometry metrics from streaming decomposition statistics (Song & Zhong Tables 1-5).

:func:`layer_metrics` turns one layer's ``DecompositionStats`` (and optional context labels)
into the numbers of Song & Zhong's tables; :func:`summarize_layers` gives the mean ± std across
layers (Tables 1-2). Everything is computed from the O(d² + T d + C d) statistics: no C x T x d
tensor is needed, and the incoherence the paper reports but its code never computed is exact.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from geomjax import geometry, spectral
from geomjax._checks import x64_context as _x64_context
from geomjax.decomposition import DecompositionStats

__all__ = ["StudyOptions", "layer_metrics", "summarize_layers", "theorem1_on_pos",
           "token_cluster_metrics", "top_singular_values"]


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
      variance shares of pos, ctx and resid in the ANOVA identity. When ScreeNOT cannot run
      (2k + 1 >= min(T, d)) its three entries are None, ``screenot_note`` says why and a
      UserWarning is issued.
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
    else:  # recorded and warned, never a silent None
        reason = (f"n/a: ScreeNOT with k = {k} needs 2k + 1 < min(T, d) = {min(T, d)}; use k <= "
                  f"{max((min(T, d) - 2) // 2, 0)} (--screenot-k) or more positions")
        warnings.warn(f"layer_metrics: screenot_rank {reason}", stacklevel=2)
        out["screenot_rank"] = None
        out["screenot_threshold"] = None
        out["explained_ratio"] = None
        out["screenot_note"] = reason
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


def theorem1_on_pos(pos, ks=tuple(range(1, 21)), ms=tuple(range(1, 5))) -> dict:
    """Song & Zhong Theorem 1, eq. (6), on a real layer's positional Gram G = P Pᵀ (T×T).

    pos (T, d) is re-centred over t in float64 (Σ_t pos_t = 0 holds only up to the rounding of
    the streaming sums), so G 1 = 0 exactly as the theorem assumes; G is scaled to trace T
    (both sides of eq. (6) are linear in G, so ratios do not depend on it).

    LHS(k) = (1/T)‖G − F_{≤k}B(F_{≤k}B)ᵀ‖op for the Frobenius-optimal PSD fit in the printed
    basis (an upper bound on the theorem's min over B) with a certified lower bound over all B;
    RHS(k, m) = 6/(8k)^m ‖Δ^{(m,m)}G̃‖max (printed) and the corrected constant of
    ``geomjax.smoothness.corrected_constant``.

    Returns:
      dict: ``rhs_printed`` / ``rhs_corrected`` (K, M), ``ratio_*`` (K, M) = LHS / RHS, their maxima and
      argmax (k, m), ``n_certified_violations_printed`` (lower bound > RHS), ``lhs`` (K,),
      ``lhs_over_opnorm`` (K,) = LHS / (‖G‖op / T), ``delta_max`` (M,), ks, ms.
    """
    from geomjax import smoothness

    P = np.asarray(pos, np.float64)
    P = P - P.mean(0, keepdims=True)
    G = P @ P.T
    T = G.shape[0]
    G = G * (T / np.trace(G))
    G = 0.5 * (G + G.T)
    with jax.enable_x64(True):
        tab = smoothness.theorem1_table(jnp.asarray(G), ks=ks, ms=ms)
    lhs = tab.lhs_printed[:, None]
    out = {"ks": tab.ks.tolist(), "ms": tab.ms.tolist(), "lhs": tab.lhs_printed.tolist(),
           "lhs_lower": tab.lhs_printed_lower.tolist(),
           "slack_printed": (tab.coef_printed * tab.delta_rounding[None, :]).tolist(),
           "slack_corrected": (tab.coef_corrected * tab.delta_rounding[None, :]).tolist(),
           "lhs_over_opnorm": (tab.lhs_printed / (np.linalg.eigvalsh(G)[-1] / T)).tolist(),
           "delta_max": tab.delta_max.tolist()}
    for name, rhs in (("printed", tab.rhs_printed), ("corrected", tab.rhs_corrected)):
        ratio = np.where(rhs > 0, lhs / np.where(rhs > 0, rhs, 1.0), np.inf)
        i, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        out[f"rhs_{name}"] = rhs.tolist()
        out[f"ratio_{name}"] = ratio.tolist()
        out[f"max_ratio_{name}"] = float(ratio[i, j])
        out[f"argmax_{name}"] = [int(tab.ks[i]), int(tab.ms[j])]
        out[f"n_certified_violations_{name}"] = int(np.sum(tab.lhs_printed_lower[:, None] > rhs))
    return out


def token_cluster_metrics(h, labels, mean, pos) -> dict:
    """Cluster compactness Tr(Σ_B Σ_W⁺) of token-level cvec and raw states (Song & Zhong App. C,
    Figs. 24-26): cvec_{c,t} = h_{c,t} − μ − pos_t against the raw h_{c,t}, labelled by document.

    Args:
      h: (N, T, d) hidden states of N windows (a subsample of the study's windows).
      labels: (N,) document of each window (at least two documents).
      mean: (d,) μ and pos: (T, d) of the full study (the streaming decomposition).

    Returns:
      dict with ``compactness_cvec``, ``compactness_raw``, and 2-D PCA coordinates (N·T, 2) of
      both (``pca_cvec``, ``pca_raw``; each on its own top-2 principal directions).
    """
    h = np.asarray(h, np.float64)
    N, T, d = h.shape
    labels = np.asarray(labels)
    if labels.shape != (N,):
        raise ValueError(f"token_cluster_metrics: labels must have shape ({N},), got {labels.shape}")
    if np.unique(labels).size < 2:
        raise ValueError("token_cluster_metrics: needs windows from at least two documents")
    cvec = h - np.asarray(mean, np.float64) - np.asarray(pos, np.float64)[None]
    tok_labels = np.repeat(labels, T)
    out = {}
    for name, X in (("cvec", cvec.reshape(-1, d)), ("raw", h.reshape(-1, d))):
        with jax.enable_x64(True):
            out[f"compactness_{name}"] = float(
                geometry.cluster_compactness(jnp.asarray(X), jnp.asarray(tok_labels)))
        Xc = X - X.mean(0)
        _, _, vt = np.linalg.svd(Xc, full_matrices=False)
        out[f"pca_{name}"] = Xc @ vt[:2].T
    out["token_labels"] = tok_labels
    return out
