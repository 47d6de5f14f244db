"""The adapter's state file: what a process saves after an update and another resumes from.

One torch file (read back with weights_only=True): format and version, the pair and LoRA
configuration it belongs to (`meta`), the learner's tensors and optimizer state, the counters,
and the pending examples (the newest the next update replays, and the held-out ones). Every
field is checked on read; anything else is an AdapterFileError (the store sets the file aside).
"""

from __future__ import annotations

import io
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_bytes_atomic
from ..store import StateFileError
from .examples import Example

FORMAT = "omnidraft-adapter"
VERSION = 1


class AdapterFileError(StateFileError):
    """The adapter file is unreadable, corrupt or belongs to another drafter/pair/config."""


@dataclass
class AdaptStats:
    examples: int = 0
    updates: int = 0
    rollbacks: int = 0
    steps: int = 0
    update_seconds: float = 0.0  # total (a list per update would grow the saved file forever)
    last_loss: float | None = None
    last_l_dm: float | None = None
    last_l_ngram: float | None = None
    holdout_before: float | None = None
    holdout_after: float | None = None


@dataclass
class AdapterSnapshot:
    """Everything an adapter file holds."""

    meta: dict
    state: dict  # the learner's tensors and optimizer state (learner.state())
    stats: AdaptStats = field(default_factory=AdaptStats)
    since_update: int = 0
    buffer: list[Example] = field(default_factory=list)
    heldout: list[Example] = field(default_factory=list)

    def write(self, path: Path) -> tuple:
        """Write atomically; the stamp of the file written."""
        payload = {"format": FORMAT, "version": VERSION, "meta": self.meta, "state": self.state,
                   "stats": asdict(self.stats), "since_update": self.since_update,
                   "buffer": [_record(e) for e in self.buffer], "heldout": [_record(e) for e in self.heldout]}
        buf = io.BytesIO()
        torch.save(payload, buf)
        write_bytes_atomic(path, buf.getvalue())
        return stamp(path.stat())

    @classmethod
    def read(cls, path: Path, meta: dict, n_mapped: int) -> tuple["AdapterSnapshot", tuple]:
        """(snapshot, the stamp of the very file read); AdapterFileError unless it is ours and whole
        (the learner state's tensors are checked by the learner when it loads them)."""
        try:
            with open(path, "rb") as f:  # another process may replace the file meanwhile
                mark = stamp(os.fstat(f.fileno()))
                payload = torch.load(f, map_location="cpu", weights_only=True)
            if not isinstance(payload, dict) or payload.get("format") != FORMAT:
                raise AdapterFileError("not an OmniDraft adapter file")
            if payload.get("version") != VERSION:
                raise AdapterFileError(f"adapter format version {payload.get('version')}, expected {VERSION}")
            if payload["meta"] != meta:
                raise AdapterFileError("made for another drafter, target or LoRA configuration")
            stats = payload["stats"]
            if isinstance(stats.get("update_seconds"), list):  # files written before it was a total
                stats["update_seconds"] = sum(stats["update_seconds"])
            stats = AdaptStats(**stats)
            since = int(payload.get("since_update", 0))
            if not all(isinstance(getattr(stats, k), int) and getattr(stats, k) >= 0
                       for k in ("examples", "updates", "rollbacks", "steps")) or not 0 <= since < 10**6:
                raise AdapterFileError("damaged (counters)")
            buffer = [_example(r, n_mapped) for r in payload.get("buffer", [])]
            heldout = [_example(r, n_mapped) for r in payload.get("heldout", [])]
            return cls(meta, payload["state"], stats, since, buffer, heldout), mark
        except AdapterFileError:
            raise
        except Exception as e:  # noqa: BLE001 - torch.load raises many kinds on a damaged file
            raise AdapterFileError(f"unreadable ({type(e).__name__})") from e


def stamp(st: os.stat_result) -> tuple:
    """Which saved version of the file this is (every save is a new file renamed into place)."""
    return st.st_ino, st.st_size, st.st_mtime_ns


def _record(e: Example) -> dict:
    """An example as tensors (what torch.load(weights_only=True) reads back)."""
    return {"ids": torch.from_numpy(np.asarray(e.ids, dtype=np.int64)),
            "kl_pos": torch.from_numpy(np.asarray(e.kl_pos, dtype=np.int64)),
            "kl_target": torch.from_numpy(np.asarray(e.kl_target, dtype=np.float16)),
            "nll_pos": torch.from_numpy(np.asarray(e.nll_pos, dtype=np.int64)),
            "units": torch.tensor(e.units, dtype=torch.int64).reshape(-1, 2)}


def _example(r: dict, n_mapped: int) -> Example:
    """An example read back, every field checked (positions inside the example, rows of the mapped width)."""
    ids, kl_pos, kl_target, nll_pos, units = (r[k].numpy() for k in ("ids", "kl_pos", "kl_target", "nll_pos",
                                                                        "units"))
    n = len(ids)
    ok = (ids.ndim == 1 and kl_pos.ndim == 1 and nll_pos.ndim == 1 and kl_target.ndim == 2
          and kl_target.shape == (len(kl_pos), n_mapped) and units.ndim == 2 and units.shape[1] == 2
          and all(((x >= 0) & (x < n)).all() for x in (kl_pos, nll_pos, units)) and (ids >= 0).all())
    if not ok:
        raise AdapterFileError("damaged (a pending example)")
    return Example(ids, kl_pos, kl_target, nll_pos, [tuple(map(int, u)) for u in units])
