"""Offline text corpora as documents ``[(name, text), ...]`` and their tokenization.

Sources (DESIGN.md, "Offline resources"):

* tiny Shakespeare (``tinyshakespeare/input.txt``; one document, or one per play-like block),
* WikiText-2 ``valid`` / ``test`` (``wikitext-2/*.txt``, already tokenized, ``<unk>`` kept), split
  into articles on the top-level ``" = Title = "`` headings,
* the Python standard library's own source files (a code corpus; one document per file),
* ``pydoc_data.topics`` (English prose; one document per help topic),
* any local text file or directory, and Hugging Face ``datasets`` when installed and online.

Everything is host-side I/O (not jittable) and deterministic: files are read in sorted order.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "Document",
    "TokenizedCorpus",
    "hf_dataset",
    "load_corpus",
    "local_text",
    "pydoc_topics",
    "shared_data_dir",
    "split_text",
    "stdlib_python",
    "tiny_shakespeare",
    "tokenize_documents",
    "as_token_array",
    "wikitext2",
    "wikitext2_articles",
]

Document = tuple[str, str]
"""A document: ``(name, text)``."""

_INT32_MAX = int(np.iinfo(np.int32).max)


def shared_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Locate the offline data folder holding ``tinyshakespeare/`` and ``wikitext-2/``.

    Search order: the ``data_dir`` argument, the environment variable ``GEOMJAX_DATA``, then
    ``../shared/data`` relative to the repository root (the folder above ``geomjax/``) and relative
    to the current working directory.

    Args:
      data_dir: explicit folder (checked, not searched).

    Returns:
      The existing folder as a ``Path``.

    Raises:
      FileNotFoundError: no candidate exists; the message lists the places tried and the fix.
    """
    if data_dir is not None:
        p = Path(data_dir).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(
                f"data folder {str(p)!r} does not exist; pass the folder that holds "
                "tinyshakespeare/ and wikitext-2/ (or set GEOMJAX_DATA)"
            )
        return p
    tried = []
    env = os.environ.get("GEOMJAX_DATA")
    if env:
        p = Path(env).expanduser()
        if p.is_dir():
            return p
        tried.append(f"$GEOMJAX_DATA={env}")
    repo = Path(__file__).resolve().parents[2]
    for base in (repo, Path.cwd()):
        p = (base / ".." / "shared" / "data").resolve()
        if p.is_dir():
            return p
        tried.append(str(p))
    raise FileNotFoundError(
        "could not find the offline data folder (tried: " + ", ".join(tried) + "); pass "
        "data_dir=... (CLI: --data-dir) or set the environment variable GEOMJAX_DATA to the folder "
        "that holds tinyshakespeare/input.txt and wikitext-2/{valid,test}.txt"
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"corpus file {str(path)!r} is missing; check the data folder (data_dir / GEOMJAX_DATA)"
        ) from None
    except UnicodeDecodeError as e:
        raise ValueError(f"corpus file {str(path)!r} is not valid UTF-8 ({e}); re-encode it as UTF-8") from None


def _nonempty(docs: list[Document], what: str) -> list[Document]:
    if not docs:
        raise ValueError(f"{what}: no documents found (empty corpus)")
    return docs


def tiny_shakespeare(data_dir: str | os.PathLike | None = None, *, split: str = "none") -> list[Document]:
    """Load tiny Shakespeare (Karpathy's ``input.txt``, 1,115,394 characters).

    Args:
      data_dir: folder holding ``tinyshakespeare/input.txt`` (see :func:`shared_data_dir`).
      split: ``"none"``: one document ``("tinyshakespeare", text)``; ``"train"`` / ``"val"``: the
        first 90% / last 10% of the characters (NanoGPT's ``shakespeare_char`` split).

    Returns:
      A list with one document.
    """
    text = _read_text(shared_data_dir(data_dir) / "tinyshakespeare" / "input.txt")
    if split == "none":
        return [("tinyshakespeare", text)]
    n = int(len(text) * 0.9)
    if split == "train":
        return [("tinyshakespeare/train", text[:n])]
    if split == "val":
        return [("tinyshakespeare/val", text[n:])]
    raise ValueError(f"tiny_shakespeare: split must be 'none', 'train' or 'val', got {split!r}")


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
      split: ``"valid"`` or ``"test"`` (only these ship offline).
      data_dir: folder holding ``wikitext-2/`` (see :func:`shared_data_dir`).

    Returns:
      ``[(title, article_text), ...]`` (valid: 60 articles, test: 62).
    """
    if split not in ("valid", "test", "train"):
        raise ValueError(f"wikitext2: split must be 'valid' or 'test', got {split!r}")
    path = shared_data_dir(data_dir) / "wikitext-2" / f"{split}.txt"
    return _nonempty(wikitext2_articles(_read_text(path)), f"wikitext2({split!r})")


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
        raise FileNotFoundError(f"stdlib_python: {str(base)!r} is not a directory")
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
      FileNotFoundError: the path does not exist. ValueError: a file is not UTF-8, or nothing found.
    """
    p = Path(path).expanduser()
    if p.is_file():
        text = _read_text(p)
        return _nonempty([(p.name, text)] if text else [], f"local_text({str(p)!r})")
    if not p.is_dir():
        raise FileNotFoundError(f"local_text: {str(p)!r} is neither a file nor a directory")
    files = sorted(f for f in p.rglob("*") if f.is_file() and (suffixes is None or f.suffix in suffixes))
    docs = [(str(f.relative_to(p)), t) for f in files if (t := _read_text(f))]
    return _nonempty(docs, f"local_text({str(p)!r}) with suffixes {suffixes}")


