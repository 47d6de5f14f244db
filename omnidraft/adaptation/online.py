"""Online adaptation: the drafter learns from the user's own verified rounds.

The decoder hands every generation to the adapter (`begin`, `observe` per
round, `end`). Finished generations become training examples; every
`every` prompts the adapter takes `steps` AdamW steps on the newest `batch`
examples of its on-policy buffer. A guard keeps every `holdout_every`-th example
out of training; an update that lowers the drafter's greedy acceptance on those
held-out examples is rolled back (weights and optimizer state), so adaptation
never leaves the drafter worse on recent traffic than it was before the update.
Accepted updates are saved at once, atomically: a killed process loses at most
the update in flight.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..state import locked, set_aside
from ..store import StateFile
from .adapter_file import AdapterFileError, AdapterSnapshot, AdaptStats, stamp
from .examples import Example, ExampleBuilder, Mapping
from .learners import EagerLearner
from .lora import LoRAConfig
from .loss import LAMBDA
from .memory import release_free_memory

@dataclass
class AdaptConfig:
    lora: LoRAConfig | None = field(default_factory=LoRAConfig)  # None: full fine-tuning
    lam: float = LAMBDA  # weight of the n-gram NLL term
    use_kl: bool = True  # False: n-gram NLL only (an ablation)
    lr: float = 1e-3  # measured on a held-out unseen domain (benchmarks/adapt_study.py); the CLI's --adapt-lr
    every: int = 4  # prompts between updates
    batch: int = 2  # examples per optimizer step (the on-device program's fixed batch)
    steps: int = 8  # optimizer steps per update
    buffer: int = 16  # on-policy buffer (examples)
    holdout_every: int = 5  # every n-th example is held out for the guard (1st, 6th, ...)
    holdout: int = 4  # held-out examples kept
    window: int = 128  # draft tokens per example (the latest): a context shorter than this learns little
    replay: int = 16  # newest buffered examples an update's steps cycle through (batch by batch)
    prompt_nll: bool = True  # the prompt's own text teaches too (NLL, in the n-gram term)
    guard: bool = True
    guard_base: bool = True  # compare with the drafter without its adapter (True), or before the update
    guard_margin: float = 1.0  # roll back only a drop larger than this many standard errors of the estimate
    warmup: int = 16  # optimizer steps over which the learning rate ramps up linearly (from lr / warmup)

    def __post_init__(self):
        for name in ("every", "batch", "steps", "buffer", "holdout_every", "holdout", "window", "replay"):
            if getattr(self, name) < 1:
                raise ValueError(f"adaptation {name} must be at least 1")
        if self.lam < 0 or self.lr <= 0:
            raise ValueError("adaptation lambda must be >= 0 and the learning rate > 0")


class OnlineAdapter:
    """Buffers verified generations, updates the drafter every few prompts, guards, saves.

    `drafter` is the torch drafter to train in eager mode, or a learner such as
    ExecuTorchLearner (see learners.py).
    """

    def __init__(self, drafter, bridge, config: AdaptConfig, state_path: Path | None = None, meta: dict | None = None,
                 warn=None):
        self.warn = warn
        self.bridge = bridge
        self.config = config
        self.state_path = Path(state_path) if state_path else None
        self.mapping = Mapping.from_bridge(bridge)
        self.learner = drafter if hasattr(drafter, "acceptance") else EagerLearner(drafter, config, self.mapping)
        self.meta = dict(meta or {}, pair_id=bridge.pair_id, **self.learner.identity())
        self.buffer: deque[Example] = deque(maxlen=config.buffer)
        self.heldout: deque[Example] = deque(maxlen=config.holdout)
        self.stats = AdaptStats()
        self._builder: ExampleBuilder | None = None
        self._since_update = 0
        self._disk_mark: tuple | None = None  # the state file's stamp when we last loaded or saved it

    # -- the decoder's hooks -------------------------------------------------------------
    def begin(self, target_prompt: list[int]) -> None:
        """A generation starts from `target_prompt` (target tokens): its example begins with the same text in
        draft tokens."""
        self._builder = ExampleBuilder(self.bridge, self.mapping, self.bridge.draft_prompt(target_prompt))

    def observe(self, committed: list[int], target_logits: np.ndarray) -> None:
        if self._builder is not None:
            self._builder.add(committed, target_logits)

    def abandon(self) -> None:
        """The generation was interrupted: learn nothing from it."""
        self._builder = None

    def end(self) -> bool:
        """Finish the generation; True when the drafter's weights changed (its KV cache is stale).

        With a state file the whole step is serialized across processes: under the file's lock
        the adapter first takes over what another process saved since (its weights, optimizer,
        counters and pending examples), then adds this generation's example, updates if due,
        and saves everything, pending examples included. So one-prompt runs learn like one
        stream, and two processes adapting one profile build on each other's updates.
        """
        example = self._builder.build() if self._builder else None
        self._builder = None
        if example is None:
            return False
        return self.add(example)

    def add(self, example: Example) -> bool:
        """One finished generation's example (its latest `window` draft tokens): buffered or held out, and an
        update when one is due. True when the drafter's weights changed."""
        if self.config.prompt_nll:
            example = example.with_prompt_nll()
        example = example.window(self.config.window)
        if self.state_path is None:
            return self._add(example)
        try:
            with locked(self.state_path):
                reloaded = self._catch_up()
                changed = self._add(example)
                self.save()
        except OSError as e:  # the lock or the folder is not writable: keep adapting in memory
            if self.warn:
                self.warn(f"[omnidraft] warning: could not save the adapter to {self.state_path}: {e.strerror or e}")
            return False
        return changed or reloaded

    def _catch_up(self) -> bool:
        """Load what another process saved since our last load or save; True if the weights changed."""
        try:
            mark = stamp(self.state_path.stat())
        except FileNotFoundError:
            return False
        if mark == self._disk_mark:
            return False
        try:
            self.load(self.state_path)
        except AdapterFileError as e:
            set_aside(self.state_path, "bad", f"adapter {self.state_path.name} is {e}; keeping this session's", self.warn)
            return False
        return True

    def _add(self, example) -> bool:
        if self.stats.examples % self.config.holdout_every == 0:
            self.heldout.append(example)
        else:
            self.buffer.append(example)
        self.stats.examples += 1
        self._since_update += 1
        if self._since_update < self.config.every or not self.buffer:
            return False
        self._since_update = 0
        return self.update()

    # -- learning ---------------------------------------------------------------------------
    def update(self) -> bool:
        """A few optimizer steps on the newest examples; kept only if the guard agrees."""
        cfg, learner = self.config, self.learner
        start = time.perf_counter()
        guarded = cfg.guard and bool(self.heldout)
        if guarded:
            before = learner.acceptance(list(self.heldout))
            saved = learner.state()
        for batch in self.batches():
            losses = learner.step(batch)
            self.stats.steps += 1
        self.stats.last_loss, self.stats.last_l_dm, self.stats.last_l_ngram = losses
        kept = True
        if guarded:
            after = learner.acceptance(list(self.heldout))
            self.stats.holdout_before, self.stats.holdout_after = before, after
            # against the drafter without its adapter: small dips between updates are noise of a few held-out
            # examples (rolling each back stalls learning); falling below where adaptation started is damage
            floor = learner.acceptance(list(self.heldout), base=True) if cfg.guard_base else before
            if not guard_keeps(after, floor, sum(len(e.units) for e in self.heldout), cfg.guard_margin):
                learner.load_state(saved)
                self.stats.rollbacks += 1
                kept = False
        release_free_memory()  # the step's activations, or a long session's RSS creeps up
        self.stats.updates += 1
        self.stats.update_seconds += time.perf_counter() - start
        return kept

    def batches(self) -> list[list[Example]]:
        """An update's `steps` batches (replay_batches over the buffer)."""
        buffered = list(self.buffer)
        cfg = self.config
        return [[buffered[i] for i in b] for b in replay_batches(len(buffered), cfg.batch, cfg.steps, cfg.replay)]

    def summary(self) -> dict:
        s = self.stats
        return {
            "examples": s.examples,
            "updates": s.updates,
            "rollbacks": s.rollbacks,
            "loss": s.last_loss,
            "heldout_acceptance_before": s.holdout_before,
            "heldout_acceptance_after": s.holdout_after,
        }

    def report(self) -> dict:
        """The summary plus what adaptation cost: learner, seconds per step (guard included), memory."""
        s = self.stats
        return {**self.summary(), "learner": self.learner.identity()["learner"],
                "seconds_per_step": s.update_seconds / max(s.steps, 1), "extra_bytes": self.extra_bytes}

    @property
    def extra_bytes(self) -> dict[str, int]:
        """Memory adaptation adds: trainable tensors, optimizer state, merged weights, buffered examples."""
        examples = sum(e.nbytes for e in list(self.buffer) + list(self.heldout))
        return {**self.learner.extra_bytes(), "examples": examples}

    # -- persistence (adapter_file.py) --------------------------------------------------------
    def save(self) -> None:
        """Write the adapter (weights, optimizer, counters, pending examples) atomically; no-op without a path.
        An update trains on the newest `replay` examples only: those are all a later process needs."""
        if self.state_path is None:
            return
        keep = max(self.config.replay, self.config.batch)
        snapshot = AdapterSnapshot(self.meta, self.learner.state(), self.stats, self._since_update,
                                   list(self.buffer)[-keep:], list(self.heldout))

        def write(path: Path) -> None:
            self._disk_mark = snapshot.write(path)  # under the file's lock: no one replaced it since

        # full disk, read-only folder: a warning, and adapting goes on in memory
        StateFile("adapter", self.state_path).save(write, self.warn or (lambda message: None))

    def load(self, path: Path) -> None:
        """Restore a saved adapter; AdapterFileError (nothing changed) if it is not ours."""
        snapshot, mark = AdapterSnapshot.read(path, self.meta, len(self.mapping))
        try:
            self.learner.load_state(snapshot.state)  # checks every tensor before changing anything
        except AdapterFileError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged tensor dict fails in many ways
            raise AdapterFileError(f"unreadable ({type(e).__name__})") from e
        self.stats, self._since_update = snapshot.stats, snapshot.since_update
        self.buffer.clear()
        self.buffer.extend(snapshot.buffer)
        self.heldout.clear()
        self.heldout.extend(snapshot.heldout)
        self._disk_mark = mark


