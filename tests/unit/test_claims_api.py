"""The researcher's view of claims: ClaimResult.holds/kind/arrays/repr and gj.claims.table() (nothing run)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

import geomjax as gj
from geomjax.claims import Claim, Evaluation, Inequality, Tolerance
from geomjax.claims import registry as R
from geomjax.errors import GeomjaxError

ORIGIN = "test: an exact evaluation"


def _vector_claim(offset: float) -> Claim:
    """value = (1, 2, 3) + offset against the printed (1, 2, 3) within 1e-6."""
    return Claim(id="testapi.vector", source="Test doc eq. (2)", statement="v = (1, 2, 3)",
                 predicted=np.array([1.0, 2.0, 3.0]),
                 evaluate=lambda budget, key: Evaluation(value=np.array([1.0, 2.0, 3.0]) + offset, method="plain"),
                 rule=Tolerance(atol=1e-6, rtol=0.0, origin=ORIGIN),
                 witness=lambda budget, key: Evaluation(value=np.array([1.0, 2.0, 3.0]) + offset, method="again"))


def test_holds_is_three_valued_and_kind_is_reported():
    good = R.run_claim(_vector_claim(0.0))
    bad = R.run_claim(_vector_claim(1.0))
    assert (good.verdict, good.holds) == ("holds", True)
    assert (bad.verdict, bad.holds) == ("does not hold", False)
    undecided = dataclasses.replace(good, verdict="inconclusive")
    assert undecided.holds is None
    assert good.kind == "deterministic"
    assert R.ClaimResult(id="x", source="s", statement="t", predicted=None, estimate=None, sem=None,
                         verdict="inconclusive").kind == ""


def test_vectors_are_arrays_in_the_result_and_lists_in_json(tmp_path):
    r = R.run_claim(_vector_claim(0.5))
    assert isinstance(r.estimate, np.ndarray) and r.estimate.dtype == np.float64
    np.testing.assert_array_equal(r.estimate, [1.5, 2.5, 3.5])
    np.testing.assert_array_equal(r.predicted, [1.0, 2.0, 3.0])
    jpath, _ = R.write_results([r], tmp_path)
    stored = json.loads(jpath.read_text())["results"][0]
    assert stored["estimate"] == [1.5, 2.5, 3.5] and stored["predicted"] == [1.0, 2.0, 3.0]
    back = R.ClaimResult.from_dict(stored)
    assert isinstance(back.estimate, np.ndarray)
    np.testing.assert_array_equal(back.estimate, r.estimate)
    assert back.holds is r.holds and back.witnesses == r.witnesses
    # scalars stay floats; non-finite numbers survive the JSON round trip
    assert R.ClaimResult.from_dict({**stored, "estimate": 2.0, "sem": "nan"}).estimate == 2.0
    assert np.isnan(R.ClaimResult.from_dict({**stored, "sem": "nan"}).sem)


def test_repr_is_short_and_names_the_verdict():
    r = R.run_claim(_vector_claim(1.0))
    text = repr(r)
    assert len(text.splitlines()) <= 15, text
    assert "testapi.vector: does not hold, holds=False" in text and "f64[3]" in text
    assert "witnesses: 2" in text


def test_table_lists_every_claim_without_running_any(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("table() must not run a check")

    for c in R.all_claims():
        origin = R._REGISTRY[c.id][1]
        fake = dataclasses.replace(c, witness=boom if c.witness is not None else None,
                                   predicted=boom if callable(c.predicted) else c.predicted,
                                   **({"sampler": boom} if c.sampler is not None else {"evaluate": boom}))
        monkeypatch.setitem(R._REGISTRY, c.id, (fake, origin))
    monkeypatch.setattr(R, "run_claim", boom)
    rows = gj.claims.table()
    claims = R.all_claims()
    assert [r.id for r in rows] == [c.id for c in claims]
    by_id = {c.id: c for c in claims}
    for row in rows:
        c = by_id[row.id]
        assert row.source == c.source and row.kind == c.kind
        assert row.rule == {R.MonteCarloRule: "monte_carlo", Tolerance: "tolerance", Inequality: "inequality"}[type(c.rule)]
        known = [s for s in (row.seconds_quick, row.seconds_full) if s is not None]
        assert row.cost == R.cost_class(max(known) if known else None)
    recorded = R.load_full_verdicts()
    assert any(r.seconds_full == pytest.approx(recorded[r.id]["seconds"]) for r in rows if r.id in recorded)
    assert {r.kind for r in rows} == {"monte_carlo", "deterministic"}


def test_table_selection_and_cost_classes():
    rows = gj.claims.table("wertich.s4_3_2")
    assert rows and all(r.id.startswith("wertich.s4_3_2.") for r in rows)
    assert [R.cost_class(s) for s in (None, 0.2, 5, 600, 7200)] == ["not recorded", "< 1 s", "seconds", "minutes", "hours"]
    with pytest.raises(GeomjaxError, match="match no claim"):
        gj.claims.table("nosuchsource")
    text = R.format_table(rows)
    assert text.splitlines()[0].split()[:3] == ["id", "kind", "rule"] and len(text.splitlines()) == len(rows) + 1


def test_verify_list_prints_the_table_without_a_run_directory(capsys, tmp_path, monkeypatch):
    from geomjax import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(R, "run_claim", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran a check")))
    assert cli.main(["verify", "--list", "--source", "wertich.s4_3_2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["id", "kind", "rule"]
    assert [line.split()[0] for line in out[1:]] == [r.id for r in gj.claims.table("wertich.s4_3_2")]
    assert list(tmp_path.iterdir()) == []  # no run directory
    assert cli.main(["verify", "--list", "--source", "nosuchsource"]) == 2
    assert re.search("match(es)? no claim", capsys.readouterr().err)


def test_per_run_results_are_shared_within_one_run_and_dropped_after():
    """claims.per_run: one computation per run for all the run's claims; a second run computes afresh;
    outside a run nothing is kept (no global cache of claim results)."""
    calls = []

    @R.per_run
    def expensive(budget):
        calls.append(budget)
        return np.arange(3.0) + len(calls)

    def claim(i):
        return Claim(id=f"testapi.shared{i}", source="Test doc eq. (3)", statement="v = (1, 2, 3)",
                     predicted=np.array([1.0, 2.0, 3.0]),
                     evaluate=lambda budget, key: Evaluation(value=expensive(budget), method="shared"),
                     rule=Tolerance(atol=1e-6, rtol=0.0, origin=ORIGIN))

    try:
        for i in (1, 2):
            R.register(claim(i))
        first = R.run(select="testapi.shared*")
        assert calls == ["quick"] and [r.verdict for r in first] == ["holds", "holds"]
        second = R.run(select="testapi.shared*")  # a new run: computed again (np.arange + 2 does not hold)
        assert calls == ["quick", "quick"] and [r.verdict for r in second] == ["inconclusive", "inconclusive"]
    finally:
        for i in (1, 2):
            R.unregister(f"testapi.shared{i}")
    expensive("full"), expensive("full")  # no run open: every call computes
    assert calls == ["quick", "quick", "full", "full"]
    with R.run_memo() as memo:
        expensive("full"), expensive("full")
        assert len(memo) == 1
    assert calls[4:] == ["full"]
    with R.run_memo() as memo:  # keyed after binding: the default argument spelled out is the same call
        seeded = R.per_run(lambda budget, seed=0: calls.append((budget, seed)) or len(calls))
        assert seeded("quick") == seeded("quick", 0) == seeded(budget="quick", seed=0) != seeded("quick", 1)
        assert len(memo) == 2


def test_register_table_registers_one_claim_per_row_with_the_common_fields():
    """register_table(columns, rows, **common) equals one register(Claim(**common, **row)) per row, under the
    caller's module; a short row or a field given twice is refused before anything is registered."""

    def evaluate(budget, key):
        return Evaluation(value=np.zeros(1))

    rule = Tolerance(atol=1e-6, rtol=0.0, origin=ORIGIN)
    try:
        got = R.register_table(("id", "statement", "predicted"),
                               [("testapi.table.a", "a = 1", 1.0), ("testapi.table.b", "b = 2", 2.0)],
                               source="Test doc eq. (3)", evaluate=evaluate, rule=rule)
        assert got == [Claim(id="testapi.table.a", source="Test doc eq. (3)", statement="a = 1", predicted=1.0,
                             evaluate=evaluate, rule=rule),
                       Claim(id="testapi.table.b", source="Test doc eq. (3)", statement="b = 2", predicted=2.0,
                             evaluate=evaluate, rule=rule)]
        assert [R._REGISTRY[c.id] for c in got] == [(c, __name__) for c in got]
        with pytest.raises(ValueError, match="has 2 fields for 3 columns"):
            R.register_table(("id", "statement", "predicted"), [("testapi.table.c", "c = 3")],
                             source="Test doc", evaluate=evaluate, rule=rule)
        with pytest.raises(ValueError, match="as a column and in common"):
            R.register_table(("id", "source"), [("testapi.table.d", "Test doc")], source="Test doc",
                             statement="d", evaluate=evaluate, rule=rule)
        assert "testapi.table.c" not in R._REGISTRY and "testapi.table.d" not in R._REGISTRY
    finally:
        for cid in ("testapi.table.a", "testapi.table.b"):
            R.unregister(cid)


