"""Presets of the attention-dissection experiment (Song & Zhong §4, App. D).

* ``smoke``: no MiniLM, a 2-layer toy trained for a few steps; seconds (used in tests).
* ``cpu``: MiniLM (causal, as the source ran BERT) with μ/pos from 128 WikiText-2 windows of 64
  tokens, 16 probes of 8 random tokens × 3; the toy is the tiny-Shakespeare ``cpu`` preset trained
  with :func:`geomjax.train.fit` (or an existing run directory).
* ``cpu-toy-long``: the toy alone (no MiniLM), trained 3,000 steps instead of the ``cpu`` preset's 1,000 (its
  checkpoints every 500 steps kept, so a re-run resumes): a second setting for the toy's head types that the
  ``cpu`` run does not find (self-token, copying).
* ``paper``: the source's sizes (the authors' released code): μ/pos from 6400 windows of 512 tokens, one probe of
  8 ids in [1000, 10000) × 3, W structure with K up to 60; the toy is the NanoGPT ``paper`` preset.
  (The source dissected GPT-2, whose weights are not available offline; MiniLM stands in.)
"""

from __future__ import annotations

import dataclasses

PRESETS = ("smoke", "cpu", "cpu-toy-long", "paper")


@dataclasses.dataclass(frozen=True)
class BasisConfig:
    """The sample from which μ and pos of every layer's attention input are estimated
    (:func:`geomjax.tools.attention_probe.estimate_attention_basis`; MiniLM: WikiText-2 valid, toy:
    tiny-Shakespeare val).

    Attributes:
      windows: C corpus windows.
      T: window length (>= the probe length).
      batch: windows per forward pass.
    """

    windows: int = 128
    T: int = 64
    batch: int = 32


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    """The probes (:func:`geomjax.theory.attention.repeated_random_tokens`): ``n_probes`` sequences of
    ``n_tokens`` random ids repeated ``n_repeats`` times, averaged per head."""

    n_tokens: int = 8
    n_repeats: int = 3
    n_probes: int = 16

    @property
    def length(self) -> int:
        """Tokens per probe (n_tokens · n_repeats)."""
        return self.n_tokens * self.n_repeats


@dataclasses.dataclass(frozen=True)
class WStructureConfig:
    """The W-structure study (eq. (8), Fig. 5) of one layer per model
    (:func:`geomjax.theory.attention.w_structure`; the source studied GPT-2 layer 6).

    Attributes:
      layer_minilm, layer_toy: the layer studied in each model.
      Ks: top-left block sizes.
      n_random: random rotations of the baseline.
      fit_K: rank of the eq. (8) fit.
    """

    layer_minilm: int = 3
    layer_toy: int = 2
    Ks: tuple[int, ...] = (10, 20, 30, 40, 50, 60)
    n_random: int = 8
    fit_K: int = 20


@dataclasses.dataclass(frozen=True)
class DissectionConfig:
    """Everything a dissection run needs (frozen); each stage's settings are one group.

    Attributes:
      preset: its name.
      use_minilm: dissect the bundled all-MiniLM-L6-v2.
      minilm_causal: run MiniLM with the causal mask (the source's BERT convention).
      basis: the μ/pos estimate (:class:`BasisConfig`).
      probe: the probes (:class:`ProbeConfig`).
      minilm_id_range: [low, high) of the MiniLM probe ids.
      toy_variant: tiny-Shakespeare preset of the toy (``geomjax.train.get_config``).
      toy_steps: override the preset's steps (0: keep).
      window: neighbour window (keys t - window .. t).
      min_lift: minimal lift over uniform attention to get a type.
      w: the W-structure study (:class:`WStructureConfig`).
      seed: everything derives from it.
    """

    preset: str
    use_minilm: bool = True
    minilm_causal: bool = True
    basis: BasisConfig = BasisConfig()
    probe: ProbeConfig = ProbeConfig()
    minilm_id_range: tuple[int, int] = (1000, 10000)
    toy_variant: str = "cpu"
    toy_steps: int = 0
    window: int = 2
    min_lift: float = 0.15
    w: WStructureConfig = WStructureConfig()
    seed: int = 0

    def __post_init__(self):
        if self.probe.length > self.basis.T:
            raise ValueError(f"DissectionConfig: the probe has {self.probe.length} tokens but pos is "
                             f"estimated on basis.T={self.basis.T} positions; raise basis.T")


def get_config(preset: str = "cpu") -> DissectionConfig:
    """The ``smoke`` / ``cpu`` / ``paper`` preset."""
    if preset == "smoke":
        return DissectionConfig("smoke", use_minilm=False, basis=BasisConfig(windows=16, T=32, batch=16),
                                probe=ProbeConfig(n_probes=2), toy_variant="smoke", toy_steps=20,
                                w=WStructureConfig(layer_toy=1, Ks=(4, 8, 16), n_random=2, fit_K=4))
    if preset == "cpu":
        return DissectionConfig("cpu")
    if preset == "cpu-toy-long":  # the toy alone, trained 3× the cpu preset's 1,000 steps: do its missing head types appear?
        return DissectionConfig("cpu-toy-long", use_minilm=False, toy_steps=3000)
    if preset == "paper":
        return DissectionConfig("paper", basis=BasisConfig(windows=6400, T=512, batch=16),
                                probe=ProbeConfig(n_probes=1), toy_variant="paper",
                                w=WStructureConfig(layer_minilm=3, layer_toy=3))
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")
