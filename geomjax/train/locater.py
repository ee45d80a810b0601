"""LocATER training (Bao, Hataya & Karakida 2024, §7, Figs. 6-7): a κ2 sweep in ONE vmapped job.

The model is the 1-layer, single-head, post-LN toy transformer (:func:`geomjax.models.toy.bao_config`)
trained as a word-level language model on WikiText-2 with the objective

    cross-entropy + κ1·tr(W_QKᵀW_QK) + κ2·(tr(W_QK) − 1)²      (Bao §6; geomjax.theory.localization.locater_penalty)

for every κ2 of the sweep at once: the parameters and Adam states of all κ2 values are stacked on a
leading axis and one jitted ``lax.scan`` chunk updates them with ``jax.vmap`` (same initialisation,
same batches and dropout masks for every κ2, so the runs differ only by κ2). Deterministic from the
seed; checkpoints (``geomjax.train.checkpoint``) give an exact resume.

Per step and κ2 the history records the task loss, the penalty, the eigenspectrum scale
tr(W_QKᵀW_QK), tr(W_QK), the attention entropy of the training batch (mean over heads, rows and
sequences, causal rows included) and ρ_i, the frequency over the batch of Def. 1's event
⟨γ^i, ω⟩ + γ_0^i ∈ [0, 1] for the last query's attention row (Fig. 7); validation perplexity is
evaluated every ``eval_every`` steps.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from geomjax.theory import localization as loc
from geomjax.data.corpora import read_data_file
from geomjax.models.toy import ToyTransformer, bao_config
from geomjax.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from geomjax.train.loop import History, check_cadences, train_loop
from geomjax.train.losses import token_cross_entropy
from geomjax.train.optim import OptimConfig, check_length_change, check_run_length, effective_schedule, make_optimizer
from geomjax.train.state import TrainState, step_keys
from geomjax.typing import Array, Float

__all__ = ["LocaterConfig", "WordData", "fairseq_adam", "load_wikitext_words", "build", "run_sweep", "SweepResult",
           "mean_penalty"]


def fairseq_adam(lr: float = 2.5e-5, weight_decay: float = 0.01) -> OptimConfig:
    """fairseq's ``--optimizer adam`` as Bao §7 ran it (the paper: lr 2.5e-5, weight decay 0.01): Adam with
    decoupled weight decay on every parameter, constant lr without warm-up, betas (0.9, 0.999), eps 1e-8,
    no clipping."""
    return OptimConfig(lr=lr, schedule="constant", weight_decay=weight_decay, decay="all",
                       b1=0.9, b2=0.999, eps=1e-8, grad_clip=None)


@dataclasses.dataclass(frozen=True)
class LocaterConfig:
    """One κ2 sweep of the §7 experiment (frozen; defaults = the paper's setting).

    Attributes:
      kappa1: scale regulariser strength κ1 (paper: 100).
      kappa2s: mean regulariser strengths, one vmapped run each (paper: 0, 1e-3, 1e-2, 1e-1, 1).
      steps: optimizer updates (paper: 50,000): the run's length, and the horizon of a cosine ``optim``
        unless its ``decay_steps`` pins it (issue 37).
      seq_len: T tokens per sample (paper: 64).
      batch_size: sequences per batch (paper: 64).
      d_model: embedding = attention = FFN width (paper: 128).
      optim: the optimizer, an :class:`~geomjax.train.optim.OptimConfig` (default :func:`fairseq_adam`:
        Adam with decoupled weight decay on every parameter, fairseq ``--optimizer adam``; paper: lr
        2.5e-5 constant, weight decay 0.01, betas (0.9, 0.999), eps 1e-8, no clipping).
      dropout: residual/embedding dropout (fairseq transformer_lm default 0.1; geomjax also drops the
        attention probabilities during training, fairseq's default attention dropout is 0).
      tie_embeddings: fairseq's transformer_lm default is untied (False).
      vocab_cap: keep the most frequent ``vocab_cap − 1`` training words (rest → <unk>); None keeps all.
      train_split, valid_split: WikiText-2 splits (``valid``/``test`` ship with geomjax).
      eval_every: validation every this many steps (multiple of ``steps_per_call``, dividing ``steps``).
      eval_batches: validation batches (None: every non-overlapping window of the validation split).
      steps_per_call: steps per jitted scan chunk.
      ckpt_every: checkpoint period in steps (0: only at the end; else dividing ``steps``).
      seed: seed of initialisation, batches and dropout.
      init: the model's initialisation (:class:`geomjax.models.toy.ToyConfig` ``init``): ``"gpt2"``
        (N(0, 0.02), geomjax's default) or ``"fairseq"`` (the source's toolkit: Xavier-uniform
        projections, N(0, 1/d) embeddings).
      gradient: the penalty's gradient: ``"autodiff"`` (∇ of the penalty, :func:`geomjax.theory.localization.locater_penalty`) or
        ``"printed"``: the §6 derivative formulae exactly as printed
        (:func:`geomjax.theory.localization.locater_grads_printed`): the scale term's gradient is the
        true one, the mean term's is κ2·(tr W_QK − 1)·tr(W_QK)·∇tr(W_QK) (the true one has 2 in place of
        tr(W_QK)). The logged penalty is the printed objective's value either way.
    """

    kappa1: float = 100.0
    kappa2s: tuple = (0.0, 1e-3, 1e-2, 1e-1, 1.0)
    steps: int = 50_000
    seq_len: int = 64
    batch_size: int = 64
    d_model: int = 128
    optim: OptimConfig = fairseq_adam()
    dropout: float = 0.1
    tie_embeddings: bool = False
    vocab_cap: int | None = None
    train_split: str = "test"
    valid_split: str = "valid"
    eval_every: int = 1000
    eval_batches: int | None = None
    steps_per_call: int = 50
    ckpt_every: int = 5000
    seed: int = 0
    init: str = "gpt2"
    gradient: str = "autodiff"

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"LocaterConfig: steps must be >= 1, got {self.steps}")
        check_cadences("LocaterConfig", "steps", self.steps, self.steps_per_call, eval_every=self.eval_every,
                       ckpt_every=self.ckpt_every)
        check_run_length(self.optim, self.steps, "LocaterConfig", "steps")
        if not self.kappa2s or any(k < 0 for k in self.kappa2s) or self.kappa1 < 0:
            raise ValueError(f"LocaterConfig: κ1 and every κ2 must be >= 0 (and at least one κ2), got {self.kappa1}, {self.kappa2s}")
        if self.seq_len < 2:
            raise ValueError(f"LocaterConfig: seq_len (T) must be >= 2, got {self.seq_len}")
        if self.gradient not in ("autodiff", "printed"):
            raise ValueError(f"LocaterConfig: gradient must be 'autodiff' or 'printed', got {self.gradient!r}")
        if self.vocab_cap is not None and self.vocab_cap < 3:
            raise ValueError(f"LocaterConfig: vocab_cap must be >= 3 or None, got {self.vocab_cap}")

    def replace(self, **kw) -> "LocaterConfig":
        """Copy with some fields changed. A new ``steps`` moves a following cosine's horizon with it; a
        pinned one must be restated (``optim=``) in the same call; cadences that no longer divide the
        run raise (issue 37)."""
        if "optim" not in kw:
            check_length_change(self.optim, self.steps, kw.get("steps", self.steps), "LocaterConfig", "steps")
        return dataclasses.replace(self, **kw)

    def effective_schedule(self) -> dict:
        """The learning rate at step 0, at the end of the warm-up, at the last step and at the end
        (:func:`geomjax.train.optim.effective_schedule` over :attr:`steps`)."""
        return effective_schedule(self.optim, self.steps)


@dataclasses.dataclass
class WordData:
    """Word-level token streams: ``train``/``valid`` int32 ids, ``vocab`` (id -> word)."""

    train: np.ndarray
    valid: np.ndarray
    vocab: list[str]


def _words(text: str) -> list[str]:
    """fairseq's LM binarisation: whitespace-split each line and append the end-of-sentence </s>."""
    lines = text.split("\n")  # as iterating over the file: only "\n" ends a line
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    for line in lines:
        out.extend(line.split())
        out.append("</s>")
    return out


def load_wikitext_words(cfg: LocaterConfig, data_dir: str | None = None) -> WordData:
    """Word-level WikiText-2 (already tokenised, <unk> kept) with a vocabulary built on the training split.

    Raises:
      GeomjaxError: a split file is missing (``valid``/``test`` ship with geomjax; ``train`` needs
        a data folder, see :func:`geomjax.data.read_data_file`).
    """
    texts = {s: read_data_file(f"wikitext-2/{s}.txt", data_dir) for s in (cfg.train_split, cfg.valid_split)}
    tr, va = _words(texts[cfg.train_split]), _words(texts[cfg.valid_split])
    counts = collections.Counter(tr)
    specials = ["<unk>", "</s>"]
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if w not in specials]
    if cfg.vocab_cap is not None:
        words = words[: cfg.vocab_cap - len(specials)]
    vocab = specials + words
    index = {w: i for i, w in enumerate(vocab)}
    enc = lambda ws: np.asarray([index.get(w, 0) for w in ws], np.int32)
    return WordData(train=enc(tr), valid=enc(va), vocab=vocab)


