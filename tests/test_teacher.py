"""make-drafter --teacher target: the target's signal through the bridge, its loss, its cache."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from omnidraft import corpora
from omnidraft.distill import DistillConfig, distill
from omnidraft.errors import OmniDraftError
from omnidraft.models import load_model, load_tokenizer, load_vocab
from omnidraft.runtime.bridge import VocabBridge
from omnidraft.teacher import MIN_TOKENS, TargetTeacher, TeacherConfig, sparse_kl, teacher_texts


def test_sparse_kl_is_the_kl_over_the_kept_tokens_and_one_bucket():
    g = torch.Generator().manual_seed(0)
    log_p = F.log_softmax(torch.randn(5, 40, generator=g) * 3, -1)
    log_q = F.log_softmax(torch.randn(5, 40, generator=g) * 3, -1)
    full = (log_p.exp() * (log_p - log_q)).sum(-1)
    every = log_p.topk(40, -1)
    assert torch.allclose(sparse_kl(log_q, every.indices, every.values), full, atol=1e-5)
    top = log_p.topk(6, -1)
    kept = torch.zeros_like(log_p, dtype=torch.bool).scatter(-1, top.indices, True)
    p = torch.cat([log_p.exp().gather(-1, top.indices), (log_p.exp() * ~kept).sum(-1, keepdim=True)], -1)
    q = torch.cat([log_q.exp().gather(-1, top.indices), (log_q.exp() * ~kept).sum(-1, keepdim=True)], -1)
    coarse = (p * (p.log() - q.log())).sum(-1)
    assert torch.allclose(sparse_kl(log_q, top.indices, top.values), coarse, atol=1e-5)
    assert (coarse <= full + 1e-6).all()  # coarsening never adds divergence
    assert torch.allclose(sparse_kl(log_p, top.indices, top.values), torch.zeros(5), atol=1e-5)


@pytest.fixture(scope="module")
def teacher(tiny_checkpoints):
    target_dir, drafter_dir = tiny_checkpoints["target"], tiny_checkpoints["drafter"]
    bridge = VocabBridge(load_vocab(drafter_dir), load_vocab(target_dir))
    config = TeacherConfig(window=32, batch=4, generated=0.5, continuation=8, top_k=8)
    return TargetTeacher(load_model(target_dir), load_tokenizer(target_dir), bridge, config)


def test_teacher_rows_are_the_targets_rows_over_the_mapped_tokens(teacher):
    ids = torch.tensor([[2, 651, 6074, 1010, 573, 4199], [2, 1841, 603, 235248, 0, 0]])
    mask = (ids > 0).long()
    with torch.no_grad():
        full = teacher.target(input_ids=ids, attention_mask=mask).logits
        mapped = teacher._mapped_logits(ids, mask)
    assert torch.allclose(mapped, full[..., teacher.mapped_targets], atol=1e-4)


def test_a_domain_that_runs_out_leaves_its_turns_to_the_others():
    """Chat holds a few hundred distinct lines in the adapt split; a long run goes on with the other domains."""
    chat = corpora.prompts("chat", 10_000, split="adapt", max_chars=2400)
    n = 2 * len(chat) + 50
    texts = teacher_texts(("code", "chat"), n, seed=0)
    assert len(texts) == n and texts[1 : 2 * len(chat) : 2] == chat  # the domains take turns while chat lasts
    assert texts[:40] == teacher_texts(("code", "chat"), 40, seed=0)  # and a longer run still extends a cache
    with pytest.raises(OmniDraftError, match="fewer than the"):
        teacher_texts(("chat",), len(chat) + 1, seed=0)


def test_records_spell_the_windows_and_keep_the_likeliest_tokens(teacher):
    texts = teacher_texts(("code", "prose", "chat"), 8, seed=0)
    assert teacher_texts(("code", "prose", "chat"), 20, seed=0)[:8] == texts  # a longer run extends a cache
    assert teacher._tokens(texts[0])[0] == teacher.tokenizer.bos_token_id  # the target reads as at decoding time
    records = teacher.records(texts, shard=1)  # half of them continued by the (sampling) target
    assert records
    draft = teacher.bridge.draft
    n_mapped = len(teacher.mapping)
    for r in records:
        assert len(r.kl_pos) + len(r.nll_pos) > 0 and r.top_idx.shape == (len(r.kl_pos), 8)
        assert ((r.top_idx >= 0) & (r.top_idx < n_mapped)).all()
        lp = r.top_logp.astype(np.float32)
        assert (np.diff(lp, axis=1) <= 0).all() and (np.exp(lp).sum(1) <= 1 + 1e-2).all()
        # a KL position predicts a directly mapped draft token: the next draft token is its twin
        nxt = r.ids[r.kl_pos + 1]
        assert (teacher.bridge.draft_to_target[nxt] >= 0).all()
    # each window spells corpus text: in full, or its prompt when the target wrote the rest
    spelled = [b"".join(draft.token_bytes[i] for i in r.ids) for r in records]
    sources = [t.encode() for t in texts]
    assert all(any(s[:16] in t for t in sources) for s in spelled)
    short = sum(len(teacher._tokens(t)) < MIN_TOKENS for t in texts)  # chat lines: continued whole
    assert sum(any(s in t for t in sources) for s in spelled) >= len(records) - 4 - short  # 4 continued
    again = teacher.records(texts, shard=1)  # same shard, same seed: the same windows
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(records, again))


def test_a_text_too_short_to_teach_alone_is_a_prompt_the_target_continues(teacher):
    """Most chat lines are a few target tokens: the target writes after each, as it answers a short prompt."""
    texts = ["Hello, how are you?", "What is your name?", "Hi"]
    assert all(1 < len(teacher._tokens(t)) < MIN_TOKENS for t in texts)
    records = teacher.records(texts, shard=0)  # greedy
    assert len(records) == 3
    draft = teacher.bridge.draft
    for r, text in zip(records, texts):
        spelled = b"".join(draft.token_bytes[i] for i in r.ids)
        assert spelled.startswith(text.encode()) and len(spelled) > len(text.encode())
        assert len(r.kl_pos) + len(r.nll_pos) >= len(r.ids) - len(draft.encode_bytes(text.encode())) - 1
    again = teacher.records(texts, shard=0)
    assert all(np.array_equal(a.ids, b.ids) for a, b in zip(records, again))


def test_make_drafter_from_the_target_learns_and_never_asks_it_twice(tmp_path, tiny_checkpoints, capfd):
    target_dir, drafter_dir = tiny_checkpoints["target"], tiny_checkpoints["drafter"]
    config = DistillConfig(layers=1, tokens=8 * 32 * 10, seq_len=32, batch=8, lr=3e-3, checkpoint_every=5)
    teach = TeacherConfig(window=32, batch=8, generated=0.25, continuation=8, top_k=16)
    out = distill(drafter_dir, tmp_path / "student", config, target_path=target_dir, teacher_config=teach)
    info = json.loads((out / "omnidraft-drafter.json").read_text())
    history = info["loss_history"]
    assert info["teacher"] == f"target:{target_dir}" and len(history) == 10
    assert sum(history[-3:]) < sum(history[:3])
    cache = tmp_path / "student.teacher"
    shards = sorted(cache.glob("shard-*.npz"))
    stamps = [s.stat().st_mtime_ns for s in shards]
    assert shards and "teacher: the target scores" in capfd.readouterr().err
    # a rerun with the same settings finds its teacher rows and its checkpoint: the target is not called
    distill(drafter_dir, tmp_path / "student", config, target_path=target_dir, teacher_config=teach)
    assert "teacher: the target scores" not in capfd.readouterr().err
    assert [s.stat().st_mtime_ns for s in shards] == stamps
    # a damaged shard is set aside and made again, the same as before
    before = np.load(shards[0])["ids"]
    shards[0].write_bytes(b"not a shard")
    distill(drafter_dir, tmp_path / "student", config, restart=False, target_path=target_dir, teacher_config=teach)
    err = capfd.readouterr().err
    assert "shard-00000.npz is damaged" in err and list(cache.glob("shard-00000.npz.damaged-*"))
    assert np.array_equal(np.load(shards[0])["ids"], before)
    # without teacher settings, the window's defaults (continuations of half of it)
    plain = distill(drafter_dir, tmp_path / "plain", DistillConfig(layers=1, tokens=8 * 32, seq_len=32, batch=8),
                    target_path=target_dir)
    assert json.loads((plain / "omnidraft-drafter.json").read_text())["teacher_config"]["continuation"] == 16
    # other teacher settings are refused, not mixed in
    other = TeacherConfig(window=32, batch=8, generated=0.5, continuation=8, top_k=16)
    with pytest.raises(OmniDraftError, match="other settings"):
        distill(drafter_dir, tmp_path / "student", config, target_path=target_dir, teacher_config=other)


def test_make_drafter_options_are_checked(tmp_path, capsys):
    from omnidraft.cli import main

    assert main(["make-drafter", "--out", str(tmp_path / "d"), "--target", str(tmp_path)]) == 1
    assert "--target and --teacher-cache are for --teacher target" in capsys.readouterr().err
    assert main(["make-drafter", "--out", str(tmp_path / "d"), "--teacher", "target", "--generated", "1.5"]) == 2
    assert "must be in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
