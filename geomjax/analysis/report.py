"""Run directories and reports: config.json, metrics.json, figures/*.png, report.md, report.html.

A report is a list of :class:`Section` (heading, paragraphs, tables, figures). It is stored as
``report.json`` next to the rendered Markdown and HTML, so ``geomjax report RUN_DIR`` can render
it again. :func:`sections` writes the geometry study's report from a ``geomjax.analysis.study.StudyResult``
(with Song & Zhong's own Table 1-2 numbers quoted beside it). No JAX compute happens here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import json
import os
import platform
import shutil
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np


from geomjax.errors import GeomjaxError
from geomjax.base.io import SCHEDULE_KEY, to_jsonable
from geomjax.analysis.study import LayerMetrics, screenot_k_caution

__all__ = ["Section", "RunDir", "SCHEDULE_HEADING", "schedule_section", "check_reusable", "read_run_marker",
           "to_jsonable", "render_markdown", "render_html", "render_run", "sections", "PAPER_TABLE1", "PAPER_TABLE2",
           "METRIC_PANELS", "metric_columns", "paper_row", "paper_value", "machine_load"]


@dataclasses.dataclass
class Section:
    """One report section.

    Attributes:
      heading: section title.
      paragraphs: Markdown-free plain text paragraphs (rendered escaped in HTML).
      tables: list of {"caption": str, "header": [...], "rows": [[...], ...]}.
      figures: list of {"path": "figures/x.png", "caption": str} relative to the run directory.
    """

    heading: str
    paragraphs: list[str] = dataclasses.field(default_factory=list)
    tables: list[dict] = dataclasses.field(default_factory=list)
    figures: list[dict] = dataclasses.field(default_factory=list)

    def table(self, header: list[str], rows: list[list[Any]], caption: str = "") -> "Section":
        self.tables.append({"caption": caption, "header": list(header), "rows": [list(r) for r in rows]})
        return self

    def figure(self, path: str, caption: str = "") -> "Section":
        self.figures.append({"path": path, "caption": caption})
        return self


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.3e}"
        return f"{v:.4g}"
    return str(v)


def render_markdown(title: str, sections: list[Section], meta: dict | None = None) -> str:
    """Render sections as GitHub-flavoured Markdown."""
    out = [f"# {title}", ""]
    for k, v in (meta or {}).items():
        out.append(f"- **{k}**: {v}")
    if meta:
        out.append("")
    for s in sections:
        out += [f"## {s.heading}", ""]
        for p in s.paragraphs:
            out += [p, ""]
        for t in s.tables:
            if t.get("caption"):
                out += [f"*{t['caption']}*", ""]
            out.append("| " + " | ".join(map(str, t["header"])) + " |")
            out.append("|" + "---|" * len(t["header"]))
            for r in t["rows"]:
                out.append("| " + " | ".join(_fmt(v) for v in r) + " |")
            out.append("")
        for f in s.figures:
            out += [f"![{f.get('caption', '')}]({f['path']})", ""]
            if f.get("caption"):
                out += [f"*{f['caption']}*", ""]
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
figure{margin:1em 0} img{max-width:100%} figcaption{color:#555;font-size:.9em}
.meta{color:#555;font-size:.9em}
"""


