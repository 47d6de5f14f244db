"""Running a stream of prompts through a decoder and measuring it per window.

Shared by `omnidraft adapt --stream` and benchmarks/adaptation.py: the same
loop a user's traffic goes through, with acceptance and tokens per target call
aggregated over windows of consecutive prompts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..runtime.decoding import GenerationConfig, SpeculativeDecoder


@dataclass
class Window:
    prompts: int = 0
    new_tokens: int = 0
    target_calls: int = 0
    drafted: int = 0
    accepted: int = 0
    drafter_calls: int = 0
    ngram_cache_hits: int = 0
    decode_s: float = 0.0
    adapt_s: float = 0.0
    outputs: list = field(default_factory=list)

    def add(self, result) -> None:
        s = result.stats
        self.prompts += 1
        self.new_tokens += s["new_tokens"]
        self.target_calls += s["target_calls"]
        self.drafted += s["drafted"]
        self.accepted += s["accepted"]
        self.drafter_calls += s["drafter_calls"]
        self.ngram_cache_hits += s["ngram_cache_hits"]
        self.decode_s += s["decode_s"]
        self.adapt_s += s.get("adaptation", {}).get("seconds", 0.0)
        self.outputs.append(result.token_ids)

    def summary(self) -> dict:
        return {
            "prompts": self.prompts,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_target_call": self.new_tokens / max(self.target_calls, 1),
            "tokens_per_s": self.new_tokens / max(self.decode_s, 1e-9),
            "drafter_calls_per_token": self.drafter_calls / max(self.new_tokens, 1),
            "new_tokens": self.new_tokens,
            "ngram_cache_hits": self.ngram_cache_hits,
            "adapt_s": self.adapt_s,
        }


def run_stream(
    decoder: SpeculativeDecoder,
    prompts: list[list[int]],
    config: GenerationConfig,
    window: int,
    on_prompt: Callable[[int, dict], None] | None = None,
) -> tuple[list[dict], list[list[int]]]:
    """Generate for every prompt in order (adapting if the decoder has an adapter).

    Returns one summary per window of `window` prompts, and every output.
    The n-th prompt samples with seed + n (the same stream twice draws the same).
    """
    windows, current, outputs = [], Window(), []
    for i, ids in enumerate(prompts):
        result = decoder.generate(ids, replace(config, seed=config.seed + i))
        current.add(result)
        outputs.append(result.token_ids)
        if on_prompt:
            on_prompt(i, result.stats)
        if current.prompts == window or i == len(prompts) - 1:
            summary = current.summary()
            if decoder.adapter is not None:
                summary.update(updates=decoder.adapter.stats.updates,  # cumulative, as of the window's end
                               rollbacks=decoder.adapter.stats.rollbacks)
            windows.append(summary)
            current = Window()
    return windows, outputs


def evaluate(decoder: SpeculativeDecoder, prompts: list[list[int]], config: GenerationConfig) -> tuple[dict, list]:
    """Held-out evaluation: the drafter as it is now, with adaptation paused (and the prompts kept out of
    the lookup history, so that a later evaluation of the same prompts cannot look them up)."""
    window = Window()
    start = time.perf_counter()
    for i, ids in enumerate(prompts):  # same seeds before and after: a paired comparison
        window.add(decoder.generate(ids, replace(config, seed=config.seed + i), learn=False))
    summary = window.summary()
    summary["wall_s"] = time.perf_counter() - start
    return summary, window.outputs
