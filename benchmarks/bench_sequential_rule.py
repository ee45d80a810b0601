"""The sequential claims rule's error rates and power, at sizes beyond the default suite (the long version of
tests/unit/test_claims_sequential.py).

Simulated runs of :func:`geomjax.claims.sequential.sequential_decision` on N(μ, 1) draws with margin δ = 0.1, at
n_sigma = 2 and 3 (nominal one-sided error Φ(−n_sigma): 2.3e-2, 1.3e-3; 5σ's 2.9e-7 is beyond any simulation),
worst cases on both sides (μ = δ: true; μ = δ + 1e-12: false) and the naive rule (n_sigma at every look, no split)
for contrast; then power at 5σ over 12 looks. Prints a Markdown table and the machine's load.

    python benchmarks/bench_sequential_rule.py [--runs 20000]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from scipy.stats import norm

from geomjax.claims.rules import LOOKS
from geomjax.claims.sequential import Stats, sequential_decision

N0, MARGIN = 64, 0.1


def _drawer(rng, mu):
    def draw(start, count):
        return Stats(count, np.array([rng.normal(mu, 1 / math.sqrt(count))]), np.array([rng.chisquare(count - 1)]))
    return draw


def rates(mu: float, n_sigma: float, looks: int, runs: int, seed: int, naive: bool = False) -> dict:
    """Verdict fractions over ``runs`` simulated runs (naive: n_sigma at every look, the split switched off)."""
    rng = np.random.default_rng(seed)
    k_sigma = norm.isf(norm.sf(n_sigma) * looks) if naive else n_sigma
    out = {"holds": 0, "does not hold": 0, "inconclusive": 0}
    samples = 0
    for _ in range(runs):
        o = sequential_decision(_drawer(rng, mu), N0, 0.0, lambda st: np.array([MARGIN]), n_sigma=k_sigma, looks=looks)
        out[o.decision.verdict] += 1
        samples += o.stats.n
    return {**{k: v / runs for k, v in out.items()}, "mean samples": samples / runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    args = ap.parse_args()
    t0, c0 = time.perf_counter(), time.process_time()
    print(f"load average before: {os.getloadavg()}")
    print("| case | n_sigma | looks | rule | holds | does not hold | inconclusive | nominal error | mean samples |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n_sigma in (2.0, 3.0):
        for label, mu, wrong in (("true, error on the margin", MARGIN, "does not hold"),
                                 ("false, error just past the margin", MARGIN + 1e-12, "holds")):
            for naive in (False, True):
                r = rates(mu, n_sigma, 8, args.runs, seed=int(10 * n_sigma) + naive, naive=naive)
                print(f"| {label} (wrong verdict: {wrong}) | {n_sigma:g} | 8 | {'naive' if naive else 'Bonferroni'} "
                      f"| {r['holds']:.4g} | {r['does not hold']:.4g} | {r['inconclusive']:.4g} | {norm.sf(n_sigma):.3g} "
                      f"| {r['mean samples']:.4g} |")
    for label, mu in (("true, error 0", 0.0), ("true, error δ/2", MARGIN / 2), ("false, error 2δ", 2 * MARGIN),
                      ("false, error 3δ", 3 * MARGIN)):
        r = rates(mu, 5.0, LOOKS, max(args.runs // 10, 100), seed=7)
        print(f"| power: {label} | 5 | {LOOKS} | Bonferroni | {r['holds']:.4g} | {r['does not hold']:.4g} "
              f"| {r['inconclusive']:.4g} | {norm.sf(5.0):.3g} | {r['mean samples']:.4g} |")
    print(f"\nwall {time.perf_counter() - t0:.1f} s, process CPU {time.process_time() - c0:.1f} s, "
          f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
