package org.omnidraft.core;

import java.util.ArrayDeque;

/** The durations of a runner's most recent calls (at most 256), and their median in milliseconds. */
public final class CallTimes {
    private static final int KEEP = 256;
    private final ArrayDeque<Double> seconds = new ArrayDeque<>();

    public void add(double s) {
        seconds.addLast(s);
        if (seconds.size() > KEEP) seconds.removeFirst();
    }

    public int count() {
        return seconds.size();
    }

    public void clear() {
        seconds.clear();
    }

    /** Median in ms, NaN before the first call. */
    public double medianMs() {
        if (seconds.isEmpty()) return Double.NaN;
        double[] v = seconds.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        int n = v.length;
        return 1000 * (n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
    }

    /** "target step 12 ms, verify 15 ms, drafter step 15 ms (c 1.21)": what the pair costs here, as the CLI prints it. */
    public static String summary(ModelRunner target, ModelRunner drafter) {
        StringBuilder b = new StringBuilder();
        double step = target.oneToken.medianMs(), verify = target.several.medianMs();
        if (!Double.isNaN(step)) b.append(String.format("target step %.0f ms", step));
        if (!Double.isNaN(verify)) b.append(b.length() > 0 ? ", " : "").append(String.format("verify %.0f ms", verify));
        double draft = drafter == null ? Double.NaN : drafter.oneToken.medianMs();
        if (!Double.isNaN(draft)) {
            b.append(b.length() > 0 ? ", " : "").append(String.format("drafter step %.0f ms", draft));
            if (!Double.isNaN(step)) b.append(String.format(" (c %.2f)", draft / step));
        }
        return b.toString();
    }
}
