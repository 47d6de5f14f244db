package org.omnidraft.core;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Lookup proposals (omnidraft/runtime/lookup.py): the continuation of the longest suffix of the
 * sequence found in the sequence itself (context) or in past documents (history), walked token by
 * token, most frequent next token first (ties: the most recent), keeping only the occurrences that
 * agree. The history is one token array (documents separated by SEP) with a bigram index, bounded to
 * maxTokens (oldest documents dropped first). Same results as the Python reference, value for value.
 */
public final class Lookup {
    public static final int SEP = -1;
    private final int maxMatch, maxCandidates, maxOccurrences; // the policy's walk limits

    /** What lookup would propose now, with the scorer's features. */
    public static final class Candidates {
        public final List<Integer> tokens = new ArrayList<>();
        public final List<Double> frequency = new ArrayList<>();
        public final List<Integer> support = new ArrayList<>();
        public int match;
        public String source = "";

        public int size() {
            return tokens.size();
        }
    }

    private final int maxTokens;
    private final List<int[]> docs = new ArrayList<>();
    private int[] joined = new int[0];
    private int joinedLen;
    private final Map<Long, List<Integer>> index = new HashMap<>(); // bigram -> ascending end positions
    private List<Integer> lastDoc; // what this process last added

    public Lookup(int maxTokens, Policy policy) {
        if (maxTokens < 0) throw new IllegalArgumentException("history size must be >= 0");
        this.maxTokens = maxTokens;
        this.maxMatch = policy.maxMatch;
        this.maxCandidates = policy.maxCandidates;
        this.maxOccurrences = policy.maxOccurrences;
    }

    public List<int[]> docs() {
        return docs;
    }

    public int size() {
        int n = 0;
        for (int[] d : docs) n += d.length;
        return n;
    }

    /** A finished generation joins the history; a chat's next turn extends the same document. */
    public void remember(List<Integer> seq) {
        if (seq.size() < 2) return;
        boolean extend = lastDoc != null && seq.size() > lastDoc.size() && seq.subList(0, lastDoc.size()).equals(lastDoc);
        add(extend ? seq.subList(lastDoc.size(), seq.size()) : seq, extend);
        lastDoc = new ArrayList<>(seq);
    }

    /** A new document, or (extendLast) more tokens of the newest one (a chat's next turn). */
    public void add(List<Integer> tokens, boolean extendLast) {
        int[] doc = toArray(tokens);
        if (extendLast && !docs.isEmpty()) {
            int[] last = docs.remove(docs.size() - 1);
            int[] grown = new int[last.length + doc.length];
            System.arraycopy(last, 0, grown, 0, last.length);
            System.arraycopy(doc, 0, grown, last.length, doc.length);
            doc = grown;
        }
        if (doc.length >= 2) docs.add(doc);
        int total = size();
        int drop = 0;
        while (total > maxTokens && drop < docs.size()) total -= docs.get(drop++).length;
        docs.subList(0, drop).clear();
        rebuild();
    }

    private void rebuild() {
        joinedLen = 0;
        index.clear();
        for (int[] d : docs) {
            ensure(joinedLen + d.length + 1);
            System.arraycopy(d, 0, joined, joinedLen, d.length);
            joinedLen += d.length;
            joined[joinedLen++] = SEP;
        }
        for (int i = 1; i + 1 < joinedLen; i++) {
            if (joined[i - 1] != SEP && joined[i] != SEP && joined[i + 1] != SEP) {
                index.computeIfAbsent(key(joined[i - 1], joined[i]), k -> new ArrayList<>()).add(i);
            }
        }
    }

    private void ensure(int n) {
        if (joined.length < n) joined = java.util.Arrays.copyOf(joined, Math.max(n, 2 * joined.length));
    }

    private static long key(int a, int b) {
        return ((long) a << 32) | (b & 0xFFFFFFFFL);
    }

