"""Document-labelled sampling of C token windows of length T (Song & Zhong's corpus windows).

Two samplers:

* :func:`sample_windows` — C windows uniform over the token stream (they may cross document
  boundaries, as the Song & Zhong code samples with seed 1234) or uniform over the positions
  inside a single document; optionally non-overlapping. Distinct windows are always distinct
  start positions: a window is never repeated silently.
* :func:`sample_topics` — ``n_docs`` documents x ``n_per_doc`` non-overlapping windows each, with
  the document index as the label (the "topic" runs behind Table 1's cluster similarity). The
  source's topics script spreads 64 windows of 128 tokens evenly (``np.linspace``) over each topic
  file, so they overlap only in a topic shorter than 64·128 tokens; the heavy overlap is in its main
  decomposition, 6,400 uniform 512-token windows over a corpus of tens of thousands of tokens.

Randomness comes from ``jax.random`` (an explicit key, or an int seed turned into
``jax.random.key(seed)``); the bookkeeping is host-side NumPy. Results are deterministic given the
key. Every "not enough tokens" condition raises an error naming the numbers and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.data.corpora import TokenizedCorpus, as_token_array
from geomjax.errors import GeomjaxError
from geomjax.typing import Int, Key

__all__ = ["Windows", "as_key", "sample_topics", "sample_windows", "window_capacity", "windows_in_batches"]

TokenDocs = TokenizedCorpus | Sequence[np.ndarray]


class Windows(NamedTuple):
    """C sampled windows.

    Attributes:
      ids: (C, T) int32 token ids.
      doc_labels: (C,) int32 index of the document holding the window's first token.
      offsets: (C,) int64 position of the window's first token inside that document.
    """

    ids: np.ndarray
    doc_labels: np.ndarray
    offsets: np.ndarray


def as_key(key_or_seed: Key | int) -> Key:
    """Return a typed JAX PRNG key from a key (typed or raw uint32[2]) or an int seed."""
    if isinstance(key_or_seed, (int, np.integer)):
        return jax.random.key(int(key_or_seed))
    k = jnp.asarray(key_or_seed)
    if jnp.issubdtype(k.dtype, jax.dtypes.prng_key):
        return k
    if k.dtype == jnp.uint32 and k.shape == (2,):
        return jax.random.wrap_key_data(k)
    raise TypeError(f"expected a jax.random.key or an int seed, got {type(key_or_seed).__name__} {k.dtype}{k.shape}")


def _docs(token_docs: TokenDocs) -> list[np.ndarray]:
    ids = token_docs.ids if isinstance(token_docs, TokenizedCorpus) else token_docs
    out = [as_token_array(x, what=f"document {j}") for j, x in enumerate(ids)]
    if not out:
        raise GeomjaxError("empty corpus: no documents were given; load and tokenize a corpus first")
    return out


def _check_sizes(n_windows: int, T: int, what: str) -> None:
    if int(n_windows) < 1:
        raise GeomjaxError(f"{what}: the number of windows must be >= 1, got {n_windows}")
    if int(T) < 1:
        raise GeomjaxError(f"{what}: the window length T must be >= 1, got {T}")


def _choice(key: Key, n_total: int, n: int) -> np.ndarray:
    """n distinct integers uniform in [0, n_total), in random order (int64).

    Sparse case (4n <= n_total): sequential rejection — uniform draws, skipping values already
    taken, which is exactly sampling without replacement (each kept value is uniform over the
    values not yet taken). Dense case: the first n entries of a random permutation.
    """
    if n_total > np.iinfo(np.int32).max:
        raise GeomjaxError(f"too many candidate positions ({n_total}) for int32 sampling; subsample the corpus")
    if n > n_total:
        raise GeomjaxError(f"cannot draw {n} distinct values from {n_total}")
    if 4 * n > n_total:
        return np.asarray(jax.random.permutation(key, n_total))[:n].astype(np.int64)
    seen: set[int] = set()
    out: list[int] = []
    r = 0
    while len(out) < n:
        draw = np.asarray(jax.random.randint(jax.random.fold_in(key, r), (2 * (n - len(out)),), 0, n_total))
        for v in draw.tolist():
            if v not in seen:
                seen.add(v)
                out.append(v)
                if len(out) == n:
                    break
        r += 1
    return np.asarray(out, dtype=np.int64)


def _gather(docs: list[np.ndarray], stream_starts: np.ndarray, T: int) -> np.ndarray:
    stream = np.concatenate(docs)
    return stream[stream_starts[:, None] + np.arange(T, dtype=np.int64)[None, :]].astype(np.int32)


def _label(doc_starts: np.ndarray, stream_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Document index and in-document offset of stream positions."""
    lab = np.searchsorted(doc_starts, stream_pos, side="right") - 1
    return lab.astype(np.int32), (stream_pos - doc_starts[lab]).astype(np.int64)


