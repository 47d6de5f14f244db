package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;

/**
 * One interface for every way of running a model (omnidraft/runtime/runner.py): a static KV
 * cache of maxContext positions, `forward` writes tokens at start.. and returns the logits of
 * the last nLogits of them, `rollback` forgets everything from a position on (free: the next
 * forward overwrites the stale slots). The app implements {@link #run} with an ExecuTorch
 * Module; the tests with small deterministic functions.
 */
public abstract class ModelRunner {
    public final int vocabSize;
    public final int maxContext;
    protected int position;
    protected final List<Integer> tokens = new ArrayList<>();
    public double lastAcceptProb = Double.NaN; // a drafter graph with an acceptance head sets these
    public float[] lastHeadFeatures;
    /**
     * Seconds per call (omnidraft/runtime/decoding.py's timings): one-token calls (a target or drafter step),
     * and calls scoring several positions (verification); prefill and resync chunks are not timed.
     */
    public final CallTimes oneToken = new CallTimes(), several = new CallTimes();

    /** The most tokens one call takes (a prefill chunk), and the most rows of logits it returns (0: no limit). */
    public final int maxTokensPerCall, maxLogitRows;
    /**
     * A graph whose sliding-window layers keep a ring (runner.py): the deepest safe rollback below the highest
     * position written (-1: no ring). A deeper one forgets everything, so the next prefill reads the text again.
     */
    public final int ringSlack;
    private int written; // one past the highest position written since the cache was last whole

    protected ModelRunner(int vocabSize, int maxContext) {
        this(vocabSize, maxContext, 0, 0, -1);
    }

    protected ModelRunner(int vocabSize, int maxContext, int maxTokensPerCall, int maxLogitRows, int ringSlack) {
        this.vocabSize = vocabSize;
        this.maxContext = maxContext;
        this.maxTokensPerCall = maxTokensPerCall;
        this.maxLogitRows = maxLogitRows;
        this.ringSlack = ringSlack;
    }

    /** The most tokens one call can verify: each needs its row of logits (Integer.MAX_VALUE: no limit). */
    public int maxVerify() {
        int limit = Integer.MAX_VALUE;
        if (maxTokensPerCall > 0) limit = Math.min(limit, maxTokensPerCall);
        if (maxLogitRows > 0) limit = Math.min(limit, maxLogitRows);
        return limit;
    }

    public int position() {
        return position;
    }

    public List<Integer> cachedTokens() {
        return tokens;
    }

    public float[][] forward(List<Integer> input, int start, int nLogits) {
        if (input.isEmpty()) throw new IllegalArgumentException("forward needs at least one token");
        if (start < position) rollback(start);
        if (start > position) throw new IllegalArgumentException("cache holds " + position + " positions, cannot write at " + start);
        if (start + input.size() > maxContext) throw new IllegalArgumentException("context window of " + maxContext + " exceeded");
        int n = input.size();
        int rows = Math.max(1, Math.min(nLogits, n));
        int chunk = maxTokensPerCall > 0 ? maxTokensPerCall : 256;
        float[][] out = new float[rows][];
        int lo = 0;
        while (lo < n) { // runner.py's forward: long inputs in chunks, the wanted rows from each
            int hi = Math.min(n, lo + chunk);
            int want = Math.max(0, hi - Math.max(lo, n - rows));
            if (maxLogitRows > 0 && want > maxLogitRows) { // a call returns at most that many rows
                hi -= want - maxLogitRows;
                want = maxLogitRows;
            }
            long t0 = System.nanoTime();
            float[][] logits;
            try {
                logits = run(input.subList(lo, hi), start + lo, Math.max(want, 1));
            } catch (RuntimeException e) {
                rollback(start + lo); // the call may have written some of its slots: never claim them
                throw e;
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            if (n == 1) oneToken.add(seconds);
            else if (rows > 1 && hi == n) several.add(seconds);
            while (tokens.size() > start + lo) tokens.remove(tokens.size() - 1);
            tokens.addAll(input.subList(lo, hi));
            position = start + hi;
            written = Math.max(written, position);
            for (int r = 0; r < want; r++) out[hi - want + r - (n - rows)] = logits[logits.length - want + r];
            lo = hi;
        }
        return out;
    }

    public void rollback(int pos) {
        int keep = Math.max(0, Math.min(position, pos));
        if (ringSlack >= 0 && written - 1 - keep > ringSlack) keep = 0; // the rings dropped what `pos` needs
        if (keep == 0) written = 0;
        position = keep;
        while (tokens.size() > position) tokens.remove(tokens.size() - 1);
    }

    /** How much of seq[:-1] the cache holds (runner.py's common_prefix). */
    public int common(List<Integer> seq) {
        int keep = 0;
        int limit = Math.min(position, seq.size() - 1);
        while (keep < limit && tokens.get(keep).equals(seq.get(keep))) keep++;
        return keep;
    }

    /** Keep what the cache already holds of seq[:-1], forget the rest; return what it kept (0 past a ring's slack). */
    public int reuse(List<Integer> seq) {
        rollback(common(seq));
        return position;
    }

    /** Read seq[:-1] (what the cache does not hold of it yet): the last token is the next call's input. */
    public void prefill(List<Integer> seq) {
        int keep = reuse(seq);
        if (seq.size() - 1 > keep) forward(seq.subList(keep, seq.size() - 1), keep, 1);
    }

    /** Run tokens at positions start.. and return the last nLogits rows of logits. */
    protected abstract float[][] run(List<Integer> input, int start, int nLogits);
}
