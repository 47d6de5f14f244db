"""`omnidraft make-drafter`: a small, fast drafter distilled from a larger one, or from the target.

Speculation pays only when a drafter step costs a small fraction c of a target
step. The student keeps the source model's tokenizer, embeddings and output head
(frozen: they carry the vocabulary the bridge was built for) and an evenly spaced
subset of its transformer layers. Who teaches:
  - the source model itself (default): KL(teacher || student) at every position of
    offline text (code, prose, chat; the "adapt" split, so evaluation prompts stay
    unseen);
  - the target (--teacher target, teacher.py): the target's own distribution through
    the vocabulary bridge, as online adaptation learns it (KL over the directly mapped
    tokens from cached top-k teacher rows, NLL for the pieces of tokens the drafter
    spells with several), on corpus text scored by the target and on continuations
    the target writes itself.

Runs on a CPU with progress, a fixed seed and resumable checkpoints (written
atomically every --checkpoint-every steps); under `torchrun` it trains
data-parallel (DDP, gloo). The result is a normal Hugging Face checkpoint folder.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import corpora
from .atomic import atomic_directory, write_bytes_atomic
from .errors import OmniDraftError
from .progress import log
from .student import make_student


@dataclass
class DistillConfig:
    layers: int = 4
    tokens: int = 400_000
    seq_len: int = 128
    batch: int = 8
    lr: float = 1e-3
    seed: int = 0
    checkpoint_every: int = 50
    domains: tuple[str, ...] = corpora.DOMAINS

    @property
    def steps(self) -> int:
        return max(1, self.tokens // (self.seq_len * self.batch))


def training_windows(tokenizer, config: DistillConfig, world: int = 1) -> torch.Tensor:
    """[n_windows, seq_len] token windows from the adapt split, shuffled with the seed."""
    need = config.steps * config.batch * world + config.batch
    texts: list[str] = []
    per_domain = need // len(config.domains) + 8  # a text gives about one window
    for domain in config.domains:
        texts += corpora.prompts(domain, per_domain, seed=config.seed, split="adapt", max_chars=2400)
    random.Random(config.seed).shuffle(texts)
    stream: list[int] = []
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    for text in texts:
        stream += tokenizer.encode(text, add_special_tokens=False) + [eos]
        if len(stream) >= need * config.seq_len:
            break
    n = len(stream) // config.seq_len
    if n < config.batch:
        raise OmniDraftError("not enough training text for one batch")
    windows = torch.tensor(stream[: n * config.seq_len]).view(n, config.seq_len)
    return windows[torch.randperm(n, generator=torch.Generator().manual_seed(config.seed))]


def kl_loss(student_logits, teacher_logits) -> torch.Tensor:
    """KL(teacher || student), mean over positions."""
    t = F.log_softmax(teacher_logits.float(), dim=-1)
    s = F.log_softmax(student_logits.float(), dim=-1)
    return F.kl_div(s.flatten(0, -2), t.flatten(0, -2), log_target=True, reduction="batchmean")


class RowLogits(torch.nn.Module):
    """The student's logits at flat rows of a padded batch (one module, so DDP sees the whole forward)."""

    def __init__(self, student):
        super().__init__()
        self.student = student

    def forward(self, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        from .adaptation.loss import logits_at

        return logits_at(self.student, ids, rows)


class DrafterTeacher:
    """The student's own larger model teaches, on corpus windows: KL(teacher || student) at every position."""

    def __init__(self, teacher, tokenizer, config: DistillConfig, world: int):
        self.teacher = teacher
        self.windows = training_windows(tokenizer, config, world)

    def batch(self, lo: int, size: int):
        return self.windows[lo % (len(self.windows) - size + 1) :][:size]

    def loss(self, model, batch) -> torch.Tensor:
        with torch.no_grad():
            target = self.teacher(input_ids=batch).logits
        return kl_loss(model(batch, torch.arange(batch.numel())), target.flatten(0, 1))


class RecordTeacher:
    """The target teaches through the bridge (teacher.py): sparse KL on mapped tokens, NLL on n-gram pieces."""

    def __init__(self, records, mapping, lam: float):
        self.records = records
        self.mapped = torch.from_numpy(mapping.draft_ids)
        self.lam = lam

    def batch(self, lo: int, size: int):
        n = len(self.records)
        return [self.records[(lo + i) % n] for i in range(size)]

    def loss(self, model, records) -> torch.Tensor:
        from .teacher import sparse_kl

        length = max(len(r) for r in records)
        ids = torch.zeros(len(records), length, dtype=torch.long)
        kl_rows, nll_rows, nll_labels = [], [], []
        for b, r in enumerate(records):
            ids[b, : len(r)] = torch.from_numpy(r.ids.astype(np.int64))
            kl_rows.append(b * length + r.kl_pos)
            nll_rows.append(b * length + r.nll_pos)
            nll_labels.append(r.ids[r.nll_pos + 1])
        kl_rows = torch.from_numpy(np.concatenate(kl_rows).astype(np.int64))
        nll_rows = torch.from_numpy(np.concatenate(nll_rows).astype(np.int64))
        logits = model(ids, torch.cat([kl_rows, nll_rows]))
        log_q = F.log_softmax(logits[: len(kl_rows)].index_select(-1, self.mapped), dim=-1)
        top_idx = torch.from_numpy(np.concatenate([r.top_idx for r in records]).astype(np.int64))
        top_logp = torch.from_numpy(np.concatenate([r.top_logp for r in records]))
        kl = sparse_kl(log_q, top_idx, top_logp).mean() if len(kl_rows) else logits.sum() * 0
        if not len(nll_rows):
            return kl
        labels = torch.from_numpy(np.concatenate(nll_labels).astype(np.int64))
        return kl + self.lam * F.cross_entropy(logits[len(kl_rows) :], labels)


def distill(source_path: Path, out: Path, config: DistillConfig, restart: bool = False, head_tokens: int = 0,
            target_path: Path | None = None, teacher_config=None, teacher_cache: Path | None = None) -> Path:
    """A student with `config.layers` of source_path's layers.

    Teacher: the source model itself, or with target_path the target, through the bridge (teacher.py; its
    rows cached in teacher_cache, by default beside `out`). head_tokens: also give the student a
    frequency-ranked draft head of that many tokens (draft_head.py).
    """
    from .draft_head import check_size
    from .models import load_model, load_tokenizer

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    ddp = world > 1
    if ddp:
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(hours=12))  # ranks wait for the teacher cache
    torch.manual_seed(config.seed)
    tokenizer = load_tokenizer(source_path)
    check_size(head_tokens, tokenizer)  # before an hour of training, not after
    source = load_model(source_path)
    student, layers = make_student(source, config.layers)
    if target_path is None:
        teacher, described = DrafterTeacher(source, tokenizer, config, world), str(source_path)
    else:
        del source
        from .teacher import TeacherConfig

        teacher_config = teacher_config or TeacherConfig.for_window(config.seq_len, seed=config.seed)
        teacher = _target_teacher(source_path, target_path, teacher_cache or Path(str(out) + ".teacher"), config,
                                  teacher_config, restart, rank, world)
        described = f"target:{target_path}"
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    warmup = max(1, min(20, config.steps // 10))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.1, 1 - s / config.steps))
    ckpt = Path(str(out) + ".ckpt")
    start_step, history = _resume(ckpt, student, optimizer, schedule, config, described, restart, rank)
    model = RowLogits(student)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    if rank == 0:
        log(f"[omnidraft] distilling {described} -> {source_path.name} with {len(layers)} layers {layers}: "
            f"{config.steps} steps of {config.batch}x{config.seq_len} tokens, {world} process(es), "
            f"{torch.get_num_threads()} threads")
    started = time.perf_counter()
    student.train()
    for step in range(start_step, config.steps):
        loss = teacher.loss(model, teacher.batch((step * world + rank) * config.batch, config.batch))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        history.append(loss.item())
        done = step + 1
        if rank == 0 and (done % 10 == 0 or done == config.steps):
            rate = (done - start_step) * config.batch * config.seq_len * world / (time.perf_counter() - started)
            eta = (config.steps - done) * config.batch * config.seq_len * world / rate
            log(f"[omnidraft] step {done}/{config.steps} loss {sum(history[-10:]) / len(history[-10:]):.3f} "
                f"({rate:.0f} tokens/s, eta {eta / 60:.1f} min)")
        if rank == 0 and (done % config.checkpoint_every == 0 or done == config.steps):
            buf = _state_bytes(student, optimizer, schedule, done, history, config, described)
            write_bytes_atomic(ckpt / "state.pt", buf)
    if rank == 0:
        record = {"teacher": described, "base": str(source_path), "layers_kept": layers, "config": asdict(config),
                  "teacher_config": asdict(teacher_config) if target_path is not None else None,
                  "final_loss": sum(history[-10:]) / max(1, len(history[-10:])), "loss_history": history}
        _write_drafter(out, student, tokenizer, record, head_tokens, config.domains)
    if ddp:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return out


def _resume(ckpt: Path, student, optimizer, schedule, config: DistillConfig, described: str, restart: bool,
            rank: int) -> tuple[int, list[float]]:
    """(first step, loss history) from the run's checkpoint, if one of the same settings exists (else a fresh start)."""
    if restart and rank == 0 and (ckpt / "state.pt").exists():
        (ckpt / "state.pt").unlink()
    if not (ckpt / "state.pt").exists():
        return 0, []
    state = torch.load(ckpt / "state.pt", weights_only=False)
    if state["config"] != asdict(config) or state["teacher"] != described:
        raise OmniDraftError(f"checkpoint {ckpt} was made with other settings; pass --restart to discard it")
    student.load_state_dict(state["student"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if rank == 0:
        log(f"[omnidraft] resuming distillation at step {state['step']}/{config.steps}")
    return state["step"], state["history"]


def _write_drafter(out: Path, student, tokenizer, record: dict, head_tokens: int, domains) -> None:
    """The trained student as a checkpoint folder (atomically), with its record and, if asked, its draft head."""
    from .draft_head import write_head

    student.eval()
    with atomic_directory(out) as tmp:
        student.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "omnidraft-drafter.json").write_text(json.dumps(record, indent=1))
        if head_tokens:
            write_head(tmp, tokenizer, head_tokens, domains)
    log(f"[omnidraft] drafter written to {out}")


def _target_teacher(source_path, target_path, cache_dir: Path, config: DistillConfig, teacher_config, restart: bool,
                    rank: int, world: int) -> RecordTeacher:
    """Records for every window of the run, from the cache (made here for what is missing)."""
    from .adaptation.examples import Mapping
    from .adaptation.loss import LAMBDA
    from .models import load_model, load_tokenizer, load_vocab
    from .runtime.bridge import VocabBridge
    from .teacher import TargetTeacher, TeacherCache, build_records, identity, load_records, teacher_texts

    bridge = VocabBridge(load_vocab(source_path), load_vocab(target_path))
    cache = TeacherCache(cache_dir, identity(target_path, source_path, teacher_config,
                                                                  config.domains))
    if rank == 0:
        cache.check(restart)
    n_windows = config.steps * config.batch * world
    texts = teacher_texts(config.domains, n_windows, config.seed)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # the cache folder is checked before any rank writes to it
    target = load_model(target_path)
    build_records(TargetTeacher(target, load_tokenizer(target_path), bridge, teacher_config), cache, texts, rank, world)
    del target
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
    return RecordTeacher(load_records(cache, n_windows), Mapping.from_bridge(bridge), LAMBDA)


def _state_bytes(student, optimizer, schedule, step, history, config, teacher: str) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save({"student": student.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                "step": step, "history": history, "config": asdict(config), "teacher": teacher}, buf)
    return buf.getvalue()
