"""geomjax: geometry of transformer hidden states and statistics of attention, in JAX.

Public API (see docs/DESIGN.md and README.md)::

    import geomjax as gj
    dec = gj.decompose(h, drop_first=False)           # Song & Zhong eqs. (2)-(3)
    st = gj.decompose_stream(batches)                 # one pass, O(d^2 + T d + C d) memory
    gj.spectral.screenot_rank(Y, k)
    gj.geometry.incoherence(pos, ctx)
    model, params = gj.convert.load_pretrained(path)
    gj.claims.run(select=None, budget="quick")

Submodules are imported lazily so that ``import geomjax`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "attention",
    "claims",
    "cli",
    "convert",
    "data",
    "decomposition",
    "extraction",
    "fourier",
    "gaussian",
    "geometry",
    "kernel_factorization",
    "localization",
    "models",
    "montecarlo",
    "multihost",
    "parallel",
    "plots",
    "report",
    "smoothness",
    "spectral",
    "train",
)

_REEXPORTS = {
    "decompose": "decomposition",
    "decompose_stream": "decomposition",
    "decompose_sharded": "decomposition",
    "Decomposition": "decomposition",
    "DecompositionStats": "decomposition",
    "Estimate": "montecarlo",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"geomjax.{name}")
    if name in _REEXPORTS:
        return getattr(importlib.import_module(f"geomjax.{_REEXPORTS[name]}"), name)
    raise AttributeError(f"module 'geomjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES) + list(_REEXPORTS))
