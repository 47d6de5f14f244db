"""Turning logits into choices: greedy (temperature 0) or tempered top-p sampling.

Target and drafter use the same settings, so that the drafter's q and the target's p in the
acceptance test min(1, p/q') are comparable distributions.

The distribution is temperature, then top-p over the whole vocabulary: the smallest set of the
most probable tokens (ties by token id) whose mass reaches top_p, renormalized. Finding that set
does not need a sort of the whole vocabulary (262,144 tokens for Gemma-3: a full stable sort took
36 ms a row): only tokens of probability at least `t` can be in it once the tokens above t hold
top_p of the mass, so the set is found among the few above a threshold, lowered tenfold until it
holds top_p (every token below a threshold is less probable than every token above it, so the
set is the same one the full sort gives). A row costs one pass of exp over the vocabulary
(float32 terms, float64 sums) and a sort of the candidates.

Seeds repeat across proposers: `position_uniform(seed, position)` is the uniform number of one
output position, a pure function of the seed and the position (splitmix64, the same in the Java
core). `Dist.draw(u)` turns it into that position's token by the inverse CDF in token-id order.
Target-only decoding draws every token so; verification draws the same token at the same position
and accepts a deterministic proposal exactly when it equals the draw (verify.py), so the text is
target-only's text for that seed whoever proposed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MASK64 = (1 << 64) - 1
THRESHOLDS = (1e-3, 1e-5, 1e-7, 0.0)  # candidate thresholds (share of the mass), tried in turn


@dataclass(frozen=True)
class Dist:
    """A sampling distribution over its support: token ids (ascending) and their probabilities (float64)."""

    ids: np.ndarray
    p: np.ndarray
    vocab: int

    def prob(self, token: int) -> float:
        i = int(np.searchsorted(self.ids, token))
        return float(self.p[i]) if i < len(self.ids) and self.ids[i] == token else 0.0

    def draw(self, u: float) -> int:
        """The token at u in [0, 1) of the inverse CDF, in token-id order."""
        c = np.cumsum(self.p)
        return int(self.ids[min(int(np.searchsorted(c, u * c[-1], side="right")), len(self.ids) - 1)])

    def dense(self) -> np.ndarray:
        out = np.zeros(self.vocab, dtype=np.float64)
        out[self.ids] = self.p
        return out


@dataclass(frozen=True)
class Sampler:
    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top-p must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def dist(self, logits: np.ndarray) -> Dist:
        """One row of logits -> its distribution after temperature and top-p."""
        x = np.asarray(logits, dtype=np.float32).reshape(-1)
        e = np.exp((x - x.max()) / np.float32(self.temperature))
        z = float(e.sum(dtype=np.float64))
        if self.top_p >= 1.0:
            ids = np.flatnonzero(e > 0)
            return Dist(ids, e[ids].astype(np.float64) / z, len(x))
        for t in THRESHOLDS:
            cand = np.flatnonzero(e >= t * z) if t else np.arange(len(x))
            if not len(cand):
                continue
            order = cand[np.argsort(-e[cand], kind="stable")]  # most probable first, ties by token id
            cum = np.cumsum(e[order].astype(np.float64) / z)
            if cum[-1] >= self.top_p or not t:
                keep = np.sort(order[: int(np.searchsorted(cum, self.top_p)) + 1])
                p = e[keep].astype(np.float64)
                return Dist(keep, p / p.sum(), len(x))
        raise AssertionError("unreachable")

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Rows of logits -> dense rows of probabilities (float64), after temperature and top-p."""
        rows = np.atleast_2d(logits)
        out = np.stack([self.dist(row).dense() for row in rows])
        return out.reshape(np.shape(logits))

    def choose(self, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, np.ndarray | None]:
        """One token from one row of logits, with its distribution (None when greedy)."""
        if self.greedy:
            return int(np.argmax(logits)), None
        p = self.probs(logits)
        return sample(p, rng), p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def position_uniform(seed: int, position: int) -> float:
    """The uniform number in [0, 1) of output position `position` under `seed` (splitmix64 of both)."""
    z = (seed * 0x9E3779B97F4A7C15 + position + 1) & MASK64
    for _ in range(2):  # two rounds of splitmix64's finalizer
        z = (z + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
    return (z >> 11) / float(1 << 53)
