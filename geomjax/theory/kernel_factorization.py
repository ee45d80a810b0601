"""Theorem 2 of Song & Zhong: incoherent bases make the attention kernel factorize (eq. (12)).

Notation (Song & Zhong §4.3, eqs. (9)-(12), and App. F.2):

* Kernel: K_W(z, z') = exp(zᵀ W z') with W = W^q (W^k)ᵀ / √d_head (:func:`kernel`).
* Bases: B_1⁰ = {c_1..c_{n1}}, B_2⁰ = {t_1..t_{n2}} ⊂ R^d with ‖u‖ ≤ 1; mutual incoherence
  incoh = max |⟨c, t⟩| over c ∈ B_1⁰, t ∈ B_2⁰ (:func:`incoherence`); extended bases
  B_α = {λu : u ∈ B_α⁰, λ ∈ [−1, 1]}.
* eq. (10): x^q = c^q + t^q, x^k = c^k + t^k with c^q, c^k ∈ B_1 and t^q, t^k ∈ B_2.
* eq. (11): W is s-sparsely represented by (B, B') if W = Σ_{k≤s} a_k u_k v_kᵀ, a_k ∈ [−1, 1],
  u_k ∈ B, v_k ∈ B' (:func:`sparse_matrix`).
* eq. (12), Theorem 2: if W_αβ is O(1)-sparsely represented by (B_α, B_β) and W = Σ_αβ W_αβ, then
  K_W(x^q, x^k) = (1 + O(incoh))·K_{W11}(c^q, c^k) K_{W12}(c^q, t^k) K_{W21}(t^q, c^k) K_{W22}(t^q, t^k)
  for all x^q, x^k satisfying eq. (10) (:func:`factorized_log_kernel`). "Moreover": with each W_αβ
  replaced by W_αβ + Z_αβ/√d (entries of Z_αβ independent, subgaussian with E e^{λξ} ≤ e^{λ²/2}),
  eq. (12) holds with probability at least 1 − O(|B_1⁰|·|B_2⁰|·exp(−incoh²·d)).

The error of eq. (12). log K_W(x^q, x^k) − log RHS(12) = L is the sum of the 12 "cross terms": for
each αβ, the three bilinear forms of W_αβ on the pairs among (c^q, t^q) × (c^k, t^k) other than the
(α, β) one (:func:`log_factorization_error`). The relative error is |K_W/RHS − 1| = |expm1(L)|.
Over ALL inputs of eq. (10) (any basis vectors, any λ ∈ [−1, 1]⁴), L is multilinear in the four λ,
so its supremum is attained at λ ∈ {±1}⁴ and equals, with the cross-term matrices A (c^q, c^k),
B (c^q, t^k), C (t^q, c^k), D (t^q, t^k) over basis indices,

    sup |L| = max_{k, l, σ=±1} [ max_i |A_ik + σ B_il| + max_j |C_jk + σ D_jl| ]

(:func:`worst_case_log_error`; exact, no enumeration of the n1²n2² quadruples).

Constants of the proof (App. F.2), made explicit here:

* Deterministic part. Each W_αβ = Σ a_k u_k v_kᵀ enters three cross terms: two contain one inner
  product across the bases (≤ incoh) and one contains two (≤ incoh²), the other factors are ≤ 1.
  Hence sup |L| ≤ (2·incoh + incoh²)·Σ_αβ ‖a_αβ‖₁ ≤ 4s(2 + incoh)·incoh
  (:func:`deterministic_bound`).
* Noise part. For unit vectors p, q, pᵀZq/√d is subgaussian with variance proxy 1/d, so
  P(|pᵀZq|/√d > √2·incoh) ≤ 2 exp(−incoh²·d): the proof's "C·incoh" with C = √2. On the event
  that no noise cross term exceeds √2·incoh, sup |L| ≤ deterministic bound + 12√2·incoh
  (:func:`theorem_event`).
* The union bound. The proof takes the union "over all possible choice of vectors in B_1⁰ and
  B_2⁰" and prints the count |B_1⁰|·|B_2⁰|: that counts the pairs (c, t) and (t, c), i.e. the 6 mixed
  cross terms per pair, 2·6·n1·n2·exp(−incoh²·d) in all. But the noise cross terms also include
  cᵀZ_αβc' (αβ ≠ 11) and tᵀZ_αβt' (αβ ≠ 22), for every pair of the SAME basis: the count is
  3(n1 + n2)² terms and the bound 6(n1 + n2)²·exp(−incoh²·d) (:func:`union_bound`,
  :func:`noise_cross_max`, :func:`proof_event`). With unbalanced bases (n1 ≪ n2) the probability of
  the proof's event exceeds the printed-count bound (claim ``song_zhong.theorem2.union_bound.printed``).
  Theorem 2 itself survives, because its O(·) constants are unspecified: with the per-term constant
  √6 instead of √2 the union gives 6(n1+n2)²·exp(−3·incoh²·d), which is ≤ 3·n1·n2·exp(−incoh²·d)
  whenever the printed form 3·n1·n2·exp(−incoh²·d) is below 1 (then e^{incoh²d} > 3n1n2 and
  (n1+n2)² ≤ 4·max(n1,n2)²). Only the proof's counting step, not the statement, is wrong.

Sampling the theorem's random setting (:func:`sample_instance`). B_1⁰, B_2⁰ are independent
uniform unit vectors in R^d; W_αβ has s terms with a_k ~ U[−1, 1] and u_k, v_k drawn uniformly from
B_α⁰, B_β⁰; Z_αβ has i.i.d. N(0, noise²) entries (standard Gaussian = the footnote's subgaussian
with equality). Everything the theorem involves is a bilinear form of vectors in the span of
B_1⁰ ∪ B_2⁰ (dimension n = n1 + n2 ≤ d), so the instance is stored in an orthonormal frame
O ∈ R^{d×n} of that span:

* the basis vectors g_i/‖g_i‖ (g_i ~ N(0, I_d)) have frame coordinates given by the rows of the
  Bartlett factor R (Γ = R Oᵀ, R lower triangular, R_ii² ~ χ²_{d−i+1}, R_ij ~ N(0, 1) for i > j,
  O Haar and independent of R), normalized; the χ² draws are Marsaglia–Tsang with 8 proposals
  (:func:`_chi2`; exact unless all 8 are rejected, probability < 10⁻¹¹);
* Oᵀ Z_αβ O has i.i.d. N(0, noise²) entries (rotation invariance, O independent of Z), so the
  stored ``noise`` = Oᵀ Z_αβ O / √d is exact in distribution.

The cost is O(n³) per instance whatever d is (d = 2^24 is as cheap as d = 64), and every inner
product and bilinear form equals the one of the d-dimensional vectors exactly. :func:`embed` lifts
an instance to R^d with any orthonormal frame. With ``coherence=ρ`` the sampler plants the
incoherence: t_j = √(1−ρ²)·ĝ_j + ρ·c_{j mod n1} with ĝ_j a uniform unit vector orthogonal to
c_{j mod n1}, so ⟨c_{j mod n1}, t_j⟩ = ρ exactly (incoh = ρ whenever ρ exceeds the random level
≈ √(2 log(n1 n2)/d); always when n1 = 1).

Numerics: run under ``jax.enable_x64(True)`` (float64; the claims do); inner products are
O(d^{−1/2}) and L is a difference of O(1) log-kernels, which :func:`log_factorization_error`
avoids by summing the cross terms directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base._checks import (
    as_real_array,
    check_finite,
    check_int,
    check_prng_key,
    float64_aware,
    is_concrete as _concrete,
)
from geomjax.errors import GeomjaxError, GeomjaxTypeError
from geomjax.typing import Array, Bool, Broadcastable, Float, Key, Scalar

__all__ = [
    "Theorem2Setting",
    "Theorem2Instance",
    "sample_instance",
    "with_planted_coherence",
    "embed",
    "sparse_matrix",
    "kernel",
    "log_kernel",
    "weight_matrices",
    "decomposed_inputs",
    "factorized_log_kernel",
    "log_factorization_error",
    "relative_error",
    "incoherence",
    "worst_case_log_error",
    "deterministic_bound",
    "noise_cross_max",
    "proof_event",
    "theorem_event",
    "union_bound",
    "n_noise_cross_terms",
    "noise_statistics",
    "instance_statistics",
    "PROOF_NOISE_CONSTANT",
]

#: The proof's per-term noise constant C = √2: P(|pᵀZq|/√d > √2·incoh) ≤ 2 exp(−incoh²·d).
PROOF_NOISE_CONSTANT = math.sqrt(2.0)

Count = Literal["printed", "corrected"]
Pairs = Literal["all", "printed"]

# ----------------------------------------------------------------------------------------------
# Setting, instance, validation
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Theorem2Setting:
    """Static sizes of the random setting of Song & Zhong Theorem 2 (hashable, a static argument).

    Attributes:
      n1: |B_1⁰|, number of vectors of the first basis (e.g. contexts), >= 1.
      n2: |B_2⁰|, number of vectors of the second basis (e.g. positions), >= 1.
      s: number of rank-one terms a_k u_k v_kᵀ of each W_αβ (eq. (11)), >= 1 ("O(1)-sparse").
      noise: standard deviation of the entries of Z_αβ (W_αβ + Z_αβ/√d, Theorem 2 "moreover");
        0 gives the deterministic statement, 1 the footnote's subgaussian normalisation
        E exp(λξ) ≤ exp(λ²/2) with equality. Must lie in [0, 1] (a Gaussian with a larger
        variance is not subgaussian in the footnote's sense).
    """

    n1: int = 8
    n2: int = 8
    s: int = 2
    noise: float = 1.0

    def __post_init__(self):
        for name in ("n1", "n2", "s"):
            check_int(getattr(self, name), name, "Theorem2Setting")
        nz = self.noise
        if isinstance(nz, bool) or not isinstance(nz, (int, float, np.floating, np.integer)) or not (0.0 <= float(nz) <= 1.0):
            raise GeomjaxError(
                f"Theorem2Setting: noise must be a number in [0, 1] (entries of Z are N(0, noise²); the "
                f"paper's footnote needs E exp(λξ) ≤ exp(λ²/2)), got {nz!r}"
            )

    @property
    def n(self) -> int:
        """n1 + n2: dimension of the frame in which an instance is stored."""
        return self.n1 + self.n2


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Theorem2Instance:
    """One draw of the setting of Song & Zhong Theorem 2, in an orthonormal frame of span(B_1⁰ ∪ B_2⁰).

    n = n1 + n2 is the frame dimension; inner products and bilinear forms of frame coordinates equal
    those of the vectors in R^d (see the module docstring and :func:`embed`).

    Attributes:
      basis1: (n1, n) frame coordinates of B_1⁰ (unit rows c_i).
      basis2: (n2, n) frame coordinates of B_2⁰ (unit rows t_j).
      coef: (2, 2, s) coefficients a_k ∈ [−1, 1] of W_αβ (eq. (11)); index [α−1, β−1].
      u_index: (2, 2, s) int32, u_k = row u_index[α, β, k] of basis α (B_α⁰).
      v_index: (2, 2, s) int32, v_k = row v_index[α, β, k] of basis β (B_β⁰).
      noise: (2, 2, n, n) frame coordinates of Z_αβ/√d, i.e. Oᵀ Z_αβ O/√d (all zero when noise = 0).
      x_index: (4,) int32 (i, j, k, l): c^q = λ₁c_i, t^q = λ₂t_j, c^k = λ₃c_k, t^k = λ₄t_l (eq. (10)).
      x_scale: (4,) λ ∈ [−1, 1]⁴ of that query/key pair.
      d: scalar, the ambient dimension (float).
    """

    basis1: Array
    basis2: Array
    coef: Array
    u_index: Array
    v_index: Array
    noise: Array
    x_index: Array
    x_scale: Array
    d: Array


def _float_array(x, where: str, name: str):
    x = as_real_array(x, where, name)
    check_finite(x, name, where)
    return x


def _check_norms(B, where: str, name: str) -> None:
    """Theorem 2 assumes ‖u‖₂ ≤ 1 for every basis vector (rows of B)."""
    if not _concrete(B):
        return
    norms = jnp.linalg.norm(B, axis=-1)
    tol = 1e3 * float(jnp.finfo(B.dtype).eps)
    worst = float(jnp.max(norms)) if norms.size else 0.0
    if worst > 1.0 + tol:
        raise GeomjaxError(
            f"{where}: the rows of {name} must have norm <= 1 (Song & Zhong §4.3 assume ‖u‖₂ ≤ 1), "
            f"largest norm is {worst:.6g}; normalize the vectors first"
        )


def _check_d(d, setting: Theorem2Setting, where: str) -> None:
    if not _concrete(d):
        return
    dv = np.asarray(d)
    if dv.shape != () or not np.issubdtype(dv.dtype, np.number) or not np.isfinite(dv) or float(dv) != math.floor(float(dv)):
        raise GeomjaxError(f"{where}: d must be one integer dimension, got {d!r}")
    if float(dv) < setting.n:
        raise GeomjaxError(
            f"{where}: need d >= n1 + n2 = {setting.n} so that the {setting.n} basis vectors are linearly "
            f"independent (the frame representation), got d = {int(dv)}"
        )


def _check_coherence(rho, where: str) -> None:
    if rho is None or not _concrete(rho):
        return
    r = np.asarray(rho)
    if r.shape != () or not np.issubdtype(r.dtype, np.number) or not np.isfinite(r) or not (0.0 <= float(r) < 1.0):
        raise GeomjaxError(f"{where}: coherence (planted incoherence ρ) must be one number in [0, 1), got {rho!r}")


# ----------------------------------------------------------------------------------------------
# Sampler
# ----------------------------------------------------------------------------------------------


def _unit_rows(X):
    return X / jnp.linalg.norm(X, axis=-1, keepdims=True)


_MT_ROUNDS = 8


def _chi2(df, z, u):
    """χ²_df = 2·Gamma(df/2) by Marsaglia & Tsang (2000) with a fixed number of proposals.

    Gamma(α) = Gamma(α + 1)·U^{1/α} (valid for every α > 0); Gamma(α + 1), α + 1 >= 3/2, is the first
    accepted proposal d_·v, d_ = α + 1 − 1/3, v = (1 + x/√(9d_))³, x ~ N(0, 1), accepted iff
    log U < x²/2 + d_(1 − v + log v). The acceptance rate is >= 0.96 for α + 1 >= 3/2 and → 1 as α
    grows (≈ 1 − 10⁻³ at df = 64), so the chance that all ``_MT_ROUNDS`` = 8 proposals of one draw are
    rejected is < 10⁻¹¹ (< 10⁻²⁴ for df >= 64); the last proposal is then used. Written without a
    while loop because ``jax.random.gamma``'s loop costs seconds of XLA:CPU compile time under vmap.

    Args:
      df: (n,) degrees of freedom > 0.  z: (K, n) standard normals.  u: (K + 1, n) uniforms in [0, 1).
    """
    alpha = 0.5 * df + 1.0
    dd = (alpha - 1.0 / 3.0)[None, :]  # (1, n)
    cx = z / jnp.sqrt(9.0 * dd)  # (K, n)
    w = cx * (3.0 + cx * (3.0 + cx))  # v − 1 = (1 + cx)³ − 1, without cancellation
    v = 1.0 + w
    ok = (v > 0) & (jnp.log1p(-u[:-1]) < 0.5 * z * z + dd * (jnp.log1p(jnp.where(v > 0, w, 0.0)) - w))
    ok = ok | (jnp.arange(z.shape[0])[:, None] == z.shape[0] - 1)  # fall back to the last proposal
    first = jnp.argmax(ok, axis=0)
    g = dd[0] * jnp.take_along_axis(v, first[None, :], axis=0)[0]
    boost = jnp.exp(jnp.log1p(-u[-1]) / (0.5 * df))  # U^{1/α}, U ∈ (0, 1]
    return 2.0 * g * boost


@partial(jax.jit, static_argnames=("setting",))
def _sample(key, d, rho, planted, setting: Theorem2Setting):
    """One instance; ``planted`` is a (traced) bool, so one compilation serves both kinds of bases."""
    n1, n2, s, n = setting.n1, setting.n2, setting.s, setting.n
    dtype = jnp.result_type(float)
    d = jnp.asarray(d, dtype)
    # ONE flat uniform draw, sliced afterwards; normals by √2·erfinv as jax.random.normal does. Every
    # separate RNG call (and the while loop of jax.random.gamma) costs XLA:CPU compile time under
    # vmap, multi-dimensional RNG shapes even more.
    n_z, n_u = 5 * n * n + _MT_ROUNDS * n, 12 * s + 8 + (_MT_ROUNDS + 1) * n
    # the open interval (−1, 1) in the draw's own dtype: float64's nextafter(−1, 0) rounds to −1.0 in float32, where
    # erf_inv(−1) = −inf (16 of the 2^15 float32 draws of song_zhong.theorem2's group U had an infinite normal)
    low = np.nextafter(np.asarray(-1.0, dtype), np.asarray(0.0, dtype))
    v = jax.random.uniform(key, (n_z + n_u,), dtype, minval=low, maxval=1.0)
    z = jnp.sqrt(jnp.asarray(2.0, dtype)) * jax.lax.erf_inv(v[:n_z])  # standard normals
    u = 0.5 * (v[n_z:] + 1.0)  # uniforms in (0, 1)
    df = d - jnp.arange(n, dtype=dtype)  # R_ii² ~ χ²_{d−i+1} (1-based i)
    chi2 = _chi2(df, z[5 * n * n :].reshape(_MT_ROUNDS, n), u[12 * s + 8 :].reshape(_MT_ROUNDS + 1, n))
    low = jnp.tril(z[: n * n].reshape(n, n), -1)
    R = low + jnp.diag(jnp.sqrt(chi2))  # Bartlett factor of n Gaussian vectors in R^d
    Y = _unit_rows(R)
    c, g = Y[:n1], Y[n1:]
    p = c[jnp.arange(n2) % n1]
    g_perp = _unit_rows(g - jnp.sum(g * p, axis=1, keepdims=True) * p)
    rho = jnp.asarray(rho, dtype)
    t = jnp.where(planted, jnp.sqrt(1.0 - rho * rho) * g_perp + rho * p, g)
    coef = (2.0 * u[: 4 * s] - 1.0).reshape(2, 2, s)
    u01 = u[4 * s : 12 * s].reshape(2, 2, 2, s)
    sizes = jnp.asarray([n1, n2], dtype)
    top = jnp.asarray([n1 - 1, n2 - 1], jnp.int32)
    u_index = jnp.minimum(jnp.floor(u01[0] * sizes[:, None, None]).astype(jnp.int32), top[:, None, None])  # basis α
    v_index = jnp.minimum(jnp.floor(u01[1] * sizes[None, :, None]).astype(jnp.int32), top[None, :, None])  # basis β
    noise = (setting.noise / jnp.sqrt(d)) * z[n * n : 5 * n * n].reshape(2, 2, n, n)
    sizes4 = jnp.asarray([n1, n2, n1, n2], dtype)
    x_index = jnp.minimum(jnp.floor(u[12 * s : 12 * s + 4] * sizes4), sizes4 - 1.0)
    x_scale = 2.0 * u[12 * s + 4 : 12 * s + 8] - 1.0
    return Theorem2Instance(
        basis1=c,
        basis2=t,
        coef=coef,
        u_index=u_index,
        v_index=v_index,
        noise=noise,
        x_index=x_index.astype(jnp.int32),
        x_scale=x_scale,
        d=d,
    )


def sample_instance(
    key: Key,
    d: Scalar,
    setting: Theorem2Setting = Theorem2Setting(),
    coherence: Scalar | None = None,
) -> Theorem2Instance:
    """Draw the random setting of Song & Zhong Theorem 2 (bases, sparse W_αβ, noise Z_αβ/√d, x^q, x^k).

    B_1⁰ (n1) and B_2⁰ (n2) are independent uniform unit vectors in R^d; each W_αβ (eq. (11)) has
    ``setting.s`` terms a_k u_k v_kᵀ with a_k ~ U[−1, 1], u_k ~ U(B_α⁰), v_k ~ U(B_β⁰); Z_αβ has i.i.d.
    N(0, noise²) entries and enters as Z_αβ/√d; the query/key pair of eq. (10) uses uniform basis
    indices and λ ~ U[−1, 1]. Stored exactly in an orthonormal frame of span(B_1⁰ ∪ B_2⁰) (module
    docstring): cost O((n1 + n2)³), independent of d.

    Args:
      key: ONE PRNG key.
      d: ambient dimension, an integer >= n1 + n2 (may be a traced scalar, e.g. under vmap).
      setting: :class:`Theorem2Setting` (static).
      coherence: None for independent bases; a number ρ ∈ [0, 1) (may be traced) to plant
        ⟨c_{j mod n1}, t_j⟩ = ρ exactly (t_j = √(1−ρ²)ĝ_j + ρc_{j mod n1}, ĝ_j ⊥ c_{j mod n1} uniform).

    Returns:
      :class:`Theorem2Instance` in JAX's default float dtype (float64 under ``jax.enable_x64``).

    Raises:
      TypeError: ``key`` is not a single PRNG key; ``setting`` is not a Theorem2Setting.
      ValueError: d not an integer or d < n1 + n2; coherence outside [0, 1).
    """
    check_prng_key(key, "sample_instance")
    if not isinstance(setting, Theorem2Setting):
        raise GeomjaxTypeError(f"sample_instance: setting must be a Theorem2Setting, got {type(setting).__name__}")
    _check_d(d, setting, "sample_instance")
    _check_coherence(coherence, "sample_instance")
    rho = 0.0 if coherence is None else coherence
    return _sample(key, d, rho, coherence is not None, setting)


@jax.jit
def _replant(inst: Theorem2Instance, rho):
    n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
    p = inst.basis1[jnp.arange(n2) % n1]
    rho = jnp.asarray(rho, inst.basis2.dtype)
    return Theorem2Instance(
        basis1=inst.basis1,
        basis2=jnp.sqrt(1.0 - rho * rho) * inst.basis2 + rho * p,
        coef=inst.coef,
        u_index=inst.u_index,
        v_index=inst.v_index,
        noise=inst.noise,
        x_index=inst.x_index,
        x_scale=inst.x_scale,
        d=inst.d,
    )


def with_planted_coherence(inst: Theorem2Instance, coherence: Scalar) -> Theorem2Instance:
    """The instance with planted incoherence ρ built from the SAME random draws (t_j ← √(1−ρ²)t_j + ρc_{j mod n1}).

    ``inst`` must come from :func:`sample_instance` with ``coherence=0.0`` (so t_j ⊥ c_{j mod n1});
    the result is then distributed exactly as ``sample_instance(..., coherence=ρ)``. Several ρ on one
    draw share its random numbers (common random numbers: cheaper, and correlated across ρ).

    Args:
      inst: :class:`Theorem2Instance` drawn with coherence 0.
      coherence: ρ ∈ [0, 1) (may be traced).

    Returns:
      :class:`Theorem2Instance`.

    Raises:
      ValueError: ρ outside [0, 1); inst not planted with ρ = 0 (some ⟨c_{j mod n1}, t_j⟩ ≠ 0).
    """
    _check_instance(inst, "with_planted_coherence")
    _check_coherence(coherence, "with_planted_coherence")
    if _concrete(inst.basis2):
        n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
        off = float(jnp.max(jnp.abs(jnp.sum(inst.basis2 * inst.basis1[jnp.arange(n2) % n1], axis=1))))
        if off > 1e3 * float(jnp.finfo(inst.basis2.dtype).eps):
            raise GeomjaxError(
                f"with_planted_coherence: the instance must be drawn with coherence=0.0 (t_j ⊥ c_(j mod n1)), "
                f"but max |⟨c, t⟩| on the planted pairs is {off:.3g}"
            )
    return _replant(inst, coherence)


def embed(inst: Theorem2Instance, frame: Float[Array, "d n"]) -> dict[str, Float[Array, "..."]]:
    """Lift an instance to R^d with an orthonormal frame O (d, n): vectors O y, matrices O M Oᵀ.

    Any O with OᵀO = I gives vectors with the instance's inner products; with O Haar-distributed
    and independent of the instance the basis vectors are distributed as uniform unit vectors in
    R^d, and O (Oᵀ Z O) Oᵀ/√d is the part of Z/√d that acts on span(O) (the rest never enters a
    bilinear form of vectors in the span). Song & Zhong eqs. (10)-(11).

    Args:
      inst: :class:`Theorem2Instance` with frame dimension n = n1 + n2.
      frame: (d, n) matrix with orthonormal columns.

    Returns:
      dict with "basis1" (n1, d), "basis2" (n2, d), "W" (2, 2, d, d) = sparse parts plus noise,
      "W_sparse" (2, 2, d, d) without the noise, and "cq", "tq", "ck", "tk" (d,) of eq. (10).

    Raises:
      ValueError: frame of the wrong shape or without orthonormal columns.
    """
    _check_instance(inst, "embed")
    O = _float_array(frame, "embed", "frame")
    n = inst.basis1.shape[1]
    if O.ndim != 2 or O.shape[1] != n or O.shape[0] < n:
        raise GeomjaxError(f"embed: frame must have shape (d, {n}) with d >= {n}, got {tuple(O.shape)}")
    if _concrete(O):
        err = float(jnp.max(jnp.abs(O.T @ O - jnp.eye(n, dtype=O.dtype))))
        if err > 1e3 * float(jnp.finfo(O.dtype).eps) * n:
            raise GeomjaxError(f"embed: frame columns are not orthonormal (max |OᵀO − I| = {err:.3g}); use a QR factor")
    return _embed(inst, O)


@jax.jit
def _embed(inst: Theorem2Instance, O):
    lift = lambda M: jnp.einsum("ia,xyab,jb->xyij", O, M, O)
    cq, tq, ck, tk = _inputs(inst)
    return {
        "basis1": inst.basis1 @ O.T,
        "basis2": inst.basis2 @ O.T,
        "W_sparse": lift(_weights(inst, False)),
        "W": lift(_weights(inst, True)),
        "cq": O @ cq,
        "tq": O @ tq,
        "ck": O @ ck,
        "tk": O @ tk,
    }


# ----------------------------------------------------------------------------------------------
# Kernel, eq. (11), eq. (12)
# ----------------------------------------------------------------------------------------------


@jax.jit
def _sparse_matrix(coef, U, V):
    return jnp.einsum("k,ki,kj->ij", coef, U, V)


@float64_aware(arrays=('coef', 'U', 'V'))
def sparse_matrix(coef: Float[Array, " s"], U: Float[Array, "s d"], V: Float[Array, "s d"]) -> Float[Array, "d d"]:
    """W = Σ_{k≤s} a_k u_k v_kᵀ: a matrix s-sparsely represented by two bases (Song & Zhong eq. (11)).

    Args:
      coef: (s,) coefficients a_k ∈ [−1, 1].
      U: (s, d) rows u_k (from the basis B, norms <= 1).
      V: (s, d) rows v_k (from the basis B', norms <= 1).

    Returns:
      (d, d) matrix.

    Raises:
      ValueError: shapes inconsistent, |a_k| > 1, a row norm > 1, NaN/Inf.
    """
    a = _float_array(coef, "sparse_matrix", "coef")
    U = _float_array(U, "sparse_matrix", "U")
    V = _float_array(V, "sparse_matrix", "V")
    if a.ndim != 1 or U.ndim != 2 or V.shape != U.shape or U.shape[0] != a.shape[0]:
        raise GeomjaxError(
            f"sparse_matrix: expected coef (s,), U (s, d), V (s, d); got {tuple(a.shape)}, {tuple(U.shape)}, {tuple(V.shape)}"
        )
    if _concrete(a) and a.size and float(jnp.max(jnp.abs(a))) > 1.0:
        raise GeomjaxError(f"sparse_matrix: eq. (11) needs a_k ∈ [−1, 1], got max |a_k| = {float(jnp.max(jnp.abs(a))):.6g}")
    _check_norms(U, "sparse_matrix", "U")
    _check_norms(V, "sparse_matrix", "V")
    return _sparse_matrix(a, U, V)


def _check_bilinear(W, z, z2, where: str):
    W = _float_array(W, where, "W")
    z = _float_array(z, where, "z")
    z2 = _float_array(z2, where, "z'")
    if W.ndim != 2 or W.shape[0] != W.shape[1] or z.shape != (W.shape[0],) or z2.shape != (W.shape[0],):
        raise GeomjaxError(f"{where}: expected W (d, d), z (d,), z' (d,); got {tuple(W.shape)}, {tuple(z.shape)}, {tuple(z2.shape)}")
    return W, z, z2


@jax.jit
def _bilinear(W, z, z2):
    return jnp.dot(z, jnp.dot(W, z2))


@float64_aware(arrays=('W', 'z', 'z2'))
def log_kernel(W: Float[Array, "d d"], z: Float[Array, " d"], z2: Float[Array, " d"]) -> Float[Array, ""]:
    """log K_W(z, z') = zᵀ W z' (Song & Zhong §4.3, the kernel before eq. (9)).

    Args:
      W: (d, d) matrix, W = W^q (W^k)ᵀ/√d_head.
      z, z2: (d,) query and key vectors.

    Returns:
      Scalar.

    Raises:
      ValueError: shapes inconsistent, NaN/Inf.
    """
    return _bilinear(*_check_bilinear(W, z, z2, "log_kernel"))


@float64_aware(arrays=('W', 'z', 'z2'))
def kernel(W: Float[Array, "d d"], z: Float[Array, " d"], z2: Float[Array, " d"]) -> Float[Array, ""]:
    """K_W(z, z') = exp(zᵀ W z') (Song & Zhong §4.3, the kernel used in eq. (9)).

    Args:
      W: (d, d) matrix.  z, z2: (d,) vectors.

    Returns:
      Scalar (overflows to inf for zᵀWz' > ~709 in float64; use :func:`log_kernel` then).

    Raises:
      ValueError: shapes inconsistent, NaN/Inf.
    """
    return jnp.exp(_bilinear(*_check_bilinear(W, z, z2, "kernel")))


def _check_factor_inputs(Ws, cq, tq, ck, tk, where: str):
    Ws = _float_array(Ws, where, "Ws")
    vs = [_float_array(v, where, name) for v, name in ((cq, "cq"), (tq, "tq"), (ck, "ck"), (tk, "tk"))]
    m = Ws.shape[-1] if Ws.ndim == 4 else -1
    if Ws.ndim != 4 or Ws.shape[:2] != (2, 2) or Ws.shape[2] != m or any(v.shape != (m,) for v in vs):
        raise GeomjaxError(
            f"{where}: expected Ws (2, 2, d, d) = [[W11, W12], [W21, W22]] and cq, tq, ck, tk of shape (d,); "
            f"got Ws {tuple(Ws.shape)} and vectors {[tuple(v.shape) for v in vs]}"
        )
    return (Ws, *vs)


@jax.jit
def _pair_forms(Ws, cq, tq, ck, tk):
    """F[α, β, p, q] = (p-th query part)ᵀ W_αβ (q-th key part), parts (c, t)."""
    qs = jnp.stack([cq, tq])
    ks = jnp.stack([ck, tk])
    return jnp.einsum("pi,abij,qj->abpq", qs, Ws, ks)


_KEPT = np.zeros((2, 2, 2, 2), bool)
for _a in range(2):
    for _b in range(2):
        _KEPT[_a, _b, _a, _b] = True


@float64_aware(arrays=('cq', 'tq', 'ck', 'tk'))
def factorized_log_kernel(
    Ws: Float[Array, "2 2 d d"], cq: Float[Array, " d"], tq: Float[Array, " d"], ck: Float[Array, " d"], tk: Float[Array, " d"]
) -> Float[Array, ""]:
    """log of the right side of Song & Zhong eq. (12) without its (1 + O(incoh)) factor.

    log[K_{W11}(c^q, c^k) K_{W12}(c^q, t^k) K_{W21}(t^q, c^k) K_{W22}(t^q, t^k)]
      = c^qᵀW11c^k + c^qᵀW12t^k + t^qᵀW21c^k + t^qᵀW22t^k.

    Args:
      Ws: (2, 2, d, d), Ws[α−1, β−1] = W_αβ (including any noise Z_αβ/√d).
      cq, tq, ck, tk: (d,) parts of x^q = c^q + t^q, x^k = c^k + t^k (eq. (10)).

    Returns:
      Scalar.

    Raises:
      ValueError: shapes inconsistent, NaN/Inf.
    """
    F = _pair_forms(*_check_factor_inputs(Ws, cq, tq, ck, tk, "factorized_log_kernel"))
    return jnp.sum(jnp.where(jnp.asarray(_KEPT), F, 0.0))


@float64_aware(arrays=('cq', 'tq', 'ck', 'tk'))
def log_factorization_error(
    Ws: Float[Array, "2 2 d d"], cq: Float[Array, " d"], tq: Float[Array, " d"], ck: Float[Array, " d"], tk: Float[Array, " d"]
) -> Float[Array, ""]:
    """L = log K_W(x^q, x^k) − log RHS of eq. (12), W = Σ_αβ W_αβ (Song & Zhong eq. (12), App. F.2 eq. (19)).

    Computed as the sum of the 12 cross terms (the bilinear forms of W_αβ on the pairs of parts other
    than (α, β)), which equals the difference of the two logs without its cancellation.

    Args:
      Ws: (2, 2, d, d) = [[W11, W12], [W21, W22]].
      cq, tq, ck, tk: (d,) parts of eq. (10).

    Returns:
      Scalar L; eq. (12) says |L| = O(incoh).

    Raises:
      ValueError: shapes inconsistent, NaN/Inf.
    """
    F = _pair_forms(*_check_factor_inputs(Ws, cq, tq, ck, tk, "log_factorization_error"))
    return jnp.sum(jnp.where(jnp.asarray(_KEPT), 0.0, F))


@float64_aware(arrays=('cq', 'tq', 'ck', 'tk'))
def relative_error(
    Ws: Float[Array, "2 2 d d"], cq: Float[Array, " d"], tq: Float[Array, " d"], ck: Float[Array, " d"], tk: Float[Array, " d"]
) -> Float[Array, ""]:
    """|K_W(x^q, x^k) / RHS(12) − 1| = |expm1(L)|: the "O(incoh)" of Song & Zhong eq. (12).

    Args:
      Ws: (2, 2, d, d).  cq, tq, ck, tk: (d,).

    Returns:
      Scalar >= 0.
    """
    return jnp.abs(jnp.expm1(log_factorization_error(Ws, cq, tq, ck, tk)))


@jax.jit
def _incoherence(B1, B2):
    return jnp.max(jnp.abs(B1 @ B2.T))


@float64_aware(arrays=('B1', 'B2'))
def incoherence(B1: Float[Array, "n1 d"], B2: Float[Array, "n2 d"]) -> Float[Array, ""]:
    """Mutual incoherence incoh = max{|⟨c, t⟩| : c ∈ B_1⁰, t ∈ B_2⁰} (Song & Zhong §4.3, before eq. (10)).

    Unlike :func:`geomjax.theory.geometry.incoherence` (cosines of pos/ctx, §4 Table 1) the vectors are not
    normalized: Theorem 2 assumes ‖u‖₂ ≤ 1 and uses raw inner products.

    Args:
      B1: (n1, d) rows c_i, norms <= 1.
      B2: (n2, d) rows t_j, norms <= 1.

    Returns:
      Scalar in [0, 1].

    Raises:
      ValueError: wrong rank, different widths, empty, NaN/Inf, a row norm > 1.
    """
    B1 = _float_array(B1, "incoherence", "B1")
    B2 = _float_array(B2, "incoherence", "B2")
    if B1.ndim != 2 or B2.ndim != 2 or B1.shape[1] != B2.shape[1] or B1.shape[0] < 1 or B2.shape[0] < 1:
        raise GeomjaxError(f"incoherence: expected B1 (n1, d) and B2 (n2, d), n1, n2 >= 1; got {tuple(B1.shape)} and {tuple(B2.shape)}")
    _check_norms(B1, "incoherence", "B1")
    _check_norms(B2, "incoherence", "B2")
    return _incoherence(B1, B2)


# ----------------------------------------------------------------------------------------------
# Frame-coordinate computations on an instance
# ----------------------------------------------------------------------------------------------


def _check_instance(inst, where: str) -> None:
    if not isinstance(inst, Theorem2Instance):
        raise GeomjaxTypeError(f"{where}: expected a Theorem2Instance (from sample_instance), got {type(inst).__name__}")
    if inst.basis1.ndim != 2 or inst.basis2.ndim != 2:
        raise GeomjaxError(
            f"{where}: expected ONE instance (basis1 (n1, n), basis2 (n2, n)), got shapes {tuple(inst.basis1.shape)} "
            f"and {tuple(inst.basis2.shape)}; vmap over a batch of instances"
        )
    n1, n = inst.basis1.shape
    n2 = inst.basis2.shape[0]
    if inst.basis2.shape[1] != n or n != n1 + n2 or inst.noise.shape != (2, 2, n, n):
        raise GeomjaxError(
            f"{where}: inconsistent instance shapes basis1 {tuple(inst.basis1.shape)}, basis2 "
            f"{tuple(inst.basis2.shape)}, noise {tuple(inst.noise.shape)} (frame dimension must be n1 + n2)"
        )


@partial(jax.jit, static_argnames=("include_noise",))
def _weights(inst: Theorem2Instance, include_noise: bool):
    bases = (inst.basis1, inst.basis2)
    rows = []
    for a in range(2):
        row = []
        for b in range(2):
            U = bases[a][inst.u_index[a, b]]
            V = bases[b][inst.v_index[a, b]]
            W = jnp.einsum("k,ki,kj->ij", inst.coef[a, b], U, V)
            if include_noise:
                W = W + inst.noise[a, b]
            row.append(W)
        rows.append(jnp.stack(row))
    return jnp.stack(rows)


def weight_matrices(inst: Theorem2Instance, include_noise: bool = True) -> Float[Array, "2 2 n n"]:
    """W_αβ (+ Z_αβ/√d) of an instance in frame coordinates (Song & Zhong eq. (11), Theorem 2).

    Args:
      inst: :class:`Theorem2Instance`.
      include_noise: add the noise Z_αβ/√d (the "moreover" part); False gives the sparse parts.

    Returns:
      (2, 2, n, n), index [α−1, β−1].
    """
    _check_instance(inst, "weight_matrices")
    return _weights(inst, bool(include_noise))


@jax.jit
def _inputs(inst: Theorem2Instance):
    i, j, k, l = (inst.x_index[m] for m in range(4))
    lam = inst.x_scale
    return lam[0] * inst.basis1[i], lam[1] * inst.basis2[j], lam[2] * inst.basis1[k], lam[3] * inst.basis2[l]


def decomposed_inputs(
    inst: Theorem2Instance,
) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
    """(c^q, t^q, c^k, t^k) of the instance's query/key pair (eq. (10)) in frame coordinates, each (n,)."""
    _check_instance(inst, "decomposed_inputs")
    return _inputs(inst)


def _sparse_forms(inst: Theorem2Instance):
    """M[α, β] = Y W_αβ Yᵀ (n, n) over all basis vectors Y = [B_1⁰; B_2⁰], noise-free W_αβ (eq. (11)).

    Σ_k a_k (Y u_k)(Y v_k)ᵀ with Y u_k a column of the Gram matrix, as a broadcast sum over the s
    terms (XLA:CPU runs it faster than batched (n, s) @ (s, n) products).
    """
    n1 = inst.basis1.shape[0]
    Y = jnp.concatenate([inst.basis1, inst.basis2], axis=0)
    G = Y @ Y.T
    off = jnp.asarray([0, n1], jnp.int32)
    gu = inst.u_index + off[:, None, None]  # (2, 2, s) rows of Y for u_k
    gv = inst.v_index + off[None, :, None]  # (2, 2, s) rows of Y for v_k
    Gu = jnp.moveaxis(G[:, gu], 0, 2)  # (2, 2, n, s): Y u_k
    Gv = jnp.moveaxis(G[gv, :], 2, 3)  # (2, 2, n, s): Y v_k
    return jnp.sum(inst.coef[:, :, None, None, :] * Gu[:, :, :, None, :] * Gv[:, :, None, :, :], axis=-1)


def _noise_forms(inst: Theorem2Instance):
    """N[α, β] = Y (Z_αβ/√d) Yᵀ (n, n) in frame coordinates, as two plain matmuls over the 4 matrices."""
    Y = jnp.concatenate([inst.basis1, inst.basis2], axis=0)
    n = Y.shape[0]
    H = inst.noise.reshape(4, n, n)
    T = Y @ jnp.transpose(H, (1, 0, 2)).reshape(n, 4 * n)  # [Y H_1, ..., Y H_4]
    T = jnp.transpose(T.reshape(n, 4, n), (1, 0, 2)).reshape(4 * n, n)
    return (T @ Y.T).reshape(2, 2, n, n)


def _block_masks(n1: int, n2: int):
    """kept[α, β] = indicator of block (α, β) of an (n, n) matrix; mixed = off-diagonal blocks."""
    side = np.concatenate([np.zeros(n1, int), np.ones(n2, int)])
    kept = np.zeros((2, 2, n1 + n2, n1 + n2), bool)
    for a in range(2):
        for b in range(2):
            kept[a, b] = (side[:, None] == a) & (side[None, :] == b)
    mixed = side[:, None] != side[None, :]
    return kept, mixed


def _sup_from_cross(X, n1: int):
    """Exact sup of |L| over eq. (10) from the cross-term matrix X (n, n) (module docstring)."""
    A, B = X[:n1, :n1], X[:n1, n1:]
    C, D = X[n1:, :n1], X[n1:, n1:]
    best = []
    for sg in (1.0, -1.0):
        m1 = jnp.max(jnp.abs(A[:, :, None] + sg * B[:, None, :]), axis=0)  # (k, l), max over i
        m2 = jnp.max(jnp.abs(C[:, :, None] + sg * D[:, None, :]), axis=0)  # (k, l), max over j
        best.append(jnp.max(m1 + m2))
    return jnp.maximum(best[0], best[1])


def _cross(M, n1: int, n2: int):
    """Σ_αβ of M[α, β] outside its kept block (α, β): the cross-term matrix (n, n)."""
    kept, _ = _block_masks(n1, n2)
    return jnp.sum(jnp.where(jnp.asarray(kept), 0.0, M), axis=(0, 1))


@partial(jax.jit, static_argnames=("include_noise",))
def _worst_case(inst: Theorem2Instance, include_noise: bool):
    n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
    M = _sparse_forms(inst)
    if include_noise:
        M = M + _noise_forms(inst)
    return _sup_from_cross(_cross(M, n1, n2), n1)


def worst_case_log_error(inst: Theorem2Instance, include_noise: bool = True) -> Float[Array, ""]:
    """sup |log K_W(x^q, x^k) − log RHS(12)| over ALL x^q, x^k of eq. (10) (Song & Zhong Theorem 2).

    The supremum runs over every choice of basis vectors and every λ ∈ [−1, 1]⁴ of the extended bases;
    computed exactly as max_{k,l,σ} [max_i |A_ik + σB_il| + max_j |C_jk + σD_jl|] (module docstring).
    expm1 of it is the worst relative error |K_W/RHS − 1|.

    Args:
      inst: :class:`Theorem2Instance`.
      include_noise: include Z_αβ/√d (Theorem 2 "moreover"); False: the deterministic statement.

    Returns:
      Scalar >= 0.
    """
    _check_instance(inst, "worst_case_log_error")
    return _worst_case(inst, bool(include_noise))


@jax.jit
def _det_bound(inst: Theorem2Instance):
    inc = _incoherence(inst.basis1, inst.basis2)
    return (2.0 * inc + inc * inc) * jnp.sum(jnp.abs(inst.coef))


def deterministic_bound(inst: Theorem2Instance) -> Float[Array, ""]:
    """(2·incoh + incoh²)·Σ_αβ ‖a_αβ‖₁: the explicit constant of App. F.2, eqs. (20)-(21).

    Bounds sup |L| over eq. (10) for the noise-free W_αβ: in each of the three cross terms of W_αβ one
    factor (two for the pair of the other basis) is an inner product across the bases.

    Args:
      inst: :class:`Theorem2Instance`.

    Returns:
      Scalar; <= 4s(2 + incoh)·incoh since |a_k| <= 1.
    """
    _check_instance(inst, "deterministic_bound")
    return _det_bound(inst)


@partial(jax.jit, static_argnames=("pairs",))
def _noise_max(inst: Theorem2Instance, pairs: str):
    n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
    kept, mixed = _block_masks(n1, n2)
    cross = ~kept
    if pairs == "printed":
        cross = cross & mixed[None, None]
    return jnp.max(jnp.where(jnp.asarray(cross), jnp.abs(_noise_forms(inst)), 0.0))


def noise_cross_max(inst: Theorem2Instance, pairs: Pairs = "all") -> Float[Array, ""]:
    """Largest noise cross term max |pᵀ Z_αβ q|/√d (Song & Zhong App. F.2, the "moreover" part).

    pairs="all": every cross term of the proof, i.e. (p, q) ranges over the pairs of parts other than
      (α, β) for Z_αβ: 3(n1 + n2)² terms (including c–c' and t–t' pairs of the same basis).
    pairs="printed": only the pairs (c, t) and (t, c) of B_1⁰ × B_2⁰ that the proof's union bound
      counts: 6·n1·n2 terms.

    Args:
      inst: :class:`Theorem2Instance`.
      pairs: "all" or "printed".

    Returns:
      Scalar >= 0 (0 when the setting has noise = 0).
    """
    _check_instance(inst, "noise_cross_max")
    if pairs not in ("all", "printed"):
        raise GeomjaxError(f"noise_cross_max: pairs must be 'all' or 'printed', got {pairs!r}")
    return _noise_max(inst, pairs)


def n_noise_cross_terms(n1: int, n2: int, pairs: Pairs = "all") -> int:
    """Number of noise cross terms: 3(n1 + n2)² ("all") or 6·n1·n2 ("printed"), App. F.2."""
    for name, v in (("n1", n1), ("n2", n2)):
        check_int(v, name, "n_noise_cross_terms")
    if pairs == "all":
        return 3 * (int(n1) + int(n2)) ** 2
    if pairs == "printed":
        return 6 * int(n1) * int(n2)
    raise GeomjaxError(f"n_noise_cross_terms: pairs must be 'all' or 'printed', got {pairs!r}")


def proof_event(inst: Theorem2Instance, pairs: Pairs = "all") -> Bool[Array, ""]:
    """Indicator of the event the proof's union bound controls: some noise cross term > √2·incoh.

    Song & Zhong App. F.2: each |pᵀZq|/√d ≤ C·incoh with probability ≥ 1 − 2exp(−incoh²·d) for
    C = √2 (:data:`PROOF_NOISE_CONSTANT`); off this event eq. (12) holds with
    sup|L| ≤ deterministic bound + 12√2·incoh.

    Args:
      inst: :class:`Theorem2Instance`.
      pairs: "all" (every cross term) or "printed" (only B_1⁰ × B_2⁰ pairs, as the proof counts).

    Returns:
      Boolean scalar.
    """
    m = noise_cross_max(inst, pairs)
    return m > PROOF_NOISE_CONSTANT * _incoherence(inst.basis1, inst.basis2)


def theorem_event(inst: Theorem2Instance, constant: Scalar = 12 * PROOF_NOISE_CONSTANT) -> Bool[Array, ""]:
    """Indicator that eq. (12) FAILS at the proof's constants: sup|L| > deterministic bound + constant·incoh.

    Song & Zhong Theorem 2 ("moreover"): the probability of this event is O(|B_1⁰||B_2⁰| exp(−incoh²·d)).
    The default constant 12√2 is the proof's (12 noise cross terms, each ≤ √2·incoh).

    Args:
      inst: :class:`Theorem2Instance`.
      constant: C in "O(incoh)" for the noise part, > 0.

    Returns:
      Boolean scalar.

    Raises:
      ValueError: constant not a positive number.
    """
    if isinstance(constant, bool) or not (isinstance(constant, (int, float, np.floating, np.integer)) and float(constant) > 0):
        raise GeomjaxError(f"theorem_event: constant must be a positive number, got {constant!r}")
    sup = worst_case_log_error(inst, include_noise=True)
    inc = _incoherence(inst.basis1, inst.basis2)
    return sup > _det_bound(inst) + float(constant) * inc


def union_bound(
    incoh: Broadcastable, d: Broadcastable, n1: int, n2: int, count: Count = "corrected"
) -> Float[Array, "*#B"]:
    """Union bound on the probability of :func:`proof_event`, min(1, 2·N·exp(−incoh²·d)) (App. F.2).

    count="printed": N = 6·n1·n2 (the union over B_1⁰ × B_2⁰ as printed, |B_1⁰||B_2⁰| pairs, with the
      proof's per-term bound 2exp(−incoh²d) and its 6 mixed noise terms per pair).
    count="corrected": N = 3(n1 + n2)², every noise cross term (c–c', t–t' pairs included).

    Args:
      incoh: incoherence (array), >= 0.
      d: dimension (array or int), > 0.
      n1, n2: basis sizes.
      count: "printed" or "corrected".

    Returns:
      Array of probabilities in [0, 1], broadcast over incoh and d.

    Raises:
      ValueError: unknown count, n1 or n2 not a positive integer.
    """
    if count not in ("printed", "corrected"):
        raise GeomjaxError(f"union_bound: count must be 'printed' or 'corrected', got {count!r}")
    N = n_noise_cross_terms(n1, n2, "printed" if count == "printed" else "all")
    incoh = jnp.asarray(incoh)
    if not jnp.issubdtype(incoh.dtype, jnp.floating):
        incoh = incoh.astype(jnp.result_type(float))
    x = incoh * incoh * jnp.asarray(d, incoh.dtype)
    return jnp.minimum(1.0, 2.0 * N * jnp.exp(-x))


def _noise_part(inst: Theorem2Instance, Ns):
    n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
    kept, mixed = _block_masks(n1, n2)
    cross_all = jnp.asarray(~kept)
    cross_printed = jnp.asarray(~kept & mixed[None, None])
    inc = _incoherence(inst.basis1, inst.basis2)
    absN = jnp.abs(Ns)
    nmax_all = jnp.max(jnp.where(cross_all, absN, 0.0))
    nmax_printed = jnp.max(jnp.where(cross_printed, absN, 0.0))
    thr = PROOF_NOISE_CONSTANT * inc
    return {
        "incoh": inc,
        "x": inc * inc * inst.d,
        "noise_max_all": nmax_all,
        "noise_max_printed": nmax_printed,
        "proof_event_all": nmax_all > thr,
        "proof_event_printed": nmax_printed > thr,
        "n_exceed_all": jnp.sum(cross_all & (absN > thr)),
    }


@jax.jit
def _noise_statistics(inst: Theorem2Instance):
    return _noise_part(inst, _noise_forms(inst))


@jax.jit
def _statistics(inst: Theorem2Instance):
    n1, n2 = inst.basis1.shape[0], inst.basis2.shape[0]
    Ns = _noise_forms(inst)
    out = _noise_part(inst, Ns)
    inc = out["incoh"]
    X_det = _cross(_sparse_forms(inst), n1, n2)
    X = X_det + _cross(Ns, n1, n2)
    sup_det = _sup_from_cross(X_det, n1)
    sup = _sup_from_cross(X, n1)
    i, j, k, l = (inst.x_index[m] for m in range(4))
    lam = inst.x_scale
    L = (lam[0] * lam[2] * X[i, k] + lam[0] * lam[3] * X[i, n1 + l]
         + lam[1] * lam[2] * X[n1 + j, k] + lam[1] * lam[3] * X[n1 + j, n1 + l])
    bound = (2.0 * inc + inc * inc) * jnp.sum(jnp.abs(inst.coef))
    out.update(
        sup_log_error=sup,
        sup_relative_error=jnp.expm1(sup),
        sup_log_error_det=sup_det,
        deterministic_bound=bound,
        log_error=jnp.abs(L),
        relative_error=jnp.abs(jnp.expm1(L)),
        theorem_event=sup > bound + 12.0 * PROOF_NOISE_CONSTANT * inc,
    )
    return out


def noise_statistics(inst: Theorem2Instance) -> dict[str, Float[Array, ""]]:
    """The noise part of Theorem 2 ("moreover", App. F.2) for one instance, without the supremum.

    Args:
      inst: :class:`Theorem2Instance` (vmap for a batch).

    Returns:
      dict of scalars: ``incoh``, ``x`` = incoh²·d, ``noise_max_all``/``noise_max_printed``
      (:func:`noise_cross_max`), ``proof_event_all``/``proof_event_printed`` (:func:`proof_event`),
      ``n_exceed_all`` = number of noise cross terms above √2·incoh (its mean is
      3(n1+n2)²·erfc(√(incoh²·d)) when incoh is fixed, each term being N(0, 1/d)).
    """
    _check_instance(inst, "noise_statistics")
    return _noise_statistics(inst)


def instance_statistics(inst: Theorem2Instance) -> dict[str, Float[Array, ""]]:
    """Every Theorem 2 quantity of one instance, in one pass (Song & Zhong eq. (12), App. F.2).

    Args:
      inst: :class:`Theorem2Instance` (vmap for a batch).

    Returns:
      dict of scalars: everything of :func:`noise_statistics`, plus ``sup_log_error`` (with noise)
      and ``sup_log_error_det`` (without) = sup over eq. (10) of |L| (:func:`worst_case_log_error`);
      ``sup_relative_error`` = expm1 of the former; ``deterministic_bound``
      (:func:`deterministic_bound`); ``log_error``/``relative_error`` = |L| and |K_W/RHS − 1| of the
      instance's own query/key pair; ``theorem_event`` (:func:`theorem_event` at the proof's
      constant).
    """
    _check_instance(inst, "instance_statistics")
    return _statistics(inst)
