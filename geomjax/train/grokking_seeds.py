"""K independently trained grokking models as ONE vmapped program (a statement about "the recipe's trained
model" is decided over seeds: :mod:`geomjax.sources.clock.claims`).

Seed s of a :class:`~geomjax.train.grokking.GrokkingConfig` is the run :func:`~geomjax.train.grokking.train_grokking`
trains for ``cfg.replace(seed=s)``: its parameters from ``fold_in(key(s), 0)``, its train/test split from
``fold_in(key(s), 1)`` (:func:`~geomjax.train.grokking.grokking_data`), its run key from ``fold_in(key(s), 2)``.
Here the K states are stacked along a leading axis (parameters, optimizer state and run key; the epoch counter
is shared) and so are the K data splits (every split has ⌊train_frac · p²⌋ training pairs), and one jitted
call runs ``cfg.chunk`` epochs of all K runs: ``jax.vmap`` of the single run's chunk
(:func:`~geomjax.train.grokking.chunk_program`), driven by the one host loop
:func:`geomjax.train.loop.train_loop`. Each seed computes what it computes alone: a vmapped seed equals the
run trained alone up to float32 rounding (XLA batches the matmuls; the tests compare them).

With ``run_dir`` every chunk writes a checkpoint of the stacked state (newest 2 kept) and ``history.npz``;
a re-run resumes from the latest checkpoint exactly (chunk boundaries are absolute; an epoch depends only on
the state it starts from). With ``cfg.stop`` the run ends at the first chunk after which EVERY seed meets the
rule (the stop series is the minimum over seeds of the rule's metric).

The cost: K times a single run's (the vmapped program does K runs' arithmetic in one call; on a 2-core CPU
about K × 25 ms an epoch for the blog's model at p = 113, K = 32: ~2 CPU-hours for 10,000 epochs).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
import os
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import bounded_cache, compiled_cache
from geomjax.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from geomjax.train.grokking import (METRICS, GrokkingConfig, GrokkingData, GrokkingResult, chunk_program, grokking_data,
                                    init_program, metrics_program, resume_state, run_json)
from geomjax.train.loop import train_loop
from geomjax.train.state import TrainState

__all__ = ["GrokkingSeeds", "continues", "load_grokking_seeds", "make_seeds_chunk", "seed_result", "seeds_data",
           "seeds_init", "train_grokking_seeds"]

#: vmap axes of a stacked state: parameters, optimizer state and run key per seed; the epoch counter shared
SEED_AXES = TrainState(params=0, opt_state=0, step=None, rng=0)


def _check_seeds(seeds) -> tuple[int, ...]:
    seeds = tuple(int(s) for s in seeds)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"grokking seeds: need distinct non-negative seeds (at least one), got {seeds}")
    return seeds


def seeds_data(cfg: GrokkingConfig, seeds: Iterable[int]) -> GrokkingData:
    """The K seeds' train/test splits stacked: x (K, n, 3), y (K, n) (seed s's split is
    :func:`~geomjax.train.grokking.grokking_data` of ``cfg.replace(seed=s)``)."""
    parts = [grokking_data(cfg.replace(seed=s)) for s in _check_seeds(seeds)]
    return GrokkingData(*(jnp.stack(v) for v in zip(*parts)))


def seeds_init(cfg: GrokkingConfig, seeds: Iterable[int]) -> TrainState:
    """Fresh stacked state of the K seeds (seed s's is :func:`~geomjax.train.grokking.grokking_init` of
    ``cfg.replace(seed=s)``), built by one vmapped call of the init program."""
    base = [jax.random.key(s) for s in _check_seeds(seeds)]
    kp = jnp.stack([jax.random.fold_in(k, 0) for k in base])
    kr = jnp.stack([jax.random.fold_in(k, 2) for k in base])
    return jax.jit(jax.vmap(init_program(cfg), out_axes=SEED_AXES))(kp, kr)


@compiled_cache(maxsize=8)
def make_seeds_chunk(cfg: GrokkingConfig, n_epochs: int) -> Callable:
    """Jitted ``run(state, data) -> (state, metrics)``: ``n_epochs`` epochs of every seed, ``jax.vmap`` of the single
    run's chunk (:func:`~geomjax.train.grokking.chunk_program`) over the stacked state and data (:data:`SEED_AXES`).
    Metrics come back with the seed as their SECOND axis: (n_epochs // log_every, K[, log_every]). State donated."""
    run = jax.vmap(chunk_program(cfg, n_epochs), in_axes=(SEED_AXES, 0), out_axes=(SEED_AXES, 1))
    return jax.jit(run, donate_argnums=0)


@dataclasses.dataclass
class GrokkingSeeds:
    """Outcome of :func:`train_grokking_seeds`.

    Attributes:
      config: the runs' config (its ``seed`` is ignored: ``seeds`` are the runs').
      seeds: the K seeds, in the order of the stacked axis.
      state: the stacked TrainState (leading axis K, ``step`` shared).
      history: ``epoch`` (n,) and each of :data:`~geomjax.train.grokking.METRICS` (n, K) (epoch 0 included),
        ``dense_train_loss`` / ``dense_train_acc`` (E, K): every epoch's full-batch train loss / accuracy.
      seconds: training wall time, all sessions; compile_seconds: this call's compilation.
      run_dir: checkpoints and history (or None). stopped: with a stop rule, how the run ended.
    """

    config: GrokkingConfig
    seeds: tuple[int, ...]
    state: TrainState
    history: dict[str, np.ndarray]
    seconds: float
    compile_seconds: float
    run_dir: Path | None
    stopped: dict | None = None

    @property
    def epoch(self) -> int:
        """The epoch the runs are at."""
        return int(jax.device_get(self.state.step))


def seed_result(res: GrokkingSeeds, j: int) -> GrokkingResult:
    """The j-th seed's run as a :class:`~geomjax.train.grokking.GrokkingResult` (its config with that seed, its state
    and history; no run folder, so no parameter snapshots: analyse it with ``with_snapshots=False``)."""
    st = res.state
    take = lambda t: jax.tree_util.tree_map(lambda x: x[j], t)  # noqa: E731
    state = TrainState(params=take(st.params), opt_state=take(st.opt_state), step=st.step, rng=st.rng[j])
    h = {k: (v if k == "epoch" else v[:, j]) for k, v in res.history.items()}
    h["dense_epoch"] = np.arange(len(h.get("dense_train_loss", ())), dtype=np.int64)
    return GrokkingResult(res.config.replace(seed=res.seeds[j]), state, h, res.seconds / len(res.seeds),
                          res.compile_seconds / len(res.seeds), None, None, res.stopped)


def _meta(cfg: GrokkingConfig, seeds) -> dict:
    return {"config": run_json(cfg.replace(seed=0)), "seeds": list(seeds)}


def _read_history(run_path: Path, upto: int) -> tuple[dict, float]:
    with np.load(run_path / "history.npz") as z:
        h = {k: z[k] for k in z.files if k not in ("seconds", "stopped")}
        secs = float(z["seconds"]) if "seconds" in z.files else 0.0
    keep = h["epoch"] <= upto
    out = {k: (v[keep] if k in ("epoch", *METRICS) else v[:upto]) for k, v in h.items()}
    return {k: list(v) for k, v in out.items()}, secs


def continues(cfg: GrokkingConfig, prefix: GrokkingConfig) -> bool:
    """Whether a run of ``prefix`` is the beginning of a run of ``cfg`` (the same seeds): the same model, data,
    optimizer, schedule and cadence, differing at most in the stop rule and the preset's name (a run stopped early by
    a rule is the first epochs of the run without it)."""
    strip = lambda c: c.replace(stop=None, preset="", seed=0)  # noqa: E731
    return strip(cfg) == strip(prefix)


def _prefix(cfg: GrokkingConfig, seeds: tuple[int, ...], run: GrokkingSeeds) -> tuple[TrainState, dict, float]:
    """(state, history lists, seconds) to continue ``run`` as the beginning of a run of ``cfg`` over ``seeds``."""
    if run.seeds != seeds or not continues(cfg, run.config) or run.epoch % cfg.chunk or run.epoch > cfg.epochs:
        raise ValueError(f"train_grokking_seeds: init_from (seeds {run.seeds}, epoch {run.epoch}, preset "
                         f"{run.config.preset!r}) is not the beginning of this run (seeds {seeds}, preset "
                         f"{cfg.preset!r}, chunks of {cfg.chunk}, {cfg.epochs} epochs): it must train the same "
                         "model, data and optimizer and stop at a chunk boundary")
    state = jax.tree_util.tree_map(jnp.copy, run.state)  # the chunks donate their state: keep ``run``'s intact
    return state, {k: list(v) for k, v in run.history.items()}, run.seconds


def _write_run(run_path: Path, state: TrainState, meta: dict, hist: dict, seconds: float, stopped: dict | None):
    """A checkpoint of ``state`` (newest 2 kept) and ``history.npz`` (the history, training seconds, how it stopped),
    written atomically."""
    save_checkpoint(run_path / "checkpoints", state, meta, keep=2)
    arrays = {k: np.asarray(v) for k, v in hist.items()}
    tmp = run_path / "history.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, seconds=np.asarray(seconds), **arrays,
                 **({"stopped": np.asarray(json.dumps(stopped))} if stopped else {}))
    tmp.replace(run_path / "history.npz")


