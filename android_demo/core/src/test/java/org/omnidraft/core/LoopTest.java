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
            SpeculativeLoop.Result base = new SpeculativeLoop(target, null, bridge, List.of(), null)
                    .generate(prompt, 20, new DraftLength(DraftLength.Policy.FIXED, 1, 1, 0.5), new Sampler(0, 1), Math::random, Set.of(), 2);
            NGramCache cache = new NGramCache(20000, 8);
            for (DraftLength.Policy policy : List.of(DraftLength.Policy.FIXED, DraftLength.Policy.HEURISTIC)) {
                Bigram drafter = new Bigram(dt.size(), 192, 7, boost);
                SpeculativeLoop loop = new SpeculativeLoop(target, drafter, bridge, List.of(), cache);
                SpeculativeLoop.Result got = loop.generate(prompt, 20, new DraftLength(policy, 4, 6, 0.5), new Sampler(0, 1),
                        Math::random, Set.of(), 2);
                assertEquals(text + " " + policy, base.tokens, got.tokens);
                assertTrue(got.drafted > 0 && got.accepted <= got.drafted);
                assertTrue("the smart drafter is accepted sometimes", got.accepted > 0);
                assertTrue(got.targetCalls < base.targetCalls);
            }
            assertTrue(new String(tt.decodeBytes(base.tokens), StandardCharsets.UTF_8).length() > 0);
        }
    }

    @Test
    public void aTwinDrafterIsAlwaysAccepted() throws Exception {
        Tokenizer dt = Golden.drafter();
        VocabBridge identity = new VocabBridge(dt, dt);
        Bigram target = new Bigram(dt.size(), 96, 3, null);
        Bigram twin = new Bigram(dt.size(), 96, 3, null);
        List<Integer> prompt = dt.encode("User: how are you?");
        SpeculativeLoop.Result r = new SpeculativeLoop(target, twin, identity, List.of(), null)
                .generate(prompt, 25, new DraftLength(DraftLength.Policy.FIXED, 4, 4, 0.5), new Sampler(0, 1), Math::random, Set.of(), -1);
        assertEquals(r.drafted, r.accepted);
        assertEquals(25, r.tokens.size());
        assertEquals(5.0, r.tokensPerTargetCall(), 0.01);
    }
}
