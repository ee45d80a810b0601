"""Song & Zhong §4 (Figs. 4–5, eqs. (7)–(8), App. D.1): what the attention-dissection experiment reports.

The one place the source's setting and findings live. ``PAPER_HEADS`` maps each head type to the
GPT-2 head the paper shows for it and the eq. (7) component it finds dominant (§4.1, Fig. 4).
"""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

PAPER_HEADS = {
    "self_token": ("GPT-2 L0H1", "cvec_cvec"),
    "neighbours": ("GPT-2 L2H2", "pos_pos"),
    "copying": ("GPT-2 L5H1", "shifted diagonal (self-token and neighbour parts combined)"),
}

SOURCE = Source(
    citation="Song & Zhong, Uncovering hidden geometry in transformers via disentangling position and context, "
             "§4.1–4.2 (Figs. 4–5, eqs. (7)–(8)) and App. D.1",
    setting="pretrained GPT-2 (12 layers × 12 heads), μ and pos from OpenWebText windows, one probe of 8 random "
            "tokens repeated; W = W_q W_kᵀ/√d_head of layer 6 rotated by pos's right singular vectors.",
    numbers=(
        SourceNumber("self_token", "self-token heads: dominant eq. (7) part", "§4.1, Fig. 4a (GPT-2 L0H1)",
                     "cvec-cvec"),
        SourceNumber("neighbours", "neighbour heads: dominant eq. (7) part", "§4.1, Fig. 4b (GPT-2 L2H2)", "pos-pos"),
        SourceNumber("copying", "copying (induction) heads exist", "§4.1, Fig. 4c (GPT-2 L5H1)",
                     "yes: shifted diagonal"),
        SourceNumber("exact_sum", "eq. (7): the four parts sum to the QK scores", "§4.1, eq. (7)",
                     "identity (μ = 0 assumed)"),
        SourceNumber("w_structure", "W = V L Vᵀ + D + noise: rotated off-diagonal W concentrates in the top-left block",
                     "§4.2, eq. (8), Fig. 5", "low-rank block (no number printed)"),
    ),
)
