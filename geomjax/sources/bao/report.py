"""Report sections of Bao, Hataya & Karakida (2024): Figs. 2-5 for ``geomjax verify --source bao``
(:func:`report_sections`, the report hook) — ρ(θ) of eq. (6) on a grid of ξ, η (printed and corrected
variance), the localization regime of Lemma 2, Zhai et al.'s entropy bound (eq. (9)) and the Fig. 5
simulation of ρ_i and attention entropy (:func:`geomjax.theory.localization.fig5_simulation`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import localization as loc
from geomjax.analysis import plots
from geomjax.sources.bao.claims import nu_star
from geomjax.analysis.report import Section

__all__ = ["report_sections"]

plt = plots.plt  # pyplot on the Agg backend (geomjax.analysis.plots sets it)


def _figure_section(run, fig, name: str, title: str, paragraph: str, caption: str, table=None) -> Section:
    """Save ``fig`` as ``figures/<name>`` of ``run`` and return the Section ``title``: ``paragraph``, the
    optional ``table`` (header, rows), then the figure with ``caption``."""
    rel = plots.save_to_run(fig, run, name)
    s = Section(title)
    s.paragraphs.append(paragraph)
    if table is not None:
        s.table(*table)
    s.figure(rel, caption)
    return s


def _fig2_section(run, theta):
    """Bao Fig. 2 (ρ(θ) for a grid of ξ, η; printed and corrected variance) as a report Section."""
    xis = (-10.0, -5.0, -1.0, 0.0, 1.0, 5.0, 10.0)
    etas = (0.001, 0.1, 0.5, 1.0, 2.0, 5.0)
    fig, axes = plt.subplots(2, len(xis), figsize=(2.3 * len(xis), 4.8), sharey=True, squeeze=False)
    with jax.enable_x64(True):
        for r, form in enumerate(("printed", "corrected")):
            for c, xi in enumerate(xis):
                ax = axes[r, c]
                for eta in etas:
                    ax.plot(theta, np.asarray(loc.rho_theta(jnp.asarray(theta), xi, eta, form)), label=f"η={eta:g}")
                ax.set_title(f"ξ={xi:g} ({form})", fontsize=8)
                ax.set_xlabel("θ = i/T", fontsize=8)
        axes[0, 0].set_ylabel("ρ(θ)")
        axes[1, 0].set_ylabel("ρ(θ)")
        axes[0, -1].legend(fontsize=6)
    return _figure_section(
        run, fig, "bao_fig2_rho_grid.png", "Bao Fig. 2: ρ(θ) for a grid of ξ and η",
        "Eq. (6) as printed (top; variance profile 2θ² + 7/12) and with the corrected profile 2θ² − 2θ + 7/12 "
        "(bottom; bao.lemma1.variance). The qualitative picture (late/early-site focus for large |ξ| and small η, "
        "middle-site focus for ξη > 2, vanishing signal for large η) is the same; the corrected profile is symmetric about θ = ½.",
        "ρ(θ; ξ, η), eq. (6)")


def _fig3_section(run, theta):
    """Bao Fig. 3 (the localization regime, Lemma 2) as a report Section."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    rows = []
    with jax.enable_x64(True):
        for xi, eta in ((128.0, 0.01), (512.0, 0.01)):
            for form, ls in (("printed", "-"), ("corrected", "--")):
                y = np.asarray(loc.rho_theta(jnp.asarray(theta), xi, eta, form))
                ax.plot(theta, y, ls, label=f"ξ={xi:g}, η={eta:g} (ξη={xi * eta:g}, {form})")
                support = theta[y > 0.5]
                rows.append([xi, eta, xi * eta, form, float(support.min()) if support.size else float("nan"),
                             float(support.max()) if support.size else float("nan")])
    ax.set_xlabel("θ")
    ax.set_ylabel("ρ(θ)")
    ax.legend(fontsize=6)
    return _figure_section(
        run, fig, "bao_fig3_localization.png", "Bao Fig. 3: localization regime",
        "ξη = 1.28 < 2 keeps the late-site indicator; ξη = 5.12 > 2 localizes ρ on [½, ½ + 1/(ξη)] (Lemma 2). "
        "(The paper's caption says η = 0.02 for ξη = 5.12 with ξ = 512; η = 0.01 is used for both.)",
        "ρ(θ) in the localization regime", (["ξ", "η", "ξη", "variance", "θ_min (ρ>½)", "θ_max (ρ>½)"], rows))


