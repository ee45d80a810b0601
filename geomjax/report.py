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
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Section", "RunDir", "to_jsonable", "render_markdown", "render_html", "render_run"]


def to_jsonable(x: Any) -> Any:
    """Convert arrays, NumPy/JAX scalars, dataclasses and paths into JSON-serialisable values."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
        a = np.asarray(x)
        if a.ndim == 0:
            return to_jsonable(a.item())
        return [to_jsonable(v) for v in a.tolist()]
    if isinstance(x, float):
        if np.isnan(x):
            return "NaN"
        if np.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        return x
    if isinstance(x, (np.integer, np.floating, np.bool_)):
        return to_jsonable(x.item())
    return x


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


class RunDir:
    """A run directory: ``config.json``, ``metrics.json``, ``figures/``, ``report.{json,md,html}``.

    Args:
      path: directory to write (created). ``None`` makes ``runs/<command>-<UTC timestamp>``.
      command: the CLI command, used for the default name.
    """

    def __init__(self, path: str | os.PathLike | None = None, command: str = "run"):
        if path is None:
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
            path = Path("runs") / f"{command}-{stamp}"
        self.path = Path(path)
        self.figures = self.path / "figures"
        self.figures.mkdir(parents=True, exist_ok=True)
        self.command = command

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


def render_run(path: str | os.PathLike) -> Path:
    """Re-render report.md and report.html of an existing run directory from its report.json."""
    path = Path(path)
    src = path / "report.json"
    if not src.is_file():
        raise FileNotFoundError(
            f"{src} not found: {path} is not a geomjax run directory (run `geomjax demo` first)"
        )
    data = json.loads(src.read_text())
    sections = [Section(**s) for s in data["sections"]]
    missing = [f["path"] for s in sections for f in s.figures if not (path / f["path"]).is_file()]
    if missing:
        raise FileNotFoundError(f"run directory {path} is missing figures: {missing}")
    (path / "report.md").write_text(render_markdown(data["title"], sections, data.get("meta")))
    (path / "report.html").write_text(render_html(data["title"], sections, data.get("meta")))
    return path / "report.html"
