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

:func:`train_loop` is the one host loop of every trainer (toy transformer, grokking, the LocATER
sweep): chunks, evaluation and checkpoint cadence, progress, the non-finite-metric check, resume and
the early stop of a :class:`StopRule` (a run that ends once an evaluated metric has reached a threshold
at a stated number of consecutive evaluations, e.g. grokking: test accuracy ≥ 99%).

Data parallelism: given a ``"data"`` mesh, the state and data are replicated, each batch is
constrained to be sharded along its leading axis, and XLA inserts the gradient all-reduce.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from geomjax.base.parallel import batch_sharding, check_divisible, replicated
from geomjax.train.anomalies import Anomaly
from geomjax.train.state import TrainState, step_keys
from geomjax.typing import Array, IntSeq, Real

__all__ = [
    "History",
    "LossFn",
    "StopRule",
    "check_cadences",
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
    """Host-side record of a run (filled by :func:`train_loop`).

    Attributes:
      steps: (n,) int64 step index of each train metric (the step *before* its update).
      train: dict name -> (n, ...) per-step metrics (bit-exact copies of the device values; the
        leading axis is the step, e.g. (n, K) for a vmapped sweep over K runs).
      evals: list of dicts ``{"step": s, "<name>": value, ...}`` (evaluation after s updates).
      seconds: wall time of the host loop (plus that of earlier sessions when resumed with ``history=``).
      anomalies: :class:`geomjax.train.anomalies.Anomaly` found while training (non-finite metrics).
      stopped: with a :class:`StopRule`, how the run ended: ``{"step": s, "by": "rule" | "cap" |
        "non-finite", "reason": one line, "rule": the rule's fields}`` (None without a rule, or while
        a run is unfinished).

    Chunks are kept as a list and concatenated on first access of ``steps``/``train`` (appending is
    O(1) per chunk, so long runs do not copy their history once per chunk).
    """

    evals: list[dict] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    anomalies: list[Anomaly] = dataclasses.field(default_factory=list)
    stopped: dict | None = None
    _steps: list = dataclasses.field(default_factory=list, repr=False)
    _train: dict = dataclasses.field(default_factory=dict, repr=False)

    def append(self, start: int, metrics: dict) -> None:
        """Record one chunk: ``metrics`` name -> (n, ...) arrays of steps ``start .. start + n − 1``."""
        m = {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}
        n = len(next(iter(m.values())))
        self._steps.append(np.arange(start, start + n, dtype=np.int64))
        for k, v in m.items():
            self._train.setdefault(k, []).append(v)

    @property
    def steps(self) -> np.ndarray:
        if len(self._steps) != 1:
            self._steps[:] = [np.concatenate(self._steps) if self._steps else np.zeros(0, np.int64)]
        return self._steps[0]

    @property
    def train(self) -> dict[str, np.ndarray]:
        for k, v in self._train.items():
            if len(v) != 1:
                v[:] = [np.concatenate(v)]
        return {k: v[0] for k, v in self._train.items()}

    def to_json(self) -> dict:
        """JSON-friendly dict (per-step lists and evaluations; ``stopped`` when a stop rule ran)."""
        out = {"steps": self.steps.tolist(), "train": {k: v.tolist() for k, v in self.train.items()},
               "evals": self.evals, "seconds": self.seconds}
        return out | ({"stopped": self.stopped} if self.stopped is not None else {})


@dataclasses.dataclass(frozen=True)
class StopRule:
    """Early stop on an evaluated metric: the run ends at the first evaluation after which the last
    ``patience`` evaluations of ``metric`` are all ≥ ``threshold`` (``mode="at_most"``: all ≤ it, e.g. a
    validation loss), else at its cap (``total_steps``).

    The last ``patience`` evaluations, not any earlier window: the state the run returns is the one
    that meets the rule (a metric that reached the threshold and fell back does not stop the run).
    Grokking (Nanda et al. §3; the clock blog §4): ``StopRule("test_acc", 0.99, 2, origin=...)``.

    Attributes:
      metric: the evaluated metric's name (a key of the evaluations the loop sees).
      threshold: the value the metric must reach (NaN never does).
      patience: consecutive evaluations that reach it (≥ 1).
      origin: where the threshold and the patience come from (recorded with the run).
      mode: ``"at_least"`` (≥ threshold, an accuracy) or ``"at_most"`` (≤ threshold, a loss).
    """

    metric: str
    threshold: float
    patience: int = 1
    origin: str = ""
    mode: str = "at_least"

    def __post_init__(self):
        if not self.metric:
            raise ValueError("StopRule: metric must be a non-empty metric name")
        if int(self.patience) != self.patience or self.patience < 1:
            raise ValueError(f"StopRule: patience must be an integer >= 1, got {self.patience!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"StopRule: threshold must be finite, got {self.threshold!r}")
        if self.mode not in ("at_least", "at_most"):
            raise ValueError(f"StopRule: mode must be 'at_least' or 'at_most', got {self.mode!r}")

    def describe(self) -> str:
        """One line: the rule in words."""
        n = self.patience
        op = ">=" if self.mode == "at_least" else "<="
        return f"{self.metric} {op} {self.threshold:g} at {n} consecutive evaluation{'s' if n > 1 else ''}"

    def reason(self, steps: IntSeq, values: Sequence[float] | Real[Array, " n"]) -> str | None:
        """None unless the rule holds at the end of ``values`` (the metric's evaluations in order, at
        ``steps``); else one line naming the steps and values that meet it."""
        v = np.asarray(values, np.float64).reshape(-1)
        n = self.patience
        if v.size < n or not np.all(v[-n:] >= self.threshold if self.mode == "at_least" else v[-n:] <= self.threshold):
            return None
        at = ", ".join(f"{int(s)}: {x:.4f}" for s, x in zip(list(steps)[-n:], v[-n:]))
        return f"{self.describe()} (step: value {at})"


def check_cadences(where: str, name: str, total: int, steps_per_call: int, **cadences: int) -> None:
    """The cadences of a run's config fit its length (issue 37): ``total`` (the length, field ``name``)
    and every nonzero cadence (``eval_every=``, ``ckpt_every=``, ...) are multiples of
    ``steps_per_call`` N, and every nonzero cadence divides ``total`` (0: at the start and end only).

    Raises:
      ValueError: one line, prefixed ``where``, naming the cadence and the length it does not fit.
    """
    N = int(steps_per_call)
    if N < 1:
        raise ValueError(f"{where}: steps_per_call must be >= 1, got {N}")
    for key, v in ((name, total), *cadences.items()):
        if v % N:
            raise ValueError(f"{where}: {key} = {v} must be a multiple of steps_per_call = {N}")
    for key, v in cadences.items():
        if v and total % v:
            raise ValueError(f"{where}: {key} = {v} must divide {name} = {total} (the run's last interval would "
                             "be shorter); choose a length that is a multiple of it, or change the cadence")


def _nonfinite(start: int, n_steps: int, metrics: dict) -> Anomaly | None:
    """The first non-finite floating metric of a chunk (host arrays with a leading axis of n ≤ N
    entries, entry i covering steps up to ``start + (i + 1)·N/n``), as an Anomaly, or None."""
    for name, v in metrics.items():
        v = np.asarray(v)
        if not np.issubdtype(v.dtype, np.floating) or np.all(np.isfinite(v)):
            continue
        i = int(np.flatnonzero(~np.all(np.isfinite(v.reshape(len(v), -1)), axis=1))[0])
        step = start + i * (n_steps // len(v))
        bad = v.reshape(len(v), -1)[i]
        return Anomaly("non-finite", name, step, step, float(bad[~np.isfinite(bad)][0]), math.nan, None)
    return None


def _eval_series(hist: History, metric: str) -> tuple[list[int], list[float]]:
    """The evaluations of ``metric`` in ``hist.evals``, as (steps, values)."""
    ev = [e for e in hist.evals if metric in e]
    return [e["step"] for e in ev], [float(e[metric]) for e in ev]


def _stop_record(stop: StopRule, step: int, total_steps: int, fired: str | None, halted: bool) -> dict:
    """:attr:`History.stopped` of a run that ended at ``step``: by the rule (``fired``: its reason), at the
    cap, or at a non-finite metric (``halted``)."""
    by = "non-finite" if halted else "rule" if fired is not None else "cap"
    reason = {"rule": fired, "cap": f"reached total_steps = {total_steps} before {stop.describe()}",
              "non-finite": "a non-finite metric (nonfinite='stop')"}[by]
    return {"step": int(step), "by": by, "reason": reason, "rule": dataclasses.asdict(stop)}


def _default_postfix(metrics: dict, hist: History) -> dict:
    if "loss" in metrics:
        return {"loss": f"{float(np.ravel(metrics['loss'])[-1]):.4f}"}
    return {}


def train_loop(
    state: TrainState | Any,
    chunk_fn: Callable,
    data: Any,
    *,
    total_steps: int,
    steps_per_call: int,
    evaluate: Callable[[TrainState], dict] | None = None,
    eval_every: int = 0,
    checkpoint: Callable[[TrainState, History], Any] | None = None,
    ckpt_every: int = 0,
    record: Callable[[int, dict], None] | None = None,
    history: History | None = None,
    postfix: Callable[[dict, History], dict] | None = None,
    nonfinite: str = "warn",
    stop_at: int | None = None,
    stop: StopRule | None = None,
    stop_series: Callable[[History], tuple[Sequence[int], Sequence[float]]] | None = None,
    progress: bool = True,
    desc: str = "train",
) -> tuple[TrainState | Any, History]:
    """The host loop of every geomjax trainer: ``chunk_fn`` (N = ``steps_per_call`` steps in one
    jitted ``lax.scan``) until ``total_steps``, with evaluation, checkpoint and anomaly hooks.

    Used by :func:`geomjax.train.fit` (toy transformer), :func:`geomjax.train.grokking.train_grokking`
    (full-batch scan with in-scan metrics) and :func:`geomjax.train.locater.run_sweep` (vmapped κ2 sweep).
    Exact resume: step s draws its keys from ``fold_in(rng, s)`` inside the chunk and chunk
    boundaries are absolute multiples of N, so a run resumed at a checkpoint reproduces the
    uninterrupted run bit-for-bit (the loop only schedules; it never touches the arithmetic).

    Per chunk (metrics fetched to the host once per chunk): ``record(start, metrics)`` (default:
    ``History.append``); a non-finite check of every floating metric (``nonfinite``: ``"warn"`` records
    an :class:`~geomjax.train.anomalies.Anomaly` in ``history.anomalies`` and warns once, ``"stop"``
    also ends the run there without a final checkpoint, ``"ignore"`` does nothing). ``evaluate(state)``
    runs at step 0 (fresh runs), every ``eval_every`` steps and at the end, its dict appended to
    ``history.evals`` with ``"step"``; ``checkpoint(state, history)`` runs every ``ckpt_every`` steps
    and at the end (``history.seconds`` updated first). ``stop_at`` ends the loop early at that step
    (after checkpointing), simulating an interrupted run. ``stop`` (a :class:`StopRule`) ends the run
    after the chunk whose evaluations meet it (the final evaluation and checkpoint follow as at the
    cap) and records how the run ended in ``history.stopped``; the rule reads ``stop_series(history)``
    -> (steps, values) (default: the ``stop.metric`` entries of ``history.evals``; in-scan metrics
    supply their own). It is checked before the first chunk too, so a resumed run that had stopped
    trains no further: resume stays exact. A tqdm bar shows progress unless
    ``progress=False``; ``postfix(metrics, history)`` gives its fields. ``state`` is a TrainState
    (or any state with a scalar ``step``: the loop reads only that and hands the state to the hooks).

    Args:
      state: TrainState (its ``step`` is the start; a multiple of N).
      chunk_fn: ``chunk_fn(state, data) -> (state, metrics)``, metrics with a leading axis per chunk.
      data: the chunk's second argument (on device).
      history: a History to continue (a resumed run's earlier record; its ``seconds`` are added to).

    Raises:
      ValueError: the state's step, ``total_steps``, ``eval_every``, ``ckpt_every`` or ``stop_at`` is
        not a multiple of ``steps_per_call`` (chunk boundaries must be absolute for exact resume), or
        ``nonfinite`` is not one of "warn", "stop", "ignore".
    """
    from tqdm.auto import tqdm  # display only (kept off the import path)

    N = int(steps_per_call)
    start = int(jax.device_get(state.step))
    for name, v in (("start step", start), ("total_steps", total_steps), ("eval_every", eval_every),
                    ("ckpt_every", ckpt_every), ("stop_at", stop_at or 0)):
        if v % N:
            raise ValueError(f"train_loop: {name} = {v} is not a multiple of steps_per_call = {N}; "
                             "chunk boundaries must be absolute multiples of N for exact resume")
    if nonfinite not in ("warn", "stop", "ignore"):
        raise ValueError(f"train_loop: nonfinite must be 'warn', 'stop' or 'ignore', got {nonfinite!r}")
    end = total_steps if stop_at is None else min(stop_at, total_steps)
    hist = History() if history is None else history
    record = hist.append if record is None else record
    postfix = _default_postfix if postfix is None else postfix
    prior, t0 = hist.seconds, time.perf_counter()

    def rule_fires() -> str | None:
        if stop is None:
            return None
        steps, values = stop_series(hist) if stop_series is not None else _eval_series(hist, stop.metric)
        return stop.reason(steps, values)

    def do_eval(st):
        if evaluate is not None:
            hist.evals.append({"step": int(jax.device_get(st.step))} | evaluate(st))

    def do_checkpoint(st):
        if checkpoint is not None:
            hist.seconds = prior + time.perf_counter() - t0
            checkpoint(st, hist)

    if start == 0:
        do_eval(state)
    bar = tqdm(total=total_steps, initial=start, disable=not progress, desc=desc, leave=False)
    s, halted, fired = start, False, rule_fires()
    try:
        while s < end and fired is None:
            state, metrics = chunk_fn(state, data)
            metrics = {k: np.asarray(v) for k, v in jax.device_get(metrics).items()}
            record(s, metrics)
            bad = _nonfinite(s, N, metrics) if nonfinite != "ignore" else None
            s += N
            bar.update(N)
            if bad is not None and not any(a.kind == "non-finite" for a in hist.anomalies):
                hist.anomalies.append(bad)
                warnings.warn(f"{desc}: {bad.describe()}", RuntimeWarning, stacklevel=2)
                halted = nonfinite == "stop"
            if eval_every and s % eval_every == 0 and s < end:
                do_eval(state)
            bar.set_postfix(postfix(metrics, hist))
            fired = rule_fires()
            if halted or fired is not None:
                break
            if ckpt_every and s % ckpt_every == 0 and s < end:
                do_checkpoint(state)
    finally:
        bar.close()
    if not hist.evals or hist.evals[-1]["step"] != s:
        do_eval(state)
    if stop is not None and (fired is not None or halted or s == total_steps):  # the run ended (not interrupted)
        hist.stopped = _stop_record(stop, s, total_steps, fired or rule_fires(), halted)
    if s > start and not halted:
        do_checkpoint(state)
    hist.seconds = prior + time.perf_counter() - t0
    return state, hist
