"""Training steps/s of the geomjax toy transformer against an equivalent PyTorch model + AdamW loop.

Model and task (``--preset cpu``, the default; ``--preset paper`` times the paper preset's step, on an
accelerator): the ``shakespeare`` / ``cpu`` preset of ``geomjax.train.get_config`` — a NanoGPT-like
character LM on tiny Shakespeare (V 65): 4 layers, 4 heads, d 128, MLP 512, T 64, batch 32,
pre-LN without biases (LayerNorm included), exact-erf GELU, learned positions, tied unembedding,
no dropout; AdamW (β 0.9/0.99, eps 1e-8, weight decay 0.1 on matrices and embeddings), linear
warm-up 100 steps then cosine to 2e-4 at step 1000, global-norm clipping at 1.0, float32.
``--task addition``: the ``addition`` / ``cpu`` preset instead (6-digit addition with the reversed
answer, V 13, T 21, batch 64, 2 layers, 4 heads, d 128, MLP 512, biases in LayerNorm, q/k/v/o and the
MLP, untied unembedding, embeddings not decayed, loss and accuracy on the answer's tokens only);
problems drawn at random from the same training set on both sides.

Sides (same shapes, same parameter count, same optimizer and schedule, batches of random windows
drawn every step from the same 90% training split):

* ``geomjax scan``: ``build_programs(cfg).chunk_fn`` — N steps in one jitted ``lax.scan``
  (what ``geomjax.train.fit`` runs), metrics fetched once per chunk;
* ``geomjax step``: the jitted single step (``jit_train_step``, state donated) called N times
  from Python;
* ``torch``: the same network written in PyTorch (NanoGPT layout: fused q/k/v projection,
  ``scaled_dot_product_attention(is_causal=True)``), ``torch.optim.AdamW`` (default foreach
  implementation) with the same decay groups, ``LambdaLR`` with the same schedule,
  ``clip_grad_norm_``, eager mode; loss, accuracy and grad norm kept per step, read once per chunk;
* ``torch.compile`` (``--torch-compile``): the same with the model wrapped in ``torch.compile``.

Timing: every side is compiled / warmed up with one chunk of N steps (JAX compile time reported
separately), then chunks of N steps run interleaved (A, B, C, A, B, C, ..., order rotated each
round); the ratio is the median over rounds of time(torch) / time(geomjax). Torch threads = XLA
CPU threads (= usable CPUs). ``--device``: PyTorch trains on CUDA when JAX is on a GPU (model, data and
optimizer state on the device; each chunk ends with a synchronize). The training losses of both sides after the same number of steps are
printed as a check that they train the same model.

Run:  .venv/bin/python benchmarks/bench_train.py [--quick] [--task addition] [--torch-compile] [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402


# ------------------------------------------------------------------------------------ PyTorch side

def torch_model(cfg):
    """A PyTorch module computing the geomjax ToyTransformer of ``cfg`` (NanoGPT parameterisation)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    m = cfg
    assert m.layer_norm == "pre" and m.activation == "gelu" and m.pos_embedding == "learned" and m.causal
    assert m.dropout == 0.0 and m.init == "gpt2" and not m.unembed_bias and m.vocab_out is None and m.d_head is None
    d, H, L = m.d_model, m.n_heads, m.n_layers

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d, eps=m.ln_eps, bias=m.ln_bias)
            self.c_attn = nn.Linear(d, 3 * d, bias=m.attn_bias)  # q, k, v fused (same parameter count)
            self.c_proj = nn.Linear(d, d, bias=m.attn_bias)
            self.ln_2 = nn.LayerNorm(d, eps=m.ln_eps, bias=m.ln_bias)
            self.fc = nn.Linear(d, m.d_mlp, bias=m.mlp_bias)
            self.proj = nn.Linear(m.d_mlp, d, bias=m.mlp_bias)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, d))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(m.vocab_size, d)
            self.wpe = nn.Embedding(m.max_len, d)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(d, eps=m.ln_eps, bias=m.ln_bias)
            self.lm_head = None if m.tie_embeddings else nn.Linear(d, m.vocab_size, bias=False)
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "proj.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.wte(ids) + self.wpe.weight[:T][None]
            for blk in self.h:
                x = blk(x)
            x = self.ln_f(x)
            return x @ self.wte.weight.T if self.lm_head is None else self.lm_head(x)

    return GPT()


