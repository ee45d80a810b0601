"""The per-layer geometry study (Song & Zhong §2, Tables 1-5, Theorem 1 on real layers, App. C).

:func:`run` is the study as data flow: ``run(config) -> StudyResult``. It samples C
document-labelled windows, runs the jitted model over them once and accumulates the exact
decomposition (eqs. (2)-(3)) of every hidden state in the same pass, then computes each layer's
numbers and the projections the figures draw; :meth:`StudyResult.to_json` is metrics.json,
``geomjax.analysis.plots.study_figures`` draws it and ``geomjax.analysis.report.sections`` writes its report.

The numbers: :func:`layer_metrics` turns one layer's ``DecompositionStats`` (and optional context
labels) into the numbers of Song & Zhong's tables; :func:`summarize_layers` gives the mean ± std
across layers (Tables 1-2). Everything is computed from the O(d² + T d + C d) statistics: no
C x T x d tensor is needed, and the incoherence the paper reports but its code never computed is
exact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from geomjax import data

from geomjax.tools import extraction

from geomjax.theory import geometry

from geomjax.theory import smoothness

from geomjax.theory import spectral
from geomjax.convert import load_config, load_pretrained
from geomjax.convert.safetensors_io import read_config
from geomjax.convert.tokenizers import check_tokenizer, model_tokenizer
from geomjax.base import timing
from geomjax.base._checks import x64_context
from geomjax.theory.decomposition import DecompositionStats, class_scatter_init, class_scatter_update
from geomjax.theory.geometry import compactness_from_scatter, pca_from_scatter
from geomjax.errors import GeomjaxError
from geomjax.base.io import cache_root
from geomjax.analysis.lens import load, model_source
from geomjax.models import ToyRun, model_interface, toy_forward
from geomjax.models.common import CausalLM
from geomjax.models.interface import model_from_config
from geomjax.base.parallel import data_mesh
from geomjax.analysis.study_config import PRESETS, GeometryConfig

__all__ = ["StudyOptions", "LayerMetrics", "Theorem1OnPos", "layer_metrics", "summarize_layers", "theorem1_on_pos",
           "theorem1_on_pos_layers",
           "token_cluster_metrics", "top_singular_values", "GeometryConfig", "PRESETS", "GeometryInputs",
           "validate_geometry", "check_topic_capacity", "load_model_and_tokenizer", "model_conventions",
           "prepare_inputs", "status_line", "TokenClusters", "LayerResult", "StudyResult", "run", "StudyPlan", "plan",
           "SOURCE_SCREENOT_K", "screenot_k_caution"]


SOURCE_SCREENOT_K = 20
"""ScreeNOT's k in Song & Zhong's code (Tables 1 and 3): the rank estimates are comparable with theirs at this k."""


def screenot_k_caution(k: int) -> str | None:
    """The warning a study with ScreeNOT's ``k`` below the source's :data:`SOURCE_SCREENOT_K` carries (None at or
    above it): ScreeNOT's imputation takes σ_{k+1}..σ_{2k+1} as the noise bulk, so a k below the signal's rank
    counts signal as noise, raises the threshold and lowers every rank estimate."""
    if k >= SOURCE_SCREENOT_K:
        return None
    return (f"Warning: ScreeNOT ran with k = {k}, below the source's k = {SOURCE_SCREENOT_K} (--screenot-k). k is "
            f"ScreeNOT's upper bound on the rank and its imputation takes σ_{k + 1}..σ_{2 * k + 1} as the noise bulk, so "
            "where P's signal rank exceeds k those singular values are signal counted as noise: the threshold rises and "
            "every rank estimate falls. These ranks are not comparable with the paper's (Tables 1-3, k = "
            f"{SOURCE_SCREENOT_K}); use --screenot-k {SOURCE_SCREENOT_K} where T and d allow it (2k + 1 < min(T, d)).")


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
    with x64_context(stats.accum_dtype):
        sp = np.sqrt(stats.n_contexts) * np.asarray(spectral.singular_values(stats.pos), np.float64)
        sc = np.asarray(spectral.singular_values_from_second_moment(stats.cvec_second_moment))
        sr = np.asarray(spectral.singular_values_from_second_moment(stats.resid_second_moment))
    return {"P": sp[:n], "Cvec": sc[:n], "R": sr[:n]}


def _metric(column: str | None = None, *, panel: str | None = None, table1: int | None = None,
            summary: bool = False, default=dataclasses.MISSING) -> dataclasses.Field:
    """A :class:`LayerMetrics` field with how the report shows it, declared once with the field.

    Args:
      column: header of its column in the report's per-layer table (None: not a column); may name
        a GeometryConfig field in braces ("{screenot_k}").
      panel: title of its panel in the per-layer figure (None: no panel).
      table1: the column of the paper's Table 1 it is compared with (report.PAPER_TABLE1), if any.
      summary: a row of the report's "Table 1 (mean ± std across layers)".
    """
    return dataclasses.field(default=default, metadata={
        "column": column, "panel": panel, "table1": table1, "summary": summary})


@dataclasses.dataclass(frozen=True)
class LayerMetrics:
    """Song & Zhong's numbers of one hidden state (Tables 1, 3-5; Fig. 3 right), from :func:`layer_metrics`.

    How the report shows each number (its table column, figure panel, Table 1 comparison) is declared
    with the field (:func:`_metric`): a new field appears in the report without editing report.py.

    Attributes (in the order of their metrics.json keys):
      n_contexts, n_positions: C and T the statistics were accumulated over.
      screenot_rank, screenot_threshold: ScreeNOT rank of P (T, d) and its threshold (Table 3); None
        when ScreeNOT cannot run (2k + 1 >= min(T, d)).
      explained_ratio: share of P's energy in the top ``screenot_rank`` directions (None likewise).
      screenot_note: why ScreeNOT could not run ("n/a: ..."), else None.
      stable_rank: ‖P‖_F² / ‖P‖_op² (Table 4).
      relative_norm: ‖P_tiled‖op / ‖M‖op (Table 5).
      share_pos, share_ctx, share_resid: ANOVA variance shares of pos, ctx and resid (sum to 1).
      incoherence_max, incoherence_mean: max and mean |cos(pos_t, ctx_c)| over all T·C pairs (Table 1).
      intra_similarity, inter_similarity: mean |cos| of ctx within / between documents (Table 1),
        None without document labels.
      dct_low_freq_energy: share of the normalized pos Gram's 2-D DCT energy in the first
        ``n_freq`` × ``n_freq`` frequencies (Fig. 3 right).
      cluster_compactness: Tr(Σ_B Σ_W⁺) of ctx by document (App. C); set by :func:`run` (None with
        one document), None from :func:`layer_metrics` alone.
    """

    n_contexts: int
    n_positions: int
    screenot_rank: int | None = _metric("rank (ScreeNOT k={screenot_k})", panel="rank of P (ScreeNOT)",
                                        table1=2, summary=True)
    screenot_threshold: float | None = _metric()
    explained_ratio: float | None = _metric()
    screenot_note: str | None = _metric()
    stable_rank: float = _metric("stable rank", panel="stable rank of P", summary=True)
    relative_norm: float = _metric("relative norm", panel="relative norm of P", table1=3, summary=True)
    share_pos: float = _metric("pos share", panel="variance share of pos")
    share_ctx: float = _metric("ctx share")
    share_resid: float = _metric("resid share")
    incoherence_max: float = _metric("incoh max", panel="incoherence: max |cos(pos, ctx)|", table1=6,
                                     summary=True)
    incoherence_mean: float = _metric("incoh mean", summary=True)
    intra_similarity: float | None = _metric("intra sim", panel="ctx |cos| within documents", table1=5,
                                             summary=True)
    inter_similarity: float | None = _metric("inter sim", panel="ctx |cos| between documents", table1=4,
                                             summary=True)
    dct_low_freq_energy: float = _metric("DCT low-freq energy", panel="pos Gram: low-frequency DCT energy")
    cluster_compactness: float | None = _metric("compactness", panel="ctx compactness Tr(Σ_B Σ_W⁺)",
                                                default=None)

    def to_json(self) -> dict:
        """The numbers as metrics.json's per-layer keys (docs/DESIGN.md), in field order;
        ``screenot_note`` and the similarities only when set, ``cluster_compactness`` only in a study
        row (:meth:`LayerResult.to_json`)."""
        optional = ("screenot_note", "intra_similarity", "inter_similarity")
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "cluster_compactness" and not (f.name in optional and getattr(self, f.name) is None)}


def layer_metrics(
    stats: DecompositionStats,
    labels: np.ndarray | None = None,
    options: StudyOptions = StudyOptions(),
) -> LayerMetrics:
    """Song & Zhong's per-layer numbers for one layer (Tables 1, 3-5).

    Args:
      stats: the layer's streaming decomposition (pos (T, d), ctx (C, d), second moments).
      labels: optional (C,) document label of every context, for the cluster similarity.
      options: study conventions.

    Returns:
      :class:`LayerMetrics`: ScreeNOT rank and threshold of P (Table 3), stable rank (Table 4),
      explained ratio, relative norm (Table 5), incoherence max / mean (Table 1, last column), the
      intra / inter similarities (Table 1, when labels are given), the low-frequency DCT energy
      (Fig. 3 right) and the variance shares of pos, ctx and resid in the ANOVA identity. When
      ScreeNOT cannot run (2k + 1 >= min(T, d)) its three entries are None, ``screenot_note`` says
      why and a UserWarning is issued.
    """
    pos = jnp.asarray(np.asarray(stats.pos, np.float32))
    ctx = jnp.asarray(np.asarray(stats.ctx, np.float32))
    T, d = pos.shape
    out: dict = {"n_contexts": stats.n_contexts, "n_positions": T, "screenot_note": None,
                 "intra_similarity": None, "inter_similarity": None}
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
    with x64_context(stats.accum_dtype):
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
    return LayerMetrics(**out)


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


@dataclasses.dataclass(frozen=True)
class Theorem1OnPos:
    """Song & Zhong Theorem 1, eq. (6), on one layer's positional Gram (:func:`theorem1_on_pos`).

    Attributes (in the order of their metrics.json keys; K = len(ks), M = len(ms)):
      ks: (K,) k values; ms: (M,) m values.
      lhs: (K,) LHS(k) in the printed basis (upper bound on the theorem's min over B); lhs_lower:
        (K,) its certified lower bound over all B.
      slack_printed, slack_corrected: (K, M) rounding allowance of the RHS (coefficient × the
        rounding bound of ‖Δ^{(m,m)}G̃‖max).
      lhs_over_opnorm: (K,) LHS / (‖G‖op / T).
      delta_max: (M,) ‖Δ^{(m,m)}G̃‖max.
      rhs_printed, ratio_printed: (K, M) RHS with the printed constant 6/(8k)^m and LHS / RHS (inf
        where the RHS is 0); max_ratio_printed, argmax_printed: the largest ratio and its (k, m);
        n_certified_violations_printed: (k, m) pairs whose lower bound exceeds the RHS.
      rhs_corrected, ...: the same with ``geomjax.theory.smoothness.corrected_constant``.
    """

    ks: np.ndarray
    ms: np.ndarray
    lhs: np.ndarray
    lhs_lower: np.ndarray
    slack_printed: np.ndarray
    slack_corrected: np.ndarray
    lhs_over_opnorm: np.ndarray
    delta_max: np.ndarray
    rhs_printed: np.ndarray
    ratio_printed: np.ndarray
    max_ratio_printed: float
    argmax_printed: tuple[int, int]
    n_certified_violations_printed: int
    rhs_corrected: np.ndarray
    ratio_corrected: np.ndarray
    max_ratio_corrected: float
    argmax_corrected: tuple[int, int]
    n_certified_violations_corrected: int

    @property
    def lhs_k10_over_opnorm(self) -> float:
        """LHS(k) / (‖G‖op / T) at k = 10 (the largest k when fewer were evaluated)."""
        return float(self.lhs_over_opnorm[min(10, len(self.ks)) - 1])

    def to_json(self) -> dict:
        """metrics.json's ``theorem1`` entry of the layer: arrays as (nested) lists, (k, m) as a list."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = np.asarray(v).tolist() if isinstance(v, (np.ndarray, tuple)) else v
        return out


def theorem1_on_pos(pos, ks=tuple(range(1, 21)), ms=tuple(range(1, 5))) -> Theorem1OnPos:
    """Song & Zhong Theorem 1, eq. (6), on a real layer's positional Gram G = P Pᵀ (T×T).

    pos (T, d) is re-centred over t in float64 (Σ_t pos_t = 0 holds only up to the rounding of
    the streaming sums), so G 1 = 0 exactly as the theorem assumes; G is scaled to trace T
    (both sides of eq. (6) are linear in G, so ratios do not depend on it).

    LHS(k) = (1/T)‖G − F_{≤k}B(F_{≤k}B)ᵀ‖op for the Frobenius-optimal PSD fit in the printed
    basis (an upper bound on the theorem's min over B) with a certified lower bound over all B;
    RHS(k, m) = 6/(8k)^m ‖Δ^{(m,m)}G̃‖max (printed) and the corrected constant of
    ``geomjax.theory.smoothness.corrected_constant``.

    Returns:
      :class:`Theorem1OnPos`: ``rhs_printed`` / ``rhs_corrected`` (K, M), ``ratio_*`` (K, M) = LHS / RHS,
      their maxima and argmax (k, m), ``n_certified_violations_*`` (lower bound > RHS), ``lhs`` (K,),
      ``lhs_over_opnorm`` (K,) = LHS / (‖G‖op / T), ``delta_max`` (M,), ks, ms.
    """
    G = _pos_gram(pos)
    with jax.enable_x64(True):
        tab = smoothness.theorem1_table(jnp.asarray(G), ks=ks, ms=ms)
    return _theorem1_result(G, tab)


def _pos_gram(pos) -> np.ndarray:
    """G = P Pᵀ (T, T) of pos re-centred over t in float64, scaled to trace T and symmetrised."""
    P = np.asarray(pos, np.float64)
    P = P - P.mean(0, keepdims=True)
    G = P @ P.T
    G = G * (G.shape[0] / np.trace(G))
    return 0.5 * (G + G.T)


def _theorem1_result(G: np.ndarray, tab) -> Theorem1OnPos:
    """:class:`Theorem1OnPos` of one layer from its Gram and its ``smoothness.Theorem1Table``."""
    T = G.shape[0]
    lhs = tab.lhs_printed[:, None]
    out = {"ks": np.asarray(tab.ks), "ms": np.asarray(tab.ms), "lhs": np.asarray(tab.lhs_printed),
           "lhs_lower": np.asarray(tab.lhs_printed_lower),
           "slack_printed": np.asarray(tab.coef_printed * tab.delta_rounding[None, :]),
           "slack_corrected": np.asarray(tab.coef_corrected * tab.delta_rounding[None, :]),
           "lhs_over_opnorm": np.asarray(tab.lhs_printed / (np.linalg.eigvalsh(G)[-1] / T)),
           "delta_max": np.asarray(tab.delta_max)}
    for name, rhs in (("printed", tab.rhs_printed), ("corrected", tab.rhs_corrected)):
        ratio = np.where(rhs > 0, lhs / np.where(rhs > 0, rhs, 1.0), np.inf)
        i, j = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        out[f"rhs_{name}"] = np.asarray(rhs)
        out[f"ratio_{name}"] = ratio
        out[f"max_ratio_{name}"] = float(ratio[i, j])
        out[f"argmax_{name}"] = (int(tab.ks[i]), int(tab.ms[j]))
        out[f"n_certified_violations_{name}"] = int(np.sum(tab.lhs_printed_lower[:, None] > rhs))
    return Theorem1OnPos(**out)


@dataclasses.dataclass(frozen=True)
class TokenClusters:
    """App. C (Figs. 24-26) on one layer: token-level cvec against raw states.

    Attributes:
      compactness_cvec, compactness_raw: Tr(Σ_B Σ_W⁺) by document.
      pca_cvec, pca_raw: (N·T, 2) principal coordinates of each cloud (centred, top-2 PCs); in a study
        (:func:`run`) only for the layers the figures scatter (first, middle, last), None elsewhere.
      token_labels: (N·T,) document of every token.
    """

    compactness_cvec: float
    compactness_raw: float
    pca_cvec: np.ndarray | None
    pca_raw: np.ndarray | None
    token_labels: np.ndarray


def token_cluster_metrics(h, labels, mean, pos) -> TokenClusters:
    """Cluster compactness Tr(Σ_B Σ_W⁺) of token-level cvec and raw states (Song & Zhong App. C,
    Figs. 24-26): cvec_{c,t} = h_{c,t} − μ − pos_t against the raw h_{c,t}, labelled by document.

    Args:
      h: (N, T, d) hidden states of N windows (a subsample of the study's windows).
      labels: (N,) document of each window (at least two documents).
      mean: (d,) μ and pos: (T, d) of the full study (the streaming decomposition).

    Returns:
      :class:`TokenClusters`: ``compactness_cvec``, ``compactness_raw``, 2-D PCA coordinates (N·T, 2)
      of both (``pca_cvec``, ``pca_raw``; each on its own top-2 principal directions) and the
      document of every token.
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
        out[f"pca_{name}"] = np.asarray(geometry.pca_projections(X, center=True).pos)
    return TokenClusters(out["compactness_cvec"], out["compactness_raw"], out["pca_cvec"], out["pca_raw"], tok_labels)


def _model_config(name: str) -> dict | None:
    """config.json of a model name without loading weights (None for a toy run)."""
    try:
        kind, path = model_source(name)
        if kind == "toy":
            if not (path / "checkpoints").is_dir():
                raise GeomjaxError(f"--model {name!r}: {str(path)!r} is not a `geomjax train` run directory "
                                   "(no checkpoints/); train one with `geomjax train shakespeare --out DIR`")
            return None
        return read_config(path)
    except GeomjaxError:
        raise  # e.g. a Hugging Face name neither cached nor reachable: its message says what to do
    except (FileNotFoundError, ValueError) as e:
        raise GeomjaxError(f"--model {name!r}: {e}. Use 'minilm', 'toy:RUN_DIR', a Hugging Face name "
                           "(cached or reachable), or a local model directory / cache entry with "
                           "config.json and model.safetensors") from None


def validate_geometry(cfg: GeometryConfig) -> None:
    """Check every option of a geometry study that can be checked without loading weights or text.

    Sizes, corpus names, the data folder and the model's positions are validated here, before a
    model is loaded or a run directory is created; the corpus capacity is checked after
    tokenization by :func:`prepare_inputs` (still before any forward pass).

    Raises:
      GeomjaxError: naming the option, the minimum or the allowed values, and the fix.
    """
    for flag, v, lo in (("--n-docs", cfg.n_docs, 1), ("--windows-per-doc", cfg.windows_per_doc, 1),
                        ("--batch-size", cfg.batch_size, 1), ("--screenot-k", cfg.screenot_k, 0),
                        ("--cluster-windows", cfg.n_cluster_windows, 0), ("--devices", cfg.devices or 1, 1)):
        if int(v) < lo:
            raise GeomjaxError(f"{flag} must be >= {lo}, got {v}")
    n_freq = StudyOptions().n_freq
    t_min = n_freq + int(cfg.drop_first)
    if cfg.seq_len < t_min:
        raise GeomjaxError(
            f"-T {cfg.seq_len} is too short: the study needs at least {n_freq} positions (the "
            f"low-frequency DCT energy of Fig. 3 uses the first {n_freq} frequencies), so -T >= {t_min}"
            f"{' (the first token is dropped)' if cfg.drop_first else ''}")
    if cfg.n_contexts % cfg.batch_size:
        raise GeomjaxError(
            f"C = --n-docs x --windows-per-doc = {cfg.n_docs} x {cfg.windows_per_doc} = {cfg.n_contexts} "
            f"is not a multiple of --batch-size {cfg.batch_size}; nothing is dropped or padded, so "
            "choose sizes that divide")
    if cfg.devices and cfg.batch_size % cfg.devices:
        raise GeomjaxError(f"--batch-size {cfg.batch_size} must be a multiple of --devices {cfg.devices}")
    if cfg.gram not in ("highest", "bf16x3") or (cfg.gram == "bf16x3" and cfg.accum_dtype != "float32"):
        raise GeomjaxError(f"--gram-precision {cfg.gram!r}: use 'highest', or 'bf16x3' with --accum-dtype float32")
    data.data_dir_override(cfg.data_dir)
    if cfg.join_lines is not None and (data.corpus_kind(cfg.corpus) != "hf" or cfg.join_lines < 1):
        raise GeomjaxError(f"--join-lines {cfg.join_lines}: needs N >= 1 and an hf: corpus (--corpus "
                           f"hf:NAME[:CONFIG[:SPLIT]]), got --corpus {cfg.corpus!r}")
    data.corpus_kind(cfg.corpus)
    if cfg.ood_corpus:
        data.corpus_kind(cfg.ood_corpus)
    mcfg = _model_config(cfg.model)
    if mcfg is not None:
        max_pos = mcfg.get("max_position_embeddings") or mcfg.get("n_positions")
        if isinstance(max_pos, int) and cfg.seq_len > max_pos:
            raise GeomjaxError(f"-T {cfg.seq_len} exceeds the {max_pos} positions of --model {cfg.model!r}; "
                               f"use -T <= {max_pos}")


def check_topic_capacity(lengths, cfg: GeometryConfig) -> None:
    """Refuse sizes the corpus cannot supply as non-overlapping within-document windows.

    ``sample_topics`` needs ``n_docs`` documents of at least ``windows_per_doc · seq_len`` tokens.

    Args:
      lengths: (D,) token count of every document.

    Raises:
      GeomjaxError: naming what fits (the largest --n-docs / --windows-per-doc at these sizes) and,
        for the bundled corpora, a larger corpus.
    """
    lengths = np.sort(np.asarray(lengths, np.int64))[::-1]
    need = cfg.windows_per_doc * cfg.seq_len
    n_ok = int((lengths >= need).sum())
    if n_ok >= cfg.n_docs:
        return
    best_w = int(lengths[cfg.n_docs - 1] // cfg.seq_len) if lengths.size >= cfg.n_docs else 0
    fits = [f"--n-docs {n_ok}" if n_ok else None,
            f"--windows-per-doc {best_w}" if best_w else None]
    hint = " or ".join(f for f in fits if f) or "a smaller -T"
    bigger = ""
    if cfg.corpus.lower().startswith(("wikitext", "shakespeare", "tinyshakespeare")):
        bigger = (f" The bundled {cfg.corpus} has {int(lengths.sum()):,} tokens in {lengths.size} "
                  f"document(s), the longest {int(lengths[0]):,}; these sizes (e.g. the 'paper' preset) need "
                  "a larger corpus with long documents: a local folder of text files (--corpus DIR, one "
                  "document per file; docs/scale.md) or --corpus hf:wikitext:wikitext-103-raw-v1:train (its "
                  "articles; needs `datasets` and a network or its cache).")
    raise GeomjaxError(
        f"--n-docs {cfg.n_docs} x --windows-per-doc {cfg.windows_per_doc} x -T {cfg.seq_len} needs "
        f"{cfg.n_docs} document(s) of >= {need:,} tokens, but {cfg.corpus} has {n_ok}; use {hint} "
        f"at these sizes.{bigger}")


def load_model_and_tokenizer(name: str, *, param_dtype: str | None = None):
    """(model, params, tokenizer, path) for "minilm", a Hugging Face checkpoint (directory, cache
    entry or name such as "gpt2"), or "toy:RUN_DIR" (a run directory of ``geomjax train``; the
    model is then a ``ToyRun``).

    The tokenizer is the model's own (the checkpoint's tokenizer.json; BERT WordPiece from its
    vocab.txt; GPT-2's byte-level BPE when a GPT-2 checkpoint ships none) and is checked against the
    model's vocabulary size.
    """
    m = load(name, dtype=param_dtype)
    tok = m.tokenizer.encode if m.interface.family is None else m.tokenizer  # a toy run's CharTokenizer
    return m.model, m.params, tok, m.path


def _max_positions(model) -> int | None:
    """Context length of a loaded model, None when its positions are unbounded (rotary, ALiBi)."""
    return model_interface(model).facts.max_positions


def model_conventions(model, cfg: GeometryConfig) -> dict:
    """The hidden-state conventions a study of ``model`` runs with (recorded in config.json)."""
    m = model_interface(model)
    f, fam = m.facts, m.family
    final = cfg.final_ln if cfg.final_ln is not None else (fam is not None and fam.study_final_norm)
    if final and not f.final_norm:
        name = "this toy model" if fam is None else m.config.display_name
        raise GeomjaxError(f"--final-ln: {name} has no final LayerNorm (its Hugging Face states are the "
                           "residual stream already); leave --final-ln out")
    if cfg.causal and (fam is None or not fam.bidirectional):
        raise GeomjaxError(f"--causal applies to BERT only (the {f.family} model has its own causal mask)")
    bos = getattr(getattr(model, "config", None), "bos_token_id", None) if cfg.bos else None
    if cfg.bos and bos is None:
        raise GeomjaxError(f"--bos: the {f.family} model's tokenizer has no BOS token to prepend")
    return {"family": f.family, "positions": f.positions, "norm": f.norm, "final_norm_applied": bool(final),
            "bos_prepended": bos, "first_position_dropped": cfg.drop_first,
            "hidden_states": "embedding output, then each block" + (
                ", the last after the final norm (Hugging Face output_hidden_states)" if final
                else ", all before any final norm (residual stream)")}


def _forward(model, *, final_ln: bool, causal: bool, bos: int | None = None):
    """forward(params, ids) -> L+1 hidden states with the study's conventions (the model interface's
    :meth:`~geomjax.models.ModelInterface.hidden_states`; ``bos`` prepended to every window)."""
    if isinstance(model, ToyRun) and bos is None:
        if causal:
            raise GeomjaxError("--causal applies to BERT only (the toy model has its own mask)")
        return toy_forward(model, "hidden_states" if final_ln else "residual")
    if causal and not getattr(model_interface(model).family, "bidirectional", False):
        raise GeomjaxError("--causal applies to BERT only (other models have their own mask)")
    m = model_interface(model, causal=True if causal else None)
    if final_ln and not m.facts.final_norm:
        raise GeomjaxError(f"--final-ln applies to models with a final norm (GPT-2, Llama, Mistral, BLOOM, "
                           f"pre-LN toys); the {m.facts.family} model has none")
    return m.study_forward(final_norm=bool(final_ln), bos=bos)


@dataclasses.dataclass
class GeometryInputs:
    """Sampled windows of a study: (C, T) ids with labels, the fresh cvec draw, and the
    out-of-distribution windows (Table 2) when an OOD corpus is set."""

    windows: object  # geomjax.data.Windows
    cvec_ids: np.ndarray
    doc_names: list[str]
    n_tokens_corpus: int
    ood_ids: np.ndarray | None = None
    ood_dropped: float = 0.0


def _bar(iterable, desc: str, progress: bool, unit: str = "layer"):
    """``iterable`` with a tqdm bar on stderr when ``progress``."""
    if not progress:
        return iterable
    from tqdm.auto import tqdm  # display only

    return tqdm(iterable, desc=desc, unit=unit)


def status_line(msg: str, progress: bool = True) -> None:
    """One status line on stderr for a stage without a progress bar."""
    if progress:
        print(f"geomjax: {msg}", file=sys.stderr, flush=True)


def prepare_inputs(cfg: GeometryConfig, tokenizer, *, vocab=None, progress: bool = False) -> GeometryInputs:
    """Tokenize the corpora and draw every window of the study before any forward pass.

    The study's windows follow Song & Zhong's topic design without overlap or repetition; an
    independent draw of ``n_cvec`` windows serves cvec/resid; with ``cfg.ood_corpus``, C
    non-overlapping windows of the OOD corpus (Table 2). Capacity is checked for all of them here,
    so a too-small corpus fails in seconds, not after the main pass.

    Args:
      cfg: the study's configuration (sizes already checked by :func:`validate_geometry`).
      tokenizer: ``text -> ids``.
      vocab: characters a character model can encode (OOD text is filtered to them), or None.
      progress: print status lines.

    Raises:
      GeomjaxError: a corpus cannot supply the windows (the message says what fits).
    """
    status_line(f"tokenizing {cfg.corpus}", progress)
    docs = data.load_corpus(cfg.corpus, cfg.data_dir, **({"join_lines": cfg.join_lines} if cfg.join_lines else {}))
    corpus = data.tokenize_documents(docs, tokenizer, cache=cache_root() / "tokens")
    check_topic_capacity(corpus.lengths, cfg)
    key = jax.random.key(cfg.seed)
    k_topics, k_cvec = jax.random.split(key)
    windows = data.sample_topics(corpus, cfg.n_docs, cfg.windows_per_doc, cfg.seq_len, k_topics)
    fresh = data.sample_windows(corpus, cfg.n_cvec, cfg.seq_len, k_cvec)
    ood_ids, dropped = None, 0.0
    if cfg.ood_corpus:
        status_line(f"tokenizing {cfg.ood_corpus} (out-of-distribution corpus, Table 2)", progress)
        odocs = data.load_corpus(cfg.ood_corpus, cfg.data_dir)
        if vocab is not None:
            # A character model cannot encode characters it never saw: drop them explicitly
            # and report how many (the paper ran its Shakespeare NanoGPT on WikiText too).
            keep = set(vocab)
            n_all = sum(len(t) for _, t in odocs)
            odocs = [(n, "".join(ch for ch in t if ch in keep)) for n, t in odocs]
            dropped = 1.0 - sum(len(t) for _, t in odocs) / max(n_all, 1)
        oc = data.tokenize_documents(odocs, tokenizer, cache=cache_root() / "tokens")
        if oc.n_tokens // cfg.seq_len < cfg.n_contexts:
            raise GeomjaxError(
                f"--ood-corpus {cfg.ood_corpus} has {oc.n_tokens:,} tokens: room for "
                f"{oc.n_tokens // cfg.seq_len} non-overlapping windows of -T {cfg.seq_len}, but Table 2 "
                f"uses C = {cfg.n_contexts}; choose a larger --ood-corpus, fewer windows, or "
                "--ood-corpus none")
        ow = data.sample_windows(oc, cfg.n_contexts, cfg.seq_len,
                                 jax.random.fold_in(jax.random.key(cfg.seed), 2), non_overlapping=True)
        ood_ids = np.asarray(ow.ids)
    return GeometryInputs(windows, np.asarray(fresh.ids), list(corpus.names), corpus.n_tokens,
                          ood_ids, dropped)


def _mesh(devices: int | None):
    """The study's 1-D "data" mesh over ``devices`` devices (None: one device)."""
    if not devices:
        return None
    if devices > jax.device_count():
        raise GeomjaxError(
            f"--devices {devices}: only {jax.device_count()} {jax.default_backend()} device(s) are visible"
            + ("; on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before starting"
               if jax.default_backend() == "cpu" else ""))
    return data_mesh(devices)


