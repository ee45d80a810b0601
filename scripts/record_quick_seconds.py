"""Record what a quick ``geomjax verify`` costs, claim by claim and report by report, in
``geomjax/claims/quick_seconds.json``: ``verify --list`` shows it, ``--time-budget`` orders the claims by it and
``--workers`` balances its processes with it (:func:`geomjax.claims.workers.split`).

    PYTHONPATH=$PWD .venv/bin/python scripts/record_quick_seconds.py [--source clock]

Runs the command itself (``geomjax verify --budget quick``, default workers, into a temporary run directory) and
records each claim's ``details.seconds`` and each source report's wall seconds (``metrics.json``:
``report_seconds``); claims and reports not selected keep their record. Run it on a quiet machine, with the
clock claims' trained models cached (``scripts/train_clock_seeds.py``): without them those claims cost nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import types
from pathlib import Path

from geomjax import cli
from geomjax.claims.catalogue import QUICK_SECONDS, record_quick_seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=None, help="a source or id glob (verify --source); default: every claim")
    ap.add_argument("--to", default=str(QUICK_SECONDS), help="the record to update (default: the package's)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "verify"
        rc = cli.main(["verify", "--budget", "quick", "--out", str(run), "--no-progress"]
                      + (["--source", args.source] if args.source else []))
        if rc:
            return rc
        metrics = json.loads((run / "metrics.json").read_text())
    results = [types.SimpleNamespace(id=r["id"], details=r["details"]) for r in metrics["results"]]
    path = record_quick_seconds(results, args.to, reports=metrics.get("report_seconds", {}))
    total = sum(float(r.details.get("seconds", 0.0)) for r in results)
    print(f"recorded {len(results)} claims ({total:.1f} s) and reports {metrics.get('report_seconds', {})} in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
