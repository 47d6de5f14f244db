"""The speculative decoding loop: tokens -> draft -> bridge -> verify -> accept -> cache.

Each round the drafter proposes `draft_len` tokens in its own vocabulary, the
bridge turns them into target tokens, the target scores all of them in one
forward pass, and the accepted prefix plus one target token is committed. Both
runners then roll their caches back to what was accepted, and the drafter is
told the committed text in its own tokens. With no drafter the same loop is
plain target-only autoregressive decoding (the baseline), through the same
runner.

The loop never looks inside a runner: eager, ExecuTorch and onnxruntime
backends are interchangeable.
"""

from __future__ import annotations

import codecs
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import OmniDraftError
from .acceptance import NO_HEAD, draft_labels
from .bridge import NGRAM, Proposal, VocabBridge
from .draft_length import DraftLength
from .ngram_cache import NGramCache
from .runner import ModelRunner
from .sampling import Sampler
from .verify import verify
from .vocab import Vocab


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64
    draft_len: int = 4
    sampler: Sampler = field(default_factory=Sampler)
    seed: int = 0
    stop_strings: tuple[str, ...] = ()
    eos_ids: frozenset[int] = frozenset()
    speculative: bool = True
    # Cross-vocabulary sampling made exactly lossless: the drafter samples only among
    # directly mapped tokens (renormalized) and no n-gram merges or splits are
    # proposed, so q' is exactly the law each proposal was drawn from.
    strict_sampling: bool = False
    # How many tokens to draft (draft_length.py): "fixed" (draft_len), "heuristic"
    # (+2/-1 from draft_len) or "auto" (the acceptance head, threshold gamma); the
    # adaptive ones never draft more than max_draft_len.
    draft_policy: str = "fixed"
    max_draft_len: int = 8
    gamma: float = 0.5

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise OmniDraftError("max new tokens must be at least 1")
        self.draft_length()  # validates the policy and its numbers

    def draft_length(self) -> DraftLength:
        return DraftLength(self.draft_policy, self.draft_len, self.max_draft_len, self.gamma)


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    stop_reason: str
    stats: dict


@dataclass
class _Counters:
    target_calls: int = 0
    drafter_calls: int = 0
    draft_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    ngram_hits: int = 0
    ngram_accepted: int = 0
    rounds_drafted: int = 0
    accepted_lengths: Counter = field(default_factory=Counter)


