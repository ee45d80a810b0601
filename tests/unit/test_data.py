"""geomjax.data: offline corpora, char tokenizer, window sampling, synthetic generators.

References are independent: Python ints for addition, digit sums for carries, direct slicing of
the token stream for windows, brute-force enumeration for the uniformity of non-overlapping draws.
"""

import itertools
import sysconfig
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from geomjax import data


# --------------------------------------------------------------------------------------- corpora

def test_bundled_corpora_and_overrides(tmp_path, monkeypatch):
    import hashlib
    import lzma

    from geomjax.errors import GeomjaxError

    monkeypatch.delenv("GEOMJAX_DATA", raising=False)
    assert data.data_dir_override() is None
    # Every shipped file decompresses to the text whose SHA-256 is recorded (independent hashlib).
    root = Path(data.__file__).parent / "files"
    for name, digest in data.BUNDLED_FILES.items():
        raw = lzma.decompress((root / (name + ".xz")).read_bytes())
        assert hashlib.sha256(raw).hexdigest() == digest
        assert data.read_data_file(name) == raw.decode("utf-8")
    # An override folder replaces the bundled copy (plain or .xz), and must hold the file.
    (tmp_path / "wikitext-2").mkdir()
    (tmp_path / "wikitext-2" / "valid.txt").write_text(" = T = \n x \n")
    assert data.wikitext2("valid", tmp_path) == [("T", " x ")]
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt.xz").write_bytes(lzma.compress(b"ROMEO: hi"))
    monkeypatch.setenv("GEOMJAX_DATA", str(tmp_path))
    assert data.data_dir_override() == tmp_path
    assert data.tiny_shakespeare() == [("tinyshakespeare", "ROMEO: hi")]
    with pytest.raises(GeomjaxError, match="not in the data folder"):
        data.wikitext2("test")
    monkeypatch.delenv("GEOMJAX_DATA")
    with pytest.raises(GeomjaxError, match="does not exist"):
        data.data_dir_override(tmp_path / "nope")
    with pytest.raises(GeomjaxError, match="not shipped"):
        data.wikitext2("train")  # only valid/test ship; train needs --data-dir
    (tmp_path / "tinyshakespeare" / "input.txt.xz").write_bytes(b"not xz")
    with pytest.raises(GeomjaxError, match="not valid xz"):
        data.tiny_shakespeare(tmp_path)


def test_tiny_shakespeare():
    (name, text), = data.tiny_shakespeare()
    assert name == "tinyshakespeare" and len(text) == 1115394
    assert text.startswith("First Citizen:")
    tr = data.tiny_shakespeare(split="train")[0][1]
    va = data.tiny_shakespeare(split="val")[0][1]
    assert tr + va == text and len(tr) == int(len(text) * 0.9)
    with pytest.raises(ValueError, match="split"):
        data.tiny_shakespeare(split="dev")


def test_wikitext2_articles():
    docs = data.wikitext2("valid")
    raw = data.read_data_file("wikitext-2/valid.txt")
    titles = [ln[3:-3] for ln in raw.split("\n") if ln.startswith(" = ") and not ln.startswith(" = = ")
              and ln.endswith(" = ")]
    assert [t for t, _ in docs] == titles and len(docs) == 60
    assert docs[0][0] == "Homarus gammarus"
    body = docs[0][1]
    assert "<unk>" in body and " = = " in body  # <unk> kept; sub-headings stay in the article
    assert not any(ln.startswith(" = ") and not ln.startswith(" = = ") for ln in body.split("\n"))
    assert all(b in raw for _, b in docs)  # each article is a contiguous slice of the file
    assert sum(len(b) for _, b in docs) > 0.99 * (len(raw) - sum(len(t) + 8 for t in titles) - 4 * len(titles))
    assert len(data.load_corpus("wikitext2-test")) == 62


def test_wikitext2_articles_small():
    text = " \n = A = \n \n x <unk> \n = = S = = \n y \n = B = \n z \n"
    assert data.wikitext2_articles(text) == [("A", " \n x <unk> \n = = S = = \n y "), ("B", " z ")]


