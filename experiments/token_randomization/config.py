"""Presets of the token-randomization experiment (Song & Zhong §5.1, App. E, Figs. 6a-c, 42-50).

Three GPT-style toy transformers are trained on tiny Shakespeare characters with noise level 0 (clean),
1 (second half of every training sequence replaced by uniform random tokens) and 2 (every token random),
and each is evaluated at all three levels (3 × 3). The source trained on OpenWebText with GPT-2 tokens
(not available offline); here the corpus is tiny Shakespeare and the noise is uniform over its 65
characters.

* ``smoke``: 1 layer, d 32, T 16, 20 steps per model (seconds).
* ``cpu``: 4 layers, 4 heads, d 128, T 64, batch 32, 1,500 steps per model (long enough for the clean
  model to learn a smooth positional basis, so that the level-1 model's break at T/2 can show).
* ``paper``: REFERENCE.md's randomization model — 8 layers, 8 heads, d 512, T 512 — with the NanoGPT
  optimizer of the ``shakespeare`` ``paper`` preset (the source does not state its optimizer).
"""

from __future__ import annotations

import dataclasses

PRESETS = ("smoke", "cpu", "paper")


@dataclasses.dataclass(frozen=True)
class RandomizationConfig:
    """Settings of one token-randomization run (frozen).

    Attributes:
      preset: name.
      n_layers, n_heads, d_model, seq_len: the toy GPT (NanoGPT style: pre-LN, no biases, tied).
      batch_size, total_steps, steps_per_call: training.
      lr, final_lr, warmup_steps: cosine schedule (AdamW, β (0.9, 0.99), weight decay 0.1, clip 1).
      dropout: dropout rate.
      levels: noise levels trained and evaluated (0 clean, 1 second half random, 2 all random).
      eval_batches: validation batches of batch_size windows (also the C windows of the
        positional-basis decomposition).
      seed: everything derives from it.
    """

    preset: str
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    seq_len: int = 64
    batch_size: int = 32
    total_steps: int = 300
    steps_per_call: int = 50
    lr: float = 2e-3
    final_lr: float = 2e-4
    warmup_steps: int = 50
    dropout: float = 0.0
    levels: tuple[int, ...] = (0, 1, 2)
    eval_batches: int = 8
    seed: int = 0

    def __post_init__(self):
        bad = [lv for lv in self.levels if lv not in (0, 1, 2)]
        if bad:
            raise ValueError(f"RandomizationConfig: levels must be among 0, 1, 2, got {bad}")
        if self.total_steps % self.steps_per_call:
            raise ValueError("RandomizationConfig: total_steps must be a multiple of steps_per_call")


def get_config(preset: str = "cpu") -> RandomizationConfig:
    """The ``smoke`` / ``cpu`` / ``paper`` preset."""
    if preset == "smoke":
        return RandomizationConfig("smoke", n_layers=1, n_heads=2, d_model=32, seq_len=16, batch_size=8,
                                   total_steps=20, steps_per_call=10, lr=1e-2, final_lr=1e-3, warmup_steps=5,
                                   eval_batches=2)
    if preset == "cpu":
        return RandomizationConfig("cpu", total_steps=1500, steps_per_call=100, warmup_steps=100)
    if preset == "paper":
        return RandomizationConfig("paper", n_layers=8, n_heads=8, d_model=512, seq_len=512, batch_size=64,
                                   total_steps=100_000, steps_per_call=250, lr=5e-5, final_lr=5e-6,
                                   warmup_steps=200, dropout=0.1, eval_batches=20)
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")
