"""Restore a trained toy-transformer run (``geomjax train`` / :func:`geomjax.train.fit`) as a
:class:`geomjax.models.toy_run.ToyRun` for the geometry study.

A run directory written by ``fit(cfg, run_dir=RUN)`` holds ``config.json`` (the TrainConfig as
JSON) and ``checkpoints/ckpt_{step:08d}.npz`` (the whole TrainState; each checkpoint's ``__meta__``
also stores the config it was written with). :func:`load_toy_run` rebuilds the config, the model and
the template state exactly as ``fit`` does (:func:`geomjax.train.init_state`), restores the
parameters bit-for-bit with :func:`geomjax.train.load_checkpoint`, and rebuilds the task's
tokenizer through the task's own data code, so text maps to the ids the model was trained on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from geomjax.base.io import SCHEDULE_KEY
from geomjax.data import addition_tokenizer
from geomjax.data.chars import CharTokenizer
from geomjax.models.toy import ToyConfig
from geomjax.models.toy_run import TEXT_TASKS, ToyRun
from geomjax.train.checkpoint import config_jsonable, list_checkpoints, load_checkpoint
from geomjax.train.optim import OptimConfig
from geomjax.train.tasks import TASK_OPTIONS, TrainConfig, build_programs, init_state, load_task_data

__all__ = ["load_toy_run"]


def _read_meta(path: Path) -> dict:
    """The JSON ``__meta__`` entry of a checkpoint (without reading its arrays)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["__meta__"]))
    except KeyError:
        raise ValueError(f"checkpoint {str(path)!r} has no __meta__ entry; it was not written by geomjax") from None
    except Exception as e:  # zipfile.BadZipFile, EOFError, JSONDecodeError ...
        raise ValueError(f"checkpoint {str(path)!r} is corrupted or not a geomjax .npz "
                         f"({type(e).__name__}: {e}); load another step or retrain") from None


def _config_from_json(d: Any, source: str):
    """Rebuild a TrainConfig from its ``config_jsonable`` form (checked to round-trip exactly)."""
    if isinstance(d, dict) and "__class__" not in d and isinstance(d.get("config"), dict):
        d = d["config"]  # a report.RunDir config.json: {"config": ..., "environment": ...}
    if isinstance(d, dict) and SCHEDULE_KEY in d:
        d = {k: v for k, v in d.items() if k != SCHEDULE_KEY}  # fit()'s record of the schedule, not a field
    if not isinstance(d, dict) or d.get("__class__") != "TrainConfig":
        got = d.get("__class__") if isinstance(d, dict) else type(d).__name__
        raise ValueError(f"{source} does not hold a geomjax.train TrainConfig (got {got!r}); "
                         "load_toy_run needs a run directory written by `geomjax train` / geomjax.train.fit")

    def build(cls, fields: dict, what: str):
        fields = {k: v for k, v in fields.items() if k != "__class__"}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise ValueError(f"{source}: {what} has fields {unknown} that this geomjax's {cls.__name__} does not "
                             "know; the run was written by another geomjax version — load it with that version")
        try:
            return cls(**fields)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: cannot rebuild {cls.__name__} ({e})") from None

    top = dict(d)
    for key in ("model", "optim"):
        if not isinstance(top.get(key), dict):
            raise ValueError(f"{source}: the TrainConfig has no {key!r} section")
    top["model"] = build(ToyConfig, top["model"], "model")
    top["optim"] = build(OptimConfig, top["optim"], "optim")
    options_cls = TASK_OPTIONS.get(top.get("task"))
    if options_cls is not None and isinstance(top.get("options"), dict):
        top["options"] = build(options_cls, top["options"], "options")
    cfg = build(TrainConfig, top, "the TrainConfig")
    if config_jsonable(cfg) != d:
        raise ValueError(f"{source}: the config does not round-trip through TrainConfig exactly; the run was "
                         "written by another geomjax version — load it with that version")
    return cfg


def _tokenizer(cfg, data_dir) -> CharTokenizer:
    """The tokenizer training used, rebuilt by the task's own data code."""
    if cfg.task == "shakespeare":
        # load_task_data builds CharTokenizer.from_text(tiny Shakespeare) exactly as fit() did and
        # checks its vocabulary size against the model's.
        return load_task_data(cfg, data_dir)[2]["tokenizer"]
    tok = addition_tokenizer()  # the fixed vocabulary encode_addition() trains on
    if tok.vocab_size != cfg.model.vocab_size:
        raise ValueError(f"the addition tokenizer has {tok.vocab_size} ids but the run's model has "
                         f"vocab_size {cfg.model.vocab_size}; the run was not trained on geomjax's addition data")
    return tok


