"""A chat session: turns that keep the target's KV cache, and a window that moves instead of ending.

Each turn's prompt is the whole conversation in the target's chat format, the replies as the
tokens the target generated (not re-tokenized text), so the prompt extends what the target's
cache already holds by the new message alone: the decoder's prefill reads only that (its prefix
reuse), and lookup sees the whole conversation (it searches the prompt). When the conversation
and the room for a reply (max_new_tokens) no longer fit the context window, the oldest turns
are dropped, the system prompt kept, until the conversation takes at most half the window (so
that the next turns fit again: one shift, then several turns that read only their message), and
the shorter conversation is read once afresh; the turn's statistics say how many turns were
dropped. Never a dead end: a message too long for the window even alone is one clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from .errors import OmniDraftError
from .pair import Pair
from .request import check_text, generation_config
from .runtime.decoding import GenerationConfig, GenerationResult


@dataclass
class Turn:
    user: str
    reply: str
    reply_ids: list[int]


class Chat:
    """A conversation with a pair; `send` (or `stream`) one user message at a time."""

    def __init__(self, pair: Pair, system: str | None = None):
        if system is not None:
            if not isinstance(system, str):
                raise OmniDraftError(f"the system prompt must be text (str), got {type(system).__name__}")
            check_text(system, "the system prompt")
        self.pair = pair
        self.system = system or None
        self.turns: list[Turn] = []
        self.dropped = 0  # turns dropped from the start of the conversation so far

    @property
    def messages(self) -> list[dict]:
        """The conversation as the target reads it now (dropped turns left out)."""
        return self._messages(self.turns)

    def _messages(self, turns: list[Turn], user: str | None = None) -> list[dict]:
        out = [{"role": "system", "content": self.system}] if self.system else []
        for t in turns:
            out += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.reply, "ids": t.reply_ids}]
        return out + ([{"role": "user", "content": user}] if user is not None else [])

    def prompt(self, message: str, max_new_tokens: int) -> tuple[list[int], int]:
        """The conversation with `message`, ready for the reply, and how many of the oldest turns had to go for
        it and max_new_tokens to fit the window."""
        if not isinstance(message, str):
            raise OmniDraftError(f"the message must be text (str), got {type(message).__name__}")
        check_text(message, "the message")
        if not message.strip():
            raise OmniDraftError("the message is empty")
        window = self.pair.decoder.target.max_context
        ids = self.pair.encode_chat(self._messages(self.turns, message))
        if len(ids) + max_new_tokens <= window:
            return ids, 0
        for drop in range(1, len(self.turns) + 1):  # shift: down to half the window, or as far as it goes
            ids = self.pair.encode_chat(self._messages(self.turns[drop:], message))
            if len(ids) + max_new_tokens <= window // 2:
                return ids, drop
        for drop in range(1, len(self.turns) + 1):  # the reply's room is over half the window: whatever fits
            ids = self.pair.encode_chat(self._messages(self.turns[drop:], message))
            if len(ids) + max_new_tokens <= window:
                return ids, drop
        if len(ids) < window:  # alone it fits, if not with all the room asked for: the reply may end at the window
            return ids, len(self.turns)
        raise OmniDraftError(f"the message is {len(ids)} tokens in the chat format (with the system prompt); the "
                             f"context window is {window}")

    def _config(self, max_new_tokens: int, options: dict) -> GenerationConfig:
        return generation_config(self.pair, True, max_new_tokens=max_new_tokens, **options)

    def send(self, message: str, *, max_new_tokens: int = 256, **options) -> GenerationResult:
        """The reply to `message` (options: generate()'s sampling ones); kept in the conversation."""
        config = self._config(max_new_tokens, options)
        ids, drop = self.prompt(message, max_new_tokens)
        return self._keep(message, drop, self.pair.decoder.generate(ids, config))

    def stream(self, message: str, *, max_new_tokens: int = 256, sources: bool = False,
               **options) -> Iterator[str]:
        """send(), as the text is accepted; the iterator's return value is the result. Closed early, the reply
        so far is kept."""
        config = self._config(max_new_tokens, options)
        ids, drop = self.prompt(message, max_new_tokens)
        done: list[GenerationResult] = []
        try:
            yield from self.pair.decoder.stream(ids, config, sources=sources, done=done.append)
        finally:  # ended, or closed early (cancelled): what was said is part of the conversation
            if done:
                self._keep(message, drop, done[0])
        return done[0]

    def _keep(self, message: str, drop: int, result: GenerationResult) -> GenerationResult:
        self.turns = self.turns[drop:] + [Turn(message, result.text, list(result.token_ids))]
        self.dropped += drop
        result.stats = replace(result.stats, dropped_turns=drop)
        return result
