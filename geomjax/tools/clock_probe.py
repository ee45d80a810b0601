"""The model-facing half of the clock analysis: every analysis of the clock blog / Nanda et al.,
"Progress measures for grokking via mechanistic interpretability", on a trained modular-addition run.

:func:`analyze` reads a :class:`geomjax.train.grokking.GrokkingResult` (final parameters, history, the
run folder's parameter snapshots), runs the model on all p² inputs (:func:`geomjax.models.toy.clock_activations`)
and applies the array analyses of :mod:`geomjax.theory.fourier` (Fourier spectra of W_E and W_L, key frequencies,
circles, periodic attention, petals and their planes, the MLP, read-out ranks, restricted/excluded loss,
sufficiency of key-frequency subsets). It returns arrays and numbers, no figures and no verdicts: the claims
(:mod:`geomjax.sources.clock.claims`) judge them, :mod:`geomjax.sources.clock.report` draws them.

The array work runs as a few jitted programs, each compiled once per shape and batched over what the
analyses loop over (frequencies, heads, key frequencies, parameter snapshots, frequency subsets):
``_base_program`` (the forward pass on all p² inputs, spectra, every frequency's circles, every head's
attention spectrum, neuron spectra, logit ranks), ``_key_program`` (petals, o planes, MLP planes of the
key frequencies: one program per number of key frequencies), ``_progress_program`` (Nanda's progress
measures over all snapshots, mapped in batches) and ``_embed_counts_program`` (the embedding-restricted
models of each subset size); only final arrays go to the host.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import fourier as fx
from geomjax.models.toy import clock_activations, head_weights
from geomjax.train.grokking import (GrokkingResult, grokking_data, grokking_milestones, last_position_logits,
                                    param_snapshots)

__all__ = ["analyze", "key_series"]


def _train_idx(cfg) -> np.ndarray:
    x = np.asarray(grokking_data(cfg).x_train)
    return x[:, 0] * cfg.train.options.p + x[:, 1]


def analyze(res: GrokkingResult, *, seed: int = 0, with_snapshots: bool = True,
            with_embedding_restriction: bool = True) -> dict[str, Any]:
    """Every analysis of the blog / Nanda et al. on a trained run (arrays + numbers; no figures).

    Args:
      res: a :class:`geomjax.train.grokking.GrokkingResult` (its final parameters, history, run_dir).
      seed: picks the random (non-key) frequencies and the illustrated a values.
      with_snapshots: compute restricted/excluded loss over training from the parameter snapshots.
      with_embedding_restriction: compute ``sufficiency_embed`` (the blog §11's reading: the model run with W_E
        projected on each key-frequency set, one forward pass over all p² pairs per set; the costliest analysis).
    """

    cfg = res.config
    p, mcfg = cfg.train.options.p, cfg.train.model
    params = jax.device_get(res.state.params)
    base = _base_program(params, mcfg, p, jax.random.key(seed))  # validates the model while tracing
    seconds = res.seconds
    if res.run_dir is not None and (Path(res.run_dir) / "timings.jsonl").is_file():
        lines = (Path(res.run_dir) / "timings.jsonl").read_text().splitlines()
        seconds = sum(json.loads(line)["seconds"] for line in lines)
    out: dict[str, Any] = {"p": p, "relu": mcfg.activation == "relu", "history": res.history,
                           "milestones": grokking_milestones(res.history), "seconds": seconds}
    a_, b_ = np.divmod(np.arange(p * p), p)
    y = (a_ + b_) % p
    logits = np.asarray(base["logits"])
    out["final_acc_all"] = float(np.mean(np.argmax(logits, 1) == y))
    _analyze_spectra(out, base, p)
    _analyze_circles_attention(out, base, p, seed)
    kp = _key_program(params, base["A"], base["cE"], jnp.asarray(out["key"], jnp.int32), out["a0"], base["logits"],
                      *_loss_inputs(cfg, out["key"], y)) if out["key"] else None
    o_planes = _analyze_petals_planes(out, kp)
    _analyze_mlp(out, params, base, kp, mcfg, p, y, o_planes)
    _analyze_readout(out, res, params, base, kp, y, with_snapshots, with_embedding_restriction)
    return out


@functools.partial(jax.jit, static_argnums=(1, 2))
def _base_program(params: dict, mcfg, p: int, rkey) -> dict:
    """Everything that does not depend on the key frequencies, as one program: the forward pass on all p²
    inputs, Fourier spectra of W_E, W_L and a random W_E, circles of every frequency, every head's attention
    spectrum, the neurons' squared 2D spectra and the correct-logit ranks."""
    A = clock_activations(params, mcfg, p)
    W_E, W_L = params["embed"]["embedding"], fx.unembed_matrix(params)
    cE, cL = fx.fourier_coefficients(W_E, p), fx.fourier_coefficients(W_L, p)
    rW = jax.random.normal(rkey, W_E.shape)
    logits = A.logits.reshape(p * p, -1)[:, :p]
    y = jnp.asarray(np.sum(np.divmod(np.arange(p * p), p), axis=0) % p)
    with jax.default_matmul_precision("highest"):
        mlp_logits = A.post.reshape(p * p, -1) @ W_L[:p].T
    att = jnp.moveaxis(A.attn[..., 0], 2, 0)  # (H, p, p): weight of the "=" query on token a
    C, ea, eb = fx.attention_spectra(att)
    extra = {}
    if mcfg.activation == "relu":  # the trained model with its ReLU removed (blog §8)
        L_lin = clock_activations(params, mcfg.replace(activation="none"), p).logits.reshape(p * p, -1)[:, :p]
        extra["correct_relu_removed"] = jnp.sum(jnp.argmax(L_lin, axis=1) == y)
    return extra | {"A": A, "logits": logits, "cE": cE, "cL": cL, "eE": fx.frequency_energy(cE, p), "eL": fx.frequency_energy(cL, p),
            "eR": fx.frequency_energy(fx.fourier_coefficients(rW, p), p), "circles_E": fx.all_circles(W_E, p),
            "circles_L": fx.all_circles(W_L, p), "att": att, "att_C": C, "att_ea": ea, "att_eb": eb,
            "neuron_sq": fx.neuron_spectrum(A.post, p), "rank_full": fx.correct_logit_rank(logits, y),
            "rank_W_L": fx.correct_logit_rank(mlp_logits, y), "frac_pre_negative": jnp.mean(A.pre < 0)}


