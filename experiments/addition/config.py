"""Presets of the addition experiment (Song & Zhong §5.2, App. E, Figs. 6d-e, 51-56).

"a+b=c" with the answer reversed, operand lengths uniform in {L/2, ..., L} (L = 10: 5-10 digits),
carry (uniform random integers) and no-carry (digit pairs summing to <= 9) settings, loss only after
"=". Exact match by greedy decoding in distribution and on operands of 1-4 digits.

* ``smoke``: L = 4, 1 layer, d 32, 30 steps (seconds; used in tests).
* ``cpu``: L = 10 (as the paper), 2 layers, 4 heads, d 128, 12,000 steps of batch 64 (lr 2e-3 cosine to 2e-4 over the
  12,000 steps), 100K training problems, 2000 in-distribution and 4 × 250 short test problems per setting; a second
  budget of 3,000 steps (its own cosine over its own length) is trained for the exact-match-vs-steps curve. The preset was 2,000
  steps (27.8% no-carry exact match, about 1.3 passes over the 100K problems with the validation loss still
  falling); 8,000 steps reached 91.35%. Expected 26 min of training on the quiet 2-core machine
  (geomjax.train.cost). Committed run (results/cpu, 2026-11-26, load 3-25): no-carry 100.00% in
  distribution (99.80% on the validation set at step 12,000; 27.7% at the 3,000-step budget), carry 0.00%
  (validation loss 1.65 at 3,000 steps, 1.32 at 12,000: still falling); the 12,000-step runs trained 2,811 s
  (carry) and 1,108 s (no-carry) under that load.
  Carry at another size: 2 layers × 4 heads, d 64 (0.1M parameters, a quarter of the cpu model) for the 3,000-step
  budget, beside the cpu model's own 3,000-step run: whether a quarter of the capacity learns as much of the carry
  in the same steps (the carry row's "budget or capacity" reading). (A model twice the cpu model's size, 4 layers,
  was the first choice: about 100 minutes of the shared 2-core machine at its load of 18, too long for a companion.)
* ``paper``: :func:`geomjax.train.addition_config` ``paper``: App. A as printed (8 layers, 8 heads, d 512, dropout
  0.1, AdamW weight decay 0.1, lr 5e-5 cosine after 1,000 warm-up steps, batch 64, 100K steps) on App. E's 100K
  training problems, 10K validation, 1K short problems (250 per length).
"""

from __future__ import annotations

import dataclasses

from geomjax.train import TrainConfig, addition_config, addition_train_config

PRESETS = ("smoke", "cpu", "paper")


