"""The grokking experiment's sources and the numbers they report (the one place they live).

The clock blog ("Reproducing and extending the clock algorithm for modular addition", its §4–§11) and
Nanda et al., "Progress measures for grokking via mechanistic interpretability" (§3, §5).
"""

from __future__ import annotations

from geomjax.analysis.comparison import Source, SourceNumber

SOURCE = Source(
    citation="the clock blog (§4–§11) and Nanda et al., Progress measures for grokking (§3, §5)",
    setting="p = 113, 1-layer transformer (d 128, 4 heads, d_mlp 512, ReLU, no LayerNorm; the blog §3: no "
            "positional embeddings, Nanda et al.'s code: learned ones), AdamW lr 1e-3, weight decay 1.0, β (0.9, 0.98), "
            "full batch, 30% of the p² pairs for training; the blog trains 10,000 epochs (§4; and 20,000, §5) and its "
            "ReLU-free variant (§8), Nanda et al. 50,000.",
    numbers=(
        SourceNumber("grok_epoch", "test accuracy reaches 100% after a plateau (grokking)", "blog §4",
                     "~4,000 epochs (train accuracy 100% far earlier)"),
        SourceNumber("key_freqs", "a few key frequencies hold W_E's Fourier energy", "blog §5; Nanda et al. §4",
                     "blog: 4 clean pairs at 10,000 epochs, {4, 32, 43} at 20,000; Nanda: 5"),
        SourceNumber("W_L_same", "W_L has the same key frequencies as W_E", "blog §5.2", "same set"),
        SourceNumber("circles", "W_E columns on a key frequency's basis form a circle", "blog §5.1",
                     "circles (random frequencies: noise)"),
        SourceNumber("attention", "attention patterns are periodic at key frequencies", "blog §6",
                     "each head's dominant DFT frequency is a key frequency"),
        SourceNumber("restricted_first", "restricted loss falls before test loss (circuit formation precedes "
                     "the test-loss drop)", "Nanda et al. §5.1, Fig. 7", "yes"),
        SourceNumber("relu_free", "the MLP is affine: a ReLU-free model also groks", "blog §8", "yes (ReLU not needed)"),
        SourceNumber("two_coprime", "two circles of coprime frequencies suffice", "blog §11.2", "yes"),
    ),
)
