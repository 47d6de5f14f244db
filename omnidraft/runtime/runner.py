"""One interface for every way of running a model (eager torch, ExecuTorch, onnxruntime).

A runner owns a static KV cache of `max_context` positions and knows how many
leading positions of the sequence it holds (`position`). The decoding loop only
ever does two things with it:
  - `forward(tokens, start, n_logits)`: write `tokens` at positions start.. and
    return the logits of the last `n_logits` of them;
  - `rollback(position)`: forget everything from `position` on (rejected drafts).
A static cache makes rollback free: the next forward simply overwrites the
stale slots, and the causal mask never lets a query see past itself.

A graph whose sliding-window layers keep a ring of R = window + slack slots (bundle.json's
cache_lengths and sliding_window) has dropped, for every position it wrote, the positions R
back: a rollback of at most `slack` positions below the highest one written keeps all a
later query needs, a deeper one (a new prompt sharing only the start of the old text) does
not, so the runner then forgets everything and the next prefill reads the text afresh.

A drafter runner may carry an acceptance head (runtime/acceptance.py): then every
forward also leaves `head_output` = (features, P(accept)) of its last position,
computed inside the same call (eager) or the same graph (exported).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple

import numpy as np

from ..errors import OmniDraftError
from .acceptance import AcceptanceHead, head_outputs
from .choices import Backend


class Step(NamedTuple):
    """One model call: logits of the wanted positions and, with a head, (features, P(accept)) of the last one."""

    logits: np.ndarray
    head: tuple[np.ndarray, float] | None = None


class ModelRunner(ABC):
    name: str = "runner"
    backend: str = "?"

    def __init__(self, vocab_size: int, max_context: int, max_tokens_per_call: int | None = None, head=None,
                 max_logit_rows: int | None = None, ring_slack: int | None = None):
        self.vocab_size = vocab_size
        self.max_context = max_context
        self.ring_slack = ring_slack  # the deepest safe rollback below the highest position written (None: any)
        self.written = 0  # one past the highest position written since the cache was last whole
        self.max_tokens_per_call = max_tokens_per_call  # None: any length (long prompts are still chunked)
        self.max_logit_rows = max_logit_rows  # None: a call returns the logits of as many rows as it is asked
        self.position = 0
        self.tokens: list[int] = []  # what the cache holds: tokens[i] sits at position i
        self.calls = 0
        self.head = head  # an AcceptanceHead whose weights this runner applies (drafters)
        self.head_output: tuple[np.ndarray, float] | None = None

    @property
    def has_head(self) -> bool:
        return self.head is not None

    def _graph_head(self, meta: dict) -> None:
        """An exported graph with an acceptance head needs its weights at every call: start from the prior."""
        if meta.get("acceptance_head"):
            self.head = AcceptanceHead.initial(int(meta["acceptance_head"]["features"]))

    def _head_inputs(self) -> list:
        return list(self.head.torch_params()) if self.head is not None else []

    def forward(self, tokens, start: int, n_logits: int = 1) -> np.ndarray:
        """Logits [n_logits, vocab] (float32) for the last n_logits of `tokens` placed at `start`."""
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        n = len(tokens)
        if n == 0:
            raise ValueError("forward needs at least one token")
        if start < self.position:
            self.rollback(start)  # writing over cached positions forgets them (and, past a ring's slack, all)
        if start > self.position:
            raise ValueError(f"cache holds {self.position} positions, cannot write at {start}")
        if start + n > self.max_context:
            raise OmniDraftError(
                f"{self.name}: {start + n} positions exceed the context window of {self.max_context}"
            )
        n_logits = min(max(1, n_logits), n)
        chunk = self.max_tokens_per_call or 256
        outputs = []
        lo = 0
        while lo < n:
            hi = min(n, lo + chunk)
            want = max(0, hi - max(lo, n - n_logits))  # how many of this chunk's rows are wanted
            if self.max_logit_rows and want > self.max_logit_rows:  # a call returns at most that many rows
                hi, want = hi - (want - self.max_logit_rows), self.max_logit_rows
            try:
                logits, head = self._forward(tokens[lo:hi], start + lo, max(want, 1))
            except BaseException:
                # Interrupted (Ctrl-C, an error): the call may have written some layers' slots from
                # start + lo on. Forget them, so the cache never claims positions it may not hold.
                self.rollback(start + lo)
                raise
            if head is not None:
                self.head_output = head
            self.calls += 1
            del self.tokens[start + lo :]
            self.tokens.extend(int(t) for t in tokens[lo:hi])
            self.position = start + hi
            self.written = max(self.written, self.position)
            if want:
                outputs.append(logits[-want:])
            lo = hi
        return np.concatenate(outputs) if len(outputs) > 1 else outputs[0]

    @property
    def max_verify(self) -> int | None:
        """The most tokens one call can verify: each needs its row of logits (None: no limit)."""
        limits = [x for x in (self.max_tokens_per_call, self.max_logit_rows) if x]
        return min(limits) if limits else None

    def rollback(self, position: int) -> None:
        """Keep only the first `position` cached positions (all of them gone when a ring cannot go back that far)."""
        position = max(0, min(self.position, position))
        if self.ring_slack is not None and self.written - 1 - position > self.ring_slack:
            position = 0  # the rings dropped states the positions after `position` need: read it all again
        if position == 0:
            self.written = 0
        self.position = position
        del self.tokens[self.position :]

    def reset(self) -> None:
        self.position = 0
        self.written = 0
        self.tokens.clear()

    @staticmethod
    def slack(meta: dict) -> int | None:
        """A bundle graph's ring slack: its ring length less its window (None: no ring)."""
        lengths, window = meta.get("cache_lengths"), meta.get("sliding_window")
        return min(lengths) - window if lengths and window else None

    @abstractmethod
    def _forward(self, tokens: np.ndarray, start: int, n_logits: int) -> Step:
        """Run tokens at positions start..start+len-1: the last n_logits rows of logits and, with a
        head, the features [F] of the last position with its acceptance probability."""