def model_config(cfg: LocaterConfig, vocab_size: int):
    """The §7 model: :func:`bao_config` (1 layer, 1 head, post-LN, ReLU, sinusoidal positions, √d-scaled
    embeddings), width ``d_model`` everywhere, fairseq's untied output embedding and dropout, the
    config's initialisation."""
    return bao_config(vocab_size, max_len=cfg.seq_len, d_model=cfg.d_model, d_mlp=cfg.d_model,
                      tie_embeddings=cfg.tie_embeddings, dropout=cfg.dropout, init=cfg.init)


def mean_penalty(trace: Float[Array, " *H"], kappa2: float | Float[Array, ""],
                 gradient: str = "autodiff") -> Float[Array, ""]:
    """κ2·Σ(tr W_QK − 1)² (Bao §6's mean term) as a differentiable objective whose value is that sum and whose
    gradient is the true one (``gradient="autodiff"``) or the printed formula's κ2·(tr − 1)·tr·∇tr
    (``"printed"``: the factor (tr − 1)·tr is held constant under differentiation, so ∇ is that factor
    times ∇tr, which is W_K for W_Q and W_Q for W_K as §6 prints)."""
    value = jnp.sum((trace - 1.0) ** 2)
    if gradient == "autodiff":
        return kappa2 * value
    surrogate = jnp.sum(jax.lax.stop_gradient((trace - 1.0) * trace) * trace)
    return kappa2 * (surrogate - jax.lax.stop_gradient(surrogate) + jax.lax.stop_gradient(value))


