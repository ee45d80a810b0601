"""Attention localization (Bao, Hataya & Karakida 2024): signal propagation, its closed form, LocATER.

Notation follows the paper with tokens as ROWS (geomjax convention): a sequence is X (T, d) with
rows x_1 … x_T, the softmax input of the last query is ω = X W_QK x_T / λ (paper: Xᵀ W_QK x_T / λ
with tokens as columns — the same numbers), and W := W_QK Σ.

* §2: Taylor coefficients γ^i = e^i/T − 1/T², γ_0^i = 1/T; the piecewise-linear softmax S̃
  (:func:`piecewise_softmax`, :func:`piecewise_coefficients`); the signal scores
  ⟨γ^i, ω⟩ + γ_0^i (:func:`linear_scores`) and Def. 1's propagation event (score ∈ [0, 1]).
* Assumption 1: Gaussian random walk x_1 ~ N(0, Σ), x_{t+1} ~ N(x_t, Σ) (:func:`random_walk`),
  isotropic Σ = I or anisotropic Σ = RᵀR/d with R ~ Unif(−2.5, 2.5) (:func:`anisotropic_covariance`);
  random W_QK = B diag(w) Bᵀ with w ~ N(mean, scale²) (:func:`random_wqk`).
* Def. 1 empirically: :func:`empirical_rho` — one jitted vmap over draws × sequences (tokens
  vectorised), also the attention entropy of each draw (Fig. 5).
* Lemma 1: printed asymptotic moments (:func:`lemma1_moments`) and the exact finite-T moments
  (:func:`exact_moments`, derived here: ⟨γ^i, Xᵀ W_QK x_T⟩ is a Gaussian quadratic form, see below).
  The exact variance shows that Lemma 1's variance is missing a term: the limit is
  (2θ² − 2θ + 7/12)·tr(W²)/λ², not (2θ² + 7/12)·tr(W²)/λ² (:func:`variance_profile`).
* Eq. (6): ρ(θ; ξ, η) (:func:`rho_theta`) with ξ = tr(W)/√tr(W²), η = √tr(W²)/λ (:func:`xi_eta`),
  Gaussian approximation ρ_i ≈ ½{erf((1−μ)/√(2v)) + erf(μ/√(2v))} (:func:`gaussian_rho`);
  Lemma 2 limits (:func:`rho_limit`).
* §5: eq. (5) (:func:`eq5_terms`), eq. (7) (:func:`eq7_terms`), eq. (8) (:func:`eigen_variance_identity`),
  eq. (10) (:func:`eq10_terms`), attention entropy (:func:`attention_entropy`), Zhai et al.'s bound
  eq. (9) as printed (:func:`zhai_bound`) and the one-versus-rest entropy it approximates
  (:func:`one_vs_rest_entropy`).
* §6 LocATER: κ1·tr(W_QKᵀW_QK) + κ2·(tr W_QK − 1)² summed over layers and heads of any geomjax
  model (toy, GPT-2, BERT parameter trees) (:func:`locater_penalty`, :func:`locater_loss`,
  :func:`add_locater_gradient`), and the §6 derivative formulas as printed and corrected
  (:func:`locater_grads_printed`, :func:`locater_grads_corrected`).

Exact finite-T moments (geomjax derivation). Write x_t = F Σ_{s≤t} z_s with z_s ~ N(0, I_d) i.i.d.
and Σ = F Fᵀ, and c = γ^i. Then ⟨γ^i, Xᵀ W_QK x_T⟩ = Σ_{s,u} C_s z_sᵀ M z_u with C_s = Σ_{j≥s} c_j and
M = Fᵀ W_QK F, a quadratic form zᵀ(C 1ᵀ ⊗ M) z of a standard Gaussian vector. Hence
mean = (Σ_s C_s)·tr(M) and variance = (Σ_s C_s)²·tr(M²) + T·Σ_s C_s²·tr(M Mᵀ), with tr(M) = tr(W),
tr(M²) = tr(W²) and tr(MMᵀ) = tr(W_QK Σ W_QKᵀ Σ) (= tr(W²) for symmetric W_QK). With θ = i/T,
Σ_s C_s → θ − ½ and T·Σ_s C_s² → θ³/3 + (1 − θ)³/3, which gives the corrected variance profile.
(Lemma 4 eq. (15) of the paper writes E[x_iᵀWx_i] = (i − 1)tr(WΣ), i.e. x_1 = 0; under Assumption 1
as printed, x_1 ~ N(0, Σ), it is i·tr(WΣ). Only o(1) terms change.)

Attention-matrix orientation: geomjax models score query i against key j as x_i W_q W_kᵀ x_jᵀ;
:func:`qk_matrix` returns W_QK = W_q W_kᵀ (d, d) for that orientation. The paper's W_QK is its
transpose; traces and Frobenius norms, hence LocATER, do not depend on the choice.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import erf

from geomjax.base._checks import check_finite, check_square, float64_aware, is_concrete
from geomjax.errors import GeomjaxError
from geomjax.typing import Array, Bool, Broadcastable, DType, Float, Key, Numeric, Real, Scalar

__all__ = [
    "taylor_coefficients",
    "linear_scores",
    "piecewise_coefficients",
    "piecewise_softmax",
    "propagates",
    "softmax_input",
    "random_walk",
    "anisotropic_covariance",
    "random_orthogonal",
    "random_wqk",
    "empirical_rho",
    "exact_rho",
    "frequency_from_probs",
    "rho_from_walks",
    "w_traces",
    "xi_eta",
    "fig5_simulation",
    "lemma1_moments",
    "exact_moments",
    "variance_profile",
    "gaussian_rho",
    "rho_theta",
    "rho_limit",
    "eq5_terms",
    "eq7_terms",
    "eigen_variance_identity",
    "eq10_terms",
    "attention_entropy",
    "zhai_nu",
    "zhai_bound",
    "one_vs_rest_entropy",
    "qk_matrix",
    "find_qk_heads",
    "qk_matrices",
    "locater_terms",
    "locater_penalty",
    "locater_loss",
    "add_locater_gradient",
    "locater_grads_printed",
    "locater_grads_corrected",
]

VARIANCE_FORMS = ("printed", "corrected")

# ----------------------------------------------------------------------------------------------
# Input checks
# ----------------------------------------------------------------------------------------------


def _check_lambda(lam, where: str) -> None:
    if is_concrete(lam):
        a = np.asarray(lam, dtype=float)
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise GeomjaxError(f"{where}: the temperature λ must be finite and > 0 (commonly √d), got {lam}")


def _check_T(T, where: str) -> int:
    if not isinstance(T, (int, np.integer)) or isinstance(T, bool):
        raise GeomjaxError(f"{where}: T (number of tokens) must be a Python int, got {T!r}")
    if T < 2:
        raise GeomjaxError(f"{where}: T (number of tokens) must be >= 2, got {T}; ρ_i compares tokens "
                         "of a sequence, so use sequences of at least 2 tokens")
    return int(T)


def _check_theta(theta, where: str) -> None:
    if is_concrete(theta):
        a = np.asarray(theta, dtype=float)
        if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
            raise GeomjaxError(f"{where}: θ (relative token position i/T) must lie in [0, 1], got "
                             f"values in [{np.nanmin(a)}, {np.nanmax(a)}]")


def _check_pair(W_qk, Sigma, where: str) -> None:
    check_square(W_qk, "W_QK", where, "(..., d, d)", batch=True)
    check_square(Sigma, "Σ", where, "(..., d, d)", batch=True)
    if np.shape(W_qk)[-1] != np.shape(Sigma)[-1]:
        raise GeomjaxError(f"{where}: W_QK is {np.shape(W_qk)[-2:]} but Σ is {np.shape(Sigma)[-2:]}; "
                         "both must be (d, d) with the same token dimension d")


# ----------------------------------------------------------------------------------------------
# §2: Taylor coefficients and the piecewise-linear softmax
# ----------------------------------------------------------------------------------------------


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def taylor_coefficients(T: int, dtype: DType = jnp.float32) -> tuple[Float[Array, "T T"], Float[Array, "T"]]:
    """Taylor coefficients of softmax at 0 (Bao §2): γ^i = e^i/T − 1/T² (row i), γ_0^i = 1/T.

    Args:
      T: number of tokens (>= 2).
      dtype: float dtype of the result.

    Returns:
      (gamma (T, T) with gamma[i] = γ^i = ∇_i S(0), gamma0 (T,) = S(0)).
    """
    T = _check_T(T, "taylor_coefficients")
    gamma = jnp.eye(T, dtype=dtype) / T - jnp.full((T, T), 1.0 / T**2, dtype)
    return gamma, jnp.full((T,), 1.0 / T, dtype)


@float64_aware(arrays=("omega",))
def linear_scores(omega: Float[Array, "... T"]) -> Float[Array, "... T"]:
    """Linearised softmax ⟨γ^i, ω⟩ + γ_0^i for every i (Bao §2, Def. 1): (ω_i − mean ω)/T + 1/T.

    The scores are invariant to adding a constant to ω (Σ_α γ^i_α = 0), so log-probabilities of a
    softmax may be passed instead of its logits.

    Args:
      omega: softmax inputs (..., T), T >= 2.
    """
    omega = jnp.asarray(omega)
    _check_T(int(omega.shape[-1]), "linear_scores")
    T = omega.shape[-1]
    return (omega - jnp.mean(omega, axis=-1, keepdims=True)) / T + 1.0 / T


@float64_aware(arrays=("omega",))
def propagates(omega: Float[Array, "*B T"]) -> Bool[Array, "*B T"]:
    """Def. 1's event ⟨γ^i, ω⟩ + γ_0^i ∈ [0, 1] for every token i (boolean (..., T))."""
    s = linear_scores(omega)
    return (s >= 0) & (s <= 1)