def test_stdlib_and_pydoc():
    docs = data.load_corpus("stdlib-live", max_files=5)
    root = Path(sysconfig.get_paths()["stdlib"])
    assert len(docs) == 5 and all(n.endswith(".py") for n, _ in docs)
    assert [n for n, _ in docs] == sorted(n for n, _ in docs)
    assert docs[0][1] == (root / docs[0][0]).read_text(encoding="utf-8")
    from pydoc_data.topics import topics

    p = data.load_corpus("pydoc")
    assert dict(p) == {k: v for k, v in topics.items() if v.strip()}


def test_stdlib_snapshot(tmp_path, monkeypatch):
    """The ``stdlib`` corpus is the shipped CPython 3.11.7 snapshot on every interpreter."""
    import json
    import lzma
    import platform

    from geomjax.data import corpora
    from geomjax.errors import GeomjaxError

    monkeypatch.setenv("GEOMJAX_DATA", str(tmp_path))  # the data-folder override does not apply to it
    docs = data.load_corpus("stdlib")
    assert len(docs) == 73 and all(n.endswith(".py") and t for n, t in docs)
    assert [n for n, _ in docs] == sorted(n for n, _ in docs)
    assert docs == data.load_corpus("code") == data.stdlib_snapshot()
    assert data.corpus_kind("stdlib-live") == "stdlib-live"
    assert sum(len(t) for _, t in docs) > 1_000_000
    src = data.corpus_source("stdlib")
    assert "cpython-3.11.7" in src and data.BUNDLED_FILES[data.STDLIB_SNAPSHOT][:12] in src
    assert platform.python_version() in data.corpus_source("pydoc")
    assert platform.python_version() in data.corpus_source("stdlib-live")
    if platform.python_version() == "3.11.7":
        # Provenance: every 8th file of this interpreter's standard library, read independently.
        root = Path(sysconfig.get_paths()["stdlib"])
        live = data.stdlib_python()
        assert docs == live[::8]
        assert all((root / n).read_text(encoding="utf-8") == t for n, t in docs[:5])
    # A snapshot that is not the recorded text, or not a snapshot, is refused with the fix.
    (tmp_path / "stdlib").mkdir()
    monkeypatch.setattr(corpora, "_BUNDLED_ROOT", tmp_path)
    (tmp_path / (data.STDLIB_SNAPSHOT + ".xz")).write_bytes(lzma.compress(json.dumps({"files": []}).encode()))
    with pytest.raises(GeomjaxError, match="corrupted"):
        data.load_corpus("stdlib")
    text = json.dumps({"nofiles": 1}).encode()
    monkeypatch.setitem(corpora.BUNDLED_FILES, data.STDLIB_SNAPSHOT, __import__("hashlib").sha256(text).hexdigest())
    (tmp_path / (data.STDLIB_SNAPSHOT + ".xz")).write_bytes(lzma.compress(text))
    with pytest.raises(GeomjaxError, match="not a snapshot"):
        data.load_corpus("stdlib")


def test_local_text_and_dispatch(tmp_path):
    (tmp_path / "b.txt").write_text("beta")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("alpha")
    (tmp_path / "skip.bin").write_bytes(b"\x00")
    assert data.load_corpus(str(tmp_path)) == [("b.txt", "beta"), ("sub/a.txt", "alpha")]
    assert data.local_text(tmp_path / "b.txt") == [("b.txt", "beta")]
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ValueError, match="UTF-8"):
        data.local_text(tmp_path)
    with pytest.raises(ValueError, match="unknown corpus"):
        data.load_corpus("no-such-corpus")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no documents"):
        data.local_text(empty)


def test_hf_dataset_guarded():
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="pip install datasets"):
            data.load_corpus("hf:wikitext:wikitext-2-raw-v1:test")
    else:
        pytest.skip("datasets installed; network access not assumed in tests")


# ------------------------------------------------------------------------------------- tokenizer

def test_char_tokenizer_round_trip():
    text = data.tiny_shakespeare()[0][1][:5000]
    tok = data.CharTokenizer.from_text(text)
    assert tok.chars == "".join(sorted(set(text)))
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.shape == (5000,)
    assert tok.decode(ids) == text
    assert tok(text[:10]).tolist() == [tok.chars.index(c) for c in text[:10]]
    with pytest.raises(ValueError, match=r"character '\\u00e9' at position 2|'é' at position 2"):
        tok.encode("ab\u00e9")
    with pytest.raises(ValueError, match=r"\[0, "):
        tok.decode(np.array([0, tok.vocab_size]))
    assert data.CharTokenizer.from_text(data.tiny_shakespeare()[0][1]).vocab_size == 65


