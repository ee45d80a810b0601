"""Training: TrainState, optax builders, losses, jitted steps with a ``lax.scan`` inner loop,
``.npz`` checkpoints with exact resume, and the toy-transformer tasks with presets.

::

    from geomjax import train
    cfg = train.get_config("shakespeare", "smoke")          # smoke | cpu | paper
    res = train.fit(cfg, run_dir="runs/shakespeare")        # resumes from the latest checkpoint
    res.history.train["loss"]  (per step)   res.history.evals  (validation)
"""

from geomjax.train.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from geomjax.train.losses import (
    accuracy,
    cross_entropy,
    exact_match,
    last_position_loss,
    mask_tokens,
    masked_lm_loss,
    next_token_loss,
    shift_for_next_token,
    token_cross_entropy,
)
from geomjax.train.loop import (
    History,
    StopRule,
    check_cadences,
    jit_train_step,
    make_eval_fn,
    make_train_chunk,
    make_train_step,
    train_loop,
)
from geomjax.train.optim import (
    OptimConfig,
    check_length_change,
    check_run_length,
    decay_mask,
    effective_schedule,
    make_optimizer,
    make_schedule,
    nanogpt_adamw,
    schedule_record,
)
from geomjax.train.state import TrainState, create_train_state, step_keys
from geomjax.train.tasks import (
    AdditionOptions,
    FitResult,
    ModularOptions,
    Programs,
    TrainConfig,
    addition_config,
    addition_train_config,
    build_programs,
    fit,
    get_config,
    init_state,
    load_task_data,
    merged_history,
    modular_config,
    shakespeare_config,
    shakespeare_train_config,
)
from geomjax.train.toy_run import load_toy_run

__all__ = [
    "AdditionOptions",
    "FitResult",
    "History",
    "ModularOptions",
    "OptimConfig",
    "Programs",
    "StopRule",
    "TrainConfig",
    "TrainState",
    "accuracy",
    "addition_config",
    "addition_train_config",
    "build_programs",
    "check_cadences",
    "check_length_change",
    "check_run_length",
    "checkpoint_path",
    "create_train_state",
    "cross_entropy",
    "decay_mask",
    "effective_schedule",
    "exact_match",
    "fit",
    "get_config",
    "init_state",
    "jit_train_step",
    "last_position_loss",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_task_data",
    "merged_history",
    "load_toy_run",
    "make_eval_fn",
    "make_optimizer",
    "make_schedule",
    "nanogpt_adamw",
    "make_train_chunk",
    "make_train_step",
    "mask_tokens",
    "masked_lm_loss",
    "modular_config",
    "next_token_loss",
    "save_checkpoint",
    "schedule_record",
    "shakespeare_config",
    "shakespeare_train_config",
    "shift_for_next_token",
    "step_keys",
    "token_cross_entropy",
    "train_loop",
]
