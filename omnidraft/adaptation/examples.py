"""Training examples from verified rounds: what the target committed, in draft tokens.

Each generation becomes one example: the drafter's prompt followed by every
committed target token spelled in draft tokens (the same spelling the n-gram
cache learns). Each committed token is one "unit" of the loss:
  - directly mapped (one draft token that is its twin): a KL unit; the target's
    logits at that position, restricted to the mapped tokens, are kept (fp16);
  - spelled by several draft tokens (an n-gram token): an NLL unit over its
    sub-tokens.
The target's distribution at a committed position is exact whatever was drafted:
row j of a round's verification logits scores committed token j (the context
up to it was accepted), so every round yields teacher signal, on-policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Mapping:
    """The directly mapped tokens: draft ids and their target twins, in one order."""

    draft_ids: np.ndarray
    target_ids: np.ndarray

    @classmethod
    def from_bridge(cls, bridge) -> "Mapping":
        d = np.nonzero(bridge.draft_to_target >= 0)[0]
        return cls(d.astype(np.int64), bridge.draft_to_target[d].astype(np.int64))

    def __len__(self) -> int:
        return len(self.draft_ids)


@dataclass
class Example:
    ids: np.ndarray  # draft tokens, prompt + continuation
    kl_pos: np.ndarray  # logits at kl_pos[i] predict a directly mapped token...
    kl_target: np.ndarray  # ...whose target logits over Mapping are kl_target[i] (fp16)
    nll_pos: np.ndarray  # logits at nll_pos[i] predict ids[nll_pos[i] + 1], an n-gram sub-token
    units: list[tuple[int, int]] = field(default_factory=list)  # per committed token: first, last position

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.kl_pos.nbytes + self.kl_target.nbytes + self.nll_pos.nbytes

    def with_prompt_nll(self) -> "Example":
        """The same example whose prompt also teaches: every prompt position (but the last, which predicts the
        first committed token) gets an NLL row for the prompt's next draft token (the user's own text)."""
        first = self.units[0][0] if self.units else len(self.ids) - 1
        nll = np.union1d(np.arange(first, dtype=np.int64), self.nll_pos).astype(np.int64)
        return Example(self.ids, self.kl_pos, self.kl_target, nll, self.units)

    def window(self, size: int) -> "Example":
        """The last `size` tokens (positions shift; units cut by the window are dropped)."""
        cut = max(0, len(self.ids) - size)
        if cut == 0:
            return self
        keep_kl = self.kl_pos >= cut
        return Example(
            self.ids[cut:],
            self.kl_pos[keep_kl] - cut,
            self.kl_target[keep_kl],
            self.nll_pos[self.nll_pos >= cut] - cut,
            [(a - cut, b - cut) for a, b in self.units if a >= cut],
        )

    def padded(self, window: int, n_mapped: int, pad_id: int = 0) -> tuple[np.ndarray, ...]:
        """The last `window` tokens as fixed-shape arrays: ids [window], kl_rows, kl_target
        [window, n_mapped], kl_weight, nll_rows, nll_labels, nll_weight; rows beyond the
        example's units are padding with weight 0."""
        e = self.window(window)
        ids = np.full(window, pad_id, dtype=np.int64)
        ids[: len(e)] = e.ids

        def rows(pos):  # padded row indices and 0/1 weights
            r = np.zeros(window, dtype=np.int64)
            w = np.zeros(window, dtype=np.float32)
            r[: len(pos)] = pos
            w[: len(pos)] = 1.0
            return r, w

        kl_rows, kl_weight = rows(e.kl_pos)
        kl_target = np.zeros((window, n_mapped), dtype=np.float32)
        kl_target[: len(e.kl_pos)] = e.kl_target
        nll_rows, nll_weight = rows(e.nll_pos)
        nll_labels = np.zeros(window, dtype=np.int64)
        nll_labels[: len(e.nll_pos)] = e.ids[e.nll_pos + 1]
        return ids, kl_rows, kl_target, kl_weight, nll_rows, nll_labels, nll_weight


def unit_hits(example: Example, choice: np.ndarray) -> int:
    """How many of the example's committed tokens the drafter's greedy choices reproduce in full
    (choice[i]: its argmax after ids[:i + 1]): the greedy acceptance of one round, teacher-forced."""
    return sum(bool(np.array_equal(choice[a : z + 1], example.ids[a + 1 : z + 2])) for a, z in example.units)


def padded_batch(examples: list[Example], batch: int, window: int, n_mapped: int, pad_id: int = 0) -> list:
    """Up to `batch` examples as the training program's fixed-shape inputs (missing ones all padding):
    ids [batch, window], then flat rows into batch * window with their targets and 0/1 weights:
    kl_rows, kl_target [batch * window, n_mapped] (float32), kl_weight, nll_rows, nll_labels, nll_weight."""
    if not 1 <= len(examples) <= batch:
        raise ValueError(f"a training batch holds 1 to {batch} examples, not {len(examples)}")
    empty = Example(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros((0, n_mapped), np.float16),
                    np.zeros(0, np.int64))
    parts = [e.padded(window, n_mapped, pad_id) for e in examples + [empty] * (batch - len(examples))]
    ids, kl_rows, kl_target, kl_weight, nll_rows, nll_labels, nll_weight = zip(*parts)
    offset = lambda rows: np.concatenate([r + b * window for b, r in enumerate(rows)])  # noqa: E731
    return [np.stack(ids), offset(kl_rows), np.concatenate(kl_target), np.concatenate(kl_weight),
            offset(nll_rows), np.concatenate(nll_labels), np.concatenate(nll_weight)]


class ExampleBuilder:
    """Collects one generation's committed tokens and target rows into an Example."""

    def __init__(self, bridge, mapping: Mapping, draft_prompt: list[int]):
        self.bridge = bridge
        self.mapping = mapping
        self.ids = list(draft_prompt)
        self.kl_pos: list[int] = []
        self.kl_target: list[np.ndarray] = []
        self.nll_pos: list[int] = []
        self.units: list[tuple[int, int]] = []
        self.closed = not draft_prompt  # nothing to condition on

    def add(self, committed: list[int], target_logits: np.ndarray, over_mapping: bool = False) -> None:
        """committed[j] was scored by target_logits[j]: rows over the target vocabulary, or with
        over_mapping over the mapped tokens only (in Mapping's order)."""
        draft, target = self.bridge.draft, self.bridge.target
        for t, row in zip(committed, target_logits):
            if self.closed:
                return
            t = int(t)
            if t >= len(target) or target.special[t]:
                self.closed = True  # EOS / end of turn: the text ends here
                return
            spelling = draft.encode_bytes(target.token_bytes[t], lenient=True)
            if not spelling:
                self.closed = True  # unspellable: later positions would be misaligned
                return
            first = len(self.ids) - 1  # the logits here predict the spelling's first token
            if len(spelling) == 1 and self.bridge.draft_to_target[spelling[0]] == t:
                self.kl_pos.append(first)
                self.kl_target.append((row if over_mapping else row[self.mapping.target_ids]).astype(np.float16))
            else:
                self.nll_pos.extend(range(first, first + len(spelling)))
            self.units.append((first, first + len(spelling) - 1))
            self.ids.extend(spelling)

    def build(self) -> Example | None:
        if not self.units:
            return None
        n_map = len(self.mapping)
        return Example(
            np.array(self.ids, dtype=np.int64),
            np.array(self.kl_pos, dtype=np.int64),
            np.stack(self.kl_target) if self.kl_target else np.zeros((0, n_map), np.float16),
            np.array(self.nll_pos, dtype=np.int64),
            self.units,
        )
