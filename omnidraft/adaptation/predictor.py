"""Online training of the acceptance head (runtime/acceptance.py) from verified rounds.

Every drafted token that verification judged becomes (features, label); the
newest `buffer` of them are kept. An update takes `epochs` full-batch Adam steps
of weighted binary cross-entropy (rejections weighted `reject_weight`; an L2 pull
of the hidden-state weights towards the initial head, the bias and the two
confidence weights are free) on the buffer. It is a logistic regression on
a few hundred features: milliseconds, plain numpy, so it runs the same on any
backend and could run on the phone.

When: after every generation ("each-prompt", default), or only when the
drafter's LoRA is updated ("with-lora", interleaved with it). The head trains on
detached hidden states: its loss never changes the drafter. After a LoRA update
the buffered features come from the old drafter; the buffer is short, so they
age out within a few prompts.
"""

from __future__ import annotations

import io
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic
from ..runtime.acceptance import N_CONFIDENCE, AcceptanceHead
from ..state import locked

SCHEDULES = ("each-prompt", "with-lora")
FORMAT = "omnidraft-acceptance-head-1"


@dataclass
class PredictorConfig:
    # Chosen on the default pair (code, prose, chat; 16 prompts each, online: predict a
    # prompt's draft tokens, then learn them): AUC 0.81-0.87 vs 0.69-0.75 for the prior,
    # l2 0.1 on the hidden-state weights beat 1e-3..1e-2 (a 578-feature logistic regression
    # overfits a few prompts) and 0.3-1; lr 0.01-0.05 about equal.
    lr: float = 0.03
    epochs: int = 30
    buffer: int = 4096  # judged draft tokens kept
    reject_weight: float = 1.0
    l2: float = 0.1
    schedule: str = "each-prompt"

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"predictor schedule must be one of {', '.join(SCHEDULES)}")
        if self.lr <= 0 or self.epochs < 1 or self.buffer < 1 or self.reject_weight <= 0 or self.l2 < 0:
            raise ValueError("predictor lr, epochs, buffer and reject weight must be positive, l2 >= 0")


