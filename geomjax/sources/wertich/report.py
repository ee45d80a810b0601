"""Report sections of Wertich (2024), the figures of ``geomjax verify --source wertich``: Fig. 5.1 (averaged
SLERP KL curve, fitted a·cos(πt/2 + b) + c and residuals, residual versus n and l), the Marchenko–Pastur
histogram against the printed and the corrected density, softmax entropy versus the scale α, and token
diversity / attention entropy versus depth in random attention stacks. One function per section;
:func:`report_sections` is the report hook."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import gaussian as G
from geomjax.analysis import plots
from geomjax.sources.wertich.ch5 import FIG5_1_N, FIG5_1_PAIRS, SLERP_T, fig51_curves
from geomjax.sources.wertich.ch6 import MP_HIST_N, mp_hist_sample
from geomjax.sources.wertich.ch7 import STACK_D, STACK_LAYERS, STACK_T, STACK_VARIANTS
from geomjax.analysis.report import Section

__all__ = ["ReportSizes", "report_sections"]


@dataclasses.dataclass(frozen=True)
class ReportSizes:
    """Sizes of the report's quick-budget figures (the full budget uses larger fixed counts)."""

    fig5_1_n: int = FIG5_1_N
    fig5_1_pairs: int = FIG5_1_PAIRS
    grid_n: tuple[int, ...] = (4, 8, 16, 64, 256)  # Fig. 5.1 residual versus n ...
    grid_l: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)  # ... and l
    alpha_ns: tuple[int, ...] = (16, 64, 256)  # softmax entropy versus α
    mp_hist_n: int = MP_HIST_N
    stack_layers: int = STACK_LAYERS
    stack_variants: tuple[str, ...] = tuple(STACK_VARIANTS)


def report_sections(run, *, budget: str = "quick", seed: int = 0, sizes: ReportSizes = ReportSizes()):
    """Figures for the verify report: Fig. 5.1 reproduction (fit + residuals, residual vs n and l),
    Marchenko–Pastur histogram vs density, softmax entropy vs α, token diversity vs depth.

    Args:
      run: the :class:`geomjax.analysis.report.RunDir` the figures are written into.
      budget: "quick" or "full" (more pairs, matrices and seeds).
      seed: base seed of every figure.
      sizes: the quick-budget sizes (tests pass smaller ones).

    Returns:
      (list of :class:`geomjax.analysis.report.Section`, metrics dict).
    """
    full = budget == "full"
    s51, m51 = _fig5_1_section(run, plots, sizes, full, seed)
    smp, mmp = _marchenko_pastur_section(run, plots, sizes, full, seed)
    salpha = _alpha_entropy_section(run, plots, sizes, full, seed)
    sstack, rows = _attention_stack_section(run, plots, sizes, full, seed)
    return [s51, smp, salpha, sstack], {"fig5_1": m51, "marchenko_pastur": mmp, "uniform_mixture": rows}


