package org.omnidraft.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * bundle.json read and checked as the Python loader does (omnidraft/bundle.py: read_manifest,
 * the one description of the format): format, version, then every field the runtime reads, with
 * its type and range. A bad manifest is one {@link Invalid} naming the field, the same name the
 * Python loader gives (golden-tested against it). File sizes are checked by the app against the
 * folder; hashes are not (a phone would hash hundreds of MB at every start).
 */
public final class BundleManifest {
    public static final String FORMAT = "omnidraft-bundle";
    public static final int VERSION = 5; // the newest this reader understands: omnidraft/bundle.py's VERSION
    static final String[] QUANTS = {"none", "8da4w", "8da8w", "int8"};
    static final String[] EMBEDDING_QUANTS = {"none", "int8", "int4"};
    static final String[] EXECUTORCH_OPS = {"llama", "quantized"};

    /** Not a manifest this app can use; `field` names what is wrong ("format", "version" or a field path). */
    public static final class Invalid extends Exception {
        public final String field;

        Invalid(String message, String field) {
            super(message);
            this.field = field;
        }
    }

    /** models.target / models.drafter. */
    public static final class Model {
        public final String name, tokenizer, tokenizerFingerprint, quant;
        public final int vocabSize, maxContext, maxTokensPerCall;
        public final Map<String, String> graphs;
        public final List<String> executorchOps;
        public final int acceptanceHeadFeatures; // 0: no acceptance head in the drafter's graphs
        public final int draftHeadTokens; // 0: the graphs score the whole vocabulary
        public final int maxLogitRows; // version 5 targets: the graph takes the rows whose logits it returns; 0: all rows
        public final List<Integer> cacheLengths; // version 5: each layer's cache length (rings), or empty
        public final int slidingWindow; // version 5, with cacheLengths: the window of the layers that keep a ring

        Model(Map<String, Object> m, String role) throws Invalid {
            String at = "models." + role;
            name = string(m, "name", at + ".name");
            if (name.isEmpty()) throw bad(at + ".name");
            vocabSize = positive(m, "vocab_size", at + ".vocab_size");
            maxContext = positive(m, "max_context", at + ".max_context");
            maxTokensPerCall = positive(m, "max_tokens_per_call", at + ".max_tokens_per_call");
            List<Object> kv = list(m, "kv_shape", at + ".kv_shape");
            if (kv.size() != 5) throw bad(at + ".kv_shape");
            for (Object d : kv) if (!isInt(d) || ((Long) d) < 1) throw bad(at + ".kv_shape");
            tokenizer = relative(m.get("tokenizer"), at + ".tokenizer");
            if (!(m.get("tokenizer_fingerprint") instanceof String)) throw bad(at + ".tokenizer_fingerprint");
            tokenizerFingerprint = (String) m.get("tokenizer_fingerprint");
            Map<String, Object> g = object(m, "graphs", at + ".graphs");
            if (g.isEmpty()) throw bad(at + ".graphs");
            Map<String, String> graphs = new LinkedHashMap<>();
            for (Map.Entry<String, Object> e : g.entrySet()) graphs.put(e.getKey(), relative(e.getValue(), at + ".graphs." + e.getKey()));
            this.graphs = Collections.unmodifiableMap(graphs);
            quant = oneOf(m.getOrDefault("quant", "none"), QUANTS, at + ".quant");
            List<String> ops = new ArrayList<>();
            Object o = m.getOrDefault("executorch_ops", new ArrayList<>());
            if (!(o instanceof List)) throw bad(at + ".executorch_ops");
            for (Object op : Json.array(o)) ops.add(oneOf(op, EXECUTORCH_OPS, at + ".executorch_ops"));
            executorchOps = Collections.unmodifiableList(ops);
            acceptanceHeadFeatures = optionalInt(m.get("acceptance_head"), "features", 3, Integer.MAX_VALUE,
                    at + ".acceptance_head.features");
            draftHeadTokens = optionalInt(m.get("draft_head"), "tokens", 1, vocabSize, at + ".draft_head.tokens");
            Object rows = m.get("max_logit_rows");
            if (rows != null && (!isInt(rows) || (Long) rows < 1 || (Long) rows > maxTokensPerCall)) throw bad(at + ".max_logit_rows");
            maxLogitRows = rows == null ? 0 : ((Long) rows).intValue();
            if (((Long) kv.get(3)).intValue() != maxContext) throw bad(at + ".kv_shape (its length is not max_context)");
            List<Integer> lengths = new ArrayList<>();
            Object cl = m.get("cache_lengths");
            if (cl != null) {
                if (!(cl instanceof List) || Json.array(cl).size() != ((Long) kv.get(0)).intValue()) throw bad(at + ".cache_lengths");
                for (Object x : Json.array(cl)) {
                    if (!isInt(x) || (Long) x < 1 || (Long) x > maxContext) throw bad(at + ".cache_lengths");
                    lengths.add(((Long) x).intValue());
                }
            }
            cacheLengths = Collections.unmodifiableList(lengths);
            Object w = m.get("sliding_window");
            if ((w == null) != lengths.isEmpty()) throw bad(at + ".sliding_window");
            if (w != null && (!isInt(w) || (Long) w < 1 || (Long) w >= Collections.min(lengths))) throw bad(at + ".sliding_window");
            slidingWindow = w == null ? 0 : ((Long) w).intValue();
        }

