"""Locate and read Hugging Face checkpoints offline: config.json and (sharded) safetensors.

A checkpoint is found from

* a local directory holding ``config.json`` and ``model.safetensors`` (or
  ``model.safetensors.index.json`` plus its shards), e.g. one written by ``save_pretrained``;
* a Hugging Face cache entry ``.../models--org--name`` (the revision in ``refs/main``, or the
  only snapshot), or one of its ``snapshots/<rev>`` directories;
* a Hugging Face repository id (``"gpt2"``, ``"org/name"``) as Hugging Face users type it: taken
  from the local cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``) when it
  is there, otherwise downloaded with ``huggingface_hub`` (config, safetensors and tokenizer files
  only) unless ``HF_HUB_OFFLINE`` is set or the hub cannot be reached — then one
  :class:`~geomjax.errors.GeomjaxError` says so and how to pass a local directory instead.

Tensors are read with ``safetensors.numpy`` (bfloat16 files with ``ml_dtypes``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from geomjax.errors import GeomjaxError
from geomjax.typing import Shaped

__all__ = [
    "SAFETENSORS_INDEX",
    "SAFETENSORS_NAME",
    "ShardedTensors",
    "download_checkpoint",
    "hf_cache_dir",
    "hub_offline",
    "load_tensors",
    "read_config",
    "resolve_checkpoint",
    "split_revision",
]

SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"

_SAVE_HINT = (
    "re-save the model with `model.save_pretrained(dir)` (transformers writes safetensors by "
    "default) or re-download it on a machine with network access"
)


def hf_cache_dir() -> Path:
    """Return the Hugging Face hub cache directory (``HF_HUB_CACHE``, ``HF_HOME/hub`` or default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _snapshot_of_cache_entry(entry: Path, revision: str | None) -> Path:
    snaps = entry / "snapshots"
    if not snaps.is_dir():
        raise FileNotFoundError(
            f"{entry} looks like a Hugging Face cache entry but has no snapshots/ directory; "
            f"download the model into the cache first (hf download NAME) or pass a local "
            "directory with config.json and model.safetensors"
        )
    ref = revision or "main"
    ref_file = entry / "refs" / ref
    if ref_file.is_file():
        commit = ref_file.read_text().strip()
        snap = snaps / commit
        if snap.is_dir():
            return snap
        raise FileNotFoundError(
            f"{ref_file} points at snapshot {commit}, which is missing under {snaps}; the cache is "
            "incomplete: re-download the model"
        )
    if revision is not None and (snaps / revision).is_dir():
        return snaps / revision
    found = sorted(p for p in snaps.iterdir() if p.is_dir())
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(f"{snaps} is empty; the cache entry holds no downloaded revision")
    raise FileNotFoundError(
        f"{entry} has several snapshots ({', '.join(p.name for p in found)}) and no refs/{ref}; "
        "pass revision=<commit> or the snapshot directory itself"
    )


def resolve_checkpoint(path: str | os.PathLike, revision: str | None = None) -> Path:
    """Resolve a local directory, Hugging Face cache entry or repo id to a snapshot directory.

    Args:
      path: directory with ``config.json``; a cache entry ``models--org--name``; or a repo id
        ``"name"`` / ``"org/name"``: the local Hugging Face cache first, else a download
        (:func:`download_checkpoint`); any of them may end in ``@REVISION`` (:func:`split_revision`),
        e.g. ``EleutherAI/pythia-70m@step1000``.
      revision: branch/tag name under ``refs/`` or a snapshot commit.

    Returns:
      The directory holding ``config.json`` and the weights.

    Raises:
      FileNotFoundError: a local path without a usable checkpoint (the message says what was looked for).
      GeomjaxError: a repo id neither cached nor reachable (HF_HUB_OFFLINE, no network, unknown repo).
    """
    p = Path(path).expanduser()
    if not p.exists():
        path, at = split_revision(path)
        if at is not None:
            if revision is not None and revision != at:
                raise GeomjaxError(f"{path}@{at}: the revision is given twice ({at!r} and revision={revision!r})")
            revision, p = at, Path(path).expanduser()
    if p.is_dir():
        if (p / "config.json").is_file():
            return p
        if (p / "snapshots").is_dir():
            return _resolve_snapshot_dir(_snapshot_of_cache_entry(p, revision))
        raise FileNotFoundError(
            f"{p} has no config.json (nor snapshots/ as a Hugging Face cache entry would); pass the "
            "directory written by save_pretrained or the models--org--name cache entry"
        )
    if p.exists():
        raise FileNotFoundError(f"{p} is a file; pass the directory that contains config.json")
    s = os.fspath(path)
    if not looks_like_repo_id(path):
        raise FileNotFoundError(f"checkpoint directory {s} does not exist")
    entry = hf_cache_dir() / ("models--" + s.replace("/", "--"))
    if entry.is_dir():
        return _resolve_snapshot_dir(_snapshot_of_cache_entry(entry, revision))
    return download_checkpoint(s, revision)


# A Hugging Face repo id: "name" or "org/name" (letters, digits, "-", "_", "."), not a path.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_HUB_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json",
              "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]


def looks_like_repo_id(name: str | os.PathLike) -> bool:
    """Whether a model name that is not an existing path is a Hub repo id (``"name"``, ``"org/name"``) rather
    than a local path: a ``Path`` object, or a string starting with ``.``, ``/`` or ``~``, is a path."""
    s = os.fspath(name)
    return (not isinstance(name, os.PathLike) and not s.startswith((".", "/", "~"))
            and _REPO_ID.fullmatch(s) is not None)


def split_revision(name: str | os.PathLike) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ("org/name", "rev") (a training checkpoint such as ``EleutherAI/pythia-70m@step1000``
    is a branch of the repository); a name without "@" -> (name, None).

    Raises:
      GeomjaxError: an empty name or revision, or more than one "@".
    """
    s = os.fspath(name)
    if "@" not in s:
        return s, None
    base, _, rev = s.partition("@")
    if not base or not rev or "@" in rev:
        raise GeomjaxError(f"model {s!r}: write a revision as NAME@REVISION (e.g. EleutherAI/pythia-70m@step1000)")
    return base, rev


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value (read at call time)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def download_checkpoint(repo_id: str, revision: str | None = None) -> Path:
    """Download a repository's config, safetensors and tokenizer files into the Hugging Face cache.

    Returns the snapshot directory. Raises :class:`GeomjaxError` (one line) when the hub is off
    (``HF_HUB_OFFLINE``) or unreachable, or the repository is unknown / gated.
    """
    where = (f"{repo_id!r} is neither in the Hugging Face cache ({hf_cache_dir()}) nor reachable")
    fix = ("download it where the hub is reachable (hf download " + repo_id
           + ") and copy the cache, or pass --model a local directory holding config.json, "
           "model.safetensors and tokenizer.json")
    if hub_offline():
        raise GeomjaxError(f"model {where} (HF_HUB_OFFLINE is set); {fix}")
    try:
        from huggingface_hub import snapshot_download  # optional network path, imported when used

        d = snapshot_download(repo_id, revision=revision, cache_dir=str(hf_cache_dir()),
                              allow_patterns=_HUB_FILES)
    except Exception as e:  # connection errors, unknown repos, gated models: all one user-facing error
        raise GeomjaxError(f"model {where} ({type(e).__name__}: {str(e).splitlines()[0][:160]}); {fix}") from None
    return _resolve_snapshot_dir(Path(d))


def _resolve_snapshot_dir(snap: Path) -> Path:
    if not (snap / "config.json").is_file():
        raise FileNotFoundError(
            f"snapshot {snap} has no config.json; the cached download is incomplete: re-download it"
        )
    return snap


def read_config(directory: str | os.PathLike) -> dict:
    """Read ``config.json`` of a checkpoint directory into a dict.

    Raises:
      FileNotFoundError: no config.json.
      ValueError: config.json is not a JSON object.
    """
    f = Path(directory) / "config.json"
    if not f.is_file():
        raise FileNotFoundError(f"{f} is missing; every checkpoint directory needs its config.json")
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{f} is not valid JSON ({e}); restore it from the original checkpoint") from e
    if not isinstance(cfg, dict):
        raise ValueError(f"{f} must hold a JSON object, got {type(cfg).__name__}")
    return cfg


def _header_dtypes(f: Path) -> set[str]:
    """The dtype names in a safetensors header (empty set if the header cannot be read)."""
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if not 2 <= n <= 100_000_000:
                return set()
            head = json.loads(fh.read(n))
        return {v["dtype"] for k, v in head.items() if k != "__metadata__" and isinstance(v, dict)}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _dtype_kinds() -> dict[str, type]:
    import ml_dtypes  # installed with jax

    return {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
            "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _read_header(f: Path) -> tuple[int, dict]:
    """(header length n, the JSON header without ``__metadata__``) of a safetensors file."""
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if not 2 <= n <= 100_000_000:
            raise ValueError(f"header length {n} is out of range")
        head = json.loads(fh.read(n))
    head.pop("__metadata__", None)
    return n, head


def _read_one(raw: np.ndarray, n: int, name: str, v: dict) -> np.ndarray:
    """One tensor ``name`` with header entry ``v`` from the mapped file ``raw`` (only its bytes are read)."""
    kinds = _dtype_kinds()
    if v["dtype"] not in kinds:
        raise ValueError(f"dtype {v['dtype']} of tensor {name} is not supported")
    a, b = v["data_offsets"]
    dt = np.dtype(kinds[v["dtype"]]).newbyteorder("<")
    buf = np.asarray(raw[8 + n + a: 8 + n + b])
    return np.frombuffer(buf.tobytes(), dtype=dt).reshape(v["shape"]).astype(dt.newbyteorder("="))


def _load_bf16_file(f: Path) -> dict[str, np.ndarray]:
    """Read a safetensors file holding bfloat16 tensors (which ``safetensors.numpy`` cannot) with
    ``ml_dtypes.bfloat16`` NumPy arrays; layout per the safetensors spec (u64 header length, JSON
    header of dtype/shape/data_offsets, then the little-endian data)."""
    n, head = _read_header(f)
    raw = np.memmap(f, dtype=np.uint8, mode="r")
    return {name: _read_one(raw, n, name, v) for name, v in head.items()}


class ShardedTensors(Mapping):
    """The tensors of a sharded checkpoint (``model.safetensors.index.json``), read one at a time.

    Building it reads the index and every shard's header (names, dtypes, shapes), never the data, and
    checks them against each other; looking a tensor up reads only that tensor's bytes (memory-mapped)
    and checks it is finite. :func:`geomjax.convert.load_pretrained` converts and places each tensor as
    it is read, so a checkpoint larger than host memory loads onto devices that hold it.

    Attributes:
      dtypes: {tensor name: NumPy dtype} from the headers.
    """

    def __init__(self, index: Path):
        weight_map = _read_index(index)
        self._where: dict[str, tuple[Path, int, dict]] = {}
        kinds = _dtype_kinds()
        for shard, names in sorted(_by_shard(index, weight_map).items()):
            f = index.parent / shard
            try:
                n, head = _read_header(f)
            except (OSError, ValueError) as e:
                raise ValueError(f"cannot read {f} as safetensors: {e}. The file is corrupted or truncated; "
                                 f"{_SAVE_HINT}") from e
            _check_shard(f, index, names, set(head))
            self._where.update({name: (f, n, head[name]) for name in names})
        self.dtypes = {k: np.dtype(kinds.get(v[2]["dtype"], np.uint8)) for k, v in self._where.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        f, n, entry = self._where[name]
        arr = _read_one(np.memmap(f, dtype=np.uint8, mode="r"), n, name, entry)
        if _is_float_array(arr) and not np.all(np.isfinite(arr)):
            raise ValueError(f"{f}: tensor {name} has NaN/Inf values; the checkpoint is corrupted: {_SAVE_HINT}")
        return arr

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _is_float_array(v: np.ndarray) -> bool:
    return np.issubdtype(v.dtype, np.floating) or v.dtype.name == "bfloat16"


def _load_safetensors_file(f: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not f.is_file():
        raise FileNotFoundError(f"weight file {f} is missing; {_SAVE_HINT}")
    try:
        if "BF16" in _header_dtypes(f):
            return _load_bf16_file(f)
        return load_file(str(f))
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError, KeyError) as e:
        size = f.stat().st_size
        raise ValueError(
            f"cannot read {f} ({size} bytes) as safetensors: {e}. The file is corrupted or "
            f"truncated, or holds a dtype NumPy cannot represent (bfloat16); {_SAVE_HINT}"
        ) from e


def load_tensors(directory: str | os.PathLike) -> dict[str, Shaped[np.ndarray, "..."]]:
    """Read every tensor of a checkpoint directory (single file or sharded index) as NumPy arrays.

    Args:
      directory: directory with ``model.safetensors`` or ``model.safetensors.index.json``.

    Returns:
      dict from Hugging Face tensor name to ``np.ndarray``.

    Raises:
      FileNotFoundError: no safetensors weights (e.g. only ``pytorch_model.bin``), or a shard
        named by the index is missing.
      ValueError: corrupted file, index inconsistent with its shards, or non-finite values.
    """
    d = Path(directory)
    single, index = d / SAFETENSORS_NAME, d / SAFETENSORS_INDEX
    if single.exists():
        tensors = _load_safetensors_file(single)
    elif index.exists():
        tensors = _load_sharded(index)
    else:
        others = sorted(p.name for p in d.glob("*.bin")) + sorted(p.name for p in d.glob("*.h5"))
        extra = (
            f" Found {', '.join(others)}: geomjax reads safetensors only; convert with "
            "`transformers` (`AutoModel.from_pretrained(dir).save_pretrained(dir)`)."
            if others
            else ""
        )
        raise FileNotFoundError(
            f"no {SAFETENSORS_NAME} or {SAFETENSORS_INDEX} in {d}.{extra} {_SAVE_HINT}"
        )
    bad = [k for k, v in tensors.items() if _is_float_array(v) and not np.all(np.isfinite(v))]
    if bad:
        raise ValueError(
            f"{d}: tensors with NaN/Inf values: {', '.join(sorted(bad)[:10])}"
            f"{' ...' if len(bad) > 10 else ''}; the checkpoint is corrupted: {_SAVE_HINT}"
        )
    return tensors


def _read_index(index: Path) -> dict:
    try:
        meta = json.loads(index.read_text(encoding="utf-8"))
        weight_map = meta["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{index} is not a valid safetensors index (needs a 'weight_map' object): {e}; {_SAVE_HINT}"
        ) from e
    return weight_map


def _by_shard(index: Path, weight_map: dict) -> dict[str, set[str]]:
    """{shard file: tensor names} of an index; raises when a shard is missing."""
    by_shard: dict[str, set[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, set()).add(name)
    missing = [s for s in by_shard if not (index.parent / s).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{index} names shard(s) missing from {index.parent}: {', '.join(sorted(missing))}; "
            f"copy every shard, or {_SAVE_HINT}"
        )
    return by_shard


def _check_shard(f: Path, index: Path, names: set[str], found: set[str]) -> None:
    if found != names:
        raise ValueError(
            f"shard {f} disagrees with {index.name}: missing {sorted(names - found)[:10]}, not in index "
            f"{sorted(found - names)[:10]}; the checkpoint is inconsistent: {_SAVE_HINT}"
        )


def _load_sharded(index: Path) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {}
    for shard, names in sorted(_by_shard(index, _read_index(index)).items()):
        part = _load_safetensors_file(index.parent / shard)
        _check_shard(index.parent / shard, index, names, set(part))
        tensors.update(part)
    return tensors
