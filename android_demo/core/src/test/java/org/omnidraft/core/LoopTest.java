package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.Test;

/** The draft-verify loop with small deterministic models on the real tokenizers: greedy output is the target's. */
public class LoopTest {
    /** A bigram model: the logits after token t are a fixed pseudo-random function of t. */
    static class Bigram extends ModelRunner {
        final long seed;
        final int[] boost; // optional: token t -> a token to favour after it (a "smart" drafter)

        Bigram(int vocab, int context, long seed, int[] boost) {
            super(vocab, context);
            this.seed = seed;
            this.boost = boost;
        }

        float[] row(int last) {
            float[] r = new float[vocabSize];
            for (int v = 0; v < vocabSize; v++) {
                long h = (last * 0x9E3779B97F4A7C15L) ^ (v * 0xC2B2AE3D27D4EB4FL) ^ seed;
                h ^= h >>> 31;
                h *= 0xBF58476D1CE4E5B9L;
                h ^= h >>> 29;
                r[v] = (h & 0xFFFF) / 6553.6f;
            }
            if (boost != null && last < boost.length && boost[last] >= 0) r[boost[last]] = 100f;
            return r;
        }

        @Override
        protected float[][] run(List<Integer> input, int start, int nLogits) {
            float[][] out = new float[nLogits][];
            for (int i = 0; i < nLogits; i++) out[i] = row(input.get(input.size() - nLogits + i));
            return out;
        }
    }

    @Test
    public void heuristicAndAutoDraftLengths() {
        DraftLength h = new DraftLength(DraftLength.Policy.HEURISTIC, 4, 7, 0.5);
        int[][] rounds = {{4, 4}, {6, 6}, {7, 3}, {6, 0}};
        int[] next = {6, 7, 6, 5};
        for (int i = 0; i < rounds.length; i++) {
            assertEquals(rounds[i][0], h.budget());
            h.observe(rounds[i][0], rounds[i][1]);
            assertEquals(next[i], h.budget());
        }
        DraftLength a = new DraftLength(DraftLength.Policy.AUTO, 4, 8, 0.5);
        assertEquals(8, a.budget());
        boolean[] stops = {a.stop(0.8), a.stop(0.8), a.stop(0.8), a.stop(0.8)};
        assertTrue(!stops[0] && !stops[1] && !stops[2] && stops[3]);
        AcceptanceHead head = new AcceptanceHead(4);
        assertEquals(1 / (1 + Math.exp(-3.0)), head.prob(new float[] {5, 5, 1, 0}), 1e-9); // prior: sigmoid(6*1 - 3)
    }

    @Test
    public void callTimesCountStepsAndVerificationsNotPrefill() {
        Bigram target = new Bigram(50, 64, 1, null), drafter = new Bigram(50, 64, 2, null);
        assertTrue(Double.isNaN(target.oneToken.medianMs()) && CallTimes.summary(target, drafter).isEmpty());
        target.forward(List.of(1, 2, 3, 4), 0, 1); // prefill: not timed
        target.forward(List.of(5), 4, 1); // a step
        target.forward(List.of(6, 7, 8), 5, 3); // a verification
        target.forward(List.of(9, 10, 11), 8, 3);
        drafter.forward(List.of(1), 0, 1);
        assertEquals(1, target.oneToken.count());
        assertEquals(2, target.several.count());
        assertTrue(target.oneToken.medianMs() >= 0 && target.several.medianMs() >= 0);
        String s = CallTimes.summary(target, drafter);
        assertTrue(s, s.startsWith("target step ") && s.contains(", verify ") && s.contains(", drafter step ")
                && s.contains(" (c "));
        for (int i = 0; i < 300; i++) drafter.forward(List.of(1), 0, 1);
        assertEquals(256, drafter.oneToken.count()); // the most recent calls only
        assertEquals("target step", CallTimes.summary(target, null).substring(0, 11));
    }

