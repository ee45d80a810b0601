"""Grokking modular addition (Nanda et al.; the clock blog): the whole run as one jitted ``lax.scan``.

The model, optimizer and data are those of :func:`geomjax.train.tasks.modular_config` (the authors' released code):
inputs (a, b, "=") with "=" = token p, a 1-layer transformer (d 128, 4 heads of 32, d_mlp 512,
ReLU or none, learned positions or none (the clock blog's model), no LayerNorm, untied, 114 in and out with
the last logit dropped),
AdamW lr 1e-3, weight decay 1.0 on every parameter, β (0.9, 0.98), 10-step linear warm-up, full
batch (one step = one epoch), 30% of the p² pairs for training, cross-entropy on the last position.

The training loop is ``lax.scan`` over "log intervals" of ``log_every`` epochs, each an inner
``lax.scan`` of optimizer steps followed by the metrics of the interval's last parameters (train and
test loss and accuracy on the full sets, the sum of squared weights, that of W_E). A jitted call runs
``chunk_epochs`` epochs (0: the whole run in ONE call); between calls the state is checkpointed, a
parameter snapshot is kept (for progress measures over training, Nanda et al. §5) and the run can be
resumed exactly: chunk boundaries are absolute and step s depends only on (seed, s), so an
interrupted and resumed run reproduces the uninterrupted run bit-for-bit. A config's ``stop`` rule
(:class:`geomjax.train.loop.StopRule` on a logged metric, e.g. test accuracy ≥ 99% at 2 consecutive
logs: grokked) ends the run at the first chunk whose logs meet it; the epoch count is then the cap, and
the run records where and why it stopped (``history.json``'s ``stopped``, :attr:`GrokkingResult.stopped`).

Presets (:func:`grokking_config`): ``paper`` (50,000 epochs, Nanda et al., learned positions), ``blog`` (the
blog's model: no positional embeddings; 10,000 epochs with ReLU, 20,000 ReLU-free), ``cpu`` (learned positions,
lr 2e-3: a run that groks within minutes on a 2-core CPU; the labelled second setting), ``smoke`` (tests).
``relu=False`` gives the blog's ReLU-free variant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from pathlib import Path
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import bounded_cache, compiled_cache
from geomjax.data import modular_addition_data
from geomjax.models.common import gelu_erf
from geomjax.models.toy import ToyConfig, ToyTransformer, check_one_layer, clock_positions
from geomjax.train.checkpoint import config_jsonable, latest_checkpoint, load_checkpoint, save_checkpoint
from geomjax.train.losses import accuracy, cross_entropy
from geomjax.train.loop import StopRule, make_train_step, train_loop
from geomjax.train.optim import effective_schedule, make_optimizer
from geomjax.train.state import TrainState, create_train_state
from geomjax.train.tasks import TrainConfig, modular_config
from geomjax.typing import Array, Float, Int, Params, Shaped

__all__ = [
    "CPU_EPOCHS",
    "DENSE",
    "GROK_PRESETS",
    "GrokkingConfig",
    "GrokkingData",
    "GrokkingResult",
    "config_hash",
    "run_json",
    "grokking_config",
    "grokking_data",
    "grokking_init",
    "grokking_milestones",
    "init_program",
    "metrics_program",
    "last_position_logits",
    "check_one_layer",
    "load_grokking_run",
    "chunk_program",
    "make_run_chunk",
    "param_snapshots",
    "resume_state",
    "train_grokking",
]

GROK_PRESETS = ("paper", "blog", "cpu", "smoke")
METRICS = ("train_loss", "train_acc", "test_loss", "test_acc", "sq_weights", "sq_W_E")
# per-epoch training metrics (the loss and accuracy of every optimizer step, free inside the scan):
# entry i is the full-batch train loss / accuracy of the parameters after i epochs
DENSE = ("dense_epoch", "dense_train_loss", "dense_train_acc")


@dataclasses.dataclass(frozen=True)
class GrokkingConfig:
    """A grokking run: the modular-addition :class:`TrainConfig` plus the scan layout.

    Attributes:
      train: task ``"modular"`` config (model, optimizer, its ``ModularOptions`` p and train_frac, seed);
        ``total_steps`` is the number of epochs (full batch: one optimizer step per epoch).
      log_every: metrics every this many epochs (inside the scan).
      chunk_epochs: epochs per jitted call; a checkpoint and a parameter snapshot follow each call.
        0 runs the whole training as ONE jitted ``lax.scan``.
      preset: the preset's name (informational).
      stop: end the run early once its logged metrics meet this rule (its ``metric`` one of
        :data:`METRICS`, checked after every chunk, so it stops at a multiple of ``chunk_epochs``);
        ``total_steps`` is then the cap. None (default): train all epochs (and the config's JSON, so its
        hash and its runs' cache keys, are those of configs written before the field existed).
    """

    train: TrainConfig
    log_every: int = 100
    chunk_epochs: int = 0
    preset: str = ""
    stop: StopRule | None = None

    def __post_init__(self):
        t = self.train
        if t.task != "modular":
            raise ValueError(f"GrokkingConfig: train.task must be 'modular', got {t.task!r}")
        if t.batch_size != 0:
            raise ValueError(f"GrokkingConfig: grokking trains full batch; set train.batch_size=0, got {t.batch_size}")
        if self.log_every < 1 or t.total_steps % self.log_every:
            raise ValueError(f"GrokkingConfig: epochs ({t.total_steps}) must be a positive multiple of "
                             f"log_every ({self.log_every})")
        if self.chunk_epochs < 0 or (self.chunk_epochs and (self.chunk_epochs % self.log_every
                                                            or t.total_steps % self.chunk_epochs)):
            raise ValueError(f"GrokkingConfig: chunk_epochs ({self.chunk_epochs}) must be 0 or a multiple of "
                             f"log_every ({self.log_every}) dividing the epochs ({t.total_steps})")
        if self.stop is not None and self.stop.metric not in METRICS:
            raise ValueError(f"GrokkingConfig: stop.metric must be one of the logged metrics {METRICS}, "
                             f"got {self.stop.metric!r}")

    @property
    def epochs(self) -> int:
        """Total number of full-batch epochs (= optimizer steps)."""
        return self.train.total_steps

    @property
    def chunk(self) -> int:
        """Epochs per jitted call."""
        return self.chunk_epochs or self.epochs

    def replace(self, **kw) -> "GrokkingConfig":
        """Copy with some fields changed; ``epochs=`` and ``seed=`` edit ``train``, ``p=`` and
        ``train_frac=`` its :class:`~geomjax.train.tasks.ModularOptions`. ``epochs=`` rebuilds the
        schedule's length and the generic loop's cadences (issue 37); an epoch count that ``log_every``
        or ``chunk_epochs`` does not divide, or that the warm-up does not fit, raises a ValueError."""
        tkw = {"seed": kw.pop("seed")} if "seed" in kw else {}
        okw = {k: kw.pop(k) for k in ("p", "train_frac") if k in kw}
        if okw:
            tkw["options"] = dataclasses.replace(self.train.options, **okw)
        if "epochs" in kw:
            tkw["total_steps"] = e = kw.pop("epochs")
            # keep the generic-loop fields (TrainConfig.steps_per_call, eval_every, ckpt_every; unused by
            # train_grokking, which has log_every and chunk_epochs) consistent with the new length
            t = self.train
            tkw["steps_per_call"] = math.gcd(e, t.steps_per_call)
            tkw |= {k: math.gcd(e, getattr(t, k)) if getattr(t, k) else 0 for k in ("eval_every", "ckpt_every")}
        train = self.train.replace(**tkw) if tkw else self.train
        return dataclasses.replace(self, train=kw.pop("train", train), **kw)

    def effective_schedule(self) -> dict:
        """The learning rate at epoch 0, at the end of the warm-up, at the last epoch and at the end
        (:func:`geomjax.train.optim.effective_schedule` over :attr:`epochs` steps)."""
        return effective_schedule(self.train.optim, self.epochs)


CPU_EPOCHS = 4000


def grokking_config(preset: str = "smoke", *, relu: bool = True, seed: int = 0) -> GrokkingConfig:
    """Preset of a grokking run (Nanda et al. / the clock blog; hyperparameters of the authors' released code).

    * ``paper``: Nanda et al.: p 113, 30% train, 50,000 epochs; metrics every 100, checkpoints every 2,500.
    * ``blog``: the clock blog's model and run, as its text states them (§3: "There is no layer norm", "There
      are no positional embeddings", ReLU MLP; §2.2: 30% split; the optimizer of Nanda et al.'s code: AdamW
      lr 1e-3, weight decay 1, β (0.9, 0.98), full batch): 10,000 epochs with ReLU (§4), 20,000 for the
      ReLU-free variant (§8); metrics every 100 epochs, chunks of 1,000.
    * ``cpu``: Nanda's model (learned positions) and p = 113 at the blog's 30% split, lr 2e-3 (the blog: 1e-3)
      so that the plateau between memorisation and generalisation fits a 2-core CPU;
      :data:`CPU_EPOCHS` epochs; train loss/accuracy every epoch, test metrics every 10 epochs,
      snapshots every 100. (The clock claims train the ``blog`` preset's model: :func:`geomjax.sources.clock.claims.claim_config`.)
    * ``smoke``: p 23, d 32, 2 heads, d_mlp 64, lr 3e-3, 300 epochs (tests); metrics every 10, chunks of 100.

    Args:
      preset: one of :data:`GROK_PRESETS`.
      relu: False gives the ReLU-free variant (MLP activation "none").
      seed: init, data split and run key all derive from it.
    """
    if preset not in GROK_PRESETS:
        raise ValueError(f"grokking_config: preset must be one of {GROK_PRESETS}, got {preset!r}")
    t = modular_config(preset, relu=relu).replace(seed=seed)
    if preset == "paper":
        return GrokkingConfig(t, log_every=100, chunk_epochs=2500, preset=preset)
    if preset == "blog":
        return GrokkingConfig(t, log_every=100, chunk_epochs=1000, preset=preset)
    if preset == "cpu":
        t = t.replace(options=dataclasses.replace(t.options, train_frac=0.3), total_steps=CPU_EPOCHS,
                      steps_per_call=100)
        return GrokkingConfig(t, log_every=10, chunk_epochs=100, preset=preset)
    return GrokkingConfig(t, log_every=10, chunk_epochs=100, preset=preset)


def run_json(cfg: GrokkingConfig) -> dict:
    """The config as stored with its runs (checkpoint metadata, ``grokking_config.json``) and hashed
    (:func:`config_hash`): :func:`geomjax.train.checkpoint.config_jsonable`, without ``stop`` when it is
    None, so configs without a stop rule keep the form (and the cache keys) they had before it existed."""
    d = config_jsonable(cfg)
    if cfg.stop is None:
        d.pop("stop")
    return d


def config_hash(cfg: GrokkingConfig) -> str:
    """Short SHA-256 of the config's JSON (:func:`run_json`; cache key of trained runs)."""
    s = json.dumps(run_json(cfg), sort_keys=True)
    return hashlib.sha256(s.encode()).hexdigest()[:16]


class GrokkingData(NamedTuple):
    """Full train and test sets on device: x (n, 3) int32 rows (a, b, p), y (n,) int32."""

    x_train: jax.Array
    y_train: jax.Array
    x_test: jax.Array
    y_test: jax.Array


def grokking_data(cfg: GrokkingConfig) -> GrokkingData:
    """The seeded train/test split of all p² pairs (the split key is ``fold_in(key(seed), 1)``, as in
    :func:`geomjax.train.tasks.load_task_data`)."""
    t = cfg.train
    md = modular_addition_data(t.options.p, t.options.train_frac, jax.random.fold_in(jax.random.key(t.seed), 1))
    return GrokkingData(*(jnp.asarray(v) for v in (md.x_train, md.y_train, md.x_test, md.y_test)))


def _sq(tree) -> jax.Array:
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree))


