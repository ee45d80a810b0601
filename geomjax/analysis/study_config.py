"""Configuration of the per-layer geometry study (``geomjax geometry`` / ``demo``; config.json).

A module of its own, with no geomjax import, so the command line can build its options (and
``geomjax --help``) without loading JAX models: :func:`geomjax.analysis.study.run` runs a
:class:`GeometryConfig`.
"""

from __future__ import annotations

import dataclasses

__all__ = ["GeometryConfig", "PRESETS", "CliOption", "cli_option", "sweep_models"]


@dataclasses.dataclass(frozen=True)
class CliOption:
    """How a :class:`GeometryConfig` field appears on the command line (``geomjax geometry`` / ``demo``):
    the option is declared once, with its field, and :mod:`geomjax.cli` builds the parser and the config
    from these records.

    Attributes:
      help: the option's help text.
      flag: the long option (default: ``--`` + the field name with dashes).
      short: an optional short option (``-T``).
      group: the help group ("model and data", "conventions", "execution").
      choices: the allowed values, if a closed set.
      negate: a boolean field set to False by the flag (``--keep-first`` clears ``drop_first``).
      none_word: a word the user passes for None (``--ood-corpus none``).
      preset: a size that ``--preset`` fills unless the flag is given.
    """

    help: str
    flag: str | None = None
    short: str | None = None
    group: str = "model and data"
    choices: tuple[str, ...] | None = None
    negate: bool = False
    none_word: str | None = None
    preset: bool = False


def _opt(default, **kw):
    """A config field with its command-line option (:class:`CliOption`) in the field's metadata."""
    return dataclasses.field(default=default, metadata={"cli": CliOption(**kw)})


