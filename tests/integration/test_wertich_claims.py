"""geomjax.sources.wertich (one module per chapter): registration, a few verdicts at small budgets, the report hook."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from geomjax.claims import registry as R


@pytest.fixture(scope="module")
def wertich():
    import geomjax.sources.wertich as w
    from geomjax.sources.wertich import ch4, ch5, ch6, ch7  # noqa: F401  (the chapters, as w.ch4 ... w.ch7)

    return w


def _claim(cid):
    return {c.id: c for c in R.select_claims("wertich")}[cid]


def _small(claim, n=2048):
    """The claim with fewer Monte Carlo samples (same sampler and prediction)."""
    if claim.sampler is None:
        return claim
    return dataclasses.replace(claim, n_samples={"quick": n, "full": n}, chunk=min(claim.chunk, n))


def test_every_issue_statement_is_registered(wertich):
    ids = {c.id for c in R.select_claims("wertich")}
    expected_prefixes = [
        "wertich.s4_2_1.", "wertich.s4_2_2.entropy", "wertich.s4_2_2.mutual", "wertich.s4_2_2.kl", "wertich.s4_3_2.",
        "wertich.s5_1_2.lognormal_mean_printed", "wertich.s5_1_2.lognormal_mean_corrected", "wertich.s5_1_2.xavier",
        "wertich.s5_3_1.ratio_mean_printed", "wertich.s5_3_1.ratio_var", "wertich.eq5_3.", "wertich.s5_2_3.softmax",
        "wertich.s5_2_4.conjecture", "wertich.s5_2_4.fig5_1", "wertich.s5_2_4.eq5_17", "wertich.s5_3_2.noise",
        "wertich.s6_2_1.eq6_2_printed", "wertich.s6_2_1.eq6_2_corrected", "wertich.s6_2_1.eq6_3",
        "wertich.s6_2_2.eq6_12", "wertich.s6_2_2.eq6_13", "wertich.s2_5.mp_histogram", "wertich.s6_2_3.eq6_17",
        "wertich.s6_2_4.", "wertich.s6_2_5.aligned", "wertich.s6_2_5.random_orientation_flat",
        "wertich.s6_2_5.random_orientation_printed", "wertich.s6_3_1.eq6_35", "wertich.s6_3_1.eq6_36",
        "wertich.s6_3_1.eq6_37_38", "wertich.s6_3_2.eq6_48", "wertich.s6_3_3.eq6_49_printed", "wertich.s6_4.",
        "wertich.s7_1_1.", "wertich.s7_2_3.uniform_mixture_no_skip", "wertich.s7_2_3.uniform_mixture_skip",
    ]
    for p in expected_prefixes:
        assert any(i.startswith(p) for i in ids), p
    for c in R.select_claims("wertich"):
        assert c.source.startswith("Wertich "), c.id
        if c.id.endswith(".printed") or "_printed" in c.id:
            assert c.notes, f"{c.id}: a printed-form claim must explain the correction"


HOLDS_OR_UNDECIDED = ("holds", "inconclusive")


@pytest.mark.parametrize("cid,verdicts", [
    ("wertich.s5_1_2.lognormal_mean_printed", ("does not hold",)),
    # an exact identity at 2048 samples: 5·sem exceeds the 1% margin, so it cannot be shown to hold here
    ("wertich.s5_1_2.lognormal_mean_corrected", HOLDS_OR_UNDECIDED),
    pytest.param("wertich.s6_2_1.eq6_2_printed", ("does not hold",), marks=pytest.mark.slow),
    ("wertich.s6_2_1.eq6_2_corrected", HOLDS_OR_UNDECIDED),
    ("wertich.s4_3_2.approx_printed", ("does not hold",)),
    ("wertich.s4_3_2.approx_corrected", ("holds",)),
    ("wertich.s5_2_4.eq5_5_printed", ("does not hold",)),
    ("wertich.s5_2_4.conjecture_kl_exact", ("does not hold",)),
    pytest.param("wertich.s6_3_3.eq6_49_printed", ("does not hold",), marks=pytest.mark.slow),
    ("wertich.s5_3_2.taylor_shift_printed", ("does not hold",)),
    ("wertich.s5_3_2.taylor_shift_corrected", ("holds",)),
])
def test_verdicts_small_budget(wertich, cid, verdicts):
    claim = _small(_claim(cid))
    if verdicts == HOLDS_OR_UNDECIDED and claim.sampler is not None:
        # either verdict passes, so the rounds after the small first look get 2 CPU-s, not the quick budget's 15
        claim = dataclasses.replace(claim, seconds={"quick": 2.0, "full": 2.0})
    r = R.run_claim(claim, budget="quick", seed=0)
    assert r.verdict in verdicts, (cid, r.verdict, r.reason, r.estimate, r.predicted)
    if r.verdict == "does not hold":  # two independent computations, both rejecting
        assert len(r.witnesses) == 2 and all(w["verdict"] == "does not hold" for w in r.witnesses), r.witnesses
        assert r.witnesses[0]["method"] != r.witnesses[1]["method"]


@pytest.mark.slow
def test_eq6_12_holds_as_a_limit_with_the_finite_n_deviation_observed(wertich):
    """E σ_1²/(nσ²) → 4: the fitted limit along n = 8, 32, 128 is 4 within the margin; the finite-n
    values (≈ 3.1, 3.6, 3.9) are reported as an observation, not a refutation."""
    r = R.run_claim(_claim("wertich.s6_2_2.eq6_12_printed"), budget="quick", seed=0)
    assert r.verdict == "holds", (r.estimate, r.sem, r.reason)
    rows = r.observations["finite_n"]
    vals = [row["E_sigma1_sq_over_n_sigma2"] for row in rows]
    assert [row["n"] for row in rows] == [8, 32, 128]
    # an independent NumPy Monte Carlo (issue 16) measured 3.08, 3.64, 3.87 at n = 8, 32, 128
    for n, v, ref in zip((8, 32, 128), vals, (3.08, 3.64, 3.87)):
        assert abs(v - ref) < 0.05, (n, v)
    assert "finite_n_deviation" in r.observations and r.detectable_error < r.margin


def test_each_claim_is_registered_once_by_its_chapter_module(wertich):
    """The package splits the thesis by chapter: every id is registered exactly once, ch4-ch7 each own some."""
    ids = [c.id for c in R.select_claims("wertich")]
    assert len(ids) == len(set(ids))
    origins = {R._REGISTRY[i][1] for i in ids}
    assert origins <= {f"geomjax.sources.wertich.{m}" for m in ("_shared", "ch5", "ch6")}, origins
    sections = {i.split(".")[1] for i in ids}
    for m, prefix in ((wertich.ch4, "s4_"), (wertich.ch5, "s5_"), (wertich.ch6, "s6_"), (wertich.ch7, "s7_")):
        assert any(s.startswith(prefix) for s in sections) and m.__name__.startswith("geomjax.sources.wertich.ch")


def test_every_wertich_claim_declares_its_margin_origin(wertich):
    for c in R.select_claims("wertich"):
        assert c.margin_origin.strip(), c.id
        if "_printed" in c.id or c.id.endswith(".printed"):
            assert c.witness is not None or c.id == "wertich.s6_2_2.eq6_12_printed", f"{c.id}: no second witness"


def test_printed_and_corrected_lognormal_differ_by_the_right_amount(wertich):
    """The printed mean exp((μ+σ²)/2) and the estimate differ by exp(μ/2) (independent arithmetic)."""
    r = R.run_claim(_small(_claim("wertich.s5_1_2.lognormal_mean_printed"), 4096), budget="quick", seed=1)
    ratio = r.estimate / r.predicted
    assert abs(ratio - np.exp(wertich.ch5._LOGNORMAL_MU / 2)) < 5 * r.sem / r.predicted


@pytest.mark.slow
def test_random_orientation_nonflat_printed_fails(wertich):
    r = R.run_claim(_small(_claim("wertich.s6_2_5.random_orientation_printed"), 2048), budget="quick", seed=0)
    assert r.verdict == "does not hold"
    # the estimate agrees with the corrected variance (Σσ_a²)(Σσ_b²)/n² instead
    ch6 = wertich.ch6
    corr = (ch6._ORIENT_SPECTRUM_A**2).sum() * (ch6._ORIENT_SPECTRUM_B**2).sum() / ch6._ORIENT_N**2
    assert abs(r.estimate[1] - corr) < 5 * r.sem[1]


@pytest.mark.slow
def test_report_sections_writes_figures(wertich, tmp_path):
    from geomjax.sources.wertich.report import ReportSizes, report_sections
    from geomjax.analysis.report import RunDir

    sizes = ReportSizes(fig5_1_n=4, fig5_1_pairs=200, grid_n=(4,), grid_l=(0.5, 2.0), alpha_ns=(8,),
                                mp_hist_n=60, stack_layers=4, stack_variants=("no_skip",))
    run = RunDir(tmp_path / "verify", command="verify")
    sections, metrics = report_sections(run, budget="quick", seed=3, sizes=sizes)
    assert len(sections) == 4
    for s in sections:
        for f in s.figures:
            assert (run.path / f["path"]).is_file()
    assert metrics["marchenko_pastur"]["max"] > 3.0  # σ_1² of N(0, 1/n) matrices lies near 4, not 4/n
    assert len(metrics["fig5_1"]["grid"]) == 2
