"""Presets of the corpora sweep (Song & Zhong §2, Table 1 across corpora): ``get_config(preset)``.

Each preset is the library's :class:`geomjax.drivers.pipeline.GeometryConfig` (model, sampling sizes,
seed; its ``corpus`` is replaced by each corpus of the sweep) plus the list of corpora.

* ``smoke``: MiniLM on WikiText-2 and tiny Shakespeare, C = 2 documents × 4 windows of T = 32, no
  out-of-distribution pass, cluster figures or Theorem 1 (tests).
* ``cpu``: MiniLM on every offline corpus (WikiText-2, tiny Shakespeare, the standard library's
  Python source, pydoc prose), C = 4 documents × 32 windows of T = 128; a few minutes on 2 cores.
* ``paper``: Song & Zhong's scale (:data:`geomjax.drivers.pipeline.PRESETS` ``"paper"``: C = 6,400 windows of
  T = 512), meant for a GPU and corpora large enough for that many non-overlapping windows.
"""

from __future__ import annotations

import dataclasses

from geomjax.drivers.pipeline import PRESETS as GEOMETRY_PRESETS
from geomjax.drivers.pipeline import GeometryConfig

PRESETS = ("smoke", "cpu", "paper")
ALL_CORPORA = ("wikitext2", "shakespeare", "stdlib", "pydoc")


@dataclasses.dataclass(frozen=True)
class CorporaSweepConfig:
    """One sweep (frozen): the geometry study's config (``corpus`` set per corpus) and the corpora.

    Tiny Shakespeare is one document: its "topics" are windows of that one text, so it is sampled
    as 1 document × (n_docs · windows_per_doc) windows (:meth:`for_corpus`).
    """

    preset: str
    geometry: GeometryConfig
    corpora: tuple[str, ...] = ALL_CORPORA

    def for_corpus(self, corpus: str) -> GeometryConfig:
        """The geometry study of one corpus (same C for every corpus)."""
        g = self.geometry
        if corpus in ("shakespeare", "tinyshakespeare"):
            return dataclasses.replace(g, corpus=corpus, n_docs=1, windows_per_doc=g.n_docs * g.windows_per_doc)
        return dataclasses.replace(g, corpus=corpus)


def get_config(preset: str = "cpu", *, model: str = "minilm", corpora: tuple[str, ...] | None = None,
               seed: int = 0) -> CorporaSweepConfig:
    """The ``smoke`` / ``cpu`` / ``paper`` sweep of ``model`` over ``corpora`` (None: the preset's)."""
    if preset == "smoke":
        g = GeometryConfig(model=model, corpus="wikitext2", n_docs=2, windows_per_doc=4, seq_len=32, batch_size=8,
                           seed=seed, n_cvec=4, ood_corpus=None, n_cluster_windows=0, theorem1=False)
        return CorporaSweepConfig("smoke", g, tuple(corpora or ("wikitext2", "shakespeare")))
    if preset == "cpu":
        g = GeometryConfig(model=model, corpus="wikitext2", n_docs=4, windows_per_doc=32, seq_len=128, batch_size=16,
                           seed=seed)
        return CorporaSweepConfig("cpu", g, tuple(corpora or ALL_CORPORA))
    if preset == "paper":
        g = GeometryConfig(model=model, corpus="wikitext2", seed=seed, **GEOMETRY_PRESETS["paper"])
        return CorporaSweepConfig("paper", g, tuple(corpora or ALL_CORPORA))
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")
