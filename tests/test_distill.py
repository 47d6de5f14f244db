"""make-drafter: layer selection, KL distillation that learns, resume, and DDP with torchrun."""

import json
import os
import subprocess
import sys

import pytest
import torch

from omnidraft.distill import DistillConfig, distill
from omnidraft.student import kept_layers, make_student
from omnidraft.errors import OmniDraftError

from .helpers import HANG_GUARD_SECONDS, tiny_model


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, drafter_path):
    from omnidraft.models import load_tokenizer

    model = tiny_model(drafter_path, seed=5, init_std=0.1)
    out = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(out)
    load_tokenizer(drafter_path).save_pretrained(out)
    return out


def test_kept_layers():
    assert kept_layers(30, 4) == [0, 10, 19, 29]
    assert kept_layers(2, 2) == [0, 1] and kept_layers(30, 1) == [29]
    with pytest.raises(OmniDraftError):
        kept_layers(4, 5)


def test_student_copies_kept_layers(teacher_dir):
    from omnidraft.models import load_model

    teacher = load_model(teacher_dir)
    student, layers = make_student(teacher, 1)
    assert layers == [1] and student.config.num_hidden_layers == 1
    t, s = teacher.state_dict(), student.state_dict()
    assert torch.equal(s["model.layers.0.self_attn.q_proj.weight"], t["model.layers.1.self_attn.q_proj.weight"])
    assert not student.get_input_embeddings().weight.requires_grad


def test_distill_lowers_kl_and_resumes(tmp_path, teacher_dir):
    config = DistillConfig(layers=1, tokens=16 * 32 * 12, seq_len=32, batch=16, lr=3e-3, checkpoint_every=6)
    out = distill(teacher_dir, tmp_path / "student", config)
    info = json.loads((out / "omnidraft-drafter.json").read_text())
    history = info["loss_history"]
    assert len(history) == 12 and sum(history[-3:]) < sum(history[:3])
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    # resume: a longer run picks up at the saved step instead of starting over
    longer = DistillConfig(layers=1, tokens=16 * 32 * 12, seq_len=32, batch=16, lr=3e-3, checkpoint_every=6)
    distill(teacher_dir, tmp_path / "student", longer)  # same settings: already complete, resumes at the end
    again = json.loads((out / "omnidraft-drafter.json").read_text())
    assert again["loss_history"] == history
    with pytest.raises(OmniDraftError, match="other settings"):
        distill(teacher_dir, tmp_path / "student", DistillConfig(layers=2, tokens=1024, seq_len=32, batch=16))


@pytest.mark.slow
def test_torchrun_two_processes(tmp_path, tiny_checkpoints):
    """Data-parallel, taught by the target: each process makes its own shards of the teacher cache."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMNIDRAFT_HOME": str(tmp_path)}
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node=2", "-m", "omnidraft", "make-drafter",
         "--from", str(tiny_checkpoints["drafter"]), "--teacher", "target", "--target", str(tiny_checkpoints["target"]),
         "--out", str(tmp_path / "ddp"), "--layers", "1", "--tokens", "2048", "--seq-len", "32", "--batch", "8"],
        capture_output=True, text=True, env=env, timeout=HANG_GUARD_SECONDS,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 process(es)" in proc.stderr
    assert proc.stderr.count("teacher: the target scores 1 shard(s)") == 2  # shard 0 by rank 0, shard 1 by rank 1
    assert sorted(p.name for p in (tmp_path / "ddp.teacher").glob("shard-*.npz")) == ["shard-00000.npz",
                                                                                     "shard-00001.npz"]
    info = json.loads((tmp_path / "ddp" / "omnidraft-drafter.json").read_text())
    assert len(info["loss_history"]) == 8 and info["teacher"].startswith("target:")
    head = json.loads((tmp_path / "ddp" / "omnidraft-draft-head.json").read_text())  # the default --head-tokens
    assert head["tokens"] == len(head["token_ids"]) == 16384
