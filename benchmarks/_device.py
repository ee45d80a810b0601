"""Where a benchmark runs (imported by ``_common``; free of its BLAS re-execution, so tests import it).

Every baseline runs on the device geomjax runs on: ``--device auto|cpu|gpu`` (:func:`add_device_argument`)
is resolved by :func:`resolve_devices` (PyTorch on CUDA when JAX is on a GPU; a run that would compare a
GPU geomjax with a CPU PyTorch stops) and applied by :func:`select_device`; :func:`matmul_peak` measures
both libraries' square-matmul throughput on that device in the same run, and :func:`device_line` is the
record each results section carries.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or platform.machine()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


DEVICES = ("auto", "cpu", "gpu")


def add_device_argument(ap) -> None:
    """``--device auto|cpu|gpu`` (default ``$GEOMJAX_BENCH_DEVICE`` or auto; run_all.py passes it on)."""
    ap.add_argument("--device", choices=DEVICES, default=os.environ.get("GEOMJAX_BENCH_DEVICE", "auto"),
                    help="where geomjax AND every baseline run: auto (JAX's default backend), cpu, gpu")


def resolve_devices(requested: str, jax_backend: str, torch_cuda: bool) -> tuple[str, str]:
    """(JAX platform, PyTorch device) for ``--device requested`` given JAX's default backend and whether
    PyTorch sees CUDA: both on the CPU for ``cpu``, both on the GPU otherwise when JAX is on one. Raises
    SystemExit where the comparison would cross devices (a GPU asked for but absent, or JAX on a GPU with a
    PyTorch built without CUDA)."""
    if requested not in DEVICES:
        raise SystemExit(f"--device must be one of {DEVICES}, got {requested!r}")
    if requested == "cpu":
        return "cpu", "cpu"
    if jax_backend != "gpu":
        if requested == "gpu":
            raise SystemExit(f"--device gpu: JAX's default backend is {jax_backend!r}, not a GPU")
        return jax_backend, "cpu"
    if not torch_cuda:
        raise SystemExit("JAX runs on a GPU but this PyTorch has no CUDA: its baseline would run on the CPU; "
                         "install a CUDA PyTorch or pass --device cpu")
    return "gpu", "cuda"


@dataclass
class Device:
    """Where a benchmark runs: ``jax`` platform ("cpu" / "gpu"), ``torch`` device ("cpu" / "cuda"), the
    accelerator's name, and ``peak`` (:func:`matmul_peak`, filled by :func:`machine_info`)."""

    jax: str
    torch: str
    name: str
    peak: dict = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return self.torch == "cuda"

    def sync(self) -> None:
        """Wait for queued PyTorch GPU work (no-op on the CPU): every timed baseline calls it."""
        if self.gpu:
            import torch

            torch.cuda.synchronize()

    def tensor(self, x):
        """A NumPy array (or tensor) as a PyTorch tensor on this device."""
        import torch

        return (x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))).to(self.torch)

    def xp(self, x):
        """The NumPy baselines' input on this device: the NumPy array itself on the CPU, a CUDA tensor on
        the GPU (the baseline code is written for both: ``mean``, ``@``, ``.T``)."""
        return self.tensor(x) if self.gpu else x


def select_device(requested: str = "auto") -> Device:
    """Pin JAX (``jax_platforms``; call before any JAX computation) and pick PyTorch's device for
    ``--device requested`` (:func:`resolve_devices`)."""
    import jax

    if requested == "cpu":
        jax.config.update("jax_platforms", "cpu")
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
    except ImportError:
        cuda = False
    plat, tdev = resolve_devices(requested, jax.default_backend(), cuda)
    name = jax.devices()[0].device_kind if plat != "cpu" else cpu_model()
    return Device(plat, tdev, name)


def matmul_peak(device: Device, n: int | None = None, repeats: int = 5) -> dict:
    """TFLOP/s of an n×n float32 matmul at full fp32 precision (JAX ``precision=HIGHEST``, PyTorch with TF32
    off) and, on a GPU, in bfloat16, on ``device``, for JAX and PyTorch; best of ``repeats`` after a
    warm-up. n defaults to 8192 on a GPU and 1024 on the CPU."""
    import jax
    import jax.numpy as jnp

    n = n or (8192 if device.gpu else 1024)
    out = {"n": n}
    dtypes = ("float32", "bfloat16") if device.gpu else ("float32",)
    for dt in dtypes:
        a = jax.random.normal(jax.random.key(0), (n, n), getattr(jnp, dt))
        f = jax.jit(lambda x, y: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST))
        jax.block_until_ready(f(a, a))
        out[f"jax {dt}"] = 2 * n**3 / min(timed(lambda: jax.block_until_ready(f(a, a))) for _ in range(repeats)) / 1e12
    try:
        import torch
    except ImportError:
        return out
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for dt in dtypes:
            t = torch.randn(n, n, device=device.torch, dtype=getattr(torch, dt))
            t @ t
            device.sync()

            def run():
                t @ t
                device.sync()

            out[f"torch {dt}"] = 2 * n**3 / min(timed(run) for _ in range(repeats)) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return out


def device_line(device: Device) -> str:
    """The device record of a results section: where geomjax and the baselines ran, and the measured peak."""
    peak = ", ".join(f"{k} {v:.3g} TFLOP/s" for k, v in device.peak.items() if k != "n")
    return (f"geomjax (JAX) on {device.jax}, baselines (PyTorch) on {device.torch}, NumPy baselines on "
            f"{'the GPU through PyTorch tensors' if device.gpu else 'the CPU'}: {device.name}; matmul peak "
            f"measured in this run ({device.peak.get('n', '?')}³): {peak or 'not measured'}")
