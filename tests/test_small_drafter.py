"""The shipped small drafter: assembled from SmolLM2 and the committed delta, checked, and exact in use."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from omnidraft import small_drafter
from omnidraft.errors import OmniDraftError
from omnidraft.models import load_model
from omnidraft.catalog import resolve_pair_paths

from .helpers import run_cli

pytestmark = pytest.mark.real


def test_the_shipped_delta_is_small_and_says_how_it_was_made():
    manifest = small_drafter.read_manifest()
    delta = small_drafter.SHIPPED / small_drafter.DELTA
    assert delta.stat().st_size <= 40e6
    assert small_drafter.sha256(delta) == manifest["sha256"]
    assert manifest["command"].startswith("omnidraft make-drafter") and manifest["base"] == "smollm2-135m-instruct"
    head = json.loads((small_drafter.SHIPPED / small_drafter.HEAD).read_text())
    assert head["tokens"] == len(head["token_ids"])


def test_assembly_is_smollm2_with_the_shipped_layers(tmp_path, real_drafter_path):
    out = small_drafter.assemble(out=tmp_path / "small")
    model, base = load_model(out), load_model(real_drafter_path)
    manifest = small_drafter.read_manifest()
    assert model.config.num_hidden_layers == len(manifest["layers_kept"])
    assert torch.equal(model.get_input_embeddings().weight, base.get_input_embeddings().weight)
    state = model.state_dict()
    for name, tensor in load_file(str(small_drafter.SHIPPED / small_drafter.DELTA)).items():
        assert torch.equal(state[name], tensor.float()), name
    assert (out / small_drafter.HEAD).exists()
    assert small_drafter.assemble(out=out) == out  # once: a second call finds it


def test_a_damaged_delta_is_one_clear_error(tmp_path):
    shipped = tmp_path / "shipped"
    shutil.copytree(small_drafter.SHIPPED, shipped)
    data = bytearray((shipped / small_drafter.DELTA).read_bytes())
    data[-100] ^= 0xFF
    (shipped / small_drafter.DELTA).write_bytes(bytes(data))
    with pytest.raises(OmniDraftError, match="does not match its sha256"):
        small_drafter.assemble(shipped, tmp_path / "out")
    (shipped / small_drafter.MANIFEST).write_text("{")
    with pytest.raises(OmniDraftError, match="missing or damaged"):
        small_drafter.assemble(shipped, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_drafter_small_decodes_exactly():
    args = ("generate", "--prompt", "def fibonacci(n):", "--max-new-tokens", "24", "--json", "--threads", "1",
            "--proposer", "drafter")
    fast, plain = run_cli(*args, "--drafter", "small"), run_cli(*args, "--no-speculation")
    assert fast.returncode == 0 and plain.returncode == 0, fast.stderr[-500:] + plain.stderr[-500:]
    a, b = json.loads(fast.stdout), json.loads(plain.stdout)
    assert a["drafter"] == "omnidraft-small" and a["drafted"] > 0
    assert a["text"] == b["text"]


def test_the_default_target_drafts_with_the_small_drafter_and_other_targets_with_smollm2(
        tmp_path, monkeypatch, capsys, tiny_checkpoints):
    def names(target, drafter):
        return tuple(p.name for p in resolve_pair_paths(target, drafter))

    assert names(None, None) == ("gemma-3-270m", "omnidraft-small")
    assert names(str(tiny_checkpoints["target"]), None) == ("target", "smollm2-135m-instruct")  # it did not teach it
    assert names(None, "smollm2-135m-instruct") == ("gemma-3-270m", "smollm2-135m-instruct")
    # A damaged shipped drafter: asked for by name it is an error, by default a warning and SmolLM2 drafts.
    shipped = tmp_path / "shipped"
    shutil.copytree(small_drafter.SHIPPED, shipped)
    (shipped / small_drafter.MANIFEST).write_text("{")
    monkeypatch.setattr(small_drafter, "SHIPPED", shipped)
    with pytest.raises(OmniDraftError, match="missing or damaged"):
        resolve_pair_paths(None, "small")
    assert names(None, None) == ("gemma-3-270m", "smollm2-135m-instruct")
    assert "warning: the shipped small drafter is not usable" in capsys.readouterr().err
