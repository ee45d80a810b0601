"""Fourier anatomy of the modular-addition transformer: the "clock" algorithm.

Sources: Nanda et al., "Progress measures for grokking via mechanistic interpretability" (key
frequencies, restricted/excluded loss) and the blog post on the "clock" algorithm for modular
addition (W_E / W_L spectra and circles §5, periodic attention §6, petals
§6.1–7, dihedral angles §8, MLP §8–9, read-out §10, sufficiency §11).

Conventions. P is the modulus; tokens 0..P-1 are numbers and token P is "=". Parameters are
:class:`geomjax.models.toy.ToyTransformer` parameters of Nanda's 1-layer model: ``W_E`` =
``embed/embedding`` (V, d) has one ROW per token (the blog's W_E columns), ``W_L`` = (W_out W_U)ᵀ
(V_out, F) has one row per output token (the blog's ``W_U @ W_out``). The Fourier basis is the
(P, P) matrix whose rows are [const, cos 1, sin 1, …, cos P//2, sin P//2], each of unit norm
(:func:`fourier_basis`); frequency k ∈ 1..P//2 owns rows 2k−1 (cos) and 2k (sin). Inputs are all P²
pairs (a, b) in row-major order (index a·P + b). Everything is float32 under "highest" matmul
precision unless stated; a float64 input (NumPy float64 or a Python list) is computed in float64
instead (the dtype rule, ``geomjax.base._checks.float64_aware``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import as_float32_or_64, compiled_cache, float64_aware, x64_context
from geomjax.errors import GeomjaxError
from geomjax.typing import Array, DType, Float, Int, IntSeq, Real

__all__ = [
    "all_circles",
    "attention_spectra",
    "attention_spectrum",
    "circle_basis",
    "circle_bases",
    "circle_fit_r2",
    "circle_projection",
    "complex_peak_fraction",
    "complex_peak_stats",
    "correct_logit_rank",
    "embed_restricted_params",
    "frequency_set_accuracies",
    "embedding_rows",
    "fourier_basis",
    "fourier_basis_names",
    "fourier_coefficients",
    "frequency_energy",
    "key_frequencies_embed",
    "key_frequencies_from_energy",
    "key_frequencies_neurons",
    "key_fraction",
    "mlp_plane_svd",
    "negative_bias_count",
    "neuron_frequencies_from_spectrum",
    "neuron_spectrum",
    "o_circle_plane",
    "per_head_circle_projection",
    "petal_fourier_projection",
    "plane_svds",
    "predicted_petal",
    "principal_angles",
    "project_embedding",
    "restricted_accuracy",
    "restricted_excluded_loss",
    "restricted_correct_counts",
    "restricted_excluded_terms",
    "restricted_logits",
    "sufficiency",
    "sum_waves",
    "unembed_matrix",
]


# ------------------------------------------------------------------------------------ the basis

def _check_p(p: int, who: str) -> int:
    if int(p) != p or p < 3:
        raise GeomjaxError(f"{who}: p must be an integer >= 3, got {p}")
    return int(p)


def fourier_basis(p: int, dtype: DType = jnp.float32) -> Float[Array, "P P"]:
    """Orthonormal Fourier basis mod p (Nanda et al.; the blog's ``fourier_basis``), rows = waves.

    Rows: ``[1/√p, cos(2π·1·x/p), sin(2π·1·x/p), …]`` each normalized to unit length, x = 0..p−1;
    frequencies 1..⌊(p−1)/2⌋ contribute a cos and a sin row; for even p the last row is the
    alternating cos(πx). The matrix is orthogonal: B Bᵀ = I.

    Args:
      p: modulus >= 3.
      dtype: float32 (default) or float64 (computed in float64 either way).

    Returns:
      (p, p) array of ``dtype``.
    """
    p = _check_p(p, "fourier_basis")
    with x64_context(dtype):
        return jnp.asarray(_basis_rows(p), dtype)


@compiled_cache(maxsize=16)  # registered, so clear_compiled_caches reaches it
def _basis_rows(p: int) -> np.ndarray:
    """The float64 rows of :func:`fourier_basis` (computed once per p; read-only)."""
    x = np.arange(p)
    rows = [np.ones(p) / math.sqrt(p)]
    for k in range(1, (p - 1) // 2 + 1):
        for f in (np.cos, np.sin):
            r = f(2 * np.pi * k * x / p)
            rows.append(r / np.linalg.norm(r))
    if p % 2 == 0:
        r = np.cos(np.pi * x)
        rows.append(r / np.linalg.norm(r))
    out = np.stack(rows)
    out.setflags(write=False)
    return out


def fourier_basis_names(p: int) -> list[str]:
    """Names of :func:`fourier_basis` rows: ``["const", "cos 1", "sin 1", …]``."""
    p = _check_p(p, "fourier_basis_names")
    names = ["const"] + [f"{f} {k}" for k in range(1, (p - 1) // 2 + 1) for f in ("cos", "sin")]
    return names + (["cos {}".format(p // 2)] if p % 2 == 0 else [])


def _n_freq(p: int) -> int:
    return (p - 1) // 2


@float64_aware(arrays=("W",))
def fourier_coefficients(W: Real[Array, "V d"], p: int) -> Float[Array, "P d"]:
    """Fourier coefficients of the first p rows of W along the token axis: ``B @ W[:p]``.

    The blog §5 computes ``W_E @ fourier_basis.T`` with W_E (d, V); with rows per token that is
    ``(B @ W_E[:p])ᵀ``. Works for W_E (V, d) and W_L (V_out, F) alike (the "=" row is dropped).

    Args:
      W: (V, d) with V >= p, one row per token.
      p: modulus.

    Returns:
      (p, d): row j is the d-dimensional coefficient of basis row j.
    """
    W = as_float32_or_64(W, "fourier_coefficients", "W")
    if W.ndim != 2 or W.shape[0] < p:
        raise GeomjaxError(f"fourier_coefficients: W must be (V >= {p}, d), got shape {W.shape}")
    with jax.default_matmul_precision("highest"):
        return fourier_basis(p, W.dtype) @ W[:p]


@float64_aware(arrays=("coeffs",))
def frequency_energy(coeffs: Float[Array, "P ..."], p: int) -> Float[Array, "F1"]:
    """Squared Fourier norm per frequency: entry k (0..P//2) is Σ (cos k² + sin k²) over the other axes
    (entry 0 the constant row). The blog's bar plots show the per-row norms; this groups them.

    Args:
      coeffs: (p, ...) coefficients from :func:`fourier_coefficients`.
      p: modulus.

    Returns:
      (⌊(p−1)/2⌋ + 1,) energies (for even p the Nyquist row is not included).
    """
    c2 = jnp.sum(jnp.square(jnp.asarray(coeffs)).reshape(coeffs.shape[0], -1), axis=1)
    K = _n_freq(p)
    return jnp.concatenate([c2[:1], c2[1: 2 * K + 1].reshape(K, 2).sum(axis=1)])


@float64_aware(arrays=("coeffs",))
def key_fraction(coeffs: Float[Array, "P ..."], p: int, freqs: IntSeq) -> Float[Array, ""]:
    """Fraction of the squared Fourier norm (constant row excluded) held by the cos/sin rows of
    ``freqs`` — the clock claim "W_E's spectrum is sparse" (a random W_E gives ≈ 2k/(p−1))."""
    e = frequency_energy(coeffs, p)
    idx = jnp.asarray(sorted(set(int(k) for k in freqs)), jnp.int32)
    return jnp.sum(e[idx]) / jnp.sum(e[1:])


@float64_aware(arrays=("W_E",))
def key_frequencies_embed(W_E: Float[Array, "V d"], p: int, *, ratio: float = 10.0) -> list[int]:
    """Key frequencies from W_E's Fourier norms (the blog §5): frequencies whose energy (cos² + sin²
    summed over d) exceeds ``ratio`` × the median energy of the frequencies 1..P//2.

    The median is the noise floor (most frequencies are inactive after grokking); for a random W_E
    the energies are χ² with 2d degrees of freedom and none exceeds 10× the median.

    Returns:
      sorted list of frequencies in 1..P//2.
    """
    return key_frequencies_from_energy(frequency_energy(fourier_coefficients(W_E, p), p), ratio=ratio)


def key_frequencies_from_energy(energy: Float[Array, "F1"], *, ratio: float = 10.0) -> list[int]:
    """The blog §5 rule of :func:`key_frequencies_embed` on energies already computed: the frequencies
    k ≥ 1 whose ``energy[k]`` (from :func:`frequency_energy`, entry 0 the constant) exceeds ``ratio`` × the
    median of ``energy[1:]``. Returns the sorted list of frequencies in 1..P//2."""
    e = np.asarray(energy)[1:]
    thr = ratio * np.median(e)
    return [int(k) + 1 for k in np.flatnonzero(e > thr)]


class NeuronFrequencies(NamedTuple):
    """Nanda et al.'s per-neuron frequency analysis.

    Attributes:
      freq: (F,) winning frequency per neuron (1..P//2; 0 for dead neurons).
      fraction: (F,) variance fraction of the winner's 3×3 {const, cos w, sin w}² block.
      key: sorted distinct winners among live neurons with fraction >= min_fraction.
      counts: dict frequency -> number of such neurons.
    """

    freq: np.ndarray
    fraction: np.ndarray
    key: list[int]
    counts: dict


@float64_aware(arrays=("post",))
def key_frequencies_neurons(post: Float[Array, "P P F"], p: int, *, min_fraction: float = 0.0) -> NeuronFrequencies:
    """Key frequencies from MLP neurons (Nanda et al. §4.1, the authors' released code).

    For each neuron, the post-activation at "=" over all (a, b) is centred, 2D-Fourier transformed
    (``B A Bᵀ``) and, for each frequency w in 1..P//2, the fraction of its variance in the 3×3 block of
    rows/columns {const, cos w, sin w} is computed; the neuron's frequency is the argmax. The key
    frequencies are the distinct winners (the authors' released code) among live neurons whose fraction is at least
    ``min_fraction`` (0: all live neurons, as the authors' code does).

    Args:
      post: (p, p, F) post-activation MLP values at the last position, indexed [a, b, neuron].
      p: modulus.
      min_fraction: variance-fraction filter.

    Returns:
      :class:`NeuronFrequencies`.
    """
    post = as_float32_or_64(post, "key_frequencies_neurons", "post")
    if post.ndim != 3 or post.shape[:2] != (p, p):
        raise GeomjaxError(f"key_frequencies_neurons: post must be (p, p, F) = ({p}, {p}, F), got {post.shape}")
    return neuron_frequencies_from_spectrum(neuron_spectrum(post, p), p, min_fraction=min_fraction)


def neuron_spectrum(post: Float[Array, "P P F"], p: int) -> Float[Array, "P P F"]:
    """The squared 2D Fourier transform ``(B A Bᵀ)²`` of each neuron's centred post-activation over (a, b)
    (Nanda et al. §4.1; the device half of :func:`key_frequencies_neurons`, jit-compatible).

    Args:
      post: (p, p, F) post-activations at "=", indexed [a, b, neuron].
      p: modulus.

    Returns:
      (p, p, F) squared coefficients, float32 (float64 for a float64 ``post``).
    """
    post = as_float32_or_64(post, "neuron_spectrum", "post")
    B = fourier_basis(p, post.dtype)
    A = post - jnp.mean(post, axis=(0, 1), keepdims=True)
    with jax.default_matmul_precision("highest"):
        Ah = jnp.einsum("ia,abn,jb->ijn", B, A, B)
    return jnp.square(Ah)


def neuron_frequencies_from_spectrum(sq: Float[Array, "P P F"], p: int, *, min_fraction: float = 0.0
                                     ) -> NeuronFrequencies:
    """The host half of :func:`key_frequencies_neurons` (Nanda et al. §4.1): per-neuron winning frequency
    and variance fraction of its 3×3 {const, cos w, sin w}² block, from the squared spectrum
    :func:`neuron_spectrum` (p, p, F), accumulated in float64."""
    sq = np.asarray(sq, np.float64)
    total = sq.sum(axis=(0, 1))
    K = _n_freq(p)
    fr = np.zeros((K, sq.shape[2]))
    for w in range(1, K + 1):
        idx = [0, 2 * w - 1, 2 * w]
        fr[w - 1] = sq[np.ix_(idx, idx)].sum(axis=(0, 1))
    live = total > 1e-12 * max(total.max(), 1e-30)
    frac = np.where(live, fr / np.where(live, total, 1.0), 0.0)
    best = np.argmax(frac, axis=0)
    freq = np.where(live, best + 1, 0)
    fraction = frac[best, np.arange(frac.shape[1])]
    ok = live & (fraction >= min_fraction)
    counts: dict[int, int] = {}
    for f in freq[ok]:
        counts[int(f)] = counts.get(int(f), 0) + 1
    return NeuronFrequencies(freq, fraction, sorted(counts), dict(sorted(counts.items())))


# ------------------------------------------------------------------------------------- circles

@float64_aware(arrays=("coeffs",))
def circle_basis(coeffs: Float[Array, "P d"], k: int) -> Float[Array, "2 d"]:
    """The blog's "Fourier-inferred 2D basis" (§5.1) of frequency k: the cos-k and sin-k coefficient
    vectors (rows 2k−1, 2k of ``coeffs``), each normalized to unit length (not orthogonalized).

    Args:
      coeffs: (p, d) from :func:`fourier_coefficients`.
      k: frequency in 1..P//2.
    """
    if not 1 <= k <= _n_freq(coeffs.shape[0]):
        raise GeomjaxError(f"circle_basis: k must lie in 1..{_n_freq(coeffs.shape[0])}, got {k}")
    b = jnp.asarray(coeffs)[jnp.asarray([2 * k - 1, 2 * k])]
    return b / jnp.linalg.norm(b, axis=1, keepdims=True)


@float64_aware(arrays=("W",))
def circle_projection(W: Float[Array, "V d"], p: int, k: int) -> Float[Array, "P 2"]:
    """Rows 0..p−1 of W projected on frequency k's Fourier-inferred 2D basis (the blog's W_E and W_L
    circles, §5.1–5.2): ``W[:p] @ circle_basis(B @ W[:p], k)ᵀ``. Key frequencies give circles,
    other frequencies noise."""
    W = as_float32_or_64(W, "circle_projection", "W")
    basis = circle_basis(fourier_coefficients(W, p), k)
    with jax.default_matmul_precision("highest"):
        return W[:p] @ basis.T


@float64_aware(arrays=("xy",))
def circle_fit_r2(xy: Float[Array, "P 2"], k: int) -> Float[Array, ""]:
    """R² of the least-squares fit ``xy ≈ c + [cos(2πkx/p), sin(2πkx/p)] M`` over x = 0..p−1 (1 for
    points exactly on a (possibly elliptical) frequency-k circle, ≈ 2/p for noise)."""
    xy = as_float32_or_64(xy, "circle_fit_r2", "xy")
    p = xy.shape[0]
    x = jnp.arange(p)
    X = jnp.stack([jnp.ones(p), jnp.cos(2 * jnp.pi * k * x / p), jnp.sin(2 * jnp.pi * k * x / p)], axis=1)
    with jax.default_matmul_precision("highest"):
        coef, *_ = jnp.linalg.lstsq(X, xy)
        res = xy - X @ coef
    tot = xy - jnp.mean(xy, axis=0, keepdims=True)
    return 1.0 - jnp.sum(res**2) / jnp.sum(tot**2)


def circle_bases(coeffs: Float[Array, "P d"], p: int) -> Float[Array, "K 2 d"]:
    """:func:`circle_basis` of every frequency k = 1..K (K = ⌊(p−1)/2⌋) at once (the blog §5.1): row k−1
    holds the unit-length cos-k and sin-k coefficient vectors; jit-compatible (no per-k program)."""
    K = _n_freq(p)
    b = jnp.asarray(coeffs)[1: 2 * K + 1].reshape(K, 2, -1)
    return b / jnp.linalg.norm(b, axis=2, keepdims=True)


def all_circles(W: Float[Array, "V d"], p: int) -> tuple[Float[Array, "K P 2"], Float[Array, " K"]]:
    """:func:`circle_projection` and :func:`circle_fit_r2` of every frequency k = 1..K at once (the blog
    §5.1–5.2: W_E / W_L circles), as one vectorised program.

    Args:
      W: (V, d) with V >= p, one row per token.
      p: modulus.

    Returns:
      (xy (K, p, 2): rows 0..p−1 of W on frequency k's basis, r2 (K,): the frequency-k ellipse fit).
    """
    W = as_float32_or_64(W, "all_circles", "W")
    bases = circle_bases(fourier_coefficients(W, p), p)
    with jax.default_matmul_precision("highest"):
        xy = jnp.einsum("pd,kjd->kpj", W[:p], bases)
    ks = jnp.arange(1, bases.shape[0] + 1)
    return xy, jax.vmap(_circle_r2)(xy, ks)


def _circle_r2(xy, k):
    p = xy.shape[0]
    x = jnp.arange(p)
    X = jnp.stack([jnp.ones(p), jnp.cos(2 * jnp.pi * k * x / p), jnp.sin(2 * jnp.pi * k * x / p)], axis=1).astype(xy.dtype)
    with jax.default_matmul_precision("highest"):
        coef, *_ = jnp.linalg.lstsq(X, xy)
        res = xy - X @ coef
    tot = xy - jnp.mean(xy, axis=0, keepdims=True)
    return 1.0 - jnp.sum(res**2) / jnp.sum(tot**2)


# ----------------------------------------------------------------------------- W_L matrix

def unembed_matrix(params: dict) -> Float[Array, "V F"]:
    """W_L = W_U W_out (the blog §5.2, Nanda et al.): (V_out, F), row c = the direction in MLP
    activation space that raises logit c (b_out is not included, as in the blog)."""
    with jax.default_matmul_precision("highest"):
        return (params["block_0"]["mlp"]["proj"]["kernel"] @ params["unembed"]["kernel"]).T


# ----------------------------------------------------------------------------- periodic attention

@float64_aware(arrays=("att",))
def attention_spectrum(att: Float[Array, "P P"]) -> dict[str, Array]:
    """2D Fourier analysis of one head's last-row attention on token a over all (a, b) (the blog §6).

    Args:
      att: (p, p) attention weight of the "=" query on position 0 (token a), indexed [a, b].

    Returns:
      dict with ``coeffs`` (p, p) = B A Bᵀ; ``energy_a`` and ``energy_b`` (P//2 + 1,): energy per
      frequency along a (summed over all b-basis rows) and along b; ``dominant``: the frequency
      1..P//2 with the largest energy_a + energy_b; ``key_fraction_fn``: use :func:`attention_key_fraction`.
    """
    att = as_float32_or_64(att, "attention_spectrum", "att")
    p = att.shape[0]
    B = fourier_basis(p, att.dtype)
    with jax.default_matmul_precision("highest"):
        C = B @ att @ B.T
    ea = frequency_energy(C, p)
    eb = frequency_energy(C.T, p)
    dom = int(jnp.argmax((ea + eb)[1:])) + 1
    return {"coeffs": C, "energy_a": ea, "energy_b": eb, "dominant": dom}


@float64_aware(arrays=("att",))
def attention_key_fraction(att: Float[Array, "P P"], freqs) -> Float[Array, ""]:
    """Fraction of the (constant-removed) variance of one head's attention map over (a, b) lying in
    2D Fourier components whose a- and b-frequencies are both in ``freqs`` ∪ {0} (the blog §6:
    "attention is periodic in a and b at the key frequencies"); ≈ ((2k+1)² − 1)/(p² − 1) for noise."""
    C = attention_spectrum(att)["coeffs"]
    idx = [0] + [j for k in sorted(set(int(f) for f in freqs)) for j in (2 * k - 1, 2 * k)]
    sq = jnp.square(C)
    sub = sq[jnp.ix_(jnp.asarray(idx), jnp.asarray(idx))]
    total = jnp.sum(sq) - sq[0, 0]
    return (jnp.sum(sub) - sq[0, 0]) / total


def attention_spectra(att: Float[Array, "H P P"]) -> tuple[Float[Array, "H P P"], Float[Array, "H F1"],
                                                            Float[Array, "H F1"]]:
    """:func:`attention_spectrum` of every head at once (the blog §6): (coeffs B A_h Bᵀ, energy along a,
    energy along b) stacked over heads; jit-compatible (the dominant frequency is the host's argmax)."""
    att = as_float32_or_64(att, "attention_spectra", "att")
    p = att.shape[1]
    B = fourier_basis(p, att.dtype)
    with jax.default_matmul_precision("highest"):
        C = jnp.einsum("ia,hab,jb->hij", B, att, B)
    ea = jax.vmap(lambda c: frequency_energy(c, p))(C)
    eb = jax.vmap(lambda c: frequency_energy(c.T, p))(C)
    return C, ea, eb


# ------------------------------------------------------------------------------------- petals

def predicted_petal(p: int, emb_freq: int, att_freq: int, a: int, phase: float = 0.0,
                    n: int | None = None) -> Float[Array, "n 2"]:
    """The blog's predicted per-head output curve (§6.1): z(b) = α(b) x_a + (1 − α(b)) x_b with
    x_n = (cos 2π f_e n/p, sin 2π f_e n/p) a point of the frequency-f_e embedding circle and
    α(b) = ½(1 + cos(2π f_att b / p + phase)) a periodic attention weight on a.

    Args:
      p: modulus; b runs over ``n`` (default p) equally spaced values in [0, p).
      emb_freq, att_freq: f_e and f_att (need not be integers for illustrations; the blog uses 0.5).
      a: the fixed first operand.
      phase: the attention offset (the blog's "family of curves").

    Returns:
      (n, 2) points.
    """
    n = p if n is None else n
    b = jnp.arange(n) * (p / n)
    circ = lambda t: jnp.stack([jnp.cos(2 * jnp.pi * emb_freq * t / p), jnp.sin(2 * jnp.pi * emb_freq * t / p)], -1)
    alpha = 0.5 * (1.0 + jnp.cos(2 * jnp.pi * att_freq * b / p + phase))
    return alpha[:, None] * circ(jnp.full_like(b, a))[:1] + (1 - alpha[:, None]) * circ(b)


@float64_aware(arrays=("z", "W_V", "basis",))
def per_head_circle_projection(z: Float[Array, "P H K"], W_V: Float[Array, "H d K"],
                               basis: Float[Array, "2 d"]) -> Float[Array, "H P 2"]:
    """The blog's actual petals (§6.2): each head's z vectors (fixed a, all b) projected on the
    embedding circle basis carried through W_V: ``new_basis = pinv(W_V[h]) @ basisᵀ`` (K, 2),
    ``projected = z[:, h] @ new_basis``.

    Args:
      z: (p, H, K) per-head attention outputs for (a, b), b = 0..p−1.
      W_V: (H, d, K) value weights (``head_weights``).
      basis: (2, d) circle basis in embedding space (:func:`circle_basis` of W_E).
    """
    with jax.default_matmul_precision("highest"):
        new = jnp.einsum("hkd,jd->hkj", jnp.linalg.pinv(W_V), basis)
        return jnp.einsum("bhk,hkj->hbj", z, new)


@float64_aware(arrays=("o_heads",))
def petal_fourier_projection(o_heads: Float[Array, "P H d"], k: int) -> dict[str, Array]:
    """Per-head o vectors and their head sum projected on the summed o vectors' own frequency-k
    Fourier plane (the blog §7, "alternative visualization"): b varies, a fixed.

    The plane is the (normalized) cos-k / sin-k Fourier coefficients over b of o(b) = Σ_h o_h(b).

    Returns:
      dict ``heads`` (H, p, 2), ``total`` (p, 2), ``basis`` (2, d).
    """
    o = jnp.sum(o_heads, axis=1)
    basis = circle_basis(fourier_coefficients(o, o.shape[0]), k)
    with jax.default_matmul_precision("highest"):
        heads = jnp.einsum("bhd,jd->hbj", o_heads, basis)
    return {"heads": heads, "total": heads.sum(axis=0), "basis": basis}


@float64_aware(arrays=("xy",))
def complex_peak_fraction(xy: Float[Array, "P 2"]) -> dict[str, Any]:
    """Spectrum of a closed planar curve over b (the blog §7: "a dominant single frequency means a
    circle"): the DFT of x + iy over b = 0..p−1 with the mean removed; returns ``spectrum`` (p,)
    |DFT|², ``peak_fraction`` (largest bin's share of the non-constant energy: 1 for a perfect circle
    traversed at one speed, lower for petals and ellipses), ``peak_freq`` in (−p/2, p/2] and
    ``freq_fraction`` (the share of bins ±peak_freq: 1 for any ellipse at that single frequency)."""
    xy = as_float32_or_64(xy, "complex_peak_fraction", "xy")
    c = (xy[:, 0] - jnp.mean(xy[:, 0])) + 1j * (xy[:, 1] - jnp.mean(xy[:, 1]))
    s = jnp.abs(jnp.fft.fft(c)) ** 2
    i = int(jnp.argmax(s))
    p = xy.shape[0]
    j = (p - i) % p
    both = s[i] + (s[j] if j != i else 0.0)
    return {"spectrum": s, "peak_fraction": s[i] / jnp.sum(s), "peak_freq": i if i <= p // 2 else i - p,
            "freq_fraction": both / jnp.sum(s)}


def complex_peak_stats(xy: Float[Array, "*B P 2"]) -> dict[str, Array]:
    """:func:`complex_peak_fraction` of a batch of closed planar curves (the blog §7), jit-compatible:
    ``spectrum`` (*B, p), ``peak_fraction`` (*B,), ``peak_freq`` (*B,) int in (−p/2, p/2], ``freq_fraction``
    (*B,)."""
    xy = jnp.asarray(xy)
    c = (xy[..., 0] - jnp.mean(xy[..., 0], -1, keepdims=True)) + 1j * (xy[..., 1] - jnp.mean(xy[..., 1], -1, keepdims=True))
    s = jnp.abs(jnp.fft.fft(c, axis=-1)) ** 2
    p = xy.shape[-2]
    i = jnp.argmax(s, axis=-1)
    j = (p - i) % p
    si = jnp.take_along_axis(s, i[..., None], -1)[..., 0]
    sj = jnp.take_along_axis(s, j[..., None], -1)[..., 0]
    both = si + jnp.where(j != i, sj, 0.0)
    tot = jnp.sum(s, axis=-1)
    return {"spectrum": s, "peak_fraction": si / tot, "peak_freq": jnp.where(i <= p // 2, i, i - p),
            "freq_fraction": both / tot}


# ------------------------------------------------------------------------------------- geometry

@float64_aware(arrays=("U", "V",))
def principal_angles(U: Float[Array, "m d"], V: Float[Array, "n d"]) -> Float[Array, "r"]:
    """Principal (dihedral) angles in degrees between span(rows of U) and span(rows of V) (the blog
    §8: W_E circle planes vs o circle planes), ascending; r = min(m, n). Computed as arccos of the
    singular values of Q_Uᵀ Q_V with orthonormal bases Q (float64)."""
    qu, _ = np.linalg.qr(np.asarray(U, np.float64).T)
    qv, _ = np.linalg.qr(np.asarray(V, np.float64).T)
    s = np.clip(np.linalg.svd(qu.T @ qv, compute_uv=False), -1.0, 1.0)
    return jnp.asarray(np.sort(np.degrees(np.arccos(s))))


@float64_aware(arrays=("o",))
def o_circle_plane(o: Float[Array, "P P d"], k: int) -> Float[Array, "2 d"]:
    """The o circle plane of frequency k (the blog §8–9.3): for each a, the cos-k / sin-k Fourier
    coefficients of o(a, ·) over b; the 2p vectors stacked and the top-2 right singular vectors kept
    (the plane the circles share across a)."""
    plane, _ = mlp_plane_svd(o, k, n_components=2)
    return plane


@float64_aware(arrays=("act",))
def mlp_plane_svd(act: Float[Array, "P P F"], k: int, n_components: int = 4) -> tuple[Array, Array]:
    """SVD of the stacked per-a Fourier-inferred basis vectors (the blog §9.3–9.5).

    For each a, the frequency-k coefficients of act(a, ·) over b (cos and sin, 2 vectors of width F)
    are stacked into a (2p, F) matrix; its top right singular vectors are the "principal components":
    PCs 1–2 carry the revolution of the circles, PCs 3–4 their rotation (the blog §9.4).

    Returns:
      (components (n, F), singular values (min(2p, F),)).
    """
    act = as_float32_or_64(act, "mlp_plane_svd", "act")
    p = act.shape[0]
    B = fourier_basis(p, act.dtype)[jnp.asarray([2 * k - 1, 2 * k])]
    with jax.default_matmul_precision("highest"):
        c = jnp.einsum("jb,abf->ajf", B, act).reshape(2 * p, -1)
    _, s, vt = jnp.linalg.svd(c, full_matrices=False)
    return vt[:n_components], s


def plane_svds(act: Float[Array, "P P F"], ks: Int[Array, " n"], n_components: int = 4
               ) -> tuple[Float[Array, "n c F"], Float[Array, "n S"]]:
    """:func:`mlp_plane_svd` for several frequencies ``ks`` at once (the blog §8–9.5; with
    ``n_components=2`` the o circle planes of :func:`o_circle_plane`): the stacked per-a cos-k / sin-k
    coefficients over b, (2p, F) per k, and their SVD; ``ks`` may be traced (one program per length).

    Returns:
      (components (n, n_components, F), singular values (n, min(2p, F))).
    """
    act = as_float32_or_64(act, "plane_svds", "act")
    p = act.shape[0]
    B = fourier_basis(p, act.dtype)

    def one(k):
        Bk = B[jnp.stack([2 * k - 1, 2 * k])]
        with jax.default_matmul_precision("highest"):
            c = jnp.einsum("jb,abf->ajf", Bk, act).reshape(2 * p, -1)
        _, s, vt = jnp.linalg.svd(c, full_matrices=False)
        return vt[:n_components], s

    return jax.lax.map(one, jnp.asarray(ks))


@float64_aware(arrays=("b_in",))
def negative_bias_count(b_in: Float[Array, "F"], *, rel: float = 0.25) -> int:
    """Number of MLP input biases below −rel·max|b_in| (the blog §8: "way fewer than 113 are
    significantly negative", so the model does not use ReLU to superpose features)."""
    b = np.asarray(b_in, np.float64)
    return int(np.sum(b < -rel * np.max(np.abs(b))))


# --------------------------------------------------------------------------------------- read-out

@float64_aware(arrays=("logits", "y",))
def correct_logit_rank(logits: Float[Array, "N C"], y: Int[Array, "N"]) -> Int[Array, "N"]:
    """Rank of the correct logit among the classes (0 = the argmax; ties counted against it) — the
    blog §10's read-out: the correct row of W_L is among the most activated."""
    logits = jnp.asarray(logits)
    correct = jnp.take_along_axis(logits, jnp.asarray(y)[:, None], axis=1)
    return jnp.sum(logits > correct, axis=1)


def _sum_waves(p: int, freqs, dtype=jnp.float32) -> Float[Array, "J N"]:
    return jnp.asarray(sum_waves(p, freqs), dtype)


def sum_waves(p: int, freqs: IntSeq) -> Float[np.ndarray, "J N"]:
    """The unit waves cos/sin(2πw(a+b)/p) over the p² inputs (row-major (a, b)), two rows per w in sorted
    ``freqs`` (Nanda et al. §5.1's restriction directions; float64 NumPy, (0, p²) for no frequency)."""
    a, b = np.divmod(np.arange(p * p), p)
    rows = []
    for w in sorted(set(int(f) for f in freqs)):
        for f in (np.cos, np.sin):
            r = f(2 * np.pi * w * (a + b) / p)
            rows.append(r / np.linalg.norm(r))
    return np.stack(rows) if rows else np.zeros((0, p * p))


@float64_aware(arrays=("logits",))
def restricted_logits(logits: Float[Array, "N C"], p: int, freqs: IntSeq) -> tuple[Array, Array]:
    """Nanda et al. §5.1: split the logits over all p² inputs into their cos/sin(w(a+b)) components
    for w in ``freqs`` and the rest.

    With u_w = cos(2πw(a+b)/p) and v_w = sin(...) as unit vectors over the p² inputs (row-major
    (a, b)), ``proj = Σ_w (u uᵀ + v vᵀ) L``. Restricted logits = proj + the mean over inputs of L;
    excluded logits = L − proj.

    Args:
      logits: (p², C) logits for all inputs in row-major (a, b) order (C = p classes).
      p: modulus.
      freqs: frequencies kept (restricted) / removed (excluded).

    Returns:
      (restricted (p², C), excluded (p², C)).
    """
    L = as_float32_or_64(logits, "restricted_logits", "logits")
    if L.shape[0] != p * p:
        raise GeomjaxError(f"restricted_logits: logits must have p² = {p * p} rows (all inputs), got {L.shape}")
    return _restrict(L, _sum_waves(p, freqs, L.dtype))


def _restrict(L, U):
    """(restricted, excluded) logits of :func:`restricted_logits` for the waves U (J, N)."""
    with jax.default_matmul_precision("highest"):
        proj = U.T @ (U @ L)
    return proj + jnp.mean(L, axis=0, keepdims=True), L - proj


def _ce(logits, y):
    logp = jax.nn.log_softmax(as_float32_or_64(logits, "_ce", "logits"), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


@float64_aware(arrays=("logits", "train_idx",))
def restricted_excluded_loss(logits: Float[Array, "N C"], p: int, freqs: IntSeq, train_idx: IntSeq) -> dict[str, float]:
    """Nanda et al.'s progress measures: restricted loss (cross-entropy of the restricted logits over
    all p² inputs) and excluded loss (of the excluded logits on the training inputs), plus the plain
    train and test losses for reference.

    Args:
      logits: (p², p) logits for all inputs, row-major (a, b).
      p: modulus.
      freqs: the key frequencies.
      train_idx: (n_train,) indices a·p + b of the training inputs.
    """
    a, b = np.divmod(np.arange(p * p), p)
    y = jnp.asarray((a + b) % p)
    L = as_float32_or_64(logits, "restricted_excluded_loss", "logits")
    if L.shape[0] != p * p:
        raise GeomjaxError(f"restricted_excluded_loss: logits must have p² = {p * p} rows (all inputs), got {L.shape}")
    tr = np.zeros(p * p, bool)
    tr[np.asarray(train_idx)] = True
    tri, tei = jnp.asarray(np.flatnonzero(tr)), jnp.asarray(np.flatnonzero(~tr))
    terms = restricted_excluded_terms(L, _sum_waves(p, freqs, L.dtype), y, tri, tei)
    return {k: float(v) for k, v in terms.items()}


def restricted_excluded_terms(L: Float[Array, "N C"], waves: Float[Array, "J N"], y: Int[Array, " N"],
                              train_idx: Int[Array, " n"], test_idx: Int[Array, " m"]) -> dict[str, Array]:
    """The arrays of :func:`restricted_excluded_loss` (Nanda et al. §5.1), jit- and vmap-compatible: the
    restricted loss over all N = p² inputs, the excluded loss on ``train_idx`` and the plain train / test
    losses, with ``waves`` = :func:`sum_waves` (J, N) and ``y`` (N,) the labels. Returns 0-d arrays."""
    rest, excl = _restrict(L, waves)
    return {"restricted": _ce(rest, y), "excluded": _ce(excl[train_idx], y[train_idx]),
            "train": _ce(L[train_idx], y[train_idx]), "test": _ce(L[test_idx], y[test_idx])}


def restricted_correct_counts(L: Float[Array, "N C"], waves: Float[Array, "n J N"], y: Int[Array, " N"]
                              ) -> Int[Array, " n"]:
    """Number of the N = p² inputs that the logits restricted to each of n frequency sets classify
    correctly (the blog §11, restriction as in Nanda et al. §5.1): ``waves[i]`` = :func:`sum_waves` of set i
    (sets of one size, so one program per size). Accuracy = count / N."""
    L = jnp.asarray(L)

    def one(U):
        return jnp.sum(jnp.argmax(_restrict(L, U)[0], axis=1) == y)

    return jax.lax.map(one, jnp.asarray(waves))


@float64_aware(arrays=("logits",))
def restricted_accuracy(logits: Float[Array, "N C"], p: int, freqs: IntSeq) -> float:
    """Accuracy over all p² inputs of the logits restricted to ``freqs`` (:func:`restricted_logits`)."""
    a, b = np.divmod(np.arange(p * p), p)
    rest, _ = restricted_logits(logits, p, freqs)
    return float(np.mean(np.asarray(jnp.argmax(rest, axis=1)) == (a + b) % p))


@float64_aware(arrays=("logits",))
def sufficiency(logits: Float[Array, "N C"], p: int, key_freqs: IntSeq) -> dict[str, Any]:
    """The blog §11: accuracy when the model is restricted to one key frequency, to two coprime ones,
    and to all of them (restriction of the logits as in Nanda et al. §5.1); the sets are evaluated as
    one program (:func:`restricted_correct_counts`).

    Returns:
      dict ``single`` {k: acc}, ``pairs`` {"k1,k2": acc} over pairs with gcd(k1, k2) = 1, ``all``.
    """
    ks = sorted(set(int(k) for k in key_freqs))
    L = as_float32_or_64(logits, "sufficiency", "logits")
    sets = {"single": {k: [k] for k in ks},
            "pairs": {f"{k1},{k2}": [k1, k2] for i, k1 in enumerate(ks) for k2 in ks[i + 1:] if math.gcd(k1, k2) == 1},
            "all": {"all": ks}}
    acc = frequency_set_accuracies(L, p, {(g, n): f for g, d in sets.items() for n, f in d.items()})
    return {"single": {k: acc[("single", k)] for k in ks}, "pairs": {n: acc[("pairs", n)] for n in sets["pairs"]},
            "all": acc[("all", "all")]}


def frequency_set_accuracies(logits: Float[Array, "N C"], p: int, sets: dict) -> dict:
    """{name: accuracy over all p² inputs of the logits restricted to the frequency list ``sets[name]``}
    (:func:`restricted_accuracy` of each set, every set in one program)."""
    a, b = np.divmod(np.arange(p * p), p)
    y = jnp.asarray((a + b) % p)
    L = as_float32_or_64(logits, "frequency_set_accuracies", "logits")
    names = list(sets)
    waves = [sum_waves(p, sets[n]) for n in names]
    J = max(w.shape[0] for w in waves)  # zero rows (padding to the largest set) add nothing to the projection
    padded = np.stack([np.concatenate([w, np.zeros((J - w.shape[0], p * p))]) for w in waves])
    counts = np.asarray(_restricted_counts_jit(L, jnp.asarray(padded, L.dtype), y))
    return {n: float(c) / (p * p) for n, c in zip(names, counts)}


_restricted_counts_jit = jax.jit(restricted_correct_counts)


def embed_restricted_params(params: dict, p: int, freqs: IntSeq) -> dict:
    """Parameters whose number embeddings W_E[:p] keep only the constant and the cos/sin components of
    ``freqs`` (rows projected on those Fourier rows); the "=" row is unchanged. A second way to
    restrict the model to some circles (the blog §11)."""
    return project_embedding(params, p, embedding_rows(p, freqs))


def embedding_rows(p: int, freqs: IntSeq) -> Float[Array, "J P"]:
    """The rows of :func:`fourier_basis` that :func:`embed_restricted_params` keeps: the constant, then cos
    and sin of each frequency in sorted ``freqs`` (J = 1 + 2·len(freqs); float32)."""
    idx = jnp.asarray([0] + [j for k in sorted(set(int(f) for f in freqs)) for j in (2 * k - 1, 2 * k)])
    return fourier_basis(p)[idx]


def project_embedding(params: dict, p: int, rows: Float[Array, "J P"]) -> dict:
    """``params`` with W_E[:p] replaced by its projection ``rowsᵀ rows W_E[:p]`` on orthonormal Fourier
    ``rows`` (:func:`embedding_rows`; the blog §11); jit- and vmap-compatible in ``rows``."""
    E = jnp.asarray(params["embed"]["embedding"])
    with jax.default_matmul_precision("highest"):
        Ep = rows.T @ (rows @ E[:p])
    return {**params, "embed": {"embedding": E.at[:p].set(Ep)}}
