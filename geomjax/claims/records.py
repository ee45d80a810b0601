"""Records of results: the recorded ``full`` verdicts (quick verdicts must never contradict them),
``claims.json`` / ``claims.md`` of a run."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax

from geomjax.claims._format import _fmt, _jsonable, _md_escape
from geomjax.claims.claim import ClaimResult
from geomjax.claims.registration import _REGISTRY, _discover, all_claims
from geomjax.claims.rules import OWN_READINGS, VERDICTS


FULL_VERDICTS = Path(__file__).with_name("full_verdicts.json")


def tally(verdicts: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Verdict counts of ``{id: verdict}`` (a run's results or recorded verdicts), the sources' own statements
    (readings "literal" and "intended") apart from geomjax's own readings (:data:`OWN_READINGS`: a correction or an
    extension is never one of the source's statements).

    Returns:
      ``{"statements": {verdict: n}, "readings": {verdict: n}}`` (every verdict of :data:`VERDICTS` present).
    """
    _discover({cid.split(".", 1)[0] for cid in verdicts})  # the claims' readings: their sources' modules only
    out = {part: dict.fromkeys(VERDICTS, 0) for part in ("statements", "readings")}
    for cid, verdict in verdicts.items():
        entry = _REGISTRY.get(cid)
        out["readings" if entry is not None and entry[0].reading in OWN_READINGS else "statements"][verdict] += 1
    return out


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_full_verdicts(path: str | Path = FULL_VERDICTS) -> dict:
    """The recorded ``full`` results: {id: {"verdict", "reason", "date", "commit", "source", "statement",
    "margin", "margin_origin", "detectable_error", "n", "witnesses"}} ({} if none)."""
    p = Path(path)
    return json.loads(p.read_text())["claims"] if p.is_file() else {}


def record_full_verdicts(results: Sequence[ClaimResult], path: str | Path = FULL_VERDICTS) -> Path:
    """Update the recorded ``full`` results with ``results`` (run at budget "full"), stamped with the date
    and commit; claims not in ``results`` keep their earlier record (so per-source runs accumulate). Ids
    no longer registered are dropped."""
    if any(r.details.get("budget") != "full" for r in results):
        raise ValueError("record_full_verdicts: every result must come from budget 'full'")
    p = Path(path)
    rec = load_full_verdicts(p)
    date, commit = time.strftime("%Y-%m-%d", time.gmtime()), _git_commit()
    for r in results:
        rec[r.id] = _jsonable({"verdict": r.verdict, "reason": r.reason, "date": date, "commit": commit,
                               "source": r.source, "statement": r.statement, "margin": r.margin,
                               "margin_origin": r.margin_origin, "detectable_error": r.detectable_error,
                               "n": r.n, "seconds": r.details.get("seconds"), "witnesses": list(r.witnesses),
                               **_draws_record(r), **_sequential_record(r)})
    known = {c.id for c in all_claims()}
    rec = {k: rec[k] for k in sorted(rec) if k in known}
    p.write_text(json.dumps({"budget": "full", "claims": rec}, indent=1, ensure_ascii=False) + "\n")
    return p


def contradicts(verdict: str, recorded: str) -> bool:
    """True iff one verdict is "holds" and the other "does not hold" (inconclusive never contradicts)."""
    return {verdict, recorded} == {"holds", "does not hold"}


# ----------------------------------------------------------------------------------------------
# Erratum


def results_as_records(results: Sequence[ClaimResult]) -> dict:
    """{id: record} of results, the form :func:`~geomjax.claims.erratum.to_erratum` reads (date/commit left empty)."""
    return {r.id: _jsonable({"verdict": r.verdict, "reason": r.reason, "source": r.source, "statement": r.statement,
                             "margin": r.margin, "margin_origin": r.margin_origin, "witnesses": list(r.witnesses),
                             **_draws_record(r)})
            for r in results}


_DRAWS_KEYS = ("draws", "failing", "undecided", "fraction_failing", "interval", "allowed_fraction")


def _sequential_record(r: ClaimResult) -> dict:
    """{"sampling": {samples, cpu_seconds, rounds, stopped}} of a Monte Carlo result drawn in rounds, else {}."""
    seq = r.details.get("sequential")
    if not seq:
        return {}
    return {"sampling": {k: seq[k] for k in ("samples", "cpu_seconds", "rounds", "stopped", "samples_needed") if k in seq}}


def _draws_record(r: ClaimResult) -> dict:
    """{"draws": {...}} for a result decided over random draws (:func:`~geomjax.claims.rules.over_draws`), else {}."""
    if "interval" not in r.details or "draws" not in r.details:
        return {}
    return {"draws": {k: r.details[k] for k in _DRAWS_KEYS if k in r.details}}


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------


