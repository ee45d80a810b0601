"""A trained toy-transformer run (``geomjax train`` / :func:`geomjax.train.fit`) for the geometry study.

:class:`ToyRun` and :func:`toy_forward` live here; :func:`geomjax.train.load_toy_run` restores one
(loading belongs to ``train``, which imports ``models``, never the other way round).

A run directory written by ``fit(cfg, run_dir=RUN)`` holds ``config.json`` (the TrainConfig as
JSON) and ``checkpoints/ckpt_{step:08d}.npz`` (the whole TrainState; each checkpoint's ``__meta__``
also stores the config it was written with). :func:`~geomjax.train.load_toy_run` rebuilds the config, the model and
the template state exactly as ``fit`` does (:func:`geomjax.train.init_state`), restores the
parameters bit-for-bit with :func:`geomjax.train.load_checkpoint`, and rebuilds the task's
tokenizer through the task's own data code, so text maps to the ids the model was trained on::

    run = load_toy_run("runs/shakespeare")                      # latest checkpoint
    forward = toy_forward(run)                                  # (params, ids) -> L+1 (B, T, d)
    ids = run.tokenizer.encode(text)                            # windows of <= run.max_positions
    stats = decompose_model_stream(forward, run.params, batches, drop_first=True)

Supported tasks are the language models over text: ``shakespeare`` (character LM on tiny
Shakespeare; the vocabulary is the sorted characters of the corpus, so it needs the corpus —
``data_dir``) and ``addition`` (fixed vocabulary ``"0123456789+=\\n"``). ``modular`` runs read
(a, b, "=") id triples with no text tokenizer and are rejected.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from collections.abc import Callable
from typing import Any

from geomjax.base._checks import compiled_cache
from geomjax.data.chars import CharTokenizer
from geomjax.models.toy import ToyConfig, ToyTransformer

__all__ = ["TEXT_TASKS", "ToyRun", "toy_forward"]

TEXT_TASKS = ("shakespeare", "addition")
"""Tasks whose runs are language models over text (they have a character tokenizer)."""

_WHICH = ("residual", "hidden_states")


@dataclasses.dataclass(frozen=True, eq=False)
class ToyRun:
    """A trained toy transformer restored from a run directory.

    Attributes:
      model: the :class:`~geomjax.models.toy.ToyTransformer` of the run's config.
      params: the trained parameters (``model.apply({"params": params}, ids)``).
      tokenizer: the task's :class:`~geomjax.data.CharTokenizer` (the one training used).
      config: the run's :class:`~geomjax.train.TrainConfig`.
      step: the optimizer step of the restored checkpoint.
      max_positions: the model's context length (``config.model.max_len``); longer windows raise.
      checkpoint: path of the restored ``.npz``.
    """

    model: ToyTransformer
    params: Any
    tokenizer: CharTokenizer
    config: Any
    step: int
    max_positions: int
    checkpoint: Path | None = None


@compiled_cache(maxsize=32)
def _forward(cfg: ToyConfig, which: str):
    model = ToyTransformer(cfg)

    def forward(params, ids):
        _, inter = model.apply({"params": params}, ids, deterministic=True)
        return tuple(getattr(inter, which))

    forward.__name__ = f"toy_forward_{which}"
    return forward


def toy_forward(run: ToyRun, which: str = "residual") -> Callable:
    """``forward(params, ids (B, T) int32) -> tuple of L+1 arrays (B, T, d)`` for the run's model.

    Deterministic (no dropout); jittable; T must not exceed ``run.max_positions``. The same
    function object is returned for the same model config and ``which``, so
    :func:`geomjax.tools.extraction.decompose_model_stream` reuses its compilation across calls.

    Args:
      run: a :class:`ToyRun`.
      which: ``"residual"`` (the embedding output and every block's output, before the final
        LayerNorm — the Song & Zhong convention) or ``"hidden_states"`` (the last state after
        ``ln_f`` for a pre-LN model, Hugging Face's convention).

    Raises:
      ValueError: unknown ``which``.
    """
    if which not in _WHICH:
        raise ValueError(f"toy_forward: which must be one of {_WHICH}, got {which!r}")
    if not isinstance(run, ToyRun):
        raise TypeError(f"toy_forward: expected a ToyRun (from load_toy_run), got {type(run).__name__}")
    return _forward(run.model.cfg, which)
