"""The speculative loop on tiny random models with real configs and real tokenizers.

Greedy speculative output must equal greedy target-only output token for token,
same vocabulary and across vocabularies; sampling with one vocabulary must
reproduce the target's distribution.
"""


from dataclasses import replace

import numpy as np
import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.sampling import Sampler

from .helpers import (bigram_runner, byte_vocab, chi_square_p, exact_distribution, letters_cross_pair, sample_law,
                       tiny_model)

PROMPTS = [
    "def add(a, b):\n    return",
    "Once upon a time, the café served 中文 tea 🍵 to",
    "User: how are you?\nAssistant:",
]


def baseline(target, vocab, ids, n):
    dec = SpeculativeDecoder(target, vocab)
    return dec.generate(ids, GenerationConfig(max_new_tokens=n, speculative=False))


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("draft_len", [1, 3, 6])
def test_greedy_cross_vocab_equals_target_only(prompt, draft_len, tiny_target, tiny_drafter, target_vocab, draft_vocab):
    ids = target_vocab.tokenizer.encode(prompt)
    want = baseline(tiny_target, target_vocab, ids, 24)
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    for strict in (False, False, True):  # the second run proposes through what the cache learned in the first
        got = dec.generate(ids, GenerationConfig(max_new_tokens=24, draft_len=draft_len, strict_sampling=strict))
        assert got.token_ids == want.token_ids
        assert got.text == want.text
        assert got.stats.drafted > 0 and got.stats.accepted <= got.stats.drafted
    assert dec.proposer.cross_vocab


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_same_vocab_equals_target_only(prompt, drafter_path, draft_vocab):
    target = EagerRunner(tiny_model(drafter_path, seed=3), 128)
    ids = draft_vocab.tokenizer.encode(prompt)
    want = baseline(target, draft_vocab, ids, 20)
    other = EagerRunner(tiny_model(drafter_path, seed=4), 128)
    twin = EagerRunner(tiny_model(drafter_path, seed=3), 128)  # the target's own weights
    for drafter, full in ((other, False), (twin, True)):
        dec = SpeculativeDecoder.with_drafter(target, draft_vocab, drafter, draft_vocab)
        assert not dec.proposer.cross_vocab
        got = dec.generate(ids, GenerationConfig(max_new_tokens=20, draft_len=4))
        assert got.token_ids == want.token_ids
        if full:  # a perfect drafter: every proposal accepted, 5 tokens per target call
            assert got.stats.accepted == got.stats.drafted
            assert got.stats.target_calls == 4


def test_stop_conditions(tiny_target, tiny_drafter, target_vocab, draft_vocab):
    ids = target_vocab.tokenizer.encode(PROMPTS[0])
    full = baseline(tiny_target, target_vocab, ids, 30)
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    eos = full.token_ids[10]
    got = dec.generate(ids, GenerationConfig(max_new_tokens=30, eos_ids=frozenset({eos})))
    assert got.stop_reason == "eos" and got.token_ids == full.token_ids[: full.token_ids.index(eos)]
    half = len(full.text) // 2  # a stop string from the second half of the text, not blank
    stop = next(full.text[i : i + 3] for i in range(half, len(full.text) - 2) if full.text[i : i + 3].strip())
    got = dec.generate(ids, GenerationConfig(max_new_tokens=30, stop_strings=(stop,)))
    assert got.stop_reason == "stop_string" and got.text.endswith(stop)
    assert got.text == full.text[: full.text.index(stop) + len(stop)]
    got = dec.generate(ids, GenerationConfig(max_new_tokens=7))
    assert got.stop_reason == "max_new_tokens" and got.token_ids == full.token_ids[:7]


def test_context_window(tiny_target_model, tiny_drafter, target_vocab, draft_vocab):
    target = EagerRunner(tiny_target_model, 24)
    ids = target_vocab.tokenizer.encode(PROMPTS[0])
    dec = SpeculativeDecoder.with_drafter(target, target_vocab, tiny_drafter, draft_vocab)
    got = dec.generate(ids, GenerationConfig(max_new_tokens=100))
    assert got.stop_reason == "context_full" and len(ids) + len(got.token_ids) == 25
    assert got.token_ids == baseline(target, target_vocab, ids, 100).token_ids
    with pytest.raises(OmniDraftError, match="context window is 24"):
        dec.generate(list(range(5, 40)), GenerationConfig())
    with pytest.raises(OmniDraftError, match="empty"):
        dec.generate([], GenerationConfig())
    with pytest.raises(OmniDraftError, match="draft length"):
        GenerationConfig(draft_len=0)


def test_streaming_pieces_add_up_to_the_text(tiny_target, tiny_drafter, target_vocab, draft_vocab):
    ids = target_vocab.tokenizer.encode(PROMPTS[1])
    pieces = []
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    got = dec.generate(ids, GenerationConfig(max_new_tokens=30), on_text=pieces.append)
    assert "".join(pieces) == got.text and len(pieces) > 1


