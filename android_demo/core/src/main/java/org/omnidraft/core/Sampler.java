package org.omnidraft.core;

import java.util.Arrays;
import java.util.Comparator;
import java.util.function.DoubleSupplier;

/** Temperature and top-p, shared by drafter and target (omnidraft/runtime/sampling.py). Temperature 0 is greedy. */
public final class Sampler {
    public final double temperature;
    public final double topP;

    public Sampler(double temperature, double topP) {
        if (temperature < 0) throw new IllegalArgumentException("temperature must be >= 0");
        if (!(topP > 0 && topP <= 1)) throw new IllegalArgumentException("top-p must be in (0, 1]");
        this.temperature = temperature;
        this.topP = topP;
    }

    public boolean greedy() {
        return temperature == 0;
    }

    public double[] probs(float[] logits) {
        double max = Double.NEGATIVE_INFINITY;
        for (float x : logits) max = Math.max(max, x / temperature);
        double[] p = new double[logits.length];
        double sum = 0;
        for (int i = 0; i < p.length; i++) {
            p[i] = Math.exp(logits[i] / temperature - max);
            sum += p[i];
        }
        for (int i = 0; i < p.length; i++) p[i] /= sum;
        return topP < 1.0 ? topP(p) : p;
    }

    private double[] topP(double[] p) {
        Integer[] order = new Integer[p.length];
        for (int i = 0; i < p.length; i++) order[i] = i;
        Arrays.sort(order, Comparator.comparingDouble((Integer i) -> -p[i])); // stable, like numpy's
        double cum = 0;
        int keep = p.length;
        for (int i = 0; i < p.length; i++) {
            cum += p[order[i]];
            if (cum >= topP) { keep = i + 1; break; }
        }
        double[] out = new double[p.length];
        double sum = 0;
        for (int i = 0; i < keep; i++) { out[order[i]] = p[order[i]]; sum += p[order[i]]; }
        for (int i = 0; i < out.length; i++) out[i] /= sum;
        return out;
    }

    public static int argmax(float[] row) {
        int best = 0;
        for (int i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
        return best;
    }

    /** One index drawn from p with a uniform from `rng`. */
    public static int sample(double[] p, DoubleSupplier rng) {
        return draw(p, rng.getAsDouble());
    }

    /** The index at u in [0, 1) of p's inverse CDF, in index order (sampling.py's Dist.draw). */
    public static int draw(double[] p, double uniform) {
        double[] c = new double[p.length];
        double acc = 0;
        for (int i = 0; i < p.length; i++) { acc += p[i]; c[i] = acc; }
        double u = uniform * c[c.length - 1];
        int idx = 0;
        while (idx < c.length && c[idx] <= u) idx++; // numpy searchsorted(side="right")
        return Math.min(idx, p.length - 1);
    }

    /** The uniform number of output position `position` under `seed`: splitmix64 of both (sampling.py). */
    public static double positionUniform(long seed, long position) {
        long z = seed * 0x9E3779B97F4A7C15L + position + 1;
        for (int round = 0; round < 2; round++) {
            z += 0x9E3779B97F4A7C15L;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            z ^= z >>> 31;
        }
        return (z >>> 11) / (double) (1L << 53);
    }
}
