"""Shapes: the jaxtyping annotations of the public array functions, checked at test time.

pyproject's pytest ``addopts`` turns on jaxtyping's import hook with beartype for the modules in
:data:`CHECKED_MODULES` (``--jaxtyping-packages=...,geomjax.typing.typechecker``): during the whole test run
every call of one of their functions checks its arguments and result against the annotations
(shapes shared across arguments included). Here: the hook is on for exactly those modules; every
public function of theirs that takes or returns arrays is annotated; a sample of annotations,
checked explicitly, agree with valid inputs and reject a wrong shape.

Tests that pass a deliberately wrong shape to test geomjax's own error message (what a caller who
runs without the checker gets) run that call under :func:`unchecked_shapes`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil
import typing

import jaxtyping
import numpy as np
import pytest
from jaxtyping import TypeCheckError, jaxtyped

from geomjax import attention as att
from geomjax import decomposition as dec
from geomjax import fourier as fo
from geomjax import geometry as geo
from geomjax import kernel_factorization as kf
from geomjax import localization as loc
from geomjax import smoothness as sm
from geomjax import spectral as sp
from geomjax.typing import typechecker

R = np.random.default_rng(0)

CHECKED_PACKAGES = ("geomjax.theory", "geomjax.tools", "geomjax.models", "geomjax.train", "geomjax.convert")
"""The packages pyproject's ``--jaxtyping-packages`` instruments whole, by folder: every theory module, the
tools that read models (extraction, the attention and clock probes), the model ports and their Flax
modules, training, conversion. A new module in one of these folders is checked without being listed."""

CHECKED_MODULES = ("geomjax.data.sampling", "geomjax.analysis.lens")
"""Single modules of other layers that the hook also instruments (window sampling, the lens)."""

NO_ARRAYS = {
    "geomjax.tools.clock_probe.analyze": "GrokkingResult -> dict of arrays and numbers",
    "geomjax.tools.clock_probe.key_series": "GrokkingResult -> per-snapshot dicts of frequency lists and numbers",
    "geomjax.theory.decomposition.stream_merge": "StreamState -> StreamState (annotated dataclasses)",
    "geomjax.theory.geometry.mean_abs_cos_isotropic": "d -> float",
    "geomjax.theory.geometry.expected_max_abs_cos_isotropic": "(d, n) -> float",
    "geomjax.theory.smoothness.corrected_constant": "(T, k, m) -> float",
    "geomjax.theory.gaussian.xavier_variance": "(n_in, n_out) -> float",
    "geomjax.theory.gaussian.mp_edges": "(n, m, sigma2) -> (float, float)",
    "geomjax.theory.gaussian.wishart_moments": "(n, m, sigma2) -> (float, float)",
    "geomjax.theory.gaussian.sigma1_sq_tw": "(n, sigma2) -> float",
    "geomjax.theory.gaussian.taylor_noise_var_printed": "(n, l) -> float",
    "geomjax.theory.gaussian.bilinear_fourth_moment": "n -> (float, float)",
    "geomjax.theory.localization.find_qk_heads": "parameter tree -> names of its W_q/W_k entries",
    "geomjax.theory.localization.locater_loss": "loss function -> loss function",
    "geomjax.theory.localization.add_locater_gradient": "(kappa1, kappa2) -> optax transformation",
    "geomjax.train.cost.count_params": "ToyConfig -> (int, int) (from shapes only)",
    "geomjax.train.cost.training_cost": "sizes -> TrainingCost (numbers)",
    "geomjax.train.cost.toy_training_cost": "TrainConfig -> TrainingCost (numbers)",
    "geomjax.theory.kernel_factorization.n_noise_cross_terms": "(n1, n2) -> int",
    "geomjax.theory.montecarlo.merge": "(Estimate, Estimate) -> Estimate",
    "geomjax.theory.montecarlo.merge_all": "Estimates -> Estimate",
    "geomjax.data.sampling.window_capacity": "token documents -> dict of counts",
    "geomjax.tools.extraction.hidden_state_forward": "model -> forward function",
    "geomjax.tools.extraction.mixed_precision": "forward function -> forward function",
    "geomjax.tools.extraction.scan_forward": "model -> ScanForward (a forward function)",
    "geomjax.tools.extraction.param_specs": "parameter tree -> PartitionSpec tree",
    "geomjax.tools.extraction.place_params": "parameter tree -> the same tree placed on a mesh",
    "geomjax.tools.extraction.plan_step": "parameter shapes (ShapeDtypeStructs) -> StepPlan of numbers",
    "geomjax.theory.decomposition.class_scatter_init": "(K, d, dtype) -> zero ClassScatter",
    "geomjax.analysis.lens.load": "name -> Model",
    "geomjax.analysis.lens.model_source": "model name -> (kind, directory)",
    "geomjax.analysis.lens.cache_size": "(Model, batch shape, names) -> CacheSize (bytes, from eval_shape)",
    "geomjax.analysis.lens.patching_sweep": "(Model, texts or ids, metric) -> PatchingSweep (arrays inside)",
    "geomjax.models.common.missing_head_message": "config -> message",
    "geomjax.theory.fourier.fourier_basis_names": "p -> the basis rows' names",
    "geomjax.tools.attention_probe.describe_model": "model -> AttentionModel (its sizes and conventions)",
    # models: configs, module factories, closures
    "geomjax.models.common.hook_points": "names -> HookPoint modules",
    "geomjax.models.interface.model_from_config": "config -> Flax module",
    "geomjax.models.interface.model_interface": "model -> ModelInterface (whose methods are annotated)",
    "geomjax.models.registry.family_of": "config -> Family record",
    "geomjax.models.registry.family_of_model_type": "config.json dict -> Family record",
    "geomjax.models.toy.bao_config": "sizes -> ToyConfig",
    "geomjax.models.toy.nanda_config": "p -> ToyConfig",
    "geomjax.models.toy.nanogpt_config": "vocab size -> ToyConfig",
    "geomjax.models.toy.check_one_layer": "ToyConfig -> None (raises)",
    "geomjax.models.toy_run.toy_forward": "ToyRun -> forward function",
    # train: configs, programs (closures), host loops over pytrees, paths, logged series' findings
    "geomjax.train.anomalies.describe": "Anomaly records -> text",
    "geomjax.train.anomalies.last_stable_epoch": "snapshot epochs (a list), Anomaly records -> epoch",
    "geomjax.train.checkpoint.checkpoint_path": "(folder, step) -> path",
    "geomjax.train.checkpoint.config_jsonable": "config -> JSON value",
    "geomjax.train.checkpoint.latest_checkpoint": "folder -> path",
    "geomjax.train.checkpoint.list_checkpoints": "folder -> (step, path) pairs",
    "geomjax.train.grokking.config_hash": "GrokkingConfig -> str",
    "geomjax.train.grokking.grokking_config": "preset -> GrokkingConfig",
    "geomjax.train.grokking.grokking_data": "GrokkingConfig -> GrokkingData (a NamedTuple of arrays)",
    "geomjax.train.grokking.grokking_init": "GrokkingConfig -> TrainState (a struct of arrays)",
    "geomjax.train.grokking.load_grokking_run": "(folder, config) -> GrokkingResult",
    "geomjax.train.grokking.make_run_chunk": "(config, epochs) -> jitted program",
    "geomjax.train.grokking.run_json": "GrokkingConfig -> dict (its stored JSON form)",
    "geomjax.train.grokking.train_grokking": "config -> GrokkingResult (the host loop)",
    "geomjax.train.grokking.init_program": "GrokkingConfig -> jitted init program",
    "geomjax.train.grokking.metrics_program": "GrokkingConfig -> jitted metrics program",
    "geomjax.train.grokking.chunk_program": "(config, epochs) -> unjitted chunk program",
    "geomjax.train.grokking.resume_state": "(folder, TrainState, metadata) -> (TrainState, epoch)",
    "geomjax.train.grokking_seeds.continues": "(config, config) -> bool",
    "geomjax.train.grokking_seeds.load_grokking_seeds": "(folder, config, seeds) -> GrokkingSeeds",
    "geomjax.train.grokking_seeds.make_seeds_chunk": "(config, epochs) -> jitted vmapped program",
    "geomjax.train.grokking_seeds.seed_result": "GrokkingSeeds -> GrokkingResult",
    "geomjax.train.grokking_seeds.seeds_data": "(config, seeds) -> GrokkingData (a NamedTuple of arrays)",
    "geomjax.train.grokking_seeds.seeds_init": "(config, seeds) -> TrainState (a struct of arrays)",
    "geomjax.train.grokking_seeds.train_grokking_seeds": "(config, seeds) -> GrokkingSeeds (the host loop)",
    "geomjax.train.locater.fairseq_adam": "numbers -> OptimConfig",
    "geomjax.train.locater.load_wikitext_words": "config -> WordData",
    "geomjax.train.locater.build": "config -> Programs (closures)",
    "geomjax.train.locater.run_sweep": "config -> SweepResult (the host loop)",
    "geomjax.train.loop.check_cadences": "(length, cadences) -> None (raises)",
    "geomjax.train.loop.make_eval_fn": "loss function -> program",
    "geomjax.train.loop.make_train_chunk": "step -> program",
    "geomjax.train.loop.make_train_step": "loss function, optimizer -> step program",
    "geomjax.train.loop.jit_train_step": "step -> jitted step",
    "geomjax.train.loop.train_loop": "TrainState, chunk program, data -> (TrainState, History) (the host loop)",
    "geomjax.train.optim.check_length_change": "(OptimConfig, old and new length) -> None (raises)",
    "geomjax.train.optim.check_run_length": "(OptimConfig, length) -> None (raises)",
    "geomjax.train.optim.effective_schedule": "(OptimConfig, length) -> dict of learning rates",
    "geomjax.train.optim.make_optimizer": "OptimConfig -> optax transformation",
    "geomjax.train.optim.make_schedule": "OptimConfig -> schedule",
    "geomjax.train.optim.nanogpt_adamw": "numbers -> OptimConfig",
    "geomjax.train.optim.schedule_record": "(schedule, OptimConfig, length) -> dict of learning rates",
    "geomjax.train.tasks.addition_config": "variant -> TrainConfig",
    "geomjax.train.tasks.addition_train_config": "sizes -> TrainConfig",
    "geomjax.train.tasks.build_programs": "TrainConfig -> Programs (closures)",
    "geomjax.train.tasks.fit": "TrainConfig -> FitResult (the host loop)",
    "geomjax.train.tasks.get_config": "(task, variant) -> TrainConfig",
    "geomjax.train.tasks.init_state": "TrainConfig -> TrainState (a struct of arrays)",
    "geomjax.train.tasks.load_task_data": "TrainConfig -> the task's data (per task: token arrays or NamedTuples)",
    "geomjax.train.tasks.merged_history": "folder -> dict of the history files' steps and metrics (read from JSON)",
    "geomjax.train.tasks.modular_config": "variant -> TrainConfig",
    "geomjax.train.tasks.shakespeare_config": "variant -> TrainConfig",
    "geomjax.train.tasks.shakespeare_train_config": "ToyConfig, numbers -> TrainConfig",
    "geomjax.train.toy_run.load_toy_run": "folder -> ToyRun",
    # convert: configs, paths, tokenizers
    "geomjax.convert.load_config": "path -> config",
    "geomjax.convert.minilm_path": "-> path",
    "geomjax.convert.safetensors_io.download_checkpoint": "repo id -> path",
    "geomjax.convert.safetensors_io.hf_cache_dir": "-> path",
    "geomjax.convert.safetensors_io.hub_offline": "-> bool",
    "geomjax.convert.safetensors_io.read_config": "path -> dict",
    "geomjax.convert.safetensors_io.resolve_checkpoint": "path -> path",
    "geomjax.convert.safetensors_io.split_revision": "name -> (name, revision)",
    "geomjax.convert.tables.config_from_hf": "config.json dict -> config",
    "geomjax.convert.tables.expected_param_shapes": "config -> tree of ShapeDtypeStructs (no arrays)",
    "geomjax.convert.tokenizers.bert_tokenizer": "path -> TextTokenizer (whose encode/decode are annotated)",
    "geomjax.convert.tokenizers.check_tokenizer": "(tokenizer, config) -> None (raises)",
    "geomjax.convert.tokenizers.checkpoint_tokenizer": "path -> TextTokenizer",
    "geomjax.convert.tokenizers.gpt2_bpe_files": "-> paths",
    "geomjax.convert.tokenizers.gpt2_tokenizer": "paths -> TextTokenizer",
    "geomjax.convert.tokenizers.model_tokenizer": "(path, config) -> TextTokenizer",
}
"""Public functions of :data:`CHECKED_MODULES` that neither take nor return arrays, and why."""


@contextlib.contextmanager
def unchecked_shapes():
    """Switch jaxtyping's runtime check off for a block (or, as a decorator, for a test) that passes a
    deliberately wrong shape in order to test geomjax's own GeomjaxError message. jaxtyping reads the
    switch at every call; programs traced under it are not checked when they are called again."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