    @Test
    public void crossVocabGreedyEqualsTargetOnly() throws Exception {
        Tokenizer dt = Golden.drafter(), tt = Golden.target();
        VocabBridge bridge = new VocabBridge(dt, tt);
        // the target favours, after each token, some token that has a draft twin...
        int[] favourite = new int[tt.size()];
        for (int t = 0; t < tt.size(); t++) {
            int d = (int) ((t * 7919L) % dt.size());
            while (bridge.draftToTarget[d] < 0) d = (d + 1) % dt.size();
            favourite[t] = bridge.draftToTarget[d];
        }
        Bigram target = new Bigram(tt.size(), 96, 1, favourite);
        // ...and the drafter knows it two times out of three
        int[] targetToDraft = new int[tt.size()];
        java.util.Arrays.fill(targetToDraft, -1);
        for (int d = 0; d < dt.size(); d++) if (bridge.draftToTarget[d] >= 0) targetToDraft[bridge.draftToTarget[d]] = d;
        int[] boost = new int[dt.size()];
        java.util.Arrays.fill(boost, -1);
        for (int d = 0; d < dt.size(); d++) {
            int t = bridge.draftToTarget[d];
            if (t >= 0 && d % 3 != 0) boost[d] = targetToDraft[favourite[t]];
        }
        for (String text : List.of("def add(a, b):", "Once upon a time, the café", "中文 tea 🍵")) {
            List<Integer> prompt = new ArrayList<>(List.of(2)); // Gemma's <bos>
            prompt.addAll(tt.encode(text));
            SpeculativeLoop.Result base = new SpeculativeLoop(target, null)
                    .generate(prompt, 20, new Sampler(0, 1), Math::random, Set.of());
            NGramCache cache = new NGramCache(20000, 8);
            for (DraftLength.Policy policy : List.of(DraftLength.Policy.FIXED, DraftLength.Policy.HEURISTIC)) {
                Bigram drafter = new Bigram(dt.size(), 192, 7, boost);
                DraftModel drafting = new DraftModel(drafter, bridge, List.of(), cache, new DraftLength(policy, 4, 6, 0.5), 2,
                        null, true, Golden.policy());
                SpeculativeLoop.Result got = new SpeculativeLoop(target, drafting).generate(prompt, 20, new Sampler(0, 1),
                        Math::random, Set.of());
                assertEquals(text + " " + policy, base.tokens, got.tokens);
                assertTrue(got.drafted > 0 && got.accepted <= got.drafted);
                assertTrue("the smart drafter is accepted sometimes", got.accepted > 0);
                assertTrue(got.targetCalls < base.targetCalls);
                // the training example spells the drafter's prompt and then exactly the committed text
                TrainingExample e = drafting.lastExample();
                byte[] spelled = dt.decodeBytes(e.ids);
                byte[] prompted = tt.decodeBytes(prompt.subList(1, prompt.size()));
                byte[] reply = tt.decodeBytes(got.tokens);
                assertEquals(new String(prompted, StandardCharsets.UTF_8) + new String(reply, StandardCharsets.UTF_8),
                        new String(spelled, StandardCharsets.UTF_8));
                assertEquals(e.ids.size() - dt.encodeBytes(prompted, true).size(), e.klPos.size() + e.nllPos.size());
            }
            assertTrue(new String(tt.decodeBytes(base.tokens), StandardCharsets.UTF_8).length() > 0);
        }
    }

    @Test
    public void headLabelsFollowTheReferenceConventions() {
        Proposal p = new Proposal(); // draft 0 direct, 1-2 merged, 3 split in two, 4 direct, 5 past a gap
        p.append(7, 1.0, Proposal.DIRECT, 0, 1, 0);
        p.append(8, 1.0, Proposal.NGRAM, 1, 3, 1);
        p.append(2, 1.0, Proposal.SPLIT_FIRST, 3, 3, 3);
        p.append(3, 1.0, Proposal.SPLIT_REST, 3, 4, 3);
        p.append(9, 1.0, Proposal.DIRECT, 4, 5, 4);
        double[] labels = OnlineHead.greedyLabels(p, choosing(7, 8, 2, 6, 9, 0), 6);
        assertEquals(List.of(1.0, 1.0, 1.0, 0.0, 1.0), List.of(labels[0], labels[1], labels[2], labels[3], labels[4]));
        assertTrue(Double.isNaN(labels[5]));
        labels = OnlineHead.greedyLabels(p, choosing(7, 1, 2, 3, 9, 0), 6);
        assertEquals(0.0, labels[1], 0);
        assertEquals(1.0, labels[2], 0);
    }

    private static float[][] choosing(int... tokens) {
        float[][] rows = new float[tokens.length][10];
        for (int i = 0; i < tokens.length; i++) rows[i][tokens[i]] = 5f;
        return rows;
    }

