"""Offline text corpora as documents ``[(name, text), ...]`` and their tokenization.

Sources (docs/DESIGN.md, "Data"; provenance and licences in DATA.md):

* tiny Shakespeare (``tinyshakespeare/input.txt``, shipped in the package; one document),
* WikiText-2 ``valid`` / ``test`` (``wikitext-2/*.txt``, shipped in the package: the tokenized
  release, ``<unk>`` kept), split into articles on the top-level ``" = Title = "`` headings,
* ``stdlib``: a fixed snapshot of CPython 3.11.7's standard library source (a code corpus, one
  document per file; shipped in the package, ``stdlib/cpython-3.11.7-lib.json``), the same text on
  every interpreter; ``stdlib-live``: the running interpreter's own standard library (changes with
  the Python version),
* ``pydoc_data.topics`` of the running interpreter (English prose; one document per help topic),
* any local text file or directory, and Hugging Face ``datasets`` when installed and online.

Everything is host-side I/O (not jittable) and deterministic: files are read in sorted order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import lzma
import json
import os
import platform
import re
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from geomjax.errors import GeomjaxError

__all__ = [
    "Document",
    "TokenizedCorpus",
    "hf_dataset",
    "join_records",
    "load_corpus",
    "local_text",
    "pydoc_topics",
    "BUNDLED_FILES",
    "corpus_kind",
    "corpus_source",
    "data_dir_override",
    "read_bundled_file",
    "read_data_file",
    "split_text",
    "stdlib_python",
    "stdlib_snapshot",
    "tiny_shakespeare",
    "tokenize_documents",
    "as_token_array",
    "wikitext2",
    "wikitext2_articles",
]

Document = tuple[str, str]
"""A document: ``(name, text)``."""

_INT32_MAX = int(np.iinfo(np.int32).max)


STDLIB_SNAPSHOT = "stdlib/cpython-3.11.7-lib.json"
"""The ``stdlib`` corpus: every 8th file of CPython 3.11.7's ``Lib/`` (scripts/make_stdlib_snapshot.py; DATA.md)."""

# The offline corpora shipped inside the package (geomjax/data/files/, xz-compressed; DATA.md
# gives their provenance and licences): relative name -> SHA-256 of the uncompressed text.
BUNDLED_FILES: dict[str, str] = {
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    "wikitext-2/valid.txt": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/test.txt": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    STDLIB_SNAPSHOT: "0d5dd278e6ba68863dc97230b875ea8c5d0373b31bb1d166f6aae7f82c0dc5e3",
}
_BUNDLED_ROOT = Path(__file__).resolve().parent / "files"