def f32(*shape):
    return R.normal(size=shape).astype(np.float32)


P7 = f32(7, 3)
G7 = (P7 @ P7.T).astype(np.float32)
G7c = (G7 - G7.mean(0) - G7.mean(1)[:, None] + G7.mean()).astype(np.float32)

# (function, valid args, args with one wrong shape)
CASES = [
    (dec.decompose, (f32(4, 5, 3),), (f32(4, 5),)),
    (geo.normalized_gram, (f32(5, 3),), (f32(5),)),
    (geo.incoherence, (f32(5, 3), f32(4, 3)), (f32(5, 3), f32(4, 3, 1))),
    (sp.singular_values, (f32(6, 4),), (f32(6),)),
    (sp.stable_rank, (f32(6, 4),), (f32(6, 4, 2),)),
    (sp.dct_gram, (f32(6, 3),), (f32(6),)),
    (sm.reflected_gram, (G7,), (f32(7),)),
    (sm.double_center, (G7,), (f32(7),)),
    (att.causal_softmax, (f32(2, 5, 5),), (f32(5),)),
    (att.w_matrix, (f32(6, 3), f32(6, 3)), (f32(6, 3), f32(6, 2))),
    (kf.log_kernel, (f32(4, 4), f32(4) / 4, f32(4) / 4), (f32(4, 4), f32(4, 1), f32(4))),
    (loc.softmax_input, (f32(5, 3), f32(3, 3), 1.0), (f32(5, 3), f32(3, 2), 1.0)),
    (fo.fourier_coefficients, (f32(7, 3), 7), (f32(7), 7)),
]