    @Test
    public void autoDraftLengthFollowsTheHeadAndTheHeadLearns() throws Exception {
        Tokenizer dt = Golden.drafter();
        VocabBridge identity = new VocabBridge(dt, dt);
        Bigram target = new Bigram(dt.size(), 128, 3, null);
        AcceptanceHead head = new AcceptanceHead(3);
        Bigram twin = new Bigram(dt.size(), 128, 3, null) { // a graph with a head: features (x, top1=0.9, 0)
            @Override
            protected float[][] run(List<Integer> input, int start, int nLogits) {
                lastHeadFeatures = new float[] {1f, 0.9f, 0f};
                lastAcceptProb = head.prob(lastHeadFeatures);
                return super.run(input, start, nLogits);
            }
        };
        OnlineHead online = new OnlineHead(head, 4096);
        DraftLength auto = new DraftLength(DraftLength.Policy.AUTO, 4, 8, 0.5);
        SpeculativeLoop loop = new SpeculativeLoop(target,
                new DraftModel(twin, identity, List.of(), null, auto, -1, online, false, Golden.policy()));
        List<Integer> prompt = dt.encode("User: how are you?");
        SpeculativeLoop.Result first = loop.generate(prompt, 30, new Sampler(0, 1), Math::random, Set.of());
        // prior P = sigmoid(6 * 0.9 - 3) = 0.917 per token: drafts run until 1 - P^k > 0.5, or to the cap
        double p = head.prob(new float[] {1f, 0.9f, 0f});
        int expected = 1;
        while (expected < 8 && 1 - Math.pow(p, expected) <= 0.5) expected++;
        assertEquals(expected * first.targetCalls, first.drafted, expected * 2); // last rounds may be cut by maxNew
        online.update(30, 0.03, 0.1); // every draft was accepted: the head grows more confident
        assertTrue(head.prob(new float[] {1f, 0.9f, 0f}) > p);
        assertEquals(1, online.updates);
    }

    @Test
    public void aTwinDrafterIsAlwaysAccepted() throws Exception {
        Tokenizer dt = Golden.drafter();
        VocabBridge identity = new VocabBridge(dt, dt);
        Bigram target = new Bigram(dt.size(), 96, 3, null);
        Bigram twin = new Bigram(dt.size(), 96, 3, null);
        List<Integer> prompt = dt.encode("User: how are you?");
        DraftModel drafting = new DraftModel(twin, identity, List.of(), null, new DraftLength(DraftLength.Policy.FIXED, 4, 4, 0.5),
                -1, null, false, Golden.policy());
        SpeculativeLoop.Result r = new SpeculativeLoop(target, drafting).generate(prompt, 25, new Sampler(0, 1), Math::random,
                Set.of());
        assertEquals(r.drafted, r.accepted);
        assertEquals(25, r.tokens.size());
        assertEquals(5.0, r.tokensPerTargetCall(), 0.01);
    }

    /** runner.py's rules: long inputs in chunks of maxTokensPerCall, at most maxLogitRows rows a call, a rollback
     *  deeper than a ring's slack forgets the cache, and a call that throws forgets what it may have written. */
    @Test
    public void chunksRowsRingsAndInterruptionsFollowTheReference() {
        List<int[]> calls = new java.util.ArrayList<>();
        int[] failAt = {-1};
        ModelRunner r = new ModelRunner(8, 100, 16, 4, 10) {
            @Override
            protected float[][] run(List<Integer> input, int start, int nLogits) {
                calls.add(new int[] {input.size(), start, nLogits});
                if (calls.size() == failAt[0]) throw new IllegalStateException("interrupted");
                float[][] out = new float[nLogits][8];
                for (int i = 0; i < nLogits; i++) out[i][0] = start + input.size() - nLogits + i; // its position
                return out;
            }
        };
        List<Integer> ids = new java.util.ArrayList<>();
        for (int i = 0; i < 40; i++) ids.add(i % 8);
        float[][] rows = r.forward(ids.subList(0, 37), 0, 6);
        assertEquals(6, rows.length);
        for (int i = 0; i < 6; i++) assertEquals(31 + i, rows[i][0], 0f); // the last six positions, in order
        assertEquals(List.of(16, 16, 4, 1), List.of(calls.get(0)[0], calls.get(1)[0], calls.get(2)[0], calls.get(3)[0]));
        r.rollback(27); // 9 below the highest position written (36): kept
        assertEquals(27, r.position());
        r.forward(ids.subList(27, 37), 27, 1);
        r.rollback(20); // 16 below: past the ring's slack of 10, everything is forgotten
        assertEquals(0, r.position());
        r.forward(ids.subList(0, 30), 0, 1);
        failAt[0] = calls.size() + 1;
        try {
            r.forward(ids.subList(30, 33), 30, 3);
            throw new AssertionError("no exception");
        } catch (IllegalStateException e) {
            assertEquals(30, r.position()); // what the failed call may have written is not claimed
        }
    }
}
