"""Character-level tokenizer for toy models (NanoGPT's Shakespeare-char convention).

The vocabulary is the sorted set of characters of a reference text, as NanoGPT's
``data/shakespeare_char/prepare.py`` builds it; id ``i`` is the ``i``-th character. Encoding a
character outside the vocabulary raises (nothing is mapped to a fallback id silently).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from geomjax.typing import ArrayLike

__all__ = ["CharTokenizer"]


@dataclasses.dataclass(frozen=True)
class CharTokenizer:
    """Map characters to int32 ids and back; the vocabulary is a string of distinct characters.

    Attributes:
      chars: the vocabulary, one character per id (id ``i`` <-> ``chars[i]``).

    Usable as the ``tokenize`` callable of :func:`geomjax.data.tokenize_documents`
    (``tok(text) -> (n,) int32``).
    """

    chars: str

    def __post_init__(self):
        if len(self.chars) == 0:
            raise ValueError("CharTokenizer: empty vocabulary; build it from a non-empty text")
        if len(set(self.chars)) != len(self.chars):
            dup = sorted({c for c in self.chars if self.chars.count(c) > 1})
            raise ValueError(f"CharTokenizer: vocabulary has repeated characters {dup!r}")
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.chars)})

    @classmethod
    def from_text(cls, text: str | Iterable[str]) -> "CharTokenizer":
        """Build the vocabulary as the sorted distinct characters of ``text`` (NanoGPT convention).

        Args:
          text: a string, or an iterable of strings (all are scanned).
        """
        if isinstance(text, str):
            chars = set(text)
        else:
            chars = set()
            for t in text:
                chars.update(t)
        if not chars:
            raise ValueError("CharTokenizer.from_text: the text is empty; pass a non-empty corpus")
        return cls("".join(sorted(chars)))

    @property
    def vocab_size(self) -> int:
        """Number of ids V (ids lie in [0, V))."""
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """Encode a string to a (n,) int32 array of ids.

        Raises:
          ValueError: a character is not in the vocabulary (its position and repr are named).
        """
        index = self._index  # type: ignore[attr-defined]
        try:
            return np.fromiter((index[c] for c in text), dtype=np.int32, count=len(text))
        except KeyError:
            for pos, c in enumerate(text):
                if c not in index:
                    raise ValueError(
                        f"CharTokenizer: character {c!r} at position {pos} is not in the "
                        f"{self.vocab_size}-character vocabulary; build the tokenizer from a text "
                        "that contains it (CharTokenizer.from_text(train + eval text))"
                    ) from None
            raise

    __call__ = encode

    def decode(self, ids: ArrayLike) -> str:
        """Decode a 1-D sequence of ids to a string.

        Raises:
          ValueError: ids are not 1-D integers or lie outside [0, vocab_size).
        """
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"CharTokenizer.decode: expected a 1-D array of ids, got shape {arr.shape}")
        if arr.size == 0:
            return ""
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"CharTokenizer.decode: ids must be integers, got dtype {arr.dtype}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.vocab_size:
            raise ValueError(
                f"CharTokenizer.decode: ids must lie in [0, {self.vocab_size}), got min {lo}, max {hi}"
            )
        return "".join(self.chars[i] for i in arr.tolist())
