"""Chat sessions (omnidraft/session.py): turns that read only the new message, replies exact, a window that moves."""

import os
from unittest import mock

import pytest

import omnidraft
from omnidraft.errors import OmniDraftError
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder

MESSAGES = ["Hi, who are you?", "Tell me about the sea.", "And the mountains?", "Write a short poem.",
            "Thanks! One more about rivers.", "What did I ask first?"]


@pytest.fixture
def load(tmp_path, tiny_checkpoints):
    def open_model(**options):
        with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(tmp_path / "home")}):
            return omnidraft.load(target=str(tiny_checkpoints["target"]), drafter=str(tiny_checkpoints["drafter"]),
                                  **options)
    return open_model


def target_only(pair, ids, n):
    alone = SpeculativeDecoder(pair.decoder.target, pair.target_vocab)
    return alone.generate(ids, GenerationConfig(max_new_tokens=n, eos_ids=pair.eos_ids(True), speculative=False))


def test_each_turn_reads_only_the_new_message_and_replies_exactly(load):
    m = load()
    chat = m.chat(system="You are terse.")
    for i, message in enumerate(MESSAGES[:4]):
        before = len(chat.pair.decoder.target.tokens)
        ids, _ = chat.prompt(message, 24)
        r = chat.send(message, max_new_tokens=24)
        assert r.stats.dropped_turns == 0 and r.stats.prompt_tokens == len(ids)
        if i:  # everything the cache held is still the conversation's start: only the new message is read
            assert r.stats.prompt_tokens_reused == before
        assert r.token_ids == target_only(m.pair, ids, 24).token_ids  # greedy: the target's own reply
        assert chat.turns[-1].reply_ids == r.token_ids
    assert [msg["role"] for msg in chat.messages] == ["system"] + ["user", "assistant"] * 4


def test_a_long_chat_moves_its_window_and_keeps_the_system_prompt(load):
    m = load(max_context=160)
    chat = m.chat(system="SYSTEM-MARK")
    dropped = []
    for i in range(12):
        r = chat.send(MESSAGES[i % len(MESSAGES)] + " " + "more words " * 5, max_new_tokens=20)
        assert r.stop_reason in ("max_new_tokens", "eos")
        dropped.append(r.stats.dropped_turns)
        prompt = m.pair.target_vocab.tokenizer.decode(chat.pair.encode_chat(chat.messages))
        assert "SYSTEM-MARK" in prompt
    assert sum(dropped) > 0 and chat.dropped == sum(dropped)
    assert len(chat.turns) < 12


def test_a_stream_closed_early_keeps_what_was_said_and_errors_are_one_line(load):
    m = load(max_context=64)
    chat = m.chat()
    it = chat.stream("Tell me a long story.", max_new_tokens=30)
    first = next(it)
    it.close()
    assert first and chat.turns and chat.turns[-1].reply.startswith(first)
    for bad, needle in (("", "message is empty"), ("x\udcff", "not valid UTF-8"), ("word " * 200, "context window is 64")):
        with pytest.raises(OmniDraftError, match=needle):
            chat.send(bad)
    with pytest.raises(OmniDraftError, match="system prompt must be text"):
        m.chat(system=5)
