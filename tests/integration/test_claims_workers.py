"""Claims checked in several processes (geomjax.claims.workers, ``geomjax verify --workers``): the split keeps each
checking module's deterministic claims together, spreads the Monte Carlo claims and balances the bins, and the
results equal those of one process, for the built-in sources and for a researcher's ``--claims`` file re-imported
by a fresh process."""

from __future__ import annotations

import importlib.util
import json
import os
import types
from pathlib import Path

import pytest

from geomjax import claims
from geomjax.claims import Claim, Evaluation, Tolerance, memo, registration, runner, workers
from geomjax.claims import catalogue
from geomjax.claims.catalogue import load_quick_seconds
from geomjax.errors import GeomjaxError
from tests.integration.test_user_claims import USER_FILE, user_file  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
# two checking modules, a fraction of a second each at quick (a refutation with its witness, a tolerance)
SELECTION = ["song_zhong.lemma2", "wertich.s5_1_2.xavier_taylor"]


def _where(group: str):
    """A report that says where it ran: (process id, whether a run memo was open)."""
    return os.getpid(), memo._CURRENT_MEMO.get() is not None


def _same(a, b):
    assert [r.id for r in a] == [r.id for r in b]
    for x, y in zip(a, b):
        assert (x.verdict, repr(x.estimate), repr(x.sem), x.reason) == (y.verdict, repr(y.estimate), repr(y.sem),
                                                                       y.reason), x.id


def test_split_keeps_modules_together_and_balances():
    sel = claims.select_claims(None)
    bins = workers.split(sel, 2, "quick")
    assert sorted(c.id for b in bins for c in b) == sorted(c.id for c in sel)
    where = {}
    for i, b in enumerate(bins):
        for c in b:
            if c.sampler is None:  # a module's deterministic claims in one bin; a Monte Carlo claim anywhere
                key = workers._module_key(c, registration.claim_origin(c.id))
                assert where.setdefault(key, i) == i, key
    mc = {i for i, b in enumerate(bins) for c in b if c.group == "wertich" and c.sampler is not None}
    assert mc == {0, 1}  # Wertich's Monte Carlo claims, most of its seconds, are spread over both processes
    cost = load_quick_seconds()
    loads = [sum(cost.get(c.id, 1.0) for c in b) for b in bins]
    assert len(bins) == 2 and max(loads) <= 0.6 * sum(loads), loads
    assert workers.split(sel, 1, "quick") == [sel]


def test_report_bins_follow_the_shared_results():
    """A source's report goes where its deterministic claims (whose per_run results it may read) were checked, even
    beside a costlier Monte Carlo claim; with Monte Carlo claims only, to the costliest one."""
    sel = claims.select_claims(["song_zhong.lemma2", "wertich.s5_1_2.xavier_taylor", "wertich.s6_2_2.eq6_13",
                                "wertich.s6_2_5.random_orientation_flat"])
    lemma2 = [c for c in sel if c.group == "song_zhong"]
    det, eq613, flat = ([c for c in sel if key in c.id] for key in ("xavier", "eq6_13", "orientation_flat"))
    cost = load_quick_seconds()
    assert cost[eq613[0].id] > cost[det[0].id] and cost[eq613[0].id] > cost[flat[0].id]
    assert workers.report_bins([lemma2 + eq613, det + flat], "quick") == [["song_zhong"], ["wertich"]]
    assert workers.report_bins([lemma2 + flat, eq613], "quick") == [["song_zhong"], ["wertich"]]


def test_hand_registered_claims_stay_in_this_process():
    planted = Claim(id="planted_workers.one", source="test", statement="1 = 1", predicted=1.0,
                    evaluate=lambda budget, key: Evaluation(value=1.0, method="exact"),
                    rule=Tolerance(atol=0.0, origin="exact"))
    claims.register(planted)
    try:
        bins = workers.split([planted] + claims.select_claims(SELECTION), 3, "quick")
        assert planted in bins[0]
    finally:
        claims.unregister(planted.id)


