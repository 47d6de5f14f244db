package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.DoubleSupplier;

/**
 * The propose-verify loop (omnidraft/runtime/decoding.py): tokens -> propose (the drafter through the
 * bridge, or a lookup continuation under the hybrid policy) -> verify -> accept -> learn (n-gram
 * cache, acceptance head, lookup scorer and history) -> resync. With temperature 0 the output is the
 * target's own greedy output, whoever proposed.
 */
public final class SpeculativeLoop {
    public static final class Result {
        public final List<Integer> tokens = new ArrayList<>();
        public int targetCalls, drafterCalls, drafted, accepted, lookupProposed, lookupAccepted;
        public int chainRounds; // rounds in which the drafter continued a lookup prefix

        public double tokensPerTargetCall() {
            return tokens.size() / (double) Math.max(targetCalls, 1);
        }
    }

    /** Catching up reads at most this many of the latest draft tokens (omnidraft/runtime/drafting.py). */
    static final int CATCHUP_WINDOW = 64;

    private final ModelRunner target;
    private final ModelRunner drafter; // null: target-only decoding through the same loop
    private final VocabBridge bridge;
    private final List<Integer> draftPrefix; // what the drafter's tokenizer puts before a text (e.g. its BOS)
    public NGramCache cache;
    public java.util.function.IntConsumer onToken; // each emitted target token, as it is accepted (streaming)
    public OnlineHead onlineHead; // learns the drafter graph's acceptance head from every verified round
    public boolean collectExample; // build lastExample from each generation, for a LoRA step
    // Lookup (null: the drafter proposes every round): continuations from the context and, with
    // useHistory, past generations; the hybrid policy picks lookup, the drafter or nothing each round.
    public Lookup lookup;
    public LookupScorer scorer = new LookupScorer();
    public Hybrid hybrid = new Hybrid();
    public boolean useHistory = true;
    public int maxLookup = 16;
    public TrainingExample lastExample;
    private final List<float[]> draftFeatures = new ArrayList<>();

    public SpeculativeLoop(ModelRunner target, ModelRunner drafter, VocabBridge bridge, List<Integer> draftPrefix,
                           NGramCache cache) {
        this.target = target;
        this.drafter = drafter;
        this.bridge = bridge;
        this.draftPrefix = draftPrefix;
        this.cache = cache;
    }

    public Result generate(List<Integer> prompt, int maxNew, DraftLength length, Sampler sampler, DoubleSupplier rng,
                           Set<Integer> eosIds, int targetBos) {
        if (prompt.isEmpty()) throw new IllegalArgumentException("the prompt is empty");
        if (prompt.size() >= target.maxContext) throw new IllegalArgumentException("the prompt does not fit the context window");
        Result r = new Result();
        List<Integer> seq = new ArrayList<>(prompt);
        List<Integer> draftSeq = new ArrayList<>();
        boolean speculative = drafter != null;
        if (speculative) { // the drafter reads the prompt when it first drafts, if ever (catching up)
            List<Integer> body = prompt.get(0) == targetBos ? prompt.subList(1, prompt.size()) : prompt;
            draftSeq.addAll(draftPrefix);
            draftSeq.addAll(bridge.draft.encodeBytes(bridge.target.decodeBytes(body), true));
        }
        TrainingExample example = collectExample && speculative ? new TrainingExample(bridge, new ArrayList<>(draftSeq)) : null;
        lastExample = example;
        prefill(target, seq);
        if (lookup != null) {
            scorer.begin();
            hybrid.begin();
        }
        // the drafter reads the prompt now when it is expected to draft, else when it first does (if ever)
        if (speculative && (lookup == null || hybrid.drafterLikely(length.maxLen))) prefill(drafter, draftSeq);
        try {
            return loop(r, seq, draftSeq, example, maxNew, length, sampler, rng, eosIds);
        } finally {
            if (lookup != null && useHistory) lookup.remember(seq);
        }
    }

