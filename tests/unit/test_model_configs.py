"""HFConfig's family-neutral sizes for every Hugging Face port, its size checks, and the training-preset
builders (addition_train_config / shakespeare_train_config / nanogpt_adamw). No model is run: fast."""

from __future__ import annotations

import pytest

from geomjax.errors import GeomjaxError
from geomjax.convert import config_from_hf
from geomjax.models import BertConfig, BloomConfig, GPT2Config, LlamaConfig
from geomjax.train import (
    AdditionOptions,
    ModularOptions,
    addition_config,
    addition_train_config,
    get_config,
    nanogpt_adamw,
    shakespeare_config,
)
from geomjax.train.checkpoint import config_jsonable

NEUTRAL = ("d_model", "num_layers", "num_heads", "num_kv_heads", "head_dim", "d_mlp", "max_positions")


@pytest.mark.parametrize("config, expected", [
    # (d, L, H, H_kv, K, F, P) written out from each family's Hugging Face field names
    (GPT2Config(vocab_size=11, n_positions=16, n_embd=12, n_layer=3, n_head=4), (12, 3, 4, 4, 3, 48, 16)),
    (GPT2Config(vocab_size=11, n_positions=16, n_embd=12, n_layer=3, n_head=4, n_inner=20), (12, 3, 4, 4, 3, 20, 16)),
    (BertConfig(vocab_size=11, hidden_size=12, num_hidden_layers=2, num_attention_heads=3, intermediate_size=7,
                max_position_embeddings=9), (12, 2, 3, 3, 4, 7, 9)),
    (BloomConfig(vocab_size=11, hidden_size=12, n_layer=2, n_head=6), (12, 2, 6, 6, 2, 48, None)),
    (LlamaConfig(vocab_size=11, hidden_size=12, intermediate_size=5, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=6, max_position_embeddings=32), (12, 2, 4, 2, 6, 5, None)),
])
def test_neutral_sizes(config, expected):
    assert tuple(getattr(config, n) for n in NEUTRAL) == expected
    assert config.display_name == {"gpt2": "GPT2", "bert": "BERT", "bloom": "BLOOM", "llama": "Llama"}[config.model_type]


_GPT2 = dict(vocab_size=11, n_positions=16, n_embd=12, n_layer=3, n_head=4)
_BERT = dict(vocab_size=11, hidden_size=12, num_hidden_layers=2, num_attention_heads=3, intermediate_size=7,
             max_position_embeddings=9)
_BLOOM = dict(vocab_size=11, hidden_size=12, n_layer=2, n_head=6)
_LLAMA = dict(vocab_size=11, hidden_size=16, intermediate_size=5, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=32)


