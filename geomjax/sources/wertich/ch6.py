"""Wertich chapter 6 (with the §2.5 Marchenko–Pastur density it relies on): bilinear forms of joint Gaussians
(§6.2.1), singular values of Gaussian matrices (§6.2.2), traces of random matrix products (§6.2.3-6.2.5),
uniform vectors on spheres (§6.3.1), Var(xᵀCy) (§6.3.2), eq. (6.49) (§6.3.3) and how normal xᵀCy is (§6.4)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import gaussian as G
from geomjax.claims import Claim, Evaluation, Inequality, Tolerance, limit_evaluation, per_run, register
from geomjax.sources.wertich._shared import SOURCE, annotate, det_claim, mc_claim, rng, spd, x64

# ==============================================================================================
# §6.2.1: bilinear forms of joint Gaussians (eqs. 6.2-6.3, App. B)
# ==============================================================================================

_draws = rng(621)
_BILINEAR_N = 3
_BILINEAR_A, _BILINEAR_B = _draws.normal(size=(_BILINEAR_N, _BILINEAR_N)), _draws.normal(size=(_BILINEAR_N, _BILINEAR_N))
_BILINEAR_C = _BILINEAR_A.T @ _BILINEAR_B
_BILINEAR_MU_X, _BILINEAR_MU_Y = _draws.normal(size=_BILINEAR_N), _draws.normal(size=_BILINEAR_N)
_JOINT_FACTOR = _draws.normal(size=(2 * _BILINEAR_N, 2 * _BILINEAR_N))
_BILINEAR_JOINT_COV = _JOINT_FACTOR @ _JOINT_FACTOR.T / 3 + 0.2 * np.eye(2 * _BILINEAR_N)  # Σ_XY = upper-right block, not symmetric
_BILINEAR_COV_XY = _BILINEAR_JOINT_COV[:_BILINEAR_N, _BILINEAR_N:]


def _s_bil_joint(key):
    z = G.joint_gaussian(key, jnp.asarray(np.concatenate([_BILINEAR_MU_X, _BILINEAR_MU_Y])), jnp.asarray(_BILINEAR_JOINT_COV))
    x, y = z[:_BILINEAR_N], z[_BILINEAR_N:]
    return (jnp.asarray(_BILINEAR_A) @ x) @ (jnp.asarray(_BILINEAR_B) @ y)


mc_claim("s6_2_1.eq6_2_printed", f"{SOURCE} eq. (6.2)",
    "E⟨Ax, By⟩ = μ_XᵀCμ_Y + Tr(CΣ_XY), C = AᵀB, with Σ_XY = Cov(x, y) the upper-right block of the joint covariance",
    lambda: G.bilinear_mean_printed(jnp.asarray(_BILINEAR_C), jnp.asarray(_BILINEAR_MU_X), jnp.asarray(_BILINEAR_MU_Y), jnp.asarray(_BILINEAR_COV_XY)),
    _s_bil_joint,
    exact=lambda: G.bilinear_mean(jnp.asarray(_BILINEAR_C), jnp.asarray(_BILINEAR_MU_X), jnp.asarray(_BILINEAR_MU_Y), jnp.asarray(_BILINEAR_COV_XY)),
    corrected_by="s6_2_1.eq6_2_corrected",
    notes="n=3, random A, B and a joint covariance with non-symmetric Σ_XY. Does not hold under the block convention "
          "the statement displays; the proof (eq. 6.7, E[yxᵀ] = μ_Yμ_Xᵀ + Σ_XY) silently uses Σ_XY := Cov(y, x). "
          "Corrected: Tr(CᵀΣ_XY) = Tr(CΣ_YX) (s6_2_1.eq6_2_corrected); both agree when C or Σ_XY is symmetric")
mc_claim("s6_2_1.eq6_2_corrected", f"{SOURCE} eq. (6.2)",
    "corrected: E⟨Ax, By⟩ = μ_XᵀCμ_Y + Tr(CᵀΣ_XY) = μ_XᵀCμ_Y + Tr(CΣ_YX), Σ_XY = Cov(x, y)",
    lambda: G.bilinear_mean(jnp.asarray(_BILINEAR_C), jnp.asarray(_BILINEAR_MU_X), jnp.asarray(_BILINEAR_MU_Y), jnp.asarray(_BILINEAR_COV_XY)), _s_bil_joint,
    full=2**23, notes="2^23 samples at full: at 2^20 the detectable error 5·sem (0.042) exceeded the 1% margin (0.026)")

_BILINEAR_COV_X, _BILINEAR_COV_Y = spd(_draws, _BILINEAR_N), spd(_draws, _BILINEAR_N, 0.7)


def _s_bil_var(key):
    k1, k2 = jax.random.split(key)
    x = G.joint_gaussian(k1, jnp.asarray(_BILINEAR_MU_X), jnp.asarray(_BILINEAR_COV_X))
    y = G.joint_gaussian(k2, jnp.asarray(_BILINEAR_MU_Y), jnp.asarray(_BILINEAR_COV_Y))
    return (x @ jnp.asarray(_BILINEAR_C) @ y - float(_BILINEAR_MU_X @ _BILINEAR_C @ _BILINEAR_MU_Y)) ** 2


mc_claim("s6_2_1.eq6_3", f"{SOURCE} eq. (6.3), App. B.1",
    "Σ_XY = 0: Var⟨Ax, By⟩ = Tr(Σ_X C Σ_Y Cᵀ) + μ_YᵀCᵀΣ_XCμ_Y + μ_XᵀCΣ_YCᵀμ_X",
    lambda: G.bilinear_variance(*(jnp.asarray(a) for a in (_BILINEAR_C, _BILINEAR_MU_X, _BILINEAR_MU_Y, _BILINEAR_COV_X, _BILINEAR_COV_Y))), _s_bil_var,
    notes="n=3, random non-symmetric C and non-zero means; estimate = E[(xᵀCy − μ_XᵀCμ_Y)²]")

# ==============================================================================================
# §2.5, §6.2.2: singular values of Gaussian matrices (eqs. 6.12-6.13, Marchenko–Pastur)
# ==============================================================================================

_SIGMA1_SIZES = {"quick": (8, 32, 128), "full": (8, 32, 128, 512)}
_SIGMA1_MATRICES = {"quick": (2048, 1024, 256), "full": (2**14, 2**13, 2**12, 2**10)}


@functools.partial(jax.jit, static_argnums=1)
def _sigma1_sq(key, n):
    """σ_1² of an n×n matrix with N(0, 1/n) entries (largest eigenvalue of AᵀA)."""
    A = jax.random.normal(key, (n, n), jnp.float64) / math.sqrt(n)
    return jnp.linalg.eigvalsh(A.T @ A)[-1]


def _ev_eq612(budget, key):
    """E σ_1²/(nσ²) by Monte Carlo at each n of the budget's sequence, extrapolated n → ∞ (L + c·n^(−r))."""
    ns, ms = _SIGMA1_SIZES[budget], _SIGMA1_MATRICES[budget]
    vals, sems = [], []
    for i, (n, m) in enumerate(zip(ns, ms)):
        s1 = np.asarray(jax.vmap(lambda k: _sigma1_sq(k, n))(jax.random.split(jax.random.fold_in(key, i), m)))
        vals.append(s1.mean())
        sems.append(s1.std(ddof=1) / math.sqrt(m))
    ev = limit_evaluation(np.asarray(ns, float), np.asarray(vals), np.asarray(sems), label="E_sigma1_sq_over_n_sigma2",
                          method=f"Monte Carlo E σ_1²/(nσ²) at n = {ns} ({ms} matrices)")
    ev.observations["finite_n_deviation"] = (
        "at finite n E σ_1²/(nσ²) lies below 4 by ≈ 3 n^(−2/3) (Tracy–Widom; s6_2_2.eq6_12_tracy_widom): "
        + ", ".join(f"{v:.3f} at n = {n}" for n, v in zip(ns, vals)))
    return ev


