"""GGUF files as --target/--drafter: converted once into $OMNIDRAFT_HOME, keyed by the file's hash."""

import os
from unittest import mock

import pytest
import torch

from omnidraft.bundle import sha256_file
from omnidraft.catalog import resolve_model_path
from omnidraft.errors import OmniDraftError
from omnidraft.models import DEFAULT_DRAFTER, load_model

from .helpers import run_cli, tiny_model, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, drafter_path):
    """A tiny random llama model (SmolLM2's configuration and tokenizer), its GGUF file, and a home holding
    its conversion."""
    root = tmp_path_factory.mktemp("gguf")
    model = tiny_model(drafter_path, seed=5)
    gguf = write_tiny_gguf(root / "tiny-llama.gguf", model, DEFAULT_DRAFTER.gguf_path())
    with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(root / "home")}):
        folder = resolve_model_path(str(gguf), DEFAULT_DRAFTER)
    return model, gguf, folder


@pytest.mark.slow  # a conversion (tokenizer and weights from GGUF): 20-50 s
def test_a_gguf_file_converts_once_to_the_same_model(tiny_gguf):
    model, gguf, folder = tiny_gguf
    home = folder.parent.parent
    assert folder.parent == home / "models" and folder.name == f"gguf-tiny-llama-{sha256_file(gguf)[:12]}"  # its hash
    stamp = (folder / "config.json").stat().st_mtime_ns
    with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(home)}):
        assert resolve_model_path(str(gguf), DEFAULT_DRAFTER) == folder  # converted once
    assert (folder / "config.json").stat().st_mtime_ns == stamp
    x = torch.tensor([[1, 200, 3000, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(load_model(folder)(x).logits, model(x).logits)  # the same fp32 weights


@pytest.mark.slow
def test_generate_with_a_gguf_target_equals_its_folder(tiny_gguf):
    _, gguf, folder = tiny_gguf
    home = folder.parent.parent
    args = ("--prompt", "def add(a, b):", "--max-new-tokens", "12", "--no-speculation", "--json")
    by_file = run_cli("generate", "--target", gguf, *args, home=home)
    by_folder = run_cli("generate", "--target", folder, *args, home=home)
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout.split('"new_tokens"')[0] == by_folder.stdout.split('"new_tokens"')[0]  # the same text


def test_unsupported_or_damaged_gguf_is_one_line(tmp_path):
    from gguf import GGUFWriter

    w = GGUFWriter(str(tmp_path / "mamba.gguf"), "mamba")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (tmp_path / "text.gguf").write_text("not a gguf file")
    for name, needle in (("mamba.gguf", "GGUF architecture 'mamba' is not supported; supported: llama"),
                         ("text.gguf", "is not a readable GGUF file")):
        ran = run_cli("generate", "--prompt", "x", "--target", tmp_path / name, home=tmp_path / "home")
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        assert ran.returncode != 0 and len(lines) == 1 and needle in lines[0], ran.stderr
    with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(tmp_path / "home")}):
        with pytest.raises(OmniDraftError, match="not supported"):
            resolve_model_path(str(tmp_path / "mamba.gguf"), DEFAULT_DRAFTER)