# ---------------------------------------------------------------------------------------------
# The study as data flow: run(config) -> StudyResult
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LayerResult:
    """Everything the study computed on one hidden state (layer 0 = embedding output).

    Attributes:
      name: "emb", "L1", ...
      metrics: Tables 1, 3-5 of the layer (:func:`layer_metrics`) with the context compactness.
      pos_pca: (T, 2) pos on P's top-2 right singular vectors (Fig. 1).
      cvec_pca: (n_cvec, T, 2) cvec of the fresh draw on the same directions.
      dct: (T, T) |2-D DCT| of the normalized pos Gram (Fig. 3 right).
      theorem1: :func:`theorem1_on_pos` of the layer (eq. (6)), or None.
      token_clusters: App. C of the layer (:func:`token_cluster_metrics`), or None.
      ood: :func:`layer_metrics` of the out-of-distribution pass (Table 2), or None.
      pos_pca3, cvec_pca3: (T, 3) / (n_cvec, T, 3) on P's top-3 PCs for the 3-D panels, else None.
      ctx_pca: (C, 2) principal coordinates of ctx for the App. C scatter layers, else None.
    """

    name: str
    metrics: LayerMetrics
    pos_pca: np.ndarray
    cvec_pca: np.ndarray
    dct: np.ndarray
    theorem1: Theorem1OnPos | None = None
    token_clusters: TokenClusters | None = None
    ood: LayerMetrics | None = None
    pos_pca3: np.ndarray | None = None
    cvec_pca3: np.ndarray | None = None
    ctx_pca: np.ndarray | None = None

    def to_json(self, d_model: int) -> dict:
        """The layer's row of metrics.json's ``per_layer`` (docs/DESIGN.md lists the keys): Tables 1,
        3-5 and the context compactness; with Theorem 1 its summary; with token clusters App. C's
        compactness, token count and d; with an OOD pass its rank and norms (Table 2)."""
        row = self.metrics.to_json()
        row["cluster_compactness"] = self.metrics.cluster_compactness
        if self.theorem1 is not None:
            t = self.theorem1
            row |= {"theorem1_max_ratio_printed": t.max_ratio_printed,
                    "theorem1_max_ratio_corrected": t.max_ratio_corrected,
                    "theorem1_certified_violations_printed": t.n_certified_violations_printed,
                    "theorem1_lhs_k10_over_opnorm": t.lhs_k10_over_opnorm}
        if self.token_clusters is not None:
            c = self.token_clusters
            row |= {"compactness_cvec": c.compactness_cvec, "compactness_raw": c.compactness_raw,
                    "n_cluster_tokens": int(c.token_labels.size), "d_model": int(d_model)}
        if self.ood is not None:
            row |= {"ood_screenot_rank": self.ood.screenot_rank, "ood_relative_norm": self.ood.relative_norm,
                    "ood_stable_rank": self.ood.stable_rank}
        return row


