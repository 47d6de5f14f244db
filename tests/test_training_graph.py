"""On-device adaptation through ExecuTorch: the update-step program and the LoRA-input drafter.

A tiny bundle is exported --with-training for real. The program's state is the
LoRA tensors and their Adam moments; two steps through the program equal two
eager steps (torch's clip_grad_norm_ and AdamW); the updated tensors drive the
very next drafter call; a saved state resumes the same trajectory; greedy
output stays the target's own while the drafter adapts on ExecuTorch.
"""

import numpy as np
import pytest
import torch

from omnidraft.adaptation.examples import ExampleBuilder, Mapping
from omnidraft.adaptation.learners import EagerLearner, ExecuTorchLearner
from omnidraft.adaptation.lora import lora_parameters
from omnidraft.adaptation.online import AdaptConfig
from omnidraft.draft_head import apply_draft_head
from omnidraft.errors import OmniDraftError
from omnidraft.export.build import export_bundle
from omnidraft.export.training_export import export_training, lora_model
from omnidraft.models import load_model
from omnidraft.pair import build_bundle_pair
from omnidraft.adaptation.learners import learner_for as learner_for_pair
from omnidraft.runtime.decoding import GenerationConfig

from .helpers import TINY_WINDOW as WINDOW
from .helpers import WITHOUT_TRAINING, damaged_copy, edit_manifest, tiny_lora

pytestmark = pytest.mark.slow  # exports (make test runs it; make test-fast does not)

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


def an_example(pair, text=" return a + b  # café 中文 🍵", seed=0):
    bridge = pair.bridge
    tv = pair.target_vocab
    committed = tv.tokenizer.encode(text, add_special_tokens=False)
    rows = np.random.default_rng(seed).normal(size=(len(committed), len(tv))).astype(np.float32)
    builder = ExampleBuilder(bridge, Mapping.from_bridge(bridge), bridge.draft.tokenizer.encode("def add(a, b):"))
    builder.add(committed, rows)
    example = builder.build()
    assert len(example.kl_pos) and len(example.nll_pos)  # both loss terms are exercised
    return example


def learner_for(pair, lr=LR, init=None):
    training = pair.bundle.manifest.training
    names = [n for n, _ in training["lora_inputs"]]
    path = pair.bundle.root / pair.bundle.model("drafter").graphs["executorch_train"]
    return ExecuTorchLearner(path, names, training["window"], training["batch"], training["mapped"], lr,
                             pair.drafter, init, AdaptConfig().warmup)  # the eager learner's warm-up too


def eager_twin(tiny_checkpoints, learner):
    """The eager drafter (with its draft head, as exported) with the program's current LoRA values."""
    model = lora_model(load_model(tiny_checkpoints["drafter"]), LORA)
    apply_draft_head(model, tiny_checkpoints["drafter"])
    with torch.no_grad():
        for n, p in lora_parameters(model).items():
            p.copy_(learner.params[n])
    return model


def test_the_programs_state_is_the_lora_tensors(pair):
    learner = learner_for(pair)
    names = list(learner.params)
    assert names and all(n.endswith((".lora_A", ".lora_B")) for n in names)
    assert len(names) == 2 * len(LORA.targets) * 2  # 2 tensors x 3 modules x 2 layers
    fresh = {n: t for n, t in learner.params.items()}
    assert all(not t.any() for n, t in fresh.items() if n.endswith("lora_B"))  # fresh: the drafter unchanged
    assert all(t.abs().sum() > 0 for n, t in fresh.items() if n.endswith("lora_A"))
    training = pair.bundle.manifest.training
    assert training["window"] == WINDOW and training["batch"] == AdaptConfig().batch
    assert training["lora"]["rank"] == LORA.rank and training["update"]["optimizer"] == "adam"