det_claim("s6_2_2.eq6_12_printed", f"{SOURCE} eq. (6.12)",
     "E[σ_1²] ≈ 4nσ² as n → ∞ for an n×n matrix with N(0, σ²) entries: E σ_1²/(nσ²) → 4 (σ² = 1/n)",
     4.0, _ev_eq612, Tolerance(rtol=0.0, atol=0.1, origin=(
         "a limit with an exact printed constant: 0.1 (2.5% of 4) is the resolution asked of the extrapolated limit "
         "(the Monte Carlo fit along n resolves it to ≈ 0.02); finite-n values are observations, not the verdict")),
     notes="The limit is right (σ_1²/(nσ²) → 4); the finite-n bias is large: E[σ_1²]/(nσ²) ≈ 4 − 3.04 n^(−2/3) "
           "(Tracy–Widom), reported as the observation 'finite_n_deviation'. Finite-n form: s6_2_2.eq6_12_tracy_widom")
_TRACY_WIDOM_SIZES = (16, 64)


def _ev_tw(budget, key):
    m = 8192 if budget == "quick" else 16384  # quick: 1,024 left 5·sem (0.071) straddling the margin 0.051
    est, sem = [], []
    for i, n in enumerate(_TRACY_WIDOM_SIZES):
        A = jax.random.normal(jax.random.fold_in(key, i), (m, n, n), jnp.float64) / math.sqrt(n)
        s1 = np.asarray(jax.jit(jax.vmap(lambda a: jnp.linalg.svd(a, compute_uv=False)[0] ** 2))(A))
        est.append(s1.mean()); sem.append(s1.std(ddof=1) / math.sqrt(m))
    return Evaluation(value=np.array(est), sem=np.array(sem), n=m, method="Monte Carlo mean of σ_1²",
                      details={"n": list(_TRACY_WIDOM_SIZES), "matrices": m, "ratio_to_4": (np.array(est) / 4).tolist()})


det_claim("s6_2_2.eq6_12_tracy_widom", f"{SOURCE} eq. (6.12)",
     "corrected: E[σ_1²] ≈ σ²(μ_n + s_n·E[TW₁]) (Johnstone's centring μ_n = (√(n−1)+√n)², "
     "s_n = (√(n−1)+√n)(1/√(n−1)+1/√n)^{1/3}, E[TW₁] = −1.2065), within 1.5%",
     np.array([G.sigma1_sq_tw(n, 1 / n) for n in _TRACY_WIDOM_SIZES]), _ev_tw, Tolerance(rtol=0.015, atol=0.0, origin=(
         "the Tracy–Widom form is itself asymptotic: its next-order correction is of relative size (s_n/μ_n)·n^(−2/3) "
         "≈ 0.10·0.16 = 1.6% at n = 16 (smaller at 64); 1.5% is that scale, and the Monte Carlo sem enters the test")),
     notes=f"n ∈ {_TRACY_WIDOM_SIZES}, σ² = 1/n; value = Monte Carlo mean of σ_1² (8192 matrices quick, 16384 full) with its sem")

_SUMSQ_N, _SUMSQ_S2 = 16, 0.5


def _s_sumsq(key):
    A = jax.random.normal(key, (_SUMSQ_N, _SUMSQ_N), jnp.float64) * math.sqrt(_SUMSQ_S2)
    s = jnp.sum(jnp.linalg.svd(A, compute_uv=False) ** 2)
    return jnp.stack([s, (s - _SUMSQ_N**2 * _SUMSQ_S2) ** 2])


mc_claim("s6_2_2.eq6_13", f"{SOURCE} eq. (6.13)",
    "E[Σσ_i²] = n²σ², Var(Σσ_i²) = 2n²σ⁴ (n×n, N(0, σ²) entries)",
    np.array([_SUMSQ_N**2 * _SUMSQ_S2, 2 * _SUMSQ_N**2 * _SUMSQ_S2**2]), _s_sumsq, quick=2**13, chunk=1024,
    seconds={"quick": 40.0, "full": 180.0},  # ~1e6 SVDs decide the variance at 1%: ~25 CPU s on the 2-core machine
    notes=f"n={_SUMSQ_N}, σ²={_SUMSQ_S2}; Σσ_i² computed from the SVD (not as Σa_ij²)")

_MP_MOMENTS_N, _MP_MOMENTS_S2 = 24, 0.5


def _s_mp_moments(key):
    A = jax.random.normal(key, (_MP_MOMENTS_N, _MP_MOMENTS_N), jnp.float64) * math.sqrt(_MP_MOMENTS_S2)
    s2 = jnp.linalg.svd(A, compute_uv=False) ** 2
    return jnp.stack([jnp.mean(s2), jnp.mean(s2**2)])


def _printed_mp_moments():
    """Moments ∫x^k f_printed(x) dx, k = 1, 2 (trapezoid in θ, x = 2σ²(1 − cos θ): smooth integrand)."""
    th = np.linspace(0.0, np.pi, 20001)
    x = 2 * _MP_MOMENTS_S2 * (1 - np.cos(th))
    f = np.asarray(G.mp_density_printed(jnp.asarray(x[1:-1]), _MP_MOMENTS_S2))
    f = np.concatenate([[f[0]], f, [0.0]])
    dx = 2 * _MP_MOMENTS_S2 * np.sin(th)
    return np.array([np.trapezoid(x**k * f * dx, th) for k in (1, 2)])


mc_claim("s2_5.mp_density_printed", f"{SOURCE} §2.5",
    "squared singular values of an n×n N(0, σ²) matrix have density f(x) = √(4σ²x − x²)/(2πσ²x) on [0, 4σ²] "
    "(first two moments)", _printed_mp_moments, _s_mp_moments, quick=2**12, chunk=1024,
    exact=lambda: _corr_mp_moments(), corrected_by="s2_5.mp_moments_corrected",
    notes=f"n={_MP_MOMENTS_N}, σ²={_MP_MOMENTS_S2}; estimate = (mean σ_i², mean σ_i⁴) per matrix vs the printed density's moments (σ², 2σ⁴). "
          "Does not hold: the printed law is that of σ_i²/n; the support is [0, 4nσ²] (as eq. 6.12 itself says) and with "
          "σ² = 1/n it is [0, 4], not [0, 4/n]. Corrected: s2_5.mp_moments_corrected, s2_5.mp_histogram")


def _corr_mp_moments():
    m1, m2 = G.wishart_moments(_MP_MOMENTS_N, _MP_MOMENTS_N, _MP_MOMENTS_S2)
    return np.array([m1 / _MP_MOMENTS_N, m2 / _MP_MOMENTS_N])


mc_claim("s2_5.mp_moments_corrected", f"{SOURCE} §2.5",
    "corrected: mean σ_i² = nσ², mean σ_i⁴ = n(2n+1)σ⁴ exactly (Wishart; MP limit 2n²σ⁴)",
    _corr_mp_moments, _s_mp_moments, quick=2**12, chunk=1024, notes=f"n={_MP_MOMENTS_N}, σ²={_MP_MOMENTS_S2}")


