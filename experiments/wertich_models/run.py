"""Wertich (2024) ch. 8 / App. A.5 on models we can run: MiniLM and a geomjax-trained GPT-style toy model.

For each model: squared singular values of W_q, W_k, W_v and the MLP matrices per layer against a
random matrix with the model's initializer and the Marchenko–Pastur edge; Tr(W_qᵀW_k) per layer and
head against the N(0, dK·σ_q²σ_k²) law of independent matrices; head-averaged attention maps on a
few-shot-style prompt; attention entropy and model quality when the singular values of W_q and W_k
are scaled by α; the same architecture with random weights (entropy vs log n); and the correlation
between the cosine similarity of a layer's input states and its attention weights. The Tr(W_qᵀW_k) and
cosine–attention statistics are also measured on the random weights (a control where the thesis'
premise, independent W_q and W_k, holds by construction) and, for the toy GPT, at its initial weights and
every checkpoint of its training (a curve over steps), so the report shows what makes them differ.

    .venv/bin/python -m experiments.wertich_models.run --preset smoke --out runs/wertich-models-smoke
    .venv/bin/python -m experiments.wertich_models.run --preset cpu --out runs/wertich-models-cpu \
        [--toy-run runs/wertich-toy-shakespeare-cpu]

all-MiniLM-L6-v2 ships no masked-LM head (its safetensors hold the encoder and pooler only), so
masked-token accuracy cannot be measured; its quality measure under α-scaling is the cosine between
the mean-pooled sentence embedding (what the model is used for) and the unscaled one. The toy model's
is its next-character loss on held-out Shakespeare.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.wertich_models.config import PRESETS, WertichModelsConfig, get_config
from experiments.wertich_models.source import SOURCE

from geomjax.theory import gaussian as G
from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.models import kv_expanded, model_interface
from geomjax.train import fit, get_config as get_train_config, init_state, list_checkpoints, load_toy_run
from geomjax.train.cost import toy_training_cost
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section

FEW_SHOT_MINILM = ("You are a crossword clue generator. Word: parrot. Clue: mimics you, but doesn't understand. "
                   "Word: butterfly. Clue: flutters by, colorfully. Word: salmon. Clue: jumps upstream, but never "
                   "down. Word: ant. Clue:")
FEW_SHOT_TOY = "ROMEO:\nI love thee.\n\nJULIET:\nI love thee.\n\nROMEO:\nI hate thee.\n\nJULIET:\nI "
Z_RANDOM = 3.0  # |z| of Tr(W_qᵀW_k) below this: consistent with independent random matrices
CORR_MINIMAL = 0.3  # |corr(cos, attention)| below this: "minimal relationship"
UNIFORM_GAP = 0.05  # random-weight entropy within this fraction of the maximum: "near-uniform"


# ----------------------------------------------------------------------------------------------
# Model adapters: a uniform view of MiniLM, the toy GPT and any ported Hugging Face checkpoint
# (GPT-2, BERT, Llama / Mistral, BLOOM), all through geomjax.models.model_interface
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Adapter:
    """name, the model (Flax module), its params, layer key format, number of layers, causal flag,
    initializer std per matrix kind, and the tokenizer's encode / labels."""

    name: str
    model: object
    params: dict
    layer_key: str
    n_layers: int
    causal: bool
    init_std: dict
    encode: object
    labels: object

    @property
    def iface(self):
        return model_interface(self.model)

    def forward(self, params, ids):
        """(final hidden or logits, hidden_states tuple, attentions tuple)."""
        out, inter = self.iface.forward(params, ids, return_attention=True)
        return out, inter.hidden_states, inter.attentions

    def qk_kernels(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """W_q, W_k (d, H, K) of one layer, float64; grouped-query models' shared keys repeated so that
        column h of W_k is the kv head query head h reads (h // (H / H_kv))."""
        w = kv_expanded(self.iface.head_weights(self.params, layer))
        return tuple(np.moveaxis(np.asarray(w[n], np.float64), 0, 1) for n in ("W_q", "W_k"))


def minilm_adapter():
    from geomjax.drivers import pipeline

    model, params, tok, _ = pipeline.load_model_and_tokenizer("minilm")
    vocab = {i: t for t, i in tok.tokenizer.get_vocab().items()} if hasattr(tok, "tokenizer") else None
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")

    def encode(text, T=None):
        ids = list(tok.encode(text))
        if T is not None:
            ids = ids[: T - 2]
        return np.asarray([cls] + ids + [sep], np.int32)

    labels = (lambda ids: [vocab.get(int(i), "?") for i in ids]) if vocab else (lambda ids: [str(int(i)) for i in ids])
    std = 0.02  # BERT's initializer_range
    return Adapter("MiniLM (all-MiniLM-L6-v2)", model, params, "layer_{}", model.config.num_layers, False,
                   {"q": std, "k": std, "v": std, "fc": std, "proj": std}, encode, labels)


def hf_adapter(name: str):
    """Any checkpoint geomjax ports (a directory or a Hugging Face name): GPT-2, BERT, Llama, Mistral, BLOOM."""
    from geomjax.drivers import pipeline
    from geomjax.convert import read_config

    model, params, tok, path = pipeline.load_model_and_tokenizer(name, param_dtype="float32")
    iface = model_interface(model)
    f = iface.facts
    std = float(read_config(path).get("initializer_range", 0.02))
    encode = lambda text, T=None: np.asarray(tok.encode(text)[: T], np.int32)
    labels = lambda ids: [tok.decode([int(i)]) for i in ids]
    init = {n: std for n in ("q", "k", "v", "fc", "gate", "proj")}
    return Adapter(f"{f.family} ({Path(str(name)).name})", model, params, iface.layer_key(0).replace("0", "{}"),
                   f.n_layers, f.causal, init, encode, labels)


def toy_adapter(run_dir):
    run = load_toy_run(run_dir)
    c = run.config.model
    s, s_res = 0.02, 0.02 / math.sqrt(2 * c.n_layers)
    if c.init == "nanda":
        s = s_res = 1 / math.sqrt(c.d_model)
    encode = lambda text, T=None: np.asarray(run.tokenizer.encode(text)[: (T or run.max_positions)], np.int32)
    labels = lambda ids: list(run.tokenizer.decode([int(i)]) for i in ids)
    return Adapter(f"toy GPT ({run.config.task}, step {run.step})", run.model, run.params, "block_{}", c.n_layers,
                   bool(c.causal), {"q": s, "k": s, "v": s, "fc": s, "proj": s_res}, encode, labels), run


def matrices(ad: Adapter, layer: int) -> dict[str, np.ndarray]:
    """W_q (d, H·K), W_k, W_v (d, H_kv·K) and MLP fc (d, F) [, gate (d, F)], proj (F, d) of one layer
    (x @ W convention; SwiGLU's up projection is 'fc', its gate 'gate')."""
    w = ad.iface.head_weights(ad.params, layer)
    out = {}
    for n in ("q", "k", "v"):
        k = np.moveaxis(np.asarray(w[f"W_{n}"], np.float64), 0, 1)  # (d, H, K)
        out[n] = k.reshape(k.shape[0], -1)
    mlp = ad.iface.mlp_weights(ad.params, layer)
    for n, role in (("fc", "W_in"), ("gate", "W_gate"), ("proj", "W_out")):
        if role in mlp:
            out[n] = np.asarray(mlp[role], np.float64)
    return out


def scaled_params(ad: Adapter, alpha: float) -> dict:
    """Every layer's W_q, W_k kernels AND biases multiplied by α (q, k → αq, αk; logits × α²)."""
    return ad.iface.scale_qk(ad.params, alpha)


# ----------------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------------


def spectra(ad: Adapter, key) -> tuple[list, dict]:
    """Per layer and matrix: learned squared singular values vs a random matrix with the model's
    initializer and vs a Frobenius-matched random matrix; MP edges."""
    rows, curves = [], {}
    for l in range(ad.n_layers):
        for name, W in matrices(ad, l).items():
            n, m = W.shape
            s2 = np.linalg.svd(W, compute_uv=False) ** 2
            var = float(np.mean(W**2))  # entry variance of a Frobenius-matched random matrix
            R = np.asarray(jax.random.normal(jax.random.fold_in(key, 100 * l + zlib.crc32(name.encode()) % 97), (n, m)), np.float64)
            s2_init = np.linalg.svd(R * ad.init_std[name], compute_uv=False) ** 2
            edge_init = G.mp_edges(n, m, ad.init_std[name] ** 2)[1]
            edge_matched = G.mp_edges(n, m, var)[1]
            edge_xavier = G.mp_edges(n, m, G.xavier_variance(n, m))[1]
            rows.append([l, name, f"{n}×{m}", f"{s2.mean():.4g}", f"{s2_init.mean():.4g}", f"{s2[0]:.4g}",
                         f"{s2_init[0]:.4g}", f"{edge_init:.4g}", f"{edge_xavier:.4g}", f"{s2[0] / edge_matched:.3g}",
                         f"{np.mean(s2 > edge_matched):.3f}"])
            curves[(l, name)] = (s2, s2_init * var / ad.init_std[name] ** 2, edge_matched)
    return rows, curves


def trace_qk(ad: Adapter) -> tuple[np.ndarray, np.ndarray, list]:
    """Per layer and head: t = Tr(W_q[h]ᵀW_k[h]) and z = t / sd, sd = √(dK)·std(W_q[h])·std(W_k[h])
    (eq. 6.17 for independent zero-mean matrices with the observed entry variances)."""
    T, Z, rows = [], [], []
    for l in range(ad.n_layers):
        q, k = ad.qk_kernels(l)  # (d, H, K); GQA: the shared key head of each query head
        d, H, K = q.shape
        t = np.einsum("dhk,dhk->h", q, k)
        sd = np.sqrt(d * K) * q.std(axis=(0, 2)) * k.std(axis=(0, 2))
        T.append(t); Z.append(t / sd)
        tl = float(t.sum()); sdl = float(np.sqrt(d * H * K) * q.std() * k.std())
        rows.append([l, f"{tl:.4g}", f"{tl / sdl:.3g}", f"{np.mean(np.abs(t / sd)):.3g}", f"{np.max(np.abs(t / sd)):.3g}"])
    return np.array(T), np.array(Z), rows


def attention_stats(ad: Adapter, params, batch) -> dict:
    """Mean attention row entropy per layer, hidden states and attentions for ``batch`` (B, T)."""
    fwd = jax.jit(ad.forward)
    out, hs, att = fwd(params, jnp.asarray(batch))
    ent = np.array([float(G.attention_entropy(a.reshape(-1, *a.shape[-2:])).mean()) for a in att])
    return {"out": np.asarray(out), "hidden": [np.asarray(h) for h in hs], "att": [np.asarray(a) for a in att], "entropy": ent}


def max_entropy(T: int, causal: bool) -> float:
    """log n averaged over rows: log T (bidirectional) or mean_i log(i+1) (causal)."""
    return float(np.mean(np.log(np.arange(1, T + 1)))) if causal else math.log(T)


def cos_attention_corr(hidden, att, causal: bool) -> np.ndarray:
    """Per layer: Pearson correlation between cos(h_i, h_j) of the layer's input states and the
    head-averaged attention A_ij over off-diagonal (causal: earlier) pairs, averaged over the batch."""
    out = []
    for l, a in enumerate(att):
        h = hidden[l]  # input of layer l
        hn = h / np.linalg.norm(h, axis=-1, keepdims=True)
        cos = np.einsum("btd,bsd->bts", hn, hn)
        A = a.mean(1)
        T = A.shape[-1]
        mask = np.tril(np.ones((T, T), bool), -1) if causal else ~np.eye(T, dtype=bool)
        out.append(np.mean([np.corrcoef(cos[b][mask], A[b][mask])[0, 1] for b in range(A.shape[0])]))
    return np.array(out)


def random_params(ad: Adapter, seed: int, T: int):
    """The model's initialisation at ``seed`` (lazy_init: init's bits, without its forward pass)."""
    return ad.model.lazy_init(jax.random.key(seed), jax.ShapeDtypeStruct((1, T), jnp.int32))["params"]


def lm_loss(ad: Adapter, params, batch) -> float:
    logits, _, _ = jax.jit(ad.forward)(params, jnp.asarray(batch[:, :-1]))
    lp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    return float(-jnp.take_along_axis(lp, jnp.asarray(batch[:, 1:])[..., None], -1).mean())


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------


def wikitext_batch(ad: Adapter, n: int, T: int, seed: int) -> np.ndarray:
    from geomjax.data.corpora import wikitext2

    docs = wikitext2("valid")
    rng = np.random.default_rng(seed)
    out = []
    for i in rng.permutation(len(docs)):
        ids = ad.encode(docs[i][1], T)
        if ids.size == T:
            out.append(ids)
        if len(out) == n:
            break
    if len(out) < n:
        raise ValueError(f"wikitext_batch: only {len(out)} articles have {T} word pieces; lower seq_len")
    return np.stack(out)


def shakespeare_batch(run, n: int, T: int, seed: int) -> np.ndarray:
    from geomjax.data.corpora import tiny_shakespeare

    text = tiny_shakespeare(split="val")[0][1]
    ids = np.asarray(run.tokenizer.encode(text), np.int32)
    starts = np.random.default_rng(seed).integers(0, ids.size - T - 1, n)
    return np.stack([ids[s: s + T + 1] for s in starts])


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def _plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from geomjax.analysis import plots
    return plt, plots


def _spectra_section(ad: Adapter, run: RunDir, tag: str, key) -> tuple[Section, list]:
    plt, plots = _plots()
    rows, curves = spectra(ad, key)
    kinds = sorted({k for _, k in curves}, key=["q", "k", "v", "fc", "proj"].index)
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 3.2), squeeze=False)
    for j, kind in enumerate(kinds):
        ax = axes[0, j]
        for l in range(ad.n_layers):
            s2, s2r, edge = curves[(l, kind)]
            ax.semilogy(s2, color=plt.cm.viridis(l / max(1, ad.n_layers - 1)), lw=1, label=f"layer {l}" if j == 0 else None)
        ax.semilogy(s2r, "k--", lw=1, label="random, same Frobenius norm" if j == 0 else None)
        ax.axhline(edge, color="r", ls=":", lw=1)
        ax.set_title(f"W_{kind}" if kind in "qkv" else f"MLP {kind}"); ax.set_xlabel("index")
    axes[0, 0].set_ylabel("σ_i²"); axes[0, 0].legend(fontsize=6)
    rel = plots.save_to_run(fig, run, f"{tag}_spectra.png")
    s = Section(f"{ad.name}: singular-value spectra of learned weights")
    s.paragraphs.append(
        "Squared singular values per layer (x @ W convention, heads concatenated) against a random matrix with the "
        f"model's initializer (std {ad.init_std}) and the Marchenko–Pastur edge. 'σ1²/edge' divides the largest "
        "learned σ² by the MP edge of a random matrix with the SAME entry variance (Frobenius-matched); 'frac>edge' is "
        "the fraction of σ² beyond that edge (0 for a random matrix). The thesis (§7.2.2) reports learned spectra "
        "'pressed down' with a few large values.")
    s.figure(rel, "Learned spectra (coloured by layer), Frobenius-matched random spectrum (dashed), matched MP edge (dotted; layer 0)")
    s.table(["layer", "W", "shape", "mean σ² learned", "mean σ² init", "σ1² learned", "σ1² init", "MP edge init",
             "MP edge Xavier", "σ1²/edge (matched)", "frac>edge"], rows)
    return s, rows


