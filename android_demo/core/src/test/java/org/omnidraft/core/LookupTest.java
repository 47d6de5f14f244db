package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.Test;

/** Lookup (index, walk, scorer, prefix choice) against golden vectors from Python on the real target tokenizer. */
public class LookupTest {
    @Test
    public void historyContinuationsScorerAndPrefixMatchPython() throws Exception {
        Map<String, Object> g = Golden.load("lookup.json");
        Lookup lookup = new Lookup(((Number) g.get("max_tokens")).intValue(), Golden.policy());
        for (Object o : Json.array(g.get("ops"))) {
            Map<String, Object> op = Json.object(o);
            lookup.add(Golden.ints(op.get("tokens")), (Boolean) op.get("extend"));
            List<Object> kept = Json.array(op.get("kept"));
            assertEquals(kept.size(), lookup.docs().size());
            for (int i = 0; i < kept.size(); i++) assertEquals(Golden.ints(kept.get(i)), ints(lookup.docs().get(i)));
        }
        LookupScorer scorer = new LookupScorer(Golden.policy());
        int cases = 0;
        boolean newGeneration = false;
        for (Object o : Json.array(g.get("queries"))) {
            Map<String, Object> q = Json.object(o);
            if (newGeneration) scorer.begin(); // the previous query ended a generation: its offset starts afresh
            newGeneration = q.containsKey("begin_after");
            List<Integer> seq = Golden.ints(q.get("seq"));
            int budget = ((Number) q.get("budget")).intValue();
            Lookup.Candidates c = lookup.find(seq, budget, (Boolean) q.get("history"));
            String what = seq + " budget " + budget;
            assertEquals(what, Golden.ints(q.get("tokens")), c.tokens);
            assertEquals(what, Golden.ints(q.get("support")), c.support);
            assertEquals(what, ((Number) q.get("match")).intValue(), c.match);
            assertEquals(what, q.get("source"), c.source);
            List<Object> freq = Json.array(q.get("frequency"));
            for (int j = 0; j < freq.size(); j++) assertEquals(((Number) freq.get(j)).doubleValue(), c.frequency.get(j), 1e-12);
            if (c.size() == 0) continue;
            double[][] x = scorer.features(c);
            double[] probs = scorer.probs(x);
            List<Object> want = Json.array(q.get("probs"));
            for (int j = 0; j < probs.length; j++) assertEquals(what, ((Number) want.get(j)).doubleValue(), probs[j], 1e-9);
            List<Object> labels = Json.array(q.get("labels"));
            double[] y = new double[labels.size()];
            for (int j = 0; j < y.length; j++) y[j] = ((Number) labels.get(j)).doubleValue();
            scorer.learn(x, y);
            List<Object> w = Json.array(q.get("weights_after"));
            for (int i = 0; i < w.size(); i++) assertEquals(((Number) w.get(i)).doubleValue(), scorer.weights[i], 1e-9);
            assertEquals(((Number) q.get("offset_after")).doubleValue(), scorer.offset, 1e-9);
            Map<String, Object> bp = Json.object(q.get("best_prefix"));
            double a = ((Number) bp.get("a")).doubleValue(), b = ((Number) bp.get("b")).doubleValue();
            double[] best = Hybrid.best(probs, n -> a + b * (n - 1), null, 0);
            assertEquals(((Number) bp.get("m")).intValue(), (int) best[2]);
            assertEquals(((Number) bp.get("value")).doubleValue(), best[0], 1e-9);
            cases++;
        }
        assertTrue(cases >= 10);
    }

    /** A target that loops over a short cycle: text that repeats itself, as lookup likes. */
    private static LoopTest.Bigram cyclingTarget(Tokenizer tt) {
        int[] next = new int[tt.size()];
        for (int t = 0; t < tt.size(); t++) next[t] = 1000 + (t * 31) % 7;
        return new LoopTest.Bigram(tt.size(), 128, 1, next);
    }

    private static List<Integer> repeatingPrompt(Tokenizer tt) {
        List<Integer> prompt = new ArrayList<>(List.of(2));
        prompt.addAll(tt.encode("one two three one two three one two"));
        return prompt;
    }

    @Test
    public void greedyWithLookupEqualsTargetOnlyAndLookupIsAccepted() throws Exception {
        Tokenizer dt = Golden.drafter(), tt = Golden.target();
        VocabBridge bridge = new VocabBridge(dt, tt);
        LoopTest.Bigram target = cyclingTarget(tt);
        List<Integer> prompt = repeatingPrompt(tt);
        SpeculativeLoop.Result base = new SpeculativeLoop(target, null).generate(prompt, 40, new Sampler(0, 1), Math::random,
                Set.of());
        Policy policy = Golden.policy();
        for (boolean withDrafter : new boolean[] {false, true}) {
            DraftModel drafting = !withDrafter ? null : new DraftModel(new LoopTest.Bigram(dt.size(), 256, 7, null), bridge,
                    List.of(), new NGramCache(20000, 8), new DraftLength(DraftLength.Policy.FIXED, 3, 3, 0.5), 2, null, false,
                    policy);
            Lookup history = new Lookup(100000, policy);
            // pinned costs (the test's bigram model costs the same per token at any length, unlike a real graph)
            SpeculativeLoop loop = new SpeculativeLoop(target, new HybridProposer(
                    new LookupProposer(history, new LookupScorer(policy), true, policy), drafting,
                    Hybrid.fixedCosts(policy, 1.0, 0.01, withDrafter ? 0.05 : 100.0)));
            for (int run = 0; run < 2; run++) { // the second run also finds the first in the history
                SpeculativeLoop.Result got = loop.generate(prompt, 40, new Sampler(0, 1), Math::random, Set.of());
                assertEquals(base.tokens, got.tokens);
                assertTrue("lookup proposed and was accepted", got.lookupAccepted > 0);
                assertTrue(got.targetCalls < base.targetCalls);
            }
            assertEquals(2, history.docs().size()); // one document per generation (not a longer chat)
        }
    }

    @Test
    public void chainsOfLookupAndTheDrafterStayExact() throws Exception {
        Tokenizer dt = Golden.drafter(), tt = Golden.target();
        VocabBridge bridge = new VocabBridge(dt, tt);
        LoopTest.Bigram target = cyclingTarget(tt);
        List<Integer> prompt = repeatingPrompt(tt);
        DraftLength fixed = new DraftLength(DraftLength.Policy.FIXED, 2, 2, 0.5);
        SpeculativeLoop.Result base = new SpeculativeLoop(target, null).generate(prompt, 40, new Sampler(0, 1), Math::random,
                Set.of());
        Policy policy = Golden.policy();
        DraftModel drafting = new DraftModel(new LoopTest.Bigram(dt.size(), 256, 7, null), bridge, List.of(),
                new NGramCache(20000, 8), fixed, 2, null, false, policy);
        LookupProposer lookup = new LookupProposer(new Lookup(100000, policy), new LookupScorer(policy), false, policy);
        SpeculativeLoop loop = new SpeculativeLoop(target, new HybridProposer(lookup, drafting,
                Hybrid.fixedCosts(policy, 1.0, 0.0005, 0.001))); // verifying and drafting nearly free
        SpeculativeLoop.Result got = loop.generate(prompt, 40, new Sampler(0, 1), Math::random, Set.of());
        assertEquals(base.tokens, got.tokens);
        assertTrue("the drafter continued lookup prefixes", got.chainRounds > 0);
    }

    private static List<Integer> ints(int[] a) {
        List<Integer> out = new ArrayList<>();
        for (int x : a) out.add(x);
        return out;
    }
}
