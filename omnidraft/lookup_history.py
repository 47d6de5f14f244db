"""The lookup history on disk: a profile's past prompts and outputs for one target, and its scorer.

One file per (target, profile) (`state.history_path`),
holding every document's target token ids (one int32 array and the documents' lengths,
ids and creation times), the target tokenizer's fingerprint, and the lookup scorer's
weights. It stays on this machine; `--reset-adaptation` sets it aside with the rest of
the profile's learned state, `--no-history` keeps a run from reading or writing it.

Saving is a merge under a lock: documents already on disk (another process may have
added some) are united with this process's by id (a chat document that grew keeps its
longest version), the oldest are dropped beyond the size limit, and the file is
replaced atomically. A damaged, foreign or mismatched file is set aside with a warning
and a fresh history starts.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from .atomic import write_bytes_atomic
from .runtime.lookup import Doc, HistoryIndex
from .runtime.lookup_proposer import N_FEATURES, LookupProposer, LookupScorer
from .state import locked, set_aside
from .store import StateFile, StateFileError

FORMAT = "omnidraft-lookup-history"
VERSION = 1


class HistoryFileError(StateFileError):
    """Unreadable, damaged, or made for another target tokenizer."""


def read_history(path: Path, fingerprint: str, vocab_size: int) -> tuple[list[Doc], LookupScorer]:
    """Every field checked: types, shapes, ranges, token ids within the target's vocabulary."""
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except Exception as e:  # noqa: BLE001 - zip, npy or OS errors: all mean an unreadable file
        raise HistoryFileError(f"unreadable ({type(e).__name__})") from None
    want = {"format", "version", "fingerprint", "tokens", "lengths", "ids", "created", "weights", "judged"}
    if set(data) != want:
        raise HistoryFileError("not a lookup history file")
    if str(data["format"]) != FORMAT or data["version"].shape != () or int(data["version"]) != VERSION:
        raise HistoryFileError(f"not a lookup history of format version {VERSION}")
    if str(data["fingerprint"]) != fingerprint:
        raise HistoryFileError("made for another target tokenizer")
    tokens, lengths, ids, created = data["tokens"], data["lengths"], data["ids"], data["created"]
    if tokens.dtype != np.int32 or tokens.ndim != 1:
        raise HistoryFileError("damaged (tokens)")
    n = len(lengths)
    if lengths.dtype != np.int64 or lengths.shape != (n,) or ids.shape != (n,) or created.shape != (n,) \
            or ids.dtype != np.int64 or created.dtype != np.float64:
        raise HistoryFileError("damaged (document table)")
    if (lengths < 2).any() or int(lengths.sum()) != len(tokens) or len(set(ids.tolist())) != n or (ids <= 0).any() \
            or not np.isfinite(created).all():
        raise HistoryFileError("damaged (document table)")
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise HistoryFileError(f"damaged (token ids outside the target's vocabulary of {vocab_size})")
    weights, judged = data["weights"], data["judged"]
    if weights.shape != (N_FEATURES,) or weights.dtype != np.float64 or not np.isfinite(weights).all() \
            or judged.shape != () or judged.dtype != np.int64 or int(judged) < 0:
        raise HistoryFileError("damaged (scorer)")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    docs = [Doc(tokens[s : s + k].copy(), int(i), float(c)) for s, k, i, c in zip(starts, lengths, ids, created)]
    scorer = LookupScorer(weights)
    scorer.judged = int(judged)
    return docs, scorer


def write_history(path: Path, docs: list[Doc], scorer: LookupScorer, fingerprint: str) -> None:
    buf = io.BytesIO()
    tokens = np.concatenate([d.tokens for d in docs]).astype(np.int32) if docs else np.zeros(0, np.int32)
    np.savez(buf, format=np.array(FORMAT), version=np.array(VERSION), fingerprint=np.array(fingerprint),
             tokens=tokens, lengths=np.array([len(d.tokens) for d in docs], dtype=np.int64),
             ids=np.array([d.id for d in docs], dtype=np.int64),
             created=np.array([d.created for d in docs], dtype=np.float64),
             weights=scorer.weights.astype(np.float64), judged=np.array(scorer.judged, dtype=np.int64))
    write_bytes_atomic(path, buf.getvalue())


def open_lookup(path: Path | None, fingerprint: str, vocab_size: int, max_tokens: int, warn,
                reset: bool = False) -> LookupProposer:
    """The profile's lookup proposer, its history read from `path` (None: context only, nothing saved)."""
    history = HistoryIndex(max_tokens)
    read = StateFile("lookup history", path, "starting a fresh history").open(
        lambda p: read_history(p, fingerprint, vocab_size), lambda: None, warn, reset)
    if read is None:
        return LookupProposer(history)
    docs, scorer = read
    total = sum(len(d.tokens) for d in docs)
    if total > max_tokens:
        warn(f"[omnidraft] warning: the lookup history holds {total} tokens, more than the limit of {max_tokens}: "
             "the oldest documents are dropped")
    history.replace(docs)
    return LookupProposer(history, scorer)


def save_lookup(path: Path, lookup: LookupProposer, fingerprint: str, vocab_size: int, warn) -> None:
    """Merge this process's history with the file's (under a lock) and replace the file atomically."""
    with locked(path):
        disk: list[Doc] = []
        if path.exists():
            try:
                disk, _ = read_history(path, fingerprint, vocab_size)
            except HistoryFileError as e:
                set_aside(path, "bad", f"lookup history {path.name} is {e}; writing this session's history", warn)
        merged = {d.id: d for d in disk}
        for d in lookup.history.docs:
            if d.id not in merged or len(d.tokens) >= len(merged[d.id].tokens):
                merged[d.id] = d
        lookup.history.replace(sorted(merged.values(), key=lambda d: (d.created, d.id)))
        write_history(path, lookup.history.docs, lookup.scorer, fingerprint)
