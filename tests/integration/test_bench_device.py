"""The benchmarks' device selection and recording (benchmarks/_device.py, run_all.py --gpu): every baseline
runs where geomjax runs, and each section names that device. Logic only, on the CPU; no timing asserted."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    """benchmarks/ importable; the BLAS variables unset first, so importing _common never re-executes."""
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.syspath_prepend(str(BENCH))
    yield
    for name in ("_device", "_common", "run_all"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("requested,backend,cuda,expected", [
    ("cpu", "gpu", True, ("cpu", "cpu")),
    ("cpu", "cpu", False, ("cpu", "cpu")),
    ("auto", "cpu", True, ("cpu", "cpu")),   # JAX on the CPU: PyTorch stays there even if it sees CUDA
    ("auto", "gpu", True, ("gpu", "cuda")),
    ("gpu", "gpu", True, ("gpu", "cuda")),
])
def test_resolve_devices_puts_the_baseline_where_jax_runs(bench, requested, backend, cuda, expected):
    d = importlib.import_module("_device")
    assert d.resolve_devices(requested, backend, cuda) == expected


@pytest.mark.parametrize("requested,backend,cuda,message", [
    ("gpu", "cpu", True, "not a GPU"),
    ("auto", "gpu", False, "no CUDA"),     # a GPU geomjax against a CPU PyTorch: refused
    ("tpu", "cpu", False, "must be one of"),
])
def test_resolve_devices_refuses_a_cross_device_comparison(bench, requested, backend, cuda, message):
    d = importlib.import_module("_device")
    with pytest.raises(SystemExit, match=message):
        d.resolve_devices(requested, backend, cuda)


def test_select_cpu_records_device_and_measured_peak(bench):
    d = importlib.import_module("_device")
    dev = d.select_device("cpu")
    assert (dev.jax, dev.torch, dev.gpu) == ("cpu", "cpu", False)
    dev.peak = d.matmul_peak(dev, n=64, repeats=1)
    assert dev.peak["n"] == 64 and dev.peak["jax float32"] > 0
    line = d.device_line(dev)
    assert "geomjax (JAX) on cpu" in line and "baselines (PyTorch) on cpu" in line and "64³" in line
    x = d.Device("cpu", "cpu", "x").xp(__import__("numpy").ones(3))
    assert type(x).__module__ == "numpy"  # NumPy baselines stay NumPy on the CPU


def test_run_all_gpu_plan_passes_the_device_to_every_benchmark(bench, tmp_path):
    run_all = importlib.import_module("run_all")
    names = run_all.discover()
    cmds = run_all.plan(names, gpu=True, quick=True, device="cpu", out=tmp_path / "r.md")
    present = [n for _, n, _ in run_all.GPU_SET if n in names]
    assert len(cmds) == len(present) and {"models", "train"} <= set(present)
    for label, cmd in cmds:
        assert cmd[-2:] == ["--device", "cpu"] and "--quick" in cmd and str(tmp_path / "r.md") in cmd
    train = next(cmd for label, cmd in cmds if "bench_train.py" in cmd[1])
    assert train[train.index("--preset") + 1] == "paper"
    everything = run_all.plan(names, gpu=False, quick=False, device=None, out=tmp_path / "r.md")
    assert len(everything) == len(names) and all("--device" not in c for _, c in everything)


def test_machine_info_records_the_device(bench):
    pytest.importorskip("torch")  # the machine block records torch's version (not installed on Python 3.13)
    common = importlib.import_module("_common")
    dev = common.Device("cpu", "cpu", "test cpu", peak={"n": 8, "jax float32": 1.0})
    assert "baselines (PyTorch) on cpu" in common.machine_info(dev)["device"]
    assert "device" not in common.machine_info(record_device=False)  # run_all's header starts no backend