@dataclasses.dataclass
class Programs:
    """Jitted functions of a sweep (built by :func:`build`)."""

    model: Any
    tx: Any
    chunk: Any  # (state, train_stream) -> (state, metrics (N, K, ...))
    evaluate: Any  # (stacked params, valid windows (E, B, T+1)) -> {"loss": (K,)}
    init: Any  # key -> TrainState (stacked over κ2)
    kappa2: jax.Array


def _metrics(params, probs, kappa1, kappa2):
    t = list(loc.locater_terms(params).values())  # summed over layers (the §7 model has one)
    last = probs[:, :, -1, :]  # (B, H, T): the last query's row
    rho = jnp.mean(jax.vmap(loc.frequency_from_probs, in_axes=1)(last), axis=0)  # mean over heads
    ent = loc.attention_entropy(probs)  # (B, H) -> mean over rows already; average over B, H
    return {"scale": sum(jnp.sum(x["scale"]) for x in t), "trace": sum(jnp.sum(x["trace"]) for x in t),
            "entropy": jnp.mean(ent), "rho": rho}


def build(cfg: LocaterConfig, vocab_size: int) -> Programs:
    """Model, optimizer and the jitted vmapped chunk / evaluation of a κ2 sweep."""
    mcfg = model_config(cfg, vocab_size)
    model = ToyTransformer(mcfg)
    tx, _ = make_optimizer(cfg.optim, cfg.steps)
    T, B = cfg.seq_len, cfg.batch_size
    k2 = jnp.asarray(cfg.kappa2s, jnp.float32)
    k1 = float(cfg.kappa1)

    def task_loss(params, ids, drop_key):
        kw = {} if drop_key is None else {"deterministic": False, "rngs": {"dropout": drop_key}}
        logits, inter = model.apply({"params": params}, ids[:, :-1], return_attention=True, **kw)
        ce = jnp.mean(token_cross_entropy(logits, ids[:, 1:]))
        return ce, inter.attentions[0]

    def objective(params, ids, drop_key, kappa2):
        ce, probs = task_loss(params, ids, drop_key)
        pen = loc.locater_penalty(params, k1, 0.0) + sum(
            mean_penalty(t["trace"], kappa2, cfg.gradient) for t in loc.locater_terms(params).values())
        return ce + pen, (ce, pen, probs)

    def one_update(params, opt_state, ids, drop_key, kappa2):
        (_, (ce, pen, probs)), g = jax.value_and_grad(objective, has_aux=True)(params, ids, drop_key, kappa2)
        upd, opt_state = tx.update(g, opt_state, params)
        params = optax.apply_updates(params, upd)
        m = {"loss": ce, "penalty": pen, **_metrics(params, probs, k1, kappa2)}
        return params, opt_state, m

    def batch(stream, key):
        n = stream.shape[0] - (T + 1)
        starts = jax.random.randint(key, (B,), 0, n + 1)
        return jax.vmap(lambda s: jax.lax.dynamic_slice(stream, (s,), (T + 1,)))(starts)

    def update_all(params, opt_state, ids, drop_key):
        if len(cfg.kappa2s) > 1:
            return jax.vmap(one_update, in_axes=(0, 0, None, None, 0))(params, opt_state, ids, drop_key, k2)
        # one κ2: the same update on the unstacked run (XLA:CPU ran the vmapped matmuls with a batch
        # axis of 1 through extra transposes and copies, ~13% of the step); same values
        first = lambda t: jax.tree_util.tree_map(lambda x: x[0], t)
        out = one_update(first(params), first(opt_state), ids, drop_key, k2[0])
        return jax.tree_util.tree_map(lambda x: x[None], out)

    def step(state: TrainState, stream):
        k_data, k_drop = step_keys(state.rng, state.step)
        ids = batch(stream, k_data)
        params, opt_state, m = update_all(state.params, state.opt_state, ids, k_drop)
        return state.replace(params=params, opt_state=opt_state, step=state.step + 1), m

    def chunk(state, stream):
        return jax.lax.scan(lambda s, _: step(s, stream), state, None, length=cfg.steps_per_call)

    def evaluate(params, windows):
        def one(p):
            def body(_, ids):
                ce, probs = task_loss(p, ids, None)
                return None, (ce, _metrics(p, probs, k1, 0.0)["entropy"])
            _, (ces, ents) = jax.lax.scan(body, None, windows)
            return {"loss": jnp.mean(ces), "entropy": jnp.mean(ents)}
        return jax.vmap(one)(params)

    def init(key):
        k_init, k_run = jax.random.split(key)
        p = model.init(k_init, jnp.zeros((1, T), jnp.int32))["params"]
        stacked = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (len(cfg.kappa2s),) + x.shape), p)
        opt = jax.vmap(tx.init)(stacked)
        return TrainState(params=stacked, opt_state=opt, step=jnp.zeros((), jnp.int32), rng=k_run)

    return Programs(model=model, tx=tx, chunk=jax.jit(chunk, donate_argnums=0), evaluate=jax.jit(evaluate),
                    init=jax.jit(init), kappa2=k2)


