"""Who proposes target tokens in a round: the seam between the decoding loop and its proposers.

The loop (decoding.py) asks its proposer for up to `budget` target tokens given the
committed sequence, verifies them in one target call, and tells the proposer what was
committed. A proposer is any object with these four methods (HF's CandidateGenerator
plays the same part):

    begin(seq, config, rng)      a generation starts from the committed prompt `seq`
    propose(seq, budget)         -> Proposal (target tokens; may be empty)
    observe(seq, round)          after every verified round; `seq` includes what it committed
    end(weights_changed, remember) -> dict
                                 the generation is over (remember=False: keep nothing of it); statistics

Proposers here: DraftModel (drafting.py: the cross-vocabulary drafter with the bridge,
n-gram cache and acceptance head), LookupProposer (lookup_proposer.py: continuations
from the context and the user's history) and Hybrid (hybrid.py: each round the one with
the most expected tokens per second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .bridge import Proposal


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


class Proposer(Protocol):
    def begin(self, seq: list[int], config, rng: np.random.Generator) -> None: ...

    def propose(self, seq: list[int], budget: int) -> Proposal: ...

    def observe(self, seq: list[int], rnd: Round) -> None: ...

    def end(self, weights_changed: bool = False, remember: bool = True) -> dict: ...
