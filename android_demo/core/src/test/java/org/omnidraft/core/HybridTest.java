package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The hybrid policy's pieces (cost fit, the drafter's running figures, each round's choice) against Python. */
public class HybridTest {
    private static double num(Object o) {
        return ((Number) o).doubleValue();
    }

    @Test
    public void costFitRoundsAndChoicesMatchPython() throws Exception {
        Map<String, Object> g = Golden.load("hybrid.json");
        Policy policy = Golden.policy();
        assertEquals(policy.exploreShare, num(g.get("explore_share")), 0.0);
        assertEquals(policy.carry, num(g.get("carry")), 0.0);
        Hybrid h = new Hybrid(policy);
        for (Object o : Json.array(g.get("fits"))) {
            Map<String, Object> f = Json.object(o);
            h.observeTarget((int) num(f.get("n")), num(f.get("seconds")));
            assertEquals(num(f.get("T1")), h.target(1), 1e-12);
            assertEquals(num(f.get("T4")), h.target(4), 1e-12);
            assertEquals(num(f.get("T12")), h.target(12), 1e-12);
        }
        for (Object o : Json.array(g.get("rounds"))) {
            Map<String, Object> r = Json.object(o);
            List<Object> add = Json.array(r.get("add"));
            h.observeDrafterRound((int) num(add.get(0)), (int) num(add.get(1)), (int) num(add.get(2)));
            List<Object> means = Json.array(r.get("means"));
            double[] got = h.drafterMeans();
            for (int i = 0; i < 3; i++) assertEquals(num(means.get(i)), got[i], 1e-12);
        }
        h.begin();
        List<Object> carried = Json.array(g.get("carried"));
        for (int i = 0; i < carried.size(); i++) assertEquals(num(carried.get(i)), h.rounds[i], 1e-12);
        String[] names = {"none", "lookup", "drafter", "chain"};
        int chains = 0;
        for (Object o : Json.array(g.get("cases"))) {
            Map<String, Object> c = Json.object(o);
            List<Object> p = Json.array(c.get("probs"));
            double[] probs = new double[p.size()];
            for (int i = 0; i < probs.length; i++) probs[i] = num(p.get(i));
            double a = num(c.get("a")), b = num(c.get("b"));
            double[] drafter = null;
            if (c.get("drafter") != null) {
                List<Object> d = Json.array(c.get("drafter"));
                drafter = new double[] {num(d.get(0)), num(d.get(1)), num(d.get(2)), num(d.get(3))};
            }
            double[] best = Hybrid.best(probs, n -> a + b * (n - 1), drafter, (int) num(c.get("budget")));
            assertEquals(c.toString(), c.get("choice"), names[(int) best[1]]);
            assertEquals(c.toString(), (int) num(c.get("m")), (int) best[2]);
            assertEquals(c.toString(), num(c.get("value")), best[0], 1e-9);
            if (best[1] == Hybrid.CHAIN) chains++;
        }
        assertTrue("the vectors exercise chains", chains > 0);
    }
}
