"""Report sections of the clock blog / Nanda et al. analyses: figures and tables of every analysis of a
trained modular-addition model (:func:`geomjax.tools.clock_probe.analyze`), for ``geomjax verify --source clock``
(:func:`report_sections`, the report hook) and the grokking experiment (:func:`analysis_sections`).
"""

from __future__ import annotations

import numpy as np

from geomjax.theory import fourier as fx
from geomjax.analysis import plots
from geomjax.sources.clock.claims import claim_config, trained_analyses, trained_description, untrained
from geomjax.analysis.report import Section, schedule_section

__all__ = ["analysis_sections", "report_sections"]


def _plt():
    return plots.plt


def analysis_sections(run, an: dict, an_free: dict | None = None, *, title: str = "") -> tuple[list, dict]:
    """Report sections (with figures written into ``run``) for every analysis in ``an``
    (:func:`geomjax.tools.clock_probe.analyze`) and, optionally, the ReLU-free run ``an_free``.

    Returns:
      (list of :class:`geomjax.analysis.report.Section`, metrics dict).
    """
    tag = title or f"p{an['p']}"
    S, M = [], {}

    for sec in (_sec_training, _sec_spectra, _sec_circles, _sec_attention):
        sec(run, an, an_free, S, M, tag)
    if an["key"]:
        for sec in (_sec_petals, _sec_dihedral, _sec_mlp):
            sec(run, an, an_free, S, M, tag)
    for sec in (_sec_readout, _sec_sufficiency):
        sec(run, an, an_free, S, M, tag)
    return S, M


def _sec_training(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Training curves and grokking milestones (ReLU and ReLU-free runs). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = _plt()
    p = an["p"]
    # training curves (linear epochs; per-epoch train metrics where logged; milestones, anomalies, checkpoint)
    fig, ax = plt.subplots(1, 3, figsize=(14, 3.6))
    for a, name in ((an, "ReLU"), (an_free, "ReLU-free")):
        if a is None:
            continue
        h = a["history"]
        ls = "-" if name == "ReLU" else "--"
        dense = len(h.get("dense_epoch", ())) > 0
        te, tl, ta = ((h["dense_epoch"], h["dense_train_loss"], h["dense_train_acc"]) if dense
                      else (h["epoch"], h["train_loss"], h["train_acc"]))
        ax[0].semilogy(te, tl, "b" + ls, lw=0.7, label=f"train ({name})")
        ax[0].semilogy(h["epoch"], h["test_loss"], "r" + ls, lw=0.9, label=f"test ({name})")
        ax[1].plot(te, ta, "b" + ls, lw=0.7, label=f"train ({name})")
        ax[1].plot(h["epoch"], h["test_acc"], "r" + ls, lw=0.9, label=f"test ({name})")
        ax[2].plot(h["epoch"], h["sq_weights"], "k" + ls, label=f"Σ w² ({name})")
        ax[2].plot(h["epoch"], h["sq_W_E"], "g" + ls, label=f"Σ W_E² ({name})")
    for x_, t in zip(ax, ("cross-entropy", "accuracy", "sum of squared weights")):
        x_.set_xlabel("epoch"); x_.set_ylabel(t); x_.legend(fontsize=7)
    for ep_, lab in ((an["milestones"]["train_100"], "train 100%"), (an["milestones"]["test_99"], "test 99%")):
        if ep_ is not None:
            for x_ in ax[:2]:
                x_.axvline(ep_, color="0.4", lw=0.6, ls=":")
            ax[1].annotate(lab, (ep_, 0.5), rotation=90, fontsize=7, color="0.3", ha="right")
    for q in an.get("anomalies", []):
        for x_ in ax[:2]:
            x_.axvspan(q.start, q.recovered if q.recovered is not None else an["history"]["epoch"][-1],
                       color="orange", alpha=0.25, lw=0)
    if an.get("checkpoint") is not None:
        for x_ in ax:
            x_.axvline(an["checkpoint"], color="tab:green", lw=1.0)
    s = Section("Training: grokking")
    ms = an["milestones"]
    s.paragraphs.append(f"p = {p}. Train accuracy first reached 100% at epoch {ms['train_100']}, test accuracy first reached "
                        f"99% at epoch {ms['test_99']}; final train/test accuracy {an['history']['train_acc'][-1]:.4f} / "
                        f"{an['history']['test_acc'][-1]:.4f}; training wall time {an['seconds']:.0f} s.")
    if an_free is not None:
        mf = an_free["milestones"]
        s.paragraphs.append(f"ReLU-free variant: train 100% at epoch {mf['train_100']}, test 99% at epoch {mf['test_99']}, final "
                            f"test accuracy {an_free['history']['test_acc'][-1]:.4f}.")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_training.png"),
             "Loss (log y), accuracy and sum of squared weights over epochs; dotted: milestones; orange: detected "
             "training anomalies (ReLU run); green: the analysed checkpoint")
    S.append(s)
    M["milestones"] = ms