# ----------------------------------------------------------------------------------------------
# Readings, scopes, kinds (issue 33)
# ----------------------------------------------------------------------------------------------


def test_binomial_interval_is_clopper_pearson_at_five_sigma():
    """Against SciPy's exact binomial confidence interval (scipy.stats.binomtest, an independent implementation)."""
    import scipy.stats

    level = 1 - 2 * scipy.stats.norm.sf(5.0)
    for k, n in ((0, 64), (1, 64), (7, 128), (64, 64), (3, 32)):
        ci = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
        lo, hi = R.binomial_interval(k, n)
        assert lo == pytest.approx(ci.low, rel=1e-4, abs=1e-10) and hi == pytest.approx(ci.high, rel=1e-9), (k, n)  # SciPy solves numerically
    # 0 failures in n draws: the upper bound is 1 − (α/2)^(1/n)
    alpha = 2 * scipy.stats.norm.sf(5.0)
    assert R.binomial_interval(0, 100)[1] == pytest.approx(1 - (alpha / 2) ** (1 / 100), rel=1e-10)
    with pytest.raises(ValueError):
        R.binomial_interval(3, 2)


def _random_claim(n_draws: int, fail_every: int, scope: str = "random") -> Claim:
    """A statement about a random instance: draw j fails when (j + 1) % fail_every == 0 (certified), else holds."""

    def evaluate(budget, key):
        fails = (np.arange(n_draws) + 1) % fail_every == 0
        return R.over_draws(fails, ~fails, allowed_fraction=0.1, method=f"{n_draws} draws")

    return Claim(id="testapi.random", source="Test doc §5", statement="a random instance satisfies it", predicted="≤ 0.1",
                 evaluate=evaluate, witness=evaluate, rule=Inequality(rtol=0.0), scope=scope,
                 error_kind="over-general statement", printed="it holds")


