"""Shapes: the jaxtyping annotations of the public array functions, checked at test time.

pyproject's pytest ``addopts`` turns on jaxtyping's import hook with beartype for the modules in
:data:`CHECKED_MODULES` (``--jaxtyping-packages=...,geomjax.typing.typechecker``): during the whole test run
every call of one of their functions checks its arguments and result against the annotations
(shapes shared across arguments included). Here: the hook is on for exactly those modules; every
public function of theirs that takes or returns arrays is annotated; a sample of annotations,
checked explicitly, agree with valid inputs and reject a wrong shape.

Tests that pass a deliberately wrong shape to test geomjax's own error message (what a caller who
runs without the checker gets) run that call under :func:`unchecked_shapes`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import typing

import jaxtyping
import numpy as np
import pytest
from jaxtyping import TypeCheckError, jaxtyped

from geomjax import attention as att
from geomjax import decomposition as dec
from geomjax import fourier as fo
from geomjax import geometry as geo
from geomjax import kernel_factorization as kf
from geomjax import localization as loc
from geomjax import smoothness as sm
from geomjax import spectral as sp
from geomjax.typing import typechecker

R = np.random.default_rng(0)

CHECKED_MODULES = (
    "geomjax.decomposition",
    "geomjax.geometry",
    "geomjax.spectral",
    "geomjax.smoothness",
    "geomjax.gaussian",
    "geomjax.localization",
    "geomjax.kernel_factorization",
    "geomjax.montecarlo",
    "geomjax.positional",
    "geomjax.attention",
    "geomjax.fourier",
    "geomjax.attention_probe",
    "geomjax.data.sampling",
    "geomjax.extraction",
    "geomjax.lens",
)
"""The modules pyproject's ``--jaxtyping-packages`` instruments (every theory module, the attention probe,
sampling, extraction and the lens)."""

NO_ARRAYS = {
    "geomjax.decomposition.stream_merge": "StreamState -> StreamState (annotated dataclasses)",
    "geomjax.geometry.mean_abs_cos_isotropic": "d -> float",
    "geomjax.smoothness.corrected_constant": "(T, k, m) -> float",
    "geomjax.gaussian.xavier_variance": "(n_in, n_out) -> float",
    "geomjax.gaussian.mp_edges": "(n, m, sigma2) -> (float, float)",
    "geomjax.gaussian.wishart_moments": "(n, m, sigma2) -> (float, float)",
    "geomjax.gaussian.sigma1_sq_tw": "(n, sigma2) -> float",
    "geomjax.gaussian.taylor_noise_var_printed": "(n, l) -> float",
    "geomjax.gaussian.bilinear_fourth_moment": "n -> (float, float)",
    "geomjax.localization.find_qk_heads": "parameter tree -> names of its W_q/W_k entries",
    "geomjax.localization.locater_loss": "loss function -> loss function",
    "geomjax.localization.add_locater_gradient": "(kappa1, kappa2) -> optax transformation",
    "geomjax.kernel_factorization.n_noise_cross_terms": "(n1, n2) -> int",
    "geomjax.montecarlo.merge": "(Estimate, Estimate) -> Estimate",
    "geomjax.montecarlo.merge_all": "Estimates -> Estimate",
    "geomjax.data.sampling.window_capacity": "token documents -> dict of counts",
    "geomjax.extraction.hidden_state_forward": "model -> forward function",
    "geomjax.extraction.mixed_precision": "forward function -> forward function",
    "geomjax.lens.load": "name -> Model",
    "geomjax.fourier.fourier_basis_names": "p -> the basis rows' names",
    "geomjax.attention_probe.describe_model": "model -> AttentionModel (its sizes and conventions)",
}
"""Public functions of :data:`CHECKED_MODULES` that neither take nor return arrays, and why."""


@contextlib.contextmanager
def unchecked_shapes():
    """Switch jaxtyping's runtime check off for a block (or, as a decorator, for a test) that passes a
    deliberately wrong shape in order to test geomjax's own GeomjaxError message. jaxtyping reads the
    switch at every call; programs traced under it are not checked when they are called again."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


def f32(*shape):
    return R.normal(size=shape).astype(np.float32)


P7 = f32(7, 3)
G7 = (P7 @ P7.T).astype(np.float32)
G7c = (G7 - G7.mean(0) - G7.mean(1)[:, None] + G7.mean()).astype(np.float32)

