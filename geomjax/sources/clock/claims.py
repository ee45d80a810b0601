"""Claims of the clock blog (the "clock" algorithm for modular addition, P = 113) and Nanda et al.,
"Progress measures for grokking via mechanistic interpretability", checked on trained models.

A statement about "the trained model" is a statement about the recipe's trained model, a random instance: it is
decided over K independently trained seeds (:data:`SEEDS`), trained as ONE vmapped program
(:mod:`geomjax.train.grokking_seeds`) and cached under ``$GEOMJAX_CACHE/grokking-seeds/<config hash>-0x<K>``
(default ``~/.cache/geomjax``). Each seed is judged by the claim's threshold; the failing share is decided against
:data:`ALLOWED_FRACTION` = 1/2 by :func:`geomjax.claims.rules.over_draws` (Clopper–Pearson at ±5σ), which asks the
same evidence for "holds" as for "does not hold"; every verdict states k of K seeds and the interval. A seed that did
not grok is undecided, never failing.

What is trained (:func:`claim_config`): the clock blog's model and run (§2–4, §8: no positional embeddings, no
LayerNorm, ReLU MLP, p = 113, 30% split, AdamW lr 1e-3, weight decay 1, β (0.9, 0.98), full batch; ReLU 10,000
epochs, the ReLU-free variant 20,000):

* budget ``quick``: 32 seeds (:data:`~geomjax.claims.rules.MIN_DRAWS`), each run stopped once every seed has grokked
  (:data:`GROK_STOP`): it decides every statement except the two about the converged model. A quick run reads these
  models from the cache and never trains them; without them its verdicts are inconclusive and say what trains them
  (:func:`untrained`). One-time cost (:data:`TRAIN_COST`): about 2.3 CPU-hours for the ReLU models and 5.5 to 6 for
  the ReLU-free ones on a quiet 2-core machine (``scripts/train_clock_seeds.py --budget quick`` trains and resumes them
  in the background); minutes on a GPU.
* budget ``full``: the same 32 runs trained on to the blog's lengths. A full run trains what is missing, continuing
  the finished quick runs (:func:`budget_seeds`), so that the two budgets together cost what ``full`` alone does.

Key frequencies: the blog's rule (Fourier norms above 10× the median; §5) applied to W_E AND the
read-out W_L, so that a key frequency is one the model uses (W_E-only ones are reported apart);
Nanda's neuron-based key frequencies are reported alongside. Thresholds that the sources leave qualitative are fixed in
each claim's statement before looking at results.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path

import jax
import numpy as np

from geomjax.tools.clock_probe import analyze
from geomjax.base.io import cache_root
from geomjax.train.grokking import config_hash, grokking_config
from geomjax.train.grokking_seeds import load_grokking_seeds, seed_result, train_grokking_seeds
from geomjax.train.loop import StopRule
from geomjax.claims import MIN_DRAWS, Claim, Evaluation, Inequality, judge_inequality, over_draws, per_run, register

__all__ = ["ALLOWED_FRACTION", "GROK_STOP", "SEEDS", "TRAIN_COST", "budget_seeds", "claim_config", "finished_seeds",
           "seed_analyses", "seeds_dir", "trained_seeds", "untrained", "dft_restricted_accuracy", "numpy_clock_forward",
           "numpy_key_frequencies", "numpy_summed_petal_fraction", "trained_analyses", "trained_description"]

SRC_BLOG = "Clock blog"


# ---------------------------------------------------------------------------------------- training

GROK_STOP = StopRule(
    "test_acc", 0.99, patience=2,
    origin="grokked: test accuracy >= 99%, the criterion of clock.grokking (Nanda et al. §3; the clock blog §4), "
           "held at 2 consecutive logs (100 epochs apart) by EVERY seed, so that each model the run returns meets it "
           "(a single log can be a transient: full-batch AdamW shows late loss spikes)")
"""The quick budget's stop: the run ends once every seed has grokked (:class:`geomjax.train.loop.StopRule`)."""

SEEDS = {"full": MIN_DRAWS, "quick": MIN_DRAWS}
"""Independently trained models (seeds 0..K−1) per budget: the registry's :data:`MIN_DRAWS` (32) at both, the fewest
over which a statement about a random instance is decided either way (with every seed agreeing, 22 decide "holds";
a refutation needs 32). The budgets differ in how long the models train, not in how many there are: ``quick`` stops
each run once every seed has grokked, ``full`` trains on to the blog's lengths (continuing the quick run)."""

TRAIN_COST = {
    True: "about 2.3 hours of a 2-core CPU for the 32 ReLU models to grokking (the slowest seed grokked at epoch "
          "6,900: 8,226 s, 2026-11-29), 3 to the blog's 10,000 epochs; minutes on a GPU",
    False: "5.5 to 6 hours of a 2-core CPU for the 32 ReLU-free models to grokking (the first 2 seeds took 18,500 "
           "epochs; 34 ms per seed and epoch), 6 to the blog's 20,000; minutes on a GPU"}
"""The one-time cost of training a budget's models (:func:`untrained` names it): 32 vmapped seeds of the blog's
model ran at 33.7 ms per seed and epoch on the 2-core machine (1, 2, 4 and 8 seeds: 31–34 ms); the slowest of the 32
ReLU seeds grokked at epoch 6,900 (the first 2 by 4,700), the first 2 ReLU-free seeds by 18,500."""

CLAIM_CHUNK = 100
"""Epochs per jitted call of the claims' runs (a checkpoint after each: a 32-seed run on 2 CPU cores is
resumable every few minutes)."""


def claim_config(budget: str, relu: bool = True, seed: int = 0):
    """The grokking config of the claims' trained models for ``budget``: the clock blog's model and run (the
    ``blog`` preset of :func:`geomjax.train.grokking.grokking_config`: no positional embeddings, no LayerNorm,
    30% split, AdamW lr 1e-3, weight decay 1, β (0.9, 0.98), full batch; ReLU 10,000 epochs, ReLU-free 20,000),
    in chunks of :data:`CLAIM_CHUNK` epochs; ``quick`` stops once every seed has grokked (:data:`GROK_STOP`,
    the blog's lengths as the cap). ``seed`` is a run's; the claims train the seeds of :data:`SEEDS`."""

    if budget not in ("quick", "full"):
        raise ValueError(f"claim_config: budget must be 'quick' or 'full', got {budget!r}")
    c = grokking_config("blog", relu=relu, seed=seed).replace(chunk_epochs=CLAIM_CHUNK)
    return c if budget == "full" else c.replace(stop=GROK_STOP, preset="blog-quick")