def replay_batches(buffered: int, batch: int, steps: int, replay: int) -> list[list[int]]:
    """Buffer indices (oldest 0) of an update's `steps` batches: the newest `batch` examples first, then the ones
    before them, cycling through the newest `replay` (so older traffic is revisited, not only the latest);
    each batch oldest first."""
    newest = list(range(buffered - 1, max(buffered - max(replay, batch), 0) - 1, -1))
    chunks = [newest[i : i + batch][::-1] for i in range(0, len(newest), batch)]
    return [chunks[k % len(chunks)] for k in range(steps)] if chunks else []


def guard_keeps(after: float, floor: float, units: int, margin: float) -> bool:
    """The guard's verdict: keep an update unless held-out acceptance `after` fell below `floor` (the drafter
    without its adapter, or before the update) by more than `margin` standard errors of the estimate
    (binomial, over `units` held-out tokens): small dips are the noise of a few held-out examples."""
    noise = math.sqrt(max(floor * (1 - floor), 1e-6) / max(units, 1))
    return after >= floor - margin * noise


def attach(model, bridge, config: AdaptConfig, state_path: Path | None, meta: dict, reset: bool, warn) -> OnlineAdapter:
    """An adapter for `model`, resumed from `state_path` unless reset; a bad file is set aside."""
    adapter = OnlineAdapter(model, bridge, config, state_path, meta, warn)

    def resume(path: Path) -> OnlineAdapter:
        adapter.load(path)
        warn(f"[omnidraft] resumed adapter {path.name} ({adapter.stats.updates} updates so far)")
        return adapter

    return StateFile("adapter", state_path, "starting a fresh adapter").open(resume, lambda: adapter, warn, reset)
