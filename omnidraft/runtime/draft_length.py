"""How many tokens to draft each round.

  - fixed k: always k (capped by what still fits);
  - heuristic: Hugging Face's schedule for assisted generation: start at k,
    +2 after a round whose proposals were all accepted, -1 otherwise (>= 1);
  - auto: the acceptance head (acceptance.py) says, after each drafted token,
    how likely it is to be accepted given all before it; drafting stops once
    1 - prod P(accept) > gamma, i.e. when the whole draft is more likely than
    gamma to be cut somewhere. A small gamma drafts little, a large one much.
Both adaptive policies are capped by `max_len` (the bundle's exported maximum).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import OmniDraftError
from .choices import DraftPolicy


@dataclass(frozen=True)
class DraftSettings:
    """How many tokens to draft, resolved for a pair (GenerationConfig's draft-length fields)."""

    draft_policy: DraftPolicy = DraftPolicy.FIXED
    draft_len: int = 4  # k: the fixed length, or where the heuristic starts
    max_draft_len: int = 8  # the adaptive policies' cap (a bundle's exported maximum at most)
    gamma: float = 0.5  # auto: stop once the draft is more likely than this to be cut

    def config_fields(self) -> dict:
        return asdict(self)

    def describe(self) -> int | str:
        """k for a fixed length, else the policy's name (the CLI report's draft_len)."""
        return self.draft_len if self.draft_policy == DraftPolicy.FIXED else str(self.draft_policy)


class DraftLength:
    """One round at a time: `budget()` before drafting, `stop(p)` after each token, `observe` after verifying."""

    def __init__(self, policy: DraftPolicy | str = DraftPolicy.FIXED, k: int = 4, max_len: int = 8,
                 gamma: float = 0.5):
        if policy not in set(DraftPolicy):
            raise OmniDraftError(f"draft length {policy!r}: use a number, 'heuristic' or 'auto'")
        policy = DraftPolicy(policy)
        if not 0 < gamma < 1:
            raise OmniDraftError("gamma must be in (0, 1)")
        if k < 1 or max_len < 1:
            raise OmniDraftError("draft length must be at least 1")
        self.policy = policy
        self.max_len = max_len if policy != DraftPolicy.FIXED else k
        self.k = min(k, self.max_len)
        self.gamma = gamma
        self._survive = 1.0

    @property
    def needs_head(self) -> bool:
        return self.policy == DraftPolicy.AUTO

    def budget(self) -> int:
        self._survive = 1.0
        return self.max_len if self.policy == DraftPolicy.AUTO else self.k

    def stop(self, accept_prob: float | None) -> bool:
        """After drafting a token: stop here?"""
        if self.policy != DraftPolicy.AUTO:
            return False
        self._survive *= float(accept_prob)
        return 1.0 - self._survive > self.gamma

    def observe(self, proposed: int, accepted: int) -> None:
        if self.policy == DraftPolicy.HEURISTIC and proposed:
            self.k = min(self.max_len, self.k + 2) if accepted == proposed else max(1, self.k - 1)
