"""Counts that cannot drift: every verdict count and every claims cost a guide quotes is the one the records give
(geomjax/claims/full_verdicts.json, quick_seconds.json, the registry), and a source's tally keeps its own
statements apart from geomjax's readings."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from geomjax.claims import registration
from geomjax.claims import registry as R
from geomjax.drivers import pipeline

ROOT = Path(__file__).resolve().parents[2]
# the guides (the erratum is generated from the records; benchmarks/RESULTS.md is a dated log of measurements)
GUIDES = sorted([ROOT / "README.md", *(p for p in ROOT.glob("docs/*.md") if p.name != "ERRATA.md")])
TRIPLE = re.compile(r"(\d+)\s+hold,\s+(\d+)\s+do\s+not\s+hold,\s+(\d+)\s+inconclusive")  # across line breaks


@pytest.fixture(scope="module")
def recorded():
    return {k: r["verdict"] for k, r in R.load_full_verdicts().items()}


def _of(group, recorded):
    return {k: v for k, v in recorded.items() if k.split(".", 1)[0] == group}


def _triple(counts):
    return tuple(counts[v] for v in ("holds", "does not hold", "inconclusive"))


def test_tally_keeps_geomjax_readings_apart(recorded):
    """Bao's refuted statements do not include geomjax's own reading eq9.one_vs_rest_span (issue 45)."""
    t = R.tally(_of("bao", recorded))
    own = {c.id for c in R.select_claims("bao") if c.reading in R.OWN_READINGS}
    assert "bao.eq9.one_vs_rest_span" in own and recorded["bao.eq9.one_vs_rest_span"] == "does not hold"
    assert t["readings"]["does not hold"] == sum(recorded[i] == "does not hold" for i in own)
    assert t["statements"]["does not hold"] + t["readings"]["does not hold"] == Counter(_of("bao", recorded).values())[
        "does not hold"]
    assert "geomjax's own readings: " in pipeline.tally_summary(t)


def test_every_count_a_guide_quotes_is_a_recorded_one(recorded):
    """A "n hold, n do not hold, n inconclusive" in a guide is the whole registry's recorded full verdicts, or a
    source's statements or own readings (:func:`tally`)."""
    allowed = {_triple(Counter(recorded.values()))}
    for group in registration.source_names():
        t = R.tally(_of(group, recorded))
        allowed |= {_triple(t["statements"]), _triple(t["readings"])}
    for path in GUIDES:
        for m in TRIPLE.finditer(path.read_text(encoding="utf-8")):
            assert tuple(map(int, m.groups())) in allowed, f"{path.name}: '{m.group(0)}' is not a recorded count"


def test_sources_claims_counts_in_findings_are_recorded(recorded):
    """docs/findings.md's "`geomjax verify --source S`: N claims (statements: ...)" per source."""
    text = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    found = re.findall(r"`geomjax verify --source (\w+)[^`]*`: (\d+) claims \((statements: [^)]*)\)", text)
    assert sorted(g for g, _, _ in found) == registration.source_names()
    for group, n, summary in found:
        assert int(n) == len(R.select_claims(group + ".")) == len(_of(group, recorded)), group
        assert summary == pipeline.tally_summary(R.tally(_of(group, recorded))), group


def test_verify_guide_quotes_the_records(recorded):
    """docs/verify.md: the registry's full verdicts and the demo claims' recorded quick cost."""
    text = (ROOT / "docs" / "verify.md").read_text(encoding="utf-8")
    full = re.search(r"at full \(" + TRIPLE.pattern, text)
    assert tuple(map(int, full.groups())) == _triple(Counter(recorded.values()))
    demo = registration.demo_source()
    quick = R.load_quick_seconds()
    cost = sum(quick[c.id] for c in R.select_claims(demo + "."))
    assert int(re.search(r"checks were recorded at (\d+) s", text).group(1)) == round(cost)
