"""The geometry study's metrics.json against a committed golden (issue 18: results unchanged by
refactors of the study / pipeline / report code).

``tests/goldens/study_metrics.json`` is the metrics.json of ``geomjax geometry`` on MiniLM with
tiny sizes and every optional stage on (Theorem 1 on the layers, token clusters, an
out-of-distribution pass), written by the code before the data-flow refactor. Every number must
agree to 1e-6 relative (NaN equals NaN), with the same keys and the same strings; timings are
excluded. Regenerate it only for an intended change of results:
``GEOMJAX_UPDATE_GOLDEN=1 pytest tests/test_study_golden.py``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from geomjax import cli

GOLDEN = Path(__file__).parent / "goldens" / "study_metrics.json"
ARGS = ["--n-docs", "2", "--windows-per-doc", "4", "-T", "16", "--batch-size", "4", "--screenot-k", "5",
        "--cluster-windows", "2", "--ood-corpus", "pydoc", "--seed", "3", "--no-progress"]
SKIP = {"timing_s"}  # wall-clock seconds: not results


def _number(x):
    """A JSON value as a float when it is a number (NaN / ±Infinity are written as strings)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if x in ("NaN", "Infinity", "-Infinity"):
        return float(x.replace("Infinity", "inf"))
    return None


def compare_metrics(a, b, rtol: float = 1e-6, path: str = "") -> tuple[list[str], float]:
    """Differences between two decoded metrics.json trees and the largest relative difference.

    Returns:
      (problems, max_rel): one line per key set, type, length or value that differs (numbers
      beyond ``rtol`` relative; NaN == NaN; exact zeros compared absolutely at 1e-300), and the
      largest |a − b| / max(|a|, |b|) over all finite number pairs.
    """
    problems: list[str] = []
    worst = 0.0
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            problems.append(f"{path}: keys differ: only in first {sorted(set(a) - set(b))}, "
                            f"only in second {sorted(set(b) - set(a))}")
        for k in sorted(set(a) & set(b)):
            if k in SKIP:
                continue
            p, w = compare_metrics(a[k], b[k], rtol, f"{path}/{k}")
            problems += p
            worst = max(worst, w)
        return problems, worst
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"], worst
        for i, (x, y) in enumerate(zip(a, b)):
            p, w = compare_metrics(x, y, rtol, f"{path}[{i}]")
            problems += p
            worst = max(worst, w)
        return problems, worst
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            same = (math.isnan(x) and math.isnan(y)) or x == y
            return ([] if same else [f"{path}: {a!r} != {b!r}"]), worst
        scale = max(abs(x), abs(y))
        rel = abs(x - y) / scale if scale > 1e-300 else 0.0
        return ([] if rel <= rtol else [f"{path}: {a!r} != {b!r} (rel {rel:.2e})"]), rel
    if a != b or type(a) is not type(b):
        return [f"{path}: {a!r} != {b!r}"], worst
    return [], worst


def test_compare_metrics_detects_differences():
    """The comparison itself: keys, lengths, NaN, strings and numbers beyond the tolerance."""
    base = {"a": [1.0, "NaN", 2], "b": {"c": "x"}, "timing_s": {"total": 1.0}}
    assert compare_metrics(base, json.loads(json.dumps(base)))[0] == []
    assert compare_metrics(base, base | {"timing_s": {"total": 9.0}})[0] == []
    assert compare_metrics(base, base | {"a": [1.0 + 2e-6, "NaN", 2]})[0]
    assert compare_metrics(base, base | {"a": [1.0 + 5e-7, "NaN", 2]}) == ([], pytest.approx(5e-7, rel=1e-3))
    assert compare_metrics(base, base | {"a": [1.0, 0.0, 2]})[0]
    assert compare_metrics(base, base | {"a": [1.0, "NaN"]})[0]
    assert compare_metrics(base, base | {"b": {"c": "y"}})[0]
    assert compare_metrics(base, base | {"d": 1})[0]


@pytest.mark.slow
def test_geometry_metrics_equal_golden(tmp_path):
    out = tmp_path / "golden_run"
    assert cli.main(["geometry", "--out", str(out), *ARGS]) == 0
    got = json.loads((out / "metrics.json").read_text())
    if os.environ.get("GEOMJAX_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {GOLDEN.name}")
    problems, worst = compare_metrics(json.loads(GOLDEN.read_text()), got)
    assert not problems, "\n".join(problems[:20])
    assert worst <= 1e-6