def train_grokking_seeds(cfg: GrokkingConfig, seeds: Iterable[int], run_dir: str | os.PathLike | None = None, *,
                         resume: bool = True, progress: bool = True, stop_at: int | None = None,
                         log_file: str | os.PathLike | None = None,
                         init_from: GrokkingSeeds | None = None) -> GrokkingSeeds:
    """Train K seeds of ``cfg`` as one vmapped program (see the module docstring); resume from ``run_dir``.

    Args:
      cfg: the runs' config (:func:`~geomjax.train.grokking.grokking_config`); its seed is ignored.
      seeds: the K seeds. run_dir: output folder (None: nothing written, no resume).
      resume: continue from the latest checkpoint. progress: a tqdm bar.
      stop_at: stop after this epoch (a multiple of ``cfg.chunk``; an interruption).
      log_file: append a line per chunk (epoch, the seeds' lowest and highest test accuracy, wall time).
      init_from: when ``run_dir`` holds no checkpoint to resume, continue this run of the same seeds instead of
        starting at epoch 0: a run whose training is this one's (:func:`continues`: it differs at most in its stop
        rule and preset name), so it is this run's prefix and the result equals the run trained from scratch
        bit for bit (an epoch depends only on the state it starts from).

    Raises:
      ValueError: a checkpoint of another config or seeds in ``run_dir``; ``init_from`` not a prefix of this run.
    """
    seeds, N = _check_seeds(seeds), cfg.chunk
    if stop_at is not None and (stop_at % N or stop_at <= 0):
        raise ValueError(f"train_grokking_seeds: stop_at ({stop_at}) must be a positive multiple of the chunk ({N})")
    data, state = seeds_data(cfg, seeds), seeds_init(cfg, seeds)
    hist = {k: [] for k in ("epoch", *METRICS, "dense_train_loss", "dense_train_acc")}
    run_path, meta, prior = (Path(run_dir) if run_dir is not None else None), _meta(cfg, seeds), 0.0
    if run_path is not None:
        run_path.mkdir(parents=True, exist_ok=True)
        state, resumed = resume_state(run_path, state, meta, "train_grokking_seeds (config or seeds)", resume)
        if resumed is not None:
            hist, prior = _read_history(run_path, resumed)
        (run_path / "seeds_config.json").write_text(json.dumps(meta, indent=2))
    if init_from is not None and int(jax.device_get(state.step)) == 0:
        state, hist, prior = _prefix(cfg, seeds, init_from)
        if run_path is not None:  # the folder holds the run from its first epoch on, even before a chunk runs
            _write_run(run_path, state, meta, hist, prior, init_from.stopped if cfg.stop else None)
    start = int(jax.device_get(state.step))
    if start == 0:
        m0 = jax.device_get(jax.vmap(metrics_program(cfg))(state.params, data))
        hist["epoch"].append(0)
        for k in METRICS:
            hist[k].append(np.asarray(m0[k]))
    compile_s, run = 0.0, _COMPILED.get((cfg, N, seeds))
    end = cfg.epochs if stop_at is None else min(stop_at, cfg.epochs)
    if start < end and run is None:
        tc = time.perf_counter()
        run = _COMPILED[(cfg, N, seeds)] = make_seeds_chunk(cfg, N).lower(state, data).compile()
        compile_s = time.perf_counter() - tc
    t0 = time.perf_counter()

    def record(s, m):  # epochs s .. s + N − 1; m[k] (n_logs, K[, log_every])
        hist["epoch"].extend(range(s + cfg.log_every, s + N + 1, cfg.log_every))
        for k in METRICS:
            hist[k].extend(np.asarray(m[k]))
        for k, src in (("dense_train_loss", "step_loss"), ("dense_train_acc", "step_acc")):
            hist[k].extend(np.moveaxis(np.asarray(m[src]), 2, 1).reshape(-1, len(seeds)))
        if log_file is not None:
            with open(log_file, "a") as f:
                te = hist["test_acc"][-1]
                f.write(f"epoch {s + N} test_acc min {np.min(te):.4f} max {np.max(te):.4f} "
                        f"train_acc min {np.min(hist['train_acc'][-1]):.4f} wall {time.perf_counter() - t0:.1f}s\n")

    def save(st, loop_hist):
        _write_run(run_path, st, meta, hist, prior + time.perf_counter() - t0, loop_hist.stopped)

    state, loop_hist = train_loop(
        state, run, data, total_steps=cfg.epochs, steps_per_call=N, checkpoint=save if run_path else None,
        ckpt_every=N, record=record, stop_at=stop_at, progress=progress, desc=f"grokking[{cfg.preset}]×{len(seeds)}",
        stop=cfg.stop, stop_series=lambda _h: (hist["epoch"], [float(np.min(v)) for v in hist[cfg.stop.metric]]))
    history = {k: np.asarray(v, np.int64 if k == "epoch" else np.float64) for k, v in hist.items()}
    history.pop("stopped", None)
    return GrokkingSeeds(cfg, seeds, state, history, prior + loop_hist.seconds, compile_s, run_path, loop_hist.stopped)


