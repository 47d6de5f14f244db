"""Who proposes target tokens in a round: the seam between the decoding loop and its proposers.

The loop (decoding.py) asks its proposer for up to `budget` target tokens given the
committed sequence, verifies them in one target call, and tells the proposer what was
committed. A proposer is any object with these four methods (HF's CandidateGenerator
plays the same part):

    begin(seq, config, rng, learn)
                                 a generation starts from the committed prompt `seq`; learn=False: keep
                                 nothing of it (what is learned during it is undone or never written)
    propose(seq, budget, after=None) -> Proposal (target tokens; may be empty)
                                 after: a proposal this one continues (its tokens are taken as
                                 if committed); a proposer that cannot continue one returns nothing
    observe(seq, round)          after every verified round; `seq` includes what it committed
    end(weights_changed, remember) -> ProposerStats
                                 the generation is over (remember=False: keep nothing of it); statistics

Proposers here: DraftModel (drafting.py: the cross-vocabulary drafter with the bridge,
n-gram cache and acceptance head), LookupProposer (lookup_proposer.py: continuations
from the context and the user's history) and Hybrid (hybrid.py: each round the one with
the most expected tokens per second, or a lookup prefix continued by the drafter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

TARGET = "target"  # the target's own token after the accepted proposals (a correction or the bonus)


@dataclass
class Proposal:
    """Target tokens proposed for one round, who proposed each, and what proposing them cost.

    q[j] is q'(t_j), the probability the proposer gave its token (1.0 for a point mass: lookup,
    or greedy drafting); `distribution(j, vocab)` is q' over the target vocabulary for a
    rejection's residual (a point mass unless `q_dist` says otherwise). accept_probs[j], when
    the proposer knows it, estimates P(t_j accepted | t_<j accepted) (lookup's scorer).
    calls: the model calls made to propose it, as (tokens in the call, seconds).
    """

    target_ids: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    accept_probs: list[float] | None = None
    q_dist: Callable[[int, int], np.ndarray] | None = None  # (j, target vocab) -> q' over the vocabulary
    calls: list[tuple[int, float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.target_ids)

    @classmethod
    def point_masses(cls, target_ids, source: str, accept_probs=None) -> "Proposal":
        """Deterministic proposals (lookup): q' = 1 on each token."""
        ids = [int(t) for t in target_ids]
        probs = None if accept_probs is None else [float(p) for p in accept_probs][: len(ids)]
        return cls(ids, [1.0] * len(ids), [source] * len(ids), probs)

    @property
    def source(self) -> str:
        """Who proposed the first token ('' for an empty proposal)."""
        return self.sources[0] if self.sources else ""

    def distribution(self, j: int, vocab: int) -> np.ndarray:
        """q' over the target vocabulary at position j (for the residual of a rejection)."""
        if self.q_dist is not None:
            return self.q_dist(j, vocab)
        q = np.zeros(vocab, dtype=np.float64)
        q[self.target_ids[j]] = 1.0
        return q

    def truncate(self, m: int) -> None:
        for lst in (self.target_ids, self.q, self.sources):
            del lst[m:]
        if self.accept_probs is not None:
            del self.accept_probs[m:]

    def then(self, more: "Proposal") -> "Proposal":
        """This proposal followed by `more` (proposed as its continuation): one chain to verify."""
        m = len(self)
        if not len(more):
            return self
        mine, theirs = self.q_dist, more.q_dist

        def q_dist(j: int, vocab: int) -> np.ndarray:
            if j < m:
                return self.distribution(j, vocab) if mine is None else mine(j, vocab)
            return more.distribution(j - m, vocab) if theirs is None else theirs(j - m, vocab)

        probs = None
        if self.accept_probs is not None and more.accept_probs is not None:
            probs = self.accept_probs + more.accept_probs
        return Proposal(self.target_ids + more.target_ids, self.q + more.q, self.sources + more.sources, probs,
                        q_dist if (mine or theirs) else None, self.calls + more.calls)


@dataclass
class Round:
    """One verified round: what was proposed, how much the target accepted, what it cost."""

    start: int  # sequence length before the round: proposal j sits at position start + j
    proposal: Proposal
    accepted: int
    next_token: int
    logits: np.ndarray  # the target's rows: row j scores proposal j, the last one the next token
    target_seconds: float  # the verification call
    tokens_in_call: int  # tokens the target processed in that call

    @property
    def committed(self) -> list[int]:
        return self.proposal.target_ids[: self.accepted] + [self.next_token]

    def part(self, source: str) -> tuple[int, int]:
        """(offset, length) of the contiguous part of the proposal that `source` proposed ((0, 0) if none)."""
        idx = [j for j, s in enumerate(self.proposal.sources) if s == source]
        return (idx[0], len(idx)) if idx else (0, 0)


class Proposer(Protocol):
    def begin(self, seq: list[int], config, rng: np.random.Generator, learn: bool = True) -> None: ...

    def propose(self, seq: list[int], budget: int, after: Proposal | None = None) -> Proposal: ...

    def observe(self, seq: list[int], rnd: Round) -> None: ...

    def end(self, weights_changed: bool = False, remember: bool = True): ...  # -> stats.ProposerStats
