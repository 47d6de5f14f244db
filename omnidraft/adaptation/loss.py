"""The hybrid distillation loss, L = L_DM + lambda * L_ngram (OmniDraft, section 4).

L_DM is the reverse KL, KL(q' || p), between the drafter and the target over the
directly mapped tokens (both renormalised over that set, so the drafter cannot
lower the loss by moving mass onto tokens the target cannot see). L_ngram is
the NLL of the draft sub-tokens of n-gram tokens. The same function runs in
eager training and inside the exported training graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..draft_head import full_output_head
from .examples import Example

LAMBDA = 0.2  # the n-gram term's weight, as in every experiment of the paper (online adaptation and distillation)


@dataclass
class Batch:
    """Examples padded into one tensor, with the rows each loss term reads."""

    ids: torch.Tensor  # [B, L]
    kl_rows: torch.Tensor  # [N] flat indices into B*L
    kl_target: torch.Tensor  # [N, |M|] target logits over the mapped tokens
    nll_rows: torch.Tensor  # [K]
    nll_labels: torch.Tensor  # [K]
    unit_rows: list[np.ndarray]  # per committed token: its flat rows (acceptance check)
    unit_labels: list[np.ndarray]

    @classmethod
    def of(cls, examples: list[Example], pad_id: int = 0) -> "Batch":
        length = max(len(e) for e in examples)
        ids = np.full((len(examples), length), pad_id, dtype=np.int64)
        kl_rows, kl_target, nll_rows, nll_labels, unit_rows, unit_labels = [], [], [], [], [], []
        for b, e in enumerate(examples):
            ids[b, : len(e)] = e.ids
            base = b * length
            kl_rows.append(base + e.kl_pos)
            kl_target.append(e.kl_target)
            nll_rows.append(base + e.nll_pos)
            nll_labels.append(e.ids[e.nll_pos + 1])
            for a, z in e.units:
                unit_rows.append(base + np.arange(a, z + 1))
                unit_labels.append(e.ids[a + 1 : z + 2])
        return cls(
            torch.from_numpy(ids),
            torch.from_numpy(np.concatenate(kl_rows)),
            torch.from_numpy(np.concatenate(kl_target).astype(np.float32)),
            torch.from_numpy(np.concatenate(nll_rows)),
            torch.from_numpy(np.concatenate(nll_labels)),
            unit_rows,
            unit_labels,
        )


def logits_at(model, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The drafter's logits at flat positions `rows` of ids [B, L] (the LM head only runs there).

    Always the full output projection: a frequency-ranked draft head restricts
    what the drafter proposes, not what it learns.
    """
    hidden = model.model(input_ids=ids).last_hidden_state
    picked = hidden.reshape(-1, hidden.shape[-1])[rows]
    logits = full_output_head(model)(picked)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def hybrid_loss(
    kl_logits: torch.Tensor,  # [N, V_draft] drafter logits at KL positions
    kl_target: torch.Tensor,  # [N, |M|] target logits over the mapped tokens
    kl_weight: torch.Tensor,  # [N] 1 for real rows, 0 for padding
    nll_logits: torch.Tensor,  # [K, V_draft]
    nll_labels: torch.Tensor,  # [K]
    nll_weight: torch.Tensor,  # [K]
    mapped_draft_ids: torch.Tensor,  # [|M|]
    lam: float,
    use_kl: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, L_DM, L_ngram); each term is a weighted mean, 0 when it has no rows."""
    log_q = F.log_softmax(kl_logits.index_select(-1, mapped_draft_ids), dim=-1)
    log_p = F.log_softmax(kl_target, dim=-1)
    kl = (log_q.exp() * (log_q - log_p)).sum(-1)
    l_dm = (kl * kl_weight).sum() / kl_weight.sum().clamp(min=1.0)
    log_q_all = F.log_softmax(nll_logits, dim=-1)
    nll = -log_q_all.gather(-1, nll_labels.unsqueeze(-1)).squeeze(-1)
    l_ngram = (nll * nll_weight).sum() / nll_weight.sum().clamp(min=1.0)
    loss = (l_dm if use_kl else 0.0 * l_dm) + lam * l_ngram
    return loss, l_dm, l_ngram


def batch_loss(model, batch: Batch, mapped_draft_ids: torch.Tensor, lam: float, use_kl: bool = True):
    """Hybrid loss of one batch in eager torch (one drafter pass, the head only at needed rows)."""
    n_kl = len(batch.kl_rows)
    rows = torch.cat([batch.kl_rows, batch.nll_rows])
    logits = logits_at(model, batch.ids, rows)
    return hybrid_loss(
        logits[:n_kl],
        batch.kl_target,
        torch.ones(n_kl),
        logits[n_kl:],
        batch.nll_labels,
        torch.ones(len(batch.nll_rows)),
        mapped_draft_ids,
        lam,
        use_kl,
    )


@torch.no_grad()
def greedy_acceptance(model, batch: Batch) -> float:
    """Fraction of committed tokens the drafter would have drafted greedily, teacher-forced.

    A token counts when the drafter's argmax reproduces every draft token of its
    spelling: the greedy acceptance test of one round, without running the target.
    """
    if not batch.unit_rows:
        return 0.0
    rows = torch.from_numpy(np.concatenate(batch.unit_rows))
    choice = logits_at(model, batch.ids, rows).argmax(-1).numpy()
    hits, at = 0, 0
    for labels in batch.unit_labels:
        n = len(labels)
        hits += bool(np.array_equal(choice[at : at + n], labels))
        at += n
    return hits / len(batch.unit_labels)