def last_position_logits(params: Params, x: Int[Array, "B T"], mcfg: ToyConfig) -> Float[Array, "B V"]:
    """Logits at the last position of Nanda et al.'s 1-layer transformer (equal to
    ``ToyTransformer(mcfg).apply(...)[0][:, -1]``), computing the MLP and unembedding only there.

    The loss of modular addition reads only the last ("=") position; with one causal layer and no
    LayerNorm, positions 0..T-2 enter only through the attention keys and values, so this is about
    T times cheaper than the full forward.

    Args:
      params: ToyTransformer parameters.
      x: (B, T) int token ids (checked values are not re-validated here: use inside jit).
      mcfg: the model config (checked by :func:`check_one_layer`).

    Returns:
      (B, V_out) float32 logits.
    """
    check_one_layer(mcfg)
    act = {"relu": jax.nn.relu, "none": lambda v: v, "gelu": gelu_erf,
           "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True)}[mcfg.activation]
    T = x.shape[1]
    E, pos = params["embed"]["embedding"], clock_positions(params, mcfg, T)
    a = params["block_0"]["attn"]
    # Every (position, token) pair has one residual vector, so q/k/v are tables (T, V, H, K) gathered
    # per example: the same products as projecting each example's rows, V/B times fewer FLOPs.
    table = E[None, :, :] + pos[:, None, :]  # (T, V, d)
    tpos = jnp.arange(T)[None, :]
    h_last = table[T - 1][x[:, -1]]  # (B, d)

    def proj(name, rows):
        w = jnp.einsum("...d,dhk->...hk", rows, a[name]["kernel"])
        if "bias" not in a[name]:
            return w
        b = a[name]["bias"]
        return w + b.reshape((1,) * (w.ndim - b.ndim) + b.shape)

    q = proj("q", table[T - 1])[x[:, -1]]  # (B, H, K)
    k = proj("k", table)[tpos, x]  # (B, T, H, K)
    v = proj("v", table)[tpos, x]
    s = jnp.einsum("bhk,bthk->bht", q, k) / np.sqrt(mcfg.head_dim).astype(np.float32)
    z = jnp.einsum("bht,bthk->bhk", jax.nn.softmax(s, axis=-1), v)
    o = jnp.einsum("bhk,hkd->bd", z, a["o"]["kernel"])
    if "bias" in a["o"]:
        o = o + a["o"]["bias"][None]
    r = h_last + o
    m = params["block_0"]["mlp"]
    pre = r @ m["fc"]["kernel"]
    if "bias" in m["fc"]:
        pre = pre + m["fc"]["bias"][None]
    out = act(pre) @ m["proj"]["kernel"]
    if "bias" in m["proj"]:
        out = out + m["proj"]["bias"][None]
    logits = (r + out) @ params["unembed"]["kernel"]
    if "bias" in params["unembed"]:
        logits = logits + params["unembed"]["bias"][None]
    return logits


@compiled_cache(maxsize=8)
def _programs(cfg: GrokkingConfig):
    t = cfg.train
    model = ToyTransformer(t.model)
    check_one_layer(t.model)
    tx, schedule = make_optimizer(t.optim, t.total_steps)
    p = t.options.p

    def loss_fn(params, batch, key):
        del key  # no dropout
        # the "=" logit (index p) is dropped, as in Nanda's metrics
        last = last_position_logits(params, batch["x"], t.model)[:, :p]
        return cross_entropy(last, batch["y"]), {"accuracy": accuracy(last, batch["y"])}

    def batch_fn(data, key):
        del key  # full batch
        return {"x": data.x_train, "y": data.y_train}

    step = make_train_step(loss_fn, tx, batch_fn, schedule=schedule)
    return model, tx, loss_fn, step


@compiled_cache(maxsize=8)
def init_program(cfg: GrokkingConfig) -> Callable:
    """Jitted ``init(k_params, k_run) -> TrainState`` of ``cfg``'s model and optimizer (the seed enters only
    through the keys: :func:`grokking_init`)."""
    model, tx, _, _ = _programs(cfg)

    @jax.jit
    def init(k_params, k_run):
        params = model.init(k_params, jnp.zeros((1, 3), jnp.int32))["params"]
        return create_train_state(params, tx, k_run)

    return init


@compiled_cache(maxsize=8)
def metrics_program(cfg: GrokkingConfig) -> Callable:
    """Jitted ``metrics(params, data) -> {name: scalar}``: :data:`METRICS` on the full train and test sets."""
    _, _, loss_fn, _ = _programs(cfg)

    @jax.jit
    def metrics(prm, data):
        tr_loss, tr = loss_fn(prm, {"x": data.x_train, "y": data.y_train}, None)
        te_loss, te = loss_fn(prm, {"x": data.x_test, "y": data.y_test}, None)
        return {"train_loss": tr_loss, "train_acc": tr["accuracy"], "test_loss": te_loss, "test_acc": te["accuracy"],
                "sq_weights": _sq(prm), "sq_W_E": _sq(prm["embed"]["embedding"])}

    return metrics


def grokking_init(cfg: GrokkingConfig) -> TrainState:
    """Fresh state: parameters from ``fold_in(key(seed), 0)``, run key ``fold_in(key(seed), 2)``
    (the same convention as :func:`geomjax.train.tasks.init_state`)."""
    base = jax.random.key(cfg.train.seed)
    return init_program(cfg)(jax.random.fold_in(base, 0), jax.random.fold_in(base, 2))


@compiled_cache(maxsize=8)
def make_run_chunk(cfg: GrokkingConfig, n_epochs: int) -> Callable:
    """Jitted ``run(state, data) -> (state, metrics)``: ``n_epochs`` epochs as one ``lax.scan``.

    The outer scan has ``n_epochs // log_every`` iterations; each runs ``log_every`` optimizer steps
    (inner scan) and then computes, with the interval's final parameters, the metrics
    :data:`METRICS` (train/test cross-entropy and accuracy on the full sets, Σ of squared weights of
    all parameters, Σ of squared W_E entries). Metrics come back as (n_epochs // log_every,) arrays,
    plus ``step_loss`` and ``step_acc`` (n_epochs // log_every, log_every): every step's full-batch
    train loss and accuracy, computed on the parameters before that step's update (no extra cost).
    The state is donated.
    """
    return jax.jit(chunk_program(cfg, n_epochs), donate_argnums=0)


@compiled_cache(maxsize=8)
def chunk_program(cfg: GrokkingConfig, n_epochs: int) -> Callable:
    """The unjitted ``run(state, data) -> (state, metrics)`` of :func:`make_run_chunk` (one seed): jitted there,
    vmapped over seeds by :func:`geomjax.train.grokking_seeds.make_seeds_chunk`."""
    if n_epochs % cfg.log_every:
        raise ValueError(f"make_run_chunk: n_epochs {n_epochs} is not a multiple of log_every {cfg.log_every}")
    _, _, loss_fn, step = _programs(cfg)
    n_logs = n_epochs // cfg.log_every

    def interval(state, data):
        state, sm = jax.lax.scan(lambda s, _: step(s, data), state, None, length=cfg.log_every)
        prm = state.params
        tr_loss, tr = loss_fn(prm, {"x": data.x_train, "y": data.y_train}, None)
        te_loss, te = loss_fn(prm, {"x": data.x_test, "y": data.y_test}, None)
        m = {"train_loss": tr_loss, "train_acc": tr["accuracy"], "test_loss": te_loss, "test_acc": te["accuracy"],
             "sq_weights": _sq(prm), "sq_W_E": _sq(prm["embed"]["embedding"]),
             "step_loss": sm["loss"], "step_acc": sm["accuracy"]}
        return state, m

    def run(state, data):
        return jax.lax.scan(lambda s, _: interval(s, data), state, None, length=n_logs)

    return run


@dataclasses.dataclass
class GrokkingResult:
    """Outcome of :func:`train_grokking`.

    Attributes:
      config: the run's config.
      state: final TrainState.
      history: dict ``epoch`` (n,) int plus each of :data:`METRICS` (n,) float (after that epoch;
        epoch 0 is the initialisation), over the whole run including resumed parts; and the
        per-epoch :data:`DENSE` arrays (E,) (``dense_epoch`` 0..E−1, train loss/accuracy of the
        parameters after that many epochs). Runs written before dense logging lack them.
      seconds: wall time of this call's training (compile included).
      compile_seconds: time of the first call's compilation (0 if nothing was compiled).
      resumed_from: epoch resumed from, or None.
      run_dir: where checkpoints/snapshots/history live (or None).
      stopped: with a stop rule, how the run ended (:attr:`geomjax.train.loop.History.stopped`:
        ``{"step": epoch, "by": "rule" | "cap" | "non-finite", "reason", "rule"}``), else None.
    """

    config: GrokkingConfig
    state: TrainState
    history: dict[str, np.ndarray]
    seconds: float
    compile_seconds: float
    resumed_from: int | None
    run_dir: Path | None
    stopped: dict | None = None


def _initial_metrics(cfg: GrokkingConfig, state: TrainState, data: GrokkingData) -> dict[str, float]:
    return {k: float(v) for k, v in jax.device_get(metrics_program(cfg)(state.params, data)).items()}


def _save_params(run_dir: Path, params, epoch: int) -> None:
    d = run_dir / "params"
    d.mkdir(parents=True, exist_ok=True)
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
            for path, v in jax.tree_util.tree_flatten_with_path(jax.device_get(params))[0]}
    tmp = d / f"params_{epoch:08d}.npz.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **flat)
    os.replace(tmp, d / f"params_{epoch:08d}.npz")


