"""Training tasks for the toy transformer, their presets, and :func:`fit` (train / resume a run).

Tasks (``TrainConfig.task``):

* ``"shakespeare"`` — character LM on tiny Shakespeare (NanoGPT ``shakespeare_char``; Song & Zhong §5):
  random windows of ``seq_len + 1`` characters of the first 90% (train) — the model reads
  ``seq_len`` characters and predicts the next at every position; validation on fixed random
  windows of the last 10%.
* ``"addition"`` — "a+b=c" with reversed answer (Song & Zhong §5), loss only after "=".
* ``"modular"`` — (a, b, "=") -> (a + b) mod p, full-batch, last-position loss (Nanda et al.).

Presets: ``get_config(task, variant)`` with variant ``"smoke"`` (a few steps, for tests),
``"cpu"`` (minutes on a laptop CPU) or ``"paper"`` (the source's hyperparameters, the authors' released code).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from geomjax.base._checks import check_int, compiled_cache
from geomjax.base.io import SCHEDULE_KEY
from geomjax.data import (
    ADDITION_VOCAB,
    CharTokenizer,
    addition_batch,
    modular_addition_data,
    sample_windows,
    tiny_shakespeare,
)
from geomjax.errors import GeomjaxError
from geomjax.models.toy import ToyConfig, ToyTransformer, nanda_config, nanogpt_config
from geomjax.base.parallel import replicated
from geomjax.train.checkpoint import config_jsonable, latest_checkpoint, load_checkpoint, save_checkpoint
from geomjax.train.losses import accuracy, cross_entropy, exact_match, shift_for_next_token
from geomjax.train.loop import History, StopRule, check_cadences, make_eval_fn, make_train_chunk, make_train_step, train_loop
from geomjax.train.optim import (
    OptimConfig,
    check_length_change,
    check_run_length,
    effective_schedule,
    make_optimizer,
    nanogpt_adamw,
    schedule_record,
)
from geomjax.train.state import TrainState, create_train_state

__all__ = [
    "AdditionOptions",
    "FitResult",
    "ModularOptions",
    "Programs",
    "TrainConfig",
    "addition_config",
    "addition_train_config",
    "build_programs",
    "fit",
    "get_config",
    "init_state",
    "load_task_data",
    "merged_history",
    "modular_config",
    "shakespeare_config",
    "shakespeare_train_config",
]

TASKS = ("shakespeare", "addition", "modular")
VARIANTS = ("smoke", "cpu", "paper")


@dataclasses.dataclass(frozen=True)
class AdditionOptions:
    """Options of the ``"addition"`` task (Song & Zhong §5); the defaults are the paper's App. E setting.

    Attributes:
      max_digits: L >= 1; operands have ⌊L/2⌋..L digits (:func:`geomjax.data.addition_problems`).
      carry: uniform random operands (True) or no-carry problems (False).
      n_train: size (>= 1) of the fixed training set the batches are drawn from (App. E: 100K).
    """

    max_digits: int = 10
    carry: bool = True
    n_train: int = 100_000

    def __post_init__(self):
        check_int(self.max_digits, "max_digits", "AdditionOptions")
        check_int(self.n_train, "n_train", "AdditionOptions")


@dataclasses.dataclass(frozen=True)
class ModularOptions:
    """Options of the ``"modular"`` task (Nanda et al.): (a + b) mod p over all p² pairs.

    Attributes:
      p: the modulus (>= 2); the model's vocabulary holds 0..p−1 and "=" (id p).
      train_frac: fraction of the p² pairs used for training, in (0, 1).
    """

    p: int = 113
    train_frac: float = 0.3

    def __post_init__(self):
        check_int(self.p, "p", "ModularOptions", minimum=2)
        if not 0.0 < self.train_frac < 1.0:
            raise GeomjaxError(f"ModularOptions: train_frac must lie in (0, 1), got {self.train_frac}")


# the options class each task reads (None: the task has no options)
TASK_OPTIONS = {"shakespeare": None, "addition": AdditionOptions, "modular": ModularOptions}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A complete, hashable description of a training run.

    Attributes:
      task: ``"shakespeare"``, ``"addition"`` or ``"modular"``.
      model: toy transformer config.
      optim: optimizer config.
      batch_size: B per step (``modular``: 0 means full batch).
      seq_len: tokens the model reads per sequence (shakespeare: windows are seq_len + 1 long;
        addition: padded string length - 1).
      total_steps: optimizer steps: the run's length, and the horizon of ``optim``'s cosine unless
        ``optim.decay_steps`` pins it (issue 37; :meth:`TrainConfig.replace` keeps them together).
      steps_per_call: N steps per jitted ``lax.scan`` call (metrics are fetched every N steps).
      eval_every: evaluate every this many steps (0: at start and end only); divides ``total_steps``.
      eval_batches: number of validation batches of ``batch_size`` (shakespeare, addition).
      ckpt_every: checkpoint every this many steps (0: only at the end); divides ``total_steps``.
      seed: the run's seed; everything (init, batches, dropout, validation windows) derives from it.
      options: the task's own options — :class:`AdditionOptions` for ``"addition"``,
        :class:`ModularOptions` for ``"modular"`` (None: that class's defaults), None for
        ``"shakespeare"`` (which has none).
    """

    task: str
    model: ToyConfig
    optim: OptimConfig
    batch_size: int
    seq_len: int
    total_steps: int
    steps_per_call: int = 10
    eval_every: int = 0
    eval_batches: int = 4
    ckpt_every: int = 0
    seed: int = 0
    options: AdditionOptions | ModularOptions | None = None

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"TrainConfig: task must be one of {TASKS}, got {self.task!r}")
        expected = TASK_OPTIONS[self.task]
        if expected is None and self.options is not None:
            raise GeomjaxError(f"TrainConfig: task {self.task!r} takes no options, got {self.options!r}; "
                               "leave options=None")
        if expected is not None and self.options is None:
            object.__setattr__(self, "options", expected())
        elif expected is not None and not isinstance(self.options, expected):
            raise GeomjaxError(f"TrainConfig: task {self.task!r} takes options={expected.__name__}(...), got "
                               f"{type(self.options).__name__}")
        check_cadences("TrainConfig", "total_steps", self.total_steps, self.steps_per_call,
                       eval_every=self.eval_every, ckpt_every=self.ckpt_every)
        check_run_length(self.optim, self.total_steps, "TrainConfig")
        if self.task != "modular" and self.seq_len > self.model.max_len:
            raise ValueError(f"TrainConfig: seq_len {self.seq_len} exceeds the model's max_len {self.model.max_len}")

    def replace(self, **kw) -> "TrainConfig":
        """Copy with some fields changed (``model=``/``optim=`` take configs).

        A new ``total_steps`` moves the cosine's horizon with it (``optim.decay_steps=None``, every
        preset); a pinned horizon must be restated in the same call (``optim=``), else ValueError.
        Cadences that no longer divide the run raise a ValueError naming both numbers.
        """
        if "optim" not in kw:
            check_length_change(self.optim, self.total_steps, kw.get("total_steps", self.total_steps), "TrainConfig")
        return dataclasses.replace(self, **kw)

    def effective_schedule(self) -> dict:
        """The learning rate this run uses at step 0, at the end of the warm-up, at its last step and at
        its end (:func:`geomjax.train.optim.effective_schedule`)."""
        return effective_schedule(self.optim, self.total_steps)


