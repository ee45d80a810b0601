"""Training-anomaly detection (geomjax.train.anomalies) on synthetic curves with planted events."""

from __future__ import annotations

import numpy as np

from geomjax.train.anomalies import detect_accuracy_drops, detect_anomalies, detect_loss_spikes, last_stable_epoch


def _curve():
    """Loss decaying from 4.7 to ~1e-7 over 3,000 epochs with a planted spike at 1,400-1,449 (to 5e-3)."""
    e = np.arange(3000)
    loss = 4.7 * np.exp(-e / 80.0) + 2e-7 * (1 + 0.3 * np.sin(e))  # float noise-like wiggle, no spike
    loss[1400:1450] = 5e-3 * np.exp(-np.arange(50) / 5.0) + 1e-6 + 2e-7
    return e, loss


def test_loss_spike_found_with_onset_peak_and_recovery():
    e, loss = _curve()
    found = detect_loss_spikes(e, loss, series="train loss", factor=100.0)
    assert len(found) == 1
    a = found[0]
    assert (a.kind, a.start, a.peak) == ("loss spike", 1400, 1400)
    np.testing.assert_allclose(a.value, loss[1400])
    # recovery: first epoch back below 100 x the median m of the 50 pre-spike values: the planted tail
    # 5e-3 e^{-t/5} + 1.2e-6 stays above 100 m until t > 5 ln(5e-3 / (100 m - 1.2e-6))
    t_rec = int(np.floor(5 * np.log(5e-3 / (100 * np.median(loss[1350:1400]) - 1e-6 - 2e-7)))) + 1
    assert a.recovered == 1400 + t_rec
    assert "spike" in a.describe() and "1400" in a.describe()
    # a factor above the planted ratio (5e-3 / 2e-7 = 25,000) sees nothing; the smooth part never triggers
    assert detect_loss_spikes(e, loss, factor=1e5) == []
    assert detect_loss_spikes(e[:1400], loss[:1400]) == []


def test_nan_and_unrecovered_spike():
    e, loss = _curve()
    loss = loss.copy()
    loss[2990:] = 1e-1  # spike that lasts to the end
    found = detect_loss_spikes(e, loss)
    assert [a.recovered for a in found] == [found[0].recovered, None] and found[1].start == 2990
    loss[2995] = np.nan
    found = detect_loss_spikes(e, loss)
    assert found[-1].kind == "non-finite" and found[-1].start == 2995


def test_accuracy_drop_after_convergence_and_last_stable():
    e = np.arange(0, 3000, 10)
    acc = np.clip(e / 500.0, 0, 1.0)  # converges at 500
    acc[(e >= 1400) & (e < 1500)] = 0.55
    acc[(e >= 100) & (e < 200)] = 0.05  # a dip before convergence is not an anomaly
    found = detect_accuracy_drops(e, acc, series="test accuracy")
    assert len(found) == 1 and (found[0].start, found[0].recovered, found[0].value) == (1400, 1500, 0.55)
    hist = {"epoch": e, "train_loss": np.full(e.shape, 1e-3), "train_acc": np.ones(e.shape),
            "test_loss": np.full(e.shape, 1e-2), "test_acc": acc}
    an = detect_anomalies(hist)
    assert [a.series for a in an] == ["test accuracy"]
    snaps = list(range(0, 3001, 100))
    assert last_stable_epoch(snaps, an) == 3000
    acc2 = acc.copy()
    acc2[e >= 2500] = 0.5
    an2 = detect_anomalies({**hist, "test_acc": acc2})
    assert last_stable_epoch(snaps, an2) == 2400  # the open drop from 2,500 excludes every later checkpoint
    assert last_stable_epoch([1400, 1450], an2) is None


def test_describe_and_json():
    import json

    from geomjax.train.anomalies import describe

    e, loss = _curve()
    loss = loss.copy()
    loss[2000] = np.inf
    found = detect_loss_spikes(e, loss)
    assert found[-1].kind == "non-finite"
    json.dumps([a.to_json() for a in found], allow_nan=False)
    assert describe([], "x").startswith("No anomaly detected in x") and describe(found).startswith("2 anomalies")


def test_oscillating_accuracy_drop_is_one_finding():
    e = np.arange(100)
    acc = np.ones(100)
    acc[50], acc[52], acc[53] = 0.9, 0.7, 0.93  # drop, back to 1.0 at 51, drop again
    found = detect_accuracy_drops(e, acc)
    assert len(found) == 1 and (found[0].start, found[0].peak, found[0].value, found[0].recovered) == (50, 52, 0.7, 54)
    assert len(detect_accuracy_drops(e, acc, merge=0)) == 2
