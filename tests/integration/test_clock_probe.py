"""geomjax.tools.clock_probe.analyze as compiled programs: a second analysis of a run with the same shapes
compiles nothing and gives the same numbers; the progress measures cover every parameter snapshot; the
embedding-restricted accuracies equal a NumPy float64 forward pass of the model with W_E filtered by np.fft."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from geomjax.sources.clock.claims import numpy_clock_forward
from geomjax.theory import fourier as fx
from geomjax.tools.clock_probe import analyze, key_series
from geomjax.train import grokking as gk
from tests._compiles import count_compiles



def _planted_run(tmp_path):
    """The smoke model (p 23) with frequencies 3 and 5 planted in W_E and in the read-out, two parameter
    snapshots written as train_grokking writes them (params/params_<epoch>.npz, '/'-joined names)."""
    cfg = gk.grokking_config("smoke")
    p = cfg.train.options.p
    state = gk.grokking_init(cfg)
    params = jax.device_get(state.params)
    rng = np.random.default_rng(0)
    B = np.asarray(fx.fourier_basis(p), np.float64)
    rows = B[[5, 6, 9, 10]]  # cos/sin of frequencies 3 and 5
    E = np.array(params["embed"]["embedding"])
    E[:p] = rows.T @ rng.normal(size=(4, E.shape[1])) + 0.01 * rng.normal(size=(p, E.shape[1]))
    U = np.array(params["unembed"]["kernel"])
    U[:, :p] = rng.normal(size=(U.shape[0], 4)) @ rows
    params = {**params, "embed": {"embedding": E.astype(np.float32)}, "unembed": {"kernel": U.astype(np.float32)}}
    d = tmp_path / "params"
    d.mkdir()
    for ep, scale in ((0, 0.5), (100, 1.0)):
        flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v) * np.float32(scale)
                for path, v in jax.tree_util.tree_flatten_with_path(params)[0]}
        np.savez(d / f"params_{ep:08d}.npz", **flat)
    hist = {"epoch": np.array([0, 100]), "train_acc": np.array([0.0, 1.0]), "test_acc": np.array([0.0, 0.5])}
    return gk.GrokkingResult(cfg, state.replace(params=params), hist, 0.0, 0.0, None, tmp_path)


@pytest.mark.slow  # compiles the analysis programs once (tens of seconds on a loaded 2-core machine)
def test_second_analysis_compiles_nothing_and_repeats_its_numbers(tmp_path):
    res = _planted_run(tmp_path)
    first = analyze(res)
    assert first["key"] == [3, 5] and [q["epoch"] for q in first["progress"]] == [0, 100]
    with count_compiles() as compiles:
        second = analyze(res)
    assert compiles[0] == 0
    assert second["progress"] == first["progress"] and second["sufficiency"] == first["sufficiency"]
    assert second["sufficiency_embed"] == first["sufficiency_embed"]
    np.testing.assert_array_equal(second["petals"][3]["z"], first["petals"][3]["z"])
    # the last snapshot holds the analysed parameters: the mapped progress program and the key program agree
    last, final = first["progress"][-1], first["restricted_final"]
    for k in ("restricted", "excluded", "train", "test"):
        assert abs(last[k] - final[k]) <= 1e-5 * max(1.0, abs(final[k]))
    # the blog §11's embedding restriction, independently: W_E[:p] keeps the DC and ±k terms of np.fft over the
    # tokens, and the model runs in float64 NumPy (a pair whose top two logits tie within float32 rounding may flip)
    P = jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), jax.device_get(res.state.params))
    p = res.config.train.options.p
    a, b = np.divmod(np.arange(p * p), p)
    assert set(first["sufficiency_embed"]) == {"3", "5", "3,5", "all"}
    for name, acc in first["sufficiency_embed"].items():
        keep = np.zeros(p, bool)
        keep[[0] + [f for k in (first["key"] if name == "all" else name.split(",")) for f in (int(k), p - int(k))]] = True
        E = P["embed"]["embedding"].copy()
        E[:p] = np.fft.ifft(np.where(keep[:, None], np.fft.fft(E[:p], axis=0), 0), axis=0).real
        right = np.argmax(numpy_clock_forward({**P, "embed": {"embedding": E}}, p)["logits"], 1) == (a + b) % p
        assert abs(acc * p * p - right.sum()) <= 1, (name, acc, right.mean())


def _np_strong(W: np.ndarray, p: int) -> list[int]:
    """The blog §5 rule by np.fft: frequencies 1..(p−1)/2 whose energy |DFT_k|² (summed over columns) of W[:p]
    exceeds 10× the median."""
    e = np.sum(np.abs(np.fft.rfft(np.asarray(W, np.float64)[:p], axis=0)) ** 2, axis=1)[1: (p - 1) // 2 + 1]
    return [int(k) + 1 for k in np.flatnonzero(e > 10 * np.median(e))]


def test_key_series_reads_every_snapshot_as_numpy_does(tmp_path):
    """key_series at each snapshot of the planted run: W_E's and W_L's key frequencies as np.fft gives them, and
    the best coprime pair's restricted accuracy as a 2-D DFT of the float64 NumPy forward gives it (the clock
    claims' independent witnesses)."""
    from geomjax.sources.clock.claims import dft_restricted_accuracy, numpy_clock_forward

    res = _planted_run(tmp_path)
    p = res.config.train.options.p
    series = key_series(res)
    assert [q["epoch"] for q in series] == [0, 100]
    for q, scale in zip(series, (0.5, 1.0)):  # the fixture's snapshots: the parameters × scale
        P = jax.tree_util.tree_map(lambda v: np.asarray(np.asarray(v) * np.float32(scale), np.float64),
                                   jax.device_get(res.state.params))
        W_L = (P["block_0"]["mlp"]["proj"]["kernel"] @ P["unembed"]["kernel"]).T
        assert q["key_W_E"] == _np_strong(P["embed"]["embedding"], p) == [3, 5]
        assert q["key_W_L"] == _np_strong(W_L, p) and q["key"] == [3, 5] and q["key_W_E_only"] == []
        want = dft_restricted_accuracy(numpy_clock_forward(P, p)["logits"], p, [3, 5])
        assert q["best_pair"] == "3,5" and abs(q["best_pair_acc"] - want) <= 2 / p**2
        assert q["all_acc"] == q["best_pair_acc"]  # the key is that one pair
    assert series[1]["test_acc"] == 0.5 and series[0]["test_acc"] == 0.0  # the history's logged test accuracy