@dataclasses.dataclass(frozen=True)
class StudyResult:
    """The per-layer geometry study of one (model, corpus) pair (Song & Zhong §2, Tables 1-5,
    Theorem 1 on real layers, App. C, Figs. 1-3 / 24-26), as arrays and numbers.

    :meth:`StudyResult.to_json` is metrics.json; ``geomjax.analysis.plots.study_figures`` draws it and
    ``geomjax.analysis.report.sections`` writes its report.

    Attributes:
      config: the study's configuration; options: the study conventions it ran with.
      model_desc: "BertModel (all-MiniLM-L6-v2), L = 6, d = 384".
      arch: the paper's closest Table 1 row ("BERT", "GPT-2" or "NanoGPT").
      conventions: :func:`model_conventions` (also in config.json).
      layers: one :class:`LayerResult` per hidden state.
      n_contexts, n_positions, d_model: C, T (analysed positions) and d.
      labels: (C,) document of every window.
      doc_names: names of every document of the corpus.
      n_tokens_corpus: tokens of the corpus.
      singular_values_mid: {"P", "Cvec", "R"}: top singular values at the middle layer (Fig. 3 left).
      gram_mid: (T + C, T + C) normalized Gram of [pos; ctx] at the middle layer (Fig. 2).
      not_available: metric -> "n/a: needs ..." for the metrics these sizes cannot give.
      incoherence_baseline: E|cos| of two independent isotropic directions in R^d
        (:func:`geometry.mean_abs_cos_isotropic`), the scale of the incoherence.
      ood_dropped: fraction of the OOD text's characters a character model could not encode.
      seconds_forward: forward + decomposition wall time; seconds_total: the whole study's.
      corpora: corpus name -> which text it read (:func:`geomjax.data.corpus_source`: the shipped
        file and its hash, or the Python version of an interpreter-dependent corpus), for the
        corpus and the OOD corpus.
      incoherence_max_baseline: E max|cos| over n_positions · n_contexts independent pairs of isotropic
        directions in R^d (:func:`geometry.expected_max_abs_cos_isotropic`), the like-for-like scale of the
        incoherence max over all T·C pairs (None: not computed).
    """

    config: GeometryConfig
    options: StudyOptions
    model_desc: str
    arch: str
    conventions: dict
    layers: tuple[LayerResult, ...]
    n_contexts: int
    n_positions: int
    d_model: int
    labels: np.ndarray
    doc_names: tuple[str, ...]
    n_tokens_corpus: int
    singular_values_mid: dict
    gram_mid: np.ndarray
    not_available: dict
    incoherence_baseline: float
    ood_dropped: float
    seconds_forward: float
    seconds_total: float
    corpora: dict = dataclasses.field(default_factory=dict)
    incoherence_max_baseline: float | None = None

    @property
    def layer_names(self) -> list[str]:
        return [ly.name for ly in self.layers]

    @property
    def mid(self) -> int:
        """Index of the middle layer (Figs. 2-3, Theorem 1 figure)."""
        return len(self.layers) // 2

    @property
    def multi_doc(self) -> bool:
        return np.unique(self.labels).size >= 2

    @property
    def per_layer(self) -> list[dict]:
        """metrics.json's ``per_layer`` rows (:meth:`LayerResult.to_json`)."""
        return [ly.to_json(self.d_model) for ly in self.layers]

    @property
    def summary(self) -> dict[str, dict]:
        """Mean / std / n_layers across layers of every numeric per-layer metric (Tables 1-2;
        :func:`summarize_layers` of :attr:`per_layer`)."""
        return summarize_layers(self.per_layer)

    def to_json(self) -> dict:
        """metrics.json: the study's numbers (arrays as lists; docs/DESIGN.md documents the schema)."""
        return {
            "model": self.model_desc, "n_contexts": self.n_contexts, "n_positions": self.n_positions,
            "layers": self.layer_names, "per_layer": self.per_layer,
            "summary": self.summary,
            "singular_values_mid_layer": {k: np.asarray(v).tolist() for k, v in self.singular_values_mid.items()},
            "timing_s": {"forward_and_decomposition": self.seconds_forward, "total": self.seconds_total},
            "doc_labels": {str(j): self.doc_names[j] for j in np.unique(self.labels)},
            "theorem1": [ly.theorem1.to_json() for ly in self.layers if ly.theorem1 is not None],
            "ood_fraction_of_characters_dropped": self.ood_dropped,
            "not_available": self.not_available,
            "model_conventions": self.conventions,
            "corpora": self.corpora,
        }


