package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.function.DoubleSupplier;

/**
 * The propose-verify loop (omnidraft/runtime/decoding.py): tokens -> propose ({@link Proposer}) -> verify
 * -> accept -> learn (the proposer observes the round). It never asks which proposer it has. With
 * temperature 0 the output is the target's own greedy output, whoever proposed.
 */
public final class SpeculativeLoop {
    /** Each emitted token as it is accepted, with who proposed it (Proposal.FROM_*): what a UI highlights. */
    public interface TokenSink {
        void accept(int token, String source);
    }

    public static final class Result {
        public final List<Integer> tokens = new ArrayList<>();
        public final List<String> sources = new ArrayList<>(); // who proposed each token (Proposal.FROM_*)
        public int targetCalls, drafterCalls, drafted, accepted, lookupProposed, lookupAccepted;
        public int chainRounds; // rounds in which the drafter continued a lookup prefix

        public double tokensPerTargetCall() {
            return tokens.size() / (double) Math.max(targetCalls, 1);
        }
    }

    private final ModelRunner target;
    private final Proposer proposer; // null: target-only decoding through the same loop

    public SpeculativeLoop(ModelRunner target, Proposer proposer) {
        this.target = target;
        this.proposer = proposer;
    }

    public Result generate(List<Integer> prompt, int maxNew, Sampler sampler, DoubleSupplier rng, Set<Integer> eosIds) {
        return generate(prompt, maxNew, sampler, rng, eosIds, null);
    }

    /** onToken: each emitted target token with its source, as it is accepted (streaming), or null. */
    public Result generate(List<Integer> prompt, int maxNew, Sampler sampler, DoubleSupplier rng, Set<Integer> eosIds,
                           TokenSink onToken) {
        return generate(prompt, maxNew, sampler, rng, eosIds, onToken, 0);
    }

    /** seed: under sampling, each output position's token is drawn by Sampler.positionUniform(seed, position). */
    public Result generate(List<Integer> prompt, int maxNew, Sampler sampler, DoubleSupplier rng, Set<Integer> eosIds,
                           TokenSink onToken, long seed) {
        if (prompt.isEmpty()) throw new IllegalArgumentException("the prompt is empty");
        if (prompt.size() >= target.maxContext) throw new IllegalArgumentException("the prompt does not fit the context window");
        Result r = new Result();
        List<Integer> seq = new ArrayList<>(prompt);
        target.prefill(seq);
        if (proposer != null) proposer.begin(seq, sampler, rng);
        try {
            while (target.maxContext - seq.size() >= 0) {
                int budget = Math.min(Math.min(target.maxContext - seq.size(), maxNew - r.tokens.size() - 1),
                        target.maxVerify() - 1);
                Proposal prop = proposer == null ? new Proposal() : proposer.propose(seq, budget, null);
                List<Integer> committed = round(seq, prop, sampler, rng, seed, r);
                for (int j = 0; j < committed.size(); j++) {
                    int t = committed.get(j);
                    if (eosIds.contains(t)) return r;
                    String source = j < committed.size() - 1 ? prop.source(j) : Proposal.FROM_TARGET;
                    r.tokens.add(t);
                    r.sources.add(source);
                    if (onToken != null) onToken.accept(t, source);
                    if (r.tokens.size() >= maxNew) return r;
                }
            }
            return r;
        } finally {
            if (proposer != null) proposer.end();
        }
    }

    /** One round: verify the proposal in one target call, commit, let the proposer learn. */
    private List<Integer> round(List<Integer> seq, Proposal prop, Sampler sampler, DoubleSupplier rng, long seed,
                                Result r) {
        int m = prop.size(), offset = prop.lookupPrefix();
        List<Integer> input = new ArrayList<>(seq.subList(target.position(), seq.size()));
        input.addAll(prop.targetIds);
        long t0 = System.nanoTime();
        float[][] logits = target.forward(input, target.position(), m + 1);
        double seconds = (System.nanoTime() - t0) / 1e9;
        int[] verdict = Verifier.verify(prop, logits, sampler, rng, seed, seq.size());
        int n = verdict[0];
        r.targetCalls++;
        r.drafterCalls += prop.calls.size();
        r.drafted += m;
        r.accepted += n;
        r.lookupProposed += offset;
        r.lookupAccepted += Math.min(n, offset);
        if (offset > 0 && m > offset) r.chainRounds++;
        List<Integer> committed = new ArrayList<>(prop.targetIds.subList(0, n));
        committed.add(verdict[1]);
        target.rollback(seq.size() + n);
        seq.addAll(committed);
        if (proposer != null) {
            proposer.observe(seq, new Proposer.Round(prop, n, verdict[1], committed, logits, input.size(), seconds));
        }
        return committed;
    }
}