@pytest.mark.parametrize("make, match", [
    (lambda: GPT2Config(**_GPT2 | dict(n_embd=10)), "GPT2Config: n_embd=10 is not divisible by n_head=4"),
    (lambda: GPT2Config(**_GPT2 | dict(n_layer=0)), "GPT2Config: n_layer must be >= 1, got 0"),
    (lambda: BertConfig(**_BERT, type_vocab_size=0), "BertConfig: type_vocab_size must be >= 1"),
    (lambda: BloomConfig(**_BLOOM | dict(hidden_size=10, n_head=4)),
     "BloomConfig: hidden_size=10 is not divisible by n_head=4"),
    (lambda: LlamaConfig(**_LLAMA, num_key_value_heads=0), "LlamaConfig: num_key_value_heads must be >= 1"),
])
def test_size_checks(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("cls, sizes", [(GPT2Config, _GPT2), (BertConfig, _BERT), (BloomConfig, _BLOOM),
                                        (LlamaConfig, _LLAMA)])
def test_sizes_are_required_keywords(cls, sizes):
    # no reference-checkpoint default stands in for a forgotten size, and sizes are never positional
    for name in sizes:
        with pytest.raises(TypeError, match=name):
            cls(**{k: v for k, v in sizes.items() if k != name})
    with pytest.raises(TypeError, match="positional"):
        cls(*sizes.values())


def test_llama_head_dim_need_not_divide():
    # Llama's K is a field: d = 12 with H = 5 heads of K = 4 is a valid config
    assert LlamaConfig(**_LLAMA | dict(hidden_size=12, num_attention_heads=5), num_key_value_heads=5,
                       head_dim=4).head_dim == 4


def test_llama_derived_sizes_as_transformers():
    # unset H_kv and K are derived as transformers' LlamaConfig derives them: H_kv = H, K = d / H
    c = LlamaConfig(**_LLAMA)
    explicit = LlamaConfig(**_LLAMA, num_key_value_heads=4, head_dim=4)
    assert (c.num_key_value_heads, c.head_dim, c.num_kv_heads) == (4, 4, 4)
    assert c == explicit and hash(c) == hash(explicit)


def test_llama_config_json_without_derived_sizes():
    # transformers writes null (or nothing) for an unset num_key_value_heads / head_dim: derived, not defaulted
    base = dict(model_type="llama", vocab_size=11, hidden_size=16, intermediate_size=5, num_hidden_layers=2,
                num_attention_heads=4)
    for extra in ({}, {"num_key_value_heads": None, "head_dim": None}):
        c = config_from_hf(base | extra)
        assert (c.num_key_value_heads, c.head_dim, c.max_position_embeddings) == (4, 4, 2048)
    assert config_from_hf(base | {"num_key_value_heads": 2, "head_dim": 8}).head_dim == 8


def test_nanogpt_adamw_recipe():
    o = nanogpt_adamw(1e-3, 1e-4, 100, 5000, decay_embeddings=True)
    assert (o.lr, o.final_lr, o.warmup_steps, o.decay_steps) == (1e-3, 1e-4, 100, 5000)
    assert (o.schedule, o.b1, o.b2, o.weight_decay, o.decay, o.grad_clip, o.decay_embeddings) == (
        "cosine", 0.9, 0.99, 0.1, "matrices", 1.0, True)


def test_addition_train_config():
    c = addition_train_config(7, n_layers=1, n_heads=2, d_model=16, d_mlp=32, lr=2e-3, final_lr=2e-4,
                              warmup_steps=3, batch_size=8, total_steps=50, steps_per_call=10, n_train=64,
                              optim={"grad_clip": None}, seed=5)
    # "a+b=c\n" with 7-digit operands and an 8-digit sum: 7 + 1 + 7 + 1 + 8 + 1 = 25 characters, the model reads 24
    assert c.seq_len == c.model.max_len == 24 and c.model.vocab_size == 13
    assert (c.task, c.options, c.seed, c.batch_size) == ("addition", AdditionOptions(7, True, 64), 5, 8)
    # the cosine's horizon follows the run (issue 37): not pinned, so it is total_steps
    assert (c.optim.decay_steps, c.optim.horizon(c.total_steps), c.optim.grad_clip, c.optim.weight_decay) == (
        None, 50, None, 0.1)
    paper = addition_config("paper")  # App. A as printed (issue 43): 8 layers, 8 heads, d 512, dropout 0.1, ...
    assert (paper.seq_len, paper.model.n_layers, paper.model.n_heads, paper.model.d_model, paper.model.dropout,
            paper.options.n_train) == (33, 8, 8, 512, 0.1, 100_000)
    o = paper.optim  # ... AdamW weight decay 0.1, lr 5e-5 cosine after 1,000 warm-up steps, batch 64, 100K steps
    assert (o.lr, o.schedule, o.warmup_steps, o.weight_decay, paper.batch_size, paper.total_steps) == (
        5e-5, "cosine", 1000, 0.1, 64, 100_000)


def test_train_config_options_belong_to_their_task():
    add, mod, sha = (get_config(t, "smoke") for t in ("addition", "modular", "shakespeare"))
    assert mod.options == ModularOptions(23, 0.3) and sha.options is None
    # None on addition / modular means that task's defaults
    assert add.replace(options=None).options == AdditionOptions() == AdditionOptions(10, True, 100_000)  # App. E
    assert mod.replace(options=None).options == ModularOptions(113, 0.3)
    with pytest.raises(GeomjaxError, match="'shakespeare' takes no options"):
        sha.replace(options=ModularOptions(59))
    with pytest.raises(GeomjaxError, match="'modular' takes options=ModularOptions"):
        mod.replace(options=AdditionOptions())
    with pytest.raises(GeomjaxError, match="'addition' takes options=AdditionOptions"):
        add.replace(options=ModularOptions())
    for bad, match in ((lambda: AdditionOptions(max_digits=0), "max_digits"),
                       (lambda: AdditionOptions(n_train=0), "n_train"),
                       (lambda: ModularOptions(p=1), "p must"),
                       (lambda: ModularOptions(train_frac=1.0), "train_frac")):
        with pytest.raises(GeomjaxError, match=match):
            bad()
    # hashable (build_programs caches on the config) and stored nested under "options"
    assert len({add, add.replace(options=AdditionOptions(4, False, 512))}) == 2
    assert config_jsonable(mod)["options"] == {"p": 23, "train_frac": 0.3}


def test_shakespeare_presets_read_the_model_context():
    for variant, T in (("smoke", 32), ("cpu", 64), ("paper", 256)):
        c = shakespeare_config(variant)
        assert c.seq_len == c.model.max_len == T
        assert c.optim.decay_steps is None and c.optim.horizon(c.total_steps) == c.total_steps
        assert c.optim.decay_embeddings