def _stars_and_bars(key: Key, length: int, n: int, T: int) -> np.ndarray:
    """Starts of n non-overlapping length-T windows in [0, length), uniform over all configurations.

    A configuration s_1 < ... < s_n with s_{i+1} >= s_i + T corresponds one-to-one to n distinct
    values c_i = s_i - (i-1)(T-1) in [0, length - nT + n); drawing those uniformly without
    replacement draws the configuration uniformly. The windows are returned in random order.
    """
    k_c, k_p = jax.random.split(key)
    c = np.sort(_choice(k_c, length - n * T + n, n))
    starts = c + np.arange(n, dtype=np.int64) * (T - 1)
    return starts[np.asarray(jax.random.permutation(k_p, n))]


def window_capacity(token_docs: TokenDocs, T: int) -> dict[str, int]:
    """Count how many length-T windows a corpus can provide, per sampling mode.

    Returns:
      dict with ``n_tokens``; ``stream_starts`` = N - T + 1 (windows may cross documents);
      ``stream_disjoint`` = floor(N / T); ``doc_starts`` = sum_j max(n_j - T + 1, 0);
      ``doc_disjoint`` = sum_j floor(n_j / T); ``docs_fitting`` = #{j : n_j >= T}.
    """
    lengths = np.array([len(x) for x in _docs(token_docs)], dtype=np.int64)
    N = int(lengths.sum())
    return {
        "n_tokens": N,
        "stream_starts": max(N - T + 1, 0),
        "stream_disjoint": N // T,
        "doc_starts": int(np.maximum(lengths - T + 1, 0).sum()),
        "doc_disjoint": int((lengths // T).sum()),
        "docs_fitting": int((lengths >= T).sum()),
    }


def sample_windows(
    token_docs: TokenDocs,
    n_windows: int,
    T: int,
    key_or_seed: Key | int,
    *,
    within_document: bool = False,
    non_overlapping: bool = False,
) -> Windows:
    """Sample C = ``n_windows`` distinct token windows of length T from a tokenized corpus.

    Modes (Song & Zhong's code: uniform over the stream, crossing documents, seed 1234):

    * stream (default): starts uniform over the N - T + 1 positions of the concatenated stream,
      drawn without replacement (no window twice); windows may cross document boundaries.
    * ``within_document``: starts uniform over the positions whose whole window lies in one
      document.
    * ``non_overlapping``: additionally no two windows share a token. On the stream this is exact
      (uniform over all non-overlapping configurations, "stars and bars"); inside documents it is
      random sequential adsorption (random candidate order, keep those that do not overlap a kept
      one), which can stall before reaching a count close to the capacity.

    Args:
      token_docs: :class:`TokenizedCorpus` or a sequence of 1-D integer id arrays.
      n_windows: C >= 1.
      T: window length >= 1.
      key_or_seed: ``jax.random.key`` or an int seed.
      within_document: keep every window inside one document.
      non_overlapping: forbid shared tokens between windows.

    Returns:
      :class:`Windows` (ids (C, T) int32, doc_labels (C,) int32 — the document of the window's
      first token — and offsets (C,) int64 inside that document), in random order.

    Raises:
      ValueError: the corpus cannot provide C distinct (or non-overlapping) windows; the message
        gives the token count and the capacity, and the fix.
    """
    _check_sizes(n_windows, T, "sample_windows")
    docs = _docs(token_docs)
    n, T = int(n_windows), int(T)
    key = as_key(key_or_seed)
    cap = window_capacity(docs, T)
    lengths = np.array([len(x) for x in docs], dtype=np.int64)
    doc_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    mode = ("non-overlapping " if non_overlapping else "distinct ") + (
        "within-document" if within_document else "stream")
    need = {(False, False): "stream_starts", (False, True): "stream_disjoint",
            (True, False): "doc_starts", (True, True): "doc_disjoint"}[(within_document, non_overlapping)]
    if cap[need] < n:
        raise GeomjaxError(
            f"sample_windows: asked for {n} {mode} windows of T={T} tokens but the corpus "
            f"({len(docs)} documents, {cap['n_tokens']} tokens, {cap['docs_fitting']} documents with "
            f">= {T} tokens) has room for only {cap[need]}; use a larger corpus, a smaller T or fewer "
            "windows (windows are never repeated)"
        )
    if not within_document:
        if non_overlapping:
            starts = _stars_and_bars(key, cap["n_tokens"], n, T)
        else:
            starts = _choice(key, cap["stream_starts"], n)
    else:
        valid = np.maximum(lengths - T + 1, 0)
        cum = np.concatenate([[0], np.cumsum(valid)]).astype(np.int64)

        def to_stream(idx):  # index among valid (doc, start) pairs -> stream position
            j = np.searchsorted(cum, idx, side="right") - 1
            return doc_starts[j] + (idx - cum[j])

        if not non_overlapping:
            starts = to_stream(_choice(key, cap["doc_starts"], n))
        else:
            order = to_stream(np.asarray(jax.random.permutation(key, cap["doc_starts"])).astype(np.int64))
            taken = np.zeros(cap["n_tokens"], dtype=bool)
            kept = []
            for s in order:
                if not taken[s : s + T].any():
                    taken[s : s + T] = True
                    kept.append(s)
                    if len(kept) == n:
                        break
            if len(kept) < n:
                raise GeomjaxError(
                    f"sample_windows: random sequential placement found only {len(kept)} of {n} "
                    f"non-overlapping within-document windows of T={T} (the corpus holds at most "
                    f"{cap['doc_disjoint']}); ask for fewer windows (about half the maximum is safe)"
                )
            starts = np.asarray(kept, dtype=np.int64)
    labels, offsets = _label(doc_starts, starts)
    return Windows(_gather(docs, starts, T), labels, offsets)


def sample_topics(
    token_docs: TokenDocs,
    n_docs: int,
    n_per_doc: int,
    T: int,
    key_or_seed: Key | int,
    *,
    docs: Sequence[int] | None = None,
) -> Windows:
    """Sample ``n_docs`` documents x ``n_per_doc`` non-overlapping windows each, labelled by document.

    The "topic" design behind Song & Zhong Table 1's within/between-topic similarity, done without
    the source code's defects (overlapping or repeated windows): documents with at least
    ``n_per_doc * T`` tokens are eligible; ``n_docs`` of them are drawn uniformly without
    replacement (or taken from ``docs``), and inside each the windows are drawn uniformly over all
    non-overlapping configurations.

    Args:
      token_docs: :class:`TokenizedCorpus` or a sequence of 1-D integer id arrays.
      n_docs: number of documents (clusters) >= 1.
      n_per_doc: windows per document >= 1.
      T: window length.
      key_or_seed: ``jax.random.key`` or an int seed.
      docs: optional explicit document indices (then ``n_docs`` must equal ``len(docs)``).

    Returns:
      :class:`Windows` with C = n_docs * n_per_doc rows grouped by document (rows
      ``[i * n_per_doc, (i+1) * n_per_doc)`` come from one document); ``doc_labels`` are indices into
      the corpus.

    Raises:
      ValueError: fewer eligible documents than ``n_docs``, or a chosen document is too short.
    """
    _check_sizes(n_per_doc, T, "sample_topics")
    if int(n_docs) < 1:
        raise GeomjaxError(f"sample_topics: n_docs must be >= 1, got {n_docs}")
    all_docs = _docs(token_docs)
    n_docs, n_per_doc, T = int(n_docs), int(n_per_doc), int(T)
    key = as_key(key_or_seed)
    k_docs, k_win = jax.random.split(key)
    lengths = np.array([len(x) for x in all_docs], dtype=np.int64)
    need = n_per_doc * T
    if docs is not None:
        chosen = np.asarray(docs, dtype=np.int64)
        if len(chosen) != n_docs:
            raise GeomjaxError(f"sample_topics: n_docs={n_docs} but {len(chosen)} documents were given")
        if len(set(chosen.tolist())) != len(chosen) or chosen.min() < 0 or chosen.max() >= len(all_docs):
            raise GeomjaxError(f"sample_topics: docs must be distinct indices in [0, {len(all_docs)}), got {chosen.tolist()}")
        short = [int(j) for j in chosen if lengths[j] < need]
        if short:
            raise GeomjaxError(
                f"sample_topics: documents {short} have fewer than n_per_doc*T = {n_per_doc}*{T} = {need} "
                f"tokens ({[int(lengths[j]) for j in short]}); choose longer documents or fewer/shorter windows"
            )
    else:
        eligible = np.flatnonzero(lengths >= need)
        if len(eligible) < n_docs:
            raise GeomjaxError(
                f"sample_topics: need {n_docs} documents with >= n_per_doc*T = {n_per_doc}*{T} = {need} "
                f"tokens for non-overlapping windows, but only {len(eligible)} of {len(all_docs)} "
                f"documents qualify (longest: {int(lengths.max())} tokens); lower n_docs, n_per_doc or T, "
                "or use a corpus with longer documents"
            )
        chosen = np.sort(eligible[_choice(k_docs, len(eligible), n_docs)])
    ids, labels, offsets = [], [], []
    for i, j in enumerate(chosen.tolist()):
        s = np.sort(_stars_and_bars(jax.random.fold_in(k_win, i), int(lengths[j]), n_per_doc, T))
        ids.append(all_docs[j][s[:, None] + np.arange(T)[None, :]])
        labels.append(np.full(n_per_doc, j, dtype=np.int32))
        offsets.append(s)
    return Windows(np.concatenate(ids).astype(np.int32), np.concatenate(labels), np.concatenate(offsets))


def windows_in_batches(windows: Windows, batch_size: int) -> list[Int[np.ndarray, "B T"]]:
    """Split (C, T) window ids into consecutive batches of ``batch_size`` (C must divide evenly)."""
    C = windows.ids.shape[0]
    if batch_size < 1 or C % batch_size:
        raise GeomjaxError(
            f"windows_in_batches: C={C} windows do not split into batches of {batch_size}; "
            "choose C as a multiple of the batch size (nothing is dropped or padded)"
        )
    return [windows.ids[i : i + batch_size] for i in range(0, C, batch_size)]
