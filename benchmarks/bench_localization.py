"""Benchmarks of geomjax.theory.localization (Bao et al.): empirical ρ_i and LocATER training steps/s.

1. Empirical signal propagation probability (Def. 1, Fig. 5): D draws of W_QK × S random walks
   (Assumption 1) × T tokens. ``geomjax``: :func:`geomjax.theory.localization.empirical_rho`, one jitted
   vmap over draws × sequences (tokens vectorised), compile excluded. ``numpy loop``: the same math
   with NumPy, looping in Python over draws, sequences and tokens (walk by cumulative sum, ω_j per
   token, the score ⟨γ^i, ω⟩ + γ_0^i and the [0, 1] test per token). Throughput in (draw, sequence,
   token) samples per second.
2. LocATER training steps/s: the §7 model (1 layer, 1 head, post-LN, d 128, FFN 128, T 64,
   untied output, ReLU, sinusoidal positions; dropout 0) with cross-entropy + κ1·‖W_qW_kᵀ‖_F² +
   κ2·(tr(W_qW_kᵀ) − 1)² and Adam with decoupled weight decay 0.01. ``geomjax``: the jitted
   ``lax.scan`` chunk of :mod:`geomjax.train.locater` with a single κ2 (N steps per call);
   ``torch``: the same network and loss in PyTorch eager with ``torch.optim.AdamW`` (N steps from
   Python). Compile time reported separately; chunks interleaved, median ratio.

The first comparison is bounded by random-number generation (XLA:CPU's threefry normals cost several
times NumPy's); the second one gives both sides the same pre-drawn walks.

Run:  .venv/bin/python benchmarks/bench_localization.py [--quick] [--out benchmarks/results/localization.md]
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


def numpy_rho(rng, Ws, F, lam, T, n_seq):
    """Empirical ρ_i with explicit loops over draws × sequences × tokens (NumPy)."""
    D, d = Ws.shape[0], F.shape[0]
    out = np.zeros((D, T))
    for a in range(D):
        M = F.T @ Ws[a] @ F
        for _ in range(n_seq):
            Z = np.cumsum(rng.standard_normal((T, d)), axis=0)
            q = M @ Z[-1]
            omega = np.empty(T)
            for j in range(T):
                omega[j] = Z[j] @ q / lam
            mean = omega.mean()
            for i in range(T):
                s = (omega[i] - mean) / T + 1.0 / T
                out[a, i] += 0.0 <= s <= 1.0
    return out / n_seq


def numpy_rho_from_walks(Z, M, lam):
    """Def. 1 frequencies from given walks, loops over draws × sequences × tokens (NumPy)."""
    D, S, T, _ = Z.shape
    out = np.zeros((D, T))
    for a in range(D):
        for b in range(S):
            q = M[a] @ Z[a, b, -1]
            omega = np.empty(T)
            for j in range(T):
                omega[j] = Z[a, b, j] @ q / lam
            mean = omega.mean()
            for i in range(T):
                s = (omega[i] - mean) / T + 1.0 / T
                out[a, i] += 0.0 <= s <= 1.0
    return out / S


def _rate_table(title, jax_label, times, shape_jax, shape_np, compile_s, note=""):
    """Samples/s of both sides from interleaved times; (Markdown text, ratio stats)."""
    (D, S, T), (_, S_np, _) = shape_jax, shape_np
    rate_jax = [D * S * T / t for t in times["jax"]]
    rate_np = [D * S_np * T / t for t in times["numpy"]]
    ratio = C.ratio_stats(rate_jax, rate_np)
    rows = [[jax_label, f"{D}×{S}×{T}", f"{np.median(times['jax']) * 1e3:.2f} ms",
             f"{np.median(rate_jax):.3g}", f"{compile_s:.2f} s"],
            ["NumPy loop (draws × seqs × tokens)", f"{D}×{S_np}×{T}", f"{np.median(times['numpy']) * 1e3:.1f} ms",
             f"{np.median(rate_np):.3g}", "—"]]
    text = (f"### {title}\n\n"
            + C.markdown_table(["side", "draws×seqs×tokens", "time / call (median)", "samples/s", "compile"], rows)
            + f"\n\nspeed-up (samples/s, geomjax / NumPy loop): {C.fmt_ratio(ratio)} (goal ≥ 50×){note}\n")
    return text, ratio


def bench_rho_given(args):
    """The same math on pre-drawn walks (random number generation excluded on both sides)."""
    import jax
    import jax.numpy as jnp

    from geomjax.theory import localization as loc

    d, T = 128, 40
    D, S = (4, 300) if not args.quick else (2, 100)
    S_np = 30 if not args.quick else 10
    rng = np.random.default_rng(1)
    Z = np.cumsum(rng.standard_normal((D, S, T, d)), axis=2).astype(np.float32)
    A = rng.normal(size=(D, d, d)).astype(np.float32) * 0.01
    M = A + np.swapaxes(A, 1, 2)
    lam = math.sqrt(d)
    Zj, Mj = jnp.asarray(Z), jnp.asarray(M)
    t0 = time.perf_counter()
    got = np.asarray(jax.block_until_ready(loc.rho_from_walks(Zj, Mj, lam)))
    compile_s = time.perf_counter() - t0
    ref = numpy_rho_from_walks(Z[:, :S_np].astype(np.float64), M.astype(np.float64), lam)
    agree = float(np.max(np.abs(np.asarray(loc.rho_from_walks(Zj[:, :S_np], Mj, lam)) - ref)))
    run_jax = lambda: jax.block_until_ready(loc.rho_from_walks(Zj, Mj, lam))
    run_np = lambda: numpy_rho_from_walks(Z[:, :S_np], M, lam)
    times = C.interleaved({"jax": run_jax, "numpy": run_np}, repeats=args.repeats)
    text, ratio = _rate_table(
        "Empirical ρ_i from given walks (random numbers drawn beforehand, shared by both sides)",
        "geomjax rho_from_walks (jit, vmapped einsum)", times, (D, S, T), (D, S_np, T), compile_s,
        f"; max |difference| of the frequencies on the common walks: {agree:.3g} (float32 vs float64 rounding)")
    return text, ratio


def bench_rho(args, info):
    import jax
    import jax.numpy as jnp

    from geomjax.theory import localization as loc

    d, T = 128, 40
    D, S = (4, 300) if not args.quick else (2, 100)
    S_np = 30 if not args.quick else 10
    Ws = jnp.stack([loc.random_wqk(jax.random.key(i), d, 0.1, 0.1)[0] for i in range(D)])
    F = jnp.eye(d)
    lam = math.sqrt(d)
    t0 = time.perf_counter()
    jax.block_until_ready(loc.empirical_rho(jax.random.key(0), Ws, F, lam, T=T, n_seq=S)["rho"])
    compile_s = time.perf_counter() - t0
    k = [1]

    def run_jax():
        k[0] += 1
        jax.block_until_ready(loc.empirical_rho(jax.random.key(k[0]), Ws, F, lam, T=T, n_seq=S)["rho"])

    rng = np.random.default_rng(0)
    Wn, Fn = np.asarray(Ws, np.float64), np.eye(d)
    run_np = lambda: numpy_rho(rng, Wn, Fn, lam, T, S_np)
    run_np()
    times = C.interleaved({"jax": run_jax, "numpy": run_np}, repeats=args.repeats)
    text, ratio = _rate_table(
        "Empirical ρ_i (Def. 1), d = 128, T = 40, random walks drawn inside (JAX threefry vs NumPy PCG64)",
        "geomjax empirical_rho (jit, vmap)", times, (D, S, T), (D, S_np, T), compile_s)
    return text, ratio


def torch_locater(V, d, T, k1, k2, lr, wd):
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc, self.proj = nn.Linear(d, d), nn.Linear(d, d)
            self.out = nn.Linear(d, V, bias=False)
            pos = torch.arange(T)[:, None]
            i = torch.arange(0, d, 2)[None, :]
            ang = pos / torch.pow(10000.0, i / d)
            pe = torch.zeros(T, d)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(ang), torch.cos(ang)
            self.register_buffer("pe", pe)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, ids):
            x = self.emb(ids) * math.sqrt(d) + self.pe[: ids.shape[1]]
            q, k, v = self.q(x), self.k(x), self.v(x)
            s = (q @ k.transpose(1, 2)) / math.sqrt(d)
            s = s.masked_fill(~self.mask, torch.finfo(s.dtype).min)
            a = torch.softmax(s, -1)
            x = self.ln1(x + self.o(a @ v))
            x = self.ln2(x + self.proj(torch.relu(self.fc(x))))
            return self.out(x)

    m = Model()
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)

    def step(ids):
        logits = m(ids[:, :-1])
        ce = nn.functional.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        Wqk = m.q.weight.T @ m.k.weight  # (d, d), x W_q W_kᵀ xᵀ
        loss = ce + k1 * (Wqk * Wqk).sum() + k2 * (torch.trace(Wqk) - 1) ** 2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return ce.detach()

    return step


def bench_train(args, info):
    import jax
    import jax.numpy as jnp
    import torch

    from geomjax.train import locater as L

    N = 10 if args.quick else 20
    cfg = L.LocaterConfig(kappa2s=(1.0,), batch_size=16, vocab_cap=1024, optim=L.fairseq_adam(lr=1e-3), dropout=0.0,
                          steps=N, steps_per_call=N, eval_every=N, ckpt_every=0)
    data = L.load_wikitext_words(cfg)
    V = len(data.vocab)
    prog = L.build(cfg, V)
    stream = jnp.asarray(data.train)
    state = [prog.init(jax.random.key(0))]
    t0 = time.perf_counter()
    st, m = prog.chunk(state[0], stream)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    state[0] = st

    def run_jax():
        st, m = prog.chunk(state[0], stream)
        jax.block_until_ready(m)
        state[0] = st

    torch.manual_seed(0)
    step = torch_locater(V, cfg.d_model, cfg.seq_len, cfg.kappa1, 1.0, cfg.optim.lr, cfg.optim.weight_decay)
    rng = np.random.default_rng(0)
    tr = torch.from_numpy(data.train.astype(np.int64))

    def run_torch():
        for _ in range(N):
            s = rng.integers(0, tr.numel() - cfg.seq_len - 1, size=cfg.batch_size)
            ids = torch.stack([tr[a:a + cfg.seq_len + 1] for a in s])
            step(ids)

    t0 = time.perf_counter()
    run_torch()
    torch_warm = time.perf_counter() - t0
    times = C.interleaved({"jax": run_jax, "torch": run_torch}, repeats=args.repeats)
    sps_j = [N / t for t in times["jax"]]
    sps_t = [N / t for t in times["torch"]]
    ratio = C.ratio_stats(sps_j, sps_t)
    rows = [["geomjax (jit lax.scan chunk)", f"{np.median(sps_j):.2f}", f"{compile_s:.1f} s (compile + first chunk)"],
            ["PyTorch eager + AdamW", f"{np.median(sps_t):.2f}", f"{torch_warm:.1f} s (first chunk)"]]
    text = (f"### LocATER training steps/s (§7 model, d 128, T {cfg.seq_len}, batch {cfg.batch_size}, V {V}, one κ2)\n\n"
            + C.markdown_table(["side", "steps/s (median)", "warm-up"], rows)
            + f"\n\nspeed-up (steps/s, geomjax / PyTorch): {C.fmt_ratio(ratio)}\n")
    return text, ratio


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/localization.md")
    args = ap.parse_args(argv)
    C.set_threads()
    info = C.machine_info()
    t_rho, r_rho = bench_rho(args, info)
    print(t_rho)
    t_giv, r_giv = bench_rho_given(args)
    print(t_giv)
    t_rho = t_rho + "\n" + t_giv
    t_tr, r_tr = bench_train(args, info)
    print(t_tr)
    info["load_avg_end"] = C.load_avg()
    text = ("## bench_localization (Bao et al.: empirical ρ_i, LocATER training)\n\n" + C.machine_block(info)
            + C.load_warning() + "\n\n" + t_rho + "\n" + t_tr)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        C.write_section(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
