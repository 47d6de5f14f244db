package org.omnidraft.core;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * When the on-device adapter updates, what it trains on and what its guard scores
 * (omnidraft/adaptation/online.py's OnlineAdapter with AdaptConfig's defaults): every
 * HOLDOUT_EVERY-th example (the 1st, 6th, ...) is held out, the others are buffered; every EVERY
 * examples an update takes STEPS steps on the newest `batch` buffered ones. The guard measures the
 * drafter's greedy acceptance on the held-out examples before and after; an update that lowers it
 * is rolled back by the caller.
 */
public final class OnlineSchedule {
    public static final int EVERY = 4, HOLDOUT_EVERY = 5, HOLDOUT = 4, BUFFER = 16, STEPS = 2;
    private final ArrayDeque<TrainingExample> buffer = new ArrayDeque<>(), heldOut = new ArrayDeque<>();
    private int examples, sinceUpdate;
    public final int batch, window;

    /** `batch`: examples per step; `window`: draft tokens per example (the training program's). */
    public OnlineSchedule(int batch, int window) {
        if (batch < 1 || window < 2) throw new IllegalArgumentException("batch >= 1 and window >= 2 needed");
        this.batch = batch;
        this.window = window;
    }

    /** Add a finished generation's example; true when an update is due now. */
    public boolean add(TrainingExample e) {
        if (e.isEmpty()) return false;
        ArrayDeque<TrainingExample> to = examples % HOLDOUT_EVERY == 0 ? heldOut : buffer;
        to.addLast(e);
        if (to.size() > (to == heldOut ? HOLDOUT : BUFFER)) to.removeFirst();
        examples++;
        if (++sinceUpdate < EVERY || buffer.isEmpty()) return false;
        sinceUpdate = 0;
        return true;
    }

    /** The newest `batch` buffered examples: one update step's batch. */
    public List<TrainingExample> batch() {
        List<TrainingExample> all = new ArrayList<>(buffer);
        return all.subList(Math.max(0, all.size() - batch), all.size());
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
