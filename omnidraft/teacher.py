"""The target as teacher: `make-drafter --teacher target` learns what the target would say.

A drafter distilled from a bigger model of its own family learns that model, not
the target it serves. Here the target itself writes the teacher signal, through
the vocabulary bridge, exactly as online adaptation sees it (adaptation/examples.py):
every target token of a window is spelled in draft tokens; a directly mapped
token keeps the target's distribution over the mapped tokens (a KL unit), a token
the drafter spells with several pieces keeps its pieces (an NLL unit).

Windows come from the corpora's adapt split. In a share of the windows
(`generated`) the target writes the last `continuation` tokens itself, greedily
or sampled (alternating by shard), so the drafter also learns the target's own
phrasing; the rest is corpus text scored by the target. A text too short to teach
alone (most chat lines: a median of 8 target tokens) is a prompt: the target writes
`continuation` tokens after all of it, as it answers a short prompt at decoding time.
Generation is batched; one forward pass over each finished window gives every teacher row.

Only the top-k teacher log-probabilities (over the mapped tokens) are kept, with
the rest as one tail bucket; the loss is then KL over k + 1 events, exact for
them (see `sparse_kl`). Records are cached in shards next to the output, so a
rerun or a resumed run never calls the target again for windows it has.
"""

from __future__ import annotations

import io
import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import corpora
from .adaptation.examples import ExampleBuilder, Mapping
from .atomic import write_bytes_atomic
from .errors import OmniDraftError
from .progress import log
from .state import set_aside

SHARD_WINDOWS = 64  # windows per cache file
GENERATION_BATCH = 32  # prompts the target continues at once (a step costs far less per row in a batch)
MIN_TOKENS = 16  # shorter texts teach too little alone: the target continues them
CACHE_VERSION = 2  # 2: short texts continued (1 dropped them); part of a cache's identity


