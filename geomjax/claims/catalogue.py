"""The table of claims (``geomjax verify --list``): what each claim is and its recorded cost, nothing run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from geomjax.claims.claim import ClaimResult
from geomjax.claims.records import load_full_verdicts
from geomjax.claims.registration import _select_strict, all_claims
from geomjax.claims.rules import Inequality, MonteCarloRule, Tolerance
from geomjax.errors import GeomjaxError


QUICK_SECONDS = Path(__file__).with_name("quick_seconds.json")


@dataclass(frozen=True)
class ClaimInfo:
    """One row of :func:`table`: what a claim is and what checking it costs, known without running it.

    Attributes:
      id, source: the claim's id and where it is printed.
      kind: "monte_carlo" (the mean of ``sampler``, :class:`MonteCarloRule`) or "deterministic"
        (``evaluate`` judged by its rule).
      rule: "monte_carlo", "tolerance" or "inequality".
      seconds_quick, seconds_full: recorded wall-clock seconds of the check at each budget (2-core CPU):
        quick from ``quick_seconds.json``, full from the recorded full verdicts (``full_verdicts.json``);
        None where not recorded.
      cost: the cost class of the larger recorded time (a check's seconds include its compilation, which a
        claim sharing a compiled program with one checked before it skips): "< 1 s", "seconds" (< 1 min),
        "minutes" (< 1 h), "hours", or "not recorded".
    """

    id: str
    source: str
    kind: str
    rule: str
    seconds_quick: float | None
    seconds_full: float | None
    cost: str


def cost_class(seconds: float | None) -> str:
    """"< 1 s", "seconds" (< 60 s), "minutes" (< 1 h), "hours"; "not recorded" for None."""
    if seconds is None:
        return "not recorded"
    return "< 1 s" if seconds < 1 else "seconds" if seconds < 60 else "minutes" if seconds < 3600 else "hours"


def load_quick_seconds(path: str | Path = QUICK_SECONDS) -> dict[str, float]:
    """{id: seconds} of the recorded quick-budget checks ({} if none)."""
    p = Path(path)
    return {k: float(v) for k, v in json.loads(p.read_text())["seconds"].items()} if p.is_file() else {}


def load_report_seconds(path: str | Path = QUICK_SECONDS) -> dict[str, float]:
    """{source group: seconds} of the recorded quick-budget report figures (``verify``'s source reports; {} if
    none): the split of a run over processes counts them in the bin that draws them."""
    p = Path(path)
    return {k: float(v) for k, v in json.loads(p.read_text()).get("reports", {}).items()} if p.is_file() else {}


def record_quick_seconds(results: Sequence[ClaimResult], path: str | Path = QUICK_SECONDS,
                         reports: dict[str, float] | None = None) -> Path:
    """Store the seconds of quick-budget results (``run(budget="quick")``) for :func:`table`, and of the sources'
    report figures (``reports``: {group: seconds}) for the split over processes; other ids and groups keep their
    earlier record, ids no longer registered are dropped."""
    if any(r.details.get("budget") != "quick" for r in results):
        raise GeomjaxError("record_quick_seconds: every result must come from budget 'quick'")
    rec = load_quick_seconds(path) | {r.id: float(r.details["seconds"]) for r in results if "seconds" in r.details}
    rep = load_report_seconds(path) | {g: round(float(v), 3) for g, v in (reports or {}).items()}
    known = {c.id for c in all_claims()}
    note = ("wall-clock seconds of each claim's check at budget quick (`geomjax verify --budget quick`, "
            "details.seconds) on a 2-core CPU, often under load: a rough cost, not a benchmark; reports: the "
            "seconds of each source's report figures in that run")
    Path(path).write_text(json.dumps({"budget": "quick", "note": note,
                                      "seconds": {k: rec[k] for k in sorted(rec) if k in known},
                                      "reports": {g: rep[g] for g in sorted(rep)}}, indent=1) + "\n")
    return Path(path)


def table(select: str | Sequence[str] | None = None) -> list[ClaimInfo]:
    """Every registered claim (or those matching ``select``, see :func:`~geomjax.claims.registration.select_claims`) with its source,
    kind, rule and recorded cost — read from the registry and the recorded timings, without checking
    (or compiling) anything. A pattern that matches no claim raises :class:`GeomjaxError`.

    Example:
      >>> rows = table("wertich.s4_3_2")
      >>> [(r.id, r.kind, r.rule) for r in rows][:1]
      [('wertich.s4_3_2.approx_corrected', 'deterministic', 'tolerance')]
    """
    quick, full = load_quick_seconds(), load_full_verdicts()
    rows = []
    for c in _select_strict(select, "table"):
        rule = {MonteCarloRule: "monte_carlo", Tolerance: "tolerance", Inequality: "inequality"}[type(c.rule)]
        sq = quick.get(c.id)
        sf = full.get(c.id, {}).get("seconds")
        sf = None if sf is None else float(sf)
        rows.append(ClaimInfo(id=c.id, source=c.source, kind=c.kind, rule=rule, seconds_quick=sq,
                              seconds_full=sf, cost=cost_class(max((s for s in (sq, sf) if s is not None), default=None))))
    return rows


def format_table(rows: Sequence[ClaimInfo]) -> str:
    """Plain-text columns of :func:`table` rows (``geomjax verify --list``)."""
    def sec(x):
        return "—" if x is None else f"{x:.3g}"

    head = ("id", "kind", "rule", "quick s", "full s", "cost", "source")
    body = [(r.id, r.kind, r.rule, sec(r.seconds_quick), sec(r.seconds_full), r.cost, r.source) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    return "\n".join("  ".join(x[i].ljust(widths[i]) for i in range(len(widths))) + "  " + x[-1]
                     for x in [head, *body]) + "\n"


# ----------------------------------------------------------------------------------------------