@dataclasses.dataclass
class _Loaded:
    """A model with its tokenizer and the study's forward (internal to :func:`run`); ``params`` stay
    None until :func:`_load_weights` (after the corpus's capacity is checked)."""

    model: object
    params: object
    tokenizer: object
    path: Path
    conventions: dict
    forward: object
    mesh: object = None


def _model_without_weights(name: str):
    """(model, tokenizer, path, params or None): a Hugging Face model built from its config.json and its
    tokenizer, no weights read; a toy run whole (it is small)."""
    kind, path = model_source(name)
    if kind == "toy":
        model, params, tok, path = load_model_and_tokenizer(name)
        return model, tok, path, params
    config = load_config(path)
    tok = model_tokenizer(path, config)
    check_tokenizer(tok, config)
    return model_from_config(config), tok, Path(path), None


def _study_forward(cfg: GeometryConfig, model, conv: dict):
    """The study's forward of ``model``: a causal decoder's scanned over its stacked blocks
    (:func:`~geomjax.tools.extraction.scan_forward`), any other model's whole (mixed precision)."""
    try:
        fwd_raw = _forward(model, final_ln=conv["final_norm_applied"], causal=cfg.causal,
                           bos=conv["bos_prepended"])
    except ValueError as e:  # an option the model does not support (--causal, --final-ln)
        raise GeomjaxError(str(e)) from None
    if isinstance(model, CausalLM) and model.scannable():  # Gemma 2/3's per-layer blocks run whole
        return extraction.scan_forward(model, conv["final_norm_applied"], conv["bos_prepended"], cfg.compute_dtype)
    return extraction.mixed_precision(fwd_raw, cfg.compute_dtype)


