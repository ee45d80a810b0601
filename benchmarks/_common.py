"""Shared helpers of the geomjax-vs-PyTorch benchmarks (bench_models.py, bench_train.py).

* ``set_threads``: PyTorch gets as many intra-op threads as the CPUs this process may run on, which
  is the size of XLA's CPU thread pool (XLA sizes it from the same affinity mask).
* ``interleaved``: repetitions of the compared functions alternate (A, B, A, B, ...; the order is
  rotated every repetition), so background load from other processes hits every side alike; the
  reported ratio is the median of the per-repetition ratios.
* ``machine_info`` / ``markdown_table`` / ``write_section``: the Markdown report.
* Full-speed BLAS: on some processors of the development machines ``OPENBLAS_CORETYPE`` and
  ``OPENBLAS_L2_SIZE`` are set (older OpenBLAS builds misbehave there), which makes a current NumPy
  run a slower kernel. Importing this module re-executes the benchmark once with both unset — for
  that benchmark command alone, never in tests or CI — and ``machine_info`` records the BLAS
  library, kernel (``architecture``) and thread count actually loaded (``threadpoolctl``), so every
  NumPy ratio says what it was measured against.
* Devices (``--device auto|cpu|gpu``, :func:`add_device_argument` / :func:`select_device`): every
  baseline runs on the device geomjax runs on: PyTorch on CUDA when JAX is on a GPU (a benchmark refuses
  to compare a GPU geomjax with a CPU PyTorch), NumPy baselines through :attr:`Device.xp` (PyTorch
  tensors on the GPU); ``--device cpu`` pins both to the CPU. ``machine_info(device)`` records the device,
  the library versions and a square-matmul peak of both libraries measured in the same run
  (:func:`matmul_peak`).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_UNSET_MARK = "GEOMJAX_BENCH_BLAS_UNSET"


def full_speed_blas() -> None:
    """Re-execute this process with ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` removed, if set.

    Must run before NumPy loads its BLAS (this module calls it at import, before importing NumPy).
    What was removed is kept in ``$GEOMJAX_BENCH_BLAS_UNSET`` for :func:`machine_info`.
    """
    removed = {k: os.environ[k] for k in BLAS_ENV if k in os.environ}
    if not removed:
        return
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    env[_UNSET_MARK] = ", ".join(f"{k}={v}" for k, v in removed.items())
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


full_speed_blas()

import numpy as np  # noqa: E402  (after the BLAS environment is settled)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _device import (DEVICES, Device, add_device_argument, cpu_model, device_line, matmul_peak,  # noqa: E402,F401
                     resolve_devices, select_device, timed)


def n_cpus() -> int:
    """CPUs this process may run on (XLA's CPU client sizes its thread pool from this)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def set_threads() -> int:
    """Give PyTorch the same number of intra-op threads as JAX/XLA uses; return it."""
    import torch

    n = n_cpus()
    torch.set_num_threads(n)
    return n


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("jax", "jaxlib", "flax", "optax", "numpy", "torch", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = "absent"
    return out


def load_avg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def load_warning() -> str:
    """A warning sentence when the 1-minute load average exceeds the usable CPUs, else ''."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return ""
    if load <= n_cpus():
        return ""
    return (f" **Warning: load average {load:.1f} > {n_cpus()} CPUs.** Under oversubscription "
            "PyTorch's OpenMP threads slow down far more than XLA's pool (measured here: ~2.6x vs "
            "~1.5x), so interleaving does not cancel the load and the ratios are biased towards "
            "geomjax; rerun on a quiet machine.")


def blas_info() -> str:
    """BLAS libraries this process loaded: API, version, kernel (architecture), threads, file."""
    from threadpoolctl import threadpool_info

    rows = [f"{d.get('internal_api')} {d.get('version')} kernel {d.get('architecture')} "
            f"threads {d.get('num_threads')} ({os.path.basename(d.get('filepath', ''))})"
            for d in threadpool_info() if d.get("user_api") == "blas"]
    return "; ".join(rows) or "none loaded"


def machine_info(device: Device | None = None, *, peak: bool = True, record_device: bool = True) -> dict[str, str]:
    """The machine block of a results section with its device record and (``peak``) the matmul peak of both
    libraries measured now (:func:`matmul_peak`). ``device`` None: a benchmark whose baselines run on the CPU
    only (no ``--device`` yet); it stops if JAX is on an accelerator, so that no section compares a GPU
    geomjax with a CPU baseline. ``record_device=False`` (run_all.py's header) starts no JAX backend."""
    import torch

    unset = os.environ.get(_UNSET_MARK)
    dev = {}
    if device is None and record_device:
        device = select_device("auto")
        if device.jax != "cpu":
            raise SystemExit("this benchmark's baselines run on the CPU only: run it with JAX_PLATFORMS=cpu, or use "
                             "the device-aware ones (run_all.py --gpu)")
    if device is not None:
        if peak and not device.peak:
            device.peak = matmul_peak(device)
        dev = {"device": device_line(device)}
    return dev | {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu_model(),
        "cores": f"{n_cpus()} usable ({os.cpu_count()} online)",
        "threads": f"XLA CPU pool = {n_cpus()}; torch.set_num_threads({torch.get_num_threads()}), "
                   f"interop {torch.get_num_interop_threads()}",
        "versions": ", ".join(f"{k} {v}" for k, v in versions().items()),
        "blas": blas_info() + (f"; run with {unset} unset" if unset else
                                 "; OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE were not set"),
        "load_avg_start": load_avg(),
        "command": " ".join([os.path.basename(sys.executable), _repo_relative(sys.argv[0])] + sys.argv[1:]),
    }


def _repo_relative(path: str) -> str:
    """``path`` relative to the repository root when it lies inside it (results name no outside path)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    full = os.path.abspath(path)
    return os.path.relpath(full, root) if full.startswith(root + os.sep) else os.path.basename(path)


def interleaved(fns: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Wall times of ``repeats`` calls of each function, interleaved A, B, (C,) A, B, ...

    The order within a round is rotated each round (A B C, B C A, ...) so that no function always
    runs right after the same other one. Every function must block until its result is ready.
    """
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(repeats):
        k0 = r % len(names)
        for name in names[k0:] + names[:k0]:
            times[name].append(timed(fns[name]))
    return times


def ratio_stats(num: Sequence[float], den: Sequence[float]) -> dict[str, float]:
    """Per-repetition ratios num_i / den_i (paired by round): median, min, max."""
    r = np.asarray(num, np.float64) / np.asarray(den, np.float64)
    return {"median": float(np.median(r)), "min": float(r.min()), "max": float(r.max())}


def fmt_ratio(s: Mapping[str, float]) -> str:
    return f"**{s['median']:.2f}×** ({s['min']:.2f}–{s['max']:.2f})"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_block(info: Mapping[str, str]) -> str:
    return "\n".join(f"- **{k}**: {v}" for k, v in info.items())


def write_section(path: str | None, text: str) -> None:
    """Append ``text`` (a Markdown section) to ``path`` (created if missing); no-op for None."""
    if not path:
        return
    exists = os.path.exists(path) and os.path.getsize(path) > 0
    with open(path, "a", encoding="utf-8") as f:
        if exists:
            f.write("\n")
        f.write(text.rstrip() + "\n")
    print(f"\n[appended to {path}]")
