"""Shared fixtures: the real tokenizers of the default pair, and tiny random-init
models built from the real configs (same architecture code paths, same
vocabularies, a few MB of weights) so that the loop is tested fast and honestly.
What tests share besides fixtures is in helpers.py.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import torch

from omnidraft.atomic import atomic_directory
from omnidraft.catalog import resolve_model_path
from omnidraft.draft_head import write_head
from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, default_model_dir, load_tokenizer
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.vocab import Vocab
from omnidraft.state import locked, omnidraft_home

from .helpers import (TINY_HEAD_TOKENS, TINY_MAX_DRAFT, TINY_WINDOW, shared_dir, tiny_lora, tiny_model,
                      write_model_spec)
torch.set_num_threads(1)


SPECS = Path(__file__).resolve().parent.parent / "build" / "test-specs"  # the checkout's, like build/java


def _prepared_or_spec(model):
    """The default model's prepared folder when the machine has it, else a folder with only its configuration
    and tokenizer, read from its GGUF (no weights converted): all that tiny random models need. The latter is
    made once per checkout and package version into build/test-specs (reading a tokenizer out of a GGUF
    takes about a minute), so the fast tier needs no model in $OMNIDRAFT_HOME."""
    prepared = default_model_dir(model)
    if (prepared / "omnidraft-source.json").exists():
        return prepared
    out = SPECS / f"{model.name}-{metadata.version(model.package)}"
    with locked(out):  # xdist workers and parallel runs: one builds, the others wait
        if not (out / "config.json").is_file():
            with atomic_directory(out) as tmp:
                write_model_spec(model, tmp)
    return out


@pytest.fixture(scope="session")
def target_path():
    """Gemma-3-270M's configuration and tokenizer (weights only if prepared: use real_target_path for those)."""
    return _prepared_or_spec(DEFAULT_TARGET)


@pytest.fixture(scope="session")
def drafter_path():
    """SmolLM2-135M-Instruct's configuration and tokenizer (weights only if prepared: real_drafter_path)."""
    return _prepared_or_spec(DEFAULT_DRAFTER)


@pytest.fixture(scope="session")
def real_drafter_path():
    """SmolLM2-135M-Instruct with its weights, prepared on first use (tests marked real)."""
    return resolve_model_path(None, DEFAULT_DRAFTER)


@pytest.fixture(scope="session")
def target_vocab(target_path):
    return Vocab.from_tokenizer(load_tokenizer(target_path))


@pytest.fixture(scope="session")
def draft_vocab(drafter_path):
    return Vocab.from_tokenizer(load_tokenizer(drafter_path))


@pytest.fixture(scope="session")
def tiny_target_model(target_path):
    return tiny_model(target_path, seed=1, sliding_window=8)


@pytest.fixture(scope="session")
def tiny_drafter_model(drafter_path):
    return tiny_model(drafter_path, seed=2)


@pytest.fixture
def tiny_target(tiny_target_model):
    return EagerRunner(tiny_target_model, 256, name="target")


@pytest.fixture
def tiny_drafter(tiny_drafter_model):
    return EagerRunner(tiny_drafter_model, 512, name="drafter")


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory, monkeypatch):
    """Every test gets its own $OMNIDRAFT_HOME (learned state never touches the user's); the prepared
    models are reached through a link to the real home's models folder."""
    real = omnidraft_home() / "models"
    home = tmp_path_factory.mktemp("home")
    (home / "models").symlink_to(real, target_is_directory=True)
    monkeypatch.setenv("OMNIDRAFT_HOME", str(home))
    return home



@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory, worker_id, target_path, drafter_path):
    """Tiny random target (with a sliding window shorter than the context) and drafter, saved as checkpoints."""


    def build(root):
        for role, src, seed, window in (("target", target_path, 1, 8), ("drafter", drafter_path, 2, None)):
            model = tiny_model(src, seed=seed, sliding_window=window)
            model.save_pretrained(root / role)
            load_tokenizer(src).save_pretrained(root / role)
        # The drafter drafts from a frequency-ranked head, so every eager and exported
        # drafter path in the suite runs through it (the target keeps its full head).
        write_head(root / "drafter", load_tokenizer(drafter_path), TINY_HEAD_TOKENS)

    root = shared_dir(tmp_path_factory, worker_id, "tiny-checkpoints", build)
    return {"target": root / "target", "drafter": root / "drafter"}


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory, worker_id, tiny_checkpoints):
    """Exported once per test run (the slowest fixture): ONNX + ExecuTorch, with the training programs
    (the update step on portable kernels, the default; test_training_graph.py also lowers it to XNNPACK)."""
    from omnidraft.export.build import export_bundle

    def build(out):
        export_bundle(out, str(tiny_checkpoints["target"]), str(tiny_checkpoints["drafter"]),
                      formats=("onnx", "executorch"), max_context=64, max_draft_len=TINY_MAX_DRAFT, prefill_chunk=16,
                      embedding_quant="none",  # the graphs against eager to 1e-4; int8 tables: test_quantized_*
                      draft_head=True, with_training=True, train_window=TINY_WINDOW,
                      lora=tiny_lora())

    return shared_dir(tmp_path_factory, worker_id, "tiny-bundle", build)
