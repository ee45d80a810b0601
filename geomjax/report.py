"""Run directories and reports: config.json, metrics.json, figures/*.png, report.md, report.html.

A report is a list of :class:`Section` (heading, paragraphs, tables, figures). It is stored as
``report.json`` next to the rendered Markdown and HTML, so ``geomjax report RUN_DIR`` can render
it again. No JAX compute happens here.
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
from typing import Any

import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.io import to_jsonable

__all__ = ["Section", "RunDir", "check_reusable", "read_run_marker", "to_jsonable", "render_markdown",
           "render_html", "render_run"]


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

    def finish(self) -> Path:
        """Mark the run complete (``run.json``) and, unless in place, move it to its final path."""
        if self._marker is not None:
            self._marker.update(status="complete", finished=_utc_now())
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

    def write_config(self, config: Any) -> Path:
        """Write the resolved configuration plus the environment (versions, devices, time)."""
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
        return self.write_json("config.json", {"config": config, "environment": env})

    def figure_path(self, name: str) -> tuple[Path, str]:
        """(absolute path to save to, path relative to the run directory for the report)."""
        return self.figures / name, f"figures/{name}"

    def write_report(self, title: str, sections: list[Section], meta: dict | None = None) -> None:
        """Write report.json, report.md and report.html."""
        self.write_json("report.json", {"title": title, "meta": meta or {},
                                        "sections": [dataclasses.asdict(s) for s in sections]})
        (self.path / "report.md").write_text(render_markdown(title, sections, meta))
        (self.path / "report.html").write_text(render_html(title, sections, meta))


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