def param_snapshots(run_dir: str | os.PathLike, template: Params) -> list[tuple[int, Params]]:
    """Parameter snapshots of a run, ``[(epoch, params), ...]`` sorted by epoch (epoch 0 included).

    Args:
      run_dir: the run directory of :func:`train_grokking`.
      template: a params pytree of the right structure (e.g. ``grokking_init(cfg).params``).
    """
    d = Path(run_dir) / "params"
    out = []
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    for p in sorted(d.glob("params_*.npz")):
        epoch = int(p.stem.split("_")[1])
        with np.load(p) as z:
            vals = []
            for path, leaf in leaves:
                name = "/".join(str(getattr(k, "key", k)) for k in path)
                if name not in z or z[name].shape != np.shape(leaf):
                    raise ValueError(f"param_snapshots: {p} lacks {name!r} of shape {np.shape(leaf)}; the snapshot "
                                     "was written by a different model config")
                vals.append(jnp.asarray(z[name]))
        out.append((epoch, jax.tree_util.tree_unflatten(treedef, vals)))
    return out


_COMPILED = bounded_cache(__name__ + "._COMPILED", 8)  # (config, chunk) -> compiled executable (shapes fixed by the config)


def resume_state(run_path: Path, state: TrainState, meta: dict, where: str, resume: bool = True
                 ) -> tuple[TrainState, int | None]:
    """(state, the epoch resumed from or None): the latest checkpoint under ``run_path/checkpoints`` loaded into
    ``state``'s structure (when ``resume`` and one exists), after checking it was written with metadata ``meta``.

    Raises:
      ValueError: the checkpoint was written by a different config (``where`` names the caller)."""
    last = latest_checkpoint(run_path / "checkpoints") if resume else None
    if last is None:
        return state, None
    state, m = load_checkpoint(last, state)
    if m.get("config") != meta:
        raise ValueError(f"{where}: {last} was written by a different config; use another run_dir or resume=False")
    return state, int(m["step"])


