"""Optax builders: AdamW with linear warm-up + cosine (or constant) schedule, decay masks, clipping.

Schedules as the sources run them (the authors' released code):

* NanoGPT (Song & Zhong): linear warm-up then cosine decay to a final lr
  (``optax.warmup_cosine_decay_schedule``; NanoGPT's own warm-up starts at lr/(warmup+1) rather
  than 0, a one-step difference);
* Nanda et al.: ``lr * min(step / 10, 1)`` — linear warm-up then constant.

One source of truth for a run's length (issue 37): a cosine's horizon (the step at which it reaches
``final_lr``) is the run's length — ``TrainConfig.total_steps``, ``LocaterConfig.steps``, a grokking
run's epochs — unless the caller pins it on purpose with ``decay_steps=N``. The trainers build the
schedule with :func:`make_optimizer` ``(optim, total_steps)``, so changing a run's length changes its
schedule; :func:`check_run_length` refuses a schedule that does not fit the run, and
:func:`effective_schedule` is the record of the schedule that ran (lr at step 0, at the end of the
warm-up, at the last step and at the run's end) that ``config.json`` and the reports carry.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax

from geomjax.typing import Params, PyTree

__all__ = ["OptimConfig", "check_length_change", "check_run_length", "decay_mask", "effective_schedule",
           "make_optimizer", "make_schedule", "nanogpt_adamw", "schedule_record"]


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW hyperparameters.

    Attributes:
      lr: peak learning rate.
      schedule: ``"cosine"`` (warm-up, then cosine to ``final_lr`` at the horizon) or
        ``"constant"`` (warm-up, then ``lr``).
      warmup_steps: linear warm-up from 0 over this many steps.
      decay_steps: the cosine's horizon, the step at which it reaches ``final_lr`` (counted from
        step 0, warm-up included; afterwards the lr stays at ``final_lr``). None (default): the
        run's length, so the horizon follows ``total_steps`` when a run is made longer or shorter;
        an int pins it on purpose (:meth:`OptimConfig.horizon`). Unused by the constant schedule.
      final_lr: end value of the cosine.
      b1, b2, eps: Adam parameters.
      weight_decay: decoupled weight decay (AdamW), multiplied by the lr as in PyTorch/optax.
      decay: which parameters decay — ``"matrices"`` (not biases, not LayerNorm scales, and
        embeddings only if ``decay_embeddings``), ``"all"`` (PyTorch ``AdamW(model.parameters())``,
        as Nanda et al.) or ``"none"``.
      decay_embeddings: with ``decay="matrices"``, whether embedding tables decay (NanoGPT decays
        every tensor with >= 2 dims, embeddings included).
      grad_clip: global-norm clipping threshold (None: no clipping).
    """

    lr: float = 1e-3
    schedule: str = "cosine"
    warmup_steps: int = 0
    decay_steps: int | None = None
    final_lr: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decay: str = "matrices"
    decay_embeddings: bool = False
    grad_clip: float | None = None

    def __post_init__(self):
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"OptimConfig: schedule must be 'cosine' or 'constant', got {self.schedule!r}")
        if self.decay not in ("matrices", "all", "none"):
            raise ValueError(f"OptimConfig: decay must be 'matrices', 'all' or 'none', got {self.decay!r}")
        if self.schedule == "cosine" and self.decay_steps is not None and self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"OptimConfig: decay_steps ({self.decay_steps}) must exceed warmup_steps ({self.warmup_steps})"
            )
        if self.lr <= 0 or self.warmup_steps < 0:
            raise ValueError(f"OptimConfig: need lr > 0 and warmup_steps >= 0, got {self.lr}, {self.warmup_steps}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"OptimConfig: grad_clip must be > 0 or None, got {self.grad_clip}")

    def horizon(self, total_steps: int | None) -> int | None:
        """The cosine's horizon in a run of ``total_steps`` steps: the pinned ``decay_steps``, else
        ``total_steps`` (None for the constant schedule, which has none)."""
        if self.schedule != "cosine":
            return None
        return total_steps if self.decay_steps is None else self.decay_steps

    @property
    def end_lr(self) -> float:
        """The configured value the schedule ends on: ``final_lr`` (cosine) or ``lr`` (constant)."""
        return self.final_lr if self.schedule == "cosine" else self.lr


def check_run_length(optim: OptimConfig, total_steps: int, where: str, name: str = "total_steps") -> None:
    """Refuse a schedule that does not fit a run of ``total_steps`` steps (issue 37), before any work.

    The warm-up must end inside the run (``warmup_steps < total_steps``); a pinned cosine horizon must
    end inside the run or at its end (``decay_steps <= total_steps``: a longer one never reaches
    ``final_lr``). A pinned horizon shorter than the run is allowed (the lr then stays at ``final_lr``).

    Raises:
      ValueError: one line naming both numbers; ``where`` and ``name`` (the length's field) prefix it.
    """
    T = int(total_steps)
    if T < 1:
        raise ValueError(f"{where}: {name} must be >= 1, got {T}")
    if optim.warmup_steps >= T:
        raise ValueError(f"{where}: the warm-up ({optim.warmup_steps} steps) must end inside the run ({name} = {T}); "
                         "lower optim.warmup_steps or lengthen the run")
    H = optim.horizon(T)
    if H is not None and H > T:
        raise ValueError(f"{where}: optim.decay_steps = {H} is pinned beyond the run ({name} = {T}), so the cosine "
                         f"would never reach final_lr; set decay_steps=None to follow the run, or pin it <= {T}")


def check_length_change(optim: OptimConfig, old: int, new: int, where: str, name: str = "total_steps") -> None:
    """``replace()`` of a run's length keeps a pinned cosine horizon only if the caller restates it:
    raise when the length changes from ``old`` to ``new`` while ``optim.decay_steps`` is pinned.

    Raises:
      ValueError: one line naming the old and new lengths and the pinned horizon.
    """
    if new != old and optim.schedule == "cosine" and optim.decay_steps is not None:
        raise ValueError(f"{where}.replace: {name} {old} -> {new}, but the cosine's horizon is pinned at "
                         f"optim.decay_steps = {optim.decay_steps}; pass optim=dataclasses.replace(cfg.optim, "
                         "decay_steps=None) to follow the new length, or pin a new decay_steps in the same call")


def nanogpt_adamw(lr: float, final_lr: float, warmup_steps: int, decay_steps: int | None = None,
                  **overrides) -> OptimConfig:
    """NanoGPT's AdamW (the authors' released code): linear warm-up over ``warmup_steps``, then cosine from ``lr`` to
    ``final_lr`` at the end of the run (``decay_steps``: None follows the run's length, an int pins
    the horizon); β (0.9, 0.99), weight decay 0.1 on the matrices, global-norm clip 1.0.
    ``overrides``: other :class:`OptimConfig` fields (e.g. ``decay_embeddings=True``)."""
    recipe = {"schedule": "cosine", "b1": 0.9, "b2": 0.99, "weight_decay": 0.1, "decay": "matrices", "grad_clip": 1.0}
    return OptimConfig(lr=lr, warmup_steps=warmup_steps, decay_steps=decay_steps, final_lr=final_lr,
                       **(recipe | overrides))


def make_schedule(cfg: OptimConfig, total_steps: int | None = None) -> optax.Schedule:
    """Learning rate as a function of the step: linear warm-up from 0, then cosine or constant.

    ``total_steps``: the run's length, the cosine's horizon unless ``cfg.decay_steps`` pins it (see
    :meth:`OptimConfig.horizon`); needed for a cosine that follows the run.

    Raises:
      ValueError: a cosine that follows the run without ``total_steps``.
    """
    if cfg.schedule == "cosine":
        horizon = cfg.horizon(total_steps)
        if horizon is None:
            raise ValueError("make_schedule: this cosine's horizon follows the run (decay_steps=None); pass the run's "
                             "total_steps, or pin decay_steps")
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=cfg.lr, warmup_steps=cfg.warmup_steps,
            decay_steps=horizon, end_value=cfg.final_lr,
        )
    if cfg.warmup_steps == 0:
        return optax.constant_schedule(cfg.lr)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, cfg.lr, cfg.warmup_steps), optax.constant_schedule(cfg.lr)],
        [cfg.warmup_steps],
    )


