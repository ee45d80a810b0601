"""Song & Zhong §5.1, App. A and E (Figs. 6a–c, 42–50): what the token-randomization experiment reports.

The one place the source's setting and findings live (all qualitative: the paper prints no numbers).
"""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

SOURCE = Source(
    citation="Song & Zhong, Uncovering hidden geometry in transformers via disentangling position and context, "
             "§5.1, App. A and E (Figs. 6a–c, 42–50)",
    setting="GPT-2-style transformer, 8 layers, 8 heads, d 512, dropout 0.1, context 256 (App. A; §5.1 says "
            "T = 512), first 10K OpenWebText samples with GPT-2 tokens, 100K AdamW steps, batch 64, cosine schedule "
            "to lr 5e-5; noise levels clean / latter half random / all random in training and at inference (3 × 3).",
    numbers=(
        SourceNumber("clean_smooth", "clean training: a smooth positional basis over all positions", "§5.1, Fig. 6a",
                     "smooth curve"),
        SourceNumber("half_split", "second half random in training and inference: the structure breaks exactly "
                     "at T/2", "§5.1, Fig. 6b", "smooth first half, destroyed second half"),
        SourceNumber("full_destroyed", "all tokens random: no positional structure", "§5.1, Fig. 6c", "destroyed"),
    ),
)
