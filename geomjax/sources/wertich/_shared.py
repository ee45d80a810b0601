"""What every Wertich chapter module shares: the claim constructors, float64 evaluation and small
matrix helpers (the source prefix, default sample counts, SPD draws, covariance blocks)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from geomjax import claims as registry
from geomjax.claims import Claim, Evaluation, exact_witness, register

__all__ = ["annotate", "SOURCE", "QUICK_SAMPLES", "FULL_SAMPLES", "FLOAT64_ROUNDING", "x64", "mc_claim", "det_claim", "rng", "spd",
           "outer_flat", "blocks", "unblocks"]

SOURCE = "Wertich"
"""The prefix of every claim's ``source``."""
QUICK_SAMPLES, FULL_SAMPLES = 2**14, 2**20
"""Default Monte Carlo sample counts of the quick and full budgets."""


def x64(fn):
    """Run a closed form / evaluator with JAX x64 enabled and return NumPy float64."""

    @functools.wraps(fn)
    def wrapped(*a, **k):
        with jax.enable_x64(True):
            out = fn(*a, **k)
            return jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), out) if not isinstance(out, Evaluation) else out

    return wrapped


def mc_claim(id, source, statement, predicted, sampler, *, quick=QUICK_SAMPLES, full=FULL_SAMPLES, notes="", chunk=4096,
             exact=None, corrected_by="", witness=None, seconds=None, **meta):
    """Register a Monte Carlo claim (margin: the registry's exact-identity default, 1% of the scale).

    ``meta``: the claim's reading, scope, error_kind, printed and intended_by (:class:`Claim`; an intended_by id
    is given without the "wertich." prefix).

    ``seconds``: the claim's budget in CPU seconds per budget name (:class:`Claim`; default the registry's).

    ``exact``: a closed form ``() -> value`` of the sampled quantity's TRUE mean (the corrected statement,
    derived in :mod:`geomjax.theory.gaussian` and evaluated in float64) — the second witness of a printed form
    that does not hold; ``witness``: any other second witness ``(budget, key) -> Evaluation``.
    """
    # Closed forms are evaluated when the claim is checked (registry: ``predicted(budget)``), not at
    # import: importing the module (every ``geomjax verify``) must not compile dozens of programs.
    if callable(predicted):
        closed_form = x64(predicted)
        pred = lambda budget: closed_form()  # noqa: E731
    else:
        pred = predicted
    if exact is not None:
        exact_fn = x64(exact)
        witness = exact_witness(lambda budget: exact_fn(), "closed form of the corrected statement (float64)")
    return register(Claim(id=f"wertich.{id}", source=source, statement=statement, predicted=pred,
                          sampler=sampler, n_samples={"quick": quick, "full": full}, notes=notes, chunk=chunk, seconds=seconds,
                          witness=witness, corrected_by=f"wertich.{corrected_by}" if corrected_by else "", **_meta(meta)))


def _meta(meta: dict) -> dict:
    """The Claim fields of ``meta`` with an intended_by id prefixed by "wertich."."""
    return {**meta, **({"intended_by": f"wertich.{meta['intended_by']}"} if meta.get("intended_by") else {})}


FLOAT64_ROUNDING = "float64 rounding of an exact evaluation"


def det_claim(id, source, statement, predicted, evaluate, rule, notes="", witness=None, corrected_by="", **meta):
    """Register a deterministic claim: ``evaluate`` (and ``witness``) run with JAX x64 enabled; ``meta`` as in
    :func:`mc_claim`."""
    return register(Claim(id=f"wertich.{id}", source=source, statement=statement, predicted=predicted,
                          evaluate=x64(evaluate), rule=rule, notes=notes,
                          witness=x64(witness) if witness is not None else None,
                          corrected_by=f"wertich.{corrected_by}" if corrected_by else "", **_meta(meta)))


def annotate(id, **fields):
    """:func:`geomjax.claims.registry.annotate` of ``wertich.<id>`` (an intended_by or corrected_by id given without the
    "wertich." prefix)."""
    fields = _meta(fields)
    if fields.get("corrected_by"):
        fields["corrected_by"] = f"wertich.{fields['corrected_by']}"
    return registry.annotate(f"wertich.{id}", **fields)


def rng(seed):
    """The NumPy generator of a claim's fixed parameters (one seed per section)."""
    return np.random.default_rng(seed)


def spd(gen, d, scale=1.0):
    """A random symmetric positive definite (d, d) matrix from the generator ``gen``."""
    a = gen.normal(size=(d, d))
    return scale * (a @ a.T / d + 0.3 * np.eye(d))


def outer_flat(v):
    """vvᵀ flattened: the sampled second moments of a vector."""
    return jnp.outer(v, v).reshape(-1)


def blocks(cov, T, d):
    """A flat token-major (T·d, T·d) covariance as (T, T, d, d) blocks Σ_ij."""
    return cov.reshape(T, d, T, d).transpose(0, 2, 1, 3)


def unblocks(b):
    """Inverse of :func:`blocks`: (T, T, d, d) blocks to the flat (T·d, T·d) covariance."""
    T, _, d, _ = b.shape
    return b.transpose(0, 2, 1, 3).reshape(T * d, T * d)