@per_run
def mp_hist_sample(n: int, m: int, sigma2: float, matrices: int, seed: int) -> np.ndarray:
    """:func:`geomjax.theory.gaussian.mp_sample` (float64, NumPy) drawn from ``seed``: (matrices·min(n, m),) sorted,
    shared by the §2.5 histogram claims and the report within a run."""
    with jax.enable_x64(True):
        return np.asarray(G.mp_sample(jax.random.key(seed), n, m, sigma2, matrices, "float64"))


MP_HIST_N = 200


def _ev_mp_hist(printed):
    def ev(budget, key):
        mats = 10 if budget == "quick" else 100
        s2 = 1.0 / MP_HIST_N
        x = mp_hist_sample(MP_HIST_N, MP_HIST_N, s2, mats, int(jax.random.randint(key, (), 0, 2**31 - 1)))
        if printed:  # the printed density is the MP law of a "1×1" matrix: mp_density(x, 1, 1, σ²)
            cdf = lambda u: G.mp_cdf(u, 1, 1, s2)
        else:
            cdf = lambda u: G.mp_cdf(u, MP_HIST_N, MP_HIST_N, s2)
        return Evaluation(value=np.array([G.ks_distance(x, cdf)]), details={"n": MP_HIST_N, "sigma2": s2, "matrices": mats,
                                                                  "max_sq_singular_value": float(x.max())})
    return ev


_KS_ORIGIN = ("Kolmogorov–Smirnov distance: a sample of N = 10·200 squared singular values lies ≈ 1/√N ≈ 0.022 from "
              "its own law (quick budget; finite-n edge effects add less), so 0.02 is the test's resolution")

def _mp_support_witness() -> Evaluation:
    """NumPy sample (10 matrices 200×200, N(0, 1/n), numpy.linalg.svd): the printed law has all its mass in
    [0, 4/n], so its CDF is 1 at 4/n while the sample's CDF there is the fraction of σ_i² ≤ 4/n; the gap is
    a lower bound of the Kolmogorov–Smirnov distance."""
    rng, n = np.random.default_rng(250), MP_HIST_N
    s2 = np.linalg.svd(rng.normal(size=(10, n, n)) / math.sqrt(n), compute_uv=False).reshape(-1) ** 2
    return Evaluation(value=np.array([1.0 - np.mean(s2 <= 4.0 / n)]),
                      method="NumPy sample: 1 − fraction of σ_i² inside the printed support [0, 4/n]")


det_claim("s2_5.mp_histogram_printed", f"{SOURCE} §2.5",
     "the histogram of squared singular values of n×n N(0, 1/n) matrices follows f(x) = (n/(2πx))√(4x/n − x²) on [0, 4/n]",
     0.0, _ev_mp_hist(True), Tolerance(rtol=0.0, atol=0.02, origin=_KS_ORIGIN),
     witness=lambda budget, key: _mp_support_witness(), corrected_by="s2_5.mp_histogram_corrected",
     notes=f"value = Kolmogorov–Smirnov distance between the pooled σ_i² (n={MP_HIST_N}) and the printed law; "
           "holds iff ≤ 0.02 (the finite-n KS distance to the right law is ~0.005)")
det_claim("s2_5.mp_histogram_corrected", f"{SOURCE} §2.5",
     "corrected: squared singular values of n×n N(0, σ²) follow √(x(4nσ² − x))/(2πnσ²x) on [0, 4nσ²]",
     0.0, _ev_mp_hist(False), Tolerance(rtol=0.0, atol=0.02, origin=_KS_ORIGIN),
     notes=f"value = KS distance to geomjax.theory.gaussian.mp_cdf, n={MP_HIST_N}, σ² = 1/n")

# ==============================================================================================
# §6.2.3-6.2.5: traces of random matrix products
# ==============================================================================================

_TRACE_AB_N, _TRACE_AB_S2 = 8, 0.3


def _s_trab(key):
    k1, k2 = jax.random.split(key)
    A = jax.random.normal(k1, (_TRACE_AB_N, _TRACE_AB_N), jnp.float64) * math.sqrt(_TRACE_AB_S2)
    B = jax.random.normal(k2, (_TRACE_AB_N, _TRACE_AB_N), jnp.float64) * math.sqrt(_TRACE_AB_S2)
    t = jnp.trace(A.T @ B)
    return jnp.stack([t, t * t])


mc_claim("s6_2_3.eq6_17", f"{SOURCE} eq. (6.17)",
    "A, B with i.i.d. N(0, σ²) entries: E[Tr(AᵀB)] = 0, Var(Tr(AᵀB)) = n²σ⁴",
    np.array([0.0, _TRACE_AB_N**2 * _TRACE_AB_S2**2]), _s_trab, notes=f"n={_TRACE_AB_N}, σ²={_TRACE_AB_S2}")

_draws = rng(624)
_SELF_C, _SELF_MU, _SELF_COV = _draws.normal(size=(3, 3)), _draws.normal(size=3), spd(_draws, 3)


def _s_self(key):
    x = G.joint_gaussian(key, jnp.asarray(_SELF_MU), jnp.asarray(_SELF_COV))
    return x @ jnp.asarray(_SELF_C) @ x


mc_claim("s6_2_4.self_pairing", f"{SOURCE} §6.2.4",
    "x ~ N(μ, Σ_X): E⟨Ax, Bx⟩ = Tr(CΣ_X) + μᵀCμ, C = AᵀB",
    lambda: G.self_bilinear_mean(jnp.asarray(_SELF_C), jnp.asarray(_SELF_MU), jnp.asarray(_SELF_COV)), _s_self,
    notes="n=3, non-symmetric C")

_ALIGNED_N = 8


def _sym_factors(key):
    """Two independent n×n N(0, 1/n) matrices as (V_A D_A V_Aᵀ, V_B D_B V_Bᵀ, σ_a, σ_b): Tr(AᵀB) with the left singular
    vectors chosen as in eq. (6.24), U_AᵀU_B = V_AᵀV_B, is Tr(V_A D_A V_Aᵀ · V_B D_B V_Bᵀ)."""
    k1, k2 = jax.random.split(key)
    out = []
    for k in (k1, k2):
        M = jax.random.normal(k, (_ALIGNED_N, _ALIGNED_N), jnp.float64) / math.sqrt(_ALIGNED_N)
        _, s_, vh = jnp.linalg.svd(M)
        out.append((vh.T @ jnp.diag(s_) @ vh, s_))
    (SA, sa), (SB, sb) = out
    return SA, SB, sa, sb


def _s_aligned(key):
    SA, SB, sa, _ = _sym_factors(key)
    # σ² = 1/n, so n²σ² = n and √n·σ = 1
    return jnp.stack([jnp.sum(SA * SB), jnp.mean(sa)])


def _s_aligned_corrected(key):
    SA, SB, sa, sb = _sym_factors(key)
    return jnp.sum(SA * SB) - jnp.sum(sa) * jnp.sum(sb) / _ALIGNED_N


