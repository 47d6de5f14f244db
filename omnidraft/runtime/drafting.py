"""The drafter as a proposer: a small model drafts in its own vocabulary, the bridge turns
the draft into target tokens (through the n-gram cache), and the acceptance head says
when to stop drafting.

The drafter keeps its own view of the committed text (`draft_seq`, in draft tokens) and
reads it lazily: whatever its cache does not hold yet (the prompt, text committed while
another proposer proposed) is read in the first call of its next draft ("catching up",
at most the latest CATCHUP_WINDOW tokens), so a generation in which it never drafts never
runs it. After a round it drafted, the
tokens the target accepted stay in its cache and the rest is rolled back. It can also
continue another proposal (`after`, a lookup prefix): it then reads that proposal's text
as if committed and drafts what follows. Every round teaches the n-gram cache how the
drafter spells the committed target tokens. While it is idle, spelling the committed text in
its vocabulary and that teaching wait, in order, until it next drafts (or the generation ends):
an unused drafter costs the loop nothing per round (it cost 0.4 ms of a 19 ms round).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..errors import OmniDraftError
from .acceptance import NO_HEAD, draft_labels
from .bridge import NGRAM, Translation, VocabBridge
from .choices import DraftPolicy
from .draft_length import DraftLength
from .ngram_cache import NGramCache
from .proposers import Proposal, Round
from .runner import ModelRunner, common_prefix, prefill, reuse
from .sampling import Sampler
from .stats import DrafterStats, ProposerStats

DRAFTER = "drafter"
# Catching up reads at most this many of the latest draft tokens: a drafter that was idle while much text was
# committed (the hybrid's lazy start, or its re-checks) restarts its context from the recent text rather than
# reading it all, so what a re-check costs stays bounded whatever the length of the conversation.
CATCHUP_WINDOW = 64
GREEDY = Sampler()


@dataclass
class _InFlight:
    """The draft of the round being verified: what only the drafter needs to learn from it."""

    ids: list[int]  # draft tokens drafted
    features: list  # the acceptance head's features per draft token
    translation: Translation
    spelled_prefix: list[int]  # the continued proposal's text in draft tokens (read as if committed)


class DraftModel:
    def __init__(self, drafter: ModelRunner, bridge: VocabBridge, ngram_cache: NGramCache | None = None,
                 predictor=None):
        self.drafter = drafter
        self.bridge = bridge
        self.ngram_cache = ngram_cache
        self.predictor = predictor  # an AcceptancePredictor training the drafter's acceptance head, or None
        self._length: tuple[tuple, DraftLength] | None = None  # kept across calls (the heuristic's state)
        self._config = self._rng = None
        self._learn = True
        self._draft_seq: list[int] = []
        self._unspelled: list[list[int]] = []  # committed target tokens, per round, not yet in _draft_seq
        self._untaught: list[list[int]] = []  # ... and not yet taught to the n-gram cache
        self._last: _InFlight | None = None
        self.counters = DrafterStats()

    @classmethod
    def between(cls, target: ModelRunner, target_vocab, drafter: ModelRunner, draft_vocab,
                ngram_cache: NGramCache | bool = False, predictor=None) -> "DraftModel":
        """A drafter proposer for this target; ngram_cache=True starts an empty cache for the pair."""
        bridge = VocabBridge(draft_vocab.padded(drafter.vocab_size), target_vocab.padded(target.vocab_size))
        if ngram_cache is True:
            ngram_cache = NGramCache(bridge.pair_id)
        return cls(drafter, bridge, None if ngram_cache is False else ngram_cache, predictor)

    @property
    def cross_vocab(self) -> bool:
        return not self.bridge.identity

    def begin(self, seq: list[int], config, rng: np.random.Generator, learn: bool = True,
              read_prompt: bool = True) -> None:
        """A generation starts; the drafter reads the prompt now (the prompt's processing, as the target's), or
        with read_prompt=False when it first drafts, if ever (the hybrid, when the drafter may not be used).
        learn=False: neither the n-gram cache nor the acceptance head learns from this generation."""
        if config.draft_policy == DraftPolicy.AUTO and not self.drafter.has_head:
            raise OmniDraftError(NO_HEAD)
        self._config, self._rng, self._learn = config, rng, learn
        key = (config.draft_policy, config.draft_len, config.max_draft_len, config.gamma)
        if self._length is None or self._length[0] != key:
            self._length = (key, config.draft_length())
        self.draft_seq = self.bridge.draft_prompt(seq)
        self._untaught = []
        self._last = None
        self.counters = DrafterStats()
        if read_prompt:
            self.read_prompt()

    @property
    def draft_seq(self) -> list[int]:
        """The committed text in draft tokens (spelling first what was committed while the drafter was idle)."""
        if self._unspelled:
            chunks, self._unspelled = self._unspelled, []
            for chunk in chunks:  # round by round, as each round's tokens were committed
                self._draft_seq.extend(self.bridge.spell(chunk))
        return self._draft_seq

    @draft_seq.setter
    def draft_seq(self, seq: list[int]) -> None:
        self._draft_seq, self._unspelled = list(seq), []

    def _teach(self) -> None:
        """Teach the n-gram cache the spellings of what was committed while the drafter was idle."""
        chunks, self._untaught = self._untaught, []
        for chunk in chunks:
            self.bridge.learn(self.ngram_cache, chunk)

    def read_prompt(self, recent_only: bool = False) -> None:
        """Bring the drafter's cache up to the text so far (all but its last token), reusing what it holds.
        recent_only (the hybrid's early read): as a draft catches up, from at most the latest CATCHUP_WINDOW
        tokens, so that a long prompt's first token does not wait for the drafter to read it all."""
        if recent_only:
            self._restart_if_far_behind()
        prefill(self.drafter, self.draft_seq)

    def _restart_if_far_behind(self) -> None:
        if self._behind() > CATCHUP_WINDOW:  # restart from the recent text (see CATCHUP_WINDOW)
            self.draft_seq = self.draft_seq[-CATCHUP_WINDOW:]
            self.drafter.rollback(0)

    @property
    def length(self) -> DraftLength:
        return self._length[1]

    def unread(self) -> int:
        """Draft tokens its next draft reads first: the committed text its cache does not hold yet, at most
        CATCHUP_WINDOW of them."""
        return min(self._behind(), CATCHUP_WINDOW)

    def _behind(self) -> int:
        return len(self.draft_seq) - common_prefix(self.drafter, self.draft_seq)

    def propose(self, seq: list[int], budget: int, after: Proposal | None = None) -> Proposal:
        """Up to `budget` target tokens drafted after `seq` (and after `after`'s tokens, when given)."""
        self._last = None
        self._teach()
        self._restart_if_far_behind()
        spelled = self.bridge.spell(after.target_ids) if after is not None and len(after) else []
        if after is not None and len(after) and not spelled:
            return Proposal()  # the continued text has no spelling here
        context = self.draft_seq + spelled
        k = min(self.length.budget(), self.drafter.max_context - len(context) + 1, budget)
        if k <= 0 or not self.draft_seq:
            return Proposal()
        strict = self._config.strict_sampling and self.cross_vocab and self._config.drafts_sampled
        ids, q, dists, features, calls = self._draft(context, k, strict)
        tr = self.bridge.propose(ids, q, None if strict else self.ngram_cache, budget)
        self.counters.ngram_hits += tr.kind.count(NGRAM)
        self._last = _InFlight(ids, features, tr, spelled)
        proposal = self.bridge.proposal(tr, dists if self._config.drafts_sampled else None, DRAFTER)
        proposal.calls = calls
        return proposal

    def _draft(self, context: list[int], k: int, strict: bool):
        """Sample up to k draft tokens after `context`; stop early at a token no target token can
        follow, or when the draft-length policy says so. Returns ids, q(ids), distributions, each
        token's head features (for training the head) and the calls made as (tokens, seconds).

        strict: sample only among draft tokens with a direct target twin.
        """
        drafter, c = self.drafter, self.counters
        sampler = self._config.sampler if self._config.drafts_sampled else GREEDY  # else its most likely tokens
        keep = reuse(drafter, context)  # what the cache already holds of the context
        fresh = context[keep:]
        t0 = time.perf_counter()
        logits = drafter.forward(fresh, keep)[-1]  # catching up, then the first step
        calls = [(len(fresh), time.perf_counter() - t0)]
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
            d, probs = sampler.choose(logits, self._rng)
            if not self.bridge.identity and (d >= len(special) or special[d]):
                break
            ids.append(d)
            qs.append(1.0 if probs is None else float(probs[d]))
            dists.append(probs)
            head = drafter.head_output if drafter.has_head else None
            features.append(head[0] if head else None)
            if self.length.stop(head[1] if head else None):
                break
            if i + 1 < k:
                t0 = time.perf_counter()
                logits = drafter.forward([d], drafter.position)[-1]
                calls.append((1, time.perf_counter() - t0))
                c.step_seconds.append(calls[-1][1])  # one-token steps: the cost ratio's numerator
        c.calls += len(calls)
        c.draft_tokens += len(ids)
        c.rounds += 1
        if len(fresh) > 1:
            c.catchup_tokens += len(fresh) - 1
            step = float(np.median(c.step_seconds)) if c.step_seconds else None
            if step is not None:
                c.catchup_seconds += max(0.0, calls[0][1] - step)
        return ids, np.array(qs), dists, features, calls

    def observe(self, seq: list[int], rnd: Round) -> None:
        """Learn spellings, reward accepted merges, train the head; bring draft_seq up to the committed text."""
        last, self._last = self._last, None
        offset, mine = rnd.part(DRAFTER)
        if last is not None and mine:
            tr = last.translation
            tr.truncate(mine)  # the loop may have cut the proposal to what fits
            accepted = rnd.accepted - offset  # of ours; negative: the proposal we continued was cut before us
            rows = rnd.logits[offset : offset + mine + 1]
            if self.predictor is not None and self._learn:
                self.predictor.observe(last.features, draft_labels(tr, rows, self._config.sampler, len(last.ids)))
            if accepted >= 0:
                self.length.observe(mine, accepted)
        cache = self.ngram_cache
        ours = last is not None and mine and rnd.accepted >= offset
        if cache is not None and self.cross_vocab and self._learn:
            for j in range(rnd.accepted - offset if ours else 0):
                if last.translation.kind[j] == NGRAM:
                    self.counters.ngram_accepted += 1
                    cache.record_accepted(last.ids[last.translation.draft_start[j] : last.translation.draft_end[j]])
            if last is not None and mine:
                self.bridge.learn(cache, rnd.committed)
            else:
                self._untaught.append(list(rnd.committed))
        if ours:
            if offset:  # the continued proposal was accepted: its text is committed as the drafter read it
                self.draft_seq.extend(last.spelled_prefix)
                committed_ours = rnd.committed[offset:]
            else:
                committed_ours = rnd.committed
            kept, append = self.bridge.resync(last.ids, last.translation, len(committed_ours) - 1,
                                              committed_ours[-1])
            self.drafter.rollback(len(self.draft_seq) + kept)
            self.draft_seq.extend(last.ids[:kept])
            self.draft_seq.extend(append)
        else:  # not our proposal (or cut before ours): spelled, and read, when the drafter next drafts
            self._unspelled.append(list(rnd.committed))

    def end(self, weights_changed: bool = False, remember: bool = True) -> ProposerStats:
        if weights_changed:
            self.drafter.reset()  # new weights: the drafter's cached keys and values are stale
        self._teach()  # what waited for a draft that did not come (only what learn=True collected)
        c = self.counters
        c.ngram_cache_size = len(self.ngram_cache) if self.ngram_cache is not None else 0
        c.cross_vocab, c.vocab_intersection = self.cross_vocab, self.bridge.intersection_size
        if self.predictor is not None:
            if remember and self._learn:
                self.predictor.end_generation(weights_changed)
            c.predictor = self.predictor.summary()
        return ProposerStats(drafter=c)
