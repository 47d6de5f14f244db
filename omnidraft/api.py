"""The Python API: a pair opened in one call; generate and stream with the names users know.

    import omnidraft

    with omnidraft.load() as m:  # the default pair on eager PyTorch; or backend="executorch", bundle=DIR
        print(m.generate("Once upon a time", max_new_tokens=64).text)
        for piece in m.stream(messages=[{"role": "user", "content": "Hi"}]):
            print(piece, end="", flush=True)

load() takes PairOptions' fields by name (target, drafter, backend, bundle, proposer, threads,
profile, draft_len, use_history, adapt=True or an AdaptConfig, ...; the proposer defaults to the
hybrid, as on the command line). Results carry the text, the token ids, why generation stopped
and typed statistics. What the pair learned is saved when the `with` block ends (or save(), close()).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from .errors import OmniDraftError
from .pair import Pair, PairOptions, open_pair
from .request import generation_config
from .runtime.choices import Backend, ProposerKind
from .runtime.decoding import GenerationResult


def load(**options) -> "Model":
    """Open a pair (every option checked before any model loads); see the module's docstring."""
    known = {f.name for f in dataclasses.fields(PairOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise OmniDraftError(f"unknown option {', '.join(unknown)}; load() takes {', '.join(sorted(known))}")
    options.setdefault("proposer", ProposerKind.HYBRID)
    if options.get("adapt") is True:
        from .adaptation.online import AdaptConfig

        options["adapt"] = AdaptConfig()
    elif options.get("adapt") is False:
        options["adapt"] = None
    if options.get("bundle") is not None:
        options["bundle"] = Path(options["bundle"])
    o = PairOptions(**options)
    o.check()  # before torch's threads are set, and before any model loads
    if o.threads is not None and o.backend == Backend.EAGER:
        import torch

        torch.set_num_threads(o.threads)
    return Model(open_pair(o))


class Model:
    """An opened pair: generate() and stream() a prompt or a conversation. One generation runs at a time: a
    second thread's generate waits for the first (a lock in the decoder), and starting a generation ends a
    suspended stream as cancelled."""

    def __init__(self, pair: Pair):
        self.pair = pair
        self.last: GenerationResult | None = None  # the last generation's result (stream()'s too)

    def generate(self, prompt: str | None = None, *, messages: list[dict] | None = None, max_new_tokens: int = 64,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, stop: str | list[str] | None = (),
                 strict_sampling: bool = False, sampled_drafts: bool = False, learn: bool = True) -> GenerationResult:
        """The reply to a prompt (plain text) or to messages (the target's chat format). Temperature 0 is
        greedy and exact: the target's own greedy output. Sampling is lossless and a seed gives the same text
        whoever proposed, unless sampled_drafts (the drafter samples, verified by rejection sampling);
        strict_sampling: with sampled drafts, exactly lossless across vocabularies (docs/exactness.md).
        learn=False keeps nothing of this generation."""
        ids, config = self._request(prompt, messages, max_new_tokens, temperature, top_p, seed, stop, strict_sampling,
                                    sampled_drafts)
        self.last = self.pair.decoder.generate(ids, config, learn=learn)
        return self.last

    def stream(self, prompt: str | None = None, *, messages: list[dict] | None = None, max_new_tokens: int = 64,
               temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, stop: str | list[str] = (),
               strict_sampling: bool = False, sampled_drafts: bool = False, learn: bool = True,
               sources: bool = False) -> Iterator[str]:
        """generate(), as the text is accepted; `last` holds the result once the iterator is done. Stopping
        early ends the generation there (stop_reason "cancelled"). sources=True: (text, who proposed it)
        pairs, the source "lookup", "drafter" or "target" (the target's own correction or bonus token)."""
        ids, config = self._request(prompt, messages, max_new_tokens, temperature, top_p, seed, stop, strict_sampling,
                                    sampled_drafts)
        return self._pieces(ids, config, learn, sources)

    def _pieces(self, ids, config, learn, sources) -> Iterator[str]:
        self.last = None
        yield from self.pair.decoder.stream(ids, config, learn, done=self._done, sources=sources)

    def _done(self, result: GenerationResult) -> None:
        self.last = result

    def save(self) -> None:
        """Save what the pair learned (n-gram cache, acceptance head, lookup history, measured costs)."""
        self.pair.save_cache()

    def chat(self, system: str | None = None):
        """A conversation that keeps the target's KV cache across turns (omnidraft/session.py): `send(message)`
        returns the reply, `stream(message)` yields it; each prompt reads only the new message, and when the
        conversation outgrows the window its oldest turns are dropped (the system prompt kept)."""
        from .session import Chat

        return Chat(self.pair, system)

    def close(self) -> None:
        self.save()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, prompt, messages, max_new_tokens, temperature, top_p, seed, stop, strict_sampling,
                 sampled_drafts=False):
        """The prompt's target tokens and the generation's config, every argument checked (one clear error)."""
        if (prompt is None) == (messages is None):
            raise OmniDraftError("give a prompt or messages (one of them)")
        if prompt is not None and not isinstance(prompt, str):
            raise OmniDraftError(f"the prompt must be text (str), got {type(prompt).__name__}")
        if messages is not None and not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
                for m in messages)):
            raise OmniDraftError('messages: a non-empty list of {"role": "user" or "assistant", "content": text}')
        chat = messages is not None
        config = generation_config(self.pair, chat, max_new_tokens=max_new_tokens, temperature=temperature,
                                   top_p=top_p, seed=seed, stop=stop, strict_sampling=strict_sampling,
                                   sampled_drafts=sampled_drafts)
        return (self.pair.encode_chat(messages) if chat else self.pair.encode_prompt(prompt)), config


