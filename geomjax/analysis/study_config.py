"""Configuration of the per-layer geometry study (``geomjax geometry`` / ``demo``; config.json).

A module of its own, with no geomjax import, so the command line can build its options (and
``geomjax --help``) without loading JAX models: :func:`geomjax.analysis.study.run` runs a
:class:`GeometryConfig`.
"""

from __future__ import annotations

import dataclasses

__all__ = ["GeometryConfig", "PRESETS", "sweep_models"]


def sweep_models(spec: str) -> list[str]:
    """The checkpoints of a ``--model`` sweep: ``"A,B,C"`` lists them (directories, names, ``NAME@REV``), and
    after a ``NAME@REV`` entry a bare revision (no "/", "@" or path separator) is another revision of that
    name: ``"EleutherAI/pythia-70m@step1000,step2000"`` -> both revisions. One entry: a list of one."""
    out: list[str] = []
    base = None
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        if base is not None and "/" not in entry and "@" not in entry and "\\" not in entry:
            entry = f"{base}@{entry}"
        base = entry.partition("@")[0] if "@" in entry else None
        out.append(entry)
    return out


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
        ``geomjax.tools.extraction.mixed_precision``).
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
