"""Attention dissection (Song & Zhong §4, Figs. 4-5, App. D) on MiniLM and a geomjax-trained toy GPT.

For each model: μ and pos of every layer's attention input from C corpus windows; probes of random
tokens repeated (8 × 3); for every head the eq. (7) parts, the attention-pattern scores, the head type
(self-token / neighbours / copying), the dominant eq. (7) component, the OV copying score and the
attention entropy; Fig. 4-style heatmaps of the best head of each type (with and without μ); the
W-structure study (eq. (8), Fig. 5) of one layer. Writes a geomjax report directory.

    .venv/bin/python -m experiments.attention_dissection.run --preset cpu --out runs/issue5/attention_dissection
    .venv/bin/python -m experiments.attention_dissection.run --preset cpu --toy-run runs/shakespeare  # reuse a run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np

from experiments.attention_dissection import common
from experiments.attention_dissection.config import PRESETS, BasisConfig, DissectionConfig, ProbeConfig, get_config
from experiments.attention_dissection.source import PAPER_HEADS, SOURCE
from geomjax.theory import attention as A
from geomjax.tools import attention_probe as AP
from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.data import sample_windows
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section
from geomjax.train import get_config as get_train_config
from geomjax.train.cost import toy_training_cost


def _batches(ids: np.ndarray, B: int):
    return [ids[i : i + B] for i in range(0, len(ids), B)]


def estimate_basis(model, params, corpus, bc: BasisConfig, T: int, key, causal: bool | None = None) -> A.AttentionBasis:
    """μ and pos of every layer's attention input (Song & Zhong eq. (2)) from ``bc.windows`` random windows of
    ``T`` tokens of ``corpus`` (``bc.batch`` windows per forward pass)."""
    win = sample_windows(corpus, bc.windows, T, key)
    return AP.estimate_attention_basis(model, params, _batches(win.ids, bc.batch), causal=causal)


def draw_probes(pc: ProbeConfig, key, low: int, high: int) -> np.ndarray:
    """The Fig. 4 probes, (n_probes, n_tokens · n_repeats) ids: random ids in [low, high) repeated."""
    return np.asarray(A.repeated_random_tokens(key, pc.n_tokens, pc.n_repeats, low=low, high=high,
                                               n_sequences=pc.n_probes))


def toy_train_config(cfg: DissectionConfig):
    """The :class:`geomjax.train.TrainConfig` of the toy GPT that :func:`train_toy` trains (tiny-Shakespeare preset
    ``cfg.toy_variant``, cut to ``cfg.toy_steps`` when set)."""
    tc = get_train_config("shakespeare", cfg.toy_variant)
    if not cfg.toy_steps:
        return tc
    keep = tc.ckpt_every and cfg.toy_steps % tc.ckpt_every == 0  # checkpoints (and so resuming) where they divide the run
    return tc.replace(total_steps=cfg.toy_steps, eval_every=0, ckpt_every=tc.ckpt_every if keep else 0)


def train_toy(cfg: DissectionConfig, out: Path, data_dir=None, progress: bool = True):
    """Train the GPT-style toy (tiny-Shakespeare preset ``cfg.toy_variant``) into ``out`` with fit().

    Returns the trained run as a :class:`geomjax.models.toy_run.ToyRun` (``load_toy_run(out)`` restores the
    same parameters later) and the last validation metrics."""
    from geomjax.models.toy import ToyTransformer
    from geomjax.models.toy_run import ToyRun
    from geomjax.train import fit

    tc = toy_train_config(cfg)
    res = fit(tc, run_dir=out, data_dir=data_dir, progress=progress)
    run = ToyRun(model=ToyTransformer(tc.model), params=res.state.params, tokenizer=res.info["tokenizer"],
                 config=tc, step=int(res.state.step), max_positions=int(tc.model.max_len))
    return run, (res.history.evals[-1] if res.history.evals else None)


def _study(name: str, model, params, basis, probes, tokens, rd: RunDir, cfg: DissectionConfig, w_layer: int,
           key, causal, progress: bool) -> tuple[list[Section], dict]:
    spec = AP.describe_model(model, causal=causal)
    res = common.dissect(model, params, basis, probes, causal=causal, window=cfg.window, min_lift=cfg.min_lift,
                         progress=progress)
    rows = res["rows"]
    metrics = {"head_type_counts": res["counts"], "n_heads": len(rows), "heads": rows,
               "pospos_tv_mean": float(np.mean([r["pospos_tv"] for r in rows])),
               "pospos_hf_dct_mean": float(np.mean([r["pospos_hf_dct"] for r in rows])),
               "mean_lift": {t: float(np.mean([r[f"{t}_lift"] for r in rows if r["type"] == t]))
                             for t in A.HEAD_TYPES if res["counts"][t]}}
    sec = Section(f"{name}: head classification ({spec.n_layers} layers × {spec.n_heads} heads)")
    sec.paragraphs.append(
        f"Probes: {probes.shape[0]} sequences of {cfg.probe.n_tokens} random tokens repeated {cfg.probe.n_repeats} times; "
        f"μ and pos of each layer's attention input (LayerNorm output for pre-LN models, the block input for "
        f"BERT) from {basis.n_contexts} windows of {basis.n_positions} tokens. Lift = attention mass on the "
        f"pattern minus the mass uniform causal attention would put there. Type = largest lift if >= "
        f"{cfg.min_lift}. Dominant part = eq. (7) component with the largest within-row RMS (what softmax sees). "
        f"pos-pos smoothness (probe positions 1..T-1; see the addition report): mean TV {metrics['pospos_tv_mean']:.3f}, "
        f"mean high-frequency DCT energy {metrics['pospos_hf_dct_mean']:.3f}.")
    mh, mrows, findings = common.mechanism_table(rows, PAPER_HEADS)
    sec.paragraphs += findings
    metrics["mechanism"] = [dict(zip(mh, r)) for r in mrows]
    metrics["mechanism_findings"] = findings
    sec.table(mh, mrows, caption=f"{name}: head types beside the paper's GPT-2 heads (§4.1, Fig. 4)")
    sec.table(["type", "heads"], [[k, v] for k, v in res["counts"].items()], caption=f"{name}: head-type counts")
    sec.table(*common.dominance_crosstab(rows), caption=f"{name}: head type × dominant eq. (7) component")
    sec.table(*common.head_table(rows), caption=f"{name}: every head")
    figs = Section(f"{name}: eq. (7) components of the strongest head of each type (Fig. 4)")
    tok0 = tokens
    for (l, h, t) in common.pick_heads(rows):
        p, rel = rd.figure_path(f"{name.lower().replace(' ', '_')}_L{l}H{h}_{t.split()[0]}.png")
        common.plot_components(res["parts"][l], h, tok0, f"{name} L{l}H{h} ({t}); global mean removed", p)
        figs.figure(rel, f"{name} layer {l} head {h}: {t}; pos-pos, pos-cvec, cvec-pos, cvec-cvec, QK, attention")
    picks = common.pick_heads(rows)
    if picks:  # App. D.1: with and without μ
        l, h, t = picks[0]
        xs, _ = AP.attention_inputs(model, params, probes[:1], causal=causal)
        w = AP.qk_weights(model, params, l)
        keep = A.layer_qk_decomposition(xs[l][0], basis, w, l, remove_mean=False, causal=spec.causal)
        p, rel = rd.figure_path(f"{name.lower().replace(' ', '_')}_L{l}H{h}_with_mean.png")
        common.plot_components(keep, h, tok0, f"{name} L{l}H{h}; global mean NOT removed (App. D.1)", p)
        figs.figure(rel, f"{name} layer {l} head {h} with μ kept inside cvec (Fig. 28 convention)")
    # exact-sum identity on probe 0 of every layer
    err = max(float(np.max(np.abs(np.asarray(pp.sum_of_parts()) - np.asarray(pp.total)))) for pp in res["parts"])
    scale = max(float(np.max(np.abs(np.asarray(pp.total)))) for pp in res["parts"])
    metrics["exact_sum_max_abs_error"] = err
    metrics["scores_max_abs"] = scale
    figs.paragraphs.append(f"Exact-sum identity: max |Σ parts − model scores| = {err:.2e} (scores up to {scale:.2f}); "
                           "softmax of the decomposed scores matched the model's own attention (checked, < 1e-3).")
    # W structure (eq. 8, Fig. 5)
    wsec = Section(f"{name}: W = W_q W_kᵀ/√d_head structure, layer {w_layer} (eq. (8), Fig. 5)")
    w = AP.qk_weights(model, params, w_layer)
    Ws = A.w_matrix(w["W_q"], w["W_k"])
    P = basis.pos[w_layer]
    results = [A.w_structure(Ws[h], P, jax.random.fold_in(key, h), Ks=cfg.w.Ks, n_random=cfg.w.n_random,
                             fit_K=cfg.w.fit_K) for h in range(spec.n_heads)]
    Ks = results[0]["Ks"]
    wrows = [[h, r["n_survivors"]] + [f"{r['frac'][i]:.3f} / {r['frac_random'][i]:.3f}" for i in range(len(Ks))]
             + [f"{r['frac_raw'][i]:.3f} / {r['frac_raw_random'][i]:.3f}" for i in range(len(Ks))]
             + [round(r["fit_residual"], 4), round(r["fit_residual_random"], 4), round(r["diag_energy"], 4)]
             for h, r in enumerate(results)]
    wsec.paragraphs.append(
        "Off-diagonal of W rotated by the full right singular basis of P (this layer's attention input), "
        "thresholded at √(2 log d²)·std; energy fraction of the surviving entries in the top-left K×K block vs "
        f"the mean over {cfg.w.n_random} Haar-random rotations. Eq. (8) fit: relative residual of W ≈ V_K L V_Kᵀ + D "
        f"(K = {cfg.w.fit_K}) with P's top-K directions vs random K-dim subspaces. A random rotation spreads W's "
        "energy evenly, so often no entry survives the threshold: its thresholded fraction is then 0; the raw "
        "(unthresholded) fractions compare the two bases without the threshold.")
    wsec.table(["head", "entries above threshold"] + [f"K={k} thresholded (P / random)" for k in Ks]
               + [f"K={k} raw (P / random)" for k in Ks]
               + ["fit residual (P)", "fit residual (random)", "‖diag W‖²/‖W‖²"], wrows,
               caption=f"{name} layer {w_layer}")
    p, rel = rd.figure_path(f"{name.lower().replace(' ', '_')}_W_layer{w_layer}.png")
    common.plot_w_structure(results, f"{name} layer {w_layer}: |rotated off-diag W| (thresholded), |diag W| (red)", p,
                            K=cfg.w.fit_K)
    wsec.figure(rel, "blue: thresholded |Vᵀ(W − diag W)V| top-left block; red: |diag W|")
    p, rel = rd.figure_path(f"{name.lower().replace(' ', '_')}_W_energy_layer{w_layer}.png")
    common.plot_energy_curves(results, f"{name} layer {w_layer}", p)
    wsec.figure(rel, "energy fraction in the top-left K×K block vs K (each line a head)")
    metrics["w_structure"] = {"layer": w_layer, "Ks": Ks,
                              "frac": [r["frac"].tolist() for r in results],
                              "frac_random": [r["frac_random"].tolist() for r in results],
                              "frac_raw": [r["frac_raw"].tolist() for r in results],
                              "frac_raw_random": [r["frac_raw_random"].tolist() for r in results],
                              "n_survivors": [r["n_survivors"] for r in results],
                              "fit_residual": [r["fit_residual"] for r in results],
                              "fit_residual_random": [r["fit_residual_random"] for r in results]}
    return [sec, figs, wsec], metrics


def run(cfg: DissectionConfig, out, *, toy_run=None, data_dir=None, progress: bool = True) -> dict:
    """Run the experiment into the report directory ``out``; returns the metrics dict."""
    from geomjax.data import tokenize_documents
    from geomjax.data.corpora import tiny_shakespeare, wikitext2
    from geomjax.train import load_toy_run

    t0 = time.perf_counter()
    rd = RunDir(out, "attention_dissection")
    given_run = str(toy_run) if toy_run else None
    key = jax.random.key(cfg.seed)
    sections, metrics = [], {"preset": cfg.preset}
    if cfg.use_minilm:
        from geomjax.drivers import pipeline

        model, params, tok, _ = pipeline.load_model_and_tokenizer("minilm")
        corpus = tokenize_documents(wikitext2("valid", data_dir), tok.encode)
        basis = estimate_basis(model, params, corpus, cfg.basis, cfg.basis.T, jax.random.fold_in(key, 1),
                               causal=cfg.minilm_causal)
        probes = draw_probes(cfg.probe, jax.random.fold_in(key, 2), *cfg.minilm_id_range)
        tokens = [tok.decode([i]) for i in probes[0]]
        s, m = _study("MiniLM", model, params, basis, probes, tokens, rd, cfg, cfg.w.layer_minilm,
                      jax.random.fold_in(key, 3), cfg.minilm_causal, progress)
        sections += s
        metrics["minilm"] = m
        metrics["minilm_seconds"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    if toy_run is None:
        toy_run = Path(out) / "toy_run"
        run_, last_eval = train_toy(cfg, toy_run, data_dir, progress)
        metrics["toy_train"] = {"trained_here": True, "final_eval": last_eval}
    else:
        run_ = load_toy_run(toy_run, data_dir=data_dir)
    schedules = {"Toy GPT": run_.config.effective_schedule()}  # MiniLM is pretrained, not trained here
    rd.write_config(dataclasses.asdict(cfg) | {"toy_run": given_run}, schedules=schedules)
    text = tiny_shakespeare(data_dir, split="val")
    corpus = tokenize_documents(text, run_.tokenizer.encode)
    T = min(cfg.basis.T, run_.max_positions)
    basis = estimate_basis(run_.model, run_.params, corpus, cfg.basis, T, jax.random.fold_in(key, 4))
    probes = draw_probes(cfg.probe, jax.random.fold_in(key, 5), 0, run_.model.cfg.vocab_size)
    tokens = [repr(run_.tokenizer.decode(np.asarray([i])))[1:-1] for i in probes[0]]
    w_layer = min(cfg.w.layer_toy, run_.model.cfg.n_layers - 1)
    s, m = _study("Toy GPT", run_.model, run_.params, basis, probes, tokens, rd, cfg, w_layer,
                  jax.random.fold_in(key, 6), None, progress)
    # the run's own toy is named relative to its output folder (a committed report names no machine path)
    toy_rec = "toy_run" if given_run is None else given_run
    m["run_dir"] = toy_rec
    m["step"] = run_.step
    sections += s
    metrics["toy"] = m
    metrics["toy_seconds"] = time.perf_counter() - t1
    metrics["seconds"] = time.perf_counter() - t0
    metrics["load"] = machine_load()
    intro = Section("Setup", [
        "Song & Zhong §4 dissection. The source dissected GPT-2 (weights not available offline); here "
        + ("the real pretrained MiniLM (BERT architecture, run causally as the source ran BERT) and " if cfg.use_minilm
           else "") + "a GPT-style toy trained "
        f"by geomjax on tiny Shakespeare (run {toy_rec}, step {run_.step}). Preset {cfg.preset!r}; "
        f"wall time {metrics['seconds']:.0f} s; at the end, {metrics['load']}."])
    models = [("MiniLM", metrics["minilm"])] if "minilm" in metrics else []
    models.append(("Toy GPT", metrics["toy"]))
    cmp = source_section(SOURCE, cfg.preset, ("MiniLM (causal) and " if cfg.use_minilm else "") + "a GPT-style toy on "
                         f"tiny Shakespeare; μ/pos from {cfg.basis.windows} windows of {cfg.basis.T} tokens, "
                         f"{cfg.probe.n_probes} probes of {cfg.probe.n_tokens} random tokens × {cfg.probe.n_repeats}.",
                         ["GPT-2 weights are not available offline: MiniLM (BERT architecture, run causally) and a toy "
                          "GPT stand in", f"W structure at MiniLM layer {cfg.w.layer_minilm} / toy layer "
                          f"{cfg.w.layer_toy} (source GPT-2 layer 6)"], comparison_rows(models, cfg.w.fit_K, cfg.min_lift))
    metrics["plumbing_only"] = cfg.preset == "smoke"
    rd.write_json("metrics.json", metrics)
    rd.write_report("Attention dissection (Song & Zhong §4)", [cmp, intro, schedule_section(schedules)] + sections)
    return metrics


W_LIFT = 2.0  # eq. (8) structure "reproduced" in a head: top-left K×K energy >= 2× the random rotation's


def _other_toy(m: dict, name: str) -> tuple[str, dict] | None:
    """The toy's committed other setting, (where, its toy metrics): for a run of the ``cpu`` preset's length the toy
    trained 3× longer (``results/cpu-toy-long``), for that run the ``cpu`` preset's toy (``results/cpu``); None when
    ``m`` is not the toy or the other setting is not committed."""
    results = Path(__file__).resolve().parent / "results"
    long, short = results / "cpu-toy-long" / "metrics.json", results / "cpu" / "metrics.json"
    if name != "Toy GPT" or not long.is_file():
        return None
    lm = json.loads(long.read_text())["toy"]
    if lm.get("step") != m.get("step"):
        return "results/cpu-toy-long/report.md", lm
    if not short.is_file():
        return None
    return "results/cpu/report.md", json.loads(short.read_text())["toy"]


def _absent_note(m: dict, t: str, min_lift: float, name: str) -> str:
    """Why a head type is absent from a model: its largest lift among the heads against the type threshold, and for the
    toy the committed other setting (:func:`_other_toy`) where it exists."""
    lifts = [h[f"{t}_lift"] for h in m.get("heads", [])]
    note = f"largest {t.replace('_', '-')} lift of any head {max(lifts):.3f} (a type needs >= {min_lift:g})" if lifts else ""
    other = _other_toy(m, name)
    if other is not None:
        where, om = other
        best = max(h[f"{t}_lift"] for h in om["heads"])
        note += (f"; toy trained {om['step']} steps ({where}): "
                 f"{om['head_type_counts'][t]} heads, largest lift {best:.3f}")
    return note


STAND_IN = {"Toy GPT": "a character-level toy GPT trained on tiny Shakespeare",
            "MiniLM": "MiniLM, a 6-layer BERT-architecture sentence encoder"}
"""What each model of the comparison is, beside the paper's GPT-2 (model name in the rows -> description)."""


