"""Expected cost of a training run, computed from its configuration before anything is compiled: FLOPs,
wall time at a stated throughput, and memory (parameters, gradients, Adam moments, activations).

The FLOP count is the standard transformer estimate (Kaplan et al. 2020, "Scaling laws for neural
language models", §2.1, Table 1): a training token costs 6·N + 6·L·T·d FLOPs, N the parameters that
multiply activations (everything but the token and position lookup tables; the de-embedding included, as
Table 1 counts it), forward 2·N + 2·L·T·d and backward twice the forward, L layers, T the context, d the
attention width. Activation memory follows Korthikanti et al. 2022 ("Reducing activation recomputation in
large transformer models", §4.1: 34·T·B·d + 5·H·T²·B bytes per layer at 16-bit; doubled here for float32).
Both are estimates: the wall time is the FLOP count over an assumed sustained throughput, stated with
every number it produces.

::

    from geomjax.train import addition_config
    from geomjax.train.cost import toy_training_cost
    print(toy_training_cost(addition_config("paper")).describe())
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from geomjax.models.toy import ToyConfig, ToyTransformer
from geomjax.train.tasks import TrainConfig

__all__ = ["ACCELERATOR_FLOPS", "ACCELERATOR_STEP_SECONDS", "CPU_FLOPS", "TrainingCost", "count_params", "toy_training_cost", "training_cost"]

# Assumed sustained training throughputs (FLOP/s). ACCELERATOR_FLOPS: one H100 running these small float32
# models (JAX's default GPU matmul precision, TF32) at about a tenth of its ~400 TFLOP/s dense TF32 peak;
# small models reach no more. CPU_FLOPS: the shared 2-core machine, measured when quiet on the addition cpu
# preset (2 layers, d 128, batch 64 x 33 tokens: 8,000 steps in 400 s, about 5 GFLOP a step).
# ACCELERATOR_STEP_SECONDS: a floor per optimizer step on the accelerator (kernel launches of a small model
# inside a lax.scan chunk), added to the FLOP time; tiny models are bound by it, not by FLOPs.
ACCELERATOR_FLOPS = 40e12
ACCELERATOR_STEP_SECONDS = 1e-3
CPU_FLOPS = 100e9


@dataclasses.dataclass(frozen=True)
class TrainingCost:
    """The expected cost of one training run (see the module docstring for the formulas).

    Attributes:
      n_params: all parameters (embeddings included).
      flops: training FLOPs over all steps (and all vmapped runs).
      param_bytes: parameters + gradients + two Adam moments, float32 (16 bytes a parameter, per run).
      activation_bytes: activations kept for the backward pass of one step (all runs).
      steps: optimizer steps (all runs that run one after another).
    """

    n_params: int
    flops: float
    param_bytes: float
    activation_bytes: float
    steps: int

    @property
    def memory_bytes(self) -> float:
        """Parameters, optimizer state and activations together."""
        return self.param_bytes + self.activation_bytes

    def seconds(self, throughput: float = ACCELERATOR_FLOPS, step_seconds: float = ACCELERATOR_STEP_SECONDS) -> float:
        """Wall time at ``throughput`` FLOP/s plus ``step_seconds`` a step (compilation and evaluation not
        included)."""
        return self.flops / throughput + self.steps * step_seconds

    def describe(self) -> str:
        """One line: FLOPs, expected wall time on an accelerator and on the 2-core CPU, memory."""
        return (f"expected cost: {self.n_params / 1e6:.2f}M parameters, {self.steps} steps, {self.flops:.2e} FLOPs; "
                f"about {_duration(self.seconds())} at {ACCELERATOR_FLOPS / 1e12:g} TFLOP/s + "
                f"{ACCELERATOR_STEP_SECONDS * 1e3:g} ms a step (one H100, assumed), {_duration(self.seconds(CPU_FLOPS, 0.0))} "
                f"at {CPU_FLOPS / 1e9:g} GFLOP/s "
                f"(the 2-core CPU); memory about {self.memory_bytes / 2**30:.2f} GiB (parameters and Adam state "
                f"{self.param_bytes / 2**30:.2f} GiB, activations {self.activation_bytes / 2**30:.2f} GiB)")


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def count_params(model: ToyConfig) -> tuple[int, int]:
    """(all parameters, parameters that multiply activations) of a toy transformer, from the shapes of its
    initialisation (``jax.eval_shape``: nothing is computed). The second leaves out the lookup tables (Flax
    ``embedding`` leaves: token and position embeddings) and counts a tied unembedding (V·d) as a matrix
    product, since it is one."""
    shapes = jax.eval_shape(lambda: ToyTransformer(model).init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
    total = lookup = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(shapes["params"]):
        n = math.prod(leaf.shape)
        total += n
        if str(getattr(path[-1], "key", path[-1])) == "embedding":
            lookup += n
    tied = model.vocab_size * model.d_model if model.tie_embeddings else 0
    return total, total - lookup + tied


def training_cost(n_params: int, n_matmul: int, *, batch: int, seq_len: int, steps: int, n_layers: int,
                  d_model: int, n_heads: int, vocab: int, runs: int = 1) -> TrainingCost:
    """Cost of ``runs`` identical runs (a vmapped sweep) of ``steps`` steps of ``batch`` sequences of ``seq_len``
    tokens: Kaplan et al. Table 1 (6·N + 6·L·T·d FLOPs a token, N = ``n_matmul``) and Korthikanti et al. §4.1
    (activations per layer 2·(34·T·B·d + 5·H·T²·B) bytes in float32, plus the logits and their gradient,
    2·4·B·T·V bytes)."""
    tokens = batch * seq_len
    flops = runs * steps * tokens * (6.0 * n_matmul + 6.0 * n_layers * seq_len * d_model)
    act = runs * (n_layers * 2.0 * (34.0 * tokens * d_model + 5.0 * n_heads * seq_len * tokens) + 8.0 * tokens * vocab)
    return TrainingCost(n_params, flops, 16.0 * n_params * runs, act, steps)


def toy_training_cost(cfg: TrainConfig, runs: int = 1) -> TrainingCost:
    """:func:`training_cost` of a toy-transformer :class:`TrainConfig` (``modular``: full batch, the
    ``train_frac`` · p² training pairs, 3 tokens each)."""
    m = cfg.model
    n, n_matmul = count_params(m)
    if cfg.task == "modular":
        batch, T = int(cfg.options.train_frac * cfg.options.p ** 2), 3
    else:
        batch, T = cfg.batch_size, cfg.seq_len
    return training_cost(n, n_matmul, batch=batch, seq_len=T, steps=cfg.total_steps, n_layers=m.n_layers,
                         d_model=m.d_model, n_heads=m.n_heads, vocab=m.vocab_out or m.vocab_size, runs=runs)