def data_dir_override(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The folder that replaces the bundled corpora, if the user named one.

    Search order: the ``data_dir`` argument (CLI ``--data-dir``), then the environment variable
    ``GEOMJAX_DATA``. Either must be an existing folder laid out like the bundled one
    (``tinyshakespeare/input.txt``, ``wikitext-2/{valid,test,train}.txt``; ``.txt.xz`` also read).

    Returns:
      The folder as a ``Path``, or ``None`` (use the corpora shipped in the package).

    Raises:
      GeomjaxError: the named folder does not exist.
    """
    for value, origin in ((data_dir, "--data-dir"), (os.environ.get("GEOMJAX_DATA") or None, "GEOMJAX_DATA")):
        if value is None:
            continue
        p = Path(value).expanduser()
        if not p.is_dir():
            raise GeomjaxError(
                f"data folder {str(p)!r} ({origin}) does not exist; pass a folder holding "
                "tinyshakespeare/input.txt and/or wikitext-2/*.txt, or leave it unset to use the "
                "corpora shipped with geomjax")
        return p
    return None


def read_data_file(name: str, data_dir: str | os.PathLike | None = None) -> str:
    """Text of one offline corpus file, e.g. ``"wikitext-2/valid.txt"``.

    Read from the override folder (:func:`data_dir_override`: ``NAME`` or ``NAME.xz``) when one is
    given, else from the xz-compressed copy shipped in the package (checked against its SHA-256).

    Raises:
      GeomjaxError: the file is missing, corrupted, or not UTF-8 (the message names the fix).
    """
    folder = data_dir_override(data_dir)
    if folder is not None:
        plain, packed = folder / name, folder / (name + ".xz")
        if not (plain.is_file() or packed.is_file()):
            raise GeomjaxError(
                f"{name} is not in the data folder {str(folder)!r} (--data-dir / GEOMJAX_DATA); "
                f"add it there or unset the override to use the copy shipped with geomjax")
        return _read_text(plain if plain.is_file() else packed)
    return read_bundled_file(name)


def read_bundled_file(name: str) -> str:
    """Text of one corpus file shipped in the package (``BUNDLED_FILES``), checked against its SHA-256.

    Raises:
      GeomjaxError: the name is not shipped, or the file is missing, corrupted or not UTF-8.
    """
    if name not in BUNDLED_FILES:
        raise GeomjaxError(
            f"{name} is not shipped with geomjax (shipped: {', '.join(sorted(BUNDLED_FILES))}); "
            "put it in a folder and pass --data-dir (or set GEOMJAX_DATA)")
    path = _BUNDLED_ROOT / (name + ".xz")
    if not path.is_file():
        raise GeomjaxError(f"the bundled corpus {str(path)!r} is missing: the geomjax installation "
                           "is incomplete; reinstall it (pip install .)")
    data = _read_bytes(path)
    if hashlib.sha256(data).hexdigest() != BUNDLED_FILES[name]:
        raise GeomjaxError(f"the bundled corpus {str(path)!r} is corrupted (SHA-256 mismatch); "
                           "reinstall geomjax")
    return _decode(data, path)


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return lzma.decompress(raw) if path.suffix == ".xz" else raw
    except FileNotFoundError:
        raise GeomjaxError(f"corpus file {str(path)!r} is missing; check the path") from None
    except lzma.LZMAError as e:
        raise GeomjaxError(f"corpus file {str(path)!r} is not valid xz data ({e}); "
                           "replace it with an intact copy") from None


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GeomjaxError(f"corpus file {str(path)!r} is not valid UTF-8 ({e}); re-encode it as UTF-8") from None


def _read_text(path: Path) -> str:
    return _decode(_read_bytes(path), path)


def _nonempty(docs: list[Document], what: str) -> list[Document]:
    if not docs:
        raise GeomjaxError(f"{what}: no documents found (empty corpus)")
    return docs


def tiny_shakespeare(data_dir: str | os.PathLike | None = None, *, split: str = "none") -> list[Document]:
    """Load tiny Shakespeare (Karpathy's ``input.txt``, 1,115,394 characters).

    Args:
      data_dir: folder overriding the bundled copy (see :func:`data_dir_override`).
      split: ``"none"``: one document ``("tinyshakespeare", text)``; ``"train"`` / ``"val"``: the
        first 90% / last 10% of the characters (NanoGPT's ``shakespeare_char`` split).

    Returns:
      A list with one document.
    """
    text = read_data_file("tinyshakespeare/input.txt", data_dir)
    if split == "none":
        return [("tinyshakespeare", text)]
    n = int(len(text) * 0.9)
    if split == "train":
        return [("tinyshakespeare/train", text[:n])]
    if split == "val":
        return [("tinyshakespeare/val", text[n:])]
    raise GeomjaxError(f"tiny_shakespeare: split must be 'none', 'train' or 'val', got {split!r}")


_WT_TITLE = re.compile(r"^ = ([^=].*?) = $")


def wikitext2_articles(text: str) -> list[Document]:
    """Split WikiText text into articles on its top-level ``" = Title = "`` heading lines.

    Sub-headings (``" = = Section = = "``) stay inside their article; ``<unk>`` is kept. Text before
    the first heading, if any, is dropped only when it is blank (otherwise it becomes a document
    named ``"(preamble)"``). Article text excludes the heading line and is stripped of surrounding
    blank lines.

    Args:
      text: raw WikiText-2/103 text (one paragraph per line).

    Returns:
      ``[(title, article_text), ...]`` in file order.
    """
    docs: list[Document] = []
    title, lines = "(preamble)", []

    def flush():
        body = "\n".join(lines).strip("\n")
        if body.strip():
            docs.append((title, body))

    for line in text.split("\n"):
        m = _WT_TITLE.match(line)
        if m:
            flush()
            title, lines = m.group(1), []
        else:
            lines.append(line)
    flush()
    return docs


def wikitext2(split: str = "valid", data_dir: str | os.PathLike | None = None) -> list[Document]:
    """Load WikiText-2 (``valid`` or ``test``; tokenized, ``<unk>`` kept) as articles.

    Args:
      split: ``"valid"`` or ``"test"`` (shipped with geomjax); ``"train"`` only from a data folder.
      data_dir: folder overriding the bundled copy (see :func:`data_dir_override`).

    Returns:
      ``[(title, article_text), ...]`` (valid: 60 articles, test: 62).
    """
    if split not in ("valid", "test", "train"):
        raise GeomjaxError(f"wikitext2: split must be 'valid' or 'test', got {split!r}")
    text = read_data_file(f"wikitext-2/{split}.txt", data_dir)
    return _nonempty(wikitext2_articles(text), f"wikitext2({split!r})")


def stdlib_python(
    root: str | os.PathLike | None = None,
    *,
    max_files: int | None = None,
    exclude: Sequence[str] = ("site-packages", "dist-packages", "__pycache__", "test", "tests", "idlelib",
                              "lib2to3", "turtledemo"),
    min_chars: int = 1,
) -> list[Document]:
    """Load the Python standard library's own ``.py`` files as a code corpus (one file, one document).

    Args:
      root: folder to scan (default ``sysconfig.get_paths()["stdlib"]``).
      max_files: keep the first ``max_files`` files in sorted path order (None: all).
      exclude: directory names skipped anywhere in the tree (third-party packages, test suites).
      min_chars: skip files shorter than this (e.g. empty ``__init__.py``).

    Returns:
      ``[(relative_path, source), ...]`` sorted by path. Files that are not UTF-8 are skipped.
    """
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    if not base.is_dir():
        raise GeomjaxError(f"stdlib_python: {str(base)!r} is not a directory")
    skip = set(exclude)
    paths = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        paths.extend(Path(dirpath) / f for f in filenames if f.endswith(".py"))
    paths.sort()
    docs: list[Document] = []
    for p in paths:
        if max_files is not None and len(docs) >= max_files:
            break
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if len(text) >= min_chars:
            docs.append((str(p.relative_to(base)), text))
    return _nonempty(docs, f"stdlib_python({str(base)!r})")


def stdlib_snapshot() -> list[Document]:
    """Load the ``stdlib`` corpus: the shipped snapshot of CPython 3.11.7's standard library source.

    The snapshot (``STDLIB_SNAPSHOT``, checked against its SHA-256 in ``BUNDLED_FILES``) holds every
    8th file, in sorted path order, of what :func:`stdlib_python` reads from CPython 3.11.7's ``Lib/``
    (73 files, 1.3 MB of source; written by scripts/make_stdlib_snapshot.py; PSF licence, DATA.md).
    It is the same on every interpreter, so Table 2's out-of-distribution rows do not change with
    the Python version. The ``--data-dir`` override does not apply to it.

    Returns:
      ``[(relative_path, source), ...]`` sorted by path (e.g. ``("asyncio/base_events.py", ...)``).

    Raises:
      GeomjaxError: the snapshot is missing, corrupted, or not the expected layout.
    """
    text = read_bundled_file(STDLIB_SNAPSHOT)
    try:
        files = json.loads(text)["files"]
        docs = [(str(name), str(src)) for name, src in files]
    except (ValueError, KeyError, TypeError) as e:
        raise GeomjaxError(f"the bundled corpus {STDLIB_SNAPSHOT!r} is not a snapshot file ({e}); "
                           "reinstall geomjax") from None
    return _nonempty(docs, "stdlib_snapshot()")


def pydoc_topics() -> list[Document]:
    """Load ``pydoc_data.topics.topics`` (Python's help topics, English prose), one document each.

    Returns:
      ``[(topic, text), ...]`` sorted by topic name.
    """
    from pydoc_data.topics import topics

    return _nonempty(sorted((k, v) for k, v in topics.items() if v.strip()), "pydoc_topics")


def local_text(
    path: str | os.PathLike, *, suffixes: Sequence[str] | None = (".txt", ".md", ".py", ".rst")
) -> list[Document]:
    """Load a local text file (one document) or every matching file under a directory.

    Args:
      path: a file, or a directory scanned recursively in sorted order.
      suffixes: file suffixes kept when scanning a directory (None: every file).

    Returns:
      ``[(name, text), ...]``; names are paths relative to a directory argument.

    Raises:
      GeomjaxError: the path does not exist, a file is not UTF-8, or nothing was found.
    """
    p = Path(path).expanduser()
    if p.is_file():
        text = _read_text(p)
        return _nonempty([(p.name, text)] if text else [], f"local_text({str(p)!r})")
    if not p.is_dir():
        raise GeomjaxError(f"local_text: {str(p)!r} is neither a file nor a directory")
    files = sorted(f for f in p.rglob("*") if f.is_file() and (suffixes is None or f.suffix in suffixes))
    docs = [(str(f.relative_to(p)), t) for f in files if (t := _read_text(f))]
    return _nonempty(docs, f"local_text({str(p)!r}) with suffixes {suffixes}")


_WIKITEXT_NAMES = ("wikitext", "salesforce/wikitext")


def join_records(records: Sequence[str], name: str, *, join: str = "records",
                 join_lines: int | None = None) -> list[Document]:
    """Group a dataset's text records (lines, paragraphs) into documents by their own boundaries.

    Args:
      records: the text field of every record, in dataset order.
      name: prefix of the documents' names.
      join: ``"records"``: one record, one document; ``"headings"``: the records joined and split on
        WikiText's top-level ``" = Title = "`` heading lines (:func:`wikitext2_articles`; WikiText-103's
        28,475 training articles instead of 1.8 M lines).
      join_lines: N >= 1: every N consecutive records (newline-joined) form one document named
        ``"{name}[i:i+N]"``; overrides ``join``.

    Returns:
      ``[(name, text), ...]`` without blank documents.

    Raises:
      GeomjaxError: an unknown ``join`` or ``join_lines < 1``.
    """
    if join_lines is not None:
        n = int(join_lines)
        if n < 1:
            raise GeomjaxError(f"--join-lines must be >= 1, got {join_lines}")
        docs = [(f"{name}[{i}:{i + n}]", "\n".join(r.rstrip("\n") for r in records[i:i + n]))
                for i in range(0, len(records), n)]
        return [(k, t) for k, t in docs if t.strip()]
    if join == "headings":
        text = "".join(r if r.endswith("\n") else r + "\n" for r in records)
        return [(f"{name}/{title}", body) for title, body in wikitext2_articles(text)]
    if join != "records":
        raise GeomjaxError(f"join must be 'records' or 'headings', got {join!r}")
    return [(f"{name}/{i}", t) for i, t in enumerate(records) if t and t.strip()]


def hf_dataset(
    name: str,
    config: str | None = None,
    *,
    split: str = "train",
    text_field: str = "text",
    max_docs: int | None = None,
    join: str = "auto",
    join_lines: int | None = None,
) -> list[Document]:
    """Load a Hugging Face ``datasets`` split as documents (needs ``datasets`` and a network/cache).

    Records are grouped into documents by :func:`join_records`: ``join="auto"`` splits WikiText
    (``wikitext``, ``Salesforce/wikitext``: one record per line) into its articles on their
    ``" = Title = "`` headings, and makes every record of any other dataset one document;
    ``join_lines=N`` joins every N consecutive records instead. Song & Zhong's paper-size study (100
    documents of >= 32,768 tokens) needs such long documents. Documents are named
    ``"{name}/{split}/..."``.

    Raises:
      GeomjaxError: ``datasets`` is not installed (``pip install datasets``), or loading failed
        (offline, unknown name, missing field).
    """
    try:
        import datasets  # noqa: PLC0415
    except ImportError:
        raise GeomjaxError(
            "hf_dataset needs the `datasets` package (pip install datasets) and a network or a "
            "local Hugging Face cache; offline, use a local folder of long documents (--corpus DIR, one "
            "document per file) or load_corpus('wikitext2'|'shakespeare'|'stdlib'|'pydoc')"
        ) from None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # network, cache or name errors of `datasets`: the user's to fix
        raise GeomjaxError(f"hf_dataset: could not load {name!r} (config {config!r}, split {split!r}): "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; it needs a "
                           "network or a local Hugging Face cache, else pass a local folder") from e
    if text_field not in ds.column_names:
        raise GeomjaxError(f"hf_dataset: field {text_field!r} not in {ds.column_names}; pass text_field=")
    if join == "auto":
        join = "headings" if name.lower() in _WIKITEXT_NAMES else "records"
    docs = join_records(list(ds[text_field]), f"{name}/{split}", join=join, join_lines=join_lines)
    return _nonempty(docs[:max_docs] if max_docs is not None else docs, f"hf_dataset({name!r})")


def split_text(name: str, text: str, n_chars: int) -> list[Document]:
    """Cut one long text into consecutive documents of ``n_chars`` characters (last one shorter).

    Useful to give a single-document corpus (tiny Shakespeare) several labelled "documents".
    """
    if n_chars < 1:
        raise GeomjaxError(f"split_text: n_chars must be >= 1, got {n_chars}")
    return [(f"{name}[{i}:{i + n_chars}]", text[i : i + n_chars]) for i in range(0, len(text), n_chars)]


_CORPUS_ALIASES = {
    "shakespeare": "shakespeare", "tinyshakespeare": "shakespeare", "tiny_shakespeare": "shakespeare",
    "wikitext2": "wikitext2-valid", "wikitext-2": "wikitext2-valid", "wikitext2-valid": "wikitext2-valid",
    "wikitext2-test": "wikitext2-test",
    "stdlib": "stdlib", "code": "stdlib", "python": "stdlib", "stdlib-live": "stdlib-live",
    "pydoc": "pydoc", "pydoc_topics": "pydoc", "topics": "pydoc",
}


def corpus_kind(name: str) -> str:
    """Which loader a corpus name selects, without loading anything (cheap validation).

    Returns:
      ``"shakespeare"``, ``"wikitext2-valid"``, ``"wikitext2-test"``, ``"stdlib"``, ``"stdlib-live"``,
      ``"pydoc"``, ``"hf"`` or ``"path"``.

    Raises:
      GeomjaxError: the name is neither a known corpus, ``hf:...``, nor an existing path.
    """
    key = str(name).lower()
    if key in _CORPUS_ALIASES:
        return _CORPUS_ALIASES[key]
    if key.startswith("hf:"):
        if not name[3:].split(":")[0]:
            raise GeomjaxError(f"corpus {name!r}: give a dataset name after 'hf:' (hf:NAME[:CONFIG[:SPLIT]])")
        return "hf"
    p = Path(name).expanduser()
    if p.exists():
        return "path"
    if str(name).startswith((".", "/", "~")) or "/" in str(name) or "\\" in str(name) or p.suffix:
        raise GeomjaxError(f"corpus path {str(name)!r} does not exist; pass an existing text file or directory")
    raise GeomjaxError(
        f"unknown corpus {name!r}: use wikitext2 | shakespeare | stdlib | pydoc, hf:NAME[:CONFIG[:SPLIT]], or a "
        "text file or directory"
    )


def load_corpus(name: str, data_dir: str | os.PathLike | None = None, **kwargs) -> list[Document]:
    """Load a corpus by name: the single entry point used by the CLI and experiments.

    Names: ``"shakespeare"`` (alias ``"tinyshakespeare"``), ``"wikitext2"`` (valid split; also
    ``"wikitext2-valid"``, ``"wikitext2-test"``), ``"stdlib"`` (alias ``"code"``: the shipped
    snapshot, :func:`stdlib_snapshot`), ``"stdlib-live"`` (the running interpreter's standard library,
    :func:`stdlib_python`), ``"pydoc"``,
    ``"hf:NAME[:CONFIG[:SPLIT]]"`` (Hugging Face datasets), or a path to a local file/directory
    (see :func:`corpus_kind`).

    Args:
      name: corpus name or path.
      data_dir: folder overriding the bundled shakespeare/wikitext2 (see :func:`data_dir_override`).
      **kwargs: passed to the specific loader.

    Returns:
      ``[(name, text), ...]``.
    """
    kind = corpus_kind(name)
    if kind == "shakespeare":
        return tiny_shakespeare(data_dir, **kwargs)
    if kind.startswith("wikitext2"):
        return wikitext2(kind.split("-")[1], data_dir, **kwargs)
    if kind == "stdlib":
        return stdlib_snapshot(**kwargs)
    if kind == "stdlib-live":
        return stdlib_python(**kwargs)
    if kind == "pydoc":
        return pydoc_topics(**kwargs)
    if kind == "hf":
        parts = name[3:].split(":")
        return hf_dataset(parts[0], parts[1] if len(parts) > 1 and parts[1] else None,
                          split=parts[2] if len(parts) > 2 else "train", **kwargs)
    return local_text(name, **kwargs)


_BUNDLED_OF_KIND = {"shakespeare": "tinyshakespeare/input.txt", "wikitext2-valid": "wikitext-2/valid.txt",
                    "wikitext2-test": "wikitext-2/test.txt", "stdlib": STDLIB_SNAPSHOT}


def corpus_source(name: str, data_dir: str | os.PathLike | None = None) -> str:
    """Which text a corpus name reads, in one line (metrics.json and the report record it; nothing is loaded).

    A shipped corpus is named with the first 12 hex digits of its SHA-256 (``BUNDLED_FILES``); the
    corpora read from the running interpreter (``stdlib-live``, ``pydoc``) name its Python version,
    since their text changes with it.

    Raises:
      GeomjaxError: as :func:`corpus_kind`.
    """
    kind = corpus_kind(name)
    version = platform.python_version()
    if kind in _BUNDLED_OF_KIND:
        file = _BUNDLED_OF_KIND[kind]
        folder = data_dir_override(data_dir) if kind != "stdlib" else None
        if folder is not None:
            return f"{file} from the data folder {str(folder)!r}"
        return f"{file} shipped with geomjax (sha256 {BUNDLED_FILES[file][:12]})"
    if kind == "stdlib-live":
        return f"the running interpreter's standard library (Python {version}; changes with the version)"
    if kind == "pydoc":
        return f"pydoc_data.topics of the running interpreter (Python {version}; changes with the version)"
    return f"Hugging Face dataset {name[3:]}" if kind == "hf" else f"local text {name}"


@dataclasses.dataclass(frozen=True)
class TokenizedCorpus:
    """Documents after tokenization: names and one 1-D int32 id array per document.

    Attributes:
      names: document names (label ``j`` refers to ``names[j]``).
      ids: tuple of (n_j,) int32 arrays.
    """

    names: tuple[str, ...]
    ids: tuple[np.ndarray, ...]

    def __post_init__(self):
        if len(self.names) != len(self.ids):
            raise ValueError(f"TokenizedCorpus: {len(self.names)} names but {len(self.ids)} id arrays")

    @property
    def lengths(self) -> np.ndarray:
        """(D,) int64 token counts."""
        return np.array([len(x) for x in self.ids], dtype=np.int64)

    @property
    def n_tokens(self) -> int:
        """Total number of tokens."""
        return int(self.lengths.sum())

    def __len__(self) -> int:
        return len(self.ids)


def as_token_array(ids, what: str = "token ids") -> np.ndarray:
    """Check a 1-D integer id sequence and return it as int32 without wrapping.

    Raises:
      ValueError: not 1-D, not integer, negative, or larger than the int32 maximum.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int32)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what}: token ids must be integers, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > _INT32_MAX:
        raise ValueError(
            f"{what}: token ids must lie in [0, {_INT32_MAX}] (int32), got min {lo}, max {hi}; "
            "check the tokenizer (ids are never wrapped or clipped)"
        )
    return arr.astype(np.int32, copy=False)


