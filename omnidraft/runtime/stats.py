"""Generation statistics summed over generations: one typed record for every aggregate.

`SpeculativeDecoder.generate` reports one generation's statistics as a dict (the JSON
contract of `generate --json`); `Totals.of(stats)` reads the counts from it, totals add
up with `+`, and `summary()` turns a total into the rates every report shows. A stream's
windows (`omnidraft adapt`), the benchmark methods and the core-pair benchmark all sum
through it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class Totals:
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
    def of(cls, stats: dict) -> "Totals":
        """One generation's statistics (SpeculativeDecoder.generate's `stats`)."""
        lookup = stats.get("lookup") or {}
        by = stats.get("proposals", {})
        return cls(
            generations=1, new_tokens=stats["new_tokens"], target_calls=stats["target_calls"],
            drafted=stats["drafted"], accepted=stats["accepted"], drafter_calls=stats["drafter_calls"],
            draft_tokens=stats["draft_tokens"], drafter_rounds=by.get("drafter", {}).get("rounds", 0),
            ngram_cache_hits=stats["ngram_cache_hits"], ngram_cache_accepted=stats["ngram_cache_accepted"],
            lookup_proposed=by.get("lookup", {}).get("proposed", 0),
            lookup_accepted=by.get("lookup", {}).get("accepted", 0),
            lookup_queries=lookup.get("queries", 0),
            lookup_query_s=lookup.get("queries", 0) * lookup.get("query_ms_mean", 0.0) / 1000,
            decode_s=stats["decode_s"], adapt_s=(stats.get("adaptation") or {}).get("seconds", 0.0))

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
