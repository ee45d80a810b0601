"""Stage timing of a run: wall, CPU and compile seconds of every stage, and XLA's program count.

A command opens one :func:`record` around its work; the code it calls marks its stages with
:func:`stage` (``with timing.stage("tokenize"): ...``). Outside a :func:`record` a stage costs a
context-variable lookup and records nothing, so library code can mark stages unconditionally.

Compile seconds and the program count come from JAX's monitoring events (the same names in jax 0.9
and later): ``/jax/core/compile/jaxpr_trace_duration``, ``.../jaxpr_to_mlir_module_duration`` and
``.../backend_compile_duration`` (tracing, lowering, compiling or reading a compiled program from the
persistent cache), ``/jax/compilation_cache/cache_retrieval_time_sec``; every
``backend_compile_duration`` event is one XLA program built, and ``/jax/compilation_cache/cache_hits``
counts those read from the persistent cache instead of compiled. An event is charged to the innermost
stage open in the thread (context) that emitted it; a worker thread started with
:func:`contextvars.copy_context` charges its own stage.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
import time

import jax

__all__ = ["StageTime", "Recording", "record", "stage", "current", "COMPILE_EVENTS"]

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec")
"""Monitoring duration events whose seconds count as compile time."""

PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


@dataclasses.dataclass
class StageTime:
    """One stage of a run.

    Attributes:
      name: the stage ("load", "tokenize", "forward + sums", ...).
      wall_s: wall-clock seconds from entering to leaving the stage.
      cpu_s: CPU seconds of the whole process (every thread) over the same span; with stages running
        in parallel threads this counts their overlap in each.
      compile_s: the durations of JAX's tracing, lowering and compiling (or persistent-cache reading)
        events emitted inside the stage (its thread). A trace nested in another's (an inner jit traced
        while the outer one is) is counted in both, so this can exceed ``wall_s`` slightly.
      programs: XLA programs built in the stage (compiled, or read from the persistent cache).
      cache_hits: of those, read from the persistent compilation cache.
      parallel: True for a stage that ran in a worker thread beside others (its wall time overlaps).
    """

    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    compile_s: float = 0.0
    programs: int = 0
    cache_hits: int = 0
    parallel: bool = False

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Recording:
    """The stages of one run, in the order they started, and the run's totals (:func:`record`).

    Attributes:
      stages: :class:`StageTime` of every stage.
      wall_s, cpu_s, compile_s, programs, cache_hits: totals over the whole recording (events outside
        any stage included).
    """

    stages: list[StageTime] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    compile_s: float = 0.0
    programs: int = 0
    cache_hits: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def to_json(self) -> dict:
        """run.json's ``timing``: totals, then one row per stage."""
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "compile_s": self.compile_s,
                "programs": self.programs, "cache_hits": self.cache_hits,
                "compiled": self.programs - self.cache_hits, "stages": [s.to_json() for s in self.stages]}


_RECORDING: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("geomjax_recording", default=None)
_STAGE: contextvars.ContextVar[StageTime | None] = contextvars.ContextVar("geomjax_stage", default=None)
_LISTENING = False


def _on_duration(event: str, duration: float, **_kw) -> None:
    rec = _RECORDING.get()
    if rec is None or event not in COMPILE_EVENTS:
        return
    st = _STAGE.get()
    with rec._lock:
        rec.compile_s += duration
        if st is not None:
            st.compile_s += duration
        if event == PROGRAM_EVENT:
            rec.programs += 1
            if st is not None:
                st.programs += 1


def _on_event(event: str, **_kw) -> None:
    rec = _RECORDING.get()
    if rec is None or event != CACHE_HIT_EVENT:
        return
    st = _STAGE.get()
    with rec._lock:
        rec.cache_hits += 1
        if st is not None:
            st.cache_hits += 1


def _listen() -> None:
    """Register the two monitoring listeners once per process (they only read the context)."""
    global _LISTENING
    if not _LISTENING:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _LISTENING = True


def current() -> Recording | None:
    """The recording open in this context, or None."""
    return _RECORDING.get()


@contextlib.contextmanager
def record():
    """Record the stages of the enclosed work; yields the :class:`Recording` (totals set on exit)."""
    _listen()
    rec = Recording()
    token = _RECORDING.set(rec)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        yield rec
    finally:
        rec.wall_s, rec.cpu_s = time.perf_counter() - t0, time.process_time() - c0
        _RECORDING.reset(token)


@contextlib.contextmanager
def stage(name: str, parallel: bool = False):
    """Time the enclosed block as stage ``name`` of the open recording (nothing without one).

    A stage entered twice under the same name (e.g. once per checkpoint of a sweep) accumulates into
    one row. Yields the :class:`StageTime` (None without a recording).
    """
    rec = _RECORDING.get()
    if rec is None:
        yield None
        return
    with rec._lock:
        st = next((s for s in rec.stages if s.name == name), None)
        if st is None:
            st = StageTime(name, parallel=parallel)
            rec.stages.append(st)
    token = _STAGE.set(st)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        yield st
    finally:
        with rec._lock:
            st.wall_s += time.perf_counter() - t0
            st.cpu_s += time.process_time() - c0
        _STAGE.reset(token)
