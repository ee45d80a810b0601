"""The one host loop (geomjax.train.loop.train_loop): schedule of hooks, exact chunking, non-finite check.

A fake chunk function (NumPy, no model) makes the schedule and the anomaly hook checkable exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from geomjax.train.loop import History, train_loop


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
