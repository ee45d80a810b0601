"""Registry of checked statements: Claim, verdict rules, ClaimResult, run().

A :class:`Claim` is one quantitative statement of a source document, with the place it is printed
(``source``, e.g. "Song & Zhong Theorem 1, eq. (6)"), what it predicts, how to check it, and the
rule that turns the check into a verdict:

* Monte Carlo claims (``sampler`` given): the mean of ``sampler(key)`` is estimated with
  :func:`geomjax.montecarlo.estimate`; the claim **holds** when |estimate − predicted| ≤ n_sigma·sem
  (n_sigma = 5 by default) for every element, otherwise it **does not hold**; the z-score is
  reported. A non-finite or zero sem with a nonzero error is "inconclusive".
* Deterministic claims (``evaluate`` given): the evaluator returns an :class:`Evaluation`, judged
  by the claim's rule: :class:`Tolerance` (|value − predicted| ≤ atol + rtol·|predicted|; reports the
  worst error) or :class:`Inequality` (lhs ≤ rhs for every instance; reports the worst ratio and
  margin; with a certified interval [lhs_lower, lhs] for the left side it is "holds" when
  lhs ≤ rhs − slack everywhere, "does not hold" when lhs_lower > rhs + slack somewhere, and
  "inconclusive" otherwise).

Claims live in modules ``geomjax.claims.<source>`` (``song_zhong``, later ``wertich``, ``bao``,
``clock``) that call :func:`register` on import; :func:`all_claims` and :func:`run` import every
such module that exists.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import math
import pkgutil
import time
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np

__all__ = [
    "Claim",
    "ClaimResult",
    "Evaluation",
    "MonteCarloRule",
    "Tolerance",
    "Inequality",
    "register",
    "unregister",
    "all_claims",
    "select_claims",
    "run",
    "run_claim",
    "write_results",
    "to_markdown",
    "BUDGETS",
    "VERDICTS",
]

BUDGETS = ("quick", "full")
VERDICTS = ("holds", "does not hold", "inconclusive")
Budget = Literal["quick", "full"]

# ----------------------------------------------------------------------------------------------
# Rules and evaluations
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MonteCarloRule:
    """|estimate − predicted| ≤ n_sigma · sem, elementwise (DESIGN.md: n_sigma = 5)."""

    n_sigma: float = 5.0

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return f"holds iff |estimate − predicted| ≤ {self.n_sigma:g}·sem (every element)"


@dataclass(frozen=True)
class Tolerance:
    """|value − predicted| ≤ atol + rtol·|predicted|, elementwise."""

    rtol: float = 1e-10
    atol: float = 0.0

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return f"holds iff |value − predicted| ≤ {self.atol:g} + {self.rtol:g}·|predicted| (every element)"


@dataclass(frozen=True)
class Inequality:
    """lhs ≤ rhs for every instance (``slack`` per instance absorbs certified rounding)."""

    def describe(self) -> str:
        """The rule in words (shown under the Markdown table)."""
        return (
            "holds iff lhs ≤ rhs − slack for every instance; does not hold iff lhs_lower > rhs + slack "
            "for some instance (lhs_lower = lhs unless a certified lower bound is given); else inconclusive"
        )


@dataclass
class Evaluation:
    """What a deterministic evaluator returns.

    Attributes:
      value: array compared with ``predicted`` (Tolerance rule).
      lhs, rhs: arrays of the two sides (Inequality rule), same shape.
      lhs_lower: optional certified lower bound of lhs (Inequality rule); defaults to lhs.
      slack: optional non-negative array/float, an error bar on rhs − lhs (e.g. rounding).
      details: JSON-able extra information (tables, parameters, variants).
    """

    value: Any = None
    lhs: Any = None
    rhs: Any = None
    lhs_lower: Any = None
    slack: Any = 0.0
    details: dict = field(default_factory=dict)


Rule = MonteCarloRule | Tolerance | Inequality


@dataclass(frozen=True)
class Claim:
    """One checked statement of a source document.

    Attributes:
      id: unique dotted id, "<module>.<name>" (e.g. "song_zhong.theorem1.printed").
      source: document and equation as printed there, e.g. "Song & Zhong Theorem 1, eq. (6)".
      statement: the statement in words (and symbols).
      predicted: closed-form value (float or array), a callable ``budget -> value``, or for
        inequality claims a description string (the rhs comes from the evaluator).
      sampler: Monte Carlo claims: ``key -> pytree`` drawing ONE sample whose mean should equal
        ``predicted``.
      evaluate: deterministic claims: ``(budget, key) -> Evaluation``.
      rule: :class:`MonteCarloRule`, :class:`Tolerance` or :class:`Inequality`.
      n_samples: Monte Carlo sample counts per budget.
      dtype: "float64" (default) or "float32" for the Monte Carlo accumulation.
      chunk: Monte Carlo chunk size.
      notes: free text shown in the report (e.g. how the printed statement was read).
    """

    id: str
    source: str
    statement: str
    predicted: Any = None
    sampler: Callable | None = None
    evaluate: Callable | None = None
    rule: Rule = MonteCarloRule()
    n_samples: Mapping[str, int] = field(default_factory=lambda: {"quick": 2**14, "full": 2**20})
    dtype: str = "float64"
    chunk: int = 4096
    notes: str = ""

    def __post_init__(self):
        if not self.id or any(ch.isspace() for ch in self.id):
            raise ValueError(f"Claim: id must be a non-empty string without spaces, got {self.id!r}")
        if (self.sampler is None) == (self.evaluate is None):
            raise ValueError(f"Claim {self.id}: give exactly one of `sampler` (Monte Carlo) or `evaluate`")
        if self.sampler is not None and not isinstance(self.rule, MonteCarloRule):
            raise ValueError(f"Claim {self.id}: a Monte Carlo claim needs a MonteCarloRule")
        if self.evaluate is not None and isinstance(self.rule, MonteCarloRule):
            raise ValueError(f"Claim {self.id}: a deterministic claim needs a Tolerance or Inequality rule")
        if self.sampler is not None:
            missing = [b for b in BUDGETS if b not in self.n_samples]
            if missing:
                raise ValueError(f"Claim {self.id}: n_samples lacks budgets {missing}")
            if self.predicted is None:
                raise ValueError(f"Claim {self.id}: a Monte Carlo claim needs a closed-form `predicted`")

    @property
    def group(self) -> str:
        """The source module short name (first component of the id)."""
        return self.id.split(".", 1)[0]

    @property
    def kind(self) -> str:
        return "monte_carlo" if self.sampler is not None else "deterministic"


@dataclass(frozen=True)
class ClaimResult:
    """Outcome of checking one claim.

    Attributes:
      id, source, statement: copied from the claim.
      predicted: closed-form value (or for inequalities the rhs at the worst instance).
      estimate: Monte Carlo mean / evaluated value / lhs at the worst instance.
      sem: standard error (Monte Carlo) or None.
      verdict: "holds", "does not hold" or "inconclusive".
      details: rule, z-score or worst margin/ratio, sample count, dtype, seconds, extra tables.
    """

    id: str
    source: str
    statement: str
    predicted: Any
    estimate: Any
    sem: Any
    verdict: str
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-able dict: the fields above plus ``z_score`` ((estimate − predicted)/sem for Monte
        Carlo claims, else None)."""
        return _jsonable(
            {
                "id": self.id,
                "source": self.source,
                "statement": self.statement,
                "predicted": self.predicted,
                "estimate": self.estimate,
                "sem": self.sem,
                "z_score": self.details.get("z"),
                "verdict": self.verdict,
                "details": self.details,
            }
        )


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------

