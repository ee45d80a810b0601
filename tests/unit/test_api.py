"""The public namespace and the readable reprs of result types (issue: a library researchers reach for)."""

from __future__ import annotations

import numpy as np
import pytest

import geomjax as gj
from geomjax.base._repr import summarize


def test_namespace_lists_public_api_once():
    names = dir(gj)
    assert names == sorted(set(names)), "dir(geomjax) lists a name twice"
    for leak in ("importlib", "Any", "annotations", "_importlib"):
        assert leak not in names
    for name in gj.__all__:  # every advertised name resolves (submodules import lazily)
        assert getattr(gj, name) is not None
    for module in ("study", "pipeline", "extraction", "attention", "kernel_factorization", "gaussian"):
        assert module in gj.__all__ and hasattr(gj, module)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        gj.nonexistent  # noqa: B018


def test_reprs_are_short_and_show_shapes():
    h = np.random.default_rng(0).normal(size=(16, 32, 24)).astype(np.float32)
    dec = gj.decompose(h)
    text = repr(dec)
    assert text.splitlines()[0] == "Decomposition("
    assert "resid: f32[16,32,24]" in text and len(text.splitlines()) <= 15
    st = gj.decompose_stream([h[:8], h[8:]])
    text = repr(st)
    assert "centered_second_moment: f32[24,24]" in text and "n_contexts: 16" in text
    assert len(text.splitlines()) <= 15


def test_summarize_small_arrays_show_values():
    assert summarize(np.array([0.5, 1.5], np.float64)) == "f64[2] [0.5, 1.5]"
    assert summarize(np.int32(3)) == "i32[] 3"
    assert summarize((np.zeros((3, 4)), np.zeros((3, 4)))) == "2 × f64[3,4]"
    assert summarize(None) == "None"