        /** The deepest safe rollback of the ExecuTorch program's rings (-1: it has none). */
        public int ringSlack() {
            return cacheLengths.isEmpty() ? -1 : Collections.min(cacheLengths) - slidingWindow;
        }
    }

    /** training (version 4): the update-step program's batch shape and LoRA tensors. */
    public static final class Training {
        public final int window, batch, mapped;
        /** False for a version-3 program (SGD through ExecuTorch's training API): it decodes, but cannot adapt. */
        public final boolean updateStep;
        public final List<String> loraInputs; // drafter_lora.pte's extra inputs and drafter_train.pte's tensors, in order

        Training(Map<String, Object> t, int version) throws Invalid {
            window = positive(t, "window", "training.window");
            mapped = positive(t, "mapped", "training.mapped");
            updateStep = version >= 4;
            batch = updateStep ? positive(t, "batch", "training.batch") : 0;
            Object update = t.get("update");
            if (updateStep && (!(update instanceof Map) || !"adam".equals(Json.object(update).get("optimizer")))) {
                throw bad("training.update");
            }
            List<String> names = new ArrayList<>();
            for (Object x : list(t, "lora_inputs", "training.lora_inputs")) {
                if (!(x instanceof List) || Json.array(x).size() != 2) throw bad("training.lora_inputs");
                List<Object> pair = Json.array(x);
                if (!(pair.get(0) instanceof String) || !(pair.get(1) instanceof List)) throw bad("training.lora_inputs");
                for (Object d : Json.array(pair.get(1))) if (!isInt(d) || ((Long) d) < 1) throw bad("training.lora_inputs");
                names.add((String) pair.get(0));
            }
            loraInputs = Collections.unmodifiableList(names);
        }
    }

    public final int version, maxContext, maxDraftLen;
    public final String quant, embeddingQuant, pairId, ngramCache; // ngramCache: a file name, or null
    public final Model target, drafter;
    public final Map<String, Long> fileSizes; // every file of the bundle, by relative path
    public final List<Integer> eosIds, chatEosIds;
    public final Training training; // null unless exported --with-training
    public final Policy policy; // null for bundles exported before the policy section

    private BundleManifest(Map<String, Object> m) throws Invalid {
        if (!FORMAT.equals(m.get("format"))) throw new Invalid("bundle.json is not an OmniDraft bundle manifest", "format");
        Object v = m.get("version");
        if (!isInt(v) || (Long) v < 1 || (Long) v > VERSION) {
            throw new Invalid("bundle version " + v + " is not supported (this app reads versions 1 to " + VERSION
                    + "); re-export it", "version");
        }
        version = ((Long) v).intValue();
        Map<String, Object> models = object(m, "models", "models");
        target = new Model(object(models, "target", "models.target"), "target");
        drafter = new Model(object(models, "drafter", "models.drafter"), "drafter");
        Map<String, Object> files = object(m, "files", "files");
        if (files.isEmpty()) throw bad("files");
        Map<String, Long> sizes = new LinkedHashMap<>();
        for (Map.Entry<String, Object> f : files.entrySet()) {
            String rel = relative(f.getKey(), "files");
            if (!(f.getValue() instanceof Map)) throw bad("files." + rel);
            Map<String, Object> e = Json.object(f.getValue());
            Object size = e.get("size"), sha = e.get("sha256");
            if (!isInt(size) || (Long) size < 0) throw bad("files." + rel + ".size");
            if (!(sha instanceof String) || ((String) sha).length() != 64) throw bad("files." + rel + ".sha256");
            sizes.put(rel, (Long) size);
        }
        fileSizes = Collections.unmodifiableMap(sizes);
        for (Model model : new Model[] {target, drafter}) {
            for (String rel : model.graphs.values()) if (!sizes.containsKey(rel)) throw bad("files (graph " + rel + " is not listed)");
        }
        maxDraftLen = positive(m, "max_draft_len", "max_draft_len");
        quant = oneOf(m.getOrDefault("quant", "none"), QUANTS, "quant");
        embeddingQuant = oneOf(m.getOrDefault("embedding_quant", "none"), EMBEDDING_QUANTS, "embedding_quant");
        Object t = m.get("training");
        if (t != null && !(t instanceof Map)) throw bad("training");
        training = t == null || Json.object(t).isEmpty() ? null : new Training(Json.object(t), version);
        if (training != null) {
            for (String key : new String[] {"executorch_train", "executorch_lora"}) {
                if (!drafter.graphs.containsKey(key)) throw bad("models.drafter.graphs." + key);
            }
        }
        eosIds = tokenIds(m, "eos_ids", target.vocabSize);
        chatEosIds = tokenIds(m, "chat_eos_ids", target.vocabSize);
        Object cache = m.get("ngram_cache");
        if (cache != null && !sizes.containsKey(relative(cache, "ngram_cache"))) throw bad("ngram_cache");
        ngramCache = (String) cache;
        Object context = m.getOrDefault("max_context", (long) target.maxContext);
        if (!isInt(context) || (Long) context != target.maxContext) throw bad("max_context (not the target's)");
        maxContext = ((Long) context).intValue();
        pairId = String.valueOf(m.getOrDefault("pair_id", ""));
        Object p = m.get("policy");
        if (p != null && !(p instanceof Map)) throw bad("policy");
        try {
            policy = p == null ? null : new Policy(Json.object(p));
        } catch (IllegalArgumentException e) {
            throw bad(e.getMessage());
        }
    }

