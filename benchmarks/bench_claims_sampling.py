"""Every Monte Carlo claim (or a selection) checked with the sequential rounds at one budget: verdict, samples,
rounds, why it stopped, the rounds' CPU seconds and the claim's wall seconds, with the machine's load.

    python benchmarks/bench_claims_sampling.py --budget full [--select wertich.s6_2_1 ...]

Prints a Markdown table (for benchmarks/RESULTS.md) and the totals: wall, process CPU seconds, load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from geomjax.claims import registry as R


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", choices=R.BUDGETS, default="quick")
    ap.add_argument("--select", nargs="*", default=None, help="id patterns (default: every Monte Carlo claim)")
    ap.add_argument("--part", default="1/1", help="k/m: the k-th of m interleaved parts of the selection")
    ap.add_argument("--record", default=None, metavar="PATH",
                    help="full budget: record each verdict as it is decided (record_full_verdicts) in PATH")
    ap.add_argument("--deterministic", action="store_true", help="also the selected deterministic claims")
    args = ap.parse_args()
    claims = [c for c in R.select_claims(args.select) if c.sampler is not None or args.deterministic]
    k, m = (int(x) for x in args.part.split("/"))
    claims = claims[k - 1::m]
    t0, c0 = time.perf_counter(), time.process_time()
    print(f"load average before: {os.getloadavg()}; {len(claims)} Monte Carlo claims at {args.budget}")
    print("| claim | verdict | samples | rounds | stopped | rounds CPU s | wall s | samples needed |")
    print("|---|---|---|---|---|---|---|---|")
    counts: dict[str, int] = {}
    results = []
    with R.run_memo():
        for c in claims:
            r = R.run_claim(c, budget=args.budget)
            results.append(r)
            if args.record and args.budget == "full":
                R.record_full_verdicts([r], path=args.record)
            seq = r.details.get("sequential", {})
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
            need = seq.get("samples_needed")
            print(f"| `{c.id}` | {r.verdict} | {r.n} | {seq.get('rounds')} | {seq.get('stopped')} "
                  f"| {seq.get('cpu_seconds')} | {r.details.get('seconds')} | {'' if need is None else f'{need:.3g}'} |",
                  flush=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\n{counts}; wall {time.perf_counter() - t0:.1f} s, process CPU {time.process_time() - c0:.1f} s "
          f"(user {ru.ru_utime:.1f} s, sys {ru.ru_stime:.1f} s), load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
