"""The speculative decoding loop: tokens -> propose -> verify -> accept -> learn.

Each round a proposer (proposers.py) offers target tokens: the drafter's draft
through the vocabulary bridge, a lookup continuation from the context and the
user's history, or, under the hybrid policy, whichever is expected to give the
most tokens per second. The target scores the proposals in one forward pass, the
accepted prefix plus one target token is committed, the target's cache is rolled
back to what was accepted, and the proposer and the online adapter learn from the
round. With no proposer the same loop is plain target-only autoregressive
decoding (the baseline), through the same runner.

The loop never looks inside a runner: eager, ExecuTorch and onnxruntime
backends are interchangeable.
"""

from __future__ import annotations

import codecs
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import OmniDraftError
from ..progress import log
from .acceptance import NO_HEAD
from .bridge import VocabBridge
from .draft_length import DraftLength
from .drafting import DRAFTER, DraftModel
from .proposers import Proposal, Proposer, Round
from .runner import ModelRunner, prefill
from .sampling import Sampler
from .verify import verify
from .vocab import Vocab


@dataclass
class GenerationConfig:
    max_new_tokens: int = 64
    draft_len: int = 4
    sampler: Sampler = field(default_factory=Sampler)
    seed: int = 0
    stop_strings: tuple[str, ...] = ()
    eos_ids: frozenset[int] = frozenset()
    speculative: bool = True
    # Cross-vocabulary sampling made exactly lossless: the drafter samples only among
    # directly mapped tokens (renormalized) and no n-gram merges or splits are
    # proposed, so q' is exactly the law each proposal was drawn from.
    strict_sampling: bool = False
    # How many tokens to draft (draft_length.py): "fixed" (draft_len), "heuristic"
    # (+2/-1 from draft_len) or "auto" (the acceptance head, threshold gamma); the
    # adaptive ones never draft more than max_draft_len.
    draft_policy: str = "fixed"
    max_draft_len: int = 8
    gamma: float = 0.5

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise OmniDraftError("max new tokens must be at least 1")
        self.draft_length()  # validates the policy and its numbers

    def draft_length(self) -> DraftLength:
        return DraftLength(self.draft_policy, self.draft_len, self.max_draft_len, self.gamma)


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    stop_reason: str
    stats: dict