class SpeculativeDecoder:
    """Generates with a target runner, optionally helped by a drafter runner."""

    def __init__(
        self,
        target: ModelRunner,
        target_vocab: Vocab,
        drafter: ModelRunner | None = None,
        draft_vocab: Vocab | None = None,
        ngram_cache: NGramCache | None = None,
    ):
        self.target = target
        self.target_vocab = target_vocab.padded(target.vocab_size)
        self.drafter = drafter
        self.bridge = None
        if drafter is not None:
            self.bridge = VocabBridge(draft_vocab.padded(drafter.vocab_size), self.target_vocab)
        self.ngram_cache = ngram_cache
        self.adapter = None  # an OnlineAdapter: learns from every verified round
        self.predictor = None  # an AcceptancePredictor: trains the drafter runner's acceptance head
        self._length: tuple[tuple, DraftLength] | None = None  # kept across calls (the heuristic's state)

    @property
    def cross_vocab(self) -> bool:
        return self.bridge is not None and not self.bridge.identity

    # -- prompts ----------------------------------------------------------------------
    def draft_prompt(self, target_prompt: list[int]) -> list[int]:
        """The drafter's view of the prompt: the same text, in draft tokens."""
        if self.bridge.identity:
            return list(target_prompt)
        tv = self.target_vocab
        bos = {tv.tokenizer.bos_token_id}
        body = target_prompt
        while body and body[0] in bos:
            body = body[1:]
        prefix = self.bridge.draft.tokenizer.encode("", add_special_tokens=True)
        return list(prefix) + self.bridge.draft.encode_bytes(tv.decode_bytes(body), lenient=True)

    # -- the loop ------------------------------------------------------------------------
    def generate(self, target_prompt: list[int], config: GenerationConfig, on_text=None) -> GenerationResult:
        target, drafter = self.target, self.drafter
        speculative = config.speculative and drafter is not None
        if not target_prompt:
            raise OmniDraftError("the prompt is empty")
        if len(target_prompt) >= target.max_context:
            raise OmniDraftError(
                f"the prompt is {len(target_prompt)} tokens; the context window is {target.max_context}"
            )
        rng = np.random.default_rng(config.seed)
        sampler = config.sampler
        length = self._draft_length(config)
        if speculative and length.needs_head and not drafter.has_head:
            raise OmniDraftError(NO_HEAD)
        counters = _Counters()
        seq = list(target_prompt)  # the target's sequence; seq[-1] is not yet in its cache
        draft_seq = self.draft_prompt(seq) if speculative else []
        out = _TextStream(self.target_vocab, config.stop_strings, on_text)
        generated: list[int] = []
        stop_reason = None

        start = time.perf_counter()
        # Reuse what the caches already hold (a chat's earlier turns, a shared system prompt).
        reused = _prefill(target, seq)
        if speculative:
            _prefill(drafter, draft_seq)
        adapter = self.adapter if speculative else None
        if adapter is not None:
            adapter.begin(draft_seq)
        prefill_s = time.perf_counter() - start
        rounds = []  # (seconds since start, proposed, accepted) per verification

        while stop_reason is None:
            room = target.max_context - len(seq)  # proposals that still fit in the target's cache
            if room < 0:
                stop_reason = "context_full"
                break
            max_props = min(room, config.max_new_tokens - len(generated) - 1)
            if target.max_tokens_per_call:
                max_props = min(max_props, target.max_tokens_per_call - 1)

            # draft -> bridge
            proposal, draft_ids, draft_probs, features = None, [], [], []
            if speculative and max_props > 0 and draft_seq:
                k = min(length.budget(), drafter.max_context - len(draft_seq) + 1, max_props)
                if k > 0:
                    strict = config.strict_sampling and self.cross_vocab
                    draft_ids, draft_q, draft_probs, features = self._draft(
                        draft_seq, k, sampler, rng, counters, length, strict)
                    cache = None if strict else self.ngram_cache
                    proposal = self.bridge.propose(draft_ids, draft_q, cache, max_props)
            m = len(proposal) if proposal is not None else 0

            # verify: the target's pending token plus all proposals in one call
            logits = target.forward(seq[target.position :] + (proposal.target_ids if m else []), target.position, m + 1)
            counters.target_calls += 1
            if proposal is None:
                proposal = Proposal()
            n, next_token = verify(proposal, logits, sampler, rng, self.bridge, draft_probs)

            # accept
            counters.drafted += m
            counters.accepted += n
            counters.accepted_lengths[n] += 1
            rounds.append((time.perf_counter() - start, m, n))
            counters.ngram_hits += proposal.kind.count(NGRAM)
            committed = proposal.target_ids[:n] + [next_token]
            target.rollback(len(seq) + n)
            seq.extend(committed)

            # cache/adapt: learn spellings, reward accepted merges, keep the target's rows; resync
            length.observe(m, n)
            if self.predictor is not None and draft_ids:
                self.predictor.observe(features, draft_labels(proposal, logits, sampler, len(draft_ids)))
            if adapter is not None:
                adapter.observe(committed, logits[: n + 1])
            if speculative:
                self._after_round(draft_seq, draft_ids, proposal, n, next_token, committed, counters)

            for tok in committed:
                if tok in config.eos_ids:
                    stop_reason = "eos"
                    break
                generated.append(tok)
                if out.push(tok):
                    stop_reason = "stop_string"
                    break
                if len(generated) >= config.max_new_tokens:
                    stop_reason = "max_new_tokens"
                    break
        out.flush()
        wall = time.perf_counter() - start
        stats = self._stats(counters, generated, prefill_s, wall)
        lora_updated = False
        if adapter is not None:  # an update runs after the reply, between prompts
            t0 = time.perf_counter()
            lora_updated = adapter.end()
            if lora_updated:
                drafter.reset()  # new weights: the drafter's cached keys and values are stale
            stats["adaptation"] = adapter.summary()
            stats["adaptation"]["seconds"] = time.perf_counter() - t0
        if self.predictor is not None and speculative:
            self.predictor.end_generation(lora_updated)
            stats["predictor"] = self.predictor.summary()
        stats["draft_policy"] = config.draft_policy
        stats["rounds"] = rounds
        stats["prompt_tokens_reused"] = reused
        return GenerationResult(out.text, generated, stop_reason, stats)

    def _draft_length(self, config: GenerationConfig) -> DraftLength:
        key = (config.draft_policy, config.draft_len, config.max_draft_len, config.gamma)
        if self._length is None or self._length[0] != key:
            self._length = (key, config.draft_length())
        return self._length[1]

    def _draft(self, draft_seq, k, sampler, rng, counters, length: DraftLength, strict: bool = False):
        """Sample up to k draft tokens; stop early at a token no target token can follow, or
        when the draft-length policy says so. Returns ids, q(ids), distributions and, with
        an acceptance head, each token's head features (for training the head).

        strict: sample only among draft tokens with a direct target twin.
        """
        drafter = self.drafter
        if drafter.position >= len(draft_seq):  # nothing new to feed (the last text was unspellable)
            drafter.rollback(len(draft_seq) - 1)
        logits = drafter.forward(draft_seq[drafter.position :], drafter.position)[-1]
        counters.drafter_calls += 1
        ids, qs, dists, features = [], [], [], []
        special = self.bridge.draft.special
        unmapped = None
        if strict:
            unmapped = np.ones(len(logits), dtype=bool)
            n = min(len(logits), len(self.bridge.draft_to_target))
            unmapped[:n] = self.bridge.draft_to_target[:n] < 0
        for i in range(k):
            if unmapped is not None:
                logits = np.where(unmapped, -np.inf, logits)
            d, probs = sampler.choose(logits, rng)
            if not self.bridge.identity and (d >= len(special) or special[d]):
                break
            ids.append(d)
            qs.append(1.0 if probs is None else float(probs[d]))
            dists.append(probs)
            head = drafter.head_output if drafter.has_head else None
            features.append(head[0] if head else None)
            if length.stop(head[1] if head else None):
                break
            if i + 1 < k:
                logits = drafter.forward([d], drafter.position)[-1]
                counters.drafter_calls += 1
        counters.draft_tokens += len(ids)
        counters.rounds_drafted += 1
        return ids, np.array(qs), dists, features

    def _after_round(self, draft_seq, draft_ids, proposal, n, next_token, committed, counters):
        if self.ngram_cache is not None and self.cross_vocab:
            for j in range(n):
                if proposal.kind[j] == NGRAM:
                    counters.ngram_accepted += 1
                    self.ngram_cache.record_accepted(draft_ids[proposal.draft_start[j] : proposal.draft_end[j]])
            self.bridge.learn(self.ngram_cache, committed)
        kept, append = self.bridge.resync(draft_ids, proposal, n, next_token)
        base = len(draft_seq)
        self.drafter.rollback(base + kept)
        draft_seq.extend(draft_ids[:kept])
        draft_seq.extend(append)

    def _stats(self, c: _Counters, generated, prefill_s, wall) -> dict:
        decode_s = max(wall - prefill_s, 1e-9)
        cache = self.ngram_cache
        return {
            "new_tokens": len(generated),
            "target_calls": c.target_calls,
            "tokens_per_target_call": len(generated) / max(c.target_calls, 1),
            "drafted": c.drafted,
            "accepted": c.accepted,
            "acceptance_rate": c.accepted / c.drafted if c.drafted else 0.0,
            "draft_tokens": c.draft_tokens,
            "mean_draft_len": c.draft_tokens / max(c.rounds_drafted, 1),
            "drafter_calls": c.drafter_calls,
            "ngram_cache_hits": c.ngram_hits,
            "ngram_cache_accepted": c.ngram_accepted,
            "ngram_cache_size": len(cache) if cache is not None else 0,
            "accepted_length_histogram": {str(k): v for k, v in sorted(c.accepted_lengths.items())},
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "wall_s": wall,
            "tokens_per_s": len(generated) / decode_s,
            "cross_vocab": self.cross_vocab,
            "vocab_intersection": self.bridge.intersection_size if self.bridge else None,
        }


