"""Bao, Hataya & Karakida 2024, §7 (Figs. 6–7): what the LocATER experiment reports (the one place)."""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

SOURCE = Source(
    citation="Bao, Hataya & Karakida, Self-attention networks localize when QK-eigenspectrum concentrates, §7 "
             "(Figs. 6–7)",
    setting="fairseq 1-layer single-head post-LN transformer LM, d = 128, T = 64, batch 64, Adam lr 2.5e-5, weight "
            "decay 0.01, 50,000 iterations on WikiText-2 (word level, full vocabulary), κ1 = 100, "
            "κ2 ∈ {0, 1e-3, 1e-2, 1e-1, 1}.",
    numbers=(
        SourceNumber("scale", "stronger κ2 shrinks the eigenspectrum scale", "§7, Fig. 6B", "decreasing in κ2"),
        SourceNumber("entropy", "stronger κ2 keeps the attention entropy higher", "§7, Fig. 6C", "increasing in κ2"),
        SourceNumber("ppl", "stronger κ2 improves validation perplexity", "§7, Fig. 6D", "decreasing in κ2"),
        SourceNumber("stripes", "LocATER shows horizontal stripes in ρ_i, none without it", "§7, Fig. 7",
                     "stripes at κ2 = 1, uniform at κ2 = 0"),
    ),
)
