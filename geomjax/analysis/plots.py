"""Matplotlib figures (no JAX compute here): inputs are NumPy-convertible arrays, and the one plotting
style of every geomjax figure and experiment.

Every function returns a ``matplotlib.figure.Figure``; :func:`save` writes it as PNG and closes it.
Importing this module applies :data:`STYLE` (no offset notation on axes — "1e-7+1.91699" hides
invisible differences behind a large-looking scale —, constrained layout so titles never sit over
tick labels, small titles). Helpers shared by the experiments: :func:`phase_order` (points of a
frequency-k circle in the order of their phase), :func:`frequency_axis` (key frequencies marked),
:func:`colorbar`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from geomjax.analysis import report  # noqa: E402  (the paper's Table 1 rows for the per-layer figure)

STYLE = {
    "axes.formatter.useoffset": False,
    "figure.constrained_layout.use": True,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "figure.titlesize": 10,
}


def apply_style() -> None:
    """Set :data:`STYLE` in matplotlib's rcParams (done on import; call again after a reset)."""
    matplotlib.rcParams.update(STYLE)


apply_style()

__all__ = [
    "save",
    "pca_grid",
    "gram_heatmap",
    "dct_heatmaps",
    "singular_values",
    "curves",
    "metrics_by_layer",
    "grouped_scatter",
    "STYLE",
    "apply_style",
    "colorbar",
    "frequency_axis",
    "phase_order",
    "study_figures",
]


def phase_order(p: int, k: int) -> np.ndarray:
    """Tokens 0..p−1 sorted by their phase on the frequency-k circle, i.e. by k·b mod p.

    A curve through a circle's points drawn in token order b jumps by k/p of a turn at every step
    (unreadable for k > 1); drawn in this order consecutive points are neighbours on the circle.

    Returns:
      (p,) int permutation ``order`` with ``(k * order) % p`` non-decreasing.
    """
    if p < 1:
        raise ValueError(f"phase_order: p must be positive, got {p}")
    return np.argsort((int(k) * np.arange(p)) % p, kind="stable")