@float64_aware(arrays=("omega",))
def piecewise_coefficients(omega: Float[Array, "T"]) -> tuple[Float[Array, "T T"], Float[Array, "T"]]:
    """(Γ, γ̃_0) of the piecewise-linear softmax S̃ (Bao §2): column i of Γ is γ̃^i.

    (γ̃^i, γ̃_0^i) = (0, 0) if ⟨γ^i, ω⟩ + γ_0^i < 0, (γ^i, γ_0^i) if it lies in [0, 1], (0, 1) if > 1.

    Args:
      omega: one softmax input (T,).

    Returns:
      (Gamma (T, T), gamma0_tilde (T,)) with S̃(ω) = Γᵀω + γ̃_0.
    """
    omega = jnp.asarray(omega)
    if omega.ndim != 1:
        raise GeomjaxError(f"piecewise_coefficients: ω must be one vector (T,), got shape {omega.shape}; vmap over batches")
    T = _check_T(int(omega.shape[0]), "piecewise_coefficients")
    gamma, gamma0 = taylor_coefficients(T, omega.dtype)
    s = gamma @ omega + gamma0
    inside = (s >= 0) & (s <= 1)
    Gamma = jnp.where(inside[None, :], gamma.T, 0.0)  # column i = γ̃^i
    g0 = jnp.where(inside, gamma0, jnp.where(s > 1, 1.0, 0.0)).astype(omega.dtype)
    return Gamma, g0


@float64_aware(arrays=("omega",))
def piecewise_softmax(omega: Float[Array, "... T"]) -> Float[Array, "... T"]:
    """Piecewise-linear softmax S̃(ω)_i = max{0, min{1, ⟨γ^i, ω⟩ + γ_0^i}} (Bao §2, Fig. 1)."""
    return jnp.clip(linear_scores(omega), 0.0, 1.0)


@float64_aware(arrays=("X", "W_qk", "lam"))
def softmax_input(X: Float[Array, "T d"], W_qk: Float[Array, "d d"], lam: Scalar) -> Float[Array, " T"]:
    """ω = Xᵀ W_QK x_T / λ of Def. 1 for one sequence X (T, d) (tokens as rows): ω_j = x_jᵀ W_QK x_T / λ."""
    return X @ (W_qk @ X[-1]) / lam


# ----------------------------------------------------------------------------------------------
# Assumption 1 and the random W_QK of §5
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("factor",))
def random_walk(key: Key, T: int, factor: Float[Array, "d d"]) -> Float[Array, "T d"]:
    """One Gaussian random walk of Assumption 1 (Bao §4): x_1 ~ N(0, Σ), x_{t+1} ~ N(x_t, Σ).

    Args:
      key: PRNG key.
      T: number of tokens (>= 2).
      factor: F (d, d) with Σ = F Fᵀ (identity for the isotropic case).

    Returns:
      X (T, d), rows x_1 … x_T.
    """
    T = _check_T(T, "random_walk")
    check_square(factor, "the covariance factor F", "random_walk", "(..., d, d)", batch=True)
    d = factor.shape[-1]
    z = jax.random.normal(key, (T, d), factor.dtype)
    return jnp.cumsum(z, axis=0) @ factor.T


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def anisotropic_covariance(
    key: Key, d: int, half_width: Scalar = 2.5, dtype: DType = jnp.float32
) -> tuple[Float[Array, "d d"], Float[Array, "d d"]]:
    """Anisotropic Σ = RᵀR/d with R ~ Unif(−2.5, 2.5)^{d×d} (Bao §5, "Numerical simulation").

    Returns:
      (Sigma (d, d), factor F = Rᵀ/√d (d, d)) with Σ = F Fᵀ.
    """
    if d < 1:
        raise GeomjaxError(f"anisotropic_covariance: d must be >= 1, got {d}")
    R = jax.random.uniform(key, (d, d), dtype, -half_width, half_width)
    F = R.T / math.sqrt(d)
    return F @ F.T, F


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def random_orthogonal(key: Key, d: int, dtype: DType = jnp.float32) -> Float[Array, "d d"]:
    """Haar-random orthogonal matrix B (d, d) (QR of a Gaussian matrix with the sign fix)."""
    g = jax.random.normal(key, (d, d), dtype)
    q, r = jnp.linalg.qr(g)
    return q * jnp.sign(jnp.diagonal(r))[None, :]


@float64_aware  # dtype="float64" computes in float64 (x64 switched on for the call)
def random_wqk(
    key: Key, d: int, mean: Scalar, scale: Scalar, dtype: DType = jnp.float32
) -> tuple[Float[Array, "d d"], Float[Array, " d"]]:
    """Random symmetric W_QK = B diag(w) Bᵀ with w_i ~ N(mean, scale²) i.i.d. (Bao §5, Fig. 5).

    Returns:
      (W_qk (d, d), eigenvalues w (d,)).
    """
    kb, kw = jax.random.split(key)
    B = random_orthogonal(kb, d, dtype)
    w = mean + scale * jax.random.normal(kw, (d,), dtype)
    return (B * w[None, :]) @ B.T, w