def cli_option(field: dataclasses.Field) -> CliOption | None:
    """The :class:`CliOption` of a :class:`GeometryConfig` field, None for a field without a flag."""
    return field.metadata.get("cli")



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
      corpus: wikitext2 | shakespeare | stdlib | pydoc | a text file or directory (one document per
        file: the offline route to the paper's sizes) | hf:NAME[:CONFIG[:SPLIT]] (WikiText is split
        into its articles on their " = Title = " headings; other datasets: one record per document).
      join_lines: with an ``hf:`` corpus, join every N consecutive records into one document (None:
        the dataset's own boundaries, as above).
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
      gram: the statistics' Grams: "highest" (float32 at HIGHEST precision) or "bf16x3" (three bfloat16
        products with float32 accumulation: tensor cores; MiniLM's second moments within 2.2e-6 of float64
        against 1.1e-7, no ScreeNOT rank changed; benchmarks/RESULTS.md).
      screenot_k: ScreeNOT's upper bound on the rank (source: 20).
      n_cvec: sequences of the fresh draw used for cvec/resid figures (source: 32; 10 plotted).
      devices: shard the windows over this many devices (None: one device).
      ood_corpus: second corpus for Table 2 (rank and relative norm out of distribution; the
        paper used GitHub code: "stdlib" is the shipped snapshot of CPython 3.11.7's standard
        library source, the same on every interpreter; DATA.md); None: skip.
      n_cluster_windows: windows per document whose token-level cvec and raw states go into the
        App. C compactness (Figs. 24-26); 0: skip.
      theorem1: evaluate eq. (6) of Theorem 1 on every layer's pos Gram.
      figures: draw the study's figures (``geomjax.analysis.plots.study_figures``); False: metrics.json and
        the report's tables only (a sweep of many runs, a batch job), the figures' host time saved.
      cluster_mu: centring of ctx for Table 1's intra/inter cluster similarity: "topics" (default: μ of
        the topic windows themselves) or "general" (μ of the separate uniform draw of ``n_cvec`` corpus
        windows, as the Song & Zhong topics script centres the topic windows on μ from its general-corpus
        run).
    """

    model: str = _opt("minilm", help=(
        "'minilm' (the offline MiniLM package), a local Hugging Face model directory / cache entry with "
        "config.json + model.safetensors, or a Hugging Face name (gpt2, meta-llama/Llama-2-7b-hf, "
        "bigscience/bloom-560m: cached or downloaded), NAME@REVISION for a training checkpoint "
        "(EleutherAI/pythia-70m@step1000); several, comma-separated, make a sweep with one report of the "
        "metrics over training (NAME@step1000,step2000,...); GPT-2, BERT, Llama, Mistral, BLOOM, "
        "GPT-NeoX/Pythia, Qwen2, Qwen3, Gemma, Gemma2, Gemma3"))
    corpus: str = _opt("wikitext2", help="wikitext2 | shakespeare | stdlib | pydoc | a text file or directory")
    data_dir: str | None = _opt(None, help=(
        "folder replacing the bundled corpora: tinyshakespeare/input.txt, wikitext-2/{valid,test}.txt "
        "(default: $GEOMJAX_DATA, else the copies shipped with geomjax; see DATA.md)"))
    n_docs: int = _opt(4, preset=True, help="documents to draw windows from (their labels feed the cluster metrics)")
    windows_per_doc: int = _opt(64, preset=True, help="non-overlapping windows per document (C = n_docs x windows_per_doc)")
    seq_len: int = _opt(128, preset=True, short="-T", help="window length in tokens (before dropping the first)")
    batch_size: int = _opt(16, preset=True, help="windows per forward pass")
    seed: int = _opt(0, help="every random choice derives from it")
    drop_first: bool = _opt(True, flag="--keep-first", negate=True, group="conventions",
                            help="keep position 0 (default: drop it, as the Song & Zhong code)")
    final_ln: bool | None = _opt(None, flag="--final-ln", group="conventions", help=(
        "use the last state after the final norm (Hugging Face's convention) or not; default: the family's "
        "as the Song & Zhong code ran it (GPT-2 without, every other family with)"))
    causal: bool = _opt(False, group="conventions", help="run BERT with a causal mask (the source code's is_decoder=True)")
    centered_relative_norm: bool = _opt(True, flag="--raw-relative-norm", negate=True, group="conventions",
                                        help="relative norm against raw states with the mean included (source code)")
    accum_dtype: str = _opt("float32", group="conventions", choices=("float32", "float64"),
                            help="dtype of the streaming sums")
    compute_dtype: str = _opt("float32", group="conventions", choices=("float32", "bfloat16", "float16"),
                              help="dtype of the model forward (mixed precision; statistics stay in --accum-dtype)")
    screenot_k: int = _opt(20, group="conventions", help="ScreeNOT's upper bound on the rank (source: 20)")
    n_cvec: int = 10
    devices: int | None = _opt(None, group="execution",
                               help="shard windows over this many devices of a 1-D 'data' mesh")
    ood_corpus: str | None = _opt("stdlib", none_word="none", help=(
        "second corpus for Table 2 (out of distribution; default 'stdlib', the shipped snapshot of CPython "
        "3.11.7's library source; 'stdlib-live': this interpreter's); 'none' to skip"))
    n_cluster_windows: int = _opt(8, flag="--cluster-windows", help=(
        "windows per document for the token-level cvec/raw compactness (App. C); 0 to skip"))
    theorem1: bool = _opt(True, flag="--no-theorem1", negate=True,
                          help="skip eq. (6) of Theorem 1 on the layers' pos Grams")
    figures: bool = _opt(True, flag="--no-figures", negate=True, group="execution",
                         help="draw no figures: metrics.json and the report's tables only")
    bos: bool = _opt(False, group="conventions",
                     help="prepend the model's BOS id to every window (dropped with the first position)")
    param_dtype: str | None = _opt(None, group="conventions", choices=("float32", "bfloat16", "float16"),
                                   help="convert the weights to this dtype (default: keep the checkpoint's)")
    cluster_mu: str = _opt("topics", group="conventions", choices=("topics", "general"), help=(
        "centre ctx on μ of the topic windows (default) or, as the Song & Zhong topics script, on μ of a "
        "separate general-corpus draw (Table 1 intra/inter similarity)"))
    join_lines: int | None = _opt(None, help=(
        "with --corpus hf:...: join every N consecutive records into one document (default: the dataset's own "
        "boundaries; WikiText is split into its articles)"))
    gram: str = _opt("highest", flag="--gram-precision", group="conventions", choices=("highest", "bf16x3"), help=(
        "the statistics' Grams: float32 at HIGHEST precision (default) or three bfloat16 products with float32 "
        "accumulation (tensor cores; ~2e-6 relative, benchmarks/RESULTS.md)"))

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
