"""GPT-2 BPE and BERT WordPiece tokenizers vs `transformers`' tokenizers built from the same files."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import geomjax as gj  # noqa: E402
from geomjax.convert import tokenizers as T  # noqa: E402

TEXTS = [
    "Hello world!",
    "  leading spaces\n\nnew lines\ttabs   trailing  ",
    "héllo wörld 日本語 🤖 ½ café naïve",
    "<|endoftext|>The end.<|endoftext|>",
    "it's don't we'll I'M 123 4567 3.14159 $100",
    "The quick brown fox—jumps!? [SEP] [MASK] (really)",
    "",
]


@pytest.fixture(scope="module")
def gpt2_tok():
    return T.gpt2_tokenizer()


@pytest.fixture(scope="module")
def bert_tok():
    return T.bert_tokenizer()


def test_gpt2_matches_transformers(gpt2_tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    enc, merges = T.gpt2_bpe_files()
    # transformers >= 5 ignores vocab_file=/merges_file= in the constructor: load from a directory
    shutil.copy(enc, tmp_path / "vocab.json")
    shutil.copy(merges, tmp_path / "merges.txt")
    ref = transformers.GPT2TokenizerFast.from_pretrained(str(tmp_path))
    assert gpt2_tok.vocab_size == len(ref) == 50257
    for s in TEXTS:
        ids = gpt2_tok.encode(s)
        assert ids.dtype == np.int32
        assert ids.tolist() == ref(s)["input_ids"], s
        assert gpt2_tok.decode(ids) == s
    assert gpt2_tok.encode("Hello world").tolist() == [15496, 995]  # documented GPT-2 ids
    assert gpt2_tok.token_to_id("<|endoftext|>") == 50256
    batch = gpt2_tok.encode_batch(TEXTS[:3])
    assert [b.tolist() for b in batch] == [gpt2_tok.encode(s).tolist() for s in TEXTS[:3]]


def test_bert_matches_transformers(bert_tok):
    transformers = pytest.importorskip("transformers")
    ref = transformers.BertTokenizerFast.from_pretrained(str(gj.convert.minilm_path()))
    assert bert_tok.vocab_size == len(ref) == 30522
    for s in TEXTS:
        with_special = bert_tok.encode(s, add_special_tokens=True)
        assert with_special.dtype == np.int32
        assert with_special.tolist() == ref(s)["input_ids"], s
        assert bert_tok.encode(s).tolist() == ref(s, add_special_tokens=False)["input_ids"], s
    # MiniLM is uncased: lowercased and accents stripped, as its tokenizer_config.json says
    assert bert_tok.encode("CAFÉ").tolist() == bert_tok.encode("cafe").tolist()
    cased = T.bert_tokenizer(lowercase=False, strip_accents=False)
    assert cased.encode("CAFÉ").tolist() != bert_tok.encode("CAFÉ").tolist()


def test_tokenize_documents_batches_like_encode(bert_tok):
    # tokenize_documents encodes a TextTokenizer's documents in chunks through encode_batch (Rust threads):
    # the ids must be those of one encode per document, across chunk boundaries (70 > 64 documents)
    docs = [(f"d{i}", TEXTS[i % 6] + " word" * i) for i in range(70)]
    corpus = gj.data.tokenize_documents(docs, bert_tok)
    assert corpus.names == tuple(n for n, _ in docs)
    assert [a.tolist() for a in corpus.ids] == [bert_tok.encode(t).tolist() for _, t in docs]
    assert all(a.dtype == np.int32 for a in corpus.ids)
    padded = T.bert_tokenizer()
    padded.backend.enable_padding()  # a tokenizer.json may enable padding: encode_batch must not pad
    texts = ["a", "a much longer text than the first"]
    assert [b.tolist() for b in padded.encode_batch(texts)] == [bert_tok.encode(t).tolist() for t in texts]


def test_tokenize_documents_cache(bert_tok, tmp_path):
    # ids kept under the sha256 of the tokenizer's fingerprint and the documents: a hit is the same ids
    docs = [("a", TEXTS[1]), ("b", TEXTS[2]), ("c", TEXTS[5])]
    first = gj.data.tokenize_documents(docs, bert_tok, cache=tmp_path)
    (entry,) = tmp_path.glob("*.npz")

    class Twin:  # the same fingerprint, but tokenizing would fail: a hit must not tokenize
        fingerprint = bert_tok.fingerprint

        def __call__(self, text):
            raise AssertionError("tokenized despite a cache hit")

    hit = gj.data.tokenize_documents(docs, Twin(), cache=tmp_path)
    assert hit.names == first.names and all(a.dtype == np.int32 for a in hit.ids)
    assert [a.tolist() for a in hit.ids] == [bert_tok.encode(t).tolist() for _, t in docs]
    cased = T.bert_tokenizer(lowercase=False, strip_accents=False)
    assert cased.fingerprint != bert_tok.fingerprint
    gj.data.tokenize_documents(docs, cased, cache=tmp_path)  # another tokenizer: another entry
    gj.data.tokenize_documents([("a", TEXTS[1] + "!")] + docs[1:], bert_tok, cache=tmp_path)  # other text
    gj.data.tokenize_documents([("A", TEXTS[1])] + docs[1:], bert_tok, cache=tmp_path)  # other name
    assert len(list(tmp_path.glob("*.npz"))) == 4
    entry.write_bytes(b"not an npz")  # a damaged entry is recomputed and rewritten
    again = gj.data.tokenize_documents(docs, bert_tok, cache=tmp_path)
    assert [a.tolist() for a in again.ids] == [a.tolist() for a in first.ids]
    assert gj.data.tokenize_documents(docs, Twin(), cache=tmp_path).names == first.names


def test_check_tokenizer(gpt2_tok, bert_tok):
    minilm = gj.convert.load_config(gj.convert.minilm_path())
    T.check_tokenizer(bert_tok, minilm, exact=True)
    with pytest.raises(ValueError, match=r"50257 ids but the model's vocab_size is 30522"):
        T.check_tokenizer(gpt2_tok, minilm)
    padded = gj.models.GPT2Config(vocab_size=50304, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    T.check_tokenizer(gpt2_tok, padded)  # a padded vocabulary covers every id
    with pytest.raises(ValueError, match="50257 ids"):
        T.check_tokenizer(gpt2_tok, padded, exact=True)
    with pytest.raises(ValueError, match="vocab_size is 24"):
        T.check_tokenizer(gpt2_tok, gj.models.GPT2Config(vocab_size=24, n_positions=16, n_embd=8, n_layer=1, n_head=2))


def test_tokenizer_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        T.gpt2_tokenizer(tmp_path / "a.json", tmp_path / "b.bpe")
    with pytest.raises(ValueError, match="both"):
        T.gpt2_tokenizer(tmp_path / "a.json")
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        T.bert_tokenizer(tmp_path)