# ----------------------------------------------------------------------------------------- presets

def shakespeare_train_config(model: ToyConfig, *, lr: float, final_lr: float, warmup_steps: int,
                             **run) -> TrainConfig:
    """A TrainConfig for the character LM on tiny Shakespeare (NanoGPT ``shakespeare_char``; Song & Zhong §5):
    windows of ``model.max_len`` characters and :func:`geomjax.train.optim.nanogpt_adamw` (embeddings
    decay too, as NanoGPT decays every tensor with >= 2 dims) over the whole run (its horizon follows
    ``total_steps``, also after :meth:`TrainConfig.replace`). ``run``: the rest of
    the TrainConfig (``batch_size``, ``total_steps``, ``steps_per_call``, evaluation / checkpoint
    cadence, ``seed``)."""
    optim = nanogpt_adamw(lr, final_lr, warmup_steps, decay_embeddings=True)
    return TrainConfig("shakespeare", model, optim, seq_len=model.max_len, **run)


def shakespeare_config(variant: str = "smoke", vocab_size: int = 65) -> TrainConfig:
    """Character-level tiny Shakespeare presets.

    * ``paper``: NanoGPT as Song & Zhong ran it (the authors' released code): 6 layers, 6 heads, d 384, block 256,
      batch 64, dropout 0.1, no biases, AdamW lr 5e-5 cosine to 5e-6, weight decay 0.1 (tensors with
      >= 2 dims, embeddings included), β (0.9, 0.99), 200 warm-up steps, 100k steps, clip 1.0.
      They trained in bf16 autocast; geomjax trains in float32.
    * ``cpu``: 4 layers, 4 heads, d 128, block 64, batch 32, 1000 steps at lr 2e-3 (about 4 minutes
      on 2 CPU cores).
    * ``smoke``: 2 layers, d 32, block 32, batch 16, 60 steps.
    """
    if variant == "paper":
        return shakespeare_train_config(nanogpt_config(vocab_size), lr=5e-5, final_lr=5e-6, warmup_steps=200,
                                        batch_size=64, total_steps=100_000, steps_per_call=250, eval_every=2500,
                                        eval_batches=20, ckpt_every=5000)
    if variant == "cpu":
        model = nanogpt_config(vocab_size, n_layers=4, n_heads=4, d_model=128, d_mlp=512, max_len=64, dropout=0.0)
        return shakespeare_train_config(model, lr=2e-3, final_lr=2e-4, warmup_steps=100, batch_size=32,
                                        total_steps=1000, steps_per_call=50, eval_every=250, eval_batches=8,
                                        ckpt_every=500)
    if variant == "smoke":
        model = nanogpt_config(vocab_size, n_layers=2, n_heads=2, d_model=32, d_mlp=128, max_len=32, dropout=0.0)
        return shakespeare_train_config(model, lr=1e-2, final_lr=1e-3, warmup_steps=10, batch_size=16,
                                        total_steps=60, steps_per_call=10, eval_every=30, eval_batches=4,
                                        ckpt_every=30)
    raise ValueError(f"shakespeare_config: variant must be one of {VARIANTS}, got {variant!r}")


