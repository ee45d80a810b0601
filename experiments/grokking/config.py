"""Configs of the grokking experiment (Nanda et al.; the clock blog): ``get_config(preset)``.

The presets are :func:`geomjax.train.grokking.grokking_config`'s (defined there only).
"""

from __future__ import annotations

from geomjax.train.grokking import GROK_PRESETS, GrokkingConfig, grokking_config

__all__ = ["GROK_PRESETS", "RELU_FREE_SETTINGS", "get_config", "relu_free_configs"]

# (training fraction, epochs) of the ReLU-free runs of experiments.grokking.relu_free, per preset: the
# blog §8 claim at more than one split. ``cpu``: 50% (the clock claims' split, which groks) and 40%; the 30%
# split's run is the cpu report's own ReLU-free run (4,000 epochs, experiments.grokking.run). ``blog``: the
# blog's own setting (30%, lr 1e-3, 20,000 epochs), for an accelerator.
RELU_FREE_SETTINGS = {"smoke": ((0.3, 200), (0.5, 200)), "cpu": ((0.5, 1500), (0.4, 2000)), "blog": ((0.3, 20_000),),
                      "paper": ((0.3, 50_000),)}


def get_config(preset: str = "cpu", *, relu: bool = True, seed: int = 0) -> GrokkingConfig:
    """The grokking run of ``preset`` (``paper`` 50,000 epochs, ``blog`` 20,000, ``cpu``, ``smoke``);
    ``relu=False`` gives the blog's ReLU-free variant."""
    if preset not in GROK_PRESETS:
        raise ValueError(f"get_config: preset must be one of {GROK_PRESETS}, got {preset!r}")
    return grokking_config(preset, relu=relu, seed=seed)


def relu_free_configs(preset: str = "cpu", *, seed: int = 0) -> list[GrokkingConfig]:
    """The ReLU-free runs of ``preset``'s split study (:data:`RELU_FREE_SETTINGS`): its ReLU-free config at each
    (training fraction, epochs), everything else unchanged."""
    base = get_config(preset, relu=False, seed=seed)
    return [base.replace(train_frac=f, epochs=e) for f, e in RELU_FREE_SETTINGS[preset]]
