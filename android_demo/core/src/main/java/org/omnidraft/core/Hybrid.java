package org.omnidraft.core;

/**
 * The hybrid policy (omnidraft/runtime/hybrid.py): each round the proposal with the most expected
 * tokens per second: nothing (1 token for T(1)), a lookup prefix of m tokens (1 + E_m tokens for
 * T(m + 1)), or the drafter (its recent tokens per round for its recent cost). T(n) = a + b (n - 1)
 * is fitted from the loop's own target calls (least squares with decay), like the drafter call time.
 * A drafter that does not pay is re-checked after exploreEvery rounds, then ever more rarely, and never
 * when even perfect acceptance could not make it pay.
 */
public final class Hybrid {
    public static final int NONE = 0, LOOKUP = 1, DRAFTER = 2;
    private final double decay;
    private final double[] sums = new double[5]; // weights, n, s, n*n, n*s
    private Double drafterCall; // EMA of seconds per drafter call
    private Double drafterStep; // EMA of seconds per one-token drafter step
    private double[] drafterRounds; // EMA of (tokens per round, drafter calls, proposed per round)
    private int idle, wait;
    public final int exploreEvery;
    public static final int MAX_WAIT = 1024;

    public Hybrid(double decay, int exploreEvery) {
        this.decay = decay;
        this.exploreEvery = exploreEvery;
        this.wait = exploreEvery;
    }

    public Hybrid() {
        this(0.97, 32);
    }

    private double[] fixed; // {a, b, drafter call}: pinned costs (reproducible tests and what-if runs)

    public static Hybrid fixedCosts(double a, double b, double drafterCall, int exploreEvery) {
        Hybrid h = new Hybrid(0.97, exploreEvery);
        h.fixed = new double[] {a, b, drafterCall};
        return h;
    }

    public void observeTarget(int n, double seconds) {
        double[] now = {1.0, n, seconds, (double) n * n, n * seconds};
        for (int i = 0; i < 5; i++) sums[i] = decay * sums[i] + now[i];
    }

    public void observeDrafterStep(double seconds) {
        drafterStep = drafterStep == null ? seconds : 0.8 * drafterStep + 0.2 * seconds;
    }

    public void observeDrafter(int calls, double seconds, int accepted, int proposed) {
        if (calls > 0) {
            double perCall = seconds / calls;
            drafterCall = drafterCall == null ? perCall : 0.8 * drafterCall + 0.2 * perCall;
        }
        double[] now = {accepted + 1.0, calls, proposed};
        if (drafterRounds == null) drafterRounds = now;
        else for (int i = 0; i < 3; i++) drafterRounds[i] = 0.8 * drafterRounds[i] + 0.2 * now[i];
        // every drafter round that does not pay doubles the wait before the next re-check; one that pays resets it
        wait = drafterValue() > 1.0 / target(1) ? exploreEvery : Math.min(2 * wait, MAX_WAIT);
    }

    public double target(double n) {
        if (fixed != null) return fixed[0] + fixed[1] * (n - 1);
        double w = sums[0];
        if (w <= 0) return 1.0 + 0.1 * (n - 1);
        double meanN = sums[1] / w, meanS = sums[2] / w;
        double var = sums[3] / w - meanN * meanN;
        double slope = var > 0.1 ? Math.max((sums[4] / w - meanN * meanS) / var, 0.0) : 0.1 * meanS / Math.max(meanN, 1.0);
        return Math.max(meanS + slope * (n - meanN), 1e-6);
    }

    /** {tokens per second, m} of the best lookup prefix under T(n) = a + b (n - 1). */
    public static double[] bestPrefix(double[] probs, java.util.function.IntToDoubleFunction targetCost) {
        double best = -1, survive = 1, expected = 0;
        int m = 0;
        for (int i = 0; i < probs.length; i++) {
            survive *= probs[i];
            expected += survive;
            double value = (1.0 + expected) / targetCost.applyAsDouble(i + 2);
            if (value > best) {
                best = value;
                m = i + 1;
            }
        }
        return new double[] {best, m};
    }

    /** Whether even an always-right drafter (maxDraft tokens, all accepted) could beat target-only decoding. */
    private boolean couldPay(int maxDraft) {
        double step = fixed != null ? fixed[2] : drafterStep == null ? -1 : drafterStep;
        if (step < 0) return true; // not measured yet
        return (maxDraft + 1) / (maxDraft * step + target(maxDraft + 1)) > 1.0 / target(1);
    }

    /** {choice, m}: NONE, LOOKUP with its prefix length m, or DRAFTER. */
    public int[] choose(double[] lookupProbs, boolean hasDrafter, int maxDraft) {
        double best = 1.0 / target(1);
        int choice = NONE, m = 0;
        if (lookupProbs != null && lookupProbs.length > 0) {
            double[] p = bestPrefix(lookupProbs, n -> target(n));
            if (p[0] > best) {
                best = p[0];
                choice = LOOKUP;
                m = (int) p[1];
            }
        }
        if (hasDrafter) {
            boolean recheck = idle >= wait && choice != LOOKUP && couldPay(maxDraft);
            if (recheck || drafterValue() > best) choice = DRAFTER;
        }
        idle = choice == DRAFTER ? 0 : idle + 1;
        return new int[] {choice, m};
    }

    private double drafterValue() {
        if (drafterRounds == null) return Double.POSITIVE_INFINITY;
        double perCall = fixed != null ? fixed[2] : drafterCall == null ? 0.0 : drafterCall;
        return drafterRounds[0] / (drafterRounds[1] * perCall + target(1 + drafterRounds[2]));
    }
}
