"""A frequency-ranked draft head: the drafter scores only its N most frequent tokens.

A small drafter spends most of its time in the output projection: SmolLM2's
49,152 x 576 head is 28M multiply-adds per token, twice the four layers a
4-layer drafter keeps. Proposals only need to be *likely* tokens, and the
target verifies every one of them, so restricting the drafter's choices to the
tokens that make up almost all real text costs little acceptance and no
exactness (FR-Spec, Zhao et al. 2025).

The choice lives beside the checkpoint, in `omnidraft-draft-head.json` (the
folder stays a normal Hugging Face checkpoint). Every inference path that loads
the drafter (eager runner, ONNX and ExecuTorch graphs) swaps the output layer
for a `SubsetHead`: a [N, d] projection whose scores are scattered into a full
[V] row of -inf, so runners, the bridge, the sampler and the phone app keep
seeing full-vocabulary logits and never propose a token outside the set.
Training (online LoRA, the exported training graph) keeps the full projection.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import torch

from . import corpora
from .atomic import write_bytes_atomic
from .errors import OmniDraftError
from .progress import log

HEAD_FILE = "omnidraft-draft-head.json"
HEAD_VERSION = 1


class SubsetHead(torch.nn.Module):
    """logits[..., V]: the full head's scores on `token_ids`, -inf elsewhere."""

    def __init__(self, full: torch.nn.Linear, token_ids: list[int]):
        super().__init__()
        self.full = full  # kept (tied to the embedding) for training and for the record
        ids = torch.tensor(sorted(token_ids), dtype=torch.long)
        self.register_buffer("token_ids", ids, persistent=False)
        self.register_buffer("weight_subset", full.weight.detach()[ids].clone(), persistent=False)
        self.vocab_size = full.weight.shape[0]

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the kept rows again, after training changed the full projection (full fine-tuning)."""
        self.weight_subset.copy_(self.full.weight[self.token_ids])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # F.linear, not `hidden @ W.T`: XNNPACK runs a linear with constant weights as one
        # packed fully-connected op, but a matmul by a transposed constant ~17x slower.
        return self.widen(torch.nn.functional.linear(hidden, self.weight_subset))

    def widen(self, scores: torch.Tensor) -> torch.Tensor:
        """[..., N] scores of the kept tokens -> [..., V] logits, -inf outside them."""
        full = torch.full((*scores.shape[:-1], self.vocab_size), float("-inf"), dtype=scores.dtype)
        return full.scatter(-1, self.token_ids.expand(*scores.shape[:-1], -1), scores)


def full_output_head(model) -> torch.nn.Module:
    """The model's full output projection, also when a SubsetHead is installed (training)."""
    head = model.get_output_embeddings()
    return head.full if isinstance(head, SubsetHead) else head


def refresh_draft_head(model) -> None:
    head = model.get_output_embeddings()
    if isinstance(head, SubsetHead):
        head.refresh()


def read_head(drafter_dir: Path, vocab_size: int) -> list[int] | None:
    """The token ids of the folder's draft head, or None when it has none."""
    path = Path(drafter_dir) / HEAD_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        ids = [int(t) for t in data["token_ids"]]
        if data.get("version") != HEAD_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {HEAD_VERSION}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise OmniDraftError(f"{path}: not a valid draft head file ({e})") from e
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0 or max(ids) >= vocab_size:
        raise OmniDraftError(f"{path}: token ids must be distinct and within the vocabulary of {vocab_size}")
    return ids


def apply_draft_head(model, drafter_dir: Path) -> int | None:
    """Install the folder's draft head on `model` (inference); returns its size, None without one."""
    full = full_output_head(model)
    ids = read_head(drafter_dir, full.weight.shape[0])
    if ids is None:
        return None
    model.set_output_embeddings(SubsetHead(full, ids))
    return len(ids)


def rank_tokens(tokenizer, n: int, domains=corpora.DOMAINS, texts_per_domain: int = 4000,
                seed: int = 0) -> tuple[list[int], dict]:
    """The n most frequent draft tokens on the corpora's adapt split, plus coverage facts:
    the share of adapt-split tokens they cover, and per domain of the held-out eval split.

    Special tokens are left out: across vocabularies the loop never drafts them.
    """
    special = set(tokenizer.all_special_ids)

    def count(domain: str, split: str) -> Counter:
        counts: Counter = Counter()
        for text in corpora.prompts(domain, texts_per_domain, seed=seed, split=split, max_chars=2400):
            counts.update(t for t in tokenizer.encode(text, add_special_tokens=False) if t not in special)
        return counts

    counts = sum((count(d, "adapt") for d in domains), Counter())
    total = sum(counts.values())
    if not total:
        raise OmniDraftError("no corpus text to rank tokens on")
    ranked = [t for t, _ in counts.most_common(n)]
    kept = set(ranked)
    held_out = {}
    for d in domains:
        ev = count(d, "eval")
        held_out[d] = sum(c for t, c in ev.items() if t in kept) / max(1, sum(ev.values()))
    return ranked, {"tokens_counted": total, "distinct_seen": len(counts),
                    "coverage": sum(counts[t] for t in ranked) / total, "eval_coverage": held_out}


def check_size(n: int, tokenizer) -> None:
    if not 0 <= n <= len(tokenizer):
        raise OmniDraftError(f"draft head size must be between 0 (none) and the vocabulary size {len(tokenizer)}, got {n}")


def write_head(drafter_dir: Path, tokenizer, n: int, domains=corpora.DOMAINS) -> dict | None:
    """Rank the drafter's tokens on the corpora and save its top-n draft head in `drafter_dir`.

    n = 0 removes the draft head (the drafter scores its whole vocabulary again).
    """
    drafter_dir = Path(drafter_dir)
    check_size(n, tokenizer)
    if n == 0:
        (drafter_dir / HEAD_FILE).unlink(missing_ok=True)
        log(f"[omnidraft] {drafter_dir.name}: no draft head, the full vocabulary is scored")
        return None
    log(f"[omnidraft] ranking {drafter_dir.name}'s tokens on the {', '.join(domains)} corpora")
    ids, facts = rank_tokens(tokenizer, n, domains)
    record = {"version": HEAD_VERSION, "tokens": len(ids), "domains": list(domains), **facts,
              "token_ids": sorted(ids)}
    write_bytes_atomic(drafter_dir / HEAD_FILE, json.dumps(record).encode())
    held_out = ", ".join(f"{d} {x:.1%}" for d, x in facts["eval_coverage"].items())
    log(f"[omnidraft] draft head of {len(ids):,} tokens covers {facts['coverage']:.1%} of "
        f"{facts['tokens_counted']:,} corpus tokens ({facts['distinct_seen']:,} distinct seen); "
        f"held-out text: {held_out}")
    return record