def _prefill(runner: ModelRunner, seq: list[int]) -> int:
    """Bring the runner's cache to seq[:-1], reusing the prefix it already holds; return its length."""
    keep = 0
    cached = runner.tokens
    limit = min(runner.position, len(seq) - 1)
    while keep < limit and cached[keep] == seq[keep]:
        keep += 1
    runner.rollback(keep)
    if len(seq) - 1 > keep:
        runner.forward(seq[keep:-1], keep)
    return keep


class _TextStream:
    """Target tokens -> text, streamed; holds back cut UTF-8 and watches stop strings."""

    def __init__(self, vocab: Vocab, stop_strings, on_text):
        self.vocab = vocab
        self.stop_strings = [s for s in stop_strings if s]
        self.on_text = on_text
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self._sent = 0

    def push(self, token: int) -> bool:
        """Add a token's text; True when a stop string has just appeared."""
        if self.vocab.special[token]:
            return False
        piece = self.decoder.decode(self.vocab.token_bytes[token])
        if not piece:
            return False
        self.text += piece
        for s in self.stop_strings:
            at = self.text.find(s, max(0, len(self.text) - len(piece) - len(s)))
            if at >= 0:
                self.text = self.text[: at + len(s)]
                self._emit()
                return True
        self._emit()
        return False

    def flush(self) -> None:
        self.text += self.decoder.decode(b"", final=True)
        self._emit()

    def _emit(self) -> None:
        if self.on_text and len(self.text) > self._sent:
            self.on_text(self.text[self._sent :])
        self._sent = len(self.text)