class SpeculativeDecoder:
    """Generates with a target runner, helped by a proposer; an adapter learns from every round."""

    def __init__(self, target: ModelRunner, target_vocab: Vocab, proposer: Proposer | None = None, adapter=None):
        self.target = target
        self.target_vocab = target_vocab.padded(target.vocab_size)
        self.proposer = proposer
        self.adapter = adapter  # an OnlineAdapter (trains the drafter), or None

    @classmethod
    def with_drafter(cls, target: ModelRunner, target_vocab: Vocab, drafter: ModelRunner, draft_vocab: Vocab,
                     ngram_cache=False, predictor=None) -> "SpeculativeDecoder":
        """A decoder whose drafter proposes every round (ngram_cache=True: a fresh cache for the pair)."""
        return cls(target, target_vocab, DraftModel.between(target, target_vocab, drafter, draft_vocab,
                                                            ngram_cache, predictor))

    @property
    def drafting(self) -> DraftModel | None:
        """The drafter proposer, alone or inside the hybrid."""
        p = self.proposer
        return p if isinstance(p, DraftModel) else getattr(p, "drafting", None)

    @property
    def lookup(self):
        return getattr(self.proposer, "lookup", None)

    @property
    def drafter(self) -> ModelRunner | None:
        return self.drafting.drafter if self.drafting else None

    @property
    def bridge(self) -> VocabBridge | None:
        return self.drafting.bridge if self.drafting else None

    @property
    def ngram_cache(self):
        return self.drafting.ngram_cache if self.drafting else None

    @property
    def predictor(self):
        return self.drafting.predictor if self.drafting else None

    @property
    def cross_vocab(self) -> bool:
        return self.bridge is not None and not self.bridge.identity

    # -- the loop ------------------------------------------------------------------------
    def generate(self, target_prompt: list[int], config: GenerationConfig, on_text=None,
                 learn: bool = True) -> GenerationResult:
        """learn=False: the adapter does not train on this generation, nor does lookup keep it in its history."""
        target, proposer = self.target, self.proposer
        speculative = config.speculative and proposer is not None
        if not target_prompt:
            raise OmniDraftError("the prompt is empty")
        if len(target_prompt) >= target.max_context:
            raise OmniDraftError(
                f"the prompt is {len(target_prompt)} tokens; the context window is {target.max_context}"
            )
        drafter = self.drafter if speculative else None
        if drafter is not None and config.draft_policy == "auto" and not drafter.has_head:
            raise OmniDraftError(NO_HEAD)
        rng = np.random.default_rng(config.seed)
        seq = list(target_prompt)  # the target's sequence; seq[-1] is not yet in its cache
        out = _TextStream(self.target_vocab, config.stop_strings, on_text)
        generated: list[int] = []
        by_source: dict[str, Counter] = {}
        calls, stop_reason, rounds = 0, None, []  # rounds: (seconds since start, proposed, accepted)
        call_times: dict[bool, list[float]] = {False: [], True: []}  # target call seconds: one token / verification

        start = time.perf_counter()
        reused = prefill(target, seq)  # reuse what the cache holds (a chat's earlier turns)
        adapter = self.adapter if speculative and learn and drafter is not None else None
        if speculative:
            proposer.begin(seq, config, rng)
        if adapter is not None:
            adapter.begin(self.bridge.draft_prompt(seq))
        prefill_s = time.perf_counter() - start

        while stop_reason is None:
            room = target.max_context - len(seq)  # proposals that still fit in the target's cache
            if room < 0:
                stop_reason = "context_full"
                break
            budget = min(room, config.max_new_tokens - len(generated) - 1)
            if target.max_tokens_per_call:
                budget = min(budget, target.max_tokens_per_call - 1)
            # propose
            proposal = proposer.propose(seq, budget) if speculative and budget > 0 else Proposal()
            proposal.truncate(max(budget, 0))
            m = len(proposal)
            # verify: the target's pending token plus all proposals in one call
            pending = seq[target.position :] + proposal.target_ids
            t0 = time.perf_counter()
            logits = target.forward(pending, target.position, m + 1)
            seconds = time.perf_counter() - t0
            calls += 1
            call_times[len(pending) > 1].append(seconds)
            n, next_token = verify(proposal, logits, config.sampler, rng)
            # accept
            rnd = Round(len(seq), proposal, n, next_token, logits, seconds, len(pending))
            target.rollback(len(seq) + n)
            seq.extend(rnd.committed)
            rounds.append((time.perf_counter() - start, m, n))
            for source in dict.fromkeys(proposal.sources):  # who proposed what, and how much of it was accepted
                by_source.setdefault(source, Counter()).update(
                    rounds=1, proposed=proposal.sources.count(source), accepted=proposal.sources[:n].count(source))
            # learn
            if speculative:
                proposer.observe(seq, rnd)
            if adapter is not None:
                adapter.observe(rnd.committed, logits[: n + 1])

            for tok in rnd.committed:
                if tok in config.eos_ids:
                    stop_reason = "eos"
                    break
                generated.append(tok)
                if out.push(tok):
                    stop_reason = "stop_string"
                    break
                if len(generated) >= config.max_new_tokens:
                    stop_reason = "max_new_tokens"
                    break
        out.flush()
        wall = time.perf_counter() - start
        weights_changed = False
        adaptation = None
        if adapter is not None:  # an update runs after the reply, between prompts
            t0 = time.perf_counter()
            try:
                weights_changed = adapter.end()
            except Exception as e:  # noqa: BLE001 - the reply is done: a failed update must not lose it
                log(f"[omnidraft] warning: the adaptation update failed ({type(e).__name__}: {e}); "
                    "the reply is kept")
                weights_changed = True  # the drafter's weights may have moved: its cached keys are stale
            adaptation = dict(adapter.summary(), seconds=time.perf_counter() - t0)
        proposers = proposer.end(weights_changed, remember=learn) if speculative else {}
        stats = self._stats(generated, calls, by_source, proposers, prefill_s, wall)
        stats["timings"] = _timings(call_times, proposers.get(DRAFTER, {}).get("step_seconds", []))
        lengths = Counter(n for _, _, n in rounds)
        stats["accepted_length_histogram"] = {str(k): v for k, v in sorted(lengths.items())}
        if adaptation is not None:
            stats["adaptation"] = adaptation
        if "predictor" in proposers.get(DRAFTER, {}):
            stats["predictor"] = proposers[DRAFTER]["predictor"]
        stats["draft_policy"] = config.draft_policy
        stats["rounds"] = rounds
        stats["prompt_tokens_reused"] = reused
        return GenerationResult(out.text, generated, stop_reason, stats)

    def _stats(self, generated, calls: int, by_source: dict, proposers: dict, prefill_s, wall) -> dict:
        decode_s = max(wall - prefill_s, 1e-9)
        drafted = sum(c["proposed"] for c in by_source.values())
        accepted = sum(c["accepted"] for c in by_source.values())
        d = proposers.get(DRAFTER, {})
        cache = self.ngram_cache
        return {
            "new_tokens": len(generated),
            "target_calls": calls,
            "tokens_per_target_call": len(generated) / max(calls, 1),
            "drafted": drafted,
            "accepted": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "proposals": {source: dict(c) for source, c in sorted(by_source.items())},
            "draft_tokens": d.get("draft_tokens", 0),
            "mean_draft_len": d.get("draft_tokens", 0) / max(d.get("rounds_drafted", 0), 1),
            "drafter_calls": d.get("drafter_calls", 0),
            "ngram_cache_hits": d.get("ngram_hits", 0),
            "ngram_cache_accepted": d.get("ngram_accepted", 0),
            "ngram_cache_size": len(cache) if cache is not None else 0,
            "lookup": proposers.get("lookup"),
            "hybrid": {k: proposers[k] for k in ("choices", "costs") if k in proposers} or None,
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "wall_s": wall,
            "tokens_per_s": len(generated) / decode_s,
            "cross_vocab": self.cross_vocab,
            "vocab_intersection": self.bridge.intersection_size if self.bridge else None,
        }