@jax.jit
def _key_program(params: dict, A, cE, ks, a0, logits, waves, y, train_idx, test_idx) -> dict:
    """The analyses of the key frequencies ``ks`` (n,) as one program: per-head petals (blog §6.2) and the
    o-vector petals with their spectra (§7) for a = ``a0``, the o circle planes (§8), the MLP planes (§9) and
    Nanda's restricted / excluded loss of ``logits`` for the key ``waves`` (2n, p²)."""
    p = cE.shape[0]
    W_V = head_weights(params, 0)["W_v"]  # (H, d, K)
    bases_E = fx.circle_bases(cE, p)[ks - 1]  # (n, 2, d)
    with jax.default_matmul_precision("highest"):
        new = jnp.einsum("hkd,njd->nhkj", jnp.linalg.pinv(W_V), bases_E)
        z = jnp.einsum("bhk,nhkj->nhbj", A.z[a0], new)  # (n, H, p, 2)
        o_heads = A.o_heads[a0]  # (p, H, d)
        bases_o = fx.circle_bases(fx.fourier_coefficients(jnp.sum(o_heads, axis=1), p), p)[ks - 1]
        heads = jnp.einsum("bhd,njd->nhbj", o_heads, bases_o)  # (n, H, p, 2)
    total = heads.sum(axis=1)
    o_planes, _ = fx.plane_svds(A.o, ks, n_components=2)
    comps, svals = fx.plane_svds(A.post, ks, n_components=4)
    return {"restricted_final": fx.restricted_excluded_terms(logits, waves, y, train_idx, test_idx),
            "bases_E": bases_E, "z": z, "o_heads": heads, "o_total": total, "peak_total": fx.complex_peak_stats(total),
            "peak_heads": fx.complex_peak_stats(heads), "o_planes": o_planes, "comps": comps, "svals": svals}


