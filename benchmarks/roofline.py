"""Paper-scale programs against their roofline, on this CPU and (on paper) on an H100.

CI and the development machine have no GPU, so this script compiles the programs that the paper
presets run — the streaming decomposition update at C = 6400, T = 512 for the GPT-2-small and
Llama-2-7B shapes, one grokking epoch (Nanda et al.'s p = 113 model, 30% of the pairs, full batch)
and one LocATER κ2-sweep step (Bao et al. §7: d 128, T 64, batch 64, five κ2 vmapped) — for the
CPU backend and reads XLA's ``cost_analysis()``: the flops and the bytes accessed of one call.

For each program it prints:

* the measured CPU time of one call (median of ``--repeats`` after a compiling call),
* the CPU's own roofline bound max(flops / F, bytes / B), with F and B *measured* in the same run
  (F: a 2048³ float32 GEMM, B: a 256 MiB float32 scale-and-copy), and the fraction of it reached,
* the H100 (SXM) lower bound at the datasheet peaks: 989 TFLOP/s dense bf16, ~67 TFLOP/s fp32
  (non-tensor-core), 3.35 TB/s HBM3 — max(flops / peak, bytes / 3.35 TB/s), for the whole
  paper-scale job (the per-call numbers times the number of calls the preset makes).

XLA's CPU cost model counts a dot as 2·m·n·k flops and "bytes accessed" as the operands and results
of every HLO op after fusion; it is a model, not a measurement (a GPU build fuses differently), so
the H100 column is a bound of the same work, not a prediction of the GPU's time.

    .venv/bin/python benchmarks/roofline.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402  (re-executes with full-speed BLAS settings; see _common)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from geomjax.theory import decomposition as dec  # noqa: E402
from geomjax.train import grokking as g  # noqa: E402
from geomjax.train import locater as L  # noqa: E402

H100 = {"bf16_flops": 989e12, "fp32_flops": 67e12, "hbm_bytes": 3.35e12}


@dataclasses.dataclass
class Program:
    name: str
    shape: str
    calls: int  # calls the paper-scale job makes
    call_unit: str  # what one call is
    compiled: object
    args: tuple


def cost(compiled) -> tuple[float, float]:
    """(flops, bytes accessed) of one call from XLA's cost analysis."""
    c = compiled.cost_analysis()
    if isinstance(c, (list, tuple)):  # older jax returned one dict per computation
        c = c[0]
    return float(c.get("flops", 0.0)), float(c.get("bytes accessed", 0.0))


def median_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile / warm
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def cpu_peaks(repeats: int) -> dict[str, float]:
    """Measured float32 GEMM rate (flop/s) and streaming bandwidth (bytes/s) of this machine."""
    n = 2048
    a = jnp.ones((n, n), jnp.float32)
    gemm = jax.jit(lambda x: x @ x)
    t_gemm = median_time(lambda: gemm(a), repeats)
    x = jnp.ones((64 << 20,), jnp.float32)  # 256 MiB
    scale = jax.jit(lambda v: v * 1.0001)
    t_copy = median_time(lambda: scale(x), repeats)
    return {"flops": 2 * n**3 / t_gemm, "bytes": 2 * x.nbytes / t_copy}


