"""Lookup proposals: continuations of the current text found in the text itself and in
the user's history, in the target's own vocabulary, for the price of an index query.

Where the last tokens of the sequence occurred before (in the prompt and output so
far, or in earlier prompts and outputs of the same profile), what followed them then
is a good guess of what follows now: code that repeats a name, CSV rows, a quoted
passage, a phrase the user writes every day. The match is the longest suffix of the
sequence found (up to MAX_MATCH tokens); among all its occurrences the continuation
is walked token by token, each step taking the most frequent next token (ties: the
most recent) and keeping only the occurrences that agree, as a suffix tree with
counts would (SuffixDecoding, arXiv 2411.04975). Each proposed token comes with
features (empirical frequency, how many occurrences agree, match length, depth,
source) that a small logistic scorer turns into P(accepted | the ones before were),
learned online from what the target actually committed.

Two sources, the current sequence first when both match equally long:
  - context: the committed sequence, searched by brute force (it is at most the
    context window, a few thousand tokens);
  - history: past documents (prompt + output) in one token array with separators,
    indexed by token bigram (sorted keys); documents added since the index was
    built are searched by brute force until there are enough to rebuild.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

SEP = -1  # between documents; never equal to a token, so no match or walk crosses it
MAX_MATCH = 32  # longest suffix compared
MAX_CANDIDATES = 2048  # the most recent occurrences of the last tokens that are compared further back
MAX_OCCURRENCES = 256  # the most recent occurrences of the longest match that are walked
REBUILD_AFTER = 65_536  # tokens added since the last index build that trigger a rebuild


@dataclass
class Candidates:
    """What lookup would propose now: tokens, each with its scorer features."""

    tokens: list[int] = field(default_factory=list)
    frequency: list[float] = field(default_factory=list)  # share of agreeing occurrences at each step
    support: list[int] = field(default_factory=list)  # occurrences walked at each step
    match: int = 0  # length of the matched suffix
    source: str = ""  # "context" or "history"

    def __len__(self) -> int:
        return len(self.tokens)


def _extend(tokens: np.ndarray, ends: np.ndarray, suffix: np.ndarray, length: int) -> tuple[np.ndarray, int]:
    """Keep the occurrences (last matched token at `ends`) that match the longest suffix."""
    limit = min(MAX_MATCH, len(suffix))
    while length < limit and len(ends):
        at = ends - length
        ok = at >= 0
        ok[ok] = tokens[at[ok]] == suffix[-1 - length]
        if not ok.any():
            break
        ends = ends[ok]
        length += 1
    return ends[-MAX_OCCURRENCES:], length


def match_in(tokens: np.ndarray, suffix: np.ndarray) -> tuple[np.ndarray, int]:
    """Brute force: occurrences in `tokens` of the longest suffix of `suffix` with a token after them."""
    ends = np.flatnonzero((tokens[:-1] == suffix[-1]) & (tokens[1:] != SEP))
    if not len(ends):
        return ends, 0
    return _extend(tokens, ends[-MAX_CANDIDATES:], suffix, 1)


def walk(tokens: np.ndarray, ends: np.ndarray, budget: int, out: Candidates) -> Candidates:
    """Follow the occurrences forward, most frequent next token first, for up to `budget` tokens."""
    n = len(tokens)
    while len(out) < budget and len(ends):
        if len(ends) == 1:  # one occurrence: its continuation, up to a separator
            e = int(ends[0])
            rest = tokens[e + 1 : e + 1 + budget - len(out)]
            cut = np.flatnonzero(rest == SEP)
            rest = rest[: cut[0]] if len(cut) else rest
            out.tokens += rest.tolist()
            out.frequency += [1.0] * len(rest)
            out.support += [1] * len(rest)
            break
        ends = ends[ends + 1 < n] + 1
        nxt = tokens[ends]
        keep = nxt != SEP
        ends, nxt = ends[keep], nxt[keep]
        if not len(ends):
            break
        values, inverse, counts = np.unique(nxt, return_inverse=True, return_counts=True)
        best = np.flatnonzero(counts == counts.max())
        if len(best) > 1:  # a tie: what followed most recently
            best = [int(inverse[np.flatnonzero(np.isin(inverse, best))[-1]])]
        choice = int(best[0])
        out.tokens.append(int(values[choice]))
        out.frequency.append(float(counts[choice]) / len(nxt))
        out.support.append(len(nxt))
        ends = ends[inverse == choice]
    return out


@dataclass
class Doc:
    """One past text (a prompt and its output, or a whole chat), with an id to merge copies by."""

    tokens: np.ndarray
    id: int
    created: float


class HistoryIndex:
    """Past documents, bounded to `max_tokens` (oldest dropped first), joined into one token array.

    Positions before `_indexed_len` are in the bigram index; documents added since its last
    build are searched by brute force until they pass REBUILD_AFTER tokens. Either way a
    query sees exactly what a brute-force search of the whole array would.
    """

    def __init__(self, max_tokens: int = 1_000_000):
        if max_tokens < 0:
            raise ValueError("history size must be >= 0")
        self.max_tokens = max_tokens
        self.docs: list[Doc] = []
        self._tokens = np.zeros(0, dtype=np.int32)  # every document, each followed by SEP
        self._indexed_len = 0
        self._keys = np.zeros(0, dtype=np.int64)
        self._ends = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return sum(len(d.tokens) for d in self.docs)

    def add(self, tokens, extend_last: bool = False) -> Doc | None:
        """A new document, or (extend_last) more tokens of the newest one (a chat's next turn)."""
        tokens = np.asarray(tokens, dtype=np.int32)
        if extend_last and self.docs:
            last = self.docs.pop()
            doc = Doc(np.concatenate([last.tokens, tokens]), last.id, last.created)
            start = len(self._tokens) - len(last.tokens) - 1
            self._tokens = self._tokens[:start]  # the newest document is the end of the array
            if start < self._indexed_len:  # the index holds the old version
                self._build()
        else:
            doc = Doc(tokens, int(np.random.default_rng().integers(1, 2**62)), time.time())
        if len(doc.tokens) < 2:
            return None
        self.docs.append(doc)
        if len(self) > self.max_tokens:
            self._trim()
            self._rejoin()
        else:
            self._append(doc.tokens)
        return doc

    def replace(self, docs: list[Doc]) -> None:
        self.docs = [d for d in docs if len(d.tokens) >= 2]
        self._trim()
        self._rejoin()

    def _trim(self) -> None:
        total = len(self)
        drop = 0
        while total > self.max_tokens and drop < len(self.docs):
            total -= len(self.docs[drop].tokens)
            drop += 1
        del self.docs[:drop]

    def _append(self, tokens: np.ndarray) -> None:
        self._tokens = np.concatenate([self._tokens, tokens, np.array([SEP], dtype=np.int32)])
        if len(self._tokens) - self._indexed_len > REBUILD_AFTER:
            self._build()

    def _rejoin(self) -> None:
        self._tokens = _joined([d.tokens for d in self.docs])
        self._build()

    def _build(self) -> None:
        """The bigram index: key (t[i-1], t[i]) for every position i that ends two tokens and has one after it."""
        t = self._tokens.astype(np.int64)
        if len(t) >= 3:
            keys = (t[:-2] << 32) | (t[1:-1] & 0xFFFFFFFF)
            ok = (t[:-2] != SEP) & (t[1:-1] != SEP) & (t[2:] != SEP)
            ends = np.flatnonzero(ok) + 1
            order = np.argsort(keys[ok], kind="stable")  # equal keys keep position order (recent last)
            self._keys, self._ends = keys[ok][order], ends[order]
        else:
            self._keys = self._ends = np.zeros(0, dtype=np.int64)
        self._indexed_len = len(t)

    def match(self, suffix: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(tokens, ends, length): every occurrence of the longest suffix (>= 2 tokens) with a token after it."""
        t = self._tokens
        if len(suffix) < 2 or len(t) < 3:
            return t, np.zeros(0, dtype=np.int64), 0
        parts = []
        if len(self._keys):
            key = (int(suffix[-2]) << 32) | (int(suffix[-1]) & 0xFFFFFFFF)
            lo, hi = np.searchsorted(self._keys, [key, key + 1])
            parts.append(self._ends[lo:hi])
        tail = t[max(self._indexed_len - 1, 0) :]
        if len(tail) >= 3:
            hit = (tail[1:-1] == suffix[-1]) & (tail[:-2] == suffix[-2]) & (tail[2:] != SEP)
            parts.append(np.flatnonzero(hit) + 1 + max(self._indexed_len - 1, 0))
        ends = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if not len(ends):
            return t, ends, 0
        ends, length = _extend(t, ends[-MAX_CANDIDATES:], suffix, 2)
        return t, ends, length


def _joined(docs: list[np.ndarray]) -> np.ndarray:
    if not docs:
        return np.zeros(0, dtype=np.int32)
    parts = []
    for d in docs:
        parts += [d, np.array([SEP], dtype=np.int32)]
    return np.concatenate(parts)


def find_candidates(seq, history: HistoryIndex | None, budget: int) -> Candidates:
    """The longest match of seq's suffix in seq itself or in the history, walked for `budget` tokens."""
    if budget < 1 or len(seq) < 2:
        return Candidates()
    suffix = np.asarray(seq[-MAX_MATCH:], dtype=np.int32)
    context = np.asarray(seq, dtype=np.int32)
    ends, length = match_in(context, suffix)
    source, tokens = "context", context
    if history is not None:
        h_tokens, h_ends, h_length = history.match(suffix)
        if h_length > length:
            source, tokens, ends, length = "history", h_tokens, h_ends, h_length
    if not length:
        return Candidates()
    return walk(tokens, ends, budget, Candidates(match=length, source=source))
