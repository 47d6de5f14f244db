"""The acceptance head: how likely the target is to accept the token being drafted.

A logistic head reads, at every drafting step, the drafter's last hidden state
(RMS-normalized) and two facts about its next-token distribution (top-1
probability, entropy / log V), and returns P(accept | every earlier draft token
accepted). The same torch function computes it in eager mode and inside the
exported drafter graphs, whose head weights are graph *inputs*: the phone loop
gets the probability from the drafter call it makes anyway, and an online update
of the head needs no re-export.

Labels (from a verified round; every proposed position gives one, since row j
of the target's logits scores proposal j given all proposals before it):
greedy 1[argmax p_j = t_j], sampling min(1, p_j(t_j) / q'_j).
Across vocabularies a draft token's label is the product of the labels of the
target tokens it proposed (a split token is accepted only if all its pieces
are). A merged n-gram's label goes to its first draft token and the later ones
are labelled 1 (we cannot see which piece failed), so the product of the head's
probabilities over an n-gram's draft tokens is the n-gram's acceptance
probability, and the stopping rule needs no special case for merges.
"""

from __future__ import annotations

import math

import numpy as np

from .bridge import Translation
from .sampling import Sampler

N_CONFIDENCE = 2  # top-1 probability, normalized entropy
NO_HEAD = ("--draft-len auto needs a drafter with an acceptance head "
           "(this bundle was exported without one: export it again)")


def n_features(config) -> int:
    """The head's input width for a Hugging Face model config: hidden size + confidence features."""
    return config.get_text_config().hidden_size + N_CONFIDENCE


def head_features(hidden, logits):
    """[..., d] last hidden state and [..., V] logits -> [..., d + 2] head features (torch)."""
    import torch

    h = hidden.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    p = torch.softmax(logits.float(), dim=-1)
    logp = torch.log(p)
    top1 = p.max(-1, keepdim=True).values
    # 0 log 0 = 0: a draft head leaves -inf logits outside its tokens
    entropy = -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1, keepdim=True) / math.log(logits.shape[-1])
    return torch.cat([h, top1, entropy], dim=-1)


def head_outputs(hidden, logits, weight, bias):
    """Features [1, F] of the last position and the head's probability [1]: what a drafter call returns."""
    import torch

    features = head_features(hidden[:, -1], logits[:, -1])
    return features, torch.sigmoid(features @ weight + bias)


class AcceptanceHead:
    """The head's weights (numpy, updated in place by the predictor, read by the runners)."""

    def __init__(self, weight: np.ndarray, bias: float):
        self.weight = np.asarray(weight, dtype=np.float32)
        self.bias = np.asarray([bias], dtype=np.float32).reshape(1)

    @classmethod
    def initial(cls, n_features: int) -> "AcceptanceHead":
        """Before any training: the drafter's own confidence, sigmoid(6 top1 - 3)."""
        w = np.zeros(n_features, dtype=np.float32)
        w[-N_CONFIDENCE] = 6.0
        return cls(w, -3.0)

    @property
    def n_features(self) -> int:
        return len(self.weight)

    def prob(self, features: np.ndarray) -> np.ndarray:
        z = np.asarray(features, dtype=np.float64) @ self.weight.astype(np.float64) + float(self.bias[0])
        return 1.0 / (1.0 + np.exp(-z))

    def torch_params(self):
        import torch

        return torch.from_numpy(self.weight), torch.from_numpy(self.bias)


def draft_labels(proposal: Translation, target_logits: np.ndarray, sampler: Sampler, n_draft: int) -> np.ndarray:
    """Per draft token, its acceptance label in [0, 1] (NaN: never judged, e.g. past the bridge's gap)."""
    labels = np.full(n_draft, np.nan)
    covered = max(proposal.draft_end, default=0)
    labels[:covered] = 1.0
    for j, t in enumerate(proposal.target_ids):
        row = target_logits[j]
        if sampler.greedy:
            label = float(int(np.argmax(row)) == t)
        else:
            q = proposal.q[j]
            label = min(1.0, sampler.dist(row).prob(t) / q) if q > 0 else 0.0
        labels[proposal.draft_start[j]] *= label
    return labels