def load_toy_run(run_dir: str | os.PathLike, step: int | None = None, *,
                 data_dir: str | os.PathLike | None = None) -> ToyRun:
    """Restore a trained toy-transformer run: model, parameters, tokenizer and config.

    Args:
      run_dir: the run directory (``geomjax train TASK --out RUN`` / ``fit(cfg, run_dir=RUN)``),
        holding ``checkpoints/ckpt_*.npz``; the checkpoints folder itself is accepted too.
      step: the checkpoint's step (None: the latest).
      data_dir: offline data folder holding ``tinyshakespeare/`` (shakespeare runs; as
        :func:`geomjax.data.tiny_shakespeare`, None searches the usual places).

    Returns:
      :class:`ToyRun`. The config is the one stored in the checkpoint (the one its parameters were
      trained with), falling back to ``run_dir/config.json``.

    Raises:
      FileNotFoundError: ``run_dir`` missing or without checkpoints; the tiny Shakespeare corpus not found.
      ValueError: ``step`` has no checkpoint (the available steps are listed); the run's task is not a
        language model over text (``modular``); an unreadable config or checkpoint, or one that does
        not match the model.
    """
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"run directory {str(root)!r} does not exist; train one with "
                                "`geomjax train shakespeare --out DIR` (or geomjax.train.fit(cfg, run_dir=DIR))")
    ckpt_dir = root / "checkpoints"
    cks = list_checkpoints(ckpt_dir)
    if not cks and list_checkpoints(root):
        ckpt_dir, cks = root, list_checkpoints(root)
    if not cks:
        raise FileNotFoundError(f"no checkpoints (ckpt_XXXXXXXX.npz) in {str(ckpt_dir)!r}; {str(root)!r} is not a "
                                "trained run — train one with `geomjax train shakespeare --out DIR` "
                                "(or geomjax.train.fit(cfg, run_dir=DIR)) and pass DIR")
    steps = [s for s, _ in cks]
    if step is None:
        step, path = cks[-1]
    else:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"load_toy_run: step must be an int or None, got {step!r}")
        found = dict(cks).get(int(step))
        if found is None:
            raise ValueError(f"load_toy_run: {str(root)!r} has no checkpoint at step {int(step)}; available steps: "
                             f"{steps} (pass one of them, or step=None for the latest)")
        step, path = int(step), found

    meta = _read_meta(path)
    if meta.get("config") is not None:
        cfg = _config_from_json(meta["config"], f"checkpoint {str(path)!r}")
    else:
        cfg_file = ckpt_dir.parent / "config.json" if ckpt_dir != root else root / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"checkpoint {str(path)!r} stores no config and {str(cfg_file)!r} does not "
                                    "exist; the run's TrainConfig is needed to rebuild the model")
        try:
            raw = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{str(cfg_file)!r} is not valid JSON ({e})") from None
        cfg = _config_from_json(raw, str(cfg_file))

    if cfg.task not in TEXT_TASKS:
        what = {"modular": "modular addition: its inputs are (a, b, '=') id triples over 0..p, with no text "
                           "tokenizer"}.get(cfg.task, "it has no text tokenizer")
        raise ValueError(f"load_toy_run: the run in {str(root)!r} is a {cfg.task!r} task ({what}); only language "
                         f"models over text can be loaded for the text geometry study — tasks {TEXT_TASKS}. "
                         "Analyse this model with its own task inputs (geomjax.train.load_task_data) instead")

    tokenizer = _tokenizer(cfg, data_dir)
    programs = build_programs(cfg)
    template = init_state(cfg, programs)  # the structure fit() restores into
    state, meta = load_checkpoint(path, template)
    if int(meta["step"]) != step or int(np.asarray(state.step)) != step:
        raise ValueError(f"checkpoint {str(path)!r} holds step {int(meta['step'])}, not {step} as its name says; "
                         "the file was renamed or corrupted")
    return ToyRun(model=programs.model, params=state.params, tokenizer=tokenizer, config=cfg, step=step,
                  max_positions=int(cfg.model.max_len), checkpoint=path)