def _aligned_numpy_witness(budget) -> Evaluation:
    """A second Monte Carlo estimator sharing no code path: NumPy's generator and numpy.linalg.svd; the left singular
    vectors of B replaced by U_A V_AᵀV_B (eq. (6.24)) and Tr(AᵀB) computed from the rebuilt matrices;
    (E Tr(AᵀB), E[mean_i σ_i]/(√nσ)) for n×n N(0, 1/n) matrices."""
    rng = np.random.default_rng(6250)
    m = 4096 if budget == "quick" else 65536
    X = rng.normal(size=(m, 2, _ALIGNED_N, _ALIGNED_N)) / math.sqrt(_ALIGNED_N)
    U, s_, Vh = np.linalg.svd(X)
    V = np.swapaxes(Vh, -1, -2)
    A = X[:, 0]
    U_B = U[:, 0] @ np.swapaxes(V[:, 0], -1, -2) @ V[:, 1]  # U_AᵀU_B = V_AᵀV_B
    B = U_B @ (s_[:, 1, :, None] * Vh[:, 1])
    x = np.stack([np.einsum("mij,mij->m", A, B), s_[:, 0].mean(-1)], -1)
    return Evaluation(value=x.mean(0), sem=x.std(0, ddof=1) / math.sqrt(m), n=m,
                      method=f"NumPy Monte Carlo ({m} matrix pairs, numpy.random + numpy.linalg.svd, U_B rebuilt by eq. (6.24))")


mc_claim("s6_2_5.aligned_trace_printed", f"{SOURCE} §6.2.5 (statement and eqs. 6.24-6.29)",
    "with U_AᵀU_B = V_AᵀV_B (the choice (6.24)) E[Tr(AᵀB)] = n²σ², via the step E[σ_i] = √n·σ (unordered singular "
    "values); A, B independent n×n with i.i.d. N(0, σ²) entries",
    np.array([_ALIGNED_N * 1.0, 1.0]), _s_aligned, quick=2**13, chunk=1024,
    witness=lambda budget, key: _aligned_numpy_witness(budget), corrected_by="s6_2_5.aligned_trace_corrected",
    error_kind="wrong statement",
    printed=("Statement: Let A = U_A D_A V_Aᵀ and B = U_B D_B V_Bᵀ be randomized linear maps of shape n × n with each "
             "element distributed according to i.i.d. ∼ N(0, σ²) and V_A and V_B their right singular value matrices. "
             "Then there exist left singular value matrices U_A and U_B so that E[Tr(AᵀB)] = n²σ². Proof: Choose: U_A "
             "and U_B with U_AᵀU_B = (V_BᵀV_A)⁻¹ = V_AᵀV_B (6.24)"),
    notes=f"n={_ALIGNED_N}, σ² = 1/n; estimate = (E Tr(AᵀB) under (6.24), E[mean_i σ_i]/(√n σ)). Does not hold: two "
          "steps fail. (6.27)→(6.28): Tr(D_AWᵀD_BW) = Σ_ij σ_aiσ_bjW_ji², not Σ_i σ_aiσ_bi "
          "(s6_2_5.step_6_28_printed), and W = V_BᵀV_A is Haar, so E Tr(AᵀB) = (E Σ_iσ_i)²/n "
          "(s6_2_5.aligned_trace_corrected): ≈ 0.70·n²σ² at n = 8, → (8/(3π))²·n²σ² ≈ 0.72·n²σ² as n → ∞. (6.29): "
          "E[σ_i] = √nσ is false (Jensen; MP limit 8/(3π) ≈ 0.849, s6_2_5.mean_singular_value_corrected). No other "
          "choice attains n²σ² either: with V_A, V_B given, as the Statement has them, Tr(AᵀB) = Tr(D_AQD_BW) with "
          "Q = U_AᵀU_B free and W = V_BᵀV_A fixed, so the best U_A, U_B reach E‖D_BWD_A‖_* = 0.727, 0.739, 0.745, "
          "0.747·n²σ² at n = 8, 16, 32, 64 (NumPy, 1,000-4,000 pairs): about 25% short, not an O(1/n) deficit. Only "
          "with V_A, V_B free too does the von Neumann bound Σ_i σ_(i)σ_(i), of mean n²σ² − Σ_i Var(σ_(i)) "
          "(s6_2_5.trace_supremum), come within O(1/n)")


def _step_628_eval(budget, key):
    """(Tr(D_A WᵀD_B W) − Σ_i σ_aiσ_bi)/Σ_i σ_aiσ_bi for random diagonal spectra and Haar W (n = 8), float64."""
    rng = np.random.default_rng(6280)
    vals = []
    for _ in range(16 if budget == "quick" else 256):
        W, _ = np.linalg.qr(rng.normal(size=(_ALIGNED_N, _ALIGNED_N)))
        da, db = np.sort(rng.uniform(0.1, 2.0, _ALIGNED_N))[::-1], np.sort(rng.uniform(0.1, 2.0, _ALIGNED_N))[::-1]
        vals.append((np.trace(np.diag(da) @ W.T @ np.diag(db) @ W) - da @ db) / (da @ db))
    return Evaluation(value=np.asarray(vals), method="random spectra and Haar W (NumPy QR), float64")


det_claim("s6_2_5.step_6_28_printed", f"{SOURCE} §6.2.5 (eqs. 6.27-6.28)",
    "for orthogonal W (orthonormal rows w_i) and diagonal D_A, D_B: Tr(D_AWᵀD_BW) = Σ_i ⟨σ_aiw_i, σ_biw_i⟩ = Σ_i σ_aiσ_bi",
    0.0, _step_628_eval, Tolerance(rtol=0.0, atol=1e-10, origin="float64 rounding of an exact identity (relative error)"),
    witness=lambda budget, key: Evaluation(
        value=np.array([np.trace(np.diag([1.0, 0.0]) @ np.array([[0.0, 1.0], [1.0, 0.0]]).T @ np.diag([1.0, 0.0])
                                 @ np.array([[0.0, 1.0], [1.0, 0.0]])) - 1.0]),
        method="exact counterexample n = 2, W = swap, D_A = D_B = diag(1, 0): Tr = 0 against Σσ_aiσ_bi = 1"),
    error_kind="wrong statement",
    printed=("D_AWᵀD_BW = [σ_a1w_1 σ_a2w_2 ⋯ σ_anw_n]ᵀ · [σ_b1w_1 σ_b2w_2 ⋯ σ_bnw_n] (6.27) Due to the row vectors w_i being "
             "orthonormal, we obtain with ⟨σ_aiw_i, σ_biw_i⟩ = σ_aiσ_bi: E[Tr(D_AWᵀD_BW)] = E[Σ_i ⟨σ_aiw_i, σ_biw_i⟩] "
             "= Σ_i E[σ_aiσ_bi] (6.28)"),
    notes="value = relative error for random spectra in [0.1, 2] and Haar W. Does not hold: D_AWᵀ has columns σ_ai·(column i "
          "of Wᵀ), so Tr(D_AWᵀD_BW) = Σ_ij σ_aiσ_bj W_ji², equal to Σ_i σ_aiσ_bi for generic (distinct, non-flat) "
          "spectra only when W is a signed permutation matching the orders of the two spectra; for any orthogonal W when "
          "either spectrum is flat")

def _ev_aligned_corrected(budget, key):
    """(E[Tr(AᵀB) − (Σ_iσ_ai)(Σ_jσ_bj)/n])/(n²σ²) under (6.24) by Monte Carlo (n = 8, σ² = 1/n), with its sem."""
    m = 8192 if budget == "quick" else 2**17
    with jax.enable_x64(True):
        d = np.asarray(jax.jit(jax.vmap(_s_aligned_corrected))(jax.random.split(key, m)))
        tr = np.asarray(jax.jit(jax.vmap(lambda k: _s_aligned(k)[0]))(jax.random.split(key, m)))
    n2s2 = float(_ALIGNED_N)  # σ² = 1/n
    return Evaluation(value=np.array([d.mean() / n2s2]), sem=np.array([d.std(ddof=1) / math.sqrt(m) / n2s2]), n=m,
                      method="Monte Carlo (pairs of independent matrices, U_B by eq. (6.24))",
                      details={"E_trace_over_n2sigma2": float(tr.mean() / n2s2),
                               "E_trace_over_n2sigma2_sem": float(tr.std(ddof=1) / math.sqrt(m) / n2s2), "n": _ALIGNED_N})


