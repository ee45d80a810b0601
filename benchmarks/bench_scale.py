"""Scaling over devices, multi-process, and mixed precision — each against a baseline in the same run.

Sections (``--sections``, default all):

  devices    the data-parallel paths on a 1-D "data" mesh of 1, 2, 4, 8 devices (forced CPU host
             devices here, real GPUs when present): MiniLM extraction + streaming decomposition,
             a Monte Carlo estimate (Wertich-style bilinear form ⟨Ax, By⟩), and toy-transformer
             training steps. Each device count runs in its own subprocess (the device count is
             fixed when JAX starts); results are compared with the 1-device run (max relative
             difference) and times are reported as ratios t(n) / t(1). On a 2-core CPU, 8 host
             devices share 2 cores: the ratios measure the sharding overhead, not a speed-up.
  multihost  two processes × 2 CPU devices (jax.distributed, gloo) against one process with
             4 devices, same decomposition; the difference of the statistics and the time ratio
             (process start-up and distributed initialisation excluded: both time the stream only).
  mixed      MiniLM forward in bfloat16 / float16 (statistics still accumulated in float32)
             against float32: relative error of pos, ctx and the centred second moment per layer,
             of the per-layer ScreeNOT rank and relative norm, and the time ratio.
  grams      the statistics' Grams as three bfloat16 products (float32 accumulation: tensor cores) vs
             HIGHEST float32, both against float64 accumulation: MiniLM's second moments and metrics.
  plan       the paper-size study's step (B 32, T 512, bf16 weights, float32 statistics) of Llama-2-7B on
             1 device and Llama-2-70B on 8 (forced CPU host devices), compiled from shapes (no weights):
             XLA's per-device memory (memory_analysis) and FLOPs (cost_analysis), and the paper-size
             study's time on one H100 predicted from the FLOPs at peak rates.

Run:  .venv/bin/python benchmarks/bench_scale.py [--quick] [--out benchmarks/results/scale.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------- children

def _minilm_windows(C: int, T: int, seed: int = 0):
    import jax

    from geomjax import data

    from geomjax.drivers import pipeline

    model, params, tok, _ = pipeline.load_model_and_tokenizer("minilm")
    docs = data.wikitext2()
    toks = [np.asarray(tok.encode(text), np.int32) for _, text in docs[:16]]
    w = data.sample_windows(toks, C, T, jax.random.key(seed))
    return model, params, np.asarray(w.ids, np.int32)


def child_devices(n: int, C: int, T: int, B: int, repeats: int, out: str) -> None:
    """One device count: time each data-parallel path (compile excluded) and save its results."""
    import jax
    import jax.numpy as jnp

    from geomjax import train

    from geomjax.theory import montecarlo
    from geomjax.tools.extraction import decompose_model_stream, hidden_state_forward
    from geomjax.base.parallel import data_mesh

    mesh = data_mesh(n)
    res: dict = {"n_devices": n}
    arrays: dict[str, np.ndarray] = {}

    # 1. extraction + decomposition of every MiniLM layer
    model, params, ids = _minilm_windows(C, T)
    fwd = hidden_state_forward(model, "residual")

    def run_stream():
        st = decompose_model_stream(fwd, params, [ids[i:i + B] for i in range(0, C, B)], mesh=mesh)
        jax.block_until_ready(st[-1].resid_second_moment)
        return st

    st = run_stream()  # compile
    t = [_common.timed(run_stream) for _ in range(repeats)]
    res["decomposition_s"] = float(np.median(t))
    arrays["dec_pos"] = np.stack([np.asarray(s.pos) for s in st])
    arrays["dec_ctx"] = np.stack([np.asarray(s.ctx) for s in st])
    arrays["dec_m2"] = np.stack([np.asarray(s.resid_second_moment) for s in st])

    # 2. Monte Carlo: E⟨Ax, By⟩ for Gaussian A, B (64x64), x, y — the bilinear forms of Wertich §6
    def sample(key):
        ka, kb, kx, ky = jax.random.split(key, 4)
        A = jax.random.normal(ka, (64, 64)) / 8.0
        Bm = jax.random.normal(kb, (64, 64)) / 8.0
        x = jax.random.normal(kx, (64,))
        y = x + 0.5 * jax.random.normal(ky, (64,))
        return {"bilinear": jnp.dot(A @ x, Bm @ y), "sq": jnp.dot(A @ x, A @ x)}

    S = 2 ** 16

    def run_mc():
        est = montecarlo.estimate(sample, jax.random.key(1), S, chunk=4096, mesh=mesh)
        jax.block_until_ready(est.mean)
        return est

    est = run_mc()
    t = [_common.timed(run_mc) for _ in range(repeats)]
    res["montecarlo_s"] = float(np.median(t))
    res["montecarlo_samples_per_s"] = S / res["montecarlo_s"]
    arrays["mc_mean"] = np.asarray([est.mean["bilinear"], est.mean["sq"]], np.float64)

    # 3. training: the shakespeare smoke model, data-parallel steps
    cfg = train.get_config("shakespeare", "smoke")
    data, _, _ = train.load_task_data(cfg)
    prog = train.build_programs(cfg, mesh)
    step = train.jit_train_step(prog.step_fn, mesh)
    state0 = train.init_state(cfg, prog, mesh)
    _, m = step(jax.tree.map(jnp.copy, state0), data)  # compile (the step donates its state)
    jax.block_until_ready(m["loss"])
    n_steps = 10

    def run_train():
        s = jax.tree.map(jnp.copy, state0)
        for _ in range(n_steps):
            s, mm = step(s, data)
        jax.block_until_ready(mm["loss"])
        return s, mm

    t = [_common.timed(run_train) for _ in range(repeats)]
    s_end, m_end = run_train()
    res["train_steps_per_s"] = n_steps / float(np.median(t))
    arrays["train_loss"] = np.asarray([float(m_end["loss"])])
    arrays["train_params"] = np.concatenate([np.asarray(a).ravel() for a in jax.tree.leaves(s_end.params)])

    np.savez(out, **arrays)
    print(json.dumps(res))


def child_mixed(C: int, T: int, B: int, repeats: int) -> None:
    """MiniLM statistics with a float32 / bfloat16 / float16 forward; errors against float32."""
    import jax

    from geomjax.analysis import study
    from geomjax.tools.extraction import decompose_model_stream, hidden_state_forward

    model, params, ids = _minilm_windows(C, T, seed=2)
    out = {}
    ref = None
    times = {}
    for cd in ("float32", "bfloat16", "float16"):
        fwd = hidden_state_forward(model, "residual", cd)

        def run():
            st = decompose_model_stream(fwd, params, [ids[i:i + B] for i in range(0, C, B)])
            jax.block_until_ready(st[-1].resid_second_moment)
            return st

        st = run()
        times[cd] = [_common.timed(run) for _ in range(repeats)]
        layers = []
        for s in st:
            m = study.layer_metrics(s)
            layers.append({"pos": np.asarray(s.pos, np.float64), "ctx": np.asarray(s.ctx, np.float64),
                           "cen": np.asarray(s.centered_second_moment, np.float64),
                           "rank": int(m.screenot_rank), "rel": float(m.relative_norm)})
        if ref is None:
            ref = layers
        rows = []
        for li, (a, b) in enumerate(zip(ref, layers)):
            rows.append({
                "layer": li,
                "pos": float(np.linalg.norm(b["pos"] - a["pos"]) / np.linalg.norm(a["pos"])),
                "ctx": float(np.linalg.norm(b["ctx"] - a["ctx"]) / np.linalg.norm(a["ctx"])),
                "cen": float(np.linalg.norm(b["cen"] - a["cen"]) / np.linalg.norm(a["cen"])),
                "rank": (a["rank"], b["rank"]),
                "rel_norm": (a["rel"], b["rel"]),
            })
        out[cd] = rows
    ratios = {cd: _common.ratio_stats(times[cd], times["float32"]) for cd in times}
    print(json.dumps({"errors": out, "time_ratio": ratios}))


def child_multihost_single(C: int, T: int, B: int, out: str) -> None:
    """The reference for the multi-process run: one process, all its devices, same problem."""
    import jax

    from geomjax.drivers import multihost
    from geomjax.tools.extraction import decompose_model_stream
    from geomjax.base.parallel import data_mesh

    forward, params, ids = multihost.toy_problem(C, T, seed=0)
    mesh = data_mesh()

    def run():
        st = decompose_model_stream(forward, params, [ids[i:i + B] for i in range(0, C, B)], mesh=mesh,
                                    accum_dtype="float64")
        jax.block_until_ready(st[-1].resid_second_moment)
        return st

    run()
    t = [_common.timed(run) for _ in range(3)]
    np.savez(out, **multihost.stats_arrays(run()))
    print(json.dumps({"stream_s": float(np.median(t))}))


LLAMA2 = {  # Hugging Face config.json sizes of meta-llama/Llama-2-{7b,70b}-hf
    "7B": dict(vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
               intermediate_size=11008, max_position_embeddings=4096),
    "70B": dict(vocab_size=32000, hidden_size=8192, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, intermediate_size=28672, max_position_embeddings=4096),
}


def child_grams(C: int, T: int, B: int) -> None:
    """MiniLM statistics with HIGHEST float32 and bf16x3 Grams, errors against float64 accumulation."""
    from geomjax.analysis import study
    from geomjax.tools.extraction import decompose_model_stream, hidden_state_forward

    model, params, ids = _minilm_windows(C, T, seed=4)
    fwd = hidden_state_forward(model, "residual")
    batches = [ids[i:i + B] for i in range(0, C, B)]
    runs = {"float64": decompose_model_stream(fwd, params, batches, drop_first=True, accum_dtype="float64")}
    for g in ("highest", "bf16x3"):
        runs[g] = decompose_model_stream(fwd, params, batches, drop_first=True, gram=g)
    out = {}
    ref = [(s, study.layer_metrics(s)) for s in runs["float64"]]
    for g in ("highest", "bf16x3"):
        rows = []
        for (r, rm), s in zip(ref, runs[g]):
            m = study.layer_metrics(s)
            err = {k: float(np.linalg.norm(np.asarray(getattr(s, k), np.float64) - np.asarray(getattr(r, k)))
                            / np.linalg.norm(np.asarray(getattr(r, k)))) for k in ("centered_second_moment",
                                                                                   "resid_second_moment")}
            err["cvec_m2"] = float(np.linalg.norm(np.asarray(s.cvec_second_moment, np.float64)
                                                  - np.asarray(r.cvec_second_moment)) / np.linalg.norm(np.asarray(r.cvec_second_moment)))
            err["rank_changed"] = int(m.screenot_rank != rm.screenot_rank)
            err["rel_norm"] = abs(m.relative_norm / rm.relative_norm - 1)
            err["share_resid"] = abs(m.share_resid / rm.share_resid - 1)
            rows.append(err)
        out[g] = rows
    print(json.dumps(out))


def child_plan() -> None:
    """XLA's analysis of the study's real step for Llama-2-7B on 1 device and 70B on 8, from shapes."""
    import jax
    import jax.numpy as jnp

    from geomjax.base.parallel import data_mesh
    from geomjax.models.llama import Llama, LlamaConfig
    from geomjax.tools import extraction

    out = {}
    for name, n in (("7B", 1), ("70B", 8)):
        model = Llama(LlamaConfig(**LLAMA2[name]))
        shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, jnp.bfloat16), shapes)
        t0 = time.perf_counter()
        p = extraction.plan_step(extraction.scan_forward(model, final_norm=True), shapes, 32, 512, data_mesh(n))
        out[name] = {"devices": n, "argument": p.argument_bytes, "output": p.output_bytes, "alias": p.alias_bytes,
                     "temp": p.temp_bytes, "peak": p.peak_bytes, "flops": p.flops, "gram_flops": p.gram_flops,
                     "n_states": p.n_states, "d": p.d_model, "compile_s": time.perf_counter() - t0}
    print(json.dumps(out))


# ---------------------------------------------------------------------------------------- parent

def _spawn(args: list[str], n_devices: int) -> str:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n_devices}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [x for x in [env.get("PYTHONPATH")] if x])  # this checkout's geomjax
    r = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                       cwd=ROOT)
    if r.returncode:
        raise RuntimeError(f"child {args} failed:\n{r.stderr[-4000:]}")
    return r.stdout.strip().splitlines()[-1]


def section_devices(quick: bool, tmp: Path) -> str:
    C, T, B = (32, 64, 8) if quick else (64, 128, 16)
    repeats = 2 if quick else 3
    counts = [1, 2, 4, 8]
    rows, base, base_arrays = [], None, None
    for n in counts:
        f = tmp / f"dev{n}.npz"
        res = json.loads(_spawn(["--child-devices", str(n), str(C), str(T), str(B), str(repeats), str(f)], n))
        with np.load(f) as z:
            arr = dict(z)
        if base is None:
            base, base_arrays = res, arr
        diffs = {k: float(np.abs(arr[k] - base_arrays[k]).max() / max(np.abs(base_arrays[k]).max(), 1e-30))
                 for k in arr}
        rows.append([n,
                     f"{res['decomposition_s'] / base['decomposition_s']:.2f}×",
                     f"{max(diffs['dec_pos'], diffs['dec_ctx'], diffs['dec_m2']):.1e}",
                     f"{res['montecarlo_s'] / base['montecarlo_s']:.2f}×",
                     f"{diffs['mc_mean']:.1e}",
                     f"{base['train_steps_per_s'] / res['train_steps_per_s']:.2f}×",
                     f"{max(diffs['train_loss'], diffs['train_params']):.1e}"])
    head = (f"### Data-parallel paths on 1–8 devices (MiniLM C {C}, T {T}, B {B}; Monte Carlo 2^16 "
            f"samples; smoke-model training, 10 steps)\n\n"
            "Times relative to 1 device (lower is better); 'diff' = max |x_n − x_1| / max |x_1| of the "
            "results (statistics, Monte Carlo means, parameters after training).\n\n")
    return head + _common.markdown_table(
        ["devices", "decomposition t(n)/t(1)", "diff", "Monte Carlo t(n)/t(1)", "diff",
         "training t(n)/t(1)", "diff"], rows)


def section_multihost(quick: bool, tmp: Path) -> str:
    from geomjax.drivers import multihost

    C, T, B = (64, 32, 16) if quick else (256, 64, 32)
    ref = tmp / "mh_single.npz"
    single = json.loads(_spawn(["--child-mh-single", str(C), str(T), str(B), str(ref)], 4))
    out = tmp / "mh.npz"
    t0 = time.perf_counter()
    res = multihost.launch_local(2, 2, ["--contexts", str(C), "--seq-len", str(T), "--batch-size", str(B),
                                        "--accum-dtype", "float64", "--out", str(out)], timeout=600)
    wall = time.perf_counter() - t0
    with np.load(ref) as za, np.load(out) as zb:
        a, b = dict(za), dict(zb)
    diff = max(float(np.abs(a[k] - b[k]).max() / np.abs(a[k]).max()) for k in a if k != "n_contexts")
    return (f"### Two processes × 2 CPU devices (jax.distributed, gloo) vs one process × 4 devices\n\n"
            f"Toy GPT-style model, C {C}, T {T}, B {B}, float64 statistics. Max relative difference of "
            f"every statistic: **{diff:.1e}**. Single-process stream: {single['stream_s']:.2f} s; the "
            f"2-process launch took {wall:.1f} s wall in all (start-up, `jax.distributed` initialisation, "
            f"compile and the stream; on one 2-core machine the processes only add overhead).\n\n"
            f"process 0 said: `{res[0].stdout.strip().splitlines()[-1]}`")


def section_mixed(quick: bool) -> str:
    C, T, B = (32, 64, 8) if quick else (64, 128, 16)
    r = json.loads(_spawn(["--child-mixed", str(C), str(T), str(B), "2" if quick else "3"], 1))
    rows = []
    for cd in ("bfloat16", "float16"):
        errs = r["errors"][cd]
        rows.append([cd,
                     f"{max(e['pos'] for e in errs):.1e}", f"{max(e['ctx'] for e in errs):.1e}",
                     f"{max(e['cen'] for e in errs):.1e}",
                     f"{sum(e['rank'][0] != e['rank'][1] for e in errs)} / {len(errs)}",
                     f"{max(abs(e['rel_norm'][1] - e['rel_norm'][0]) / e['rel_norm'][0] for e in errs):.1e}",
                     _common.fmt_ratio(r["time_ratio"][cd])])
    return (f"### Mixed precision: MiniLM forward in bf16/f16, statistics in float32 (C {C}, T {T})\n\n"
            "Max over the 7 states of the relative (Frobenius) error against the float32 forward; "
            "ranks = layers whose ScreeNOT rank changed; time = t(low)/t(float32).\n\n"
            + _common.markdown_table(["forward", "pos err", "ctx err", "centred M2 err", "ranks changed",
                                      "rel. norm err", "time ratio"], rows))


H100 = {"bf16": 989e12, "fp32": 67e12, "fp64": 67e12}  # dense peak FLOP/s (SXM: bf16 tensor, fp32 non-tensor, fp64 tensor)


def section_grams(quick: bool) -> str:
    C, T, B = (32, 64, 8) if quick else (64, 128, 16)
    r = json.loads(_spawn(["--child-grams", str(C), str(T), str(B)], 1))
    rows = []
    for g in ("highest", "bf16x3"):
        e = r[g]
        rows.append([g, f"{max(x['centered_second_moment'] for x in e):.1e}",
                     f"{max(x['resid_second_moment'] for x in e):.1e}", f"{max(x['cvec_m2'] for x in e):.1e}",
                     f"{sum(x['rank_changed'] for x in e)} / {len(e)}", f"{max(x['rel_norm'] for x in e):.1e}",
                     f"{max(x['share_resid'] for x in e):.1e}"])
    return (f"### Grams: HIGHEST float32 vs three bfloat16 products (MiniLM C {C}, T {T}; against float64 "
            "accumulation of the same float32 states)\n\nMax over the 7 states of the relative (Frobenius) error; "
            "ranks = layers whose ScreeNOT rank changed.\n\n"
            + _common.markdown_table(["Grams", "centred M2", "resid M2", "cvec M2", "ranks changed",
                                      "rel. norm", "resid share"], rows))


def section_plan() -> str:
    r = json.loads(_spawn(["--child-plan"], 8))
    gb = 1e9
    rows = []
    for name, p in r.items():
        rows.append([f"Llama-2-{name}", p["devices"], f"{p['argument'] / gb:.1f}", f"{p['temp'] / gb:.1f}",
                     f"{(p['output'] - p['alias']) / gb:.2f}", f"**{p['peak'] / gb:.1f}**", f"{p['flops'] / 1e12:.1f}",
                     f"{p['gram_flops'] / 1e12:.1f}", f"{p['compile_s']:.0f}"])
    p7 = r["7B"]
    steps, C, n_sub, T = 6400 // 32, 6400, 800, 511
    fwd = (p7["flops"] - p7["gram_flops"]) * steps / H100["bf16"]
    gram_hi = p7["gram_flops"] * steps / H100["fp32"]
    gram_3x = 3 * p7["gram_flops"] * steps / H100["bf16"]
    appc_fwd = 2 * fwd * n_sub / C  # the App. C pass and its projection pass over 8 windows x 100 documents
    appc_gram = 2 * p7["n_states"] * n_sub * T * 2 * p7["d"] ** 2 / H100["fp64"]  # cvec and raw, float64
    main = fwd + gram_hi
    total = 2 * main + appc_fwd + appc_gram  # main pass, OOD pass (Table 2: as many windows), App. C
    total_3x = 2 * (fwd + gram_3x) + appc_fwd + appc_gram
    return ("### The paper-size study's step, compiled from shapes (B 32 windows x T 512, bf16 weights, float32 "
            "statistics; `extraction.plan_step`: the scanned FSDP step `decompose_model_stream` runs)\n\n"
            "Per device, from XLA's `memory_analysis()` / `cost_analysis()` of the programs compiled for CPU "
            "(8 forced host devices); peak = arguments + temporaries + outputs not aliased to the donated "
            "statistics. FLOPs per device and step (the loop body extrapolated from 1 and 2 unrolled blocks).\n\n"
            + _common.markdown_table(["model", "devices", "arguments GB", "temporaries GB", "new outputs GB",
                                      "peak GB", "TFLOP / step", "of which Grams", "compile s"], rows)
            + f"\n\nPredicted paper-size 7B study on one H100 at peak rates (C 6400, {steps} steps; Table 2's "
            f"OOD pass as many again; App. C: 800 windows twice, float64 scatters): forward {fwd:.0f} s + Grams "
            f"{gram_hi:.0f} s (HIGHEST float32, non-tensor) per pass; study **{total:.0f} s** "
            f"({total / 60:.1f} min); with 3-pass bf16 Grams (tensor cores) {total_3x:.0f} s "
            f"({total_3x / 60:.1f} min).\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--sections", default="devices,multihost,mixed,grams,plan")
    ap.add_argument("--out", default=None, help="append the Markdown section to this file")
    ap.add_argument("--child-devices", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument("--child-mixed", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--child-mh-single", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--child-plan", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-grams", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_grams:
        return child_grams(*map(int, args.child_grams))
    if args.child_plan:
        return child_plan()
    if args.child_devices:
        n, C, T, B, rep, out = args.child_devices
        return child_devices(int(n), int(C), int(T), int(B), int(rep), out)
    if args.child_mixed:
        C, T, B, rep = map(int, args.child_mixed)
        return child_mixed(C, T, B, rep)
    if args.child_mh_single:
        C, T, B, out = args.child_mh_single
        return child_mh_single(int(C), int(T), int(B), out)
    import tempfile

    info = _common.machine_info()
    parts = [f"## Scaling, multi-process and mixed precision ({time.strftime('%Y-%m-%d %H:%M')})\n",
             _common.machine_block(info), ""]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in args.sections.split(","):
            t0 = time.perf_counter()
            if name == "devices":
                parts.append(section_devices(args.quick, tmp))
            elif name == "multihost":
                parts.append(section_multihost(args.quick, tmp))
            elif name == "mixed":
                parts.append(section_mixed(args.quick))
            elif name == "grams":
                parts.append(section_grams(args.quick))
            elif name == "plan":
                parts.append(section_plan())
            else:
                raise SystemExit(f"unknown section {name!r}")
            parts.append(f"\n(section took {time.perf_counter() - t0:.0f} s; {_common.load_avg()})\n")
            print(parts[-2], parts[-1], sep="\n", flush=True)
    _common.write_section(args.out, "\n".join(parts))


child_mh_single = child_multihost_single

if __name__ == "__main__":
    main()
