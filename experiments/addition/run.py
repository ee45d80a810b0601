"""Addition with and without carry (Song & Zhong §5.2, App. E, Figs. 6d-e and 51-56).

For each setting (carry / no-carry): train the toy transformer on "a+b=c" (answer reversed, loss after
"=") with :func:`geomjax.train.fit`; exact-match accuracy by greedy decoding in distribution (operands of
L/2..L digits) and on operands of 1-4 digits (length generalization; lengths outside the trained range
need ``allow_out_of_range=True``); QK and pos-pos heatmaps of every head (μ/pos of the attention inputs
estimated over validation problems, probe = a problem with two L-digit operands); and smoothness scores
of every head's pos-pos component — normalised total variation and high-frequency 2-D DCT energy
(:func:`geomjax.theory.attention.matrix_smoothness`) — against the same map with positions shuffled (fully
fractured reference).

    .venv/bin/python -m experiments.addition.run --preset cpu --out runs/issue5/addition
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from experiments.addition.config import PRESETS, AdditionExperimentConfig, budget_config, get_config
from experiments.addition.source import SOURCE
from experiments.attention_dissection import common
from geomjax.theory import attention as A
from geomjax.tools import attention_probe as AP
from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.data.synthetic import addition_batch, addition_problems, decode_addition, encode_addition
from geomjax.analysis import plots
from geomjax.models.toy import ToyTransformer
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section
from geomjax.train import build_programs, fit, load_task_data, merged_history
from geomjax.errors import GeomjaxError
from geomjax.train import addition_config
from geomjax.train.anomalies import Anomaly, describe, detect_loss_spikes
from geomjax.train.cost import count_params, toy_training_cost


def train_config(cfg: AdditionExperimentConfig, carry: bool):
    """The geomjax TrainConfig of one setting: the preset's ``train`` with ``options.carry`` set."""
    return cfg.train.replace(options=dataclasses.replace(cfg.train.options, carry=carry))