def render_html(title: str, sections: list[Section], meta: dict | None = None) -> str:
    """Render sections as a standalone HTML page (figures referenced relatively)."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>"]
    if meta:
        out.append("<ul class='meta'>" + "".join(
            f"<li><b>{e(str(k))}</b>: {e(str(v))}</li>" for k, v in meta.items()) + "</ul>")
    for s in sections:
        out.append(f"<h2>{e(s.heading)}</h2>")
        out += [f"<p>{e(p)}</p>" for p in s.paragraphs]
        for t in s.tables:
            out.append("<table>")
            if t.get("caption"):
                out.append(f"<caption>{e(t['caption'])}</caption>")
            out.append("<tr>" + "".join(f"<th>{e(str(h))}</th>" for h in t["header"]) + "</tr>")
            for r in t["rows"]:
                out.append("<tr>" + "".join(f"<td>{e(_fmt(v))}</td>" for v in r) + "</tr>")
            out.append("</table>")
        for f in s.figures:
            out.append(f"<figure><img src='{e(f['path'])}' alt='{e(f.get('caption', ''))}'>"
                       f"<figcaption>{e(f.get('caption', ''))}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


RUN_MARKER = "run.json"
"""File that marks a geomjax run directory: command, options, status, start/end, versions."""
_REPORT_FILES = ("report.json", "report.md", "report.html", "metrics.json", RUN_MARKER)


def _normalized(options: Any) -> Any:
    return json.loads(json.dumps(to_jsonable(options), sort_keys=True))


def _options_diff(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k))
    return f"{old!r} -> {new!r}"


def read_run_marker(path: str | os.PathLike) -> dict | None:
    """The ``run.json`` of a run directory, or None when there is none (or it is unreadable)."""
    f = Path(path) / RUN_MARKER
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_reusable(path: str | os.PathLike, command: str, options: Any, *, overwrite: bool = False,
                   resumable: bool = False) -> None:
    """Refuse an ``--out`` folder that holds something this run must not replace or mix with.

    Accepted: a missing or empty folder; a run of the same command that did not finish; a finished
    run of the same command with the same options (it is replaced, or resumed when
    ``resumable``); anything with ``overwrite``.

    Raises:
      GeomjaxError: the folder holds files that are not a geomjax run, a run of another command,
        or a finished run with different options (the message names the difference and the fix).
    """
    path = Path(path)
    if overwrite or not path.exists():
        return
    if not path.is_dir():
        raise GeomjaxError(f"--out {str(path)!r} is a file, not a directory; choose another --out")
    if not any(path.iterdir()):
        return
    marker = read_run_marker(path)
    fix = "choose another --out or pass --overwrite to replace it"
    if marker is None and resumable and (path / "checkpoints").is_dir():
        return  # a training run written before run.json existed: its checkpoints resume
    if marker is None:
        raise GeomjaxError(f"--out {str(path)!r} already holds files that are not a geomjax run "
                           f"(no {RUN_MARKER}); {fix}")
    if marker.get("command") != command:
        raise GeomjaxError(f"--out {str(path)!r} holds a `geomjax {marker.get('command')}` run, not "
                           f"`geomjax {command}`; {fix}")
    old, new = marker.get("options"), _normalized(options)
    if old != new and (marker.get("status") == "complete" or resumable):
        what = "finished" if marker.get("status") == "complete" else "resumable"
        raise GeomjaxError(f"--out {str(path)!r} holds a {what} `geomjax {command}` run with other "
                           f"options ({_options_diff(old, new)}); {fix}")


class RunDir:
    """A run directory: ``config.json``, ``metrics.json``, ``figures/``, ``report.{json,md,html}``.

    Plain use (``RunDir(path)``) writes straight into ``path``. A CLI run passes ``options`` and
    becomes safe (:func:`check_reusable` first, then ``run.json``):

    * ``in_place=False`` (default): everything is written into a hidden temporary sibling
      ``.<name>.partial-<pid>`` and :meth:`RunDir.finish` renames it to ``path`` only when complete;
      :meth:`RunDir.abandon` (on error or interrupt) deletes it. An interrupted run never leaves a
      directory that looks complete.
    * ``in_place=True`` (``geomjax train``, whose checkpoints are resumable state): ``path`` is used
      directly; the previous report files are removed first and ``run.json`` says
      ``"status": "running"`` until :meth:`RunDir.finish` marks it ``"complete"``.

    Args:
      path: directory to write. ``None`` makes ``runs/<command>-<UTC timestamp>``.
      command: the CLI command, used for the default name and in ``run.json``.
      options: the run's options (JSON-able); None for a plain directory without ``run.json``.
      overwrite: replace whatever ``path`` holds.
      in_place: see above.
      argv: the command line recorded in ``run.json``.
    """

    def __init__(self, path: str | os.PathLike | None = None, command: str = "run", *,
                 options: Any = None, overwrite: bool = False, in_place: bool = False,
                 argv: list[str] | None = None):
        if path is None:
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
            path = Path("runs") / f"{command}-{stamp}"
        self.final = Path(path)
        self.command = command
        self._marker = None
        if options is not None:
            check_reusable(self.final, command, options, overwrite=overwrite, resumable=in_place)
            self._marker = {"command": command, "argv": list(argv or []), "options": _normalized(options),
                            "status": "running", "started": _utc_now(), "finished": None,
                            "versions": _versions()}
        self.in_place = in_place or options is None
        if self.in_place:
            self.path = self.final
            if options is not None and overwrite and self.path.is_dir():
                shutil.rmtree(self.path)
            for name in _REPORT_FILES if options is not None else ():
                (self.path / name).unlink(missing_ok=True)
        else:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_partials(self.final)
            self.path = self.final.parent / f".{self.final.name}.partial-{os.getpid()}"
            if self.path.exists():
                shutil.rmtree(self.path)
        self.figures = self.path / "figures"
        self.figures.mkdir(parents=True, exist_ok=True)
        if self._marker is not None:
            self.write_json(RUN_MARKER, self._marker)

    def finish(self, timing: dict | None = None) -> Path:
        """Mark the run complete (``run.json``, with the run's stage ``timing`` when given:
        ``geomjax.base.timing.Recording.to_json``) and, unless in place, move it to its final path."""
        if self._marker is not None:
            self._marker.update(status="complete", finished=_utc_now())
            if timing is not None:
                self._marker["timing"] = timing
            self.write_json(RUN_MARKER, self._marker)
        if not self.in_place:
            trash = None
            if self.final.exists():
                trash = self.final.parent / f".{self.final.name}.old-{os.getpid()}"
                os.rename(self.final, trash)
            os.rename(self.path, self.final)
            if trash is not None:
                shutil.rmtree(trash, ignore_errors=True)
            self.path, self.figures = self.final, self.final / "figures"
        return self.path

    def abandon(self) -> None:
        """Delete the temporary folder of an unfinished run (in place: leave it marked running)."""
        if not self.in_place and self.path != self.final:
            shutil.rmtree(self.path, ignore_errors=True)

    def write_json(self, name: str, obj: Any) -> Path:
        p = self.path / name
        p.write_text(json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")
        return p

    def write_config(self, config: Any, *, schedules: Mapping[str, dict] | None = None) -> Path:
        """Write the resolved configuration plus the environment (versions, devices, time).

        ``schedules``: the effective learning-rate schedule of every model the run trains, by name
        (:func:`geomjax.train.optim.schedule_record` dicts), written as ``"effective_schedule"``; the
        report shows them with :func:`schedule_section`.
        """
        import jax

        env = {
            "geomjax_command": self.command,
            "utc_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "machine": platform.machine(),
        }
        sched = {} if schedules is None else {SCHEDULE_KEY: dict(schedules)}
        return self.write_json("config.json", {"config": config} | sched | {"environment": env})

    def figure_path(self, name: str) -> tuple[Path, str]:
        """(absolute path to save to, path relative to the run directory for the report)."""
        return self.figures / name, f"figures/{name}"

    def write_report(self, title: str, sections: list[Section], meta: dict | None = None) -> None:
        """Write report.json, report.md and report.html."""
        self.write_json("report.json", {"title": title, "meta": meta or {},
                                        "sections": [dataclasses.asdict(s) for s in sections]})
        (self.path / "report.md").write_text(render_markdown(title, sections, meta))
        (self.path / "report.html").write_text(render_html(title, sections, meta))


SCHEDULE_HEADING = "Learning-rate schedule (as run)"


def schedule_section(schedules: Mapping[str, dict]) -> Section:
    """The report section of the effective schedules (issue 37): per trained model, the kind, warm-up W,
    horizon, length T and the learning rate at step 0, at the end of the warm-up (step W), at the last
    step (T − 1) and at the end of the run (step T), as read off the optax schedule that ran
    (:func:`geomjax.train.optim.schedule_record` dicts, by model name)."""
    s = Section(SCHEDULE_HEADING, [
        "Read off the optax schedule each model trained with (config.json: effective_schedule). Step s is the "
        "update from s to s + 1, so a run of T steps uses steps 0..T-1 and ends at step T. The horizon is the "
        "step at which the cosine reaches its final value (equal to T unless the config pins it)."])
    rows = []
    for name, r in schedules.items():
        T, W = r["total_steps"], r["warmup_steps"]
        rows.append([name, r["schedule"], W, "-" if r["horizon"] is None else r["horizon"], T, r["lr_first_step"],
                     r["lr_warmup_end"], r["lr_last_step"], r["lr_end"], r["end_lr"]])
    return s.table(["model", "schedule", "warm-up W", "horizon", "steps T", "lr at step 0", "lr at step W",
                    "lr at step T-1", "lr at step T", "configured final lr"], rows)


TIMING_HEADING = "Where the time went"


def timing_section(rec) -> Section:
    """The stage table of a run (a ``geomjax.base.timing.Recording`` so far): wall, CPU and compile seconds
    and the XLA programs built (compiled or read from the persistent cache) per stage, with the machine's
    load. The same numbers, with the report's own writing and the totals, are run.json's ``timing``."""
    s = Section(TIMING_HEADING, [
        "Wall seconds of every stage of this run, the CPU seconds of the whole process over the same span, the "
        "seconds JAX spent tracing, lowering and compiling (or reading compiled programs from the persistent "
        "cache) inside the stage, and the XLA programs it built (of which read from the cache). A stage marked "
        "'in parallel' ran in a worker thread beside the following stages, so its wall time overlaps theirs. "
        f"Measured under {machine_load()}. run.json's 'timing' adds the writing of this report and the totals."])
    rows = [[st.name + (" (in parallel)" if st.parallel else ""), round(st.wall_s, 2), round(st.cpu_s, 2),
             round(st.compile_s, 2), f"{st.programs} ({st.cache_hits} cached)"] for st in rec.stages]
    return s.table(["stage", "wall s", "CPU s", "compile s", "XLA programs"], rows)


def machine_load() -> str:
    """The machine's load as ``uptime`` prints it (1/5/15-minute load averages, ``os.getloadavg``) and its CPU
    count, as one sentence for a report's timing paragraph: a wall time means little without the load it ran
    under (the experiments' machine is shared)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not available on this platform
        return f"load average not available; {os.cpu_count()} CPUs"
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min, as uptime) on {os.cpu_count()} CPUs"


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("geomjax", "jax", "jaxlib", "flax", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def _remove_stale_partials(final: Path) -> None:
    """Delete ``.<name>.partial-<pid>`` siblings whose process is gone (killed runs)."""
    for p in final.parent.glob(f".{final.name}.partial-*"):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def render_run(path: str | os.PathLike) -> Path:
    """Re-render report.md and report.html of an existing run directory from its report.json."""
    path = Path(path)
    src = path / "report.json"
    if not src.is_file():
        raise GeomjaxError(
            f"{src} not found: {path} is not a geomjax run directory (run `geomjax demo` first)"
        )
    try:
        data = json.loads(src.read_text())
        sections = [Section(**s) for s in data["sections"]]
    except (ValueError, KeyError, TypeError) as e:
        raise GeomjaxError(f"{src} is corrupted ({type(e).__name__}: {e}); re-run the command") from None
    missing = [f["path"] for s in sections for f in s.figures if not (path / f["path"]).is_file()]
    if missing:
        raise GeomjaxError(f"run directory {path} is missing figures: {missing}")
    (path / "report.md").write_text(render_markdown(data["title"], sections, data.get("meta")))
    (path / "report.html").write_text(render_html(data["title"], sections, data.get("meta")))
    return path / "report.html"


# ---------------------------------------------------------------------------------------------
# The geometry study's report (geomjax.analysis.study.StudyResult -> sections)
# ---------------------------------------------------------------------------------------------

# Song & Zhong's own numbers, quoted for comparison (Table 1: mean (std) across layers, 6.4K
# samples; Table 2: out-of-distribution samples). Reference values only, never test targets.
PAPER_TABLE1 = [
    # model, corpus, rank, relative norm, inter sim, intra sim, incoh
    ("NanoGPT", "Shakespeare", "7.86 (1.96)", "0.66 (0.28)", "—", "—", "—"),
    ("GPT-2", "OpenWebText", "11.38 (1.86)", "0.31 (0.19)", "0.10 (0.01)", "0.44 (0.04)", "0.051 (0.05)"),
    ("GPT-2", "WikiText", "11.69 (1.64)", "0.31 (0.19)", "0.11 (0.01)", "0.41 (0.03)", "0.039 (0.04)"),
    ("BERT", "OpenWebText", "12.54 (2.73)", "0.24 (0.07)", "0.13 (0.04)", "0.26 (0.04)", "0.046 (0.05)"),
    ("BERT", "WikiText", "12.62 (2.70)", "0.24 (0.06)", "0.17 (0.03)", "0.31 (0.04)", "0.043 (0.04)"),
    ("BLOOM", "OpenWebText", "10.23 (1.31)", "0.16 (0.09)", "0.21 (0.12)", "0.48 (0.06)", "0.158 (0.23)"),
    ("Llama 2", "WikiText", "8.69 (0.91)", "0.14 (0.03)", "0.33 (0.20)", "1.00 (0.01)", "0.316 (0.27)"),
]
PAPER_TABLE2 = [
    ("NanoGPT", "WikiText", "7.86 (1.96)", "0.66 (0.28)"),
    ("GPT-2", "GitHub", "11.54 (1.55)", "0.31 (0.16)"),
    ("BERT", "GitHub", "12.46 (2.47)", "0.23 (0.04)"),
    ("BLOOM", "GitHub", "9.54 (0.84)", "0.14 (0.05)"),
]

# Per-layer figure: metric key -> (panel title, Table 1 column of the paper's row, or None), in the
# order of LayerMetrics' fields, from what each field declares (study._metric).
METRIC_PANELS = {f.name: (f.metadata["panel"], f.metadata["table1"])
                 for f in dataclasses.fields(LayerMetrics) if f.metadata.get("panel")}


def metric_columns(metrics_cls: type = LayerMetrics) -> list[dataclasses.Field]:
    """The per-layer table's metric columns: the fields of the metrics dataclass that declare one
    (``study._metric``), in field order."""
    return [f for f in dataclasses.fields(metrics_cls) if f.metadata.get("column")]


def paper_row(arch: str) -> tuple | None:
    """The paper's Table 1 row for the architecture (WikiText where it has one)."""
    rows = [r for r in PAPER_TABLE1 if r[0] == arch]
    wiki = [r for r in rows if r[1] == "WikiText"]
    return (wiki or rows or [None])[0]


def paper_value(cell: str) -> float | None:
    """The mean of a quoted "mean (std)" cell, None for "—"."""
    try:
        return float(cell.split()[0])
    except (ValueError, IndexError, AttributeError):
        return None


def _fmt_ms(na: dict | None, summary: dict, key: str) -> str:
    v = summary.get(key)
    return (na or {}).get(key, "—") if v is None else f"{v['mean']:.3g} ({v['std']:.2g})"


def _cell(m, key: str, na: dict):
    """A table cell: the value of the per-layer metric ``key`` (an attribute of ``m``, a
    :class:`~geomjax.analysis.study.LayerMetrics` or ``TokenClusters``), or the reason it is not available."""
    if key in na:  # the study's reason, or the report's (a singular Σ_W): the reason, never an unreliable value
        return na[key]
    v = None if m is None else getattr(m, key)
    return "n/a" if v is None else v


def _departure_sentence(summary: dict, arch: str, incoherence_caveat: str = "") -> str:
    """One sentence: where this run's layer means depart from the paper's closest Table 1 row; ``incoherence_caveat``
    follows it when the incoherence is among the compared metrics (:func:`_incoherence_caveat`)."""
    row = paper_row(arch)
    if row is None:
        return ""
    parts = []
    for key, (title, col) in METRIC_PANELS.items():
        ref = paper_value(row[col]) if col is not None else None
        ours = summary.get(key, {}).get("mean") if isinstance(summary.get(key), dict) else None
        if ref is None or ours is None or ref == 0:
            continue
        parts.append((abs(ours / ref - 1), f"{title} {ours:.3g} vs {ref:.3g} ({100 * (ours / ref - 1):+.0f}%)"))
    if not parts:
        return ""
    parts.sort(reverse=True)
    caveat = f" {incoherence_caveat}" if incoherence_caveat and any("incoherence" in p for _, p in parts) else ""
    return (f"Against the paper's {row[0]} row on {row[1]} (Table 1 means across layers), this run "
            f"departs most in " + "; then ".join(p for _, p in parts[:2])
            + ("; the other compared metrics: " + "; ".join(p for _, p in parts[2:]) if parts[2:] else "")
            + "." + caveat)


def _incoherence_caveat(r) -> str:
    """Why this run's incoherence max and the paper's are not like for like (sample sizes, the column's definition)."""
    n = r.n_positions * r.n_contexts
    mean = r.summary.get("incoherence_mean", {}).get("mean") if isinstance(r.summary.get("incoherence_mean"), dict) else None
    return (f"The incoherence gap is not like for like: a maximum grows with the number of pairs it is taken over, "
            f"here T·C = {r.n_positions} × {r.n_contexts} = {n:,} (for random directions in d = {r.d_model} its "
            f"expectation at these sizes is {r.incoherence_max_baseline:.3f}), while the paper's Table 1 is based on "
            "6.4K samples and its caption calls 'incoh' an averaged cosine similarity (§4 defines it as the maximum)"
            + (f"; this run's mean |cos(pos, ctx)| is {mean:.3g}" if mean is not None else "") + ".")


def _singular_scatter(n_points: int, n_classes: int, d: int) -> str | None:
    """The reason Tr(Σ_B Σ_W⁺) is not a finding at these sizes (Σ_W singular: fewer than d + K points), or None."""
    if n_points - n_classes >= d:
        return None
    return f"n/a: Σ_W singular ({n_points} points < d + K = {d + n_classes}); see the caution"


def _report_na(r) -> dict:
    """The study's "n/a" reasons plus the report's own: the context-level compactness where Σ_W is singular."""
    why = _singular_scatter(r.n_contexts, r.config.n_docs, r.d_model)
    return r.not_available | ({"cluster_compactness": why} if why and "cluster_compactness" not in r.not_available else {})


def _setup_section(r) -> Section:
    cfg, conv, n_layers = r.config, r.conventions, len(r.layers)
    tokens = r.n_contexts * cfg.seq_len
    s = Section("Setup")
    s.paragraphs += [
        f"Model: {r.model_desc}. Corpus: {cfg.corpus} ({len(r.doc_names)} documents, "
        f"{r.n_tokens_corpus} tokens). C = {r.n_contexts} windows ({cfg.n_docs} documents × "
        f"{cfg.windows_per_doc} non-overlapping windows each); T = {cfg.seq_len} tokens per window, "
        f"{r.n_positions} positions analysed ({'first token dropped' if cfg.drop_first else 'first token kept'}).",
        f"Every one of the {n_layers} hidden states was decomposed exactly (Song & Zhong eqs. "
        f"(2)-(3)) in one streaming pass with a {cfg.compute_dtype} forward and "
        f"{cfg.accum_dtype} accumulation; no C×T×d tensor "
        f"was formed. Forward + decomposition: {r.seconds_forward:.1f} s for {tokens} tokens × "
        f"{n_layers} states ({tokens * n_layers / r.seconds_forward:,.0f} token·layers/s, compile "
        f"included); whole study {r.seconds_total:.1f} s.",
        "Conventions: " + ", ".join([
            "first token dropped" if cfg.drop_first else "first token kept",
            "final norm applied" if conv["final_norm_applied"] else "no final norm (residual stream)",
            f"BOS id {conv['bos_prepended']} prepended" if conv["bos_prepended"] is not None else "no BOS inserted",
            "causal BERT mask" if cfg.causal else "model's own mask",
            "relative norm against centred states" if cfg.centered_relative_norm
            else "relative norm against raw states with μ (source code)"]) + ".",
    ]
    return s


def _layers_section(r, figure_paths: dict) -> Section:
    na = _report_na(r)
    columns = metric_columns(type(r.layers[0].metrics))
    rows = [[ly.name] + [_cell(ly.metrics, f.name, na) for f in columns] for ly in r.layers]
    s = Section("Per-layer geometry (Song & Zhong Tables 1, 3, 4, 5; App. C)")
    s.table(
        ["layer"] + [f.metadata["column"].format(**dataclasses.asdict(r.config)) for f in columns], rows,
        "Rank and stable rank of P (T×d); relative norm ‖P_tiled‖op/‖M‖op; ANOVA variance shares of "
        "pos, ctx and resid (sum to 1); incoherence "
        "max_{t,c}|cos(pos_t, ctx_c)| (exact, over all T·C pairs) and its mean; mean |cos| of ctx "
        "within / between documents; share of the normalized pos Gram's DCT energy in the first 10×10 "
        "frequencies; Tr(Σ_B Σ_W⁺) of ctx.")
    if caution := screenot_k_caution(r.config.screenot_k):
        s.paragraphs.append(caution)
    if r.config.figures:
        s.figure(figure_paths["metrics_by_layer"], "Per-layer metrics (layer 0 = embedding output).")
    return s


def _summary_section(r) -> Section:
    na, summary, d, C, cfg = r.not_available, r.summary, r.d_model, r.n_contexts, r.config
    keys = [f.name for f in dataclasses.fields(LayerMetrics) if f.metadata.get("summary")]
    s = Section("Table 1 (mean ± std across layers)")
    s.table(["metric", "mean", "std", "layers"],
            [[k, summary[k]["mean"], summary[k]["std"], summary[k]["n_layers"]] if k in summary
             else [k, na.get(k, "n/a"), "", 0] for k in keys])
    if "cluster_compactness" not in na and C - cfg.n_docs < d:
        s.paragraphs.append(
            f"Caution: the context-level compactness uses C = {C} windows in d = {d} "
            f"dimensions (fewer than d + K = {d + cfg.n_docs}), so Σ_W is singular and its "
            "pseudo-inverse inflates Tr(Σ_B Σ_W⁺); use more windows for a reliable value.")
    s.paragraphs.append(_scale_sentence(r))
    return s


def _scale_sentence(r) -> str:
    """The random-direction scale of the incoherence, like with like: the max over T·C pairs against the expected max
    over as many random pairs, the mean against E|cos| of one pair."""
    n = r.n_positions * r.n_contexts
    if r.incoherence_max_baseline is None:
        return (f"For scale: two independent isotropic directions in d = {r.d_model} have E|cos| = "
                f"{r.incoherence_baseline:.3f}, the scale of the incoherence mean.")
    return (f"For scale, like with like: the incoherence max is the largest |cos| over T·C = {n:,} (pos_t, ctx_c) pairs; "
            f"over {n:,} independent pairs of isotropic directions in d = {r.d_model} the expected largest |cos| is "
            f"{r.incoherence_max_baseline:.3f} (`geometry.expected_max_abs_cos_isotropic`; this run's pairs share their "
            "T and C vectors, so independent pairs are the reference), so an incoherence max near or below it means pos "
            "and ctx are as unrelated as random directions. The incoherence mean compares with E|cos| of one random "
            f"pair, {r.incoherence_baseline:.3f} (the `song_zhong.incoherence_baseline` claims check this baseline by "
            "Monte Carlo).")


def _theorem1_section(r, figure_paths: dict) -> Section:
    thm1 = [ly.theorem1 for ly in r.layers]
    s = Section("Theorem 1 on the real positional Grams (eq. (6))")
    s.paragraphs.append(
        "For every layer, G = P Pᵀ (pos re-centred, scaled to trace T). LHS(k) is (1/T)"
        "‖G − F_{≤k}B(F_{≤k}B)ᵀ‖op for the best PSD fit in the printed low-frequency basis "
        "(an upper bound on the theorem's min over B); RHS(k, m) = 6/(8k)^m ‖Δ^{(m,m)}G̃‖max "
        "as printed, and with the corrected constant (claims `song_zhong.theorem1.*`). "
        "A ratio ≤ 1 means eq. (6) holds at that (k, m); 'certified' violations are (k, m) "
        "where even a lower bound over all B exceeds the RHS. k = 1..%d, m = 1..4."
        % len(thm1[0].ks))
    rows = [[name, t.max_ratio_printed, str(tuple(t.argmax_printed)), t.n_certified_violations_printed,
             t.max_ratio_corrected, t.lhs_k10_over_opnorm] for name, t in zip(r.layer_names, thm1)]
    s.table(["layer", "max LHS/RHS (printed)", "at (k, m)", "certified violations (printed)",
             "max LHS/RHS (corrected)", "LHS(k=10) / (‖G‖op/T)"], rows)
    worst = max(float(t.max_ratio_printed) for t in thm1)
    s.paragraphs.append(
        (f"On these Grams eq. (6) as printed holds at every (k, m): the largest ratio is {worst:.2g}. " if worst <= 1 else
         f"On these Grams eq. (6) as printed fails somewhere (largest ratio {worst:.3g}). ")
        + "The claim `song_zhong.theorem1.printed` is decided on synthetic Grams, not on these; its verdict and the "
        "erratum's class of it (a typo or a refutation) are in the demo's claims section and docs/ERRATA.md.")
    if "theorem1_mid_layer" in figure_paths:
        s.figure(figure_paths["theorem1_mid_layer"], "Eq. (6) on the middle layer's pos Gram: LHS vs RHS per m.")
    return s


def _cluster_row(ly, na: dict) -> list:  # na: _report_na's, so a singular Σ_W shows its reason
    """One layer's App. C row: ctx, token-level cvec and raw compactness, and their ratio."""
    tc = ly.token_clusters
    ratio = tc.compactness_cvec / tc.compactness_raw if tc is not None and tc.compactness_raw else None
    return [ly.name, _cell(ly.metrics, "cluster_compactness", na), _cell(tc, "compactness_cvec", na),
            _cell(tc, "compactness_raw", na), ratio]


def _clusters_section(r, tok_figs: list) -> Section:
    cfg, na = r.config, r.not_available
    s = Section("Clusters of tokens: cvec vs raw states (App. C, Figs. 24-26)")
    s.paragraphs.append(
        f"Tr(Σ_B Σ_W⁺) by document (larger = better separated) of token-level cvec = h − μ − "
        f"pos and of the raw states h, on {cfg.n_cluster_windows} windows per document; the "
        f"context means ctx (one point per window) for comparison. The paper reports cvec "
        f"better separated than raw states.")
    tc0 = r.layers[0].token_clusters
    n_tok, d_model = (None if tc0 is None else int(tc0.token_labels.size)), r.d_model
    if n_tok is not None and n_tok - cfg.n_docs < d_model:
        s.paragraphs.append(
            f"Caution: {n_tok} tokens in {cfg.n_docs} documents is fewer than d + K = "
            f"{d_model + cfg.n_docs}, so Σ_W is singular and its pseudo-inverse inflates "
            "the token-level values; use more --cluster-windows.")
    s.table(["layer", "ctx", "cvec (tokens)", "raw (tokens)", "cvec / raw"],
            [_cluster_row(ly, _report_na(r)) for ly in r.layers])
    for name, rel in tok_figs:
        s.figure(rel, f"Figs. 24-26: cvec (left) vs raw states (right), {name}.")
    return s


def _ood_section(r) -> Section:
    cfg, na, summary = r.config, r.not_available, r.summary
    s = Section(f"Table 2: out of distribution ({cfg.ood_corpus})")
    s.paragraphs.append(
        f"The same model and sizes on {cfg.ood_corpus} windows (random, non-overlapping): "
        "the low rank and the relative norm of the positional basis should not depend on "
        "the text (paper: 'positional basis is agnostic to contexts')."
        + (f" Its text: {r.corpora[cfg.ood_corpus]}." if cfg.ood_corpus in r.corpora else "")
        + (f" Characters outside the character model's vocabulary were removed from the "
           f"{cfg.ood_corpus} text first: {100 * r.ood_dropped:.2f}% of its characters."
           if r.ood_dropped else ""))
    s.table(["corpus", "rank estimate", "stable rank", "relative norm"], [
        [cfg.corpus, _fmt_ms(na, summary, "screenot_rank"), _fmt_ms(na, summary, "stable_rank"),
         _fmt_ms(na, summary, "relative_norm")],
        [cfg.ood_corpus, _fmt_ms(na, summary, "ood_screenot_rank"),
         _fmt_ms(na, summary, "ood_stable_rank"), _fmt_ms(na, summary, "ood_relative_norm")]],
        "mean (std) across layers")
    return s


def _paper_section(r, has_ood: bool) -> Section:
    cfg, na, summary = r.config, r.not_available, r.summary
    s = Section("Beside the paper (Song & Zhong Tables 1-2, quoted)")
    s.paragraphs.append(
        "The paper's rows are its published numbers (reference values, not recomputed here: "
        "those models are not available offline). Our row is this run. MiniLM is a 6-layer "
        "BERT-architecture sentence encoder, so the closest paper row is BERT on WikiText.")
    arch = ("BERT" if r.model_desc.startswith("Bert") else
            "toy GPT-2-like" if r.model_desc.startswith("Toy") else "GPT-2")
    departure = _departure_sentence(summary, "BERT" if arch == "BERT" else
                                    "NanoGPT" if arch.startswith("toy") else "GPT-2",
                                    _incoherence_caveat(r) if r.incoherence_max_baseline is not None else "")
    if departure:
        s.paragraphs.append(departure)
    ours = [f"this run: {'MiniLM' if cfg.model == 'minilm' else Path(cfg.model).name} ({arch} arch.)",
            cfg.corpus, _fmt_ms(na, summary, "screenot_rank"), _fmt_ms(na, summary, "relative_norm"),
            _fmt_ms(na, summary, "inter_similarity"), _fmt_ms(na, summary, "intra_similarity"),
            _fmt_ms(na, summary, "incoherence_max")]
    s.table(["model", "corpus", "rank estimate", "relative norm", "inter-cluster sim",
             "intra-cluster sim", "incoh (max)"],
            [ours] + [[f"paper: {row[0]}", *row[1:]] for row in PAPER_TABLE1],
            "Table 1: mean (std) across layers")
    if has_ood:
        s.table(["model", "OOD corpus", "rank estimate", "relative norm"],
                [[ours[0], cfg.ood_corpus, _fmt_ms(na, summary, "ood_screenot_rank"),
                  _fmt_ms(na, summary, "ood_relative_norm")]]
                + [[f"paper: {row[0]}", *row[1:]] for row in PAPER_TABLE2], "Table 2")
    return s


def _figures_section(r, figure_paths: dict) -> Section:
    s = Section("Figures (Song & Zhong Figs. 1-3, 24-26)")
    if not r.config.figures:
        s.paragraphs.append("Not drawn: the run was made with --no-figures (GeometryConfig.figures False).")
        return s
    s.figure(figure_paths["fig1_pca"], "Fig. 1: PCA of pos and cvec by layer.")
    s.figure(figure_paths["fig1_pca_3d"], "Fig. 1 in 3-D: the spiral of pos on P's top-3 PCs.")
    s.figure(figure_paths["fig2_gram"], "Fig. 2: normalized Gram of [pos; ctx] (lines: pos block, documents).")
    s.figure(figure_paths["fig3_singular_values"], "Fig. 3 left: σ_j/σ_1 of P (tiled over C), Cvec and R.")
    s.figure(figure_paths["fig3_dct"], "Fig. 3 right: low-frequency DCT coefficients of the pos Gram.")
    for ly in r.layers:
        if f"ctx_clusters_{ly.name}" in figure_paths:
            s.figure(figure_paths[f"ctx_clusters_{ly.name}"], "App. C: context means coloured by document.")
    return s


def _range(values) -> str:
    """"mean m (lo–hi)" of per-layer values (None skipped); "n/a" without any."""
    v = [float(x) for x in values if x is not None]
    return "n/a" if not v else f"{np.mean(v):.3g} ({min(v):.3g}–{max(v):.3g})"


def _findings_section(r) -> Section:
    """The opening summary: what the run found, layer means and ranges with their scales, and its cautions."""
    ms = [ly.metrics for ly in r.layers]
    get = lambda key: [getattr(m, key) for m in ms]
    s = Section("Summary: what this run found", [
        f"{r.model_desc} on {r.config.corpus}, C = {r.n_contexts} windows × T = {r.n_positions} positions; per layer, mean "
        "across layers (range):"])
    lines = [
        f"Positional basis P: rank {_range(get('screenot_rank'))} (ScreeNOT, k = {r.config.screenot_k}) in d = "
        f"{r.d_model}, stable rank {_range(get('stable_rank'))}; relative norm {_range(get('relative_norm'))}; "
        f"share of the variance {_range(get('share_pos'))} (ctx {_range(get('share_ctx'))}).",
        f"Smoothness: {_range(get('dct_low_freq_energy'))} of the normalised pos Gram's DCT energy in its lowest "
        f"{r.options.n_freq}×{r.options.n_freq} frequencies.",
    ]
    inc = [v for v in get("incoherence_max") if v is not None]
    if inc and r.incoherence_max_baseline is not None:
        below = sum(v <= r.incoherence_max_baseline for v in inc)
        lines.append(f"Incoherence max |cos(pos, ctx)| {_range(inc)}: {below} of {len(inc)} layers at or below "
                     f"{r.incoherence_max_baseline:.3f}, the expected max for as many random pairs; mean |cos| "
                     f"{_range(get('incoherence_mean'))} against {r.incoherence_baseline:.3f} for one random pair.")
    intra, inter = get("intra_similarity"), get("inter_similarity")
    if any(v is not None for v in intra):
        lines.append(f"Context clusters: mean |cos| of ctx within documents {_range(intra)}, between documents "
                     f"{_range(inter)}.")
    if r.layers[0].theorem1 is not None:
        worst = max(float(ly.theorem1.max_ratio_printed) for ly in r.layers)
        lines.append(f"Theorem 1, eq. (6) as printed on the real pos Grams: largest LHS/RHS {worst:.2g} "
                     + ("(≤ 1: holds at every k, m tested)." if worst <= 1 else "(> 1 somewhere)."))
    if r.layers[0].ood is not None:
        lines.append(f"Out of distribution ({r.config.ood_corpus}): rank {_range([o.screenot_rank for o in (ly.ood for ly in r.layers)])}, "
                     f"relative norm {_range([o.relative_norm for o in (ly.ood for ly in r.layers)])}.")
    s.paragraphs += [f"- {x}" for x in lines]
    cautions = [c for c in (screenot_k_caution(r.config.screenot_k),
                            "Caution: the context-level compactness is not reported (Σ_W singular at these sizes)."
                            if _report_na(r).get("cluster_compactness", "").startswith("n/a: Σ_W") else None) if c]
    s.paragraphs += cautions
    return s


def sections(result, figure_paths: dict[str, str]) -> list[Section]:
    """The report of a geometry study: a summary of what it found, setup, per-layer Tables 1/3-5, Table 1's means, Theorem 1
    on the real pos Grams, App. C token clusters, Table 2 (OOD), the paper's own Table 1-2 rows
    beside ours, and the figures.

    Args:
      result: a ``geomjax.analysis.study.StudyResult``.
      figure_paths: figure name (``geomjax.analysis.plots.study_figures``) -> path relative to the run
        directory ("figures/fig1_pca.png"); empty when ``result.config.figures`` is False (``--no-figures``).
    """
    layers = result.layers
    has_ood = layers[0].ood is not None
    tok_figs = [(ly.name, figure_paths[f"cvec_vs_raw_{ly.name}"]) for ly in layers
                if f"cvec_vs_raw_{ly.name}" in figure_paths]
    out = [_findings_section(result), _setup_section(result), _layers_section(result, figure_paths),
           _summary_section(result)]
    if layers[0].theorem1 is not None:
        out.append(_theorem1_section(result, figure_paths))
    if tok_figs or any(ly.token_clusters is not None for ly in layers):
        out.append(_clusters_section(result, tok_figs))
    if has_ood:
        out.append(_ood_section(result))
    out.append(_paper_section(result, has_ood))
    out.append(_figures_section(result, figure_paths))
    return out
