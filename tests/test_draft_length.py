"""Adaptive draft length: the policies, the acceptance head's labels and training, and
exactness of greedy decoding whatever the policy drafts."""

import numpy as np
import pytest

from omnidraft.adaptation.predictor import AcceptancePredictor, PredictorConfig
from omnidraft.errors import OmniDraftError
from omnidraft.runtime.acceptance import N_CONFIDENCE, AcceptanceHead, draft_labels, n_features
from omnidraft.runtime.bridge import DIRECT, NGRAM, SPLIT_FIRST, SPLIT_REST, Translation
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.draft_length import DraftLength
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.sampling import Sampler

from .helpers import tiny_model


def test_heuristic_grows_by_two_after_full_acceptance_and_shrinks_by_one():
    policy = DraftLength("heuristic", k=4, max_len=7)
    seen = []
    for proposed, accepted in [(4, 4), (6, 6), (7, 3), (6, 0), (5, 0), (4, 0), (3, 0), (2, 0), (1, 1)]:
        assert policy.budget() == proposed
        policy.observe(proposed, accepted)
        seen.append(policy.budget())
    assert seen == [6, 7, 6, 5, 4, 3, 2, 1, 3]


def test_auto_stops_once_the_draft_is_likely_to_be_cut():
    policy = DraftLength("auto", max_len=8, gamma=0.5)
    assert policy.budget() == 8
    assert [policy.stop(p) for p in (0.8, 0.8, 0.8, 0.8)] == [False, False, False, True]  # 0.8^4 < 0.5
    policy.budget()  # a new round starts from certainty
    assert policy.stop(0.4)
    assert not DraftLength("fixed", k=3).stop(0.01)


@pytest.mark.parametrize("bad", [dict(policy="sometimes"), dict(policy="auto", gamma=1.0), dict(k=0)])
def test_bad_draft_length_settings_are_user_errors(bad):
    with pytest.raises(OmniDraftError):
        DraftLength(**bad)


def _logits_choosing(*tokens, vocab=10):
    rows = np.zeros((len(tokens), vocab), dtype=np.float32)
    rows[np.arange(len(tokens)), tokens] = 5.0
    return rows


def test_labels_follow_the_documented_conventions_for_merges_and_splits():
    # draft tokens 0..5: 0 direct, 1-2 merged into one target token, 3 split in two pieces, 4 direct, 5 past a gap
    prop = Translation()
    prop.append(7, 1.0, DIRECT, 0, 1, 0)
    prop.append(8, 1.0, NGRAM, 1, 3, 1)
    prop.append(2, 1.0, SPLIT_FIRST, 3, 3, 3)
    prop.append(3, 1.0, SPLIT_REST, 3, 4, 3)
    prop.append(9, 1.0, DIRECT, 4, 5, 4)
    greedy = Sampler()
    # target agrees with: the direct token, the merge, the split's first piece only, the last token
    logits = _logits_choosing(7, 8, 2, 6, 9, 0)
    labels = draft_labels(prop, logits, greedy, 6)
    assert labels[:5].tolist() == [1, 1, 1, 0, 1] and np.isnan(labels[5])
    # a rejected merge labels its first draft token 0; its second keeps 1 (the product is the merge's label)
    labels = draft_labels(prop, _logits_choosing(7, 1, 2, 3, 9, 0), greedy, 6)
    assert labels[1] == 0 and labels[2] == 1
    # sampling: min(1, p/q')
    soft = Sampler(temperature=1.0)
    one = Translation()
    one.append(7, 0.5, DIRECT, 0, 1, 7)
    row = np.log(np.full((2, 10), 0.5 / 9))
    row[0, 7] = np.log(0.5)
    assert draft_labels(one, row, soft, 1)[0] == pytest.approx(1.0)
    one.q[0] = 0.9
    assert draft_labels(one, row, soft, 1)[0] == pytest.approx(0.5 / 0.9)


def test_the_predictor_learns_which_drafts_are_accepted(tmp_path):
    rng = np.random.default_rng(0)
    width = 16 + N_CONFIDENCE
    head = AcceptanceHead.initial(width)
    predictor = AcceptancePredictor(head, PredictorConfig(epochs=200, lr=0.05, l2=1e-3))  # plenty of data: weak prior
    x = rng.normal(size=(2000, width)).astype(np.float32)
    x[:, -2] = rng.uniform(size=2000)  # top-1 probability: uninformative here
    y = (x[:, 3] + 0.3 * rng.normal(size=2000) > 0.5).astype(float)  # acceptance hides in one hidden unit
    predictor.observe(list(x[:1000]), y[:1000])
    before = np.mean((head.prob(x[1000:]) > 0.5) == y[1000:])
    predictor.update()
    after = np.mean((head.prob(x[1000:]) > 0.5) == y[1000:])
    assert after > 0.9 > before
    # saved and restored exactly (atomic file); a damaged file is refused
    path = tmp_path / "head.npz"
    predictor.save(path)
    other = AcceptancePredictor(AcceptanceHead.initial(width))
    other.load(path)
    assert np.array_equal(other.head.weight, head.weight) and other.updates == 1
    path.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="unreadable"):
        other.load(path)
    with pytest.raises(ValueError, match="features"):
        AcceptancePredictor(AcceptanceHead.initial(5)).load_state(predictor.state())  # another drafter's head