@float64_aware(arrays=("probs",))
def attention_entropy(probs: Float[Array, "*B Q K"], axis: int = -1) -> Float[Array, " *B"]:
    """Attention entropy (Zhai et al.; Bao §5): mean over rows of −Σ_j A_ij ln A_ij (nats).

    Args:
      probs: attention probabilities (..., Q, K) (Q = K = T for self-attention), rows summing to
        one along ``axis``; zero entries contribute 0.
    """
    p = jnp.asarray(probs)
    ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=axis)
    return jnp.mean(ent, axis=-1)


@functools.partial(jax.jit, static_argnames=("T", "n_seq", "with_entropy"))
def _empirical_rho(key, W_qk, factor, lam, T: int, n_seq: int, with_entropy: bool):
    # x_t = F z_{≤t} (z_{≤t} = cumsum of standard normals), so x_jᵀ W_QK x_T = z_{≤j}ᵀ M z_{≤T} with
    # M = Fᵀ W_QK F: O(T·d) per sequence instead of O(T·d²). One normal draw per W_QK draw.
    def one_seq(Z, M):
        s = linear_scores(Z @ (M @ Z[-1]) / lam)
        hit = ((s >= 0) & (s <= 1)).astype(M.dtype)
        if not with_entropy:
            return hit, jnp.zeros((), M.dtype)
        A = jax.nn.softmax(Z @ M @ Z.T / lam, axis=-1)
        return hit, attention_entropy(A)

    def one_draw(k, W):
        M = factor.T @ W @ factor
        Z = jnp.cumsum(jax.random.normal(k, (n_seq, T, M.shape[-1]), M.dtype), axis=1)
        hits, ents = jax.vmap(one_seq, in_axes=(0, None))(Z, M)
        return jnp.mean(hits, axis=0), jnp.mean(ents)

    keys = jax.random.split(key, W_qk.shape[0])
    return jax.vmap(one_draw)(keys, W_qk)


@jax.jit
def _rho_from_walks(Z, M, lam):
    s = linear_scores(jnp.einsum("dstk,dkl,dsl->dst", Z, M, Z[:, :, -1]) / lam)
    return jnp.mean(((s >= 0) & (s <= 1)).astype(Z.dtype), axis=1)


@float64_aware(arrays=("Z", "M", "lam"))
def rho_from_walks(Z: Float[Array, "D S T d"], M: Float[Array, "D d d"], lam: Scalar) -> Float[Array, "D T"]:
    """Def. 1 frequencies from given walks (Bao §3): Z (D, S, T, d) cumulative sums of standard normals
    per draw and sequence, M = Fᵀ W_QK F (D, d, d); ω_j = Z_j M Z_T / λ. Same math as :func:`empirical_rho`."""
    _check_lambda(lam, "rho_from_walks")
    if np.ndim(Z) != 4 or np.ndim(M) != 3 or np.shape(Z)[0] != np.shape(M)[0] or np.shape(Z)[-1] != np.shape(M)[-1]:
        raise GeomjaxError(f"rho_from_walks: need Z (D, S, T, d) and M (D, d, d), got {np.shape(Z)} and {np.shape(M)}")
    _check_T(int(np.shape(Z)[2]), "rho_from_walks")
    return _rho_from_walks(jnp.asarray(Z), jnp.asarray(M), jnp.asarray(lam, jnp.asarray(Z).dtype))


@float64_aware(arrays=("W_qk", "factor", "lam"))
def empirical_rho(
    key: Key,
    W_qk: Float[Array, "*D d d"],
    factor: Float[Array, "d d"],
    lam: Real[Numeric, "..."],
    *,
    T: int,
    n_seq: int,
    with_entropy: bool = False,
) -> dict[str, Array]:
    """Empirical signal propagation probability ρ_i of Def. 1 (Bao §3; Fig. 5) over random walks.

    For each W_QK draw, ``n_seq`` independent random walks (Assumption 1, Σ = F Fᵀ) are sampled and
    ρ_i is the frequency of ⟨γ^i, ω⟩ + γ_0^i ∈ [0, 1] with ω = Xᵀ W_QK x_T / λ. Everything (draws ×
    sequences × tokens) runs in one jitted vmap.

    Args:
      key: PRNG key.
      W_qk: (d, d) or a stack (D, d, d) of query-key matrices.
      factor: F (d, d) with Σ = F Fᵀ.
      lam: temperature λ > 0.
      T: tokens per sequence (>= 2).
      n_seq: sequences per draw (>= 2).
      with_entropy: also return the attention entropy of A = S(X W_QK Xᵀ/λ) averaged over sequences.

    Returns:
      dict with ``rho`` ((D,) T) frequencies, ``sem`` ((D,) T) their binomial standard errors
      √(ρ(1−ρ)/(n−1)), and ``entropy`` ((D,)) when requested.
    """
    T = _check_T(T, "empirical_rho")
    if not isinstance(n_seq, (int, np.integer)) or n_seq < 2:
        raise GeomjaxError(f"empirical_rho: n_seq must be an int >= 2, got {n_seq!r}")
    _check_lambda(lam, "empirical_rho")
    W = jnp.asarray(W_qk)
    _check_pair(W, factor, "empirical_rho")
    check_finite(W, "W_QK", "empirical_rho")
    single = W.ndim == 2
    if single:
        W = W[None]
    rho, ent = _empirical_rho(key, W, jnp.asarray(factor, W.dtype), jnp.asarray(lam, W.dtype), T, int(n_seq), bool(with_entropy))
    out = {"rho": rho, "sem": jnp.sqrt(rho * (1 - rho) / (n_seq - 1))}
    if with_entropy:
        out["entropy"] = ent
    if single:
        out = {k: v[0] for k, v in out.items()}
    return out


@float64_aware(arrays=("probs",))
def frequency_from_probs(probs: Float[Array, "B T"]) -> Float[Array, "T"]:
    """Per-token propagation frequency in a batch (Bao §7, Fig. 7) from the last query's attention row.

    ⟨γ^i, ω⟩ is invariant to shifting ω, so ω may be replaced by log A_T· (the log-probabilities of
    the last query's attention row). Entries with zero probability are floored at the smallest
    normal number (their score is then far below 0, as their logit is).

    Args:
      probs: attention probabilities of the last query over T keys, (B, T).
    """
    p = jnp.asarray(probs)
    logp = jnp.log(jnp.maximum(p, jnp.finfo(p.dtype).tiny))
    return jnp.mean(propagates(logp).astype(p.dtype), axis=0)


# ----------------------------------------------------------------------------------------------
# Lemma 1, eq. (6), Lemma 2
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("W_qk", "Sigma"))
def w_traces(W_qk: Float[Array, "d d"], Sigma: Float[Array, "d d"]) -> dict[str, Array]:
    """tr(W), tr(W²) and tr(W_QK Σ W_QKᵀ Σ) for W = W_QK Σ (Bao Lemma 1, eq. (6))."""
    _check_pair(W_qk, Sigma, "w_traces")
    W = W_qk @ Sigma
    return {"trW": jnp.trace(W), "trW2": jnp.trace(W @ W), "trMMt": jnp.trace(W @ W_qk.T @ Sigma)}


