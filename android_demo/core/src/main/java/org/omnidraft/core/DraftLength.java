package org.omnidraft.core;

/**
 * How many tokens to draft (omnidraft/runtime/draft_length.py): fixed k; "heuristic" (+2 after a
 * fully accepted round, -1 otherwise); "auto" (stop once 1 - prod P(accept) > gamma). Capped by maxLen.
 */
public final class DraftLength {
    public enum Policy { FIXED, HEURISTIC, AUTO }

    public final Policy policy;
    public final int maxLen;
    public final double gamma;
    private int k;
    private double survive = 1.0;

    public DraftLength(Policy policy, int k, int maxLen, double gamma) {
        if (k < 1 || maxLen < 1) throw new IllegalArgumentException("draft length must be at least 1");
        if (!(gamma > 0 && gamma < 1)) throw new IllegalArgumentException("gamma must be in (0, 1)");
        this.policy = policy;
        this.maxLen = policy == Policy.FIXED ? k : maxLen;
        this.k = Math.min(k, this.maxLen);
        this.gamma = gamma;
    }

    public int budget() {
        survive = 1.0;
        return policy == Policy.AUTO ? maxLen : k;
    }

    /** After drafting a token whose head probability is p: stop here? */
    public boolean stop(double acceptProb) {
        if (policy != Policy.AUTO) return false;
        survive *= acceptProb;
        return 1.0 - survive > gamma;
    }

    public void observe(int proposed, int accepted) {
        if (policy == Policy.HEURISTIC && proposed > 0) k = accepted == proposed ? Math.min(maxLen, k + 2) : Math.max(1, k - 1);
    }
}