def seeds_dir(cfg, seeds, root: str | os.PathLike | None = None) -> Path:
    """Where the K seeds of ``cfg`` live: ``<root or geomjax.base.io.cache_root()>/grokking-seeds/<config hash at seed
    0>-<first seed>x<K>``."""
    seeds = tuple(seeds)
    return Path(root or cache_root()) / "grokking-seeds" / f"{config_hash(cfg.replace(seed=0))}-{seeds[0]}x{len(seeds)}"


def finished_seeds(cfg, seeds, root: str | os.PathLike | None = None):
    """The K seeds of ``cfg`` from :func:`seeds_dir` when that run is finished (at its epochs, or stopped by its
    rule), else None."""
    try:
        return load_grokking_seeds(seeds_dir(cfg, seeds, root), cfg, seeds)
    except (FileNotFoundError, ValueError):
        return None


def trained_seeds(cfg, seeds, *, progress: bool = False, root: str | os.PathLike | None = None,
                  log_file: str | os.PathLike | None = None, prefix_cfg=None):
    """The K seeds of ``cfg`` trained as one vmapped program (:func:`geomjax.train.grokking_seeds.train_grokking_seeds`),
    loaded from :func:`seeds_dir` when finished, else trained or resumed there (``prefix_cfg``: the config of a run
    that is this one's beginning, continued when it is finished and there is nothing to resume)."""
    done = finished_seeds(cfg, seeds, root)
    if done is not None:
        return done
    prefix = finished_seeds(prefix_cfg, seeds, root) if prefix_cfg is not None else None
    return train_grokking_seeds(cfg, tuple(seeds), seeds_dir(cfg, seeds, root), progress=progress, log_file=log_file,
                                init_from=prefix)


def budget_seeds(budget: str, relu: bool = True, *, progress: bool = False, log_file=None):
    """The budget's trained models (:data:`SEEDS` of :func:`claim_config`), trained once and cached. The quick
    budget's runs are the full budget's first epochs (the same seeds and training, stopped at grokking), so a full
    run with nothing to resume continues the finished quick run (bit for bit the run trained from epoch 0)."""
    return trained_seeds(claim_config(budget, relu), range(SEEDS[budget]), progress=progress, log_file=log_file,
                         prefix_cfg=claim_config("quick", relu) if budget == "full" else None)


# ---------------------------------------------------------------------------------------- the claims' analyses

def untrained(budget: str, relu: bool) -> str:
    """Why a quick run has no verdicts on the budget's ``relu`` models: they are not trained yet, and a quick run
    reads trained models but never trains them (hours on a CPU); what trains them, and its one-time cost."""
    c, k = claim_config(budget, relu), SEEDS[budget]
    return (f"the {k} {'ReLU' if relu else 'ReLU-free'} models of budget {budget!r} are not trained yet (a quick run "
            f"reads them from {seeds_dir(c, range(k))} and never trains them): train them once with "
            f"`python scripts/train_clock_seeds.py --budget {budget}` (geomjax.sources.clock.claims.budget_seeds; "
            f"{TRAIN_COST[relu]}), or run `geomjax verify --budget full`, which trains what it needs")


@per_run
def seed_analyses(budget: str) -> tuple[list[dict] | None, list[dict] | None]:
    """(analyses of the K ReLU models, analyses of the K ReLU-free models) of a budget (K = :data:`SEEDS`), once per
    claims run: every clock claim reads them. Each carries ``seed``, ``stopped`` (how a run with a stop rule ended)
    and ``train_seconds`` (the vmapped run's seconds / K); the embedding-restricted accuracies (``sufficiency_embed``,
    reported, never judged) only the first seed's, whose details a verdict shows. Budget ``full`` trains what is not
    cached; ``quick`` only reads the cache: None for models not trained yet (:func:`untrained`)."""
    out = []
    for relu in (True, False):
        res = (finished_seeds(claim_config(budget, relu), range(SEEDS[budget])) if budget == "quick"
               else budget_seeds(budget, relu))
        out.append(None if res is None else
                   [analyze(r := seed_result(res, j), seed=0, with_snapshots=False, with_embedding_restriction=j == 0)
                    | {"seed": s, "stopped": r.stopped, "train_seconds": r.seconds} for j, s in enumerate(res.seeds)])
    return out[0], out[1]


def trained_analyses(budget: str, seed: int = 0) -> tuple[dict | None, dict | None]:
    """(analysis of the ReLU model, analysis of the ReLU-free model) of one seed of the budget's trained models
    (:func:`seed_analyses`; None for models a quick run finds untrained): the clock report's illustrations, with the
    embedding-restricted accuracies (computed here for a seed other than the first)."""
    out = []
    for relu, ans in zip((True, False), seed_analyses(budget)):
        an = None if ans is None else ans[seed]
        if an is not None and "sufficiency_embed" not in an:
            res = seed_result(budget_seeds(budget, relu), seed)  # cached: its analysis exists
            an = an | {"sufficiency_embed": analyze(res, seed=0, with_snapshots=False)["sufficiency_embed"]}
        out.append(an)
    return out[0], out[1]


def trained_description(budget: str) -> str:
    """One sentence naming the trained models of ``budget`` (K seeds, p, epochs or stop rule, split, optimiser): the
    clock claims' ``what`` and the first line of the clock report."""
    c, cf = claim_config(budget), claim_config(budget, False)
    o, m = c.train.options, c.train.model
    epochs = (f"{c.epochs} full-batch epochs (ReLU-free {cf.epochs})" if c.stop is None else
              f"full-batch epochs until {c.stop.describe()} by every seed (logs every {c.log_every}; cap {c.epochs}, "
              f"ReLU-free {cf.epochs})")
    return (f"{SEEDS[budget]} independently trained models (seeds 0..{SEEDS[budget] - 1}, one vmapped program) of the "
            f"clock blog's model (positional embeddings: {m.pos_embedding}, no LayerNorm): p = {o.p}, {epochs}, train "
            f"fraction {o.train_frac}, lr {c.train.optim.lr}, weight decay {c.train.optim.weight_decay} (budget "
            f"{budget!r}; geomjax.sources.clock.claims.claim_config)")