_REGISTRY: dict[str, tuple[Claim, str]] = {}
_NOT_SOURCE_MODULES = {"registry"}


def register(claim: Claim) -> Claim:
    """Add ``claim`` to the registry (returns it, so it can be used as an expression).

    Re-registering an id from the same module (e.g. after a reload) replaces it; the same id from
    another module raises ValueError.
    """
    if not isinstance(claim, Claim):
        raise TypeError(f"register: expected a Claim, got {type(claim).__name__}")
    origin = _caller_module()
    if claim.id in _REGISTRY and _REGISTRY[claim.id][1] != origin:
        raise ValueError(
            f"register: claim id {claim.id!r} is already registered by {_REGISTRY[claim.id][1]}"
        )
    _REGISTRY[claim.id] = (claim, origin)
    return claim


def unregister(claim_id: str) -> None:
    """Remove a claim (tests use this to clean up claims they registered)."""
    _REGISTRY.pop(claim_id, None)


def _caller_module() -> str:
    import inspect

    frame = inspect.currentframe()
    try:
        f = frame.f_back.f_back if frame and frame.f_back else None
        return f.f_globals.get("__name__", "?") if f else "?"
    finally:
        del frame


def _source_modules() -> list[str]:
    import geomjax.claims as pkg

    return sorted(
        name
        for _, name, ispkg in pkgutil.iter_modules(pkg.__path__)
        if not name.startswith("_") and name not in _NOT_SOURCE_MODULES
    )