@dataclass
class TeacherConfig:
    window: int = 128  # target tokens per window
    batch: int = 8  # windows per target call
    generated: float = 0.25  # share of windows whose last `continuation` tokens the target writes
    continuation: int = 64
    top_k: int = 32
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.continuation < self.window or self.top_k < 1 or not 0 <= self.generated <= 1:
            raise OmniDraftError(f"teacher settings out of range: continuation {self.continuation} must be below the "
                                 f"window {self.window}, top-k at least 1, generated in [0, 1]")

    @classmethod
    def for_window(cls, window: int, **fields) -> "TeacherConfig":
        """Continuations of half the window, at most 64 tokens."""
        return cls(window=window, continuation=max(1, min(64, window // 2)), **fields)


@dataclass
class Record:
    """One window in draft tokens with its teacher signal."""

    ids: np.ndarray  # [L] draft tokens
    kl_pos: np.ndarray  # [n] logits at kl_pos[i] predict a directly mapped token...
    top_idx: np.ndarray  # [n, k] ...whose teacher's k likeliest mapped tokens (indices into Mapping)
    top_logp: np.ndarray  # [n, k] have these log-probabilities over the mapped tokens (fp16)
    nll_pos: np.ndarray  # logits at nll_pos[i] predict ids[nll_pos[i] + 1], a piece of an n-gram token

    def __len__(self) -> int:
        return len(self.ids)


def sparse_record(example, top_k: int) -> Record:
    """Keep the teacher's top-k over the mapped tokens (log-probabilities renormalised over all of them)."""
    logp = F.log_softmax(torch.from_numpy(example.kl_target.astype(np.float32)), dim=-1)
    k = min(top_k, logp.shape[-1])
    top = logp.topk(k, dim=-1)
    return Record(example.ids.astype(np.int32), example.kl_pos.astype(np.int32), top.indices.numpy().astype(np.int32),
                  top.values.numpy().astype(np.float16), example.nll_pos.astype(np.int32))


def sparse_kl(log_q: torch.Tensor, top_idx: torch.Tensor, top_logp: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) over the teacher's top-k tokens and one bucket for all the others, per row.

    log_q: [N, |M|] the student's log-probabilities over the mapped tokens. With k = |M|
    the bucket is empty and this is the full KL over the mapped tokens.
    """
    lq = log_q.gather(-1, top_idx)
    lp = top_logp.float()
    p = lp.exp()
    head = (p * (lp - lq)).sum(-1)
    p_tail = (1 - p.sum(-1)).clamp(min=0)
    q_tail = (1 - lq.exp().sum(-1)).clamp(min=1e-12)
    return head + torch.xlogy(p_tail, p_tail) - p_tail * q_tail.log()


class TeacherCache:
    """Teacher records in shards of SHARD_WINDOWS windows under `root` (meta.json says how they were made)."""

    def __init__(self, root: Path, identity: dict):
        self.root = root
        self.identity = identity

    def check(self, restart: bool) -> None:
        meta = self.root / "meta.json"
        if restart and self.root.exists():
            for f in self.root.glob("shard-*.npz"):
                f.unlink()
        if meta.exists():
            try:
                same = json.loads(meta.read_text()) == self.identity
            except ValueError:
                set_aside(self.root, "damaged", f"teacher cache {self.root} has a damaged meta.json; starting it again",
                          log)
                return self.check(restart)
            if not same:
                raise OmniDraftError(f"teacher cache {self.root} was made with other settings; pass --restart to discard it")
        else:
            write_bytes_atomic(meta, json.dumps(self.identity, indent=1).encode())

    def path(self, i: int) -> Path:
        return self.root / f"shard-{i:05d}.npz"

    def load(self, i: int) -> list[Record] | None:
        """The shard's records, None when missing; a damaged shard is set aside (and made again)."""
        path = self.path(i)
        if not path.exists():
            return None
        try:
            with np.load(path) as z:
                return _unpack(z)
        except Exception as e:  # noqa: BLE001 - any unreadable shard is damaged
            set_aside(path, "damaged", f"teacher cache shard {path.name} is damaged ({str(e).splitlines()[0]}); "
                      "making it again", log)
            return None

    def save(self, i: int, records: list[Record]) -> None:
        buf = io.BytesIO()
        np.savez(buf, **_pack(records))
        write_bytes_atomic(self.path(i), buf.getvalue())


def _pack(records: list[Record]) -> dict:
    out = {}
    for name in ("ids", "kl_pos", "top_idx", "top_logp", "nll_pos"):
        parts = [getattr(r, name) for r in records]
        out[name] = np.concatenate(parts)
        out[name + "_len"] = np.array([len(p) for p in parts], dtype=np.int64)
    return out


def _unpack(z) -> list[Record]:
    fields = {}
    for name in ("ids", "kl_pos", "top_idx", "top_logp", "nll_pos"):
        cuts = np.cumsum(z[name + "_len"])[:-1]
        fields[name] = np.split(z[name], cuts)
    n = len(fields["ids"])
    return [Record(*(fields[k][i] for k in ("ids", "kl_pos", "top_idx", "top_logp", "nll_pos"))) for i in range(n)]


class TargetTeacher:
    """Makes teacher records from the target: tokenise, let it write continuations, score, spell in draft tokens."""

    def __init__(self, target, target_tokenizer, bridge, config: TeacherConfig):
        self.target = target
        self.tokenizer = target_tokenizer
        self.bridge = bridge
        self.mapping = Mapping.from_bridge(bridge)
        self.mapped_targets = torch.from_numpy(self.mapping.target_ids)
        self.config = config

    def records(self, texts: list[str], shard: int) -> list[Record]:
        """Records for one shard of texts: the target continues a `generated` share of them and every
        text shorter than MIN_TOKENS (greedy in even shards, sampled in odd ones, seeded by the shard),
        then scores every window."""
        c = self.config
        seqs = [s for s in (self._tokens(t) for t in texts) if len(s) > 1]
        prompt_len = c.window - c.continuation
        long = [i for i, s in enumerate(seqs) if len(s) >= prompt_len]
        sampled = shard % 2 == 1
        torch.manual_seed(c.seed * 1_000_003 + shard)
        chosen = long[: round(c.generated * len(texts))]
        short = [i for i, s in enumerate(seqs) if len(s) < min(MIN_TOKENS, prompt_len)]  # the window still fits
        self._continue(seqs, chosen, prompt_len, sampled)
        self._continue(seqs, short, prompt_len, sampled)
        records: list[Record] = []
        for lo in range(0, len(seqs), c.batch):
            records += self._score(seqs[lo : lo + c.batch])
        return records

    def _continue(self, seqs: list[list[int]], rows: list[int], prompt_len: int, sampled: bool) -> None:
        """The target writes `continuation` tokens after the first prompt_len tokens of each of seqs[rows]
        (prompts of different lengths padded on the left, as batched generation wants them)."""
        pad = self.tokenizer.pad_token_id or 0
        for lo in range(0, len(rows), GENERATION_BATCH):
            batch = rows[lo : lo + GENERATION_BATCH]
            prompts = [seqs[i][:prompt_len] for i in batch]
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
            with torch.no_grad():
                out = self.target.generate(input_ids=ids, attention_mask=mask,
                                           max_new_tokens=self.config.continuation, do_sample=sampled)
            for i, prompt, row in zip(batch, prompts, out):
                seqs[i] = prompt + row[width:].tolist()  # EOS and what follows are cut by the example builder

    def _tokens(self, text: str) -> list[int]:
        """The window as the target reads a prompt (with its BOS, if it adds one: Gemma without it is
        another model)."""
        return self.tokenizer.encode(text)[: self.config.window]

    def _score(self, seqs: list[list[int]]) -> list[Record]:
        length = max(len(s) for s in seqs)
        ids = torch.zeros(len(seqs), length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s)
            mask[b, : len(s)] = 1
        with torch.no_grad():
            logits = self._mapped_logits(ids, mask).numpy()
        records = []
        for b, s in enumerate(seqs):
            example = self._example(s, logits[b, : len(s)])
            if example is not None:
                records.append(sparse_record(example, self.config.top_k))
        return records

    def _mapped_logits(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The target's logits over the mapped tokens only (the loss renormalises over them; Gemma's
        output head over all 262k tokens would cost more than the rest of the model)."""
        hidden = self.target.model(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = F.linear(hidden, self.target.get_output_embeddings().weight[self.mapped_targets])
        cap = getattr(self.target.config, "final_logit_softcapping", None)
        return torch.tanh(logits / cap) * cap if cap else logits

    def _example(self, seq: list[int], logits: np.ndarray):
        """Spell the window in draft tokens: its first spellable token is the prompt, the rest are units."""
        draft, target = self.bridge.draft, self.bridge.target
        for start, t in enumerate(seq[:-1]):
            spelling = draft.encode_bytes(target.token_bytes[t], lenient=True) if not target.special[t] else []
            if spelling:
                builder = ExampleBuilder(self.bridge, self.mapping, spelling)
                builder.add(seq[start + 1 :], logits[start:-1], over_mapping=True)
                return builder.build()
        return None


def teacher_texts(domains, n: int, seed: int) -> list[str]:
    """n texts from the adapt split, the domains taking turns; a domain whose pool runs out (chat holds
    about 600 distinct lines there) leaves its turns to the others. The texts for n are the first n of
    those for any larger n, so a cache made for a shorter run serves a longer one."""
    per_domain = [corpora.prompts(d, n, seed=seed, split="adapt", max_chars=2400) for d in domains]
    texts = [t for turn in itertools.zip_longest(*per_domain) for t in turn if t is not None]
    if len(texts) < n:
        raise OmniDraftError(f"the corpora hold {len(texts)} texts, fewer than the {n} windows asked for")
    return texts[:n]


def build_records(teacher: TargetTeacher, cache: TeacherCache, texts: list[str], rank: int = 0,
                  world: int = 1) -> None:
    """Fill the cache for `texts` (this process makes shards rank, rank + world, ...), with progress."""
    c = teacher.config
    shards = (len(texts) + SHARD_WINDOWS - 1) // SHARD_WINDOWS
    mine = [i for i in range(shards) if i % world == rank and cache.load(i) is None]
    if not mine:
        return
    log(f"[omnidraft] teacher: the target scores {len(mine)} shard(s) of {SHARD_WINDOWS} windows "
        f"({c.generated:.0%} continued by the target), cache {cache.root}")
    started, done_tokens = time.perf_counter(), 0
    for n, i in enumerate(mine):
        records = teacher.records(texts[i * SHARD_WINDOWS : (i + 1) * SHARD_WINDOWS], i)
        cache.save(i, records)
        done_tokens += sum(len(r) for r in records)
        rate = done_tokens / (time.perf_counter() - started)
        eta = (len(mine) - n - 1) * (time.perf_counter() - started) / (n + 1)
        log(f"[omnidraft] teacher: shard {n + 1}/{len(mine)} ({rate:.0f} draft tokens/s, eta {eta / 60:.1f} min)")


def load_records(cache: TeacherCache, n_windows: int) -> list[Record]:
    shards = (n_windows + SHARD_WINDOWS - 1) // SHARD_WINDOWS
    records: list[Record] = []
    for i in range(shards):
        part = cache.load(i)
        if part is None:
            raise OmniDraftError(f"teacher cache shard {cache.path(i)} is missing; run make-drafter again to make it")
        records += part
    return records


def identity(target_path: Path, drafter_path: Path, config: TeacherConfig, domains) -> dict:
    return {"version": CACHE_VERSION, "target": str(target_path), "drafter_tokenizer": str(drafter_path),
            "domains": list(domains), "config": asdict(config)}
