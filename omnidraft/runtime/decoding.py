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
import threading
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np

from ..errors import OmniDraftError
from ..progress import log
from .choices import DraftPolicy
from .draft_length import DraftLength
from .drafting import DraftModel
from .proposers import TARGET, Proposal, Proposer, Round
from .runner import ModelRunner, prefill
from .sampling import Sampler
from .stats import DrafterStats, GenerationStats, ProposerStats, SourceCounts, Timings
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
    # Under sampling the drafter proposes its most likely tokens, verified against each position's own
    # draw (verify.py: lossless, seeds repeat); sampled_drafts: it samples them, verified by rejection
    # sampling (the paper's method; a seed repeats only with the same proposals).
    sampled_drafts: bool = False
    # Cross-vocabulary sampling made exactly lossless (implies sampled_drafts): the drafter samples only
    # among directly mapped tokens (renormalized) and no n-gram merges or splits are proposed, so q' is
    # exactly the law each proposal was drawn from.
    strict_sampling: bool = False
    # How many tokens to draft (draft_length.py): "fixed" (draft_len), "heuristic"
    # (+2/-1 from draft_len) or "auto" (the acceptance head, threshold gamma); the
    # adaptive ones never draft more than max_draft_len.
    draft_policy: DraftPolicy = DraftPolicy.FIXED
    max_draft_len: int = 8
    gamma: float = 0.5

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise OmniDraftError("max new tokens must be at least 1")
        self.draft_length()  # validates the policy and its numbers
        self.draft_policy = DraftPolicy(self.draft_policy)

    @property
    def drafts_sampled(self) -> bool:
        return not self.sampler.greedy and (self.sampled_drafts or self.strict_sampling)

    def draft_length(self) -> DraftLength:
        return DraftLength(self.draft_policy, self.draft_len, self.max_draft_len, self.gamma)


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    stop_reason: str
    stats: GenerationStats
    sources: list[str] = field(default_factory=list)  # who proposed each token: lookup, drafter or target


@dataclass
class _Run:
    """One generation in flight: the loop's state between its prefill, its rounds and its finish."""

    config: GenerationConfig
    seq: list[int]  # the target's sequence; seq[-1] is not yet in its cache
    rng: np.random.Generator
    out: "_TextStream"
    speculative: bool
    adapter: object
    start: float
    prefill_s: float = 0.0
    reused: int = 0
    prompt_tokens: int = 0
    generated: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # who proposed each generated token
    stop_reason: str | None = None
    calls: int = 0
    by_source: dict[str, SourceCounts] = field(default_factory=dict)
    rounds: list[tuple[float, int, int]] = field(default_factory=list)
    call_times: dict[bool, list[float]] = field(default_factory=lambda: {False: [], True: []})
    learn: bool = True  # False: nothing of this generation is kept
    done: object = None  # done(result) when it ends (stream())
    result: GenerationResult | None = None  # set once it has ended