    /** The longest match of seq's suffix in seq itself or (if withHistory) the history, walked for `budget` tokens. */
    public Candidates find(List<Integer> seq, int budget, boolean withHistory) {
        Candidates out = new Candidates();
        if (budget < 1 || seq.size() < 2) return out;
        int[] context = toArray(seq);
        int[] suffix = java.util.Arrays.copyOfRange(context, Math.max(0, context.length - maxMatch), context.length);
        List<Integer> ends = new ArrayList<>();
        for (int e = 0; e + 1 < context.length; e++) {
            if (context[e] == suffix[suffix.length - 1] && context[e + 1] != SEP) ends.add(e);
        }
        int[] ctx = extend(context, context.length, tail(ends, maxCandidates), suffix, 1);
        int length = ends.isEmpty() ? 0 : ctx[0];
        List<Integer> best = ends.isEmpty() ? ends : sub(ctx);
        int[] tokens = context;
        int n = context.length;
        out.source = "context";
        if (withHistory && suffix.length >= 2) {
            List<Integer> hist = index.get(key(suffix[suffix.length - 2], suffix[suffix.length - 1]));
            if (hist != null && !hist.isEmpty()) {
                int[] h = extend(joined, joinedLen, tail(hist, maxCandidates), suffix, 2);
                if (h[0] > length) {
                    length = h[0];
                    best = sub(h);
                    tokens = joined;
                    n = joinedLen;
                    out.source = "history";
                }
            }
        }
        if (length == 0) {
            out.source = "";
            return out;
        }
        out.match = length;
        walk(tokens, n, best, budget, out);
        return out;
    }

    /** {length, ends...}: the occurrences that match the longest suffix, the most recent maxOccurrences. */
    private int[] extend(int[] tokens, int n, List<Integer> ends, int[] suffix, int length) {
        int limit = Math.min(maxMatch, suffix.length);
        List<Integer> cur = new ArrayList<>(ends);
        while (length < limit && !cur.isEmpty()) {
            List<Integer> next = new ArrayList<>();
            for (int e : cur) {
                int at = e - length;
                if (at >= 0 && tokens[at] == suffix[suffix.length - 1 - length]) next.add(e);
            }
            if (next.isEmpty()) break;
            cur = next;
            length++;
        }
        cur = tail(cur, maxOccurrences);
        int[] out = new int[cur.size() + 1];
        out[0] = length;
        for (int i = 0; i < cur.size(); i++) out[i + 1] = cur.get(i);
        return out;
    }

    private static void walk(int[] tokens, int n, List<Integer> ends, int budget, Candidates out) {
        while (out.size() < budget && !ends.isEmpty()) {
            if (ends.size() == 1) { // one occurrence: its continuation, up to a separator
                for (int i = ends.get(0) + 1; i < n && out.size() < budget && tokens[i] != SEP; i++) {
                    out.tokens.add(tokens[i]);
                    out.frequency.add(1.0);
                    out.support.add(1);
                }
                return;
            }
            List<Integer> shifted = new ArrayList<>();
            for (int e : ends) if (e + 1 < n && tokens[e + 1] != SEP) shifted.add(e + 1);
            if (shifted.isEmpty()) return;
            Map<Integer, Integer> counts = new LinkedHashMap<>();
            for (int e : shifted) counts.merge(tokens[e], 1, Integer::sum);
            int top = 0;
            for (int c : counts.values()) top = Math.max(top, c);
            int choice = -1;
            for (int e : shifted) if (counts.get(tokens[e]) == top) choice = tokens[e]; // ties: the most recent
            out.tokens.add(choice);
            out.frequency.add(top / (double) shifted.size());
            out.support.add(shifted.size());
            List<Integer> kept = new ArrayList<>();
            for (int e : shifted) if (tokens[e] == choice) kept.add(e);
            ends = kept;
        }
    }

    private static List<Integer> tail(List<Integer> xs, int n) {
        return xs.size() > n ? xs.subList(xs.size() - n, xs.size()) : xs;
    }

    private static List<Integer> sub(int[] lengthAndEnds) {
        List<Integer> out = new ArrayList<>();
        for (int i = 1; i < lengthAndEnds.length; i++) out.add(lengthAndEnds[i]);
        return out;
    }

    private static int[] toArray(List<Integer> xs) {
        int[] a = new int[xs.size()];
        for (int i = 0; i < a.length; i++) a[i] = xs.get(i);
        return a;
    }
}