def _fig4_section(run, theta):
    """Bao Fig. 4 (Zhai et al.'s entropy bound, eq. (9)) as a report Section."""
    nu = np.linspace(0.0, 30.0, 601)
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    rows = []
    with jax.enable_x64(True):
        for T in (10, 100, 1000):
            line = ax.plot(nu, np.asarray(loc.zhai_bound(jnp.asarray(nu), T)), label=f"eq. (9) printed, T={T}")[0]
            ax.plot(nu, np.asarray(loc.one_vs_rest_entropy(jnp.asarray(nu), T)), "--", color=line.get_color(),
                    label=f"one-vs-rest entropy (gap ν), T={T}")
            ax.axhline(math.log(T), color=line.get_color(), lw=0.6, ls=":")
            rows.append([T, math.log(T), float(np.max(np.asarray(loc.zhai_bound(jnp.asarray(nu), T)))), nu_star(T)])
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("ν")
    ax.set_ylabel("entropy (nats)")
    ax.legend(fontsize=6)
    return _figure_section(
        run, fig, "bao_fig4_entropy_bound.png", "Bao Fig. 4: Zhai et al.'s entropy lower bound (eq. (9))",
        "Solid: eq. (9) as printed; dotted: ln T, the largest possible entropy; dashed: the entropy of one logit ν "
        "above T − 1 equal ones (the bound without the e^{−ν/2} typo). The printed curve exceeds ln T for ν < ν*(T), "
        "so it cannot be a lower bound there (bao.eq9.printed).",
        "eq. (9)", (["T", "ln T", "max of printed bound", "ν*(T)"], rows))


def _fig5_section(run, budget: str, seed: int, metrics: dict):
    """Bao Fig. 5 (simulated ρ_i and attention entropy) as a report Section; fills ``metrics``."""
    n_seq = 300 if budget == "quick" else 3000
    s5 = Section("Bao Fig. 5: simulated ρ_i and attention entropy")
    s5.paragraphs.append(f"{n_seq} random walks of 40 tokens (Assumption 1), d = 128, λ = √d, 10 draws of W_QK = B diag(w) Bᵀ per "
                         f"eigenvalue (mean, scale) pair, w ~ N(mean, scale²); thin lines: draws, bold: their mean. Right: attention "
                         "entropy of S(X W_QK Xᵀ/λ) (mean over rows and sequences; ln 40 = 3.69).")
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), gridspec_kw={"width_ratios": [2, 1]})
    for r, aniso in enumerate((False, True)):
        res = loc.fig5_simulation(jax.random.fold_in(jax.random.key(seed), 5 + r), n_seq=n_seq, anisotropic=aniso)
        ax = axes[r, 0]
        colors = plt.cm.viridis(np.linspace(0, 0.9, len(res["pairs"])))
        i = np.arange(1, 41)
        table = []
        for p_, (m, s) in enumerate(res["pairs"]):
            for dr in res["rho"][p_]:
                ax.plot(i, dr, color=colors[p_], lw=0.3, alpha=0.5)
            ax.plot(i, res["rho"][p_].mean(0), color=colors[p_], lw=2, label=f"mean {m:g}, scale {s:g}")
            table.append(["anisotropic" if aniso else "isotropic", m, s, float(res["xi"][p_].mean()), float(res["eta"][p_].mean()),
                          float(res["entropy"][p_].mean()), float(res["entropy"][p_].std()),
                          float(res["rho"][p_].mean(0).max() - res["rho"][p_].mean(0).min())])
        ax.set_title(("anisotropic" if aniso else "isotropic") + " Σ", fontsize=9)
        ax.set_xlabel("token i")
        ax.set_ylabel("ρ_i")
        ax.legend(fontsize=6, ncol=3)
        ent = res["entropy"].mean(1).reshape(len(loc.FIG5_MEANS), len(loc.FIG5_SCALES))
        axe = axes[r, 1]
        im = axe.imshow(ent, origin="lower", cmap="magma")
        axe.set_xticks(range(len(loc.FIG5_SCALES)), [f"{s:g}" for s in loc.FIG5_SCALES])
        axe.set_yticks(range(len(loc.FIG5_MEANS)), [f"{m:g}" for m in loc.FIG5_MEANS])
        axe.set_xlabel("eigenvalue scale")
        axe.set_ylabel("eigenvalue mean")
        for a in range(ent.shape[0]):
            for b in range(ent.shape[1]):
                axe.text(b, a, f"{ent[a, b]:.2f}", ha="center", va="center", fontsize=8,
                         color="k" if ent[a, b] > 0.5 * (ent.min() + ent.max()) else "w")
        fig.colorbar(im, ax=axe, fraction=0.046)
        s5.table(["Σ", "mean", "scale", "ξ (avg)", "η (avg)", "entropy", "entropy sd", "ρ range (max−min)"], table,
                 caption=("anisotropic" if aniso else "isotropic") + " Σ")
        metrics["fig5_" + ("aniso" if aniso else "iso")] = {"pairs": res["pairs"], "entropy": res["entropy"].mean(1),
                                                             "xi": res["xi"].mean(1), "eta": res["eta"].mean(1)}
    rel = plots.save_to_run(fig, run, "bao_fig5_simulation.png")
    s5.figure(rel, "Fig. 5: ρ_i (left) and attention entropy (right), isotropic (top) and anisotropic (bottom) Σ")
    return s5


def report_sections(run, *, budget: str, seed: int):
    """Figs. 2-5 of Bao et al. for the ``verify`` report (ρ(θ) grids, localization regime, eq. (9), Fig. 5 simulation).

    Returns:
      (list of :class:`geomjax.analysis.report.Section`, metrics dict).
    """
    metrics: dict = {}
    theta = np.linspace(0.0, 1.0, 201)
    sections = [_fig2_section(run, theta), _fig3_section(run, theta), _fig4_section(run, theta),
                _fig5_section(run, budget, seed, metrics)]
    return sections, metrics
