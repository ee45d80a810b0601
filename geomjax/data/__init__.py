"""Offline corpora, document-labelled window sampling, character tokenizer, synthetic generators.

::

    from geomjax import data
    docs = data.load_corpus("wikitext2")                     # [(title, text), ...]
    corpus = data.tokenize_documents(docs, tokenize)         # any tokenize(text) -> ids
    w = data.sample_windows(corpus, C, T, seed, within_document=True, non_overlapping=True)
    w.ids (C, T) int32, w.doc_labels (C,), w.offsets (C,)
    t = data.sample_topics(corpus, n_docs=4, n_per_doc=64, T=128, key_or_seed=0)
"""

from geomjax.data.chars import CharTokenizer
from geomjax.data.corpora import (
    Document,
    BUNDLED_FILES,
    TokenizedCorpus,
    as_token_array,
    STDLIB_SNAPSHOT,
    corpus_kind,
    corpus_source,
    data_dir_override,
    hf_dataset,
    join_records,
    load_corpus,
    local_text,
    pydoc_topics,
    read_bundled_file,
    read_data_file,
    split_text,
    stdlib_python,
    stdlib_snapshot,
    tiny_shakespeare,
    tokenize_documents,
    wikitext2,
    wikitext2_articles,
)
from geomjax.data.sampling import (
    Windows,
    as_key,
    sample_topics,
    sample_windows,
    window_capacity,
    windows_in_batches,
)
from geomjax.data.synthetic import (
    ADDITION_VOCAB,
    AdditionBatch,
    ModularData,
    addition_batch,
    addition_problems,
    addition_string,
    addition_tokenizer,
    decode_addition,
    encode_addition,
    has_carry,
    modular_addition_data,
    parse_addition_answer,
    random_tokens,
    randomize_tokens,
)

__all__ = [
    "ADDITION_VOCAB",
    "AdditionBatch",
    "BUNDLED_FILES",
    "CharTokenizer",
    "Document",
    "ModularData",
    "TokenizedCorpus",
    "Windows",
    "addition_batch",
    "addition_problems",
    "addition_string",
    "addition_tokenizer",
    "as_key",
    "as_token_array",
    "STDLIB_SNAPSHOT",
    "corpus_kind",
    "corpus_source",
    "data_dir_override",
    "decode_addition",
    "encode_addition",
    "has_carry",
    "hf_dataset",
    "join_records",
    "load_corpus",
    "local_text",
    "modular_addition_data",
    "parse_addition_answer",
    "pydoc_topics",
    "random_tokens",
    "randomize_tokens",
    "read_bundled_file",
    "read_data_file",
    "sample_topics",
    "sample_windows",
    "split_text",
    "stdlib_python",
    "stdlib_snapshot",
    "tiny_shakespeare",
    "tokenize_documents",
    "wikitext2",
    "wikitext2_articles",
    "window_capacity",
    "windows_in_batches",
]