def train_grokking(
    cfg: GrokkingConfig,
    run_dir: str | os.PathLike | None = None,
    *,
    resume: bool = True,
    progress: bool = True,
    stop_at: int | None = None,
    log_file: str | os.PathLike | None = None,
) -> GrokkingResult:
    """Train the modular-addition transformer (Nanda et al. §3; the clock blog §4) with a jitted scan.

    Each jitted call runs ``cfg.chunk`` epochs (``chunk_epochs = 0``: the whole run in one call),
    driven by the common host loop :func:`geomjax.train.loop.train_loop` (progress, non-finite check).
    With ``run_dir``: after every call the state is checkpointed (``checkpoints/``, newest 2 kept),
    the parameters are snapshotted (``params/params_{epoch}.npz``) and ``history.json`` is rewritten;
    a re-run resumes from the latest checkpoint and reproduces the uninterrupted run bit-for-bit.
    With ``cfg.stop`` the run ends at the first chunk whose logged metrics meet the rule (or at
    ``cfg.epochs``, the cap); ``history.json`` and the result record where and why (``stopped``), and
    re-running a run that stopped trains no further.

    Args:
      cfg: the run's config (:func:`grokking_config`).
      run_dir: output folder (None: nothing written, no resume).
      resume: continue from the latest checkpoint in ``run_dir``.
      progress: tqdm bar over chunks.
      stop_at: stop after this epoch (a multiple of ``cfg.chunk``; simulates an interruption).
      log_file: append a line per chunk (epoch, accuracies, wall time) to this file.

    Returns:
      :class:`GrokkingResult`.
    """
    N = cfg.chunk
    if stop_at is not None and (stop_at % N or stop_at <= 0):
        raise ValueError(f"train_grokking: stop_at ({stop_at}) must be a positive multiple of the chunk ({N} epochs)")
    data = grokking_data(cfg)
    state = grokking_init(cfg)
    hist = {k: [] for k in ("epoch", *METRICS, *DENSE)}
    resumed = None
    run_path = Path(run_dir) if run_dir is not None else None
    cfg_json = run_json(cfg)
    if run_path is not None:
        run_path.mkdir(parents=True, exist_ok=True)
        state, resumed = resume_state(run_path, state, cfg_json, "train_grokking", resume)
        if resumed is not None:
            old = json.loads((run_path / "history.json").read_text())
            keep = [i for i, e in enumerate(old["epoch"]) if e <= resumed]
            hist = {k: [old[k][i] for i in keep] for k in ("epoch", *METRICS)}
            hist.update({k: list(old.get(k, []))[:resumed] for k in DENSE})
        (run_path / "grokking_config.json").write_text(json.dumps(cfg_json, indent=2))
    start = int(jax.device_get(state.step))
    if start % N:
        raise ValueError(f"train_grokking: resumed epoch {start} is not a multiple of the chunk ({N})")
    if start == 0:
        for k, v in _initial_metrics(cfg, state, data).items():
            hist[k].append(v)
        hist["epoch"].append(0)
        if run_path is not None:
            _save_params(run_path, state.params, 0)
    end = cfg.epochs if stop_at is None else min(stop_at, cfg.epochs)
    compile_s = 0.0
    run = _COMPILED.get((cfg, N))
    if start < end and run is None:
        tc = time.perf_counter()
        run = _COMPILED[(cfg, N)] = make_run_chunk(cfg, N).lower(state, data).compile()
        compile_s = time.perf_counter() - tc
    t0 = time.perf_counter()

    def record(s, m):  # the chunk of epochs s .. s + N − 1 (host arrays)
        hist["epoch"].extend(range(s + cfg.log_every, s + N + 1, cfg.log_every))
        for k in METRICS:
            hist[k].extend(float(v) for v in m[k])
        hist["dense_epoch"].extend(range(s, s + N))
        hist["dense_train_loss"].extend(float(v) for v in np.ravel(m["step_loss"]))
        hist["dense_train_acc"].extend(float(v) for v in np.ravel(m["step_acc"]))
        if log_file is not None:
            with open(log_file, "a") as f:
                f.write(f"epoch {s + N} train_loss {hist['train_loss'][-1]:.3e} train_acc {hist['train_acc'][-1]:.4f} "
                        f"test_loss {hist['test_loss'][-1]:.3e} test_acc {hist['test_acc'][-1]:.4f} "
                        f"wall {time.perf_counter() - t0:.1f}s\n")

    def checkpoint(st, loop_hist):
        save_checkpoint(run_path / "checkpoints", st, cfg_json, keep=2)
        _save_params(run_path, st.params, int(jax.device_get(st.step)))
        stopped = {"stopped": loop_hist.stopped} if loop_hist.stopped is not None else {}
        (run_path / "history.json").write_text(json.dumps(hist | stopped))

    state, loop_hist = train_loop(
        state, run, data, total_steps=cfg.epochs, steps_per_call=N, checkpoint=checkpoint if run_path else None,
        ckpt_every=N, record=record, stop_at=stop_at, progress=progress, desc=f"grokking[{cfg.preset}]",
        stop=cfg.stop, stop_series=lambda _h: (hist["epoch"], hist[cfg.stop.metric]),
        postfix=lambda m, _h: {"train": f"{hist['train_acc'][-1]:.3f}", "test": f"{hist['test_acc'][-1]:.3f}"})
    s, seconds = int(jax.device_get(state.step)), loop_hist.seconds
    if run_path is not None:
        timing = {"seconds": seconds, "compile_seconds": compile_s, "start": start, "end": s}
        with open(run_path / "timings.jsonl", "a") as f:
            f.write(json.dumps(timing) + "\n")
    history = {k: np.asarray(v, np.int64 if k in ("epoch", "dense_epoch") else np.float64) for k, v in hist.items()}
    return GrokkingResult(cfg, state, history, seconds, compile_s, resumed, run_path, loop_hist.stopped)