def addition_train_config(max_digits: int, *, n_layers: int, n_heads: int, d_model: int, d_mlp: int, lr: float,
                          final_lr: float, warmup_steps: int, n_train: int, carry: bool = True,
                          optim: dict | None = None, dropout: float = 0.0, **run) -> TrainConfig:
    """A TrainConfig for L-digit addition (Song & Zhong §5): "a+b=c" with the answer reversed, operands
    of ⌊L/2⌋..L digits, padded to 3L + 4 characters, so the model reads T = 3L + 3 positions; the
    task options are ``AdditionOptions(max_digits, carry, n_train)``.

    The toy model has the 13-character vocabulary (``geomjax.data.ADDITION_VOCAB``), T positions and
    ``dropout`` on the embeddings, attention probabilities and residual branches;
    the optimizer is :func:`geomjax.train.optim.nanogpt_adamw` over the whole run (its horizon follows
    ``total_steps``; ``optim``: fields that differ from it).
    ``run``: the rest of the TrainConfig (``batch_size``, ``total_steps``, ``steps_per_call``,
    evaluation / checkpoint cadence, ``seed``).
    """
    T = 3 * max_digits + 3
    model = ToyConfig(vocab_size=len(ADDITION_VOCAB), n_layers=n_layers, n_heads=n_heads, d_model=d_model,
                      d_mlp=d_mlp, max_len=T, dropout=dropout)
    optim_config = nanogpt_adamw(lr, final_lr, warmup_steps, **(optim or {}))
    options = AdditionOptions(max_digits, carry, n_train)
    return TrainConfig("addition", model, optim_config, seq_len=T, options=options, **run)