def _sec_spectra(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Fourier spectra of W_E and W_L, key frequencies, Nanda's neuron frequencies (blog §5). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = plots.plt
    p, key = an["p"], an["key"]
    # Fourier spectra, per frequency (cos and sin rows side by side; the constant row apart)
    fig, ax = plt.subplots(2, 1, figsize=(12, 6))
    for x_, c, t in ((ax[0], an["W_E_coeffs"], "W_E"), (ax[1], an["W_L_coeffs"], "W_L = W_U W_out")):
        nrm = np.linalg.norm(c, axis=1)
        K = (p - 1) // 2
        f = np.arange(1, K + 1)
        x_.bar([0], nrm[:1], color="0.5", width=0.8, label="constant")
        x_.bar(f - 0.2, nrm[1: 2 * K + 1: 2], color="tab:blue", width=0.4, label="cos")
        x_.bar(f + 0.2, nrm[2: 2 * K + 1: 2], color="tab:orange", width=0.4, label="sin")
        x_.set_ylabel(f"‖Fourier coefficient‖ of {t}")
        plots.frequency_axis(x_, key)
        x_.legend(fontsize=7, loc="upper right")
    s = Section("Fourier spectra of W_E and W_L; key frequencies")
    s.paragraphs.append(f"Key frequencies (strong in both W_E and W_L by the blog §5 rule, > 10× median energy): {key}; "
                        f"W_E alone: {an.get('key_W_E', key)}; W_L alone: {an['key_W_L']}"
                        + (f"; {an['key_W_E_only']} are strong in W_E only (not read out, so not called key)"
                           if an.get("key_W_E_only") else "") + ". "
                        f"Nanda's per-neuron 3×3 variance fractions give winners {an['key_neurons']} (all live neurons; counts "
                        f"{an['neuron_counts']}) and {an['key_neurons_85']} among neurons with fraction ≥ 0.85. The key frequencies "
                        f"hold {an['key_fraction_W_E']:.3f} of W_E's squared Fourier norm and {an['key_fraction_W_L']:.3f} of W_L's "
                        f"(random: 2k/(p−1) = {an['random_fraction_expected']:.3f}; a random Gaussian W_E gives "
                        f"{an['random_W_E_fraction']:.3f}).")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_spectra.png"), "Fourier coefficient norms of W_E and W_L per frequency "
             "(key frequencies marked)")
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.2))
    ax[0].hist(an["neuron_freq"][an["neuron_freq"] > 0], bins=np.arange(0.5, p // 2 + 1.5), color="tab:purple")
    plots.frequency_axis(ax[0], key, label="winning frequency"); ax[0].set_ylabel("neurons")
    ax[1].hist(an["neuron_fraction"], bins=40, color="tab:gray"); ax[1].set_xlabel("variance fraction of the winner")
    ax[1].set_ylabel("neurons")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_neuron_freqs.png"), "Nanda et al.'s per-neuron frequencies")
    S.append(s)
    M.update(key=key, key_neurons=an["key_neurons"], key_fraction_W_E=an["key_fraction_W_E"])


def _sec_circles(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """W_E and W_L circles on each frequency's Fourier-inferred 2D basis (blog §5.1-5.2). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = plots.plt
    p, key = an["p"], an["key"]
    # circles
    eonly = an.get("key_W_E_only", [])
    ks = key + eonly + an["random_freqs"]
    fig, ax = plt.subplots(2, len(ks), figsize=(2.8 * len(ks), 5.6), squeeze=False)
    rows = []
    for r, name in enumerate(("W_E", "W_L")):
        for c, k in enumerate(ks):
            d = an["circles"][(name, k)]
            kind = "key" if k in key else "W_E only" if k in eonly else "random"
            sc = ax[r, c].scatter(d["xy"][:, 0], d["xy"][:, 1], c=(k * np.arange(p)) % p, cmap="twilight", s=8)
            ax[r, c].set_title(f"{name}, k={k} ({kind})\nR²={d['r2']:.2f}", fontsize=8)
            ax[r, c].set_aspect("equal", "datalim")
            rows.append([name, k, kind, f"{d['r2']:.3f}", f"{d['norm']:.3g}"])
    plots.colorbar(fig, sc, ax[:, -1], "phase k·x mod p")
    s = Section("Circles: W_E and W_L on each frequency's Fourier-inferred 2D basis")
    s.paragraphs.append("Points are tokens 0..p−1 coloured by k·x mod p. R² is the fit of a frequency-k ellipse; random "
                        "frequencies give noise of small radius.")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_circles.png"), "Key-frequency circles (R² near 1) and random frequencies (noise)")
    s.table(["matrix", "k", "kind", "circle R²", "RMS radius"], rows)
    S.append(s)


def _sec_attention(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Periodic attention maps and their spectra (blog §6). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = plots.plt
    key = an["key"]
    # attention
    H = len(an["attention"])
    fig, ax = plt.subplots(2, H, figsize=(3.2 * H, 6), squeeze=False)
    for h, d in enumerate(an["attention"]):
        im = ax[0, h].imshow(d["map"], cmap="viridis", origin="lower", vmin=0, vmax=1)
        ax[0, h].set_xlabel("b"); ax[0, h].set_ylabel("a")
        ax[0, h].set_title(f"head {h}: attention '=' → a", fontsize=8)
        kk = np.arange(len(d["energy_a"]))
        ax[1, h].bar(kk[1:] - 0.2, np.sqrt(d["energy_a"][1:]), width=0.4, label="along a")
        ax[1, h].bar(kk[1:] + 0.2, np.sqrt(d["energy_b"][1:]), width=0.4, label="along b")
        plots.frequency_axis(ax[1, h], key); ax[1, h].set_ylabel("DFT norm")
        ax[1, h].set_title(f"dominant k={d['dominant']}", fontsize=8, pad=12); ax[1, h].legend(fontsize=6)
    plots.colorbar(fig, im, ax[0, :], "attention weight on a")
    s = Section("Periodic attention")
    s.paragraphs.append("Last-row attention weight on token a over all (a, b) — the blog's attention-map examples (§6) — "
                        "and its Fourier norms per frequency along a and b.")
    s.table(["head", "dominant frequency", "variance fraction in key 2D components"],
            [[h, d["dominant"], f"{d['key_fraction']:.3f}"] for h, d in enumerate(an["attention"])])
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_attention.png"), "Attention maps are periodic in a and b")
    S.append(s)

    # petals: predictions


def _sec_petals(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Predicted and actual petals; per-head o petals sum to circles (blog §6.1-7). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = plots.plt
    p, key = an["p"], an["key"]
    H = len(an["attention"])
    fe = key[: min(2, len(key))]
    fig, ax = plt.subplots(len(fe), 3, figsize=(9, 3 * len(fe)), squeeze=False)
    for i, e in enumerate(fe):
        for j, (fa, ph) in enumerate(((e, 0.0), (e, np.pi / 2), (key[-1] if key[-1] != e else key[0], 0.0))):
            xy = np.asarray(fx.predicted_petal(p, e, fa, an["a0"], ph, n=8 * p))
            ax[i, j].plot(xy[:, 0], xy[:, 1], lw=0.8); ax[i, j].set_aspect("equal", "datalim")
            ax[i, j].set_title(f"embedding k={e}, attention k={fa}, phase {ph:.2f}", fontsize=8)
    s = Section("Petals: predicted and actual per-head outputs; head sums are circles")
    s.paragraphs.append(f"Predicted curves z(b) = α(b)·x_a + (1 − α(b))·x_b with α periodic (blog §6.1); actual per-head z "
                        f"vectors for a = {an['a0']} projected with pinv(W_V)·basis (blog §6.2); per-head o vectors and their "
                        "sum on the summed o vectors' Fourier plane, with the spectrum of the sum (blog §7).")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_petals_predicted.png"), "Predicted petals (attention frequency = / ≠ embedding frequency)")
    fig, ax = plt.subplots(len(key), H, figsize=(2.8 * H, 2.8 * len(key)), squeeze=False)
    for i, k in enumerate(key):
        for h in range(H):
            z = an["petals"][k]["z"][h]
            sc = ax[i, h].scatter(z[:, 0], z[:, 1], c=(k * np.arange(p)) % p, cmap="twilight", s=6)
            ax[i, h].set_title(f"head {h} (att k={an['attention'][h]['dominant']}) on k={k} plane", fontsize=7)
    plots.colorbar(fig, sc, ax[:, -1], "phase k·b mod p")
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_petals_actual.png"), "Actual per-head z on the W_E circle planes (through "
             "pinv(W_V)), one point per b coloured by its phase k·b mod p")
    fig, ax = plt.subplots(len(key), 2, figsize=(8, 3 * len(key)), squeeze=False)
    rows = []
    for i, k in enumerate(key):
        d = an["petals"][k]
        o = plots.phase_order(p, k)
        for h in range(H):  # per-head petals as points (their phase mixes two frequencies), the sum as a curve
            ax[i, 0].scatter(d["o_heads"][h][:, 0], d["o_heads"][h][:, 1], s=4, label=f"head {h}")
        ax[i, 0].plot(d["o_total"][o, 0], d["o_total"][o, 1], "r-", lw=1.5, label="sum")
        ax[i, 0].set_aspect("equal", "datalim")
        ax[i, 0].set_title(f"o vectors, k={k} plane (a={an['a0']})", fontsize=8); ax[i, 0].legend(fontsize=6)
        sp = d["spectrum_total"]
        fr = np.fft.fftfreq(p, 1.0 / p).astype(int)
        ax[i, 1].bar(fr, np.sqrt(sp), width=0.8); ax[i, 1].set_title(f"|DFT| of summed projection (x+iy), k={k}", fontsize=8)
        plots.frequency_axis(ax[i, 1], [k, -k], label="signed frequency"); ax[i, 1].set_ylabel("|DFT|")
        rows.append([k, f"{d['total_freq_fraction']:.3f}", d["total_peak_freq"],
                     ", ".join(f"{v:.2f}" for v in d["head_freq_fraction"])])
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_petals_sum.png"), "Per-head o petals (points) sum to a circle (the "
             "curve joins b in the order of the phase k·b mod p); spectrum of the sum")
    s.table(["k", "summed: single-frequency fraction", "summed: peak frequency", "per head: single-frequency fraction"], rows)
    S.append(s)


def _sec_dihedral(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Dihedral angles between W_E and o circle planes (blog §8). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = _plt()
    key = an["key"]
    # dihedral angles
    fig, ax = plt.subplots(figsize=(4.5, 3.8))
    im = ax.imshow(an["dihedral_min_angle"], vmin=0, vmax=90, cmap="magma")
    ax.set_xticks(range(len(key)), [f"o k={k}" for k in key], fontsize=7)
    ax.set_yticks(range(len(key)), [f"W_E k={k}" for k in key], fontsize=7)
    fig.colorbar(im, ax=ax, label="smallest principal angle (deg)")
    s = Section("Dihedral angles between W_E and o circle planes")
    s.paragraphs.append("Smallest principal angle between each W_E circle plane and each o circle plane; principal angles "
                        "between the span of all W_E circle planes and each o plane: "
                        + "; ".join(f"k={k}: {[round(float(x), 1) for x in v]}" for k, v in an["dihedral_all"].items()))
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_dihedral.png"), "Principal angles (0° = same plane)")
    S.append(s)


def _sec_mlp(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """MLP biases, W_in columns, activation circles, revolution vs rotation (blog §8-9). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = _plt()
    key = an["key"]
    # MLP
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.4))
    ax[0].plot(an["b_in_sorted"], ".", ms=3); ax[0].axhline(0, color="k", lw=0.5)
    ax[0].axhline(-0.25 * np.max(np.abs(an["b_in_sorted"])), color="r", lw=0.5, ls="--")
    ax[0].set_title(f"sorted b_in: {an['n_negative_b_in']} below −0.25·max|b_in|", fontsize=9)
    k0 = key[0]
    w = an["mlp"][k0]["W_in_xy"]
    ax[1].scatter(w[:, 0], w[:, 1], s=4); ax[1].set_title(f"W_in columns in the o plane of k={k0}", fontsize=9)
    s = Section("MLP: biases, W_in columns, activations in circle planes, revolution vs rotation")
    s.paragraphs.append(f"{an['frac_pre_negative']:.3f} of all MLP pre-activations (p² inputs × neurons) are negative, i.e. "
                        "zeroed by the ReLU." + (f" Removing the ReLU from the trained model gives accuracy "
                                                 f"{an['acc_relu_removed']:.4f} (with it: {an['final_acc_all']:.4f})."
                                                 if "acc_relu_removed" in an else ""))
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_mlp_bias_win.png"), "Sorted b_in and W_in columns in a circle plane")
    fig, ax = plt.subplots(len(key), 3, figsize=(11, 3.2 * len(key)), squeeze=False)
    rows = []
    for i, k in enumerate(key):
        d = an["mlp"][k]
        ax[i, 0].semilogy(d["svals"][:12], "o-", ms=3); ax[i, 0].set_title(f"k={k}: singular values of stacked bases", fontsize=8)
        for a, xy in d["post_xy"].items():
            ax[i, 1].plot(xy[:, 0], xy[:, 1], ".", ms=2, label=f"a={a}")
            ax[i, 2].plot(xy[:, 2], xy[:, 3], ".", ms=2, label=f"a={a}")
        ax[i, 1].set_title("MLP activations, PCs 1–2 (revolution)", fontsize=8); ax[i, 1].legend(fontsize=6)
        ax[i, 2].set_title("PCs 3–4 (rotation)", fontsize=8)
        rows.append([k, f"{d['spread12']:.3f}", f"{d['spread34']:.3f}"])
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_mlp_pcs.png"), "MLP activation circles for several a in PCs 1–2 and 3–4")
    s.table(["k", "centre spread / radius, PCs 1–2", "centre spread / radius, PCs 3–4"], rows,
            "How far the per-a circle centres move relative to the radius (revolution: large; rotation: small)")
    S.append(s)


def _sec_readout(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Correct-logit ranks; restricted and excluded loss over training (blog §10; Nanda §5.1). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = _plt()
    # read-out
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.4))
    bins = [(0, 1, "1st"), (1, 2, "2nd"), (2, 5, "3rd–5th"), (5, 20, "6th–20th"), (20, 10**9, ">20th")]
    for j, (r_, lab) in enumerate(((an["rank_full"], "full logits"), (an["rank_W_L"], "MLP path W_L·post only"))):
        fr_ = [np.mean((r_ >= lo) & (r_ < hi)) for lo, hi, _ in bins]
        ax[0].bar(np.arange(len(bins)) + (j - 0.5) * 0.4, fr_, width=0.4, label=lab)
    ax[0].set_xticks(range(len(bins)), [b[2] for b in bins]); ax[0].set_xlabel("rank of the correct logit")
    ax[0].set_ylabel("fraction of the p² inputs"); ax[0].legend(fontsize=7)
    s = Section("Read-out: rank of the correct logit; restricted and excluded loss over training")
    s.paragraphs.append(f"Correct logit ranked first for {np.mean(an['rank_full'] == 0):.4f} of the p² inputs (full logits) and "
                        f"{np.mean(an['rank_W_L'] == 0):.4f} with the MLP path alone (W_L rows · post-ReLU activations); median "
                        f"rank on the MLP path {np.median(an['rank_W_L']):.0f}.")
    if an.get("progress"):
        pr = an["progress"]
        e = np.maximum([q["epoch"] for q in pr], 1)
        for name, c in (("train", "b"), ("test", "r"), ("restricted", "g"), ("excluded", "m")):
            ax[1].loglog(e, [max(q[name], 1e-12) for q in pr], c + ".-", label=name)
        ax[1].set_xlabel("epoch"); ax[1].set_ylabel("cross-entropy"); ax[1].legend(fontsize=7)
        ax[1].set_title("Nanda's progress measures (from snapshots)")
        s.table(["epoch", "train", "test", "restricted", "excluded", "Σ w²"],
                [[q["epoch"], f"{q['train']:.3g}", f"{q['test']:.3g}", f"{q['restricted']:.3g}", f"{q['excluded']:.3g}",
                  f"{q['sq_weights']:.4g}"] for q in pr[:: max(1, len(pr) // 12)]])
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_readout.png"), "Correct-logit ranks; restricted/excluded loss")
    S.append(s)


def _sec_sufficiency(run, an: dict, an_free: dict | None, S: list, M: dict, tag: str) -> None:
    """Sufficiency of one circle, two coprime circles and all (blog §11). Appends to ``S`` (sections) and ``M`` (metrics)."""

    plt = _plt()
    # sufficiency: logit-restricted (Nanda §5.1) and embedding-restricted accuracies, side by side
    suf, emb = an["sufficiency"], an["sufficiency_embed"]
    keys = [str(k) for k in suf["single"]] + list(suf["pairs"]) + ["all"]
    lg = {**{str(k): v for k, v in suf["single"].items()}, **suf["pairs"], "all": suf["all"]}
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(keys)), 3.4))
    xs = np.arange(len(keys))
    ax.bar(xs - 0.2, [lg[k] for k in keys], width=0.4, label="logit-restricted (Nanda §5.1)")
    ax.bar(xs + 0.2, [emb.get(k, np.nan) for k in keys], width=0.4, label="embedding-restricted (W_E projected)")
    ax.axhline(0.99, color="r", ls="--", lw=0.7)
    ax.set_xticks(xs, [f"{{{k}}}" for k in keys], rotation=60); ax.set_ylabel("accuracy on all p² pairs")
    ax.set_xlabel("key frequencies kept"); ax.legend(fontsize=7)
    s = Section("Sufficiency: one circle, two coprime circles, all")
    s.paragraphs.append("Accuracy over all p² pairs when only the given key frequencies are kept, in two ways: the logits "
                        "restricted to them (Nanda §5.1) and the model run with W_E projected on them (the blog's "
                        "reading). Both are in the table and the figure.")
    s.table(["frequencies", "logit-restricted accuracy", "embedding-restricted accuracy"],
            [[f"{{{k}}}", f"{lg[k]:.3f}", f"{emb[k]:.3f}" if k in emb else "—"] for k in keys])
    s.figure(plots.save_to_run(fig, run, f"clock_{tag}_sufficiency.png"), "Accuracy restricted to subsets of key frequencies")
    S.append(s)
    M.update(sufficiency=suf, sufficiency_embed=emb)


def report_sections(run, *, budget: str = "quick", seed: int = 0):
    """Figures and tables of every clock analysis for ``geomjax verify --source clock``: trains (or
    loads from the cache) the budget's ReLU and ReLU-free runs (:func:`geomjax.sources.clock.claims.claim_config`), the
    same analyses the claims of the run read (:func:`geomjax.sources.clock.claims.trained_analyses`)."""
    an, free = trained_analyses(budget, seed)
    head = Section("Clock: what was trained")
    head.paragraphs.append(trained_description(budget) + "; the ReLU-free variant uses the same recipe with activation 'none'.")
    head.paragraphs.extend(f"Not shown: {untrained(budget, relu)}." for relu, a in ((True, an), (False, free)) if a is None)
    if an is None:
        return [head], {"trained": {"ReLU": False, "ReLU-free": free is not None}}
    sections, metrics = analysis_sections(run, an, free, title=f"{budget}")
    for name, a in (("ReLU", an), ("ReLU-free", free)):
        if a is not None and a.get("stopped") is not None:
            st = a["stopped"]
            head.paragraphs.append(f"The {name} run stopped at epoch {st['step']} ({st['by']}: {st['reason']}).")
    metrics["stopped"] = {"ReLU": an.get("stopped"), "ReLU-free": None if free is None else free.get("stopped")}
    metrics["trained"] = {"ReLU": True, "ReLU-free": free is not None}
    metrics["effective_schedule"] = {name: claim_config(budget, relu, seed).effective_schedule()
                                     for name, relu in (("ReLU", True), ("ReLU-free", False))}
    return [head, schedule_section(metrics["effective_schedule"])] + sections, metrics
