package org.omnidraft.demo;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.omnidraft.core.AcceptanceHead;
import org.omnidraft.core.BundleManifest;
import org.omnidraft.core.DraftLength;
import org.omnidraft.core.DraftModel;
import org.omnidraft.core.Hybrid;
import org.omnidraft.core.HybridProposer;
import org.omnidraft.core.Json;
import org.omnidraft.core.Lookup;
import org.omnidraft.core.LookupProposer;
import org.omnidraft.core.LookupScorer;
import org.omnidraft.core.NGramCache;
import org.omnidraft.core.OnlineHead;
import org.omnidraft.core.OnlineSchedule;
import org.omnidraft.core.Proposer;
import org.omnidraft.core.Sampler;
import org.omnidraft.core.SpeculativeLoop;
import org.omnidraft.core.Tokenizer;
import org.omnidraft.core.TrainingExample;
import org.omnidraft.core.VocabBridge;

/**
 * An exported OmniDraft bundle (format: omnidraft/bundle.py) opened on the phone: validated,
 * tokenizers loaded and checked against their fingerprints, target and drafter .pte programs,
 * the bridge and the pair's n-gram cache. Plain Java, so it compiles off-device too.
 */
public final class BundleSession {
    /** A bundle the app cannot use: missing file, foreign format, version or tokenizer. */
    public static final class BundleError extends Exception {
        BundleError(String message) {
            super(message);
        }
    }

    public final Tokenizer targetTok, draftTok;
    public final ExecuTorchRunner target, drafter;
    public final VocabBridge bridge;
    public final NGramCache cache;
    public final AcceptanceHead head; // null for a version-1 bundle (no head in its drafter graph)
    public final OnlineHead onlineHead;
    public final int maxDraftLen;
    public final String pairId;
    public final LoraTrainer trainer; // null unless the bundle was exported --with-training
    private final OnlineSchedule schedule; // null unless the bundle was exported --with-training
    private final int drafterChunk; // tokens per drafter call
    public float lastLoss = Float.NaN;
    public int updates, rollbacks;
    public final Set<Integer> chatEos = new HashSet<>();
    private final File cacheFile;

    // Lookup: continuations from the conversation and this session's earlier replies, under the hybrid policy
    // (its call-time estimates and scorer keep learning across replies).
    public final Lookup lookup;
    private final LookupScorer scorer;
    private final Hybrid hybrid;
    private final org.omnidraft.core.Policy policy; // the runtime's constants, from bundle.json

    // The conversation (omnidraft/session.py): each turn as the target read and wrote it (the user's turn in Gemma's
    // format, the reply's own tokens, its end), so a reply's prompt extends the target's cache by the new message.
    private final List<List<Integer>> turns = new ArrayList<>();
    public int droppedTurns; // dropped from the start of this conversation so far, for the window to fit

    public static final class Reply {
        public String text;
        public int tokens, targetCalls, drafted, accepted, lookupAccepted;
        public int droppedTurns; // the oldest turns this reply dropped for the conversation to fit the window
        public double seconds;
        public String timings; // "target step 12 ms, verify 15 ms, drafter step 15 ms (c 1.21)" for this reply
    }

    public BundleSession(File dir, File stateDir) throws BundleError, IOException {
        File manifestFile = new File(dir, "bundle.json");
        if (!manifestFile.isFile()) throw new BundleError("not a bundle (no bundle.json) in " + dir);
        BundleManifest m;
        try {
            m = BundleManifest.parse(Files.readString(manifestFile.toPath(), StandardCharsets.UTF_8));
        } catch (BundleManifest.Invalid e) {
            throw new BundleError(e.getMessage());
        }
        for (Map.Entry<String, Long> f : m.fileSizes.entrySet()) {
            File file = new File(dir, f.getKey());
            if (!file.isFile()) throw new BundleError("bundle is missing " + f.getKey());
            if (file.length() != f.getValue()) throw new BundleError("bundle file " + f.getKey() + " has the wrong size; push it again");
        }
        if (m.policy == null) {
            throw new BundleError("the bundle predates bundle.json's policy section (the runtime's constants): re-export it");
        }
        policy = m.policy;
        lookup = new Lookup(1_000_000, policy);
        scorer = new LookupScorer(policy);
        hybrid = new Hybrid(policy);
        targetTok = tokenizer(dir, m.target);
        draftTok = tokenizer(dir, m.drafter);
        head = m.drafter.acceptanceHeadFeatures == 0 ? null : new AcceptanceHead(m.drafter.acceptanceHeadFeatures);
        onlineHead = head == null ? null : new OnlineHead(head, 4096);
        target = runner(dir, m.target, null, "executorch");
        if (m.training != null) { // the drafter that takes LoRA tensors, fed by the training program's live ones
            if (!m.training.updateStep) throw new BundleError("the bundle's training program is of an older format: re-export it with --with-training");
            trainer = new LoraTrainer(new File(dir, m.drafter.graphs.get("executorch_train")).getPath(), m.training.loraInputs.size(),
                    m.training.window, m.training.batch, m.training.mapped, policy.adaptLr, policy.warmup);
            drafter = runner(dir, m.drafter, head, "executorch_lora");
            drafter.extraInputs = trainer.loraInputs();
            schedule = new OnlineSchedule(policy, m.training.batch, m.training.window);
        } else {
            trainer = null;
            drafter = runner(dir, m.drafter, head, "executorch");
            schedule = null;
        }
        drafterChunk = m.drafter.maxTokensPerCall;
        bridge = new VocabBridge(draftTok, targetTok);
        maxDraftLen = m.maxDraftLen;
        pairId = m.pairId;
        chatEos.addAll(m.chatEosIds);
        cacheFile = new File(stateDir, "ngram_cache.json");
        File shipped = m.ngramCache == null ? null : new File(dir, m.ngramCache);
        cache = loadCache(cacheFile.isFile() ? cacheFile : shipped, pairId);
    }