def valid_windows(cfg: LocaterConfig, valid: np.ndarray) -> np.ndarray:
    """Non-overlapping (T+1)-token windows of the validation stream as (E, B, T+1) (the first ``eval_batches``)."""
    T, B = cfg.seq_len, cfg.batch_size
    n = (valid.size - 1) // T
    starts = np.arange(n) * T
    E = n // B if cfg.eval_batches is None else min(cfg.eval_batches, n // B)
    if E < 1:
        raise ValueError(f"valid_windows: the validation split has {valid.size} tokens, fewer than one batch of "
                         f"{B}×{T + 1}; lower batch_size or seq_len")
    idx = starts[: E * B, None] + np.arange(T + 1)[None, :]
    return valid[idx].reshape(E, B, T + 1)


@dataclasses.dataclass
class SweepResult:
    """History of a sweep: per-step metrics (steps, K[, T]), evaluations, training wall time (all sessions)."""

    config: LocaterConfig
    vocab_size: int
    steps: np.ndarray
    train: dict
    evals: list
    seconds: float
    resumed_from: int | None


def _load_history(run_dir: Path, resumed: int) -> History:
    """The record of a sweep's steps before ``resumed`` from ``run_dir/history.npz`` (empty if absent)."""
    hist = History()
    path = run_dir / "history.npz"
    if path.is_file():
        with np.load(path, allow_pickle=False) as z:
            keep = z["steps"] < resumed
            hist._steps.append(z["steps"][keep])
            for k in z.files:
                if k.startswith("train_"):
                    hist._train[k[6:]] = [z[k][keep]]
            hist.evals = [e for e in json.loads(str(z["evals"])) if e["step"] <= resumed]
            hist.seconds = float(z["seconds"]) if "seconds" in z.files else 0.0
    return hist