def _fig5_1_section(run, plots, sizes: ReportSizes, full: bool, seed: int):
    """Fig. 5.1: the averaged KL curve, its cosine fit and residuals; the residual versus n and l."""
    plt = plots.plt
    pairs = 20000 if full else sizes.fig5_1_pairs
    mean, sem, fit, zmax = G.fit_cosine_average(SLERP_T, fig51_curves(sizes.fig5_1_n, 1.0, pairs, seed))
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(SLERP_T, mean, "k.", ms=3, label=f"mean KL over {pairs} orthogonal pairs (n={sizes.fig5_1_n}, l=1)")
    ax[0].fill_between(SLERP_T, mean - 2 * sem, mean + 2 * sem, color="0.8")
    fitted = fit.a * np.cos(np.pi * SLERP_T / 2 + fit.b) + fit.c
    ax[0].plot(SLERP_T, fitted, "r-", lw=1, label=f"{fit.a:.4g}·cos(πt/2 + {fit.b:.3f}) + {fit.c:.4g}")
    ax[0].set_xlabel("t"); ax[0].set_ylabel("D_KL(Sm(w) ‖ Sm(SLERP(v,w,t)))"); ax[0].legend(fontsize=7)
    ax[1].plot(SLERP_T, mean - fitted, "b-", label="residual")
    ax[1].fill_between(SLERP_T, -5 * sem, 5 * sem, color="0.85", label="±5 sem")
    ax[1].set_xlabel("t"); ax[1].legend(fontsize=7)
    rel = plots.save_to_run(fig, run, "wertich_fig5_1.png")
    rows = []
    grid_pairs = 400 if not full else 4000
    for n in sizes.grid_n:
        for l in sizes.grid_l:
            m_, s_, f_, z_ = G.fit_cosine_average(SLERP_T, fig51_curves(n, l, grid_pairs, seed))
            rows.append([n, l, f"{f_.max_abs / (m_.max() - m_.min()):.3g}", f"{z_:.3g}", f"{f_.a:.4g}", f"{f_.b:.4g}", f"{f_.c:.4g}"])
    s = Section("Wertich Fig. 5.1: SLERP KL curve and the cosine conjecture")
    s.paragraphs.append(
        f"Averaged KL curve over {pairs} orthogonal pairs (n={sizes.fig5_1_n}, l=1) with the weighted least-squares fit "
        f"a·cos(πt/2 + b) + c: a={fit.a:.5g}, b={fit.b:.4g}, c={fit.c:.5g}; max|residual| = {fit.max_abs:.3g} "
        f"= {zmax:.3g} sem (curve range {mean.max() - mean.min():.3g}). The table gives the relative residual "
        "(max|residual| / range) and the residual in sem units for other n and l "
        f"({grid_pairs} pairs each). The proof's step 'a sum of same-frequency cosines is a cosine' (eq. 5.17) is "
        "invalid because the coefficients Sm(w)_i − Sm(v(t))_i depend on t; the fit is close only because for small "
        "l/√n the softmax is nearly linear.")
    s.figure(rel, "Fig. 5.1 reproduction: mean KL with ±2 sem band and fitted cosine (left); residual vs ±5 sem (right)")
    s.table(["n", "l", "max|res|/range", "max|res|/sem", "a", "b", "c"], rows, "Cosine fit residual versus n and l")
    return s, {"a": fit.a, "b": fit.b, "c": fit.c, "max_abs_residual_over_sem": zmax, "grid": rows}


def _marchenko_pastur_section(run, plots, sizes: ReportSizes, full: bool, seed: int):
    """§2.5: the histogram of squared singular values against the corrected and the printed density."""
    plt = plots.plt
    n = sizes.mp_hist_n
    mats = 100 if full else 10
    x = mp_hist_sample(n, n, 1.0 / n, mats, seed)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].hist(x, bins=80, density=True, color="0.7", label=f"σ_i², {mats} matrices {n}×{n}, N(0, 1/n)")
    xs = np.linspace(1e-4, 4.2, 600)
    with jax.enable_x64(True):
        ax[0].plot(xs, np.asarray(G.mp_density(xs, n, n, 1.0 / n)), "r-", label="MP √(x(4−x))/(2πx) on [0, 4]")
        xp = np.linspace(1e-6, 4 / n, 300)
        dens_p = np.asarray(G.mp_density_printed(xp, 1.0 / n))
    ax[0].axvline(4.0, color="r", ls=":", lw=1)
    ax[0].set_ylim(0, 1.5); ax[0].legend(fontsize=7); ax[0].set_xlabel("squared singular value")
    ax[1].plot(xp, dens_p, "b-", label="printed density on [0, 4/n]")
    ax[1].hist(x[x < 4 / n], bins=20, density=False, color="0.7", label=f"{int((x < 4 / n).sum())} of {x.size} samples < 4/n")
    ax[1].legend(fontsize=7); ax[1].set_xlabel("x")
    rel = plots.save_to_run(fig, run, "wertich_marchenko_pastur.png")
    ks = G.ks_distance(x, lambda u: G.mp_cdf(u, n, n, 1.0 / n))
    s = Section("Wertich §2.5: Marchenko–Pastur law of squared singular values")
    s.paragraphs.append(
        f"{x.size} squared singular values of {n}×{n} Gaussian matrices with N(0, 1/n) entries: the histogram follows "
        f"the Marchenko–Pastur density on [0, 4] (KS distance {ks:.3g}); the "
        f"printed density lives on [0, 4/n] = [0, {4 / n:.3g}] and misses almost all of them (largest σ_i² = {x.max():.3f}, "
        "consistent with eq. 6.12's 4nσ² = 4).")
    s.figure(rel, "Histogram vs the corrected MP density (left) and the printed one (right)")
    return s, {"n": n, "matrices": mats, "max": float(x.max())}