def _load(cfg: GeometryConfig, progress: bool) -> _Loaded:
    """The model (config only), its tokenizer and the study's forward; model-only checks come first.
    The weights are read later by :func:`_load_weights`."""
    status_line(f"reading the config and tokenizer of {cfg.model}", progress)
    try:
        model, tok, path, params = _model_without_weights(cfg.model)
    except GeomjaxError:
        raise
    except (FileNotFoundError, ValueError) as e:  # missing/corrupted files, unsupported config
        raise GeomjaxError(f"--model {cfg.model!r} cannot be loaded: {e}") from None
    conv = model_conventions(model, cfg)
    max_pos = _max_positions(model)
    n_bos = int(conv["bos_prepended"] is not None)
    if max_pos is not None and cfg.seq_len + n_bos > max_pos:
        raise GeomjaxError(f"-T {cfg.seq_len}{' plus the BOS token' if n_bos else ''} exceeds the model's "
                           f"{max_pos} positions; use -T <= {max_pos - n_bos}")
    mesh = _mesh(cfg.devices)
    return _Loaded(model, params, tok, path, conv, _study_forward(cfg, model, conv), mesh)


def _load_weights(cfg: GeometryConfig, m: _Loaded, progress: bool) -> None:
    """Read the weights (host memory), stack and shard them on the study's mesh (a causal decoder: FSDP,
    each device 1/n of every matrix), and record the dtype the forward runs in."""
    if m.params is None:
        status_line(f"loading the weights of {cfg.model}", progress)
        try:
            m.model, m.params = load_pretrained(m.path, dtype=cfg.param_dtype, host=True)
        except GeomjaxError:
            raise
        except (FileNotFoundError, ValueError) as e:
            raise GeomjaxError(f"--model {cfg.model!r} cannot be loaded: {e}") from None
        m.forward = _study_forward(cfg, m.model, m.conventions)
    floats = {str(np.dtype(a.dtype)) for a in jax.tree.leaves(m.params) if jnp.issubdtype(a.dtype, jnp.floating)}
    m.conventions = m.conventions | {"forward_dtype": cfg.compute_dtype if cfg.compute_dtype != "float32"
                                     else "/".join(sorted(floats))}
    m.params = extraction.place_params(m.forward, m.params, m.mesh or data_mesh(1))


