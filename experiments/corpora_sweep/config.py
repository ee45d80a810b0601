"""Presets of the corpora sweep (Song & Zhong §2, Table 1 across corpora): ``get_config(preset)``.

Each preset is the library's :class:`geomjax.drivers.pipeline.GeometryConfig` (model, sampling sizes,
seed; its ``corpus`` is replaced by each corpus of the sweep) plus the list of corpora.

* ``smoke``: MiniLM on WikiText-2 and tiny Shakespeare, C = 2 documents × 4 windows of T = 32, no
  out-of-distribution pass, cluster figures or Theorem 1 (tests).
* ``cpu``: MiniLM on every offline corpus (WikiText-2, tiny Shakespeare, the standard library's
  Python source, pydoc prose), C = 4 documents × 32 windows of T = 128; a few minutes on 2 cores.
* every preset also studies WikiText-2 at a few other settings of the same model (``relative_norm_settings``:
  the number of windows C, the window length T, the source code's raw states and causal mask), the second
  settings that show why the relative norm differs from Table 1's (the report's "Why the relative norm
  differs" section); these runs skip Theorem 1, Table 2 and App. C.
* ``paper``: Song & Zhong's scale (:data:`geomjax.drivers.pipeline.PRESETS` ``"paper"``: C = 6,400 windows of
  T = 512), meant for a GPU and corpora large enough for that many non-overlapping windows.
"""

from __future__ import annotations

import dataclasses

from geomjax.drivers.pipeline import PRESETS as GEOMETRY_PRESETS
from geomjax.drivers.pipeline import GeometryConfig

PRESETS = ("smoke", "cpu", "paper")
ALL_CORPORA = ("wikitext2", "shakespeare", "stdlib", "pydoc")


# the cpu preset's second settings of the relative norm (WikiText-2; label, GeometryConfig fields that differ):
# the number of windows C (P is a mean over C windows: its noise adds to ‖P‖), the source's window length T = 512,
# and the authors' released code's conventions (M the raw states with μ included; BERT run with is_decoder=True)
CPU_SETTINGS = (
    ("cpu preset (C 128, T 128)", ()),
    ("C 32", (("windows_per_doc", 8),)),
    ("C 800", (("n_docs", 25),)),
    ("T 512 (C 128)", (("seq_len", 512), ("n_docs", 16), ("windows_per_doc", 8))),
    ("raw states, μ included", (("centered_relative_norm", False),)),
    ("causal mask", (("causal", True),)),
    ("causal, raw, T 512 (C 128)", (("causal", True), ("centered_relative_norm", False), ("seq_len", 512),
                                    ("n_docs", 16), ("windows_per_doc", 8))),
)


@dataclasses.dataclass(frozen=True)
class CorporaSweepConfig:
    """One sweep (frozen): the geometry study's config (``corpus`` set per corpus) and the corpora.

    Tiny Shakespeare is one document: its "topics" are windows of that one text, so it is sampled
    as 1 document × (n_docs · windows_per_doc) windows (:meth:`for_corpus`). ``relative_norm_settings``:
    (label, GeometryConfig fields that differ) of the WikiText-2 studies behind the report's "Why the
    relative norm differs" section (:meth:`setting`).
    """

    preset: str
    geometry: GeometryConfig
    corpora: tuple[str, ...] = ALL_CORPORA
    relative_norm_settings: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

    def setting(self, overrides: tuple[tuple[str, object], ...]) -> GeometryConfig:
        """WikiText-2 at one of ``relative_norm_settings`` (GeometryConfig fields that differ), without
        Theorem 1, Table 2 or App. C (only the per-layer Table 1 metrics are read)."""
        g = dataclasses.replace(self.for_corpus("wikitext2"), theorem1=False, ood_corpus=None, n_cluster_windows=0)
        return dataclasses.replace(g, **dict(overrides))

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
        return CorporaSweepConfig("smoke", g, tuple(corpora or ("wikitext2", "shakespeare")),
                                  (("raw states, μ included", (("centered_relative_norm", False),)),))
    if preset == "cpu":
        g = GeometryConfig(model=model, corpus="wikitext2", n_docs=4, windows_per_doc=32, seq_len=128, batch_size=16,
                           seed=seed)
        return CorporaSweepConfig("cpu", g, tuple(corpora or ALL_CORPORA), CPU_SETTINGS)
    if preset == "paper":
        g = GeometryConfig(model=model, corpus="wikitext2", seed=seed, **GEOMETRY_PRESETS["paper"])
        return CorporaSweepConfig("paper", g, tuple(corpora or ALL_CORPORA),
                                  (("raw states, μ included", (("centered_relative_norm", False),)),
                                   ("causal mask", (("causal", True),))))
    raise ValueError(f"get_config: preset must be one of {PRESETS}, got {preset!r}")