    private Result loop(Result r, List<Integer> seq, List<Integer> draftSeq, TrainingExample example, int maxNew,
                        DraftLength length, Sampler sampler, DoubleSupplier rng, Set<Integer> eosIds) {
        boolean speculative = drafter != null;
        while (true) {
            int room = target.maxContext - seq.size();
            if (room < 0) break;
            int maxProps = Math.min(room, maxNew - r.tokens.size() - 1);
            Proposal looked = new Proposal(), drafted = new Proposal();
            List<Integer> draftIds = new ArrayList<>(), spelledPrefix = new ArrayList<>();
            List<double[]> draftProbs = new ArrayList<>();
            List<double[]> calls = new ArrayList<>(); // the drafter's calls this round: {tokens, seconds}
            draftFeatures.clear();
            // propose: a lookup prefix, the drafter, a lookup prefix continued by the drafter, or nothing (the hybrid
            // policy); the drafter alone without lookup
            Lookup.Candidates cands = null;
            double[][] x = null;
            int choice = Hybrid.DRAFTER, lookupLen = 0;
            if (lookup != null && maxProps > 0) {
                cands = lookup.find(seq, Math.min(maxProps, maxLookup), useHistory);
                x = LookupScorer.features(cands);
                int unread = speculative ? Math.min(draftSeq.size() - common(drafter, draftSeq), CATCHUP_WINDOW) : 0;
                int[] decision = hybrid.choose(scorer.probs(x), speculative && !draftSeq.isEmpty(), length.maxLen, maxProps,
                        unread);
                choice = decision[0];
                lookupLen = decision[1];
            }
            int start = seq.size();
            if (choice == Hybrid.LOOKUP || choice == Hybrid.CHAIN) looked = Proposal.lookup(cands.tokens.subList(0, lookupLen));
            if ((choice == Hybrid.DRAFTER || choice == Hybrid.CHAIN) && speculative && maxProps > looked.size()
                    && !draftSeq.isEmpty()) {
                if (draftSeq.size() - common(drafter, draftSeq) > CATCHUP_WINDOW) { // restart from the recent text
                    draftSeq.subList(0, draftSeq.size() - CATCHUP_WINDOW).clear();
                    drafter.rollback(0);
                }
                List<Integer> context = new ArrayList<>(draftSeq);
                if (looked.size() > 0) {
                    spelledPrefix = bridge.identity ? new ArrayList<>(looked.targetIds)
                            : bridge.draft.encodeBytes(bridge.target.decodeBytes(looked.targetIds), true);
                    context.addAll(spelledPrefix);
                }
                int budget = maxProps - looked.size();
                int k = Math.min(Math.min(length.budget(), drafter.maxContext - context.size() + 1), budget);
                if (k > 0 && (looked.size() == 0 || !spelledPrefix.isEmpty())) {
                    double[] q = draft(context, k, length, sampler, rng, draftIds, draftProbs, r, calls);
                    drafted = bridge.propose(draftIds, q, cache, budget);
                }
            }
            Proposal prop = looked.then(drafted);
            int m = prop.size(), offset = looked.size(), mine = drafted.size();
            if (offset > 0 && mine > 0) r.chainRounds++;
            List<Integer> input = new ArrayList<>(seq.subList(target.position(), seq.size()));
            input.addAll(prop.targetIds);
            long t0 = System.nanoTime();
            float[][] logits = target.forward(input, target.position(), m + 1);
            double targetSeconds = (System.nanoTime() - t0) / 1e9;
            r.targetCalls++;
            int[] verdict = Verifier.verify(prop, logits, sampler, rng, bridge, draftProbs);
            int n = verdict[0];
            r.drafted += m;
            r.accepted += n;
            r.lookupProposed += offset;
            r.lookupAccepted += Math.min(n, offset);
            if (lookup != null) {
                hybrid.observeTarget(input.size(), targetSeconds);
                for (double[] c : calls) hybrid.observeDrafterCall((int) c[0], c[1]);
                if (mine > 0 && n >= offset) hybrid.observeDrafterRound(Math.min(n - offset, mine), mine, calls.size());
                hybrid.observeRound(input.size(), mine > 0);
            }
            if (mine > 0 && n >= offset) length.observe(mine, n - offset);
            if (onlineHead != null && mine > 0 && sampler.greedy()) { // rows from `offset` judge the drafter's tokens
                float[][] rows = java.util.Arrays.copyOfRange(logits, offset, offset + mine + 1);
                onlineHead.observe(draftFeatures, OnlineHead.greedyLabels(drafted, rows, draftIds.size()));
            }
            List<Integer> committed = new ArrayList<>(prop.targetIds.subList(0, n));
            committed.add(verdict[1]);
            if (example != null) example.add(committed, java.util.Arrays.copyOf(logits, n + 1));
            target.rollback(seq.size() + n);
            seq.addAll(committed);
            if (cands != null) judge(cands, x, start, seq);
            if (speculative) afterRound(draftSeq, draftIds, drafted, spelledPrefix, offset, n, verdict[1], committed);
            for (int t : committed) {
                if (eosIds.contains(t)) return r;
                r.tokens.add(t);
                if (onToken != null) onToken.accept(t);
                if (r.tokens.size() >= maxNew) return r;
            }
        }
        return r;
    }

