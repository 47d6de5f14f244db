package org.omnidraft.core;

import java.util.function.IntToDoubleFunction;

/**
 * The hybrid policy (omnidraft/runtime/hybrid.py): each round the option with the most expected tokens
 * per second: nothing (1 token for T(1)), a lookup prefix of m tokens (1 + E_m tokens for T(m + 1)), the
 * drafter (1 + A tokens for K drafter steps and T(1 + M)), or a chain: a lookup prefix continued by the
 * drafter (1 + E_m + S_m A tokens for K steps and T(1 + m + M)). T(n) = a + b (n - 1) is fitted from the
 * loop's own target calls (least squares with decay and a ridge toward a slope of a tenth of a step); the
 * drafter's step time is measured from its one-token calls, its catching up (reading text it has not seen)
 * apart and not charged to a round. A, M and K come from the drafter's recent rounds, its acceptance counted
 * per judged token from a prior. A drafter not chosen is re-checked, in place of nothing or of a lookup prefix
 * expected to give less than one token, once the policy's explore share of the time since its last round covers what a
 * re-check costs (reading the text it has not seen, its steps, the longer verification). Its constants come
 * from the bundle's policy ({@link Policy}).
 */
public final class Hybrid {
    public static final int NONE = 0, LOOKUP = 1, DRAFTER = 2, CHAIN = 3;

    private final Policy p;
    private final double[] sums = new double[5]; // weights, n, s, n*n, n*s
    private Double drafterStep; // EMA of seconds per one-token drafter step
    private Double smallestCall; // the quickest drafter call seen: a bound on its step until one is timed
    private Double catchup; // EMA of extra seconds per token read in a catching-up call
    // the drafter's recent rounds: accepted and judged tokens, rounds, proposed tokens, calls (decayed sums)
    final double[] rounds;
    private double idleSeconds; // rounds since the drafter last proposed, as the cost model prices them
    public boolean chaining = true;
    private final double[] fixed; // {a, b, drafter step}: pinned costs (reproducible tests and what-if runs)

    private Hybrid(Policy policy, double[] fixed) {
        this.p = policy;
        this.rounds = policy.roundsPrior.clone();
        this.fixed = fixed;
    }

    public Hybrid(Policy policy) {
        this(policy, null);
    }

    /** Pinned costs: T(n) = a + b (n - 1), a drafter step of drafterStep, catching up a tenth of a step a token. */
    public static Hybrid fixedCosts(Policy policy, double a, double b, double drafterStep) {
        return new Hybrid(policy, new double[] {a, b, drafterStep});
    }

    /** A generation starts: earlier runs' rounds count as at most CARRY rounds, and the re-check clock restarts. */
    public void begin() {
        double scale = Math.min(1.0, p.carry / rounds[2]);
        for (int i = 0; i < rounds.length; i++) rounds[i] *= scale;
        idleSeconds = 0;
    }

    /** Whether the drafter, now idle, should read the prompt at once (it is expected to pay) or when first used. */
    public boolean drafterLikely(int maxDraft) {
        return couldPay(maxDraft) && drafterValue() >= 1.0 / target(1);
    }

    public void observeTarget(int n, double seconds) {
        if (seconds < p.minCallS || seconds > p.maxCallS) return;
        double[] now = {1.0, n, seconds, (double) n * n, n * seconds};
        for (int i = 0; i < 5; i++) sums[i] = p.costDecay * sums[i] + now[i];
    }

    /** A drafter call of n tokens: one-token calls are steps; longer ones were catching up (not charged). */
    public void observeDrafterCall(int n, double seconds) {
        if (seconds < p.minCallS || seconds > p.maxCallS) return;
        smallestCall = smallestCall == null ? seconds : Math.min(smallestCall, seconds);
        if (n == 1) {
            drafterStep = drafterStep == null ? seconds : (1 - p.stepEma) * drafterStep + p.stepEma * seconds;
        } else if (drafterStep != null) {
            double per = Math.max(0.0, seconds - drafterStep) / (n - 1);
            catchup = catchup == null ? per : (1 - p.stepEma) * catchup + p.stepEma * per;
        }
    }

    /** After every round: `tokensInCall` verified, and whether the drafter proposed in it. */
    public void observeRound(int tokensInCall, boolean drafterProposed) {
        idleSeconds = drafterProposed ? 0.0 : idleSeconds + target(tokensInCall);
    }

    double catchup(int tokens) {
        double per = catchup != null && fixed == null ? catchup : p.priorSlope * drafterStep();
        return per * Math.max(tokens - 1, 0);
    }

    private boolean recheckDue(int unread) {
        double[] d = drafterMeans();
        double cost = d[2] * drafterStep() + target(1 + d[1]) - target(1);
        double budget = p.exploreShare * idleSeconds;
        return budget >= cost && budget >= cost + catchup(unread);
    }

    /** A round in which the drafter proposed `proposed` tokens with `calls` calls and `accepted` were accepted. */
    public void observeDrafterRound(int accepted, int proposed, int calls) {
        double[] now = {accepted, Math.min(accepted + 1, proposed), 1.0, proposed, calls};
        for (int i = 0; i < rounds.length; i++) rounds[i] = p.roundsDecay * rounds[i] + now[i];
    }

