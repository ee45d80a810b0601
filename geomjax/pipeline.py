"""End-to-end jobs behind the CLI: the per-layer geometry study, the claims check, toy training.

:func:`run_geometry` is Song & Zhong §2 on one (model, corpus) pair: sample C document-labelled
windows, run the jitted model over them once and accumulate the exact decomposition
(eqs. (2)-(3)) of every hidden state in the same pass, then compute each layer's Table 1/3/4/5
numbers, cluster compactness (App. C), and Figs. 1-3 / 24-26 from the O(d² + T·d + C·d)
statistics. cvec and resid, which need individual sequences, are taken from a separate fresh draw
of ``n_cvec`` windows, as the source code did.

Every function here composes library calls; the numbers come from :mod:`geomjax.study`,
:mod:`geomjax.spectral` and :mod:`geomjax.geometry`.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from geomjax import report
from geomjax.errors import GeomjaxError
from geomjax.models.bert import BertConfig
from geomjax.report import Section
from geomjax.study import StudyOptions

__all__ = [
    "GeometryConfig",
    "GeometryInputs",
    "load_model_and_tokenizer",
    "prepare_inputs",
    "run_geometry",
    "run_claims",
    "run_training",
    "meta_line",
    "validate_geometry",
    "validate_claims_selection",
    "status_line",
    "check_topic_capacity",
    "claims_summary",
    "merged_history",
    "validate_training",
]


@dataclasses.dataclass(frozen=True)
class GeometryConfig:
    """Configuration of a per-layer geometry study (written to config.json).

    Attributes:
      model: "minilm" (the bundled all-MiniLM-L6-v2), a local Hugging Face model directory /
        cache entry holding config.json + model.safetensors, or a Hugging Face name ("gpt2",
        "meta-llama/Llama-2-7b-hf", "bigscience/bloom-560m"; cached or downloaded) — GPT-2, BERT,
        Llama / Mistral or BLOOM; or "toy:RUN_DIR".
      corpus: wikitext2 | shakespeare | stdlib | pydoc | a text file or directory | hf:<name>.
      data_dir: folder replacing the bundled tinyshakespeare/ and wikitext-2/ (None:
        $GEOMJAX_DATA, else the copies shipped in the package; DATA.md).
      n_docs: documents (clusters) to draw windows from.
      windows_per_doc: non-overlapping windows per document; C = n_docs · windows_per_doc.
      seq_len: window length in tokens before dropping the first (the paper: 512, topics 128).
      batch_size: windows per forward pass (must divide C).
      seed: every random choice derives from it.
      drop_first: drop position 0 (the source code does).
      final_ln: the last state after the final norm (Hugging Face's output_hidden_states) instead
        of before it. None: the family's convention as the Song & Zhong code ran it — GPT-2 and
        toys without (their own GPT-2 path), BLOOM / Llama / Mistral with (Hugging Face's states).
      bos: prepend the tokenizer's BOS id to every window (Llama / Mistral / BLOOM); with
        ``drop_first`` the dropped position is then the BOS. The source code inserted none.
      param_dtype: None keeps the checkpoint's dtype (bf16 / fp16 stay so); e.g. "float32".
      causal: run BERT with a causal mask (the source code's is_decoder=True).
      centered_relative_norm: ‖P‖/‖H−μ‖ (paper text) rather than ‖P‖/‖H‖ with μ (source code).
      accum_dtype: dtype of the streaming sums. float32 by default: the per-position shifts keep
        it accurate to ~2e-7 relative even with |μ| ~ 10³× the residual scale (benchmarks/
        RESULTS.md), at half the cost of float64 (an option).
      compute_dtype: dtype of the model forward: "float32" (default) or "bfloat16"/"float16"
        (mixed precision: the statistics still accumulate in ``accum_dtype``; see
        ``geomjax.extraction.mixed_precision``).
      screenot_k: ScreeNOT's upper bound on the rank (source: 20).
      n_cvec: sequences of the fresh draw used for cvec/resid figures (source: 32; 10 plotted).
      devices: shard the windows over this many devices (None: one device).
      ood_corpus: second corpus for Table 2 (rank and relative norm out of distribution; the
        paper used GitHub code: "stdlib" is the standard library's Python source); None: skip.
      n_cluster_windows: windows per document whose token-level cvec and raw states go into the
        App. C compactness (Figs. 24-26); 0: skip.
      theorem1: evaluate eq. (6) of Theorem 1 on every layer's pos Gram.
      cluster_mu: centring of ctx for Table 1's intra/inter cluster similarity: "topics" (default: μ of
        the topic windows themselves) or "general" (μ of the separate uniform draw of ``n_cvec`` corpus
        windows, as the Song & Zhong topics script centres the topic windows on μ from its general-corpus
        run).
    """

    model: str = "minilm"
    corpus: str = "wikitext2"
    data_dir: str | None = None
    n_docs: int = 4
    windows_per_doc: int = 64
    seq_len: int = 128
    batch_size: int = 16
    seed: int = 0
    drop_first: bool = True
    final_ln: bool | None = None
    causal: bool = False
    centered_relative_norm: bool = True
    accum_dtype: str = "float32"
    compute_dtype: str = "float32"
    screenot_k: int = 20
    n_cvec: int = 10
    devices: int | None = None
    ood_corpus: str | None = "stdlib"
    n_cluster_windows: int = 8
    theorem1: bool = True
    bos: bool = False
    param_dtype: str | None = None
    cluster_mu: str = "topics"

    @property
    def n_contexts(self) -> int:
        return self.n_docs * self.windows_per_doc


# Sampling sizes. "cpu": minutes on a 2-core CPU (the defaults). "paper": Song & Zhong's scale,
# C = 6400 windows of T = 512 (§2: "6.4K samples"), meant for a GPU and a corpus large enough
# for that many non-overlapping windows (WikiText-2's validation split is not: the sampler
# says so rather than repeating windows).
PRESETS: dict[str, dict] = {
    "cpu": dict(n_docs=4, windows_per_doc=64, seq_len=128, batch_size=16),
    "paper": dict(n_docs=100, windows_per_doc=64, seq_len=512, batch_size=32),
}

# Song & Zhong's own numbers, quoted for comparison (Table 1: mean (std) across layers, 6.4K
# samples; Table 2: out-of-distribution samples). Reference values only, never test targets.
PAPER_TABLE1 = [
    # model, corpus, rank, relative norm, inter sim, intra sim, incoh
    ("NanoGPT", "Shakespeare", "7.86 (1.96)", "0.66 (0.28)", "—", "—", "—"),
    ("GPT-2", "OpenWebText", "11.38 (1.86)", "0.31 (0.19)", "0.10 (0.01)", "0.44 (0.04)", "0.051 (0.05)"),
    ("GPT-2", "WikiText", "11.69 (1.64)", "0.31 (0.19)", "0.11 (0.01)", "0.41 (0.03)", "0.039 (0.04)"),
    ("BERT", "OpenWebText", "12.54 (2.73)", "0.24 (0.07)", "0.13 (0.04)", "0.26 (0.04)", "0.046 (0.05)"),
    ("BERT", "WikiText", "12.62 (2.70)", "0.24 (0.06)", "0.17 (0.03)", "0.31 (0.04)", "0.043 (0.04)"),
    ("BLOOM", "OpenWebText", "10.23 (1.31)", "0.16 (0.09)", "0.21 (0.12)", "0.48 (0.06)", "0.158 (0.23)"),
    ("Llama 2", "WikiText", "8.69 (0.91)", "0.14 (0.03)", "0.33 (0.20)", "1.00 (0.01)", "0.316 (0.27)"),
]
PAPER_TABLE2 = [
    ("NanoGPT", "WikiText", "7.86 (1.96)", "0.66 (0.28)"),
    ("GPT-2", "GitHub", "11.54 (1.55)", "0.31 (0.16)"),
    ("BERT", "GitHub", "12.46 (2.47)", "0.23 (0.04)"),
    ("BLOOM", "GitHub", "9.54 (0.84)", "0.14 (0.05)"),
]


def _model_config(name: str) -> dict | None:
    """config.json of a model name without loading weights (None for a toy run)."""
    from geomjax.convert import minilm_path
    from geomjax.convert.safetensors_io import read_config, resolve_checkpoint

    if name.startswith("toy:"):
        root = Path(name[4:]).expanduser()
        if not (root / "checkpoints").is_dir():
            raise GeomjaxError(f"--model {name!r}: {str(root)!r} is not a `geomjax train` run directory "
                               "(no checkpoints/); train one with `geomjax train shakespeare --out DIR`")
        return None
    try:
        path = minilm_path() if name == "minilm" else resolve_checkpoint(Path(name).expanduser())
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
    from geomjax import data

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
    data.data_dir_override(cfg.data_dir)
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
                  "document per file) or --corpus hf:wikitext:wikitext-103-raw-v1 (needs `datasets` and a "
                  "network).")
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
    # geomjax.lens loads convert, models and train: imported on use so `geomjax --help` stays fast.
    from geomjax.lens import load

    m = load(name, dtype=param_dtype)
    tok = m.tokenizer.encode if name.startswith("toy:") else m.tokenizer  # a toy run's CharTokenizer
    return m.model, m.params, tok, m.path


def _max_positions(model) -> int | None:
    """Context length of a loaded model, None when its positions are unbounded (rotary, ALiBi)."""
    from geomjax.models import model_interface

    return model_interface(model).facts.max_positions


def model_conventions(model, cfg: GeometryConfig) -> dict:
    """The hidden-state conventions a study of ``model`` runs with (recorded in config.json)."""
    from geomjax.models import model_interface

    f = model_interface(model).facts
    final = cfg.final_ln if cfg.final_ln is not None else f.family in ("bloom", "llama", "mistral")
    if final and not f.final_norm:
        name = {"bert": "BERT", "toy": "this toy model"}.get(f.family, f.family)
        raise GeomjaxError(f"--final-ln: {name} has no final LayerNorm (its Hugging Face states are the "
                           "residual stream already); leave --final-ln out")
    if cfg.causal and f.family != "bert":
        raise GeomjaxError(f"--causal applies to BERT only (the {f.family} model has its own causal mask)")
    if cfg.bos and f.bos_token_id is None and f.family not in ("bloom",):
        raise GeomjaxError(f"--bos: the {f.family} model's tokenizer has no BOS token to prepend")
    bos = getattr(getattr(model, "config", None), "bos_token_id", None) if cfg.bos else None
    return {"family": f.family, "positions": f.positions, "norm": f.norm, "final_norm_applied": bool(final),
            "bos_prepended": bos, "first_position_dropped": cfg.drop_first,
            "hidden_states": "embedding output, then each block" + (
                ", the last after the final norm (Hugging Face output_hidden_states)" if final
                else ", all before any final norm (residual stream)")}


def _forward(model, *, final_ln: bool, causal: bool, bos: int | None = None):
    """forward(params, ids) -> L+1 hidden states with the study's conventions (the model interface's
    :meth:`~geomjax.models.ModelInterface.hidden_states`; ``bos`` prepended to every window)."""
    from geomjax.models import ToyRun, model_interface, toy_forward

    if isinstance(model, ToyRun) and bos is None:
        if causal:
            raise GeomjaxError("--causal applies to BERT only (the toy model has its own mask)")
        return toy_forward(model, "hidden_states" if final_ln else "residual")
    if causal and not isinstance(getattr(model, "config", None), BertConfig):
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
    from geomjax import data

    status_line(f"tokenizing {cfg.corpus}", progress)
    docs = data.load_corpus(cfg.corpus, cfg.data_dir)
    corpus = data.tokenize_documents(docs, tokenizer)
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
        oc = data.tokenize_documents(odocs, tokenizer)
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
    if not devices:
        return None
    from geomjax.parallel import data_mesh

    return data_mesh(devices)


def run_geometry(cfg: GeometryConfig, run: report.RunDir, progress: bool = True):
    """Song & Zhong §2 study of every hidden state; writes figures into ``run``.

    Returns:
      (sections, metrics): report sections and a JSON-able dict with ``per_layer`` metrics,
      ``summary`` (mean ± std across layers, Tables 1-2), singular values and timings.
    """
    from geomjax import extraction, geometry, plots, spectral, study
    from geomjax._checks import x64_context as _x64_context

    t0 = time.perf_counter()
    validate_geometry(cfg)
    status_line(f"loading {cfg.model}", progress)
    try:
        model, params, tok, path = load_model_and_tokenizer(cfg.model, param_dtype=cfg.param_dtype)
    except GeomjaxError:
        raise
    except (FileNotFoundError, ValueError) as e:  # missing/corrupted files, unsupported config
        raise GeomjaxError(f"--model {cfg.model!r} cannot be loaded: {e}") from None
    # Checks that need only the model come first, before the (slower) corpus sampling.
    conv = model_conventions(model, cfg)
    max_pos = _max_positions(model)
    n_bos = int(conv["bos_prepended"] is not None)
    if max_pos is not None and cfg.seq_len + n_bos > max_pos:
        raise GeomjaxError(f"-T {cfg.seq_len}{' plus the BOS token' if n_bos else ''} exceeds the model's "
                           f"{max_pos} positions; use -T <= {max_pos - n_bos}")
    try:
        fwd_raw = _forward(model, final_ln=conv["final_norm_applied"], causal=cfg.causal,
                           bos=conv["bos_prepended"])
    except ValueError as e:  # an option the model does not support (--causal, --final-ln)
        raise GeomjaxError(str(e)) from None
    forward = extraction.mixed_precision(fwd_raw, cfg.compute_dtype)
    vocab = getattr(getattr(model, "tokenizer", None), "chars", None)  # a ToyRun's characters
    inputs = prepare_inputs(cfg, tok, vocab=vocab, progress=progress)
    w = inputs.windows
    mesh = _mesh(cfg.devices)
    batches = [w.ids[i: i + cfg.batch_size] for i in range(0, cfg.n_contexts, cfg.batch_size)]
    t1 = time.perf_counter()
    stats = extraction.decompose_model_stream(
        forward, params, batches, drop_first=cfg.drop_first, accum_dtype=cfg.accum_dtype,
        mesh=mesh, progress="forward + decomposition" if progress else False, total=len(batches))
    jax.block_until_ready(stats[-1].ctx)
    t_extract = time.perf_counter() - t1
    n_layers = len(stats)
    layer_names = ["emb"] + [f"L{i}" for i in range(1, n_layers)]

    # cvec / resid of a fresh draw (source code: 32 sequences; cvec = h - mu - pos).
    fwd = jax.jit(forward)  # one jitted forward for the cvec draw and the token clusters
    states = fwd(params, jnp.asarray(inputs.cvec_ids))
    s0 = int(cfg.drop_first)
    cvec = []
    for st, hs in zip(stats, states):
        with _x64_context(cfg.accum_dtype):
            h = np.asarray(hs[:, s0:], np.float64)
            cvec.append(h - np.asarray(st.mean, np.float64) - np.asarray(st.pos, np.float64)[None])

    options = study.StudyOptions(screenot_k=cfg.screenot_k,
                                 centered_relative_norm=cfg.centered_relative_norm)
    labels = np.asarray(w.doc_labels)
    multi_doc = np.unique(labels).size >= 2
    if cfg.cluster_mu not in ("topics", "general"):
        raise GeomjaxError(f"--cluster-mu must be 'topics' or 'general', got {cfg.cluster_mu!r}")
    per_layer = []
    for layer in _bar(range(n_layers), "metrics", progress):
        # Cluster metrics need two documents (a one-document corpus such as tiny Shakespeare
        # has none: reported as "—", like the paper's NanoGPT row).
        m = study.layer_metrics(stats[layer], labels if multi_doc else None, options)
        ctx = jnp.asarray(np.asarray(stats[layer].ctx, np.float32))
        if multi_doc and cfg.cluster_mu == "general":  # ctx_c + μ_topics − μ_general (the authors' topics script)
            mu_gen = np.asarray(states[layer][:, s0:], np.float64).mean((0, 1))
            ctx_gen = np.asarray(stats[layer].ctx, np.float64) + np.asarray(stats[layer].mean, np.float64) - mu_gen
            intra, inter = geometry.cluster_similarity(jnp.asarray(ctx_gen, jnp.float32), jnp.asarray(labels))
            m["intra_similarity"], m["inter_similarity"] = float(intra), float(inter)
        m["cluster_compactness"] = (float(geometry.cluster_compactness(ctx, jnp.asarray(labels)))
                                    if multi_doc else None)
        per_layer.append(m)
    T = stats[0].n_positions

    # Theorem 1, eq. (6), on every layer's pos Gram (issue: report LHS/RHS on real layers).
    thm1 = []
    if cfg.theorem1:
        ks = tuple(range(1, min(20, T - 1) + 1))
        for layer in _bar(range(n_layers), "Theorem 1, eq. (6)", progress):
            r = study.theorem1_on_pos(stats[layer].pos, ks=ks)
            thm1.append(r)
            m = per_layer[layer]
            m["theorem1_max_ratio_printed"] = r["max_ratio_printed"]
            m["theorem1_max_ratio_corrected"] = r["max_ratio_corrected"]
            m["theorem1_certified_violations_printed"] = r["n_certified_violations_printed"]
            m["theorem1_lhs_k10_over_opnorm"] = r["lhs_over_opnorm"][min(10, len(ks)) - 1]

    # App. C / Figs. 24-26: token-level cvec vs raw states of a subsample of the windows.
    tok_clusters = []
    if cfg.n_cluster_windows and multi_doc:
        sel = np.concatenate([np.flatnonzero(labels == j)[: cfg.n_cluster_windows]
                              for j in np.unique(labels)])
        parts = [[] for _ in range(n_layers)]
        for i in range(0, sel.size, cfg.batch_size):
            for layer, a in enumerate(fwd(params, jnp.asarray(w.ids[sel[i: i + cfg.batch_size]]))):
                parts[layer].append(np.asarray(a[:, s0:], np.float32))
        for layer in _bar(range(n_layers), "token clusters (App. C)", progress):
            r = study.token_cluster_metrics(np.concatenate(parts[layer]), labels[sel],
                                            stats[layer].mean, stats[layer].pos)
            tok_clusters.append(r)
            per_layer[layer]["compactness_cvec"] = r["compactness_cvec"]
            per_layer[layer]["compactness_raw"] = r["compactness_raw"]
            per_layer[layer]["n_cluster_tokens"] = int(r["token_labels"].size)
            per_layer[layer]["d_model"] = int(stats[layer].pos.shape[-1])
        del parts

    # Table 2: the same model on an out-of-distribution corpus (rank and relative norm of pos).
    ood_layers = None
    ood_dropped = inputs.ood_dropped
    if inputs.ood_ids is not None:
        ob = [inputs.ood_ids[i: i + cfg.batch_size] for i in range(0, cfg.n_contexts, cfg.batch_size)]
        ostats = extraction.decompose_model_stream(
            forward, params, ob, drop_first=cfg.drop_first, accum_dtype=cfg.accum_dtype,
            mesh=mesh, progress=f"OOD ({cfg.ood_corpus})" if progress else False, total=len(ob))
        ood_layers = [study.layer_metrics(st, None, options) for st in ostats]
        for m, o in zip(per_layer, ood_layers):
            m["ood_screenot_rank"] = o["screenot_rank"]
            m["ood_relative_norm"] = o["relative_norm"]
            m["ood_stable_rank"] = o["stable_rank"]

    summary = study.summarize_layers(per_layer)
    t_total = time.perf_counter() - t0

    # ---------------------------------------------------------------- figures
    status_line("figures", progress)
    figs = {}
    mid = n_layers // 2
    pos_proj, cvec_proj = [], []
    for layer in range(n_layers):
        pr = geometry.pca_projections(jnp.asarray(np.asarray(stats[layer].pos, np.float32)),
                                      [jnp.asarray(cvec[layer], jnp.float32)])
        pos_proj.append(np.asarray(pr.pos))
        cvec_proj.append(np.asarray(pr.others[0]))
    p, rel = run.figure_path("fig1_pca.png")
    plots.save(plots.pca_grid(pos_proj, cvec_proj, layer_names,
                              "pos (blue, light→dark = position) and cvec (red) on P's top-2 PCs"), p)
    figs["pca"] = rel
    panels = sorted({1 if n_layers > 1 else 0, mid, n_layers - 1})
    p3, c3 = [], []
    for layer in panels:
        pr = geometry.pca_projections(jnp.asarray(np.asarray(stats[layer].pos, np.float32)),
                                      [jnp.asarray(cvec[layer], jnp.float32)], n_components=3)
        p3.append(np.asarray(pr.pos))
        c3.append(np.asarray(pr.others[0]))
    p, rel = run.figure_path("fig1_pca_3d.png")
    plots.save(plots.pca_3d(p3, c3, [layer_names[i] for i in panels],
                            "pos (blue) and cvec (red) on P's top-3 PCs"), p)
    figs["pca3d"] = rel

    X = np.concatenate([np.asarray(stats[mid].pos), np.asarray(stats[mid].ctx)])
    G = np.asarray(geometry.normalized_gram(jnp.asarray(X, jnp.float32)))
    bounds = [i * cfg.windows_per_doc for i in range(1, cfg.n_docs)]
    p, rel = run.figure_path("fig2_gram.png")
    plots.save(plots.gram_heatmap(G, stats[mid].n_positions, f"normalized Gram [pos; ctx], "
                                  f"layer {layer_names[mid]}", bounds), p)
    figs["gram"] = rel

    sv = study.top_singular_values(stats[mid], options.n_singular)
    p, rel = run.figure_path("fig3_singular_values.png")
    plots.save(plots.singular_values(sv, f"top singular values, layer {layer_names[mid]}"), p)
    figs["singular"] = rel

    F = [np.asarray(spectral.dct_gram(jnp.asarray(np.asarray(st.pos, np.float32)))) for st in stats]
    p, rel = run.figure_path("fig3_dct.png")
    plots.save(plots.dct_heatmaps(F, layer_names, options.n_freq, suptitle=
                                  "|2-D DCT| of the normalized pos Gram (first 10, DC dropped)"), p)
    figs["dct"] = rel

    na = _unavailable(cfg, per_layer, multi_doc, T, int(stats[0].pos.shape[-1]))
    p, rel = run.figure_path("metrics_by_layer.png")
    plots.save(_metrics_figure(per_layer, na, _arch_of(model)), p)
    figs["metrics"] = rel

    scatter_layers = sorted({0, mid, n_layers - 1})
    names = {j: inputs.doc_names[j][:24] for j in np.unique(labels)}
    tok_figs = []
    for layer in scatter_layers if tok_clusters else []:
        r = tok_clusters[layer]
        p, rel = run.figure_path(f"cvec_vs_raw_{layer_names[layer]}.png")
        plots.save(plots.paired_scatter(
            r["pca_cvec"], r["pca_raw"], r["token_labels"],
            [f"cvec, Tr(Σ_B Σ_W⁺) = {r['compactness_cvec']:.3g}",
             f"raw states, Tr(Σ_B Σ_W⁺) = {r['compactness_raw']:.3g}"],
            f"top-2 PCs by document, {layer_names[layer]}", names), p)
        tok_figs.append((layer_names[layer], rel))
    if thm1:
        r = thm1[mid]
        p, rel = run.figure_path("theorem1_mid_layer.png")
        plots.save(plots.theorem1_curves(r["ks"], r["lhs"], r["rhs_printed"], r["ms"],
                                         f"eq. (6) on the pos Gram, {layer_names[mid]} "
                                         "(printed constant 6/(8k)^m)"), p)
        figs["theorem1"] = rel
    ctx_figs = []
    for layer in scatter_layers:
        ctx = np.asarray(stats[layer].ctx, np.float64)
        ctx_c = ctx - ctx.mean(0)
        _, _, vt = np.linalg.svd(ctx_c, full_matrices=False)
        p, rel = run.figure_path(f"ctx_clusters_{layer_names[layer]}.png")
        plots.save(plots.grouped_scatter(ctx_c @ vt[:2].T, labels,
                                         f"ctx by document, top-2 PCs, {layer_names[layer]}", names), p)
        ctx_figs.append(rel)

    # ---------------------------------------------------------------- report sections
    label = "all-MiniLM-L6-v2" if cfg.model == "minilm" else (
        path.name if Path(cfg.model).exists() else cfg.model)  # a Hugging Face name: not its snapshot hash
    if hasattr(model, "max_positions") and hasattr(model, "step"):  # a ToyRun
        label = f"toy run {path.name}, {model.config.task} task, step {model.step}"
        arch_name = "ToyTransformer"
    else:
        arch_name = type(model.config).__name__
    model_desc = f"{arch_name} ({label}), L = {n_layers - 1}, d = {X.shape[1]}"
    C = cfg.n_contexts
    tokens = C * cfg.seq_len
    s_setup = Section("Setup")
    s_setup.paragraphs += [
        f"Model: {model_desc}. Corpus: {cfg.corpus} ({len(inputs.doc_names)} documents, "
        f"{inputs.n_tokens_corpus} tokens). C = {C} windows ({cfg.n_docs} documents × "
        f"{cfg.windows_per_doc} non-overlapping windows each); T = {cfg.seq_len} tokens per window, "
        f"{T} positions analysed ({'first token dropped' if cfg.drop_first else 'first token kept'}).",
        f"Every one of the {n_layers} hidden states was decomposed exactly (Song & Zhong eqs. "
        f"(2)-(3)) in one streaming pass with a {cfg.compute_dtype} forward and "
        f"{cfg.accum_dtype} accumulation; no C×T×d tensor "
        f"was formed. Forward + decomposition: {t_extract:.1f} s for {tokens} tokens × "
        f"{n_layers} states ({tokens * n_layers / t_extract:,.0f} token·layers/s, compile "
        f"included); whole study {t_total:.1f} s.",
        "Conventions: " + ", ".join([
            "first token dropped" if cfg.drop_first else "first token kept",
            "final norm applied" if conv["final_norm_applied"] else "no final norm (residual stream)",
            f"BOS id {conv['bos_prepended']} prepended" if conv["bos_prepended"] is not None else "no BOS inserted",
            "causal BERT mask" if cfg.causal else "model's own mask",
            "relative norm against centred states" if cfg.centered_relative_norm
            else "relative norm against raw states with μ (source code)"]) + ".",
    ]
    rows = []
    for name, m in zip(layer_names, per_layer):
        rows.append([name] + [_cell(m, k, na) for k in (
            "screenot_rank", "stable_rank", "relative_norm", "incoherence_max", "incoherence_mean",
            "intra_similarity", "inter_similarity", "cluster_compactness", "dct_low_freq_energy",
            "share_pos", "share_ctx", "share_resid")])
    s_layers = Section("Per-layer geometry (Song & Zhong Tables 1, 3, 4, 5; App. C)")
    s_layers.table(
        ["layer", "rank (ScreeNOT k=%d)" % cfg.screenot_k, "stable rank", "relative norm",
         "incoh max", "incoh mean", "intra sim", "inter sim", "compactness",
         "DCT low-freq energy", "pos share", "ctx share", "resid share"], rows,
        "Rank and stable rank of P (T×d); relative norm ‖P_tiled‖op/‖M‖op; incoherence "
        "max_{t,c}|cos(pos_t, ctx_c)| (exact, over all T·C pairs) and its mean; mean |cos| of ctx "
        "within / between documents; Tr(Σ_B Σ_W⁺) of ctx; share of the normalized pos Gram's "
        "DCT energy in the first 10×10 frequencies; ANOVA variance shares (sum to 1).")
    s_layers.figure(figs["metrics"], "Per-layer metrics (layer 0 = embedding output).")
    keys = ["screenot_rank", "stable_rank", "relative_norm", "intra_similarity",
            "inter_similarity", "incoherence_max", "incoherence_mean"]
    s_sum = Section("Table 1 (mean ± std across layers)")
    s_sum.table(["metric", "mean", "std", "layers"],
                [[k, summary[k]["mean"], summary[k]["std"], summary[k]["n_layers"]] if k in summary
                 else [k, na.get(k, "n/a"), "", 0] for k in keys])
    if "cluster_compactness" not in na and C - cfg.n_docs < X.shape[1]:
        s_sum.paragraphs.append(
            f"Caution: the context-level compactness uses C = {C} windows in d = {X.shape[1]} "
            f"dimensions (fewer than d + K = {X.shape[1] + cfg.n_docs}), so Σ_W is singular and its "
            "pseudo-inverse inflates Tr(Σ_B Σ_W⁺); use more windows for a reliable value.")
    s_sum.paragraphs.append(
        "For scale: two independent isotropic directions in d = %d dimensions have "
        "E|cos| = %.3f, so an incoherence near or below that means pos and ctx are as "
        "unrelated as random directions (the `song_zhong.incoherence_baseline` claims check this "
        "baseline by Monte Carlo)." % (X.shape[1], float(_mean_abs_cos(X.shape[1]))))
    s_fig = Section("Figures (Song & Zhong Figs. 1-3, 24-26)")
    s_fig.figure(figs["pca"], "Fig. 1: PCA of pos and cvec by layer.")
    s_fig.figure(figs["pca3d"], "Fig. 1 in 3-D: the spiral of pos on P's top-3 PCs.")
    s_fig.figure(figs["gram"], "Fig. 2: normalized Gram of [pos; ctx] (lines: pos block, documents).")
    s_fig.figure(figs["singular"], "Fig. 3 left: σ_j/σ_1 of P (tiled over C), Cvec and R.")
    s_fig.figure(figs["dct"], "Fig. 3 right: low-frequency DCT coefficients of the pos Gram.")
    for rel in ctx_figs:
        s_fig.figure(rel, "App. C: context means coloured by document.")
    extra = _extra_sections(cfg, layer_names, per_layer, summary, thm1, tok_figs, ood_layers,
                            figs, model_desc, ood_dropped, na)
    metrics = {
        "model": model_desc, "n_contexts": C, "n_positions": T, "layers": layer_names,
        "per_layer": per_layer, "summary": summary,
        "singular_values_mid_layer": {k: v.tolist() for k, v in sv.items()},
        "timing_s": {"forward_and_decomposition": t_extract, "total": t_total},
        "doc_labels": {str(j): inputs.doc_names[j] for j in np.unique(labels)},
        "theorem1": [{k: v for k, v in r.items()} for r in thm1],
        "ood_fraction_of_characters_dropped": ood_dropped,
        "not_available": na,
        "model_conventions": conv,
    }
    return [s_setup, s_layers, s_sum, *extra, s_fig], metrics


def _fmt_ms(na: dict | None, summary: dict, key: str) -> str:
    v = summary.get(key)
    return (na or {}).get(key, "—") if v is None else f"{v['mean']:.3g} ({v['std']:.2g})"


def _unavailable(cfg: GeometryConfig, per_layer: list[dict], multi_doc: bool, T: int, d: int) -> dict:
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


def _cell(m: dict, key: str, na: dict):
    """A table cell: the value, or the reason it is not available."""
    v = m.get(key)
    return na.get(key, "n/a") if v is None else v


# Per-layer figure: metric key -> (panel title, Table 1 column of the paper's row, or None).
_METRIC_PANELS = {
    "screenot_rank": ("rank of P (ScreeNOT)", 2),
    "stable_rank": ("stable rank of P", None),
    "relative_norm": ("relative norm of P", 3),
    "incoherence_max": ("incoherence: max |cos(pos, ctx)|", 6),
    "intra_similarity": ("ctx |cos| within documents", 5),
    "inter_similarity": ("ctx |cos| between documents", 4),
    "cluster_compactness": ("ctx compactness Tr(Σ_B Σ_W⁺)", None),
    "dct_low_freq_energy": ("pos Gram: low-frequency DCT energy", None),
    "share_pos": ("variance share of pos", None),
}


def _arch_of(model) -> str:
    """'BERT', 'GPT-2' or 'NanoGPT': which of the paper's Table 1 rows a loaded model is closest to."""
    if hasattr(model, "max_positions") and hasattr(model, "step"):  # a ToyRun
        return "NanoGPT"
    return "BERT" if "bert" in type(getattr(model, "config", None)).__name__.lower() else "GPT-2"


def _paper_row(arch: str) -> tuple | None:
    """The paper's Table 1 row for the architecture (WikiText where it has one)."""
    rows = [r for r in PAPER_TABLE1 if r[0] == arch]
    wiki = [r for r in rows if r[1] == "WikiText"]
    return (wiki or rows or [None])[0]


def _paper_value(cell: str) -> float | None:
    try:
        return float(cell.split()[0])
    except (ValueError, IndexError, AttributeError):
        return None


def _metrics_figure(per_layer: list[dict], na: dict, arch: str):
    """Per-layer metrics with human titles, the paper's mean (closest row) as a dashed line, and
    "n/a: ..." written in panels a run's sizes cannot fill."""
    from geomjax import plots

    row = _paper_row(arch)
    series, refs, missing = {}, {}, {}
    for key, (title, col) in _METRIC_PANELS.items():
        series[title] = [m[key] if m.get(key) is not None else np.nan for m in per_layer]
        if key in na:
            missing[title] = na[key]
        ref = _paper_value(row[col]) if row is not None and col is not None else None
        if ref is not None:
            refs[title] = (ref, f"paper: {row[0]}, {row[1]} (mean)")
    return plots.metrics_by_layer(series, "Per-layer metrics (dashed: the paper's Table 1 mean)",
                                  references=refs, missing=missing)


def _departure_sentence(summary: dict, arch: str) -> str:
    """One sentence: where this run's layer means depart from the paper's closest Table 1 row."""
    row = _paper_row(arch)
    if row is None:
        return ""
    parts = []
    for key, (title, col) in _METRIC_PANELS.items():
        ref = _paper_value(row[col]) if col is not None else None
        ours = summary.get(key, {}).get("mean") if isinstance(summary.get(key), dict) else None
        if ref is None or ours is None or ref == 0:
            continue
        parts.append((abs(ours / ref - 1), f"{title} {ours:.3g} vs {ref:.3g} ({100 * (ours / ref - 1):+.0f}%)"))
    if not parts:
        return ""
    parts.sort(reverse=True)
    return (f"Against the paper's {row[0]} row on {row[1]} (Table 1 means across layers), this run "
            f"departs most in " + "; then ".join(p for _, p in parts[:2])
            + (f"; the other compared metrics: " + "; ".join(p for _, p in parts[2:]) if parts[2:] else "")
            + ".")


def _extra_sections(cfg, layer_names, per_layer, summary, thm1, tok_figs, ood_layers, figs,
                    model_desc, ood_dropped=0.0, na=None):
    """Report sections for Theorem 1 on real layers, App. C token clusters, Table 2 (OOD) and
    the paper's own Table 1-2 numbers beside ours (with one sentence on the largest departures)."""
    na = na or {}
    out = []
    if thm1:
        s = Section("Theorem 1 on the real positional Grams (eq. (6))")
        s.paragraphs.append(
            "For every layer, G = P Pᵀ (pos re-centred, scaled to trace T). LHS(k) is (1/T)"
            "‖G − F_{≤k}B(F_{≤k}B)ᵀ‖op for the best PSD fit in the printed low-frequency basis "
            "(an upper bound on the theorem's min over B); RHS(k, m) = 6/(8k)^m ‖Δ^{(m,m)}G̃‖max "
            "as printed, and with the corrected constant (claims `song_zhong.theorem1.*`). "
            "A ratio ≤ 1 means eq. (6) holds at that (k, m); 'certified' violations are (k, m) "
            "where even a lower bound over all B exceeds the RHS. k = 1..%d, m = 1..4."
            % len(thm1[0]["ks"]))
        rows = []
        for name, r in zip(layer_names, thm1):
            rows.append([name, r["max_ratio_printed"], str(tuple(r["argmax_printed"])),
                         r["n_certified_violations_printed"], r["max_ratio_corrected"],
                         r["lhs_over_opnorm"][min(10, len(r["ks"])) - 1]])
        s.table(["layer", "max LHS/RHS (printed)", "at (k, m)", "certified violations (printed)",
                 "max LHS/RHS (corrected)", "LHS(k=10) / (‖G‖op/T)"], rows)
        if "theorem1" in figs:
            s.figure(figs["theorem1"], "Eq. (6) on the middle layer's pos Gram: LHS vs RHS per m.")
        out.append(s)
    if tok_figs or any("compactness_cvec" in m for m in per_layer):
        s = Section("Clusters of tokens: cvec vs raw states (App. C, Figs. 24-26)")
        s.paragraphs.append(
            f"Tr(Σ_B Σ_W⁺) by document (larger = better separated) of token-level cvec = h − μ − "
            f"pos and of the raw states h, on {cfg.n_cluster_windows} windows per document; the "
            f"context means ctx (one point per window) for comparison. The paper reports cvec "
            f"better separated than raw states.")
        n_tok = per_layer[0].get("n_cluster_tokens")
        d_model = per_layer[0].get("d_model")
        if n_tok is not None and d_model is not None and n_tok - cfg.n_docs < d_model:
            s.paragraphs.append(
                f"Caution: {n_tok} tokens in {cfg.n_docs} documents is fewer than d + K = "
                f"{d_model + cfg.n_docs}, so Σ_W is singular and its pseudo-inverse inflates "
                "the token-level values; use more --cluster-windows.")
        s.table(["layer", "ctx", "cvec (tokens)", "raw (tokens)", "cvec / raw"],
                [[n, _cell(m, "cluster_compactness", na), _cell(m, "compactness_cvec", na),
                  _cell(m, "compactness_raw", na),
                  (m["compactness_cvec"] / m["compactness_raw"]
                   if m.get("compactness_raw") else None)]
                 for n, m in zip(layer_names, per_layer)])
        for name, rel in tok_figs:
            s.figure(rel, f"Figs. 24-26: cvec (left) vs raw states (right), {name}.")
        out.append(s)
    if ood_layers is not None:
        s = Section(f"Table 2: out of distribution ({cfg.ood_corpus})")
        s.paragraphs.append(
            f"The same model and sizes on {cfg.ood_corpus} windows (random, non-overlapping): "
            "the low rank and the relative norm of the positional basis should not depend on "
            "the text (paper: 'positional basis is agnostic to contexts')."
            + (f" Characters outside the character model's vocabulary were removed from the "
               f"{cfg.ood_corpus} text first: {100 * ood_dropped:.2f}% of its characters."
               if ood_dropped else ""))
        s.table(["corpus", "rank estimate", "stable rank", "relative norm"], [
            [cfg.corpus, _fmt_ms(na, summary, "screenot_rank"), _fmt_ms(na, summary, "stable_rank"),
             _fmt_ms(na, summary, "relative_norm")],
            [cfg.ood_corpus, _fmt_ms(na, summary, "ood_screenot_rank"),
             _fmt_ms(na, summary, "ood_stable_rank"), _fmt_ms(na, summary, "ood_relative_norm")]],
            "mean (std) across layers")
        out.append(s)
    s = Section("Beside the paper (Song & Zhong Tables 1-2, quoted)")
    s.paragraphs.append(
        "The paper's rows are its published numbers (reference values, not recomputed here: "
        "those models are not available offline). Our row is this run. MiniLM is a 6-layer "
        "BERT-architecture sentence encoder, so the closest paper row is BERT on WikiText.")
    arch = ("BERT" if model_desc.startswith("Bert") else
            "toy GPT-2-like" if model_desc.startswith("Toy") else "GPT-2")
    departure = _departure_sentence(summary, "BERT" if arch == "BERT" else
                                    "NanoGPT" if arch.startswith("toy") else "GPT-2")
    if departure:
        s.paragraphs.append(departure)
    ours = [f"this run: {'MiniLM' if cfg.model == 'minilm' else Path(cfg.model).name} ({arch} arch.)",
            cfg.corpus, _fmt_ms(na, summary, "screenot_rank"), _fmt_ms(na, summary, "relative_norm"),
            _fmt_ms(na, summary, "inter_similarity"), _fmt_ms(na, summary, "intra_similarity"),
            _fmt_ms(na, summary, "incoherence_max")]
    s.table(["model", "corpus", "rank estimate", "relative norm", "inter-cluster sim",
             "intra-cluster sim", "incoh (max)"],
            [ours] + [[f"paper: {r[0]}", *r[1:]] for r in PAPER_TABLE1],
            "Table 1: mean (std) across layers")
    if ood_layers is not None:
        s.table(["model", "OOD corpus", "rank estimate", "relative norm"],
                [[ours[0], cfg.ood_corpus, _fmt_ms(na, summary, "ood_screenot_rank"),
                  _fmt_ms(na, summary, "ood_relative_norm")]]
                + [[f"paper: {r[0]}", *r[1:]] for r in PAPER_TABLE2], "Table 2")
    out.append(s)
    return out


def _mean_abs_cos(d: int) -> float:
    """E|cos(u, v)| for independent isotropic u, v in R^d: Γ(d/2)/(√π Γ((d+1)/2))."""
    from math import exp, lgamma, pi, sqrt

    return exp(lgamma(d / 2) - lgamma((d + 1) / 2)) / sqrt(pi)


def validate_claims_selection(select) -> None:
    """Refuse a ``--source`` that matches no registered claim (before a run directory exists).

    Raises:
      GeomjaxError: naming the selection and the available sources.
    """
    from geomjax import claims

    if select is None:
        return
    if not claims.select_claims(select):
        sources = sorted({c.id.split(".", 1)[0] for c in claims.all_claims()})
        raise GeomjaxError(f"--source {select!r} matches no claim; use a source ({', '.join(sources)}), "
                           "an id glob such as 'song_zhong.theorem1.*', or a substring of a printed source")


def claims_summary(counts: dict) -> str:
    """'n hold, n do not hold, n inconclusive' from verdict counts."""
    return (f"{counts.get('holds', 0)} hold, {counts.get('does not hold', 0)} do not hold, "
            f"{counts.get('inconclusive', 0)} inconclusive")


def run_claims(run: report.RunDir, select=None, budget: str = "quick", seed: int = 0,
               progress: bool = False):
    """Check the registered claims (``geomjax.claims.run``); writes claims.json / claims.md.

    Returns:
      (sections, metrics) with one table row per claim; ``metrics["counts"]`` counts verdicts.
    """
    from geomjax import claims

    results = claims.run(select=select, budget=budget, seed=seed, out_dir=run.path, progress=progress)
    rows = []
    for r in results:
        d = r.to_dict()
        rows.append([d["id"], d["source"], d.get("verdict"), _short(d.get("predicted")),
                     _short(d.get("estimate")), _short(d.get("sem")), _short(d.get("z_score"))])
    counts = {v: sum(r.verdict == v for r in results) for v in ("holds", "does not hold", "inconclusive")}
    s = Section(f"Claims checked ({len(results)}: {claims_summary(counts)})")
    s.paragraphs.append(
        "Each claim declares a margin (the error that would make it wrong) and is checked against an "
        "independent computation: it holds when |estimate − prediction| + 5·sem ≤ margin, does not hold "
        "when |estimate − prediction| − 5·sem > margin on two independent computations (the witnesses), "
        "and is inconclusive otherwise (the reason is given). claims.md gives the margins and their "
        "origin, the detectable error, the witnesses and the corrected forms. For inequality claims "
        "(lhs ≤ rhs on every instance) the 'predicted' column is the right side and 'estimate' the left "
        "side, at the worst instance.")
    s.table(["id", "source", "verdict", "predicted", "estimate", "sem", "z"], rows)
    sections = [s]
    extra = {}
    for name, hook in _claim_report_hooks(results):
        more, m = hook(run, budget=budget, seed=seed)
        sections.extend(more)
        extra[name] = m
    metrics = {"budget": budget, "seed": seed, "counts": counts, "results": [r.to_dict() for r in results]}
    if extra:
        metrics["figures"] = extra
    return sections, metrics


def _claim_report_hooks(results):
    """``report_sections`` of every claims source module with a checked claim, in source order.

    A module ``geomjax.claims.<source>`` may define
    ``report_sections(run: RunDir, *, budget: str, seed: int) -> (list[Section], dict)`` to add its
    figures (e.g. Wertich Fig. 5.1, Bao Figs. 2-5) to the ``verify`` report; it runs once when any
    of that module's claims was selected.
    """
    import importlib

    names = sorted({r.id.split(".", 1)[0] for r in results})
    for name in names:
        try:
            mod = importlib.import_module(f"geomjax.claims.{name}")
        except ImportError:
            continue
        hook = getattr(mod, "report_sections", None)
        if callable(hook):
            yield name, hook


def _short(x):
    """A table cell for a claim value: numbers as floats, long vectors abbreviated as in claims.md
    (first three values and the count)."""
    if x is None:
        return "—"
    if isinstance(x, (int, float, np.floating, np.integer)):
        return float(x)
    a = np.asarray(x)
    if a.size == 1 and np.issubdtype(a.dtype, np.number):
        return float(a.reshape(()))
    if a.ndim >= 1 and np.issubdtype(a.dtype, np.number):
        flat = a.reshape(-1)
        vals = ", ".join(f"{float(v):.4g}" for v in flat[:3])
        return f"[{vals}, … ({flat.size} values)]" if flat.size > 4 else \
            "[" + ", ".join(f"{float(v):.4g}" for v in flat) + "]"
    return str(x)[:40]


def merged_history(run_dir: str | Path) -> dict:
    """The whole training history of a run directory across its sessions.

    ``geomjax.train.fit`` writes ``history.json`` for the first session and
    ``history_from_<step>.json`` for every resumed one; they are merged by step (a later session
    wins where they overlap, which a bit-exact resume makes identical).

    Returns:
      dict with ``steps`` (n,) int array, ``train`` {name: (n,) array}, ``evals`` (list of dicts
      sorted by step), ``seconds`` (total), ``sessions`` (count) and ``gaps`` (list of
      (first, last) step ranges no session recorded, e.g. after an interrupted session).
    """
    import json

    files = sorted(Path(run_dir).glob("history_from_*.json"))
    first = Path(run_dir) / "history.json"
    files = ([first] if first.is_file() else []) + files
    steps: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    seconds = 0.0
    for f in files:
        h = json.loads(f.read_text())
        for i, st in enumerate(h.get("steps", [])):
            steps[int(st)] = {k: v[i] for k, v in h.get("train", {}).items()}
        for e in h.get("evals", []):
            evals[int(e["step"])] = e
        seconds += float(h.get("seconds", 0.0))
    order = sorted(steps)
    names = sorted({k for v in steps.values() for k in v})
    gaps = ([(0, order[0] - 1)] if order and order[0] > 0 else []) + [
        (a + 1, b - 1) for a, b in zip(order, order[1:]) if b > a + 1]
    return {"steps": np.asarray(order, np.int64),
            "train": {k: np.asarray([steps[i].get(k, np.nan) for i in order], np.float64) for k in names},
            "evals": [evals[k] for k in sorted(evals)], "seconds": seconds, "sessions": len(files),
            "gaps": gaps}


def run_training(task: str, preset: str, run: report.RunDir, *, resume: bool = True,
                 data_dir: str | None = None, devices: int | None = None, progress: bool = True):
    """Train a toy transformer preset (``geomjax.train.get_config(task, preset)``) in ``run``.

    Checkpoints go to ``run/checkpoints`` and a re-run resumes from the latest one; the report
    covers the whole history of every session (:func:`merged_history`). ``resume=False`` starts
    over: the directory's checkpoints and histories are deleted first.
    """
    import shutil

    from geomjax import plots, train

    cfg = train.get_config(task, preset)
    if not resume:
        shutil.rmtree(run.path / "checkpoints", ignore_errors=True)
        for f in run.path.glob("history*.json"):
            f.unlink()
    res = train.fit(cfg, run_dir=run.path, data_dir=data_dir, resume=resume,
                    mesh=_mesh(devices), progress=progress)
    h = merged_history(run.path)
    n_session = len(res.history.steps)
    s = Section(f"Training: {task} ({preset})")
    last = int(h["steps"][-1]) + 1 if len(h["steps"]) else 0
    s.paragraphs.append(
        f"{last} steps in all ({h['sessions']} session{'s' if h['sessions'] != 1 else ''}, "
        f"{h['seconds']:.1f} s of training); this session: {n_session} steps"
        + (f", resumed from step {res.resumed_from}" if res.resumed_from is not None else "") + "."
        + (" Steps not recorded (a session interrupted before it wrote its history): "
           + ", ".join(f"{a}-{b}" for a, b in h["gaps"]) + "." if h["gaps"] else ""))
    if h["evals"]:
        names = [k for k in h["evals"][0] if k != "step"]
        s.table(["step"] + names, [[e["step"]] + [e.get(k) for k in names] for e in h["evals"]],
                "Evaluation (every session)")
    if len(h["steps"]):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(h["steps"], h["train"]["loss"], lw=0.8, label="train")
        if h["evals"] and "loss" in h["evals"][0]:
            ax.plot([e["step"] for e in h["evals"]], [e["loss"] for e in h["evals"]], "o-", label="eval")
        if res.resumed_from:
            ax.axvline(res.resumed_from, color="0.6", ls=":", lw=0.8, label="resumed")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(loc="best")
        p, rel = run.figure_path("loss.png")
        plots.save(fig, p)
        s.figure(rel, "Loss curves (all sessions)")
    metrics = {"task": task, "preset": preset, "evals": h["evals"], "resumed_from": res.resumed_from,
               "steps_total": last, "steps_this_session": n_session, "sessions": h["sessions"],
               "final_train_loss": float(h["train"]["loss"][-1]) if len(h["steps"]) else None}
    return [s], metrics, cfg


def validate_training(task: str, preset: str, data_dir: str | None = None) -> None:
    """Refuse a task/preset pair or data folder that ``geomjax train`` cannot use, before any work.

    Raises:
      GeomjaxError: naming the allowed values.
    """
    from geomjax import data, train

    try:
        train.get_config(task, preset)
    except (ValueError, KeyError) as e:
        raise GeomjaxError(f"geomjax train {task} --preset {preset}: {e}") from None
    data.data_dir_override(data_dir)


def meta_line(cfg: GeometryConfig, n_positions: int | None = None) -> dict:
    """Header of a geometry report (T as the window length and as the positions analysed)."""
    import geomjax

    T = cfg.seq_len
    analysed = n_positions if n_positions is not None else T - int(cfg.drop_first)
    note = "first token dropped" if cfg.drop_first else "first token kept"
    return {"model": cfg.model, "corpus": cfg.corpus,
            "C": f"{cfg.n_contexts} windows ({cfg.n_docs} document{'s' if cfg.n_docs != 1 else ''} × "
                 f"{cfg.windows_per_doc})",
            "T": f"{T} tokens, {analysed} positions analysed ({note})", "seed": cfg.seed,
            "geomjax": getattr(geomjax, "__version__", "dev"),
            "jax": jax.__version__, "backend": jax.default_backend(),
            "devices": len(jax.devices())}