def _trace_section(ad: Adapter, run: RunDir, tag: str) -> tuple[Section, dict]:
    plt, plots = _plots()
    t, z, trows = trace_qk(ad)
    fig, ax = plt.subplots(figsize=(5, 3))
    im = ax.imshow(z, cmap="coolwarm", vmin=-max(3, np.abs(z).max()), vmax=max(3, np.abs(z).max()), aspect="auto")
    ax.set_xlabel("head"); ax.set_ylabel("layer"); fig.colorbar(im, ax=ax, label="z = Tr / sd")
    rel = plots.save_to_run(fig, run, f"{tag}_trace_qk.png")
    s = Section(f"{ad.name}: Tr(W_qᵀW_k) per layer and head")
    s.paragraphs.append(
        "t = Tr(W_q[h]ᵀW_k[h]) per head (d × K blocks of the same head, so the grouped layout is respected) and its "
        "z-score against N(0, dK·σ_q²σ_k²), the law of eq. 6.17 for independent zero-mean matrices with the observed "
        f"entry variances. |z| ≫ 3 means aligned (or anti-aligned) query/key bases. Mean |z| over all heads: "
        f"{np.mean(np.abs(z)):.3g}; max |z|: {np.max(np.abs(z)):.3g}. The thesis reports the raw trace 'Tr(W_q^(l) W_k^(l)) ~ N(0, 1)' 'for most "
        "layers' (§7.2.2; its Xavier matrices' law, §6.2.3): the table's raw trace per layer is that quantity, the z-score "
        "the same trace on the scale of independent matrices with this model's entry variances.")
    s.figure(rel, "z-score of Tr(W_q[h]ᵀW_k[h]) per layer (rows) and head (columns)")
    s.table(["layer", "Tr(W_qᵀW_k) (all heads)", "z (layer)", "mean |z| heads", "max |z| heads"], trows)
    return s, {"trace": t.tolist(), "z": z.tolist(), "d_model": int(ad.qk_kernels(0)[0].shape[0])}


