package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** Greedy and sampling verification decisions from given logits and given uniform draws. */
public class VerifyTest {
    @Test
    public void decisionsMatchThePythonReference() throws Exception {
        Map<String, Object> g = Golden.load("verify.json");
        int vocab = ((Number) g.get("vocab")).intValue();
        Tokenizer small = smallVocab(vocab);
        VocabBridge identity = new VocabBridge(small, small);
        int n = 0;
        for (Object o : Json.array(g.get("cases"))) {
            Map<String, Object> c = Json.object(o);
            Sampler sampler = new Sampler(((Number) c.get("temperature")).doubleValue(), ((Number) c.get("top_p")).doubleValue());
            List<Integer> draft = Golden.ints(c.get("draft"));
            float[][] draftLogits = Golden.matrix(c.get("draft_logits"));
            List<double[]> dists = new ArrayList<>();
            double[] q = new double[draft.size()];
            boolean sampled = Boolean.TRUE.equals(c.get("sampled_drafts"));
            for (int j = 0; j < draft.size(); j++) {
                double[] d = sampled ? sampler.probs(draftLogits[j]) : null;
                dists.add(d);
                q[j] = d == null ? 1.0 : d[draft.get(j)];
            }
            Proposal p = identity.propose(draft, q, null, draft.size());
            if (sampled) identity.attachDistributions(p, dists);
            List<Object> uniforms = Json.array(c.get("uniforms"));
            int[] used = {0};
            int[] got = Verifier.verify(p, Golden.matrix(c.get("target_logits")), sampler,
                    () -> ((Number) uniforms.get(used[0]++)).doubleValue(), ((Number) c.get("seed")).longValue(),
                    ((Number) c.get("start")).intValue());
            String what = "case " + n++ + " T=" + c.get("temperature");
            assertEquals(what, Arrays.asList(((Number) c.get("accepted")).intValue(), ((Number) c.get("next")).intValue()),
                    Arrays.asList(got[0], got[1]));
            assertEquals(what + " uniforms used", ((Number) c.get("uniforms_used")).intValue(), used[0]);
        }
    }

    /** A drafter with a draft head (bundle.json draft_head) leaves -inf logits outside its tokens. */
    @Test
    public void draftHeadLogitsNeverChooseAnUnscoredToken() {
        float inf = Float.NEGATIVE_INFINITY;
        float[] logits = {inf, 1.5f, inf, 0.2f, -3f, inf};
        assertEquals(1, Sampler.argmax(logits));
        for (double[] tp : new double[][] {{1.0, 1.0}, {0.7, 0.9}, {2.0, 1.0}}) {
            double[] p = new Sampler(tp[0], tp[1]).probs(logits);
            double sum = 0;
            for (int i = 0; i < p.length; i++) {
                if (Float.isInfinite(logits[i])) assertEquals(0.0, p[i], 0.0);
                sum += p[i];
            }
            assertEquals(1.0, sum, 1e-9);
            java.util.Random rng = new java.util.Random(7);
            for (int k = 0; k < 200; k++) assertTrue(!Float.isInfinite(logits[Sampler.sample(p, rng::nextDouble)]));
        }
    }

    /** The same toy vocabulary the reference used: token i spells chr(65 + i % 26) repeated. */
    static Tokenizer smallVocab(int size) {
        java.util.Map<String, Object> vocab = new java.util.LinkedHashMap<>();
        for (int i = 0; i < size; i++) vocab.put(String.valueOf((char) (65 + i % 26)).repeat(1 + i / 26), (long) i);
        java.util.Map<String, Object> model = new java.util.LinkedHashMap<>();
        model.put("type", "BPE");
        model.put("vocab", vocab);
        model.put("merges", new ArrayList<>());
        java.util.Map<String, Object> spec = new java.util.LinkedHashMap<>();
        spec.put("model", model);
        return new Tokenizer(spec);
    }
}