def hf_dataset(
    name: str,
    config: str | None = None,
    *,
    split: str = "train",
    text_field: str = "text",
    max_docs: int | None = None,
) -> list[Document]:
    """Load a Hugging Face ``datasets`` split as documents (needs ``datasets`` and a network/cache).

    Each record's ``text_field`` becomes one document named ``"{name}/{split}/{index}"``; empty
    records are skipped.

    Raises:
      ImportError: ``datasets`` is not installed (``pip install datasets``), or loading failed.
    """
    try:
        import datasets  # noqa: PLC0415
    except ImportError:
        raise ImportError(
            "hf_dataset needs the `datasets` package (pip install datasets) and a network or a "
            "local Hugging Face cache; offline, use load_corpus('wikitext2'|'shakespeare'|'stdlib'|'pydoc')"
        ) from None
    ds = datasets.load_dataset(name, config, split=split)
    if text_field not in ds.column_names:
        raise ValueError(f"hf_dataset: field {text_field!r} not in {ds.column_names}; pass text_field=")
    docs: list[Document] = []
    for i, rec in enumerate(ds):
        if max_docs is not None and len(docs) >= max_docs:
            break
        t = rec[text_field]
        if t and t.strip():
            docs.append((f"{name}/{split}/{i}", t))
    return _nonempty(docs, f"hf_dataset({name!r})")


def split_text(name: str, text: str, n_chars: int) -> list[Document]:
    """Cut one long text into consecutive documents of ``n_chars`` characters (last one shorter).

    Useful to give a single-document corpus (tiny Shakespeare) several labelled "documents".
    """
    if n_chars < 1:
        raise ValueError(f"split_text: n_chars must be >= 1, got {n_chars}")
    return [(f"{name}[{i}:{i + n_chars}]", text[i : i + n_chars]) for i in range(0, len(text), n_chars)]


def load_corpus(name: str, data_dir: str | os.PathLike | None = None, **kwargs) -> list[Document]:
    """Load a corpus by name: the single entry point used by the CLI and experiments.

    Names: ``"shakespeare"`` (alias ``"tinyshakespeare"``), ``"wikitext2"`` (valid split; also
    ``"wikitext2-valid"``, ``"wikitext2-test"``), ``"stdlib"`` (alias ``"code"``), ``"pydoc"``,
    ``"hf:NAME[:CONFIG[:SPLIT]]"`` (Hugging Face datasets), or a path to a local file/directory.

    Args:
      name: corpus name or path.
      data_dir: offline data folder for shakespeare/wikitext2 (see :func:`shared_data_dir`).
      **kwargs: passed to the specific loader.

    Returns:
      ``[(name, text), ...]``.
    """
    key = name.lower()
    if key in ("shakespeare", "tinyshakespeare", "tiny_shakespeare"):
        return tiny_shakespeare(data_dir, **kwargs)
    if key in ("wikitext2", "wikitext-2", "wikitext2-valid", "wikitext2-test"):
        return wikitext2("test" if key.endswith("test") else "valid", data_dir, **kwargs)
    if key in ("stdlib", "code", "python"):
        return stdlib_python(**kwargs)
    if key in ("pydoc", "pydoc_topics", "topics"):
        return pydoc_topics(**kwargs)
    if key.startswith("hf:"):
        parts = name[3:].split(":")
        return hf_dataset(parts[0], parts[1] if len(parts) > 1 and parts[1] else None,
                          split=parts[2] if len(parts) > 2 else "train", **kwargs)
    if Path(name).expanduser().exists():
        return local_text(name, **kwargs)
    raise ValueError(
        f"unknown corpus {name!r}: use 'shakespeare', 'wikitext2', 'wikitext2-test', 'stdlib', "
        "'pydoc', 'hf:NAME[:CONFIG[:SPLIT]]', or an existing file/directory path"
    )


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


def tokenize_documents(
    docs: Iterable[Document], tokenize: Callable[[str], Sequence[int] | np.ndarray]
) -> TokenizedCorpus:
    """Tokenize every document with ``tokenize(text) -> ids``; ids are checked and kept as int32.

    Any tokenizer plugs in (GPT-2 BPE, BERT WordPiece, :class:`~geomjax.data.CharTokenizer`); no BOS/[CLS] is
    inserted (the Song & Zhong code inserts none). Ids are never wrapped (the source code stored
    them as uint16, which corrupts ids above 65535).

    Args:
      docs: ``[(name, text), ...]``.
      tokenize: callable mapping a string to a 1-D sequence of non-negative integer ids.

    Returns:
      :class:`TokenizedCorpus` with the same document order.
    """
    names, ids = [], []
    for name, text in docs:
        names.append(name)
        ids.append(as_token_array(tokenize(text), what=f"tokenize({name!r})"))
    if not names:
        raise ValueError("tokenize_documents: no documents given (empty corpus)")
    return TokenizedCorpus(tuple(names), tuple(ids))
