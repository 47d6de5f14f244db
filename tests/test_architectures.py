"""Targets users bring: each supported family's structure, exported and decoded exactly.

For Llama-3.2, Qwen2.5, Qwen3 and Phi-3, a tiny random-init target is built from the
family's real configuration, scaled down with its structure kept (grouped KV heads,
Qwen2's qkv bias, Qwen3's qk-norm and separate head_dim, Phi-3's fused projections and
sliding window, Llama-3's RoPE scaling, tied or untied heads), with the SmolLM2 tokenizer
(these vocabularies do not install offline). Its graphs are exported as the bundle
exports a target (export_onnx, export_executorch with exact rows) and decoded with the
shared tiny eager drafter: on eager, onnxruntime and ExecuTorch the target's logits match
eager, greedy speculative output equals target-only output, and on ExecuTorch a
verification call equals one-token calls bit for bit. Gemma-3 is the shared tiny
bundle's target (test_export.py); exporting a whole bundle of a phone-class Llama or
Qwen2.5 shape is benchmarks/cost_curve.py.
"""

import json

import numpy as np
import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.models import ARCHITECTURES, check_architecture, load_tokenizer
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.executorch_runner import ExecuTorchRunner, load_custom_ops
from omnidraft.runtime.onnx_runner import OnnxRunner
from omnidraft.runtime.runner import EagerRunner

from .helpers import random_model
from .test_export import assert_close

pytestmark = pytest.mark.slow  # exports (make test runs it; make test-fast does not)

# One decoder layer: what tells the families apart lies within a layer, and a layer's cache kept apart
# from the next one's is the shared 2-layer bundle's check (test_export.py). Each layer costs the
# ExecuTorch lowering about 6 s on a 2-core machine, the suite's dominant cost.
SMALL = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=1, initializer_range=0.5)
# Each family's public configuration (config.json), reduced to SMALL's sizes; what sets its structure is kept.
FAMILIES = {
    "llama-3.2": ("llama", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                                tie_word_embeddings=True, max_position_embeddings=131072, rope_theta=500000.0,
                                rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    "qwen2.5": ("qwen2", dict(num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
                              tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
                            rope_theta=1e6, tie_word_embeddings=False)),
    "phi-3": ("phi3", dict(num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-5, rope_theta=10000.0,
                           sliding_window=8, tie_word_embeddings=False)),
}
PROMPT = "def add(a, b):\n    return a +"
NEW_TOKENS = 16
MAX_DRAFT = 4
CONTEXT = 64


def family_checkpoint(root, family: str, drafter_path):
    from transformers import AutoConfig

    model_type, fields = FAMILIES[family]
    model = random_model(AutoConfig.for_model(model_type, **SMALL, **fields), seed=3)
    path = root / family
    model.save_pretrained(path)
    load_tokenizer(drafter_path).save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory, drafter_path):
    """One family's tiny target: its eager model and its graphs as the bundle exports a target."""
    from omnidraft.export.executorch_export import export_executorch
    from omnidraft.export.onnx_export import export_onnx
    from omnidraft.models import load_model

    root = tmp_path_factory.mktemp(request.param)
    path = family_checkpoint(root, request.param, drafter_path)
    onnx_meta = export_onnx(load_model(path), root / "target.onnx", CONTEXT, MAX_DRAFT + 1)
    et_meta = export_executorch(load_model(path), root / "target.pte", CONTEXT, MAX_DRAFT + 1, exact_rows=True)
    load_custom_ops(et_meta["executorch_ops"])
    return {"eager": EagerRunner(load_model(path), CONTEXT),
            "onnxruntime": OnnxRunner(root / "target.onnx", onnx_meta, threads=1),
            "executorch": ExecuTorchRunner(root / "target.pte", et_meta)}


@pytest.mark.parametrize("backend", ["eager", "onnxruntime", "executorch"])
def test_family_decodes_exactly(family, backend, tiny_drafter, draft_vocab):
    """Logits match eager; greedy speculative output equals target-only output on the backend."""
    target = family[backend]
    ids = np.random.default_rng(0).integers(5, 40000, size=30)
    for tokens, start in ((ids[:20], 0), (ids[20:21], 20), (ids[21:26], 21)):  # prefill, k=1, k=5
        assert_close(target.forward(tokens, start, len(tokens)), family["eager"].forward(tokens, start, len(tokens)))
    prompt = draft_vocab.tokenizer.encode(PROMPT)
    base = SpeculativeDecoder(target, draft_vocab).generate(
        prompt, GenerationConfig(max_new_tokens=NEW_TOKENS, speculative=False))
    dec = SpeculativeDecoder.with_drafter(target, draft_vocab, tiny_drafter, draft_vocab)
    got = dec.generate(prompt, GenerationConfig(max_new_tokens=NEW_TOKENS, draft_len=MAX_DRAFT))
    assert got.stats.drafted > 0 and got.token_ids == base.token_ids


def test_family_target_graph_verifies_bit_for_bit(family):
    """On ExecuTorch the k-token verification call equals k one-token calls exactly (past Phi-3's window)."""
    runner = family["executorch"]
    ids = np.random.default_rng(1).integers(5, 40000, size=30)
    runner.forward(ids[:20], 0, 20)
    several = runner.forward(ids[20:25], 20, 5)
    one_by_one = np.concatenate([runner.forward(ids[20 + i:21 + i], 20 + i, 1) for i in range(5)])
    np.testing.assert_array_equal(several, one_by_one)


def test_unsupported_family_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(OmniDraftError, match="'mamba' is not supported; supported: llama") as e:
        check_architecture(tmp_path)
    assert all(t in str(e.value) for t in ARCHITECTURES)
    (tmp_path / "config.json").write_text("[1, 2")
    with pytest.raises(OmniDraftError, match="cannot read"):
        check_architecture(tmp_path)
