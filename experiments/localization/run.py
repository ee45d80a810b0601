"""LocATER on WikiText-2 (Bao, Hataya & Karakida 2024, §7, Figs. 6-7): a κ2 sweep and its report.

Trains every κ2 of the preset in one vmapped job (:mod:`geomjax.train.locater`; checkpoints in
``<out>/train``, a re-run resumes) and writes a geomjax run directory: training loss, eigenspectrum
scale tr(W_QKᵀW_QK), attention entropy and validation perplexity over training (Fig. 6), ρ_i per
iteration as heatmaps (Fig. 7), a table of final values per κ2, and which of the paper's
conclusions the run reproduces::

    .venv/bin/python -m experiments.localization.run --preset cpu --out runs/localization-cpu
    .venv/bin/python -m experiments.localization.run --preset paper --out runs/localization-paper --data-dir DIR

(``paper`` trains on WikiText-2's train split, ``DIR/wikitext-2/train.txt``, which geomjax does not ship.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.localization.config import COMPANIONS, PRESETS, get_config
from experiments.localization.source import SOURCE

from geomjax.analysis.comparison import Row, source_section, verdict
from geomjax.analysis.report import RunDir, Section, machine_load, schedule_section
from geomjax.train.cost import count_params, training_cost
from geomjax.train.locater import LocaterConfig, SweepResult, load_wikitext_words, model_config, run_sweep


def _smooth(y, k):
    if k <= 1 or y.shape[0] < k:
        return y
    c = np.cumsum(np.concatenate([np.zeros((1,) + y.shape[1:]), y]), axis=0)
    return (c[k:] - c[:-k]) / k


def _spearman(x, y) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    if np.std(rx) == 0 or np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


NO_VARIATION = 1e-3  # a quantity whose range across κ2 is below this fraction of its size "does not vary"
NOISE_CHECKPOINTS = 5  # evaluation checkpoints whose spread of the κ2_max − κ2_0 difference is the noise scale
NOISE_SD = 2.0  # a difference counts when it exceeds this many of those standard deviations


def _trend(k2, y, name: str, fmt: str, sign: int, statistics: bool, noise: float | None = None
           ) -> tuple[str, bool | None]:
    """(text, reproduced) for "y moves with κ2 in direction ``sign``" (+1 up, −1 down).

    Differences below :data:`NO_VARIATION` of |y| are reported as "no variation" (no correlation is computed on
    round-off). With a ``noise`` scale (standard deviation of the κ2_max − κ2_0 difference, see
    :func:`checkpoint_noise`), a difference |y(κ2_max) − y(κ2_0)| <= :data:`NOISE_SD` · noise is within the noise:
    reproduced is ``None`` (not testable at this preset). ``statistics=False`` (smoke) leaves the Spearman
    correlation out.
    """
    y = np.asarray(y, np.float64)
    i_max, i_0 = int(np.argmax(k2)), int(np.argmin(k2))
    span = f"{name} {y[i_0]:{fmt}} (κ2={k2[i_0]:g}) → {y[i_max]:{fmt}} (κ2={k2[i_max]:g})"
    if np.ptp(y) <= NO_VARIATION * max(float(np.max(np.abs(y))), 1e-30):
        return f"no variation across κ2 (range {np.ptp(y):.1e}); " + span, False
    rho = _spearman(k2, y)
    diff = float(y[i_max] - y[i_0])
    text = (f"Spearman(κ2, {name}) = {rho:+.2f}; " if statistics else "") + span
    if noise is not None and statistics:
        text += f"; difference {diff:+.2g} vs noise sd {noise:.2g}"
        if abs(diff) <= NOISE_SD * noise:
            return text + f" (within {NOISE_SD:g} sd)", None
    return text, bool(sign * diff > 0 and sign * rho > 0)


def checkpoint_noise(evals: list[dict], key: str, k2) -> float:
    """Noise scale of a validation quantity: sample sd (ddof 1) over the last :data:`NOISE_CHECKPOINTS` evaluation
    checkpoints of the paired difference ``evals[s][key][κ2_max] − evals[s][key][κ2_0]`` (how much the two runs'
    ordering wanders late in training; no seed replicates are run). ``evals``: the sweep's list of
    {"step", key: (K,)} dicts. Returns NaN with fewer than 2 checkpoints."""
    i_max, i_0 = int(np.argmax(k2)), int(np.argmin(k2))
    d = np.asarray([e[key][i_max] - e[key][i_0] for e in evals[-NOISE_CHECKPOINTS:]], np.float64)
    return float(np.std(d, ddof=1)) if d.size > 1 else float("nan")


def conclusions(res: SweepResult, *, statistics: bool = True) -> tuple[list[list], dict]:
    """The paper's §7 conclusions, checked on the final state of the sweep (Fig. 6 B-D, Fig. 7).

    ``statistics=False`` (smoke runs) suppresses the correlations in the "measured" text."""
    k2 = np.asarray(res.config.kappa2s)
    n = res.steps.size
    tail = slice(n - max(1, n // 5), n)  # last 20 % of the iterations
    scale = res.train["scale"][tail].mean(0)
    ent = res.train["entropy"][tail].mean(0)
    last = res.evals[-1]
    ppl = np.asarray(last["ppl"])
    rho = res.train["rho"][n // 2:].mean(0)  # (K, T): time-averaged ρ_i over the second half
    stripes = rho.std(axis=1)  # across-token variation of ρ_i (salient horizontal stripes)
    metrics = {"kappa2": k2, "final_scale": scale, "final_trace": res.train["trace"][tail].mean(0),
               "final_train_entropy": ent, "final_val_ppl": ppl, "final_val_entropy": np.asarray(last["entropy"]),
               "best_val_ppl": np.min([e["ppl"] for e in res.evals], axis=0), "rho_stripes_sd": stripes,
               "evals": res.evals}
    checks = check_rows(metrics, statistics=statistics)
    metrics["reproduced"] = {c[0]: c[2] for c in checks}
    return checks, metrics


def check_rows(metrics: dict, *, statistics: bool = True) -> list[list[str]]:
    """[claim, measured, "yes" / "no" / "not testable"] per §7 conclusion from the sweep's metrics
    (``kappa2``, ``final_scale``, ``final_val_entropy``, ``final_val_ppl``, ``rho_stripes_sd``, ``evals``).

    (C) and (D) are read on the validation split at the last evaluation, where :func:`checkpoint_noise` gives a
    noise scale; a κ2_max − κ2_0 difference within :data:`NOISE_SD` of it is "not testable"."""
    k2 = np.asarray(metrics["kappa2"], np.float64)
    ev = metrics["evals"]
    stripes = np.asarray(metrics["rho_stripes_sd"])
    i_max, i_0 = int(np.argmax(k2)), int(np.argmin(k2))
    checks = [["(B) stronger κ2 shrinks the eigenspectrum scale",
               *_trend(k2, metrics["final_scale"], "scale", ".3g", -1, statistics)],
              ["(C) stronger κ2 keeps the attention entropy higher",
               *_trend(k2, metrics["final_val_entropy"], "entropy (valid)", ".4f", +1, statistics,
                       checkpoint_noise(ev, "entropy", k2))],
              ["(D) stronger κ2 improves validation perplexity",
               *_trend(k2, metrics["final_val_ppl"], "ppl", ".4g", -1, statistics, checkpoint_noise(ev, "ppl", k2))],
              ["(Fig. 7) LocATER (largest κ2) shows stripes in ρ_i, none without (κ2 = 0)",
               f"sd over tokens of time-averaged ρ_i: {stripes[i_max]:.3f} (κ2={k2[i_max]:g}) vs {stripes[i_0]:.3f} "
               f"(κ2={k2[i_0]:g})", bool(stripes[i_max] > 2 * stripes[i_0])]]
    return [[c, m, "not testable" if ok is None else "yes" if ok else "no"] for c, m, ok in checks]


NOTES = {"scale": "why, with curves: the penalty's own minimiser c·I has tr*²/d growing with κ2 (the scale panel's dotted "
                  "lines; tr(W_QK)²/(d·scale) in the final-values table; the κ2 effect at other settings, where the cpu "
                  "preset ran them)",
         "stripes": "sd over tokens of ρ_i at the other settings: the κ2 effect at other settings, where the cpu preset ran them",
         "entropy": f"valid split, last evaluation; counts only beyond {NOISE_SD:g} sd of the κ2_max − κ2_0 difference "
                    f"over the last {NOISE_CHECKPOINTS} checkpoints",
         "ppl": f"last evaluation; counts only beyond {NOISE_SD:g} sd of the κ2_max − κ2_0 difference over the last "
                f"{NOISE_CHECKPOINTS} checkpoints"}


def source_rows(checks: list[list[str]]) -> list[Row]:
    """The comparison rows of :func:`check_rows`' checks (keys of :data:`SOURCE`)."""
    keys = ("scale", "entropy", "ppl", "stripes")
    return [Row(k, c[1], verdict(None if c[2] == "not testable" else c[2] == "yes"), NOTES.get(k, ""))
            for k, c in zip(keys, checks)]


