"""The one JSON/NaN rule (geomjax.base.io) used by report, claims.registry and train.checkpoint."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from geomjax.claims.registry import _jsonable as claims_jsonable
from geomjax.base.io import dumps, from_json_number, to_jsonable
from geomjax.analysis.report import to_jsonable as report_jsonable
from geomjax.train.checkpoint import config_jsonable, load_checkpoint, save_checkpoint
from geomjax.train.tasks import get_config


def test_nonfinite_rule_is_strict_json_and_round_trips():
    x = {"a": [1.0, float("nan"), float("inf"), -float("inf")], "b": np.float32(np.nan),
         "c": jnp.asarray([0.5, jnp.inf]), "d": np.int64(3), "e": np.bool_(True), "f": None}
    s = dumps(x)  # allow_nan=False: raises if a NaN literal slipped through
    back = json.loads(s)
    assert back["a"] == [1.0, "NaN", "Infinity", "-Infinity"] and back["b"] == "NaN"
    assert back["c"] == [0.5, "Infinity"] and back["d"] == 3 and back["e"] is True and back["f"] is None
    vals = from_json_number(back["a"])
    assert vals[0] == 1.0 and math.isnan(vals[1]) and vals[2] == math.inf and vals[3] == -math.inf


@pytest.mark.parametrize("legacy,value", [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf),
                                          ("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf)])
def test_older_spellings_read_back(legacy, value):
    """claims.json before the rule wrote str(float) ("nan", "inf"); both spellings read back."""
    got = from_json_number(legacy)
    assert (math.isnan(got) and math.isnan(value)) or got == value
    # a bare NaN literal (checkpoint metadata before the rule) is read by Python's json itself
    assert math.isnan(json.loads('{"x": NaN}')["x"])


def test_three_writers_share_the_rule():
    x = {"v": [float("nan"), 2.0], "s": np.float64(np.inf)}
    want = {"v": ["NaN", 2.0], "s": "Infinity"}
    assert report_jsonable(x) == claims_jsonable(x) == to_jsonable(x) == want
    assert claims_jsonable(object()).startswith("<object")  # claims keep unknown objects as repr


class _State(NamedTuple):
    step: jnp.ndarray
    w: jnp.ndarray


def _legacy_config_form(cfg):
    """The checkpoint metadata form before geomjax.base.io: tag + dataclasses.asdict, tuples as lists."""
    return json.loads(json.dumps({"__class__": type(cfg).__name__} | dataclasses.asdict(cfg)))


def test_checkpoint_config_form_unchanged_and_round_trips(tmp_path):
    cfg = get_config("modular", "smoke")
    assert config_jsonable(cfg) == _legacy_config_form(cfg)  # config hashes of existing runs unchanged
    state = _State(step=jnp.asarray(3), w=jnp.arange(4.0))
    path = save_checkpoint(tmp_path, state, config=cfg)
    restored, meta = load_checkpoint(path, state)
    assert meta["config"] == config_jsonable(cfg)
    np.testing.assert_array_equal(np.asarray(restored.w), np.arange(4.0))