@dataclasses.dataclass(frozen=True)
class AdditionExperimentConfig:
    """One addition experiment (frozen): the library's :class:`geomjax.train.TrainConfig` of the
    model, optimizer and data (task ``"addition"``; ``train.options.carry`` is set per setting) plus the
    experiment's own evaluation settings.

    Attributes:
      preset: name.
      train: the training run (its ``AdditionOptions``: ``max_digits`` = L, operands of ⌊L/2⌋..L digits;
        ``n_train`` problems).
      n_eval: in-distribution test problems (fresh draw).
      short_lengths: operand lengths of the length-generalization test (outside the trained range).
      n_short: test problems per short length.
      allow_out_of_range: the explicit consent to test lengths outside the trained range (without it the
        short-length test raises a ValueError).
      n_basis: problems over which μ/pos of the attention inputs are estimated.
      settings: ``"carry"`` and/or ``"no_carry"``.
      budgets: shorter training budgets (total steps, each a multiple of ``train.steps_per_call`` and below
        ``train.total_steps``), trained as separate runs with their own cosine horizon
        (:func:`budget_config`) so that the report's exact-match curve shows the trend across budgets.
      carry_sizes: other model sizes (n_layers, n_heads, d_model, d_mlp) at which the carry setting is trained for
        ``carry_size_steps`` steps (one of ``budgets``, so the preset's model has the same run): budget or capacity.
    """

    preset: str
    train: TrainConfig
    n_eval: int = 2000
    short_lengths: tuple[int, ...] = (1, 2, 3, 4)
    n_short: int = 250
    allow_out_of_range: bool = True
    n_basis: int = 512
    settings: tuple[str, ...] = ("carry", "no_carry")
    budgets: tuple[int, ...] = ()
    carry_sizes: tuple[tuple[int, int, int, int], ...] = ()
    carry_size_steps: int = 0

    def __post_init__(self):
        bad = [s for s in self.settings if s not in ("carry", "no_carry")]
        if bad:
            raise ValueError(f"AdditionExperimentConfig: settings must be 'carry' / 'no_carry', got {bad}")
        if self.train.task != "addition":
            raise ValueError(f"AdditionExperimentConfig: train.task must be 'addition', got {self.train.task!r}")
        N = self.train.steps_per_call
        bad = [b for b in self.budgets if b % N or not 0 < b < self.train.total_steps]
        if bad:
            raise ValueError(f"AdditionExperimentConfig: budgets must be multiples of steps_per_call = {N} below "
                             f"total_steps = {self.train.total_steps}, got {bad}")
        if self.carry_sizes and self.carry_size_steps not in self.budgets:
            raise ValueError(f"AdditionExperimentConfig: carry_size_steps must be one of the budgets {list(self.budgets)} "
                             f"(the preset's model trains that budget too), got {self.carry_size_steps}")

    @property
    def seq_len(self) -> int:
        """Positions the model reads: the longest string "a+b=c\\n" (3L + 4 characters) minus one."""
        return self.train.seq_len


def get_config(preset: str = "cpu", *, seed: int = 0) -> AdditionExperimentConfig:
    """The ``smoke`` / ``cpu`` / ``paper`` preset (``paper``'s training is
    :func:`geomjax.train.addition_config` ``"paper"``, defined there only; the others are
    :func:`geomjax.train.addition_train_config` runs of the experiment's own sizes)."""
    if preset == "smoke":
        t = addition_train_config(4, n_layers=1, n_heads=2, d_model=32, d_mlp=64, lr=3e-3, final_lr=3e-4,
                                  warmup_steps=5, batch_size=16, total_steps=30, steps_per_call=10, n_train=512,
                                  seed=seed)
        return AdditionExperimentConfig("smoke", t, n_eval=32, short_lengths=(1,), n_short=16, n_basis=32,
                                        budgets=(20,), carry_sizes=((1, 2, 16, 32),), carry_size_steps=20)
    if preset == "cpu":
        t = addition_train_config(10, n_layers=2, n_heads=4, d_model=128, d_mlp=512, lr=2e-3, final_lr=2e-4,
                                  warmup_steps=100, batch_size=64, total_steps=12_000, steps_per_call=100,
                                  eval_every=500, eval_batches=16, ckpt_every=1000, n_train=100_000, seed=seed)
        return AdditionExperimentConfig("cpu", t, budgets=(3000,), carry_sizes=((2, 4, 64, 256),), carry_size_steps=3000)
    if preset == "paper":
        return AdditionExperimentConfig("paper", addition_config("paper").replace(seed=seed), n_eval=10_000,
                                        n_short=250, n_basis=2048)
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")


def budget_config(train: TrainConfig, steps: int) -> TrainConfig:
    """``train`` for a budget of ``steps`` optimizer steps: the cosine schedule follows the run's length (its
    horizon unpinned, ``OptimConfig.decay_steps = None``, so it ends at ``steps``), checkpoints at the end,
    the evaluation cadence kept."""
    optim = dataclasses.replace(train.optim, decay_steps=None)
    return train.replace(total_steps=steps, optim=optim, ckpt_every=min(train.ckpt_every, steps) if train.ckpt_every else 0,
                         eval_every=min(train.eval_every, steps) if train.eval_every else 0)
