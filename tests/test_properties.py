"""Property-based tests of the vocabulary bridge on the real tokenizer pair."""

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