def addition_config(variant: str = "smoke", carry: bool = True) -> TrainConfig:
    """Addition presets (Song & Zhong §5), built by :func:`addition_train_config`.

    * ``paper``: App. A's addition model and training, as printed: 8 layers, 8 heads, d 512 (MLP 4d),
      residual/embedding/attention dropout 0.1, AdamW with weight decay 0.1, batch 64, 100K iterations,
      cosine schedule with 1,000 warm-up steps up to lr 5e-5; App. E's data: 5–10 digit operands,
      reversed answer, loss after "=", 100K training problems (the authors' released code draws 1M),
      10K validation. Not printed, so NanoGPT's (the authors' code base): the cosine's floor lr/10 = 5e-6,
      β (0.9, 0.99), weight decay on the matrices, clip 1.0. float32. App. A's block of 32 cannot hold the
      longest problem (10+1+10+1+11+1 = 34 characters), so geomjax pads each problem to 34 and the model
      reads 33 positions.
    * ``cpu``: 2 layers, d 128, 3–6 digits, 3000 steps. ``smoke``: 1 layer, d 32, 2–4 digits, 40 steps
      (Adam β (0.9, 0.999), no weight decay, no clipping).
    """
    if variant == "paper":
        return addition_train_config(10, n_layers=8, n_heads=8, d_model=512, d_mlp=2048, lr=5e-5, final_lr=5e-6,
                                     warmup_steps=1000, carry=carry, dropout=0.1, batch_size=64, total_steps=100_000,
                                     steps_per_call=100, eval_every=2000, eval_batches=40, ckpt_every=5000,
                                     n_train=100_000)
    if variant == "cpu":
        return addition_train_config(6, n_layers=2, n_heads=4, d_model=128, d_mlp=512, lr=1e-3, final_lr=1e-4,
                                     warmup_steps=100, carry=carry, batch_size=64, total_steps=3000,
                                     steps_per_call=100, eval_every=500, eval_batches=16, ckpt_every=1000,
                                     n_train=100_000)
    if variant == "smoke":
        return addition_train_config(4, n_layers=1, n_heads=2, d_model=32, d_mlp=64, lr=3e-3, final_lr=3e-4,
                                     warmup_steps=5, carry=carry, optim={"b2": 0.999, "weight_decay": 0.0,
                                                                         "grad_clip": None},
                                     batch_size=16, total_steps=40, steps_per_call=10, eval_batches=2, n_train=512)
    raise ValueError(f"addition_config: variant must be one of {VARIANTS}, got {variant!r}")


