"""Source beside run: the table every experiment report opens with.

Each experiment keeps its source's setting and numbers in ONE place (``experiments/<name>/source.py``,
a :class:`Source`); its run builds :class:`Row` s (the run's number and a verdict per source number)
and :func:`source_section` renders them as the report's "Source vs this run" section. ``smoke`` runs
test the plumbing only: the section says so and every verdict becomes "not testable at this preset".

:func:`parse_source_table` reads the table back from a rendered ``report.md`` (the README's
experiment results are generated from the committed ``cpu`` reports with it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from geomjax.errors import GeomjaxError
from geomjax.analysis.report import Section, render_markdown

__all__ = ["HEADING", "PLUMBING_NOTICE", "VERDICTS", "Row", "Source", "SourceNumber", "parse_source_table",
           "replace_source_rows", "source_section", "verdict"]

HEADING = "Source vs this run"
VERDICTS = ("reproduced", "not reproduced", "not testable at this preset")
PLUMBING_NOTICE = ("This is a `smoke` run: it tests the plumbing only (shapes, files, figures). Its numbers are not "
                   "evidence for or against the source, so every verdict below is 'not testable at this preset' and "
                   "verdict statistics (correlations, significance) are suppressed.")
HEADER = ["quantity", "source (where)", "source value", "this run", "verdict", "note"]


@dataclasses.dataclass(frozen=True)
class SourceNumber:
    """One number (or qualitative finding) the source reports.

    Attributes:
      key: short identifier used by the run to attach its own number.
      quantity: what is measured, in words.
      where: section / figure / table of the source.
      value: the source's value as printed (text).
    """

    key: str
    quantity: str
    where: str
    value: str


@dataclasses.dataclass(frozen=True)
class Source:
    """A source experiment: citation, the setting it ran, and the numbers it reports."""

    citation: str
    setting: str
    numbers: tuple[SourceNumber, ...]

    def number(self, key: str) -> SourceNumber:
        """The :class:`SourceNumber` with ``key`` (GeomjaxError if absent)."""
        for n in self.numbers:
            if n.key == key:
                return n
        raise GeomjaxError(f"Source: no number {key!r} in {self.citation}; known: {[n.key for n in self.numbers]}")


@dataclasses.dataclass(frozen=True)
class Row:
    """This run's value for one source number and the verdict (one of :data:`VERDICTS`)."""

    key: str
    run: str
    verdict: str
    note: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise GeomjaxError(f"Row {self.key!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}")


def verdict(ok: bool | None) -> str:
    """``True`` → reproduced, ``False`` → not reproduced, ``None`` → not testable at this preset."""
    return VERDICTS[2] if ok is None else VERDICTS[0] if ok else VERDICTS[1]


def source_section(source: Source, preset: str, run_setting: str, departures: Sequence[str], rows: Sequence[Row],
                   *, plumbing_only: bool | None = None) -> Section:
    """The report's "Source vs this run" section: the source's setting and numbers (cited), this run's
    preset and where it departs, this run's numbers and a verdict per number.

    Args:
      source: the experiment's :class:`Source`.
      preset: the preset name; ``smoke`` (or ``plumbing_only=True``) forces every verdict to
        "not testable at this preset" and adds :data:`PLUMBING_NOTICE`.
      run_setting: this run's setting in words.
      departures: how this run departs from the source's setting (one phrase each).
      rows: one :class:`Row` per source number reported on (keys must exist in ``source``).
    """
    plumbing = preset == "smoke" if plumbing_only is None else plumbing_only
    s = Section(HEADING)
    if plumbing:
        s.paragraphs.append(PLUMBING_NOTICE)
    s.paragraphs.append(f"Source: {source.citation}. Its setting: {source.setting}")
    s.paragraphs.append(f"This run (preset `{preset}`): {run_setting}")
    if departures:
        s.paragraphs.append("Departures from the source: " + "; ".join(departures) + ".")
    table = []
    for r in rows:
        n = source.number(r.key)
        v = VERDICTS[2] if plumbing else r.verdict
        table.append([str(c).replace("|", "/") for c in (n.quantity, n.where, n.value, r.run, v, r.note)])
    s.table(HEADER, table)
    return s


def parse_source_table(markdown: str) -> list[dict[str, str]]:
    """Rows of the "Source vs this run" table of a rendered report (dicts keyed by the column names).

    Raises:
      GeomjaxError: the report has no such section (written before it existed, or not a report).
    """
    m = re.search(rf"^## {re.escape(HEADING)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    if m is None:
        raise GeomjaxError(f"parse_source_table: no '## {HEADING}' section; re-run the experiment to write one")
    lines = [ln for ln in m.group(1).splitlines() if ln.startswith("| ")]
    if not lines:
        raise GeomjaxError(f"parse_source_table: the '{HEADING}' section has no table")
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    return [dict(zip(head, (c.strip() for c in ln.strip()[2:-2].split(" | ")))) for ln in lines[1:]]


def replace_source_rows(markdown: str, source: Source, rows: Sequence[Row]) -> str:
    """A rendered report with the rows of its "Source vs this run" table rebuilt from ``rows`` (as
    :func:`source_section` renders them); every other line is kept. Used to re-apply changed verdict rules
    to a committed report from its saved metrics without re-running the experiment.

    Raises:
      GeomjaxError: the report has no such section or table (see :func:`parse_source_table`).
    """
    parse_source_table(markdown)  # validates the section and its table
    lines = markdown.split("\n")
    start = lines.index(f"## {HEADING}")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("| "))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    new = render_markdown("", [source_section(source, "", "", [], rows)]).split("\n")
    table = [ln for ln in new if ln.startswith("|")]
    return "\n".join(lines[:first] + table + lines[end:])
