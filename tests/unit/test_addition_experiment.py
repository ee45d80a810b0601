"""Tests of the §5 experiment pieces: addition generators (carry / no-carry, reversal, lengths), greedy
exact-match decoding on hand-made model outputs, the out-of-range guard, the randomization profile
metrics, and the presets (Song & Zhong §5.1-5.2, App. E)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from experiments.addition.config import get_config as addition_preset
from experiments.addition.run import evaluate_lengths, train_config
from experiments.attention_dissection.config import get_config as dissection_preset
from experiments.token_randomization.config import get_config as randomization_preset
from experiments.token_randomization.run import half_metrics, positional_profile
from geomjax.data.synthetic import (
    ADDITION_VOCAB,
    addition_problems,
    addition_string,
    decode_addition,
    encode_addition,
    has_carry,
    parse_addition_answer,
)


def _digits(n: int) -> int:
    return len(str(n))


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_problem_lengths_and_carry():
    L = 10
    carry = addition_problems(0, 200, L, carry=True)
    nocarry = addition_problems(1, 200, L, carry=False)
    for a, b in carry + nocarry:
        assert 5 <= _digits(a) <= 10 and 5 <= _digits(b) <= 10
    # no-carry: no decimal column sums above 9 (checked digit by digit, independently of has_carry)
    for a, b in nocarry:
        sa, sb = str(a)[::-1], str(b)[::-1]
        assert all(int(x) + int(y) <= 9 for x, y in zip(sa, sb))
    # carry setting: uniform integers, so most problems carry somewhere
    assert np.mean([has_carry(a, b) for a, b in carry]) > 0.9
    lens = np.array([_digits(a) for a, _ in carry])
    assert set(lens.tolist()) == set(range(5, 11))
    # fixed lengths (length generalization): both operands exactly ell digits
    for ell in (2,):
        for a, b in addition_problems(2, 50, ell, carry=False, min_digits=ell):
            assert _digits(a) == ell and _digits(b) == ell and not has_carry(a, b)
    # the default min_digits reproduces the original draw
    assert addition_problems(3, 200, L) == addition_problems(3, 200, L, min_digits=L // 2)
    with pytest.raises(ValueError, match="min_digits"):
        addition_problems(0, 5, 4, min_digits=5)


def test_reversal_encoding_and_parsing():
    assert addition_string(1234, 98) == "1234+98=2331\n"  # 1332 reversed
    batch = encode_addition([(1234, 98)], 16)
    s = "".join(ADDITION_VOCAB[i] for i in batch.ids[0])
    assert s.startswith("1234+98=2331\n") and set(s[13:]) == {"\n"}
    np.testing.assert_array_equal(np.flatnonzero(batch.loss_mask[0]), np.arange(8, 13))
    assert parse_addition_answer("2331\n") == 1332
    assert parse_addition_answer("2331\n\n99") == 1332
    assert parse_addition_answer("23+1\n") is None and parse_addition_answer("\n") is None
    assert parse_addition_answer("2331", reverse=False) == 2331


def _oracle(wrong=lambda a, b: False, newline=True):
    """A hand-made 'model': one-hot logits of the correct continuation of every prefix (or a planted error)."""
    V = len(ADDITION_VOCAB)

    def logits_fn(ids):
        ids = np.asarray(ids)
        n, T = ids.shape
        out = np.zeros((n, T, V), np.float32)
        for i in range(n):
            s = "".join(ADDITION_VOCAB[j] for j in ids[i])
            eq = s.index("=")
            a, b = (int(x) for x in s[:eq].split("+"))
            c = a + b + (1 if wrong(a, b) else 0)
            ans = str(c)[::-1] + ("\n" if newline else "7" * 40)
            for t in range(eq, T):
                k = t - eq
                ch = ans[k] if k < len(ans) else "\n"
                out[i, t, ADDITION_VOCAB.index(ch)] = 1.0
        return out

    return logits_fn


def test_greedy_decoding_on_hand_made_outputs():
    probs = addition_problems(4, 40, 6)
    T = 3 * 6 + 4
    preds, ok = decode_addition(_oracle(), probs, T)
    assert ok.all() and preds == [a + b for a, b in probs]
    # planted errors on the problems with odd a: exactly those are wrong, and the wrong value is decoded
    preds, ok = decode_addition(_oracle(lambda a, b: a % 2 == 1), probs, T)
    np.testing.assert_array_equal(ok, [a % 2 == 0 for a, _ in probs])
    assert all(p == a + b + (a % 2) for p, (a, b) in zip(preds, probs))
    # a model that never stops writing digits is wrong (the answer has extra digits)
    _, ok = decode_addition(_oracle(newline=False), probs, T)
    assert not ok.any()
    with pytest.raises(ValueError, match="needs"):
        decode_addition(_oracle(), [(10**9, 10**9)], 20)


def test_length_evaluation_requires_explicit_flag():
    L, T = 6, 22
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="outside the trained range"):
        evaluate_lengths(_oracle(), [2], max_digits=L, T=T, n=4, carry=True, key=key)
    with pytest.raises(ValueError, match="do not fit"):
        evaluate_lengths(_oracle(), [7], max_digits=L, T=T, n=4, carry=True, key=key, allow_out_of_range=True)
    acc = evaluate_lengths(_oracle(), [1, 3], max_digits=L, T=T, n=16, carry=True, key=key, allow_out_of_range=True)
    assert acc == {1: 1.0, 3: 1.0}
    acc = evaluate_lengths(_oracle(lambda a, b: a + b >= 10), [1], max_digits=L, T=T, n=16, carry=True, key=key,
                           allow_out_of_range=True)
    probs = addition_problems(jax.random.fold_in(key, 0), 16, 1, carry=True, min_digits=1)
    assert acc[1] == pytest.approx(np.mean([a + b < 10 for a, b in probs]))
    assert 0.0 < acc[1] < 1.0
    assert evaluate_lengths(_oracle(), [3], max_digits=L, T=T, n=16, carry=True, key=key) == {3: 1.0}


def test_positional_profile_and_half_metrics():
    rng = np.random.default_rng(0)
    C, T, d = 50, 8, 3
    pos = np.cumsum(rng.normal(size=(T, d)), axis=0)
    h = pos[None] + 0.1 * rng.normal(size=(C, T, d)) + 5.0
    prof = positional_profile(h)
    mu = h.mean((0, 1))
    np.testing.assert_allclose(prof["pos"], h.mean(0) - mu)
    np.testing.assert_allclose(prof["var"], [np.mean([np.sum((h[c, t] - mu) ** 2) for c in range(C)]) for t in range(T)])
    m = half_metrics(prof)
    p = prof["pos"]
    rms = np.sqrt(np.mean(np.sum(p**2, -1)))
    assert m["roughness_first"] == pytest.approx(np.mean([np.linalg.norm(p[t + 1] - p[t]) for t in range(3)]) / rms)
    assert m["pos_share_second"] == pytest.approx(np.sum(p[4:] ** 2) / np.sum(prof["var"][4:]))
    assert 0.9 < m["pos_share_first"] <= 1.0


def test_presets():
    from geomjax.train import AdditionOptions, addition_config

    for get in (addition_preset, dissection_preset, randomization_preset):
        for name in ("smoke", "cpu", "paper"):
            assert get(name).preset == name
        with pytest.raises(ValueError, match="preset"):
            get("gpu")
    cpu = addition_preset("cpu")
    assert cpu.train.options.max_digits == 10 and cpu.seq_len == 33 and cpu.settings == ("carry", "no_carry")
    tc = train_config(cpu, carry=False)
    assert tc.options == AdditionOptions(10, False, 100_000) and tc.seq_len == 33 and tc.model.max_len == 33
    assert train_config(addition_preset("paper"), carry=True) == addition_config("paper", carry=True)
    paper = randomization_preset("paper")
    m = paper.train.model
    assert (m.n_layers, m.n_heads, m.d_model, paper.train.seq_len, m.max_len) == (8, 8, 512, 512, 512)
    assert dissection_preset("paper").basis.windows == 6400 and dissection_preset("paper").basis.T == 512