def _leaf_name(path) -> str:
    k = path[-1]
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def decay_mask(params: Params, mode: str = "matrices", decay_embeddings: bool = False) -> PyTree[bool]:
    """Boolean pytree: which parameters receive weight decay.

    ``"matrices"``: leaves named ``bias`` or ``scale`` (LayerNorm) never decay; leaves named
    ``embedding`` (token/position tables) decay iff ``decay_embeddings``; every other leaf (kernels)
    decays. ``"all"``: every leaf. ``"none"``: no leaf.
    """
    def rule(path, _):
        if mode == "all":
            return True
        if mode == "none":
            return False
        name = _leaf_name(path)
        if name in ("bias", "scale"):
            return False
        if name == "embedding":
            return decay_embeddings
        return True

    return jax.tree_util.tree_map_with_path(rule, params)


def make_optimizer(cfg: OptimConfig, total_steps: int | None = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW (decoupled weight decay, masked) after optional global-norm clipping.

    ``total_steps``: the run's length (the cosine's horizon unless pinned; :func:`make_schedule`).

    Returns:
      (optax transformation, learning-rate schedule).
    """
    schedule = make_schedule(cfg, total_steps)
    adamw = optax.adamw(
        schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
        mask=lambda p: decay_mask(p, cfg.decay, cfg.decay_embeddings),
    )
    tx = adamw if cfg.grad_clip is None else optax.chain(optax.clip_by_global_norm(cfg.grad_clip), adamw)
    return tx, schedule


def schedule_record(schedule: optax.Schedule, optim: OptimConfig, total_steps: int) -> dict:
    """The effective schedule of a run (issue 37), read off the optax ``schedule`` itself.

    Steps count optimizer updates from 0: the update from step s to s + 1 uses ``schedule(s)`` (the
    history's ``lr``), so a run of T steps uses steps 0..T−1 and ends at step T.

    Returns:
      dict: ``schedule`` (kind), ``lr`` (peak), ``end_lr`` (the configured final value: ``final_lr``,
      or ``lr`` for the constant schedule), ``warmup_steps`` W, ``horizon`` (the cosine's, None for
      constant), ``total_steps`` T, and the learning rates ``lr_first_step`` (step 0),
      ``lr_warmup_end`` (step W), ``lr_last_step`` (step T−1, the last update) and ``lr_end``
      (step T, where the run ends: ``end_lr`` when the schedule spans the run).
    """
    T, W = int(total_steps), int(optim.warmup_steps)
    # each value as the float32 the optimizer used, written at float32 precision (0.002, not 0.0020000000949949026)
    at = {name: float(str(np.float32(schedule(s)))) for name, s in
          (("lr_first_step", 0), ("lr_warmup_end", W), ("lr_last_step", T - 1), ("lr_end", T))}
    return {"schedule": optim.schedule, "lr": optim.lr, "end_lr": optim.end_lr, "warmup_steps": W,
            "horizon": optim.horizon(T), "total_steps": T, **at}


def effective_schedule(optim: OptimConfig, total_steps: int) -> dict:
    """:func:`schedule_record` of the schedule a trainer builds for a run of ``total_steps`` steps
    (``make_schedule(optim, total_steps)``, the one :func:`make_optimizer` hands to optax)."""
    return schedule_record(make_schedule(optim, total_steps), optim, total_steps)