STREAM_CHECKPOINT_EVERY = 50
"""Batches between checkpoints of a pass's partial statistics (``<cache>/stream/<config hash>.npz``)."""


def _stream(cfg: GeometryConfig, m: _Loaded, ids, desc: str, progress: bool):
    """Every layer's streaming decomposition (eqs. (2)-(3)) of the windows ``ids`` (C, T). Passes longer
    than :data:`STREAM_CHECKPOINT_EVERY` batches checkpoint their partial statistics, so an interrupted
    study with the same configuration resumes where it stopped; the checkpoint is deleted when done."""
    batches = [ids[i: i + cfg.batch_size] for i in range(0, len(ids), cfg.batch_size)]
    digest = hashlib.sha256(json.dumps([dataclasses.asdict(cfg), desc, np.asarray(ids).tobytes().hex()[:64],
                                        int(np.asarray(ids, np.int64).sum())], sort_keys=True, default=str)
                            .encode()).hexdigest()[:24]
    ck = cache_root() / "stream" / f"{digest}.npz" if len(batches) > STREAM_CHECKPOINT_EVERY else None
    out = extraction.decompose_model_stream(
        m.forward, m.params, batches, drop_first=cfg.drop_first, accum_dtype=cfg.accum_dtype,
        mesh=m.mesh, progress=desc if progress else False, total=len(batches), gram=cfg.gram,
        checkpoint=ck, checkpoint_every=STREAM_CHECKPOINT_EVERY)
    if ck is not None and jax.process_index() == 0:
        ck.unlink(missing_ok=True)
    return out


def _layer_rows(cfg, stats, states, labels, options, progress: bool) -> list[LayerMetrics]:
    """Tables 1, 3-5 of every layer and the context compactness (``states``: the fresh draw, for
    ``cluster_mu="general"``)."""
    multi_doc = np.unique(labels).size >= 2
    s0 = int(cfg.drop_first)
    if cfg.cluster_mu not in ("topics", "general"):
        raise GeomjaxError(f"--cluster-mu must be 'topics' or 'general', got {cfg.cluster_mu!r}")
    rows = []
    for layer in _bar(range(len(stats)), "metrics", progress):
        # Cluster metrics need two documents (a one-document corpus such as tiny Shakespeare
        # has none: reported as "—", like the paper's NanoGPT row).
        m = layer_metrics(stats[layer], labels if multi_doc else None, options)
        ctx = jnp.asarray(np.asarray(stats[layer].ctx, np.float32))
        if multi_doc and cfg.cluster_mu == "general":  # ctx_c + μ_topics − μ_general (the authors' topics script)
            mu_gen = np.asarray(states[layer][:, s0:], np.float64).mean((0, 1))
            ctx_gen = np.asarray(stats[layer].ctx, np.float64) + np.asarray(stats[layer].mean, np.float64) - mu_gen
            intra, inter = geometry.cluster_similarity(jnp.asarray(ctx_gen, jnp.float32), jnp.asarray(labels))
            m = dataclasses.replace(m, intra_similarity=float(intra), inter_similarity=float(inter))
        compactness = float(geometry.cluster_compactness(ctx, jnp.asarray(labels))) if multi_doc else None
        rows.append(dataclasses.replace(m, cluster_compactness=compactness))
    return rows


def theorem1_on_pos_layers(poss, ks=tuple(range(1, 21)), ms=tuple(range(1, 5))) -> list[Theorem1OnPos]:
    """:func:`theorem1_on_pos` (Song & Zhong Theorem 1, eq. (6)) of every layer's pos, a sequence of (T, d) arrays
    (one T), all layers' tables as one compiled program (``geomjax.theory.smoothness.theorem1_tables``) rather than one call per layer."""
    Gs = np.stack([_pos_gram(p) for p in poss])
    with jax.enable_x64(True):
        tabs = smoothness.theorem1_tables(jnp.asarray(Gs), ks=ks, ms=ms)
    return [_theorem1_result(G, tab) for G, tab in zip(Gs, tabs)]


def _theorem1(stats, progress: bool) -> list[Theorem1OnPos]:
    """Theorem 1, eq. (6), on every layer's pos Gram, k = 1..min(20, T − 1)."""
    T = stats[0].n_positions
    status_line(f"Theorem 1, eq. (6): {len(stats)} layers as one program", progress)
    return theorem1_on_pos_layers([st.pos for st in stats], ks=tuple(range(1, min(20, T - 1) + 1)))


APPC_STATE_BYTES = 16 * 2 ** 30
"""Budget of the App. C accumulators (two float64 d×d scatters per layer) held at once: layers beyond
it are accumulated in further passes over the App. C windows (a 70B model: 81 layers × 2 × 537 MB)."""

APPC_KEEP_BYTES = 256 * 2 ** 20
"""The App. C windows' states of the projected layers (first, middle, last) are kept from the scatter pass
for the projection pass when they take at most this many bytes (the demo: 19 MB), instead of a second forward
over those windows; beyond it (paper sizes: GBs) the projection pass runs the forward again."""


@jax.jit
def _appc_update(accs, states, codes, mean, pos):
    """Add one batch to the App. C accumulators of a group of layers: ``states`` (G, B, T, d) float32,
    token classes ``codes`` (B·T,), μ (G, d) and pos (G, T, d); raw states and cvec = h − μ − pos."""
    acc_cvec, acc_raw = accs
    G, B, T, d = states.shape
    h = states.astype(acc_raw.within.dtype)
    cvec = h - mean[:, None, None, :] - pos[:, None, :, :]
    upd = jax.vmap(class_scatter_update, in_axes=(0, 0, None))
    return upd(acc_cvec, cvec.reshape(G, B * T, d), codes), upd(acc_raw, h.reshape(G, B * T, d), codes)


@jax.jit
def _appc_project(states, mean, pos, grand, comps):
    """Principal coordinates (G, B·T, 2) of cvec and raw states of one batch (``grand`` (2, G, d) and
    ``comps`` (2, G, 2, d): the clouds' grand means and top-2 directions, cvec first)."""
    G, B, T, d = states.shape
    h = states.astype(grand.dtype)
    clouds = ((h - mean[:, None, None, :] - pos[:, None, :, :]).reshape(G, B * T, d), h.reshape(G, B * T, d))
    return tuple(jnp.einsum("gnd,gkd->gnk", x - grand[i][:, None, :], comps[i], precision="highest")
                 for i, x in enumerate(clouds))