def common_prefix(runner: ModelRunner, seq: list[int]) -> int:
    """How much of seq[:-1] the runner's cache already holds."""
    keep = 0
    cached = runner.tokens
    limit = min(runner.position, len(seq) - 1)
    while keep < limit and cached[keep] == seq[keep]:
        keep += 1
    return keep


def reuse(runner: ModelRunner, seq: list[int]) -> int:
    """Keep what the runner's cache already holds of seq[:-1] (a chat's earlier turns), forget the rest; how much
    it keeps (0 when its rings cannot go back that far)."""
    runner.rollback(common_prefix(runner, seq))
    return runner.position


def prefill(runner: ModelRunner, seq: list[int]) -> int:
    """Bring the runner's cache to seq[:-1], reusing the prefix it already holds; return its length."""
    keep = reuse(runner, seq)
    if len(seq) - 1 > keep:
        runner.forward(seq[keep:-1], keep)
    return keep


class EagerRunner(ModelRunner):
    """A Hugging Face causal LM in eager PyTorch with a static KV cache."""

    backend = Backend.EAGER

    def __init__(self, model, max_context: int, name: str = "model", head: AcceptanceHead | None = None):
        import torch
        from transformers.cache_utils import Cache, StaticLayer

        super().__init__(int(model.config.get_text_config().vocab_size), max_context, head=head)
        self.name = name
        self.model = model
        self._torch = torch
        # Every layer gets a full-length static cache, sliding-window layers included:
        # the masks still apply the window, and rollback never loses evicted states.
        n_layers = model.config.get_text_config().num_hidden_layers
        self.cache = Cache(layers=[StaticLayer(max_cache_len=max_context) for _ in range(n_layers)])

    def _forward(self, tokens: np.ndarray, start: int, n_logits: int) -> Step:
        torch = self._torch
        # Each layer of the HF cache counts its own fill, and an interrupted call leaves them out of step:
        # every call sets them all to `start`, so the runner's position is the one source of truth.
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(start)
        ids = torch.from_numpy(tokens).unsqueeze(0)
        pos = torch.arange(start, start + len(tokens)).unsqueeze(0)
        with torch.inference_mode():
            head = self._plain_head()
            if head is None:
                out = self.model(input_ids=ids, position_ids=pos, cache=self.cache, use_cache=True,
                                 logits_to_keep=n_logits, output_hidden_states=self.head is not None)
                hidden, out_logits = (out.hidden_states[-1] if self.head is not None else None), out.logits
            else:
                hidden = self.model.base_model(input_ids=ids, position_ids=pos, cache=self.cache,
                                               use_cache=True).last_hidden_state
                out_logits = (head.weight @ hidden[0, -n_logits:].T).T.unsqueeze(0)
            logits = out_logits[0].float().numpy()
            if self.head is None:
                return Step(logits)
            features, prob = head_outputs(hidden, out_logits, *self.head.torch_params())
        return Step(logits, (features[0].numpy(), prob.item()))

    def _plain_head(self):
        """The output projection when it is a plain bias-free linear layer (no draft head, no logit
        soft-capping), else None. The runner then applies it as W @ h^T: PyTorch's CPU BLAS runs that
        layout 2-4x faster for the 2-9 rows of a verification than h @ W^T (Gemma-3's 262k x 640 head,
        2 threads: 3 rows 40 ms against 194; one row the same), and a verification's rows differ from
        one-token rows by float rounding either way (as before)."""
        head = self.model.get_output_embeddings()
        if type(head) is not self._torch.nn.Linear or head.bias is not None:
            return None
        if getattr(self.model.config.get_text_config(), "final_logit_softcapping", None):
            return None
        return head
