"""Configs of the LocATER experiment (Bao, Hataya & Karakida 2024, §7): ``get_config(preset)``.

* ``paper``: exactly §7 — 1-layer single-head post-LN transformer, d = 128 (embedding, attention,
  FFN), T = 64, batch 64, Adam lr 2.5e-5 constant, weight decay 0.01, no clipping, 50,000
  iterations, κ1 = 100, κ2 ∈ {0, 1e-3, 1e-2, 1e-1, 1}, full word vocabulary of the training split,
  validation perplexity on every non-overlapping window of the validation split; fairseq's
  initialisation (the source's toolkit) and WikiText-2's train split (train.txt, from ``--data-dir``).
* ``cpu``: the same model (d = 128, T = 64) and sweep in about 20 minutes on 2 shared CPU cores:
  batch 16, the 1,023 most frequent words (+ <unk>), lr 1e-3 (40×, so that 1,000 steps move the
  weights as far as the paper's run does), 1,000 iterations, validation on 8 batches.
* ``cpu-d32``: App. D's d = 32 setting (Fig. 8: lr 1e-4, four times the d = 128 rate), scaled as ``cpu`` is
  (batch 16, 1,024 words, lr 40× = 4e-3, 1,000 iterations): a second width, to show that the direction
  of the scale with κ2 is set by the objective, not by d.
* ``cpu-d32-long``: ``cpu-d32`` trained 4× longer (4,000 iterations): whether the entropy and perplexity
  differences across κ2 (Fig. 6C-D), within the noise at 1,000 iterations, grow with training.
* ``cpu-sum``: ``cpu`` with κ1 and every κ2 divided by 64·64 = 4,096, the penalty's weight per token if it is
  added to fairseq's criterion, which sums the loss over the batch's B·T tokens and divides the gradient by
  that count (a hypothesis about the source's implementation, which the paper does not state): a weak penalty
  against which the task shapes W_QK.
* ``cpu-printed``: ``cpu`` trained with the penalty's derivative exactly as §6 prints it (the mean term's
  gradient (tr W_QK − 1)·tr(W_QK)·W_K where the true one has 2 for tr(W_QK); ``LocaterConfig.gradient``).
* ``cpu-fairseq``: ``cpu`` at fairseq's initialisation (Xavier-uniform projections, N(0, 1/d) embeddings;
  ``LocaterConfig.init``), the source's, in place of geomjax's GPT-2 style N(0, 0.02); on the test split as
  every cpu preset (the train split is not shipped).
* ``smoke``: a tiny model (d = 16, T = 16, batch 4, 256 words), 2 steps per κ2 — for tests.

Data: only ``valid.txt`` and ``test.txt`` of WikiText-2 are available offline (no ``train.txt``),
so every preset but ``paper`` trains on the test split and reports perplexity on the validation split.
"""

from __future__ import annotations

from geomjax.train.locater import LocaterConfig, fairseq_adam

PRESETS = ("smoke", "cpu", "cpu-d32", "cpu-d32-long", "cpu-sum", "cpu-printed", "cpu-fairseq", "paper")
# the settings a preset's run trains beside its own (none where a preset is not listed) (each into <out>/<preset>/, with its own report) and
# tabulates in its report: a second width and a weak penalty beside ``cpu``
COMPANIONS = {"cpu": ("cpu-d32", "cpu-d32-long", "cpu-sum", "cpu-printed", "cpu-fairseq")}
FAIRSEQ_TOKENS = 64 * 64  # B·T of §7: fairseq divides a summed loss (and any penalty added to it) by this count


def get_config(preset: str = "cpu", *, seed: int = 0) -> LocaterConfig:
    """The κ2 sweep of ``preset`` (one of :data:`PRESETS`), deterministic from ``seed``."""
    if preset == "paper":
        return LocaterConfig(seed=seed, init="fairseq", train_split="train")
    cpu = LocaterConfig(batch_size=16, vocab_cap=1024, optim=fairseq_adam(lr=1e-3), steps=1000, steps_per_call=20,
                        eval_every=100, eval_batches=8, ckpt_every=200, seed=seed)
    if preset == "cpu":
        return cpu
    if preset == "cpu-d32":
        return cpu.replace(d_model=32, optim=fairseq_adam(lr=4e-3))
    if preset == "cpu-d32-long":
        return cpu.replace(d_model=32, optim=fairseq_adam(lr=4e-3), steps=4000, eval_every=200, ckpt_every=1000)
    if preset == "cpu-sum":
        return cpu.replace(kappa1=cpu.kappa1 / FAIRSEQ_TOKENS, kappa2s=tuple(k / FAIRSEQ_TOKENS for k in cpu.kappa2s))
    if preset == "cpu-printed":
        return cpu.replace(gradient="printed")
    if preset == "cpu-fairseq":
        return cpu.replace(init="fairseq")
    if preset == "smoke":
        return LocaterConfig(d_model=16, seq_len=16, batch_size=4, vocab_cap=256, optim=fairseq_adam(lr=1e-3), steps=2,
                             steps_per_call=1, eval_every=2, eval_batches=1, ckpt_every=1, seed=seed)
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")