def departures(cfg: LocaterConfig) -> list[str]:
    """Where ``cfg`` departs from §7's setting (the ``paper`` preset), one phrase each; [] for §7 itself."""
    src, d = get_config("paper"), []
    for name, unit in (("batch_size", "batch {}"), ("d_model", "d = {}"), ("steps", "{:,} iterations"),
                       ("kappa1", "κ1 = {:g}"), ("seq_len", "T = {}")):
        if getattr(cfg, name) != getattr(src, name):
            d.append(f"{unit.format(getattr(cfg, name))} (source {unit.format(getattr(src, name))})")
    if cfg.vocab_cap is not None:
        d.append(f"the {cfg.vocab_cap - 1:,} most frequent words + <unk> (source: full vocabulary)")
    if cfg.optim != src.optim:
        d.append(f"Adam lr {cfg.optim.lr:g}, weight decay {cfg.optim.weight_decay:g} (source 2.5e-5, 0.01)")
    if cfg.init != src.init:
        d.append("GPT-2-style initialisation N(0, 0.02), residual projections N(0, 0.02/√2) (source: fairseq's, "
                 "Xavier-uniform projections and N(0, 1/d) embeddings; companion cpu-fairseq)")
    if cfg.gradient == "autodiff":
        d.append("the penalty's exact gradient (§6 prints a mean-term derivative with a factor tr(W_QK) where the "
                 "exact one has 2; companion cpu-printed trains with the printed one)")
    if cfg.train_split != src.train_split:
        d.append(f"trains on WikiText-2 {cfg.train_split}.txt (source: train.txt, not shipped: no train.txt offline) "
                 f"and evaluates on {cfg.valid_split}.txt")
    if cfg.eval_batches is not None:
        d.append(f"validation on {cfg.eval_batches} batches (source: the whole split)")
    return d + ["float32 (source: fairseq FP16)", "dropout also on the attention probabilities (fairseq's attention "
                "dropout is 0)"]


