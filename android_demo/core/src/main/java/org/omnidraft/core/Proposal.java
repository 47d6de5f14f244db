package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;

/**
 * Target tokens proposed for one round, with where each came from (runtime/proposers.py's Proposal, with the
 * drafter's bookkeeping of bridge.py's Translation). A lookup proposal is a point mass: q' = 1 on each of its
 * tokens; a chain is a lookup prefix followed by the drafter's tokens. `calls` are the model calls made to
 * propose it ({tokens, seconds}); `distribution` is q' over the target vocabulary at a position (for a
 * sampling rejection's residual).
 */
public final class Proposal {
    /** q' over the target vocabulary at position j of the proposal. */
    public interface Distribution {
        double[] at(int j, int vocab);
    }

    public static final String DIRECT = "direct", NGRAM = "ngram", SPLIT_FIRST = "split", SPLIT_REST = "split-rest",
            LOOKUP = "lookup";
    /** Who proposed a token (runtime/proposers.py's sources): lookup, the drafter, or the target's own token. */
    public static final String FROM_LOOKUP = "lookup", FROM_DRAFTER = "drafter", FROM_TARGET = "target";
    public final List<Integer> targetIds = new ArrayList<>();
    public final List<Double> q = new ArrayList<>();
    public final List<String> kind = new ArrayList<>();
    public final List<Integer> draftStart = new ArrayList<>();
    public final List<Integer> draftEnd = new ArrayList<>();
    public final List<Integer> firstDraftId = new ArrayList<>();
    public final List<double[]> calls = new ArrayList<>();
    Distribution dist; // null: a point mass on each token
    public double[] acceptProbs; // lookup: the scorer's P(token accepted | the ones before it were), else null

    /** q' at position j: the proposer's distribution, or a point mass on the proposed token. */
    public double[] distribution(int j, int vocab) {
        if (dist != null && !kind.get(j).equals(LOOKUP)) return dist.at(j, vocab);
        double[] q = new double[vocab];
        q[targetIds.get(j)] = 1.0;
        return q;
    }

    /** Whether some position carries a proposer's distribution (sampled drafts): else every token is a point mass. */
    public boolean hasDistributions() {
        return dist != null;
    }

    /** Who proposed token j: FROM_LOOKUP or FROM_DRAFTER. */
    public String source(int j) {
        return kind.get(j).equals(LOOKUP) ? FROM_LOOKUP : FROM_DRAFTER;
    }

    /** Tokens at the start of the proposal that lookup proposed (a chain's prefix; all of a lookup proposal). */
    public int lookupPrefix() {
        int n = 0;
        while (n < size() && kind.get(n).equals(LOOKUP)) n++;
        return n;
    }

    /** A lookup continuation: a point mass on each token; acceptProbs: the scorer's P(accept) per token, or null. */
    public static Proposal lookup(List<Integer> tokens, double[] acceptProbs) {
        Proposal p = new Proposal();
        for (int t : tokens) p.append(t, 1.0, LOOKUP, -1, -1, -1);
        p.acceptProbs = acceptProbs;
        return p;
    }

    public int size() {
        return targetIds.size();
    }

    void append(int target, double qv, String k, int start, int end, int firstDraft) {
        targetIds.add(target);
        q.add(qv);
        kind.add(k);
        draftStart.add(start);
        draftEnd.add(end);
        firstDraftId.add(firstDraft);
    }

    /** This proposal followed by `more` (proposed as its continuation): one chain to verify. */
    public Proposal then(Proposal more) {
        Proposal p = new Proposal();
        int offset = size();
        if (dist != null || more.dist != null) {
            p.dist = (j, vocab) -> j < offset ? distribution(j, vocab) : more.distribution(j - offset, vocab);
        }
        p.calls.addAll(calls);
        p.calls.addAll(more.calls);
        for (Proposal part : List.of(this, more)) {
            for (int j = 0; j < part.size(); j++) {
                p.append(part.targetIds.get(j), part.q.get(j), part.kind.get(j), part.draftStart.get(j),
                        part.draftEnd.get(j), part.firstDraftId.get(j));
            }
        }
        return p;
    }

    void truncate(int m) {
        for (List<?> l : List.of(targetIds, q, kind, draftStart, draftEnd, firstDraftId)) {
            while (l.size() > m) l.remove(l.size() - 1);
        }
    }
}
