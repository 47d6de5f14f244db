package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.DoubleSupplier;
import org.junit.Test;

/**
 * The golden round trace: Python's hybrid with pinned costs on small runners decides each round (lookup prefix,
 * drafter tokens); the Java proposers, on the same runners, decide every round the same way.
 */
public class RoundTraceTest {
    /** The hybrid, each round written down: {lookup prefix, drafter tokens, accepted, the target's token}. */
    static final class Recorder implements Proposer {
        final Proposer inner;
        final List<List<Integer>> rounds = new ArrayList<>();

        Recorder(Proposer inner) {
            this.inner = inner;
        }

        @Override
        public void begin(List<Integer> seq, Sampler sampler, DoubleSupplier rng) {
            inner.begin(seq, sampler, rng);
        }

        @Override
        public Proposal propose(List<Integer> seq, int budget, Proposal after) {
            return inner.propose(seq, budget, after);
        }

        @Override
        public void observe(List<Integer> seq, Round round) {
            int lookup = round.proposal.lookupPrefix();
            rounds.add(List.of(lookup, round.proposal.size() - lookup, round.accepted, round.next));
            inner.observe(seq, round);
        }

        @Override
        public void end() {
            inner.end();
        }
    }

    @Test
    public void everyRoundIsDecidedAsInPython() throws Exception {
        Map<String, Object> g = Golden.load("round_trace.json");
        Tokenizer dt = Golden.drafter(), tt = Golden.target();
        assertEquals(((Number) g.get("target_vocab")).intValue(), tt.size());
        assertEquals(((Number) g.get("drafter_vocab")).intValue(), dt.size());
        int[] favourite = Golden.ints(g.get("favourite")).stream().mapToInt(Integer::intValue).toArray();
        int[] boost = Golden.ints(g.get("boost")).stream().mapToInt(Integer::intValue).toArray();
        Policy policy = Golden.policy();
        VocabBridge bridge = new VocabBridge(dt, tt);
        Recorder recorder = null;
        List<Object> lastCosts = null;
        int chains = 0, lookups = 0, drafts = 0;
        for (Object o : Json.array(g.get("runs"))) {
            Map<String, Object> run = Json.object(o);
            List<Object> costs = Json.array(run.get("costs"));
            if (!costs.equals(lastCosts)) { // a new pair of runners and proposers; a second prompt continues on them
                lastCosts = costs;
                DraftModel drafting = new DraftModel(new LoopTest.Bigram(dt.size(), 512, 7, boost), bridge,
                        Golden.ints(g.get("draft_prefix")), new NGramCache(20000, 8),
                        new DraftLength(DraftLength.Policy.FIXED, 3, 3, 0.5), 2, null, false, policy);
                LookupProposer lookup = new LookupProposer(new Lookup(0, policy), new LookupScorer(policy), false, policy);
                Hybrid hybrid = Hybrid.fixedCosts(policy, num(costs.get(0)), num(costs.get(1)), num(costs.get(2)));
                recorder = new Recorder(new HybridProposer(lookup, drafting, hybrid));
                target = new LoopTest.Bigram(tt.size(), 256, 1, favourite);
            }
            recorder.rounds.clear();
            SpeculativeLoop.Result r = new SpeculativeLoop(target, recorder)
                    .generate(Golden.ints(run.get("prompt")), 40, new Sampler(0, 1), Math::random, Set.of());
            List<Object> want = Json.array(run.get("rounds"));
            for (int i = 0; i < want.size(); i++) {
                assertEquals("costs " + costs + ", round " + i, Golden.ints(want.get(i)), recorder.rounds.get(i));
            }
            assertEquals(want.size(), recorder.rounds.size());
            assertEquals(Golden.ints(run.get("tokens")), r.tokens);
            assertEquals(Json.array(run.get("sources")), new java.util.ArrayList<Object>(r.sources)); // who proposed each
            chains += r.chainRounds;
            lookups += r.lookupAccepted;
            drafts += r.accepted - r.lookupAccepted;
        }
        assertTrue("the trace has chains, lookup and drafter rounds", chains > 0 && lookups > 0 && drafts > 0);
    }

    private LoopTest.Bigram target;

    private static double num(Object o) {
        return ((Number) o).doubleValue();
    }
}
