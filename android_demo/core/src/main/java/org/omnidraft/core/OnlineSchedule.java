package org.omnidraft.core;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * When the on-device adapter updates, what it trains on and what its guard scores
 * (omnidraft/adaptation/online.py's OnlineAdapter with AdaptConfig's defaults, checked against golden
 * vectors; the numbers are the bundle's policy): every holdoutEvery-th example (the 1st, 6th, ...) is held out,
 * the others are buffered (their prompts teach too); every `every` examples an update takes `steps` steps,
 * batch by batch through the newest `replay` buffered examples, newest first, the learning rate ramped up over
 * the first `warmup` steps. The guard measures the drafter's greedy acceptance on the held-out examples after
 * the update and without its adapter; an update that leaves it more than guardMargin standard errors below is
 * rolled back by the caller.
 */
public final class OnlineSchedule {
    public final Policy policy;
    private final ArrayDeque<TrainingExample> buffer = new ArrayDeque<>(), heldOut = new ArrayDeque<>();
    private int examples, sinceUpdate;
    public final int batch, window;

    /** `batch`: examples per step; `window`: draft tokens per example (the training program's). */
    public OnlineSchedule(Policy policy, int batch, int window) {
        if (batch < 1 || window < 2) throw new IllegalArgumentException("batch >= 1 and window >= 2 needed");
        this.policy = policy;
        this.batch = batch;
        this.window = window;
    }

    /** Add a finished generation's example; true when an update is due now. */
    public boolean add(TrainingExample e) {
        if (e.isEmpty()) return false;
        e.addPromptNll();
        ArrayDeque<TrainingExample> to = examples % policy.holdoutEvery == 0 ? heldOut : buffer;
        to.addLast(e);
        if (to.size() > (to == heldOut ? policy.holdout : policy.buffer)) to.removeFirst();
        examples++;
        if (++sinceUpdate < policy.every || buffer.isEmpty()) return false;
        sinceUpdate = 0;
        return true;
    }

    /** An update's `steps` batches, as buffer indices (oldest 0): online.py's replay_batches. */
    public static List<int[]> replayBatches(int buffered, int batch, int steps, int replay) {
        List<Integer> newest = new ArrayList<>();
        for (int i = buffered - 1; i >= Math.max(buffered - Math.max(replay, batch), 0); i--) newest.add(i);
        List<int[]> chunks = new ArrayList<>();
        for (int i = 0; i < newest.size(); i += batch) {
            List<Integer> c = newest.subList(i, Math.min(newest.size(), i + batch));
            int[] chunk = new int[c.size()];
            for (int j = 0; j < chunk.length; j++) chunk[j] = c.get(c.size() - 1 - j); // oldest first
            chunks.add(chunk);
        }
        List<int[]> out = new ArrayList<>();
        for (int k = 0; k < steps && !chunks.isEmpty(); k++) out.add(chunks.get(k % chunks.size()));
        return out;
    }

    /** The update's batches of buffered examples. */
    public List<List<TrainingExample>> batches() {
        List<TrainingExample> all = new ArrayList<>(buffer);
        List<List<TrainingExample>> out = new ArrayList<>();
        for (int[] b : replayBatches(all.size(), batch, policy.steps, policy.replay)) {
            List<TrainingExample> step = new ArrayList<>();
            for (int i : b) step.add(all.get(i));
            out.add(step);
        }
        return out;
    }

    /** The learning rate of the step after `done` steps (update_rule.py: lr_at). */
    public static double lrAt(double lr, int done, int warmup) {
        return lr * Math.min(1.0, (done + 1) / (double) Math.max(warmup, 1));
    }

    /** online.py's guard_keeps: keep unless `after` fell below `floor` by more than `margin` standard errors. */
    public static boolean guardKeeps(double after, double floor, int units, double margin) {
        double noise = Math.sqrt(Math.max(floor * (1 - floor), 1e-6) / Math.max(units, 1));
        return after >= floor - margin * noise;
    }

    /** Held-out tokens the guard scores (its estimate's sample size). */
    public int heldOutUnits() {
        int n = 0;
        for (TrainingExample e : heldOut) n += e.lastUnits(window).size();
        return n;
    }

    public List<TrainingExample> heldOut() {
        return new ArrayList<>(heldOut);
    }

    /**
     * The drafter's greedy acceptance on the held-out examples (NaN when none is held out): each
     * example's last `window` tokens are run from position 0, `chunk` tokens per call; the drafter's
     * cache is emptied before and after.
     */
    public double acceptance(ModelRunner drafter, int chunk) {
        int hits = 0, total = 0;
        for (TrainingExample e : heldOut) {
            List<Integer> ids = e.lastIds(window);
            List<int[]> units = e.lastUnits(window);
            int[] choice = new int[ids.size()];
            drafter.rollback(0);
            for (int lo = 0; lo < ids.size(); lo += chunk) {
                List<Integer> part = ids.subList(lo, Math.min(ids.size(), lo + chunk));
                float[][] rows = drafter.forward(part, lo, part.size());
                for (int r = 0; r < rows.length; r++) choice[lo + r] = Sampler.argmax(rows[r]);
            }
            hits += TrainingExample.unitHits(ids, units, choice);
            total += units.size();
        }
        drafter.rollback(0);
        return total == 0 ? Double.NaN : (double) hits / total;
    }
}
