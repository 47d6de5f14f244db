"""Turning logits into choices: greedy (temperature 0) or tempered top-p sampling.

Target and drafter use the same settings, so that the drafter's q and the
target's p in the acceptance test min(1, p/q') are comparable distributions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Rows of logits -> rows of probabilities (float64), after temperature and top-p."""
        x = np.asarray(logits, dtype=np.float64) / self.temperature
        x -= x.max(axis=-1, keepdims=True)
        p = np.exp(x)
        p /= p.sum(axis=-1, keepdims=True)
        if self.top_p < 1.0:
            p = np.stack([_top_p(row, self.top_p) for row in np.atleast_2d(p)]).reshape(p.shape)
        return p

    def choose(self, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, np.ndarray | None]:
        """One token from one row of logits, with its distribution (None when greedy)."""
        if self.greedy:
            return int(np.argmax(logits)), None
        p = self.probs(logits)
        return sample(p, rng), p


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    keep = order[: int(np.searchsorted(cum, top_p)) + 1]
    out = np.zeros_like(p)
    out[keep] = p[keep]
    return out / out.sum()
