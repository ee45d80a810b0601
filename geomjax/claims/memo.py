"""The results that the claims of one run share (:class:`RunMemo`, :func:`per_run`), and the scope that makes a
memo current (:func:`run_memo`): used by :mod:`geomjax.claims.runner` (a run) and :mod:`geomjax.claims.workers` (a
fresh process's bin, whose memo its report task re-enters)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["RunMemo", "per_run", "run_memo"]


class RunMemo:
    """The results that several claims of ONE run share (one expensive computation, e.g. a Monte Carlo
    sample or a forward pass of a real model, read by several checks), keyed by (function, arguments).

    :func:`~geomjax.claims.runner.run` and :func:`~geomjax.claims.runner.run_claim` open one with :func:`run_memo`
    for the duration of the call and drop it afterwards (``pipeline.run_claims`` keeps it open over the report
    hooks too; a worker process keeps its bin's memo for its reports), so two runs never see each other's results
    and nothing survives a run. Functions opt in with :func:`per_run`.
    """

    def __init__(self):
        self._values: dict = {}

    def __len__(self) -> int:
        return len(self._values)

    def get_or_compute(self, key, compute: Callable[[], Any]):
        """The value stored under ``key``, computing and storing ``compute()`` the first time."""
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]


_CURRENT_MEMO: contextvars.ContextVar[RunMemo | None] = contextvars.ContextVar("geomjax_claims_run_memo", default=None)


@contextlib.contextmanager
def run_memo(memo: RunMemo | None = None):
    """Context manager yielding the :class:`RunMemo` of the current run: the one already open (a
    :func:`~geomjax.claims.runner.run_claim` inside :func:`~geomjax.claims.runner.run`), else ``memo`` when given
    (re-entered: a fresh process's bin keeps its memo for its report task), else a fresh one that is dropped when
    the block exits."""
    current = _CURRENT_MEMO.get()
    if current is not None:
        yield current
        return
    memo = RunMemo() if memo is None else memo
    token = _CURRENT_MEMO.set(memo)
    try:
        yield memo
    finally:
        _CURRENT_MEMO.reset(token)


def per_run(fn: Callable) -> Callable:
    """Decorator: inside a run (:func:`run_memo` open) ``fn(*args)`` is computed once and shared by the
    run's claims; outside a run every call computes afresh. Arguments must be hashable; they are keyed
    after binding to ``fn``'s signature, so ``f(b)`` and ``f(b, seed=0)`` share one value when 0 is the default."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def shared(*args, **kwargs):
        memo = _CURRENT_MEMO.get()
        if memo is None:
            return fn(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = (fn, tuple(bound.arguments.items()))
        return memo.get_or_compute(key, lambda: fn(*args, **kwargs))

    return shared
