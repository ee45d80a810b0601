"""Cost of the clock claims at ``--budget quick`` (issue 28): wall and CPU seconds of
``geomjax verify --source clock --budget quick`` as on a clean clone, then with its trained models cached.

Since issue 43 the quick budget trains 2 seeds of the clock blog's model (p = 113, no positional embeddings,
30% split) and of its ReLU-free variant as one vmapped program each, until every seed groks
(``geomjax.sources.clock.claims.GROK_STOP``: test accuracy >= 99% at 2 consecutive logs; cap: the blog's lengths). Each run is a child process (CPU seconds from
``RUSAGE_CHILDREN``: user + system), with a fresh ``$GEOMJAX_CACHE`` and JAX's persistent compilation
cache off (``GEOMJAX_NO_COMPILE_CACHE=1``), so the first run costs what a clean clone pays; the second reads
the cached models (analyses, claims and the report only). The training part is first − second. The stop
epochs and the trainer's own wall seconds come from the cached runs (``history.npz``).

On a loaded machine the wall times stretch with the load (reported); the CPU seconds are the better
estimate of a quiet machine's cost (an upper bound on its wall time when XLA keeps both cores busy).

Run:  .venv/bin/python benchmarks/bench_clock_quick.py [--out benchmarks/RESULTS.md]   (two verify runs: minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_verify(cache: str, out: str) -> dict[str, float]:
    """One ``geomjax verify --source clock --budget quick`` child: wall and CPU seconds, its summary line."""
    env = os.environ | {"GEOMJAX_CACHE": cache, "GEOMJAX_NO_COMPILE_CACHE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "geomjax.cli", "verify", "--source", "clock", "--budget", "quick",
                        "--out", out, "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"verify failed ({p.returncode}):\n{p.stderr[-2000:]}")
    summary = next((line for line in p.stdout.splitlines() if line.startswith("claims:")), "?")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "summary": summary, "load_end": C.load_avg()}


def trained_runs(cache: str) -> list[dict]:
    """Per cached vmapped run of seeds: activation, stop record, the trainer's wall seconds (all seeds, compile
    included)."""
    rows = []
    for d in sorted((Path(cache) / "grokking-seeds").iterdir()):
        meta = json.loads((d / "seeds_config.json").read_text())
        with np.load(d / "history.npz") as z:
            stopped = json.loads(str(z["stopped"])) if "stopped" in z.files else None
            wall = float(z["seconds"])
        rows.append({"activation": meta["config"]["train"]["model"]["activation"], "stopped": stopped,
                     "seeds": len(meta["seeds"]), "train_wall": wall})
    return rows


def _load_note() -> str:
    """A warning when the 1-minute load average exceeds the usable CPUs (the wall times then stretch)."""
    load = os.getloadavg()[0]
    if load <= C.n_cpus():
        return ""
    return (f" **Warning: load average {load:.1f} > {C.n_cpus()} CPUs**: the wall times stretch with the load; "
            "the CPU seconds estimate a quiet machine's cost.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    ap.add_argument("--quick", action="store_true", help="accepted for run_all.py: the run is the quick budget already")
    args = ap.parse_args()
    info = C.machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-clock-quick-") as tmp:
        cache = os.path.join(tmp, "cache")
        first = run_verify(cache, os.path.join(tmp, "run1"))
        second = run_verify(cache, os.path.join(tmp, "run2"))
        runs = trained_runs(cache)
    rows = [["clean clone (trains both models)", f"{first['wall']:.0f}", f"{first['cpu']:.0f}", first["load_end"]],
            ["models cached (analyses, claims, report)", f"{second['wall']:.0f}", f"{second['cpu']:.0f}", second["load_end"]],
            ["training (difference)", f"{first['wall'] - second['wall']:.0f}", f"{first['cpu'] - second['cpu']:.0f}", ""]]
    lines = [f"### Clock claims at --budget quick (issue 28; {info['date']})", "",
             "`geomjax verify --source clock --budget quick`, child processes, fresh model cache, no persistent "
             "compilation cache." + _load_note(), "",
             C.markdown_table(["run", "wall s", "CPU s (user + sys)", "load average at the end"], rows), "",
             f"- verdicts: {first['summary']}"]
    for r in runs:
        st = r["stopped"] or {}
        lines.append(f"- {'ReLU' if r['activation'] == 'relu' else 'ReLU-free'} run: stopped at epoch {st.get('step')} ({st.get('by')}: {st.get('reason')}); "
                     f"{r['seeds']} seeds, trainer wall {r['train_wall']:.0f} s")
    text = "\n".join(lines) + "\n\n" + C.machine_block(info)
    print(text)
    C.write_section(args.out, text)


if __name__ == "__main__":
    main()
