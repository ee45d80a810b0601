"""Theorem 1 of Song & Zhong: a smooth positional Gram matrix is low-frequency and low-rank.

Notation (Song & Zhong §2.3 and App. F.1). ``G = PᵀP`` (T, T) is the Gram matrix of the positional
basis; since pos_1 + ... + pos_T = 0, ``G 1 = 0`` ("doubly centred"). N = 2T.

* eq. (4), :func:`reflected_gram`: G̃ = [[G, G[:, ::-1]], [G[::-1, :], G[::-1, ::-1]]] (2T, 2T).
* eq. (5), :func:`finite_difference`: [Δ^{(1,1)}A]_{t,t'} = T² (A_{t,t'} - A_{t-1,t'} - A_{t,t'-1}
  + A_{t-1,t'-1}) with the periodic extension A_{t±2T, t'±2T} = A_{t,t'} (index 0 wraps to N, the
  convention of App. F.1), and Δ^{(m,m)} = Δ^{(1,1)} ∘ Δ^{(m-1,m-1)}.
* eq. (6): (1/T) ‖G − (F_{≤k}B)(F_{≤k}B)ᵀ‖_op ≤ 6/(8k)^m · ‖Δ^{(m,m)} G̃‖_max for some B (k, k).

What the paper prints and what its proof supports differ; this module implements both so that
the claims in ``geomjax.sources.song_zhong.claims`` can report on each:

1. Dimensions. Eq. (6) prints ``(F_{≤k}B)ᵀ F_{≤k}B``, which is (k, k) and cannot approximate the
   (T, T) matrix G. The dimensionally consistent form, used here and in the paper's own Lemma 3
   (eq. 17), is ``(F_{≤k}B)(F_{≤k}B)ᵀ``.
2. The basis. Theorem 1 prints f_s = (cos((s-½)·t·π/T))_{t=0..T-1}: half-integer frequency,
   integer position. The proof (Lemma 3) transforms the reflected matrix of eq. (4), whose DFT
   gives the DCT-II vectors cos((s-1)(t-½)π/T), t = 1..T: integer frequency, half-integer
   position. The roles are swapped in print. ``low_frequency_basis(T, k, convention="printed")``
   gives the printed F_{≤k}; ``convention="dct"`` the DCT-II basis the proof actually produces.
3. The index set. App. F.1 keeps I = {1..k} ∪ {2T-k+1..2T} (DFT frequencies 0..k-1 and -k..-1),
   which is not closed under negation; the back-transform of the I×I block is then complex
   (Lemma 3's "imaginary part cancels" fails). With the symmetric set (frequencies
   -(k-1)..k-1) it is real and equals P_k G P_k, P_k the orthogonal projector onto the DCT-II
   frequencies 0..k-1 (see :func:`proof_fit`).
4. Constants. Lemma 2 (|γ_t| ≤ 1/(8(t-1))) is false: |γ_2| → 1/(2π) > 1/8 and the correct bound is
   1/(4(t-1)). The proof's Δ also uses the factor N² = 4T² per order where eq. (5) uses T². Redoing
   the proof (the off-diagonal block of the residual only costs max(|Â_IJ|), and frequency 0 does
   not contribute because G1 = 0) gives, for the symmetric index set and eq. (5)'s Δ,

       (1/T) ‖G − P_k G P_k‖_op ≤ 2 [(4ab)^m + (4b²)^m] ‖Δ^{(m,m)} G̃‖_max ≤ 4/(4k)^m ‖Δ^{(m,m)} G̃‖_max

   with a = |γ| at frequency 1 = 1/(2N sin(π/N)) and b = |γ| at frequency k = 1/(2N sin(πk/N))
   (the a-term is absent for k = 1). See :func:`corrected_constant`. For k ≪ T this is
   ≈ 2/(π²k)^m, below the printed 6/(8k)^m, so the printed constant is valid for the DCT basis
   when k ≪ T, though not by the printed argument.

Numerics: Δ^{(m,m)} multiplies differences by T^{2m}; computed in floating point its entries carry
a rounding error of order eps·(4T²)^m·max|G̃| (:func:`finite_difference_rounding`). Use float64 and
moderate T (T ≤ 128 for m = 4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import (as_real_array, check_finite, check_int, check_square, float64_aware,
                                  is_concrete)
from geomjax.errors import GeomjaxError
from geomjax.typing import Array, Complex, DType, Float, Int

__all__ = [
    "double_center",
    "reflected_gram",
    "finite_difference",
    "finite_difference_rounding",
    "low_frequency_basis",
    "LowFrequencyFit",
    "best_low_frequency_fit",
    "proof_fit",
    "dft_gamma",
    "corrected_constant",
    "theorem1_rhs",
    "theorem1_bound",
    "theorem1_tables",
    "Theorem1Table",
    "theorem1_table",
]

Basis = Literal["printed", "dct"]

# ----------------------------------------------------------------------------------------------
# Validation (value checks only on concrete arrays, so every function stays jit-able)
# ----------------------------------------------------------------------------------------------


def _as_array(G, where: str):
    return as_real_array(G, where, "matrix")


def _check_square(G, where: str, *, min_size: int = 2, symmetric: bool = True):
    G = _as_array(G, where)
    check_square(G, "G", where, "(T, T)")
    if G.shape[0] < min_size:
        raise GeomjaxError(f"{where}: need a matrix of size at least {min_size}, got {tuple(G.shape)}")
    if is_concrete(G):
        check_finite(G, "matrix", where)
        if symmetric:
            scale = float(jnp.max(jnp.abs(G))) or 1.0
            asym = float(jnp.max(jnp.abs(G - G.T)))
            tol = 100 * float(jnp.finfo(G.dtype).eps) * scale
            if asym > tol:
                raise GeomjaxError(
                    f"{where}: matrix is not symmetric (max |G - Gᵀ| = {asym:.3g} > {tol:.3g}); "
                    "a Gram matrix PᵀP is symmetric"
                )
    return G


def _check_centred(G, where: str) -> None:
    if not is_concrete(G):
        return
    T = G.shape[0]
    scale = float(jnp.max(jnp.abs(G))) or 1.0
    row = float(jnp.max(jnp.abs(jnp.sum(G, axis=1))))
    tol = 1e3 * float(jnp.finfo(G.dtype).eps) * T * scale
    if row > tol:
        raise GeomjaxError(
            f"{where}: G is not doubly centred (max |G 1| = {row:.3g} > {tol:.3g}); Theorem 1 assumes "
            "pos_1 + ... + pos_T = 0. Centre it first with geomjax.theory.smoothness.double_center(G)."
        )


def _check_psd(G, where: str) -> None:
    if not is_concrete(G):
        return
    ev = jnp.linalg.eigvalsh(G)
    scale = float(jnp.max(jnp.abs(ev))) or 1.0
    tol = 1e3 * float(jnp.finfo(G.dtype).eps) * G.shape[0] * scale
    if float(ev[0]) < -tol:
        raise GeomjaxError(
            f"{where}: G is not positive semi-definite (smallest eigenvalue {float(ev[0]):.3g}); "
            "a Gram matrix PᵀP is PSD"
        )


def _check_km(T: int, k: int | None = None, m: int | None = None, where: str = "") -> None:
    if k is not None:
        if isinstance(k, bool) or int(k) != k or not 1 <= int(k) <= T:
            raise GeomjaxError(f"{where}: k must be an integer with 1 <= k <= T = {T}, got {k!r}")
    if m is not None:
        check_int(m, "m", where)


# ----------------------------------------------------------------------------------------------
# eq. (4), eq. (5)
# ----------------------------------------------------------------------------------------------


@jax.jit
def _double_center(G):
    return G - G.mean(axis=0, keepdims=True) - G.mean(axis=1, keepdims=True) + G.mean()


@float64_aware(arrays=('G',))
def double_center(G: Float[Array, "T T"]) -> Float[Array, "T T"]:
    """H G H with H = I − 11ᵀ/T: the Gram matrix of centred positions (Song & Zhong eq. (3)).

    Theorem 1 (eq. 6) assumes pos_1 + ... + pos_T = 0, i.e. G 1 = 0; this enforces it.

    Args:
      G: (T, T) symmetric matrix, T >= 2.

    Returns:
      (T, T) doubly centred matrix.
    """
    G = _check_square(G, "double_center")
    return _double_center(G)


@jax.jit
def _reflect(G):
    top = jnp.concatenate([G, G[:, ::-1]], axis=1)
    bottom = jnp.concatenate([G[::-1, :], G[::-1, ::-1]], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


@float64_aware(arrays=('G',))
def reflected_gram(G: Float[Array, "T T"]) -> Float[Array, "2*T 2*T"]:
    """Extended and reflected Gram matrix G̃ (Song & Zhong eq. (4)).

    G̃ = [[G⁽¹⁾, G⁽²⁾], [G⁽³⁾, G⁽⁴⁾]] with G⁽²⁾_{t,t'} = G_{t,T+1-t'}, G⁽³⁾_{t,t'} = G_{T+1-t,t'},
    G⁽⁴⁾_{t,t'} = G_{T+1-t,T+1-t'} (1-based). Its periodic extension is even about t = ½ and
    t = T + ½ (half-sample symmetric), so its 2T-point DFT is a DCT-II of G.

    Args:
      G: (T, T) symmetric matrix, T >= 2, finite.

    Returns:
      G̃ of shape (2T, 2T).

    Raises:
      ValueError: not square, T < 2, not symmetric, NaN/Inf.
    """
    G = _check_square(G, "reflected_gram")
    return _reflect(G)


@partial(jax.jit, static_argnames=("m",))
def _fd(A, m: int, scale):
    for _ in range(m):
        A1 = jnp.roll(A, 1, axis=0)  # A_{t-1, t'} with index 0 wrapping to N (App. F.1)
        A = scale * (A - A1 - jnp.roll(A, 1, axis=1) + jnp.roll(A1, 1, axis=1))
    return A


@float64_aware(arrays=('G_tilde',))
def finite_difference(
    G_tilde: Float[Array, "N N"], m: int, *, scale: float | None = None
) -> Float[Array, "N N"]:
    """Periodic mixed finite difference Δ^{(m,m)} G̃ (Song & Zhong eq. (5)).

    [Δ^{(1,1)}A]_{t,t'} = T² (A_{t,t'} − A_{t−1,t'} − A_{t,t'−1} + A_{t−1,t'−1}) for all t, t', with
    A periodic of period N = 2T in both indices (so row/column 0 is row/column N, as in App. F.1),
    and Δ^{(m,m)} = Δ^{(1,1)} applied m times. The result is again N-periodic and has zero row and
    column sums.

    Args:
      G_tilde: (N, N) matrix, N = 2T even, N >= 4 (normally the output of :func:`reflected_gram`).
      m: order, m >= 1 (static).
      scale: factor per order; default T² = (N/2)² as in eq. (5). The proof in App. F.1 uses N².

    Returns:
      (N, N) array Δ^{(m,m)} G̃. Rounding error ~ eps·(4·scale)^m·max|G̃|
      (:func:`finite_difference_rounding`).

    Raises:
      ValueError: not square, N odd or < 4, NaN/Inf, m < 1.
    """
    A = _check_square(G_tilde, "finite_difference", min_size=4, symmetric=False)
    N = A.shape[0]
    if N % 2:
        raise GeomjaxError(f"finite_difference: G̃ must have even size N = 2T, got {N}")
    _check_km(N // 2, m=m, where="finite_difference")
    s = (N // 2) ** 2 if scale is None else scale
    return _fd(A, int(m), jnp.asarray(s, A.dtype))


@float64_aware(arrays=('G_tilde',))
def finite_difference_rounding(G_tilde: Float[Array, "N N"], m: int) -> float:
    """Order-of-magnitude rounding error of the entries of Δ^{(m,m)} G̃ computed in its dtype.

    eps · (4T²)^m · max|G̃|: each order multiplies by T² and sums four terms. Song & Zhong eq. (5).

    Args:
      G_tilde: (N, N) matrix, N = 2T.
      m: order, m >= 1.

    Returns:
      Python float.
    """
    A = _as_array(G_tilde, "finite_difference_rounding")
    T = A.shape[0] // 2
    eps = float(jnp.finfo(A.dtype).eps)
    return eps * (4.0 * T * T) ** int(m) * float(jnp.max(jnp.abs(A)))


# ----------------------------------------------------------------------------------------------
# Low-frequency basis and fits
# ----------------------------------------------------------------------------------------------


def low_frequency_basis(T: int, k: int, *, convention: Basis = "printed", dtype: DType = None) -> Float[Array, "T k"]:
    """Low-frequency matrix F_{≤k} (Song & Zhong Theorem 1, before eq. (6)).

    convention="printed": (F_{≤k})_{t,s} = cos((s − ½)(t − 1)π/T), t = 1..T, s = 1..k, exactly as
      printed (f_s = (1, cos((s−½)π/T), ..., cos((s−½)(T−1)π/T))ᵀ).
    convention="dct": (F_{≤k})_{t,s} = cos((s − 1)(t − ½)π/T), the DCT-II vectors of frequencies
      0..k−1 that the proof (App. F.1, Lemma 3) actually produces from eq. (4).

    Args:
      T: number of positions, T >= 2.
      k: number of columns, 1 <= k <= T.
      convention: "printed" or "dct".
      dtype: float dtype (default: JAX's default float).

    Returns:
      (T, k) array.

    Raises:
      ValueError: T < 2, k out of range, unknown convention.
    """
    T = check_int(T, "T", "low_frequency_basis", minimum=2)
    _check_km(T, k=k, where="low_frequency_basis")
    dtype = jnp.result_type(float) if dtype is None else dtype
    t = jnp.arange(1, T + 1, dtype=dtype)[:, None]
    s = jnp.arange(1, int(k) + 1, dtype=dtype)[None, :]
    if convention == "printed":
        return jnp.cos((s - 0.5) * (t - 1) * jnp.pi / T)
    if convention == "dct":
        return jnp.cos((s - 1) * (t - 0.5) * jnp.pi / T)
    raise GeomjaxError(f"low_frequency_basis: convention must be 'printed' or 'dct', got {convention!r}")


def _op_sym(A):
    """Operator norm of symmetric matrices, max |eigenvalue|; A: (..., n, n) -> (...).

    Call it ONCE per compiled program on a stacked batch: two batched LAPACK eigh kernels that
    XLA:CPU runs concurrently can each hold a thread of the intra-op pool while waiting for
    their sub-tasks on that same pool, which deadlocks on a 2-core machine (observed with
    jaxlib's ``ParallelBatchMap``; see ``_table_core``).
    """
    sym = 0.5 * (A + jnp.swapaxes(A, -1, -2))
    # jnp.linalg.eigvalsh, not a values-only LAPACK callback (tried, removed): on the CPU the callback
    # gave the Theorem 1 counterexample's lower bound 2.4e-8 off NumPy's (tests/acceptance/test_claims.py), not rounding
    return jnp.max(jnp.abs(jnp.linalg.eigvalsh(sym)), axis=-1)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class LowFrequencyFit:
    """Result of :func:`best_low_frequency_fit` (Song & Zhong eq. (6)).

    Attributes:
      B: (k, k) matrix with F_{≤k} B Bᵀ F_{≤k}ᵀ = fit.
      fit: (T, T) PSD fit (F_{≤k}B)(F_{≤k}B)ᵀ.
      err_op: ‖G − fit‖_op (no 1/T factor): an upper bound on the op-norm optimum over B.
      err_op_lower: ‖(I − Π)G(I − Π)‖_op with Π the orthogonal projector onto span F_{≤k}: a lower
        bound on ‖G − F M Fᵀ‖_op for EVERY M, hence on the optimum over B.
    """

    B: Array
    fit: Array
    err_op: Array
    err_op_lower: Array


@partial(jax.jit, static_argnames=("k", "convention"))
def _best_fit(G, k: int, convention: str):
    T = G.shape[0]
    F = low_frequency_basis(T, k, convention=convention, dtype=G.dtype)
    U, s, Vt = jnp.linalg.svd(F, full_matrices=False)
    Fpinv = (Vt.T / s[None, :]) @ U.T  # (k, T); F is well conditioned for k <= T
    M = Fpinv @ G @ Fpinv.T
    M = 0.5 * (M + M.T)
    w, V = jnp.linalg.eigh(M)
    B = V * jnp.sqrt(jnp.clip(w, 0.0))[None, :]
    FB = F @ B
    fit = FB @ FB.T
    Q = U  # orthonormal basis of span F
    R = G - Q @ (Q.T @ G)
    R = R - (R @ Q) @ Q.T
    norms = _op_sym(jnp.stack([G - fit, R]))  # one eigh call (see _op_sym)
    return LowFrequencyFit(B=B, fit=fit, err_op=norms[0], err_op_lower=norms[1])


@float64_aware(arrays=('G',))
def best_low_frequency_fit(G: Float[Array, "T T"], k: int, *, convention: Basis = "printed") -> LowFrequencyFit:
    """Frobenius-optimal PSD fit (F_{≤k}B)(F_{≤k}B)ᵀ of G, with op-norm bounds (Song & Zhong eq. (6)).

    The op-norm-optimal B of eq. (6) solves a semidefinite program; as a proxy this returns the
    Frobenius-optimal one, B Bᵀ = F⁺ G F⁺ᵀ (so the fit is Π G Π, Π the orthogonal projector onto
    span F_{≤k}), together with a lower bound that holds for every B. The op-norm optimum lies in
    [err_op_lower, err_op], so "the bound holds for the best B" is certified when err_op ≤ bound,
    and refuted when err_op_lower > bound.

    Args:
      G: (T, T) symmetric PSD matrix, T >= 2.
      k: number of low-frequency vectors, 1 <= k <= T (static).
      convention: "printed" (Theorem 1 as printed) or "dct" (the basis of the proof).

    Returns:
      :class:`LowFrequencyFit`.

    Raises:
      ValueError: bad G (see :func:`reflected_gram`), G not PSD, k out of range.
    """
    G = _check_square(G, "best_low_frequency_fit")
    _check_km(G.shape[0], k=k, where="best_low_frequency_fit")
    _check_psd(G, "best_low_frequency_fit")
    if convention not in ("printed", "dct"):
        raise GeomjaxError(f"best_low_frequency_fit: convention must be 'printed' or 'dct', got {convention!r}")
    return _best_fit(G, int(k), convention)


def _index_mask(N: int, k: int, index_set: str) -> np.ndarray:
    freq = np.arange(N)
    signed = np.where(freq <= N // 2, freq, freq - N)
    if index_set == "symmetric":  # frequencies -(k-1)..(k-1)
        return np.abs(signed) <= k - 1
    if index_set == "printed":  # I = {1..k} ∪ {N-k+1..N}: frequencies 0..k-1 and -k..-1
        return (freq < k) | (freq >= N - k)
    raise GeomjaxError(f"proof_fit: index_set must be 'symmetric' or 'printed', got {index_set!r}")


def _dft_matrix(N: int, dtype):
    """F_{tt'} = ω^{(t-1)(t'-1)}, ω = exp(-2πi/N) (App. F.1). Explicit matmuls instead of jnp.fft:
    exact index bookkeeping, and it avoids an XLA:CPU FFT layout failure inside vmapped code."""
    ctype = jnp.complex128 if jnp.dtype(dtype) == jnp.float64 else jnp.complex64
    j = np.arange(N)
    phase = (np.outer(j, j) % N) * (-2.0 * np.pi / N)  # reduce mod N before the angle: exact
    return jnp.asarray(np.cos(phase) + 1j * np.sin(phase), dtype=ctype)


@partial(jax.jit, static_argnames=("index_set",))
def _proof_fit(G, k, index_set: str):
    """k is traced (one compilation for every k); index_set is static (real vs complex output)."""
    T = G.shape[0]
    N = 2 * T
    F = _dft_matrix(N, G.dtype)
    A_hat = F @ _reflect(G).astype(F.dtype) @ F.T  # eq. (13): Â = F A Fᵀ
    freq = jnp.arange(N)
    if index_set == "symmetric":  # frequencies -(k-1)..(k-1)
        signed = jnp.where(freq <= N // 2, freq, freq - N)
        mask = jnp.abs(signed) <= k - 1
    else:  # I = {1..k} ∪ {N-k+1..N} (1-based): frequencies 0..k-1 and -k..-1
        mask = (freq < k) | (freq >= N - k)
    Fs = jnp.conj(F[:T]) * mask[None, :].astype(F.dtype)  # rows 1..T of F*, columns in I
    back = (Fs @ A_hat @ Fs.T) / (N * N)  # [N^-2 F* (Â_II ⊕ 0) F*ᵀ]_{1:T,1:T}
    return back.real.astype(G.dtype) if index_set == "symmetric" else back


@float64_aware(arrays=('G',))
def proof_fit(
    G: Float[Array, "T T"], k: int, *, index_set: Literal["symmetric", "printed"] = "symmetric"
) -> Float[Array, "T T"] | Complex[Array, "T T"]:
    """The low-frequency fit built in the proof of Theorem 1 (Song & Zhong App. F.1, eqs. (16)-(17)).

    Takes the 2-D DFT Â = F G̃ Fᵀ of the reflected matrix (eq. 4), keeps the block Â_{I,I}, transforms
    back (N⁻² F* [·] F*ᵀ, eq. 13) and returns the top-left T×T block.

    index_set="symmetric" keeps the DFT frequencies −(k−1)..k−1. The result is real and equals
      P_k G P_k with P_k the orthogonal projector onto the DCT-II vectors of frequencies 0..k−1
      (``low_frequency_basis(T, k, convention="dct")``): Lemma 3 with the roles of frequency and
      position as they come out of eq. (4).
    index_set="printed" keeps I = {1..k} ∪ {2T−k+1..2T} as printed (frequencies 0..k−1 and −k..−1).
      This set is not closed under negation, so the result is complex (returned as such).

    Args:
      G: (T, T) symmetric matrix with G 1 = 0, T >= 2.
      k: 1 <= k <= T (static).
      index_set: "symmetric" (default) or "printed" (static).

    Returns:
      (T, T) real array ("symmetric") or complex array ("printed").

    Raises:
      ValueError: bad G, G not doubly centred, k out of range, unknown index_set.
    """
    G = _check_square(G, "proof_fit")
    _check_km(G.shape[0], k=k, where="proof_fit")
    _check_centred(G, "proof_fit")
    _index_mask(4, 1, index_set)  # validates the name
    return _proof_fit(G, jnp.asarray(int(k), jnp.int32), index_set)


def dft_gamma(N: int, dtype: DType = None) -> Complex[Array, " N"]:
    """γ_t of Song & Zhong App. F.1 eq. (15): γ_1 = 1, γ_t = N⁻¹ (1 − exp(−2πi(t−1)/N))⁻¹.

    Lemma 1 (eq. 14): (F x)_t = γ_t (F Δx)_t + 1{t = 1} Σ x, with Δx = N (x_t − x_{t−1}) periodic.

    Args:
      N: length, N >= 2.
      dtype: complex dtype (default: JAX's default complex).

    Returns:
      (N,) complex array; index 0 holds γ_1.
    """
    N = check_int(N, "N", "dft_gamma", minimum=2)
    dtype = jnp.result_type(complex) if dtype is None else dtype
    j = jnp.arange(1, N)
    g = 1.0 / (N * (1.0 - jnp.exp(-2j * jnp.pi * j / N)))
    return jnp.concatenate([jnp.ones((1,), dtype), g.astype(dtype)])


def corrected_constant(T: int, k: int, m: int) -> float:
    """Constant c with (1/T)‖G − P_k G P_k‖_op ≤ c·‖Δ^{(m,m)}G̃‖_max, from App. F.1 done carefully.

    c = 2[(4ab)^m + (4b²)^m], a = 1/(2N sin(π/N)), b = 1/(2N sin(πk/N)), N = 2T; the a-term is
    dropped for k = 1. Here Δ is eq. (5)'s (factor T² per order), P_k projects onto the DCT-II
    frequencies 0..k−1 (the proof's fit with the symmetric index set). Since N sin(π/N) ≥ 2 and
    N sin(πk/N) ≥ 2k for k ≤ T, c ≤ 4/(4k)^m. A sharper constant than the printed 6/(8k)^m of Song &
    Zhong eq. (6), not a fix of it: in the DCT-II basis the proof uses, the printed constant holds
    (claim ``song_zhong.theorem1.proof_basis``; the printed basis is a typo), and is 2.5–7× this one.

    Args:
      T: positions, T >= 2.  k: 1 <= k <= T.  m: m >= 1.

    Returns:
      Python float.
    """
    _check_km(int(T), k=k, m=m, where="corrected_constant")
    N = 2 * int(T)
    b = 1.0 / (2 * N * math.sin(math.pi * k / N))
    a = 1.0 / (2 * N * math.sin(math.pi / N))
    off = 0.0 if k == 1 else (4 * a * b) ** m
    return 2.0 * (off + (4 * b * b) ** m)


def _delta_max(G, m: int):
    Gt = _reflect(G)
    return jnp.max(jnp.abs(_fd(Gt, int(m), jnp.asarray(G.shape[0] ** 2, G.dtype))))


@float64_aware(arrays=('G',))
def theorem1_rhs(
    G: Float[Array, "T T"], k: int, m: int, *, constant: Literal["printed", "corrected"] = "printed"
) -> Float[Array, ""]:
    """Right side of Song & Zhong eq. (6): c(k, m) · ‖Δ^{(m,m)} G̃‖_max.

    Args:
      G: (T, T) symmetric matrix.
      k: 1 <= k <= T.  m: m >= 1.
      constant: "printed" → c = 6/(8k)^m; "corrected" → :func:`corrected_constant`.

    Returns:
      Scalar array.
    """
    G = _check_square(G, "theorem1_rhs")
    T = G.shape[0]
    _check_km(T, k=k, m=m, where="theorem1_rhs")
    if constant == "printed":
        c = 6.0 / (8.0 * k) ** m
    elif constant == "corrected":
        c = corrected_constant(T, k, m)
    else:
        raise GeomjaxError(f"theorem1_rhs: constant must be 'printed' or 'corrected', got {constant!r}")
    return c * _delta_max(G, int(m))


@float64_aware(arrays=('G',))
def theorem1_bound(
    G: Float[Array, "T T"],
    k: int,
    m: int,
    *,
    basis: Basis = "printed",
    fit: Literal["best", "proof"] = "best",
    constant: Literal["printed", "corrected"] = "printed",
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Both sides of Song & Zhong eq. (6) in its dimensionally consistent form.

    lhs = (1/T) ‖G − (F_{≤k}B)(F_{≤k}B)ᵀ‖_op, rhs = c(k, m) · ‖Δ^{(m,m)} G̃‖_max.

    Args:
      G: (T, T) symmetric PSD matrix with G 1 = 0 (Theorem 1's assumption Σ_t pos_t = 0).
      k: 1 <= k <= T.  m: m >= 1.
      basis: F_{≤k} convention, "printed" or "dct" (see :func:`low_frequency_basis`).
      fit: "best" → Frobenius-optimal PSD B (:func:`best_low_frequency_fit`, an upper bound on the
        op-norm optimum); "proof" → the App. F.1 fit (:func:`proof_fit`, symmetric index set),
        which lives in the "dct" basis (basis must be "dct").
      constant: "printed" (6/(8k)^m) or "corrected" (:func:`corrected_constant`).

    Returns:
      (lhs, rhs) scalar arrays. The tabulated version over k and m is :func:`theorem1_table`.

    Raises:
      ValueError: bad G (not square/symmetric/finite, T < 2, not PSD, not doubly centred), k or m
        out of range, fit="proof" with basis="printed".
    """
    G = _check_square(G, "theorem1_bound")
    T = G.shape[0]
    _check_km(T, k=k, m=m, where="theorem1_bound")
    _check_centred(G, "theorem1_bound")
    if fit == "best":
        lhs = best_low_frequency_fit(G, k, convention=basis).err_op / T
    elif fit == "proof":
        if basis != "dct":
            raise GeomjaxError("theorem1_bound: the proof's fit lives in the 'dct' basis; pass basis='dct'")
        _check_psd(G, "theorem1_bound")
        lhs = _op_sym(G - _proof_fit(G, jnp.asarray(int(k), jnp.int32), "symmetric")) / T
    else:
        raise GeomjaxError(f"theorem1_bound: fit must be 'best' or 'proof', got {fit!r}")
    return lhs, theorem1_rhs(G, k, m, constant=constant)


def _table_core_one(G, kmax: int, mmax: int):
    """All k = 1..kmax and m = 1..mmax of one G (nested spans, masked columns); vmappable.

    The fits are formed from rank-k factors (G − Q M Qᵀ and G − Q(GQ)ᵀ − (GQ)Qᵀ + Q M Qᵀ, M = QᵀGQ,
    instead of T×T projectors: T²k instead of T³ per k), and the DFT low-pass keeps only the 2·kmax − 1
    frequencies |f| < kmax that any k selects (instead of all N = 2T); float64 rounding of either form
    is ~1e-15 relative, far below the 1e-6 the study's numbers are compared at."""
    T = G.shape[0]
    N = 2 * T
    Gt = _reflect(G)
    dmax, A = [], Gt
    for _ in range(mmax):
        A = _fd(A, 1, jnp.asarray(T * T, G.dtype))
        dmax.append(jnp.max(jnp.abs(A)))
    Qp, _ = jnp.linalg.qr(low_frequency_basis(T, kmax, convention="printed", dtype=G.dtype))
    Qd, _ = jnp.linalg.qr(low_frequency_basis(T, kmax, convention="dct", dtype=G.dtype))
    freq = np.arange(N)
    signed = np.where(freq <= N // 2, freq, freq - N)
    sel = np.flatnonzero(np.abs(signed) <= kmax - 1)  # the frequencies any k <= kmax keeps
    F = _dft_matrix(N, G.dtype)[sel]  # (S, N) rows of the DFT at those frequencies
    A_low = F @ Gt.astype(F.dtype) @ F.T  # (S, S): the corner of F G̃ Fᵀ the low-pass reads
    Fs_all = jnp.conj(F[:, :T]).T  # (T, S)
    sig = jnp.asarray(np.abs(signed[sel]))

    def per_k(k):
        keep = (jnp.arange(kmax) < k).astype(G.dtype)[None, :]

        def residuals(Q):
            Qk = Q * keep
            GQ = G @ Qk
            M = Qk.T @ GQ
            fit = Qk @ M @ Qk.T
            R = G - Qk @ GQ.T - GQ @ Qk.T + fit
            return G - fit, R

        res_p, low_p = residuals(Qp)
        _, low_d = residuals(Qd)
        Fs = Fs_all * (sig <= k - 1)[None, :]
        back = ((Fs @ A_low @ Fs.T) / (N * N)).real
        return jnp.stack([res_p, low_p, G - back.astype(G.dtype), low_d])  # (4, T, T)

    mats = jax.vmap(per_k)(jnp.arange(1, kmax + 1))  # (kmax, 4, T, T)
    # ONE batched eigh for all 4·kmax matrices (of every layer, under the layers' vmap): several
    # concurrent batched eigh kernels can deadlock XLA:CPU's thread pool (see _op_sym).
    norms = _op_sym(mats.reshape(4 * kmax, T, T)).reshape(kmax, 4)
    return jnp.stack(dmax), norms[:, 0], norms[:, 1], norms[:, 2], norms[:, 3]


_table_core = partial(jax.jit, static_argnames=("kmax", "mmax"))(_table_core_one)
"""One G: one compiled program per (T, kmax, mmax)."""


@partial(jax.jit, static_argnames=("kmax", "mmax"))
def _table_core_stack(Gs, kmax: int, mmax: int):
    """A stack (L, T, T) of Gs as ONE program (one batched eigh for all L·4·kmax matrices): every layer of
    a study at once, compiled once per (L, T, kmax, mmax)."""
    return jax.vmap(_table_core_one, in_axes=(0, None, None))(Gs, kmax, mmax)


@dataclass(frozen=True)
class Theorem1Table:
    """Both sides of Song & Zhong eq. (6) over k and m for one G (NumPy arrays, host side).

    Attributes:
      T: size of G.
      ks: (K,) values of k.  ms: (M,) values of m.
      delta_max: (M,) ‖Δ^{(m,m)} G̃‖_max (eq. 5).
      delta_rounding: (M,) rounding scale of those entries (:func:`finite_difference_rounding`).
      lhs_printed: (K,) (1/T)‖G − fit‖_op, Frobenius-optimal PSD fit in the printed basis.
      lhs_printed_lower: (K,) lower bound over ALL B for the printed basis.
      lhs_dct: (K,) (1/T)‖G − fit‖_op for the proof's fit (DCT-II basis, symmetric index set).
      lhs_dct_lower: (K,) lower bound over all B for the DCT-II basis.
      rhs_printed: (K, M) 6/(8k)^m ‖Δ^{(m,m)}G̃‖_max.
      rhs_corrected: (K, M) corrected_constant(T, k, m) ‖Δ^{(m,m)}G̃‖_max.
      coef_printed, coef_corrected: (K, M) the constants alone.
    """

    T: int
    ks: np.ndarray
    ms: np.ndarray
    delta_max: np.ndarray
    delta_rounding: np.ndarray
    lhs_printed: np.ndarray
    lhs_printed_lower: np.ndarray
    lhs_dct: np.ndarray
    lhs_dct_lower: np.ndarray
    rhs_printed: np.ndarray
    rhs_corrected: np.ndarray
    coef_printed: np.ndarray
    coef_corrected: np.ndarray

    def rows(self) -> list[dict]:
        """One dict per (k, m) with every column, for JSON/Markdown reports."""
        out = []
        for i, k in enumerate(self.ks):
            for j, m in enumerate(self.ms):
                out.append(
                    {
                        "k": int(k),
                        "m": int(m),
                        "lhs_printed": float(self.lhs_printed[i]),
                        "lhs_printed_lower": float(self.lhs_printed_lower[i]),
                        "lhs_dct": float(self.lhs_dct[i]),
                        "rhs_printed": float(self.rhs_printed[i, j]),
                        "rhs_corrected": float(self.rhs_corrected[i, j]),
                        "delta_max": float(self.delta_max[j]),
                    }
                )
        return out


@float64_aware(arrays=('G',))
def theorem1_table(
    G: Float[Array, "T T"],
    ks: Sequence[int] | Int[Array, " K"] = tuple(range(1, 21)),
    ms: Sequence[int] | Int[Array, " M"] = tuple(range(1, 5)),
) -> Theorem1Table:
    """Tabulate both sides of Song & Zhong eq. (6) for k in ``ks`` and m in ``ms`` (host-side loop).

    Use float64 (``with jax.enable_x64(True):``): Δ^{(m,m)} cancels heavily (see
    :func:`finite_difference_rounding`).

    Args:
      G: (T, T) symmetric PSD matrix with G 1 = 0.
      ks: values 1 <= k <= T.  ms: values m >= 1.

    Returns:
      :class:`Theorem1Table`.

    Raises:
      ValueError: as :func:`theorem1_bound`.
    """
    G = _check_square(G, "theorem1_table")
    T = G.shape[0]
    _check_centred(G, "theorem1_table")
    _check_psd(G, "theorem1_table")
    ks, ms = _check_ks_ms(T, ks, ms, "theorem1_table")
    core = (np.asarray(a) for a in _table_core(G, int(ks.max()), int(ms.max())))
    return _assemble_table(T, ks, ms, *core, max_abs_reflected=float(jnp.max(jnp.abs(G))),
                           eps=float(jnp.finfo(G.dtype).eps))


def _check_ks_ms(T: int, ks, ms, where: str):
    ks = np.asarray(list(ks), dtype=int)
    ms = np.asarray(list(ms), dtype=int)
    for k in ks:
        _check_km(T, k=int(k), where=where)
    for m in ms:
        _check_km(T, m=int(m), where=where)
    return ks, ms


def _assemble_table(T, ks, ms, dmax_all, lp, lpl, ld, ldl, *, max_abs_reflected: float, eps: float):
    """A :class:`Theorem1Table` from the core's arrays over k = 1..kmax, m = 1..mmax (host side).
    ``max_abs_reflected``: max |G̃| (= max |G|: G̃ repeats G's entries), for the rounding scale of Δ."""
    dmax = dmax_all[ms - 1]
    dround = np.array([eps * (4.0 * T * T) ** int(m) * max_abs_reflected for m in ms])
    lp, lpl, ld, ldl = (a[ks - 1] / T for a in (lp, lpl, ld, ldl))
    cp = np.array([[6.0 / (8.0 * k) ** m for m in ms] for k in ks])
    cc = np.array([[corrected_constant(T, int(k), int(m)) for m in ms] for k in ks])
    return Theorem1Table(
        T=T,
        ks=ks,
        ms=ms,
        delta_max=dmax,
        delta_rounding=dround,
        lhs_printed=lp,
        lhs_printed_lower=lpl,
        lhs_dct=ld,
        lhs_dct_lower=ldl,
        rhs_printed=cp * dmax[None, :],
        rhs_corrected=cc * dmax[None, :],
        coef_printed=cp,
        coef_corrected=cc,
    )


@float64_aware(arrays=('Gs',))
def theorem1_tables(
    Gs: Float[Array, "L T T"],
    ks: Sequence[int] | Int[Array, " K"] = tuple(range(1, 21)),
    ms: Sequence[int] | Int[Array, " M"] = tuple(range(1, 5)),
) -> list[Theorem1Table]:
    """:func:`theorem1_table` (both sides of Song & Zhong eq. (6)) of L matrices at once: one compiled
    program over the stack (compiled once per (L, T, kmax, mmax), one batched eigh for all of them), the
    same numbers as L calls of :func:`theorem1_table`.

    Use float64 (``with jax.enable_x64(True):``), as for :func:`theorem1_table`.

    Args:
      Gs: (L, T, T) symmetric PSD matrices with G 1 = 0 (e.g. the positional Gram of every layer).
      ks: values 1 <= k <= T.  ms: values m >= 1.

    Returns:
      L :class:`Theorem1Table`, in the order of ``Gs``.

    Raises:
      ValueError: as :func:`theorem1_bound`, naming the first bad matrix's index.
    """
    Gs = as_real_array(Gs, "theorem1_tables")
    if Gs.ndim != 3:
        raise GeomjaxError(f"theorem1_tables: Gs must have shape (L, T, T), got {tuple(Gs.shape)}")
    T = Gs.shape[-1]
    for i in range(Gs.shape[0]):
        G = _check_square(Gs[i], f"theorem1_tables[{i}]")
        _check_centred(G, f"theorem1_tables[{i}]")
    ev = np.linalg.eigvalsh(np.asarray(Gs))  # the PSD check of every G in one host call
    for i, e in enumerate(ev):
        tol = 1e3 * float(np.finfo(np.asarray(Gs).dtype).eps) * T * (float(np.max(np.abs(e))) or 1.0)
        if float(e[0]) < -tol:
            raise GeomjaxError(f"theorem1_tables[{i}]: G is not positive semi-definite (smallest eigenvalue "
                               f"{float(e[0]):.3g}); a Gram matrix PᵀP is PSD")
    ks, ms = _check_ks_ms(T, ks, ms, "theorem1_tables")
    core = [np.asarray(a) for a in _table_core_stack(Gs, int(ks.max()), int(ms.max()))]
    big = np.max(np.abs(np.asarray(Gs)), axis=(1, 2))
    eps = float(np.finfo(np.asarray(Gs).dtype).eps)
    return [_assemble_table(T, ks, ms, *(a[i] for a in core), max_abs_reflected=float(big[i]), eps=eps)
            for i in range(Gs.shape[0])]
