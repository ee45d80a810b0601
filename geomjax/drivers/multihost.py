"""Multi-process (multi-host) streaming decomposition: one launch per process, one global mesh.

``python -m geomjax.drivers.multihost`` runs the fused extraction + one-pass decomposition
(:func:`geomjax.tools.extraction.decompose_model_stream`, Song & Zhong eqs. (2)-(3)) over a 1-D
``"data"`` mesh that spans the devices of every process. Each process:

1. calls :func:`geomjax.base.parallel.initialize` (``jax.distributed.initialize``);
2. builds the same model and the same seeded windows;
3. feeds either the global batches (each process transfers its own devices' rows) or, with
   ``--process-local``, only its own rows of every batch (``make_array_from_process_local_data``);
4. receives the complete statistics; process 0 writes them to ``--out`` (``.npz``).

On one machine, :func:`launch_local` starts N such processes with CPU host devices, so the
multi-host path is testable without a cluster::

    python -m geomjax.drivers.multihost --launch-local 2 --devices-per-process 2 --out stats.npz

On a cluster, run one process per host (SLURM / Open MPI are detected automatically, or pass
``--coordinator host:port --num-processes N --process-id i``).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

from geomjax import data

from geomjax.base import parallel

from geomjax.drivers import pipeline
from geomjax.tools.extraction import decompose_model_stream, hidden_state_forward
from geomjax.models.toy import ToyTransformer, nanogpt_config

__all__ = ["main", "launch_local", "child_xla_flags", "toy_problem", "stats_arrays"]


def toy_problem(n_contexts: int, seq_len: int, seed: int = 0):
    """A deterministic randomly initialised GPT-style toy model and integer windows.

    Returns:
      (forward, params, ids) with ``forward(params, ids (B, T)) -> L+1 states (B, T, d)`` and
      ``ids`` of shape (n_contexts, seq_len), identical in every process for the same seed.
    """
    cfg = nanogpt_config(61, n_layers=2, n_heads=2, d_model=32, d_mlp=64, max_len=max(seq_len, 8),
                         dropout=0.0)
    model = ToyTransformer(cfg)
    ids = np.random.default_rng(seed).integers(0, 61, size=(n_contexts, seq_len)).astype(np.int32)
    # lazy_init: init's parameters bit for bit, without its forward pass
    params = model.lazy_init(jax.random.key(seed), jax.ShapeDtypeStruct((1, seq_len), np.int32))["params"]
    params = jax.tree.map(np.asarray, params)  # host values: replicated onto the global mesh later
    return hidden_state_forward(model, "residual"), params, ids


def stats_arrays(stats) -> dict[str, np.ndarray]:
    """Per-layer statistics stacked into NumPy arrays (the ``.npz`` content)."""
    return {
        "pos": np.stack([np.asarray(s.pos) for s in stats]),
        "ctx": np.stack([np.asarray(s.ctx) for s in stats]),
        "mean": np.stack([np.asarray(s.mean) for s in stats]),
        "centered_second_moment": np.stack([np.asarray(s.centered_second_moment) for s in stats]),
        "resid_second_moment": np.stack([np.asarray(s.resid_second_moment) for s in stats]),
        "n_contexts": np.asarray([s.n_contexts for s in stats]),
    }


_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def child_xla_flags(caller_flags: str, devices_per_process: int) -> str:
    """The ``XLA_FLAGS`` of a process :func:`launch_local` starts: the caller's flags with the host device count
    replaced by ``devices_per_process`` (a caller's other flags, e.g. an optimisation level or a dump folder,
    reach every process).

    Args:
      caller_flags: the caller's ``XLA_FLAGS`` (space-separated; may be empty).
      devices_per_process: CPU host devices of each process.
    """
    kept = [f for f in caller_flags.split() if f.split("=", 1)[0] != _DEVICE_COUNT_FLAG]
    return " ".join([f"{_DEVICE_COUNT_FLAG}={devices_per_process}", *kept])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_local(n_processes: int, devices_per_process: int, args: list[str], timeout: float = 300,
                 python: str | None = None) -> list[subprocess.CompletedProcess]:
    """Start ``n_processes`` local processes of ``python -m geomjax.drivers.multihost`` and wait for all.

    Each process gets ``devices_per_process`` CPU host devices (the caller's other XLA flags kept:
    :func:`child_xla_flags`) and the shared coordinator ``127.0.0.1:<free port>``. ``args`` are passed
    through (``--out``, sizes, ...).

    Raises:
      RuntimeError: a process failed or timed out (its output is included).
    """
    if n_processes < 1 or devices_per_process < 1:
        raise ValueError(f"launch_local: need n_processes >= 1 and devices_per_process >= 1, got "
                         f"{n_processes}, {devices_per_process}")
    port = _free_port()
    env = dict(os.environ)
    env["XLA_FLAGS"] = child_xla_flags(env.get("XLA_FLAGS", ""), devices_per_process)
    env["JAX_PLATFORMS"] = "cpu"
    procs = []
    for i in range(n_processes):
        cmd = [python or sys.executable, "-m", "geomjax.drivers.multihost", "--coordinator", f"127.0.0.1:{port}",
               "--num-processes", str(n_processes), "--process-id", str(i), *args]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    results, failed = [], []
    for i, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"launch_local: process {i} timed out after {timeout} s")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, None))
        if p.returncode:
            failed.append(f"--- process {i} (exit {p.returncode}):\n{out[-3000:]}")
    if failed:
        raise RuntimeError("launch_local: some processes failed\n" + "\n".join(failed))
    return results


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m geomjax.drivers.multihost", description=__doc__.split("\n")[0])
    p.add_argument("--coordinator", help="host:port of process 0 (omit on SLURM/MPI: auto-detected)")
    p.add_argument("--num-processes", type=int)
    p.add_argument("--process-id", type=int)
    p.add_argument("--launch-local", type=int, metavar="N",
                   help="start N local processes (CPU host devices) running this command")
    p.add_argument("--devices-per-process", type=int, default=2,
                   help="CPU host devices per process with --launch-local")
    p.add_argument("--no-distributed", action="store_true",
                   help="single process over its local devices (the reference run)")
    p.add_argument("--model", default="toy", help="'toy' (random GPT-style) or 'minilm'")
    p.add_argument("--contexts", type=int, default=32, help="C windows")
    p.add_argument("--seq-len", type=int, default=16, help="T tokens per window")
    p.add_argument("--batch-size", type=int, default=8, help="global windows per step")
    p.add_argument("--process-local", action="store_true",
                   help="each process feeds only its own rows of every batch")
    p.add_argument("--accum-dtype", default="float64", choices=["float32", "float64"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help=".npz written by process 0")
    return p


def _minilm_problem(n_contexts: int, seq_len: int, seed: int):
    model, params, tok, _ = pipeline.load_model_and_tokenizer("minilm")
    docs = data.wikitext2()
    w = data.sample_windows([tok.encode(t) for _, t in docs[:8]], n_contexts, seq_len,
                            jax.random.key(seed))
    return hidden_state_forward(model, "residual"), params, np.asarray(w.ids, np.int32)


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    args = _parser().parse_args(argv)
    if args.launch_local:
        passed = ["--model", args.model, "--contexts", str(args.contexts), "--seq-len", str(args.seq_len),
                  "--batch-size", str(args.batch_size), "--accum-dtype", args.accum_dtype,
                  "--seed", str(args.seed)]
        passed += ["--process-local"] if args.process_local else []
        passed += ["--out", args.out] if args.out else []
        res = launch_local(args.launch_local, args.devices_per_process, passed)
        sys.stdout.write(res[0].stdout)
        return 0

    if args.model not in ("toy", "minilm"):
        raise ValueError(f"--model must be 'toy' or 'minilm', got {args.model!r}")
    B = args.batch_size
    if B < 1 or args.contexts % B:
        raise ValueError(f"--contexts {args.contexts} is not a multiple of --batch-size {B}")
    if not args.no_distributed:
        parallel.initialize(args.coordinator, args.num_processes, args.process_id)
    pid, n_proc = jax.process_index(), jax.process_count()
    if args.model == "toy":
        forward, params, ids = toy_problem(args.contexts, args.seq_len, args.seed)
    else:
        forward, params, ids = _minilm_problem(args.contexts, args.seq_len, args.seed)
    mesh = parallel.data_mesh()
    if args.process_local and B % n_proc:
        raise ValueError(f"--batch-size {B} does not split over {n_proc} processes")

    def batches():
        for i in range(0, args.contexts, B):
            b = ids[i:i + B]
            if args.process_local:
                per = B // n_proc
                b = b[pid * per:(pid + 1) * per]
            yield b

    stats = decompose_model_stream(forward, params, batches(), accum_dtype=args.accum_dtype,
                                   mesh=mesh, process_local=args.process_local)
    arrays = stats_arrays(stats)
    print(f"process {pid}/{n_proc}: {jax.device_count()} devices ({jax.local_device_count()} local), "
          f"C={int(arrays['n_contexts'][0])}, {len(stats)} states, "
          f"|pos|={float(np.linalg.norm(arrays['pos'])):.6g}", flush=True)
    if args.out and pid == 0:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.out, **arrays)
    return 0


if __name__ == "__main__":
    sys.exit(main())
