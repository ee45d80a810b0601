"""The model families geomjax ports: one :class:`~geomjax.models.family.Family` record per family module.

Adding a family is writing ``models/<family>.py`` (ending with its ``FAMILY`` record) and naming the
module in :data:`FAMILY_MODULES`; the interface, conversion, study and lens read the records
(docs/models.md, "Adding a family").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geomjax.errors import GeomjaxError
from geomjax.models import bert, bloom, gemma, gemma2, gemma3, gpt2, gpt_neox, llama, phi3, qwen2, qwen3
from geomjax.models.family import Family

__all__ = ["FAMILIES", "FAMILY_MODULES", "MODEL_TYPES", "family_of", "family_of_model_type"]

FAMILY_MODULES = (gpt2, bert, llama, bloom, gpt_neox, qwen2, qwen3, gemma, gemma2, gemma3, phi3)
"""The family modules, each ending with its ``FAMILY`` record."""

FAMILIES: tuple[Family, ...] = tuple(m.FAMILY for m in FAMILY_MODULES)
"""Every ported family."""

_BY_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}
_BY_CONFIG: dict[type, Family] = {f.config_cls: f for f in FAMILIES}

MODEL_TYPES: tuple[str, ...] = tuple(_BY_TYPE)
"""``config.json`` model types geomjax ports."""


def family_of(config: Any) -> Family:
    """The :class:`Family` of a config instance (by its exact class); TypeError for any other object."""
    fam = _BY_CONFIG.get(type(config))
    if fam is None:
        raise TypeError(f"no geomjax model family for config type {type(config).__name__}")
    return fam


def family_of_model_type(cfg: Mapping) -> Family:
    """The :class:`Family` reading a ``config.json`` dict, by its ``model_type``."""
    mt = cfg.get("model_type")
    fam = _BY_TYPE.get(mt)
    if fam is None:
        raise GeomjaxError(f"config.json has model_type={mt!r}; geomjax ports {', '.join(MODEL_TYPES)} (use the "
                           "toy model family for other architectures)")
    return fam
