package org.omnidraft.core;

import java.util.function.DoubleSupplier;

/**
 * Which proposed target tokens the target accepts, and the token it adds (omnidraft/runtime/verify.py).
 * Greedy: accept while the target's argmax agrees, then emit its argmax: the output is the
 * target's own greedy output. Sampling: accept with min(1, p/q'), else sample the residual (for a
 * lookup token, a point mass: accepted with p(t), else drawn from p without t, exactly lossless).
 */
public final class Verifier {
    private Verifier() {}

    /** {accepted, next token}; targetLogits has one row per proposal plus one. */
    public static int[] verify(Proposal p, float[][] targetLogits, Sampler sampler, DoubleSupplier rng) {
        int m = p.size();
        if (targetLogits.length != m + 1) throw new IllegalArgumentException("need one logits row per proposal plus one");
        if (sampler.greedy()) {
            for (int j = 0; j < m; j++) {
                int choice = Sampler.argmax(targetLogits[j]);
                if (choice != p.targetIds.get(j)) return new int[] {j, choice};
            }
            return new int[] {m, Sampler.argmax(targetLogits[m])};
        }
        int vocab = targetLogits[0].length;
        for (int j = 0; j < m; j++) {
            double[] probs = sampler.probs(targetLogits[j]);
            int t = p.targetIds.get(j);
            double q = p.q.get(j);
            if (q > 0 && rng.getAsDouble() < Math.min(1.0, probs[t] / q)) continue;
            double[] qp = p.distribution(j, vocab); // lookup: a point mass, the residual is p without t
            double[] residual = new double[vocab];
            double sum = 0;
            for (int i = 0; i < vocab; i++) { residual[i] = Math.max(probs[i] - qp[i], 0.0); sum += residual[i]; }
            if (sum <= 0) { residual = probs; sum = 1.0; }
            for (int i = 0; i < vocab; i++) residual[i] /= sum;
            return new int[] {j, Sampler.sample(residual, rng)};
        }
        return new int[] {m, Sampler.sample(sampler.probs(targetLogits[m]), rng)};
    }
}
