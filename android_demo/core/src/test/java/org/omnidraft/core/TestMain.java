package org.omnidraft.core;

import org.junit.runner.JUnitCore;
import org.junit.runner.Result;
import org.junit.runner.notification.Failure;

/** Runs every test class and prints one line: "N passed, N failed". */
public final class TestMain {
    public static void main(String[] args) {
        Result r = JUnitCore.runClasses(TokenizerTest.class, BridgeTest.class, FamiliesTest.class, VerifyTest.class, LoopTest.class,
                TrainingExampleTest.class, LookupTest.class, HybridTest.class, BundleManifestTest.class, RoundTraceTest.class);
        for (Failure f : r.getFailures()) System.err.println("FAILED " + f.getTestHeader() + ": " + f.getMessage());
        int failed = r.getFailureCount();
        System.out.println((r.getRunCount() - failed) + " passed, " + failed + " failed");
        System.exit(failed == 0 && r.getRunCount() > 0 ? 0 : 1);
    }
}
