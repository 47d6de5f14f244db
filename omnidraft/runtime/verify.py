"""Verification: which proposed target tokens the target accepts, and what comes next.

Greedy (temperature 0): accept while the target's argmax equals the proposal,
then emit the target's argmax. The output is the target's own greedy output,
token for token, whatever the drafter proposed.

Sampling: accept t with probability min(1, p(t)/q'(t)); on rejection sample
from the residual max(0, p - q'); if everything was accepted, sample a bonus
token from p. With one vocabulary q' = q and this is exactly lossless (Leviathan
et al. 2023). Across vocabularies q' is the bridge's approximation (merged
n-grams, unmapped draft mass dropped), so sampling is approximate there.
A lookup proposal is a point mass (q' = 1 on its token): accepted with
probability p(t), and on rejection the next token is drawn from p with t
removed and renormalized, which is exactly lossless.
"""

from __future__ import annotations

import numpy as np

from .proposers import Proposal
from .sampling import Sampler, sample


def verify(proposal: Proposal, target_logits: np.ndarray, sampler: Sampler, rng: np.random.Generator) -> tuple[int, int]:
    """Return (number of proposals accepted, the token the target adds after them).

    `target_logits` has one row per proposal plus one: row j scores proposal j,
    the last row gives the bonus token.
    """
    m = len(proposal)
    assert target_logits.shape[0] == m + 1, (target_logits.shape, m)
    if sampler.greedy:
        choices = target_logits.argmax(axis=-1)
        for j in range(m):
            if choices[j] != proposal.target_ids[j]:
                return j, int(choices[j])
        return m, int(choices[m])

    vocab = target_logits.shape[-1]
    for j in range(m):
        p = sampler.probs(target_logits[j])
        t, q = proposal.target_ids[j], proposal.q[j]
        if q > 0 and rng.random() < min(1.0, p[t] / q):
            continue
        residual = np.maximum(p - proposal.distribution(j, vocab), 0.0)
        if residual.sum() <= 0:  # q' covered p everywhere: fall back to p itself
            residual = p
        return j, sample(residual / residual.sum(), rng)
    return m, sample(sampler.probs(target_logits[m]), rng)
