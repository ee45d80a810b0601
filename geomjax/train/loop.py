"""Jitted training steps, a ``lax.scan`` inner loop, evaluation and the host loop.

A run is driven by three pure functions supplied by the task:

* ``loss_fn(params, batch, dropout_key | None) -> (loss, metrics)`` (``None``: no dropout),
* ``batch_fn(data, data_key) -> batch`` — draws the step's batch on device from the task's data
  (e.g. random windows of a token stream), so a whole chunk of N steps runs in one ``lax.scan``
  without host round trips,
* an optax transformation.

Step ``s`` uses ``(data_key, dropout_key) = split(fold_in(state.rng, s))``: batches and dropout
depend only on the seed and the step, so a run resumed from a checkpoint at step s reproduces the
uninterrupted run bit-for-bit (the chunk boundaries are absolute multiples of N).

Data parallelism: given a ``"data"`` mesh, the state and data are replicated, each batch is
constrained to be sharded along its leading axis, and XLA inserts the gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from geomjax.parallel import batch_sharding, check_divisible, replicated
from geomjax.train.state import TrainState, step_keys

__all__ = [
    "History",
    "LossFn",
    "make_eval_fn",
    "make_train_chunk",
    "make_train_step",
    "jit_train_step",
    "train_loop",
]

LossFn = Callable[[Any, Any, Any], tuple[jax.Array, dict]]
BatchFn = Callable[[Any, jax.Array], Any]


def _shard(batch, mesh: Mesh | None):
    if mesh is None:
        return batch
    for x in jax.tree_util.tree_leaves(batch):
        check_divisible(int(x.shape[0]), mesh)
    return jax.lax.with_sharding_constraint(batch, batch_sharding(mesh))


def make_train_step(
    loss_fn: LossFn,
    tx: optax.GradientTransformation,
    batch_fn: BatchFn | None = None,
    *,
    schedule: optax.Schedule | None = None,
    mesh: Mesh | None = None,
) -> Callable:
    """Build one (unjitted) optimizer step.

    With ``batch_fn`` the step is ``step(state, data) -> (state, metrics)`` and draws its batch from
    ``data`` with the step's data key; without it, ``step(state, batch) -> (state, metrics)``.

    Metrics: ``loss``, the loss function's own metrics, ``grad_norm`` (before clipping) and ``lr``
    (when ``schedule`` is given), all scalars.
    """

    def step(state: TrainState, data_or_batch):
        k_data, k_drop = step_keys(state.rng, state.step)
        batch = batch_fn(data_or_batch, k_data) if batch_fn is not None else data_or_batch
        batch = _shard(batch, mesh)
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, k_drop)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        out = {"loss": loss, **metrics, "grad_norm": optax.tree.norm(grads)}
        if schedule is not None:
            out["lr"] = jnp.asarray(schedule(state.step), jnp.float32)
        return state.replace(params=params, opt_state=opt_state, step=state.step + 1), out

    return step


def jit_train_step(step: Callable, mesh: Mesh | None = None) -> Callable:
    """``jax.jit`` a step with the state donated (buffers reused in place); replicated on ``mesh``."""
    if mesh is None:
        return jax.jit(step, donate_argnums=0)
    rep = replicated(mesh)
    return jax.jit(step, donate_argnums=0, in_shardings=(rep, None), out_shardings=(rep, rep))


def make_train_chunk(step: Callable, n_steps: int, mesh: Mesh | None = None) -> Callable:
    """Jit ``n_steps`` consecutive steps as one ``lax.scan``: ``chunk(state, data) -> (state, metrics)``.

    ``step`` must draw its own batches (built with ``batch_fn``). Metrics come back stacked, (n_steps,)
    per entry. The state is donated.
    """
    if n_steps < 1:
        raise ValueError(f"make_train_chunk: n_steps must be >= 1, got {n_steps}")

    def chunk(state, data):
        return jax.lax.scan(lambda s, _: step(s, data), state, None, length=n_steps)

    if mesh is None:
        return jax.jit(chunk, donate_argnums=0)
    rep = replicated(mesh)
    return jax.jit(chunk, donate_argnums=0, in_shardings=(rep, rep), out_shardings=(rep, rep))


def make_eval_fn(loss_fn: LossFn) -> Callable:
    """Jitted ``eval(params, eval_data) -> metrics``: mean of the loss function's metrics over batches.

    ``eval_data`` is a batch pytree with an extra leading axis E (E batches of equal size); dropout
    is off. Returns ``{"loss": ..., **metrics}`` as scalars (plain means over the E batches).
    """

    def evaluate(params, eval_data):
        def body(_, batch):
            loss, metrics = loss_fn(params, batch, None)
            return None, {"loss": loss, **metrics}

        _, ms = jax.lax.scan(body, None, eval_data)
        return jax.tree_util.tree_map(lambda x: jnp.mean(x, axis=0), ms)

    return jax.jit(evaluate)


@dataclasses.dataclass
class History:
    """Host-side record of a run.

    Attributes:
      steps: (n,) int64 step index of each train metric (the step *before* its update).
      train: dict name -> (n,) float32 per-step metrics (bit-exact copies of the device values).
      evals: list of dicts ``{"step": s, "<name>": value, ...}`` (evaluation after s updates).
      seconds: wall time of the host loop.
    """

    steps: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    train: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    evals: list[dict] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def append(self, start: int, metrics: dict) -> None:
        m = {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}
        n = len(next(iter(m.values())))
        self.steps = np.concatenate([self.steps, np.arange(start, start + n, dtype=np.int64)])
        for k, v in m.items():
            self.train[k] = np.concatenate([self.train.get(k, np.zeros(0, v.dtype)), v])

    def to_json(self) -> dict:
        """JSON-friendly dict (per-step lists and evaluations)."""
        return {"steps": self.steps.tolist(), "train": {k: v.tolist() for k, v in self.train.items()},
                "evals": self.evals, "seconds": self.seconds}


def train_loop(
    state: TrainState,
    chunk_fn: Callable,
    data: Any,
    *,
    total_steps: int,
    steps_per_call: int,
    eval_fn: Callable | None = None,
    eval_data: Any = None,
    eval_every: int = 0,
    checkpoint_fn: Callable[[TrainState], Any] | None = None,
    ckpt_every: int = 0,
    stop_at: int | None = None,
    progress: bool = True,
    desc: str = "train",
) -> tuple[TrainState, History]:
    """Host loop: call ``chunk_fn`` (N = ``steps_per_call`` steps each) until ``total_steps``.

    Metrics are fetched once per chunk (every N steps). Evaluation runs at step 0 (fresh runs), every
    ``eval_every`` steps and at the end; ``checkpoint_fn(state)`` runs every ``ckpt_every`` steps and
    at the end. ``stop_at`` ends the loop early at that step (after checkpointing), simulating an
    interrupted run. A tqdm bar shows progress unless ``progress=False``.

    Raises:
      ValueError: the state's step, ``total_steps``, ``eval_every``, ``ckpt_every`` or ``stop_at`` is
        not a multiple of ``steps_per_call`` (chunk boundaries must be absolute for exact resume).
    """
    from tqdm.auto import tqdm

    N = int(steps_per_call)
    start = int(jax.device_get(state.step))
    for name, v in (("start step", start), ("total_steps", total_steps), ("eval_every", eval_every),
                    ("ckpt_every", ckpt_every), ("stop_at", stop_at or 0)):
        if v % N:
            raise ValueError(f"train_loop: {name} = {v} is not a multiple of steps_per_call = {N}; "
                             "chunk boundaries must be absolute multiples of N for exact resume")
    end = total_steps if stop_at is None else min(stop_at, total_steps)
    hist = History()
    t0 = time.perf_counter()

    def do_eval(st):
        if eval_fn is not None:
            m = jax.device_get(eval_fn(st.params, eval_data))
            hist.evals.append({"step": int(jax.device_get(st.step))} | {k: float(v) for k, v in m.items()})

    if start == 0:
        do_eval(state)
    bar = tqdm(total=total_steps, initial=start, disable=not progress, desc=desc, leave=False)
    s = start
    try:
        while s < end:
            state, metrics = chunk_fn(state, data)
            hist.append(s, metrics)
            s += N
            bar.update(N)
            bar.set_postfix(loss=f"{float(hist.train['loss'][-1]):.4f}")
            if eval_every and s % eval_every == 0 and s < end:
                do_eval(state)
            if checkpoint_fn is not None and ckpt_every and s % ckpt_every == 0 and s < end:
                checkpoint_fn(state)
    finally:
        bar.close()
    if s > start or not hist.evals or hist.evals[-1]["step"] != s:
        do_eval(state)
    if checkpoint_fn is not None and s > start:
        checkpoint_fn(state)
    hist.seconds = time.perf_counter() - t0
    return state, hist