def _check_column(r: ClaimResult) -> str:
    d = r.details
    if "error" in d:
        return "error: " + d["error"][:80]
    if d.get("kind") == "monte_carlo":
        seq = d.get("sequential") or {}
        rounds = (f"; {seq['rounds']} round(s), {_fmt(seq.get('cpu_seconds'))} CPU s, stopped: {seq['stopped']}"
                  if "rounds" in seq else "")
        return f"z = {d['worst_abs_z']:.3g} (n = {d['n_samples']}, {d['dtype']}{rounds})"
    if "worst_ratio_lhs_over_rhs" in d:
        if r.verdict == "does not hold":
            return f"worst certified lhs/rhs = {d['worst_ratio_lower_over_rhs']:.3g} ({d['n_violations_certified']}/{d['n_instances']} violations)"
        return f"worst lhs/rhs = {d['worst_ratio_lhs_over_rhs']:.3g} over {d['n_instances']}"
    if "worst_abs_error" in d:
        return f"worst |err| = {d['worst_abs_error']:.3g} (allowed {d['allowed_at_worst']:.3g})"
    return ""


def _verdict_column(r: ClaimResult) -> str:
    v = f"**{r.verdict}**"
    if r.verdict == "inconclusive" and r.reason:
        v += f" ({r.reason})"
    return v


def _witness_text(w: dict, inequality: bool = False) -> str:
    sem = f" ± {_fmt(w['sem'])}" if w.get("sem") not in (None, 0, 0.0) else ""
    if inequality:  # estimate = lhs, predicted = rhs at the worst instance
        return f"{w['method']}: lhs {_fmt(w['estimate'])}{sem} vs rhs {_fmt(w['predicted'])} (needs lhs ≤ rhs)"
    return f"{w['method']}: {_fmt(w['estimate'])}{sem} vs {_fmt(w['predicted'])}"


def to_markdown(results: Sequence[ClaimResult]) -> str:
    """A Markdown table of results (one row per claim: margin and its origin, detectable error, n,
    verdict with its reason), the witnesses of every refutation, observations and the rules used."""
    lines = [
        "| id | source | statement | predicted | estimate | sem | check | margin | detectable | n | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            "| "
            + " | ".join(
                _md_escape(v)
                for v in (
                    r.id, r.source, r.statement, _fmt(r.predicted), _fmt(r.estimate), _fmt(r.sem),
                    _check_column(r), _fmt(r.margin), _fmt(r.detectable_error), _fmt(r.n), _verdict_column(r),
                )
            )
            + " |"
        )
    wit = [(r.id, r.witnesses, str(r.details.get("rule", "")).startswith("holds iff lhs")) for r in results if r.witnesses]
    if wit:
        lines += ["", "Witnesses (two independent computations behind each refutation):", ""]
        lines += [f"- `{i}`: " + "; ".join(_md_escape(_witness_text(w, ineq)) for w in ws) for i, ws, ineq in wit]
    obs = [(r.id, r.observations) for r in results if r.observations]
    if obs:
        lines += ["", "Observations (reported, not verdicts):", ""]
        lines += [f"- `{i}`: {_md_escape(json.dumps(_jsonable(o), ensure_ascii=False))}" for i, o in obs]
    origins = [(r.id, r.margin_origin) for r in results if r.margin_origin]
    if origins:
        lines += ["", "Margins (where each number comes from):", ""]
        lines += [f"- `{i}`: {_md_escape(o)}" for i, o in origins]
    rules = sorted({r.details.get("rule", "") for r in results} - {""})
    if rules:
        lines += ["", "Verdict rules:", ""] + [f"- {_md_escape(x)}" for x in rules]
    notes = [(r.id, r.details["notes"]) for r in results if r.details.get("notes")]
    if notes:
        lines += ["", "Notes:", ""] + [f"- `{i}`: {_md_escape(n)}" for i, n in notes]
    return "\n".join(lines) + "\n"


def write_results(results: Sequence[ClaimResult], out_dir: str | Path, *, budget: str = "", seed: int = 0) -> tuple[Path, Path]:
    """Write ``claims.json`` (metadata + one object per result) and ``claims.md`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    payload = {
        "budget": budget,
        "seed": seed,
        "jax_version": jax.__version__,
        "counts": counts,
        "results": [r.to_dict() for r in results],
    }
    jpath = out / "claims.json"
    jpath.write_text(json.dumps(payload, indent=2, ensure_ascii=False))
    mpath = out / "claims.md"
    header = (
        f"# Claims checked by geomjax\n\nbudget: {budget}, seed: {seed}; "
        + ", ".join(f"{v}: {n}" for v, n in counts.items())
        + "\n\n"
    )
    mpath.write_text(header + to_markdown(results))
    return jpath, mpath