def test_token_ids_keep_int32_range():
    big = [0, 65535, 65536, 70000, 2**31 - 1]
    corpus = data.tokenize_documents([("d", "x")], lambda t: np.array(big, dtype=np.int64))
    assert corpus.ids[0].dtype == np.int32 and corpus.ids[0].tolist() == big
    w = data.sample_windows(corpus, 1, 5, 0)
    assert w.ids.tolist() == [big]
    with pytest.raises(ValueError, match="int32"):
        data.tokenize_documents([("d", "x")], lambda t: np.array([2**31], dtype=np.int64))
    with pytest.raises(ValueError, match="min -1"):
        data.tokenize_documents([("d", "x")], lambda t: [3, -1])
    with pytest.raises(ValueError, match="integers"):
        data.tokenize_documents([("d", "x")], lambda t: np.array([1.5]))


# -------------------------------------------------------------------------------------- sampling

def _corpus(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100_000, size=n).astype(np.int32) for n in lengths]


def _check_windows(docs, w, T):
    stream = np.concatenate(docs)
    starts = np.concatenate([[0], np.cumsum([len(d) for d in docs])[:-1]])
    g = starts[w.doc_labels] + w.offsets
    assert w.ids.dtype == np.int32 and w.ids.shape[1] == T
    assert w.doc_labels.dtype == np.int32 and w.offsets.dtype == np.int64
    np.testing.assert_array_equal(w.ids, stream[g[:, None] + np.arange(T)])
    assert (w.offsets >= 0).all() and (w.offsets < np.array([len(d) for d in docs])[w.doc_labels]).all()
    assert len(set(g.tolist())) == len(g)  # never a repeated window
    return g


@pytest.mark.parametrize("within", [False, True])
@pytest.mark.parametrize("disjoint", [False, True])
def test_sample_windows_modes(within, disjoint):
    docs = _corpus([300, 45, 500, 7, 260])
    T, C = 20, 30
    w = data.sample_windows(docs, C, T, 3, within_document=within, non_overlapping=disjoint)
    assert w.ids.shape == (C, T)
    g = _check_windows(docs, w, T)
    lengths = np.array([len(d) for d in docs])
    if within:
        assert (w.offsets + T <= lengths[w.doc_labels]).all()
    if disjoint:
        assert (np.diff(np.sort(g)) >= T).all()
    w2 = data.sample_windows(docs, C, T, jax.random.key(3), within_document=within, non_overlapping=disjoint)
    np.testing.assert_array_equal(w.ids, w2.ids)  # int seed == jax.random.key(seed)
    w3 = data.sample_windows(docs, C, T, 4, within_document=within, non_overlapping=disjoint)
    assert not np.array_equal(w.offsets, w3.offsets)


def test_sample_windows_cross_documents_and_tokenized_corpus():
    docs = [("a", "abcdefghij"), ("b", "klmnopqrst")]
    tok = data.CharTokenizer.from_text("".join(t for _, t in docs))
    corpus = data.tokenize_documents(docs, tok)
    w = data.sample_windows(corpus, 15, 6, 0)  # all 15 stream starts
    texts = {tok.decode(r) for r in w.ids}
    full = "abcdefghijklmnopqrst"
    assert texts == {full[i : i + 6] for i in range(15)}  # includes windows that cross "j|k"
    w = data.sample_windows(corpus, 10, 6, 0, within_document=True)
    assert all("j" not in t or t.endswith("j") for t in (tok.decode(r) for r in w.ids))


