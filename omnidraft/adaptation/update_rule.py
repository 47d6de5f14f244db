"""The one update rule both learners follow: gradient clipping, then Adam.

The eager learner applies it with torch's own `clip_grad_norm_` and `AdamW`
(weight decay 0); the ExecuTorch training program (export/training_export.py)
carries the same arithmetic inside the exported graph, written out here, so a
phone needs no optimizer of its own: it passes the LoRA tensors, the two Adam
moments and the step number in, and gets the updated ones back. A test checks
that one step through the program equals one eager step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class UpdateRule:
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    clip: float = 1.0  # the gradients' total L2 norm is scaled down to at most this

    def to_dict(self) -> dict:
        return {"optimizer": "adam", **asdict(self), "betas": list(self.betas)}

    @staticmethod
    def lr_at(lr: float, done: int, warmup: int) -> float:
        """The learning rate of the step after `done` steps: ramped up linearly over the first `warmup`."""
        return lr * min(1.0, (done + 1) / max(warmup, 1))

    def eager_optimizer(self, params: list, lr: float) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=lr, betas=self.betas, eps=self.eps, weight_decay=0.0)


RULE = UpdateRule()


def clipped_adam(params, grads, exp_avg, exp_avg_sq, step, lr, rule: UpdateRule = RULE):
    """(params, exp_avg, exp_avg_sq) after one step, as new tensors (an exportable, pure function).

    `step` (the 1-based number of this step) and `lr` are 0-d tensors. Same arithmetic as
    torch.nn.utils.clip_grad_norm_ followed by torch.optim.AdamW with weight decay 0.
    """
    b1, b2 = rule.betas
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(rule.clip / (norm + 1e-6), max=1.0)
    step_size = lr / (1 - torch.pow(b1, step))
    bc2_sqrt = torch.sqrt(1 - torch.pow(b2, step))
    new_p, new_m, new_v = [], [], []
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        g = g * scale
        m = m + (g - m) * (1 - b1)
        v = v * b2 + g * g * (1 - b2)
        new_p.append(p - step_size * m / (torch.sqrt(v) / bc2_sqrt + rule.eps))
        new_m.append(m)
        new_v.append(v)
    return new_p, new_m, new_v