def _discover(only: set[str] | None = None) -> None:
    """Import geomjax.claims.<source> modules (those present); a broken module warns."""
    for name in _source_modules():
        if only is not None and name not in only:
            continue
        try:
            importlib.import_module(f"geomjax.claims.{name}")
        except Exception as exc:  # a module under construction must not hide the others
            if only is not None:
                raise
            warnings.warn(f"geomjax.claims: could not import geomjax.claims.{name}: {exc!r}", stacklevel=3)


def all_claims() -> list[Claim]:
    """Every registered claim (after importing every geomjax.claims.<source> module), sorted by id."""
    _discover()
    return [c for _, (c, _) in sorted(_REGISTRY.items())]


def _matches(claim: Claim, pattern: str) -> bool:
    p = pattern.strip()
    if not p:
        return False
    pl = p.lower()
    return (
        fnmatch.fnmatchcase(claim.id, p)
        or fnmatch.fnmatchcase(claim.id, p + ".*")
        or claim.group == p
        or pl in claim.source.lower()
    )


def select_claims(select: str | Sequence[str] | None = None) -> list[Claim]:
    """Claims matching ``select``.

    Args:
      select: None (all), or one pattern or a list of patterns. A pattern matches a claim when it
        is an id glob ("song_zhong.theorem1.*"), an id prefix ("song_zhong.theorem1"), the source
        module ("song_zhong", "bao"), or a case-insensitive substring of the printed source
        ("Lemma 2", "Song & Zhong").

    Returns:
      Matching claims sorted by id (possibly empty).
    """
    claims = all_claims()
    if select is None:
        return claims
    patterns = [select] if isinstance(select, str) else list(select)
    return [c for c in claims if any(_matches(c, p) for p in patterns)]


# ----------------------------------------------------------------------------------------------
# Running claims
# ----------------------------------------------------------------------------------------------


def _claim_key(seed: int, claim_id: str):
    """Independent key per claim: fold_in(key(seed), crc32(id)); unaffected by the selection."""
    return jax.random.fold_in(jax.random.key(seed), zlib.crc32(claim_id.encode()) & 0x7FFFFFFF)


def _resolve_predicted(claim: Claim, budget: str):
    p = claim.predicted
    return p(budget) if callable(p) else p


def _summary(x):
    """Scalar if size 1, else a list (JSON-friendly)."""
    a = np.asarray(x, dtype=float)
    return float(a.reshape(())) if a.size == 1 else a.tolist()