det_claim("s6_2_5.aligned_trace_corrected", f"{SOURCE} §6.2.5 (eqs. 6.24-6.29, corrected)",
    "corrected: with U_AᵀU_B = V_AᵀV_B (6.24), E[Tr(AᵀB)] = E[Σ_ij σ_aiσ_bjW_ji²] = (E Σ_iσ_i)²/n (W = V_BᵀV_A Haar, "
    "independent of the spectra): E[Tr(AᵀB) − (Σ_iσ_ai)(Σ_jσ_bj)/n] = 0, relative to n²σ²",
    0.0, _ev_aligned_corrected, Tolerance(rtol=0.0, atol=0.01, origin=(
        "an exact identity (E W_ji² = 1/n for Haar W independent of the spectra): 1% of n²σ², the registry's "
        "exact-identity resolution")),
    reading="corrected",
    notes=f"n={_ALIGNED_N}, σ² = 1/n (8192 matrix pairs quick, 131072 full). E Tr(AᵀB)/(n²σ²) itself is in the details "
          "(≈ 0.70 at n = 8; (8/(3π))² ≈ 0.72 as n → ∞): the printed n²σ² misses by about 30%, not by an O(1/n) term")


@per_run
def _aligned_stats(budget: str, seed: int):
    m = 16384 if budget == "quick" else 32768  # quick: 2,048 left 5·sem (0.014) straddling trace_supremum's 0.01
    rows = []
    for i, n in enumerate((8, 32)):
        with jax.enable_x64(True):
            A = jax.random.normal(jax.random.fold_in(jax.random.key(seed), i), (m, 2, n, n), jnp.float64) / math.sqrt(n)
            s = np.asarray(jax.jit(jax.vmap(jax.vmap(lambda a: jnp.linalg.svd(a, compute_uv=False))))(A))
        prod = (s[:, 0] * s[:, 1]).sum(-1)  # Σ_i σ_ai σ_bi, both spectra descending
        var_i = np.concatenate([s[:, 0], s[:, 1]]).var(0, ddof=1).sum()  # Σ_i Var(σ_(i)), pooled
        rows.append({"n": n, "matrices": m, "E_trace_over_n2sigma2": float(prod.mean() / n),
                     "identity_residual": float((prod.mean() - (n - var_i)) / n),
                     "identity_residual_sem": float(prod.std(ddof=1) / math.sqrt(m) / n),
                     "sum_var_sigma_i_over_n2sigma2": float(var_i / n),
                     "E_sigma_over_sqrt_n_sigma": float(s[:, 0].mean())})  # σ² = 1/n: n²σ² = n, √nσ = 1
    return rows


def _seed_of(key):
    return int(jax.random.randint(key, (), 0, 2**31 - 1))


def _ev_aligned_trace(budget, key):
    rows = _aligned_stats(budget, _seed_of(key))
    return Evaluation(value=np.array([r["identity_residual"] for r in rows]),
                      sem=np.array([r["identity_residual_sem"] for r in rows]), n=rows[0]["matrices"],
                      method="Monte Carlo (pairs of independent matrices)", details={"instances": rows})


_MEAN_SIGMA_SIZES = {"quick": (8, 16, 32), "full": (8, 16, 32, 64)}


def _ev_mean_sigma(budget, key):
    """E[mean_i σ_i]/(√nσ) by Monte Carlo along n, extrapolated n → ∞ (the Marchenko–Pastur limit)."""
    m = 16384  # both budgets; quick's former 2,048 left 5·sem (0.0079) + |error| above the margin 0.0085
    ns, vals, sems = _MEAN_SIGMA_SIZES[budget], [], []
    for i, n in enumerate(ns):
        with jax.enable_x64(True):
            A = jax.random.normal(jax.random.fold_in(key, i), (m, n, n), jnp.float64) / math.sqrt(n)
            s_ = np.asarray(jax.jit(jax.vmap(lambda a: jnp.linalg.svd(a, compute_uv=False)))(A)).mean(-1)
        vals.append(s_.mean())
        sems.append(s_.std(ddof=1) / math.sqrt(m))
    return limit_evaluation(np.asarray(ns, float), np.asarray(vals), np.asarray(sems), label="E_sigma_over_sqrt_n_sigma",
                            method=f"Monte Carlo at n = {ns} ({m} matrices each)")


det_claim("s6_2_5.trace_supremum", f"{SOURCE} §6.2.5 (the best choice of U_A, U_B)",
     "no choice of U_A, U_B attains E[Tr(AᵀB)] = n²σ²: Tr(AᵀB) ≤ Σ_i σ_(i)^aσ_(i)^b (von Neumann) and "
     "E[Σ_i σ_(i)^aσ_(i)^b] = n²σ² − Σ_i Var(σ_(i)) exactly (independent, identically distributed A, B; σ_(i) the i-th "
     "largest singular value), a relative deficit O(1/n)",
     0.0, _ev_aligned_trace, Tolerance(rtol=0.0, atol=0.01, origin=(
         "an exact identity (E σ_aiσ_bi = (E σ_(i))² = E σ_(i)² − Var σ_(i), Σ_i E σ_(i)² = n²σ²): 1% of n²σ², the "
         "registry's exact-identity resolution")),
     reading="extension",
     notes="value = (E Σσ_aiσ_bi − (n²σ² − Σ_i Var σ_(i)))/(n²σ²) for n ∈ {8, 32} (16384 matrix pairs quick, 32768 "
           "full), σ² = 1/n; the deficit Σ_i Var(σ_(i))/(n²σ²) itself is in the details. This is why the statement's "
           "'there exist U_A, U_B' fails too: even the best choice falls short of n²σ² on average")
det_claim("s6_2_5.mean_singular_value_corrected", f"{SOURCE} §6.2.5 (eq. 6.29)",
     "corrected proof step: E[σ_i] (unordered) = (8/(3π))·√nσ ≈ 0.849·√nσ in the Marchenko–Pastur limit, not √nσ",
     8 / (3 * math.pi), _ev_mean_sigma, Tolerance(rtol=0.01, atol=0.0, origin=(
         "a limit with an exact constant 8/(3π): 1% of it is the resolution asked of the extrapolation (the printed "
         "step, √nσ, is 18% off)")),
     notes="value = the n → ∞ extrapolation of E[mean_i σ_i]/(√nσ) along n (finite-n values are observations)")

_ORIENT_N = 6
_ORIENT_FLAT = np.full(_ORIENT_N, 0.9)
_ORIENT_SPECTRUM_A = np.array([3.0, 1.0, 0.5, 0.2, 0.1, 0.05])
_ORIENT_SPECTRUM_B = np.array([2.0, 1.5, 0.4, 0.3, 0.1, 0.02])


def _s_orient(sa, sb):
    def s(key):
        k1, k2 = jax.random.split(key)
        A = G.random_spectrum_matrix(k1, jnp.asarray(sa))
        B = G.random_spectrum_matrix(k2, jnp.asarray(sb))
        t = jnp.trace(A.T @ B)
        return jnp.stack([t, t * t])
    return s


