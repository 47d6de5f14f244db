"""The drafter as a proposer: a small model drafts in its own vocabulary, the bridge turns
the draft into target tokens (through the n-gram cache), and the acceptance head says
when to stop drafting.

The drafter keeps its own view of the text (`draft_seq`, in draft tokens). After a
round it drafted, the tokens the target accepted stay in its cache and the rest is
rolled back; after a round someone else proposed (lookup), the committed text is only
appended to `draft_seq`, and the drafter catches up on it in one call the next time it
drafts. Every round teaches the n-gram cache how the drafter spells the committed
target tokens.
"""

from __future__ import annotations

import time

import numpy as np

from .acceptance import draft_labels
from .bridge import NGRAM, Proposal, VocabBridge
from .draft_length import DraftLength
from .ngram_cache import NGramCache
from .proposers import Round
from .runner import ModelRunner, prefill, reuse

DRAFTER = "drafter"


class DraftModel:
    def __init__(self, drafter: ModelRunner, bridge: VocabBridge, ngram_cache: NGramCache | None = None,
                 predictor=None):
        self.drafter = drafter
        self.bridge = bridge
        self.ngram_cache = ngram_cache
        self.predictor = predictor  # an AcceptancePredictor training the drafter's acceptance head, or None
        self._length: tuple[tuple, DraftLength] | None = None  # kept across calls (the heuristic's state)
        self._config = self._rng = None
        self.draft_seq: list[int] = []
        self._last: tuple | None = None  # (draft ids, features) of the proposal in flight
        self.counters = {}
        self.step_seconds: list[float] = []

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

    def begin(self, seq: list[int], config, rng: np.random.Generator, eager: bool = True) -> None:
        """eager=False: do not read the prompt now (the drafter catches up when it first drafts, if ever)."""
        self._config, self._rng = config, rng
        key = (config.draft_policy, config.draft_len, config.max_draft_len, config.gamma)
        if self._length is None or self._length[0] != key:
            self._length = (key, config.draft_length())
        self.draft_seq = self.bridge.draft_prompt(seq)
        (prefill if eager else reuse)(self.drafter, self.draft_seq)
        self._last = None
        self.counters = dict(drafter_calls=0, draft_tokens=0, rounds_drafted=0, ngram_hits=0, ngram_accepted=0)
        self.step_seconds: list[float] = []

    @property
    def length(self) -> DraftLength:
        return self._length[1]

    def propose(self, seq: list[int], budget: int) -> Proposal:
        drafter, config = self.drafter, self._config
        self._last = None
        k = min(self.length.budget(), drafter.max_context - len(self.draft_seq) + 1, budget)
        if k <= 0 or not self.draft_seq:
            return Proposal()
        strict = config.strict_sampling and self.cross_vocab
        ids, q, dists, features = self._draft(k, strict)
        proposal = self.bridge.propose(ids, q, None if strict else self.ngram_cache, budget)
        proposal.source = DRAFTER
        if not config.sampler.greedy:
            proposal.q_dist = lambda j, vocab: self.bridge.proposal_distribution(proposal, j, dists, vocab)
        self.counters["ngram_hits"] += proposal.kind.count(NGRAM)
        self._last = (ids, features)
        return proposal

    def _draft(self, k: int, strict: bool):
        """Sample up to k draft tokens; stop early at a token no target token can follow, or
        when the draft-length policy says so. Returns ids, q(ids), distributions and, with
        an acceptance head, each token's head features (for training the head).

        strict: sample only among draft tokens with a direct target twin.
        """
        drafter, draft_seq, sampler, c = self.drafter, self.draft_seq, self._config.sampler, self.counters
        if drafter.position >= len(draft_seq):  # nothing new to feed (the last text was unspellable)
            drafter.rollback(len(draft_seq) - 1)
        logits = drafter.forward(draft_seq[drafter.position :], drafter.position)[-1]  # catching up, then a step
        c["drafter_calls"] += 1
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
                self.step_seconds.append(time.perf_counter() - t0)  # one-token steps: the cost ratio's numerator
                c["drafter_calls"] += 1
        c["draft_tokens"] += len(ids)
        c["rounds_drafted"] += 1
        return ids, np.array(qs), dists, features

    def observe(self, seq: list[int], rnd: Round) -> None:
        """Learn spellings, reward accepted merges, train the head; bring draft_seq up to the committed text."""
        committed, n = rnd.committed, rnd.accepted
        ids, features = self._last if rnd.proposal.source == DRAFTER and self._last else ([], [])
        if ids:
            self.length.observe(len(rnd.proposal), n)
            if self.predictor is not None:
                self.predictor.observe(features, draft_labels(rnd.proposal, rnd.logits, self._config.sampler, len(ids)))
        cache = self.ngram_cache
        if cache is not None and self.cross_vocab:
            for j in range(n if ids else 0):
                if rnd.proposal.kind[j] == NGRAM:
                    self.counters["ngram_accepted"] += 1
                    cache.record_accepted(ids[rnd.proposal.draft_start[j] : rnd.proposal.draft_end[j]])
            self.bridge.learn(cache, committed)
        if ids:
            kept, append = self.bridge.resync(ids, rnd.proposal, n, rnd.next_token)
            self.drafter.rollback(len(self.draft_seq) + kept)
            self.draft_seq.extend(ids[:kept])
        else:  # not our proposal: the drafter reads the committed text when it next drafts
            append = self.bridge.spell(committed)
        self.draft_seq.extend(append)
        self._last = None

    def end(self, weights_changed: bool = False, remember: bool = True) -> dict:
        if weights_changed:
            self.drafter.reset()  # new weights: the drafter's cached keys and values are stale
        stats = dict(self.counters, step_seconds=self.step_seconds)
        if self.predictor is not None:
            self.predictor.end_generation(weights_changed)
            stats["predictor"] = self.predictor.summary()
        return {DRAFTER: stats}