def _judge_monte_carlo(claim: Claim, budget: str, key, mesh=None) -> ClaimResult:
    from geomjax import montecarlo

    rule: MonteCarloRule = claim.rule  # type: ignore[assignment]
    n = int(claim.n_samples[budget])
    chunk = min(claim.chunk, n)
    if mesh is not None:  # the driver needs a multiple of the device count
        n_dev = int(mesh.devices.size)
        chunk = -(-chunk // n_dev) * n_dev
    est = montecarlo.estimate(claim.sampler, key, n, chunk=chunk, mesh=mesh, dtype=claim.dtype)
    out = est.as_numpy()
    flat = lambda t: np.concatenate([np.asarray(l, dtype=float).reshape(-1) for l in jax.tree_util.tree_leaves(t)])
    mean, sem = flat(out["mean"]), flat(out["sem"])
    if mean.size == 1:
        mean, sem = mean.reshape(()), sem.reshape(())
    pred = np.broadcast_to(np.asarray(_resolve_predicted(claim, budget), dtype=float), mean.shape)
    err = np.abs(mean - pred)
    finite = np.isfinite(sem) & (sem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # z = (estimate − predicted)/sem; a zero sem gives 0 (exact agreement) or ±inf
        z = np.where(finite, (mean - pred) / np.where(finite, sem, 1.0), np.where(err == 0, 0.0, np.inf * np.sign(mean - pred)))
    if np.all(finite):
        verdict = "holds" if np.all(err <= rule.n_sigma * sem) else "does not hold"
    elif np.all(err[~finite] == 0) and np.all(err[finite] <= rule.n_sigma * sem[finite]):
        verdict = "holds"
    else:
        verdict = "inconclusive"
    worst = int(np.argmax(np.where(np.isnan(z), np.inf, np.abs(z)))) if z.size else 0
    details = {
        "kind": "monte_carlo",
        "rule": rule.describe(),
        "z": _summary(z),
        "worst_abs_z": float(np.abs(z.reshape(-1)[worst])) if z.size else float("nan"),
        "n_samples": int(out["n"]),
        "dtype": out["dtype"],
    }
    return ClaimResult(
        id=claim.id,
        source=claim.source,
        statement=claim.statement,
        predicted=_summary(pred),
        estimate=_summary(mean),
        sem=_summary(sem),
        verdict=verdict,
        details=details,
    )


def _judge_deterministic(claim: Claim, budget: str, key) -> ClaimResult:
    ev = claim.evaluate(budget, key)
    if not isinstance(ev, Evaluation):
        raise TypeError(f"claim {claim.id}: evaluate must return an Evaluation, got {type(ev).__name__}")
    rule = claim.rule
    details: dict[str, Any] = {"kind": "deterministic", "rule": rule.describe()}
    if isinstance(rule, Tolerance):
        value = np.asarray(ev.value, dtype=float)
        pred = np.broadcast_to(np.asarray(_resolve_predicted(claim, budget), dtype=float), value.shape)
        err = np.abs(value - pred)
        allowed = rule.atol + rule.rtol * np.abs(pred)
        if not np.all(np.isfinite(value)):
            verdict = "inconclusive"
        else:
            verdict = "holds" if np.all(err <= allowed) else "does not hold"
        worst = int(np.argmax(err - allowed)) if err.size else 0
        details.update(
            worst_abs_error=float(err.reshape(-1)[worst]),
            allowed_at_worst=float(allowed.reshape(-1)[worst]),
            worst_margin=float((allowed - err).reshape(-1)[worst]),
        )
        predicted, estimate = _summary(pred), _summary(value)
    else:  # Inequality
        lhs = np.asarray(ev.lhs, dtype=float)
        rhs = np.asarray(ev.rhs, dtype=float)
        if lhs.shape != rhs.shape:
            raise ValueError(f"claim {claim.id}: lhs shape {lhs.shape} != rhs shape {rhs.shape}")
        lower = lhs if ev.lhs_lower is None else np.asarray(ev.lhs_lower, dtype=float)
        slack = np.broadcast_to(np.asarray(ev.slack, dtype=float), lhs.shape)
        if not (np.all(np.isfinite(lhs)) and np.all(np.isfinite(rhs)) and np.all(np.isfinite(lower))):
            verdict = "inconclusive"
        elif np.all(lhs <= rhs - slack):
            verdict = "holds"
        elif np.any(lower > rhs + slack):
            verdict = "does not hold"
        else:
            verdict = "inconclusive"
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio_up = np.where(rhs > 0, lhs / rhs, np.inf)
            ratio_lo = np.where(rhs > 0, lower / rhs, np.inf)
        worst = int(np.argmax(ratio_lo if verdict == "does not hold" else ratio_up))
        details.update(
            n_instances=int(lhs.size),
            worst_ratio_lhs_over_rhs=float(ratio_up.reshape(-1)[worst]),
            worst_ratio_lower_over_rhs=float(ratio_lo.reshape(-1)[worst]),
            worst_margin_rhs_minus_lhs=float(np.min(rhs - lhs)),
            n_violations_certified=int(np.sum(lower > rhs + slack)),
            n_not_certified=int(np.sum(lhs > rhs - slack)),
        )
        predicted = float(rhs.reshape(-1)[worst]) if rhs.size else None
        estimate = float((lower if verdict == "does not hold" else lhs).reshape(-1)[worst]) if lhs.size else None
    details.update(_jsonable(ev.details))
    return ClaimResult(
        id=claim.id,
        source=claim.source,
        statement=claim.statement,
        predicted=predicted,
        estimate=estimate,
        sem=None,
        verdict=verdict,
        details=details,
    )


def run_claim(claim: Claim, budget: Budget = "quick", seed: int = 0, mesh=None) -> ClaimResult:
    """Check one claim (not necessarily registered) and return its :class:`ClaimResult`.

    Args:
      claim: the :class:`Claim`.
      budget: "quick" or "full" (sample counts / instance sizes).
      seed: base seed; the claim's key is ``fold_in(key(seed), crc32(claim.id))``.
      mesh: optional 1-D "data" mesh; Monte Carlo claims then shard their samples over it
        (the samples, hence the estimate up to rounding, are the same as without it).
    """
    if budget not in BUDGETS:
        raise ValueError(f"run: budget must be one of {BUDGETS}, got {budget!r}")
    if not isinstance(claim, Claim):
        raise TypeError(f"run_claim: expected a Claim, got {type(claim).__name__}")
    key = _claim_key(seed, claim.id)
    t0 = time.perf_counter()
    if claim.sampler is not None:
        res = _judge_monte_carlo(claim, budget, key, mesh=mesh)
    else:
        res = _judge_deterministic(claim, budget, key)
    res.details["seconds"] = round(time.perf_counter() - t0, 3)
    res.details["budget"] = budget
    res.details["seed"] = seed
    if claim.notes:
        res.details["notes"] = claim.notes
    return res


def run(
    select: str | Sequence[str] | None = None,
    budget: Budget = "quick",
    seed: int = 0,
    out_dir: str | Path | None = None,
    errors: Literal["raise", "record"] = "raise",
    mesh=None,
    progress: bool = False,
) -> list[ClaimResult]:
    """Check every selected claim and optionally write ``claims.json`` and ``claims.md``.

    Args:
      select: see :func:`select_claims` (None = every claim).
      budget: "quick" (seconds, for tests and CI) or "full" (more samples / larger instances).
      seed: base seed; claim ``id`` uses ``fold_in(key(seed), crc32(id))``, so a claim's result
        does not depend on which other claims are selected.
      out_dir: directory to write ``claims.json`` and ``claims.md`` into (created if needed).
      errors: "raise" (default) re-raises an exception from a claim; "record" turns it into an
        "inconclusive" result whose details hold the error.
      mesh: optional 1-D "data" mesh over which Monte Carlo samples are sharded.
      progress: show a tqdm bar over the claims (stderr) naming the claim being checked.

    Returns:
      One :class:`ClaimResult` per selected claim, sorted by id.

    Raises:
      ValueError: unknown budget or errors mode, or a ``select`` pattern that matches no claim.
    """
    if budget not in BUDGETS:
        raise ValueError(f"run: budget must be one of {BUDGETS}, got {budget!r}")
    if errors not in ("raise", "record"):
        raise ValueError(f"run: errors must be 'raise' or 'record', got {errors!r}")
    selected = select_claims(select)
    if select is not None:
        patterns = [select] if isinstance(select, str) else list(select)
        registered = all_claims()
        unmatched = [p for p in patterns if not any(_matches(c, p) for c in registered)]
        if unmatched:
            groups = sorted({c.group for c in registered})
            raise ValueError(
                f"run: select pattern(s) {unmatched} match no claim; use an id glob, an id prefix, "
                f"a source module {groups} or a substring of a printed source"
            )
    results = []
    bar = None
    if progress:
        from tqdm.auto import tqdm  # display only

        bar = tqdm(selected, desc="claims", unit="claim", leave=True)
    for claim in bar if bar is not None else selected:
        if bar is not None:
            bar.set_postfix_str(claim.id, refresh=True)
        try:
            results.append(run_claim(claim, budget=budget, seed=seed, mesh=mesh))
        except Exception as exc:
            if errors == "raise":
                raise
            results.append(
                ClaimResult(
                    id=claim.id,
                    source=claim.source,
                    statement=claim.statement,
                    predicted=None,
                    estimate=None,
                    sem=None,
                    verdict="inconclusive",
                    details={"error": repr(exc), "budget": budget, "seed": seed},
                )
            )
    if out_dir is not None:
        write_results(results, out_dir, budget=budget, seed=seed)
    return results


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------


def _jsonable(x):
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, bool)) or x is None:
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        return f if math.isfinite(f) else str(f)
    if isinstance(x, (np.ndarray, jax.Array)):
        return _jsonable(np.asarray(x).tolist())
    return repr(x)


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, (list, tuple)):
        if len(x) > 4:
            return "[" + ", ".join(_fmt(v) for v in x[:3]) + f", … ({len(x)} values)]"
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _check_column(r: ClaimResult) -> str:
    d = r.details
    if "error" in d:
        return "error: " + d["error"][:80]
    if d.get("kind") == "monte_carlo":
        return f"z = {d['worst_abs_z']:.3g} (n = {d['n_samples']}, {d['dtype']})"
    if "worst_ratio_lhs_over_rhs" in d:
        if r.verdict == "does not hold":
            return f"worst certified lhs/rhs = {d['worst_ratio_lower_over_rhs']:.3g} ({d['n_violations_certified']}/{d['n_instances']} violations)"
        return f"worst lhs/rhs = {d['worst_ratio_lhs_over_rhs']:.3g} over {d['n_instances']}"
    if "worst_abs_error" in d:
        return f"worst |err| = {d['worst_abs_error']:.3g} (allowed {d['allowed_at_worst']:.3g})"
    return ""


def to_markdown(results: Sequence[ClaimResult]) -> str:
    """A Markdown table of results (one row per claim) followed by the verdict rules used."""
    lines = [
        "| id | source | statement | predicted | estimate | sem | check | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            "| "
            + " | ".join(
                _md_escape(v)
                for v in (
                    r.id,
                    r.source,
                    r.statement,
                    _fmt(r.predicted),
                    _fmt(r.estimate),
                    _fmt(r.sem),
                    _check_column(r),
                    f"**{r.verdict}**",
                )
            )
            + " |"
        )
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