def penalty_minimum(kappa1: float, kappa2: float, d: int) -> tuple[float, float]:
    """(tr*, scale*) of the LocATER penalty alone, κ1·tr(WᵀW) + κ2·(tr W − 1)² over d×d W (Bao §6): its minimiser is
    W = c·I with tr* = κ2·d / (κ1 + κ2·d), and scale* = tr(WᵀW) = tr*² / d (Cauchy–Schwarz: every W of trace t has
    tr(WᵀW) >= t² / d, with equality only at W = (t/d)·I)."""
    t = kappa2 * d / (kappa1 + kappa2 * d) if kappa1 + kappa2 * d > 0 else 0.0
    return t, t * t / d


def identity_share(scale, trace, d: int) -> np.ndarray:
    """tr(W)² / (d·tr(WᵀW)) ∈ [0, 1] per run: the share of W_QK's scale that its trace forces (Cauchy–Schwarz);
    1 iff W_QK is a multiple of the identity, as at the penalty's minimum. ``scale``, ``trace``: (K,)."""
    scale, trace = np.asarray(scale, np.float64), np.asarray(trace, np.float64)
    return np.where(scale > 0, trace**2 / (d * np.where(scale > 0, scale, 1.0)), np.nan)


_KEYS = ("(B) stronger κ2 shrinks the eigenspectrum scale", "(C) stronger κ2 keeps the attention entropy higher")
SWEEP = "every κ2 (one vmapped sweep)"  # the model name of the schedule in config.json and the report


