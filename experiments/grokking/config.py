"""Configs of the grokking experiment (Nanda et al.; the clock blog): ``get_config(preset)``.

The presets are :func:`geomjax.train.grokking.grokking_config`'s (defined there only).
"""

from __future__ import annotations

from geomjax.train.grokking import GROK_PRESETS, GrokkingConfig, grokking_config

__all__ = ["GROK_PRESETS", "get_config"]


def get_config(preset: str = "cpu", *, relu: bool = True, seed: int = 0) -> GrokkingConfig:
    """The grokking run of ``preset`` (``paper`` 50,000 epochs, ``blog`` 20,000, ``cpu``, ``smoke``);
    ``relu=False`` gives the blog's ReLU-free variant."""
    if preset not in GROK_PRESETS:
        raise ValueError(f"get_config: preset must be one of {GROK_PRESETS}, got {preset!r}")
    return grokking_config(preset, relu=relu, seed=seed)
