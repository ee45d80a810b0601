"""Shared pieces of the attention experiments: dissect every head of a model, and the figures.

Used by ``experiments/attention_dissection/run.py`` and ``experiments/addition/run.py``. All numbers
come from :mod:`geomjax.theory.attention` and :mod:`geomjax.tools.attention_probe`; this module only loops, averages and draws.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import attention as A
from geomjax.tools import attention_probe as AP
from geomjax.analysis.plots import save

COMPONENT_TITLES = {"pos_pos": "pos-pos", "pos_cvec": "pos-cvec", "cvec_pos": "cvec-pos",
                    "cvec_cvec": "cvec-cvec", "total": "QK (total)", "attention": "attention"}


def dissect(model, params, basis: A.AttentionBasis, probes: np.ndarray, *, causal: bool | None = None,
            window: int = 2, min_lift: float = 0.15, remove_mean: bool = True, progress: bool = False) -> dict:
    """Run the §4.1 study on every head: eq. (7) parts, pattern scores, component strengths, types.

    Args:
      model, params: the model (see :func:`geomjax.tools.attention_probe.describe_model`).
      basis: μ/pos of every layer's attention input.
      probes: (S, T) repeated-token probe sequences (scores are averaged over the S probes).

    Returns:
      dict with ``rows`` (one dict per head), ``parts`` (per layer, the QKParts of probe 0) and
      ``counts`` (head type -> number of heads).
    """
    spec = AP.describe_model(model, causal=causal)
    probes = np.asarray(probes)
    if probes.shape[1] > basis.n_positions:
        raise ValueError(f"dissect: probes have {probes.shape[1]} positions but the positional basis covers "
                         f"{basis.n_positions}; estimate it on longer windows")
    xs, atts = AP.attention_inputs_jit(model, params, probes, causal=causal)
    weights = [AP.qk_weights(model, params, l) for l in range(spec.n_layers)]
    decomp = jax.jit(lambda x, b, w, l: A.layer_qk_decomposition(x, b, w, l, remove_mean=remove_mean,
                                                                   causal=spec.causal), static_argnums=3)
    E, U = AP.embed_unembed(model, params)
    rows, parts0 = [], []
    it = range(spec.n_layers)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="dissect layers", leave=False)
    for l in it:
        scores, strengths, ent = [], [], []
        for s in range(probes.shape[0]):
            parts = decomp(xs[l][s], basis, weights[l], l)
            if s == 0:
                parts0.append(jax.device_get(parts))
            # the attention the model computed must match softmax(sum of the parts)
            err = float(jnp.max(jnp.abs(parts.attention - atts[l][s])))
            if err > 1e-3:
                raise RuntimeError(f"dissect: layer {l} probe {s}: softmax of the decomposed scores differs from the "
                                   f"model's attention by {err:.2e}")
            scores.append(A.head_pattern_scores(atts[l][s], probes[s], window=window, causal=spec.causal))
            strengths.append(A.component_strength(parts, causal=spec.causal))
            ent.append(np.asarray(A.attention_entropy(atts[l][s])))
        sc = {k: np.mean([d[k] for d in scores], axis=0) for k in scores[0]}
        st = {k: np.mean([d[k] for d in strengths], axis=0) for k in A.COMPONENTS + ("mean", "bias")}
        dominant = np.argmax(np.stack([st[c] for c in A.COMPONENTS]), axis=0)
        labels = A.classify_heads(sc, min_lift=min_lift)
        ov = A.ov_copying_scores(E, weights[l]["W_v"], weights[l]["W_o"], U)
        en = np.mean(ent, axis=0)
        pp = np.asarray(parts0[l].pos_pos)[:, 1:, 1:]  # probe 0, first position dropped
        smooth = [A.matrix_smoothness(pp[h]) for h in range(spec.n_heads)]
        for h in range(spec.n_heads):
            rows.append({
                "layer": l, "head": h, "type": labels[h],
                **{f"{n}_score": float(sc[n][h]) for n in A.HEAD_TYPES},
                **{f"{n}_lift": float(sc[n][h] - sc[n + "_baseline"][h]) for n in A.HEAD_TYPES},
                "dominant": A.COMPONENTS[int(dominant[h])],
                **{f"strength_{c}": float(st[c][h]) for c in A.COMPONENTS + ("mean", "bias")},
                "ov_copying": float(ov[h]), "entropy": float(en[h]),
                "pospos_tv": smooth[h]["tv"], "pospos_hf_dct": smooth[h]["hf_dct"],
            })
    counts = {t: sum(r["type"] == t for r in rows) for t in A.HEAD_TYPES + ("other",)}
    return {"rows": rows, "parts": parts0, "counts": counts}


def pick_heads(rows: Sequence[dict], per_type: int = 1) -> list[tuple[int, int, str]]:
    """The heads with the largest lift of each type among those classified as that type.

    When no head has a type, the head with the largest lift of that type among the heads not shown yet
    is shown anyway, labelled ``"<type> (best candidate, below threshold)"``, so every type has a
    heatmap and no head is shown twice.
    """
    out, used = [], set()
    for t in A.HEAD_TYPES:
        cand = sorted((r for r in rows if r["type"] == t), key=lambda r: -r[f"{t}_lift"])
        if cand:
            out += [(r["layer"], r["head"], t) for r in cand[:per_type]]
            used |= {(r["layer"], r["head"]) for r in cand[:per_type]}
    for t in A.HEAD_TYPES:
        if any(o[2] == t for o in out):
            continue
        free = [r for r in rows if (r["layer"], r["head"]) not in used]
        if free:
            r = max(free, key=lambda r: r[f"{t}_lift"])
            out.append((r["layer"], r["head"], f"{t} (best candidate, below threshold)"))
            used.add((r["layer"], r["head"]))
    return out


def mechanism_table(rows: Sequence[dict], paper_heads: dict) -> tuple[list[str], list[list], list[str]]:
    """Per head type: the paper's head and dominant part beside this model's heads of that type.

    Returns:
      (header, rows, findings): ``findings`` are sentences for the report — a warning when no head has any
      type, and one per type whose heads' majority dominant part differs from the paper's head (in a model that
      is not the paper's GPT-2: whether the mechanism carries over).
    """
    header = ["type", "paper's head (GPT-2)", "paper's dominant part", "heads of this type here", "strongest here",
              "dominant parts here", "agrees with the paper"]
    out, findings = [], []
    if rows and all(r["type"] == "other" for r in rows):
        findings.append(f"Warning: none of the {len(rows)} heads reaches the lift threshold of any type (all 'other'); "
                        "the type-specific figures show below-threshold candidates only.")
    for t in A.HEAD_TYPES:
        head, part = paper_heads[t]
        mine = [r for r in rows if r["type"] == t]
        dom = {c: sum(r["dominant"] == c for r in mine) for c in A.COMPONENTS if any(r["dominant"] == c for r in mine)}
        best = max(mine, key=lambda r: r[f"{t}_lift"]) if mine else None
        if not mine:
            agree = "not testable (no head of this type)"
        elif part not in A.COMPONENTS:
            agree = "yes (heads of this type exist)"
        else:
            top = max(dom, key=dom.get)
            agree = "yes" if top == part else f"no: {COMPONENT_TITLES[top]} dominates"
            if top != part:
                findings.append(f"Unlike the paper's {head} in this model: {dom.get(part, 0)} of the {len(mine)} {t} heads "
                                f"are {COMPONENT_TITLES[part]} dominated (paper: {head}); most are "
                                f"{COMPONENT_TITLES[top]} dominated ({dom[top]}). This model is not the paper's, so "
                                "this says whether the mechanism carries over, not whether the paper's holds.")
        out.append([t, head, COMPONENT_TITLES.get(part, part), len(mine),
                    f"L{best['layer']}H{best['head']}" if best else "—",
                    ", ".join(f"{COMPONENT_TITLES[c]} {n}" for c, n in dom.items()) or "—", agree])
    return header, out, findings


def head_table(rows: Sequence[dict]) -> tuple[list[str], list[list]]:
    """(header, rows) of the per-head classification table."""
    header = ["layer", "head", "type", "self-token lift", "neighbours lift", "copying (prefix-match) lift",
              "dominant eq.(7) part", "pos-pos", "pos-cvec", "cvec-pos", "cvec-cvec", "OV copying", "entropy",
              "pos-pos TV", "pos-pos HF-DCT"]
    out = [[r["layer"], r["head"], r["type"], round(r["self_token_lift"], 3), round(r["neighbours_lift"], 3),
            round(r["copying_lift"], 3), r["dominant"]] + [round(r[f"strength_{c}"], 3) for c in A.COMPONENTS]
           + [round(r["ov_copying"], 3), round(r["entropy"], 3), round(r["pospos_tv"], 3),
              round(r["pospos_hf_dct"], 3)] for r in rows]
    return header, out


def dominance_crosstab(rows: Sequence[dict]) -> tuple[list[str], list[list]]:
    """Head type x dominant eq. (7) component counts."""
    header = ["type"] + [COMPONENT_TITLES[c] for c in A.COMPONENTS]
    out = [[t] + [sum(r["type"] == t and r["dominant"] == c for r in rows) for c in A.COMPONENTS]
           for t in A.HEAD_TYPES + ("other",)]
    return header, out


def plot_components(parts: A.QKParts, head: int, tokens: Sequence[str] | None, title: str, path, *,
                    drop_first: bool = True):
    """Song & Zhong Fig. 4 row: pos-pos, pos-cvec, cvec-pos, cvec-cvec, QK total and attention heatmaps."""
    import matplotlib.pyplot as plt

    names = ("pos_pos", "pos_cvec", "cvec_pos", "cvec_cvec", "total", "attention")
    s = 1 if drop_first else 0
    fig, axes = plt.subplots(1, 6, figsize=(19, 3.4))
    for ax, n in zip(axes, names):
        M = np.asarray(getattr(parts, n))[head][s:, s:]
        T = M.shape[0]
        if n != "attention":
            M = np.where(np.tril(np.ones((T, T), bool)), M, np.nan)
        im = ax.imshow(M, cmap="viridis" if n == "attention" else "RdBu_r", interpolation="nearest")
        if n != "attention":
            v = np.nanmax(np.abs(M))
            im.set_clim(-v, v)
        ax.set_title(COMPONENT_TITLES[n], fontsize=9)
        if tokens is not None and len(tokens) - s <= 32:
            tk = list(tokens)[s:]
            ax.set_xticks(range(len(tk)), tk, fontsize=5, rotation=90)
            ax.set_yticks(range(len(tk)), tk, fontsize=5)
        else:
            ax.set_xticks([]), ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_head_grid(mats: np.ndarray, title: str, path, *, causal: bool = True):
    """An (L, H) grid of (T, T) heatmaps (e.g. QK or pos-pos for every head)."""
    import matplotlib.pyplot as plt

    L, H = mats.shape[:2]
    fig, axes = plt.subplots(L, H, figsize=(1.9 * H, 1.9 * L), squeeze=False)
    for l in range(L):
        for h in range(H):
            M = np.asarray(mats[l, h], np.float64)
            T = M.shape[0]
            if causal:
                M = np.where(np.tril(np.ones((T, T), bool)), M, np.nan)
            v = np.nanmax(np.abs(M - np.nanmean(M)))
            ax = axes[l, h]
            im = ax.imshow((M - np.nanmean(M)) / (v if v > 0 else 1.0), cmap="RdBu_r", vmin=-1, vmax=1,
                           interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"L{l}H{h}", fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.8, label="score − mean, / max |·| of its panel")
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_w_structure(results: Sequence[dict], title: str, path, *, n_show: int = 60, K: int | None = None):
    """Song & Zhong Fig. 5: per head, |thresholded rotated off-diagonal| (top-left n_show block) with |diag W|;
    panel titles give the top-left K×K energy fraction (K: one of the results' ``Ks``; default the middle one)."""
    import matplotlib.pyplot as plt

    H = len(results)
    cols = min(H, 6)
    rows = -(-H // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(2.6 * cols, 3.6 * rows),
                             gridspec_kw={"height_ratios": [3, 1] * rows}, squeeze=False)
    for h, r in enumerate(results):
        i, j = 2 * (h // cols), h % cols
        R = np.abs(np.asarray(r["R_thr"]))[:n_show, :n_show]
        axes[i, j].imshow(R, cmap="Blues", interpolation="nearest")
        Ks = list(r["Ks"])
        k_ = K if K in Ks else Ks[len(Ks) // 2]
        axes[i, j].set_title(f"head {h}: top-{k_}×{k_} energy {r['frac'][Ks.index(k_)]:.2f}", fontsize=7)
        axes[i, j].set_xticks([]), axes[i, j].set_yticks([])
        axes[i + 1, j].plot(np.abs(np.asarray(r["diag"])), color="red", lw=0.6)
        axes[i + 1, j].set_xticks([]), axes[i + 1, j].tick_params(labelsize=5)
    for h in range(H, rows * cols):
        axes[2 * (h // cols), h % cols].axis("off")
        axes[2 * (h // cols) + 1, h % cols].axis("off")
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_energy_curves(results: Sequence[dict], title: str, path):
    """Top-left K×K energy fraction of the thresholded rotated W vs K, against the random-rotation baseline."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for h, r in enumerate(results):
        ax.plot(r["Ks"], r["frac"], color="C0", alpha=0.6, lw=1, label="P's singular basis" if h == 0 else None)
        ax.plot(r["Ks"], r["frac_random"], color="C7", alpha=0.6, lw=1, ls="--",
                label="random rotation" if h == 0 else None)
    ax.set_xlabel("K"), ax.set_ylabel("energy fraction in top-left K×K")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    return save(fig, path)
