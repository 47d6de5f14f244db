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
from ..runtime.stats import Totals


@dataclass
class Window:
    """Consecutive prompts of a stream: their summed statistics and their outputs."""

    totals: Totals = field(default_factory=Totals)
    outputs: list = field(default_factory=list)

    @property
    def prompts(self) -> int:
        return self.totals.generations

    def add(self, result) -> None:
        self.totals += Totals.of(result.stats)
        self.outputs.append(result.token_ids)

    def summary(self) -> dict:
        s = self.totals.summary()
        return {"prompts": self.prompts, **s, "acceptance_rate": s["acceptance_rate"] or 0.0}


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


# The counts kept per held-out prompt, in this order.
PER_PROMPT = ("accepted", "drafted", "new_tokens", "target_calls")


def evaluate(decoder: SpeculativeDecoder, prompts: list[list[int]], config: GenerationConfig) -> tuple[dict, list]:
    """Held-out evaluation: the drafter as it is now, with adaptation paused (and the prompts kept out of
    the lookup history, so that a later evaluation of the same prompts cannot look them up)."""
    window, per_prompt = Window(), []
    start = time.perf_counter()
    for i, ids in enumerate(prompts):  # same seeds before and after: a paired comparison
        result = decoder.generate(ids, replace(config, seed=config.seed + i), learn=False)
        window.add(result)
        per_prompt.append([getattr(result.stats, k) for k in PER_PROMPT])
    summary = window.summary()
    summary["wall_s"] = time.perf_counter() - start
    summary["per_prompt"] = per_prompt  # for paired resampling of the prompts (benchmarks/adaptation.py)
    return summary, window.outputs