def _appc_groups(n_layers: int, d: int) -> list[list[int]]:
    """Layers whose App. C accumulators are held together (:data:`APPC_STATE_BYTES`)."""
    per = max(1, APPC_STATE_BYTES // (2 * d * d * 8))
    return [list(range(i, min(i + per, n_layers))) for i in range(0, n_layers, per)]


def _token_clusters(cfg, fwd, params, ids, labels, stats, progress: bool) -> list[TokenClusters]:
    """App. C / Figs. 24-26 streamed: token-level cvec vs raw states of ``n_cluster_windows`` windows per
    document, as class counts, means and the d×d within-class scatter of every layer (float64, Chan's
    update; :func:`~geomjax.theory.decomposition.class_scatter_update`), the compactness and the PCA from
    the d×d scatters (:func:`~geomjax.theory.geometry.compactness_from_scatter`, ``pca_from_scatter``),
    then a second pass projecting the tokens of the scatter layers (first, middle, last) on their top-2
    directions (their states kept from the first pass when they fit :data:`APPC_KEEP_BYTES`, else a second
    forward). Holds O(L·d² + K·d), one batch of states, and at most APPC_KEEP_BYTES of kept states.
    Equal to :func:`token_cluster_metrics` of the same windows (tests/integration/test_study_scale.py)."""
    s0 = int(cfg.drop_first)
    sel = np.concatenate([np.flatnonzero(labels == j)[: cfg.n_cluster_windows] for j in np.unique(labels)])
    _, codes = np.unique(labels[sel], return_inverse=True)
    K, L = int(codes.max()) + 1, len(stats)
    T, d = stats[0].n_positions, int(stats[0].pos.shape[-1])
    starts = range(0, sel.size, cfg.batch_size)

    def group_states(i, layers):  # (G, B, T, d) states of the windows sel[i: i + B], these layers only
        hs = fwd(params, jnp.asarray(ids[sel[i: i + cfg.batch_size]]))
        return jnp.stack([hs[layer][:, s0:] for layer in layers])

    scatter = sorted({0, L // 2, L - 1})
    keep = len(scatter) * sel.size * T * d * 4 <= APPC_KEEP_BYTES  # float32 states of the projected layers
    kept: dict[int, jax.Array] = {}  # batch start -> (len(scatter), B, T, d), the same arrays a second forward gives
    out: dict[int, dict] = {}
    with x64_context("float64"):
        mean = jnp.asarray(np.stack([np.asarray(st.mean, np.float64) for st in stats]))
        pos = jnp.asarray(np.stack([np.asarray(st.pos, np.float64) for st in stats]))
        for group in _appc_groups(L, d):
            g = np.asarray(group)
            take = [group.index(j) for j in scatter] if keep and set(scatter) <= set(group) else None
            accs = tuple(jax.vmap(lambda _: class_scatter_init(K, d, "float64"))(g) for _ in range(2))
            for i in _bar(starts, f"token clusters (App. C), layers {group[0]}-{group[-1]}", progress, "batch"):
                tok = jnp.asarray(np.repeat(codes[i: i + cfg.batch_size], T))
                states = group_states(i, group)
                if take is not None:
                    kept[i] = states[np.asarray(take)]
                accs = _appc_update(accs, states, tok, mean[g], pos[g])
            res = [compactness_from_scatter(a.counts, a.means, a.within) for a in accs]  # cvec, raw
            comps = [pca_from_scatter(r[1], 2) for r in res]
            for j, layer in enumerate(group):
                out[layer] = {"compactness": [float(r[0][j]) for r in res],
                              "grand": [r[2][j] for r in res], "comps": [c[j] for c in comps]}
            del accs, res
        g = np.asarray(scatter)
        grand = jnp.stack([jnp.stack([out[i]["grand"][c] for i in scatter]) for c in range(2)])
        comps = jnp.stack([jnp.stack([out[i]["comps"][c] for i in scatter]) for c in range(2)])
        coords = [[], []]
        for i in _bar(starts, "token clusters (App. C), projections", progress, "batch"):
            states = kept.pop(i) if i in kept else group_states(i, scatter)
            for c, xy in enumerate(_appc_project(states, mean[g], pos[g], grand, comps)):
                coords[c].append(np.asarray(xy))
    coords = [np.concatenate(c, axis=1) for c in coords]
    tok_labels = np.repeat(labels[sel], T)
    return [TokenClusters(out[i]["compactness"][0], out[i]["compactness"][1],
                          coords[0][scatter.index(i)] if i in scatter else None,
                          coords[1][scatter.index(i)] if i in scatter else None, tok_labels) for i in range(L)]


def _ood(cfg, m: _Loaded, ood_ids, options, progress: bool) -> list[LayerMetrics]:
    """Table 2: every layer's metrics (rank and relative norm of pos) on the out-of-distribution windows."""
    ostats = _stream(cfg, m, ood_ids, f"OOD ({cfg.ood_corpus})", progress)
    return [layer_metrics(st, None, options) for st in ostats]


def _unavailable(cfg: GeometryConfig, multi_doc: bool, T: int, d: int) -> dict:
    """metric key -> "n/a: needs ..." for every metric the sizes of this run cannot give."""
    na = {}
    if not multi_doc:
        for k in ("intra_similarity", "inter_similarity", "cluster_compactness", "compactness_cvec",
                  "compactness_raw"):
            na[k] = "n/a: needs ≥ 2 documents"
    k = cfg.screenot_k
    if 2 * k + 1 >= min(T, d):
        need = 2 * k + 2 + int(cfg.drop_first)
        msg = (f"n/a: needs -T ≥ {need} (ScreeNOT with k = {k} needs 2k+1 < {T} positions)" if T <= d
               else f"n/a: needs --screenot-k ≤ {(d - 2) // 2} (2k+1 < d = {d})")
        na["screenot_rank"] = na["ood_screenot_rank"] = msg
    return na


def _arch_of(model) -> str:
    """'BERT', 'GPT-2' or 'NanoGPT': which of the paper's Table 1 rows a loaded model is closest to."""
    if hasattr(model, "max_positions") and hasattr(model, "step"):  # a ToyRun
        return "NanoGPT"
    return "BERT" if "bert" in type(getattr(model, "config", None)).__name__.lower() else "GPT-2"


def _model_desc(cfg: GeometryConfig, m: _Loaded, n_layers: int, d: int) -> str:
    """"BertModel (all-MiniLM-L6-v2), L = 6, d = 384" (a toy run: its task and step)."""
    label = "all-MiniLM-L6-v2" if cfg.model == "minilm" else (
        m.path.name if Path(cfg.model).exists() else cfg.model)  # a Hugging Face name: not its snapshot hash
    if hasattr(m.model, "max_positions") and hasattr(m.model, "step"):  # a ToyRun
        label = f"toy run {m.path.name}, {m.model.config.task} task, step {m.model.step}"
        arch_name = "ToyTransformer"
    else:
        arch_name = type(m.model.config).__name__
    return f"{arch_name} ({label}), L = {n_layers - 1}, d = {d}"


def _cvec_draw(cfg, stats, states) -> list[np.ndarray]:
    """cvec = h − μ − pos of the fresh draw, per layer (n_cvec, T, d) float64 (source code: 32 sequences)."""
    s0 = int(cfg.drop_first)
    cvec = []
    for st, hs in zip(stats, states):
        with x64_context(cfg.accum_dtype):
            h = np.asarray(hs[:, s0:], np.float64)
            cvec.append(h - np.asarray(st.mean, np.float64) - np.asarray(st.pos, np.float64)[None])
    return cvec


def _layer_results(stats, names, rows, cvec, thm1, clusters, ood) -> tuple[LayerResult, ...]:
    """Per-layer projections for Figs. 1, 3 and App. C, bundled with the numbers of every layer."""
    n = len(stats)
    mid = n // 2
    panels = {1 if n > 1 else 0, mid, n - 1}
    scatter = {0, mid, n - 1}
    out = []
    for layer, st in enumerate(stats):
        pos = jnp.asarray(np.asarray(st.pos, np.float32))
        cv = jnp.asarray(cvec[layer], jnp.float32)
        pr = geometry.pca_projections(pos, [cv])
        pr3 = geometry.pca_projections(pos, [cv], n_components=3) if layer in panels else None
        ctx_pca = (np.asarray(geometry.pca_projections(np.asarray(st.ctx, np.float64), center=True).pos)
                   if layer in scatter else None)
        out.append(LayerResult(
            name=names[layer], metrics=rows[layer], pos_pca=np.asarray(pr.pos),
            cvec_pca=np.asarray(pr.others[0]), dct=np.asarray(spectral.dct_gram(pos)),
            theorem1=thm1[layer] if thm1 else None, token_clusters=clusters[layer] if clusters else None,
            ood=ood[layer] if ood else None,
            pos_pca3=None if pr3 is None else np.asarray(pr3.pos),
            cvec_pca3=None if pr3 is None else np.asarray(pr3.others[0]), ctx_pca=ctx_pca))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class StudyPlan:
    """What a study needs per device, from XLA's analysis of its compiled step (:func:`plan`).

    Attributes:
      step: :class:`geomjax.tools.extraction.StepPlan` of the forward + statistics step.
      ctx_bytes: the per-window context means the stream keeps on the devices (C · (L+1) · d, split
        over the devices).
      appc_bytes: the App. C accumulators of one group of layers (float64, two d×d per layer; 0 without
        App. C).
      n_steps: batches of the main pass (the OOD pass runs as many again).
      device_bytes: the memory of one device (None: unknown, e.g. a CPU without ``--device-memory``).
    """

    step: object
    ctx_bytes: int
    appc_bytes: int
    n_steps: int
    device_bytes: int | None

    @property
    def peak_bytes(self) -> int:
        """The step's peak plus the context means: what the main pass needs on each device."""
        return self.step.peak_bytes + self.ctx_bytes

    def lines(self) -> list[str]:
        """The plan as the lines ``geomjax geometry --dry-run`` prints."""
        st, gb = self.step, 1e9
        cap = "unknown (pass --device-memory GB)" if self.device_bytes is None else f"{self.device_bytes / gb:.1f} GB"
        return [
            f"devices: {st.n_devices}; step: {st.batch} windows x {st.seq_len} tokens; {self.n_steps} steps per pass",
            f"per device (XLA memory_analysis of the compiled step): arguments {st.argument_bytes / gb:.2f} GB "
            f"(weight shards, statistics, ids), temporaries {st.temp_bytes / gb:.2f} GB, outputs "
            f"{st.output_bytes / gb:.2f} GB of which {st.alias_bytes / gb:.2f} GB alias the donated statistics",
            f"per device: step peak {st.peak_bytes / gb:.2f} GB + context means {self.ctx_bytes / gb:.2f} GB = "
            f"{self.peak_bytes / gb:.2f} GB; App. C accumulators {self.appc_bytes / gb:.2f} GB; device memory {cap}",
            f"per device and step (XLA cost_analysis): {st.flops / 1e12:.3f} TFLOP, of which the statistics' "
            f"Grams {st.gram_flops / 1e12:.3f} TFLOP; main pass {st.flops * self.n_steps / 1e15:.3f} PFLOP",
        ]


def _param_shapes(cfg: GeometryConfig, m: _Loaded):
    """The model's parameters as ShapeDtypeStructs (nothing allocated) in the dtype the run loads."""
    if m.params is not None:  # a toy run (already loaded)
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype), m.params)
    dtype = cfg.param_dtype or read_config(m.path).get("torch_dtype") or "float32"
    ids = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: m.model.init(jax.random.key(0), ids)["params"])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, jnp.dtype(dtype) if jnp.issubdtype(
        a.dtype, jnp.floating) else a.dtype), shapes)