def modular_config(variant: str = "smoke", *, relu: bool = True) -> TrainConfig:
    """Modular addition presets (Nanda et al., the clock blog).

    * ``paper``: the authors' released code — p 113, 30% train, full batch, 1 layer, d 128, 4 heads, d_mlp 512,
      ReLU (``relu=False``: the ReLU-free variant), AdamW lr 1e-3, weight decay 1.0 on every
      parameter, β (0.9, 0.98), 10 warm-up steps then constant, 50,000 steps (full-batch epochs).
    * ``blog``: the clock blog's model (§2–4, §8): the paper's settings without positional embeddings ("There are
      no positional embeddings", "There is no layer norm", ReLU MLP, 30% split; the optimizer of Nanda et al.'s
      code, which the blog follows), 10,000 epochs with ReLU (§4: "I let the model train till 10,000 epochs")
      and 20,000 for the ReLU-free variant (§8; the blog's longest run, §5). A model without positions
      cannot tell (a, b) from (b, a): it is the blog's model, kept as such.
    * ``cpu``: the same model and p = 113 with 50% of the pairs for training and lr 2e-3, so that it
      groks within 500 epochs (minutes on a 2-core CPU); 3,000 epochs.
    * ``smoke``: p 23, d 32, 2 heads, d_mlp 64, 300 steps at lr 3e-3.

    ``geomjax.train.grokking`` runs these configs as one jitted ``lax.scan`` with metrics inside it.
    """
    act = "relu" if relu else "none"
    # decay_steps is unused by the constant schedule; it stays at 1000 (OptimConfig's default before issue 37)
    # so that the config JSON, and the grokking runs' cache keys (grokking.config_hash), do not change
    optim = OptimConfig(lr=1e-3, schedule="constant", warmup_steps=10, b1=0.9, b2=0.98, weight_decay=1.0,
                        decay="all", decay_steps=1000)
    if variant in ("paper", "blog"):
        steps = 50_000 if variant == "paper" else 10_000 if relu else 20_000
        pos = "learned" if variant == "paper" else "none"
        return TrainConfig("modular", nanda_config(113, activation=act, pos_embedding=pos), optim, batch_size=0, seq_len=3,
                           total_steps=steps, steps_per_call=500, eval_every=1000, ckpt_every=5000,
                           options=ModularOptions(113, 0.3))
    if variant == "cpu":
        return TrainConfig("modular", nanda_config(113, activation=act), dataclasses.replace(optim, lr=2e-3), batch_size=0,
                           seq_len=3, total_steps=3_000, steps_per_call=100, eval_every=500, ckpt_every=500,
                           options=ModularOptions(113, 0.5))
    if variant == "smoke":
        model = nanda_config(23, d_model=32, n_heads=2, d_mlp=64, activation=act)
        return TrainConfig("modular", model, dataclasses.replace(optim, lr=3e-3), batch_size=0, seq_len=3, total_steps=300,
                           steps_per_call=10, eval_every=100, options=ModularOptions(23, 0.3))
    raise ValueError(f"modular_config: variant must be one of ('smoke', 'cpu', 'blog', 'paper'), got {variant!r}")


def get_config(task: str, variant: str = "smoke", **kw) -> TrainConfig:
    """Preset ``variant`` (``smoke`` / ``cpu`` / ``paper``) of ``task`` (shakespeare / addition / modular)."""
    makers = {"shakespeare": shakespeare_config, "addition": addition_config, "modular": modular_config}
    if task not in makers:
        raise ValueError(f"get_config: task must be one of {sorted(makers)}, got {task!r}")
    return makers[task](variant, **kw)


# ------------------------------------------------------------------------------------------- data

def load_task_data(cfg: TrainConfig, data_dir: str | os.PathLike | None = None) -> tuple[Any, Any, dict]:
    """Host-side data of a task: (train data pytree, eval data pytree (E, B, ...), info dict).

    Everything is derived from ``cfg.seed`` (the validation windows / problems are fixed per seed).
    """
    key = jax.random.fold_in(jax.random.key(cfg.seed), 1)
    if cfg.task == "shakespeare":
        text = tiny_shakespeare(data_dir)[0][1]
        tok = CharTokenizer.from_text(text)
        if tok.vocab_size != cfg.model.vocab_size:
            raise ValueError(f"tiny Shakespeare has {tok.vocab_size} characters but the model's vocab_size is "
                             f"{cfg.model.vocab_size}; build the config with vocab_size={tok.vocab_size}")
        n = int(len(text) * 0.9)
        train = tok.encode(text[:n])
        val = tok.encode(text[n:])
        E, B, T = cfg.eval_batches, cfg.batch_size, cfg.seq_len
        w = sample_windows([val], E * B, T + 1, key)
        eval_data = {"ids": w.ids.reshape(E, B, T + 1)}
        return {"stream": jnp.asarray(train)}, eval_data, {"tokenizer": tok, "n_train_tokens": len(train),
                                                            "n_val_tokens": len(val)}
    opt = cfg.options
    if cfg.task == "addition":
        k_tr, k_va = jax.random.split(key)
        T1 = cfg.seq_len + 1
        tr = addition_batch(k_tr, opt.n_train, opt.max_digits, T1, carry=opt.carry)
        E, B = cfg.eval_batches, cfg.batch_size
        va = addition_batch(k_va, E * B, opt.max_digits, T1, carry=opt.carry)
        train = {"ids": jnp.asarray(tr.ids), "loss_mask": jnp.asarray(tr.loss_mask)}
        eval_data = {"ids": va.ids.reshape(E, B, T1), "loss_mask": va.loss_mask.reshape(E, B, T1)}
        return train, eval_data, {"n_train": opt.n_train}
    md = modular_addition_data(opt.p, opt.train_frac, key)
    train = {"x": jnp.asarray(md.x_train), "y": jnp.asarray(md.y_train)}
    eval_data = {"x": md.x_test[None], "y": md.y_test[None]}
    return train, eval_data, {"n_train": len(md.y_train), "n_test": len(md.y_test)}


