"""Configuration of the Wertich model experiments (thesis ch. 8, App. A.5; issue 6)."""

from __future__ import annotations

import dataclasses

PRESETS = ("smoke", "cpu")


@dataclasses.dataclass(frozen=True)
class WertichModelsConfig:
    """What ``python -m experiments.wertich_models.run`` measures.

    Attributes:
      preset: "smoke" (seconds; trains the toy smoke preset) or "cpu" (minutes; toy cpu preset).
      toy_preset: shakespeare training preset for the GPT-style toy model ("smoke" / "cpu").
      toy_run: an existing toy run directory to use instead of training (None: train into OUT/toy).
      toy_ckpt_every: checkpoint cadence of the toy GPT this run trains (None: its preset's); every checkpoint
        is a point of the report's training curve of Tr(W_qᵀW_k) and corr(cos, attention).
      minilm: analyse the bundled all-MiniLM-L6-v2.
      alphas: factors applied to the singular values of W_q and W_k (kernel and bias) of every layer.
      n_texts: WikiText-2 windows (MiniLM) / held-out Shakespeare windows (toy) per measurement.
      seq_len: MiniLM window length in word pieces (incl. [CLS] and [SEP]); the toy uses its context.
      random_seeds: random-weight models per architecture.
      seed: base seed (weights of random models, window choice).
    """

    preset: str = "cpu"
    toy_preset: str = "cpu"
    toy_run: str | None = None
    toy_ckpt_every: int | None = 250
    minilm: bool = True
    alphas: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
    n_texts: int = 16
    seq_len: int = 64
    random_seeds: int = 3
    seed: int = 0


def get_config(preset: str = "cpu", **overrides) -> WertichModelsConfig:
    """The ``smoke`` or ``cpu`` preset, with field overrides."""
    if preset == "cpu":
        cfg = WertichModelsConfig()
    elif preset == "smoke":
        cfg = WertichModelsConfig(preset="smoke", toy_preset="smoke", n_texts=2, seq_len=32, random_seeds=1,
                                  alphas=(0.5, 1.0, 2.0), toy_ckpt_every=None)
    else:
        raise ValueError(f"get_config: preset must be 'smoke' or 'cpu', got {preset!r}")
    return dataclasses.replace(cfg, **overrides)
