"""The README, CONTRIBUTING and every guide in docs/ (and each experiment's README) run as written.

Every fenced ```python block of a Markdown file is executed, in order, in one namespace per file (a
guide's later blocks use its earlier ones), in a temporary working directory, offline. A block that is
an illustration and must not run (a 7B model, a GPU) is written as ```text or ```bash instead. Links
between the guides must point at files that exist.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from geomjax.claims import registration

ROOT = Path(__file__).resolve().parents[2]
GUIDES = sorted([p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.is_file()] + [*ROOT.glob("docs/*.md"),
                 *ROOT.glob("experiments/*/README.md")])
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def python_blocks(path: Path) -> list[str]:
    """The fenced ```python blocks of a Markdown file, in order."""
    return FENCE.findall(path.read_text(encoding="utf-8"))


@pytest.mark.slow  # the guides load MiniLM and run small studies: tens of seconds each
@pytest.mark.parametrize("path", [p for p in GUIDES if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a guide's tempfile.mkdtemp() goes with tmp_path
    namespace: dict = {"__name__": "__guide__"}
    # a guide may register claims of its own (docs/your_paper.md): they leave the registry with the guide. The
    # sources are discovered first: a guide that first imports them must not take their claims away with its own
    # (that emptied the registry of song_zhong and wertich for every later test of the worker)
    registration.all_claims()
    before = set(registration._REGISTRY)
    try:
        for i, block in enumerate(python_blocks(path)):
            code = compile(block, f"{path.relative_to(ROOT)}[block {i}]", "exec")
            exec(code, namespace)  # noqa: S102  (the guide's own code, as a reader would run it)
    finally:
        for cid in set(registration._REGISTRY) - before:
            registration.unregister(cid)


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    bad = [t for t in LINK.findall(text) if "://" not in t and not (path.parent / t).exists()]
    assert not bad, f"{path.relative_to(ROOT)}: links to missing files: {bad}"


def test_readme_is_short_and_links_every_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    links = set(LINK.findall(readme))
    guides = {f"docs/{p.name}" for p in ROOT.glob("docs/*.md")} | {"CONTRIBUTING.md"}
    assert guides <= links, f"README links no guide for: {sorted(guides - links)}"
    assert re.search(r"!\[[^\]]*\]\(docs/[^)]+\.png\)", readme), "README shows a figure from docs/"