def test_a_statement_about_random_instances_is_never_refuted_by_few_draws():
    # every draw fails: refuted over 40 draws, inconclusive over 8 (fewer than MIN_DRAWS), whatever the interval says
    many, few = R.run_claim(_random_claim(40, 1)), R.run_claim(_random_claim(8, 1))
    assert many.verdict == "does not hold" and many.details["draws"] == 40 and many.details["failing"] == 40
    assert few.verdict == "inconclusive" and f"≥ {R.MIN_DRAWS} independent draws" in few.reason
    # a universal statement is refuted by a certified counterexample whatever the count
    assert R.run_claim(_random_claim(8, 1, scope="universal")).verdict == "does not hold"
    # one failing draw in 64: the failing fraction's interval straddles 0.1, so undecided (not refuted)
    one = R.run_claim(_random_claim(64, 64))
    assert one.verdict == "inconclusive" and one.details["failing"] == 1
    lo, hi = one.details["interval"]
    assert lo < 1 / 64 < hi and lo < 0.1 < hi
    # none fails over 512 draws: the 5σ upper bound (≈ 0.029) is below 0.1, so it holds for a typical draw
    assert R.run_claim(_random_claim(512, 10**6)).verdict == "holds"
    # the erratum reports the draws of a refutation
    rec = R.results_as_records([many])["testapi.random"]
    assert rec["draws"]["draws"] == 40 and rec["draws"]["failing"] == 40


