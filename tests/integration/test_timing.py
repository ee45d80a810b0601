"""Stage timing (geomjax.base.timing; issue 36 items 1-2): every stage of a run timed in run.json and the
report, and the XLA program count from JAX's monitoring events (no timing thresholds)."""

from __future__ import annotations

import contextvars
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.base import timing

STUDY_STAGES = ("load: config and tokenizer", "tokenize", "load: weights", "forward + sums", "cvec draw (forward)",
                "metrics (Tables 1, 3-5)", "Theorem 1", "token clusters (App. C)", "OOD (Table 2)",
                "projections (Figs. 1-3, App. C)", "figures", "report")


def test_programs_counted_per_stage_and_once_per_shape():
    @jax.jit
    def f(x):
        return jnp.sin(x) @ x.T + 1.2345

    a, b, c = np.ones((5, 3), np.float32), np.zeros((5, 3), np.float32), np.ones((4, 3), np.float32)
    with timing.record() as rec:
        with timing.stage("first") as first:
            f(a).block_until_ready()
        with timing.stage("same shape") as again:
            f(b).block_until_ready()
        with timing.stage("new shape") as other:
            f(c).block_until_ready()
    assert first.programs == 1 and first.compile_s > 0
    assert again.programs == 0 and again.compile_s == 0.0
    assert other.programs == 1
    assert rec.programs == 2 and 0 <= rec.cache_hits <= rec.programs
    for st in rec.stages:
        assert st.wall_s >= 0 and st.cpu_s >= 0 and st.compile_s >= 0
    assert sum(st.wall_s for st in rec.stages) <= rec.wall_s + 1e-6
    assert [st.name for st in rec.stages] == ["first", "same shape", "new shape"]


def test_stage_of_a_worker_thread_and_outside_a_recording():
    with timing.stage("nothing open") as st:
        assert st is None and timing.current() is None

    @jax.jit
    def g(x):
        return jnp.cos(x) * 3.25

    out, x = {}, np.ones(7, np.float32)

    def work():
        with timing.stage("worker", parallel=True) as st:
            g(x).block_until_ready()
        out["st"] = st

    with timing.record() as rec:
        with timing.stage("main") as main:
            t = threading.Thread(target=contextvars.copy_context().run, args=(work,))
            t.start()
            t.join()
    assert out["st"].programs == 1 and out["st"].parallel
    assert main.programs == 0  # the worker's compile is charged to its own stage, not the main thread's
    assert rec.to_json()["compiled"] == rec.programs - rec.cache_hits == 1 - rec.cache_hits


def check_stage_table(out) -> None:
    """run.json's timing and the report's stage table of a whole geometry run in ``out``: every stage of the study,
    each with its wall/CPU/compile seconds and program counts. Called by the geometry end-to-end test
    (tests/integration/test_study.py), whose run has every optional stage on, so no second geometry run is needed."""
    t = json.loads((out / "run.json").read_text())["timing"]
    names = [s["name"] for s in t["stages"]]
    assert set(STUDY_STAGES) <= set(names), set(STUDY_STAGES) - set(names)
    for s in t["stages"]:
        for k in ("wall_s", "cpu_s", "compile_s", "programs", "cache_hits"):
            assert s[k] >= 0, (s["name"], k)
        assert s["cache_hits"] <= s["programs"]
    assert t["programs"] >= sum(s["programs"] for s in t["stages"]) and t["programs"] > 0
    assert t["compiled"] == t["programs"] - t["cache_hits"] >= 0
    serial = sum(s["wall_s"] for s in t["stages"] if not s["parallel"])
    assert serial <= t["wall_s"] + 1e-6 and t["compile_s"] >= 0
    md = (out / "report.md").read_text()
    assert "## Where the time went" in md and "| forward + sums |" in md
    assert np.isfinite(t["cpu_s"])


def test_theorem1_of_every_layer_compiles_once_per_shape():
    """smoothness.theorem1_tables: the layers' eq. (6) tables are one program; a second stack of the same
    shapes (a second run) builds none, and each layer equals theorem1_table of that layer alone."""
    from geomjax.theory import smoothness

    rng = np.random.default_rng(1)

    def grams(seed_shift):
        out = []
        for i in range(3):
            P = np.cumsum(rng.standard_normal((12, 7 + i + seed_shift)), 0)
            P -= P.mean(0)
            out.append(P @ P.T)
        return np.stack(out)

    with jax.enable_x64(True):
        g1, g2 = grams(0), grams(1)
        with timing.record():
            with timing.stage("first") as first:
                tabs = smoothness.theorem1_tables(g1, ks=range(1, 6), ms=(1, 2))
            with timing.stage("second") as second:
                smoothness.theorem1_tables(g2, ks=range(1, 6), ms=(1, 2))
        assert first.programs >= 1 and second.programs == 0
        for G, tab in zip(g1, tabs):
            one = smoothness.theorem1_table(G, ks=range(1, 6), ms=(1, 2))
            for f in ("lhs_printed", "lhs_printed_lower", "lhs_dct", "lhs_dct_lower", "rhs_printed", "delta_max",
                      "delta_rounding"):
                np.testing.assert_allclose(getattr(tab, f), getattr(one, f), rtol=1e-12, atol=0, err_msg=f)