def _timings(call_times: dict, drafter_steps: list[float]) -> dict:
    """Median target call (one token, and verification) and drafter step, in ms, and c = drafter / target step."""
    med = lambda xs: 1000 * float(np.median(xs)) if xs else None  # noqa: E731
    step, drafter = med(call_times[False]), med(drafter_steps)
    return {"target_step_ms": step, "target_verify_ms": med(call_times[True]), "drafter_step_ms": drafter,
            "cost_ratio_c": drafter / step if step and drafter else None}


class _TextStream:
    """Target tokens -> text, streamed; holds back cut UTF-8 and watches stop strings."""

    def __init__(self, vocab: Vocab, stop_strings, on_text):
        self.vocab = vocab
        self.stop_strings = [s for s in stop_strings if s]
        self.on_text = on_text
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self._sent = 0

    def push(self, token: int) -> bool:
        """Add a token's text; True when a stop string has just appeared."""
        if self.vocab.special[token]:
            return False
        piece = self.decoder.decode(self.vocab.token_bytes[token])
        if not piece:
            return False
        self.text += piece
        for s in self.stop_strings:
            at = self.text.find(s, max(0, len(self.text) - len(piece) - len(s)))
            if at >= 0:
                self.text = self.text[: at + len(s)]
                self._emit()
                return True
        self._emit()
        return False

    def flush(self) -> None:
        self.text += self.decoder.decode(b"", final=True)
        self._emit()

    def _emit(self) -> None:
        if self.on_text and len(self.text) > self._sent:
            self.on_text(self.text[self._sent :])
        self._sent = len(self.text)