# ---------------------------------------------------------------------------------------- programs

class Programs(NamedTuple):
    """Everything compiled for a config: model, optimizer, jitted chunk and eval functions."""

    model: ToyTransformer
    tx: Any
    schedule: Any
    loss_fn: Any
    batch_fn: Any
    step_fn: Any
    chunk_fn: Any
    eval_fn: Any


def _lm_loss(model: ToyTransformer):
    def loss_fn(params, batch, key):
        x, y, m = shift_for_next_token(batch["ids"], batch.get("loss_mask"))
        rngs = None if key is None else {"dropout": key}
        logits, _ = model.apply({"params": params}, x, deterministic=key is None, rngs=rngs)
        metrics = {"accuracy": accuracy(logits, y, m)}
        if m is not None:
            metrics["exact_match"] = exact_match(logits, y, m)
        return cross_entropy(logits, y, m), metrics

    return loss_fn


def _last_loss(model: ToyTransformer, n_classes: int):
    def loss_fn(params, batch, key):
        rngs = None if key is None else {"dropout": key}
        logits, _ = model.apply({"params": params}, batch["x"], deterministic=key is None, rngs=rngs)
        last = logits[:, -1, :n_classes]
        return cross_entropy(last, batch["y"]), {"accuracy": accuracy(last, batch["y"])}

    return loss_fn


def _batch_fn(cfg: TrainConfig):
    B, T1 = cfg.batch_size, cfg.seq_len + 1
    if cfg.task == "shakespeare":
        def batch_fn(data, key):
            stream = data["stream"]
            starts = jax.random.randint(key, (B,), 0, stream.shape[0] - T1 + 1)
            ids = jax.vmap(lambda s: jax.lax.dynamic_slice(stream, (s,), (T1,)))(starts)
            return {"ids": ids}
    elif cfg.task == "addition":
        def batch_fn(data, key):
            idx = jax.random.randint(key, (B,), 0, data["ids"].shape[0])
            return {"ids": data["ids"][idx], "loss_mask": data["loss_mask"][idx]}
    else:
        def batch_fn(data, key):
            del key  # full batch (Nanda et al.)
            return data
    return batch_fn


@compiled_cache(maxsize=16)
def build_programs(cfg: TrainConfig, mesh: Mesh | None = None) -> Programs:
    """Model, optimizer, loss, batch function and the jitted chunk/eval functions of a config (cached:
    the same config and mesh reuse one compilation)."""
    model = ToyTransformer(cfg.model)
    tx, schedule = make_optimizer(cfg.optim, cfg.total_steps)
    loss_fn = _last_loss(model, cfg.options.p) if cfg.task == "modular" else _lm_loss(model)
    batch_fn = _batch_fn(cfg)
    step_fn = make_train_step(loss_fn, tx, batch_fn, schedule=schedule, mesh=mesh)
    chunk_fn = make_train_chunk(step_fn, cfg.steps_per_call, mesh=mesh)
    return Programs(model, tx, schedule, loss_fn, batch_fn, step_fn, chunk_fn, make_eval_fn(loss_fn))