# ------------------------------------------------------------------------------------------ preconditions

_GROK_ORIGIN = ("a yes/no statement about the trained model: the epoch order is certified (slack 1 epoch); a run "
                "that never reaches 99% test accuracy cannot refute 'groks' — that seed is undecided (budget too small)")
_TRAINED_ORIGIN = ("a threshold fixed in the statement before looking at results (the source is qualitative); "
                   "computed exactly from each seed's trained weights, so the margin is the threshold itself")

ALLOWED_FRACTION = 0.5
"""The share of the recipe's trained models a statement about "the trained model" may miss: it holds when a trained
model has the property more often than not (the failing fraction's 5σ interval below 1/2), does not hold when it
lacks it more often than not (the interval above 1/2). 1/2 asks the same evidence in both directions: with every
seed agreeing, 22 seeds decide either way (and the registry refutes only over :data:`MIN_DRAWS` = 32)."""

_SEEDS_ORIGIN = (f"a statement about the recipe's trained model, decided over independently trained seeds "
                 f"(geomjax.claims.rules.over_draws): each seed is judged by the claim's threshold; the failing share "
                 f"is compared with {ALLOWED_FRACTION:g} (ALLOWED_FRACTION: the same evidence for 'holds' as for "
                 f"'does not hold'); a seed that did not grok is undecided, never failing")


def _threshold(margin: float, admits: str) -> Inequality:
    """The rule of a threshold statement about the trained model: ``margin`` is the tolerance the threshold
    admits from the ideal value (``admits`` says which), reported as the claim's margin."""
    return Inequality(origin=f"{_TRAINED_ORIGIN}; the threshold admits {admits}; {_SEEDS_ORIGIN}", margin=margin)


def _grok_precondition(an: dict, budget: str, what: str) -> str | None:
    """None when the seed's run grokked, else what was not met. Grokked: for a run with a stop rule (budget quick),
    the rule holds at the run's end (the model it returns has grokked); without one, test accuracy reached 99%."""
    stop, h = claim_config(budget).stop, an["history"]
    if (an["milestones"]["test_99"] is not None if stop is None
            else stop.reason(h["epoch"], h[stop.metric]) is not None):
        return None
    best = float(np.max(h["test_acc"]))
    rule = f"{stop.describe()} within {int(h['epoch'][-1])} epochs" if stop is not None else "test accuracy >= 0.99"
    return f"the {what} model of seed {an['seed']} did not grok ({rule}: not met; best test accuracy {best:.3f})"


_CLEANUP = ("the statement is about the converged model, after the cleanup that follows grokking (Nanda et al. §5: "
            "weight decay removes the memorising components; the blog §4 trains on to 10,000 epochs because 'the "
            "regularization (AdamW) is still hard at work'); the runs of budget {budget!r} stop at grokking; budget "
            "'full' trains the blog's lengths")


def _decide_seed(rule: Inequality, ev: Evaluation, claim_id: str) -> str:
    """One seed's verdict under the claim's threshold rule (the registry's inequality judgement)."""
    if ev.precondition:
        return "inconclusive"
    return judge_inequality(rule, ev, claim_id, {})[0].verdict


def _over_seeds(claim_id: str, rule: Inequality, per_seed: list[tuple[int, Evaluation, float]], method: str,
                precondition: str | None = None) -> Evaluation:
    """A claim about the recipe's trained model decided over K seeds: ``per_seed`` (seed, that seed's Evaluation
    under ``rule``, its training seconds) -> :func:`~geomjax.claims.rules.over_draws` at :data:`ALLOWED_FRACTION`;
    the details list every seed's verdict and sides, and seed 0's own details."""
    verdicts = [_decide_seed(rule, ev, claim_id) for _, ev, _ in per_seed]
    fails = np.array([v == "does not hold" for v in verdicts])
    holds = np.array([v == "holds" for v in verdicts])
    rows = [{"seed": s, "verdict": v, "lhs": np.asarray(ev.lhs, float).tolist(), "rhs": np.asarray(ev.rhs, float).tolist(),
             **({"precondition": ev.precondition} if ev.precondition else {})}
            for (s, ev, _), v in zip(per_seed, verdicts)]
    decided = fails | holds  # the failing share's point estimate over the seeds decided (an undecided seed: no guess)
    out = over_draws(fails, holds, allowed_fraction=ALLOWED_FRACTION, method=method,
                     point_fails=fails[decided] if decided.any() else ~holds,
                     seconds=float(sum(t for _, _, t in per_seed)),
                     details={"seeds": rows, "seed_0": per_seed[0][1].details})
    k, K = int(holds.sum()), len(per_seed)
    out.observations["seeds"] = (f"{k} of {K} seeds hold, {int(fails.sum())} of {K} do not, {K - k - int(fails.sum())} "
                                 "undecided")
    out.precondition = precondition
    return out


def _trained_claim(rule: Inequality, measure, relu: bool = True, cleanup: bool = False):
    """The evaluator of a claim about the recipe's trained model: ``measure(an, budget) -> Evaluation`` on each seed's
    analysis (:func:`seed_analyses`; the ReLU-free models when not ``relu``), each seed behind the grokking
    precondition, decided over the seeds by :func:`_over_seeds`; a claim about the converged model (``cleanup``) is
    inconclusive for runs that stop at grokking (a stop rule: budget quick)."""

    @functools.wraps(measure)
    def evaluate(budget, key):
        ans = seed_analyses(budget)[0 if relu else 1]
        if ans is None:  # a quick run without the trained models: no seed was judged
            return Evaluation(lhs=np.full(1, np.nan), rhs=np.full(1, ALLOWED_FRACTION), draws=0,  # nothing measured
                              precondition=untrained(budget, relu), method="not run: no trained models",
                              details={"seeds": []})
        per_seed = []
        for an in ans:
            ev = measure(an, budget)
            ev.precondition = _grok_precondition(an, budget, "ReLU" if relu else "ReLU-free")
            per_seed.append((an["seed"], ev, an["train_seconds"]))
        pre = _CLEANUP.format(budget=budget) if cleanup and claim_config(budget).stop is not None else None
        return _over_seeds(measure.__name__, rule, per_seed, "jitted float32 analysis of each seed "
                           "(geomjax.tools.clock_probe.analyze)", pre)

    return evaluate


