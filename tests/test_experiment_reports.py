"""Experiment reports: the source-vs-run table, the smoke presets' "plumbing only" notice, the figure
helpers (phase ordering), the token-randomization split, and the README's experiment numbers against
the committed ``cpu`` reports."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.token_randomization.run import noise_start, split_positions
from geomjax.comparison import HEADING, PLUMBING_NOTICE, Row, Source, SourceNumber, parse_source_table, source_section
from geomjax.data.synthetic import randomize_tokens
from geomjax.errors import GeomjaxError
from geomjax.plots import phase_order
from geomjax.report import render_markdown


@pytest.mark.parametrize("T", [8, 15, 16, 64])
def test_split_positions_cover_every_position_once_and_follow_the_noise(T):
    sp = split_positions(T)
    allpos = np.concatenate([sp["first"], sp["boundary"], sp["second"]])
    assert sorted(allpos.tolist()) == list(range(T))
    # independent: which window positions does level-1 noise replace? (-1 is outside the vocabulary)
    import jax

    w = np.asarray(randomize_tokens(jax.random.key(0), -np.ones((1, T + 1), np.int32), 1000, 1))[0]
    rnd = w >= 0
    inp, tgt = rnd[:T], rnd[1:]
    np.testing.assert_array_equal(np.flatnonzero(~inp & ~tgt), sp["first"])
    np.testing.assert_array_equal(np.flatnonzero(~inp & tgt), sp["boundary"])
    np.testing.assert_array_equal(np.flatnonzero(inp), sp["second"])
    assert noise_start(T) == int(np.argmax(rnd))


@pytest.mark.parametrize("p,k", [(113, 7), (113, 46), (23, 5), (12, 5)])
def test_phase_order(p, k):
    o = phase_order(p, k)
    assert sorted(o.tolist()) == list(range(p))
    ph = (k * o) % p
    assert np.all(np.diff(ph) >= 0)
    if np.gcd(k, p) == 1:  # a permutation of the phases: consecutive points are circle neighbours
        np.testing.assert_array_equal(ph, np.arange(p))
        ang = 2 * np.pi * k * o / p
        steps = np.angle(np.exp(1j * np.diff(ang)))
        np.testing.assert_allclose(steps, 2 * np.pi / p, atol=1e-9)


def test_source_section_roundtrip_and_smoke_notice():
    src = Source("a paper, §1", "big model", (SourceNumber("x", "the x", "§1, Fig. 2", "0.5"),
                                               SourceNumber("y", "the y", "§2", "yes")))
    rows = [Row("x", "0.49", "reproduced", "within 0.05"), Row("y", "no", "not reproduced")]
    s = source_section(src, "cpu", "small model", ["smaller"], rows)
    md = render_markdown("t", [s])
    got = parse_source_table(md)
    assert [r["verdict"] for r in got] == ["reproduced", "not reproduced"]
    assert got[0]["source value"] == "0.5" and got[0]["this run"] == "0.49" and got[0]["source (where)"] == "§1, Fig. 2"
    assert PLUMBING_NOTICE not in md
    md = render_markdown("t", [source_section(src, "smoke", "tiny", [], rows)])
    assert PLUMBING_NOTICE in md
    assert {r["verdict"] for r in parse_source_table(md)} == {"not testable at this preset"}
    with pytest.raises(GeomjaxError, match="verdict"):
        Row("x", "1", "holds")
    with pytest.raises(GeomjaxError, match="no number"):
        source_section(src, "cpu", "", [], [Row("z", "1", "reproduced")])
    with pytest.raises(GeomjaxError, match=HEADING):
        parse_source_table("# a report\n\n## Other\n")
