"""Wertich chapter 4: joint Gaussians under linear maps (§4.2.1-4.2.2) and the 2×2 block eigenvalues (§4.3.2)."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from geomjax.theory import gaussian as G
from geomjax.claims import Evaluation, Tolerance
from geomjax.sources.wertich._shared import (FLOAT64_ROUNDING, SOURCE, annotate, blocks, det_claim, mc_claim, outer_flat,
                                            rng, spd, unblocks, x64)

# ==============================================================================================
# §4.2.1-4.2.2: joint Gaussians under linear maps
# ==============================================================================================

_draws = rng(421)
_JOINT_T, _JOINT_D = 2, 2
_JOINT_MU = _draws.normal(size=(_JOINT_T, _JOINT_D))
_JOINT_COV = spd(_draws, _JOINT_T * _JOINT_D)  # flat (T·d, T·d), token-major
_JOINT_L = np.array([[1.5, 0.4], [-0.3, 0.8]])




def _joint_predicted():
    m, c = G.linear_map_joint(jnp.asarray(_JOINT_L), jnp.asarray(_JOINT_MU), jnp.asarray(blocks(_JOINT_COV, _JOINT_T, _JOINT_D)))
    return jnp.concatenate([m.reshape(-1), unblocks(c).reshape(-1)])


_JOINT_PREDICTED = x64(_joint_predicted)()


def _s_linear_map_joint(key):
    z = G.joint_gaussian(key, jnp.asarray(_JOINT_MU.reshape(-1)), jnp.asarray(_JOINT_COV)).reshape(_JOINT_T, _JOINT_D)
    y = (z @ jnp.asarray(_JOINT_L).T).reshape(-1)
    return jnp.concatenate([y, outer_flat(y - _JOINT_PREDICTED[: _JOINT_T * _JOINT_D])])


mc_claim("s4_2_1.linear_map_joint", f"{SOURCE} eq. (4.2)",
    "If (X_1..X_n) is jointly Gaussian and L is applied to every token, (LX_1..LX_n) ~ N((Lμ_i)_i, (LΣ_ijLᵀ)_ij)",
    _JOINT_PREDICTED, _s_linear_map_joint,
    notes=f"T={_JOINT_T} tokens, d={_JOINT_D}; estimate = (E[LX], E[(LX−Lμ)(LX−Lμ)ᵀ]) flattened, 4 + 16 values")

_draws = rng(422)
_ENTROPY_MU, _ENTROPY_COV = _draws.normal(size=3), spd(_draws, 3)
_ENTROPY_L = np.array([[2.0, 0.3, 0.0], [0.1, 1.2, -0.4], [0.5, 0.0, 1.5]])
_ENTROPY_LCOV = _ENTROPY_L @ _ENTROPY_COV @ _ENTROPY_L.T


def _s_entropy(key):
    x = G.joint_gaussian(key, jnp.asarray(_ENTROPY_MU), jnp.asarray(_ENTROPY_COV))
    return -G.gaussian_logpdf(jnp.asarray(_ENTROPY_L) @ x, jnp.asarray(_ENTROPY_L @ _ENTROPY_MU), jnp.asarray(_ENTROPY_LCOV))


mc_claim("s4_2_2.entropy_shift", f"{SOURCE} §4.2.2",
    "H(LX) = H(X) + log|det L| for X ~ N(μ, Σ) and invertible L (nats)",
    lambda: G.gaussian_entropy(jnp.asarray(_ENTROPY_COV)) + np.log(abs(np.linalg.det(_ENTROPY_L))), _s_entropy,
    notes=f"d=3, |det L| = {abs(np.linalg.det(_ENTROPY_L)):.4g}; estimate = E[−log p_LX(LX)] (Monte Carlo entropy of LX)")

_draws = rng(4222)
_MI_COV = spd(_draws, 4) + 0.6 * np.array([[0, 0, 1, .5], [0, 0, .2, 1], [1, .2, 0, 0], [.5, 1, 0, 0]])
_MI_COV = (_MI_COV + _MI_COV.T) / 2 + 0.5 * np.eye(4)
_MI_L = np.array([[1.7, -0.6], [0.4, 0.9]])
_MI_BLOCK_L = np.kron(np.eye(2), _MI_L)
_MI_LCOV = _MI_BLOCK_L @ _MI_COV @ _MI_BLOCK_L.T


def _s_mi(key):
    x = G.joint_gaussian(key, jnp.zeros(4), jnp.asarray(_MI_COV))
    y = jnp.asarray(_MI_BLOCK_L) @ x
    c = jnp.asarray(_MI_LCOV)
    return (G.gaussian_logpdf(y, jnp.zeros(4), c) - G.gaussian_logpdf(y[:2], jnp.zeros(2), c[:2, :2])
            - G.gaussian_logpdf(y[2:], jnp.zeros(2), c[2:, 2:]))


mc_claim("s4_2_2.mutual_information_invariance", f"{SOURCE} §4.2.2",
    "I(LX_i; LX_j) = I(X_i; X_j) = ½ log(|Σ_ii||Σ_jj|/|Σ|) for jointly Gaussian X_i, X_j and invertible L",
    lambda: G.gaussian_mutual_information(jnp.asarray(_MI_COV), 2), _s_mi,
    notes="d=2 per token; estimate = E[log p(LX_i, LX_j) − log p(LX_i) − log p(LX_j)] under the transformed law")

_draws = rng(4223)
_KL_MU0, _KL_COV0, _KL_MU1, _KL_COV1 = _draws.normal(size=3), spd(_draws, 3), _draws.normal(size=3), spd(_draws, 3, 1.5)


def _s_kl(key):
    L = jnp.asarray(_ENTROPY_L)
    y = L @ G.joint_gaussian(key, jnp.asarray(_KL_MU0), jnp.asarray(_KL_COV0))
    return (G.gaussian_logpdf(y, L @ _KL_MU0, jnp.asarray(_ENTROPY_L @ _KL_COV0 @ _ENTROPY_L.T))
            - G.gaussian_logpdf(y, L @ _KL_MU1, jnp.asarray(_ENTROPY_L @ _KL_COV1 @ _ENTROPY_L.T)))


mc_claim("s4_2_2.kl_invariance", f"{SOURCE} §4.2.2",
    "KL(N(Lμ0, LΣ0Lᵀ) ‖ N(Lμ1, LΣ1Lᵀ)) = KL(N(μ0, Σ0) ‖ N(μ1, Σ1)) for invertible L",
    lambda: G.gaussian_kl(jnp.asarray(_KL_MU0), jnp.asarray(_KL_COV0), jnp.asarray(_KL_MU1), jnp.asarray(_KL_COV1)), _s_kl,
    notes="d=3; estimate = E_{x~N0}[log p_LN0(Lx) − log p_LN1(Lx)]")

# ==============================================================================================
# §4.3.2: eigenvalues of the 2×2 block
# ==============================================================================================


def _ev_block_exact(budget, key):
    r = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**31 - 1)))
    m = 200 if budget == "quick" else 20000
    l1, l2, a = r.uniform(0.05, 1, m), r.uniform(0.05, 1, m), r.uniform(-1, 1, m)
    hi, lo = G.block2_eigenvalues(l1, l2, a)
    ref = np.linalg.eigvalsh(np.stack([np.stack([l1**2, l1 * l2 * a], -1), np.stack([l1 * l2 * a, l2**2], -1)], -2))
    return Evaluation(value=np.stack([np.asarray(hi) - ref[:, 1], np.asarray(lo) - ref[:, 0]]), details={"instances": m})


det_claim("s4_3_2.block_eigenvalues", f"{SOURCE} §4.3.2",
     "eigenvalues of [[λ1², λ1λ2α],[λ1λ2α, λ2²]] = (λ1²+λ2² ± √((λ1²+λ2²)² − 4λ1²λ2²(1−α²)))/2",
     0.0, _ev_block_exact, Tolerance(rtol=0.0, atol=1e-12, origin=FLOAT64_ROUNDING),
     notes="value = formula − numpy.linalg.eigvalsh, random λ1, λ2 ∈ (0.05, 1), α ∈ (−1, 1), float64")

_LAM_APPROX = np.array([[0.3, 0.1], [0.5, 0.5], [0.8, 0.2], [0.9, 0.9]])  # (λ, α) with λ1 = λ2 = λ


def _ev_block_approx(budget, key):
    lam, a = _LAM_APPROX[:, 0], _LAM_APPROX[:, 1]
    m = np.stack([np.stack([lam**2, lam**2 * a], -1), np.stack([lam**2 * a, lam**2], -1)], -2)
    ev = np.linalg.eigvalsh(m)[:, ::-1]
    return Evaluation(value=ev, details={"lambda_alpha": _LAM_APPROX.tolist(), "eigenvalues": ev.tolist()})


det_claim("s4_3_2.approx_printed", f"{SOURCE} §4.3.2",
     "if λ1 ≈ λ2 = λ the eigenvalues are ≈ λ(1 ± α12) (as printed; checked at λ1 = λ2 exactly)",
     np.stack([_LAM_APPROX[:, 0] * (1 + _LAM_APPROX[:, 1]), _LAM_APPROX[:, 0] * (1 - _LAM_APPROX[:, 1])], -1),
     _ev_block_approx, Tolerance(rtol=1e-9, atol=0.0, origin=FLOAT64_ROUNDING + " (eigvalsh of a 2×2 matrix)"),
     notes="does not hold: the entries are λ², so the eigenvalues are λ²(1 ± α) (see s4_3_2.approx_corrected)",
     witness=lambda budget, key: Evaluation(
         value=np.stack([(_LAM_APPROX[:, 0] ** 2) * (1 + np.abs(_LAM_APPROX[:, 1])),
                         (_LAM_APPROX[:, 0] ** 2) * (1 - np.abs(_LAM_APPROX[:, 1]))], -1),
         method="closed form: trace ± off-diagonal of [[λ², λ²α], [λ²α, λ²]] (exact)"),
     corrected_by="s4_3_2.approx_corrected")
det_claim("s4_3_2.approx_corrected", f"{SOURCE} §4.3.2",
     "corrected: if λ1 = λ2 = λ the eigenvalues are exactly λ²(1 ± α12)",
     np.stack([_LAM_APPROX[:, 0] ** 2 * (1 + _LAM_APPROX[:, 1]), _LAM_APPROX[:, 0] ** 2 * (1 - _LAM_APPROX[:, 1])], -1),
     _ev_block_approx, Tolerance(rtol=1e-9, atol=0.0, origin=FLOAT64_ROUNDING + " (eigvalsh of a 2×2 matrix)"))

# Readings (issue 33): the printed statement, the kind of error a refutation is, the intended statement's claim.
annotate("s4_3_2.approx_printed", error_kind="typo/notation", intended_by="s4_3_2.approx_corrected", corrected_by="",
         printed=("The eigenvalues of the submatrix [λ_1², λ_1λ_2α_12; λ_1λ_2α_12, λ_2²] are given by […] This form may "
                  "appear complex, but if λ_1 ≈ λ_2 = λ, then λ_{1,2} ≈ λ(1 ± α_12)"))
annotate("s4_3_2.approx_corrected", reading="intended")