def _contrary_note(m: dict, t: str, name: str) -> str:
    """A head type whose majority dominant part is not the paper's: and for the toy, the same type at the committed
    other setting (its head count and dominant parts)."""
    note = (f"differs from the paper's GPT-2 head in {STAND_IN.get(name, name)}, a stand-in for GPT-2 (not available "
            "offline): the mechanism does not carry over to it, which neither confirms nor contradicts the paper's "
            "mechanism in GPT-2")
    other = _other_toy(m, name)
    mech = {x["type"]: x for x in other[1]["mechanism"]} if other is not None else {}
    if t in mech:
        x = mech[t]
        note += (f"; toy trained {other[1]['step']} steps ({other[0]}): {x['heads of this type here']} "
                 f"heads ({x['dominant parts here']}), {x['agrees with the paper']}")
    return note


def comparison_rows(models: list[tuple[str, dict]], K: int, min_lift: float = 0.15) -> list[Row]:
    """Per model: the head-type mechanisms (majority dominant part vs the paper's), eq. (7)'s sum, eq. (8)'s block.
    A head type with no head gets the note of :func:`_absent_note` (largest lift vs ``min_lift``)."""
    rows = []
    for name, m in models:
        for mech in m["mechanism"]:
            t, agree = mech["type"], mech["agrees with the paper"]
            ok = None if agree.startswith("not testable") else agree.startswith("yes")
            rows.append(Row(t, f"{name}: {mech['heads of this type here']} heads ({mech['dominant parts here']}); "
                            f"strongest {mech['strongest here']}", verdict(ok),
                            _contrary_note(m, t, name) if ok is False else
                            _absent_note(m, t, min_lift, name) if ok is None else ""))
        rows.append(Row("exact_sum", f"{name}: max error {m['exact_sum_max_abs_error']:.1e} (scores up to "
                        f"{m['scores_max_abs']:.1f})", verdict(m["exact_sum_max_abs_error"] <= 1e-4 * max(1.0, m["scores_max_abs"]))))
        ws = m["w_structure"]
        Ks = list(ws["Ks"])
        k_ = K if K in Ks else Ks[len(Ks) // 2]
        i = Ks.index(k_)
        n_lift = sum(f[i] >= W_LIFT * max(fr[i], 1e-12) and f[i] > 0 for f, fr in zip(ws["frac_raw"], ws["frac_raw_random"]))
        H = len(ws["frac_raw"])
        rows.append(Row("w_structure", f"{name} layer {ws['layer']}: {n_lift} of {H} heads hold ≥ {W_LIFT:g}× the random "
                        f"rotation's top-{k_}×{k_} energy (raw)", verdict(n_lift >= H / 2),
                        "reproduced = at least half of the heads"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--toy-run", default=None, help="reuse a trained tiny-Shakespeare toy run directory")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    if a.toy_run is None:  # before training: the toy GPT this run trains (checkpointed in <out>/toy_run, resumed)
        print("toy GPT: " + toy_training_cost(toy_train_config(get_config(a.preset))).describe())
    m = run(get_config(a.preset), a.out, toy_run=a.toy_run, data_dir=a.data_dir, progress=not a.no_progress)
    for name in ("minilm", "toy"):
        if name in m:
            print(name, m[name]["head_type_counts"])
    print(f"report: {Path(a.out) / 'report.html'}  ({m['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