def _checked(fn):
    """The function body (inside float64_aware and jit) under jaxtyping + beartype."""
    return jaxtyped(typechecker=typechecker)(inspect.unwrap(fn))


@pytest.mark.parametrize("fn,good,bad", CASES, ids=[f"{c[0].__module__}.{c[0].__name__}" for c in CASES])
def test_annotations_hold_and_reject_wrong_shapes(fn, good, bad):
    checked = _checked(fn)
    checked(*good)  # arguments and the returned shape agree with the annotation
    with pytest.raises(TypeCheckError):
        checked(*bad)


def test_every_theory_function_in_cases_is_annotated():
    for fn, _, _ in CASES:
        hints = inspect.get_annotations(inspect.unwrap(fn), eval_str=True)
        assert "return" in hints and any("[" in str(h) for h in hints.values()), fn


def _checked_module_names():
    yield from CHECKED_MODULES
    for pkg in CHECKED_PACKAGES:
        yield pkg
        yield from (f"{pkg}.{m.name}" for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__))


def _public_functions():
    for name in _checked_module_names():
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            fn = getattr(module, attr)
            if inspect.isfunction(inspect.unwrap(fn)) and inspect.unwrap(fn).__module__ == name:
                yield f"{name}.{attr}", inspect.unwrap(fn)


