package org.omnidraft.core;

import java.util.ArrayList;
import java.util.List;

/**
 * One generation as a LoRA training example for the bundle's drafter_train.pte
 * (omnidraft/adaptation/examples.py: Example.padded, padded_batch): the
 * drafter's prompt followed by every committed target token spelled in draft tokens. A token
 * spelled by its one directly mapped twin is a KL unit (the target's logits over the mapped
 * vocabulary are kept); a token spelled by several draft tokens is an NLL unit over them. Every
 * committed token is also a unit {first, last}: the positions whose logits predict its spelling
 * (what the adapter's guard scores, {@link #unitHits}).
 */
public final class TrainingExample {
    public final List<Integer> ids = new ArrayList<>();
    public final List<Integer> klPos = new ArrayList<>();
    public final List<float[]> klTarget = new ArrayList<>();
    public final List<Integer> nllPos = new ArrayList<>();
    public final List<int[]> units = new ArrayList<>();
    private final VocabBridge bridge;
    private final int[] mappedTargets; // the target twins of the mapped draft tokens, in draft-id order
    private boolean closed;

    public TrainingExample(VocabBridge bridge, List<Integer> draftPrompt) {
        this.bridge = bridge;
        this.mappedTargets = mappedTargets(bridge);
        ids.addAll(draftPrompt);
        closed = draftPrompt.isEmpty();
    }

    /** The mapping's size: the width of the training program's kl_target input. */
    public static int[] mappedTargets(VocabBridge bridge) {
        List<Integer> t = new ArrayList<>();
        for (int d = 0; d < bridge.draftToTarget.length; d++) if (bridge.draftToTarget[d] >= 0) t.add(bridge.draftToTarget[d]);
        int[] out = new int[t.size()];
        for (int i = 0; i < out.length; i++) out[i] = t.get(i);
        return out;
    }

    /** committed.get(j) was scored by targetLogits[j]. */
    public void add(List<Integer> committed, float[][] targetLogits) {
        for (int j = 0; j < committed.size(); j++) {
            if (closed) return;
            int t = committed.get(j);
            if (t >= bridge.target.size() || bridge.target.special[t]) { closed = true; return; } // end of text
            List<Integer> spelling = bridge.draft.encodeBytes(bridge.target.tokenBytes[t], true);
            if (spelling.isEmpty()) { closed = true; return; } // later positions would be misaligned
            int first = ids.size() - 1; // the logits here predict the spelling's first token
            if (spelling.size() == 1 && bridge.draftToTarget[spelling.get(0)] == t) {
                klPos.add(first);
                float[] row = new float[mappedTargets.length];
                for (int i = 0; i < row.length; i++) row[i] = targetLogits[j][mappedTargets[i]];
                klTarget.add(row);
            } else {
                for (int k = 0; k < spelling.size(); k++) nllPos.add(first + k);
            }
            units.add(new int[] {first, first + spelling.size() - 1});
            ids.addAll(spelling);
        }
    }

    /**
     * The prompt teaches too: an NLL row at every prompt position but the last (which predicts the first
     * committed token), for the prompt's next draft token (examples.py: Example.with_prompt_nll).
     */
    public void addPromptNll() {
        int first = units.isEmpty() ? ids.size() - 1 : units.get(0)[0];
        java.util.TreeSet<Integer> all = new java.util.TreeSet<>(nllPos);
        for (int p = 0; p < first; p++) all.add(p);
        nllPos.clear();
        nllPos.addAll(all);
    }

    public boolean isEmpty() {
        return klPos.isEmpty() && nllPos.isEmpty();
    }

    /** The last `window` draft tokens (what a training window and the guard see). */
    public List<Integer> lastIds(int window) {
        return new ArrayList<>(ids.subList(Math.max(0, ids.size() - window), ids.size()));
    }

    /** The units inside the last `window` tokens, positions shifted (units the cut reaches are dropped). */
    public List<int[]> lastUnits(int window) {
        int cut = Math.max(0, ids.size() - window);
        List<int[]> out = new ArrayList<>();
        for (int[] u : units) if (u[0] >= cut) out.add(new int[] {u[0] - cut, u[1] - cut});
        return out;
    }

    /**
     * How many units the drafter's greedy choices reproduce in full (choice[i]: its argmax after ids[0..i]):
     * the greedy acceptance of one round, teacher-forced (omnidraft/adaptation/examples.py: unit_hits).
     */
    public static int unitHits(List<Integer> ids, List<int[]> units, int[] choice) {
        int hits = 0;
        for (int[] u : units) {
            boolean all = true;
            for (int i = u[0]; i <= u[1] && all; i++) all = choice[i] == ids.get(i + 1);
            if (all) hits++;
        }
        return hits;
    }

    /** The training program's inputs for the last `window` tokens, padded with zero weights. */
    public static final class Window {
        public final long[] ids, klRows, nllRows, nllLabels;
        public final float[] klTarget, klWeight, nllWeight;
        public final int window, mapped;

        public Window(int window, int mapped) {
            this.window = window;
            this.mapped = mapped;
            ids = new long[window];
            klRows = new long[window];
            nllRows = new long[window];
            nllLabels = new long[window];
            klTarget = new float[window * mapped];
            klWeight = new float[window];
            nllWeight = new float[window];
        }
    }

    public Window window(int window) {
        int cut = Math.max(0, ids.size() - window);
        Window w = new Window(window, mappedTargets.length);
        for (int i = cut; i < ids.size(); i++) w.ids[i - cut] = ids.get(i);
        int k = 0;
        for (int i = 0; i < klPos.size(); i++) {
            if (klPos.get(i) < cut) continue;
            w.klRows[k] = klPos.get(i) - cut;
            w.klWeight[k] = 1f;
            System.arraycopy(klTarget.get(i), 0, w.klTarget, k * w.mapped, w.mapped);
            k++;
        }
        k = 0;
        for (int pos : nllPos) {
            if (pos < cut) continue;
            w.nllRows[k] = pos - cut;
            w.nllLabels[k] = ids.get(pos + 1);
            w.nllWeight[k] = 1f;
            k++;
        }
        return w;
    }
}
