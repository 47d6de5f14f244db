"""Online adaptation on tiny random models with real configs and tokenizers.

LoRA leaves the drafter unchanged until it learns, trains only its own tensors
and folds exactly into the base weights; the hybrid loss learns; the guard
rolls back an update that hurts held-out acceptance; adaptation never changes
greedy output; adapter files are saved atomically, resumed, and set aside when
bad.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from omnidraft.adaptation.examples import ExampleBuilder, Mapping
from omnidraft.adaptation.lora import LoRAConfig, LoRALinear, add_lora, lora_parameters, merge_lora
from omnidraft.adaptation.loss import Batch, batch_loss, greedy_acceptance, hybrid_loss
from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter, attach
from omnidraft.runtime.bridge import VocabBridge
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.runtime.runner import EagerRunner

from .helpers import tiny_model

PROMPT = "def greet(name):\n    return 'Hello, ' + name  # café 中文"


@pytest.fixture
def drafter_model(drafter_path):
    return tiny_model(drafter_path, seed=2)


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_lora_starts_as_identity_trains_only_itself_and_merges_exactly(drafter_model):
    ids = list(range(100, 120))
    before = logits_of(drafter_model, ids)
    wrapped = add_lora(drafter_model, LoRAConfig(rank=4, alpha=8, targets=("q_proj", "down_proj")))
    assert len(wrapped) == 2 * drafter_model.config.num_hidden_layers
    torch.testing.assert_close(logits_of(drafter_model, ids), before)
    trainable = {n for n, p in drafter_model.named_parameters() if p.requires_grad}
    assert trainable == set(lora_parameters(drafter_model)) and trainable
    with torch.no_grad():
        for p in lora_parameters(drafter_model).values():
            p.normal_(0, 0.2)
    trained = logits_of(drafter_model, ids)
    assert not torch.allclose(trained, before)
    with torch.inference_mode():  # the decoding path: one matmul with the merged weight
        merged_path = drafter_model(input_ids=torch.tensor([ids])).logits[0].clone()
    torch.testing.assert_close(merged_path, trained, atol=1e-4, rtol=1e-4)
    merge_lora(drafter_model)
    assert not any(isinstance(m, LoRALinear) for m in drafter_model.modules())
    torch.testing.assert_close(logits_of(drafter_model, ids), trained, atol=1e-4, rtol=1e-4)


def test_lora_rejects_targets_that_match_nothing(drafter_model):
    with pytest.raises(ValueError, match="no Linear module"):
        add_lora(drafter_model, LoRAConfig(targets=("qproj",)))


def test_examples_spell_the_committed_text(target_vocab, draft_vocab):
    bridge = VocabBridge(draft_vocab, target_vocab)
    mapping = Mapping.from_bridge(bridge)
    prompt = draft_vocab.tokenizer.encode("x = ")
    builder = ExampleBuilder(bridge, mapping, prompt)
    committed = target_vocab.tokenizer.encode(PROMPT, add_special_tokens=False)
    rows = np.random.default_rng(0).normal(size=(len(committed), len(target_vocab))).astype(np.float32)
    builder.add(committed[:5], rows[:5])
    builder.add(committed[5:] + [target_vocab.tokenizer.eos_token_id, committed[0]], np.vstack([rows[5:], rows[:2]]))
    ex = builder.build()
    assert draft_vocab.decode_bytes(ex.ids[len(prompt):].tolist()) == PROMPT.encode()  # EOS ends the text
    assert len(ex.units) == len(committed)
    for pos, kept in zip(ex.kl_pos, ex.kl_target):  # a KL row is the target's row over mapped tokens
        j = [a for a, _ in ex.units].index(pos)
        np.testing.assert_array_equal(kept, rows[j][mapping.target_ids].astype(np.float16))
        assert bridge.draft_to_target[ex.ids[pos + 1]] == committed[j]
    kl, nll = set(ex.kl_pos.tolist()), set(ex.nll_pos.tolist())
    assert not kl & nll and kl | nll == {p for a, b in ex.units for p in range(a, b + 1)}
    assert len(nll) > 0  # this text has tokens the drafter spells in several pieces
    short = ex.window(len(prompt) + 6)
    assert len(short.ids) == len(prompt) + 6 and all(a >= 0 for a, _ in short.units)
    # the prompt teaches too: an NLL row at every prompt position but the last (which predicts a committed token)
    taught = ex.with_prompt_nll()
    assert set(taught.nll_pos.tolist()) == set(range(len(prompt) - 1)) | nll


def test_hybrid_loss_is_zero_when_drafter_matches_target_and_positive_otherwise():
    torch.manual_seed(0)
    mapped = torch.tensor([0, 2, 3])
    drafter = torch.randn(4, 5)
    target = drafter[:, mapped].clone()
    w = torch.ones(4)
    _, l_dm, _ = hybrid_loss(drafter, target, w, drafter, torch.zeros(4, dtype=torch.long), w, mapped, 0.2)
    assert abs(float(l_dm)) < 1e-6
    _, l_dm, l_ng = hybrid_loss(drafter, torch.randn(4, 3), w, drafter, torch.zeros(4, dtype=torch.long), w, mapped, 0.2)
    assert float(l_dm) > 0 and float(l_ng) > 0


def greedy_ids(model, text, n, draft_vocab):
    """`text`'s tokens followed by `model`'s own greedy continuation of n tokens."""
    ids = draft_vocab.tokenizer.encode(text)
    for _ in range(n):
        ids.append(int(logits_of(model, ids)[-1].argmax()))
    return ids


def same_vocab_example(draft_vocab, ids, target_model, n_prompt=4):
    """An example of committed ids[n_prompt:] scored by `target_model` (same vocabulary)."""
    bridge = VocabBridge(draft_vocab, draft_vocab)
    rows = logits_of(target_model, ids).numpy()
    builder = ExampleBuilder(bridge, Mapping.from_bridge(bridge), ids[:n_prompt])
    builder.add(ids[n_prompt:], rows[n_prompt - 1 : -1])
    return bridge, builder.build()


def test_lora_steps_lower_the_loss_and_raise_acceptance(drafter_path, draft_vocab):
    # The target is the drafter's own pretrained self; a noisy adapter pulls the drafter away from it,
    # and the hybrid loss must pull it back.
    model = tiny_model(drafter_path, seed=2)
    n_prompt = len(draft_vocab.tokenizer.encode("def f(x):"))
    bridge, ex = same_vocab_example(draft_vocab, greedy_ids(model, "def f(x):", 24, draft_vocab), model, n_prompt)
    adapter = OnlineAdapter(model, bridge, AdaptConfig(lora=LoRAConfig(rank=8, alpha=16), lr=1e-2))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in lora_parameters(model).items():
            if name.endswith("lora_B"):
                p.normal_(0, 0.3)
    batch = Batch.of([ex])
    loss0, _, _ = batch_loss(model, batch, adapter.learner.mapped, 0.2)
    acc0 = greedy_acceptance(model, batch)
    assert acc0 < 0.8
    for _ in range(30):
        adapter.learner.optimizer.zero_grad()
        loss, _, _ = batch_loss(model, batch, adapter.learner.mapped, 0.2)
        loss.backward()
        adapter.learner.optimizer.step()
    assert loss.item() < 0.5 * loss0.item()
    assert greedy_acceptance(model, batch) > acc0 + 0.1


def test_an_update_cycles_through_the_newest_buffered_examples(drafter_path, draft_vocab):
    model = tiny_model(drafter_path, seed=2)
    bridge, ex = same_vocab_example(draft_vocab, greedy_ids(model, "def f(x):", 6, draft_vocab), model)
    adapter = OnlineAdapter(model, bridge, AdaptConfig(lora=LoRAConfig(rank=4, alpha=8), batch=2, steps=5, replay=4))
    examples = [replace(ex, ids=ex.ids.copy()) for _ in range(6)]
    adapter.buffer.extend(examples)
    batches = adapter.batches()  # newest two, the two before, then again: each batch oldest first
    index = {id(e): i for i, e in enumerate(examples)}
    assert [[index[id(e)] for e in b] for b in batches] == [[4, 5], [2, 3], [4, 5], [2, 3], [4, 5]]


def test_guard_rolls_back_an_update_that_hurts_heldout(drafter_path, draft_vocab):
    model = tiny_model(drafter_path, seed=2)
    n_prompt = len(draft_vocab.tokenizer.encode(PROMPT))
    _, heldout = same_vocab_example(draft_vocab, greedy_ids(model, PROMPT, 16, draft_vocab), model, n_prompt)
    other = tiny_model(drafter_path, seed=9)
    bridge, noise = same_vocab_example(draft_vocab, greedy_ids(other, "zq xv 9 ;; kk", 16, draft_vocab), other)
    adapter = OnlineAdapter(model, bridge, AdaptConfig(lora=LoRAConfig(rank=8, alpha=16), lr=0.5, steps=5))
    assert greedy_acceptance(model, Batch.of([heldout])) == 1.0
    adapter.heldout.append(heldout)
    adapter.buffer.append(noise)
    before = {n: p.clone() for n, p in lora_parameters(model).items()}
    assert adapter.update() is False
    assert adapter.stats.rollbacks == 1 and adapter.stats.holdout_after < 1.0
    for n, p in lora_parameters(model).items():
        torch.testing.assert_close(p, before[n], rtol=0, atol=0)
    assert greedy_acceptance(model, Batch.of([heldout])) == 1.0


def test_adapting_never_changes_greedy_output(tiny_target_model, drafter_path, target_vocab, draft_vocab, tmp_path):
    target = EagerRunner(tiny_target_model, 256, name="target")
    ids = target_vocab.tokenizer.encode(PROMPT)
    want = SpeculativeDecoder(target, target_vocab).generate(ids, GenerationConfig(max_new_tokens=20, speculative=False))
    drafter = EagerRunner(tiny_model(drafter_path, seed=2), 512)
    drafting = DraftModel.between(target, target_vocab, drafter, draft_vocab, NGramCache("x"))
    path = tmp_path / "adapter.pt"
    adapter = attach(drafter.model, drafting.bridge, AdaptConfig(every=1, lr=1e-2, guard=False), path, {}, False, print)
    dec = SpeculativeDecoder(target, target_vocab, drafting, adapter)
    for i in range(3):
        got = dec.generate(ids, GenerationConfig(max_new_tokens=20, draft_len=3))
        assert got.token_ids == want.token_ids
        assert got.stats.adaptation["examples"] == i + 1
    assert dec.adapter.stats.updates >= 2 and path.exists()
    # A restarted process resumes the same adapter.
    saved = {n: p.clone() for n, p in lora_parameters(drafter.model).items()}
    fresh = EagerRunner(tiny_model(drafter_path, seed=2), 512)
    resumed = attach(fresh.model, drafting.bridge, AdaptConfig(every=1, lr=1e-2, guard=False), path, {}, False, print)
    assert resumed.stats.updates == dec.adapter.stats.updates
    for n, p in lora_parameters(fresh.model).items():
        torch.testing.assert_close(p, saved[n], rtol=0, atol=0)


def test_bad_or_foreign_adapter_files_are_set_aside(drafter_path, draft_vocab, tmp_path):
    bridge = VocabBridge(draft_vocab, draft_vocab)
    path = tmp_path / "a.pt"
    messages = []
    path.write_bytes(b"not a torch file")
    attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(), path, {}, False, messages.append)
    assert not path.exists() and any(p.name.startswith("a.pt.bad-") for p in tmp_path.iterdir())
    assert "starting a fresh adapter" in messages[-1]
    # Another LoRA rank: not ours either.
    a = attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(lora=LoRAConfig(rank=4)), path, {}, False, print)
    a.save()
    attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(lora=LoRAConfig(rank=8)), path, {}, False,
           messages.append)
    assert "another drafter, target or LoRA configuration" in messages[-1]
    # --reset-adaptation keeps the old file under another name.
    a.save()
    attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(lora=LoRAConfig(rank=4)), path, {}, True,
           messages.append)
    assert not path.exists() and any(p.name.startswith("a.pt.reset-") for p in tmp_path.iterdir())


def test_unsavable_adapter_warns_and_keeps_adapting(drafter_path, draft_vocab, tmp_path):
    bridge = VocabBridge(draft_vocab, draft_vocab)
    (tmp_path / "blocked").write_text("a file where the adapter folder should be")
    messages = []
    a = attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(), tmp_path / "blocked" / "a.pt", {}, False,
               messages.append)
    a.save()
    assert len(messages) == 1 and "could not save the adapter" in messages[0]


def test_adapter_files_with_per_update_timings_still_load(drafter_path, draft_vocab, tmp_path):
    """Files saved before `update_seconds` became a total (it was a list that grew with every update)."""
    bridge = VocabBridge(draft_vocab, draft_vocab)
    path = tmp_path / "a.pt"
    a = attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(lora=LoRAConfig(rank=4)), path, {}, False, print)
    a.stats.updates, a.stats.steps = 3, 6
    a.save()
    payload = torch.load(path, weights_only=True)
    payload["stats"]["update_seconds"] = [0.5, 1.0, 1.5]
    torch.save(payload, path)
    messages = []
    b = attach(tiny_model(drafter_path, seed=2), bridge, AdaptConfig(lora=LoRAConfig(rank=4)), path, {}, False,
               messages.append)
    assert "resumed adapter" in messages[-1] and b.stats.updates == 3
    assert b.report()["seconds_per_step"] == pytest.approx(0.5)


def test_updates_return_freed_memory_to_the_os():
    """After an update's activations are freed, malloc_trim gives their pages back (glibc machines)."""
    import psutil

    from omnidraft.adaptation.memory import release_free_memory

    if not release_free_memory():
        pytest.skip("not a glibc C library")
    big = torch.ones(2_100_000)
    del big  # freeing a big block raises glibc's mmap threshold: what follows is heap
    chunks = [torch.ones(int(n)) for n in np.random.default_rng(0).integers(20_000, 2_000_000, 400)]
    keep = chunks[::3]  # the survivors pin the heap's pages between them
    del chunks
    before = psutil.Process().memory_info().rss
    release_free_memory()
    after = psutil.Process().memory_info().rss
    assert before - after > 50 * 2**20, (before, after)
    del keep
