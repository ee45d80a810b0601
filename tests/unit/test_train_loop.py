"""The one host loop (geomjax.train.loop.train_loop): schedule of hooks, exact chunking, non-finite check.

A fake chunk function (NumPy, no model) makes the schedule and the anomaly hook checkable exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from geomjax.train.loop import History, StopRule, train_loop


class _State(NamedTuple):
    step: int


def _chunk(n, nan_at=None):
    def chunk(state, data):
        steps = np.arange(state.step, state.step + n)
        loss = 1.0 / (1.0 + steps.astype(np.float32))
        if nan_at is not None:
            loss = np.where(steps == nan_at, np.float32(np.nan), loss)
        return _State(state.step + n), {"loss": loss, "k": np.stack([steps, steps], axis=1).astype(np.float32)}
    return chunk


def test_hooks_follow_the_schedule_and_history_is_per_step():
    evals, ckpts = [], []
    state, hist = train_loop(_State(0), _chunk(5), None, total_steps=20, steps_per_call=5,
                             evaluate=lambda st: evals.append(st.step) or {"v": float(st.step)}, eval_every=10,
                             checkpoint=lambda st, h: ckpts.append((st.step, len(h.steps))), ckpt_every=10,
                             progress=False)
    assert state.step == 20 and evals == [0, 10, 20] and ckpts == [(10, 10), (20, 20)]
    np.testing.assert_array_equal(hist.steps, np.arange(20))
    np.testing.assert_array_equal(hist.train["loss"], 1.0 / (1.0 + np.arange(20, dtype=np.float32)))
    assert hist.train["k"].shape == (20, 2) and [e["step"] for e in hist.evals] == [0, 10, 20]
    assert hist.anomalies == [] and hist.to_json()["steps"] == list(range(20))


def test_resume_continues_a_history_and_rejects_unaligned_chunks():
    _, first = train_loop(_State(0), _chunk(5), None, total_steps=20, steps_per_call=5, stop_at=10, progress=False)
    first.seconds = 3.0
    _, both = train_loop(_State(10), _chunk(5), None, total_steps=20, steps_per_call=5, history=first,
                         progress=False)
    np.testing.assert_array_equal(both.steps, np.arange(20))
    assert both.seconds >= 3.0
    with pytest.raises(ValueError, match="multiple of steps_per_call"):
        train_loop(_State(3), _chunk(5), None, total_steps=20, steps_per_call=5, progress=False)
    with pytest.raises(ValueError, match="nonfinite"):
        train_loop(_State(0), _chunk(5), None, total_steps=20, steps_per_call=5, nonfinite="raise", progress=False)


def test_nonfinite_metrics_are_recorded_and_can_stop_the_run():
    ckpts = []
    with pytest.warns(RuntimeWarning, match="non-finite"):
        state, hist = train_loop(_State(0), _chunk(5, nan_at=7), None, total_steps=20, steps_per_call=5,
                                 checkpoint=lambda st, h: ckpts.append(st.step), progress=False)
    assert state.step == 20 and ckpts == [20] and len(hist.anomalies) == 1
    a = hist.anomalies[0]
    assert (a.kind, a.series, a.start, a.recovered) == ("non-finite", "loss", 7, None)
    ckpts.clear()
    with pytest.warns(RuntimeWarning):
        state, hist = train_loop(_State(0), _chunk(5, nan_at=7), None, total_steps=20, steps_per_call=5,
                                 checkpoint=lambda st, h: ckpts.append(st.step), nonfinite="stop", progress=False)
    assert state.step == 10 and ckpts == [] and len(hist.steps) == 10  # stopped after the chunk, no checkpoint
    _, quiet = train_loop(_State(0), _chunk(5, nan_at=7), None, total_steps=10, steps_per_call=5,
                          nonfinite="ignore", progress=False)
    assert quiet.anomalies == [] and np.isnan(quiet.train["loss"][7])


def test_history_concatenates_chunks_once():
    h = History()
    h.append(0, {"x": np.ones((2, 3))})
    h.append(2, {"x": np.zeros((2, 3))})
    assert h.train["x"].shape == (4, 3) and h.steps.tolist() == [0, 1, 2, 3]
    assert len(h._train["x"]) == 1 and h.train["x"] is h.train["x"]


def _eval_curve(values):
    """evaluate(state) -> {"acc": values[step // 5]} (one evaluation per chunk of 5 steps)."""
    return lambda st: {"acc": float(values[st.step // 5])}


def test_stop_rule_fires_on_the_last_evaluations_and_is_recorded():
    """StopRule: stop after the chunk whose last `patience` evaluations are all >= threshold (a value that
    reached it and fell back does not count), then the final checkpoint; the stop is recorded."""
    acc = [0.0, 0.5, 0.995, 0.9, 0.99, 0.999, 1.0, 1.0, 1.0]  # evaluations at steps 0, 5, 10, ...
    rule = StopRule("acc", 0.99, patience=2, origin="test")
    ckpts = []
    state, hist = train_loop(_State(0), _chunk(5), None, total_steps=40, steps_per_call=5,
                             evaluate=_eval_curve(acc), eval_every=5, stop=rule,
                             checkpoint=lambda st, h: ckpts.append((st.step, h.stopped)), ckpt_every=5,
                             progress=False)
    # 10: 0.995 alone (patience 2), 15: dip to 0.9, 20 and 25: 0.99, 0.999 -> stop at 25
    assert state.step == 25 and [e["step"] for e in hist.evals] == [0, 5, 10, 15, 20, 25]
    assert [s for s, _ in ckpts] == [5, 10, 15, 20, 25] and ckpts[-1][1] is hist.stopped  # recorded before it
    assert hist.stopped["step"] == 25 and hist.stopped["by"] == "rule"
    assert "20: 0.9900" in hist.stopped["reason"] and "25: 0.9990" in hist.stopped["reason"]
    assert hist.stopped["rule"] == {"metric": "acc", "threshold": 0.99, "patience": 2, "origin": "test", "mode": "at_least"}
    assert hist.to_json()["stopped"] == hist.stopped and len(hist.steps) == 25
    # never met: the run ends at its cap, recorded as such; no rule: nothing recorded
    _, capped = train_loop(_State(0), _chunk(5), None, total_steps=15, steps_per_call=5,
                           evaluate=_eval_curve(acc), eval_every=5, stop=StopRule("acc", 1.0), progress=False)
    assert capped.stopped["by"] == "cap" and capped.stopped["step"] == 15
    _, plain = train_loop(_State(0), _chunk(5), None, total_steps=15, steps_per_call=5,
                          evaluate=_eval_curve(acc), eval_every=5, progress=False)
    assert plain.stopped is None and "stopped" not in plain.to_json()


def test_stop_rule_resume_is_exact_and_a_stopped_run_trains_no_further():
    acc = [0.0, 0.5, 0.995, 0.9, 0.99, 0.999, 1.0, 1.0, 1.0]
    rule = StopRule("acc", 0.99, patience=2)
    kw = dict(total_steps=40, steps_per_call=5, evaluate=_eval_curve(acc), eval_every=5, stop=rule, progress=False)
    st_full, full = train_loop(_State(0), _chunk(5), None, **kw)
    st, part = train_loop(_State(0), _chunk(5), None, stop_at=15, **kw)  # interrupted before the rule fires
    assert st.step == 15 and part.stopped is None
    st, both = train_loop(st, _chunk(5), None, history=part, **kw)
    assert st.step == st_full.step == 25 and both.stopped == full.stopped
    np.testing.assert_array_equal(both.train["loss"], full.train["loss"])
    assert [e["step"] for e in both.evals] == [e["step"] for e in full.evals]
    ckpts = []
    st, again = train_loop(st, _chunk(5), None, history=both, checkpoint=lambda s, h: ckpts.append(s.step), **kw)
    assert st.step == 25 and ckpts == [] and len(again.steps) == 25 and again.stopped["by"] == "rule"
    # the series can come from elsewhere (in-scan metrics)
    st, own = train_loop(_State(0), _chunk(5), None, total_steps=40, steps_per_call=5, stop=rule,
                         stop_series=lambda h: (h.steps[4::5], np.ones(len(h.steps[4::5]))), progress=False)
    assert st.step == 10 and own.stopped["by"] == "rule"


def test_stop_rule_validates():
    with pytest.raises(ValueError, match="patience"):
        StopRule("acc", 0.99, patience=0)
    with pytest.raises(ValueError, match="finite"):
        StopRule("acc", float("nan"))
    r = StopRule("acc", 0.99, patience=3)
    assert r.reason([0, 1, 2], [1.0, 1.0, float("nan")]) is None and r.reason([0, 1], [1.0, 1.0]) is None
    assert r.describe() == "acc >= 0.99 at 3 consecutive evaluations"
    low = StopRule("loss", 0.5, patience=2, mode="at_most")
    assert low.reason([0, 1, 2], [0.4, 0.6, 0.5]) is None and "1: 0.4000, 2: 0.5000" in low.reason([0, 1, 2], [0.9, 0.4, 0.5])
    assert low.describe() == "loss <= 0.5 at 2 consecutive evaluations"
    with pytest.raises(ValueError, match="mode"):
        StopRule("loss", 0.5, mode="below")