def init_state(cfg: TrainConfig, programs: Programs | None = None, mesh: Mesh | None = None) -> TrainState:
    """Fresh TrainState of a config: parameters from ``fold_in(key(seed), 0)``, the run key from
    ``fold_in(key(seed), 2)`` (1 is the data key of :func:`load_task_data`).

    The parameters come from Flax's ``lazy_init`` on the input's shape: the initialisers run as ``init``
    runs them (the same programs, so the same bits), without the forward pass ``init`` also computes and
    discards (about 40% of its compilations)."""
    pr = programs or build_programs(cfg, mesh)
    base = jax.random.key(cfg.seed)
    T = 3 if cfg.task == "modular" else cfg.seq_len
    params = pr.model.lazy_init(jax.random.fold_in(base, 0), jax.ShapeDtypeStruct((1, T), jnp.int32))["params"]
    state = create_train_state(params, pr.tx, jax.random.fold_in(base, 2))
    if mesh is not None:
        state = jax.device_put(state, replicated(mesh))
    return state


@dataclasses.dataclass
class FitResult:
    """Output of :func:`fit`: final state, history, resumed-from step, the run directory, the task
    data's info and the effective schedule (:func:`geomjax.train.optim.schedule_record` of the optax
    schedule the run used; also in ``config.json``)."""

    state: TrainState
    history: History
    resumed_from: int | None
    run_dir: Path | None
    info: dict
    schedule: dict = dataclasses.field(default_factory=dict)


def fit(
    cfg: TrainConfig,
    *,
    run_dir: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    resume: bool = True,
    mesh: Mesh | None = None,
    progress: bool = True,
    stop_at: int | None = None,
    keep_checkpoints: int | None = None,
    stop: StopRule | None = None,
) -> FitResult:
    """Train the toy transformer on ``cfg``'s task; resume from ``run_dir``'s latest checkpoint.

    With ``run_dir``, writes ``config.json`` (the config, plus ``effective_schedule``: the learning rate
    at step 0, at the end of the warm-up, at the last step and at the end, read off the schedule that
    runs), checkpoints ``checkpoints/ckpt_{step}.npz`` every
    ``cfg.ckpt_every`` steps and at the end, and ``history.json``. A resumed run reproduces the
    uninterrupted run's per-step losses bit-for-bit.

    Args:
      cfg: the run's configuration.
      run_dir: output folder (None: nothing is written, no resume).
      data_dir: offline data folder (tiny Shakespeare).
      resume: continue from the latest checkpoint in ``run_dir`` if there is one.
      mesh: a ``"data"`` mesh for data parallelism (batch sharded, parameters replicated).
      progress: show a tqdm bar.
      stop_at: stop early at this step (simulates an interrupted run; the state is checkpointed).
      keep_checkpoints: keep only the newest k checkpoints.
      stop: end the run once its evaluations (every ``cfg.eval_every`` steps) meet this rule
        (:class:`geomjax.train.loop.StopRule`); ``cfg.total_steps`` is then the cap. The history records
        how the run ended (``stopped``); a resumed run reads the earlier sessions' evaluations
        (:func:`merged_history`), so one that had stopped trains no further.

    Returns:
      :class:`FitResult`.
    """
    pr = build_programs(cfg, mesh)
    schedule = schedule_record(pr.schedule, cfg.optim, cfg.total_steps)
    train_data, eval_data, info = load_task_data(cfg, data_dir)
    if mesh is not None:
        train_data = jax.device_put(train_data, replicated(mesh))
    state = init_state(cfg, pr, mesh)
    resumed = None
    ckpt_dir = None
    if run_dir is not None:
        run_dir = Path(run_dir)
        ckpt_dir = run_dir / "checkpoints"
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg_json = config_jsonable(cfg)
        last = latest_checkpoint(ckpt_dir) if resume else None
        if last is not None:
            state, meta = load_checkpoint(last, state)
            if _resolved(meta.get("config")) != _resolved(cfg_json):
                diff = _diff(meta.get("config"), cfg_json)
                warnings.warn(f"resuming {last} written with a different config ({diff}); the trajectory "
                              "will not match the original run", stacklevel=2)
            if mesh is not None:
                state = jax.device_put(state, replicated(mesh))
            resumed = int(meta["step"])
        (run_dir / "config.json").write_text(json.dumps(cfg_json | {SCHEDULE_KEY: schedule}, indent=2))

    def evaluate(st):
        return {k: float(v) for k, v in jax.device_get(pr.eval_fn(st.params, eval_data)).items()}

    def checkpoint(st, _hist):
        save_checkpoint(ckpt_dir, st, cfg, keep=keep_checkpoints)

    earlier = None  # a stop rule reads the evaluations of the sessions before a resume too
    if stop is not None and resumed is not None:
        earlier = History(evals=[e for e in merged_history(run_dir)["evals"] if e["step"] <= resumed])
    state, hist = train_loop(
        state, pr.chunk_fn, train_data, total_steps=cfg.total_steps, steps_per_call=cfg.steps_per_call,
        evaluate=evaluate, eval_every=cfg.eval_every,
        checkpoint=checkpoint if ckpt_dir is not None else None, ckpt_every=cfg.ckpt_every,
        history=earlier, stop_at=stop_at, stop=stop, progress=progress, desc=f"{cfg.task}",
    )
    if run_dir is not None:
        name = "history.json" if resumed is None else f"history_from_{resumed:08d}.json"
        (run_dir / name).write_text(json.dumps(hist.to_json()))
    return FitResult(state, hist, resumed, run_dir, info, schedule)


