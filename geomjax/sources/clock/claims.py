"""Claims of the clock blog (the "clock" algorithm for modular addition, P = 113) and Nanda et al.,
"Progress measures for grokking via mechanistic interpretability", checked on a trained model.

What is trained (cached under ``$GEOMJAX_CACHE/grokking/<config hash>`` — default
``~/.cache/geomjax`` — so a second run loads it):

* budget ``full``: Nanda's
  architecture at p = 113 (d 128, 4 heads of 32, d_mlp 512, ReLU, learned positions, no LayerNorm,
  untied), AdamW lr 2e-3, weight decay 1.0, β (0.9, 0.98), 10-step warm-up, full batch, 50% of
  the pairs for training, 3,000 epochs — and its ReLU-free variant;
* budget ``quick``: the same model, recipe, split and seed, trained only until it groks — the run stops
  once test accuracy is ≥ 99% at 2 consecutive logs (25 epochs apart; :data:`GROK_STOP`), with a cap of
  :data:`QUICK_CAP` epochs — and its ReLU-free variant. The learning rate is constant after the warm-up,
  so the quick run follows the full run's trajectory and stops where it groks (ReLU: epoch 375, ReLU-free:
  475 on the recorded run). The statements about the converged model (:data:`_CLEANUP`: ``clock.embed_sparse``,
  ``clock.attention_periodic``) are inconclusive at quick: the fractions they bound keep rising for hundreds of
  epochs after grokking, while weight decay cleans up (:data:`_CLEANUP_EVIDENCE`).

Key frequencies: the blog's rule (Fourier norms above 10× the median; §5) applied to W_E AND the
read-out W_L, so that a key frequency is one the model uses (W_E-only ones are reported apart);
Nanda's neuron-based key frequencies are reported alongside. Thresholds that the sources leave qualitative are fixed in
each claim's statement before looking at results.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np

from geomjax.tools.clock_probe import analyze
from geomjax.base.io import cache_root
from geomjax.train.grokking import GrokkingConfig, config_hash, grokking_config, load_grokking_run, train_grokking
from geomjax.train.loop import StopRule
from geomjax.train.tasks import ModularOptions
from geomjax.claims import MIN_DRAWS, Claim, Evaluation, Inequality, per_run, register

__all__ = ["GROK_STOP", "QUICK_CAP", "claim_config", "dft_restricted_accuracy", "numpy_clock_forward",
           "numpy_key_frequencies", "numpy_summed_petal_fraction", "trained_analyses", "trained_description", "trained_run"]

SRC_BLOG = "Clock blog"


# ---------------------------------------------------------------------------------------- training

GROK_STOP = StopRule(
    "test_acc", 0.99, patience=2,
    origin="grokked: test accuracy >= 99%, the criterion of clock.grokking (Nanda et al. §3; the clock blog §4), "
           "held at 2 consecutive logs (25 epochs apart) so that the model the run returns meets it (a single "
           "log can be a transient: the recorded full ReLU-free run read 0.991 at epoch 450 and 0.902 at 500)")
"""The quick budget's stop: the run ends once it has grokked (:class:`geomjax.train.loop.StopRule`)."""

QUICK_CAP = 1000
"""The quick budget's epoch cap: about 2.5× the epochs at which the recorded full runs meet :data:`GROK_STOP`
(ReLU 375, ReLU-free 475); a run that has not grokked by then makes the trained-model claims inconclusive."""


def claim_config(budget: str, relu: bool = True, seed: int = 0):
    """The grokking config the claims train for ``budget`` (see the module docstring): ``full`` 3,000 epochs;
    ``quick`` the same model, recipe, split and seed, stopped by :data:`GROK_STOP` (cap :data:`QUICK_CAP`),
    logged and checked every 25 epochs."""

    if budget not in ("quick", "full"):
        raise ValueError(f"claim_config: budget must be 'quick' or 'full', got {budget!r}")
    cpu = grokking_config("cpu", relu=relu, seed=seed)
    # the claims' own recipe (50% of the pairs, 3,000 epochs, metrics every 25): the experiment's cpu
    # preset moved to the blog's 30% split; this keeps the claims' trained runs as they were (their cache
    # keys, a hash of the config's JSON, changed once when TrainConfig's task options became a group)
    t = cpu.train.replace(options=ModularOptions(113, 0.5), total_steps=3000, steps_per_call=100)
    if budget == "full":
        return GrokkingConfig(t, log_every=25, chunk_epochs=100, preset="cpu")
    return GrokkingConfig(t.replace(total_steps=QUICK_CAP), log_every=25, chunk_epochs=25, preset="quick",
                          stop=GROK_STOP)