# ------------------------------------------------------------------------------------------ second witnesses
# A refutation of a trained-model statement must be confirmed by a computation that shares no code with the
# first (geomjax.theory.fourier on a jitted float32 forward pass): the forward pass written out again in NumPy
# float64 from the parameter arrays, key frequencies from np.fft, restriction by a 2-D DFT of the logits.


@per_run
def _params_np(budget: str) -> tuple[list[tuple[int, dict]], int]:
    """Every ReLU seed's parameters as float64 NumPy arrays (seed, nested dict) and p, for the witnesses."""
    res = budget_seeds(budget, True)
    host = jax.device_get(res.state.params)
    trees = [(s, jax.tree_util.tree_map(lambda x: np.asarray(x[j], np.float64), host)) for j, s in enumerate(res.seeds)]
    return trees, res.config.train.options.p


def _np_witness(rule: Inequality, measure_np, method: str):
    """A second witness over the seeds: ``measure_np(P, p, an, budget) -> Evaluation`` on each seed's float64 NumPy
    parameters (``an``: that seed's analysis, for definitions such as the MLP's frequencies), each seed behind the
    grokking precondition, decided over the seeds like the first computation (:func:`_over_seeds`)."""

    def witness(budget, key):
        trees, p = _params_np(budget)
        ans = {an["seed"]: an for an in seed_analyses(budget)[0]}
        per_seed = []
        for s, P in trees:
            ev = measure_np(P, p, ans[s], budget)
            ev.precondition = _grok_precondition(ans[s], budget, "ReLU")
            per_seed.append((s, ev, ans[s]["train_seconds"]))
        return _over_seeds(measure_np.__name__, rule, per_seed, method)

    return witness