def stream_program(name: str, d: int, n_states: int, B: int = 8, T: int = 512, C: int = 6400) -> Program:
    """One streaming-decomposition update (eqs. (2)-(3) sums) of a (B, T, d) batch of one state."""
    batch = jax.random.normal(jax.random.key(0), (B, T, d), jnp.float32)
    state = dec.stream_init(batch)
    upd = jax.jit(lambda s, b: dec.stream_update(s, b)[0])
    compiled = upd.lower(state, batch).compile()
    return Program(name, f"B {B}, T {T}, d {d}; {n_states} states, C {C}", (C // B) * n_states,
                   "update of one state's (B, T, d) batch", compiled, (state, batch))


def grokking_program(preset: str) -> Program:
    """``log_every`` full-batch epochs of the grokking model (one jitted scan chunk)."""
    cfg = g.grokking_config(preset)
    data = g.grokking_data(cfg)
    state = g.grokking_init(cfg)
    run = g.make_run_chunk(cfg, cfg.log_every)
    compiled = run.lower(state, data).compile()
    t, o = cfg.train, cfg.train.options
    return Program(f"grokking epoch ({preset})",
                   f"p {o.p}, {int(round(o.train_frac * 100))}% train, d {t.model.d_model}, {cfg.epochs} epochs",
                   cfg.epochs // cfg.log_every, f"{cfg.log_every} epochs", compiled, (state, data))


def locater_program(vocab_size: int) -> Program:
    """One step of the vmapped κ2 sweep at the paper's sizes (5 κ2, d 128, T 64, batch 64)."""
    cfg = L.LocaterConfig(steps_per_call=1, eval_every=1, ckpt_every=0)
    prog = L.build(cfg, vocab_size)
    state = prog.init(jax.random.key(0))
    stream = jax.random.randint(jax.random.key(1), (200_000,), 0, vocab_size, jnp.int32)
    compiled = prog.chunk.lower(state, stream).compile()
    return Program("LocATER sweep step", f"V {vocab_size}, d {cfg.d_model}, T {cfg.seq_len}, B {cfg.batch_size}, "
                   f"{len(cfg.kappa2s)} κ2 vmapped", cfg.steps, "one optimizer step of all κ2", compiled,
                   (state, stream))


def measure(p: Program, peaks: dict[str, float], repeats: int) -> dict[str, float]:
    flops, nbytes = cost(p.compiled)
    if p.name.startswith("grokking") or p.name.startswith("LocATER"):
        # the state is donated: give every call its own copy of the state
        state, rest = p.args[0], p.args[1:]
        fn = lambda: p.compiled(jax.tree_util.tree_map(jnp.copy, state), *rest)  # noqa: E731
    else:
        state, batch = p.args
        fn = lambda: p.compiled(jax.tree_util.tree_map(jnp.copy, state), batch)  # noqa: E731
    t = median_time(fn, repeats)
    cpu_bound = max(flops / peaks["flops"], nbytes / peaks["bytes"])
    h_fp32 = max(flops / H100["fp32_flops"], nbytes / H100["hbm_bytes"])
    h_bf16 = max(flops / H100["bf16_flops"], (nbytes / 2) / H100["hbm_bytes"])
    return {"flops": flops, "bytes": nbytes, "cpu_s": t, "cpu_bound_s": cpu_bound,
            "cpu_frac": cpu_bound / t, "cpu_total_s": t * p.calls,
            "h100_fp32_total_s": h_fp32 * p.calls, "h100_bf16_total_s": h_bf16 * p.calls,
            "intensity": flops / max(nbytes, 1.0)}


def fmt_s(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.2f} ms"


def markdown(rows: list[tuple[Program, dict]], peaks: dict[str, float], info: dict) -> str:
    head = ["## Roofline: paper-scale programs on this CPU and on an H100 (cost_analysis)", "",
            _common.machine_block(info), "",
            f"Measured CPU peaks in this run: GEMM {peaks['flops'] / 1e9:.1f} GFLOP/s (float32, 2048³), "
            f"stream {peaks['bytes'] / 1e9:.1f} GB/s (256 MiB scale-and-copy). H100 SXM datasheet: "
            "989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, 3.35 TB/s HBM3.", ""]
    table = _common.markdown_table(
        ["program", "shape", "GFLOP / call", "MB / call", "flop/byte", "CPU time / call",
         "CPU roofline / call", "CPU at % of roofline", "calls (paper job)", "CPU job",
         "H100 bound fp32", "H100 bound bf16"],
        [[p.name, p.shape, f"{m['flops'] / 1e9:.3g}", f"{m['bytes'] / 1e6:.3g}", f"{m['intensity']:.1f}",
          fmt_s(m["cpu_s"]), fmt_s(m["cpu_bound_s"]), f"{100 * m['cpu_frac']:.0f}%", f"{p.calls:,}",
          fmt_s(m["cpu_total_s"]), fmt_s(m["h100_fp32_total_s"]), fmt_s(m["h100_bf16_total_s"])]
         for p, m in rows])
    tail = ["", "One call is: " + "; ".join(f"{p.name}: {p.call_unit}" for p, _ in rows) + ".",
            "The bf16 bound halves the bytes of the fp32 program and uses the bf16 tensor-core peak "
            "(what a bf16 run of the same program could at best reach); the fp32 bound uses the "
            "non-tensor-core fp32 peak.", f"(load average at the end: {_common.load_avg()})"
            + _common.load_warning()]
    return "\n".join(head) + table + "\n" + "\n".join(tail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions; skip the Llama-2-7B shape")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=33_278,
                    help="LocATER vocabulary (WikiText-2's word vocabulary with <unk>: 33,278)")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    args = ap.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 3)
    info = _common.machine_info()
    peaks = cpu_peaks(repeats + 2)
    builders = [lambda: stream_program("decomposition stream, GPT-2-small", 768, 13)]
    if not args.quick:
        builders.append(lambda: stream_program("decomposition stream, Llama-2-7B", 4096, 33))
    builders += [lambda: grokking_program("paper"), lambda: locater_program(args.vocab)]
    rows = []
    for build in builders:
        p = build()
        m = measure(p, peaks, repeats)
        print(f"{p.name}: {m['flops'] / 1e9:.3g} GFLOP, {m['bytes'] / 1e6:.3g} MB, CPU {fmt_s(m['cpu_s'])} "
              f"({100 * m['cpu_frac']:.0f}% of roofline), H100 job bound fp32 {fmt_s(m['h100_fp32_total_s'])}",
              flush=True)
        rows.append((p, m))
    text = markdown(rows, peaks, info)
    print(text)
    _common.write_section(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