def test_a_fresh_process_gives_the_results_of_this_one(user_file):  # noqa: F811
    """Built-in claims of two modules split over two processes, the researcher's file re-imported by the fresh one
    (one spawn: its start-up, importing JAX and the sources, is most of the test's time)."""
    ids = registration.load_claims(str(user_file(USER_FILE)))
    sel = claims.select_claims(SELECTION) + [registration.registered_claim(i) for i in ids]
    one = claims.run(select=[c.id for c in sel], workers=1)
    here = [c for c in sel if c.id.startswith("song_zhong.")]
    order = []
    with runner.run_memo():
        two, drawn = workers.run_in_workers([here, [c for c in sel if c not in here]], "quick", 0, "raise",
                                            (None, None), runner.run_ordered, checked=lambda rs: order.append(len(rs))
                                            or rs, reports=_where, reports_wait=True)
    _same(one, sorted(two, key=lambda r: r.id))
    # each group reported once, by the process that checked its claims, inside that process's run memo; this
    # process's report after every result was handed over
    assert set(drawn) == {"song_zhong", "wertich", "calculus"}
    assert drawn["song_zhong"] == (os.getpid(), True) and order == [len(sel)]
    assert drawn["wertich"][0] == drawn["calculus"][0] != os.getpid() and drawn["wertich"][1]
    assert {r.id: r.verdict for r in one if r.id in ids} == {"calculus.square": "holds",
                                                             "calculus.square_misprint": "does not hold"}


def test_bad_workers_is_refused():
    with pytest.raises(GeomjaxError, match="workers must be a positive integer"):
        claims.run(select=SELECTION, workers=0)


def test_report_seconds_are_recorded_and_weigh_in_the_split(tmp_path, monkeypatch):
    path = tmp_path / "quick_seconds.json"
    path.write_text(json.dumps({"seconds": {}}))
    planted = types.SimpleNamespace(id="song_zhong.lemma2", details={"budget": "quick", "seconds": 0.5})
    catalogue.record_quick_seconds([planted], path, reports={"bao": 12.0})
    catalogue.record_quick_seconds([], path, reports={"wertich": 3.0})  # a later record keeps the earlier ones
    assert catalogue.load_report_seconds(path) == {"bao": 12.0, "wertich": 3.0}
    assert catalogue.load_quick_seconds(path) == {"song_zhong.lemma2": 0.5}
    # a report heavier than every claim together: its source's costliest module gets a bin to itself
    sel = claims.select_claims(None)
    monkeypatch.setattr(workers, "load_report_seconds", lambda: {"bao": 1e6})
    bins = workers.split(sel, 2, "quick")
    alone = [b for b in bins if any(c.group == "bao" for c in b)]
    assert len(alone) == 1 and {workers._module_key(c, registration.claim_origin(c.id)) for c in alone[0]
                                if c.sampler is None} == {"geomjax.sources.bao.claims"}


def test_record_script_records_a_verify_run(tmp_path):
    """scripts/record_quick_seconds.py runs `geomjax verify` at quick and records its claims' and reports' seconds."""
    spec = importlib.util.spec_from_file_location("record_quick_seconds", ROOT / "scripts" / "record_quick_seconds.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    to = tmp_path / "quick_seconds.json"
    to.write_text(json.dumps({"seconds": {"song_zhong.lemma2": 123.0}, "reports": {"bao": 4.0}}))
    # a clock claim without its trained models (the suite's cache is empty): checked at once, its report drawn
    assert script.main(["--source", "clock.grokking", "--to", str(to)]) == 0
    rec = json.loads(to.read_text())
    assert rec["seconds"]["song_zhong.lemma2"] == 123.0  # not selected: kept
    assert 0.0 <= rec["seconds"]["clock.grokking"] < 60.0
    assert rec["reports"]["bao"] == 4.0 and rec["reports"]["clock"] >= 0.0  # the source's report was drawn