def _key_sets(eE: np.ndarray, eL: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """(key, W_E's, W_L's) frequencies from the energies per frequency of W_E and W_L: the blog §5 rule (> 10× the
    median) on each; key = strong in W_E AND in the read-out W_L, so that a key frequency is one the model uses
    (W_E-only ones are reported separately: they have no W_L circle), else W_E's."""
    key_E, key_L = fx.key_frequencies_from_energy(eE), fx.key_frequencies_from_energy(eL)
    return [k for k in key_E if k in key_L] or key_E, key_E, key_L


def _analyze_spectra(out: dict, base: dict, p: int) -> None:
    """Fourier spectra of W_E and W_L, key frequencies (blog §5), Nanda's neuron frequencies."""
    cE, cL = np.asarray(base["cE"]), np.asarray(base["cL"])
    eE, eL, eR = (np.asarray(base[k]) for k in ("eE", "eL", "eR"))
    key, key_E, key_L = _key_sets(eE, eL)
    out.update(W_E_coeffs=cE, W_L_coeffs=cL, key=key, W_E_energy=eE, W_L_energy=eL,
               key_W_L=key_L, key_W_E=key_E, key_W_E_only=[k for k in key_E if k not in key])
    frac = lambda e: float(np.sum(e[key]) / np.sum(e[1:])) if key else 0.0  # noqa: E731
    out["key_fraction_W_E"], out["key_fraction_W_L"] = frac(eE), frac(eL)
    out["random_fraction_expected"] = 2 * len(key) / (p - 1)
    out["random_W_E_fraction"] = frac(eR)
    sq = np.asarray(base["neuron_sq"])
    neur = fx.neuron_frequencies_from_spectrum(sq, p)
    neur85 = fx.neuron_frequencies_from_spectrum(sq, p, min_fraction=0.85)
    out.update(neuron_freq=neur.freq, neuron_fraction=neur.fraction, key_neurons=neur.key,
               neuron_counts=neur.counts, key_neurons_85=neur85.key, neuron_counts_85=neur85.counts)


def _analyze_circles_attention(out: dict, base: dict, p: int, seed: int) -> None:
    """W_E / W_L circles of the key, W_E-only and random frequencies (blog §5.1-5.2); periodic attention (§6)."""
    key = out["key"]
    rng = np.random.default_rng(seed)
    others = [k for k in range(1, (p - 1) // 2 + 1) if k not in key]
    others = [k for k in others if k not in out["key_W_E"]]
    rand = sorted(rng.choice(others, size=min(3, len(others)), replace=False).tolist())
    out["random_freqs"] = rand
    circ = {}
    for name in ("W_E", "W_L"):
        xy_all, r2_all = (np.asarray(v) for v in base[f"circles_{name[-1]}"])
        for k in key + out["key_W_E_only"] + rand:
            xy = xy_all[k - 1]
            circ[(name, k)] = {"xy": xy, "r2": float(r2_all[k - 1]), "norm": float(np.sqrt(np.mean(np.sum(xy**2, 1))))}
    out["circles"] = circ
    att, C, ea, eb = (np.asarray(base[k]) for k in ("att", "att_C", "att_ea", "att_eb"))
    idx = np.asarray([0] + [j for k in key for j in (2 * k - 1, 2 * k)])
    heads = []
    for h in range(att.shape[0]):
        sq = np.square(C[h])
        kf = float((np.sum(sq[np.ix_(idx, idx)]) - sq[0, 0]) / (np.sum(sq) - sq[0, 0])) if key else 0.0
        heads.append({"map": att[h], "energy_a": ea[h], "energy_b": eb[h], "dominant": int(np.argmax((ea[h] + eb[h])[1:])) + 1,
                      "key_fraction": kf})
    out["attention"] = heads
    out["a0"] = 70 % p  # the blog's a = 70 (mod p) for the petals


def _analyze_petals_planes(out: dict, kp: dict | None) -> dict:
    """Petals for a fixed a (the blog's a = 70, mod p; §6.2-7) and dihedral angles between W_E and o circle
    planes (§8); returns the o circle plane per key frequency."""

    key = out["key"]
    if kp is None:
        out.update(petals={}, dihedral_min_angle=np.zeros((0, 0)), dihedral_all={})
        return {}
    kp = jax.device_get(kp)
    H = kp["z"].shape[1]
    petals = {}
    for i, k in enumerate(key):
        heads = kp["o_heads"][i]
        petals[k] = {"z": kp["z"][i], "o_heads": heads, "o_total": kp["o_total"][i],
                     "spectrum_total": kp["peak_total"]["spectrum"][i],
                     "total_freq_fraction": float(kp["peak_total"]["freq_fraction"][i]),
                     "total_peak_freq": int(kp["peak_total"]["peak_freq"][i]),
                     "head_freq_fraction": [float(kp["peak_heads"]["freq_fraction"][i, h]) for h in range(H)],
                     "head_norm": [float(np.sqrt(np.mean(np.sum(heads[h] ** 2, 1)))) for h in range(H)]}
    out["petals"] = petals
    o_planes = {k: kp["o_planes"][i] for i, k in enumerate(key)}
    bases = kp["bases_E"]
    ang = np.zeros((len(key), len(key)))
    for i in range(len(key)):
        for j, k2 in enumerate(key):
            ang[i, j] = float(fx.principal_angles(bases[i], o_planes[k2])[0])
    out["dihedral_min_angle"] = ang
    out["dihedral_all"] = {k: np.asarray(fx.principal_angles(np.concatenate(list(bases)), o_planes[k])) for k in key}
    return o_planes


def _analyze_mlp(out: dict, params, base: dict, kp: dict | None, mcfg, p: int, y: np.ndarray, o_planes: dict) -> None:
    """MLP biases, W_in in the o planes, activation circles (revolution vs rotation; blog §8-9) and the trained
    model with its ReLU removed."""
    mlp = params["block_0"]["mlp"]
    b_in = np.asarray(mlp["fc"]["bias"])
    out["b_in_sorted"] = np.sort(b_in)
    out["n_negative_b_in"] = fx.negative_bias_count(b_in)
    out["frac_pre_negative"] = float(base["frac_pre_negative"])
    W_in = np.asarray(mlp["fc"]["kernel"])  # (d, F)
    a0 = out["a0"]
    a_show = sorted({a0, (a0 + p // 4) % p, (a0 + p // 2) % p, (a0 + 3 * p // 4) % p})
    out["a_show"] = a_show
    mlp_an = {}
    post = np.asarray(base["A"].post) if out["key"] else None
    for i, k in enumerate(out["key"]):
        Win_xy = (o_planes[k] @ W_in).T  # (F, 2): W_in columns in the o circle plane
        comps = np.asarray(kp["comps"][i])
        post_xy = {a: post[a] @ comps.T for a in a_show}  # (p, 4)
        # revolution vs rotation: spread of per-a circle centres relative to the radius, per PC pair
        allp = np.einsum("abf,cf->abc", post, comps)
        cent = allp.mean(axis=1)  # (p, 4)
        rad = np.sqrt(np.mean(np.sum((allp[..., :2] - cent[:, None, :2]) ** 2, -1)))
        rad34 = np.sqrt(np.mean(np.sum((allp[..., 2:] - cent[:, None, 2:]) ** 2, -1)))
        spread12 = float(np.sqrt(np.mean(np.sum((cent[:, :2] - cent[:, :2].mean(0)) ** 2, 1))) / np.mean(rad))
        spread34 = float(np.sqrt(np.mean(np.sum((cent[:, 2:] - cent[:, 2:].mean(0)) ** 2, 1))) / np.mean(rad34))
        mlp_an[k] = {"W_in_xy": Win_xy, "svals": np.asarray(kp["svals"][i]), "post_xy": post_xy,
                     "spread12": spread12, "spread34": spread34}
    out["mlp"] = mlp_an
    if out["relu"]:  # ReLU removed from the trained model (is the MLP "just an affine transformation"?)
        out["acc_relu_removed"] = int(base["correct_relu_removed"]) / (p * p)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _progress_program(stacked: dict, mcfg, p: int, waves, y, train_idx, test_idx) -> dict:
    """Nanda et al.'s progress measures (restricted / excluded / train / test loss, §5.1) of every parameter
    snapshot in ``stacked`` (a params pytree with a leading snapshot axis), mapped in batches of 8."""

    def one(prm):
        L = clock_activations(prm, mcfg, p).logits.reshape(p * p, -1)[:, :p]
        return fx.restricted_excluded_terms(L, waves, y, train_idx, test_idx)

    return jax.lax.map(one, stacked, batch_size=8)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _embed_counts_program(params: dict, mcfg, p: int, rows, y):
    """Correct answers over all p² inputs of the models whose W_E keeps only the Fourier ``rows[i]`` (n, J, p)
    (the blog §11's embedding restriction; zero rows allowed). Each model's answer is its "=" logits
    (:func:`~geomjax.train.grokking.last_position_logits`: the MLP and read-out at that position only)."""
    x = jnp.stack([*np.divmod(np.arange(p * p), p), np.full(p * p, p)], axis=1)  # (p², 3): a b =

    def one(r):
        L = last_position_logits(fx.project_embedding(params, p, r), x, mcfg)[:, :p]
        return jnp.sum(jnp.argmax(L, axis=1) == y)

    return jax.lax.map(one, rows)


def _restricted_model_accuracies(params, mcfg, p: int, y: np.ndarray, sets: dict) -> dict:
    """{name: accuracy over all p² pairs of the model whose W_E keeps only the frequencies ``sets[name]``}
    (blog §11), all sets as one program: each set's Fourier rows padded with zero rows to the largest set
    (a zero row adds nothing to the projection)."""
    names = list(sets)
    rows = [np.asarray(fx.embedding_rows(p, sets[n])) for n in names]
    J = max(r.shape[0] for r in rows)
    padded = np.stack([np.concatenate([r, np.zeros((J - r.shape[0], p), r.dtype)]) for r in rows])
    counts = np.asarray(_embed_counts_program(params, mcfg, p, jnp.asarray(padded), jnp.asarray(y)))
    return {n: float(c) / (p * p) for n, c in zip(names, counts)}


def _loss_inputs(cfg, key, y: np.ndarray) -> tuple:
    """(waves (2n, p²), labels, train indices, test indices) of Nanda's restricted / excluded loss."""
    p = cfg.train.options.p
    tr = np.zeros(p * p, bool)
    tr[_train_idx(cfg)] = True
    return (jnp.asarray(fx.sum_waves(p, key), jnp.float32), jnp.asarray(y), jnp.asarray(np.flatnonzero(tr)),
            jnp.asarray(np.flatnonzero(~tr)))


def _progress(res, params, key, y: np.ndarray) -> list[dict]:
    """Restricted / excluded loss and the sum of squared weights at every parameter snapshot of the run."""
    snaps = [(ep, jax.device_get(prm)) for ep, prm in param_snapshots(res.run_dir, params)]
    if not snaps:
        return []
    stacked = jax.tree_util.tree_map(lambda *v: np.stack(v), *[prm for _, prm in snaps])  # stacked on the host
    terms = jax.device_get(_progress_program(stacked, res.config.train.model, res.config.train.options.p,
                                             *_loss_inputs(res.config, key, y)))
    return [{"epoch": ep, **{k: float(v[i]) for k, v in terms.items()},
             "sq_weights": float(sum(np.sum(np.square(v)) for v in jax.tree_util.tree_leaves(prm)))}
            for i, (ep, prm) in enumerate(snaps)]


def _analyze_readout(out: dict, res, params, base: dict, kp: dict | None, y: np.ndarray, with_snapshots: bool,
                     with_embedding_restriction: bool = True) -> None:
    """Correct-logit ranks (blog §10), Nanda's restricted/excluded loss over training, sufficiency of one
    circle, two coprime circles and all key frequencies (§11), logit- and embedding-restricted."""

    cfg, p, key = res.config, out["p"], out["key"]
    mcfg = cfg.train.model
    out["rank_full"] = np.asarray(base["rank_full"])
    out["rank_W_L"] = np.asarray(base["rank_W_L"])
    out["restricted_final"] = {k: float(v) for k, v in kp["restricted_final"].items()} if key else None
    if with_snapshots and res.run_dir is not None and key:
        out["progress"] = _progress(res, params, key, y)
    out["sufficiency"] = fx.sufficiency(base["logits"], p, key) if key else {"single": {}, "pairs": {}, "all": 0.0}
    sets = {str(k): [k] for k in key}
    for i, k1 in enumerate(key):
        for k2 in key[i + 1:]:
            if math.gcd(k1, k2) == 1:
                sets[f"{k1},{k2}"] = [k1, k2]
    sets["all"] = key
    if with_embedding_restriction:
        out["sufficiency_embed"] = _restricted_model_accuracies(params, mcfg, p, y, sets)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _snapshot_program(params: dict, mcfg, p: int) -> tuple:
    """(energy per frequency of W_E, of W_L, the logits (p², p) on all p² inputs) of one parameter snapshot."""
    W_E, W_L = params["embed"]["embedding"], fx.unembed_matrix(params)
    logits = clock_activations(params, mcfg, p).logits.reshape(p * p, -1)[:, :p]
    return fx.frequency_energy(fx.fourier_coefficients(W_E, p), p), fx.frequency_energy(fx.fourier_coefficients(W_L, p), p), logits


def key_series(res: GrokkingResult) -> list[dict]:
    """The blog's §5.2 and §11.2 readings at every parameter snapshot of a run (the epochs of
    :func:`geomjax.train.grokking.param_snapshots`; empty without a run folder): that snapshot's key frequencies
    (:func:`analyze`'s rule, on its own W_E and W_L) and the accuracy over all p² pairs of its logits restricted
    (Nanda et al. §5.1; :func:`geomjax.theory.fourier.sufficiency`) to its best coprime pair of key frequencies
    and to all of them.

    Returns:
      one dict a snapshot, by epoch: ``epoch``, ``key``, ``key_W_E``, ``key_W_L``, ``key_W_E_only`` (strong in W_E,
      not in W_L), ``best_pair`` ("k1,k2" or None when no two key frequencies are coprime), ``best_pair_acc``
      (None likewise), ``all_acc`` (None when there is no key frequency) and ``test_acc`` (the run's logged test
      accuracy at that epoch, None when it was not logged).
    """
    if res.run_dir is None:
        return []
    cfg = res.config
    p, mcfg = cfg.train.options.p, cfg.train.model
    logged = dict(zip((int(e) for e in res.history["epoch"]), (float(a) for a in res.history["test_acc"])))
    out = []
    for ep, prm in param_snapshots(res.run_dir, res.state.params):
        eE, eL, logits = jax.device_get(_snapshot_program(jax.device_get(prm), mcfg, p))
        key, key_E, key_L = _key_sets(np.asarray(eE), np.asarray(eL))
        s = fx.sufficiency(logits, p, key) if key else {"pairs": {}, "all": None}
        best = max(s["pairs"], key=s["pairs"].get) if s["pairs"] else None
        out.append({"epoch": ep, "key": key, "key_W_E": key_E, "key_W_L": key_L,
                    "key_W_E_only": [k for k in key_E if k not in key_L], "best_pair": best,
                    "best_pair_acc": None if best is None else s["pairs"][best], "all_acc": s["all"],
                    "test_acc": logged.get(ep)})
    return out
