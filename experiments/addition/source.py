"""Song & Zhong §5.2, App. A and E (Figs. 6d–e, 51–56): what the addition experiment reports (the one place)."""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

SOURCE = Source(
    citation="Song & Zhong, Uncovering hidden geometry in transformers via disentangling position and context, "
             "§5.2 and App. E (Figs. 6d–e, 51–56)",
    setting="'a+b=c' with the answer reversed, operands of 5–10 digits, carry and no-carry settings, 100K training "
            "and 10K validation additions (App. E), the 8-layer, 8-head, d 512 transformer of App. A; greedy exact "
            "match; length generalization on 1K additions of 1–4 digits.",
    numbers=(
        SourceNumber("no_carry_acc", "in-distribution exact match, no-carry", "App. E", "100%"),
        SourceNumber("carry_acc", "in-distribution exact match, carry", "App. E", "72%"),
        SourceNumber("no_carry_short", "exact match on lengths 1–4, no-carry", "App. E", "5.02%"),
        SourceNumber("carry_short", "exact match on lengths 1–4, carry", "App. E", "0.00%"),
        SourceNumber("fractured", "pos-pos components are fractured / discontinuous", "§5.2, Fig. 6d–e, Figs. 51–56",
                     "fractured"),
    ),
)
