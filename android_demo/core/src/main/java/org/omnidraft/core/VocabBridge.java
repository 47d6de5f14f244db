package org.omnidraft.core;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Draft tokens -> target tokens (omnidraft/runtime/bridge.py): at each draft position, an
 * n-gram the cache knows is merged into one target token (q' = product of q), else a draft
 * token with a byte-identical target twin maps 1:1 (q' = q), else it is split into the
 * target tokens that spell it (the first gets q, the rest are forced, q' = 1).
 */
public final class VocabBridge {
    public final Tokenizer draft;
    public final Tokenizer target;
    public final int[] draftToTarget;
    public final boolean identity;
    private static final int MAX_SPELLINGS = 65536; // memoized spellings of target tokens; cleared when full
    private final Map<Integer, List<Integer>> spellings = new HashMap<>(); // target id -> its draft tokens

    public VocabBridge(Tokenizer draft, Tokenizer target) {
        this.draft = draft;
        this.target = target;
        identity = draft.fingerprint.equals(target.fingerprint);
        draftToTarget = new int[draft.size()];
        Arrays.fill(draftToTarget, -1);
        if (identity) {
            for (int i = 0; i < draftToTarget.length; i++) draftToTarget[i] = i;
            return;
        }
        Map<ByteBuffer, Integer> byBytes = new HashMap<>();
        for (int t = 0; t < target.size(); t++) {
            if (target.special[t]) continue;
            ByteBuffer k = ByteBuffer.wrap(target.tokenBytes[t]);
            Integer prev = byBytes.get(k);
            if (prev == null || target.byteFallback[prev]) byBytes.put(k, t); // prefer a real token over "<0xAB>"
        }
        for (int d = 0; d < draft.size(); d++) {
            if (draft.special[d]) continue;
            Integer t = byBytes.get(ByteBuffer.wrap(draft.tokenBytes[d]));
            if (t != null) draftToTarget[d] = t;
        }
    }

    public int intersectionSize() {
        int n = 0;
        for (int t : draftToTarget) if (t >= 0) n++;
        return n;
    }

    /** Translate a draft into at most maxTokens target tokens (stops at the first gap). */
    public Proposal propose(List<Integer> draftIds, double[] draftQ, NGramCache cache, int maxTokens) {
        Proposal prop = new Proposal();
        int i = 0, k = draftIds.size();
        while (i < k && prop.size() < maxTokens) {
            int d = draftIds.get(i);
            if (d >= draftToTarget.length) break;
            int[] hit = cache != null && !identity ? cache.lookup(draftIds, i) : null;
            if (hit != null) {
                double q = 1.0;
                for (int j = i; j < i + hit[1]; j++) q *= draftQ[j];
                prop.append(hit[0], q, Proposal.NGRAM, i, i + hit[1], d);
                i += hit[1];
                continue;
            }
            int t = draftToTarget[d];
            if (t >= 0) {
                prop.append(t, draftQ[i], Proposal.DIRECT, i, i + 1, d);
                i++;
                continue;
            }
            List<Integer> pieces = split(d);
            if (pieces.isEmpty()) break;
            for (int j = 0; j < pieces.size(); j++) {
                boolean last = j == pieces.size() - 1;
                prop.append(pieces.get(j), j == 0 ? draftQ[i] : 1.0, j == 0 ? Proposal.SPLIT_FIRST : Proposal.SPLIT_REST,
                        i, last ? i + 1 : i, d);
            }
            i++;
        }
        prop.truncate(maxTokens);
        return prop;
    }

    private List<Integer> split(int d) {
        if (draft.special[d]) return List.of();
        try {
            return target.encodeBytes(draft.tokenBytes[d], false);
        } catch (IllegalArgumentException e) {
            return List.of();
        }
    }

    /** Teach the cache how the drafter spells each committed target token. */
    public void learn(NGramCache cache, List<Integer> targetIds) {
        if (identity) return;
        for (int t : targetIds) {
            if (t >= target.size() || target.special[t]) continue;
            List<Integer> spelling = spelling(t);
            if (spelling.size() >= 2) cache.add(t, spelling);
        }
    }

    /**
     * A target token's bytes in draft tokens (empty if the drafter cannot spell them), tokenized once per token:
     * learn runs on every round's committed tokens, and text repeats its tokens.
     */
    private List<Integer> spelling(int t) {
        List<Integer> spelling = spellings.get(t);
        if (spelling == null) {
            if (spellings.size() >= MAX_SPELLINGS) spellings.clear();
            try {
                spelling = draft.encodeBytes(target.tokenBytes[t], false);
            } catch (IllegalArgumentException e) {
                spelling = List.of();
            }
            spellings.put(t, spelling);
        }
        return spelling;
    }

    /** After a round: {draft tokens kept} and the draft tokens to append (the rest of the accepted text). */
    public Object[] resync(List<Integer> draftIds, Proposal p, int accepted, int nextToken) {
        int kept = accepted > 0 ? p.draftEnd.get(accepted - 1) : 0;
        if (identity) return new Object[] {kept, List.of(nextToken)};
        byte[] acc = target.decodeBytes(p.targetIds.subList(0, accepted));
        byte[] covered = draft.decodeBytes(draftIds.subList(0, kept));
        ByteArrayOutputStream rest = new ByteArrayOutputStream();
        rest.write(acc, covered.length, acc.length - covered.length);
        rest.writeBytes(target.tokenBytes[nextToken]);
        return new Object[] {kept, draft.encodeBytes(rest.toByteArray(), true)};
    }

    /** Give p (translated from a draft sampled from draftProbs, one distribution per draft token) its q'. */
    public void attachDistributions(Proposal p, List<double[]> draftProbs) {
        p.dist = (j, vocab) -> proposalDistribution(p, j, draftProbs.get(p.draftStart.get(j)), vocab);
    }

    /** q' over the target vocabulary at proposal position j, for the sampling residual (bridge.py). */
    public double[] proposalDistribution(Proposal p, int j, double[] draftProbs, int targetVocab) {
        double[] q = new double[targetVocab];
        if (p.kind.get(j).equals(Proposal.SPLIT_REST)) {
            q[p.targetIds.get(j)] = 1.0;
            return q;
        }
        int n = Math.min(draftProbs.length, draftToTarget.length);
        for (int d = 0; d < n; d++) {
            int t = draftToTarget[d];
            if (t >= 0 && t < targetVocab) q[t] += draftProbs[d];
        }
        String kind = p.kind.get(j);
        if (kind.equals(Proposal.NGRAM)) {
            int first = draftToTarget[p.firstDraftId.get(j)];
            if (first >= 0) q[first] -= p.q.get(j);
        }
        if (kind.equals(Proposal.NGRAM) || kind.equals(Proposal.SPLIT_FIRST)) q[p.targetIds.get(j)] += p.q.get(j);
        for (int t = 0; t < targetVocab; t++) if (q[t] < 0) q[t] = 0;
        return q;
    }
}