def _has_array_type(hint) -> bool:
    if isinstance(hint, type) and issubclass(hint, jaxtyping.AbstractArray):
        return True
    if hasattr(hint, "leaftype"):  # jaxtyping.PyTree[leaf type]
        return _has_array_type(hint.leaftype)
    return any(_has_array_type(a) for a in typing.get_args(hint))


def test_every_public_array_function_is_annotated():
    """Every public function of the checked modules has every parameter and its result annotated,
    with at least one jaxtyping array type, unless it is listed in NO_ARRAYS (and then has none)."""
    missing, unlisted, stale = [], [], []
    names = set()
    for qualname, fn in _public_functions():
        names.add(qualname)
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters.values()
        params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        arrays = any(_has_array_type(h) for h in hints.values())
        if qualname in NO_ARRAYS:
            if arrays:
                stale.append(qualname)
            continue
        gaps = [p.name for p in params if p.name not in hints] + ([] if "return" in hints else ["return"])
        if gaps:
            missing.append(f"{qualname}: {gaps}")
        elif not arrays:
            unlisted.append(qualname)
    assert not missing, f"parameters or results without annotations: {missing}"
    assert not unlisted, f"no jaxtyping array annotation (annotate, or list in NO_ARRAYS with why): {unlisted}"
    assert not stale, f"listed in NO_ARRAYS but annotated with array types: {stale}"
    assert set(NO_ARRAYS) <= names, f"NO_ARRAYS names functions that are not public: {set(NO_ARRAYS) - names}"


