package org.omnidraft.core;

import java.util.Arrays;
import java.util.List;
import java.util.function.DoubleSupplier;

/**
 * Lookup as a proposer (omnidraft/runtime/lookup_proposer.py): the continuation found in the context or, with
 * useHistory, in past generations, each token with the scorer's P(accept), for the price of an index query. The
 * scorer learns from every judged continuation; a finished generation joins the history (useHistory).
 */
public final class LookupProposer implements Proposer {
    private final Lookup lookup;
    private final LookupScorer scorer;
    private final boolean useHistory;
    private final int maxLen;
    private List<Integer> seq; // the generation's committed sequence (the loop's own list)
    // this round's continuation, until observed: where it starts, the candidates and their features
    private int start;
    private Lookup.Candidates pending;
    private double[][] features;

    public LookupProposer(Lookup lookup, LookupScorer scorer, boolean useHistory, Policy policy) {
        this.lookup = lookup;
        this.scorer = scorer;
        this.useHistory = useHistory;
        this.maxLen = policy.maxLookup;
    }

    public Lookup lookup() {
        return lookup;
    }

    @Override
    public void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng) {
        this.seq = seq;
        pending = null;
        scorer.begin();
    }

    @Override
    public Proposal propose(List<Integer> seq, int budget, Proposal after) {
        pending = null;
        if (after != null || budget <= 0) return new Proposal();
        Lookup.Candidates c = lookup.find(seq, Math.min(budget, maxLen), useHistory);
        double[][] x = scorer.features(c);
        if (c.size() > 0) {
            start = seq.size();
            pending = c;
            features = x;
        }
        return Proposal.lookup(c.tokens, scorer.probs(x));
    }

    /** The scorer learns from each continuation token the target committed at its place, up to the first miss. */
    @Override
    public void observe(List<Integer> seq, Round round) {
        this.seq = seq;
        if (pending == null) return;
        Lookup.Candidates c = pending;
        pending = null;
        int judged = 0;
        double[] labels = new double[c.size()];
        for (int j = 0; j < c.size() && start + j < seq.size(); j++) {
            labels[j] = seq.get(start + j).equals(c.tokens.get(j)) ? 1.0 : 0.0;
            judged++;
            if (labels[j] == 0.0) break;
        }
        if (judged > 0) scorer.learn(Arrays.copyOf(features, judged), Arrays.copyOf(labels, judged));
    }

    /** The finished generation joins the history (with useHistory). */
    @Override
    public void end() {
        if (useHistory && seq != null) lookup.remember(seq);
        pending = null;
    }
}
