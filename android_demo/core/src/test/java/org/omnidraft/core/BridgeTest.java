package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The n-gram cache and the vocabulary bridge of the real pair against the Python reference. */
public class BridgeTest {
    @Test
    public void cacheOperationsMatch() throws Exception {
        Map<String, Object> g = Golden.load("ngram_cache.json");
        NGramCache cache = new NGramCache(((Number) g.get("max_entries")).intValue(), ((Number) g.get("max_ngram")).intValue());
        int step = 0;
        for (Object o : Json.array(g.get("ops"))) {
            Map<String, Object> op = Json.object(o);
            String what = "op " + step++ + " " + op.get("op");
            switch ((String) op.get("op")) {
                case "add":
                    cache.add(((Number) op.get("target")).intValue(), Golden.ints(op.get("ngram")));
                    assertEquals(what, ((Number) op.get("size")).intValue(), cache.size());
                    break;
                case "lookup":
                    int[] hit = cache.lookup(Golden.ints(op.get("draft")), ((Number) op.get("start")).intValue());
                    if (op.get("hit") == null) assertNull(what, hit);
                    else assertEquals(what, Golden.ints(op.get("hit")), List.of(hit[0], hit[1]));
                    break;
                default:
                    cache.recordAccepted(Golden.ints(op.get("ngram")));
            }
        }
        assertEquals(asLists(Json.array(g.get("final"))), items(cache));
    }

    @Test
    public void proposalsOfTheRealPairMatch() throws Exception {
        List<Object> targetCases = Json.array(Json.object(Golden.load("tokenizers.json").get("target")).get("cases"));
        check(Golden.load("bridge.json"), targetCases, Golden.drafter(), Golden.target());
    }

    /** A bridge against its golden vectors; the cache learns the target spellings of the first 6 cases. */
    static void check(Map<String, Object> g, List<Object> targetCases, Tokenizer drafter, Tokenizer target) {
        VocabBridge bridge = new VocabBridge(drafter, target);
        assertEquals(((Number) g.get("intersection")).intValue(), bridge.intersectionSize());
        for (Object o : Json.array(g.get("direct_sample"))) {
            List<Integer> pair = Golden.ints(o);
            assertEquals((int) pair.get(1), bridge.draftToTarget[pair.get(0)]);
        }
        NGramCache cache = new NGramCache(20000, 8);
        for (int i = 0; i < 6; i++) bridge.learn(cache, Golden.ints(Json.object(targetCases.get(i)).get("spelled")));
        assertEquals(asLists(Json.array(g.get("cache"))), items(cache));
        // the same cache as the Python runtime saves it (what a bundle ships as ngram_cache.json)
        NGramCache saved = NGramCache.fromJson(Json.object(g.get("cache_file")), (String) g.get("pair_id"));
        assertEquals(items(cache), items(saved));
        for (Object o : Json.array(g.get("cases"))) {
            Map<String, Object> c = Json.object(o);
            List<Integer> draft = Golden.ints(c.get("draft"));
            double[] q = new double[draft.size()];
            for (int i = 0; i < q.length; i++) q[i] = 0.9 - 0.8 * i / Math.max(1, q.length - 1);
            if (q.length == 1) q[0] = 0.9;
            Proposal p = bridge.propose(draft, q, Boolean.TRUE.equals(c.get("use_cache")) ? cache : null, 12);
            String what = "draft " + draft;
            assertEquals(what, Golden.ints(c.get("target_ids")), p.targetIds);
            assertEquals(what, Json.array(c.get("kind")), new ArrayList<Object>(p.kind));
            assertEquals(what, Golden.ints(c.get("draft_start")), p.draftStart);
            assertEquals(what, Golden.ints(c.get("draft_end")), p.draftEnd);
            List<Object> wantQ = Json.array(c.get("q"));
            for (int j = 0; j < wantQ.size(); j++) assertEquals(what, ((Number) wantQ.get(j)).doubleValue(), p.q.get(j), 1e-12);
        }
    }

    private static List<List<Object>> asLists(List<Object> rows) {
        List<List<Object>> out = new ArrayList<>();
        for (Object r : rows) {
            List<Object> row = Json.array(r);
            out.add(List.of(Golden.ints(row.get(0)), ((Number) row.get(1)).intValue(), ((Number) row.get(2)).intValue()));
        }
        return out;
    }

    private static List<List<Object>> items(NGramCache cache) {
        List<List<Object>> out = new ArrayList<>();
        for (Object[] e : cache.items()) out.add(List.of(e[0], e[1], e[2]));
        return out;
    }
}
