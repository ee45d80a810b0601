"""geomjax: geometry of transformer hidden states and statistics of attention, in JAX.

Functions and types at the top level (``import geomjax as gj``)::

    model = gj.load("minilm")                      # module, params, tokenizer: gj.load("gpt2"), "toy:RUN"
    out, cache = model.run_with_cache("The cat sat.")   # named activations (geomjax.analysis.lens)

    dec = gj.decompose(h, drop_first=False)        # Song & Zhong eqs. (2)-(3): h (C, T, d)
    st = gj.decompose_stream(batches)              # the same statistics in one pass, O(d² + Td + Cd)
    gj.decompose_sharded(h, mesh, batch_size=64)   # sharded over devices
    gj.Decomposition, gj.DecompositionStats, gj.Estimate, gj.GeomjaxError

Inputs: JAX arrays, NumPy arrays or Python lists; float64 NumPy arrays and lists are computed in
float64 (JAX's x64 switched on locally), float32 in float32 — the one dtype rule, ``geomjax.base._checks``.

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
import importlib.abc as _abc
import importlib.machinery as _machinery
import sys as _sys
from typing import Any as _Any

from geomjax._version import __version__  # noqa: E402

_SUBMODULES = {
    # name under ``gj.`` -> its module; the folder is the module's layer (docs/DESIGN.md, Layers)
    "errors": "geomjax.errors",
    "typing": "geomjax.typing",
    "parallel": "geomjax.base.parallel",
    "positional": "geomjax.theory.positional",
    "geometry": "geomjax.theory.geometry",
    "spectral": "geomjax.theory.spectral",
    "smoothness": "geomjax.theory.smoothness",
    "decomposition": "geomjax.theory.decomposition",
    "gaussian": "geomjax.theory.gaussian",
    "localization": "geomjax.theory.localization",
    "fourier": "geomjax.theory.fourier",
    "kernel_factorization": "geomjax.theory.kernel_factorization",
    "montecarlo": "geomjax.theory.montecarlo",
    "attention": "geomjax.theory.attention",
    "data": "geomjax.data",
    "models": "geomjax.models",
    "convert": "geomjax.convert",
    "train": "geomjax.train",
    "extraction": "geomjax.tools.extraction",
    "attention_probe": "geomjax.tools.attention_probe",
    "lens": "geomjax.analysis.lens",
    "circuits": "geomjax.analysis.circuits",
    "study": "geomjax.analysis.study",
    "report": "geomjax.analysis.report",
    "plots": "geomjax.analysis.plots",
    "pipeline": "geomjax.drivers.pipeline",
    "multihost": "geomjax.drivers.multihost",
    "claims": "geomjax.claims",
    "cli": "geomjax.cli",
}

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

__all__ = sorted(_REEXPORTS) + sorted(_SUBMODULES)

# The module paths before the tree was split by layer (geomjax.spectral, geomjax.study, ...): importing
# one gives the moved module itself (the same object), so code written against them keeps working.
_MOVED = {
    **{f"geomjax.{name}": path for name, path in _SUBMODULES.items() if path != f"geomjax.{name}"},
    "geomjax.io": "geomjax.base.io",
    "geomjax._checks": "geomjax.base._checks",
    "geomjax._repr": "geomjax.base._repr",
    "geomjax.clock_probe": "geomjax.tools.clock_probe",
    "geomjax.study_config": "geomjax.analysis.study_config",
    "geomjax.comparison": "geomjax.analysis.comparison",
}


class _MovedModuleFinder(_abc.MetaPathFinder, _abc.Loader):
    """Resolves an old module path of :data:`_MOVED` to the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MOVED:
            return None
        return _machinery.ModuleSpec(fullname, self, origin=_MOVED[fullname])

    def create_module(self, spec):
        return _importlib.import_module(_MOVED[spec.name])

    def exec_module(self, module):
        pass


_sys.meta_path.append(_MovedModuleFinder())


def __getattr__(name: str) -> _Any:
    if name in _SUBMODULES:
        return _importlib.import_module(_SUBMODULES[name])
    if name in _REEXPORTS:
        return getattr(_importlib.import_module(_SUBMODULES[_REEXPORTS[name]]), name)
    raise AttributeError(f"module 'geomjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API once: ``__all__`` plus ``__version__``."""
    return sorted(set(__all__) | {"__version__"})