def test_sample_windows_too_few_tokens():
    docs = _corpus([50, 30])
    with pytest.raises(ValueError, match=r"80 tokens.*room for only 61"):
        data.sample_windows(docs, 62, 20, 0)
    with pytest.raises(ValueError, match=r"room for only 4"):
        data.sample_windows(docs, 5, 20, 0, non_overlapping=True)
    with pytest.raises(ValueError, match=r"room for only 3"):  # floor(50/20) + floor(30/20)
        data.sample_windows(docs, 4, 20, 0, within_document=True, non_overlapping=True)
    w = data.sample_windows(docs, 4, 20, 0, non_overlapping=True)  # exactly the capacity
    assert (np.diff(np.sort(_check_windows(docs, w, 20))) >= 20).all()
    with pytest.raises(ValueError, match="empty corpus"):
        data.sample_windows([], 1, 2, 0)
    with pytest.raises(ValueError, match=">= 1"):
        data.sample_windows(docs, 0, 2, 0)


def test_non_overlapping_stream_is_uniform():
    """Stars and bars: every non-overlapping configuration equally likely (brute-force enumeration)."""
    L, n, T, draws = 7, 2, 2, 900
    configs = [c for c in itertools.combinations(range(L - T + 1), n) if c[1] - c[0] >= T]
    assert len(configs) == 10  # C(L - nT + n, n)
    docs = [np.arange(L, dtype=np.int32)]
    counts = dict.fromkeys(configs, 0)
    for s in range(draws):
        w = data.sample_windows(docs, n, T, s, non_overlapping=True)
        counts[tuple(sorted(w.offsets.tolist()))] += 1
    p = 1 / len(configs)
    sem = np.sqrt(draws * p * (1 - p))
    assert all(abs(c - draws * p) < 5 * sem for c in counts.values()), counts


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
@settings(max_examples=8, deadline=None)
@given(lengths=st.lists(st.integers(0, 60), min_size=1, max_size=5), T=st.integers(1, 8),
       seed=st.integers(0, 2**16), within=st.booleans(), disjoint=st.booleans())
