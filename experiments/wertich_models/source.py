"""Wertich (2024), ch. 6–8 and App. A.5: what the model experiments report (the one place)."""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

SOURCE = Source(
    citation="Wertich, Gaussian statistics of attention (Master's thesis, 2024), §6.2.3, ch. 8 and App. A.5",
    setting="Mistral-7B-Instruct-v0.2 (32 blocks × 32 heads, d 4096, grouped-query attention) on a few-shot "
            "crossword-clue prompt; weight spectra and Tr(W_qᵀW_k) per layer (App. A.5).",
    numbers=(
        SourceNumber("spectra", "learned singular-value spectra are 'pressed down' with a few large values",
                     "§6.2 text, App. A.5 (Figs. A.19–A.21)", "σ1² above the random edge, the bulk below"),
        SourceNumber("trace", "Tr(W_qᵀW_k) behaves like that of independent random matrices for most layers",
                     "§6.2.3 text, App. A.5 (Fig. A.22)", "Tr ~ N(0, 1) for most layers"),
        SourceNumber("cos_attention", "cosine similarity of the embeddings and attention are barely related",
                     "§8.3, Fig. 8.6", "minimal relationship"),
        SourceNumber("random_uniform", "random weights attend almost uniformly (the uniform-mixture hypothesis)",
                     "§8.4, Fig. 8.7", "near-uniform attention"),
        SourceNumber("alpha", "scaling W_q, W_k singular values by α: up → peaked, down → flatter attention",
                     "§8.5, Figs. 8.8–8.9", "entropy decreasing in α"),
    ),
)
