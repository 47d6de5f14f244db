package org.omnidraft.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Which runs of draft tokens spell one target token (omnidraft/runtime/ngram_cache.py), bounded, LFU eviction. */
public final class NGramCache {
    public final int maxEntries;
    public final int maxNgram;
    private final LinkedHashMap<List<Integer>, int[]> entries = new LinkedHashMap<>(); // ngram -> {target, count}

    public NGramCache(int maxEntries, int maxNgram) {
        if (maxEntries < 1 || maxNgram < 2) throw new IllegalArgumentException("maxEntries >= 1 and maxNgram >= 2 required");
        this.maxEntries = maxEntries;
        this.maxNgram = maxNgram;
    }

    public int size() {
        return entries.size();
    }

    /** Longest cached run starting at draft[start]: {target id, run length}, or null. */
    public int[] lookup(List<Integer> draft, int start) {
        int longest = Math.min(maxNgram, draft.size() - start);
        for (int n = longest; n > 1; n--) {
            int[] e = entries.get(new ArrayList<>(draft.subList(start, start + n)));
            if (e != null) return new int[] {e[0], n};
        }
        return null;
    }

    public void recordAccepted(List<Integer> ngram) {
        int[] e = entries.get(ngram);
        if (e != null) e[1]++;
    }

    /** Learn (or reinforce) that `ngram` spells `target`. */
    public void add(int target, List<Integer> ngram) {
        if (ngram.size() < 2 || ngram.size() > maxNgram) return;
        List<Integer> key = new ArrayList<>(ngram);
        int[] e = entries.get(key);
        if (e != null) {
            e[0] = target;
            e[1]++;
            return;
        }
        entries.put(key, new int[] {target, 1});
        if (entries.size() > maxEntries) evict();
    }

    /** Drop the least used tenth (at least one); ties go to the oldest. */
    private void evict() {
        int drop = Math.max(1, entries.size() - maxEntries + maxEntries / 10);
        List<Map.Entry<List<Integer>, int[]>> order = new ArrayList<>(entries.entrySet());
        Collections.sort(order, (a, b) -> Integer.compare(a.getValue()[1], b.getValue()[1])); // stable
        for (int i = 0; i < drop; i++) entries.remove(order.get(i).getKey());
    }

    /** A cache saved by the Python runtime (omnidraft-ngram-cache, version 1) for the given pair. */
    public static NGramCache fromJson(Map<String, Object> data, String pairId) {
        if (!"omnidraft-ngram-cache".equals(data.get("format")) || ((Number) data.get("version")).intValue() != 1) {
            throw new IllegalArgumentException("not an n-gram cache of format version 1");
        }
        if (!pairId.equals(data.get("pair_id"))) throw new IllegalArgumentException("the n-gram cache belongs to another model pair");
        NGramCache cache = new NGramCache(((Number) data.get("max_entries")).intValue(), ((Number) data.get("max_ngram")).intValue());
        for (Object o : Json.array(data.get("entries"))) {
            List<Object> e = Json.array(o);
            List<Integer> ngram = new ArrayList<>();
            for (Object x : Json.array(e.get(0))) ngram.add(((Number) x).intValue());
            cache.entries.put(ngram, new int[] {((Number) e.get(1)).intValue(), ((Number) e.get(2)).intValue()});
        }
        return cache;
    }

    /** Entries in insertion order: {ngram..., target, count} flattened as (ngram, target, count). */
    public List<Object[]> items() {
        List<Object[]> out = new ArrayList<>();
        for (Map.Entry<List<Integer>, int[]> e : entries.entrySet()) out.add(new Object[] {e.getKey(), e.getValue()[0], e.getValue()[1]});
        return out;
    }
}
