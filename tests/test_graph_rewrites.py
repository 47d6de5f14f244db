"""The ExecuTorch graph rewrites (export/graph_rewrites.py) compute what transformers computes.

The partition counts they buy are tested on an exported graph in test_export.py (slow tier).
"""

import copy

import pytest
import torch

from omnidraft.export import graph_rewrites

from .helpers import tiny_model


@pytest.mark.parametrize("which", ["target", "drafter"])
def test_rewritten_model_matches(which, target_path, drafter_path):
    """Norms swapped (Gemma-3 with its (1 + w) norms and q/k norms; SmolLM2, llama): the same logits up to float
    rounding (the mean of squares is summed in another order)."""
    path = target_path if which == "target" else drafter_path
    model = tiny_model(path, seed=3, vocab_size=1024)
    rewritten = copy.deepcopy(model)
    swapped = graph_rewrites.replace_norms(rewritten)
    layers = model.config.num_hidden_layers
    assert swapped == layers * (6 if which == "target" else 2) + 1  # every RMSNorm, the final one too
    ids = torch.randint(0, 1024, (1, 12))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        got = rewritten(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert float((got - want).abs().max()) < 1e-3 * float(want.abs().max())

