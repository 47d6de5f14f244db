package org.omnidraft.core;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Where the tests find the golden vectors (-Domnidraft.golden) and the real tokenizers (-Domnidraft.models, -Domnidraft.tokenizers). */
final class Golden {
    private static Tokenizer drafter, target;

    static Map<String, Object> load(String name) throws IOException {
        Path dir = Paths.get(System.getProperty("omnidraft.golden", "build/golden"));
        return Json.object(Json.parse(Files.readString(dir.resolve(name), StandardCharsets.UTF_8)));
    }

    private static Policy policy;

    /** The runtime's policy as Python writes it into bundles (policy.json). */
    static synchronized Policy policy() throws IOException {
        if (policy == null) policy = new Policy(load("policy.json"));
        return policy;
    }

    static synchronized Tokenizer drafter() throws IOException {
        if (drafter == null) drafter = Tokenizer.load(models().resolve("smollm2-135m-instruct/tokenizer.json"));
        return drafter;
    }

    static synchronized Tokenizer target() throws IOException {
        if (target == null) target = Tokenizer.load(models().resolve("gemma-3-270m/tokenizer.json"));
        return target;
    }

    /** A tokenizer family's tokenizer (omnidraft prepare --tokenizers; -Domnidraft.tokenizers). */
    static Tokenizer family(String name) throws IOException {
        Path dir = Paths.get(System.getProperty("omnidraft.tokenizers", System.getProperty("user.home") + "/.cache/omnidraft/tokenizers"));
        return Tokenizer.load(dir.resolve(name).resolve("tokenizer.json"));
    }

    private static Path models() {
        return Paths.get(System.getProperty("omnidraft.models", System.getProperty("user.home") + "/.cache/omnidraft/models"));
    }

    static List<Integer> ints(Object o) {
        List<Integer> out = new ArrayList<>();
        for (Object x : Json.array(o)) out.add(((Number) x).intValue());
        return out;
    }

    static byte[] hex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return b;
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x & 0xff));
        return s.toString();
    }

    static float[][] matrix(Object o) {
        List<Object> rows = Json.array(o);
        float[][] m = new float[rows.size()][];
        for (int i = 0; i < m.length; i++) {
            List<Object> row = Json.array(rows.get(i));
            m[i] = new float[row.size()];
            for (int j = 0; j < m[i].length; j++) m[i][j] = ((Number) row.get(j)).floatValue();
        }
        return m;
    }
}
