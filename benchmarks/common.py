"""What every benchmark script shares: step timing and writing its results."""

from __future__ import annotations

import copy
import json
import statistics
import time
from pathlib import Path

from omnidraft.atomic import write_bytes_atomic
from omnidraft.runtime.decoding import GenerationConfig, SpeculativeDecoder
from omnidraft.runtime.drafting import DraftModel
from omnidraft.runtime.hybrid import Hybrid, measurements
from omnidraft.runtime.lookup import HistoryIndex
from omnidraft.runtime.lookup_proposer import LookupProposer
from omnidraft.runtime.stats import Totals


def step_ms(runner, prefix, k: int = 1, reps: int = 15) -> float:
    """Median ms of one k-token call after `prefix` (rolled back before every repetition)."""
    call = _timed_call(runner, prefix, k)
    return statistics.median(call() for _ in range(reps)) * 1000


def cost_ratio(target, drafter, prefix, draft_prefix, reps: int = 31, warmup: int = 5) -> tuple[float, float, float]:
    """(c, target ms, drafter ms): one-token steps of the two runners after their prefixes, timed in
    turns (target, drafter, target, ...) so that a load drift hits both alike; c is the median of
    the per-turn ratios, the times the medians of each. Timed one runner after the other, c moved by a
    factor of 1.75 between runs of identical graphs on a 2-core machine."""
    calls = _timed_call(target, prefix, 1), _timed_call(drafter, draft_prefix, 1)
    for _ in range(warmup):
        calls[0](), calls[1]()
    turns = [(calls[0](), calls[1]()) for _ in range(reps)]
    return (statistics.median(d / t for t, d in turns), statistics.median(t for t, _ in turns) * 1000,
            statistics.median(d for _, d in turns) * 1000)


def _timed_call(runner, prefix, k: int):
    """A function timing one k-token call after `prefix` (which it writes once; each call rolls back to it)."""
    runner.reset()
    runner.forward(prefix, 0)

    def call() -> float:
        runner.rollback(len(prefix))
        t = time.perf_counter()
        runner.forward(prefix[:k], len(prefix), k)
        return time.perf_counter() - t
    return call


def save_results(out: Path, result: dict, render) -> None:
    """results.json and table.md (rendered by `render`) into `out`, atomically; print the table."""
    out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / "results.json", json.dumps(result, indent=1, ensure_ascii=False).encode())
    table = render(result)
    write_bytes_atomic(out / "table.md", table.encode())
    print(table)


def ceiling(alpha: float, k: float, c: float) -> float:
    """Analytic speedup bound: expected tokens per round, (1 - alpha^(k+1)) / (1 - alpha), over the round's
    cost in target steps, k c + 1 (per-token acceptance alpha, k drafts per round, cost ratio c)."""
    if alpha >= 1:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))


class Method:
    """One decoding method over shared runners, with its own learned state.

    Methods run interleaved prompt by prompt on the same runners, so that load
    drifts hit all alike. Each owns a copy of the n-gram cache, acceptance head and
    lookup proposer (history and scorer) it starts from; they keep learning as in use,
    from this method's traffic only; the hybrid starts from the costs the warm-up measured (as it
    would from the costs file of earlier runs). When `learner` is given, the method swaps its LoRA
    state into the drafter before generating. draft: GenerationConfig draft fields, or
    None for target-only; proposer: "drafter", "lookup" or "hybrid"; role: what the method stands for
    in comparisons (e.g. the suite's regret table), or "".
    """

    def __init__(self, pair, draft: dict | None, cache=None, predictor=None, learner=None, lora=None,
                 proposer: str = "drafter", lookup=None, costs: dict | None = None, role: str = ""):
        base = pair.decoder
        # the shared drafter runner, for the methods that draft
        self.drafter = pair.drafter if draft is not None and proposer != "lookup" else None
        self.draft = draft
        self.predictor = copy.deepcopy(predictor)
        if self.predictor is not None:
            self.predictor.track.clear()  # judge the head only on the measured prompts
        chosen = None
        if draft is not None:
            drafting = None
            if proposer != "lookup":
                auto = draft.get("draft_policy") == "auto"
                drafting = DraftModel(pair.drafter, pair.bridge, copy.deepcopy(cache),
                                      self.predictor if auto else None)
            looking = None
            if proposer != "drafter":
                looking = copy.deepcopy(lookup) if lookup is not None else LookupProposer(HistoryIndex())
            # the hybrid starts from what the warm-up measured, as from a costs file of earlier runs
            measured = measurements(costs) if costs is not None and proposer == "hybrid" else (None, None)
            chosen = drafting if proposer == "drafter" else Hybrid(looking, drafting, *measured)
        self.decoder = SpeculativeDecoder(base.target, pair.target_vocab, chosen)
        self.learner, self.lora = learner, lora
        self.role = role
        self.totals = Totals()
        self.per_prompt: list[Totals] = []
        self.tokens: list[int] = []  # the last output
        self.differ = 0  # outputs that differ from the reference (target-only)

    def run(self, ids, max_new: int, eos, sampling: dict | None = None) -> list[int]:
        """sampling: GenerationConfig's sampler and seed (None: greedy)."""
        drafter = self.drafter
        if drafter is not None and self.predictor is not None:
            drafter.head = self.predictor.head  # each method drafts with its own head
        if drafter is not None and self.learner is not None:
            self.learner.load_state(self.lora)
            drafter.reset()  # other weights: the drafter's cached keys and values are stale
        draft = self.draft or {}
        config = GenerationConfig(max_new, speculative=self.draft is not None, eos_ids=eos, **draft, **(sampling or {}))
        result = self.decoder.generate(ids, config)
        self.per_prompt.append(Totals.of(result.stats))
        self.totals += self.per_prompt[-1]
        self.tokens = result.token_ids
        return result.token_ids

    def absorb(self, other: "Method", same_prompt: bool = False) -> None:
        """Add another method's prompts to this one's (the same method met them from another state);
        same_prompt: the other ran this one's last prompt again (its figures are summed into that prompt's)."""
        self.totals += other.totals
        self.differ += other.differ
        if same_prompt:
            self.per_prompt[-1] = self.per_prompt[-1] + other.totals
        else:
            self.per_prompt += other.per_prompt

    def summary(self, base_tps: float) -> dict:
        return summarize(self.totals, self.differ, base_tps)


def summarize(t: Totals, differ: int, base_tps: float) -> dict:
    """A method's figures from its (possibly summed) totals; speedup against base_tps tokens/s."""
    s = t.summary()
    return {**s, "speedup": s["tokens_per_s"] / base_tps if base_tps else None, "outputs_differing": differ}


def hf_generate(target_model, ids: list[int], eos, max_new: int, **assist) -> tuple[list[int], float]:
    """Hugging Face greedy generate() (assisted when given assistant_model, tokenizer, assistant_tokenizer):
    new tokens without the final EOS, and seconds."""
    import torch

    target_model.generation_config.pad_token_id = target_model.generation_config.pad_token_id or 0
    if "assistant_model" in assist:
        gc = assist["assistant_model"].generation_config
        gc.pad_token_id = gc.pad_token_id or 0
    t = time.perf_counter()
    with torch.inference_mode():
        out = target_model.generate(torch.tensor([ids]), max_new_tokens=max_new, do_sample=False,
                                    eos_token_id=sorted(eos), **assist)
    seconds = time.perf_counter() - t
    new = out[0, len(ids):].tolist()
    while new and new[-1] in eos:
        new.pop()
    return new, seconds
