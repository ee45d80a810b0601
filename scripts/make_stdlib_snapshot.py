"""Write the ``stdlib`` corpus snapshot: geomjax/data/files/stdlib/cpython-3.11.7-lib.json.xz.

The ``stdlib`` corpus (the out-of-distribution corpus of ``geomjax geometry`` / ``demo``, Table 2)
was the running interpreter's standard library, so its numbers changed with the Python version.
It is now this fixed snapshot: every 8th file, in sorted path order, of the non-empty UTF-8 ``.py``
files that ``geomjax.data.stdlib_python`` reads from CPython 3.11.7's ``Lib/`` (its default
exclusions: site-packages, test suites, idlelib, lib2to3, turtledemo). The JSON text is
``{"source": ..., "selection": ..., "files": [[relative_path, source], ...]}``; its SHA-256 goes into
``geomjax.data.corpora.BUNDLED_FILES`` (the script prints it). CPython's licence (the PSF licence
agreement, ``LICENSE.txt`` of the same Lib/) is copied beside it. Run with Python 3.11.7:

    python scripts/make_stdlib_snapshot.py            # the running interpreter's Lib/
    python scripts/make_stdlib_snapshot.py --root DIR # a CPython 3.11.7 Lib/ folder
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import platform
import sysconfig
from pathlib import Path

from geomjax.data import STDLIB_SNAPSHOT, stdlib_python

VERSION = "3.11.7"
STRIDE = 8
OUT = Path(__file__).resolve().parents[1] / "geomjax" / "data" / "files"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", help="CPython 3.11.7's Lib/ (default: the running interpreter's)")
    args = ap.parse_args()
    if args.root is None and platform.python_version() != VERSION:
        raise SystemExit(f"run with Python {VERSION} or pass --root (a CPython {VERSION} Lib/)")
    root = Path(args.root or sysconfig.get_paths()["stdlib"])
    every = stdlib_python(root)
    files = every[::STRIDE]
    snapshot = {
        "source": f"CPython {VERSION}, Lib/ (Python Software Foundation; PSF licence agreement, LICENSE.txt)",
        "selection": f"every {STRIDE}th of the {len(every)} non-empty UTF-8 .py files in sorted path order "
                     "(geomjax.data.stdlib_python's exclusions), starting with the first",
        "files": [[name, text] for name, text in files],
    }
    text = json.dumps(snapshot, ensure_ascii=False, indent=0) + "\n"
    data = text.encode("utf-8")
    dest = OUT / (STDLIB_SNAPSHOT + ".xz")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
    (dest.parent / "LICENSE.txt").write_bytes((root / "LICENSE.txt").read_bytes())
    print(f"{dest.name}: {len(files)} of {len(every)} files, {len(data):,} bytes of JSON, "
          f"{dest.stat().st_size:,} bytes compressed")
    print(f"sha256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
