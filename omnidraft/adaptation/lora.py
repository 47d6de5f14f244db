"""LoRA adapters for the drafter: a low-rank update beside frozen base weights.

`LoRALinear` wraps an `nn.Linear`: y = W x + (alpha / r) * B (A x). B starts at
zero, so a fresh adapter leaves the drafter exactly as it was. Only A and B
train, which keeps an on-device update small (rank 32 on SmolLM2-135M's
attention and MLP projections is a few percent of its weights) and lets a bad
update be undone by restoring a few tensors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoRAConfig:
    rank: int = 32
    alpha: float = 64.0
    targets: tuple[str, ...] = DEFAULT_TARGETS

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError("LoRA rank must be at least 1")
        if not self.targets:
            raise ValueError("LoRA needs at least one target module name")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["targets"] = list(self.targets)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LoRAConfig":
        return cls(rank=int(d["rank"]), alpha=float(d["alpha"]), targets=tuple(d["targets"]))


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self._merged: torch.Tensor | None = None

    def forward(self, x):
        if torch.is_inference_mode_enabled():
            # Decoding: one matmul with W + s*BA, as fast as the plain drafter (costs a weight copy).
            if self._merged is None:
                self._merged = self.merged_weight().detach()
            return nn.functional.linear(x, self._merged, self.base.bias)
        self._merged = None  # training: the adapter is about to change
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + (self.lora_B @ self.lora_A) * self.scale


def add_lora(model: nn.Module, config: LoRAConfig) -> list[str]:
    """Wrap every Linear whose attribute name is in config.targets; freeze everything else.

    Returns the wrapped modules' qualified names. Raises if nothing matched (a
    typo in --lora-targets must not silently train nothing).
    """
    model.requires_grad_(False)
    wrapped = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in config.targets and isinstance(child, nn.Linear):
                setattr(module, child_name, LoRALinear(child, config.rank, config.alpha))
                wrapped.append(f"{name}.{child_name}" if name else child_name)
    if not wrapped:
        raise ValueError(f"no Linear module named any of {list(config.targets)} in the drafter")
    return wrapped


def lora_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if ".lora_A" in n or ".lora_B" in n}


def check_fits(params: dict[str, torch.Tensor], state: dict) -> None:
    """ValueError unless `state` holds a tensor of the right shape for every name of `params`, and no other."""
    if not isinstance(state, dict) or set(params) != set(state):
        raise ValueError("the saved tensors do not match the drafter's trainable tensors")
    for n, p in params.items():
        if not torch.is_tensor(state[n]) or p.shape != state[n].shape:
            raise ValueError(f"saved tensor {n} does not have the shape {tuple(p.shape)}")


def copy_into(params: dict[str, nn.Parameter], state: dict[str, torch.Tensor]) -> None:
    """Copy saved tensors into parameters by name; checks everything before changing anything."""
    check_fits(params, state)
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(state[n])


def forget_merged(model: nn.Module) -> None:
    """Drop cached merged weights after adapters were changed by a copy (restore, load)."""
    for m in model.modules():
        if isinstance(m, LoRALinear):
            m._merged = None


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight and unwrap it (for export)."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, LoRALinear):
                with torch.no_grad():
                    child.base.weight.copy_(child.merged_weight())
                setattr(module, child_name, child.base)
    return model
