"""A smaller drafter cut from a bigger one: an evenly spaced subset of its layers.

Used to make a drafter (distill.py trains it) and to assemble the shipped one (small_drafter.py
applies its trained tensors to the cut): assembling a drafter needs no training code.
"""

from __future__ import annotations

import torch

from .errors import OmniDraftError


def kept_layers(total: int, keep: int) -> list[int]:
    """Evenly spaced layer indices, always the first and the last."""
    if not 1 <= keep <= total:
        raise OmniDraftError(f"--layers must be between 1 and {total}")
    if keep == 1:
        return [total - 1]
    return sorted({round(i * (total - 1) / (keep - 1)) for i in range(keep)})


def make_student(teacher, keep: int):
    """The teacher with only `keep` of its layers (copied), embeddings and head frozen."""
    from transformers import AutoModelForCausalLM

    config = teacher.config.__class__.from_dict(teacher.config.to_dict())
    layers = kept_layers(config.num_hidden_layers, keep)
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    student = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {}
    for name, tensor in teacher.state_dict().items():
        if ".layers." in name:
            prefix, rest = name.split(".layers.", 1)
            idx, tail = rest.split(".", 1)
            if int(idx) not in layers:
                continue
            name = f"{prefix}.layers.{layers.index(int(idx))}.{tail}"
        state[name] = tensor.clone()
    student.load_state_dict(state, strict=False)
    student.tie_weights()
    student.get_input_embeddings().weight.requires_grad_(False)
    student.get_output_embeddings().weight.requires_grad_(False)
    return student, layers