def frequency_axis(ax, key: Sequence[int] = (), *, label: str = "frequency k", color: str = "tab:red") -> None:
    """Label ``ax``'s x axis as a frequency axis and mark the ``key`` frequencies (dotted line + number)."""
    ax.set_xlabel(label)
    for k in key:
        ax.axvline(k, color=color, lw=0.6, ls=":", zorder=0)
        ax.annotate(str(k), (k, 0.98), xycoords=("data", "axes fraction"), ha="center", va="top",
                    fontsize=7, color=color, bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none"})


def colorbar(fig, mappable, ax, label: str):
    """A labelled colour bar next to ``ax``."""
    cb = fig.colorbar(mappable, ax=ax, shrink=0.85)
    cb.set_label(label)
    return cb


def save(fig, path: str | Path, dpi: int = 110) -> Path:
    """Save a figure as PNG and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def save_to_run(fig, run, name: str, dpi: int = 110) -> str:
    """Save a figure as ``figures/<name>`` of a run directory and close it (the one way to put a figure in a run).

    Args:
      fig: a matplotlib figure.
      run: a :class:`geomjax.analysis.report.RunDir`.
      name: the file name, e.g. ``"bao_fig2.png"``.

    Returns:
      the path relative to the run directory, for :meth:`geomjax.analysis.report.Section.figure`.
    """
    path, rel = run.figure_path(name)
    save(fig, path, dpi=dpi)
    return rel


def _grid(n: int, max_cols: int = 5, size: float = 2.6):
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def pca_grid(
    pos_proj: Sequence[np.ndarray],
    cvec_proj: Sequence[np.ndarray],
    titles: Sequence[str],
    suptitle: str = "",
):
    """Fig. 1 of Song & Zhong: pos_t (blue) and sampled cvec (red) on P's top-2 directions.

    Axes are PC1/PC2 of P; a colour bar gives the position index of pos (light = early) and a
    legend names the two point sets.

    Args:
      pos_proj: per layer, (T, 2) projections of pos.
      cvec_proj: per layer, (n, T, 2) projections of n sampled cvec sequences.
      titles: per-layer titles.
    """
    from matplotlib.lines import Line2D

    from matplotlib.colors import ListedColormap

    blues = ListedColormap(plt.get_cmap("Blues")(np.linspace(0.25, 1.0, 256)))  # light = early
    fig, axes = _grid(len(pos_proj))
    sc = None
    n_seq = np.asarray(cvec_proj[0]).shape[0] if len(cvec_proj) else 0
    for ax, p, c, t in zip(axes, pos_proj, cvec_proj, titles):
        p, c = np.asarray(p), np.asarray(c)
        T = p.shape[0]
        shade = np.linspace(0.25, 1.0, T)
        cc = c.reshape(-1, 2)
        ax.scatter(cc[:, 0], cc[:, 1], s=2, c=np.tile(shade, c.shape[0]), cmap="Reds",
                   vmin=0, vmax=1, alpha=0.5, linewidths=0)
        sc = ax.scatter(p[:, 0], p[:, 1], s=4, c=np.arange(T), cmap=blues, vmin=0, vmax=max(T - 1, 1),
                        linewidths=0)
        ax.set_title(t, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("PC1", fontsize=8)
        ax.set_ylabel("PC2", fontsize=8)
    handles = [Line2D([], [], ls="", marker="o", ms=4, color="tab:blue", label="pos (colour = position)"),
               Line2D([], [], ls="", marker="o", ms=4, color="tab:red", alpha=0.6, label=f"cvec ({n_seq} sequences)")]
    if suptitle:
        fig.suptitle(suptitle)
    # constrained layout (geomjax.analysis.plots.STYLE) places the legend and the shared colour bar
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    if sc is not None:
        cb = fig.colorbar(sc, ax=fig.axes, shrink=0.8)
        cb.set_label("position index t", fontsize=8)
    return fig


def gram_heatmap(G: np.ndarray, n_pos: int, title: str = "", boundaries: Sequence[int] = ()):
    """Fig. 2: normalized Gram [P̄, C̄]ᵀ[P̄, C̄] with the pos block and document blocks marked."""
    G = np.asarray(G)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    im = ax.imshow(G, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    for b in [n_pos, *[n_pos + x for x in boundaries]]:
        ax.axhline(b - 0.5, color="k", lw=0.6)
        ax.axvline(b - 0.5, color="k", lw=0.6)
    fig.colorbar(im, ax=ax, shrink=0.8, label="cosine")
    ax.set_xlabel(f"row index: {n_pos} positions, then contexts")
    ax.set_ylabel("row index")
    ax.set_title(title)
    return fig


def dct_heatmaps(F: Sequence[np.ndarray], titles: Sequence[str], n_freq: int = 10,
                 drop_dc: bool = True, suptitle: str = ""):
    """Fig. 3 right: |2-D DCT| of the normalized pos Gram, first ``n_freq`` frequencies.

    Every layer's panel uses one shared colour scale (one colour bar), so layers compare directly.
    """
    fig, axes = _grid(len(F))
    s = 1 if drop_dc else 0
    blocks = [np.abs(np.asarray(f)[s: s + n_freq, s: s + n_freq]) for f in F]
    vmax = max((float(b.max()) for b in blocks if b.size), default=1.0) or 1.0
    im = None
    for ax, block, t in zip(axes, blocks, titles):
        im = ax.imshow(block, cmap="viridis", interpolation="nearest", vmin=0.0, vmax=vmax,
                       extent=(s - 0.5, s + block.shape[1] - 0.5, s + block.shape[0] - 0.5, s - 0.5))
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("frequency (columns)", fontsize=7)
        ax.set_ylabel("frequency (rows)", fontsize=7)
        ax.tick_params(labelsize=6)
    if suptitle:
        fig.suptitle(suptitle)
    if im is not None:
        fig.colorbar(im, ax=fig.axes, shrink=0.8).set_label("|DCT coefficient| (shared scale)", fontsize=8)
    return fig


def singular_values(curves: Mapping[str, np.ndarray], title: str = "", logy: bool = True):
    """Fig. 3 left: top singular values of several matrices (each curve normalised by σ₁)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, s in curves.items():
        s = np.asarray(s, np.float64)
        ax.plot(np.arange(1, len(s) + 1), s / s[0], marker=".", ms=3, label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("index j")
    ax.set_ylabel("σ_j / σ_1")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def curves(panels: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]], xlabel: str,
           title: str = "", logy: Sequence[str] = (), styles: Mapping[str, str] | None = None):
    """Training curves: one panel per quantity (``panels[quantity][label] = (x, y)``, e.g. exact match against
    optimizer steps at several budgets), one line per label; ``logy``: quantities drawn on a log y axis;
    ``styles``: a matplotlib line style per label (default solid)."""
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.2), squeeze=False)
    for ax, (name, lines) in zip(axes[0], panels.items()):
        for label, (x, y) in lines.items():
            ax.plot(np.asarray(x, np.float64), np.asarray(y, np.float64), (styles or {}).get(label, "-"),
                    marker=".", ms=3, label=label)
        if name in logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def metrics_by_layer(series: Mapping[str, Sequence[float]], title: str = "", ncols: int = 3,
                     references: Mapping[str, tuple[float, str]] | None = None,
                     missing: Mapping[str, str] | None = None):
    """One small panel per metric, x = layer index (0 = embeddings).

    Args:
      series: panel title -> per-layer values (NaN where a layer has none).
      references: panel title -> (value, label): a published value drawn as a dashed line.
      missing: panel title -> why the metric is not available (written in an all-NaN panel).
    """
    references, missing = references or {}, missing or {}
    fig, axes = _grid(len(series), max_cols=ncols, size=3.0)
    for ax, (name, vals) in zip(axes, series.items()):
        v = np.asarray(vals, np.float64)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)", fontsize=8)
        if not np.isfinite(v).any():
            ax.text(0.5, 0.5, textwrap.fill(missing.get(name, "n/a"), 30), ha="center", va="center",
                    fontsize=8, transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.plot(np.arange(len(v)), v, marker="o", ms=3, label="this run")
        if name in references:
            ref, label = references[name]
            ax.axhline(ref, color="tab:orange", ls="--", lw=1, label=label)
            ax.legend(fontsize=6, loc="best")
        ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title)
    return fig


