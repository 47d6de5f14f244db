"""Lookup as a proposer: the index's continuation (lookup.py), scored by a small online model.

The scorer estimates, for each token of a lookup continuation, the probability that the
target accepts it given that it accepted the ones before (logistic in the walk's
features). Every round it learns from what the target committed, whether or not the
continuation was proposed: a continuation token counts as accepted when the committed
text has it at its place (under greedy decoding exactly the verification rule; under
sampling an unbiased estimate of p(token)), up to the first miss. The expected number
of accepted tokens of a k-token prefix is sum_i prod_{j<=i} P_j, which the hybrid policy
weighs against what the prefix costs to verify.

At the end of a generation its text (prompt and output) joins the history; a chat's
next turn extends the same document instead of repeating it.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .lookup import MAX_MATCH, MAX_OCCURRENCES, Candidates, HistoryIndex, find_candidates
from .proposers import Proposal, Round
from .stats import LookupStats, ProposerStats

LOOKUP = "lookup"
N_FEATURES = 6
# Before any learning: fitted on 26,642 judged lookup tokens of the target's own greedy
# continuations of the corpora's adapt split (benchmarks/lookup_prior.py; held-out log loss 0.197).
PRIOR = np.array([-2.002, 1.995, -0.400, 2.865, 1.277, 0.576])


class LookupScorer:
    """P(accept) per continuation token: logistic regression, one SGD step per judged token.

    Two time scales: the weights learn slowly across generations (and are kept with the history);
    `offset`, a bias for the current generation only, learns fast (FAST_LR) and starts at 0 with each
    greedy generation, so that lookup stops proposing within a few rounds on a text where its matches keep
    missing (a fresh prompt's one-token matches), and trusts them more where they keep hitting. Under
    sampling a continuation token is accepted with the target's probability of it, less often than it is
    the argmax: a sampled generation starts from the offset the last sampled one ended with (in this
    process), so the weights, which mostly learn from greedy traffic, are corrected from the first round.
    """

    LR = 0.05
    FAST_LR = 0.5
    MAX_OFFSET = 4.0

    def __init__(self, weights=None, lr: float = LR):
        self.weights = np.array(PRIOR if weights is None else weights, dtype=np.float64)
        if self.weights.shape != (N_FEATURES,) or not np.isfinite(self.weights).all():
            raise ValueError(f"lookup scorer weights must be {N_FEATURES} finite numbers")
        self.lr = lr
        self.offset = 0.0
        self.sampled_offset = 0.0  # where the last sampled generation's offset ended
        self.judged = 0
        self.hits = 0

    def begin(self, sampled: bool = False) -> None:
        """A new generation: its own correction starts afresh (greedy), or where the last sampled one ended."""
        self.offset = self.sampled_offset if sampled else 0.0

    def end(self, sampled: bool = False) -> None:
        if sampled:
            self.sampled_offset = self.offset

    def kept(self) -> tuple:
        """What the scorer keeps between generations (restore() puts it back)."""
        return self.weights.copy(), self.judged, self.hits

    def restore(self, kept: tuple) -> None:
        self.weights[:], self.judged, self.hits = kept

    @staticmethod
    def features(c: Candidates) -> np.ndarray:
        m = len(c)
        x = np.empty((m, N_FEATURES))
        x[:, 0] = 1.0
        x[:, 1] = c.frequency
        x[:, 2] = np.log1p(c.support) / math.log1p(MAX_OCCURRENCES)
        x[:, 3] = math.log1p(min(c.match, MAX_MATCH)) / math.log1p(MAX_MATCH)
        x[:, 4] = np.arange(m) / 16.0
        x[:, 5] = float(c.source == "context")
        return x

    def probs(self, x: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(x @ self.weights + self.offset)))

    def learn(self, x: np.ndarray, labels: np.ndarray) -> None:
        for row, y in zip(x, labels):
            p = 1.0 / (1.0 + math.exp(-(float(row @ self.weights) + self.offset)))
            self.weights += self.lr * (float(y) - p) * row
            self.offset = min(max(self.offset + self.FAST_LR * (float(y) - p), -self.MAX_OFFSET), self.MAX_OFFSET)
            self.judged += 1
            self.hits += int(y)


def expected_accepted(probs: np.ndarray) -> np.ndarray:
    """E[accepted] of each prefix length 1..m: sum_i prod_{j<=i} P_j."""
    return np.cumsum(np.cumprod(probs))


class LookupProposer:
    MAX_LEN = 16  # the longest continuation proposed

    def __init__(self, history: HistoryIndex | None = None, scorer: LookupScorer | None = None, max_len: int = MAX_LEN):
        if max_len < 1:
            raise ValueError("lookup length must be at least 1")
        self.history = history
        self.scorer = scorer or LookupScorer()
        self.max_len = max_len
        self._pending: tuple[int, list[int], np.ndarray] | None = None  # (start, tokens, features) to judge
        self._seq: list[int] | None = None
        self._last_doc: list[int] | None = None  # what this process last added to the history
        self._learn = True
        self._sampled = False
        self._kept = self.scorer.kept()  # as the generation began (put back when it keeps nothing)
        self.counters = LookupStats()

    def begin(self, seq: list[int], config=None, rng=None, learn: bool = True) -> None:
        """learn=False: the scorer's weights are put back at the end and the text joins no history."""
        self._seq = seq
        self._pending = None
        self._learn = learn
        self._kept = self.scorer.kept()
        self._sampled = config is not None and not config.sampler.greedy
        self.scorer.begin(self._sampled)
        self.counters = LookupStats()

    def propose(self, seq: list[int], budget: int, after: Proposal | None = None) -> Proposal:
        """The continuation lookup offers now (at most `budget` tokens), each with its P(accept), for the
        price of an index query (no model call). It continues no other proposal (`after`: nothing)."""
        if after is not None:
            return Proposal()
        t0 = time.perf_counter()
        c = find_candidates(seq, self.history, min(budget, self.max_len))
        x = self.scorer.features(c) if len(c) else np.zeros((0, N_FEATURES))
        probs = self.scorer.probs(x) if len(c) else np.zeros(0)
        self._pending = (len(seq), c.tokens, x) if len(c) else None
        self.counters.queries += 1
        self.counters.query_seconds += time.perf_counter() - t0
        self.counters.candidates += len(c)
        return Proposal.point_masses(c.tokens, LOOKUP, probs)

    def observe(self, seq: list[int], rnd: Round) -> None:
        self._seq = seq
        if self._pending is None:
            return
        start, tokens, x = self._pending
        self._pending = None
        labels = []
        for j, t in enumerate(tokens):
            if start + j >= len(seq):
                break
            labels.append(float(seq[start + j] == t))
            if not labels[-1]:
                break
        if labels:
            self.scorer.learn(x[: len(labels)], np.array(labels))

    def end(self, weights_changed: bool = False, remember: bool = True) -> ProposerStats:
        seq = self._seq or []
        remember = remember and self._learn
        if remember:
            self.scorer.end(self._sampled)
        else:
            self.scorer.restore(self._kept)
        if remember and self.history is not None and len(seq) >= 2:
            last = self._last_doc
            if last is not None and len(seq) > len(last) and seq[: len(last)] == last:
                self.history.add(seq[len(last) :], extend_last=True)  # the next turn of the same chat
            else:
                self.history.add(seq)
            self._last_doc = list(seq)
        c = self.counters
        c.history_tokens = len(self.history) if self.history is not None else 0
        c.scorer_judged = self.scorer.judged
        return ProposerStats(lookup=c)
