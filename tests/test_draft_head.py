"""The frequency-ranked draft head: same scores on its tokens, -inf elsewhere, exact decoding."""

import copy
import json

import numpy as np
import pytest
import torch

from omnidraft.cli import main
from omnidraft.draft_head import (HEAD_FILE, SubsetHead, apply_draft_head, full_output_head, read_head,
                                  refresh_draft_head, write_head)
from omnidraft.errors import OmniDraftError
from omnidraft.models import load_model, load_tokenizer
from omnidraft.pair import build_eager_pair
from omnidraft.runtime.acceptance import head_features
from omnidraft.runtime.decoding import GenerationConfig
from omnidraft.runtime.sampling import Sampler


def test_subset_head_keeps_the_scores_of_its_tokens(tiny_drafter_model):
    model = copy.deepcopy(tiny_drafter_model)
    ids = torch.tensor([0, 7, 100, 5000, 49151])
    x = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        full = model(input_ids=x).logits
        head = full_output_head(model)
        model.set_output_embeddings(SubsetHead(head, ids.tolist()))
        pruned = model(input_ids=x).logits
    assert full_output_head(model) is head  # training still reaches the full projection
    # Same scores up to float32 rounding: a 5-row and a 49,152-row matmul are blocked differently
    # by the BLAS kernel (they differ by about one float32 step, 1e-6, on some CPUs).
    torch.testing.assert_close(pruned[..., ids], full[..., ids], rtol=1e-5, atol=1e-5)
    outside = torch.ones(full.shape[-1], dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(pruned[..., outside]).all()
    # the acceptance head's confidence features stay finite (0 log 0 = 0)
    assert torch.isfinite(head_features(torch.randn(1, 6, 64), pruned)).all()
    # full fine-tuning moves the tied projection; the draft head follows after a refresh
    with torch.no_grad():
        head.weight.mul_(2.0)
        refresh_draft_head(model)
        after = model(input_ids=x).logits
        subset_head = model.get_output_embeddings()
        model.set_output_embeddings(head)
        torch.testing.assert_close(after[..., ids], model(input_ids=x).logits[..., ids], rtol=1e-5, atol=1e-4)
        model.set_output_embeddings(subset_head)


def test_head_file_round_trip_and_bad_files(tmp_path, drafter_path):
    tok = load_tokenizer(drafter_path)
    record = write_head(tmp_path, tok, 1000, ("prose",))
    ids = read_head(tmp_path, len(tok))
    assert ids == record["token_ids"] and len(ids) == 1000 == len(set(ids))
    assert not set(ids) & set(tok.all_special_ids)
    assert 0.5 < record["coverage"] < 1.0  # 1,000 tokens cover most, not all, of the prose
    assert 0.5 < record["eval_coverage"]["prose"] < record["coverage"]  # held-out text is covered less
    frequent = set(tok.encode(" the and of to", add_special_tokens=False))
    assert frequent <= set(ids)
    write_head(tmp_path, tok, 0)  # 0 removes it
    assert read_head(tmp_path, len(tok)) is None
    for bad, needle in (("{oops", "not a valid draft head"),
                        (json.dumps({"version": 1, "token_ids": [1, 1]}), "distinct"),
                        (json.dumps({"version": 1, "token_ids": [10**6]}), "within the vocabulary"),
                        (json.dumps({"version": 9, "token_ids": [1]}), "version 9")):
        (tmp_path / HEAD_FILE).write_text(bad)
        with pytest.raises(OmniDraftError, match=needle):
            read_head(tmp_path, len(tok))
    with pytest.raises(OmniDraftError, match="between 0"):
        write_head(tmp_path, tok, len(tok) + 1)


def test_drafts_come_from_the_head_and_decoding_stays_exact(tiny_checkpoints):
    drafter_dir = tiny_checkpoints["drafter"]
    pair = build_eager_pair(str(tiny_checkpoints["target"]), str(drafter_dir), max_context=128, use_ngram_cache=False)
    drafter = pair.drafter
    assert isinstance(drafter.model.get_output_embeddings(), SubsetHead)
    allowed = set(read_head(drafter_dir, drafter.vocab_size))
    ids = pair.encode_prompt("The quick brown fox")
    base = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=24, speculative=False))
    got = pair.decoder.generate(ids, GenerationConfig(max_new_tokens=24, draft_len=4))
    assert got.token_ids == base.token_ids and got.stats.drafted > 0
    logits = drafter.forward(pair.bridge.draft_prompt(ids), 0, 4)
    assert set(np.flatnonzero(np.isfinite(logits).all(0))) == allowed
    # sampling from those logits never leaves the head
    rng = np.random.default_rng(0)
    assert {Sampler(temperature=1.5).choose(logits[-1], rng)[0] for _ in range(200)} <= allowed


def test_cli_draft_head(tmp_path, tiny_checkpoints, capsys):
    import shutil

    folder = tmp_path / "drafter"
    shutil.copytree(tiny_checkpoints["drafter"], folder)
    assert main(["draft-head", "--drafter", str(folder), "--tokens", "2000", "--corpus", "code"]) == 0
    assert len(read_head(folder, 49152)) == 2000
    assert "covers" in capsys.readouterr().err
    assert main(["draft-head", "--drafter", str(folder), "--tokens", "99999999"]) == 1
    assert "vocabulary size" in capsys.readouterr().err
    assert main(["draft-head", "--drafter", str(folder), "--tokens", "5", "--corpus", "poetry"]) == 1
    assert main(["draft-head", "--drafter", str(folder), "--tokens", "0"]) == 0
    assert not (folder / HEAD_FILE).exists()
    (folder / HEAD_FILE).write_text("[]")
    with pytest.raises(OmniDraftError, match="not a valid draft head"):
        apply_draft_head(load_model(folder), folder)