def _eager_drafter(tiny_drafter):
    tiny_drafter.head = AcceptanceHead.initial(n_features(tiny_drafter.model.config))
    return tiny_drafter


def test_eager_head_output_is_the_numpy_head_of_the_features(tiny_drafter, draft_vocab):
    drafter = _eager_drafter(tiny_drafter)
    drafter.head.weight[:] = np.random.default_rng(1).normal(size=drafter.head.n_features) * 0.1
    drafter.forward(draft_vocab.tokenizer.encode("def add(a, b):"), 0)
    features, prob = drafter.head_output
    assert features.shape == (drafter.head.n_features,)
    assert prob == pytest.approx(float(drafter.head.prob(features)), rel=1e-5)
    assert 0 <= features[-2] <= 1 and 0 <= features[-1] <= 1  # top-1 probability, normalized entropy


@pytest.mark.parametrize("policy", ["heuristic", "auto"])
def test_greedy_output_is_exact_with_adaptive_draft_length(policy, tiny_target, tiny_drafter, target_vocab,
                                                           draft_vocab):
    ids = target_vocab.tokenizer.encode("Once upon a time, the café served 中文 tea to")
    want = SpeculativeDecoder(tiny_target, target_vocab).generate(ids, GenerationConfig(max_new_tokens=24,
                                                                                         speculative=False))
    drafter = _eager_drafter(tiny_drafter)
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, drafter, draft_vocab, ngram_cache=True,
                                          predictor=AcceptancePredictor(drafter.head))
    mean_len = {}
    for gamma in (0.2, 0.9):
        got = dec.generate(ids, GenerationConfig(max_new_tokens=24, draft_policy=policy, max_draft_len=6, gamma=gamma))
        assert got.token_ids == want.token_ids
        assert got.stats.mean_draft_len <= 6
        mean_len[gamma] = got.stats.mean_draft_len
    assert dec.proposer.predictor.updates == 2 and dec.proposer.predictor.seen > 0
    if policy == "auto":  # a larger gamma tolerates more risk: longer drafts
        assert mean_len[0.9] >= mean_len[0.2]


def test_auto_needs_a_head(tiny_target, tiny_drafter, target_vocab, draft_vocab):
    tiny_drafter.head = None
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    with pytest.raises(OmniDraftError, match="acceptance head"):
        dec.generate(target_vocab.tokenizer.encode("hello"), GenerationConfig(draft_policy="auto"))


def test_same_vocab_auto_with_a_perfect_drafter_drafts_to_the_cap(drafter_path, draft_vocab):
    """A twin drafter is always right: once the head has learned that, drafts run to the cap."""
    target = EagerRunner(tiny_model(drafter_path, seed=3), 160)
    twin = EagerRunner(tiny_model(drafter_path, seed=3), 160)
    twin.head = AcceptanceHead.initial(n_features(twin.model.config))
    dec = SpeculativeDecoder.with_drafter(target, draft_vocab, twin, draft_vocab,
                                          predictor=AcceptancePredictor(twin.head, PredictorConfig(epochs=100)))
    ids = draft_vocab.tokenizer.encode("User: how are you?\nAssistant:")
    config = GenerationConfig(max_new_tokens=30, draft_policy="auto", max_draft_len=5, gamma=0.3)
    runs = [dec.generate(ids, config) for _ in range(3)]
    assert all(r.token_ids == runs[0].token_ids for r in runs)
    assert all(r.stats.accepted == r.stats.drafted for r in runs)
    lengths = [r.stats.mean_draft_len for r in runs]
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0]
    assert lengths[-1] >= 4


def test_with_lora_schedule_trains_the_head_only_with_the_drafter(tiny_target, tiny_drafter, target_vocab,
                                                                  draft_vocab):
    from omnidraft.adaptation.online import AdaptConfig, OnlineAdapter

    drafter = _eager_drafter(tiny_drafter)
    drafting = DraftModel.between(tiny_target, target_vocab, drafter, draft_vocab,
                                  predictor=AcceptancePredictor(drafter.head, PredictorConfig(schedule="with-lora")))
    adapter = OnlineAdapter(drafter.model, drafting.bridge, AdaptConfig(every=2, guard=False))
    dec = SpeculativeDecoder(tiny_target, target_vocab, drafting, adapter)
    config = GenerationConfig(max_new_tokens=12, draft_policy="auto", max_draft_len=4)
    counts = []
    for text in ("def add(a, b):", "Once upon a time", "User: hi", "import os"):
        dec.generate(target_vocab.tokenizer.encode(text), config)
        counts.append((dec.adapter.stats.updates, dec.proposer.predictor.updates))
    assert counts == [(0, 0), (1, 1), (1, 1), (2, 2)]
