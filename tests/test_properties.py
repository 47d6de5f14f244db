"""Property-based tests of the vocabulary bridge, the n-gram cache and greedy exactness on the real tokenizer pair."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnidraft.runtime.bridge import VocabBridge
from omnidraft.runtime.ngram_cache import NGramCache

TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
        st.sampled_from(list("  \n\t\té中😀👍🏽‍")),
    ),
    max_size=40,
)


@pytest.fixture(scope="module")
def bridge(draft_vocab, target_vocab):
    return VocabBridge(draft_vocab, target_vocab)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(text=TEXT)
def test_target_tokens_round_trip_through_draft_tokens(text, bridge):
    """target -> drafter spelling (learned into the cache) -> merged proposal == the target tokens."""
    target_vocab, draft_vocab = bridge.target, bridge.draft
    data = text.encode()
    target_ids = target_vocab.encode_bytes(data, lenient=True)
    spelled = target_vocab.decode_bytes(target_ids)
    cache = NGramCache(bridge.pair_id)
    bridge.learn(cache, target_ids)
    draft_ids = []
    for t in target_ids:
        draft_ids += draft_vocab.encode_bytes(target_vocab.token_bytes[t], lenient=True)
    if draft_vocab.decode_bytes(draft_ids) != spelled:
        return  # a byte the drafter cannot spell at all (e.g. 0x04): nothing to propose
    prop = bridge.propose(draft_ids, np.ones(len(draft_ids)), cache, max_tokens=10_000)
    assert target_vocab.decode_bytes(prop.target_ids) == spelled
    assert prop.target_ids == target_ids
    assert len(cache) <= cache.max_entries


@SETTINGS
@given(text=TEXT, cut=st.integers(0, 10), accepted=st.integers(0, 12), next_text=TEXT)
def test_resync_keeps_drafter_text_equal_to_target_text(text, cut, accepted, next_text, bridge):
    """After any round the drafter's tokens spell exactly what the target committed."""
    target_vocab, draft_vocab = bridge.target, bridge.draft
    draft_ids = draft_vocab.encode_bytes(text.encode(), lenient=True)[: cut + 1]
    prop = bridge.propose(draft_ids, np.full(len(draft_ids), 0.5), None, max_tokens=10_000)
    n = min(accepted, len(prop))
    nxt = target_vocab.encode_bytes(next_text.encode() or b"x")[0]
    committed = target_vocab.decode_bytes(prop.target_ids[:n] + [nxt])
    try:
        draft_vocab.encode_bytes(committed)
    except ValueError:
        return  # the committed text has a byte the drafter cannot spell at all
    kept, append = bridge.resync(draft_ids, prop, n, nxt)
    assert draft_vocab.decode_bytes(draft_ids[:kept] + append) == committed
    assert 0 <= kept <= len(draft_ids)


@SETTINGS
@given(text=TEXT, learned=TEXT, k=st.integers(1, 12))
def test_merged_proposals_spell_the_draft_text(text, learned, k, bridge):
    """Whatever the cache learned, a proposal spells exactly the draft tokens it covers."""
    target_vocab, draft_vocab = bridge.target, bridge.draft
    cache = NGramCache(bridge.pair_id)
    bridge.learn(cache, target_vocab.encode_bytes((learned + text).encode(), lenient=True))
    draft_ids = draft_vocab.encode_bytes(text.encode(), lenient=True)
    prop = bridge.propose(draft_ids, np.full(len(draft_ids), 0.5), cache, max_tokens=k)
    assert len(prop) <= k
    covered = max(prop.draft_end, default=0)
    spelled = target_vocab.decode_bytes(prop.target_ids)
    assert spelled.startswith(draft_vocab.decode_bytes(draft_ids[:covered]))
    assert draft_vocab.decode_bytes(draft_ids).startswith(spelled)


@SETTINGS
@given(texts=st.lists(TEXT, min_size=1, max_size=8), bound=st.integers(1, 12))
def test_the_cache_never_exceeds_its_bound(texts, bound, bridge):
    cache = NGramCache(bridge.pair_id, max_entries=bound)
    for text in texts:
        bridge.learn(cache, bridge.target.encode_bytes(text.encode(), lenient=True))
        assert len(cache) <= bound


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT.filter(lambda t: t.strip()), k=st.integers(1, 6))
def test_greedy_output_equals_target_only_for_any_text(text, k, tiny_target, tiny_drafter, target_vocab, draft_vocab):
    """Tiny random models with the real tokenizers: speculative greedy == target-only greedy, any prompt."""
    from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder

    ids = target_vocab.tokenizer.encode(text)
    want = SpeculativeDecoder(tiny_target, target_vocab).generate(ids, GenerationConfig(10, speculative=False))
    dec = SpeculativeDecoder.with_drafter(tiny_target, target_vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    for _ in range(2):  # the second run proposes through what the cache learned
        got = dec.generate(ids, GenerationConfig(10, draft_len=k))
        assert got.token_ids == want.token_ids
        assert got.stats.accepted <= got.stats.drafted
