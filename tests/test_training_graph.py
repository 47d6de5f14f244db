"""On-device adaptation through ExecuTorch: the LoRA training program and the LoRA-input drafter.

A tiny bundle is exported --with-training for real. Only LoRA tensors are
exposed and change; a step through the program matches the same eager step;
the updated tensors drive the very next drafter call; greedy output stays the
target's own while the drafter adapts on the ExecuTorch backend.
"""

import numpy as np
import pytest
import torch

from omnidraft.adaptation.examples import ExampleBuilder, Mapping
from omnidraft.adaptation.learners import ExecuTorchLearner
from omnidraft.adaptation.lora import lora_parameters
from omnidraft.adaptation.online import AdaptConfig
from omnidraft.draft_head import apply_draft_head
from omnidraft.errors import OmniDraftError
from omnidraft.export.build import export_bundle
from omnidraft.export.training_export import TrainingStep, lora_model, window_inputs
from omnidraft.models import load_model
from omnidraft.pair import build_bundle_pair
from omnidraft.runtime.decoding import GenerationConfig

from .conftest import TINY_WINDOW as WINDOW
from .conftest import WITHOUT_TRAINING, damaged_copy, tiny_lora

LORA = tiny_lora()
LR = 0.05


@pytest.fixture
def training_bundle(tiny_bundle):
    """The shared tiny bundle (conftest.py), exported --with-training."""
    return tiny_bundle


@pytest.fixture
def pair(training_bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    return build_bundle_pair(training_bundle, "executorch", lora_drafter=True)


def an_example(pair):
    bridge = pair.decoder.bridge
    tv = pair.target_vocab
    committed = tv.tokenizer.encode(" return a + b  # café 中文 🍵", add_special_tokens=False)
    rows = np.random.default_rng(0).normal(size=(len(committed), len(tv))).astype(np.float32)
    builder = ExampleBuilder(bridge, Mapping.from_bridge(bridge), bridge.draft.tokenizer.encode("def add(a, b):"))
    builder.add(committed, rows)
    example = builder.build()
    assert len(example.kl_pos) and len(example.nll_pos)  # both loss terms are exercised
    return example


def learner_for(pair, lr=LR):
    training = pair.bundle.manifest.training
    names = [n for n, _ in training["lora_inputs"]]
    path = pair.bundle.root / pair.bundle.model("drafter").graphs["executorch_train"]
    return ExecuTorchLearner(path, names, training["window"], training["mapped"], lr, pair.decoder.drafter)


def eager_twin(tiny_checkpoints, learner):
    """The eager drafter (with its draft head, as exported) with the program's current LoRA values."""
    model = lora_model(load_model(tiny_checkpoints["drafter"]), LORA)
    apply_draft_head(model, tiny_checkpoints["drafter"])
    with torch.no_grad():
        for n, p in lora_parameters(model).items():
            p.copy_(learner.params[f"model.{n}"])
    return model


def test_only_lora_tensors_are_exposed(pair):
    learner = learner_for(pair)
    names = list(learner.params)
    assert names and all(n.endswith((".lora_A", ".lora_B")) for n in names)
    assert len(names) == 2 * len(LORA.targets) * 2  # 2 tensors x 3 modules x 2 layers
    training = pair.bundle.manifest.training
    assert training["window"] == WINDOW and training["lora"]["rank"] == LORA.rank


def test_step_through_the_program_matches_an_eager_step(pair, tiny_checkpoints):
    learner = learner_for(pair)
    example = an_example(pair)
    model = eager_twin(tiny_checkpoints, learner)
    before = {n: t.clone() for n, t in learner.params.items()}
    et_loss = learner.step([example])[0]

    step = TrainingStep(model, Mapping.from_bridge(pair.decoder.bridge).draft_ids, 0.2)
    opt = torch.optim.SGD(list(lora_parameters(model).values()), lr=LR)
    loss, _, _ = step(*window_inputs(example, WINDOW, learner.n_mapped))
    loss.backward()
    opt.step()
    assert abs(et_loss - loss.item()) < 1e-4
    changed = 0
    for n, p in lora_parameters(model).items():
        got = learner.params[f"model.{n}"]
        torch.testing.assert_close(got, p.detach(), atol=1e-5, rtol=1e-4)
        changed += not torch.equal(got, before[f"model.{n}"])
    assert changed > 0  # the B matrices (zero at export) moved


def test_updated_lora_drives_the_next_drafter_call(pair, tiny_checkpoints):
    learner = learner_for(pair)
    drafter = pair.decoder.drafter
    # the runner owns its LoRA inputs; the learner writes its weights into them
    assert all(torch.equal(a, b) for a, b in zip(drafter.extra_inputs, learner.lora_inputs))
    ids = np.array(pair.decoder.bridge.draft.tokenizer.encode("def add(a, b):"))
    drafter.reset()
    base = drafter.forward(ids, 0, len(ids))
    for _ in range(3):
        learner.step([an_example(pair)])
    drafter.reset()
    adapted = drafter.forward(ids, 0, len(ids))
    model = eager_twin(tiny_checkpoints, learner)
    with torch.no_grad():
        want = model(input_ids=torch.from_numpy(ids).unsqueeze(0)).logits[0].numpy()
    scored = np.isfinite(base)  # the draft head's tokens; -inf elsewhere, before and after
    assert np.abs(adapted[scored] - base[scored]).max() > 1e-3
    np.testing.assert_allclose(adapted, want, atol=2e-4, rtol=1e-3)


def test_greedy_output_unchanged_while_adapting_on_executorch(training_bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    pair = build_bundle_pair(training_bundle, "executorch", adapt=AdaptConfig(every=1, lr=LR, steps=1), profile="et")
    path = pair.adapter_path
    dec = pair.decoder
    ids = pair.encode_prompt("def add(a, b):\n    return a +")
    want = dec.generate(ids, GenerationConfig(max_new_tokens=12, speculative=False))
    for _ in range(3):
        got = dec.generate(ids, GenerationConfig(max_new_tokens=12, draft_len=3))
        assert got.token_ids == want.token_ids
    assert dec.adapter.stats.updates >= 2 and path.exists()


def test_adapt_needs_a_training_bundle(training_bundle, tiny_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    plain = damaged_copy(training_bundle, tmp_path, WITHOUT_TRAINING)
    with pytest.raises(OmniDraftError, match="exported --with-training"):
        build_bundle_pair(plain, "onnxruntime", lora_drafter=True)
    with pytest.raises(OmniDraftError, match="--format executorch"):
        export_bundle(tmp_path / "x", str(tiny_checkpoints["target"]), str(tiny_checkpoints["drafter"]),
                      formats=("onnx",), with_training=True)
