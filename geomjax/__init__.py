"""geomjax: geometry of transformer hidden states and statistics of attention, in JAX.

Functions and types at the top level (``import geomjax as gj``)::

    model = gj.load("minilm")                      # module, params, tokenizer: gj.load("gpt2"), "toy:RUN"
    out, cache = model.run_with_cache("The cat sat.")   # named activations (geomjax.lens)

    dec = gj.decompose(h, drop_first=False)        # Song & Zhong eqs. (2)-(3): h (C, T, d)
    st = gj.decompose_stream(batches)              # the same statistics in one pass, O(d² + Td + Cd)
    gj.decompose_sharded(h, mesh, batch_size=64)   # sharded over devices
    gj.Decomposition, gj.DecompositionStats, gj.Estimate, gj.GeomjaxError

Inputs: JAX arrays, NumPy arrays or Python lists; float64 NumPy arrays and lists are computed in
float64 (JAX's x64 switched on locally), float32 in float32 — the one dtype rule, ``geomjax._checks``.

Submodules (each imported on first use, so ``import geomjax`` stays cheap)::

    gj.spectral.screenot_rank(Y, k)        gj.geometry.incoherence(pos, ctx)
    gj.study, gj.extraction, gj.attention, gj.attention_probe, gj.smoothness,
    gj.kernel_factorization                 (Song & Zhong)
    gj.positional                           (rotary and ALiBi position encodings)
    gj.gaussian, gj.montecarlo              (Wertich)      gj.localization   (Bao et al.)
    gj.fourier                              (clock algorithm)
    gj.lens (load, run_with_cache, hooks), gj.models, gj.convert, gj.data, gj.train, gj.claims,
    gj.parallel, gj.multihost, gj.pipeline, gj.report, gj.plots, gj.cli

``dir(gj)`` and ``gj.__all__`` list exactly this public API; the rendered reference:
``python docs/build_api.py docs/api``. Architecture, conventions and where
each equation lives: ``docs/DESIGN.md`` in the repository.
"""

from __future__ import annotations

import importlib as _importlib
from typing import Any as _Any

from geomjax._version import __version__  # noqa: E402

_SUBMODULES = (
    "attention",
    "attention_probe",
    "claims",
    "cli",
    "convert",
    "data",
    "decomposition",
    "errors",
    "extraction",
    "fourier",
    "gaussian",
    "geometry",
    "kernel_factorization",
    "lens",
    "localization",
    "models",
    "montecarlo",
    "multihost",
    "parallel",
    "pipeline",
    "plots",
    "positional",
    "report",
    "smoothness",
    "spectral",
    "study",
    "train",
    "typing",
)

_REEXPORTS = {
    "decompose": "decomposition",
    "decompose_stream": "decomposition",
    "decompose_sharded": "decomposition",
    "Decomposition": "decomposition",
    "DecompositionStats": "decomposition",
    "Estimate": "montecarlo",
    "GeomjaxError": "errors",
    "load": "lens",
}

__all__ = sorted(_REEXPORTS) + list(_SUBMODULES)


def __getattr__(name: str) -> _Any:
    if name in _SUBMODULES:
        return _importlib.import_module(f"geomjax.{name}")
    if name in _REEXPORTS:
        return getattr(_importlib.import_module(f"geomjax.{_REEXPORTS[name]}"), name)
    raise AttributeError(f"module 'geomjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API once: ``__all__`` plus ``__version__``."""
    return sorted(set(__all__) | {"__version__"})
