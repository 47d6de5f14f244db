package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;

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
        TrainingExample e = example(g);
        assertEquals(Golden.ints(g.get("example_ids")), e.ids);
        assertEquals(Golden.ints(g.get("kl_pos")), e.klPos);
        assertEquals(Golden.ints(g.get("nll_pos")), e.nllPos);
        assertEquals(Json.array(g.get("units")).size(), e.units.size());
        for (int i = 0; i < e.units.size(); i++) assertEquals(Golden.ints(Json.array(g.get("units")).get(i)), ints(e.units.get(i)));
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

    /** The guard's view of a held-out example: its last tokens, the units inside them, and their greedy hits. */
    @Test
    public void guardScoresUnitsAsPythonDoes() throws Exception {
        Map<String, Object> g = Golden.load("training.json");
        Map<String, Object> guard = Json.object(g.get("guard"));
        TrainingExample e = example(g);
        int window = ((Number) guard.get("window")).intValue();
        List<Integer> ids = e.lastIds(window);
        List<int[]> units = e.lastUnits(window);
        assertEquals(window, ids.size());
        List<Object> want = Json.array(guard.get("units"));
        assertEquals(want.size(), units.size());
        for (int i = 0; i < units.size(); i++) assertEquals(Golden.ints(want.get(i)), ints(units.get(i)));
        int[] choice = Golden.ints(guard.get("choice")).stream().mapToInt(Integer::intValue).toArray();
        int hits = ((Number) guard.get("hits")).intValue();
        assertEquals(hits, TrainingExample.unitHits(ids, units, choice));

        // The schedule's guard reads the same choices from a drafter, a few tokens per call.
        OnlineSchedule schedule = new OnlineSchedule(Golden.policy(), 2, window);
        assertFalse(schedule.add(e)); // the 1st example is held out
        assertEquals(1, schedule.heldOut().size());
        ModelRunner drafter = new ModelRunner(Golden.drafter().size(), 64) {
            @Override
            protected float[][] run(List<Integer> input, int start, int nLogits) {
                float[][] rows = new float[nLogits][vocabSize];
                for (int r = 0; r < nLogits; r++) rows[r][choice[start + input.size() - nLogits + r]] = 1f;
                return rows;
            }
        };
        assertEquals((double) hits / units.size(), schedule.acceptance(drafter, 5), 1e-12);
        assertEquals(0, drafter.position()); // the cache is left empty
    }

    /** AdaptConfig's defaults: the 1st, 6th, 11th... example held out; an update every 4 examples. */
    @Test
    public void scheduleHoldsOutAndUpdatesAsTheAdapterDoes() throws Exception {
        Map<String, Object> g = Golden.load("training.json");
        OnlineSchedule schedule = new OnlineSchedule(Golden.policy(), 2, 48);
        List<Integer> due = new ArrayList<>();
        for (int i = 1; i <= 12; i++) if (schedule.add(example(g))) due.add(i);
        assertEquals(List.of(4, 8, 12), due);
        assertEquals(3, schedule.heldOut().size()); // examples 1, 6, 11
        assertEquals(Golden.policy().steps, schedule.batches().size());
        assertFalse(schedule.add(new TrainingExample(new VocabBridge(Golden.drafter(), Golden.target()), List.of())));
    }

    /** The schedule's constants and pure parts equal Python's (AdaptConfig, replay_batches, guard_keeps, lr_at). */
    @Test
    public void scheduleDefaultsAndPiecesMatchPython() throws Exception {
        Map<String, Object> s = Json.object(Golden.load("training.json").get("schedule"));
        Map<String, Object> d = Json.object(s.get("defaults"));
        Policy p = Golden.policy(); // the bundle's policy section carries AdaptConfig's defaults
        assertEquals(p.every, num(d.get("every")), 0);
        assertEquals(p.holdoutEvery, num(d.get("holdout_every")), 0);
        assertEquals(p.holdout, num(d.get("holdout")), 0);
        assertEquals(p.buffer, num(d.get("buffer")), 0);
        assertEquals(p.steps, num(d.get("steps")), 0);
        assertEquals(p.replay, num(d.get("replay")), 0);
        assertEquals(p.warmup, num(d.get("warmup")), 0);
        assertEquals(p.adaptLr, num(d.get("lr")), 0);
        assertEquals(p.guardMargin, num(d.get("guard_margin")), 0);
        assertEquals(Boolean.TRUE, d.get("prompt_nll"));
        assertEquals(Boolean.TRUE, d.get("guard_base"));
        for (Object o : Json.array(s.get("batches"))) {
            Map<String, Object> c = Json.object(o);
            List<Object> a = Json.array(c.get("args"));
            List<int[]> got = OnlineSchedule.replayBatches((int) num(a.get(0)), (int) num(a.get(1)), (int) num(a.get(2)),
                    (int) num(a.get(3)));
            List<Object> want = Json.array(c.get("batches"));
            assertEquals(want.size(), got.size());
            for (int i = 0; i < got.size(); i++) assertEquals(Golden.ints(want.get(i)), ints(got.get(i)));
        }
        for (Object o : Json.array(s.get("guards"))) {
            Map<String, Object> c = Json.object(o);
            List<Object> a = Json.array(c.get("args"));
            assertEquals(c.get("keeps"), OnlineSchedule.guardKeeps(num(a.get(0)), num(a.get(1)), (int) num(a.get(2)),
                    num(a.get(3))));
        }
        for (Object o : Json.array(s.get("lrs"))) {
            Map<String, Object> c = Json.object(o);
            List<Object> a = Json.array(c.get("args"));
            assertEquals(num(c.get("lr")), OnlineSchedule.lrAt(num(a.get(0)), (int) num(a.get(1)), (int) num(a.get(2))), 1e-15);
        }
    }

    /** The prompt teaches too: its positions' NLL rows in the padded window, as Python pads them. */
    @Test
    public void promptNllRowsMatchPython() throws Exception {
        Map<String, Object> g = Golden.load("training.json");
        Map<String, Object> p = Json.object(g.get("prompt_nll"));
        TrainingExample e = example(g);
        e.addPromptNll();
        TrainingExample.Window w = e.window(((Number) g.get("window")).intValue());
        assertEquals(Golden.ints(p.get("nll_rows")), longs(w.nllRows));
        assertEquals(Golden.ints(p.get("nll_labels")), longs(w.nllLabels));
        assertEquals(Golden.ints(p.get("nll_weight")), floats(w.nllWeight));
    }

    private static double num(Object o) {
        return ((Number) o).doubleValue();
    }

    private static TrainingExample example(Map<String, Object> g) throws Exception {
        VocabBridge bridge = new VocabBridge(Golden.drafter(), Golden.target());
        List<Integer> committed = Golden.ints(g.get("committed"));
        float[][] rows = new float[committed.size()][bridge.target.size()];
        for (int j = 0; j < rows.length; j++) {
            for (int v = 0; v < rows[j].length; v++) rows[j][v] = (float) Math.sin(0.37 * j + 0.0011 * v);
        }
        TrainingExample e = new TrainingExample(bridge, Golden.ints(g.get("prompt")));
        e.add(committed, rows);
        return e;
    }

    private static List<Integer> ints(int[] a) {
        List<Integer> out = new ArrayList<>();
        for (int x : a) out.add(x);
        return out;
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
