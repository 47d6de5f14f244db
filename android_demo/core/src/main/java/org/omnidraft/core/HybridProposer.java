package org.omnidraft.core;

import java.util.List;
import java.util.function.DoubleSupplier;

/**
 * Each round the option with the most expected tokens per second (omnidraft/runtime/hybrid.py): nothing, a
 * lookup prefix, the drafter, or a lookup prefix continued by the drafter, as {@link Hybrid} prices them from
 * measured costs. It uses its proposers only through the {@link Proposer} interface, and the drafter's
 * unread text (what a re-check costs).
 */
public final class HybridProposer implements Proposer {
    private final LookupProposer lookup;
    private final DraftModel drafting; // null: lookup alone
    private final Hybrid policy;

    public HybridProposer(LookupProposer lookup, DraftModel drafting, Hybrid policy) {
        this.lookup = lookup;
        this.drafting = drafting;
        this.policy = policy;
    }

    @Override
    public void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng) {
        lookup.begin(seq, sampler, rng);
        policy.begin();
        if (drafting != null) { // it reads the prompt now only if it is expected to pay (else when first used)
            drafting.begin(seq, sampler, rng, false);
            if (policy.drafterLikely(drafting.length().maxLen)) drafting.readPrompt(true);
        }
    }

    @Override
    public Proposal propose(List<Integer> seq, int budget, Proposal after) {
        if (after != null || budget <= 0) return new Proposal(); // it continues nothing: it decides whole rounds
        Proposal looked = lookup.propose(seq, budget, null);
        int maxDraft = drafting == null ? 0 : drafting.length().maxLen;
        int unread = drafting == null ? 0 : drafting.unread();
        int[] decision = policy.choose(looked.acceptProbs, drafting != null && drafting.ready(), maxDraft, budget, unread);
        int choice = decision[0], m = decision[1];
        if (choice == Hybrid.NONE) return new Proposal();
        Proposal prefix = Proposal.lookup(looked.targetIds.subList(0, m), null);
        if (choice == Hybrid.LOOKUP || drafting == null) return prefix;
        Proposal drafted = drafting.propose(seq, budget - m, m > 0 ? prefix : null);
        return m > 0 ? prefix.then(drafted) : drafted;
    }

    @Override
    public void observe(List<Integer> seq, Round round) {
        policy.observeTarget(round.tokensInCall, round.targetSeconds);
        for (double[] c : round.proposal.calls) policy.observeDrafterCall((int) c[0], c[1]);
        int offset = round.proposal.lookupPrefix(), mine = round.drafterTokens();
        if (mine > 0 && round.accepted >= offset) {
            policy.observeDrafterRound(Math.min(round.accepted - offset, mine), mine, round.proposal.calls.size());
        }
        policy.observeRound(round.tokensInCall, mine > 0);
        lookup.observe(seq, round);
        if (drafting != null) drafting.observe(seq, round);
    }

    @Override
    public void end() {
        lookup.end();
        if (drafting != null) drafting.end();
    }
}
