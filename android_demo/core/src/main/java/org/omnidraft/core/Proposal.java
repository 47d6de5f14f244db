package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;

/**
 * Target tokens proposed for one round, with where each came from (runtime/proposers.py's Proposal, with the
 * drafter's bookkeeping of bridge.py's Translation). A lookup proposal is a point mass: q' = 1 on each of its
 * tokens; a chain is a lookup prefix followed by the drafter's tokens.
 */
public final class Proposal {
    public static final String DIRECT = "direct", NGRAM = "ngram", SPLIT_FIRST = "split", SPLIT_REST = "split-rest",
            LOOKUP = "lookup";
    public final List<Integer> targetIds = new ArrayList<>();
    public final List<Double> q = new ArrayList<>();
    public final List<String> kind = new ArrayList<>();
    public final List<Integer> draftStart = new ArrayList<>();
    public final List<Integer> draftEnd = new ArrayList<>();
    public final List<Integer> firstDraftId = new ArrayList<>();

    public static Proposal lookup(List<Integer> tokens) {
        Proposal p = new Proposal();
        for (int t : tokens) p.append(t, 1.0, LOOKUP, -1, -1, -1);
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