    /** Parse and check bundle.json's text. */
    public static BundleManifest parse(String json) throws Invalid {
        Object raw;
        try {
            raw = Json.parse(json);
        } catch (RuntimeException e) { // the reader's errors, and running off the end of truncated text
            throw new Invalid("bundle.json is corrupt (" + e.getMessage() + ")", "json");
        }
        if (!(raw instanceof Map)) throw new Invalid("bundle.json is not an OmniDraft bundle manifest", "format");
        return new BundleManifest(Json.object(raw));
    }

    private static Invalid bad(String field) {
        return new Invalid("bundle.json is missing field (or has a bad value) " + field, field);
    }

    private static boolean isInt(Object o) {
        return o instanceof Long;
    }

    private static int positive(Map<String, Object> m, String key, String field) throws Invalid {
        Object v = m.get(key);
        if (!isInt(v) || (Long) v < 1 || (Long) v > Integer.MAX_VALUE) throw bad(field);
        return ((Long) v).intValue();
    }

    private static String string(Map<String, Object> m, String key, String field) throws Invalid {
        if (!(m.get(key) instanceof String)) throw bad(field);
        return (String) m.get(key);
    }

    private static Map<String, Object> object(Map<String, Object> m, String key, String field) throws Invalid {
        if (!(m.get(key) instanceof Map)) throw bad(field);
        return Json.object(m.get(key));
    }

    private static List<Object> list(Map<String, Object> m, String key, String field) throws Invalid {
        if (!(m.get(key) instanceof List)) throw bad(field);
        return Json.array(m.get(key));
    }

    /** A path inside the bundle: relative, no "..". */
    private static String relative(Object p, String field) throws Invalid {
        if (!(p instanceof String)) throw bad(field);
        String s = (String) p;
        if (s.isEmpty() || s.startsWith("/") || s.startsWith("\\")) throw bad(field);
        for (String part : s.split("[/\\\\]")) if (part.equals("..")) throw bad(field);
        return s;
    }

    private static String oneOf(Object v, String[] allowed, String field) throws Invalid {
        for (String a : allowed) if (a.equals(v)) return a;
        throw bad(field);
    }

    /** An optional object's integer field in [min, max]; 0 when the object is absent. */
    private static int optionalInt(Object o, String key, long min, long max, String field) throws Invalid {
        if (o == null) return 0;
        if (!(o instanceof Map)) throw bad(field);
        Object v = Json.object(o).get(key);
        if (!isInt(v) || (Long) v < min || (Long) v > max) throw bad(field);
        return ((Long) v).intValue();
    }

    private static List<Integer> tokenIds(Map<String, Object> m, String key, int vocab) throws Invalid {
        Object o = m.getOrDefault(key, new ArrayList<>());
        if (!(o instanceof List)) throw bad(key);
        List<Integer> ids = new ArrayList<>();
        for (Object x : Json.array(o)) {
            if (!isInt(x) || (Long) x < 0 || (Long) x >= vocab) throw bad(key);
            ids.add(((Long) x).intValue());
        }
        return Collections.unmodifiableList(ids);
    }
}