_s_orient_nonflat = _s_orient(_ORIENT_SPECTRUM_A, _ORIENT_SPECTRUM_B)
# ~1.0-1.2e6 draws decide the variances at their margins: ~20-22 CPU s measured on a clean clone (2026-11-26), just
# past the default 15 s at quick (stopped undecided at 5.2e5 draws)
_ORIENT_SECONDS = {"quick": 40.0, "full": 180.0}
mc_claim("s6_2_5.random_orientation_flat", f"{SOURCE} §6.2.5 (eqs. 6.30-6.34)",
    "prescribed spectra, Haar singular vectors: E[Tr(ÂᵀB̂)] = 0, Var = (1/n)Σσ̂_ai²σ̂_bi² — flat spectra",
    lambda: np.array([0.0, float(G.random_orientation_trace_var_printed(jnp.asarray(_ORIENT_FLAT), jnp.asarray(_ORIENT_FLAT)))]),
    _s_orient(_ORIENT_FLAT, _ORIENT_FLAT), chunk=1024, notes=f"n={_ORIENT_N}, σ̂_a = σ̂_b = 0.9 (flat): printed and corrected forms coincide",
    seconds=_ORIENT_SECONDS)
mc_claim("s6_2_5.random_orientation_printed", f"{SOURCE} §6.2.5 (eq. 6.34)",
    "prescribed spectra, Haar singular vectors: E[Tr(ÂᵀB̂)] = 0, Var = (1/n)Σσ̂_ai²σ̂_bi² — non-flat spectra",
    lambda: np.array([0.0, float(G.random_orientation_trace_var_printed(jnp.asarray(_ORIENT_SPECTRUM_A), jnp.asarray(_ORIENT_SPECTRUM_B)))]),
    _s_orient_nonflat, chunk=1024,
    exact=lambda: np.array([0.0, float(G.random_orientation_trace_var(jnp.asarray(_ORIENT_SPECTRUM_A), jnp.asarray(_ORIENT_SPECTRUM_B)))]),
    corrected_by="s6_2_5.random_orientation_corrected",
    notes=f"n={_ORIENT_N}, σ̂_a = {_ORIENT_SPECTRUM_A.tolist()}, σ̂_b = {_ORIENT_SPECTRUM_B.tolist()}. Does not hold: Tr = Σ_ij σ_aiσ_bj (W_U)_ji(W_V)_ji "
          "involves all pairs (i, j), not only i = j as in eq. (6.31); Var = (Σσ_ai²)(Σσ_bj²)/n² "
          "(s6_2_5.random_orientation_corrected). The print agrees when one spectrum is flat (in general exactly when "
          "σ_ai² and σ_bi² are uncorrelated over i)")
mc_claim("s6_2_5.random_orientation_corrected", f"{SOURCE} §6.2.5",
    "corrected: E[Tr(ÂᵀB̂)] = 0, Var = (Σσ̂_ai²)(Σσ̂_bj²)/n² for independent Haar U_A, V_A, U_B, V_B",
    lambda: np.array([0.0, float(G.random_orientation_trace_var(jnp.asarray(_ORIENT_SPECTRUM_A), jnp.asarray(_ORIENT_SPECTRUM_B)))]),
    _s_orient_nonflat, chunk=1024, notes=f"same non-flat spectra, n={_ORIENT_N}", seconds=_ORIENT_SECONDS)

# ==============================================================================================
# §6.3.1: uniform vectors on spheres (eqs. 6.35-6.38)
# ==============================================================================================

_SPHERE_N, _SPHERE_COS, _SPHERE_L1, _SPHERE_L2 = 5, 0.6, 1.5, 0.8


def _s_sphere(key):
    x, y = G.sphere_pair(key, _SPHERE_N, _SPHERE_COS, _SPHERE_L1, _SPHERE_L2)
    return {"mean": jnp.concatenate([x, y]), "sq": jnp.concatenate([x * x, y * y]),
            "xx": jnp.stack([x[0] * x[1], x[2] * x[4]]), "xy_same": x * y, "xy_diff": jnp.stack([x[0] * y[1], x[3] * y[2]])}


def _sphere_claim(id, source, statement, keys_pred, notes="", **kw):
    def sampler(key):
        d = _s_sphere(key)
        return jnp.concatenate([d[k] for k, _ in keys_pred])
    pred = np.concatenate([np.asarray(p, float) for _, p in keys_pred])
    return mc_claim(id, source, statement, pred, sampler, notes=notes, **kw)


_sphere_claim("s6_3_1.eq6_35", f"{SOURCE} eq. (6.35)",
              "x uniform on S_{l1}^{n−1}, y on S_{l2}^{n−1}: E[x_i] = E[y_i] = 0, E[x_i²] = l1²/n, E[y_i²] = l2²/n",
              [("mean", np.zeros(2 * _SPHERE_N)), ("sq", np.r_[np.full(_SPHERE_N, _SPHERE_L1**2 / _SPHERE_N), np.full(_SPHERE_N, _SPHERE_L2**2 / _SPHERE_N)])],
              notes=f"n={_SPHERE_N}, ⟨x,y⟩ = k l1 l2 with k={_SPHERE_COS}, l1={_SPHERE_L1}, l2={_SPHERE_L2}")
_sphere_claim("s6_3_1.eq6_36_printed", f"{SOURCE} eq. (6.36)",
              "x uniform on S_l^{n−1}: Cov[x_i, x_j] = −l²/(n(n−1)) for i ≠ j",
              [("xx", np.full(2, -_SPHERE_L1**2 / (_SPHERE_N * (_SPHERE_N - 1))))],
              notes="Does not hold: flipping the sign of x_i preserves the uniform law, so Cov[x_i, x_j] = 0. The "
                    "derivation assumes Σ_i x_i is constant (Var(Σx_i) = 0), but only ‖x‖ is; Var(Σx_i) = l². "
                    "Corrected: s6_3_1.eq6_36_corrected",
              exact=lambda: np.zeros(2), corrected_by="s6_3_1.eq6_36_corrected")
_sphere_claim("s6_3_1.eq6_36_corrected", f"{SOURCE} eq. (6.36)",
              "corrected: Cov[x_i, x_j] = 0 for i ≠ j (uniform on S_l^{n−1})", [("xx", np.zeros(2))])
_sphere_claim("s6_3_1.eq6_37_38", f"{SOURCE} eqs. (6.37)-(6.38)",
              "⟨x, y⟩ = k l1 l2: Cov[x_i, y_i] = k l1 l2/n and Cov[x_i, y_j] = 0 for i ≠ j",
              [("xy_same", np.full(_SPHERE_N, _SPHERE_COS * _SPHERE_L1 * _SPHERE_L2 / _SPHERE_N)), ("xy_diff", np.zeros(2))],
              notes=f"n={_SPHERE_N}, k={_SPHERE_COS}, l1={_SPHERE_L1}, l2={_SPHERE_L2}")

# ==============================================================================================
# §6.3.2: Var(xᵀCy) for Xavier C (eq. 6.48)
# ==============================================================================================

_XAVIER_C_N, _XAVIER_C_COS = 16, (0.0, 0.9)


def _s_xavier_bilinear(key):
    out = []
    for i, k in enumerate(_XAVIER_C_COS):
        kk = jax.random.fold_in(key, i)
        v, w = G.sphere_pair(jax.random.fold_in(kk, 0), _XAVIER_C_N, k)
        C = jax.random.normal(jax.random.fold_in(kk, 1), (_XAVIER_C_N, _XAVIER_C_N), jnp.float64) / math.sqrt(_XAVIER_C_N)
        out.append((v @ C @ w) ** 2)
    return jnp.stack(out)