    private static Tokenizer tokenizer(File dir, BundleManifest.Model model) throws BundleError, IOException {
        Tokenizer tok = Tokenizer.load(new File(dir, model.tokenizer + "/tokenizer.json").toPath());
        if (!tok.fingerprint.equals(model.tokenizerFingerprint)) {
            throw new BundleError("the tokenizer of " + model.name + " does not match the exported model");
        }
        return tok;
    }

    private static ExecuTorchRunner runner(File dir, BundleManifest.Model model, AcceptanceHead head, String graph)
            throws BundleError {
        String pte = model.graphs.get(graph);
        if (pte == null) throw new BundleError("the bundle has no ExecuTorch program for " + model.name + " (export --format executorch)");
        return new ExecuTorchRunner(new File(dir, pte).getPath(), model.vocabSize, model.maxContext, model.maxTokensPerCall,
                model.maxLogitRows, model.ringSlack(), head);
    }

    private static NGramCache loadCache(File file, String pairId) {
        if (file == null || !file.isFile()) return new NGramCache(20000, 8);
        try {
            return NGramCache.fromJson(Json.object(Json.parse(Files.readString(file.toPath(), StandardCharsets.UTF_8))), pairId);
        } catch (IOException | RuntimeException e) {
            return new NGramCache(20000, 8); // a damaged or foreign cache: start fresh (the file is left in place)
        }
    }

    /** A user turn in Gemma's chat format, special tokens as tokens, ready for the model's reply. */
    private List<Integer> userTurn(String message) {
        List<Integer> ids = new ArrayList<>();
        int start = targetTok.pieceId("<start_of_turn>"), end = targetTok.pieceId("<end_of_turn>");
        ids.add(start);
        ids.addAll(targetTok.encode("user\n" + message));
        ids.add(end);
        ids.addAll(targetTok.encode("\n"));
        ids.add(start);
        ids.addAll(targetTok.encode("model\n"));
        return ids;
    }

    /** The conversation's turns from `from` on and the new message, ready for the reply. */
    private List<Integer> conversation(int from, List<Integer> message) {
        List<Integer> ids = new ArrayList<>();
        int bos = targetTok.pieceId("<bos>");
        if (bos >= 0) ids.add(bos);
        for (List<Integer> turn : turns.subList(from, turns.size())) ids.addAll(turn);
        ids.addAll(message);
        return ids;
    }

    /**
     * The prompt for `message` in this conversation, dropping its oldest turns when it and the reply's room no
     * longer fit the window: down to half the window, so the next turns fit again (session.py). {prompt, dropped}.
     */
    public Object[] chatPrompt(String message, int maxNew) {
        List<Integer> mine = userTurn(message);
        List<Integer> ids = conversation(0, mine);
        int window = target.maxContext;
        if (ids.size() + maxNew <= window) return new Object[] {ids, 0};
        for (int limit : new int[] {window / 2, window}) {
            for (int drop = 1; drop <= turns.size(); drop++) {
                ids = conversation(drop, mine);
                if (ids.size() + maxNew <= limit) return new Object[] {ids, drop};
            }
        }
        if (ids.size() < window) return new Object[] {ids, turns.size()};
        throw new IllegalArgumentException("the message does not fit the context window of " + window + " tokens");
    }

    /** Start a new conversation (the target's cache is reused as far as the new one shares its start). */
    public void newConversation() {
        turns.clear();
        droppedTurns = 0;
    }