def trained_run(cfg, *, progress: bool = False, root: str | os.PathLike | None = None):
    """Train ``cfg`` (or load/resume it) under ``<root or geomjax.base.io.cache_root()>/grokking/<config hash>``."""

    d = Path(root or cache_root()) / "grokking" / config_hash(cfg)
    try:
        return load_grokking_run(d, cfg)
    except (FileNotFoundError, ValueError):
        return train_grokking(cfg, d, progress=progress)


# ---------------------------------------------------------------------------------------- the claims' analyses

@per_run
def trained_analyses(budget: str, seed: int = 0) -> tuple[dict, dict]:
    """(analysis of the ReLU run, analysis of the ReLU-free run) for a budget (trained or cached), once per claims
    run: every clock claim and its precondition read it, and the report hook too. Each carries ``stopped``:
    where and why a run with a stop rule ended (:attr:`geomjax.train.grokking.GrokkingResult.stopped`), else None."""
    r = trained_run(claim_config(budget, True, seed))
    n = trained_run(claim_config(budget, False, seed))
    return (analyze(r, seed=seed) | {"stopped": r.stopped, "train_seconds": r.seconds},
            analyze(n, seed=seed, with_snapshots=False) | {"stopped": n.stopped, "train_seconds": n.seconds})


def trained_description(budget: str) -> str:
    """One sentence naming the trained model of ``budget`` (p, epochs or stop rule, split, optimiser): the
    clock claims' ``what`` and the first line of the clock report."""
    c = claim_config(budget)
    o = c.train.options
    epochs = (f"{c.epochs} full-batch epochs" if c.stop is None else
              f"full-batch epochs until {c.stop.describe()} (logs every {c.log_every}; cap {c.epochs})")
    return (f"trained model: p = {o.p}, {epochs}, train fraction {o.train_frac}, "
            f"lr {c.train.optim.lr}, weight decay {c.train.optim.weight_decay} (budget {budget!r}; "
            "geomjax.sources.clock.claims.claim_config)")


# ------------------------------------------------------------------------------------------ preconditions

_GROK_ORIGIN = ("a yes/no statement about the trained model: the epoch order is certified (slack 1 epoch); a run "
                "that never reaches 99% test accuracy cannot refute 'groks' — it is inconclusive (budget too small)")
_TRAINED_ORIGIN = ("a threshold fixed in the statement before looking at results (the source is qualitative); "
                   "computed exactly from the trained weights, so the margin is the threshold itself")


def _threshold(margin: float, admits: str) -> Inequality:
    """The rule of a threshold statement about the trained model: ``margin`` is the tolerance the threshold
    admits from the ideal value (``admits`` says which), reported as the claim's margin."""
    return Inequality(origin=f"{_TRAINED_ORIGIN}; the threshold admits {admits}", margin=margin)


def _grok_precondition(an: dict, budget: str, what: str) -> str | None:
    """None when the run grokked, else what was not met and the budget that suffices. Grokked: for a run
    with a stop rule (budget quick), the rule holds at the run's end (the model it returns has grokked);
    without one, test accuracy reached 99% (the full run's milestone)."""
    stop, h = claim_config(budget).stop, an["history"]
    if (an["milestones"]["test_99"] is not None if stop is None
            else stop.reason(h["epoch"], h[stop.metric]) is not None):
        return None
    best = float(np.max(h["test_acc"]))
    more = ("budget 'full' (3,000 epochs) may suffice" if stop is not None
            else "a longer run than the 'full' budget is needed")
    rule = f"{stop.describe()} within {int(h['epoch'][-1])} epochs" if stop is not None else "test accuracy >= 0.99"
    return f"the {what} model did not grok at budget {budget!r} ({rule}: not met; best test accuracy {best:.3f}); {more}"


_CLEANUP = ("the statement is about the converged model, after the cleanup that follows grokking (Nanda et al. §5: "
            "weight decay removes the memorising components and Σw² falls, 2,089 at epoch 400 to 894 at 1,500 on the "
            "recorded full run; the blog's model trained 20,000 epochs); the run of budget {budget!r} stops at grokking, "
            "where the measured fraction is still rising ({evidence}); budget 'full' suffices")

