"""The model-facing half of the clock analysis: every analysis of the clock blog / Nanda et al.,
"Progress measures for grokking via mechanistic interpretability", on a trained modular-addition run.

:func:`analyze` reads a :class:`geomjax.train.grokking.GrokkingResult` (final parameters, history, the
run folder's parameter snapshots), runs the model on all p² inputs (:func:`geomjax.models.toy.clock_activations`)
and applies the array analyses of :mod:`geomjax.theory.fourier` (Fourier spectra of W_E and W_L, key frequencies,
circles, periodic attention, petals and their planes, the MLP, read-out ranks, restricted/excluded loss,
sufficiency of key-frequency subsets). It returns arrays and numbers, no figures and no verdicts: the claims
(:mod:`geomjax.claims.clock`) judge them, :mod:`geomjax.claim_reports.clock` draws them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jax
import numpy as np

from geomjax.theory import fourier as fx
from geomjax.models.toy import clock_activations, head_weights
from geomjax.train.grokking import GrokkingResult, grokking_data, grokking_init, grokking_milestones, param_snapshots

__all__ = ["analyze"]


def _train_idx(cfg) -> np.ndarray:
    x = np.asarray(grokking_data(cfg).x_train)
    return x[:, 0] * cfg.train.options.p + x[:, 1]


def analyze(res: GrokkingResult, *, seed: int = 0, with_snapshots: bool = True) -> dict[str, Any]:
    """Every analysis of the blog / Nanda et al. on a trained run (arrays + numbers; no figures).

    Args:
      res: a :class:`geomjax.train.grokking.GrokkingResult` (its final parameters, history, run_dir).
      seed: picks the random (non-key) frequencies and the illustrated a values.
      with_snapshots: compute restricted/excluded loss over training from the parameter snapshots.
    """

    cfg = res.config
    p, mcfg = cfg.train.options.p, cfg.train.model
    params = jax.device_get(res.state.params)
    A = clock_activations(params, mcfg, p)
    seconds = res.seconds
    if res.run_dir is not None and (Path(res.run_dir) / "timings.jsonl").is_file():
        lines = (Path(res.run_dir) / "timings.jsonl").read_text().splitlines()
        seconds = sum(json.loads(line)["seconds"] for line in lines)
    out: dict[str, Any] = {"p": p, "relu": mcfg.activation == "relu", "history": res.history,
                           "milestones": grokking_milestones(res.history), "seconds": seconds}
    a_, b_ = np.divmod(np.arange(p * p), p)
    y = (a_ + b_) % p
    logits = np.asarray(A.logits).reshape(p * p, -1)[:, :p]
    out["final_acc_all"] = float(np.mean(np.argmax(logits, 1) == y))
    cE = _analyze_spectra(out, params, A, p, seed)
    _analyze_circles_attention(out, params, A, p, seed)
    o_planes = _analyze_petals_planes(out, params, A, cE)
    _analyze_mlp(out, params, A, mcfg, p, y, o_planes)
    _analyze_readout(out, res, params, A, logits, y, with_snapshots)
    return out


def _analyze_spectra(out: dict, params, A, p: int, seed: int):
    """Fourier spectra of W_E and W_L, key frequencies (blog §5), Nanda's neuron frequencies; returns W_E's
    Fourier coefficients."""
    W_E = params["embed"]["embedding"]
    W_L = fx.unembed_matrix(params)
    cE, cL = fx.fourier_coefficients(W_E, p), fx.fourier_coefficients(W_L, p)
    # key frequencies: strong in W_E AND in the read-out W_L (blog §5's 10x-median rule on both), so that
    # a "key" frequency is one the model uses; W_E-only ones are reported separately (they have no W_L circle)
    key_E, key_L = fx.key_frequencies_embed(W_E, p), fx.key_frequencies_embed(W_L, p)
    key = [k for k in key_E if k in key_L] or key_E
    out.update(W_E_coeffs=np.asarray(cE), W_L_coeffs=np.asarray(cL), key=key,
               W_E_energy=np.asarray(fx.frequency_energy(cE, p)), W_L_energy=np.asarray(fx.frequency_energy(cL, p)),
               key_W_L=key_L, key_W_E=key_E, key_W_E_only=[k for k in key_E if k not in key])
    out["key_fraction_W_E"] = float(fx.key_fraction(cE, p, key)) if key else 0.0
    out["key_fraction_W_L"] = float(fx.key_fraction(cL, p, key)) if key else 0.0
    out["random_fraction_expected"] = 2 * len(key) / (p - 1)
    rW = np.asarray(jax.random.normal(jax.random.key(seed), W_E.shape))
    out["random_W_E_fraction"] = float(fx.key_fraction(fx.fourier_coefficients(rW, p), p, key)) if key else 0.0
    neur = fx.key_frequencies_neurons(A.post, p)
    neur85 = fx.key_frequencies_neurons(A.post, p, min_fraction=0.85)
    out.update(neuron_freq=neur.freq, neuron_fraction=neur.fraction, key_neurons=neur.key,
               neuron_counts=neur.counts, key_neurons_85=neur85.key, neuron_counts_85=neur85.counts)
    return cE


def _analyze_circles_attention(out: dict, params, A, p: int, seed: int) -> None:
    """W_E / W_L circles of the key, W_E-only and random frequencies (blog §5.1-5.2); periodic attention (§6)."""
    key = out["key"]
    rng = np.random.default_rng(seed)
    others = [k for k in range(1, (p - 1) // 2 + 1) if k not in key]
    others = [k for k in others if k not in out["key_W_E"]]
    rand = sorted(rng.choice(others, size=min(3, len(others)), replace=False).tolist())
    out["random_freqs"] = rand
    circ = {}
    for name, W in (("W_E", params["embed"]["embedding"]), ("W_L", fx.unembed_matrix(params))):
        for k in key + out["key_W_E_only"] + rand:
            xy = np.asarray(fx.circle_projection(W, p, k))
            circ[(name, k)] = {"xy": xy, "r2": float(fx.circle_fit_r2(xy, k)),
                               "norm": float(np.sqrt(np.mean(np.sum(xy**2, 1))))}
    out["circles"] = circ
    att = np.asarray(A.attn[..., 0])  # (p, p, H): weight of the "=" query on token a
    heads = []
    for h in range(att.shape[2]):
        sp = fx.attention_spectrum(att[:, :, h])
        heads.append({"map": att[:, :, h], "energy_a": np.asarray(sp["energy_a"]), "energy_b": np.asarray(sp["energy_b"]),
                      "dominant": sp["dominant"],
                      "key_fraction": float(fx.attention_key_fraction(att[:, :, h], key)) if key else 0.0})
    out["attention"] = heads


def _analyze_petals_planes(out: dict, params, A, cE) -> dict:
    """Petals for a fixed a (the blog's a = 70, mod p; §6.2-7) and dihedral angles between W_E and o circle
    planes (§8); returns the o circle plane per key frequency."""

    p, key = out["p"], out["key"]
    a0 = 70 % p
    out["a0"] = a0
    W_V = head_weights(params, 0)["W_v"]
    H = W_V.shape[0]
    petals = {}
    for k in key:
        zproj = np.asarray(fx.per_head_circle_projection(A.z[a0], W_V, fx.circle_basis(cE, k)))  # (H, p, 2)
        pf = fx.petal_fourier_projection(A.o_heads[a0], k)
        tot = fx.complex_peak_fraction(pf["total"])
        per = [fx.complex_peak_fraction(pf["heads"][h]) for h in range(H)]
        petals[k] = {"z": zproj, "o_heads": np.asarray(pf["heads"]), "o_total": np.asarray(pf["total"]),
                     "spectrum_total": np.asarray(tot["spectrum"]), "total_freq_fraction": float(tot["freq_fraction"]),
                     "total_peak_freq": int(tot["peak_freq"]),
                     "head_freq_fraction": [float(q["freq_fraction"]) for q in per],
                     "head_norm": [float(np.sqrt(np.mean(np.sum(np.asarray(pf["heads"][h]) ** 2, 1)))) for h in range(H)]}
    out["petals"] = petals
    ang = np.zeros((len(key), len(key)))
    o_planes = {k: np.asarray(fx.o_circle_plane(A.o, k)) for k in key}
    for i, k1 in enumerate(key):
        for j, k2 in enumerate(key):
            ang[i, j] = float(fx.principal_angles(fx.circle_basis(cE, k1), o_planes[k2])[0])
    out["dihedral_min_angle"] = ang
    out["dihedral_all"] = {k: np.asarray(fx.principal_angles(np.concatenate([np.asarray(fx.circle_basis(cE, q)) for q in key]),
                                                             o_planes[k])) for k in key}
    return o_planes


def _analyze_mlp(out: dict, params, A, mcfg, p: int, y: np.ndarray, o_planes: dict) -> None:
    """MLP biases, W_in in the o planes, activation circles (revolution vs rotation; blog §8-9) and the trained
    model with its ReLU removed."""
    mlp = params["block_0"]["mlp"]
    b_in = np.asarray(mlp["fc"]["bias"])
    out["b_in_sorted"] = np.sort(b_in)
    out["n_negative_b_in"] = fx.negative_bias_count(b_in)
    out["frac_pre_negative"] = float(np.mean(np.asarray(A.pre) < 0))
    W_in = np.asarray(mlp["fc"]["kernel"])  # (d, F)
    a0 = out["a0"]
    a_show = sorted({a0, (a0 + p // 4) % p, (a0 + p // 2) % p, (a0 + 3 * p // 4) % p})
    out["a_show"] = a_show
    mlp_an = {}
    for k in out["key"]:
        Win_xy = (o_planes[k] @ W_in).T  # (F, 2): W_in columns in the o circle plane
        comps, svals = fx.mlp_plane_svd(A.post, k, n_components=4)
        comps = np.asarray(comps)
        post_xy = {a: np.asarray(A.post[a]) @ comps.T for a in a_show}  # (p, 4)
        # revolution vs rotation: spread of per-a circle centres relative to the radius, per PC pair
        allp = np.einsum("abf,cf->abc", np.asarray(A.post), comps)
        cent = allp.mean(axis=1)  # (p, 4)
        rad = np.sqrt(np.mean(np.sum((allp[..., :2] - cent[:, None, :2]) ** 2, -1)))
        rad34 = np.sqrt(np.mean(np.sum((allp[..., 2:] - cent[:, None, 2:]) ** 2, -1)))
        spread12 = float(np.sqrt(np.mean(np.sum((cent[:, :2] - cent[:, :2].mean(0)) ** 2, 1))) / np.mean(rad))
        spread34 = float(np.sqrt(np.mean(np.sum((cent[:, 2:] - cent[:, 2:].mean(0)) ** 2, 1))) / np.mean(rad34))
        mlp_an[k] = {"W_in_xy": Win_xy, "svals": np.asarray(svals), "post_xy": post_xy,
                     "spread12": spread12, "spread34": spread34}
    out["mlp"] = mlp_an
    if out["relu"]:  # ReLU removed from the trained model (is the MLP "just an affine transformation"?)
        A_lin = clock_activations(params, mcfg.replace(activation="none"), p)
        out["acc_relu_removed"] = float(np.mean(np.argmax(np.asarray(A_lin.logits).reshape(p * p, -1)[:, :p], 1) == y))


def _restricted_model_accuracy(params, mcfg, p: int, y: np.ndarray, freqs) -> float:
    """Accuracy over all p² pairs of the model whose W_E keeps only ``freqs`` (blog §11)."""
    L = np.asarray(clock_activations(fx.embed_restricted_params(params, p, freqs), mcfg, p).logits)
    return float(np.mean(np.argmax(L.reshape(p * p, -1)[:, :p], 1) == y))


def _analyze_readout(out: dict, res, params, A, logits: np.ndarray, y: np.ndarray, with_snapshots: bool) -> None:
    """Correct-logit ranks (blog §10), Nanda's restricted/excluded loss over training, sufficiency of one
    circle, two coprime circles and all key frequencies (§11), logit- and embedding-restricted."""

    cfg, p, key = res.config, out["p"], out["key"]
    mcfg = cfg.train.model
    out["rank_full"] = np.asarray(fx.correct_logit_rank(logits, y))
    mlp_logits = np.asarray(A.post).reshape(p * p, -1) @ np.asarray(fx.unembed_matrix(params))[:p].T
    out["rank_W_L"] = np.asarray(fx.correct_logit_rank(mlp_logits, y))
    train_idx = _train_idx(cfg)
    out["restricted_final"] = fx.restricted_excluded_loss(logits, p, key, train_idx) if key else None
    if with_snapshots and res.run_dir is not None and key:
        curve = []
        for ep, prm in param_snapshots(res.run_dir, grokking_init(cfg).params):
            L = np.asarray(clock_activations(prm, mcfg, p).logits).reshape(p * p, -1)[:, :p]
            curve.append({"epoch": ep, **fx.restricted_excluded_loss(L, p, key, train_idx),
                          "sq_weights": float(sum(np.sum(np.square(v)) for v in jax.tree_util.tree_leaves(prm)))})
        out["progress"] = curve
    out["sufficiency"] = fx.sufficiency(logits, p, key) if key else {"single": {}, "pairs": {}, "all": 0.0}
    emb = {str(k): _restricted_model_accuracy(params, mcfg, p, y, [k]) for k in key}
    for i, k1 in enumerate(key):
        for k2 in key[i + 1:]:
            if math.gcd(k1, k2) == 1:
                emb[f"{k1},{k2}"] = _restricted_model_accuracy(params, mcfg, p, y, [k1, k2])
    emb["all"] = _restricted_model_accuracy(params, mcfg, p, y, key)
    out["sufficiency_embed"] = emb
