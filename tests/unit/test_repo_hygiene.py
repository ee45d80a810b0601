"""Repository hygiene: no tracked file names a path outside the repository.

The sibling folder the project was bootstrapped from does not exist on a fresh clone, so code,
tests and docs must not refer to it. The forbidden strings are built from pieces so that this file
does not match itself.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ["../" + "shared", "/work/" + "main", "/work/" + "shared"]


def _tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / f for f in out.decode().split("\0") if f]


def test_no_tracked_file_names_a_path_outside_the_repository():
    hits = []
    for f in _tracked_files():
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary (compressed corpora, goldens)
            continue
        for n, line in enumerate(text.splitlines(), 1):
            hits += [f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for s in FORBIDDEN if s in line]
    assert not hits, "tracked files name paths outside the repository:\n" + "\n".join(hits)


def test_design_and_data_docs_exist():
    assert (ROOT / "docs" / "DESIGN.md").is_file() and (ROOT / "DATA.md").is_file()


def test_version_is_stated_once_and_matches_pyproject():
    import tomllib

    import geomjax
    from geomjax._version import __version__

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert geomjax.__version__ == __version__ == meta["version"]