def load_grokking_seeds(run_dir: str | os.PathLike, cfg: GrokkingConfig, seeds: Iterable[int]) -> GrokkingSeeds:
    """A finished :func:`train_grokking_seeds` run (at ``cfg.epochs``, or stopped by ``cfg.stop``).

    Raises:
      FileNotFoundError: no checkpoint. ValueError: another config or seeds, or unfinished (resume it).
    """
    seeds, run_path = _check_seeds(seeds), Path(run_dir)
    last = latest_checkpoint(run_path / "checkpoints")
    if last is None:
        raise FileNotFoundError(f"load_grokking_seeds: no checkpoint in {run_path / 'checkpoints'}; train first")
    state, m = load_checkpoint(last, seeds_init(cfg, seeds))
    if m.get("config") != _meta(cfg, seeds):
        raise ValueError(f"load_grokking_seeds: {last} was written by a different config (or seeds)")
    with np.load(run_path / "history.npz") as z:
        stopped = json.loads(str(z["stopped"])) if "stopped" in z.files else None
    step = int(m["step"])
    if step != cfg.epochs and stopped is None:
        raise ValueError(f"load_grokking_seeds: run at epoch {step} of {cfg.epochs}; resume it with train_grokking_seeds")
    hist, secs = _read_history(run_path, step)
    hist.pop("stopped", None)
    history = {k: np.asarray(v, np.int64 if k == "epoch" else np.float64) for k, v in hist.items()}
    return GrokkingSeeds(cfg, seeds, state, history, secs, 0.0, run_path, stopped)


_COMPILED = bounded_cache(__name__ + "._COMPILED", 4)  # (config, chunk, seeds) -> compiled executable