def grouped_scatter(X2: np.ndarray, labels: np.ndarray, title: str = "", names=None):
    """Scatter of 2-D points coloured by group (Figs. 24-26: documents in PCA coordinates)."""
    X2, labels = np.asarray(X2), np.asarray(labels)
    fig, ax = plt.subplots(figsize=(4, 4))
    for g in np.unique(labels):
        sel = labels == g
        ax.scatter(X2[sel, 0], X2[sel, 1], s=6, label=str(names[g]) if names is not None else str(g))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("PC1")
    ax.set_ylabel("PC2")
    ax.legend(fontsize=7, markerscale=2, loc="upper left", bbox_to_anchor=(1.02, 1), title="document",
              title_fontsize=7)
    return fig


def paired_scatter(left: np.ndarray, right: np.ndarray, labels: np.ndarray, titles: Sequence[str],
                   suptitle: str = "", names=None):
    """Two 2-D scatters side by side coloured by group (Figs. 24-26: cvec left, raw right)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    labels = np.asarray(labels)
    for ax, X2, title in zip(axes, (left, right), titles):
        X2 = np.asarray(X2)
        for g in np.unique(labels):
            sel = labels == g
            ax.scatter(X2[sel, 0], X2[sel, 1], s=3, alpha=0.6,
                       label=str(names[g]) if names is not None else str(g))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("PC1")
        ax.set_ylabel("PC2")
    axes[1].legend(fontsize=7, markerscale=3, loc="upper left", bbox_to_anchor=(1.02, 1), title="document",
                   title_fontsize=7)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def theorem1_curves(ks: Sequence[int], lhs: Sequence[float], rhs: np.ndarray, ms: Sequence[int],
                    title: str = ""):
    """Song & Zhong eq. (6): LHS(k) against RHS(k, m) for each m (log scale)."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.semilogy(ks, lhs, "k-o", ms=3, label="LHS (1/T)‖G − FB(FB)ᵀ‖op")
    rhs = np.asarray(rhs)
    for j, m in enumerate(ms):
        ax.semilogy(ks, rhs[:, j], "--", label=f"RHS m={m}")
    ax.set_xlabel("k (low frequencies kept)")
    ax.set_ylabel("operator-norm error (log scale)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    return fig


def pca_3d(pos_proj: Sequence[np.ndarray], cvec_proj: Sequence[np.ndarray], titles: Sequence[str],
           suptitle: str = ""):
    """Fig. 1 in 3-D: pos_t (blue, light→dark = t) and sampled cvec (red) on P's top-3 PCs.

    Args:
      pos_proj: per panel, (T, 3) projections of pos.
      cvec_proj: per panel, (n, T, 3) projections of n sampled cvec sequences.
      titles: per-panel titles.
    """
    n = len(pos_proj)
    fig = plt.figure(figsize=(3.6 * n, 3.6))
    for i, (p, c, t) in enumerate(zip(pos_proj, cvec_proj, titles)):
        ax = fig.add_subplot(1, n, i + 1, projection="3d")
        p, c = np.asarray(p), np.asarray(c).reshape(-1, 3)
        shade = np.linspace(0.25, 1.0, p.shape[0])
        ax.scatter(c[:, 0], c[:, 1], c[:, 2], s=1, c="tab:red", alpha=0.2, linewidths=0)
        ax.scatter(p[:, 0], p[:, 1], p[:, 2], s=4, c=shade, cmap="Blues", vmin=0, vmax=1)
        ax.plot(p[:, 0], p[:, 1], p[:, 2], lw=0.5, c="tab:blue")
        ax.set_title(t, fontsize=9)
        ax.set_xticks([]); ax.set_yticks([]); ax.set_zticks([])  # noqa: E702
        ax.set_xlabel("PC1", fontsize=8); ax.set_ylabel("PC2", fontsize=8); ax.set_zlabel("PC3", fontsize=8)  # noqa: E702
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------
# The geometry study's figures (Song & Zhong Figs. 1-3, 24-26)
# ---------------------------------------------------------------------------------------------


def _metrics_figure(result):
    """Per-layer metrics with human titles, the paper's mean (closest row) as a dashed line, and
    "n/a: ..." written in panels a run's sizes cannot fill."""
    row = report.paper_row(result.arch)
    na = result.not_available
    series, refs, missing = {}, {}, {}
    for key, (title, col) in report.METRIC_PANELS.items():
        series[title] = [np.nan if getattr(ly.metrics, key) is None else getattr(ly.metrics, key)
                         for ly in result.layers]
        if key in na:
            missing[title] = na[key]
        ref = report.paper_value(row[col]) if row is not None and col is not None else None
        if ref is not None:
            refs[title] = (ref, f"paper: {row[0]}, {row[1]} (mean)")
    return metrics_by_layer(series, "Per-layer metrics (dashed: the paper's Table 1 mean)",
                            references=refs, missing=missing)


def study_figures(result) -> dict:
    """Every figure of a geometry study, by file name stem (``figures/<name>.png``).

    Args:
      result: a ``geomjax.analysis.study.StudyResult`` (drawn as is: no computation here).

    Returns:
      {name: Figure}: fig1_pca (Fig. 1, every layer), fig1_pca_3d (three layers), fig2_gram
      (Fig. 2, middle layer), fig3_singular_values and fig3_dct (Fig. 3), metrics_by_layer,
      cvec_vs_raw_<layer> (Figs. 24-26, when token clusters were computed), theorem1_mid_layer
      (when Theorem 1 was evaluated) and ctx_clusters_<layer> (App. C).
    """
    layers, names, mid = result.layers, result.layer_names, result.mid
    cfg = result.config
    figs = {"fig1_pca": pca_grid([ly.pos_pca for ly in layers], [ly.cvec_pca for ly in layers], names,
                                 "pos (blue, light→dark = position) and cvec (red) on P's top-2 PCs")}
    d3 = [ly for ly in layers if ly.pos_pca3 is not None]
    figs["fig1_pca_3d"] = pca_3d([ly.pos_pca3 for ly in d3], [ly.cvec_pca3 for ly in d3],
                                 [ly.name for ly in d3], "pos (blue) and cvec (red) on P's top-3 PCs")
    bounds = [i * cfg.windows_per_doc for i in range(1, cfg.n_docs)]
    figs["fig2_gram"] = gram_heatmap(result.gram_mid, result.n_positions,
                                     f"normalized Gram [pos; ctx], layer {names[mid]}", bounds)
    figs["fig3_singular_values"] = singular_values(result.singular_values_mid,
                                                   f"top singular values, layer {names[mid]}")
    figs["fig3_dct"] = dct_heatmaps([ly.dct for ly in layers], names, result.options.n_freq, suptitle=
                                    "|2-D DCT| of the normalized pos Gram (first 10, DC dropped)")
    figs["metrics_by_layer"] = _metrics_figure(result)
    doc = {j: result.doc_names[j][:24] for j in np.unique(result.labels)}
    for ly in layers:
        r = ly.token_clusters
        if r is not None and ly.ctx_pca is not None:
            figs[f"cvec_vs_raw_{ly.name}"] = paired_scatter(
                r.pca_cvec, r.pca_raw, r.token_labels,
                [f"cvec, Tr(Σ_B Σ_W⁺) = {r.compactness_cvec:.3g}",
                 f"raw states, Tr(Σ_B Σ_W⁺) = {r.compactness_raw:.3g}"],
                f"top-2 PCs by document, {ly.name}", doc)
    r = layers[mid].theorem1
    if r is not None:
        figs["theorem1_mid_layer"] = theorem1_curves(
            r.ks, r.lhs, r.rhs_printed, r.ms,
            f"eq. (6) on the pos Gram, {names[mid]} (printed constant 6/(8k)^m)")
    for ly in layers:
        if ly.ctx_pca is not None:
            figs[f"ctx_clusters_{ly.name}"] = grouped_scatter(
                ly.ctx_pca, result.labels, f"ctx by document, top-2 PCs, {ly.name}", doc)
    return figs