def load_grokking_run(run_dir: str | os.PathLike, cfg: GrokkingConfig) -> GrokkingResult:
    """Load a finished run (latest checkpoint + history) written by :func:`train_grokking` for ``cfg``:
    at ``cfg.epochs``, or, with ``cfg.stop``, at an epoch where its logged metrics meet the rule.

    Raises:
      FileNotFoundError: no checkpoint. ValueError: written by another config or unfinished.
    """
    run_path = Path(run_dir)
    last = latest_checkpoint(run_path / "checkpoints")
    if last is None:
        raise FileNotFoundError(f"load_grokking_run: no checkpoint in {run_path / 'checkpoints'}; train first")
    state, meta = load_checkpoint(last, grokking_init(cfg))
    if meta.get("config") != run_json(cfg):
        raise ValueError(f"load_grokking_run: {last} was written by a different config")
    hist = json.loads((run_path / "history.json").read_text())
    stopped = hist.pop("stopped", None)
    step = int(meta["step"])
    done = step == cfg.epochs or (cfg.stop is not None and hist["epoch"][-1] == step
                                  and cfg.stop.reason(hist["epoch"], hist[cfg.stop.metric]) is not None)
    if not done:
        raise ValueError(f"load_grokking_run: run at epoch {meta['step']} of {cfg.epochs}; resume it with train_grokking")
    history = {k: np.asarray(v, np.int64 if k in ("epoch", "dense_epoch") else np.float64) for k, v in hist.items()}
    secs = [json.loads(line) for line in (run_path / "timings.jsonl").read_text().splitlines()] \
        if (run_path / "timings.jsonl").is_file() else []
    return GrokkingResult(cfg, state, history, float(sum(t["seconds"] for t in secs)),
                          float(sum(t["compile_seconds"] for t in secs)), None, run_path, stopped)


def grokking_milestones(history: dict[str, Shaped[Array, "..."]], *, test_threshold: float = 0.99
                        ) -> dict[str, int | None]:
    """First logged epoch at which train accuracy reached 100% and test accuracy ``test_threshold``
    (Nanda et al. §3: memorisation precedes generalisation), or None if never."""
    ep = np.asarray(history["epoch"])

    def first(mask):
        i = np.flatnonzero(mask)
        return int(ep[i[0]]) if i.size else None

    return {"train_100": first(np.asarray(history["train_acc"]) >= 1.0),
            "test_99": first(np.asarray(history["test_acc"]) >= test_threshold)}
