"""Multi-process decomposition (jax.distributed on CPU, two local processes) equals one process.

Two processes with two CPU host devices each form one 4-device "data" mesh; the statistics they
return must equal a single-process, unsharded float64 run of the same model and windows.
"""

from __future__ import annotations

import numpy as np
import pytest

from geomjax import multihost
from geomjax.tools.extraction import decompose_model_stream

C, T, B = 16, 12, 8


@pytest.fixture(scope="module")
def reference():
    forward, params, ids = multihost.toy_problem(C, T, seed=3)
    stats = decompose_model_stream(forward, params, (ids[i:i + B] for i in range(0, C, B)),
                                   accum_dtype="float64")
    return multihost.stats_arrays(stats)


@pytest.mark.parametrize("mode", ["global", "process_local"])
@pytest.mark.slow
def test_two_processes_equal_one(tmp_path, reference, mode):
    out = tmp_path / "stats.npz"
    args = ["--contexts", str(C), "--seq-len", str(T), "--batch-size", str(B), "--seed", "3",
            "--accum-dtype", "float64", "--out", str(out)]
    if mode == "process_local":
        args.append("--process-local")
    res = multihost.launch_local(2, 2, args, timeout=240)
    assert "process 0/2: 4 devices (2 local)" in res[0].stdout
    assert "process 1/2: 4 devices (2 local)" in res[1].stdout
    with np.load(out) as z:
        got = dict(z)
    assert int(got["n_contexts"][0]) == C
    for k in ("pos", "ctx", "mean", "centered_second_moment", "resid_second_moment"):
        scale = np.abs(reference[k]).max()
        # float32 forward on differently sized per-device batches: rounding-level differences only
        assert np.abs(got[k] - reference[k]).max() <= 1e-6 * scale, k


def test_launch_local_reports_a_failing_process():
    with pytest.raises(RuntimeError, match="(?s)process 0 .exit 1.:.*not a multiple of --batch-size 4"):
        multihost.launch_local(2, 1, ["--contexts", "10", "--batch-size", "4"], timeout=120)


def test_children_keep_the_callers_xla_flags_but_the_device_count():
    flags = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 --xla_dump_to=/tmp/d"
    assert multihost.child_xla_flags(flags, 2).split() == [
        "--xla_force_host_platform_device_count=2", "--xla_backend_optimization_level=0", "--xla_dump_to=/tmp/d"]
    assert multihost.child_xla_flags("", 3) == "--xla_force_host_platform_device_count=3"


def test_initialize_needs_all_three_arguments():
    from geomjax.base.parallel import initialize

    with pytest.raises(ValueError, match="together"):
        initialize("127.0.0.1:1234", 2)
    with pytest.raises(ValueError, match="outside"):
        initialize("127.0.0.1:1234", 2, 5)