# what the recorded full run's parameter snapshots show for each statement about the converged model (the quick
# run's epochs 0..375 are the full run's: same seed and recipe, constant learning rate after the warm-up)
_CLEANUP_EVIDENCE = {
    "embed_sparse": "W_E's key-frequency fraction 0.44 at epoch 400, 0.51 at 500, 0.76 at 1,000, >= 0.8 from ~1,300",
    "attention_periodic": "the least periodic head's key-variance fraction 0.49 at epoch 375, 0.55 at 400, 0.74 at "
                          "500, 0.93 at 700, 0.955 at 3,000",
}


def _needs_grokked(evaluate, relu: bool = True, cleanup: str | None = None):
    """Wrap an evaluator of a claim about the trained model: inconclusive unless the model grokked; a claim about
    the converged model (``cleanup``: its key in :data:`_CLEANUP_EVIDENCE`) is also inconclusive for a run that
    stops at grokking (a stop rule: budget quick)."""

    @functools.wraps(evaluate)
    def wrapped(budget, key):
        ev = evaluate(budget, key)
        an, nr = trained_analyses(budget)
        ev.precondition = _grok_precondition(an if relu else nr, budget, "ReLU" if relu else "ReLU-free")
        if ev.precondition is None and cleanup is not None and claim_config(budget).stop is not None:
            ev.precondition = _CLEANUP.format(budget=budget, evidence=_CLEANUP_EVIDENCE[cleanup])
        return ev

    return wrapped


# ------------------------------------------------------------------------------------------ second witnesses
# A refutation of a trained-model statement must be confirmed by a computation that shares no code with the
# first (geomjax.theory.fourier on a jitted float32 forward pass): the forward pass written out again in NumPy
# float64 from the parameter arrays, key frequencies from np.fft, restriction by a 2-D DFT of the logits.


@per_run
def _params_np(budget: str, seed: int = 0) -> tuple[dict, int]:
    """The ReLU run's parameters as float64 NumPy arrays (nested dict) and p, for the witnesses."""
    res = trained_run(claim_config(budget, True, seed))
    tree = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), jax.device_get(res.state.params))
    return tree, res.config.train.options.p


