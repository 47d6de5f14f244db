package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;

/**
 * Target tokens proposed for one round, with where each came from (bridge.py's Proposal). A lookup
 * proposal is a point mass: q' = 1 on each of its tokens.
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

    void truncate(int m) {
        for (List<?> l : List.of(targetIds, q, kind, draftStart, draftEnd, firstDraftId)) {
            while (l.size() > m) l.remove(l.size() - 1);
        }
    }
}
