"""Float32 error of the Song & Zhong decomposition as their code computes it (issue 16, item 8).

Their ``generate_decompositions.py`` accumulates, batch by batch in float32, the per-position mean as
Σ_batches (h / (n_batch·batch_size)).sum(batch) — every hidden state is divided by C before it is
summed — and each context's mean as (h / T).sum(T); then μ = mean over positions of the per-position
mean, pos = per-position mean − μ, ctx = context mean − μ. This script runs exactly that arithmetic
(NumPy float32, batches of 8 sequences) on synthetic GPT-2-like hidden states (three "massive"
channels at 3000, the rest O(50) + N(0, 1) position and noise parts; C = 512, T = 128, d = 768) and
reports max |error| / max |reference| against a float64 reference, next to the stand-in used by
``bench_decomposition.py`` (float32 ``h.mean((0, 1))`` etc. on the whole materialised tensor).

Run:  .venv/bin/python benchmarks/bench_authors_float32.py [--C 512 --T 128 --d 768 --batch 8]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def make_hidden(C, T, d, seed=0):
    """(C, T, d) float32: μ (3 channels at 3000, the rest N(0, 50²)) + pos_t + N(0, 1) noise."""
    rng = np.random.default_rng(seed)
    mean = (rng.normal(size=d) * 50).astype(np.float32)
    mean[:3] = 3000.0
    pos = rng.normal(size=(T, d)).astype(np.float32)
    h = rng.normal(size=(C, T, d)).astype(np.float32)
    h += mean
    h += pos[None]
    return h


def authors_float32(h, batch):
    """The authors' arithmetic: divide, then sum, batch by batch, all in float32."""
    C, T, _ = h.shape
    by_pos, by_ctx = None, []
    for i in range(0, C, batch):
        hb = h[i : i + batch]
        part = (hb / np.float32(C)).sum(0, dtype=np.float32)
        by_pos = part if by_pos is None else by_pos + part
        by_ctx.append((hb / np.float32(T)).sum(1, dtype=np.float32))
    mu = by_pos.mean(0, keepdims=True, dtype=np.float32)
    return by_pos - mu, np.concatenate(by_ctx) - mu


def stand_in_float32(h):
    """bench_decomposition.numpy_materialised's float32 pos and ctx (means of the whole tensor)."""
    mu = h.mean((0, 1))
    return h.mean(0) - mu, h.mean(1) - mu


def reference(h):
    h64 = h.astype(np.float64)
    mu = h64.mean((0, 1))
    return h64.mean(0) - mu, h64.mean(1) - mu


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--C", type=int, default=512)
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    h = make_hidden(args.C, args.T, args.d)
    ref_pos, ref_ctx = reference(h)
    err = lambda a, b: float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())  # noqa: E731
    a_pos, a_ctx = authors_float32(h, args.batch)
    s_pos, s_ctx = stand_in_float32(h)
    out = {"C": args.C, "T": args.T, "d": args.d, "batch": args.batch,
           "authors_float32": {"pos": err(a_pos, ref_pos), "ctx": err(a_ctx, ref_ctx)},
           "stand_in_float32": {"pos": err(s_pos, ref_pos), "ctx": err(s_ctx, ref_ctx)}}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