def merged_history(run_dir: str | Path) -> dict:
    """The whole training history of a run directory across its sessions.

    :func:`fit` writes ``history.json`` for the first session and
    ``history_from_<step>.json`` for every resumed one; they are merged by step (a later session
    wins where they overlap, which a bit-exact resume makes identical).

    Returns:
      dict with ``steps`` (n,) int array, ``train`` {name: (n,) array}, ``evals`` (list of dicts
      sorted by step), ``seconds`` (total), ``sessions`` (count) and ``gaps`` (list of
      (first, last) step ranges no session recorded, e.g. after an interrupted session).
    """
    files = sorted(Path(run_dir).glob("history_from_*.json"))
    first = Path(run_dir) / "history.json"
    files = ([first] if first.is_file() else []) + files
    steps: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    seconds = 0.0
    for f in files:
        h = json.loads(f.read_text())
        for i, st in enumerate(h.get("steps", [])):
            steps[int(st)] = {k: v[i] for k, v in h.get("train", {}).items()}
        for e in h.get("evals", []):
            evals[int(e["step"])] = e
        seconds += float(h.get("seconds", 0.0))
    order = sorted(steps)
    names = sorted({k for v in steps.values() for k in v})
    gaps = ([(0, order[0] - 1)] if order and order[0] > 0 else []) + [
        (a + 1, b - 1) for a, b in zip(order, order[1:]) if b > a + 1]
    return {"steps": np.asarray(order, np.int64),
            "train": {k: np.asarray([steps[i].get(k, np.nan) for i in order], np.float64) for k in names},
            "evals": [evals[k] for k in sorted(evals)], "seconds": seconds, "sessions": len(files),
            "gaps": gaps}


def _resolved(config_json: Any) -> Any:
    """A TrainConfig's JSON with a cosine horizon that follows the run written as the number it resolves to
    (``total_steps``), as runs written before issue 37 stored it: resuming such a run is the same run."""
    o = config_json.get("optim") if isinstance(config_json, dict) else None
    if isinstance(o, dict) and o.get("schedule") == "cosine" and o.get("decay_steps") is None:
        return config_json | {"optim": o | {"decay_steps": config_json.get("total_steps")}}
    return config_json


def _diff(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        parts = [_diff(a.get(k), b.get(k), f"{prefix}{k}.") for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        return "; ".join(p for p in parts if p)
    return f"{prefix.rstrip('.')}: {a!r} -> {b!r}"

