"""Song & Zhong §2, Table 1: what the corpora sweep compares with (the one place).

The numbers are those of :data:`geomjax.analysis.report.PAPER_TABLE1` (typed once, there), row BERT on
WikiText — the source's closest setting to the bundled MiniLM (a distilled BERT) on WikiText-2:
mean (std) across layers of 6.4K samples.
"""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber
from geomjax.analysis.report import PAPER_TABLE1

# (this run's summary key, Table 1 column, quantity in words)
COLUMNS = (
    ("screenot_rank", 2, "rank estimate of the positional basis (ScreeNOT), mean (std) across layers"),
    ("relative_norm", 3, "relative norm ‖P‖_op / ‖M‖_op of the positional basis, mean (std) across layers"),
    ("inter_similarity", 4, "inter-cluster cosine similarity of ctx, mean (std) across layers"),
    ("intra_similarity", 5, "intra-cluster cosine similarity of ctx, mean (std) across layers"),
    ("incoherence_mean", 6, "incoherence: mean |cos(pos_t, ctx_c)| over (t, c), mean (std) across layers"),
)
ROW = next(r for r in PAPER_TABLE1 if r[:2] == ("BERT", "WikiText"))

SOURCE = Source(
    citation="Song & Zhong, Uncovering hidden geometry in transformers via disentangling position and context, "
             "§2 (eqs. (2)–(3)) and Table 1",
    setting="pretrained BERT (12 layers, d 768) on WikiText, 6.4K windows of T = 512 (topics: T = 128), "
            "mean (std) across layers; the same table for GPT-2, BLOOM, Llama 2 and NanoGPT.",
    numbers=tuple(SourceNumber(key, quantity, "§2, Table 1 (BERT, WikiText)", ROW[col])
                  for key, col, quantity in COLUMNS),
)

# Table 5 (App. B.2), BERT on WikiText: the relative norm at each of the 13 hidden states (embedding output,
# layers 1-12); their mean and std across layers are Table 1's 0.24 (0.06)
TABLE5_BERT_WIKITEXT = (0.356, 0.293, 0.267, 0.265, 0.263, 0.250, 0.246, 0.269, 0.278, 0.217, 0.172, 0.118, 0.122)