def evaluate_lengths(logits_fn: Callable, lengths: Sequence[int], *, max_digits: int, T: int, n: int, carry: bool,
                     key, allow_out_of_range: bool = False) -> dict[int, float]:
    """Exact-match accuracy (greedy decoding) on problems whose two operands both have ℓ digits, per ℓ.

    Args:
      logits_fn: ``ids (n, T-1) -> logits`` of the trained model.
      lengths: operand lengths ℓ to test.
      max_digits: the L the model was trained with (trained lengths: max(1, ⌊L/2⌋)..L).
      T: buffer length (the model's positions + 1).
      n: problems per length.
      carry: draw carry (uniform) or no-carry problems.
      key: PRNG key.
      allow_out_of_range: must be True to test a length outside the trained range.

    Raises:
      ValueError: a length outside the trained range without ``allow_out_of_range``, or longer than L
        (the strings would not fit the model's positions).
    """
    lo = max(1, max_digits // 2)
    out = {}
    for i, ell in enumerate(lengths):
        ell = int(ell)
        if ell > max_digits:
            raise ValueError(f"evaluate_lengths: operands of {ell} digits do not fit a model trained with "
                             f"max_digits={max_digits} (its {T - 1} positions); test lengths <= {max_digits}")
        if not lo <= ell <= max_digits and not allow_out_of_range:
            raise ValueError(f"evaluate_lengths: length {ell} is outside the trained range {lo}..{max_digits}; "
                             "pass allow_out_of_range=True (--allow-out-of-range) to test length generalization")
        probs = addition_problems(jax.random.fold_in(key, i), n, ell, carry=carry, min_digits=ell)
        _, ok = decode_addition(logits_fn, probs, T)
        out[ell] = float(ok.mean())
    return out


def pospos_smoothness(parts: A.QKParts, key, *, drop_first: bool = True) -> list[dict[str, float]]:
    """Smoothness of every head's pos-pos and QK maps, and of pos-pos with positions shuffled (per head)."""
    s = 1 if drop_first else 0
    pp = np.asarray(parts.pos_pos)[:, s:, s:]
    qk = np.asarray(parts.total)[:, s:, s:]
    T = pp.shape[-1]
    perm = np.asarray(jax.random.permutation(key, T))
    out = []
    for h in range(pp.shape[0]):
        a = A.matrix_smoothness(pp[h])
        b = A.matrix_smoothness(pp[h][perm][:, perm])
        c = A.matrix_smoothness(np.where(np.tril(np.ones((T, T), bool)), qk[h], qk[h].mean()))
        out.append({"tv": a["tv"], "hf_dct": a["hf_dct"], "tv_shuffled": b["tv"], "hf_dct_shuffled": b["hf_dct"],
                    "qk_tv": c["tv"], "qk_hf_dct": c["hf_dct"]})
    return out


def train_exact_match(tc, params, n: int = 2048) -> float:
    """Exact match (teacher-forced on the answer tokens, which equals greedy decoding) on the first ``n``
    problems of the run's own training set: with the validation number it tells under-fitting (both low)
    from over-fitting or a broken evaluation (train high, test low)."""
    train, _, _ = load_task_data(tc)
    B = tc.batch_size
    n = min(n, train["ids"].shape[0]) // B * B
    data = {k: v[:n].reshape(n // B, B, -1) for k, v in train.items()}
    return float(build_programs(tc).eval_fn(params, data)["exact_match"])


def expected_cost(cfg: AdditionExperimentConfig, *, sizes_only: bool = False) -> str:
    """The preset's expected training cost (:mod:`geomjax.train.cost`): every setting at the main budget and at each
    shorter budget, and the carry setting at each other size (``sizes_only``: those alone), as one sentence."""
    steps = cfg.train.total_steps + sum(cfg.budgets)
    runs = [] if sizes_only else [cfg.train.replace(total_steps=steps * len(cfg.settings))]  # one after another
    runs += [cfg.train.replace(model=cfg.train.model.replace(n_layers=a, n_heads=b, d_model=c, d_mlp=e),
                               total_steps=cfg.carry_size_steps) for a, b, c, e in cfg.carry_sizes]
    head = ("" if sizes_only else f"{len(cfg.settings)} settings × {steps} steps, one after another "
            f"({cfg.train.total_steps} + budgets {list(cfg.budgets)})")
    if cfg.carry_sizes:
        head += ("" if sizes_only else ", then ") + "carry at " + ", ".join(
            f"{a} layers × {b} heads, d {c}" for a, b, c, _ in cfg.carry_sizes) + f" for {cfg.carry_size_steps} steps"
    return head + ": " + "; ".join(toy_training_cost(r).describe() for r in runs)


def train_setting(cfg: AdditionExperimentConfig, setting: str, out: Path, *, progress: bool = True) -> dict:
    """Train one setting at the preset's budget (``out/<setting>``, resumed from its checkpoints) and at each
    shorter budget of ``cfg.budgets`` (``out/budgets/<setting>_<steps>``); returns the final state, the merged
    histories (every session of a resumed run) and the training seconds per budget."""
    tc = train_config(cfg, setting == "carry")
    runs = {cfg.train.total_steps: (tc, out / setting)}
    runs.update({b: (budget_config(tc, b), out / "budgets" / f"{setting}_{b}") for b in cfg.budgets})
    hist, state = {}, None
    for steps, (c, d) in sorted(runs.items(), reverse=True):
        res = fit(c, run_dir=d, progress=progress)
        hist[steps] = merged_history(d)
        state = res.state if steps == cfg.train.total_steps else state
    return {"tc": tc, "state": state, "history": hist}


def draw_curves(rd: RunDir, curves: dict, main_steps: int) -> None:
    """The figure of exact match and validation loss (after "=") against optimizer steps, every setting and budget."""
    panels = {"exact match (validation)": {}, "validation loss after '='": {}}
    styles = {}
    for setting, by_budget in curves.items():
        for steps, h in sorted(by_budget.items()):
            label = f"{setting}, {steps} steps"
            styles[label] = "-" if steps == main_steps else "--"
            x = [e["step"] for e in h["evals"]]
            panels["exact match (validation)"][label] = (x, [e["exact_match"] for e in h["evals"]])
            panels["validation loss after '='"][label] = (x, [e["loss"] for e in h["evals"]])
    p, _ = rd.figure_path("exact_match_vs_steps.png")
    plots.save(plots.curves(panels, "optimizer step", "exact match vs steps (solid: the preset's budget, dashed: "
                            "shorter budgets, each with its own cosine horizon)", logy=("validation loss after '='",),
                            styles=styles), p)


def curve_section(metrics: dict) -> Section:
    """Exact match, per-token accuracy and validation loss at the end of every setting's budgets (metrics.json's
    ``budgets``), with the figure :func:`draw_curves` drew."""
    rows = [[setting, int(b), e["step"], f"{100 * e['exact_match']:.2f}%", f"{100 * e['accuracy']:.2f}%",
             round(e["loss"], 4)]
            for setting, m in metrics["settings"].items() for b, e in sorted(m["budgets"].items(), key=lambda x: int(x[0]))]
    s = Section("Exact match against training steps, at several budgets", [
        "The validation set's exact match (teacher-forced on the answer tokens, equal to greedy decoding; "
        "the run's fixed validation problems), per-token accuracy of the answer tokens and loss after '=' at every "
        "evaluation. Each budget is a separate run whose cosine schedule ends at its own last step, so a shorter "
        "budget is not the prefix of a longer one."])
    s.table(["setting", "budget (steps)", "step", "exact match", "per-token accuracy", "val loss"], rows,
            caption="end of each budget")
    return s.figure("figures/exact_match_vs_steps.png", "exact match and validation loss vs steps, every setting and budget")


def measure_setting(cfg: AdditionExperimentConfig, setting: str, out: Path, rd: RunDir, si: int, *,
                    progress: bool = True) -> tuple[dict, dict]:
    """Train one setting (:func:`train_setting`), evaluate it in distribution and on short lengths, dissect every
    head (QK and pos-pos heatmaps, eq. (7) components of the smoothest and roughest head, smoothness); draws the
    figures into ``rd``. Returns (the setting's metrics, its histories by budget)."""
    carry = setting == "carry"
    tr = train_setting(cfg, setting, out, progress=progress)
    tc, h = tr["tc"], tr["history"][cfg.train.total_steps]
    found = detect_loss_spikes(h["steps"], h["train"]["loss"], series=f"{setting} train loss")
    model = ToyTransformer(tc.model)
    params = tr["state"].params
    logits_fn = jax.jit(lambda ids: model.apply({"params": params}, ids)[0])
    T, L = tc.seq_len + 1, tc.options.max_digits
    k = jax.random.fold_in(jax.random.key(cfg.train.seed), 1000 + si)
    in_dist = addition_problems(jax.random.fold_in(k, 0), cfg.n_eval, L, carry=carry)
    _, ok = decode_addition(logits_fn, in_dist, T)
    short = evaluate_lengths(logits_fn, cfg.short_lengths, max_digits=L, T=T, n=cfg.n_short, carry=carry,
                             key=jax.random.fold_in(k, 1), allow_out_of_range=cfg.allow_out_of_range)
    # attention dissection: μ/pos over validation problems, probe with two L-digit operands
    basis_ids = addition_batch(jax.random.fold_in(k, 2), cfg.n_basis, L, T, carry=carry).ids[:, : T - 1]
    basis = AP.estimate_attention_basis(model, params, [basis_ids[i : i + 256] for i in range(0, len(basis_ids), 256)])
    a_b = addition_problems(jax.random.fold_in(k, 4), 1, L, carry=carry, min_digits=L)
    probe = encode_addition(a_b, T).ids[:, : T - 1]
    xs, _ = AP.attention_inputs(model, params, probe)
    n_layers = tc.model.n_layers
    parts = [A.layer_qk_decomposition(xs[l][0], basis, AP.qk_weights(model, params, l), l) for l in range(n_layers)]
    for name, mats in (("qk", np.stack([np.asarray(p.total) for p in parts])),
                       ("pospos", np.stack([np.asarray(p.pos_pos) for p in parts]))):
        p, _ = rd.figure_path(f"{setting}_{name}_all_heads.png")
        common.plot_head_grid(mats[:, :, 1:, 1:], f"{setting}: {'QK' if name == 'qk' else 'pos-pos'} of every "
                              f"head (mean removed), probe {a_b[0][0]}+{a_b[0][1]}", p)
    chars = [("0123456789+=⏎")[t] for t in list(encode_addition(a_b, T).ids[0, : T - 1])]
    sm = [{"layer": l, "head": hh, **x} for l in range(n_layers)
          for hh, x in enumerate(pospos_smoothness(parts[l], jax.random.fold_in(k, 10 + l)))]
    for tag, (l, hh) in extreme_heads(sm).items():
        p, _ = rd.figure_path(f"{setting}_L{l}H{hh}_{tag}.png")
        common.plot_components(parts[l], hh, chars, f"{setting} L{l}H{hh} ({tag} pos-pos)", p)
    mean = lambda n: float(np.mean([x[n] for x in sm]))
    m = {"in_distribution_accuracy": float(ok.mean()), "n_eval": len(in_dist),
         "short_accuracy": {str(k_): v for k_, v in short.items()}, "short_accuracy_mean": float(np.mean(list(short.values()))),
         "final_val": h["evals"][-1] if h["evals"] else {}, "train_exact_match": train_exact_match(tc, params),
         "train_seconds": h["seconds"], "smoothness": sm, "anomalies": [a.to_json() for a in found],
         "budgets": {str(b): hb["evals"][-1] for b, hb in tr["history"].items() if hb["evals"]},
         "smoothness_mean": {n: mean(n) for n in SMOOTHNESS_KEYS}}
    return m, tr["history"]


SMOOTHNESS_KEYS = ("tv", "tv_shuffled", "hf_dct", "hf_dct_shuffled", "qk_tv", "qk_hf_dct")


def extreme_heads(sm: list[dict]) -> dict[str, tuple[int, int]]:
    """{"smoothest": (layer, head), "roughest": (layer, head)} of a setting's heads by pos-pos total variation."""
    by_tv = sorted(sm, key=lambda x: x["tv"])
    return {"smoothest": (by_tv[0]["layer"], by_tv[0]["head"]), "roughest": (by_tv[-1]["layer"], by_tv[-1]["head"])}


def size_label(model) -> str:
    """"L layers × H heads, d D" of a toy config."""
    return f"{model.n_layers} layers × {model.n_heads} heads, d {model.d_model}"


def train_carry_sizes(cfg: AdditionExperimentConfig, out: Path, *, progress: bool = True) -> dict:
    """The carry setting at each model size of ``cfg.carry_sizes`` for ``cfg.carry_size_steps`` steps (a budget of
    the preset, so the preset's model has the same run: :func:`train_setting`), into ``out/sizes/``: whether more
    capacity at the same budget learns more of the carry. Returns label → {"n_params", "steps", "evals"}."""
    out_sizes = {}
    for n_layers, n_heads, d_model, d_mlp in cfg.carry_sizes:
        model = cfg.train.model.replace(n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_mlp=d_mlp)
        tc = budget_config(train_config(cfg, True).replace(model=model), cfg.carry_size_steps)
        d = out / "sizes" / f"carry_L{n_layers}_d{d_model}_{cfg.carry_size_steps}"
        fit(tc, run_dir=d, progress=progress)
        h = merged_history(d)
        out_sizes[size_label(model)] = {"n_params": count_params(model)[0], "steps": cfg.carry_size_steps,
                                        "evals": h["evals"], "train_seconds": h["seconds"]}
    return out_sizes


def carry_evidence(metrics: dict, cfg: AdditionExperimentConfig) -> tuple[str, str | None]:
    """The carry row's evidence (a sentence) and its reading: "budget" when the preset's model still improves with
    steps (its validation loss falls by more than CURVE_TOL from the shorter budget to the preset's) and the other
    size at the shorter budget learns no more (a larger model) or as much (a smaller one: per-token accuracy within
    SIZE_TOL of the preset model's); "capacity" when a larger model at that budget is better by more than SIZE_TOL;
    None when neither is shown."""
    m = metrics["settings"].get("carry")
    sizes = metrics.get("carry_sizes") or {}
    if m is None:
        return "", None
    b = m["budgets"]
    steps = sorted(int(x) for x in b)
    parts = [f"per-token accuracy {100 * m['final_val'].get('accuracy', float('nan')):.1f}% (exact match needs every "
             "answer token)"]
    falling = len(steps) > 1 and b[str(steps[0])]["loss"] - b[str(steps[-1])]["loss"] > CURVE_TOL
    if len(steps) > 1:
        parts.append(f"{size_label(cfg.train.model)}: validation loss {b[str(steps[0])]['loss']:.3g} → "
                     f"{b[str(steps[-1])]['loss']:.3g} and per-token accuracy {100 * b[str(steps[0])]['accuracy']:.1f}% → "
                     f"{100 * b[str(steps[-1])]['accuracy']:.1f}% from {steps[0]:,} to {steps[-1]:,} steps")
    reading = None
    for label, x in sizes.items():
        ref = b.get(str(x["steps"]))
        last = x["evals"][-1]
        parts.append(f"{label} ({x['n_params'] / 1e6:.2f}M parameters) at {x['steps']:,} steps: loss {last['loss']:.3g}, "
                     f"per-token {100 * last['accuracy']:.1f}%, exact match {100 * last['exact_match']:.2f}%"
                     + (f" (the preset's model at {x['steps']:,}: loss {ref['loss']:.3g}, per-token "
                        f"{100 * ref['accuracy']:.1f}%)" if ref else ""))
        if ref is not None:
            gain = last["accuracy"] - ref["accuracy"]
            if x["n_params"] > count_params(cfg.train.model)[0]:  # a larger model: better = capacity binds
                reading = "capacity" if gain > SIZE_TOL else ("budget" if falling else reading)
            elif abs(gain) <= SIZE_TOL and falling:  # a smaller model as good: size is not what binds
                reading = "budget"
    return "; ".join(parts), reading


CURVE_TOL = 0.05  # nats: a validation loss that falls by more than this between budgets is still improving
SIZE_TOL = 0.05  # per-token accuracy: a larger model better by more than 5 points at the same budget shows capacity


def write_report(cfg: AdditionExperimentConfig, metrics: dict, rd: RunDir) -> None:
    """The report of a run from its ``metrics`` and the figures already in ``rd`` (drawn by :func:`measure_setting`
    and :func:`draw_curves`): also a run's report rebuilt from its metrics.json (``--render``)."""
    opt = cfg.train.options
    schedules = {s: train_config(cfg, s == "carry").effective_schedule() for s in cfg.settings}
    acc_rows, smooth_rows, sections, anomaly_text = [], [], [], []
    for setting, m in metrics["settings"].items():
        last, short = m["final_val"], m["short_accuracy"]
        anomaly_text.append(describe([Anomaly(**a) for a in m["anomalies"]], f"training the {setting} model"))
        acc_rows.append([setting, f"{100 * m['in_distribution_accuracy']:.2f}%",
                         f"{100 * last.get('accuracy', float('nan')):.2f}%"]
                        + [f"{100 * short[str(ell)]:.2f}%" for ell in cfg.short_lengths]
                        + [f"{100 * m['short_accuracy_mean']:.2f}%", round(last.get("loss", float("nan")), 4),
                           f"{100 * m['train_exact_match']:.2f}%", f"{m['train_seconds']:.0f}"])
        smooth_rows += [[setting, x["layer"], x["head"]] + [round(x[n], 3) for n in
                                                           ("tv", "tv_shuffled", "hf_dct", "hf_dct_shuffled", "qk_tv",
                                                            "qk_hf_dct")] for x in m["smoothness"]]
        for name in ("qk", "pospos"):
            title = "QK" if name == "qk" else "pos-pos"
            sections.append(Section(f"{setting}: {title} heatmaps (Figs. 6d-e, 51-56)")
                            .figure(f"figures/{setting}_{name}_all_heads.png", f"{setting}: every layer/head, first position dropped"))
        fsec = Section(f"{setting}: eq. (7) components of two heads")
        for tag, (l, h) in extreme_heads(m["smoothness"]).items():
            fsec.figure(f"figures/{setting}_L{l}H{h}_{tag}.png", f"{setting} layer {l} head {h}: {tag} pos-pos by total variation")
        sections.append(fsec)
    s0 = Section("Accuracy (exact match, greedy decoding)", [
        f"L = {opt.max_digits}: operands of {max(1, opt.max_digits // 2)}-{opt.max_digits} digits, answer reversed, "
        f"loss after '='. {cfg.n_eval} fresh in-distribution problems; {cfg.n_short} problems per short length "
        "(both operands of that length). The paper's numbers are in the source-vs-run table above. "
        f"Expected before training: {expected_cost(cfg)}. Wall time of this invocation {metrics['seconds']:.0f} s; training "
        f"seconds per setting (every session of a resumed run) in the table; at the end, {metrics['load']}. Per-token "
        "accuracy: the share of answer tokens the model predicts right (teacher-forced, validation set), beside exact "
        "match, which needs all of them. Train exact match: the first 2048 training problems (teacher-forced; "
        "under-fitting shows as both numbers low)."])
    s0.paragraphs += anomaly_text
    s0.table(["setting", "in distribution (exact match)", "per-token accuracy (validation)"]
             + [f"length {ell}" for ell in cfg.short_lengths]
             + ["lengths pooled", "final val loss (after '=')", "train exact match", "training s"], acc_rows)
    s1 = Section("Smoothness of pos-pos ('fractured')", [
        "Per head, on the probe's positions 1..T-1: normalised total variation (mean |adjacent difference| / std; "
        "≈1.13 for i.i.d. entries, 0 for smooth) and the fraction of non-DC 2-D DCT energy at relative frequency "
        ">= 1/4 (≈0.94 for i.i.d.), for pos-pos, for pos-pos with positions shuffled (fully fractured reference), "
        "and for the causal QK map. Compare with the smooth pos-pos of language models in the attention-"
        "dissection report."])
    s1.table(["setting", "layer", "head", "pos-pos TV", "TV shuffled", "pos-pos HF-DCT", "HF shuffled", "QK TV",
              "QK HF-DCT"], smooth_rows)
    cmp = source_section(SOURCE, cfg.preset, f"L = {opt.max_digits}, {size_label(cfg.train.model)}, dropout "
                         f"{cfg.train.model.dropout:g}, {cfg.train.total_steps} steps of batch {cfg.train.batch_size}, lr "
                         f"{cfg.train.optim.lr:g} cosine, {opt.n_train} training problems; {cfg.n_eval} test problems, "
                         f"{cfg.n_short} per short length.", _departures(cfg), comparison_rows(metrics["settings"],
                                                                                               carry_evidence(metrics, cfg)))
    extra = [sizes_section(metrics)] if metrics.get("carry_sizes") else []
    rd.write_report("Addition with and without carry (Song & Zhong §5.2)",
                    [cmp, schedule_section(schedules), s0, curve_section(metrics), *extra, s1] + sections)


def sizes_section(metrics: dict) -> Section:
    """The carry setting at other model sizes (:func:`train_carry_sizes`): every evaluation of each."""
    s = Section("Carry: budget or capacity?", [
        "The carry setting trained at another model size for one of the preset's shorter budgets (its own cosine "
        "horizon), beside the preset's model at that budget (the table above): whether a larger model learns more of "
        "the carry in the same steps (capacity) or the preset's model is still improving with steps (budget). The "
        f"reading, in the source-vs-run table's carry row: capacity where a larger model's per-token accuracy at that "
        f"budget exceeds the preset's model's by more than {100 * SIZE_TOL:.0f} points; budget where the preset's "
        f"model's validation loss still falls by more than {CURVE_TOL:g} nats from that budget to the preset's and a "
        f"larger model is not better, or a smaller one is as good (within {100 * SIZE_TOL:.0f} points); otherwise "
        "neither is shown."])
    s.paragraphs.append("Training: " + "; ".join(f"{label} {x['train_seconds']:.0f} s" for label, x in
                                                 metrics["carry_sizes"].items())
                        + (f" (added to the finished run later; at the end, {metrics['carry_sizes_load']})"
                           if "carry_sizes_load" in metrics else "") + ".")
    rows = [[label, f"{x['n_params'] / 1e6:.2f}M", e["step"], f"{100 * e['exact_match']:.2f}%",
             f"{100 * e['accuracy']:.2f}%", round(e["loss"], 4)] for label, x in metrics["carry_sizes"].items()
            for e in x["evals"]]
    return s.table(["model", "parameters", "step", "exact match", "per-token accuracy", "val loss"], rows,
                   caption="carry, every evaluation")


def run(cfg: AdditionExperimentConfig, out, *, progress: bool = True) -> dict:
    """Train both settings, evaluate, dissect (:func:`measure_setting`), train the carry setting at the other model
    sizes (:func:`train_carry_sizes`); write the report into ``out`` (:func:`write_report`); returns the metrics.

    The short-length test runs lengths outside the trained range only because the config says so
    (``cfg.allow_out_of_range``); otherwise :func:`evaluate_lengths` raises.
    """
    t0 = time.perf_counter()
    print(expected_cost(cfg))  # before any training
    rd = RunDir(out, "addition")
    schedules = {s: train_config(cfg, s == "carry").effective_schedule() for s in cfg.settings}
    rd.write_config(dataclasses.asdict(cfg), schedules=schedules)
    metrics = {"preset": cfg.preset, "settings": {}}
    curves = {}
    for si, setting in enumerate(cfg.settings):
        metrics["settings"][setting], curves[setting] = measure_setting(cfg, setting, Path(out), rd, si,
                                                                        progress=progress)
    if cfg.carry_sizes and "carry" in cfg.settings:
        metrics["carry_sizes"] = train_carry_sizes(cfg, Path(out), progress=progress)
    draw_curves(rd, curves, cfg.train.total_steps)
    metrics["seconds"] = time.perf_counter() - t0
    metrics["load"] = machine_load()
    metrics["plumbing_only"] = cfg.preset == "smoke"
    rd.write_json("metrics.json", metrics)
    write_report(cfg, metrics, rd)
    return metrics


def add_carry_sizes(cfg: AdditionExperimentConfig, out, *, progress: bool = True) -> dict:
    """Train only the carry-size comparison of ``cfg`` into a finished run ``out`` (its metrics.json and figures
    kept), add it to the metrics and rebuild the report: for a run made before the comparison existed."""
    path = Path(out) / "metrics.json"
    if not path.is_file():
        raise GeomjaxError(f"--add-carry-sizes: {path} does not exist; run the preset into {out} first")
    if not cfg.carry_sizes:
        raise GeomjaxError(f"--add-carry-sizes: the {cfg.preset} preset has no carry sizes to train")
    metrics = json.loads(path.read_text())
    print(expected_cost(cfg, sizes_only=True))  # before any training
    t0 = time.perf_counter()
    metrics["carry_sizes"] = train_carry_sizes(cfg, Path(out), progress=progress)
    metrics["carry_sizes_seconds"], metrics["carry_sizes_load"] = time.perf_counter() - t0, machine_load()
    rd = RunDir(out, "addition")
    rd.write_json("metrics.json", metrics)
    write_report(cfg, metrics, rd)
    return metrics


ACC_TOL = 0.10  # in-distribution accuracy "reproduced" within 10 percentage points of the paper's
SHORT_FAIL = 0.10  # length generalization "fails as in the paper" below 10% exact match
PAPER_ACC = {"no_carry": 1.00, "carry": 0.72}


def comparison_rows(settings: dict, carry_why: tuple[str, str | None] = ("", None)) -> list[Row]:
    """Per setting: in-distribution and short-length accuracy against App. E (with the per-token accuracy; the carry
    row with :func:`carry_evidence`'s evidence and reading when it does not reproduce); pos-pos roughness against §5.2."""
    rows = []
    for name in ("no_carry", "carry"):
        if name not in settings:
            continue
        m = settings[name]
        acc, short = m["in_distribution_accuracy"], m["short_accuracy_mean"]
        ok = abs(acc - PAPER_ACC[name]) <= ACC_TOL
        tok = m.get("final_val", {}).get("accuracy")
        why, reading = carry_why if name == "carry" else ("", None)
        why_note = ("" if ok else "; the trend over steps and budgets: 'Exact match against training steps' below" + (
            f"; why: {why}" + (f"; reading: {reading} (rule: 'Carry: budget or capacity?')" if reading else
                               "; reading: neither budget nor capacity shown") if why else ""))
        rows.append(Row(f"{name}_acc", f"{100 * acc:.2f}%" + (f" (per-token {100 * tok:.1f}%)" if tok is not None else ""),
                        verdict(ok), f"reproduced = within {100 * ACC_TOL:.0f} points" + why_note))
        learned = acc >= PAPER_ACC[name] - ACC_TOL  # precondition: the model adds in distribution as in the paper
        rows.append(Row(f"{name}_short", f"{100 * short:.2f}%", verdict(short < SHORT_FAIL if learned else None),
                        f"reproduced = below {100 * SHORT_FAIL:.0f}% (no length generalization)" if learned else
                        "not testable: the model did not learn in-distribution addition, so failing short lengths "
                        "says nothing about length generalization"))
    tv = [settings[n]["smoothness_mean"] for n in settings]
    if tv:
        mean_tv = float(np.mean([t["tv"] for t in tv]))
        shuf = float(np.mean([t["tv_shuffled"] for t in tv]))
        rows.append(Row("fractured", f"pos-pos total variation {mean_tv:.2f} (shuffled {shuf:.2f}; i.i.d. ≈ 1.13, "
                        "smooth 0)", verdict(mean_tv >= 0.5 * shuf), "reproduced = at least half the shuffled map's"))
    return rows


def _departures(cfg: AdditionExperimentConfig) -> list[str]:
    """Where the preset departs from App. A / App. E (the ``paper`` preset); the padding to 34 characters always."""
    src, t = addition_config("paper"), cfg.train
    d = []
    if (t.model.n_layers, t.model.n_heads, t.model.d_model) != (src.model.n_layers, src.model.n_heads, src.model.d_model):
        d.append(f"{size_label(t.model)} (source 8 layers × 8 heads, d 512)")
    if t.model.dropout != src.model.dropout:
        d.append(f"dropout {t.model.dropout:g} (source 0.1)")
    if (t.total_steps, t.batch_size) != (src.total_steps, src.batch_size):
        d.append(f"{t.total_steps:,} steps of batch {t.batch_size} (source 100K of 64)")
    if (t.optim.lr, t.optim.warmup_steps) != (src.optim.lr, src.optim.warmup_steps):
        d.append(f"lr {t.optim.lr:g} cosine after {t.optim.warmup_steps} warm-up steps (source 5e-5 after 1,000)")
    d.append("problems padded to 34 characters, 33 positions (App. A's context of 32 cannot hold the longest, 34)")
    if cfg.train.options.max_digits != 10:
        d.append(f"L = {cfg.train.options.max_digits} (source 10)")
    if cfg.n_short != 1000:
        d.append(f"{cfg.n_short} problems per short length (source 1K over lengths 1–4)")
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--add-carry-sizes", action="store_true",
                    help="train only the preset's carry-size comparison into the finished run --out and rebuild its report")
    a = ap.parse_args(argv)
    cfg = get_config(a.preset, seed=a.seed)
    if a.add_carry_sizes:
        m = add_carry_sizes(cfg, a.out, progress=not a.no_progress)
        print(carry_evidence(m, cfg))
        return 0
    m = run(cfg, a.out, progress=not a.no_progress)
    for s, v in m["settings"].items():
        print(s, "in-dist", round(v["in_distribution_accuracy"], 4), "short", v["short_accuracy"],
              "smooth", {k: round(x, 3) for k, x in v["smoothness_mean"].items()})
    print(f"report: {Path(a.out) / 'report.html'}  ({m['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
