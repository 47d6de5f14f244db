"""Typed statistics: what a generation did, who proposed what, and sums over many generations.

Every boundary reads these records by attribute; `to_json()` is the one place they become
the `generate --json` dictionary (its keys are the documented contract).

  - SourceCounts: rounds, proposed and accepted tokens of one proposer ("drafter", "lookup");
  - DrafterStats, LookupStats, HybridStats: what each proposer reports when a generation ends,
    gathered in one ProposerStats;
  - GenerationStats: one generation (`SpeculativeDecoder.generate`'s `stats`);
  - Totals: counts summed over generations (`Totals.of(stats)`, `+`), and their rates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np


@dataclass
class SourceCounts:
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0


@dataclass
class DrafterStats:
    calls: int = 0  # drafter model calls
    draft_tokens: int = 0  # tokens drafted, in the drafter's vocabulary
    rounds: int = 0  # drafts made
    ngram_hits: int = 0  # proposed target tokens that were merged n-grams
    ngram_accepted: int = 0
    catchup_tokens: int = 0  # text read in the first call of a draft beyond its one new token
    catchup_seconds: float = 0.0  # those calls' time beyond a step
    step_seconds: list[float] = field(default_factory=list)  # one-token drafting steps
    ngram_cache_size: int = 0
    cross_vocab: bool = False
    vocab_intersection: int | None = None
    predictor: dict | None = None  # the acceptance head's training (updates, examples, buffered, loss)


@dataclass
class LookupStats:
    queries: int = 0
    query_seconds: float = 0.0
    candidates: int = 0
    history_tokens: int = 0
    scorer_judged: int = 0

    @property
    def query_ms_mean(self) -> float:
        return 1000 * self.query_seconds / max(self.queries, 1)


@dataclass
class HybridStats:
    choices: dict[str, int] = field(default_factory=dict)  # rounds per option: none, lookup, drafter, chain
    costs: dict[str, float | None] = field(default_factory=dict)  # the measured costs, in ms
    drafter_estimate: dict[str, float] = field(default_factory=dict)  # what it expects of a drafter round


@dataclass
class ProposerStats:
    drafter: DrafterStats | None = None
    lookup: LookupStats | None = None
    hybrid: HybridStats | None = None


@dataclass
class Timings:
    """Median target call (one token, and verification) and drafter step, in ms, and c = drafter / target step."""

    target_step_ms: float | None = None
    target_verify_ms: float | None = None
    drafter_step_ms: float | None = None

    @property
    def cost_ratio_c(self) -> float | None:
        if self.target_step_ms and self.drafter_step_ms:
            return self.drafter_step_ms / self.target_step_ms
        return None

    @classmethod
    def of(cls, one_token: list[float], verifications: list[float], drafter_steps: list[float]) -> "Timings":
        med = lambda xs: 1000 * float(np.median(xs)) if xs else None  # noqa: E731
        return cls(med(one_token), med(verifications), med(drafter_steps))

    def to_json(self) -> dict:
        return {**asdict(self), "cost_ratio_c": self.cost_ratio_c}


@dataclass
class GenerationStats:
    new_tokens: int
    target_calls: int
    by_source: dict[str, SourceCounts]
    proposers: ProposerStats
    prefill_s: float
    wall_s: float
    timings: Timings
    draft_policy: str
    prompt_tokens_reused: int
    accepted_lengths: dict[int, int] = field(default_factory=dict)  # accepted proposals per round -> rounds
    rounds: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds since start, proposed, accepted)
    adaptation: dict | None = None  # the online adapter's summary, with the update's seconds
    prompt_tokens: int = 0
    dropped_turns: int = 0  # a chat session's oldest turns dropped for this one to fit the window (session.py)

    @property
    def decode_s(self) -> float:
        return max(self.wall_s - self.prefill_s, 1e-9)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s

    @property
    def tokens_per_target_call(self) -> float:
        return self.new_tokens / max(self.target_calls, 1)

    @property
    def drafted(self) -> int:
        return sum(c.proposed for c in self.by_source.values())

    @property
    def accepted(self) -> int:
        return sum(c.accepted for c in self.by_source.values())

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def drafter(self) -> DrafterStats:
        return self.proposers.drafter or DrafterStats()

    @property
    def mean_draft_len(self) -> float:
        return self.drafter.draft_tokens / max(self.drafter.rounds, 1)

    def to_json(self) -> dict:
        """The statistics part of `generate --json` (docs/usage.md)."""
        d, p = self.drafter, self.proposers
        lookup = None if p.lookup is None else {
            "queries": p.lookup.queries, "query_ms_mean": p.lookup.query_ms_mean,
            "history_tokens": p.lookup.history_tokens, "scorer_judged": p.lookup.scorer_judged}
        return {
            "new_tokens": self.new_tokens, "target_calls": self.target_calls,
            "tokens_per_target_call": self.tokens_per_target_call, "drafted": self.drafted, "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "proposals": {s: asdict(c) for s, c in sorted(self.by_source.items())},
            "draft_tokens": d.draft_tokens, "mean_draft_len": self.mean_draft_len, "drafter_calls": d.calls,
            "drafter_catchup": {"tokens": d.catchup_tokens, "seconds": d.catchup_seconds},
            "ngram_cache_hits": d.ngram_hits, "ngram_cache_accepted": d.ngram_accepted,
            "ngram_cache_size": d.ngram_cache_size, "lookup": lookup,
            "hybrid": None if p.hybrid is None else {"choices": p.hybrid.choices, "costs": p.hybrid.costs,
                                                     "drafter_estimate": p.hybrid.drafter_estimate},
            "prefill_s": self.prefill_s, "decode_s": self.decode_s, "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s, "cross_vocab": d.cross_vocab, "vocab_intersection": d.vocab_intersection,
            "timings": self.timings.to_json(), "predictor": d.predictor, "adaptation": self.adaptation,
            "accepted_length_histogram": {str(k): v for k, v in sorted(self.accepted_lengths.items())},
            "draft_policy": self.draft_policy, "prompt_tokens_reused": self.prompt_tokens_reused,
            "prompt_tokens": self.prompt_tokens, "dropped_turns": self.dropped_turns,
        }


@dataclass
class Totals:
    """Counts summed over generations (a stream's windows, a benchmark method), and the rates every report shows."""

    generations: int = 0
    new_tokens: int = 0
    target_calls: int = 0
    drafted: int = 0  # proposed target tokens, every proposer
    accepted: int = 0
    drafter_calls: int = 0
    draft_tokens: int = 0  # tokens the drafter drafted (its own vocabulary)
    drafter_rounds: int = 0  # rounds the drafter proposed in
    ngram_cache_hits: int = 0
    ngram_cache_accepted: int = 0
    lookup_proposed: int = 0
    lookup_accepted: int = 0
    lookup_queries: int = 0
    lookup_query_s: float = 0.0
    decode_s: float = 0.0
    adapt_s: float = 0.0

    @classmethod
    def of(cls, stats: GenerationStats) -> "Totals":
        """One generation's statistics."""
        lookup, d = stats.proposers.lookup or LookupStats(), stats.drafter
        by = stats.by_source
        return cls(
            generations=1, new_tokens=stats.new_tokens, target_calls=stats.target_calls, drafted=stats.drafted,
            accepted=stats.accepted, drafter_calls=d.calls, draft_tokens=d.draft_tokens,
            drafter_rounds=by.get("drafter", SourceCounts()).rounds, ngram_cache_hits=d.ngram_hits,
            ngram_cache_accepted=d.ngram_accepted, lookup_proposed=by.get("lookup", SourceCounts()).proposed,
            lookup_accepted=by.get("lookup", SourceCounts()).accepted, lookup_queries=lookup.queries,
            lookup_query_s=lookup.query_seconds, decode_s=stats.decode_s,
            adapt_s=(stats.adaptation or {}).get("seconds", 0.0))

    def __add__(self, other: "Totals") -> "Totals":
        return Totals(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / max(self.decode_s, 1e-9)

    def summary(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_target_call": self.new_tokens / max(self.target_calls, 1),
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "drafter_calls_per_token": self.drafter_calls / max(self.new_tokens, 1),
            "mean_draft_len": self.draft_tokens / max(self.drafter_rounds, 1),
            "ngram_cache_hits": self.ngram_cache_hits,
            "lookup_share": self.lookup_accepted / max(self.new_tokens, 1),
            "lookup_query_ms": 1000 * self.lookup_query_s / self.lookup_queries if self.lookup_queries else None,
            "adapt_s": self.adapt_s,
        }