def _alpha_entropy_section(run, plots, sizes: ReportSizes, full: bool, seed: int):
    """§5.2.3: mean softmax entropy of Xavier logits versus the scale α."""
    plt = plots.plt
    alphas = np.logspace(-2, 2, 41)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ent_rows = []
    with jax.enable_x64(True):
        for n_ in sizes.alpha_ns:
            v = jax.random.normal(jax.random.key(seed + n_), (512 if full else 128, n_), jnp.float64) / math.sqrt(n_)
            h = np.asarray(jax.vmap(lambda a: G.softmax_entropy(a * v).mean())(jnp.asarray(alphas)))
            ax.semilogx(alphas, h / math.log(n_), label=f"n={n_}")
            ent_rows.append([n_] + [f"{h[i] / math.log(n_):.4f}" for i in (0, 20, 30, 40)])
    ax.set_xlabel("α"); ax.set_ylabel("H(Sm(αv)) / log n"); ax.legend(fontsize=7)
    rel = plots.save_to_run(fig, run, "wertich_alpha_entropy.png")
    s = Section("Wertich §5.2.3: softmax entropy versus the scale α")
    s.paragraphs.append("Mean entropy of softmax(αv) for Xavier vectors v ~ N(0, I/n), normalised by log n: → 1 "
                        "(uniform) as α → 0 and → 0 (Dirac) as α → ∞. At α = 1 Xavier logits give nearly maximal entropy.")
    s.figure(rel, "H(Sm(αv))/log n versus α")
    s.table(["n", "α=0.01", "α=1", "α=10", "α=100"], ent_rows, "Normalised entropy")
    return s


def _attention_stack_section(run, plots, sizes: ReportSizes, full: bool, seed: int):
    """§7.2.3: token diversity and attention entropy versus depth in random attention stacks."""
    plt = plots.plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    rows = []
    layers = sizes.stack_layers
    depths = sorted({k for k in (1, 4, 16, layers) if k <= layers})
    for i, var in enumerate(sizes.stack_variants):
        st = G.random_attention_stacks(jax.random.fold_in(jax.random.key(seed), i), 32 if full else 8, STACK_T, STACK_D,
                                       layers, dtype="float64", **STACK_VARIANTS[var])
        div, ent = np.asarray(st.diversity), np.asarray(st.entropy)
        r = (div / div[:, :1]).mean(0)
        ax[0].semilogy(np.arange(layers + 1), np.maximum(r, 1e-17), label=var)
        ax[1].plot(np.arange(1, layers + 1), ent.mean(0), label=var)
        rows.append([var] + [f"{r[k]:.3g}" for k in depths] + [f"{ent.mean(0)[-1]:.4f}"])
    ax[1].axhline(math.log(STACK_T), color="k", ls=":", lw=1, label="log T")
    ax[0].set_xlabel("layer"); ax[0].set_ylabel("token diversity / initial"); ax[0].legend(fontsize=7)
    ax[1].set_xlabel("layer"); ax[1].set_ylabel("attention entropy"); ax[1].legend(fontsize=7)
    rel = plots.save_to_run(fig, run, "wertich_token_diversity.png")
    s = Section("Wertich §7.2.3: the uniform embedding mixture hypothesis")
    s.paragraphs.append(
        f"Random single-head self-attention stacks (T={STACK_T}, d={STACK_D}, Xavier weights with operator norm capped at 2): "
        "token diversity ‖X − 1x̄ᵀ‖/‖X‖ relative to the input, and mean attention entropy, versus depth. β is the "
        "attention share of the skip mix X ← β·Attn(X) + (1−β)X; '_ln' adds a parameter-free LayerNorm.")
    s.figure(rel, "Token diversity (left) and attention entropy (right) versus depth")
    s.table(["variant"] + [f"L={k}" for k in depths] + [f"entropy L={layers}"], rows,
            f"diversity ratio and entropy (log T = {math.log(STACK_T):.4f})")
    return s, rows
