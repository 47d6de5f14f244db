"""Verification: which proposed target tokens the target accepts, and what comes next.

Greedy (temperature 0): accept while the target's argmax equals the proposal, then emit the
target's argmax. The output is the target's own greedy output, token for token, whatever was
proposed.

Sampling, deterministic proposals (lookup, and the drafter's drafts unless it samples them:
every q'(t_j) = 1): the token of output position i is drawn from p by its own uniform number,
position_uniform(seed, i) (sampling.py), and a proposal is accepted exactly when it equals that
draw; at the first one that does not, the draw is emitted. Each proposal is accepted with
probability p(t), as rejection sampling of a point mass would, and the text is the one
target-only decoding draws with that seed, whoever proposed: lossless, and seeds repeat.

Sampling, sampled drafts (the drafter's q', --draft-sampling sampled): accept t with
probability min(1, p(t)/q'(t)), on rejection sample from the residual max(0, p - q'), and if
all were accepted sample a bonus token from p (Leviathan et al. 2023), drawing from the
generation's random stream. Exactly lossless within one vocabulary; across vocabularies q' is
the bridge's approximation (merged n-grams, unmapped draft mass dropped), so approximate there
unless --strict-sampling (docs/exactness.md). A seed then repeats only with the same proposals.
Rows are turned into distributions only as far as the verification reads them.
"""

from __future__ import annotations

import numpy as np

from .proposers import Proposal
from .sampling import Sampler, position_uniform, sample


def verify(proposal: Proposal, target_logits: np.ndarray, sampler: Sampler, rng: np.random.Generator,
           seed: int = 0, start: int = 0) -> tuple[int, int]:
    """Return (number of proposals accepted, the token the target adds after them).

    `target_logits` has one row per proposal plus one: row j scores proposal j (output position
    start + j), the last row gives the bonus token.
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
        t, q = proposal.target_ids[j], proposal.q[j]
        if q == 1.0 and proposal.q_dist is None:  # a point mass: the position's own draw decides
            drawn = sampler.dist(target_logits[j]).draw(position_uniform(seed, start + j))
            if drawn == t:
                continue
            return j, drawn
        p = sampler.probs(target_logits[j])
        if q > 0 and rng.random() < min(1.0, p[t] / q):
            continue
        residual = np.maximum(p - proposal.distribution(j, vocab), 0.0)
        if residual.sum() <= 0:  # q' covered p everywhere: fall back to p itself
            residual = p
        return j, sample(residual / residual.sum(), rng)
    return m, sampler.dist(target_logits[m]).draw(position_uniform(seed, start + m))
