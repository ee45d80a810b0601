"""The docstring examples of the public API run: every module in ``gj.__all__`` is doctested, and every
function or class re-exported at the top level carries at least one example."""

from __future__ import annotations

import doctest
import inspect
import types

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _public_objects():
    for name in gj.__all__:
        obj = getattr(gj, name)
        yield name, obj


def test_every_top_level_function_and_class_has_an_example():
    missing = [n for n, o in _public_objects() if not isinstance(o, types.ModuleType)
               and ">>>" not in (inspect.getdoc(o) or "")]
    assert not missing, f"no docstring example: {missing}"


@pytest.mark.slow
def test_docstring_examples_of_every_public_module_run():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=_FLAGS)
    modules = {}
    for _, obj in _public_objects():
        mod = obj if isinstance(obj, types.ModuleType) else inspect.getmodule(obj)
        modules[mod.__name__] = mod
        for member in getattr(mod, "__all__", ()):  # a package's API lives in its submodules (claims.claim, ...)
            sub = inspect.getmodule(getattr(mod, member, None))
            if sub is not None and sub.__name__.startswith("geomjax."):
                modules.setdefault(sub.__name__, sub)
    attempted = 0
    for name in sorted(modules):
        for test in finder.find(modules[name], name):
            attempted += runner.run(test).attempted
    failed = runner.summarize(verbose=False).failed
    assert failed == 0, "docstring examples failed (doctest output above)"
    assert "geomjax.claims.claim" in modules and attempted >= 25  # decompose*, Estimate, load, ClaimResult, ...


# ----------------------------------------------------------------------------------------------
# The dtype rule over every public geometry metric and spectral function: float64 NumPy arrays and
# Python lists are accepted and computed in float64, with the same value; references are NumPy.
# ----------------------------------------------------------------------------------------------

_rng = np.random.default_rng(7)
_P = _rng.normal(size=(6, 4))
_P -= _P.mean(0)
_M = _rng.normal(size=(9, 4))
_LABELS = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
_S = _M.T @ _M


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _np_dct_gram(P):
    T = P.shape[0]
    t = np.arange(T)
    D = np.sqrt(2 / T) * np.cos(np.pi * (t[None, :] + 0.5) * t[:, None] / T)
    D[0] /= np.sqrt(2)
    return D @ (_unit(P) @ _unit(P).T) @ D.T


CASES = {  # name: (call with the inputs, the inputs, NumPy reference)
    "geometry.normalize_rows": (lambda X: gj.geometry.normalize_rows(X), (_M,), lambda X: _unit(X)),
    "geometry.normalized_gram": (lambda X: gj.geometry.normalized_gram(X), (_M,), lambda X: _unit(X) @ _unit(X).T),
    "geometry.incoherence_stats": (lambda p, c: gj.geometry.incoherence_stats(p, c)[0], (_P, _M),
                                   lambda p, c: np.abs(_unit(p) @ _unit(c).T).max()),
    "geometry.cluster_compactness": (lambda X: gj.geometry.cluster_compactness(X, _LABELS), (_M,), None),
    "geometry.cluster_similarity": (lambda X: gj.geometry.cluster_similarity(X, _LABELS)[0], (_M,), None),
    "geometry.pca_projections": (lambda P, X: gj.geometry.pca_projections(P, [X]).others[0], (_P, _M), None),
    "spectral.singular_values": (lambda X: gj.spectral.singular_values(X), (_M,),
                                 lambda X: np.linalg.svd(X, compute_uv=False)),
    "spectral.singular_values_from_second_moment": (lambda S: gj.spectral.singular_values_from_second_moment(S), (_S,),
                                                    lambda S: np.sqrt(np.sort(np.linalg.eigvalsh(S))[::-1])),
    "spectral.stable_rank": (lambda X: gj.spectral.stable_rank(X), (_M,),
                             lambda X: (np.linalg.svd(X, compute_uv=False) ** 2).sum() / np.linalg.norm(X, 2) ** 2),
    "spectral.explained_ratio": (lambda s: gj.spectral.explained_ratio(s, 2), (np.array([3.0, 2.0, 1.0, 0.5]),),
                                 lambda s: s[:2].sum() / s.sum()),
    "spectral.relative_norm": (lambda P, M: gj.spectral.relative_norm(P, M), (_P, np.vstack([_M, _M[:3]])),
                               lambda P, M: np.linalg.norm(np.tile(P, (2, 1)), 2) / np.linalg.norm(M - M.mean(0), 2)),
    "spectral.dct_gram": (lambda P: gj.spectral.dct_gram(P), (_P,), _np_dct_gram),
    "spectral.low_frequency_energy": (lambda F: gj.spectral.low_frequency_energy(F, 2), (_np_dct_gram(_P),),
                                      lambda F: (F[:2, :2] ** 2).sum() / (F**2).sum()),
}


def _leaf(x):
    return np.asarray(getattr(x, "projections", x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_and_list_inputs_of_geometry_and_spectral(name):
    fn, args, ref = CASES[name]
    out64 = fn(*args)
    out_list = fn(*(a.tolist() for a in args))
    out32 = fn(*(a.astype(np.float32) for a in args))
    assert jnp.asarray(out64).dtype == jnp.float64 and jnp.asarray(out_list).dtype == jnp.float64, name
    assert jnp.asarray(out32).dtype == jnp.float32, name
    np.testing.assert_array_equal(_leaf(out64), _leaf(out_list))
    np.testing.assert_allclose(_leaf(out32), _leaf(out64), rtol=1e-4, atol=1e-5)
    if ref is not None:
        np.testing.assert_allclose(_leaf(out64), ref(*args), rtol=1e-10, atol=1e-12)
