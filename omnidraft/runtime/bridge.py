"""The bridge between the drafter's vocabulary and the target's.

Draft tokens become target tokens three ways, tried in this order at each
position of a draft:
  1. n-gram: a run of draft tokens the n-gram cache knows spells one target
     token is merged into it, q'(t) = prod q(d_j);
  2. direct: a draft token whose bytes are also one target token maps 1:1,
     q'(t) = q(d);
  3. split: any other draft token is spelled in target tokens (the first gets
     q(d), the rest are forced by it, q' = 1).
The text the draft spells is never changed, only how it is cut into tokens.
When both vocabularies are identical the bridge is the identity and the method
is plain, exactly lossless speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from .ngram_cache import NGramCache
from .proposers import Proposal
from .vocab import Vocab

DIRECT, NGRAM, SPLIT_FIRST, SPLIT_REST = "direct", "ngram", "split", "split-rest"
MAX_SPELLINGS = 65536  # memoized spellings of target tokens; cleared when full


@dataclass
class Translation:
    """A draft translated into target tokens, with where each target token came from in the draft
    (the drafter's own bookkeeping: which draft tokens an accepted target token covers, for
    resynchronizing, teaching the n-gram cache and labelling the acceptance head)."""

    target_ids: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)  # q'(t); 1.0 when sampling is off
    kind: list[str] = field(default_factory=list)
    draft_start: list[int] = field(default_factory=list)  # draft index whose distribution proposed it
    draft_end: list[int] = field(default_factory=list)  # draft tokens fully spelled once this is accepted
    first_draft_id: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.target_ids)

    def append(self, target_id, q, kind, start, end, first_draft_id) -> None:
        self.first_draft_id.append(int(first_draft_id))
        self.target_ids.append(int(target_id))
        self.q.append(float(q))
        self.kind.append(kind)
        self.draft_start.append(start)
        self.draft_end.append(end)

    def truncate(self, m: int) -> None:
        for lst in (self.target_ids, self.q, self.kind, self.draft_start, self.draft_end, self.first_draft_id):
            del lst[m:]


class VocabBridge:
    def __init__(self, draft: Vocab, target: Vocab):
        self.draft = draft
        self.target = target
        self.identity = draft.fingerprint == target.fingerprint
        self.draft_to_target = np.full(len(draft), -1, dtype=np.int64)
        if self.identity:
            self.draft_to_target[:] = np.arange(len(draft))
        else:
            by_bytes: dict[bytes, int] = {}
            for t, b in enumerate(target.token_bytes):
                if target.special[t]:
                    continue
                # Prefer a real token over a "<0xAB>" byte-fallback twin: it is what the target emits.
                if b not in by_bytes or target.byte_fallback[by_bytes[b]]:
                    by_bytes[b] = t
            for d, b in enumerate(draft.token_bytes):
                if not draft.special[d] and b in by_bytes:
                    self.draft_to_target[d] = by_bytes[b]
        self.intersection_size = int((self.draft_to_target >= 0).sum())
        self.pair_id = f"{draft.fingerprint}-{target.fingerprint}"
        self._spellings: dict[int, list[int]] = {}  # target id -> its bytes in draft tokens (learn's memo)

    # -- draft -> target -----------------------------------------------------------
    def propose(self, draft_ids, draft_q, cache: NGramCache | None, max_tokens: int) -> Translation:
        """Translate a draft into at most `max_tokens` target tokens (stops at the first gap)."""
        prop = Translation()
        i, k = 0, len(draft_ids)
        while i < k and len(prop) < max_tokens:
            d = int(draft_ids[i])
            if d >= len(self.draft_to_target):
                break
            hit = cache.lookup(draft_ids, i) if cache is not None and not self.identity else None
            if hit is not None:
                target_id, n = hit
                prop.append(target_id, float(np.prod(draft_q[i : i + n])), NGRAM, i, i + n, d)
                i += n
                continue
            t = self.draft_to_target[d]
            if t >= 0:
                prop.append(t, draft_q[i], DIRECT, i, i + 1, d)
                i += 1
                continue
            pieces = self._split(d)
            if not pieces:
                break
            for j, t in enumerate(pieces):
                last = j == len(pieces) - 1
                kind = SPLIT_FIRST if j == 0 else SPLIT_REST
                prop.append(t, draft_q[i] if j == 0 else 1.0, kind, i, i + 1 if last else i, d)
            i += 1
        prop.truncate(max_tokens)
        return prop

    def proposal(self, tr: Translation, dists=None, source: str = "drafter") -> Proposal:
        """The translated draft as the loop's Proposal: q' per token, and with the draft's distributions
        (sampling; None when greedy) q' over the target vocabulary for a rejection's residual."""
        q_dist = None
        if dists is not None:
            q_dist = lambda j, vocab: self.proposal_distribution(tr, j, dists, vocab)  # noqa: E731
        return Proposal(list(tr.target_ids), list(tr.q), [source] * len(tr), None, q_dist)

    def _split(self, d: int) -> list[int]:
        if self.draft.special[d]:
            return []
        try:
            return self.target.encode_bytes(self.draft.token_bytes[d])
        except ValueError:
            return []

    def proposal_distribution(self, prop: Translation, j: int, draft_probs: np.ndarray, target_vocab: int) -> np.ndarray:
        """q' over the target vocabulary at proposal position j (for the residual).

        Directly mapped draft mass moves to its target twin; a merged n-gram takes
        its product from its first sub-token (the paper's approximation); a forced
        split piece is a point mass. Identity bridges give q' = q exactly.
        """
        if prop.kind[j] == SPLIT_REST:
            q = np.zeros(target_vocab, dtype=np.float64)
            q[prop.target_ids[j]] = 1.0
            return q
        dist = draft_probs[prop.draft_start[j]]
        q = np.zeros(target_vocab, dtype=np.float64)
        n = min(len(dist), len(self.draft_to_target))
        d2t = self.draft_to_target[:n]
        mapped = (d2t >= 0) & (d2t < target_vocab)
        np.add.at(q, d2t[mapped], dist[:n][mapped])
        t = prop.target_ids[j]
        if prop.kind[j] == NGRAM:
            first = self.draft_to_target[prop.first_draft_id[j]]
            if first >= 0:
                q[first] -= prop.q[j]
        if prop.kind[j] in (NGRAM, SPLIT_FIRST):
            q[t] += prop.q[j]
        return np.clip(q, 0.0, None)

    # -- target -> draft -----------------------------------------------------------
    def draft_prompt(self, target_prompt: list[int]) -> list[int]:
        """The drafter's view of the prompt: the same text, in draft tokens."""
        if self.identity:
            return list(target_prompt)
        bos = {self.target.tokenizer.bos_token_id}
        body = list(target_prompt)
        while body and body[0] in bos:
            body = body[1:]
        prefix = self.draft.tokenizer.encode("", add_special_tokens=True)
        return list(prefix) + self.spell(body)

    def spell(self, target_ids) -> list[int]:
        """Target tokens as draft tokens (the same bytes; bytes the drafter cannot spell are dropped)."""
        if self.identity:
            return [int(t) for t in target_ids]
        return self.draft.encode_bytes(self.target.decode_bytes(target_ids), lenient=True)

    def resync(self, draft_ids, proposal: Translation, n_accepted: int, next_token: int) -> tuple[int, list[int]]:
        """After a round: how many drafted tokens the drafter keeps, and what it appends.

        The kept draft tokens spell a prefix of the accepted text; the rest of that
        text (a split piece, the target's own next token) is spelled in draft tokens.
        """
        kept = proposal.draft_end[n_accepted - 1] if n_accepted else 0
        if self.identity:
            return kept, [next_token]
        accepted = self.target.decode_bytes(proposal.target_ids[:n_accepted])
        covered = self.draft.decode_bytes(draft_ids[:kept])
        assert accepted.startswith(covered), (accepted, covered)
        rest = accepted[len(covered) :] + self.target.token_bytes[next_token]
        return kept, self.draft.encode_bytes(rest, lenient=True)

    def learn(self, cache: NGramCache, target_ids) -> None:
        """Teach the cache how the drafter spells each committed target token."""
        if self.identity:
            return
        for t in target_ids:
            t = int(t)
            if t >= len(self.target) or self.target.special[t]:
                continue
            if len(spelling := self._spelling(t)) >= 2:
                cache.add(t, spelling)

    def _spelling(self, t: int) -> list[int]:
        """A target token's bytes in draft tokens ([] if the drafter cannot spell them), tokenized once per token:
        learn runs on every round's committed tokens, and text repeats its tokens."""
        if (spelling := self._spellings.get(t)) is None:
            if len(self._spellings) >= MAX_SPELLINGS:
                self._spellings.clear()
            try:
                spelling = self.draft.encode_bytes(self.target.token_bytes[t])
            except ValueError:
                spelling = []
            self._spellings[t] = spelling
        return spelling
