"""The n-gram cache: merges and splits on the real pair, LFU bound, persistence."""

import json
import os

import numpy as np
import pytest

from omnidraft.runtime.bridge import DIRECT, NGRAM, SPLIT_FIRST, VocabBridge
from omnidraft.runtime.ngram_cache import CacheFileError, NGramCache, load_or_fresh

TEXTS = [
    "The snowflakes were falling on the unbelievably quiet village.",
    "Les élèves ont étudié à l'université de Montréal.",
    "東京都の天気は晴れです。北京欢迎你！",
    "Party time 🎉🎉 with 👩🏽‍💻 coders",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
]


@pytest.fixture(scope="module")
def bridge(draft_vocab, target_vocab):
    return VocabBridge(draft_vocab, target_vocab)


def test_intersection_is_large_and_byte_exact(bridge, draft_vocab, target_vocab):
    assert not bridge.identity
    assert 40_000 < bridge.intersection_size < len(draft_vocab)
    for d in np.flatnonzero(bridge.draft_to_target >= 0)[::997]:
        assert draft_vocab.token_bytes[d] == target_vocab.token_bytes[bridge.draft_to_target[d]]
        assert not target_vocab.byte_fallback[bridge.draft_to_target[d]] or len(draft_vocab.token_bytes[d]) == 1


@pytest.mark.parametrize("text", TEXTS)
def test_merge_after_learning_reproduces_target_tokens(text, bridge, draft_vocab, target_vocab):
    """Learn the target's tokens of a text, then the drafter's spelling of each token merges back."""
    data = text.encode()
    target_ids = target_vocab.encode_bytes(data)
    cache = NGramCache(bridge.pair_id)
    bridge.learn(cache, target_ids)
    draft_ids = [d for t in target_ids for d in draft_vocab.encode_bytes(target_vocab.token_bytes[t])]
    prop = bridge.propose(draft_ids, np.ones(len(draft_ids)), cache, max_tokens=10_000)
    assert prop.target_ids == target_ids
    assert target_vocab.decode_bytes(prop.target_ids) == data
    multi = [t for t in target_ids if len(draft_vocab.encode_bytes(target_vocab.token_bytes[t])) > 1]
    assert prop.kind.count(NGRAM) == len(multi)


def test_learning_teaches_the_same_cache_whatever_the_spelling_memo_holds(draft_vocab, target_vocab, monkeypatch):
    """learn memoizes each target token's spelling; with the memo cleared whenever it is full (here at 3 tokens)
    it teaches the cache exactly what spelling every committed token afresh does."""
    from omnidraft.runtime import bridge as bridge_module

    target_ids = [t for text in TEXTS for t in target_vocab.encode_bytes(text.encode())] * 2  # every token twice
    caches = []
    for cap in (bridge_module.MAX_SPELLINGS, 3):
        monkeypatch.setattr(bridge_module, "MAX_SPELLINGS", cap)
        bridge = VocabBridge(draft_vocab, target_vocab)
        cache = NGramCache(bridge.pair_id)
        for i in range(0, len(target_ids), 5):  # as rounds commit them, a few at a time
            bridge.learn(cache, target_ids[i:i + 5])
        assert len(bridge._spellings) <= cap
        caches.append(cache.to_json())
    fresh = {}
    for t in target_ids:
        spelling = draft_vocab.encode_bytes(target_vocab.token_bytes[t])
        if len(spelling) >= 2:
            fresh[tuple(spelling)] = fresh.get(tuple(spelling), 0) + 1
    assert caches[0] == caches[1]
    assert {tuple(ngram): count for ngram, _, count in caches[0]["entries"]} == fresh


@pytest.mark.parametrize("text", TEXTS)
def test_proposals_spell_the_draft_text_without_cache(text, bridge, draft_vocab, target_vocab):
    draft_ids = draft_vocab.encode_bytes(text.encode())
    prop = bridge.propose(draft_ids, np.full(len(draft_ids), 0.5), None, max_tokens=10_000)
    assert target_vocab.decode_bytes(prop.target_ids) == text.encode()
    assert set(prop.kind) <= {DIRECT, SPLIT_FIRST, "split-rest"}
    assert prop.draft_end[-1] == len(draft_ids)


def test_ngram_q_is_product_and_resync_keeps_text(bridge, draft_vocab, target_vocab):
    data = " snowflakes".encode()
    (t,) = [t for t in target_vocab.encode_bytes(data)][:1] or [None]
    cache = NGramCache(bridge.pair_id)
    bridge.learn(cache, [t])
    spelling = draft_vocab.encode_bytes(target_vocab.token_bytes[t])
    if len(spelling) < 2:
        pytest.skip("the drafter spells this token with one token")
    q = np.array([0.5, 0.4, 0.3, 0.2])[: len(spelling)]
    prop = bridge.propose(spelling, q, cache, 8)
    assert prop.kind == [NGRAM] and prop.q[0] == pytest.approx(np.prod(q))
    kept, append = bridge.resync(spelling, prop, 1, target_vocab.encode_bytes(b" fell")[0])
    assert kept == len(spelling)
    assert draft_vocab.decode_bytes(spelling[:kept] + append) == data + b" fell"


def test_lfu_eviction_keeps_bound_and_frequent_entries():
    cache = NGramCache("pair", max_entries=50)
    for i in range(10):
        for _ in range(5):
            cache.add(1000 + i, [i, i + 1])  # frequent
    for i in range(500):
        cache.add(2000 + i, [100 + i, 7, 7])
        assert len(cache) <= 50
    for i in range(10):
        assert cache.lookup([i, i + 1], 0) == (1000 + i, 2)
    assert cache.stats.evictions >= 450


def test_longest_match_wins():
    cache = NGramCache("pair")
    cache.add(1, [5, 6])
    cache.add(2, [5, 6, 7])
    assert cache.lookup([5, 6, 7, 8], 0) == (2, 3)
    assert cache.lookup([5, 6, 8], 0) == (1, 2)
    assert cache.lookup([9, 5, 6], 0) is None


def test_save_load_round_trip(tmp_path):
    cache = NGramCache("pair", max_entries=100)
    for i in range(40):
        cache.add(i, [i, i + 1, i + 2])
    path = tmp_path / "c.json"
    cache.save(path)
    loaded = NGramCache.load(path, "pair")
    assert sorted(loaded.items()) == sorted(cache.items())
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


@pytest.mark.parametrize(
    "content, why",
    [
        (b"{not json", "unreadable"),
        (b"", "unreadable"),
        (json.dumps({"format": "omnidraft-ngram-cache", "version": 1, "pair_id": "other", "max_entries": 5,
                     "max_ngram": 8, "entries": []}).encode(), "another model pair"),
        (json.dumps({"format": "omnidraft-ngram-cache", "version": 99}).encode(), "format version"),
        (json.dumps({"format": "omnidraft-ngram-cache", "version": 1, "pair_id": "pair", "max_entries": 5,
                     "max_ngram": 8, "entries": [[[1], 2, 1]]}).encode(), "malformed"),
    ],
)
def test_bad_cache_file_is_set_aside(tmp_path, content, why):
    path = tmp_path / "c.json"
    path.write_bytes(content)
    with pytest.raises(CacheFileError, match=why):
        NGramCache.load(path, "pair")
    warnings = []
    cache = load_or_fresh(path, "pair", 100, warn=warnings.append)
    assert len(cache) == 0 and not path.exists()
    assert len(warnings) == 1 and warnings[0].startswith("[omnidraft] warning: ") and "starting a fresh cache" in warnings[0]
    assert len(list(tmp_path.glob("c.json.bad-*"))) == 1