_ENCODE_CHUNK = 64  # documents per encode_batch call (bounds the memory of the Rust encodings)


def _tokens_key(docs: Sequence[Document], fingerprint: str) -> str:
    """sha256 of a tokenizer's fingerprint and every document's name and text (length-prefixed)."""
    h = hashlib.sha256(fingerprint.encode())
    for name, text in docs:
        for part in (name, text):
            b = part.encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


def _cached_tokens(path: Path, n_docs: int) -> list[np.ndarray] | None:
    """The id arrays stored at ``path`` (one .npz: concatenated int32 ids and lengths), or None if absent
    or unreadable (then they are recomputed and rewritten)."""
    try:
        with np.load(path) as z:
            ids, lengths = z["ids"], z["lengths"]
    except (OSError, ValueError, KeyError, EOFError):
        return None
    if ids.dtype != np.int32 or lengths.shape != (n_docs,) or int(lengths.sum()) != ids.size:
        return None
    return np.split(ids, np.cumsum(lengths)[:-1])


def _store_tokens(path: Path, ids: Sequence[np.ndarray]) -> None:
    """Write the id arrays atomically (a temporary file renamed); an unwritable cache is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, ids=np.concatenate(ids) if ids else np.zeros(0, np.int32),
                     lengths=np.array([len(a) for a in ids], np.int64))
        os.replace(tmp, path)
    except OSError:
        pass


def tokenize_documents(
    docs: Iterable[Document], tokenize: Callable[[str], Sequence[int] | np.ndarray], *,
    cache: str | os.PathLike | None = None,
) -> TokenizedCorpus:
    """Tokenize every document with ``tokenize(text) -> ids``; ids are checked and kept as int32.

    Any tokenizer plugs in (GPT-2 BPE, BERT WordPiece, :class:`~geomjax.data.CharTokenizer`); one with an
    ``encode_batch`` (``geomjax.convert.tokenizers.TextTokenizer``) encodes chunks of documents on the Rust
    tokenizer's threads (the same ids as one ``tokenize`` call per document). No BOS/[CLS] is
    inserted (the Song & Zhong code inserts none). Ids are never wrapped (the source code stored
    them as uint16, which corrupts ids above 65535).

    Args:
      docs: ``[(name, text), ...]``.
      tokenize: callable mapping a string to a 1-D sequence of non-negative integer ids.
      cache: a folder (e.g. ``geomjax.base.io.cache_root() / "tokens"``) where the ids are kept, keyed by the sha256 of
        the tokenizer's ``fingerprint`` and every document's name and text; used only when ``tokenize``
        has a ``fingerprint`` (a ``TextTokenizer``). A hit returns the same ids without tokenizing (the
        demo's standard-library corpus: seconds of tokenization per run).

    Returns:
      :class:`TokenizedCorpus` with the same document order.
    """
    docs = list(docs)
    names = [name for name, _ in docs]
    fingerprint = getattr(tokenize, "fingerprint", None) if cache is not None else None
    if fingerprint is not None and names:
        path = Path(cache) / f"{_tokens_key(docs, fingerprint)}.npz"
        hit = _cached_tokens(path, len(docs))
        if hit is not None:
            return TokenizedCorpus(tuple(names), tuple(hit))
        corpus = tokenize_documents(docs, tokenize)
        _store_tokens(path, corpus.ids)
        return corpus
    batch = getattr(tokenize, "encode_batch", None)  # a TextTokenizer: the Rust tokenizer's threads
    if batch is not None:
        raw = [a for k in range(0, len(docs), _ENCODE_CHUNK)
               for a in batch([text for _, text in docs[k: k + _ENCODE_CHUNK]])]
    else:
        raw = [tokenize(text) for _, text in docs]
    ids = [as_token_array(r, what=f"tokenize({name!r})") for name, r in zip(names, raw)]
    if not names:
        raise ValueError("tokenize_documents: no documents given (empty corpus)")
    return TokenizedCorpus(tuple(names), tuple(ids))
