package org.omnidraft.core;

import java.util.ArrayDeque;
import java.util.List;

/**
 * Online training of the acceptance head on the phone (omnidraft/adaptation/predictor.py, greedy
 * labels): every drafted token the target judged becomes (the graph's head_features, label);
 * after each reply a few full-batch Adam steps of binary cross-entropy, with an L2 pull of the
 * hidden-state weights towards the initial head. Labels: 1 if the target's argmax equals the
 * proposal; a draft token's label is the product over the target tokens it proposed (splits),
 * an n-gram's goes to its first draft token, the rest get 1.
 */
public final class OnlineHead {
    private final AcceptanceHead head;
    private final float[] prior;
    private final ArrayDeque<float[]> features = new ArrayDeque<>();
    private final ArrayDeque<Double> labels = new ArrayDeque<>();
    private final int capacity;
    private double[] m, v;
    private int t;
    public int updates;

    public OnlineHead(AcceptanceHead head, int capacity) {
        this.head = head;
        this.prior = head.weight.clone();
        this.capacity = capacity;
    }

    /** Labels per draft token (NaN: not judged) from a verified greedy round. */
    public static double[] greedyLabels(Proposal p, float[][] targetLogits, int nDraft) {
        double[] labels = new double[nDraft];
        java.util.Arrays.fill(labels, Double.NaN);
        int covered = 0;
        for (int e : p.draftEnd) covered = Math.max(covered, e);
        for (int i = 0; i < covered; i++) labels[i] = 1.0;
        for (int j = 0; j < p.size(); j++) {
            double label = Sampler.argmax(targetLogits[j]) == p.targetIds.get(j) ? 1.0 : 0.0;
            labels[p.draftStart.get(j)] *= label;
        }
        return labels;
    }

    public void observe(List<float[]> drafted, double[] labels) {
        for (int i = 0; i < drafted.size() && i < labels.length; i++) {
            if (drafted.get(i) == null || Double.isNaN(labels[i])) continue;
            features.addLast(drafted.get(i));
            this.labels.addLast(labels[i]);
            if (features.size() > capacity) { features.removeFirst(); this.labels.removeFirst(); }
        }
    }

    public void update(int epochs, double lr, double l2) {
        int n = features.size(), f = head.weight.length;
        if (n == 0) return;
        if (m == null) { m = new double[f + 1]; v = new double[f + 1]; }
        float[][] x = features.toArray(new float[0][]);
        Double[] y = labels.toArray(new Double[0]);
        for (int e = 0; e < epochs; e++) {
            double[] grad = new double[f + 1];
            for (int i = 0; i < n; i++) {
                double g = (head.prob(x[i]) - y[i]) / n;
                for (int k = 0; k < f; k++) grad[k] += g * x[i][k];
                grad[f] += g;
            }
            for (int k = 0; k < f - 2; k++) grad[k] += l2 * (head.weight[k] - prior[k]); // hidden-state weights only
            t++;
            for (int k = 0; k <= f; k++) {
                m[k] = 0.9 * m[k] + 0.1 * grad[k];
                v[k] = 0.999 * v[k] + 0.001 * grad[k] * grad[k];
                double step = lr * (m[k] / (1 - Math.pow(0.9, t))) / (Math.sqrt(v[k] / (1 - Math.pow(0.999, t))) + 1e-8);
                if (k < f) head.weight[k] -= step; else head.bias[0] -= step;
            }
        }
        updates++;
    }
}