mc_claim("s6_3_2.eq6_48_printed", f"{SOURCE} eqs. (6.45)-(6.48)",
    "v, w ∈ S_1^{n−1} with ⟨v, w⟩ = k, C_ij ~ N(0, 1/n): Var(vᵀCw) = k²/n + (n−1)/n² (angular information in the variance)",
    lambda: np.array([G.sphere_bilinear_var_printed(_XAVIER_C_N, k) for k in _XAVIER_C_COS]), _s_xavier_bilinear,
    exact=lambda: np.full(len(_XAVIER_C_COS), G.sphere_bilinear_var(_XAVIER_C_N)), corrected_by="s6_3_2.eq6_48_corrected",
    notes=f"n={_XAVIER_C_N}, k ∈ {_XAVIER_C_COS}; E[vᵀCw] = 0 so estimate = E[(vᵀCw)²]. Does not hold: given v, w, "
          "Var_C(vᵀCw) = (1/n)Σ_lm v_l²w_m² = ‖v‖²‖w‖²/n = 1/n for every k (eq. 6.45 confuses Σ Var(v_lw_l) with "
          "E[⟨v,w⟩]²). The v–w angles do not enter at all. For the mixtures of (6.42), Var_C(μ_XᵀCμ_Y) = "
          "‖μ_X‖²‖μ_Y‖²/n exactly. (6.42)'s printed '≈' drops the covariances between its terms and keeps "
          "Σ_ij λ_i²λ̃_j²/n (unit v_i, w_j): off by the factor (Σλ_i²)(Σλ̃_j²)/(‖μ_X‖²‖μ_Y‖²), −89% when μ_X and μ_Y are "
          "each three equal weights on a single vector (−67% if only one is), exact when the v_i are mutually "
          "orthonormal and the w_j are mutually orthonormal, without bound above as a mixture's vectors cancel. "
          "Corrected: s6_3_2.eq6_48_corrected")
mc_claim("s6_3_2.eq6_48_corrected", f"{SOURCE} eq. (6.48)",
    "corrected: Var_C(vᵀCw) = ‖v‖²‖w‖²/n = 1/n, independent of k = ⟨v, w⟩",
    np.full(len(_XAVIER_C_COS), G.sphere_bilinear_var(_XAVIER_C_N)), _s_xavier_bilinear, quick=2**20,
    notes=f"n={_XAVIER_C_N}, k ∈ {_XAVIER_C_COS}. The margin (1% of 1/n) needs about 2^20 draws (at 2^19 the detectable "
          "error is 6.7e-4 against the margin 6.25e-4), so the quick budget's first look is 2^20: its verdict no "
          "longer hangs on how many doubling rounds from 2^14 fit the CPU budget beside another process")

# ==============================================================================================
# §6.3.3: eq. (6.49)
# ==============================================================================================