@pytest.mark.parametrize("sampled_drafts", [False, True])
def test_sampling_same_vocab_reproduces_target_distribution(sampled_drafts):
    """Chi-square: 3-token continuations from speculative sampling follow the target's law, with the drafter's
    most likely tokens checked against each position's draw (the default) or sampled drafts (rejection)."""
    v, n, runs = 5, 3, 4000
    rng = np.random.default_rng(0)
    target_table = rng.normal(0, 1.5, size=(v, v))
    draft_table = target_table + rng.normal(0, 1.5, size=(v, v))  # a related but wrong drafter
    vocab = byte_vocab(v)
    dec = SpeculativeDecoder.with_drafter(bigram_runner(target_table), vocab, bigram_runner(draft_table), vocab)
    counts, totals = sample_law(dec, [0], n, runs, draft_len=2, sampled_drafts=sampled_drafts)
    assert chi_square_p(counts, exact_distribution(target_table, 0, n), runs) > 1e-3
    assert 0.2 < totals["acceptance"] < 0.95  # both the accept and the residual paths were exercised


def _letters_pair_tables():
    rng = np.random.default_rng(0)
    target_table = rng.normal(0, 1.5, size=(4, 4))  # over A, B, C, AB
    # The drafter over A, B, C, BC: near the target's law for the letters it shares.
    draft_table = np.zeros((4, 4))
    draft_table[:3, :3] = target_table[:3, :3] + rng.normal(0, 1.0, size=(3, 3))
    draft_table[3] = draft_table[2]
    return target_table, draft_table


def test_strict_sampling_cross_vocab_reproduces_target_distribution():
    """--strict-sampling: across vocabularies (merges and splits possible), sampled drafts, the target's law
    exactly."""
    n, runs = 3, 4000
    target_table, draft_table = _letters_pair_tables()
    dec = letters_cross_pair(target_table, draft_table)
    assert dec.proposer.cross_vocab
    _, default = sample_law(dec, [0], n, 200, draft_len=2, sampled_drafts=True)
    assert default["ngram_cache_hits"] > 0  # without strict mode this pair merges draft runs
    counts, strict = sample_law(dec, [0], n, runs, draft_len=2, strict_sampling=True)
    assert chi_square_p(counts, exact_distribution(target_table, 0, n), runs) > 1e-3
    assert 0.2 < strict["acceptance"] < 0.95 and strict["ngram_cache_hits"] == 0


def test_default_sampling_across_vocabularies_is_exact_with_ngram_merges():
    """The default under sampling: the drafter's most likely tokens, merged n-grams included, checked against
    each position's own draw: the target's law exactly across vocabularies, without strict mode."""
    n, runs = 3, 4000
    target_table, _ = _letters_pair_tables()
    draft_table = np.full((4, 4), -2.0)  # the drafter's most likely runs: A B (the target's AB), B C, C A
    for a, b in ((0, 1), (1, 2), (2, 0), (3, 0)):
        draft_table[a, b] = 2.0
    dec = letters_cross_pair(target_table, draft_table)
    sample_law(dec, [2], n, 300, draft_len=2, temperature=0.7)  # the n-gram cache learns the pair's merges
    counts, totals = sample_law(dec, [2], n, runs, draft_len=2, temperature=0.7)  # after C the drafter says A B
    assert totals["ngram_cache_hits"] > 0 and 0.05 < totals["acceptance"] < 0.95
    assert chi_square_p(counts, exact_distribution(target_table, 2, n, temperature=0.7), runs) > 1e-3


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.8, 0.95), (0.7, 0.6)])
def test_a_seed_gives_target_only_text_whoever_proposed(temperature, top_p):
    """Under sampling the text of a seed is target-only decoding's, token for token, with any drafter and any
    state it learned (default drafts; sampled drafts repeat only with the same proposals: docs/exactness.md)."""
    rng = np.random.default_rng(3)
    v = 6
    table = rng.normal(0, 2.0, size=(v, v))
    vocab = byte_vocab(v)
    target = bigram_runner(table)
    alone = SpeculativeDecoder(target, vocab)
    drafters = [SpeculativeDecoder.with_drafter(target, vocab, bigram_runner(table + rng.normal(0, s, size=(v, v))),
                                                vocab) for s in (0.0, 1.0, 3.0)]
    for seed in range(60):
        config = GenerationConfig(max_new_tokens=12, sampler=Sampler(temperature, top_p), seed=seed, draft_len=3)
        want = alone.generate([0, 1, 2], replace(config, speculative=False)).token_ids
        for dec in drafters:
            assert dec.generate([0, 1, 2], config).token_ids == want


def test_prefix_reuse_across_calls_is_exact(tiny_target, tiny_drafter, target_vocab, draft_vocab):
    """A follow-up prompt that extends the last sequence reuses the caches and stays exact."""
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab)
    ids = target_vocab.tokenizer.encode(PROMPTS[2])
    first = dec.generate(ids, GenerationConfig(max_new_tokens=10))
    follow = ids + first.token_ids + target_vocab.tokenizer.encode(" and then", add_special_tokens=False)
    got = dec.generate(follow, GenerationConfig(max_new_tokens=12))
    assert got.stats.prompt_tokens_reused >= len(ids)
    assert got.token_ids == baseline(tiny_target, target_vocab, follow, 12).token_ids
    other = dec.generate(ids[:3] + [7, 8, 9], GenerationConfig(max_new_tokens=5))  # diverges early
    assert other.token_ids == baseline(tiny_target, target_vocab, ids[:3] + [7, 8, 9], 5).token_ids
