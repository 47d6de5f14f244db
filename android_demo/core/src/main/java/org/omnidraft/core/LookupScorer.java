package org.omnidraft.core;

/**
 * P(a lookup token is accepted | the ones before it were): logistic regression over the walk's
 * features, one SGD step per judged token (omnidraft/runtime/lookup_proposer.py). The weights learn slowly
 * across generations; `offset`, a bias for the current generation, learns fast and restarts at 0 with
 * each generation (begin()).
 */
public final class LookupScorer {
    public static final int FEATURES = 6;
    public final double[] weights; // from the policy's prior (fitted by benchmarks/lookup_prior.py)
    private final double lr, fastLr, maxOffset;
    private final int maxMatch, maxOccurrences;
    public double offset;
    public int judged;

    public LookupScorer(Policy policy) {
        weights = policy.scorerPrior.clone();
        lr = policy.scorerLr;
        fastLr = policy.scorerFastLr;
        maxOffset = policy.scorerMaxOffset;
        maxMatch = policy.maxMatch;
        maxOccurrences = policy.maxOccurrences;
    }

    public void begin() {
        offset = 0.0;
    }

    public double[][] features(Lookup.Candidates c) {
        double[][] x = new double[c.size()][FEATURES];
        for (int j = 0; j < c.size(); j++) {
            x[j][0] = 1.0;
            x[j][1] = c.frequency.get(j);
            x[j][2] = Math.log1p(c.support.get(j)) / Math.log1p(maxOccurrences);
            x[j][3] = Math.log1p(Math.min(c.match, maxMatch)) / Math.log1p(maxMatch);
            x[j][4] = j / 16.0;
            x[j][5] = c.source.equals("context") ? 1.0 : 0.0;
        }
        return x;
    }

    public double prob(double[] x) {
        double z = 0;
        for (int i = 0; i < FEATURES; i++) z += x[i] * weights[i];
        return 1.0 / (1.0 + Math.exp(-(z + offset)));
    }

    public double[] probs(double[][] x) {
        double[] p = new double[x.length];
        for (int j = 0; j < x.length; j++) p[j] = prob(x[j]);
        return p;
    }

    public void learn(double[][] x, double[] labels) {
        for (int j = 0; j < labels.length; j++) {
            double err = labels[j] - prob(x[j]);
            for (int i = 0; i < FEATURES; i++) weights[i] += lr * err * x[j][i];
            offset = Math.min(Math.max(offset + fastLr * err, -maxOffset), maxOffset);
            judged++;
        }
    }
}