def _maps_section(ad: Adapter, run: RunDir, tag: str, prompt_ids: np.ndarray) -> Section:
    plt, plots = _plots()
    st = attention_stats(ad, ad.params, prompt_ids[None])
    L = ad.n_layers
    show = sorted({0, L // 2, L - 1})
    fig, axes = plt.subplots(1, len(show), figsize=(4.2 * len(show), 4.2), squeeze=False)
    lab = ad.labels(prompt_ids)
    for j, l in enumerate(show):
        ax = axes[0, j]
        ax.imshow(st["att"][l][0].mean(0), cmap="viridis")
        ax.set_title(f"layer {l} (mean over heads)")
        step = max(1, len(lab) // 24)
        ax.set_xticks(range(0, len(lab), step)); ax.set_xticklabels([repr(x)[1:-1] for x in lab[::step]], rotation=90, fontsize=5)
        ax.set_yticks(range(0, len(lab), step)); ax.set_yticklabels([repr(x)[1:-1] for x in lab[::step]], fontsize=5)
    rel = plots.save_to_run(fig, run, f"{tag}_attention_maps.png")
    s = Section(f"{ad.name}: attention maps on a few-shot-style prompt")
    s.paragraphs.append(f"Head-averaged attention (rows attend to columns) on a {len(lab)}-token few-shot prompt "
                        "(thesis §8.2 averages the heads of Mistral-7B the same way).")
    s.figure(rel, "Head-averaged attention maps")
    return s


def _alpha_section(ad: Adapter, run: RunDir, tag: str, cfg: WertichModelsConfig, batch: np.ndarray, quality,
                   base: dict) -> tuple[Section, dict]:
    plt, plots = _plots()
    T = base["hidden"][0].shape[1]
    hmax = max_entropy(T, ad.causal)
    L = ad.n_layers
    arows, ents, quals = [], [], []
    for a in cfg.alphas:
        ps = scaled_params(ad, a)
        sa = attention_stats(ad, ps, batch[:, :T])
        if quality == "lm":
            qv = lm_loss(ad, ps, batch)
            qname = "LM loss (nats/char)"
        else:
            pool = lambda o: o.mean(1)
            e1, e0 = pool(sa["out"]), pool(base["out"])
            qv = float(np.mean(np.sum(e1 * e0, -1) / (np.linalg.norm(e1, axis=-1) * np.linalg.norm(e0, axis=-1))))
            qname = "cos(pooled emb, unscaled)"
        ents.append(sa["entropy"]); quals.append(qv)
        arows.append([a, f"{qv:.4f}"] + [f"{e:.3f}" for e in sa["entropy"]])
    ents = np.array(ents)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    for l in range(L):
        ax[0].semilogx(cfg.alphas, ents[:, l], "o-", ms=3, color=plt.cm.viridis(l / max(1, L - 1)), label=f"layer {l}")
    ax[0].axhline(hmax, color="k", ls=":", lw=1, label="max (uniform)")
    ax[0].set_xlabel("α (W_q, W_k singular values × α)"); ax[0].set_ylabel("attention entropy"); ax[0].legend(fontsize=6)
    ax[1].semilogx(cfg.alphas, quals, "o-"); ax[1].set_xlabel("α"); ax[1].set_ylabel(qname)
    rel = plots.save_to_run(fig, run, f"{tag}_alpha_scaling.png")
    s = Section(f"{ad.name}: scaling the singular values of W_q and W_k by α")
    s.paragraphs.append(
        f"Every layer's W_q and W_k (kernels and biases, so q, k → αq, αk and the logits scale by α²) on {batch.shape[0]} "
        f"{'WikiText-2' if quality != 'lm' else 'held-out Shakespeare'} windows of {T} tokens. Maximal (uniform) entropy "
        f"= {hmax:.3f}. Quality: {qname}.")
    s.figure(rel, "Attention entropy per layer (left) and quality (right) versus α")
    s.table(["α", qname] + [f"H layer {l}" for l in range(L)], arows)
    return s, {"alphas": list(cfg.alphas), "entropy": ents.tolist(), "quality": quals, "quality_name": qname,
               "max_entropy": hmax}


def weight_stats(ad: Adapter, params, batch: np.ndarray, st: dict | None = None) -> dict:
    """The two statistics of the Tr(W_qᵀW_k) and cos–attention rows for one set of weights of ``ad``'s
    architecture: the share of heads with |z| < :data:`Z_RANDOM`, mean and max |z| (:func:`trace_qk`), the
    per-layer corr(cos, attention) on ``batch`` (B, T) (:func:`cos_attention_corr`) and the attention entropy
    per layer. ``st``: :func:`attention_stats` of ``params`` on ``batch`` if already computed."""
    st = attention_stats(ad, params, batch) if st is None else st
    _, z, _ = trace_qk(dataclasses.replace(ad, params=params))
    z = np.abs(z)
    return {"share": float(np.mean(z < Z_RANDOM)), "mean_abs_z": float(z.mean()), "max_abs_z": float(z.max()),
            "corr": cos_attention_corr(st["hidden"], st["att"], ad.causal).tolist(), "entropy": st["entropy"].tolist()}


def _control_row(label, w: dict) -> list:
    c = np.asarray(w["corr"])
    return [label, f"{w['share']:.0%}", f"{w['mean_abs_z']:.3g}", f"{w['max_abs_z']:.3g}", f"{c.min():.3f}–{c.max():.3f}",
            f"{np.abs(c).max():.3f}"]


CONTROL_HEADER = ["weights", f"heads abs(z) < {Z_RANDOM:g}", "mean abs(z)", "max abs(z)", "corr(cos, attention) per layer",
                  "max abs(corr)"]


def _random_sections(ad: Adapter, cfg: WertichModelsConfig, batch: np.ndarray, base: dict) -> tuple[list, list, list]:
    """The random-weights sections: attention entropy vs log n (thesis §8.4), and the control of the
    Tr(W_qᵀW_k) and cos–attention rows: the same statistics on the same random weights, whose Tr(W_qᵀW_k)
    follows the independent-matrix law by construction."""
    T = base["hidden"][0].shape[1]
    hmax = max_entropy(T, ad.causal)
    L = ad.n_layers
    rrows, controls = [], []
    for sd in range(cfg.random_seeds):
        pr = random_params(ad, cfg.seed + 1000 + sd, T)
        sr = attention_stats(ad, pr, batch[:, :T])
        controls.append(weight_stats(ad, pr, batch[:, :T], sr))
        rrows.append([sd] + [f"{e:.4f}" for e in sr["entropy"]] + [f"{hmax - sr['entropy'].mean():.2e}"])
    rrows.append(["trained"] + [f"{e:.4f}" for e in base["entropy"]] + [f"{hmax - base['entropy'].mean():.2e}"])
    s = Section(f"{ad.name}: random weights — attention entropy vs log n")
    s.paragraphs.append(
        f"The same architecture with freshly initialised weights (the model's own initializer), on the same inputs. "
        f"Maximal entropy {'mean_i log(i+1)' if ad.causal else 'log T'} = {hmax:.4f}. Random models attend almost "
        "uniformly (thesis §8.4 and the uniform-mixture hypothesis); trained ones do not.")
    s.table(["seed"] + [f"H layer {l}" for l in range(L)] + ["max − mean H"], rrows)
    trained = weight_stats(ad, ad.params, batch[:, :T], base)
    c = Section(f"{ad.name}: the random-initialisation control of Tr(W_qᵀW_k) and cos–attention")
    c.paragraphs.append(
        "The thesis' statements that Tr(W_qᵀW_k) behaves like that of independent random matrices (§6.2.3) and that "
        "the embeddings' cosine similarity and the attention are barely related (§8.3) hold by construction for "
        "weights drawn independently: the same random weights as above (the model's own initializer), measured as "
        "the trained ones. At random initialisation z ~ N(0, 1), so about 99.7% of the heads have abs(z) < 3; if "
        "the control passes and the trained weights do not, training is what aligns W_q with W_k (the statement "
        "fails for trained weights, not the test).")
    c.table(CONTROL_HEADER, [_control_row(f"random init, seed {i}", w) for i, w in enumerate(controls)]
            + [_control_row("trained", trained)])
    return [s, c], rrows, controls


def _cos_section(ad: Adapter, base: dict) -> tuple[Section, np.ndarray]:
    corr = cos_attention_corr(base["hidden"], base["att"], ad.causal)
    s = Section(f"{ad.name}: embedding cosine similarity vs attention")
    s.paragraphs.append(
        "Pearson correlation, per layer, between cos(h_i, h_j) of the layer's input states and the head-averaged "
        f"attention A_ij over {'earlier' if ad.causal else 'off-diagonal'} pairs, averaged over the windows "
        "(the thesis §8.3 links attention to the embeddings' angular information).")
    s.table(["layer", "corr(cos, attention)"], [[l, f"{c:.3f}"] for l, c in enumerate(corr)])
    return s, corr


def training_curve(ad: Adapter, toy_dir, batch: np.ndarray) -> list[dict]:
    """:func:`weight_stats` and the held-out LM loss of the toy GPT at step 0 (its exact initial weights,
    ``init_state`` of the run's config) and at every checkpoint the run saved; ``batch`` (B, T + 1)."""
    cfg = load_toy_run(toy_dir).config
    points = [(0, init_state(cfg).params)]
    points += [(s, load_toy_run(toy_dir, s).params) for s, _ in list_checkpoints(Path(toy_dir) / "checkpoints") if s > 0]
    return [{"step": s} | weight_stats(ad, p, batch[:, :-1]) | {"lm_loss": lm_loss(ad, p, batch)} for s, p in points]


def _curve_section(ad: Adapter, run: RunDir, tag: str, curve: list[dict]) -> Section:
    plt, plots = _plots()
    steps = [c["step"] for c in curve]
    corr = np.array([c["corr"] for c in curve])
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    ax[0].plot(steps, [c["share"] for c in curve], "o-", label=f"share of heads with abs(z) < {Z_RANDOM:g}")
    ax[0].axhline(0.5, color="k", ls=":", lw=1, label="'most heads' (the row's rule)")
    ax[0].set_ylim(0, 1.02); ax[0].set_xlabel("training step"); ax[0].set_ylabel("share of heads"); ax[0].legend(fontsize=6)
    for l in range(corr.shape[1]):
        ax[1].plot(steps, corr[:, l], "o-", ms=3, color=plt.cm.viridis(l / max(1, corr.shape[1] - 1)), label=f"layer {l}")
    ax[1].axhline(CORR_MINIMAL, color="k", ls=":", lw=1, label=f"abs(corr) = {CORR_MINIMAL:g} (the row's rule)")
    ax[1].set_xlabel("training step"); ax[1].set_ylabel("corr(cos, attention)"); ax[1].legend(fontsize=6)
    rel = plots.save_to_run(fig, run, f"{tag}_training_curve.png")
    s = Section(f"{ad.name}: Tr(W_qᵀW_k) and cos–attention over training")
    s.paragraphs.append(
        "The two statistics of the rows above at the toy's exact initial weights (step 0: its config's init_state) and "
        "at every checkpoint of its training run, on the same held-out windows; LM loss in nats/char. Where the "
        "step-0 values pass the rule and the trained ones do not, training is what moves the statistic.")
    s.figure(rel, f"Share of heads with abs(z) < {Z_RANDOM:g} (left) and corr(cos, attention) per layer (right) "
                  "over training")
    s.table(["step", "LM loss"] + CONTROL_HEADER[1:],
            [[c["step"], f"{c['lm_loss']:.4f}"] + _control_row("", c)[1:] for c in curve])
    return s


def analyse(ad: Adapter, run: RunDir, cfg: WertichModelsConfig, tag: str, batch: np.ndarray, prompt_ids: np.ndarray,
            quality, progress: bool) -> tuple[list[Section], dict]:
    """Every measurement of one model as report sections and metrics (the module docstring's list)."""
    T = batch.shape[1] - (1 if quality == "lm" else 0)
    log = (lambda *a: print(f"[{tag}]", *a, flush=True)) if progress else (lambda *a: None)
    secs, met = [], {}
    log("spectra")
    s, met["spectra"] = _spectra_section(ad, run, tag, jax.random.key(cfg.seed))
    secs.append(s)
    log("Tr(W_q^T W_k)")
    s, met["trace_qk"] = _trace_section(ad, run, tag)
    secs.append(s)
    log("attention maps")
    secs.append(_maps_section(ad, run, tag, prompt_ids))
    log("alpha scaling")
    base = attention_stats(ad, ad.params, batch[:, :T])
    s, met["alpha"] = _alpha_section(ad, run, tag, cfg, batch, quality, base)
    secs.append(s)
    log("random weights")
    ss, met["random"], met["random_control"] = _random_sections(ad, cfg, batch, base)
    log("cosine vs attention")
    s, corr = _cos_section(ad, base)
    secs += [ss[0], s, ss[1]]
    met["cos_attention_corr"] = corr.tolist()
    return secs, met


def _evidence(m: dict) -> tuple[str, str]:
    """The why of the Tr(W_qᵀW_k) and cos–attention rows, as short phrases for their notes: the random-init
    control (``m["random_control"]``) and the training curve (``m["curve"]``), where the run measured them."""
    ctl, curve = m.get("random_control") or [], m.get("curve") or []
    tr, co = [], []
    if ctl:
        tr.append(f"random-init control: {min(c['share'] for c in ctl):.0%} of heads ({len(ctl)} seed{'s' * (len(ctl) > 1)})")
        co.append(f"random-init control: max abs(corr) {max(np.abs(c['corr']).max() for c in ctl):.2f}")
    if len(curve) > 1:
        steps = ", ".join(str(c["step"]) for c in curve)
        tr.append("over training " + " → ".join(f"{c['share']:.0%}" for c in curve) + f" (steps {steps})")
        co.append("max abs(corr) over training " + " → ".join(f"{np.abs(c['corr']).max():.2f}" for c in curve)
                  + f" (steps {steps})")
    return "".join("; " + t for t in tr), "".join("; " + t for t in co)


def comparison_rows(models: list[tuple[str, dict]]) -> list[Row]:
    """Per model, the thesis's ch. 8 / App. A.5 findings against this run's measurements (stated thresholds)."""
    rows = []
    for name, m in models:
        ratio = [float(r[9]) for r in m["spectra"] if r[1] in ("q", "k")]
        frac = [float(r[10]) for r in m["spectra"] if r[1] in ("q", "k")]
        rows.append(Row("spectra", f"{name}: W_q/W_k σ1²/edge {min(ratio):.2g}–{max(ratio):.2g}, fraction beyond the "
                        f"edge {np.mean(frac):.2f}", verdict(min(ratio) > 1 and np.mean(frac) < 0.5),
                        "reproduced = σ1² above the matched edge with most σ² below it"))
        z = np.abs(np.asarray(m["trace_qk"]["z"]))
        share = float(np.mean(z < Z_RANDOM))
        why_trace, why_cos = _evidence(m)
        raw = np.asarray(m["trace_qk"].get("trace", []), np.float64).reshape(-1, np.shape(z)[-1]).sum(axis=1)
        n_raw = int(np.sum(np.abs(raw) < Z_RANDOM))  # raw: Tr(W_q^(l)ᵀW_k^(l)) per layer, every head's block
        rows += [] if not raw.size else [Row("trace", f"{name}, raw as printed: Tr(W_qᵀW_k) per layer {raw.min():.3g} to {raw.max():.3g}, "
                        f"{n_raw} of {raw.size} layers with abs(Tr) < {Z_RANDOM:g}", verdict(n_raw > raw.size / 2),
                        f"reproduced = most layers' raw trace within ±{Z_RANDOM:g} of 0, the printed N(0, 1)'s 99.7% range "
                        f"(aligned matrices: Tr ≈ n = {m['trace_qk'].get('d_model', 'd')}); the thesis's N(0, 1) is of the raw trace")]
        rows.append(Row("trace", f"{name}, as a z-score: {share:.0%} of heads with abs(z) < {Z_RANDOM:g} (mean abs(z) "
                        f"{z.mean():.3g})", verdict(share > 0.5),
                        f"reproduced = most heads abs(z) < {Z_RANDOM:g}, z = Tr / sd of independent matrices with the "
                        "observed entry variances (eq. 6.17): scale-free, where the raw trace depends on the weights' "
                        "scale" + why_trace))
        c = np.asarray(m["cos_attention_corr"], np.float64)
        rows.append(Row("cos_attention", f"{name}: corr(cos, attention) per layer {c.min():.2f}–{c.max():.2f}",
                        verdict(bool(np.all(np.abs(c) < CORR_MINIMAL))), f"reproduced = abs(corr) < {CORR_MINIMAL:g}"
                        + why_cos))
        hmax = m["alpha"]["max_entropy"]
        gaps = [float(r[-1]) for r in m["random"][:-1]]
        rows.append(Row("random_uniform", f"{name}: entropy {max(gaps):.2g} below the maximum {hmax:.3f} at most",
                        verdict(max(gaps) < UNIFORM_GAP * hmax), f"reproduced = within {UNIFORM_GAP:.0%} of the maximum"))
        ent = np.asarray(m["alpha"]["entropy"]).mean(1)
        rows.append(Row("alpha", f"{name}: mean entropy " + ", ".join(f"{e:.2f}" for e in ent) + " at α = "
                        + ", ".join(f"{a:g}" for a in m["alpha"]["alphas"]), verdict(bool(np.all(np.diff(ent) < 0)))))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--out", default=None)
    ap.add_argument("--toy-run", default=None, help="use this trained toy run directory instead of training")
    ap.add_argument("--no-minilm", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = get_config(args.preset, toy_run=args.toy_run, minilm=not args.no_minilm, seed=args.seed)
    tcfg = get_train_config("shakespeare", cfg.toy_preset)
    if cfg.toy_ckpt_every is not None:  # every checkpoint is a point of the training curve
        tcfg = tcfg.replace(ckpt_every=cfg.toy_ckpt_every)
    if cfg.toy_run is None:  # before any work: the toy GPT this run trains (checkpointed in <out>/toy, resumed)
        print("toy GPT: " + toy_training_cost(tcfg).describe())
    out = Path(args.out or f"runs/wertich-models-{cfg.preset}")
    run = RunDir(out, command="wertich_models")
    progress = not args.no_progress
    t0 = time.time()
    sections, metrics = [], {}

    if cfg.minilm:
        ad = minilm_adapter()
        batch = wikitext_batch(ad, cfg.n_texts, cfg.seq_len, cfg.seed)
        prompt = ad.encode(FEW_SHOT_MINILM)
        s, m = analyse(ad, run, cfg, "minilm", batch, prompt, "cosine", progress)
        s[0].paragraphs.append("all-MiniLM-L6-v2 ships no masked-LM head (model.safetensors holds only the encoder "
                               "and the pooler), so masked-token accuracy is not measurable; see the α section.")
        sections += s; metrics["minilm"] = m

    toy_dir = cfg.toy_run
    if toy_dir is None:
        toy_dir = str(out / "toy")
        if progress:
            print(f"[toy] training shakespeare/{cfg.toy_preset} into {toy_dir}", flush=True)
        fit(tcfg, run_dir=toy_dir, progress=progress)
    ad, trun = toy_adapter(toy_dir)
    schedules = {"Toy GPT": trun.config.effective_schedule()}  # MiniLM is pretrained, not trained here
    run.write_config(dataclasses.asdict(cfg), schedules=schedules)
    Tm = trun.max_positions
    batch = shakespeare_batch(trun, cfg.n_texts, Tm, cfg.seed)
    prompt = ad.encode(FEW_SHOT_TOY, Tm)
    s, m = analyse(ad, run, cfg, "toy", batch, prompt, "lm", progress)
    if progress:
        print("[toy] training curve", flush=True)
    m["curve"] = training_curve(ad, toy_dir, batch)
    s.append(_curve_section(ad, run, "toy", m["curve"]))
    # the run's own toy is recorded relative to its output folder (a committed report names no machine path)
    toy_rec = "toy" if cfg.toy_run is None else toy_dir
    sections += s; metrics["toy"] = m | {"run_dir": toy_rec}

    metrics["seconds"] = time.time() - t0
    metrics["load"] = machine_load()
    models = [(n, metrics[k]) for n, k in (("MiniLM", "minilm"), ("Toy GPT", "toy")) if k in metrics]
    cmp = source_section(SOURCE, cfg.preset, ("MiniLM and " if cfg.minilm else "") + f"a GPT-style toy (shakespeare "
                         f"{cfg.toy_preset} preset); {cfg.n_texts} windows per measurement, α ∈ {list(cfg.alphas)}.",
                         ["Mistral-7B is not available offline: MiniLM (encoder, 6 layers) and a toy GPT stand in",
                          "WikiText-2 / Shakespeare windows instead of the few-shot clue prompts (the prompt is used "
                          "for the attention maps only)"], comparison_rows(models))
    sections[:0] = [cmp, schedule_section(schedules)]
    metrics["plumbing_only"] = cfg.preset == "smoke"
    run.write_json("metrics.json", metrics)
    run.write_report("Wertich (2024) ch. 8 on MiniLM and a toy GPT", sections,
                     {"preset": cfg.preset, "seconds": round(metrics["seconds"], 1), "load (at the end)": metrics["load"]})
    print(f"report: {run.path / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