def test_steps_through_the_program_match_eager_steps(pair, tiny_checkpoints):
    """Two steps (Adam's moments and bias correction matter from the second) on a batch of two
    examples and a third of one: the same losses and tensors as the eager learner's steps."""
    learner = learner_for(pair)
    batches = [[an_example(pair), an_example(pair, " x = [1, 2]  # 中文 🍵\n", seed=1)], [an_example(pair, seed=2)]]
    mapping = Mapping.from_bridge(pair.bridge)
    model = load_model(tiny_checkpoints["drafter"])
    apply_draft_head(model, tiny_checkpoints["drafter"])
    model.config._attn_implementation = "eager"
    eager = EagerLearner(model, AdaptConfig(lora=LORA, lr=LR), mapping, init=learner.params)
    before = {n: t.clone() for n, t in learner.params.items()}
    for examples in batches:
        et_losses = learner.step(examples)
        eager_losses = eager.step(examples)
        np.testing.assert_allclose(et_losses, eager_losses, atol=1e-4, rtol=1e-4)
    moments = eager.optimizer.state
    for n, p in eager.trainable.items():
        # Adam moves each element by about LR per step whatever its gradient's size, so where a gradient is
        # near zero the program's and eager's differently ordered sums tilt that step: agree to a 1000th of it
        torch.testing.assert_close(learner.params[n], p.detach(), atol=1e-3 * LR, rtol=1e-4)
        torch.testing.assert_close(learner.exp_avg[n], moments[p]["exp_avg"], atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(learner.exp_avg_sq[n], moments[p]["exp_avg_sq"], atol=1e-8, rtol=1e-4)
    assert learner.steps == 2
    assert sum(not torch.equal(learner.params[n], before[n]) for n in before) == len(before)  # every tensor moved


def test_the_xnnpack_program_takes_the_same_step(pair, tiny_checkpoints, tmp_path):
    """`--train-kernels xnnpack` (the shared bundle's program is on portable kernels, the default): same step."""
    training = pair.bundle.manifest.training
    assert training["kernels"] == "portable"
    model = lora_model(load_model(tiny_checkpoints["drafter"]), LORA)
    portable = learner_for(pair)
    with torch.no_grad():
        for n, p in lora_parameters(model).items():
            p.copy_(portable.params[n])
    path = tmp_path / "drafter_train.pte"
    mapping = Mapping.from_bridge(pair.bridge)
    meta = export_training(model, path, WINDOW, training["batch"], mapping.draft_ids, training["lam"], "xnnpack")
    assert meta["kernels"] == "xnnpack"
    xnnpack = ExecuTorchLearner(path, list(portable.params), WINDOW, training["batch"], len(mapping), LR,
                                warmup=AdaptConfig().warmup)
    examples = [an_example(pair)]
    np.testing.assert_allclose(xnnpack.step(examples), portable.step(examples), atol=1e-4, rtol=1e-4)
    for n, t in portable.params.items():
        torch.testing.assert_close(xnnpack.params[n], t, atol=1e-5, rtol=1e-4)


def test_learners_start_from_given_lora_tensors(pair, tiny_checkpoints):
    """Both learners can start from the same adapters (a benchmark compares learners, not random draws)."""
    start = {n: t + 0.01 * (i + 1) for i, (n, t) in enumerate(learner_for(pair).params.items())}
    learner = learner_for(pair, init=start)
    for (n, t), fed in zip(learner.params.items(), pair.drafter.extra_inputs):
        assert torch.equal(t, start[n]) and torch.equal(fed, start[n])  # the drafter decodes with them at once
    mapping = Mapping.from_bridge(pair.bridge)
    eager = EagerLearner(lora_free_drafter(tiny_checkpoints), AdaptConfig(lora=LORA, lr=LR), mapping, init=start)
    assert all(torch.equal(p.detach(), start[n]) for n, p in eager.trainable.items())
    wrong = dict(start, **{next(iter(start)): torch.zeros(3)})
    with pytest.raises(ValueError):
        learner_for(pair, init=wrong)
    with pytest.raises(ValueError):
        EagerLearner(lora_free_drafter(tiny_checkpoints), AdaptConfig(lora=None), mapping, init=start)
    learner_for(pair)  # leave the shared drafter's inputs as the other tests expect them


def lora_free_drafter(tiny_checkpoints):
    model = load_model(tiny_checkpoints["drafter"])
    apply_draft_head(model, tiny_checkpoints["drafter"])
    return model


def test_a_saved_state_resumes_the_same_trajectory(pair):
    learner = learner_for(pair)
    learner.step([an_example(pair)])
    saved = learner.state()
    learner.step([an_example(pair, seed=3)])
    want = {n: t.clone() for n, t in learner.params.items()}
    other = learner_for(pair)
    other.load_state(saved)
    assert other.steps == 1
    other.step([an_example(pair, seed=3)])
    for n, t in want.items():
        torch.testing.assert_close(other.params[n], t, atol=0, rtol=0)  # the same program on the same inputs
    bad = other.state()
    bad["optimizer"]["exp_avg"][next(iter(want))] = torch.zeros(3)
    with pytest.raises(ValueError):
        other.load_state(bad)
    for n, t in want.items():  # nothing changed
        assert torch.equal(other.params[n], t)


def test_updated_lora_drives_the_next_drafter_call(pair, tiny_checkpoints):
    learner = learner_for(pair)
    drafter = pair.drafter
    # the runner owns its LoRA inputs; the learner writes its weights into them
    assert all(torch.equal(a, b) for a, b in zip(drafter.extra_inputs, learner.params.values()))
    ids = np.array(pair.bridge.draft.tokenizer.encode("def add(a, b):"))
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


def test_a_version_3_training_program_asks_for_a_re_export(training_bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))

    def version_3(m):
        m["version"] = 3
        for key in ("batch", "update"):
            m["training"].pop(key)
    old = damaged_copy(training_bundle, tmp_path, edit_manifest(version_3))
    build_bundle_pair(old, "executorch")  # still decodes
    with pytest.raises(OmniDraftError, match="re-export it with --with-training"):
        build_bundle_pair(old, "executorch", adapt=AdaptConfig(), profile="old")


def test_the_program_decides_the_batch_and_window(training_bundle, tmp_path, monkeypatch):
    """Opened from options (CLI, simulator), the adapter follows the bundle's program, as the app does;
    a learner asked directly for more examples per step than the program takes is refused."""
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    pair = build_bundle_pair(training_bundle, "executorch", adapt=AdaptConfig(batch=9, window=500), profile="big")
    training = pair.bundle.manifest.training
    assert (pair.decoder.adapter.config.batch, pair.decoder.adapter.config.window) == (training["batch"], WINDOW)
    with pytest.raises(OmniDraftError, match="--train-batch 9"):
        learner_for_pair(pair.bundle, pair.drafting, AdaptConfig(batch=9))
