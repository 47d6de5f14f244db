package org.omnidraft.core;

import java.util.function.DoubleSupplier;

/**
 * Which proposed target tokens the target accepts, and the token it adds (omnidraft/runtime/verify.py).
 * Greedy: accept while the target's argmax agrees, then emit its argmax: the output is the
 * target's own greedy output. Sampling: a point mass (lookup, greedy drafts) is accepted exactly when
 * it equals the position's own draw (Sampler.positionUniform of seed and position), which is emitted
 * otherwise, so a seed gives target-only text; a sampled draft is accepted with min(1, p/q'), else the
 * residual is sampled (drawing from `rng`).
 */
public final class Verifier {
    private Verifier() {}

    /** {accepted, next token}; targetLogits has one row per proposal plus one, row j at output position start + j. */
    public static int[] verify(Proposal p, float[][] targetLogits, Sampler sampler, DoubleSupplier rng, long seed,
                               int start) {
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
            if (q == 1.0 && !p.hasDistributions()) { // a point mass: the position's own draw decides
                int drawn = Sampler.draw(probs, Sampler.positionUniform(seed, start + j));
                if (drawn == t) continue;
                return new int[] {j, drawn};
            }
            if (q > 0 && rng.getAsDouble() < Math.min(1.0, probs[t] / q)) continue;
            double[] qp = p.distribution(j, vocab); // lookup: a point mass, the residual is p without t
            double[] residual = new double[vocab];
            double sum = 0;
            for (int i = 0; i < vocab; i++) { residual[i] = Math.max(probs[i] - qp[i], 0.0); sum += residual[i]; }
            if (sum <= 0) { residual = probs; sum = 1.0; }
            for (int i = 0; i < vocab; i++) residual[i] /= sum;
            return new int[] {j, Sampler.sample(residual, rng)};
        }
        return new int[] {m, Sampler.draw(sampler.probs(targetLogits[m]), Sampler.positionUniform(seed, start + m))};
    }
}