def run_sweep(cfg: LocaterConfig, *, run_dir: str | Path | None = None, data_dir: str | None = None,
              progress: bool = True, stop_at: int | None = None) -> SweepResult:
    """Train every κ2 of ``cfg`` in one vmapped job; resume from ``run_dir/checkpoints`` when present.

    The host loop is :func:`geomjax.train.loop.train_loop` (validation every ``eval_every`` steps,
    checkpoints every ``ckpt_every``). The per-step history of a resumed run is restored from
    ``run_dir/history.npz`` (written with each checkpoint), so the returned history always covers
    step 0 onwards.
    """
    data = load_wikitext_words(cfg, data_dir)
    V = len(data.vocab)
    prog = build(cfg, V)
    stream = jnp.asarray(data.train)
    windows = jnp.asarray(valid_windows(cfg, data.valid))
    state = prog.init(jax.random.key(cfg.seed))
    ckpt_dir = Path(run_dir) / "checkpoints" if run_dir is not None else None
    hist, resumed = History(), None
    if ckpt_dir is not None and (p := latest_checkpoint(ckpt_dir)) is not None:
        state, meta = load_checkpoint(p, state)
        resumed = int(meta["step"])
        hist = _load_history(Path(run_dir), resumed)

    def evaluate(st):
        m = jax.device_get(prog.evaluate(st.params, windows))
        return {"loss": np.asarray(m["loss"]).tolist(), "ppl": np.exp(np.asarray(m["loss"], np.float64)).tolist(),
                "entropy": np.asarray(m["entropy"]).tolist()}

    def checkpoint(st, h: History):
        save_checkpoint(ckpt_dir, st, cfg, keep=2)
        np.savez(Path(run_dir) / "history.npz", steps=h.steps, evals=np.asarray(json.dumps(h.evals)),
                 seconds=np.asarray(h.seconds), **{f"train_{k}": v for k, v in h.train.items()})

    def postfix(_m, h: History):
        return {"ppl": f"{min(h.evals[-1]['ppl']):.1f}"} if h.evals else {}

    state, hist = train_loop(state, prog.chunk, stream, total_steps=cfg.steps, steps_per_call=cfg.steps_per_call,
                             evaluate=evaluate, eval_every=cfg.eval_every,
                             checkpoint=checkpoint if ckpt_dir is not None else None, ckpt_every=cfg.ckpt_every,
                             history=hist, postfix=postfix, stop_at=stop_at, progress=progress, desc="locater sweep")
    return SweepResult(config=cfg, vocab_size=V, steps=hist.steps, train=hist.train, evals=hist.evals,
                       seconds=hist.seconds, resumed_from=resumed)
