"""Token ids <-> bytes on the real tokenizers of the default pair."""

import pytest

TEXTS = [
    "Hello, world!",
    "  leading spaces and\ttabs\n\nnew lines   ",
    "Café, naïve, Ærøskøbing, Łódź",
    "中文分词测试，日本語のテキスト、한국어",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "def f(x):\n    return {'a': [1, 2]}  # comment\n",
    "<eos> <|im_end|> <start_of_turn> look like specials but are text",
    "\x00\x01 control \x7f chars",
]


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_round_trip(text, target_vocab, draft_vocab):
    for vocab in (target_vocab, draft_vocab):
        data = text.encode("utf-8")
        ids = vocab.encode_bytes(data)
        assert vocab.decode_bytes(ids) == data
        assert not any(vocab.special[i] for i in ids)


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_cut_utf8_is_spelled_with_byte_tokens(cut, target_vocab, draft_vocab):
    data = "😀".encode()[:cut] + b" tail"
    for vocab in (target_vocab, draft_vocab):
        ids = vocab.encode_bytes(data)
        assert vocab.decode_bytes(ids) == data


def test_token_bytes_match_tokenizer_decode(target_vocab, draft_vocab):
    text = "The café served 中文 and 😀 to   everyone.\n"
    for vocab in (target_vocab, draft_vocab):
        ids = vocab.tokenizer.encode(text, add_special_tokens=False)
        assert vocab.decode_bytes(ids).decode("utf-8") == vocab.tokenizer.decode(ids)


def test_special_tokens_are_flagged(target_vocab, draft_vocab):
    t = target_vocab.tokenizer
    assert target_vocab.special[t.bos_token_id] and target_vocab.special[t.eos_token_id]
    assert draft_vocab.special[draft_vocab.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert all(b >= 0 for b in target_vocab.byte_tokens)  # Gemma: byte fallback for all 256
    assert target_vocab.byte_fallback.sum() == 256
    # SmolLM2's byte-level vocabulary lacks a few bytes (some control bytes, 0xF1+):
    # everything printable and every common UTF-8 lead/continuation byte is there.
    common = [*range(0x20, 0x7F), 0x09, 0x0A, *range(0x80, 0xC0), *range(0xC2, 0xF1)]
    assert all(draft_vocab.byte_tokens[b] >= 0 for b in common)


def test_unspellable_bytes(draft_vocab):
    with pytest.raises(ValueError, match="cannot spell byte 0x04"):
        draft_vocab.encode_bytes(b"a\x04b")
    assert draft_vocab.decode_bytes(draft_vocab.encode_bytes(b"a\x04b\xff", lenient=True)) == b"ab"
