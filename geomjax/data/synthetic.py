"""Synthetic data for the training experiments: addition, random tokens, modular addition.

* Addition (Song & Zhong §5, the authors' released code): strings ``"a+b=c\\n"`` over the vocabulary
  ``"0123456789+=\\n"`` with the answer ``c`` written reversed (least significant digit first);
  operand lengths uniform in {⌊L/2⌋, …, L}; "carry" problems are uniform random integers of those
  lengths, "no-carry" problems are built digit column by digit column so that no column sums
  above 9; the loss mask covers the tokens after "=" (the reversed answer and the final newline).
* Random tokens (Song & Zhong §5 randomization): uniform ids, and partial randomization that
  replaces the second half (level 1) or the whole sequence (level 2) by uniform random ids.
* Modular addition (Nanda et al.; the clock blog): inputs ``(a, b, "=")`` with "=" = p, label
  ``(a + b) mod p``, all p² pairs split into train/test by a seeded permutation.

All generators take an explicit ``jax.random`` key (or an int seed) and are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from geomjax.data.chars import CharTokenizer
from geomjax.data.sampling import as_key
from geomjax.typing import Array, Int, Key

__all__ = [
    "ADDITION_VOCAB",
    "AdditionBatch",
    "ModularData",
    "addition_batch",
    "addition_problems",
    "addition_string",
    "addition_tokenizer",
    "decode_addition",
    "encode_addition",
    "has_carry",
    "modular_addition_data",
    "parse_addition_answer",
    "random_tokens",
    "randomize_tokens",
]

ADDITION_VOCAB = "0123456789+=\n"
"""Addition vocabulary (the authors' released code: "0-9+=\\n"); ids 0-9 are the digits, 10 '+', 11 '=', 12 newline."""


def addition_tokenizer() -> CharTokenizer:
    """Character tokenizer over :data:`ADDITION_VOCAB` (13 ids)."""
    return CharTokenizer(ADDITION_VOCAB)


def _pair_tables() -> tuple[np.ndarray, np.ndarray]:
    """Digit pairs (x, y) with x + y <= 9, per (x leading, y leading) flag: tables (4, 55, 2), counts (4,)."""
    tables = np.zeros((4, 55, 2), dtype=np.int64)
    counts = np.zeros(4, dtype=np.int64)
    for flag in range(4):
        lead_x, lead_y = bool(flag & 1), bool(flag & 2)
        pairs = [(x, y) for x in range(10) for y in range(10)
                 if x + y <= 9 and (x >= 1 or not lead_x) and (y >= 1 or not lead_y)]
        tables[flag, : len(pairs)] = pairs
        counts[flag] = len(pairs)
    return tables, counts


def _digits_to_int(d: np.ndarray) -> int:
    return int("".join(str(int(x)) for x in d[::-1]))


def addition_problems(
    key_or_seed: Key | int, n: int, max_digits: int, *, carry: bool = True, min_digits: int | None = None
) -> list[tuple[int, int]]:
    """Draw n addition problems (a, b) with operand lengths uniform in {⌊L/2⌋, …, L} (L = max_digits).

    Song & Zhong's addition task uses 5–10 digit operands (L = 10).

    * ``carry=True``: a and b are uniform among the integers of their drawn lengths (so carries
      occur as they do for random integers).
    * ``carry=False``: digit column by column (least significant first), the column's digit pair
      is uniform among the pairs with sum <= 9 (leading digits >= 1); columns only the longer
      operand has get a uniform digit. No column of a + b then produces a carry.

    Args:
      key_or_seed: ``jax.random.key`` or an int seed.
      n: number of problems >= 1.
      max_digits: L >= 1 (operands of one digit may be 0; longer ones have no leading zero).
      carry: see above.
      min_digits: shortest operand length (default max(1, ⌊L/2⌋), the training range); e.g.
        ``min_digits = max_digits = 3`` draws 3-digit operands only (length-generalization tests,
        Song & Zhong App. E: lengths 1-4). The same key gives the same draw as before this option.

    Returns:
      list of n ``(a, b)`` Python ints.
    """
    n, L = int(n), int(max_digits)
    if n < 1 or L < 1:
        raise ValueError(f"addition_problems: need n >= 1 and max_digits >= 1, got n={n}, max_digits={L}")
    lo = max(1, L // 2) if min_digits is None else int(min_digits)
    if not 1 <= lo <= L:
        raise ValueError(f"addition_problems: min_digits must lie in [1, max_digits={L}], got {min_digits}")
    k_len, k_dig, k_lead, k_pair = jax.random.split(as_key(key_or_seed), 4)
    lens = np.asarray(jax.random.randint(k_len, (n, 2), lo, L + 1)).astype(np.int64)
    digits = np.asarray(jax.random.randint(k_dig, (n, 2, L), 0, 10)).astype(np.int64)
    lead = np.asarray(jax.random.randint(k_lead, (n, 2), 1, 10)).astype(np.int64)
    pos = np.arange(L)[None, None, :]
    is_lead = (pos == (lens - 1)[:, :, None]) & (lens[:, :, None] > 1)
    digits = np.where(is_lead, lead[:, :, None], digits)
    if not carry:
        tables, counts = _pair_tables()
        lead_a, lead_b = is_lead[:, 0, :], is_lead[:, 1, :]
        flag = lead_a.astype(np.int64) + 2 * lead_b.astype(np.int64)  # (n, L)
        idx = np.asarray(jax.random.randint(k_pair, (n, L), 0, jnp.asarray(counts[flag]))).astype(np.int64)
        pair = tables[flag, idx]  # (n, L, 2)
        both = pos[:, 0, :] < np.minimum(lens[:, 0], lens[:, 1])[:, None]
        digits = np.where(both[:, None, :], np.moveaxis(pair, -1, 1), digits)
    digits = np.where(pos < lens[:, :, None], digits, 0)
    return [(_digits_to_int(digits[i, 0, : lens[i, 0]]), _digits_to_int(digits[i, 1, : lens[i, 1]]))
            for i in range(n)]


def has_carry(a: int, b: int) -> bool:
    """Whether adding the non-negative integers a and b produces a carry in some decimal column."""
    while a or b:
        if a % 10 + b % 10 > 9:
            return True
        a, b = a // 10, b // 10
    return False


def addition_string(a: int, b: int, *, reverse: bool = True) -> str:
    """The training string ``"a+b=c\\n"`` with c = a + b written reversed (Song & Zhong §5) or not."""
    if a < 0 or b < 0:
        raise ValueError(f"addition_string: operands must be non-negative, got {a}, {b}")
    c = str(a + b)
    return f"{a}+{b}={c[::-1] if reverse else c}\n"


class AdditionBatch(NamedTuple):
    """Encoded addition problems.

    Attributes:
      ids: (n, T) int32 token ids, each string padded after its newline with newlines.
      loss_mask: (n, T) bool, True on the tokens to be predicted: those after "=" up to and
        including the terminating newline (aligned with ``ids``; :func:`geomjax.train.losses.
        next_token_loss` shifts it).
    """

    ids: np.ndarray
    loss_mask: np.ndarray


def encode_addition(problems: Sequence[tuple[int, int]], T: int, *, reverse: bool = True) -> AdditionBatch:
    """Encode (a, b) problems as (n, T) ids over :data:`ADDITION_VOCAB` with the after-"=" loss mask.

    Raises:
      ValueError: a string is longer than T (the message gives its length; nothing is truncated).
    """
    tok = addition_tokenizer()
    pad = tok.encode("\n")[0]
    n = len(problems)
    ids = np.full((n, T), pad, dtype=np.int32)
    mask = np.zeros((n, T), dtype=bool)
    for i, (a, b) in enumerate(problems):
        s = addition_string(a, b, reverse=reverse)
        if len(s) > T:
            raise ValueError(
                f"encode_addition: problem {a}+{b} needs {len(s)} tokens but T={T}; use T >= "
                f"3L + 4 for L-digit operands (e.g. T=34 for L=10), or fewer digits"
            )
        ids[i, : len(s)] = tok.encode(s)
        eq = s.index("=")
        mask[i, eq + 1 : len(s)] = True
    return AdditionBatch(ids, mask)


def addition_batch(
    key_or_seed: Key | int, n: int, max_digits: int, T: int, *, carry: bool = True, reverse: bool = True
) -> AdditionBatch:
    """Draw and encode n addition problems: :func:`addition_problems` then :func:`encode_addition`."""
    return encode_addition(addition_problems(key_or_seed, n, max_digits, carry=carry), T, reverse=reverse)


def parse_addition_answer(text: str, *, reverse: bool = True) -> int | None:
    """Read the answer a model wrote after "=": the digits up to the first newline (or the end).

    ``reverse=True`` reads them least significant digit first (Song & Zhong's reversed answer).
    Returns None when there is no digit or a non-digit character comes before the newline.
    """
    ans = text.split("\n", 1)[0]
    if not ans or not ans.isdigit():
        return None
    return int(ans[::-1] if reverse else ans)


def decode_addition(
    logits_fn, problems: Sequence[tuple[int, int]], T: int, *, reverse: bool = True
) -> tuple[list[int | None], np.ndarray]:
    """Greedy-decode answers to "a+b=" prompts and score exact match (Song & Zhong App. E accuracy).

    Each prompt "a+b=" is written into a (n, T) buffer (padded with newlines); at every step
    ``logits_fn(ids (n, T - 1) int32) -> (n, T - 1, V)`` is called on the first T − 1 tokens (the
    model reads T − 1 positions, as in training, where the (n, T) strings give inputs ids[:, :-1];
    position t's logits predict token t+1) and the argmax after each row's last written token is
    appended, until every row has emitted a newline or filled the buffer. The answer is :func:`parse_addition_answer` of what
    was written; it is correct iff it equals a + b (a missing newline before T counts as written
    text up to T).

    Args:
      logits_fn: causal next-token logits function.
      problems: (a, b) pairs.
      T: buffer length (the model's positions + 1); every problem string must fit.
      reverse: answers are written reversed.

    Returns:
      (predicted answers, (n,) bool array of exact matches).

    Raises:
      ValueError: a problem's full string does not fit in T tokens.
    """
    tok = addition_tokenizer()
    nl = tok.encode("\n")[0]
    n = len(problems)
    ids = np.full((n, T), nl, dtype=np.int32)
    cur = np.zeros(n, dtype=np.int64)
    for i, (a, b) in enumerate(problems):
        full = addition_string(a, b, reverse=reverse)
        if len(full) > T:
            raise ValueError(f"decode_addition: problem {a}+{b} needs {len(full)} tokens but T={T}; use a model "
                             "with more positions or shorter operands")
        prompt = full[: full.index("=") + 1]
        ids[i, : len(prompt)] = tok.encode(prompt)
        cur[i] = len(prompt)
    done = np.zeros(n, dtype=bool)
    written = [[] for _ in range(n)]
    while not done.all():
        logits = np.asarray(logits_fn(jnp.asarray(ids[:, : T - 1])))
        nxt = logits[np.arange(n), np.minimum(cur, T - 1) - 1].argmax(-1)
        for i in np.flatnonzero(~done):
            if cur[i] >= T:
                done[i] = True
                continue
            ids[i, cur[i]] = nxt[i]
            written[i].append(int(nxt[i]))
            cur[i] += 1
            if nxt[i] == nl:
                done[i] = True
    preds = [parse_addition_answer(tok.decode(w), reverse=reverse) for w in written]
    ok = np.asarray([p is not None and p == a + b for p, (a, b) in zip(preds, problems)], dtype=bool)
    return preds, ok


def random_tokens(key: Key, shape: tuple[int, ...], vocab_size: int) -> Int[Array, "..."]:
    """Uniform random token ids in [0, vocab_size) (int32), e.g. the GPT-2 range [0, 50257)."""
    if vocab_size < 1:
        raise ValueError(f"random_tokens: vocab_size must be >= 1, got {vocab_size}")
    return jax.random.randint(key, shape, 0, vocab_size, dtype=jnp.int32)


def randomize_tokens(
    key: Key, ids: Int[Array, "B T"], vocab_size: int, level: int
) -> Int[Array, "B T"]:
    """Song & Zhong §5 token randomization: replace part of each sequence by uniform random ids.

    Level 0 leaves ``ids`` unchanged; level 1 replaces positions ``t >= T // 2`` (the second half);
    level 2 replaces every position. The noise is drawn uniformly in [0, vocab_size). Jittable.

    Args:
      key: PRNG key.
      ids: (B, T) integer ids.
      vocab_size: V of the replacement ids (GPT-2: 50257).
      level: 0, 1 or 2 (static).

    Returns:
      (B, T) int32 ids.
    """
    if level not in (0, 1, 2):
        raise ValueError(f"randomize_tokens: level must be 0, 1 or 2, got {level}")
    ids = jnp.asarray(ids, jnp.int32)
    if ids.ndim != 2:
        raise ValueError(f"randomize_tokens: ids must be (B, T), got shape {ids.shape}")
    if level == 0:
        return ids
    T = ids.shape[1]
    noise = random_tokens(key, ids.shape, vocab_size)
    replace = jnp.arange(T) >= (T // 2 if level == 1 else 0)
    return jnp.where(replace[None, :], noise, ids)


class ModularData(NamedTuple):
    """Modular addition data (Nanda et al.): inputs (a, b, p) and labels (a + b) mod p.

    Attributes:
      x_train: (n_train, 3) int32 rows ``(a, b, p)``; ``p`` is the "=" token.
      y_train: (n_train,) int32 labels in [0, p).
      x_test: (p² - n_train, 3) int32.
      y_test: (p² - n_train,) int32.
      p: the modulus.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    p: int


def modular_addition_data(p: int = 113, train_frac: float = 0.3, key_or_seed: Key | int = 0) -> ModularData:
    """All p² pairs (a, b, "=") for modular addition, split into train/test by a seeded permutation.

    Nanda et al.: p = 113, "=" is token p (vocabulary p + 1), 30% of the pairs train
    (n_train = ⌊train_frac · p²⌋ = 3830), the rest test.

    Args:
      p: modulus >= 2.
      train_frac: fraction in (0, 1).
      key_or_seed: ``jax.random.key`` or an int seed for the permutation.

    Returns:
      :class:`ModularData`.
    """
    if p < 2:
        raise ValueError(f"modular_addition_data: p must be >= 2, got {p}")
    if not 0.0 < train_frac < 1.0:
        raise ValueError(f"modular_addition_data: train_frac must lie in (0, 1), got {train_frac}")
    a, b = np.divmod(np.arange(p * p, dtype=np.int64), p)
    x = np.stack([a, b, np.full_like(a, p)], axis=1).astype(np.int32)
    y = ((a + b) % p).astype(np.int32)
    perm = np.asarray(jax.random.permutation(as_key(key_or_seed), p * p))
    n_train = int(train_frac * p * p)
    tr, te = perm[:n_train], perm[n_train:]
    return ModularData(x[tr], y[tr], x[te], y[te], int(p))