    /** The scorer learns from each continuation token the target committed at its place, up to the first miss. */
    private void judge(Lookup.Candidates c, double[][] x, int start, List<Integer> seq) {
        int judged = 0;
        double[] labels = new double[c.size()];
        for (int j = 0; j < c.size() && start + j < seq.size(); j++) {
            labels[j] = seq.get(start + j).equals(c.tokens.get(j)) ? 1.0 : 0.0;
            judged++;
            if (labels[j] == 0.0) break;
        }
        if (judged > 0) scorer.learn(java.util.Arrays.copyOf(x, judged), java.util.Arrays.copyOf(labels, judged));
    }

    /**
     * Up to k draft tokens after `context`; stops at a special token or when the draft-length policy says so.
     * The first call reads what the drafter's cache does not hold yet (catching up); calls: {tokens, seconds}.
     */
    private double[] draft(List<Integer> context, int k, DraftLength length, Sampler sampler, DoubleSupplier rng,
                           List<Integer> ids, List<double[]> dists, Result r, List<double[]> calls) {
        int keep = reuse(drafter, context);
        long t0 = System.nanoTime();
        float[] logits = last(drafter.forward(context.subList(keep, context.size()), keep, 1));
        calls.add(new double[] {context.size() - keep, (System.nanoTime() - t0) / 1e9});
        r.drafterCalls++;
        List<Double> qs = new ArrayList<>();
        for (int i = 0; i < k; i++) {
            int d;
            double[] probs = null;
            if (sampler.greedy()) {
                d = Sampler.argmax(logits);
            } else {
                probs = sampler.probs(logits);
                d = Sampler.sample(probs, rng);
            }
            if (!bridge.identity && (d >= bridge.draft.size() || bridge.draft.special[d])) break;
            ids.add(d);
            qs.add(probs == null ? 1.0 : probs[d]);
            dists.add(probs);
            draftFeatures.add(drafter.lastHeadFeatures);
            if (length.stop(drafter.lastAcceptProb)) break;
            if (i + 1 < k) {
                t0 = System.nanoTime();
                logits = last(drafter.forward(List.of(d), drafter.position(), 1));
                calls.add(new double[] {1, (System.nanoTime() - t0) / 1e9});
                r.drafterCalls++;
            }
        }
        double[] q = new double[qs.size()];
        for (int i = 0; i < q.length; i++) q[i] = qs.get(i);
        return q;
    }

    /**
     * Learn spellings and reward accepted merges; bring the drafter's text up to the committed text. When the
     * drafter's tokens were judged (its proposal, or the lookup prefix it continued, was accepted), its cache
     * keeps what was accepted; otherwise it reads the committed text when it next drafts.
     */
    @SuppressWarnings("unchecked")
    private void afterRound(List<Integer> draftSeq, List<Integer> draftIds, Proposal drafted, List<Integer> spelledPrefix,
                            int offset, int n, int next, List<Integer> committed) {
        boolean ours = !draftIds.isEmpty() && drafted.size() > 0 && n >= offset;
        if (cache != null && !bridge.identity) {
            for (int j = 0; j < (ours ? n - offset : 0); j++) {
                if (drafted.kind.get(j).equals(Proposal.NGRAM)) {
                    cache.recordAccepted(draftIds.subList(drafted.draftStart.get(j), drafted.draftEnd.get(j)));
                }
            }
            bridge.learn(cache, committed);
        }
        if (!ours) {
            draftSeq.addAll(bridge.identity ? committed : bridge.draft.encodeBytes(bridge.target.decodeBytes(committed), true));
            return;
        }
        draftSeq.addAll(spelledPrefix); // the continued lookup prefix was accepted: committed as the drafter read it
        Object[] rs = bridge.resync(draftIds, drafted, n - offset, next);
        int kept = (Integer) rs[0];
        drafter.rollback(draftSeq.size() + kept);
        draftSeq.addAll(draftIds.subList(0, kept));
        draftSeq.addAll((List<Integer>) rs[1]);
    }

    /** Keep what the runner's cache already holds of seq[:-1], forget the rest; return its length. */
    private static int reuse(ModelRunner runner, List<Integer> seq) {
        int keep = common(runner, seq);
        runner.rollback(keep);
        return keep;
    }

    /** How much of seq[:-1] the runner's cache holds. */
    private static int common(ModelRunner runner, List<Integer> seq) {
        int keep = 0;
        int limit = Math.min(runner.position(), seq.size() - 1);
        while (keep < limit && runner.cachedTokens().get(keep).equals(seq.get(keep))) keep++;
        return keep;
    }

    private static void prefill(ModelRunner runner, List<Integer> seq) {
        int keep = reuse(runner, seq);
        if (seq.size() - 1 > keep) runner.forward(seq.subList(keep, seq.size() - 1), keep, 1);
    }

    private static float[] last(float[][] rows) {
        return rows[rows.length - 1];
    }
}
