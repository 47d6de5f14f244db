package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.DoubleSupplier;

/**
 * The draft-verify loop (omnidraft/runtime/decoding.py): tokens -> draft -> bridge -> verify ->
 * accept -> cache/resync. With temperature 0 the output is the target's own greedy output.
 */
public final class SpeculativeLoop {
    public static final class Result {
        public final List<Integer> tokens = new ArrayList<>();
        public int targetCalls, drafterCalls, drafted, accepted;

        public double tokensPerTargetCall() {
            return tokens.size() / (double) Math.max(targetCalls, 1);
        }
    }

    private final ModelRunner target;
    private final ModelRunner drafter; // null: target-only decoding through the same loop
    private final VocabBridge bridge;
    private final List<Integer> draftPrefix; // what the drafter's tokenizer puts before a text (e.g. its BOS)
    public NGramCache cache;
    public java.util.function.IntConsumer onToken; // each emitted target token, as it is accepted (streaming)
    public OnlineHead onlineHead; // learns the drafter graph's acceptance head from every verified round
    public boolean collectExample; // build lastExample from each generation, for a LoRA step
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
        if (speculative) {
            List<Integer> body = prompt.get(0) == targetBos ? prompt.subList(1, prompt.size()) : prompt;
            draftSeq.addAll(draftPrefix);
            draftSeq.addAll(bridge.draft.encodeBytes(bridge.target.decodeBytes(body), true));
            prefill(drafter, draftSeq);
        }
        TrainingExample example = collectExample && speculative ? new TrainingExample(bridge, new ArrayList<>(draftSeq)) : null;
        lastExample = example;
        prefill(target, seq);
        while (true) {
            int room = target.maxContext - seq.size();
            if (room < 0) break;
            int maxProps = Math.min(room, maxNew - r.tokens.size() - 1);
            Proposal prop = new Proposal();
            List<Integer> draftIds = new ArrayList<>();
            List<double[]> draftProbs = new ArrayList<>();
            draftFeatures.clear();
            if (speculative && maxProps > 0 && !draftSeq.isEmpty()) {
                int k = Math.min(Math.min(length.budget(), drafter.maxContext - draftSeq.size() + 1), maxProps);
                if (k > 0) {
                    double[] q = draft(draftSeq, k, length, sampler, rng, draftIds, draftProbs, r);
                    prop = bridge.propose(draftIds, q, cache, maxProps);
                }
            }
            int m = prop.size();
            List<Integer> input = new ArrayList<>(seq.subList(target.position(), seq.size()));
            input.addAll(prop.targetIds);
            float[][] logits = target.forward(input, target.position(), m + 1);
            r.targetCalls++;
            int[] verdict = Verifier.verify(prop, logits, sampler, rng, bridge, draftProbs);
            int n = verdict[0];
            r.drafted += m;
            r.accepted += n;
            length.observe(m, n);
            if (onlineHead != null && !draftIds.isEmpty() && sampler.greedy()) {
                onlineHead.observe(draftFeatures, OnlineHead.greedyLabels(prop, logits, draftIds.size()));
            }
            List<Integer> committed = new ArrayList<>(prop.targetIds.subList(0, n));
            committed.add(verdict[1]);
            if (example != null) example.add(committed, java.util.Arrays.copyOf(logits, n + 1));
            target.rollback(seq.size() + n);
            seq.addAll(committed);
            if (speculative) afterRound(draftSeq, draftIds, prop, n, verdict[1], committed);
            for (int t : committed) {
                if (eosIds.contains(t)) return r;
                r.tokens.add(t);
                if (onToken != null) onToken.accept(t);
                if (r.tokens.size() >= maxNew) return r;
            }
        }
        return r;
    }

    /** Up to k draft tokens; stops at a special token or when the draft-length policy says so. */
    private double[] draft(List<Integer> draftSeq, int k, DraftLength length, Sampler sampler, DoubleSupplier rng,
                           List<Integer> ids, List<double[]> dists, Result r) {
        if (drafter.position() >= draftSeq.size()) drafter.rollback(draftSeq.size() - 1);
        float[] logits = last(drafter.forward(draftSeq.subList(drafter.position(), draftSeq.size()), drafter.position(), 1));
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
                logits = last(drafter.forward(List.of(d), drafter.position(), 1));
                r.drafterCalls++;
            }
        }
        double[] q = new double[qs.size()];
        for (int i = 0; i < q.length; i++) q[i] = qs.get(i);
        return q;
    }

    @SuppressWarnings("unchecked")
    private void afterRound(List<Integer> draftSeq, List<Integer> draftIds, Proposal prop, int n, int next,
                            List<Integer> committed) {
        if (cache != null && !bridge.identity) {
            for (int j = 0; j < n; j++) {
                if (prop.kind.get(j).equals(Proposal.NGRAM)) {
                    cache.recordAccepted(draftIds.subList(prop.draftStart.get(j), prop.draftEnd.get(j)));
                }
            }
            bridge.learn(cache, committed);
        }
        Object[] rs = bridge.resync(draftIds, prop, n, next);
        int kept = (Integer) rs[0];
        int base = draftSeq.size();
        drafter.rollback(base + kept);
        draftSeq.addAll(draftIds.subList(0, kept));
        draftSeq.addAll((List<Integer>) rs[1]);
    }

    private static void prefill(ModelRunner runner, List<Integer> seq) {
        int keep = 0;
        int limit = Math.min(runner.position(), seq.size() - 1);
        while (keep < limit && runner.cachedTokens().get(keep).equals(seq.get(keep))) keep++;
        runner.rollback(keep);
        if (seq.size() - 1 > keep) runner.forward(seq.subList(keep, seq.size() - 1), keep, 1);
    }

    private static float[] last(float[][] rows) {
        return rows[rows.length - 1];
    }
}
