"""The n-gram cache: which runs of draft tokens spell one target token.

A target token such as "▁flake" may have no single draft-token twin, but the
drafter spells it as "Ġfl" + "ake". Every verified round teaches the cache such
spellings; at proposal time a run of draft tokens found here is merged into the
one target token it spells. The cache is bounded (least-frequently-used entries
are evicted), belongs to one (drafter, target) pair, and is saved atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_bytes_atomic
from ..state import locked
from ..store import StateFile, StateFileError

FORMAT = "omnidraft-ngram-cache"
VERSION = 1


class CacheFileError(StateFileError):
    """The cache file is unreadable, corrupt or belongs to another pair."""


@dataclass
class CacheStats:
    lookups: int = 0  # proposal positions scanned
    hits: int = 0  # draft runs merged into a target token
    accepted_hits: int = 0  # merged tokens the target accepted
    inserts: int = 0
    evictions: int = 0


class NGramCache:
    def __init__(self, pair_id: str, max_entries: int = 20_000, max_ngram: int = 8):
        if max_entries < 1 or max_ngram < 2:
            raise ValueError("max_entries >= 1 and max_ngram >= 2 required")
        self.pair_id = pair_id
        self.max_entries = max_entries
        self.max_ngram = max_ngram
        self._target: dict[tuple[int, ...], int] = {}  # draft n-gram -> target id
        self._count: dict[tuple[int, ...], int] = {}  # use frequency, for LFU eviction
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._target)

    def items(self):
        return ((k, self._target[k], self._count[k]) for k in self._target)

    def lookup(self, draft_ids, start: int) -> tuple[int, int] | None:
        """Longest cached run starting at draft_ids[start]: (target id, run length)."""
        self.stats.lookups += 1
        longest = min(self.max_ngram, len(draft_ids) - start)
        for n in range(longest, 1, -1):
            key = tuple(draft_ids[start : start + n])
            target = self._target.get(key)
            if target is not None:
                self.stats.hits += 1
                return target, n
        return None

    def record_accepted(self, draft_ngram) -> None:
        key = tuple(draft_ngram)
        if key in self._count:
            self._count[key] += 1
            self.stats.accepted_hits += 1

    def add(self, target_id: int, draft_ngram) -> None:
        """Learn (or reinforce) that `draft_ngram` spells `target_id`."""
        key = tuple(int(d) for d in draft_ngram)
        if not 2 <= len(key) <= self.max_ngram:
            return
        if key in self._target:
            self._count[key] += 1
            self._target[key] = int(target_id)
            return
        self._target[key] = int(target_id)
        self._count[key] = 1
        self.stats.inserts += 1
        if len(self._target) > self.max_entries:
            self._evict()

    def _evict(self) -> None:
        """Drop the least used tenth (at least one entry); ties go to the oldest."""
        n_drop = max(1, len(self._target) - self.max_entries + self.max_entries // 10)
        order = sorted(self._count, key=self._count.__getitem__)  # stable: oldest first
        for key in order[:n_drop]:
            del self._target[key]
            del self._count[key]
        self.stats.evictions += n_drop

    # -- persistence -------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "pair_id": self.pair_id,
            "max_entries": self.max_entries,
            "max_ngram": self.max_ngram,
            "entries": [[list(k), t, c] for k, t, c in self.items()],
        }

    def save(self, path: str | os.PathLike, vocab_sizes: tuple[int, int] | None = None) -> None:
        """Merge with what another process may have saved meanwhile (under a lock), then write atomically.

        Merge: the union of both caches' entries; an entry in both keeps the larger count (both
        started from the same file, so adding counts would count the shared part twice).
        """
        with locked(Path(path)):
            try:
                disk = NGramCache.load(path, self.pair_id, self.max_entries, vocab_sizes)
            except (CacheFileError, FileNotFoundError):
                disk = None
            if disk is not None:
                for key, target, count in disk.items():
                    if key not in self._target:
                        self._target[key], self._count[key] = target, count
                    else:
                        self._count[key] = max(self._count[key], count)
                if len(self._target) > self.max_entries:
                    self._evict()
            write_bytes_atomic(path, json.dumps(self.to_json(), separators=(",", ":")).encode())

    @classmethod
    def load(cls, path: str | os.PathLike, pair_id: str, max_entries: int | None = None,
             vocab_sizes: tuple[int, int] | None = None) -> "NGramCache":
        """Every field checked: types, ranges, ids within the (draft, target) vocabularies when given."""
        try:
            data = json.loads(Path(path).read_bytes())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as e:
            raise CacheFileError(f"unreadable ({type(e).__name__})") from e
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
            raise CacheFileError(f"not an n-gram cache of format version {VERSION}")
        if data.get("pair_id") != pair_id:
            raise CacheFileError(f"belongs to another model pair ({data.get('pair_id')}, expected {pair_id})")
        size, longest, entries = data.get("max_entries"), data.get("max_ngram"), data.get("entries")
        if not _is_int(size, 1) or not _is_int(longest, 2) or not isinstance(entries, list):
            raise CacheFileError("malformed header")
        n_draft, n_target = vocab_sizes or (None, None)
        cache = cls(pair_id, max_entries or size, longest)
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], list)):
                raise CacheFileError("malformed entry")
            draft, target, count = entry
            if not 2 <= len(draft) <= longest or not all(_is_int(d, 0, n_draft) for d in draft) \
                    or not _is_int(target, 0, n_target) or not _is_int(count, 1):
                raise CacheFileError("malformed entry (ids out of range or a bad count)")
            cache._target[tuple(draft)] = target
            cache._count[tuple(draft)] = count
        if len(cache) > cache.max_entries:
            cache._evict()
        return cache


def _is_int(value, low: int, high: int | None = None) -> bool:
    """An exact JSON integer in [low, high) (not a float, not a bool, not astronomically large)."""
    return (isinstance(value, int) and not isinstance(value, bool) and low <= value < (high or 2**53))


def load_or_fresh(path: Path, pair_id: str, max_entries: int, warn,
                  vocab_sizes: tuple[int, int] | None = None) -> NGramCache:
    """Load the pair's cache; a corrupt, foreign or out-of-range file is set aside, never fatal (store.py)."""
    return StateFile("n-gram cache", path, "starting a fresh cache").open(
        lambda p: NGramCache.load(p, pair_id, max_entries, vocab_sizes), lambda: NGramCache(pair_id, max_entries), warn)
