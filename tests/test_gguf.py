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


def _forged_gguf(path, count: int = 2**40):
    """A GGUF header with an architecture and then a uint8 array declaring `count` items it does not hold."""
    import struct

    def text(s):
        return struct.pack("<Q", len(s)) + s.encode()

    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + text("general.architecture") + struct.pack("<I", 8) + \
        text("llama") + text("x") + struct.pack("<IIQ", 9, 0, count)
    path.write_bytes(data)
    return path


def test_a_gguf_declaring_more_than_it_holds_is_refused_before_parsing(tmp_path):
    forged = _forged_gguf(tmp_path / "forged.gguf")
    assert forged.stat().st_size < 100
    truncated = tmp_path / "truncated.gguf"
    with open(DEFAULT_DRAFTER.gguf_path(), "rb") as f:
        truncated.write_bytes(f.read(3_000_000))  # the header whole, the tensors cut
    for path, needle in ((forged, "more than its"), (truncated, "past the end of the file")):
        ran = run_cli("generate", "--prompt", "x", "--target", path, home=tmp_path / "home")
        lines = [line for line in ran.stderr.splitlines() if line.strip()]
        assert ran.returncode != 0 and len(lines) == 1 and "is not a readable GGUF file" in lines[0], ran.stderr
        assert needle in lines[0]
    assert not (tmp_path / "home" / "models").exists() or not any((tmp_path / "home" / "models").iterdir())


def _gguf_without(tmp_path, drafter_path, skip=(), reshape=()):
    """The tiny llama's GGUF with some tensors left out (skip) or one row short (reshape)."""
    from gguf import GGUFWriter

    model = tiny_model(drafter_path, seed=5)
    real = GGUFWriter.add_tensor

    def add_tensor(self, name, tensor, *args, **kwargs):
        if any(s in name for s in skip):
            return None
        if name in reshape:
            tensor = tensor[:-1]
        return real(self, name, tensor, *args, **kwargs)

    with mock.patch.object(GGUFWriter, "add_tensor", add_tensor):
        return write_tiny_gguf(tmp_path / "damaged.gguf", model, DEFAULT_DRAFTER.gguf_path())


@pytest.mark.slow  # a conversion attempt each (tokenizer and weights from GGUF)
@pytest.mark.parametrize("skip, reshape, needle", [
    (("attn_q",), (), "lacks weights its llama architecture needs: model.layers.0.self_attn.q_proj.weight"),
    (("attn_norm", "output_norm"), (), "lacks weights its llama architecture needs: model.layers.0.input_layernorm"),
    ((), ("blk.0.ffn_up.weight",), "weights of the wrong shape for its configuration: model.layers.0.mlp.up_proj"),
])
def test_a_gguf_missing_a_weight_or_of_the_wrong_shape_is_one_line_naming_it(tmp_path, drafter_path, skip,
                                                                              reshape, needle):
    gguf = _gguf_without(tmp_path, drafter_path, skip, reshape)
    ran = run_cli("generate", "--prompt", "x", "--target", gguf, "--no-speculation", home=tmp_path / "home")
    errors = [line for line in ran.stderr.splitlines() if "error" in line]  # besides progress lines
    assert ran.returncode != 0 and len(errors) == 1 and needle in errors[0], ran.stderr
    assert "Traceback" not in ran.stderr
    assert not list((tmp_path / "home" / "models").glob("gguf-*"))  # nothing half-converted left


@pytest.mark.slow
def test_a_converted_folder_that_lost_its_weights_is_converted_again(tiny_gguf, tmp_path):
    import shutil

    model, gguf, folder = tiny_gguf
    home = tmp_path / "home"
    shutil.copytree(folder.parent.parent, home, symlinks=True)
    copy = home / "models" / folder.name
    (copy / "model.safetensors").unlink()
    with mock.patch.dict(os.environ, {"OMNIDRAFT_HOME": str(home)}):
        assert resolve_model_path(str(gguf), DEFAULT_DRAFTER) == copy
    x = torch.tensor([[1, 200, 3000, 42, 7]])
    with torch.no_grad():
        torch.testing.assert_close(load_model(copy)(x).logits, model(x).logits)
