"""Documentation that runs: docs/tutorial.py, the API reference (docs/build_api.py: pdoc plus a check
of every docstring reference), the examples of the top-level docstring, and the dtype rule (float64
NumPy and Python lists accepted by the core public functions, computed in float64)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import geomjax as gj

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.slow
def test_tutorial_runs(tmp_path):
    """`python docs/tutorial.py` as a user runs it: its own process, XLA's defaults (not the suite's compile-time
    flags: its Monte Carlo claim is compute-bound, 21 CPU s at the suite's LLVM level 0 against 9 at the default)."""
    assert len((DOCS / "tutorial.py").read_text().splitlines()) < 40
    fig = tmp_path / "tutorial.png"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, str(DOCS / "tutorial.py"), str(fig)], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert fig.stat().st_size > 10_000
    assert "ScreeNOT rank of pos" in out and "song_zhong.incoherence_baseline.cos2 ->" in out


@pytest.mark.slow
def test_api_reference_builds(tmp_path):
    pytest.importorskip("pdoc")
    spec = importlib.util.spec_from_file_location("build_api", DOCS / "build_api.py")
    build_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_api)
    pages = build_api.build(tmp_path)  # raises on an unresolved name or docstring reference
    names = {p.relative_to(tmp_path).as_posix() for p in pages}
    assert {"geomjax.html", "geomjax/analysis/lens.html", "geomjax/theory/decomposition.html"} <= names
    assert "run_with_cache" in (tmp_path / "geomjax" / "analysis" / "lens.html").read_text()
    assert build_api._resolves("geomjax.analysis.lens.load", None) and not build_api._resolves("geomjax.analysis.lens.nope", None)


def test_top_level_docstring_examples():
    """Every example of geomjax's module docstring, and every name of gj.__all__ resolving."""
    for name in gj.__all__:
        assert getattr(gj, name) is not None, name
    model = gj.load("minilm")
    out, cache = model.run_with_cache("The cat sat.")
    assert out.shape == (1, 6, 384) and len(cache.hidden_states()) == 7
    h = np.random.default_rng(0).normal(size=(4, 6, 8)).astype(np.float32)
    dec = gj.decompose(h, drop_first=False)
    assert isinstance(dec, gj.Decomposition)
    st = gj.decompose_stream([h[:2], h[2:]])
    assert isinstance(st, gj.DecompositionStats)
    np.testing.assert_allclose(st.pos, dec.pos, atol=1e-6)
    sh = gj.decompose_sharded(h, gj.parallel.data_mesh(2), batch_size=2)
    np.testing.assert_allclose(sh.pos, dec.pos, atol=1e-6)
    assert 0 <= int(gj.spectral.screenot_rank(np.asarray(dec.resid).reshape(24, 8), 2)) <= 2
    assert 0 <= float(gj.geometry.incoherence(dec.pos, dec.ctx)) <= 1
    assert issubclass(gj.GeomjaxError, ValueError) and gj.Estimate.__name__ == "Estimate"


def _np_decompose(h):
    mu = h.mean((0, 1))
    return h.mean(0) - mu, h.mean(1) - mu


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_float64_and_list_inputs_are_accepted_and_kept_float64():
    rng = np.random.default_rng(1)
    h = rng.normal(size=(5, 7, 4)) + 100.0  # float64
    pos, ctx = _np_decompose(h)
    for x in (h, h.tolist()):
        dec = gj.decompose(x)
        assert dec.pos.dtype == jnp.float64
        np.testing.assert_allclose(dec.pos, pos, atol=1e-12)
        np.testing.assert_allclose(dec.ctx, ctx, atol=1e-12)
    for batches in ([h[:2], h[2:]], [h[:2].tolist(), h[2:].tolist()], iter([h[:3], h[3:]])):
        st = gj.decompose_stream(batches, accum_dtype="float64")
        assert st.pos.dtype == jnp.float64
        np.testing.assert_allclose(st.pos, pos, atol=1e-12)
    Y = rng.normal(size=(40, 30))
    Y[:, :2] += 6 * rng.normal(size=(40, 1))  # a planted rank-one signal
    r = int(gj.spectral.screenot_rank(Y, 5))
    assert r == int(gj.spectral.screenot_rank(Y.tolist(), 5)) == int(gj.spectral.screenot_rank(Y.astype(np.float32), 5))
    cos = (pos / np.linalg.norm(pos, axis=1, keepdims=True)) @ (ctx / np.linalg.norm(ctx, axis=1, keepdims=True)).T
    for p, c in ((pos, ctx), (pos.tolist(), ctx.tolist())):
        inc = gj.geometry.incoherence(p, c)
        assert inc.dtype == jnp.float64
        np.testing.assert_allclose(float(inc), np.abs(cos).max(), rtol=1e-12)