def write_report(res: SweepResult, run: RunDir, preset: str, others: dict | None = None) -> dict:
    """Figures, tables and the conclusions of the sweep into ``run``'s report; ``others`` (preset → the metrics
    :func:`write_report` returned for that companion setting) adds :func:`settings_section`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from geomjax.analysis import plots

    cfg = res.config
    k2 = list(cfg.kappa2s)
    steps = res.steps
    sm = max(1, steps.size // 100)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(k2)))
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    panels = (("loss", "training loss (cross-entropy, nats)", False), ("scale", "(B) eigenspectrum scale tr(W_QKᵀW_QK)", True),
              ("entropy", "(C) attention entropy (nats, training batch)", False))
    for ax, (key, title, logy) in zip(axes, panels):
        ax.set_ylabel(title)
        y = _smooth(res.train[key], sm)
        x = steps[: y.shape[0]] + (sm - 1)
        for j, k in enumerate(k2):
            ax.plot(x, y[:, j], color=colors[j], label=f"κ2={k:g}")
        ax.set_xlabel("iteration")
        if logy:
            ax.set_yscale("log")
        if key == "scale":  # the penalty's own minimum c·I: scale tr*²/d (κ2 = 0: 0, off a log axis)
            for j, k in enumerate(k2):
                if k > 0:
                    ax.axhline(penalty_minimum(cfg.kappa1, k, cfg.d_model)[1], color=colors[j], ls=":", lw=0.8)
    ev_steps = [e["step"] for e in res.evals]
    ppl = np.asarray([e["ppl"] for e in res.evals])
    for j, k in enumerate(k2):
        axes[3].plot(ev_steps, ppl[:, j], "o-", ms=3, color=colors[j], label=f"κ2={k:g}")
    axes[3].set_ylabel("(D) validation perplexity")
    axes[3].set_xlabel("iteration")
    axes[3].set_yscale("log")
    fig.legend(*axes[3].get_legend_handles_labels(), loc="outside right center", fontsize=7)
    rel6 = plots.save_to_run(fig, run, "fig6_training.png")

    i_max, i_0 = int(np.argmax(k2)), int(np.argmin(k2))
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    for ax, j, name in ((axes[0], i_max, f"LocATER κ1={cfg.kappa1:g}, κ2={k2[i_max]:g}"), (axes[1], i_0, f"κ2={k2[i_0]:g}")):
        im = ax.imshow(res.train["rho"][:, j, :].T, aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1,
                       extent=(steps[0], steps[-1] + 1, 0.5, cfg.seq_len + 0.5), interpolation="nearest")
        ax.set_ylabel("token i")
        ax.set_title(name, fontsize=9)
        plots.colorbar(fig, im, ax, "ρ_i")
    axes[1].set_xlabel("iteration")
    rel7 = plots.save_to_run(fig, run, "fig7_rho_heatmap.png")

    plumbing = preset == "smoke"
    checks, metrics = conclusions(res, statistics=not plumbing)
    s1 = Section("Setup")
    s1.paragraphs.append(
        f"Preset {preset}: 1-layer, 1-head post-LN transformer LM (ReLU, sinusoidal positions, √d-scaled embeddings, "
        f"untied output embedding as fairseq's transformer_lm default), d = {cfg.d_model} (embedding, attention, FFN), "
        f"T = {cfg.seq_len}, batch {cfg.batch_size}, Adam lr {cfg.optim.lr:g} {cfg.optim.schedule} with decoupled weight decay {cfg.optim.weight_decay:g} "
        f"on all parameters, dropout {cfg.dropout:g}, {cfg.init} initialisation, the penalty's "
        f"{'derivative as §6 prints it' if cfg.gradient == 'printed' else 'exact gradient'}, {cfg.steps} iterations, κ1 = {cfg.kappa1:g}, κ2 ∈ {k2} trained in one "
        f"vmapped job from the same initialisation and batches (seed {cfg.seed}). Vocabulary: {res.vocab_size} word types "
        f"({'all training words' if cfg.vocab_cap is None else f'the {cfg.vocab_cap - 1} most frequent training words'} + <unk>).")
    s1.paragraphs.append(
        f"Data: WikiText-2 word level, lines split on whitespace with </s> appended (fairseq binarisation). "
        + ("" if cfg.train_split == "train" else "Only valid.txt and test.txt exist offline (no train.txt), so ")
        + f"the model trains on the '{cfg.train_split}' split and perplexity is measured "
        f"on the '{cfg.valid_split}' split ({'all' if cfg.eval_batches is None else cfg.eval_batches} batches of non-overlapping "
        f"windows); batches are uniformly random windows of the training stream. W_QK = W_q W_kᵀ of the single head (no 1/√K "
        f"factor); ρ_i is the batch frequency of ⟨γ^i, ω⟩ + γ_0^i ∈ [0, 1] for the last query's attention row. "
        f"Training wall time: {res.seconds:.0f} s" + (f" (resumed at step {res.resumed_from})" if res.resumed_from else "")
        + f"; at the end, {machine_load()}.")
    dep = departures(cfg)
    if dep:
        s1.paragraphs.append(f"Differences from §7 in this preset: {'; '.join(dep)}.")
    s2 = Section("Fig. 6: training curves")
    s2.figure(rel6, "training loss, eigenspectrum scale, attention entropy, validation perplexity per κ2")
    d = cfg.d_model
    ident = identity_share(metrics["final_scale"], metrics["final_trace"], d)
    rows = [[f"{k:g}", float(metrics["final_scale"][j]), float(metrics["final_trace"][j]),
             penalty_minimum(cfg.kappa1, k, d)[0], float(ident[j]), float(metrics["final_train_entropy"][j]),
             float(metrics["final_val_entropy"][j]), float(metrics["final_val_ppl"][j]), float(metrics["best_val_ppl"][j]),
             float(metrics["rho_stripes_sd"][j])] for j, k in enumerate(k2)]
    s2.table(["κ2", "scale tr(W_QKᵀW_QK)", "tr(W_QK)", "tr at the penalty's minimum κ2·d/(κ1+κ2·d)",
              "tr(W_QK)²/(d·scale)", "entropy (train)", "entropy (valid)", "val ppl (final)", "val ppl (best)",
              "sd_i of mean ρ_i"], rows, caption="final values (train metrics: mean over the last 20 % of iterations)")
    s2.paragraphs.append(
        "The LocATER penalty alone is minimised by W_QK = c·I with tr(W_QK) = κ2·d/(κ1 + κ2·d) (so its scale "
        "κ1·tr(W_QKᵀW_QK) grows with κ2 at fixed κ1); the column next to tr(W_QK) gives that value, and the scale "
        "panel of the figure its scale tr*²/d (dotted, one line per κ2 > 0). tr(W_QK)²/(d·scale) is the share of the "
        "scale that the trace forces (Cauchy–Schwarz: tr(WᵀW) >= tr(W)²/d); 1 means W_QK is a multiple of the identity, "
        "the penalty's minimiser, and then the scale can only grow as the trace is pulled towards 1. The penalty acts on "
        "W_q W_kᵀ only: the key-dependent logit b_q·(x_j W_k) of the query bias is not penalised, so attention need not "
        "become uniform when W_q W_kᵀ → 0.")
    s3 = Section("Fig. 7: ρ_i per iteration")
    s3.figure(rel7, "ρ_i of the last query (batch frequency) at every iteration, largest κ2 (top) and κ2 = 0 (bottom)")
    rows = source_rows(checks)
    cmp = source_section(SOURCE, preset, f"d = {cfg.d_model}, T = {cfg.seq_len}, batch {cfg.batch_size}, lr {cfg.optim.lr:g}, "
                         f"{cfg.steps} iterations, κ1 = {cfg.kappa1:g}, κ2 ∈ {k2}, {cfg.init} initialisation, the "
                         f"penalty's {'printed' if cfg.gradient == 'printed' else 'exact'} gradient.", departures(cfg), rows)
    sched = schedule_section({SWEEP: cfg.effective_schedule()})
    metrics |= {"preset": preset, "seconds": res.seconds, "vocab_size": res.vocab_size, "plumbing_only": plumbing,
                "d_model": d, "kappa1": cfg.kappa1, "steps": cfg.steps, "load": machine_load()}
    extra = [settings_section({preset: metrics, **others})] if others else []
    run.write_report(f"LocATER on WikiText-2 ({preset})", [cmp, *extra, sched, s1, s2, s3])
    run.write_json("metrics.json", metrics)
    return metrics


def settings_section(by_preset: dict) -> Section:
    """The κ2 effect on the scale and the entropy at every setting run (preset → :func:`write_report`'s metrics):
    per setting and κ2 the final scale, tr(W_QK), the penalty's tr*, the identity share (:func:`identity_share`),
    the validation entropy and perplexity, the stripes' spread (Fig. 7), and the (B)/(C) verdicts, with one sentence
    per setting."""
    s = Section("The κ2 effect at other settings", [
        "Each setting is a complete sweep (its report in <out>/<preset>/). Whether the eigenspectrum scale shrinks with "
        "κ2 (Fig. 6B) is read at every one; tr(W_QK)²/(d·scale) = 1 means W_QK is the penalty's minimiser c·I, whose "
        "scale tr*²/d grows with κ2 — at any width, batch or length of training."])
    rows, says = [], []
    for name, m in by_preset.items():
        k2, d = np.asarray(m["kappa2"], np.float64), int(m["d_model"])
        ident = identity_share(m["final_scale"], m["final_trace"], d)
        for j, k in enumerate(k2):
            rows.append([name, d, f"{m['kappa1']:.3g}", f"{k:.3g}", float(m["final_scale"][j]), float(m["final_trace"][j]),
                         penalty_minimum(m["kappa1"], k, d)[0], float(ident[j]), float(m["final_val_entropy"][j]),
                         float(m["final_val_ppl"][j]), float(m["rho_stripes_sd"][j])])
        rep = m["reproduced"]
        i_max = int(np.argmax(k2))
        says.append(f"{name} (d = {d}, κ1 = {m['kappa1']:.3g}, {m['steps']} iterations, {m['seconds']:.0f} s of training): "
                    f"scale {m['final_scale'][int(np.argmin(k2))]:.3g} → {m['final_scale'][i_max]:.3g} from the smallest to the "
                    f"largest κ2, identity share {ident[i_max]:.2f} at the largest; (B) {rep[_KEYS[0]]}, (C) {rep[_KEYS[1]]}")
    s.paragraphs.append("; ".join(says) + ".")
    return s.table(["setting", "d", "κ1", "κ2", "scale", "tr(W_QK)", "tr*", "tr(W_QK)²/(d·scale)", "entropy (valid)",
                    "val ppl", "sd_i of mean ρ_i (Fig. 7)"], rows, caption="final values per setting (train metrics: mean over the last 20 % of iterations)")


def run_companions(preset: str, out: Path, *, seed: int, data_dir, progress: bool, stop_at) -> dict:
    """Train and report every companion setting of ``preset`` (:data:`COMPANIONS`) into ``out/<companion>``
    (resuming from its checkpoints); returns companion → its metrics."""
    others = {}
    for c in COMPANIONS.get(preset, ()):
        cfg = get_config(c, seed=seed)
        run = RunDir(out / c, command="localization")
        run.write_config({"preset": c, "locater": cfg}, schedules={SWEEP: cfg.effective_schedule()})
        res = run_sweep(cfg, run_dir=run.path / "train", data_dir=data_dir, progress=progress, stop_at=stop_at)
        others[c] = write_report(res, run, c)
    return others


def expected_cost(cfg: LocaterConfig, data_dir=None) -> str:
    """The sweep's expected training cost (:mod:`geomjax.train.cost`; every κ2 is one vmapped run of the same
    steps), as one sentence."""
    V = len(load_wikitext_words(cfg, data_dir).vocab)
    m = model_config(cfg, V)
    c = training_cost(*count_params(m), batch=cfg.batch_size, seq_len=cfg.seq_len, steps=cfg.steps,
                      n_layers=m.n_layers, d_model=m.d_model, n_heads=m.n_heads, vocab=V, runs=len(cfg.kappa2s))
    return f"{len(cfg.kappa2s)} κ2 values vmapped, vocabulary {V}: " + c.describe()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu", choices=PRESETS)
    ap.add_argument("--out", default=None, help="run directory (default runs/localization-<preset>)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--stop-at", type=int, default=None, help="stop early at this step (checkpointed; re-run resumes)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = get_config(args.preset, seed=args.seed)
    for c in (args.preset, *COMPANIONS.get(args.preset, ())):  # before training
        print(f"{c}: {expected_cost(get_config(c, seed=args.seed), args.data_dir)}")
    run = RunDir(args.out or f"runs/localization-{args.preset}", command="localization")
    others = run_companions(args.preset, run.path, seed=args.seed, data_dir=args.data_dir,
                            progress=not args.no_progress, stop_at=args.stop_at)
    run.write_config({"preset": args.preset, "locater": cfg},
                     schedules={SWEEP: cfg.effective_schedule()})
    res = run_sweep(cfg, run_dir=run.path / "train", data_dir=args.data_dir, progress=not args.no_progress, stop_at=args.stop_at)
    write_report(res, run, args.preset, others)
    print(f"report: {run.path / 'report.md'}")
    for c in conclusions(res, statistics=args.preset != "smoke")[0]:
        print(" | ".join(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
