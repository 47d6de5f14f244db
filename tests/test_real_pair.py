"""One short end-to-end run on the real default pair (Gemma-3-270M <- the shipped small drafter)."""

import pytest

from omnidraft.pair import build_eager_pair
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.ngram_cache import NGramCache
from omnidraft.runtime.sampling import Sampler

pytestmark = pytest.mark.real

PROMPTS = [
    "import os\n\ndef list_python_files(root):\n    \"\"\"Return every .py file under root.\"\"\"\n",
    "ROMEO. But soft, what light through yonder window breaks?\nJULIET.",
]


@pytest.fixture(scope="module")
def pair():
    pair = build_eager_pair(use_ngram_cache=False)  # never touch the user's saved cache
    pair.drafting.ngram_cache = NGramCache(pair.bridge.pair_id)
    return pair


def test_real_pair_greedy_equals_target_only_and_accepts(pair):
    dec = pair.decoder
    assert pair.cross_vocab and pair.bridge.intersection_size > 40_000
    eos = pair.eos_ids()
    tokens = calls = 0
    for prompt in PROMPTS:
        ids = pair.encode_prompt(prompt)
        want = dec.generate(ids, GenerationConfig(max_new_tokens=32, speculative=False, eos_ids=eos))
        got = dec.generate(ids, GenerationConfig(max_new_tokens=32, draft_len=4, eos_ids=eos))
        assert got.token_ids == want.token_ids, (got.text, want.text)
        assert got.text == want.text
        tokens += got.stats.new_tokens
        calls += got.stats.target_calls
    # A trained pair agrees far more than chance: clearly more than one token per target call.
    assert tokens / calls > 1.3


def test_real_pair_chat_and_seeded_sampling(pair):
    ids = pair.encode_prompt("Say hello.", chat=True)
    assert pair.target_vocab.tokenizer.convert_tokens_to_ids("<start_of_turn>") in ids
    cfg = GenerationConfig(max_new_tokens=16, sampler=Sampler(0.8, 0.95), seed=7, eos_ids=pair.eos_ids(chat=True))
    a = pair.decoder.generate(ids, cfg)
    b = pair.decoder.generate(ids, cfg)
    assert a.token_ids == b.token_ids and 0 < len(a.token_ids) <= 16
    assert a.stats.new_tokens == len(a.token_ids)
    assert a.stats.accepted <= a.stats.drafted  # the drafter proposed and the target judged
