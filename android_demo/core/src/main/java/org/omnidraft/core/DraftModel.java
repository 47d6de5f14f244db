package org.omnidraft.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.DoubleSupplier;

/**
 * The cross-vocabulary drafter as a proposer (omnidraft/runtime/drafting.py): it drafts in its own
 * vocabulary, the bridge translates (n-gram cache merges, splits), and after each round it learns spellings,
 * its acceptance head and draft length, and brings its text up to the committed text. After an idle stretch
 * it reads at most the latest `catchupWindow` draft tokens, restarting its context from the recent text.
 */
public final class DraftModel implements Proposer {
    private final ModelRunner drafter;
    private final VocabBridge bridge;
    private final List<Integer> draftPrefix; // what the drafter's tokenizer puts before a text (e.g. its BOS)
    private final NGramCache cache; // null: no merges learned
    private final DraftLength length;
    private final int targetBos; // the target's BOS id (-1: none): not spelled into the drafter's text
    private final OnlineHead onlineHead; // null: the acceptance head does not learn
    private final boolean collectExamples;
    private final int catchupWindow;

    private final List<Integer> draftSeq = new ArrayList<>(); // the committed text as the drafter spells it
    private Sampler sampler;
    private DoubleSupplier rng;
    private TrainingExample example;
    // this round's proposal, until observed
    private final List<Integer> draftIds = new ArrayList<>();
    private final List<double[]> draftProbs = new ArrayList<>();
    private final List<float[]> features = new ArrayList<>();
    private List<Integer> spelledPrefix = new ArrayList<>();
    private Proposal drafted = new Proposal();

    public DraftModel(ModelRunner drafter, VocabBridge bridge, List<Integer> draftPrefix, NGramCache cache,
                      DraftLength length, int targetBos, OnlineHead onlineHead, boolean collectExamples, Policy policy) {
        this.drafter = drafter;
        this.bridge = bridge;
        this.draftPrefix = draftPrefix;
        this.cache = cache;
        this.length = length;
        this.targetBos = targetBos;
        this.onlineHead = onlineHead;
        this.collectExamples = collectExamples;
        this.catchupWindow = policy.catchupWindow;
    }

    public DraftLength length() {
        return length;
    }

    /** The last generation's training example (for a LoRA step), or null when not collecting. */
    public TrainingExample lastExample() {
        return example;
    }