# (function, valid args, args with one wrong shape)
CASES = [
    (dec.decompose, (f32(4, 5, 3),), (f32(4, 5),)),
    (geo.normalized_gram, (f32(5, 3),), (f32(5),)),
    (geo.incoherence, (f32(5, 3), f32(4, 3)), (f32(5, 3), f32(4, 3, 1))),
    (sp.singular_values, (f32(6, 4),), (f32(6),)),
    (sp.stable_rank, (f32(6, 4),), (f32(6, 4, 2),)),
    (sp.dct_gram, (f32(6, 3),), (f32(6),)),
    (sm.reflected_gram, (G7,), (f32(7),)),
    (sm.double_center, (G7,), (f32(7),)),
    (att.causal_softmax, (f32(2, 5, 5),), (f32(5),)),
    (att.w_matrix, (f32(6, 3), f32(6, 3)), (f32(6, 3), f32(6, 2))),
    (kf.log_kernel, (f32(4, 4), f32(4) / 4, f32(4) / 4), (f32(4, 4), f32(4, 1), f32(4))),
    (loc.softmax_input, (f32(5, 3), f32(3, 3), 1.0), (f32(5, 3), f32(3, 2), 1.0)),
    (fo.fourier_coefficients, (f32(7, 3), 7), (f32(7), 7)),
]


def _checked(fn):
    """The function body (inside float64_aware and jit) under jaxtyping + beartype."""
    return jaxtyped(typechecker=typechecker)(inspect.unwrap(fn))


@pytest.mark.parametrize("fn,good,bad", CASES, ids=[f"{c[0].__module__}.{c[0].__name__}" for c in CASES])
def test_annotations_hold_and_reject_wrong_shapes(fn, good, bad):
    checked = _checked(fn)
    checked(*good)  # arguments and the returned shape agree with the annotation
    with pytest.raises(TypeCheckError):
        checked(*bad)


def test_every_theory_function_in_cases_is_annotated():
    for fn, _, _ in CASES:
        hints = inspect.get_annotations(inspect.unwrap(fn), eval_str=True)
        assert "return" in hints and any("[" in str(h) for h in hints.values()), fn


def _public_functions():
    for name in CHECKED_MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            fn = getattr(module, attr)
            if inspect.isfunction(inspect.unwrap(fn)) and inspect.unwrap(fn).__module__ == name:
                yield f"{name}.{attr}", inspect.unwrap(fn)


def _has_array_type(hint) -> bool:
    if isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray):
        return True
    if hasattr(hint, "leaftype"):  # jaxtyping.PyTree[leaf type]
        return _has_array_type(hint.leaftype)
    return any(_has_array_type(a) for a in typing.get_args(hint))


def test_every_public_array_function_is_annotated():
    """Every public function of the checked modules has every parameter and its result annotated,
    with at least one jaxtyping array type, unless it is listed in NO_ARRAYS (and then has none)."""
    missing, unlisted, stale = [], [], []
    names = set()
    for qualname, fn in _public_functions():
        names.add(qualname)
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters.values()
        params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        arrays = any(_has_array_type(h) for h in hints.values())
        if qualname in NO_ARRAYS:
            if arrays:
                stale.append(qualname)
            continue
        gaps = [p.name for p in params if p.name not in hints] + ([] if "return" in hints else ["return"])
        if gaps:
            missing.append(f"{qualname}: {gaps}")
        elif not arrays:
            unlisted.append(qualname)
    assert not missing, f"parameters or results without annotations: {missing}"
    assert not unlisted, f"no jaxtyping array annotation (annotate, or list in NO_ARRAYS with why): {unlisted}"
    assert not stale, f"listed in NO_ARRAYS but annotated with array types: {stale}"
    assert set(NO_ARRAYS) <= names, f"NO_ARRAYS names functions that are not public: {set(NO_ARRAYS) - names}"


def test_hook_checks_the_modules_during_the_test_run(pytestconfig):
    """pyproject's addopts turn the hook on for CHECKED_MODULES: a public call with a wrong shape
    raises jaxtyping's TypeCheckError (before geomjax's own validation), except under unchecked_shapes."""
    option = pytestconfig.getoption("--jaxtyping-packages")
    if not option:
        pytest.skip("run without jaxtyping's hook (pyproject's addopts overridden)")
    *packages, checker = option.split(",")
    assert checker == "geomjax.typing.typechecker"
    assert sorted(packages) == sorted(CHECKED_MODULES)
    with pytest.raises(TypeCheckError):
        geo.normalized_gram(f32(5))
    with unchecked_shapes(), pytest.raises(ValueError, match="rank-2"):
        geo.normalized_gram(f32(5))
