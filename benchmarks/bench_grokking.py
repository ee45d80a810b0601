"""Full-batch epochs/s of the grokking trainer (jitted ``lax.scan``) against PyTorch on this CPU.

Model and task: Nanda et al.'s modular-addition transformer as in the ``paper`` preset of
``geomjax.train.grokking`` — p 113, inputs (a, b, "="), 1 layer, d 128, 4 heads of 32, d_mlp 512,
ReLU, learned positions, no LayerNorm, untied 114-way unembedding (last logit dropped), AdamW lr 1e-3
(10-step linear warm-up), weight decay 1.0 on every parameter, β (0.9, 0.98), full batch of the
3,830 training pairs, cross-entropy at the last position, float32.

Sides (same parameters, same optimizer and data):

* ``geomjax scan``: ``make_run_chunk(cfg, N)`` — N epochs in one jitted ``lax.scan`` with the
  in-scan metrics (train/test loss and accuracy, Σ w²) every ``log_every`` epochs, as
  ``train_grokking`` runs it. Its forward computes the MLP and unembedding only at the "=" position
  (the only one the loss reads; ``last_position_logits``) and the q/k/v projections once per
  (position, token).
* ``geomjax scan (full fwd)``: the same scan with the Flax ``ToyTransformer.apply`` forward over all
  3 positions (no in-scan test metrics) — the generic layout.
* ``torch (Nanda)``: the same network in PyTorch written as Nanda et al.'s code does it (all
  positions through attention, MLP and unembedding; loss at the last), ``torch.optim.AdamW``
  (foreach), ``LambdaLR`` warm-up, eager; metrics read once per N epochs.
* ``torch (last pos)``: PyTorch with the same algorithmic shortcuts as ``geomjax scan`` (MLP and
  unembedding at "=" only, q/k/v per (position, token)).

Timing: each side runs one warm-up chunk of N epochs (JAX compile time reported separately), then
chunks run interleaved, order rotated each round; ratios are medians over rounds. Torch threads =
XLA CPU threads. Final train losses of the two Nanda-style sides after the same epochs are printed
as a check that they train the same model.

Run:  .venv/bin/python benchmarks/bench_grokking.py [--epochs N] [--repeats R] [--out PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _common as C  # noqa: E402


def torch_side(params, data, cfg, last_only: bool):
    """PyTorch model + AdamW initialised from the JAX ``params``; returns ``chunk(n) -> last loss``."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    m, o, p = cfg.train.model, cfg.train.optim, cfg.train.options.p
    t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)
    P = nn.ParameterDict({
        "E": nn.Parameter(t(params["embed"]["embedding"])), "pos": nn.Parameter(t(params["pos_embed"]["embedding"])),
        "Wq": nn.Parameter(t(params["block_0"]["attn"]["q"]["kernel"])), "Wk": nn.Parameter(t(params["block_0"]["attn"]["k"]["kernel"])),
        "Wv": nn.Parameter(t(params["block_0"]["attn"]["v"]["kernel"])), "Wo": nn.Parameter(t(params["block_0"]["attn"]["o"]["kernel"])),
        "Win": nn.Parameter(t(params["block_0"]["mlp"]["fc"]["kernel"])), "bin": nn.Parameter(t(params["block_0"]["mlp"]["fc"]["bias"])),
        "Wout": nn.Parameter(t(params["block_0"]["mlp"]["proj"]["kernel"])), "bout": nn.Parameter(t(params["block_0"]["mlp"]["proj"]["bias"])),
        "WU": nn.Parameter(t(params["unembed"]["kernel"])),
    })
    x = torch.tensor(np.asarray(data.x_train), dtype=torch.long)
    y = torch.tensor(np.asarray(data.y_train), dtype=torch.long)
    K = m.head_dim
    mask = torch.tril(torch.ones(3, 3, dtype=torch.bool))

    def forward_full():
        h = P["E"][x] + P["pos"][None]  # (B, 3, d)
        q = torch.einsum("btd,dhk->bhtk", h, P["Wq"])
        k = torch.einsum("btd,dhk->bhtk", h, P["Wk"])
        v = torch.einsum("btd,dhk->bhtk", h, P["Wv"])
        s = (q @ k.transpose(-1, -2)) / math.sqrt(K)
        s = s.masked_fill(~mask, float("-inf"))
        z = torch.softmax(s, -1) @ v  # (B, H, 3, K)
        r = h + torch.einsum("bhtk,hkd->btd", z, P["Wo"])
        r = r + F.relu(r @ P["Win"] + P["bin"]) @ P["Wout"] + P["bout"]
        return (r @ P["WU"])[:, -1, :p]

    def forward_last():
        table = P["E"][None] + P["pos"][:, None]  # (3, V, d)
        q = torch.einsum("vd,dhk->vhk", table[2], P["Wq"])[x[:, 2]]
        kt = torch.einsum("tvd,dhk->tvhk", table, P["Wk"])
        vt = torch.einsum("tvd,dhk->tvhk", table, P["Wv"])
        ar = torch.arange(3)[None]
        k, v = kt[ar, x], vt[ar, x]  # (B, 3, H, K)
        a = torch.softmax(torch.einsum("bhk,bthk->bht", q, k) / math.sqrt(K), -1)
        z = torch.einsum("bht,bthk->bhk", a, v)
        r = table[2][x[:, 2]] + torch.einsum("bhk,hkd->bd", z, P["Wo"])
        r = r + F.relu(r @ P["Win"] + P["bin"]) @ P["Wout"] + P["bout"]
        return (r @ P["WU"])[:, :p]

    fwd = forward_last if last_only else forward_full
    opt = torch.optim.AdamW(P.values(), lr=o.lr, betas=(o.b1, o.b2), eps=o.eps, weight_decay=o.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / o.warmup_steps, 1.0))

    def chunk(n):
        losses = []
        for _ in range(n):
            loss = F.cross_entropy(fwd(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.detach())
        return float(torch.stack(losses)[-1])

    return chunk


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=50, help="epochs per timed chunk")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/grokking.md",
                    help="append the Markdown section to this file")
    ap.add_argument("--quick", action="store_true", help="10 epochs per chunk, 3 rounds")
    args = ap.parse_args(argv)
    if args.quick:
        args.epochs, args.repeats = 10, 3
    nthreads = C.set_threads()
    info = C.machine_info()

    import jax
    from geomjax.models.toy import ToyTransformer
    from geomjax.train import grokking as gk
    from geomjax.train.losses import cross_entropy
    from geomjax.train.loop import make_train_step
    from geomjax.train.optim import make_optimizer

    N = args.epochs
    cfg = gk.grokking_config("paper").replace(log_every=N // 2 if N % 2 == 0 else N, chunk_epochs=0)
    cfg = cfg.replace(epochs=N * (args.repeats + 1))
    data = gk.grokking_data(cfg)
    st0 = gk.grokking_init(cfg)
    params0 = jax.device_get(st0.params)

    # geomjax scan (as train_grokking runs it)
    run = gk.make_run_chunk(cfg, N)
    t0 = time.perf_counter()
    run_c = run.lower(st0, data).compile()
    compile_scan = time.perf_counter() - t0
    state = {"s": gk.grokking_init(cfg)}

    def jax_scan():
        state["s"], m = run_c(state["s"], data)
        jax.block_until_ready(m)
        return m

    # geomjax scan with the Flax full forward (all positions)
    model = ToyTransformer(cfg.train.model)
    tx, schedule = make_optimizer(cfg.train.optim)
    p = cfg.train.options.p

    def loss_fn(prm, batch, key):
        logits, _ = model.apply({"params": prm}, batch["x"])
        return cross_entropy(logits[:, -1, :p], batch["y"]), {}

    step = make_train_step(loss_fn, tx, lambda d, k: {"x": d.x_train, "y": d.y_train})
    full = jax.jit(lambda s, d: jax.lax.scan(lambda c, _: step(c, d), s, None, length=N), donate_argnums=0)
    t0 = time.perf_counter()
    full_c = full.lower(gk.grokking_init(cfg), data).compile()
    compile_full = time.perf_counter() - t0
    state_f = {"s": gk.grokking_init(cfg)}

    last = {}

    def jax_full():
        state_f["s"], m = full_c(state_f["s"], data)
        jax.block_until_ready(m)
        last["jax"] = float(m["loss"][-1])
        return m

    t_nanda = torch_side(params0, data, cfg, last_only=False)
    t_last = torch_side(params0, data, cfg, last_only=True)
    def torch_nanda():
        last["torch"] = t_nanda(N)

    sides = {"geomjax scan": jax_scan, "geomjax scan (full fwd)": jax_full,
             "torch (Nanda)": torch_nanda, "torch (last pos)": lambda: t_last(N)}
    for f in sides.values():  # warm-up chunk
        f()
    times = C.interleaved(sides, args.repeats)
    med = {k: float(np.median(v)) for k, v in times.items()}
    eps = {k: N / v for k, v in med.items()}
    rows = [[k, f"{eps[k]:.2f}", f"{med[k] * 1e3 / N:.1f}"] for k in sides]
    r_main = C.ratio_stats(times["torch (Nanda)"], times["geomjax scan"])
    r_same = C.ratio_stats(times["torch (last pos)"], times["geomjax scan"])
    r_full = C.ratio_stats(times["torch (Nanda)"], times["geomjax scan (full fwd)"])
    info["load_avg_end"] = C.load_avg()
    text = "\n".join([
        "## Grokking trainer: full-batch epochs/s (bench_grokking.py)", "",
        C.machine_block(info), "",
        f"Nanda et al.'s model at p = 113 (3,830 training pairs, full batch), {N} epochs per timed chunk, "
        f"{args.repeats} interleaved rounds after one warm-up chunk; torch threads = {nthreads}.", "",
        C.markdown_table(["side", "epochs/s", "ms/epoch"], rows), "",
        f"- geomjax scan vs torch (Nanda's layout): {C.fmt_ratio(r_main)}",
        f"- geomjax scan vs torch with the same last-position shortcuts: {C.fmt_ratio(r_same)}",
        f"- geomjax scan with the full Flax forward vs torch (Nanda's layout), same algorithm: {C.fmt_ratio(r_full)}",
        f"- compile (not timed above): scan {compile_scan:.1f} s, full-forward scan {compile_full:.1f} s",
        f"- check (same model, same training): train loss at epoch {(args.repeats + 1) * N - 1}: JAX full-forward "
        f"{last['jax']:.6f}, torch (Nanda) {last['torch']:.6f}",
        C.load_warning().strip(), "",
    ])
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        C.write_section(args.out, text)


if __name__ == "__main__":
    main()
