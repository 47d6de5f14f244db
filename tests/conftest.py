"""Shared fixtures: the real tokenizers of the default pair, and tiny random-init
models built from the real configs (same architecture code paths, same
vocabularies, a few MB of weights) so that the loop is tested fast and honestly.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from omnidraft.models import DEFAULT_DRAFTER, DEFAULT_TARGET, load_tokenizer, resolve_model_path
from omnidraft.runtime.runner import EagerRunner
from omnidraft.runtime.vocab import Vocab

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def target_path():
    return resolve_model_path(None, DEFAULT_TARGET)


@pytest.fixture(scope="session")
def drafter_path():
    return resolve_model_path(None, DEFAULT_DRAFTER)


@pytest.fixture(scope="session")
def target_vocab(target_path):
    return Vocab.from_tokenizer(load_tokenizer(target_path))


@pytest.fixture(scope="session")
def draft_vocab(drafter_path):
    return Vocab.from_tokenizer(load_tokenizer(drafter_path))


def tiny_model(checkpoint, seed: int, init_std: float = 0.5, sliding_window: int | None = None):
    """A 2-layer, 64-wide random model with the checkpoint's real config and vocabulary.

    A large init spreads the logits, so greedy choices are far from ties and the
    greedy-equivalence tests do not hinge on float rounding.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = copy.deepcopy(AutoConfig.from_pretrained(checkpoint))
    config.num_hidden_layers = 2
    config.hidden_size = 64
    config.intermediate_size = 128
    config.num_attention_heads = 2
    config.num_key_value_heads = 1
    config.head_dim = 32
    config.initializer_range = init_std
    if getattr(config, "layer_types", None):
        config.layer_types = ["sliding_attention", "full_attention"]
    if sliding_window is not None:
        config.sliding_window = sliding_window
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # spread the norms too (Gemma's norm weights start at zero)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.5)
    model.eval().requires_grad_(False)
    return model


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


def bigram_runner(table: np.ndarray, max_context: int = 64):
    """A real (if trivial) language model, a bigram logit table, behind the runner interface."""
    from omnidraft.runtime.runner import ModelRunner

    class Bigram(ModelRunner):
        backend = "bigram"

        def __init__(self):
            super().__init__(table.shape[1], max_context)
            self.name = "bigram"

        def _forward(self, tokens, start, n_logits):
            return table[tokens[-n_logits:]].astype(np.float32)

    return Bigram()


def byte_vocab(size: int) -> Vocab:
    """A vocabulary of `size` single-letter tokens, for tests that need no tokenizer."""
    token_bytes = [bytes([65 + i]) for i in range(size)]
    byte_tokens = [-1] * 256
    for i, b in enumerate(token_bytes):
        byte_tokens[b[0]] = i
    return Vocab(None, token_bytes, np.zeros(size, bool), np.zeros(size, bool), byte_tokens, f"letters{size}")