    public double target(double n) {
        if (fixed != null) return fixed[0] + fixed[1] * (n - 1);
        double w = sums[0];
        if (w <= 0) return 1.0 + p.priorSlope * (n - 1);
        double meanX = sums[1] / w - 1.0, meanS = sums[2] / w;
        double sxx = Math.max(sums[3] / w - (sums[1] / w) * (sums[1] / w), 0.0) * w;
        double sxy = (sums[4] / w - (sums[1] / w) * meanS) * w;
        double b0 = p.priorSlope * meanS / (1.0 + p.priorSlope * meanX);
        double slope = Math.max((sxy + p.ridge * b0) / (sxx + p.ridge), 0.0);
        return Math.max(meanS + slope * (n - 1 - meanX), p.minCallS);
    }

    public double drafterStep() {
        if (fixed != null) return fixed[2];
        if (drafterStep != null) return drafterStep;
        double prior = p.priorC * target(1);
        return smallestCall == null ? prior : Math.min(prior, smallestCall);
    }

    private boolean measured() {
        return fixed != null || (sums[0] > 0 && drafterStep != null);
    }

    /** {expected accepted, proposed, calls} per drafter round. */
    public double[] drafterMeans() {
        double alpha = Math.min(rounds[0] / rounds[1], 1.0);
        double proposed = rounds[3] / rounds[2];
        double accepted = alpha >= 1.0 ? proposed : alpha * (1.0 - Math.pow(alpha, proposed)) / (1.0 - alpha);
        return new double[] {accepted, proposed, rounds[4] / rounds[2]};
    }

    public double drafterValue() {
        double[] d = drafterMeans();
        return (1.0 + d[0]) / (d[2] * drafterStep() + target(1 + d[1]));
    }

    /** Whether even an always-right drafter (maxDraft tokens, all accepted) could beat target-only decoding. */
    private boolean couldPay(int maxDraft) {
        if (!measured()) return true;
        return (maxDraft + 1) / (maxDraft * drafterStep() + target(maxDraft + 1)) > 1.0 / target(1);
    }

    /**
     * {value, choice, m} of the best option (ties: the first of none, lookup prefixes, drafter, chains):
     * probs: lookup's P(accept) per token; drafter: {accepted, proposed, calls, seconds per call} or null;
     * budget: tokens the round may propose (0: no chains).
     */
    public static double[] best(double[] probs, IntToDoubleFunction T, double[] drafter, int budget) {
        double[] best = {1.0 / T.applyAsDouble(1), NONE, 0};
        double survive = 1, expected = 0;
        double[] surv = new double[probs.length], exp = new double[probs.length];
        for (int i = 0; i < probs.length; i++) {
            survive *= probs[i];
            expected += survive;
            surv[i] = survive;
            exp[i] = expected;
            double value = (1.0 + expected) / T.applyAsDouble(i + 2);
            if (value > best[0]) best = new double[] {value, LOOKUP, i + 1};
        }
        if (drafter == null) return best;
        double accepted = drafter[0], proposed = drafter[1], drafting = drafter[2] * drafter[3];
        double value = (1.0 + accepted) / (drafting + tcost(T, 1 + proposed));
        if (value > best[0]) best = new double[] {value, DRAFTER, 0};
        for (int m = 1; m <= Math.min(probs.length, budget - 1); m++) {
            double gain = 1.0 + exp[m - 1] + surv[m - 1] * accepted;
            value = gain / (drafting + tcost(T, 1 + m + proposed));
            if (value > best[0]) best = new double[] {value, CHAIN, m};
        }
        return best;
    }

    /** T at a fractional number of tokens (the mean proposed), linear between whole ones as T(n) is. */
    private static double tcost(IntToDoubleFunction T, double n) {
        int lo = (int) Math.floor(n);
        double t0 = T.applyAsDouble(lo);
        return t0 + (T.applyAsDouble(lo + 1) - t0) * (n - lo);
    }

    /** {choice, m}: NONE, LOOKUP or CHAIN with its lookup prefix length m, or DRAFTER; unread: draft tokens the
     * drafter has not read yet (what a re-check would cost it to catch up on). */
    public int[] choose(double[] lookupProbs, boolean hasDrafter, int maxDraft, int budget, int unread) {
        double[] probs = lookupProbs == null ? new double[0] : lookupProbs;
        double[] drafter = null;
        if (hasDrafter && couldPay(maxDraft)) {
            double[] d = drafterMeans();
            drafter = new double[] {d[0], d[1], d[2], drafterStep()};
        }
        double[] b = best(probs, n -> target(n), drafter, chaining ? budget : 0);
        int choice = (int) b[1], m = (int) b[2];
        if (drafter != null && (choice == NONE || choice == LOOKUP) && recheckDue(unread)) {
            double expected = 0, survive = 1;
            for (int i = 0; i < m; i++) {
                survive *= probs[i];
                expected += survive;
            }
            choice = m > 0 && expected >= 1.0 && chaining && budget > m ? CHAIN : DRAFTER;
            if (choice == DRAFTER) m = 0;
        }
        return new int[] {choice, m};
    }
}
