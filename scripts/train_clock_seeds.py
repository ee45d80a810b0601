"""Train (or resume) the clock claims' 32 seeds of a budget as one vmapped program, into the geomjax cache.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python scripts/train_clock_seeds.py --budget quick --log runs/clock-seeds.log

Runs the ReLU models first, then the ReLU-free ones (:func:`geomjax.sources.clock.claims.budget_seeds`); every chunk of
:data:`geomjax.sources.clock.claims.CLAIM_CHUNK` epochs is checkpointed, so an interrupted run continues where it stopped
when the same command is run again. ``--budget quick`` stops the runs once every seed has grokked (what a quick
``geomjax verify`` reads; it never trains them itself); ``--budget full`` continues those runs to the blog's lengths.
One-time cost on a quiet 2-core CPU (:data:`geomjax.sources.clock.claims.TRAIN_COST`; 33.7 ms per seed and epoch
measured for 32 vmapped seeds, 2026-11-29): quick about 2.3 hours for the ReLU models (the slowest seed grokked at
epoch 6,900) and 5.5 to 6 for the ReLU-free ones; full about 3 and 6 in all; minutes on a GPU.
"""

from __future__ import annotations

import argparse

from geomjax.sources.clock.claims import SEEDS, budget_seeds, claim_config, seeds_dir
from geomjax.train.cost import toy_training_cost


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="quick", choices=sorted(SEEDS))
    ap.add_argument("--only", default="both", choices=("relu", "relu-free", "both"))
    ap.add_argument("--log", default=None, help="append a line per chunk to this file")
    args = ap.parse_args(argv)
    for relu in (True, False):
        if args.only != "both" and relu != (args.only == "relu"):
            continue
        c, k = claim_config(args.budget, relu), SEEDS[args.budget]
        print(f"{k} {'ReLU' if relu else 'ReLU-free'} models, {c.epochs} epochs, in {seeds_dir(c, range(k))}: "
              + toy_training_cost(c.train.replace(total_steps=c.epochs * k)).describe(), flush=True)
        res = budget_seeds(args.budget, relu, log_file=args.log)
        print(f"done: epoch {res.epoch}, {res.seconds:.0f} s of training", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