def numpy_clock_forward(P: dict, p: int, relu: bool = True) -> dict[str, np.ndarray]:
    """Nanda et al.'s 1-layer, LayerNorm-free model on all p² inputs "a b =", in NumPy float64 (the second
    witness of the clock claims; independent of :func:`geomjax.models.toy.clock_activations`).

    Args:
      P: parameters as nested dicts of float64 arrays (embed, pos_embed, block_0/attn q,k,v (d, H, K) and
        o (H, K, d) kernels, block_0/mlp fc (d, F) and proj (F, d) with biases, unembed (d, V_out)).
      p: modulus; inputs are ordered row-major (a, b).
      relu: apply the MLP's ReLU (False: identity, the "ReLU removed" model).

    Returns:
      dict ``logits`` (p², p) over the answers 0..p−1 and ``o_heads`` (p², H, d), the per-head attention
      outputs at the "=" position.
    """
    a, b = np.divmod(np.arange(p * p), p)
    E, pos = P["embed"]["embedding"], P["pos_embed"]["embedding"]
    x = np.stack([E[a], E[b], np.broadcast_to(E[p], (p * p, E.shape[1]))], 1) + pos[None, :3]  # (N, 3, d)
    at = P["block_0"]["attn"]
    lin = lambda h, n: np.tensordot(h, at[n]["kernel"], axes=(-1, 0)) + at[n].get("bias", 0.0)  # (..., H, K)
    q, k, v = lin(x[:, 2], "q"), lin(x, "k"), lin(x, "v")  # (N, H, K), (N, 3, H, K) ×2
    sc = np.einsum("nhk,nthk->nht", q, k) / math.sqrt(q.shape[-1])
    w = np.exp(sc - sc.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    z = np.einsum("nht,nthk->nhk", w, v)
    o_heads = np.einsum("nhk,hkd->nhd", z, at["o"]["kernel"])
    r = x[:, 2] + o_heads.sum(1) + at["o"].get("bias", 0.0)
    m = P["block_0"]["mlp"]
    pre = r @ m["fc"]["kernel"] + m["fc"].get("bias", 0.0)
    post = np.maximum(pre, 0.0) if relu else pre
    resid = r + post @ m["proj"]["kernel"] + m["proj"].get("bias", 0.0)
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
    by a 2-D DFT over (a, b): the bins (0, 0) (the mean) and (±w, ±w) are kept, every other bin zeroed."""
    F = np.fft.fft2(logits.reshape(p, p, -1), axes=(0, 1))
    keep = np.zeros((p, p), bool)
    keep[0, 0] = True
    for w in freqs:
        keep[w % p, w % p] = keep[-w % p, -w % p] = True
    rest = np.real(np.fft.ifft2(np.where(keep[..., None], F, 0.0), axes=(0, 1))).reshape(p * p, -1)
    a, b = np.divmod(np.arange(p * p), p)
    return float(np.mean(np.argmax(rest, 1) == (a + b) % p))


def _witness_affine(budget, key):
    P, p = _params_np(budget)
    a, b = np.divmod(np.arange(p * p), p)
    acc = float(np.mean(np.argmax(numpy_clock_forward(P, p, relu=False)["logits"], 1) == (a + b) % p))
    return Evaluation(lhs=np.array([0.99]), rhs=np.array([acc]),
                      method="NumPy float64 forward pass with the ReLU replaced by the identity (clock.numpy_clock_forward)")


def _witness_two(budget, key):
    P, p = _params_np(budget)
    ks = numpy_key_frequencies(P, p)
    L = numpy_clock_forward(P, p)["logits"]
    pairs = {f"{k1},{k2}": dft_restricted_accuracy(L, p, [k1, k2])
             for i, k1 in enumerate(ks) for k2 in ks[i + 1:] if math.gcd(k1, k2) == 1}
    return Evaluation(lhs=np.array([0.99]), rhs=np.array([max(pairs.values()) if pairs else 0.0]),
                      details={"key_frequencies": ks, "accuracy_coprime_pairs": pairs},
                      method="NumPy float64 forward pass; key frequencies by np.fft; restriction by a 2-D DFT of the logits")


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


def _witness_petals(used_only: bool):
    def witness(budget, key):
        P, p = _params_np(budget)
        an, _ = trained_analyses(budget)
        ks = numpy_key_frequencies(P, p)
        if used_only:  # the MLP-used frequencies (Nanda's neuron frequencies): a definition, taken from the first
            ks = [k for k in ks if k in an["key_neurons"]]
        o = numpy_clock_forward(P, p)["o_heads"]
        fr = {str(k): numpy_summed_petal_fraction(o, p, 70 % p, k) for k in ks}
        return Evaluation(lhs=np.full(max(len(ks), 1), 0.8), rhs=np.array(list(fr.values()) or [0.0]),
                          details={"key_frequencies": ks, "summed_o_single_frequency_fraction": fr},
                          method="NumPy float64 forward pass; o plane from the DFT over b; np.fft spectrum of the sum")

    return witness


def _threshold_claim(id: str, source: str, statement: str, predicted: str, measure, margin: float, admits: str,
                     cleanup: str | None = None, **extra) -> Claim:
    """Register a threshold statement about the trained ReLU model: ``measure(an, budget) -> Evaluation`` reads
    the analysis ``an`` of the ReLU run (:func:`trained_analyses`), runs behind the grokking precondition
    (:func:`_needs_grokked`; ``cleanup``: a statement about the converged model, its evidence key) and is judged by
    :func:`_threshold` (``margin``, ``admits``); ``extra``: the other :class:`~geomjax.claims.registry.Claim`
    fields (witness, corrected_by, notes)."""

    @functools.wraps(measure)
    def evaluate(budget, key):
        return measure(trained_analyses(budget)[0], budget)

    return register(Claim(id=id, source=source, statement=statement, predicted=predicted,
                          evaluate=_needs_grokked(evaluate, cleanup=cleanup), rule=_threshold(margin, admits), **extra))


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


def _ev_grokking(budget, key):
    an, _ = trained_analyses(budget)
    return _grokking_order(an, what=trained_description(budget))


register(Claim(
    id="clock.grokking", source="Nanda et al. §3; Clock blog §4",
    statement="Grokking: train accuracy reaches 100% strictly before test accuracy reaches 99% (and test accuracy "
              "does reach 99%): epoch(train 100%) <= epoch(test 99%) - 1; 'never' counts as a violation",
    predicted="train 100% first, then test >= 99%", evaluate=_needs_grokked(_ev_grokking),
    rule=Inequality(origin=_GROK_ORIGIN),
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
    0.2, "0.2 of the energy off the key frequencies ('sparse': ideally all of it on them)", cleanup="embed_sparse",
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
    0.5, "half of a head's variance outside the key components ('periodic': most of it inside)", cleanup="attention_periodic",
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
    0.2, "0.2 of the summed curve's energy off its frequency (a circle: all of it)", witness=_witness_petals(False),
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
    0.2, "0.2 of the summed curve's energy off its frequency (a circle: all of it)", witness=_witness_petals(True),
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


def _ev_relu_free(budget, key):
    _, nr = trained_analyses(budget)
    return _grokking_order(nr, key_frequencies=nr["key"], key_fraction_W_E=nr["key_fraction_W_E"],
                           what=trained_description(budget) + ", activation 'none'")


register(Claim(
    id="clock.relu_free_groks", source=f"{SRC_BLOG} §8",
    statement="The ReLU-free variant (MLP activation removed, same recipe) also groks, by the criterion of "
              "clock.grokking: epoch(train 100%) <= epoch(test 99%) - 1, 'never' counting as a violation",
    predicted="train 100% first, then test >= 99%", evaluate=_needs_grokked(_ev_relu_free, relu=False),
    rule=Inequality(origin=_GROK_ORIGIN)))


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
    ev = _at_least(budget, 0.99, [an["acc_relu_removed"]],
                   accuracy_with_relu=an["final_acc_all"], accuracy_relu_removed=an["acc_relu_removed"],
                   fraction_pre_activations_negative=an["frac_pre_negative"])
    s = float(an.get("train_seconds") or 0.0)
    cost = f", about {MIN_DRAWS * s / 60:.3g} min of training at this model's {s:.0f} s" if s > 0 else ""
    # one trained model is one draw of the recipe (scope "random"): a refutation needs MIN_DRAWS of them
    return replace(ev, draws=1, needs=f"at least {MIN_DRAWS} independently trained models (seeds) of this recipe{cost}; "
                                      "this check trained 1")


_threshold_claim(
    "clock.mlp_affine", f"{SRC_BLOG} §8 ('The MLP layer is just an affine transformation')",
    "The trained ReLU model does not use the ReLU: removing it (identity activation, same weights) keeps "
    ">= 99% accuracy on all p² pairs",
    "accuracy without ReLU >= 0.99", _ev_affine,
    0.01, "1% of the p² pairs read wrong (the model with ReLU reads all of them right)", witness=_witness_affine,
    scope="random", error_kind="wrong statement",
    printed=("To reiterate, since the MLP block doesn't actually introduce any meaningful non-linearity to the feature "
             "space, we know that the circles are basically preserved through the MLP block. […] The MLP block is just "
             "an affine transformation. This transformation is NOT a function of input data."),
    notes="The blog infers this from the b_in signs and from the ReLU-free variant grokking (a separately trained "
          "model, clock.relu_free_groks: holds); this claim tests a trained ReLU model itself. 'The model' is one "
          "training run of a recipe, a random instance: one trained model (geomjax trains one per budget) cannot "
          "refute it; at least 32 independently trained models would.")


def _ev_restricted(which: str, detail: str, sufficient: bool):
    """The best accuracy of the logits restricted to one set of key frequencies (``which``: "single" or
    "pairs" of ``analyze``'s sufficiency table) against 99%: ≥ 0.99 when ``sufficient``, else < 0.99."""

    def evaluate(an, budget):
        s = an["sufficiency"]
        best = max(s[which].values()) if s[which] else 0.0
        lhs, rhs, slack = (0.99, best, 0.0) if sufficient else (best, 0.99, np.array([1e-9]))
        return Evaluation(lhs=np.array([lhs]), rhs=np.array([rhs]), slack=slack,
                          details={detail: s[which], "accuracy_all": s["all"],
                                   "embedding_restricted": an["sufficiency_embed"], "what": trained_description(budget)})

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
    0.01, "1% of the p² pairs read wrong (the full model reads all of them right)", witness=_witness_two,
    reading="extension", scope="instance", intended_by="clock.two_coprime_sufficient.in_principle",
    notes=("geomjax's trained-model reading of a condition on frequencies, about geomjax's trained model (the claims' "
           "recipe, seed 0): the blog never says that a trained model's logits restricted to two circles reach high "
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