def _ev_649(with_cos):
    def ev(budget, key):
        m = 4096 if budget == "quick" else 2**18
        lhs, rhs, slack = _eq649_instances(key, m, with_cos)
        return Evaluation(lhs=np.asarray(lhs), rhs=np.asarray(rhs), slack=np.asarray(slack),
                          details={"n": 8, "instances": m, "orthogonal_instances": m // 2})
    return ev


@functools.partial(jax.jit, static_argnums=(1, 2))
def _eq649_instances(key, m, with_cos):
        n = 8
        ks = jax.random.split(key, 4)
        Wq = jax.random.normal(ks[0], (m, n, n), jnp.float64) / math.sqrt(n)
        Wk = jax.random.normal(ks[1], (m, n, n), jnp.float64) / math.sqrt(n)
        x = jax.random.normal(ks[2], (m, n), jnp.float64)
        y = jax.random.normal(ks[3], (m, n), jnp.float64)
        # half the instances: y ⟂ x exactly (|cos| = 0), the sharpest counterexamples
        y = y.at[: m // 2].add(-(jnp.sum(y[: m // 2] * x[: m // 2], -1) / jnp.sum(x[: m // 2] ** 2, -1))[:, None] * x[: m // 2])
        lhs = jnp.abs(jnp.einsum("mi,mi->m", jnp.einsum("mij,mj->mi", Wq, x), jnp.einsum("mij,mj->mi", Wk, y)))
        op = lambda W: jax.vmap(lambda a: jnp.linalg.svd(a, compute_uv=False)[0])(W)
        nx, ny = jnp.linalg.norm(x, axis=-1), jnp.linalg.norm(y, axis=-1)
        rhs = op(Wq) * op(Wk) * nx * ny
        cos = jnp.sum(x * y, -1) / (nx * ny)
        if with_cos:
            rhs = rhs * jnp.abs(cos)
        slack = 1e-12 * op(Wq) * op(Wk) * nx * ny
        return lhs, rhs, slack


def _e649_counterexample() -> Evaluation:
    """Exact counterexample in NumPy: W_q = I₂, W_k = [[0, 1], [1, 0]], x = e₁, y = e₂ (x ⟂ y):
    |⟨W_qx, W_ky⟩| = |⟨e₁, e₁⟩| = 1 while ‖W_q‖‖W_k‖‖x‖‖y‖·|cos∠(x, y)| = 0."""
    Wq, Wk = np.eye(2), np.array([[0.0, 1.0], [1.0, 0.0]])
    x, y = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    lhs = abs((Wq @ x) @ (Wk @ y))
    cos = (x @ y) / (np.linalg.norm(x) * np.linalg.norm(y))
    rhs = np.linalg.norm(Wq, 2) * np.linalg.norm(Wk, 2) * np.linalg.norm(x) * np.linalg.norm(y) * abs(cos)
    return Evaluation(lhs=np.array([lhs]), rhs=np.array([rhs]), slack=1e-15,
                      method="exact counterexample W_q = I, W_k = swap, x = e₁, y = e₂ (NumPy)")


register(Claim(
    id="wertich.s6_3_3.eq6_49_printed", source=f"{SOURCE} §6.3.3, the Statement (its proof's eq. (6.49), ‖W_qᵀW_k‖ ≤ ‖W_q‖‖W_k‖, holds)",
    statement="|⟨W_qx, W_ky⟩| ≤ ‖W_q‖‖W_k‖‖x‖‖y‖·|cos∠(x, y)| for all x, y, W_q, W_k",
    predicted="rhs", evaluate=x64(_ev_649(True)), rule=Inequality(),
    witness=lambda budget, key: _e649_counterexample(),
    corrected_by="wertich.s6_3_3.eq6_49_corrected",
    notes="Xavier W_q, W_k (n=8) and Gaussian x, y, half of them with y ⟂ x. Does not hold: for x ⟂ y the rhs is 0 "
          "while ⟨W_qx, W_ky⟩ = xᵀW_qᵀW_ky ≠ 0; the proof bounds ‖W_qᵀW_k‖ but then multiplies by |⟨x, y⟩| instead of "
          "‖x‖‖y‖. Corrected (Cauchy–Schwarz): |⟨W_qx, W_ky⟩| ≤ ‖W_q‖‖W_k‖‖x‖‖y‖ (s6_3_3.eq6_49_corrected); the angle "
          "can be kept: with M = W_qᵀW_k and any scalar c, |⟨W_qx, W_ky⟩| = |c⟨x, y⟩ + xᵀ(M − cI)y| ≤ "
          "|c||⟨x, y⟩| + ‖M − cI‖‖x‖‖y‖ (the cosine counts as far as M is a multiple of I)"))
register(Claim(
    id="wertich.s6_3_3.eq6_49_corrected", source=f"{SOURCE} §6.3.3",
    statement="corrected: |⟨W_qx, W_ky⟩| ≤ ‖W_q‖‖W_k‖‖x‖‖y‖ (no cosine factor)",
    predicted="rhs", evaluate=x64(_ev_649(False)), rule=Inequality(),
    notes="same instances; the slack is 10⁻¹²·rhs for rounding"))

# ==============================================================================================
# §6.4: how normal is xᵀCy?
# ==============================================================================================

_NORMALITY_SIZES = (4, 16, 64)


def _s_normality(key):
    out = []
    for i, n in enumerate(_NORMALITY_SIZES):
        k = jax.random.split(jax.random.fold_in(key, i), 3)
        x = jax.random.normal(k[0], (n,), jnp.float64) / math.sqrt(n)  # Xavier vectors, ‖x‖ ≈ 1
        y = jax.random.normal(k[1], (n,), jnp.float64) / math.sqrt(n)
        # Cᵀx given x is N(0, ‖x‖² I) (C has i.i.d. N(0, 1) entries): drawn as ‖x‖·g, n normals instead of n²,
        # the same joint law of (x, Cᵀx, y) and hence of s = xᵀCy = (Cᵀx)·y
        u = jnp.linalg.norm(x) * jax.random.normal(k[2], (n,), jnp.float64)
        s = u @ y
        # Rao–Blackwellised even moments: given x and C, s ~ N(0, v) with v = ‖Cᵀx‖²/n (y ~ N(0, I/n) is the
        # premise), so E[s² | x, C] = v and E[s⁴ | x, C] = 3v² — the same means, a far smaller variance
        v = jnp.sum(u**2) / n
        out.append(jnp.stack([s, v, s**3, 3 * v * v]))
    return jnp.concatenate(out)


mc_claim("s6_4.moments", f"{SOURCE} §6.4",
    "s = xᵀCy (x, y ~ N(0, I/n), C_ij ~ N(0, 1), all independent) is not normal but approaches normal: E s = 0, E s² = 1, E s³ = 0 "
    "(skewness 0), E s⁴ = 3(1 + 2/n)² (excess kurtosis 12/n + 12/n² → 0)",
    np.concatenate([[0.0, 1.0, 0.0, G.bilinear_fourth_moment(n)[1]] for n in _NORMALITY_SIZES]), _s_normality,
    seconds={"quick": 40.0, "full": 180.0},  # ~4e6 draws decide E s⁴ at 1%: ~30 CPU s at the measured rate
    notes=f"n ∈ {_NORMALITY_SIZES}; 4 moments per n; Cᵀx is drawn as ‖x‖·g, g ~ N(0, I) (its law given x), and the even "
          "moments are Rao–Blackwellised over y (E[s²|x, C] = v, E[s⁴|x, C] = 3v², v = ‖Cᵀx‖²/n): the Gaussian laws of C "
          "and y are the premises, not the statement. The closed form is ours (the thesis argues only qualitatively); excess kurtosis "
          "at n = 4, 16, 64: " + ", ".join(f"{12 / n + 12 / n**2:.3g}" for n in _NORMALITY_SIZES))


def _s_chi2(key):
    k1, k2 = jax.random.split(key)
    return (jax.random.normal(k1, (), jnp.float64) * jax.random.normal(k2, (), jnp.float64) < 0).astype(jnp.float64)


mc_claim("s6_4.product_chi_squared", f"{SOURCE} §6.4",
    "the product x_iy_i of two independent normals is chi-squared distributed (so P(x_iy_i < 0) = 0)",
    0.0, _s_chi2, exact=lambda: 0.5, notes="Does not hold: the product is symmetric about 0 (P(x_iy_i < 0) = ½); it is a variance-gamma "
                        "(Bessel K₀) variable, chi-squared only for x_i = y_i")

# Readings (issue 33): the printed statement, the kind of error a refutation is, the intended or corrected claim.
_MP = ("the Marchenko-Pastur law states that if n grows large, the probability density function for the squared singular "
       "values (absolute eigenvalues) converges to: f(x) = 1/(2πσ²x)·√(4σ²x − x²) ∀x: 0 ≤ x ≤ 4σ²")
for _id, _kind, _printed, _intended in (
    ("s2_5.mp_density_printed", "wrong constant", "for a n × n matrices, " + _MP, ""),
    ("s2_5.mp_histogram_printed", "wrong constant",
     _MP + ". If also, σ = 1/√n, then the probability density function simplifies to: f(x) = n/(2πx)·√(4x/n − x²) "
     "∀x: 0 ≤ x ≤ 4/n", ""),
    ("s6_2_1.eq6_2_printed", "typo/notation",
     "Let (x; y) ∼ N((μ_X; μ_Y), (Σ_X Σ_XY; Σ_YX Σ_Y)) and A, B ∈ R^{n×n}, with C = AᵀB. Then it holds: "
     "E[⟨Ax, By⟩] = μ_XᵀCμ_Y + Tr(CΣ_XY) (6.2)", "s6_2_1.eq6_2_corrected"),
    ("s6_2_5.random_orientation_printed", "wrong statement",
     "If a model manipulates just the singular value spectrum so that D̂_A = diag{σ̂_a1, …, σ̂_an} and D̂_B = diag{σ̂_b1, "
     "…, σ̂_bn}, then for ÂᵀB̂ = (Û_AD̂_AV̂_Aᵀ)ᵀ(Û_BD̂_BV̂_Bᵀ) […] it holds that E[Tr(ÂᵀB̂)] = 0 and Var(Tr(ÂᵀB̂)) = "
     "(1/n)Σ_i σ̂_ai²σ̂_bi².", ""),
    ("s6_3_1.eq6_36_printed", "wrong statement",
     "2Σ_{1≤i<j≤n} Cov[x_i, x_j] = −Σ_i Var(x_i) = −Σ_i l_1²/n = −l_1² → Cov[x_i, x_j] = −l_1²/(n(n − 1)) (6.36)", ""),
    ("s6_3_2.eq6_48_printed", "wrong statement",
     "∀l = m: Σ_l Var(v_il w_jl) = E[v_i w_j]² = k_ij² ∀l ≠ m: Var(v_il w_jm) = (1/n)(1/n) = 1/n² (6.45) […] "
     "k_ij²/n + (1/n)·n(n − 1)/n² = k_ij²/n + (n − 1)/n² (6.47) Var(E[xᵀCy]) = Σ_ij λ_i²λ̃_j² Var(v_iᵀCw_j) ≈ "
     "Σ_ij λ_i²λ̃_j²(k_ij²/n + (n − 1)/n²) (6.48)", ""),
    ("s6_3_3.eq6_49_printed", "wrong statement",
     "Statement: For x, y ∈ R^n and W_q, W_k ∈ R^{n×n}: |⟨W_qx, W_ky⟩| ≤ ‖W_q‖_∞·‖W_k‖_∞·‖x‖₂·‖y‖₂·|cos(∠(x, y))|", ""),
    ("s6_4.product_chi_squared", "wrong statement",
     "The product x_iy_i is chi-squared distributed, alike C_ij = Σ_k A_ikB_ki.", ""),
):
    annotate(_id, error_kind=_kind, printed=_printed, **({"intended_by": _intended, "corrected_by": ""} if _intended else {}))
annotate("s6_2_1.eq6_2_corrected", reading="intended")
for _id in ("s2_5.mp_moments_corrected", "s2_5.mp_histogram_corrected", "s6_2_5.random_orientation_corrected",
            "s6_2_5.mean_singular_value_corrected", "s6_3_1.eq6_36_corrected", "s6_3_2.eq6_48_corrected",
            "s6_3_3.eq6_49_corrected"):
    annotate(_id, reading="corrected")