def torch_trainer(cfg, data_np, seed=0, compile_model=False, dev=None):
    """Return (run_chunk(n) -> metrics dict of stacked tensors, model). ``data_np``: the task data of
    ``load_task_data`` as NumPy (``stream`` for shakespeare; ``ids`` and ``loss_mask`` rows for addition)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = torch_model(cfg.model).to(dev.torch)
    fwd = torch.compile(model) if compile_model else model
    o = cfg.optim
    # geomjax.train.optim.decay_mask: matrices decay, embeddings only with decay_embeddings
    decays = {n: p.dim() >= 2 and (o.decay_embeddings or n not in ("wte.weight", "wpe.weight"))
              for n, p in model.named_parameters()}
    decay = [p for n, p in model.named_parameters() if decays[n]]
    no_decay = [p for n, p in model.named_parameters() if not decays[n]]  # LayerNorm, biases (embeddings)
    assert o.decay == "matrices" and o.schedule == "cosine"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o.lr, betas=(o.b1, o.b2), eps=o.eps)

    H = o.horizon(cfg.total_steps)  # the cosine's horizon: the run's length unless pinned

    def lr_factor(step):  # optax.warmup_cosine_decay_schedule(0, lr, warmup, H, final_lr) / lr
        if step < o.warmup_steps:
            return step / o.warmup_steps
        t = min(step - o.warmup_steps, H - o.warmup_steps) / (H - o.warmup_steps)
        return (o.final_lr + (o.lr - o.final_lr) * 0.5 * (1 + math.cos(math.pi * t))) / o.lr

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    B, T1 = cfg.batch_size, cfg.seq_len + 1
    gen = torch.Generator(device=dev.torch).manual_seed(seed + 1)
    if cfg.task == "shakespeare":  # random windows of the character stream
        stream = dev.tensor(np.asarray(data_np["stream"]).astype(np.int64))
        offs = torch.arange(T1, device=dev.torch)

        def batch():
            starts = torch.randint(0, stream.numel() - T1 + 1, (B,), generator=gen, device=dev.torch)
            return stream[starts[:, None] + offs], None
    else:  # addition: random problems, the loss on the answer's tokens (loss_mask)
        rows = dev.tensor(np.asarray(data_np["ids"]).astype(np.int64))
        masks = dev.tensor(np.asarray(data_np["loss_mask"]).astype(np.float32))

        def batch():
            idx = torch.randint(0, rows.shape[0], (B,), generator=gen, device=dev.torch)
            return rows[idx], masks[idx, 1:]

    def run_chunk(n):
        losses, accs, norms = [], [], []
        for _ in range(n):
            ids, m = batch()
            x, y = ids[:, :-1], ids[:, 1:]
            logits = fwd(x)
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
            loss = ce.mean() if m is None else (ce * m.reshape(-1)).sum() / m.sum().clamp(min=1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip or math.inf))
            opt.step()
            sched.step()
            with torch.no_grad():
                hit = (logits.argmax(-1) == y).float()
                accs.append(hit.mean() if m is None else (hit * m).sum() / m.sum().clamp(min=1.0))
            losses.append(loss.detach())
        return {"loss": torch.stack(losses).cpu().numpy(), "accuracy": torch.stack(accs).cpu().numpy(),
                "grad_norm": torch.stack(norms).cpu().numpy()}  # .cpu() waits for the chunk

    return run_chunk, model


# ------------------------------------------------------------------------------------ geomjax side

def geomjax_trainers(cfg):
    """Return (run_scan_chunk, run_step_loop, n_params, compile_s dict)."""
    import jax

    from geomjax.models.toy import param_count
    from geomjax.train import build_programs, init_state, jit_train_step, load_task_data

    pr = build_programs(cfg)
    data, _, info = load_task_data(cfg)
    N = cfg.steps_per_call

    # scan chunk (what fit() runs)
    s_scan = init_state(cfg, pr)
    n_params = param_count(s_scan.params)
    t0 = time.perf_counter()
    chunk = pr.chunk_fn.lower(s_scan, data).compile()
    t_chunk = time.perf_counter() - t0
    box = {"scan": s_scan}

    def run_scan():
        box["scan"], metrics = chunk(box["scan"], data)
        return jax.device_get(metrics)

    # single jitted step, called from Python
    s_step = init_state(cfg, pr)
    step_jit = jit_train_step(pr.step_fn)
    t0 = time.perf_counter()
    step = step_jit.lower(s_step, data).compile()
    t_step = time.perf_counter() - t0
    box["step"] = s_step

    def run_steps():
        ms = []
        st = box["step"]
        for _ in range(N):
            st, m = step(st, data)
            ms.append(m)
        box["step"] = st
        return jax.device_get(jax.tree.map(lambda *a: jax.numpy.stack(a), *ms))

    return run_scan, run_steps, n_params, {"scan chunk": t_chunk, "step": t_step}, data, info


# ------------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (N=10 steps per chunk, 3 rounds)")
    ap.add_argument("--task", choices=("shakespeare", "addition"), default="shakespeare",
                    help="the cpu preset of which task (default shakespeare)")
    ap.add_argument("--torch-compile", action="store_true", help="also time torch.compile(model)")
    ap.add_argument("--steps", type=int, default=None, help="steps per chunk N")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    ap.add_argument("--json", default=None, help="write raw results to this JSON file")
    ap.add_argument("--preset", choices=("cpu", "paper"), default="cpu", help="the task's preset (default cpu)")
    ap.add_argument("--batch-size", type=int, default=None, help="override the preset's batch (--quick paper: 8)")
    C.add_device_argument(ap)
    args = ap.parse_args()

    dev = C.select_device(args.device)
    import jax

    from geomjax.train import get_config

    n_threads = C.set_threads()
    info = C.machine_info(dev)
    info["jax backend"] = f"{jax.default_backend()} ({len(jax.devices())} device)"
    print(C.machine_block(info), flush=True)

    paper = args.preset == "paper"
    N = args.steps or ((2 if paper else 10) if args.quick else (10 if paper else 50))
    rounds = args.rounds or ((2 if paper else 3) if args.quick else (3 if paper else 7))
    # the cpu preset's run and schedule (its first N steps are timed): the length stays the preset's, since the
    # schedule follows it (a run of N steps would end inside the warm-up, which TrainConfig refuses)
    cfg = get_config(args.task, args.preset).replace(steps_per_call=N, eval_every=0, ckpt_every=0)
    departures = []
    if cfg.model.dropout:  # the PyTorch twin has no dropout: both sides train without it
        cfg = cfg.replace(model=dataclasses.replace(cfg.model, dropout=0.0))
        departures.append("dropout 0 on both sides (the preset's is applied by geomjax only)")
    batch = args.batch_size or (8 if args.quick and paper else None)
    if batch:
        cfg = cfg.replace(batch_size=batch)
        departures.append(f"batch {batch}")
    m = cfg.model
    print(f"config: {m}\n  batch {cfg.batch_size}, T {cfg.seq_len}, N {N} steps per chunk, {rounds} rounds",
          flush=True)

    run_scan, run_steps, n_gj, compile_s, data, _ = geomjax_trainers(cfg)
    data_np = {k: np.asarray(v) for k, v in data.items()}
    run_torch, tmodel = torch_trainer(cfg, data_np, dev=dev)
    n_torch = sum(p.numel() for p in tmodel.parameters())
    print(f"parameters: geomjax {n_gj:,}  torch {n_torch:,}", flush=True)
    if n_gj != n_torch:
        raise SystemExit(f"parameter counts differ: geomjax {n_gj} vs torch {n_torch}")

    fns = {"geomjax scan": run_scan, "geomjax step": run_steps, "torch": lambda: run_torch(N)}
    if args.torch_compile:
        run_tc, _ = torch_trainer(cfg, data_np, compile_model=True, dev=dev)
        fns["torch.compile"] = lambda: run_tc(N)

    # warm-up: one chunk each (steps 0..N-1); torch.compile compiles here
    warm = {}
    first_loss = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        out = f()
        warm[k] = time.perf_counter() - t0
        first_loss[k] = float(np.asarray(out["loss"])[0])
    print("warm-up chunk s:", {k: round(v, 2) for k, v in warm.items()}, flush=True)

    # timed rounds; keep the losses of the last chunk for the equivalence check
    last = {}

    def keep(name, f):
        def g():
            last[name] = f()
        return g

    times = C.interleaved({k: keep(k, f) for k, f in fns.items()}, rounds)
    steps_done = N * (rounds + 1)
    last_loss = {k: float(np.mean(np.asarray(v["loss"]))) for k, v in last.items()}
    sps = {k: N / float(np.median(v)) for k, v in times.items()}
    ratios = {k: C.ratio_stats(times[k], times["geomjax scan"]) for k in fns if k != "geomjax scan"}
    ratios_step = {k: C.ratio_stats(times[k], times["geomjax step"]) for k in fns if k.startswith("torch")}
    for k in fns:
        print(f"  {k:<14} {sps[k]:7.2f} steps/s  loss at step 0 {first_loss[k]:.3f}, "
              f"mean loss over steps {steps_done - N}..{steps_done - 1}: {last_loss[k]:.3f}", flush=True)
    print("ratios vs geomjax scan:", json.dumps(ratios), flush=True)

    title = (f"## Training steps/s: geomjax toy transformer vs PyTorch, {args.task} ({args.preset} preset)"
             f"{' — quick' if args.quick else ''}")
    rows = []
    for k in fns:
        r_scan = "1 (reference)" if k == "geomjax scan" else C.fmt_ratio(ratios[k])
        r_step = C.fmt_ratio(ratios_step[k]) if k in ratios_step else ("1 (reference)" if k == "geomjax step" else "")
        comp = compile_s.get("scan chunk" if k == "geomjax scan" else "step" if k == "geomjax step" else "", None)
        comp = f"{comp:.2f}" if comp is not None else (f"{warm[k]:.1f} (warm-up chunk)" if k == "torch.compile" else "—")
        rows.append([k, f"{sps[k]:.2f}", r_scan, r_step, comp, f"{first_loss[k]:.3f}", f"{last_loss[k]:.3f}"])
    text = "\n".join([
        title, "", C.machine_block(info), "",
        f"Task: `get_config(\"{args.task}\", \"{args.preset}\")` — "
        + ("char-level tiny Shakespeare" if args.task == "shakespeare" else
           f"{cfg.options.max_digits}-digit addition, loss on the answer's tokens")
        + f", {m.n_layers} layers, {m.n_heads} heads, d {m.d_model}, MLP {m.d_mlp}, T {cfg.seq_len}, "
        f"batch {cfg.batch_size}, pre-LN {'with' if m.ln_bias or m.attn_bias else 'without'} biases, erf GELU, "
        f"{'tied' if m.tie_embeddings else 'untied'} unembedding, AdamW + warm-up/cosine"
        f"{f' + clip {cfg.optim.grad_clip}' if cfg.optim.grad_clip else ''}, float32. "
        f"Parameters: geomjax **{n_gj:,}**, PyTorch **{n_torch:,}**."
        + (f" Departures from the preset: {'; '.join(departures)}." if departures else ""), "",
        f"Chunks of N = {N} steps, {rounds} interleaved rounds after one warm-up chunk per side. "
        "*time ratio vs …* = time(row) / time(reference) per round, median (min–max): > 1 means the "
        "row is slower than the geomjax reference. Losses: at step 0, and mean over the last timed "
        f"chunk (steps {steps_done - N}–{steps_done - 1}; every side ran the same number of steps).", "",
        C.markdown_table(["side", "steps/s", "time ratio vs geomjax scan", "time ratio vs geomjax step",
                          "compile s", "loss step 0", "loss last chunk"], rows), "",
        ("The torch.compile warm-up chunk includes its compilation (Inductor's on-disk cache makes it "
         "shorter on re-runs); its per-step time is measured after that.\n" if args.torch_compile else ""),
        f"Load average at the end: {C.load_avg()} (other processes shared the cores; interleaving "
        "spreads their effect over every side)." + C.load_warning(),
    ])
    print("\n" + text)
    C.write_section(args.out, text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "threads": n_threads, "N": N, "rounds": rounds, "times_s": times,
                       "steps_per_s": sps, "ratios_vs_scan": ratios, "ratios_vs_step": ratios_step,
                       "compile_s": compile_s, "warmup_s": warm, "params": {"geomjax": n_gj, "torch": n_torch},
                       "loss_first": first_loss, "loss_last_chunk": last_loss}, f, indent=2)


if __name__ == "__main__":
    main()