    @Override
    public void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng) {
        begin(seq, sampler, rng, true);
    }

    /** readPrompt=false: the drafter reads the prompt when it first drafts, if ever (catching up). */
    void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng, boolean readPrompt) {
        this.sampler = sampler;
        this.rng = rng;
        draftSeq.clear();
        List<Integer> body = !seq.isEmpty() && seq.get(0) == targetBos ? seq.subList(1, seq.size()) : seq;
        draftSeq.addAll(draftPrefix);
        draftSeq.addAll(spell(body));
        example = collectExamples ? new TrainingExample(bridge, new ArrayList<>(draftSeq)) : null;
        forget();
        if (readPrompt) readPrompt(false);
    }

    /** recentOnly (the hybrid's early read): as a draft catches up, from at most the latest catchupWindow
     *  tokens, so that a long prompt's first token does not wait for the drafter to read it all. */
    void readPrompt(boolean recentOnly) {
        if (recentOnly) restartIfFarBehind();
        drafter.prefill(draftSeq);
    }

    private void restartIfFarBehind() {
        if (draftSeq.size() - drafter.common(draftSeq) > catchupWindow) { // restart from the recent text
            draftSeq.subList(0, draftSeq.size() - catchupWindow).clear();
            drafter.rollback(0);
        }
    }

    /** Whether it has text to draft after (a prompt of only a BOS gives it none). */
    public boolean ready() {
        return !draftSeq.isEmpty();
    }

    /** Draft tokens a proposal would read first (what catching up costs), at most the window. */
    public int unread() {
        return Math.min(draftSeq.size() - drafter.common(draftSeq), catchupWindow);
    }

    @Override
    public Proposal propose(List<Integer> seq, int budget, Proposal after) {
        forget();
        int offset = after == null ? 0 : after.size();
        if (budget <= 0 || draftSeq.isEmpty()) return drafted;
        restartIfFarBehind();
        List<Integer> context = new ArrayList<>(draftSeq);
        if (offset > 0) {
            spelledPrefix = spell(after.targetIds);
            context.addAll(spelledPrefix);
        }
        int k = Math.min(Math.min(length.budget(), drafter.maxContext - context.size() + 1), budget);
        if (k > 0 && (offset == 0 || !spelledPrefix.isEmpty())) {
            List<double[]> calls = new ArrayList<>();
            double[] q = draft(context, k, calls);
            drafted = bridge.propose(draftIds, q, cache, budget); // point masses: its most likely tokens
            drafted.calls.addAll(calls);
        }
        return drafted;
    }

    /**
     * Up to k draft tokens after `context`; stops at a special token or when the draft-length policy says so.
     * The first call reads what the drafter's cache does not hold yet (catching up); calls: {tokens, seconds}.
     */
    private double[] draft(List<Integer> context, int k, List<double[]> calls) {
        int keep = drafter.reuse(context);
        long t0 = System.nanoTime();
        float[] logits = last(drafter.forward(context.subList(keep, context.size()), keep, 1));
        calls.add(new double[] {context.size() - keep, (System.nanoTime() - t0) / 1e9});
        List<Double> qs = new ArrayList<>();
        for (int i = 0; i < k; i++) {
            // its most likely token, greedy or not: under sampling a point mass, checked against the position's own
            // draw (Verifier), as the Python runtime's default (sampled drafts are the reference's option only)
            int d = Sampler.argmax(logits);
            double[] probs = null;
            if (!bridge.identity && (d >= bridge.draft.size() || bridge.draft.special[d])) break;
            draftIds.add(d);
            qs.add(probs == null ? 1.0 : probs[d]);
            draftProbs.add(probs);
            features.add(drafter.lastHeadFeatures);
            if (length.stop(drafter.lastAcceptProb)) break;
            if (i + 1 < k) {
                t0 = System.nanoTime();
                logits = last(drafter.forward(List.of(d), drafter.position(), 1));
                calls.add(new double[] {1, (System.nanoTime() - t0) / 1e9});
            }
        }
        double[] q = new double[qs.size()];
        for (int i = 0; i < q.length; i++) q[i] = qs.get(i);
        return q;
    }

    /**
     * Learn the draft length, the acceptance head, spellings and accepted merges; bring the drafter's text up
     * to the committed text. When the drafter's tokens were judged (its proposal, or the lookup prefix it
     * continued, was accepted), its cache keeps what was accepted; otherwise it reads the committed text when
     * it next drafts.
     */
    @Override
    public void observe(List<Integer> seq, Round round) {
        int offset = round.proposal.lookupPrefix(), mine = drafted.size(), n = round.accepted;
        boolean ours = !draftIds.isEmpty() && mine > 0 && n >= offset;
        if (ours) length.observe(mine, n - offset);
        if (onlineHead != null && mine > 0 && sampler.greedy()) { // rows from `offset` judge the drafter's tokens
            float[][] rows = Arrays.copyOfRange(round.logits, offset, offset + mine + 1);
            onlineHead.observe(features, OnlineHead.greedyLabels(drafted, rows, draftIds.size()));
        }
        if (example != null) example.add(round.committed, Arrays.copyOf(round.logits, n + 1));
        if (cache != null && !bridge.identity) {
            for (int j = 0; j < (ours ? n - offset : 0); j++) {
                if (drafted.kind.get(j).equals(Proposal.NGRAM)) {
                    cache.recordAccepted(draftIds.subList(drafted.draftStart.get(j), drafted.draftEnd.get(j)));
                }
            }
            bridge.learn(cache, round.committed);
        }
        if (!ours) {
            draftSeq.addAll(spell(round.committed));
        } else {
            draftSeq.addAll(spelledPrefix); // the continued lookup prefix was accepted: committed as the drafter read it
            Object[] rs = bridge.resync(draftIds, drafted, n - offset, round.next);
            int kept = (Integer) rs[0];
            drafter.rollback(draftSeq.size() + kept);
            draftSeq.addAll(draftIds.subList(0, kept));
            @SuppressWarnings("unchecked")
            List<Integer> rest = (List<Integer>) rs[1];
            draftSeq.addAll(rest);
        }
        forget();
    }

    @Override
    public void end() {
        forget();
    }

    /** Drop this round's proposal (it was observed, or a new round starts). */
    private void forget() {
        draftIds.clear();
        draftProbs.clear();
        features.clear();
        spelledPrefix = new ArrayList<>();
        drafted = new Proposal();
    }

    /** Target tokens as the drafter spells them. */
    private List<Integer> spell(List<Integer> targetIds) {
        return bridge.identity ? new ArrayList<>(targetIds) : bridge.draft.encodeBytes(bridge.target.decodeBytes(targetIds), true);
    }

    private static float[] last(float[][] rows) {
        return rows[rows.length - 1];
    }
}
