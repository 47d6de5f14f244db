package org.omnidraft.core;

import static org.junit.Assert.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** A LoRA training example and its padded window, as the Python reference builds them. */
public class TrainingExampleTest {
    @Test
    public void exampleAndWindowMatch() throws Exception {
        Map<String, Object> g = Golden.load("training.json");
        VocabBridge bridge = new VocabBridge(Golden.drafter(), Golden.target());
        int mapped = ((Number) g.get("mapped")).intValue();
        assertEquals(mapped, TrainingExample.mappedTargets(bridge).length);
        List<Integer> committed = Golden.ints(g.get("committed"));
        float[][] rows = new float[committed.size()][bridge.target.size()];
        for (int j = 0; j < rows.length; j++) {
            for (int v = 0; v < rows[j].length; v++) rows[j][v] = (float) Math.sin(0.37 * j + 0.0011 * v);
        }
        TrainingExample e = new TrainingExample(bridge, Golden.ints(g.get("prompt")));
        e.add(committed, rows);
        assertEquals(Golden.ints(g.get("example_ids")), e.ids);
        assertEquals(Golden.ints(g.get("kl_pos")), e.klPos);
        assertEquals(Golden.ints(g.get("nll_pos")), e.nllPos);
        TrainingExample.Window w = e.window(((Number) g.get("window")).intValue());
        assertEquals(Golden.ints(g.get("ids")), longs(w.ids));
        assertEquals(Golden.ints(g.get("kl_rows")), longs(w.klRows));
        assertEquals(Golden.ints(g.get("nll_rows")), longs(w.nllRows));
        assertEquals(Golden.ints(g.get("nll_labels")), longs(w.nllLabels));
        assertEquals(Golden.ints(g.get("kl_weight")), floats(w.klWeight));
        assertEquals(Golden.ints(g.get("nll_weight")), floats(w.nllWeight));
        List<Object> head = Json.array(g.get("kl_target_head"));
        double sum = 0;
        for (float x : w.klTarget) sum += x;
        // the reference keeps target rows in fp16: agree to fp16 precision
        assertEquals(((Number) g.get("kl_target_sum")).doubleValue(), sum, 1e-3 * Math.max(1, w.klTarget.length / 100.0));
        for (int r = 0; r < head.size(); r++) {
            List<Object> row = Json.array(head.get(r));
            for (int c = 0; c < row.size(); c++) assertEquals(((Number) row.get(c)).doubleValue(), w.klTarget[r * mapped + c], 1e-3);
        }
    }

    private static List<Integer> longs(long[] a) {
        List<Integer> out = new ArrayList<>();
        for (long x : a) out.add((int) x);
        return out;
    }

    private static List<Integer> floats(float[] a) {
        List<Integer> out = new ArrayList<>();
        for (float x : a) out.add((int) x);
        return out;
    }
}