def test_sample_windows_property(lengths, T, seed, within, disjoint):
    docs = _corpus(lengths, seed)
    cap = data.window_capacity(docs, T)
    key = {(False, False): "stream_starts", (False, True): "stream_disjoint",
           (True, False): "doc_starts", (True, True): "doc_disjoint"}[(within, disjoint)]
    n = max(1, cap[key] // 3)
    if cap[key] < n:
        with pytest.raises(ValueError):
            data.sample_windows(docs, n, T, seed, within_document=within, non_overlapping=disjoint)
        return
    w = data.sample_windows(docs, n, T, seed, within_document=within, non_overlapping=disjoint)
    g = _check_windows(docs, w, T)
    if within:
        assert (w.offsets + T <= np.array(lengths)[w.doc_labels]).all()
    if disjoint:
        assert (np.diff(np.sort(g)) >= T).all()


def test_sample_topics():
    docs = _corpus([100, 700, 650, 90, 900, 640])
    w = data.sample_topics(docs, 3, 8, 64, 0)
    assert w.ids.shape == (24, 64)
    _check_windows(docs, w, 64)
    labels = w.doc_labels.reshape(3, 8)
    assert (labels == labels[:, :1]).all() and len(set(labels[:, 0].tolist())) == 3
    assert set(labels[:, 0].tolist()) <= {1, 2, 4, 5}  # documents with >= 8*64 tokens
    for r in range(3):
        assert (np.diff(np.sort(w.offsets.reshape(3, 8)[r])) >= 64).all()
    np.testing.assert_array_equal(w.ids, data.sample_topics(docs, 3, 8, 64, 0).ids)
    with pytest.raises(ValueError, match=r"only 4 of 6 documents qualify"):
        data.sample_topics(docs, 5, 8, 64, 0)
    with pytest.raises(ValueError, match=r"fewer than n_per_doc\*T"):
        data.sample_topics(docs, 2, 8, 64, 0, docs=[0, 1])
    t = data.sample_topics(docs, 2, 8, 64, 1, docs=[4, 1])
    assert t.doc_labels.tolist() == [4] * 8 + [1] * 8


def test_topics_on_wikitext_no_repeats():
    docs = data.wikitext2("valid")
    tok = data.CharTokenizer.from_text("".join(t for _, t in docs))
    corpus = data.tokenize_documents(docs[:10], tok)
    w = data.sample_topics(corpus, 4, 64, 128, 1234)
    assert len({r.tobytes() for r in w.ids}) == 256


# ------------------------------------------------------------------------------------- synthetic

def _digit_sum(x: int) -> int:
    return sum(int(c) for c in str(x))


@pytest.mark.parametrize("carry", [True, False])
def test_addition_problems(carry):
    L = 10
    probs = data.addition_problems(7, 400, L, carry=carry)
    tok = data.addition_tokenizer()
    lens = set()
    for a, b in probs:
        for x in (a, b):
            s = str(x)
            assert L // 2 <= len(s) <= L
            lens.add(len(s))
        no_carry = _digit_sum(a + b) == _digit_sum(a) + _digit_sum(b)  # each carry costs 9
        if not carry:
            assert no_carry and not data.has_carry(a, b)
        else:
            assert data.has_carry(a, b) == (not no_carry)
        s = data.addition_string(a, b)
        lhs, rhs = s[:-1].split("=")
        x, y = lhs.split("+")
        assert int(x) == a and int(y) == b and int(rhs[::-1]) == a + b and s.endswith("\n")
        assert tok.decode(tok.encode(s)) == s
    assert lens == set(range(L // 2, L + 1))
    if carry:
        assert sum(data.has_carry(a, b) for a, b in probs) > 300
    assert probs == data.addition_problems(7, 400, L, carry=carry)
    assert probs != data.addition_problems(8, 400, L, carry=carry)


@pytest.mark.slow  # quick subset (-m "not slow") under 3 min
def test_encode_addition_mask():
    probs = [(12, 345), (9, 9)]
    b = data.encode_addition(probs, 12)
    tok = data.addition_tokenizer()
    assert b.ids.dtype == np.int32 and b.ids.shape == (2, 12)
    assert tok.decode(b.ids[0]) == "12+345=753\n\n"
    assert b.loss_mask[0].tolist() == [False] * 7 + [True] * 4 + [False]
    assert tok.decode(b.ids[1][b.loss_mask[1]]) == "81\n"
    with pytest.raises(ValueError, match="needs 11 tokens but T=10"):
        data.encode_addition(probs, 10)
    full = data.addition_batch(0, 50, 10, 34)
    assert full.ids.shape == (50, 34)


def test_randomize_tokens():
    ids = jax.numpy.asarray(np.arange(40, dtype=np.int32).reshape(2, 20))
    k = jax.random.key(0)
    np.testing.assert_array_equal(data.randomize_tokens(k, ids, 50257, 0), ids)
    r1 = np.asarray(data.randomize_tokens(k, ids, 50257, 1))
    np.testing.assert_array_equal(r1[:, :10], np.asarray(ids)[:, :10])
    assert (r1[:, 10:] != np.asarray(ids)[:, 10:]).mean() > 0.9
    r2 = np.asarray(data.randomize_tokens(k, ids, 50257, 2))
    assert (r2 != np.asarray(ids)).mean() > 0.9 and r2.max() < 50257 and r2.min() >= 0
    u = np.asarray(data.random_tokens(k, (4000,), 50257))
    assert u.dtype == np.int32 and u.min() >= 0 and u.max() < 50257 and u.max() > 45000
    with pytest.raises(ValueError, match="level"):
        data.randomize_tokens(k, ids, 10, 3)


def test_modular_addition_split():
    md = data.modular_addition_data(113, 0.3, 0)
    assert md.x_train.shape == (3830, 3) and md.x_test.shape == (113 * 113 - 3830, 3)
    allx = np.concatenate([md.x_train, md.x_test])
    ally = np.concatenate([md.y_train, md.y_test])
    assert (allx[:, 2] == 113).all()
    assert len({(a, b) for a, b, _ in allx.tolist()}) == 113 * 113
    np.testing.assert_array_equal(ally, (allx[:, 0].astype(np.int64) + allx[:, 1]) % 113)
    np.testing.assert_array_equal(md.x_train, data.modular_addition_data(113, 0.3, 0).x_train)
    assert not np.array_equal(md.x_train, data.modular_addition_data(113, 0.3, 1).x_train)
    assert data.modular_addition_data(7, 0.5, 0).x_train.shape == (24, 3)
    with pytest.raises(ValueError, match="train_frac"):
        data.modular_addition_data(113, 1.0)