def _device_bytes(override_gb: float | None) -> int | None:
    if override_gb is not None:
        return int(override_gb * 1e9)
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def plan(cfg: GeometryConfig, device_memory_gb: float | None = None) -> StudyPlan:
    """The study's per-device memory and FLOPs from XLA's analysis of its real step, compiled from shapes
    (``geomjax geometry --dry-run``): no weights are read and nothing is allocated.

    Raises:
      GeomjaxError: the main pass does not fit the device (its memory known or ``device_memory_gb``
        given), naming what it needs and what to change.
    """
    validate_geometry(cfg)
    m = _load(cfg, progress=False)
    mesh = m.mesh or data_mesh(1)
    step = extraction.plan_step(m.forward, _param_shapes(cfg, m), cfg.batch_size, cfg.seq_len, mesh,
                                accum_dtype=cfg.accum_dtype, drop_first=cfg.drop_first)
    acc = np.dtype(cfg.accum_dtype).itemsize
    n_dev = step.n_devices
    ctx = cfg.n_contexts * step.n_states * step.d_model * acc // n_dev
    appc = 0 if not cfg.n_cluster_windows else 2 * len(_appc_groups(step.n_states, step.d_model)[0]) \
        * step.d_model ** 2 * 8
    out = StudyPlan(step, int(ctx), int(appc), cfg.n_contexts // cfg.batch_size, _device_bytes(device_memory_gb))
    if out.device_bytes is not None and max(out.peak_bytes, appc) > out.device_bytes:
        raise GeomjaxError(
            f"--dry-run: the study needs {max(out.peak_bytes, appc) / 1e9:.3g} GB per device (XLA's analysis of "
            f"its step) but a device has {out.device_bytes / 1e9:.3g} GB; use more --devices, a smaller "
            "--batch-size or --param-dtype bfloat16")
    return out


def run(cfg: GeometryConfig, progress: bool = True, before_ood=None) -> StudyResult:
    """Song & Zhong §2 on one (model, corpus) pair: the per-layer geometry study as data.

    Validates ``cfg`` (:func:`validate_geometry`), loads the model, draws every window
    (:func:`prepare_inputs`), decomposes every hidden state in one streaming pass (eqs. (2)-(3)),
    then computes each layer's Tables 1, 3-5 (:func:`layer_metrics`), Theorem 1's eq. (6)
    (:func:`theorem1_on_pos`), App. C (:func:`token_cluster_metrics`), Table 2 on the OOD corpus,
    and the projections Figs. 1-3 / 24-26 draw. cvec comes from a separate fresh draw of
    ``n_cvec`` windows, as in the source code. Nothing is written.

    ``before_ood(result)``, if given, is called with the result before the OOD pass (every field but the
    layers' ``ood``, which the figures do not draw, and ``seconds_total``, 0 there), so that the caller can
    draw the figures while the OOD forward runs; the returned result carries both.

    Raises:
      GeomjaxError: an option, model or corpus that cannot serve the study (before the forward pass).
    """
    t0 = time.perf_counter()
    validate_geometry(cfg)
    with timing.stage("load: config and tokenizer"):
        m = _load(cfg, progress)  # checks that need only the model's config come before the corpus sampling
    vocab = getattr(getattr(m.model, "tokenizer", None), "chars", None)  # a ToyRun's characters
    with timing.stage("tokenize"):
        inputs = prepare_inputs(cfg, m.tokenizer, vocab=vocab, progress=progress)  # capacity: before the weights
    with timing.stage("load: weights"):
        _load_weights(cfg, m, progress)
    w = inputs.windows
    t1 = time.perf_counter()
    with timing.stage("forward + sums"):
        stats = _stream(cfg, m, w.ids, "forward + decomposition", progress)
        jax.block_until_ready(stats[-1].ctx)
    t_extract = time.perf_counter() - t1
    n_layers = len(stats)
    names = ["emb"] + [f"L{i}" for i in range(1, n_layers)]
    fwd = jax.jit(m.forward)  # one jitted forward for the cvec draw and the token clusters
    with timing.stage("cvec draw (forward)"):
        states = fwd(m.params, jnp.asarray(inputs.cvec_ids))
        cvec = _cvec_draw(cfg, stats, states)
    options = StudyOptions(screenot_k=cfg.screenot_k, centered_relative_norm=cfg.centered_relative_norm)
    labels = np.asarray(w.doc_labels)
    multi_doc = np.unique(labels).size >= 2
    with timing.stage("metrics (Tables 1, 3-5)"):
        rows = _layer_rows(cfg, stats, states, labels, options, progress)
    with timing.stage("Theorem 1"):
        thm1 = _theorem1(stats, progress) if cfg.theorem1 else []
    with timing.stage("token clusters (App. C)"):
        clusters = (_token_clusters(cfg, fwd, m.params, w.ids, labels, stats, progress)
                    if cfg.n_cluster_windows and multi_doc else [])
    mid = n_layers // 2
    T, d = stats[0].n_positions, int(stats[0].pos.shape[-1])
    X = np.concatenate([np.asarray(stats[mid].pos), np.asarray(stats[mid].ctx)])
    with timing.stage("projections (Figs. 1-3, App. C)"):
        layers = _layer_results(stats, names, rows, cvec, thm1, clusters, None)
    result = StudyResult(
        config=cfg, options=options, model_desc=_model_desc(cfg, m, n_layers, X.shape[1]), arch=_arch_of(m.model),
        conventions=m.conventions, layers=layers,
        n_contexts=cfg.n_contexts, n_positions=T, d_model=d, labels=labels,
        doc_names=tuple(inputs.doc_names), n_tokens_corpus=inputs.n_tokens_corpus,
        singular_values_mid=top_singular_values(stats[mid], options.n_singular),
        gram_mid=np.asarray(geometry.normalized_gram(jnp.asarray(X, jnp.float32))),
        not_available=_unavailable(cfg, multi_doc, T, d),
        incoherence_baseline=geometry.mean_abs_cos_isotropic(X.shape[1]), ood_dropped=inputs.ood_dropped,
        seconds_forward=t_extract, seconds_total=0.0,
        corpora={name: data.corpus_source(name, cfg.data_dir) for name in (cfg.corpus, cfg.ood_corpus) if name},
        incoherence_max_baseline=geometry.expected_max_abs_cos_isotropic(X.shape[1], T * cfg.n_contexts))
    if before_ood is not None:
        before_ood(result)
    with timing.stage("OOD (Table 2)"):
        ood = _ood(cfg, m, inputs.ood_ids, options, progress) if inputs.ood_ids is not None else None
    layers = tuple(dataclasses.replace(ly, ood=ood[i]) for i, ly in enumerate(layers)) if ood else layers
    return dataclasses.replace(result, layers=layers, seconds_total=time.perf_counter() - t0)