@float64_aware(arrays=("W_qk", "Sigma", "lam"))
def xi_eta(
    W_qk: Float[Array, "d d"], Sigma: Float[Array, "d d"], lam: Scalar
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """ξ = tr(W)/√tr(W²) and η = √tr(W²)/λ with W = W_QK Σ (Bao eq. (6)).

    Raises:
      ValueError: λ <= 0, non-square or mismatched W_QK and Σ, or tr(W²) <= 0 (possible for an
        asymmetric W_QK; symmetrise it, (W_QK + W_QKᵀ)/2, as the paper suggests after Lemma 1).
    """
    _check_lambda(lam, "xi_eta")
    t = w_traces(W_qk, Sigma)
    if is_concrete(t["trW2"]) and not float(t["trW2"]) > 0:
        raise GeomjaxError(f"xi_eta: tr(W²) = {float(t['trW2'])} is not > 0, so ξ and η are undefined; "
                         "use a nonzero symmetric W_QK (symmetrise an asymmetric one)")
    s = jnp.sqrt(t["trW2"])
    return t["trW"] / s, s / lam


FIG5_MEANS = (0.0, 0.05, 0.2)
FIG5_SCALES = (0.02, 0.1, 0.5)


def fig5_simulation(key: Key, *, n_seq: int = 300, T: int = 40, d: int = 128, n_draws: int = 10,
                    means: tuple[float, ...] = FIG5_MEANS, scales: tuple[float, ...] = FIG5_SCALES,
                    anisotropic: bool = False) -> dict[str, Any]:
    """Bao Fig. 5 simulation: ρ_i over random walks and attention entropy per eigenvalue (mean, scale) pair.

    For every (mean, scale), ``n_draws`` W_QK = B diag(w) Bᵀ (w ~ N(mean, scale²), d = 128) and
    ``n_seq`` random walks of T tokens each (Σ = I or RᵀR/d), λ = √d; the draws run in chunks of one jitted
    vmap each (:func:`empirical_rho`; a chunk holds about 2^24 floats of walks, so memory does not grow with
    the number of draws).

    Returns:
      dict with ``rho`` (P, n_draws, T), ``entropy`` (P, n_draws), ``pairs`` [(mean, scale)], ``xi``, ``eta``
      (P, n_draws) of W = W_QK Σ.
    """
    k_sig, k_w, k_walk = jax.random.split(key, 3)
    if anisotropic:
        Sig, F = anisotropic_covariance(k_sig, d)
    else:
        Sig, F = jnp.eye(d), jnp.eye(d)
    pairs = [(m, s) for m in means for s in scales]
    keys = jax.random.split(k_w, len(pairs) * n_draws).reshape(len(pairs), n_draws)
    Ws = []
    for p, (m, s) in enumerate(pairs):
        Ws.append(jax.vmap(lambda k: random_wqk(k, d, m, s)[0])(keys[p]))
    W = jnp.stack(Ws).reshape(len(pairs) * n_draws, d, d)
    lam = math.sqrt(d)
    # the walks of `chunk` draws at a time (about 2^24 floats: 64 MiB of walks per call; at n_seq = 3000 one
    # vmap over all 90 draws held 5.5 GB of walks and, with the attention matrices, took 23 GiB)
    chunk = max(1, min(W.shape[0], 2**24 // (n_seq * T * d)))
    parts = [empirical_rho(jax.random.fold_in(k_walk, c), W[a:a + chunk], F, lam, T=T, n_seq=n_seq, with_entropy=True)
             for c, a in enumerate(range(0, W.shape[0], chunk))]
    res = {k: jnp.concatenate([p[k] for p in parts]) for k in ("rho", "entropy")}
    t = jax.vmap(lambda w: w_traces(w, Sig))(W)
    xi = t["trW"] / jnp.sqrt(t["trW2"])
    eta = jnp.sqrt(t["trW2"]) / lam
    P = len(pairs)
    return {"rho": np.asarray(res["rho"]).reshape(P, n_draws, T), "entropy": np.asarray(res["entropy"]).reshape(P, n_draws),
            "pairs": pairs, "xi": np.asarray(xi).reshape(P, n_draws), "eta": np.asarray(eta).reshape(P, n_draws)}


@float64_aware(arrays=("theta",))
def variance_profile(theta: Real[Numeric, " *B"], form: str = "printed") -> Real[Numeric, " *B"]:
    """Variance factor of Lemma 1 at θ = i/T: printed 2θ² + 7/12; corrected 2θ² − 2θ + 7/12 (geomjax)."""
    if form == "printed":
        return 2 * theta**2 + 7.0 / 12.0
    if form == "corrected":
        return 2 * theta**2 - 2 * theta + 7.0 / 12.0
    raise GeomjaxError(f"variance_profile: form must be one of {VARIANCE_FORMS}, got {form!r}")


def _positions(T, positions, dtype, where):
    if positions is None:
        return jnp.arange(1, T + 1, dtype=dtype)
    p = jnp.asarray(positions, dtype)
    if is_concrete(p) and (np.any(np.asarray(p) < 1) or np.any(np.asarray(p) > T)):
        raise GeomjaxError(f"{where}: positions must lie in 1..T = {T}")
    return p


@float64_aware(arrays=("trW", "trW2", "lam", "positions"))
def lemma1_moments(
    T: int,
    trW: Scalar,
    trW2: Scalar,
    lam: Scalar,
    form: str = "printed",
    positions: Real[Array, " P"] | None = None,
) -> tuple[Float[Array, " P"], Float[Array, " P"]]:
    """Asymptotic mean and variance of ⟨γ^i, ω⟩ + γ_0^i (Bao Lemma 1), i = 1..T, without the o(1) terms.

    μ^i = (i/T − ½)·tr(W)/λ;  v^i = (2θ² + 7/12)·tr(W²)/λ² (``form="printed"``) or
    (2θ² − 2θ + 7/12)·tr(W²)/λ² (``form="corrected"``), θ = i/T. ``positions`` (1-based i, optional)
    restricts the output to those tokens.
    """
    T = _check_T(T, "lemma1_moments")
    _check_lambda(lam, "lemma1_moments")
    theta = _positions(T, positions, jnp.result_type(trW, float), "lemma1_moments") / T
    mu = (theta - 0.5) * trW / lam
    v = variance_profile(theta, form) * trW2 / lam**2
    return mu, v


@float64_aware(arrays=("W_qk", "Sigma", "lam", "positions"))
def exact_moments(
    W_qk: Float[Array, "d d"],
    Sigma: Float[Array, "d d"],
    T: int,
    lam: Scalar,
    positions: Real[Array, " P"] | None = None,
) -> tuple[Float[Array, " P"], Float[Array, " P"]]:
    """Exact finite-T mean and variance of ⟨γ^i, ω⟩ + γ_0^i under Assumption 1 (geomjax; Bao Lemma 1).

    mean_i = (Σ_s C_s)·tr(W)/λ + 1/T, var_i = [(Σ_s C_s)²·tr(W²) + T·Σ_s C_s²·tr(W_QK Σ W_QKᵀ Σ)]/λ²,
    C_s = 𝟙{s ≤ i}/T − (T − s + 1)/T² (see the module docstring). Valid for any (also asymmetric)
    W_QK and any covariance Σ.

    Returns:
      (mean (T,), variance (T,)) for i = 1..T (or for the 1-based ``positions`` given).
    """
    T = _check_T(T, "exact_moments")
    _check_lambda(lam, "exact_moments")
    t = w_traces(W_qk, Sigma)
    dt = t["trW"].dtype
    sumC, sumC2 = _position_sums(_positions(T, positions, dt, "exact_moments"), T)
    mean = sumC * t["trW"] / lam + 1.0 / T
    var = (sumC**2 * t["trW2"] + T * sumC2 * t["trMMt"]) / lam**2
    return mean, var


def _position_sums(i, T: int):
    """(Σ_s C_s, Σ_s C_s²) at 1-based positions i, C_s = 𝟙{s ≤ i}/T − (T − s + 1)/T² (module docstring): closed
    forms, O(T) memory."""
    sumC = i / T - (T + 1) / (2.0 * T)
    sumC2 = i / T**2 - 2.0 * (i * (T + 1) - i * (i + 1) / 2) / T**3 + (T * (T + 1) * (2 * T + 1) / 6.0) / T**4
    return sumC, sumC2


_GL16 = np.polynomial.legendre.leggauss(16)  # nodes and weights of one Gauss–Legendre panel on [−1, 1]
_MAX_PANELS = 256
# float32 rounding of the inversion, added to its error bar: measured ≤ 1.6e-6 against float64 with 64 panels over
# 1,024 draws × 128 positions of the §5 anisotropic cases (2026-11-26); about six times that. float64: its own rounding
# is below the tail bound.
_ROUNDING = (0.0, 1e-5)
_TAIL = 1e-10  # the truncated tail ∫_U^∞ of the inversion integral is bounded by this (Imhof 1961, eq. (3.4))


def _inversion(nu, T: int, panels: int):
    """Gil-Pelaez/Imhof inversion of P(−1/T ≤ Σ_j ν_j χ²_1,j ≤ 1 − 1/T) for ν (P, n): composite Gauss–Legendre
    (``panels`` × 16 nodes) on [0, U], U from the tail bound of the largest |ν_j| (the smallest U over subsets)."""
    lg = -jnp.sort(-jnp.log(2.0 * jnp.maximum(jnp.abs(nu), jnp.finfo(nu.dtype).tiny)), axis=-1)
    k = jnp.arange(1, nu.shape[-1] + 1, dtype=nu.dtype) / 2.0
    # tail ≤ 2/(π k U^k Π_{top 2k} √(2|ν_j|)) with the 2k largest |ν_j| (each factor of ρ(u) ≥ (2|ν|u)^½)
    U = jnp.exp(jnp.min((jnp.log(2.0 / (jnp.pi * k * _TAIL))[None] - 0.5 * jnp.cumsum(lg, axis=-1)) / k[None], axis=-1))
    node, weight = (jnp.asarray(a, nu.dtype) for a in _GL16)
    t = ((jnp.arange(panels, dtype=nu.dtype)[:, None] + (node[None] + 1.0) / 2.0) / panels).reshape(-1)
    wt = jnp.tile(weight / (2.0 * panels), panels)
    u = U[:, None] * t[None]  # (P, N)
    # φ(u) = Π_j (1 − i x_j)^(−½), x_j = 2ν_j u: each factor is w/|1 + i x| with w = √(1 + i x) = p + i x/(2p),
    # p = √((|1 + i x| + 1)/2) — square roots and products only (no arctan or log), |φ| ≤ 1 (no overflow)
    x = 2.0 * nu[:, None, :] * u[..., None]  # (P, N, n)
    r = jnp.sqrt(1.0 + x * x)
    p = jnp.sqrt((r + 1.0) / 2.0)
    re, im = _complex_product(p / r, x / (2.0 * p * r))  # (P, N): φ(u)
    # Im[e^{iu/T} φ] − Im[e^{−iu(1 − 1/T)} φ]
    a, b = u / T, u * (1.0 - 1.0 / T)
    g = (re * (jnp.sin(a) + jnp.sin(b)) + im * (jnp.cos(a) - jnp.cos(b))) / u
    return jnp.sum(wt[None] * g, axis=-1) * U / jnp.pi


def _complex_product(re, im):
    """Π over the last axis of the complex numbers re + i·im (a balanced binary tree of products)."""
    while re.shape[-1] > 1:
        if re.shape[-1] % 2:
            re = jnp.concatenate([re, jnp.ones_like(re[..., :1])], axis=-1)
            im = jnp.concatenate([im, jnp.zeros_like(im[..., :1])], axis=-1)
        a, b, c, d = re[..., 0::2], im[..., 0::2], re[..., 1::2], im[..., 1::2]
        re, im = a * c - b * d, a * d + b * c
    return re[..., 0], im[..., 0]


@functools.partial(jax.jit, static_argnames=("T", "panels"))
def _exact_rho(m, lam, T: int, panels: int):
    """(D, d) eigenvalues of M per draw -> (D, T) ρ by :func:`_inversion` with ``panels`` panels."""
    sumC, sumC2 = _position_sums(jnp.arange(1, T + 1, dtype=m.dtype), T)
    root = jnp.sqrt(T * sumC2)
    a, b = (sumC + root) / (2.0 * lam), (sumC - root) / (2.0 * lam)

    def one(mk):  # (d,) eigenvalues of one draw -> (T,) ρ
        return _inversion(jnp.concatenate([a[:, None] * mk[None], b[:, None] * mk[None]], axis=-1), T, panels)

    return jax.lax.map(one, m, batch_size=8)


@float64_aware(arrays=("W_qk", "factor", "lam"))
def exact_rho(
    W_qk: Float[Array, "*D d d"],
    factor: Float[Array, "*D d d"],
    lam: Scalar,
    *,
    T: int,
    panels: int = 8,
    tol: float | None = None,
) -> tuple[Float[Array, "*D T"], Float[Array, "*D T"]]:
    """Def. 1's propagation probability ρ_i under Assumption 1 computed exactly, not sampled (geomjax; Bao §3-§4).

    With v = Σ_s C_s z_s and w = Σ_s z_s (module docstring), the score minus 1/T is Q_i = vᵀ M w / λ, M = Fᵀ W_QK F.
    Per coordinate (v, w) is Gaussian with Var v = Σ_s C_s², Var w = T, Cov = Σ_s C_s, so for symmetric W_QK
    (M = U diag(m) Uᵀ) Q_i = Σ_k m_k (a_i g_k² + b_i h_k²) with g, h i.i.d. N(0, 1) and
    a_i, b_i = (Σ_s C_s ± √(T·Σ_s C_s²)) / (2λ): a weighted sum of 2d independent χ²_1. Then
    ρ_i = P(−1/T ≤ Q_i ≤ 1 − 1/T) = (1/π) ∫_0^∞ Im[(e^{iu/T} − e^{−iu(1 − 1/T)}) φ(u)] / u du with the characteristic
    function φ(u) = Π_j (1 − 2iν_j u)^(−½) (Gil-Pelaez inversion; Imhof 1961), φ evaluated with square roots and
    products only, integrated by composite Gauss–Legendre on [0, U] with U from Imhof's tail bound (tail ≤ 1e-10).
    The panels are refined per draw on the host, so the function is not traced by ``jax.jit``.

    Args:
      W_qk: symmetric query-key matrix (d, d) or a stack (D, d, d) (the §5 draws are symmetric).
      factor: F with Σ = F Fᵀ, (d, d) or (D, d, d).
      lam: temperature λ > 0.
      T: tokens per sequence (>= 2).
      panels: Gauss–Legendre panels of 16 nodes (>= 2, even); the error bar compares with half as many.
      tol: a draw whose error bar exceeds it is integrated again with twice the panels, up to 256 panels
        (adaptive per draw); default 1e-8 in float64, 1e-4 in float32 (whose bar includes a rounding allowance
        of 1e-5, six times the largest deviation from float64 measured on the §5 draws). The dtype of W_QK
        chooses the precision: float32 is about 1.7 times faster.

    Returns:
      (ρ (*D, T), error bar (*D, T)): |ρ(panels) − ρ(panels/2)| plus twice the tail bound (and the float32
      allowance); measured against scipy.integrate.quad of the dense (T·d)-dimensional form, a NumPy witness and
      2¹⁵ random walks in tests/unit/test_localization_exact.py.
    """
    T = _check_T(T, "exact_rho")
    _check_lambda(lam, "exact_rho")
    if not isinstance(panels, int) or panels < 2 or panels % 2:
        raise GeomjaxError(f"exact_rho: panels must be an even int >= 2, got {panels!r}")
    W = jnp.asarray(W_qk)
    F = jnp.broadcast_to(jnp.asarray(factor, W.dtype), W.shape)
    _check_pair(W, F, "exact_rho")
    check_finite(W, "W_QK", "exact_rho")
    if is_concrete(W) and not np.allclose(np.asarray(W), np.swapaxes(np.asarray(W), -1, -2), rtol=1e-10, atol=1e-12):
        raise GeomjaxError("exact_rho: W_QK must be symmetric (the §5 draws B diag(w) Bᵀ are); for an asymmetric one "
                           "use empirical_rho")
    M = jnp.swapaxes(F, -1, -2) @ W @ F
    m = jnp.linalg.eigvalsh((M + jnp.swapaxes(M, -1, -2)) / 2).reshape(-1, W.shape[-1])
    lam_ = jnp.asarray(lam, m.dtype)
    tol = (1e-4 if m.dtype == jnp.float32 else 1e-8) if tol is None else float(tol)
    floor = 2.0 * _TAIL + _ROUNDING[int(m.dtype == jnp.float32)]
    rho = np.array(_exact_rho(m, lam_, T, panels))
    err = np.abs(rho - np.asarray(_exact_rho(m, lam_, T, panels // 2))) + floor
    # a draw whose error bar exceeds tol is integrated again with twice the panels (at most _MAX_PANELS)
    # (padded to a power of two draws, so that a handful of shapes is compiled)
    while panels < _MAX_PANELS and np.any(bad := err.max(axis=-1) > tol):
        panels *= 2
        idx = np.flatnonzero(bad)
        pad = np.concatenate([idx, np.full((1 << (len(idx) - 1).bit_length()) - len(idx), idx[-1])])
        finer = np.asarray(_exact_rho(m[pad], lam_, T, panels))[: len(idx)]
        rho[idx], err[idx] = finer, np.abs(finer - rho[idx]) + floor
    return jnp.asarray(rho.reshape(*W.shape[:-2], T)), jnp.asarray(err.reshape(*W.shape[:-2], T))


@float64_aware(arrays=("mu", "v"))
def gaussian_rho(mu: Broadcastable, v: Broadcastable) -> Float[Array, "*#B"]:
    """Gaussian approximation of Def. 1 (Bao §4): ρ ≈ ½{erf((1 − μ)/√(2v)) + erf(μ/√(2v))}."""
    r = jnp.sqrt(2.0 * v)
    return 0.5 * (erf((1.0 - mu) / r) + erf(mu / r))


def _Phi(z, theta, form):
    return 0.5 * erf(z / jnp.sqrt(2.0 * variance_profile(theta, form)))


@float64_aware(arrays=("theta", "xi", "eta"))
def rho_theta(theta: Broadcastable, xi: Broadcastable, eta: Broadcastable, form: str = "printed") -> Float[Array, "*#B"]:
    """Closed-form signal propagation probability (Bao eq. (6)).

    ρ(θ) = Φ((θ − ½)ξ; θ) − Φ((θ − ½)ξ − 1/η; θ), Φ(z; θ) = ½ erf(z/√(2 s(θ))) with s(θ) = 2θ² + 7/12
    (``form="printed"``) or the corrected 2θ² − 2θ + 7/12 (``form="corrected"``).

    Args:
      theta: relative positions in [0, 1] (any shape).
      xi: ξ = tr(W)/√tr(W²) (real).
      eta: η = √tr(W²)/λ (> 0).

    Raises:
      ValueError: θ outside [0, 1] or η <= 0 (concrete inputs).
    """
    _check_theta(theta, "rho_theta")
    if is_concrete(eta):
        e = np.asarray(eta, dtype=float)
        if np.any(~(e > 0)):
            raise GeomjaxError(f"rho_theta: η = √tr(W²)/λ must be > 0, got {eta}")
    a = (theta - 0.5) * xi
    return _Phi(a, theta, form) - _Phi(a - 1.0 / eta, theta, form)


@float64_aware(arrays=("theta",))
def rho_limit(theta: Real[Numeric, " *B"], r: Scalar) -> Float[Array, " *B"]:
    """Lemma 2 (Bao), items 1-2: the limit of ρ(θ) as (ξ, η) → (±∞, 0) with ξη → r.

    r >= 0: 𝟙{θ >= ½} (r <= 2) or 𝟙{½ <= θ <= ½ + 1/r} (r > 2); r < 0: 𝟙{θ <= ½} (−2 <= r) or
    𝟙{½ + 1/r <= θ <= ½} (r < −2), exactly as printed. (At θ = ½, and at θ = ½ + 1/r, the actual
    limit of ρ is ½.)
    """
    _check_theta(theta, "rho_limit")
    theta = jnp.asarray(theta, dtype=float)
    if r >= 0:
        return ((theta >= 0.5) & ((r <= 2) | (theta <= 0.5 + 1.0 / max(r, 1e-300)))).astype(theta.dtype)
    return ((theta <= 0.5) & ((r >= -2) | (theta >= 0.5 + 1.0 / r))).astype(theta.dtype)


# ----------------------------------------------------------------------------------------------
# §5: eqs. (5), (7), (8), (9), (10)
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("W_qk", "Sigma"))
def eq5_terms(W_qk: Float[Array, "d d"], Sigma: Float[Array, "d d"]) -> dict[str, Float[Array, ""]]:
    """Both sides of Bao eq. (5): |tr(W)| <= √(d·tr(W²)), W = W_QK Σ."""
    t = w_traces(W_qk, Sigma)
    d = W_qk.shape[-1]
    return {"lhs": jnp.abs(t["trW"]), "rhs": jnp.sqrt(d * t["trW2"])}


@float64_aware(arrays=("W_qk", "Sigma"))
def eq7_terms(W_qk: Float[Array, "d d"], Sigma: Float[Array, "d d"]) -> dict[str, Float[Array, ""]]:
    """The four members of Bao eq. (7): |tr W|/(√d‖Σ‖₂) <= ‖W_QK‖₂ <= ‖W_QK‖_F <= ‖W_QK‖₁.

    ‖·‖₁ is returned both entrywise (``l1_entrywise``, Σ|w_ij|) and as the induced norm
    (``l1_induced``, max column sum); also ``frob`` and ``spec`` (‖·‖₂).
    """
    _check_pair(W_qk, Sigma, "eq7_terms")
    d = W_qk.shape[-1]
    W = W_qk @ Sigma
    return {
        "trace_term": jnp.abs(jnp.trace(W)) / (math.sqrt(d) * jnp.linalg.norm(Sigma, 2)),
        "spec": jnp.linalg.norm(W_qk, 2),
        "frob": jnp.linalg.norm(W_qk, "fro"),
        "l1_entrywise": jnp.sum(jnp.abs(W_qk)),
        "l1_induced": jnp.max(jnp.sum(jnp.abs(W_qk), axis=0)),
    }


@float64_aware(arrays=("w",))
def eigen_variance_identity(w: Float[Array, " d"]) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Both sides of Bao eq. (8): d²·V[w_i] and d·Σw_i² − (Σw_i)², V the population variance over i."""
    w = jnp.asarray(w)
    d = w.shape[-1]
    lhs = d**2 * (jnp.mean(w**2, -1) - jnp.mean(w, -1) ** 2)
    rhs = d * jnp.sum(w**2, -1) - jnp.sum(w, -1) ** 2
    return lhs, rhs


@float64_aware(arrays=("W_qk", "Sigma"))
def eq10_terms(W_qk: Float[Array, "d d"], Sigma: Float[Array, "d d"]) -> dict[str, Float[Array, ""]]:
    """Members of Bao eq. (10): ‖Σ⁻¹‖_F √tr(W²) >= |tr W_QK| >= ‖W_QK‖₂; also ‖Σ⁻¹‖₂√tr(W²) and ‖W_QK‖_F."""
    _check_pair(W_qk, Sigma, "eq10_terms")
    W = W_qk @ Sigma
    Sinv = jnp.linalg.inv(Sigma)
    s = jnp.sqrt(jnp.trace(W @ W))
    return {
        "left": jnp.linalg.norm(Sinv, "fro") * s,
        "left_spec": jnp.linalg.norm(Sinv, 2) * s,
        "abs_trace": jnp.abs(jnp.trace(W_qk)),
        "spec": jnp.linalg.norm(W_qk, 2),
        "frob": jnp.linalg.norm(W_qk, "fro"),
    }


@float64_aware(arrays=("X", "W_qk", "lam"))
def zhai_nu(X: Float[Array, "T d"], W_qk: Float[Array, "d d"], lam: Scalar = 1.0) -> Float[Array, ""]:
    """ν = ‖X Xᵀ‖₂·‖W_QK‖₂/λ of Bao eq. (9) (λ = 1 as printed; λ > 1 for the scaled logits)."""
    _check_lambda(lam, "zhai_nu")
    return jnp.linalg.norm(X.T @ X, 2) * jnp.linalg.norm(W_qk, 2) / lam


@float64_aware(arrays=("nu",))
def zhai_bound(nu: Broadcastable, T: Broadcastable) -> Float[Array, "*#B"]:
    """Zhai et al.'s entropy lower bound as printed in Bao eq. (9): ln(1 + T e^{−ν}) + ν e^{−ν/2}/(T⁻¹ + e^{−ν})."""
    if isinstance(T, (int, np.integer)):
        _check_T(int(T), "zhai_bound")
    nu = jnp.asarray(nu)
    return jnp.log1p(T * jnp.exp(-nu)) + nu * jnp.exp(-nu / 2) / (1.0 / T + jnp.exp(-nu))


@float64_aware(arrays=("gap",))
def one_vs_rest_entropy(gap: Broadcastable, T: Broadcastable) -> Float[Array, "*#B"]:
    """Entropy of softmax of T logits, one larger than the other T − 1 by ``gap`` (geomjax; Bao eq. (9)).

    H = ln(1 + (T−1)e^{−gap}) + gap·(T−1)e^{−gap}/(1 + (T−1)e^{−gap}); for large T this is
    ln(1 + T e^{−ν}) + ν e^{−ν}/(T⁻¹ + e^{−ν}), i.e. eq. (9) with e^{−ν} in place of e^{−ν/2}. It is
    NOT a lower bound over all softmaxes whose logits span a range <= gap: for gap 1, T = 16 five top
    logits give entropy 2.650 < 2.721 (claim ``bao.eq9.one_vs_rest_span`` does not hold); the corrected
    eq. (9) holds through the ℓ2-ball argument instead (``bao.eq9.l2_ball``).
    """
    if isinstance(T, (int, np.integer)):
        _check_T(int(T), "one_vs_rest_entropy")
    g = jnp.asarray(gap)
    q = (T - 1) * jnp.exp(-g)
    return jnp.log1p(q) + g * q / (1 + q)


# ----------------------------------------------------------------------------------------------
# §6 LocATER
# ----------------------------------------------------------------------------------------------


@float64_aware(arrays=("W_q", "W_k"))
def qk_matrix(W_q: Float[Array, "*H d K"], W_k: Float[Array, "*H d K"]) -> Float[Array, "*H d d"]:
    """W_QK = W_q W_kᵀ (d, d) per head, scoring query i against key j as x_i W_QK x_jᵀ (Bao §6)."""
    if np.shape(W_q) != np.shape(W_k) or len(np.shape(W_q)) < 2:
        raise GeomjaxError(f"qk_matrix: W_q and W_k must have the same shape (..., d, K), got {np.shape(W_q)} and {np.shape(W_k)}")
    return jnp.einsum("...dk,...ek->...de", W_q, W_k)


def find_qk_heads(params: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """Paths of every attention layer's q and k kernels in a geomjax parameter tree.

    Recognises the common layout of :mod:`geomjax.models` (toy, GPT-2, BERT, Llama, Mistral, BLOOM): a
    sub-dict with entries ``q`` and ``k`` each holding a ``kernel``, q of shape (d, H, K) and k of shape
    (d, H_kv, K) (H_kv = H, or fewer key heads shared by groups of query heads: grouped-query attention).

    Returns:
      list of (layer path, q kernel path, k kernel path), "/"-joined, in tree order.

    Raises:
      ValueError: when no attention layer is found.
    """
    found: list[tuple[str, str, str]] = []

    def walk(node, path):
        if isinstance(node, dict) or hasattr(node, "keys"):
            keys = list(node.keys())
            if "q" in keys and "k" in keys and all(
                hasattr(node[n], "keys") and "kernel" in node[n] and np.ndim(node[n]["kernel"]) == 3 for n in ("q", "k")
            ):
                p = "/".join(path)
                found.append((p, p + "/q/kernel", p + "/k/kernel"))
                return
            for k in keys:
                walk(node[k], path + (str(k),))

    walk(params, ())
    if not found:
        raise GeomjaxError("find_qk_heads: no attention layer with q/kernel and k/kernel of shape (d, H, K) "
                         "in these params; pass a geomjax toy/GPT-2/BERT parameter tree")
    return found


def _get(tree, path: str):
    for k in path.split("/"):
        tree = tree[k]
    return tree


def _qk_kernels(params, qp: str, kp: str) -> tuple[Array, Array]:
    """q and k kernels (d, H, K) of one layer, k's H_kv heads repeated to one per query head (query head
    h reads key head h // (H / H_kv), Hugging Face's ``repeat_kv``)."""
    q, k = _get(params, qp), _get(params, kp)
    H, H_kv = np.shape(q)[1], np.shape(k)[1]
    if H_kv != H:
        if H_kv < 1 or H % H_kv:
            raise ValueError(f"{qp}: {H} query heads cannot share {H_kv} key heads (H must be a multiple of H_kv)")
        k = jnp.repeat(k, H // H_kv, axis=1)
    return q, k


def qk_matrices(params: Mapping[str, Any]) -> dict[str, Float[Array, "H d d"]]:
    """W_QK = W_q,h W_k,hᵀ (H, d, d) for every attention layer of a geomjax model (Bao §6).

    With grouped-query attention (Llama, Mistral: H_kv < H key heads) head h pairs with key head
    h // (H / H_kv). For rotary families W_QK is the position-free part of the score (the rotation by the
    offset i − j sits between W_q and W_kᵀ). :meth:`geomjax.models.ModelInterface.qk_matrices` gives the same
    matrices through the model interface, by block index.
    """
    out = {}
    for layer, qp, kp in find_qk_heads(params):
        q, k = _qk_kernels(params, qp, kp)
        out[layer] = qk_matrix(jnp.moveaxis(q, 1, 0), jnp.moveaxis(k, 1, 0))  # (H, d, K) each
    return out


def locater_terms(params: Mapping[str, Any]) -> dict[str, dict[str, Float[Array, " H"]]]:
    """Per layer, per head: eigenspectrum scale tr(W_QKᵀW_QK) = ‖W_q W_kᵀ‖_F² and tr(W_QK) (Bao §6-7).

    Computed without forming W_QK: ‖W_q W_kᵀ‖_F² = tr((W_qᵀW_q)(W_kᵀW_k)) and tr(W_q W_kᵀ) = ⟨W_q, W_k⟩.
    """
    out = {}
    for layer, qp, kp in find_qk_heads(params):
        q, k = _qk_kernels(params, qp, kp)  # (d, H, K), shared key heads repeated
        gq = jnp.einsum("dhk,dhl->hkl", q, q)
        gk = jnp.einsum("dhk,dhl->hkl", k, k)
        out[layer] = {"scale": jnp.einsum("hkl,hkl->h", gq, gk), "trace": jnp.einsum("dhk,dhk->h", q, k)}
    return out


def locater_penalty(params: Mapping[str, Any], kappa1: float, kappa2: float) -> Float[Array, ""]:
    """LocATER regulariser (Bao §6): Σ_layers Σ_heads κ1·tr(W_QKᵀW_QK) + κ2·(tr(W_QK) − 1)².

    Works on any geomjax parameter tree (toy, GPT-2, BERT; see :func:`find_qk_heads`). Differentiable;
    add it to a training loss (:func:`locater_loss`).
    """
    if kappa1 < 0 or kappa2 < 0:
        raise GeomjaxError(f"locater_penalty: κ1 and κ2 must be >= 0, got {kappa1}, {kappa2}")
    total = 0.0
    for t in locater_terms(params).values():
        total = total + jnp.sum(kappa1 * t["scale"] + kappa2 * (t["trace"] - 1.0) ** 2)
    return jnp.asarray(total)


def locater_loss(loss_fn, kappa1: float, kappa2: float):
    """Wrap ``loss_fn(params, *a) -> loss`` or ``-> (loss, metrics)`` into loss + LocATER penalty (Bao §6).

    The returned function has the same signature; with metrics it adds ``locater`` (the penalty)
    and ``task_loss`` (the unregularised loss). It is an ordinary differentiable loss, so any optax
    optimiser trains it.
    """
    def wrapped(params, *args, **kw):
        out = loss_fn(params, *args, **kw)
        pen = locater_penalty(params, kappa1, kappa2)
        if isinstance(out, tuple):
            loss, metrics = out
            return loss + pen, {**metrics, "task_loss": loss, "locater": pen}
        return out + pen

    return wrapped


def add_locater_gradient(kappa1: float, kappa2: float) -> optax.GradientTransformation:
    """Optax transformation adding ∇LocATER(params) to the incoming gradients (Bao §6).

    Chain it before the optimiser (``optax.chain(add_locater_gradient(k1, k2), optax.adam(lr))``);
    its ``update`` needs ``params``. Equivalent to training loss + :func:`locater_penalty`.
    """
    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise GeomjaxError("add_locater_gradient: update needs params (call tx.update(grads, state, params))")
        g = jax.grad(locater_penalty)(params, kappa1, kappa2)
        return jax.tree_util.tree_map(jnp.add, updates, g), state

    return optax.GradientTransformation(init_fn, update_fn)


def _check_qk_paper(W_Q, W_K, where):
    if np.ndim(W_Q) != 2 or np.shape(W_Q) != np.shape(W_K):
        raise GeomjaxError(f"{where}: W_Q and W_K must be matrices of the same shape (K, d), got {np.shape(W_Q)} and {np.shape(W_K)}")


@float64_aware(arrays=("W_Q", "W_K"))
def locater_grads_printed(W_Q: Float[Array, "K d"], W_K: Float[Array, "K d"]) -> dict[str, Array]:
    """The §6 derivative formulae of Bao as printed, for W_QK = W_Qᵀ W_K (W_Q, W_K (K, d)).

    Returns:
      ``scale_Q`` = 2 W_K W_Kᵀ W_Q, ``scale_K`` = 2 W_Q W_Qᵀ W_K (∇ of tr(W_QKᵀW_QK)), and
      ``mean_Q`` = (tr W_QK − 1)·tr(W_QK)·W_K, ``mean_K`` = (tr W_QK − 1)·tr(W_QK)·W_Q (∇ of (tr W_QK − 1)²).
    """
    _check_qk_paper(W_Q, W_K, "locater_grads_printed")
    tr = jnp.trace(W_Q.T @ W_K)
    return {
        "scale_Q": 2 * W_K @ W_K.T @ W_Q,
        "scale_K": 2 * W_Q @ W_Q.T @ W_K,
        "mean_Q": (tr - 1) * tr * W_K,
        "mean_K": (tr - 1) * tr * W_Q,
    }


@float64_aware(arrays=("W_Q", "W_K"))
def locater_grads_corrected(W_Q: Float[Array, "K d"], W_K: Float[Array, "K d"]) -> dict[str, Array]:
    """Correct gradients of (tr W_QK − 1)², W_QK = W_Qᵀ W_K (Bao §6): 2(tr W_QK − 1)·W_K and 2(tr W_QK − 1)·W_Q.

    (tr(W_QᵀW_K) = ⟨W_Q, W_K⟩_F is bilinear, so ∇_{W_Q} tr = W_K; the printed extra factor tr(W_QK)
    and the missing 2 are errors.) The scale gradients are as printed.
    """
    _check_qk_paper(W_Q, W_K, "locater_grads_corrected")
    tr = jnp.trace(W_Q.T @ W_K)
    return {
        "scale_Q": 2 * W_K @ W_K.T @ W_Q,
        "scale_K": 2 * W_Q @ W_Q.T @ W_K,
        "mean_Q": 2 * (tr - 1) * W_K,
        "mean_K": 2 * (tr - 1) * W_Q,
    }