class AcceptancePredictor:
    def __init__(self, head: AcceptanceHead, config: PredictorConfig | None = None):
        self.head = head
        self.config = config or PredictorConfig()
        self.prior = (head.weight.copy(), head.bias.copy())
        self.features: deque[np.ndarray] = deque(maxlen=self.config.buffer)
        self.labels: deque[float] = deque(maxlen=self.config.buffer)
        # (probability the head gave before learning from it, label): its honest, online track record
        self.track: deque[tuple[float, float]] = deque(maxlen=self.config.buffer)
        self.updates = 0
        self.seen = 0
        self.last_loss: float | None = None
        self._adam = None
        self._base: tuple | None = None  # (weight, bias, updates) as last loaded or saved: what a merge adds to

    def observe(self, features: list[np.ndarray], labels: np.ndarray) -> None:
        """One verified round: features of each drafted token, their labels (NaN = unjudged)."""
        for f, y in zip(features, labels):
            if f is not None and not np.isnan(y):
                self.features.append(np.asarray(f, dtype=np.float32))
                self.labels.append(float(y))
                self.track.append((float(self.head.prob(f)), float(y)))
                self.seen += 1

    def end_generation(self, lora_updated: bool) -> None:
        if self.config.schedule == "each-prompt" or lora_updated:
            self.update()

    def update(self) -> None:
        """Full-batch weighted BCE with Adam, in place on the shared head."""
        if not self.labels:
            return
        cfg, head = self.config, self.head
        x = np.stack(self.features).astype(np.float64)
        y = np.asarray(self.labels)
        rw, n = cfg.reject_weight, len(y)
        params = np.concatenate([head.weight, head.bias]).astype(np.float64)
        prior = np.concatenate(self.prior).astype(np.float64)
        if self._adam is None:
            self._adam = [np.zeros_like(params), np.zeros_like(params), 0]
        m, v, t = self._adam
        for _ in range(cfg.epochs):
            z = x @ params[:-1] + params[-1]
            p = 1.0 / (1.0 + np.exp(-z))
            # loss = -mean(y log p + rw (1 - y) log(1 - p)); its derivative in z:
            g_z = (p * (y + rw * (1.0 - y)) - y) / n
            grad = np.concatenate([x.T @ g_z, [g_z.sum()]])
            grad[:-1 - N_CONFIDENCE] += cfg.l2 * (params - prior)[:-1 - N_CONFIDENCE]  # hidden-state weights only
            t += 1
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad**2
            params -= cfg.lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        self._adam = [m, v, t]
        head.weight[:] = params[:-1]
        head.bias[:] = params[-1:]
        p = np.clip(1.0 / (1.0 + np.exp(-(x @ params[:-1] + params[-1]))), 1e-7, 1 - 1e-7)
        self.last_loss = float(-(y * np.log(p) + rw * (1 - y) * np.log(1 - p)).mean())
        self.updates += 1

    def summary(self) -> dict:
        return {"updates": self.updates, "examples": self.seen, "buffered": len(self.labels), "loss": self.last_loss}

    # -- persistence: the head's weights and optimizer (the buffer is not kept) ------------
    def state(self) -> dict:
        m, v, t = self._adam or (None, None, 0)
        return {"weight": self.head.weight.copy(), "bias": self.head.bias.copy(), "adam_m": m, "adam_v": v,
                "adam_t": t, "updates": self.updates, "seen": self.seen}

    def load_state(self, state: dict) -> None:
        """ValueError (nothing changed) unless every field has this head's shape and sane values."""
        weight = np.asarray(state["weight"], dtype=np.float32)
        bias = np.asarray(state["bias"], dtype=np.float32).reshape(-1)
        if weight.shape != self.head.weight.shape:
            raise ValueError(f"acceptance head has {weight.shape[0] if weight.ndim else 0} features, "
                             f"expected {self.head.n_features}")
        if bias.shape != (1,) or not np.isfinite(weight).all() or not np.isfinite(bias).all():
            raise ValueError("damaged (weights)")
        adam = None
        if state["adam_m"] is not None:
            m, v = np.asarray(state["adam_m"], dtype=np.float64), np.asarray(state["adam_v"], dtype=np.float64)
            width = (self.head.n_features + 1,)
            if m.shape != width or v.shape != width or not np.isfinite(m).all() or not (np.isfinite(v) & (v >= 0)).all():
                raise ValueError("damaged (optimizer state)")
            adam = [m, v, _count(state["adam_t"])]
        updates, seen = _count(state["updates"]), _count(state["seen"])
        self.head.weight[:] = weight
        self.head.bias[:] = bias
        self._adam = adam
        self.updates, self.seen = updates, seen

    def save(self, path: Path) -> None:
        """Atomically, as .npz, merged under a lock with what another process saved since we loaded:
        each process's change of the weights is added to the other's (the optimizer moments are ours)."""
        with locked(path):
            if self._base is not None and path.exists():
                other = AcceptancePredictor(AcceptanceHead(self.head.weight.copy(), 0.0), self.config)
                try:
                    other._read(path)
                except ValueError:
                    other = None
                base_w, base_b, base_updates = self._base
                if other is not None and other.updates != base_updates:
                    self.head.weight[:] = other.head.weight + (self.head.weight - base_w)
                    self.head.bias[:] = other.head.bias + (self.head.bias - base_b)
                    self.updates = other.updates + max(self.updates - base_updates, 0)
            s = self.state()
            arrays = {k: np.asarray(v if v is not None else []) for k, v in s.items()}
            buf = io.BytesIO()
            np.savez(buf, format=np.asarray(FORMAT), **arrays)
            write_bytes_atomic(path, buf.getvalue())
            self._mark_base()

    def _mark_base(self) -> None:
        self._base = (self.head.weight.copy(), self.head.bias.copy(), self.updates)

    def load(self, path: Path) -> None:
        """ValueError if the file is not a head for this drafter."""
        self._read(path)
        self._mark_base()

    def _read(self, path: Path) -> None:
        try:
            with np.load(path, allow_pickle=False) as z:
                s = {k: z[k] for k in z.files}
        except Exception as e:  # noqa: BLE001 - a damaged file raises many kinds
            raise ValueError(f"unreadable ({type(e).__name__})") from e
        if str(s.pop("format", "")) != FORMAT or not {"weight", "bias", "adam_m", "adam_v"} <= s.keys():
            raise ValueError("not an OmniDraft acceptance head")
        if s["adam_m"].size == 0:
            s["adam_m"] = s["adam_v"] = None
        try:
            self.load_state(s)
        except (KeyError, TypeError) as e:
            raise ValueError(f"damaged (field {e})") from None


def _count(value) -> int:
    value = np.asarray(value)
    if value.shape != () or not np.issubdtype(value.dtype, np.integer) or int(value) < 0:
        raise ValueError("damaged (counters)")
    return int(value)