class SpeculativeDecoder:
    """Generates with a target runner, helped by a proposer; an adapter learns from every round.

    The loop sees its proposer only through the protocol (proposers.py) and its runner only
    through forward/rollback: it never asks which proposer or backend it drives.
    """

    def __init__(self, target: ModelRunner, target_vocab: Vocab, proposer: Proposer | None = None, adapter=None):
        self.target = target
        self.target_vocab = target_vocab.padded(target.vocab_size)
        self.proposer = proposer
        self.adapter = adapter  # an OnlineAdapter (trains the drafter), or None
        self._lock = threading.RLock()
        self._live: _Run | None = None  # the generation in flight (a stream may be suspended in it)

    @classmethod
    def with_drafter(cls, target: ModelRunner, target_vocab: Vocab, drafter: ModelRunner, draft_vocab: Vocab,
                     ngram_cache=False, predictor=None) -> "SpeculativeDecoder":
        """A decoder whose drafter proposes every round (ngram_cache=True: a fresh cache for the pair)."""
        return cls(target, target_vocab, DraftModel.between(target, target_vocab, drafter, draft_vocab,
                                                            ngram_cache, predictor))

    # -- the loop ------------------------------------------------------------------------
    # One generation at a time per decoder: the runners' caches and the proposers' state are the decoder's.
    # A lock serializes callers from several threads (each model call, round and finish runs under it), and
    # starting a generation ends one still live (a suspended stream) as "cancelled", as if it were closed.
    # A generation interrupted by an exception (Ctrl-C, an error) is dropped as "interrupted": the runners
    # forget whatever the interrupted call may have written (runner.py) and its proposers keep nothing of it,
    # so the next generation is exactly what it would have been without it.

    def generate(self, target_prompt: list[int], config: GenerationConfig, on_text=None,
                 learn: bool = True) -> GenerationResult:
        """on_text(piece): the text as it is accepted. learn=False: nothing of this generation is kept (the
        adapter, the acceptance head, the n-gram cache, lookup's scorer and history and the measured costs
        learn nothing from it)."""
        with self._lock:
            run = self._start(target_prompt, config, None if on_text is None else (lambda piece, _: on_text(piece)),
                              learn)
            try:
                while run.stop_reason is None:
                    self._round(run)
            except BaseException:
                self._drop(run)
                raise
            return self._finish(run)

    def stream(self, target_prompt: list[int], config: GenerationConfig, learn: bool = True, done=None,
               sources: bool = False) -> Generator[str | tuple[str, str], None, GenerationResult]:
        """generate() as an iterator over the text as it is accepted (each round's new text, token by token;
        with sources=True as (text, who proposed it): "lookup", "drafter" or "target" for the target's own
        token); the iterator's return value is the GenerationResult, also passed to done(result) when given.
        Closed early (the consumer stopped reading), or ended by a newer generation on this decoder, the
        generation ends there with stop_reason "cancelled" (done still hears of it), and what it learned is
        kept."""
        pieces: list = []
        with self._lock:
            run = self._start(target_prompt, config,
                              (lambda piece, source: pieces.append((piece, source))) if sources
                              else (lambda piece, _: pieces.append(piece)), learn, done)
        try:
            while True:
                with self._lock:
                    if run.stop_reason is not None:
                        break
                    self._round(run)
                while pieces:
                    yield pieces.pop(0)
        except GeneratorExit:
            with self._lock:
                if run.result is None:
                    run.stop_reason = "cancelled"
                self._finish(run)
            raise
        except BaseException:
            with self._lock:
                self._drop(run)
            raise
        with self._lock:
            result = self._finish(run)
        while pieces:
            yield pieces.pop(0)
        return result

    def _start(self, target_prompt: list[int], config: GenerationConfig, on_text, learn: bool, done=None) -> _Run:
        """End a live generation, check the prompt, bring the target's cache up to it (reusing what it holds),
        start the proposer."""
        live, self._live = self._live, None
        if live is not None and live.result is None:
            live.stop_reason = "cancelled"
            self._finish(live)
        if not target_prompt:
            raise OmniDraftError("the prompt is empty")
        if len(target_prompt) >= self.target.max_context:
            raise OmniDraftError(
                f"the prompt is {len(target_prompt)} tokens; the context window is {self.target.max_context}"
            )
        speculative = config.speculative and self.proposer is not None
        run = _Run(config, list(target_prompt), np.random.default_rng(config.seed),
                   _TextStream(self.target_vocab, config.stop_strings, on_text), speculative,
                   self.adapter if speculative and learn else None, time.perf_counter(), learn=learn, done=done)
        run.prompt_tokens = len(run.seq)
        run.reused = prefill(self.target, run.seq)  # reuse what the cache holds (a chat's earlier turns)
        self._live = run
        if speculative:
            self.proposer.begin(run.seq, config, run.rng, learn)
        if run.adapter is not None:
            run.adapter.begin(run.seq)
        run.prefill_s = time.perf_counter() - run.start
        return run

    def _drop(self, run: _Run) -> None:
        """An exception interrupted the generation: end it as "interrupted", keeping nothing of it. The runners
        are already consistent (a call that raised forgets what it wrote); the proposers and the adapter let go
        of the half-done round. Never raises: the interruption is what the caller must see."""
        if run.result is not None:
            return
        run.stop_reason = "interrupted"
        if self._live is run:
            self._live = None
        proposers = ProposerStats()
        try:
            if run.speculative:
                proposers = self.proposer.end(False, remember=False)
            if run.adapter is not None:
                run.adapter.abandon()
        except Exception as e:  # noqa: BLE001 - the interruption is the error to report
            log(f"[omnidraft] warning: ending the interrupted generation: {type(e).__name__}: {e}")
        run.done = None  # whoever waits for the result hears of the exception instead
        self._result(run, proposers, None, time.perf_counter() - run.start)

    def _round(self, run: _Run) -> None:
        """propose -> verify -> accept -> learn, once."""
        target, config, seq = self.target, run.config, run.seq
        room = target.max_context - len(seq)  # proposals that still fit in the target's cache
        if room < 0:
            run.stop_reason = "context_full"
            return
        budget = min(room, config.max_new_tokens - len(run.generated) - 1)
        if target.max_verify:
            budget = min(budget, target.max_verify - 1)
        # propose
        proposal = self.proposer.propose(seq, budget) if run.speculative and budget > 0 else Proposal()
        proposal.truncate(max(budget, 0))
        m = len(proposal)
        # verify: the target's pending token plus all proposals in one call
        pending = seq[target.position :] + proposal.target_ids
        t0 = time.perf_counter()
        logits = target.forward(pending, target.position, m + 1)
        seconds = time.perf_counter() - t0
        run.calls += 1
        run.call_times[len(pending) > 1].append(seconds)
        n, next_token = verify(proposal, logits, config.sampler, run.rng, config.seed, len(seq))
        # accept
        rnd = Round(len(seq), proposal, n, next_token, logits, seconds, len(pending))
        target.rollback(len(seq) + n)
        seq.extend(rnd.committed)
        run.rounds.append((time.perf_counter() - run.start, m, n))
        for source in dict.fromkeys(proposal.sources):  # who proposed what, and how much of it was accepted
            c = run.by_source.setdefault(source, SourceCounts())
            c.rounds += 1
            c.proposed += proposal.sources.count(source)
            c.accepted += proposal.sources[:n].count(source)
        # learn
        if run.speculative:
            self.proposer.observe(seq, rnd)
        if run.adapter is not None:
            run.adapter.observe(rnd.committed, logits[: n + 1])
        for j, tok in enumerate(rnd.committed):
            if tok in config.eos_ids:
                run.stop_reason = "eos"
                return
            source = proposal.sources[j] if j < n else TARGET
            run.generated.append(tok)
            run.sources.append(source)
            if run.out.push(tok, source):
                run.stop_reason = "stop_string"
                return
            if len(run.generated) >= config.max_new_tokens:
                run.stop_reason = "max_new_tokens"
                return

    def _finish(self, run: _Run) -> GenerationResult:
        """Flush the text, let the adapter update (between prompts) and the proposer wrap up; the statistics
        (once: a generation ended by a newer one returns what it had)."""
        if run.result is not None:
            return run.result
        if self._live is run:
            self._live = None
        run.out.flush()
        wall = time.perf_counter() - run.start
        weights_changed = False
        adaptation = None
        if run.adapter is not None:  # an update runs after the reply, between prompts
            t0 = time.perf_counter()
            try:
                weights_changed = run.adapter.end()
            except Exception as e:  # noqa: BLE001 - the reply is done: a failed update must not lose it
                log(f"[omnidraft] warning: the adaptation update failed ({type(e).__name__}: {e}); "
                    "the reply is kept")
                weights_changed = True  # the drafter's weights may have moved: its cached keys are stale
            adaptation = dict(run.adapter.summary(), seconds=time.perf_counter() - t0)
        proposers = self.proposer.end(weights_changed, remember=run.learn) if run.speculative else ProposerStats()
        return self._result(run, proposers, adaptation, wall)

    def _result(self, run: _Run, proposers: ProposerStats, adaptation: dict | None, wall: float) -> GenerationResult:
        drafter = proposers.drafter or DrafterStats()
        stats = GenerationStats(
            new_tokens=len(run.generated), target_calls=run.calls, by_source=run.by_source, proposers=proposers,
            prefill_s=run.prefill_s, wall_s=wall,
            timings=Timings.of(run.call_times[False], run.call_times[True], drafter.step_seconds),
            draft_policy=run.config.draft_policy, prompt_tokens_reused=run.reused,
            accepted_lengths=dict(sorted(Counter(n for _, _, n in run.rounds).items())), rounds=run.rounds,
            adaptation=adaptation, prompt_tokens=run.prompt_tokens)
        run.result = GenerationResult(run.out.text, run.generated, run.stop_reason, stats, run.sources)
        if run.done is not None:
            run.done(run.result)
        return run.result


class _TextStream:
    """Target tokens -> text, streamed; holds back cut UTF-8 and watches stop strings."""

    def __init__(self, vocab: Vocab, stop_strings, on_text):
        self.vocab = vocab
        self.stop_strings = [s for s in stop_strings if s]
        self.on_text = on_text  # on_text(piece, source): the source of the piece's last token
        self.source = TARGET
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""
        self._sent = 0

    def push(self, token: int, source: str = TARGET) -> bool:
        """Add a token's text; True when a stop string has just appeared."""
        self.source = source
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
            self.on_text(self.text[self._sent :], self.source)
        self._sent = len(self.text)
