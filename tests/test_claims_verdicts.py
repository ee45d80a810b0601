"""The recorded ``full`` verdicts (geomjax/claims/full_verdicts.json), the erratum (docs/ERRATA.md) and the
docs/findings.md's errata block must agree with the registry, and ``quick`` verdicts must never contradict ``full``.

A contradiction is "holds" against "does not hold"; "inconclusive" (e.g. a model that did not grok at the
quick budget, or too few samples for the margin) contradicts nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import geomjax.claims as claims
from geomjax.claims import registry as R

ROOT = Path(__file__).resolve().parents[1]
ERRATA = ROOT / "docs" / "ERRATA.md"
FINDINGS = ROOT / "docs" / "findings.md"


@pytest.fixture(scope="module")
def recorded():
    rec = R.load_full_verdicts()
    assert rec, "geomjax/claims/full_verdicts.json is missing: run `geomjax verify --budget full --erratum docs/ERRATA.md`"
    return rec


def test_full_verdicts_are_dated_and_known(recorded):
    ids = {c.id for c in claims.all_claims()}
    for cid, rec in recorded.items():
        assert cid in ids, f"{cid} is recorded but no longer registered"
        assert rec["verdict"] in R.VERDICTS and rec["date"] and rec["commit"]


def _errata_ids(text: str) -> set[str]:
    return set(re.findall(r"^### `([^`]+)`", text, flags=re.M))


def test_errata_current_with_registry_and_full_verdicts(recorded):
    text = ERRATA.read_text()
    listed = _errata_ids(text)
    ids = {c.id for c in claims.all_claims()}
    assert listed <= ids, f"ERRATA.md lists unregistered ids: {sorted(listed - ids)}"
    refuted = {cid for cid, r in recorded.items() if r["verdict"] == "does not hold"}
    assert listed == refuted, ("ERRATA.md is not the recorded full verdicts' erratum; regenerate it with "
                               "`geomjax verify --budget full --erratum docs/ERRATA.md`",
                               sorted(listed ^ refuted))
    for cid in listed:  # every entry carries two witnesses and the reproducing command
        entry = text.split(f"### `{cid}`", 1)[1].split("\n### ", 1)[0]
        assert "**Witness 1:**" in entry and "**Witness 2:**" in entry, cid
        assert f"geomjax verify --source {cid}" in entry, cid


def test_findings_errata_block_matches_the_erratum(recorded):
    """docs/findings.md carries the erratum's generated summary; it must equal the erratum's."""
    refuted: dict[str, list[str]] = {}
    for cid, r in recorded.items():
        if r["verdict"] == "does not hold":
            refuted.setdefault(cid.split(".", 1)[0], []).append(cid)
    block = R.erratum_summary(refuted)
    assert block in ERRATA.read_text()
    readme = FINDINGS.read_text()
    begin, end = block.splitlines()[0], block.splitlines()[-1]
    assert readme.count(begin) == 1 and readme.count(end) == 1, "docs/findings.md needs exactly one generated errata block"
    got = readme.split(begin, 1)[1].split(end, 1)[0]
    want = block.split(begin, 1)[1].split(end, 1)[0]
    assert got == want, "docs/findings.md's errata block is stale: copy the summary of docs/ERRATA.md"


@pytest.mark.slow
def test_quick_verdicts_never_contradict_full(recorded, quick_claims):
    """clock + Song & Zhong at the quick budget (the clock claims train two p = 59 models, cached under the
    session's $GEOMJAX_CACHE; the Song & Zhong results are the session's: tests/conftest.py)."""
    results = quick_claims(["clock", "song_zhong"])
    bad = []
    missing = [r.id for r in results if r.id not in recorded]
    assert not [m for m in missing if m.startswith("song_zhong")], f"no recorded full verdict: {missing}"
    for r in results:
        if r.id in missing:  # a clock full run not recorded yet: nothing to contradict
            continue
        if R.contradicts(r.verdict, recorded[r.id]["verdict"]):
            bad.append((r.id, r.verdict, recorded[r.id]["verdict"], r.reason))
    assert not bad, bad
    by_id = {r.id: r for r in results}
    for cid in ("clock.relu_free_groks", "clock.petals_sum_to_circles.used"):
        assert by_id[cid].verdict in ("holds", "inconclusive"), (cid, by_id[cid].reason)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_verify_full_records_verdicts_before_the_report(tmp_path, monkeypatch):
    """A report step that fails after the claims are checked must not lose the full verdicts."""
    from geomjax import cli, pipeline

    store = tmp_path / "full_verdicts.json"
    real = R.record_full_verdicts
    monkeypatch.setattr(R, "record_full_verdicts", lambda results, path=store: real(results, path))

    def failing_hooks(results):
        def hook(run, *, budget, seed):
            raise RuntimeError("report step killed")
        yield "song_zhong", hook

    monkeypatch.setattr(pipeline, "_claim_report_hooks", failing_hooks)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="report step killed"):
        cli.main(["verify", "--source", "song_zhong.theorem1.proof_basis", "--budget", "full",
                  "--out", str(out), "--no-progress"])
    rec = R.load_full_verdicts(store)
    assert set(rec) == {"song_zhong.theorem1.proof_basis"}
    assert rec["song_zhong.theorem1.proof_basis"]["verdict"] in ("holds", "does not hold", "inconclusive")
    assert not out.exists()  # the run directory is complete or absent