def test_hook_checks_the_modules_during_the_test_run(pytestconfig):
    """pyproject's addopts turn the hook on for CHECKED_MODULES: a public call with a wrong shape
    raises jaxtyping's TypeCheckError (before geomjax's own validation), except under unchecked_shapes."""
    option = pytestconfig.getoption("--jaxtyping-packages")
    if not option:
        pytest.skip("run without jaxtyping's hook (pyproject's addopts overridden)")
    *packages, checker = option.split(",")
    assert checker == "geomjax.typing.typechecker"
    assert sorted(packages) == sorted(CHECKED_MODULES + CHECKED_PACKAGES)
    with pytest.raises(TypeCheckError):
        geo.normalized_gram(f32(5))
    with unchecked_shapes(), pytest.raises(ValueError, match="rank-2"):
        geo.normalized_gram(f32(5))


def test_hook_checks_models_and_train_in_and_out_of_jit(pytestconfig):
    """The hook also covers the model ports and training: a wrong shape into a loss (eagerly and while
    ``jit`` traces it), a rotary table of the wrong length, ids without a batch axis into a Flax
    module's ``__call__``, and a parameter tree whose leaves are not float arrays raise TypeCheckError."""
    import jax
    from geomjax.models import llama, toy
    from geomjax.models.interface import model_interface
    from geomjax.train import losses

    if not pytestconfig.getoption("--jaxtyping-packages"):
        pytest.skip("run without jaxtyping's hook (pyproject's addopts overridden)")
    logits, targets = f32(2, 5, 7), np.zeros((2, 5), np.int32)
    assert np.isfinite(float(losses.next_token_loss(logits, targets)))
    with pytest.raises(TypeCheckError):
        losses.next_token_loss(logits, targets[:, :4])  # T differs
    with pytest.raises(TypeCheckError):
        jax.jit(losses.cross_entropy)(logits, targets[:1])  # checked at trace time
    x = f32(1, 5, 2, 4)
    with pytest.raises(TypeCheckError):
        llama.apply_rotary(x, f32(6, 4), f32(6, 4))  # tables for T = 6, x has T = 5
    cfg = toy.ToyConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_mlp=16, max_len=8)
    model = toy.ToyTransformer(cfg)
    params = model.init(jax.random.key(0), np.zeros((1, 4), np.int32))["params"]
    with pytest.raises(TypeCheckError):
        model.apply({"params": params}, np.zeros(4, np.int32))  # no batch axis: ids must be (B, T)
    iface = model_interface(model)
    assert len(iface.hidden_states(params, np.zeros((2, 4), np.int32))) == 2
    with pytest.raises(TypeCheckError):
        iface.hidden_states(jax.tree.map(lambda w: w.astype(np.int32), params), np.zeros((2, 4), np.int32))


ARRAY_METHODS = {
    "geomjax.models.interface.ModelInterface": ("forward", "hidden_states", "attention_inputs", "attention_input",
                                                "qkv", "rotary", "score_bias", "head_weights", "qk_matrices",
                                                "norm_weights", "mlp_weights", "embed_unembed", "scale_qk"),
    "geomjax.models.common.CausalLM": ("__call__", "unembed"),
    "geomjax.models.common.PreLNBlock": ("__call__",),
    "geomjax.models.common.MultiHeadAttention": ("__call__",),
    "geomjax.models.common.Embed": ("attend",),
    "geomjax.models.bert.Bert": ("__call__",),
    "geomjax.models.bert.BertLayer": ("__call__",),
    "geomjax.models.llama.RMSNorm": ("__call__",),
    "geomjax.models.toy.ToyTransformer": ("__call__",),
    "geomjax.convert.tokenizers.TextTokenizer": ("encode", "encode_batch", "decode"),
}
"""Public methods that take or return arrays (the model interface, the Flax modules' forward passes,
the tokenizer's ids): every parameter and the result annotated, with a jaxtyping array type."""


@pytest.mark.parametrize("cls_name", sorted(ARRAY_METHODS))
def test_public_array_methods_are_annotated(cls_name):
    module, name = cls_name.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    for meth in ARRAY_METHODS[cls_name]:
        fn = inspect.unwrap(getattr(cls, meth))
        hints = typing.get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        gaps = [p.name for p in params if p.name not in hints] + ([] if "return" in hints else ["return"])
        assert not gaps, f"{cls_name}.{meth}: no annotation for {gaps}"
        assert any(_has_array_type(h) for h in hints.values()), f"{cls_name}.{meth}: no jaxtyping array type"