    /**
     * One greedy reply; `speculative` off runs the target alone (the baseline), `learn` trains cache and head,
     * `useLookup` adds lookup proposals (hybrid with the drafter).
     */
    public Reply reply(String message, int maxNew, boolean speculative, boolean learn, boolean autoDraftLen,
                       boolean useLookup, SpeculativeLoop.TokenSink onToken) {
        Object[] prepared = chatPrompt(message, maxNew);
        @SuppressWarnings("unchecked")
        List<Integer> prompt = (List<Integer>) prepared[0];
        int drop = (Integer) prepared[1];
        DraftLength length = autoDraftLen && head != null
                ? new DraftLength(DraftLength.Policy.AUTO, 4, maxDraftLen, 0.5)
                : new DraftLength(DraftLength.Policy.FIXED, Math.min(4, maxDraftLen), maxDraftLen, 0.5);
        DraftModel drafting = new DraftModel(drafter, bridge, List.of(), learn ? cache : null, length,
                targetTok.pieceId("<bos>"), learn ? onlineHead : null, learn && trainer != null, policy);
        Proposer proposer = !speculative ? null : !useLookup ? drafting
                : new HybridProposer(new LookupProposer(lookup, scorer, learn, policy), drafting, hybrid);
        SpeculativeLoop loop = new SpeculativeLoop(target, proposer);
        for (org.omnidraft.core.ModelRunner m : new org.omnidraft.core.ModelRunner[] {target, drafter}) {
            m.oneToken.clear();
            m.several.clear();
        }
        long t0 = System.nanoTime();
        SpeculativeLoop.Result r = loop.generate(prompt, maxNew, new Sampler(0, 1), Math::random, chatEos, onToken);
        Reply out = new Reply();
        out.seconds = (System.nanoTime() - t0) / 1e9;
        out.text = targetTok.decode(r.tokens);
        out.tokens = r.tokens.size();
        out.targetCalls = r.targetCalls;
        out.drafted = r.drafted;
        out.accepted = r.accepted;
        out.lookupAccepted = r.lookupAccepted;
        out.timings = org.omnidraft.core.CallTimes.summary(target, speculative ? drafter : null);
        out.droppedTurns = drop;
        List<Integer> turn = new ArrayList<>(userTurn(message)); // kept as the target read and wrote it
        turn.addAll(r.tokens);
        turn.add(targetTok.pieceId("<end_of_turn>"));
        turn.addAll(targetTok.encode("\n"));
        turns.subList(0, drop).clear();
        turns.add(turn);
        droppedTurns += drop;
        if (learn && onlineHead != null) onlineHead.update(30, 0.03, 0.1);
        TrainingExample example = drafting.lastExample();
        if (speculative && example != null && !example.isEmpty()) adapt(example);
        return out;
    }

    /** The Python adapter's schedule and guard (OnlineSchedule, AdaptConfig's defaults): every 4 replies, 8
     *  update steps through the newest replies, kept unless the drafter's greedy acceptance on the held-out
     *  replies falls clearly below the drafter's without its adapter. */
    private void adapt(org.omnidraft.core.TrainingExample example) {
        if (!schedule.add(example)) return;
        LoraTrainer.State saved = trainer.state();
        for (List<org.omnidraft.core.TrainingExample> batch : schedule.batches()) lastLoss = trainer.step(batch);
        double after = schedule.acceptance(drafter, drafterChunk);
        double floor = trainer.withoutAdapter(() -> schedule.acceptance(drafter, drafterChunk));
        updates++;
        // NaN (nothing held out yet) keeps the update
        if (!Double.isNaN(after) && !OnlineSchedule.guardKeeps(after, floor, schedule.heldOutUnits(), policy.guardMargin)) {
            trainer.restore(saved);
            rollbacks++;
        }
        drafter.rollback(0); // new weights: the drafter's cached keys and values are stale
    }

    /** Keep what was learned (written to a temporary file, then renamed). */
    public void saveCache() throws IOException {
        StringBuilder b = new StringBuilder();
        b.append("{\"format\":\"omnidraft-ngram-cache\",\"version\":1,\"pair_id\":\"").append(pairId)
                .append("\",\"max_entries\":").append(cache.maxEntries).append(",\"max_ngram\":").append(cache.maxNgram)
                .append(",\"entries\":[");
        boolean first = true;
        for (Object[] e : cache.items()) {
            if (!first) b.append(',');
            first = false;
            b.append('[').append(e[0].toString().replace(" ", "")).append(',').append(e[1]).append(',').append(e[2]).append(']');
        }
        b.append("]}");
        File tmp = new File(cacheFile.getPath() + ".tmp");
        Files.writeString(tmp.toPath(), b.toString(), StandardCharsets.UTF_8);
        Files.move(tmp.toPath(), cacheFile.toPath(), java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }

    public void close() {
        target.close();
        drafter.close();
        if (trainer != null) trainer.close();
    }
}