def numpy_clock_forward(P: dict, p: int, relu: bool = True) -> dict[str, np.ndarray]:
    """Nanda et al.'s 1-layer, LayerNorm-free model on all p² inputs "a b =", in NumPy float64 (the second
    witness of the clock claims; independent of :func:`geomjax.models.toy.clock_activations`). Attention is
    computed from per-token tables (a key, value and score per token and position: every input is "a b =" and
    only the "=" position is read), the MLP on the p² residuals.

    Args:
      P: parameters as nested dicts of float64 arrays (embed, pos_embed if positions are learned, block_0/attn q,k,v (d, H, K) and
        o (H, K, d) kernels, block_0/mlp fc (d, F) and proj (F, d) with biases, unembed (d, V_out)).
      p: modulus; inputs are ordered row-major (a, b).
      relu: apply the MLP's ReLU (False: identity, the "ReLU removed" model).

    Returns:
      dict ``logits`` (p², p) over the answers 0..p−1 and ``o_heads`` (p², H, d), the per-head attention
      outputs at the "=" position.
    """
    E = P["embed"]["embedding"]
    pos = P["pos_embed"]["embedding"] if "pos_embed" in P else np.zeros((3, E.shape[1]))  # the blog's model: none
    at = P["block_0"]["attn"]
    lin = lambda h, n: np.tensordot(h, at[n]["kernel"], axes=(-1, 0)) + at[n].get("bias", 0.0)  # (..., H, K)
    toks = [E[:p] + pos[0], E[:p] + pos[1], (E[p] + pos[2])[None]]  # position t's token rows: a, b, "="
    q = lin(toks[2][0], "q")  # (H, K): the query of "="
    k, v = [lin(x, "k") for x in toks], [lin(x, "v") for x in toks]  # (p|1, H, K) per position
    scores = [np.einsum("thk,hk->th", kt, q) / math.sqrt(q.shape[-1]) for kt in k]  # (p|1, H)
    sc = np.stack(np.broadcast_arrays(scores[0][:, None], scores[1][None, :], scores[2][None]), -1)  # (p, p, H, 3)
    w = np.exp(sc - sc.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    z = (w[..., 0, None] * v[0][:, None] + w[..., 1, None] * v[1][None, :]
         + w[..., 2, None] * v[2][None]).reshape(p * p, *q.shape)  # (p², H, K)
    o_heads = np.stack([z[:, h] @ Wo for h, Wo in enumerate(at["o"]["kernel"])], 1)  # (p², H, d)
    r = toks[2] + o_heads.sum(1) + at["o"].get("bias", 0.0)
    m = P["block_0"]["mlp"]
    b_fc, b_proj = m["fc"].get("bias", 0.0), m["proj"].get("bias", 0.0)
    if relu:
        resid = r + np.maximum(r @ m["fc"]["kernel"] + b_fc, 0.0) @ m["proj"]["kernel"] + b_proj
    else:  # without the ReLU the MLP is one affine map, r ↦ r W_in W_out + b_in W_out + b_out: (d, d), applied once
        W_in, W_out = m["fc"]["kernel"], m["proj"]["kernel"]
        resid = r + r @ (W_in @ W_out) + (np.broadcast_to(b_fc, W_in.shape[1:]) @ W_out + b_proj)
    logits = resid @ P["unembed"]["kernel"] + P["unembed"].get("bias", 0.0)
    return {"logits": logits[:, :p], "o_heads": o_heads}


def numpy_key_frequencies(P: dict, p: int, ratio: float = 10.0) -> list[int]:
    """Key frequencies by the blog's §5 rule from np.fft: energy |DFT_k|² of W_E[:p] and of W_L[:p] = (W_out W_U)ᵀ
    summed over columns, above ``ratio`` × the median over k = 1..(p−1)/2, in both (else W_E's alone)."""
    m = P["block_0"]["mlp"]
    W_L = (m["proj"]["kernel"] @ P["unembed"]["kernel"]).T
    strong = []
    for W in (P["embed"]["embedding"], W_L):
        e = np.sum(np.abs(np.fft.rfft(W[:p], axis=0)) ** 2, axis=1)[1: (p - 1) // 2 + 1]
        strong.append([int(k) + 1 for k in np.flatnonzero(e > ratio * np.median(e))])
    both = [k for k in strong[0] if k in strong[1]]
    return both or strong[0]


def dft_restricted_accuracy(logits: np.ndarray, p: int, freqs) -> float:
    """Accuracy over all p² pairs of logits restricted to the waves of a + b at ``freqs`` (Nanda et al. §5.1),
    by a DFT: the 2-D DFT's bins (0, 0) and (±w, ±w) — the only ones kept — are the 1-D DFT over s = a + b (mod p)
    of the logits summed over each s, and what they restore depends on s alone (each s is p of the pairs)."""
    L = logits.reshape(p, p, -1)
    G = sum(np.roll(L[a], a, axis=0) for a in range(p))  # G[s] = Σ_a L[a, s − a]: (p, C)
    keep = np.zeros(p, bool)
    keep[[0, *(w % p for w in freqs), *(-w % p for w in freqs)]] = True
    rest = np.real(np.fft.ifft(np.where(keep[:, None], np.fft.fft(G, axis=0), 0.0), axis=0)) / p  # (p, C), by s
    return float(np.mean(np.argmax(rest, 1) == np.arange(p)))


def _np_affine(P, p, an, budget):
    a, b = np.divmod(np.arange(p * p), p)
    acc = float(np.mean(np.argmax(numpy_clock_forward(P, p, relu=False)["logits"], 1) == (a + b) % p))
    return Evaluation(lhs=np.array([0.99]), rhs=np.array([acc]))


def _np_two(P, p, an, budget):
    ks = numpy_key_frequencies(P, p)
    L = numpy_clock_forward(P, p)["logits"]
    pairs = {f"{k1},{k2}": dft_restricted_accuracy(L, p, [k1, k2])
             for i, k1 in enumerate(ks) for k2 in ks[i + 1:] if math.gcd(k1, k2) == 1}
    return Evaluation(lhs=np.array([0.99]), rhs=np.array([max(pairs.values()) if pairs else 0.0]),
                      details={"key_frequencies": ks, "accuracy_coprime_pairs": pairs})


def numpy_summed_petal_fraction(o_heads: np.ndarray, p: int, a0: int, k: int) -> float:
    """The blog §7 in NumPy: for fixed a = a0, the head-summed o(b) projected on its own cos-k/sin-k plane
    (normalized coefficient vectors); the share of the mean-removed |DFT|² of x + iy over b in the peak bin
    and its mirror (1 for any single-frequency ellipse)."""
    o = o_heads.reshape(p, p, *o_heads.shape[1:])[a0].sum(1)  # (p, d)
    c = np.exp(-2j * np.pi * k * np.arange(p) / p) @ o  # Σ_b o(b) e^{−2πikb/p}
    U = np.stack([c.real, -c.imag])
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    xy = o @ U.T
    s = np.abs(np.fft.fft((xy[:, 0] - xy[:, 0].mean()) + 1j * (xy[:, 1] - xy[:, 1].mean()))) ** 2
    i = int(np.argmax(s))
    j = (p - i) % p
    return float((s[i] + (s[j] if j != i else 0.0)) / s.sum())


def _np_petals(used_only: bool):
    def _np_petal_fractions(P, p, an, budget):
        ks = numpy_key_frequencies(P, p)
        if used_only:  # the MLP-used frequencies (Nanda's neuron frequencies): a definition, taken from the first
            ks = [k for k in ks if k in an["key_neurons"]]
        o = numpy_clock_forward(P, p)["o_heads"]
        fr = {str(k): numpy_summed_petal_fraction(o, p, 70 % p, k) for k in ks}
        return Evaluation(lhs=np.full(max(len(ks), 1), 0.8), rhs=np.array(list(fr.values()) or [0.0]),
                          details={"key_frequencies": ks, "summed_o_single_frequency_fraction": fr})

    return _np_petal_fractions


_NP_METHODS = {
    "affine": "NumPy float64 forward pass with the ReLU replaced by the identity (clock.numpy_clock_forward), per seed",
    "two": "NumPy float64 forward pass; key frequencies by np.fft; restriction by the DFT over a + b of the logits summed "
           "over each a + b (the 2-D DFT's diagonal bins), per seed",
    "petals": "NumPy float64 forward pass; o plane from the DFT over b; np.fft spectrum of the sum, per seed",
}


def _threshold_claim(id: str, source: str, statement: str, predicted: str, measure, margin: float, admits: str,
                     cleanup: bool = False, witness_np=None, witness_method: str = "", **extra) -> Claim:
    """Register a threshold statement about the recipe's trained ReLU model: ``measure(an, budget) -> Evaluation``
    reads each seed's analysis, judged by :func:`_threshold` (``margin``, ``admits``) and decided over the seeds
    (:func:`_trained_claim`; ``cleanup``: a statement about the converged model); ``witness_np`` (with
    ``witness_method``): the NumPy second witness of a refutation, per seed (:func:`_np_witness`); ``extra``: the
    other :class:`~geomjax.claims.registry.Claim` fields (notes, printed, error_kind)."""
    rule = _threshold(margin, admits)
    witness = _np_witness(rule, witness_np, witness_method) if witness_np is not None else None
    return register(Claim(id=id, source=source, statement=statement, predicted=predicted, scope="random",
                          evaluate=_trained_claim(rule, measure, cleanup=cleanup), rule=rule, witness=witness, **extra))


# ------------------------------------------------------------------------------------------ claims

def _grokking_order(an: dict, **details) -> Evaluation:
    """epoch(train 100%) ≤ epoch(test 99%) − 1 for one analysed run ('never' counts as a violation: train at
    the last epoch + 1, test at 0), with the final and best accuracies and ``details`` in the details."""
    ms, h = an["milestones"], an["history"]
    E = int(h["epoch"][-1])
    tr = ms["train_100"] if ms["train_100"] is not None else E + 1
    te = ms["test_99"] if ms["test_99"] is not None else 0
    return Evaluation(lhs=np.array([float(tr)]), rhs=np.array([float(te)]), slack=np.array([1.0]),
                      details={"epoch_train_acc_100": ms["train_100"], "epoch_test_acc_99": ms["test_99"],
                               "final_train_acc": float(h["train_acc"][-1]), "final_test_acc": float(h["test_acc"][-1]),
                               "max_test_acc": float(np.max(h["test_acc"])), **details})


def _at_least(budget: str, threshold: float, measured, **details) -> Evaluation:
    """A threshold statement about the trained model: ``threshold`` ≤ every element of ``measured`` (lhs the
    threshold, rhs the measurements), with ``details`` and which trained model was measured (``what``)."""
    measured = np.asarray(measured)
    return Evaluation(lhs=np.full(measured.size, threshold), rhs=measured, details={**details, "what": trained_description(budget)})


def _ev_grokking(an, budget):
    return _grokking_order(an, what=trained_description(budget))


_GROK_RULE = Inequality(origin=f"{_GROK_ORIGIN}; {_SEEDS_ORIGIN}")


register(Claim(
    id="clock.grokking", source="Nanda et al. §3; Clock blog §4",
    statement="Grokking: train accuracy reaches 100% strictly before test accuracy reaches 99% (and test accuracy "
              "does reach 99%): epoch(train 100%) <= epoch(test 99%) - 1; 'never' counts as a violation",
    predicted="train 100% first, then test >= 99%", evaluate=_trained_claim(_GROK_RULE, _ev_grokking),
    rule=_GROK_RULE, scope="random",
    notes="Metrics are logged every 25 epochs inside the jitted scan, so epochs are multiples of 25. The final "
          "accuracies are reported too: full-batch AdamW in float32 shows late loss spikes (the 'slingshot') "
          "that can transiently lower test accuracy after grokking."))


def _ev_sparse(an, budget):
    return _at_least(budget, 0.8, [an["key_fraction_W_E"]],
                     key_frequencies_W_E=an["key"], key_frequencies_neurons=an["key_neurons"],
                     key_frequencies_neurons_frac85=an["key_neurons_85"],
                     key_fraction_W_L=an["key_fraction_W_L"],
                     random_baseline_2k_over_p_minus_1=an["random_fraction_expected"],
                     random_W_E_fraction=an["random_W_E_fraction"])


_threshold_claim(
    "clock.embed_sparse", f"{SRC_BLOG} §5; Nanda et al. §4.1",
    "W_E's Fourier spectrum is sparse: the cos/sin components of the key frequencies hold >= 80% of its "
    "squared Fourier norm (constant excluded), where a random W_E gives about 2k/(p-1) for k key frequencies",
    "key fraction >= 0.8", _ev_sparse,
    0.2, "0.2 of the energy off the key frequencies ('sparse': ideally all of it on them)", cleanup=True,
    notes="Key frequencies: energy above 10x the median frequency energy (the blog's bar plot read as a rule). A "
          "statement about the converged model: inconclusive for a run that stops at grokking (budget quick).")


def _ev_attention(an, budget):
    fr = [h["key_fraction"] for h in an["attention"]]
    dom_ok = [1.0 if h["dominant"] in an["key"] else 0.0 for h in an["attention"]]
    return _at_least(budget, 0.5, fr + dom_ok,
                     key_variance_fraction_per_head=fr,
                     dominant_frequency_per_head=[h["dominant"] for h in an["attention"]],
                     key_frequencies=an["key"],
                     noise_baseline=((2 * len(an["key"]) + 1) ** 2 - 1) / (an["p"] ** 2 - 1))


_threshold_claim(
    "clock.attention_periodic", f"{SRC_BLOG} §6",
    "Last-row attention (weight of '=' on a) is periodic in a and b at key frequencies: for every head, "
    ">= 50% of its variance over (a, b) lies in 2D Fourier components with a- and b-frequencies in the key "
    "set (or 0), and its dominant frequency is a key frequency (instances: fractions, then 1/0 flags vs 0.5)",
    "per head: key fraction >= 0.5 and dominant frequency in key set", _ev_attention,
    0.5, "half of a head's variance outside the key components ('periodic': most of it inside)", cleanup=True,
    notes="A statement about the converged model: inconclusive for a run that stops at grokking (budget quick).")


def _ev_petals(an, budget):
    ks = an["key"]
    tot = [an["petals"][k]["total_freq_fraction"] for k in ks]
    return _at_least(budget, 0.8, tot,
                     key_frequencies=ks, a=an["a0"],
                     summed_o_single_frequency_fraction=dict(zip(map(str, ks), tot)),
                     summed_o_peak_frequency={str(k): an["petals"][k]["total_peak_freq"] for k in ks},
                     per_head_single_frequency_fraction={str(k): an["petals"][k]["head_freq_fraction"] for k in ks},
                     per_head_rms_radius={str(k): an["petals"][k]["head_norm"] for k in ks})


_threshold_claim(
    "clock.petals_sum_to_circles", f"{SRC_BLOG} §7",
    "Per-head petals sum to circles: for a fixed a (the blog's a = 70, mod p) and every key frequency k, "
    "the head-summed o vectors projected on their frequency-k Fourier plane have >= 80% of their "
    "(mean-removed) energy at the single frequency ±k over b",
    "single-frequency fraction >= 0.8 for every key k", _ev_petals,
    0.2, "0.2 of the summed curve's energy off its frequency (a circle: all of it)", witness_np=_np_petals(False), witness_method=_NP_METHODS["petals"],
    notes="Per-head fractions are reported for comparison (petals have several frequencies).")


def _ev_petals_used(an, budget):
    ks = [k for k in an["key"] if k in an["key_neurons"]]
    tot = [an["petals"][k]["total_freq_fraction"] for k in ks]
    return _at_least(budget, 0.8, tot if ks else [0.0],
                     frequencies=ks, excluded_W_E_only=[k for k in an["key"] if k not in ks],
                     summed_o_single_frequency_fraction=dict(zip(map(str, ks), tot)))


_threshold_claim(
    "clock.petals_sum_to_circles.used", f"{SRC_BLOG} §7 (restricted to frequencies the MLP uses)",
    "Per-head petals sum to circles for the key frequencies that the MLP uses (W_E key frequencies that are "
    "also Nanda's neuron frequencies): summed-o single-frequency fraction >= 0.8 for each",
    "single-frequency fraction >= 0.8 for every used key k", _ev_petals_used,
    0.2, "0.2 of the summed curve's energy off its frequency (a circle: all of it)", witness_np=_np_petals(True), witness_method=_NP_METHODS["petals"],
    notes="Second form of clock.petals_sum_to_circles: W_E can keep partially decayed frequencies (the blog's "
          "'somewhat in-between' norms, §5) that no neuron and no W_L row uses; their o projections need not be circles.")


def _ev_planes(an, budget):
    ang = an["dihedral_min_angle"]
    return _at_least(budget, 45.0, ang.reshape(-1),
                     key_frequencies=an["key"], min_principal_angle_deg_WE_rows_o_cols=ang.tolist())


_threshold_claim(
    "clock.planes_far", f"{SRC_BLOG} §8",
    "The o circle planes and the W_E circle planes are far apart: for every pair (W_E plane of key k, "
    "o plane of key k') the smallest principal (dihedral) angle is >= 45 degrees",
    "all smallest principal angles >= 45°", _ev_planes,
    45.0, "45° from orthogonal planes ('far apart': ideally 90°)",
    notes="o plane of k: top-2 right singular vectors of the stacked per-a cos/sin-k Fourier coefficients of o(a, ·).")


def _ev_relu_free(nr, budget):
    return _grokking_order(nr, key_frequencies=nr["key"], key_fraction_W_E=nr["key_fraction_W_E"],
                           what=trained_description(budget) + ", activation 'none'")


register(Claim(
    id="clock.relu_free_groks", source=f"{SRC_BLOG} §8",
    statement="The ReLU-free variant (MLP activation removed, same recipe) also groks, by the criterion of "
              "clock.grokking: epoch(train 100%) <= epoch(test 99%) - 1, 'never' counting as a violation",
    predicted="train 100% first, then test >= 99%", evaluate=_trained_claim(_GROK_RULE, _ev_relu_free, relu=False),
    rule=_GROK_RULE, scope="random"))


def _ev_bias(an, budget):
    return Evaluation(lhs=np.array([float(an["n_negative_b_in"])]), rhs=np.array([float(an["p"] - 1)]),
                      details={"n_b_in_below_minus_quarter_max": an["n_negative_b_in"], "d_mlp": int(an["b_in_sorted"].size),
                               "n_b_in_negative": int(np.sum(an["b_in_sorted"] < 0)),
                               "fraction_pre_activations_negative": an["frac_pre_negative"], "what": trained_description(budget)})


_threshold_claim(
    "clock.few_negative_b_in", f"{SRC_BLOG} §8",
    "Few strongly negative MLP input biases (no superposition): fewer than p of the b_in are below "
    "-0.25·max|b_in| (the blog: 'way fewer than 113 are significantly negative')",
    "count < p", _ev_bias,
    1.0, "one bias (counts are integers: 'fewer than p' is count ≤ p − 1)")


def _ev_affine(an, budget):
    return _at_least(budget, 0.99, [an["acc_relu_removed"]],
                     accuracy_with_relu=an["final_acc_all"], accuracy_relu_removed=an["acc_relu_removed"],
                     fraction_pre_activations_negative=an["frac_pre_negative"])


_threshold_claim(
    "clock.mlp_affine", f"{SRC_BLOG} §8 ('The MLP layer is just an affine transformation')",
    "The trained ReLU model does not use the ReLU: removing it (identity activation, same weights) keeps "
    ">= 99% accuracy on all p² pairs",
    "accuracy without ReLU >= 0.99", _ev_affine,
    0.01, "1% of the p² pairs read wrong (the model with ReLU reads all of them right)", witness_np=_np_affine,
    witness_method=_NP_METHODS["affine"], error_kind="wrong statement",
    printed=("To reiterate, since the MLP block doesn't actually introduce any meaningful non-linearity to the feature "
             "space, we know that the circles are basically preserved through the MLP block. […] The MLP block is just "
             "an affine transformation. This transformation is NOT a function of input data."),
    notes="The blog infers this from the b_in signs and from the ReLU-free variant grokking (a separately trained "
          "model, clock.relu_free_groks: holds); this claim tests a trained ReLU model itself. 'The model' is one "
          "training run of a recipe, a random instance: decided over the budget's independently trained seeds (full: 32), "
          "the same evidence asked for 'holds' as for 'does not hold'.")


def _ev_restricted(which: str, detail: str, sufficient: bool):
    """The best accuracy of the logits restricted to one set of key frequencies (``which``: "single" or
    "pairs" of ``analyze``'s sufficiency table) against 99%: ≥ 0.99 when ``sufficient``, else < 0.99."""

    def evaluate(an, budget):
        s = an["sufficiency"]
        best = max(s[which].values()) if s[which] else 0.0
        lhs, rhs, slack = (0.99, best, 0.0) if sufficient else (best, 0.99, np.array([1e-9]))
        return Evaluation(lhs=np.array([lhs]), rhs=np.array([rhs]), slack=slack,
                          details={detail: s[which], "accuracy_all": s["all"], "what": trained_description(budget),
                                   **({"embedding_restricted": an["sufficiency_embed"]} if "sufficiency_embed" in an
                                      else {})})

    return evaluate


_threshold_claim(
    "clock.one_circle_insufficient", f"{SRC_BLOG} §11.1",
    "One circle is not sufficient (trained-model reading): the logits restricted (Nanda et al. §5.1) to any single key frequency "
    "give < 99% accuracy on all p² pairs",
    "best single-frequency accuracy < 0.99", _ev_restricted("single", "accuracy_single_frequency", False),
    0.01, "1% of the p² pairs read wrong (the full model reads all of them right)",
    notes="For prime p every nonzero frequency generates Z_p, so one ideal circle determines a+b exactly; the "
          "blog's gcd condition is always met and insufficiency can only come from the readout's margins.")


_threshold_claim(
    "clock.two_coprime_sufficient", f"{SRC_BLOG} §11.2",
    "Two coprime circles are sufficient (trained-model reading): for some pair of key frequencies with gcd 1, the logits "
    "restricted to them give >= 99% accuracy on all p² pairs",
    "best coprime-pair accuracy >= 0.99", _ev_restricted("pairs", "accuracy_coprime_pairs", True),
    0.01, "1% of the p² pairs read wrong (the full model reads all of them right)", witness_np=_np_two,
    witness_method=_NP_METHODS["two"], reading="extension", intended_by="clock.two_coprime_sufficient.in_principle",
    notes=("geomjax's trained-model reading of a condition on frequencies, about the recipe's trained model (the claims' "
           "seeds of the blog's model): the blog never says that a trained model's logits restricted to two circles reach high "
           "accuracy, so this is no error of the blog. Its statement (§11.2) is the in-principle condition, "
           "clock.two_coprime_sufficient.in_principle (holds), whose real weakness is that for prime p it is empty: "
           "one circle of any nonzero frequency already suffices (clock.one_circle_sufficient.in_principle)."))


def _ev_all(an, budget):
    s = an["sufficiency"]
    return _at_least(budget, 0.99, [s["all"]],
                     key_frequencies=an["key"], accuracy_all=s["all"],
                     accuracy_unrestricted=an["final_acc_all"], restricted_loss=an["restricted_final"])


_threshold_claim(
    "clock.all_key_sufficient", "Nanda et al. §5.1 (restricted loss); corrects Clock blog §11.2",
    "The logits restricted to ALL key frequencies (Nanda's restricted logits) give >= 99% accuracy on all p² "
    "pairs — the form of the sufficiency statement that the trained model supports when two circles do not",
    "accuracy >= 0.99", _ev_all,
    0.01, "1% of the p² pairs read wrong (the full model reads all of them right)", reading="extension")


# ----------------------------------------------------------------- in-principle readings (exact computation)

_PRIMES = (59, 113)  # the trained models' p (113) and a second prime (the quick budget's p before issue 28)


def ideal_circle_margins(p: int, freqs) -> np.ndarray:
    """Read-out margins of ideal circles (Clock blog §11; Nanda et al. §4), exact enumeration over all p² pairs.

    For the frequency set K the ideal logits are logit_c(a, b) = Σ_{k∈K} cos(2πk(a + b − c)/p); the answer
    is read as argmax_c. Returns (p, p) margins logit_{(a+b) mod p}(a, b) − max_{c ≠ (a+b) mod p} logit_c(a, b),
    float64: all positive iff the circles decide a + b mod p on every pair.
    """
    a = np.arange(p)
    s = (a[:, None] + a[None, :]) % p  # (p, p)
    c = np.arange(p)
    ang = 2 * np.pi * (s[..., None] - c) / p  # (p, p, p)
    logits = sum(np.cos(k * ang) for k in freqs)
    correct = np.take_along_axis(logits, s[..., None], -1)[..., 0]
    np.put_along_axis(logits, s[..., None], -np.inf, -1)
    return correct - logits.max(-1)


def _ev_circles_in_principle(n_circles: int):
    def evaluate(budget, key):
        rows, worst = [], []
        for p in _PRIMES:
            ks = range(1, (p - 1) // 2 + 1)
            sets = ([(k,) for k in ks] if n_circles == 1 else
                    [(k1, k2) for k1 in ks for k2 in ks if k1 < k2 and math.gcd(k1, k2) == 1])
            if n_circles == 1:  # the full p² × p enumeration for every single frequency
                m = np.array([ideal_circle_margins(p, K).min() for K in sets])
            else:  # the logits depend on (a, b) only through s = a + b: one row per residue s covers all p² pairs
                sres = np.arange(p)[:, None]
                ang = 2 * np.pi * (sres - np.arange(p)) / p
                m = []
                for K in sets:
                    lg = sum(np.cos(k * ang) for k in K)
                    corr = np.diag(lg).copy()
                    np.fill_diagonal(lg, -np.inf)
                    m.append((corr - lg.max(-1)).min())
                m = np.asarray(m)
            worst.append(float(m.min()))
            rows.append({"p": p, "sets": len(sets), "min_margin": float(m.min()), "worst_set": list(sets[int(m.argmin())])})
        # lhs ≤ rhs form: the largest wrong logit minus the correct one must be < 0 on every pair
        return Evaluation(lhs=-np.asarray(worst), rhs=np.zeros(len(worst)), slack=1e-12, details={"per_p": rows},
                          method="exact enumeration over all p² pairs, float64")

    return evaluate


register(Claim(
    id="clock.one_circle_sufficient.in_principle", source=f"{SRC_BLOG} §11.1 ('Theoretically, the model could learn just 1 circle')",
    statement="In principle one ideal circle suffices: for prime p and every frequency k = 1..(p−1)/2, the ideal logits "
              "cos(2πk(a + b − c)/p) have their strict maximum at c = a + b mod p on all p² pairs (p = 59, 113)",
    predicted="every read-out margin > 0", evaluate=_ev_circles_in_principle(1),
    rule=Inequality(origin="exact enumeration: any pair read wrong refutes it; slack = float64 rounding (1e-12)"),
    notes="The in-principle reading of §11.1's first sentence (k generates Z_p for prime p). The blog's 'having just 1 "
          "circle is not possible' is about the architecture (rotation needs petals from ≥ 2 heads), not the read-out; "
          "the trained-model reading is clock.one_circle_insufficient."))

register(Claim(
    id="clock.two_coprime_sufficient.in_principle", source=f"{SRC_BLOG} §11.2",
    statement="In principle two coprime circles suffice: for prime p and every pair of frequencies k1 < k2 ≤ (p−1)/2 with "
              "gcd(k1, k2) = 1, the ideal logits Σ_k cos(2πk(a + b − c)/p) have their strict maximum at c = a + b mod p "
              "on all p² pairs (p = 59, 113)",
    predicted="every read-out margin > 0", evaluate=_ev_circles_in_principle(2),
    rule=Inequality(origin="exact enumeration: any pair read wrong refutes it; slack = float64 rounding (1e-12)"),
    reading="intended",
    printed=("These circle frequencies must be such that the summed sine (or cosine) wave functions have frequency 1 (one "
             "circle is completed over P tokens). The requirement is that P × GreatestCommonDivisor(k_1, k_2, ⋯,) = 1. The "
             "easiest way to achieve this is to just have the frequencies (or periods) be co-prime, and can be done with "
             "just 2 circles."),
    notes="The in-principle reading (what the algorithm can do) of a condition printed garbled ('P × gcd = 1' cannot "
          "hold for P > 1); the trained model's restricted logits are geomjax's own reading, "
          "clock.two_coprime_sufficient. For prime p the condition is empty: one circle suffices "
          "(clock.one_circle_sufficient.in_principle)."))