def test_draws_needed_is_where_the_clopper_pearson_interval_clears_the_allowed_fraction():
    """draws_needed against SciPy's exact binomial interval (scipy.stats.binomtest): at the planned draws the 5σ
    interval of the point estimate excludes f₀, at 0.8 of them it does not; an undecided over_draws says so."""
    import scipy.stats

    level = 1 - 2 * scipy.stats.norm.sf(5.0)
    for f_hat, f0 in ((0.14, 0.1), (0.02, 0.1), (0.3, 0.1), (0.5, 0.25)):
        need = R.draws_needed(f_hat, f0)
        for n, clears in ((int(need), True), (int(0.8 * need), False)):
            ci = scipy.stats.binomtest(round(f_hat * n), n).proportion_ci(confidence_level=level, method="exact")
            assert (ci.high <= f0 or ci.low > f0) == clears, (f_hat, f0, need, n, ci)
    assert R.draws_needed(0.1, 0.1) == float("inf") and R.draws_needed(0.9, 0.1) == R.MIN_DRAWS
    # 9 of 64 draws undecided around the tolerance: the reason names the draws and CPU time deciding would take
    fails, holds = np.zeros(64, bool), np.arange(64) >= 9
    ev = R.over_draws(fails, holds, allowed_fraction=0.1, method="test", point_fails=np.arange(64) < 9, seconds=6.4)
    assert ev.details["draws_needed"] == R.draws_needed(9 / 64, 0.1) and "independent draws (≈" in ev.needs
    claim = Claim(id="testapi.random.needs", source="Test doc §5", statement="a random instance satisfies it",
                  predicted="≤ 0.1", evaluate=lambda budget, key: ev, rule=Inequality(rtol=0.0), scope="random")
    res = R.run_claim(claim)
    assert res.verdict == "inconclusive" and "deciding needs about" in res.reason and "this run drew 64" in res.reason


def test_claim_fields_are_checked_and_annotate_stays_in_its_source():
    with pytest.raises(ValueError, match="reading must be one of"):
        dataclasses.replace(_vector_claim(0.0), reading="as I like it")
    with pytest.raises(ValueError, match="error_kind must be one of"):
        dataclasses.replace(_vector_claim(0.0), error_kind="sloppy")
    with pytest.raises(ValueError, match="scope must be one of"):
        dataclasses.replace(_vector_claim(0.0), scope="some")
    R.all_claims()  # the source modules registered (bao's claims below)
    c = R.register(_vector_claim(0.0))
    try:
        got = R.annotate(c.id, reading="intended", printed="v = (1, 2, 3)")
        assert R._REGISTRY[c.id][0] == got and got.reading == "intended" and got.statement == c.statement
        with pytest.raises(ValueError, match="only"):
            R.annotate(c.id, statement="another")
        with pytest.raises(ValueError, match="annotate it from its source"):
            R.annotate("bao.eq10.right", error_kind="typo/notation")
    finally:
        R.unregister(c.id)


def test_erratum_sections_follow_reading_and_kind():
    """A refuted authors' reading goes under its kind; one without a kind is 'not yet classified'; geomjax's own
    reading is never among the statements that do not hold; a typo shows its intended statement's verdict."""
    R.all_claims()
    base = _vector_claim(1.0)
    made = [R.register(dataclasses.replace(base, id="testapi.err.wrong", error_kind="wrong constant", printed="v = (1, 2, 3)")),
            R.register(dataclasses.replace(base, id="testapi.err.bare")),
            R.register(dataclasses.replace(base, id="testapi.err.own", reading="extension")),
            R.register(dataclasses.replace(base, id="testapi.err.typo", error_kind="typo/notation", printed="v = (1, 2, 3)",
                                           intended_by="testapi.err.meant")),
            R.register(dataclasses.replace(_vector_claim(0.0), id="testapi.err.meant", reading="intended"))]
    try:
        records = R.results_as_records([R.run_claim(c) for c in made])
        groups = R.erratum_groups(records)
        assert groups["Statements that do not hold"] == {"testapi": ["testapi.err.wrong"]}
        assert groups["Refutations not yet classified"] == {"testapi": ["testapi.err.bare"]}
        assert groups["geomjax's own readings that do not hold"] == {"testapi": ["testapi.err.own"]}
        assert groups["Typos and notation"] == {"testapi": ["testapi.err.typo"]}
        text = R.to_erratum(records, budget="quick")
        assert "### Wrong constants" in text and "**As printed:** “v = (1, 2, 3)”" in text
        assert "(`testapi.err.meant`: **holds**)" in text.split("#### `testapi.err.typo`", 1)[1]
        assert "- testapi: 1 printed statement(s) do not hold — `testapi.err.wrong`" in R.erratum_summary(groups)
    finally:
        for c in made:
            R.unregister(c.id)
