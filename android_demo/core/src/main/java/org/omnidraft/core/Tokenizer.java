package org.omnidraft.core;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A Hugging Face tokenizer.json (BPE) seen as bytes, as omnidraft/runtime/vocab.py sees it.
 *
 * Two kinds: byte-level BPE (SmolLM2 and GPT-2: GPT-2's regex pre-tokenizer; Llama-3 and
 * Qwen2: their own split regex; every character of a token stands for one byte) and
 * SentencePiece-style BPE (Gemma: spaces become "▁", no pre-tokenizer, "<0xAB>"
 * byte-fallback tokens; Phi-3: the same with a "▁" prepended to the text). Every id spells a byte string
 * ({@link #tokenBytes}); {@link #encode} matches the Python tokenizer with special tokens
 * treated as plain text (split_special_tokens=True), and {@link #encodeBytes} spells any
 * bytes, cut UTF-8 included, like Vocab.encode_bytes.
 */
public final class Tokenizer {
    private static final String GPT2_PATTERN =
            "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    private static final Pattern BYTE_FALLBACK = Pattern.compile("^<0x([0-9A-Fa-f]{2})>$");

    public final byte[][] tokenBytes;
    public final boolean[] special;
    public final boolean[] byteFallback;
    public final int[] byteTokens = new int[256];
    public final String fingerprint;

    private final boolean byteLevel;
    private final boolean bpeByteFallback;
    private final Map<String, Integer> vocab = new HashMap<>();
    private final Map<String, Integer> mergeRank = new HashMap<>();
    private final List<String> addedText = new ArrayList<>(); // non-special added tokens: matched as units
    private final Map<String, Integer> addedIds = new HashMap<>();
    private final List<String[]> normalizers = new ArrayList<>(); // {kind, a, b}, applied in order
    private final Pattern pretokenizer;
    private final char[] byteToChar = new char[256];

    public static Tokenizer load(Path tokenizerJson) throws IOException {
        return new Tokenizer(Json.object(Json.parse(Files.readString(tokenizerJson, StandardCharsets.UTF_8))));
    }

    public Tokenizer(Map<String, Object> spec) {
        Map<String, Object> model = Json.object(spec.get("model"));
        if (!"BPE".equals(model.get("type"))) throw new IllegalArgumentException("only BPE tokenizers are supported");
        bpeByteFallback = Boolean.TRUE.equals(model.get("byte_fallback"));
        List<Map<String, Object>> decoders = new ArrayList<>();
        flatten(spec.get("decoder"), "decoders", decoders);
        boolean bl = false, fallbackDecoder = false;
        List<String[]> replacements = new ArrayList<>();
        for (Map<String, Object> d : decoders) {
            String type = (String) d.get("type");
            if (type.equals("ByteLevel")) bl = true;
            if (type.equals("ByteFallback")) fallbackDecoder = true;
            if (type.equals("Replace")) {
                Map<String, Object> pat = Json.object(d.get("pattern"));
                if (pat.containsKey("String")) replacements.add(new String[] {(String) pat.get("String"), (String) d.get("content")});
            }
            if (type.equals("Metaspace")) {
                Object r = d.get("replacement");
                replacements.add(new String[] {r == null ? "\u2581" : (String) r, " "});
            }
        }
        byteLevel = bl;
        int[] printable = gpt2Printable();
        for (int b = 0; b < 256; b++) byteToChar[b] = (char) printable[b];
        Map<Character, Integer> charToByte = new HashMap<>();
        for (int b = 0; b < 256; b++) charToByte.put(byteToChar[b], b);

        Map<String, Object> pieces = Json.object(model.get("vocab"));
        int size = 0;
        for (Map.Entry<String, Object> e : pieces.entrySet()) {
            int id = ((Number) e.getValue()).intValue();
            vocab.put(e.getKey(), id);
            size = Math.max(size, id + 1);
        }
        Map<Integer, Map<String, Object>> added = new HashMap<>();
        for (Object o : Json.array(spec.getOrDefault("added_tokens", new ArrayList<>()))) {
            Map<String, Object> a = Json.object(o);
            int id = ((Number) a.get("id")).intValue();
            added.put(id, a);
            size = Math.max(size, id + 1);
        }
        tokenBytes = new byte[size][];
        special = new boolean[size];
        byteFallback = new boolean[size];
        for (int i = 0; i < size; i++) tokenBytes[i] = new byte[0];
        for (Map.Entry<String, Integer> e : vocab.entrySet()) {
            int id = e.getValue();
            if (added.containsKey(id)) continue;
            String piece = e.getKey();
            if (byteLevel) {
                tokenBytes[id] = byteLevelBytes(piece, charToByte);
                continue;
            }
            Matcher m = fallbackDecoder ? BYTE_FALLBACK.matcher(piece) : null;
            if (m != null && m.matches()) {
                tokenBytes[id] = new byte[] {(byte) Integer.parseInt(m.group(1), 16)};
                byteFallback[id] = true;
                continue;
            }
            for (String[] r : replacements) piece = piece.replace(r[0], r[1]);
            tokenBytes[id] = piece.getBytes(StandardCharsets.UTF_8);
        }
        for (Map.Entry<Integer, Map<String, Object>> e : added.entrySet()) {
            String content = (String) e.getValue().get("content");
            tokenBytes[e.getKey()] = content.getBytes(StandardCharsets.UTF_8);
            special[e.getKey()] = Boolean.TRUE.equals(e.getValue().get("special"));
            if (!special[e.getKey()]) {
                addedText.add(content);
                addedIds.put(content, e.getKey());
            }
        }
        for (int i = 0; i < size; i++) if (tokenBytes[i].length == 0) special[i] = true;
        java.util.Arrays.fill(byteTokens, -1);
        for (int i = 0; i < size; i++) {
            byte[] b = tokenBytes[i];
            if (b.length == 1 && !special[i] && (byteTokens[b[0] & 0xff] < 0 || byteFallback[i])) byteTokens[b[0] & 0xff] = i;
        }
        fingerprint = fingerprint(tokenBytes, special);

        int rank = 0;
        for (Object o : Json.array(model.get("merges"))) {
            String a, b;
            if (o instanceof String) {
                String s = (String) o;
                int sp = s.indexOf(' ');
                a = s.substring(0, sp);
                b = s.substring(sp + 1);
            } else {
                List<Object> pair = Json.array(o);
                a = (String) pair.get(0);
                b = (String) pair.get(1);
            }
            mergeRank.putIfAbsent(key(a, b), rank++);
        }
        List<Map<String, Object>> norms = new ArrayList<>();
        flatten(spec.get("normalizer"), "normalizers", norms);
        for (Map<String, Object> n : norms) {
            String type = (String) n.get("type");
            if (type.equals("Replace") && Json.object(n.get("pattern")).containsKey("String")) {
                normalizers.add(new String[] {"replace", (String) Json.object(n.get("pattern")).get("String"), (String) n.get("content")});
            } else if (type.equals("Prepend")) {
                normalizers.add(new String[] {"prepend", (String) n.get("prepend"), null});
            } else if (type.equals("NFC")) {
                normalizers.add(new String[] {"nfc", null, null});
            } else {
                throw new IllegalArgumentException("unsupported normalizer " + type);
            }
        }
        Pattern pre = null;
        List<Map<String, Object>> pres = new ArrayList<>();
        flatten(spec.get("pre_tokenizer"), "pretokenizers", pres);
        for (Map<String, Object> p : pres) {
            String type = (String) p.get("type");
            Map<String, Object> pattern = p.containsKey("pattern") ? Json.object(p.get("pattern")) : Map.of();
            if (type.equals("Split") && pattern.containsKey("Regex")) {
                if (!"Isolated".equals(p.get("behavior"))) throw new IllegalArgumentException("unsupported split " + p.get("behavior"));
                pre = Pattern.compile((String) pattern.get("Regex"), Pattern.UNICODE_CHARACTER_CLASS);
            } else if (type.equals("ByteLevel") && !Boolean.FALSE.equals(p.get("use_regex"))) {
                pre = Pattern.compile(GPT2_PATTERN, Pattern.UNICODE_CHARACTER_CLASS);
            }
        }
        pretokenizer = pre;
        addedText.sort((x, y) -> y.length() - x.length()); // longest first at a given position
    }

    public int size() {
        return tokenBytes.length;
    }

    /** The id of a piece exactly as the tokenizer spells it (e.g. "<bos>", "<start_of_turn>"), or -1. */
    public int pieceId(String piece) {
        Integer id = vocab.get(piece);
        if (id != null) return id;
        for (int i = 0; i < tokenBytes.length; i++) {
            if (special[i] && java.util.Arrays.equals(tokenBytes[i], piece.getBytes(StandardCharsets.UTF_8))) return i;
        }
        return -1;
    }

    // -- encoding ----------------------------------------------------------------------
    /** Ids for `text`, no special tokens added, special-token text treated as plain text. */
    public List<Integer> encode(String text) {
        List<Integer> out = new ArrayList<>();
        int start = 0, i = 0;
        while (i < text.length()) {
            String hit = null;
            for (String a : addedText) {
                if (text.startsWith(a, i)) { hit = a; break; }
            }
            if (hit == null) { i++; continue; }
            encodeSegment(text.substring(start, i), out);
            out.add(addedIds.get(hit));
            i += hit.length();
            start = i;
        }
        encodeSegment(text.substring(start), out);
        return out;
    }

    private void encodeSegment(String text, List<Integer> out) {
        if (text.isEmpty()) return;
        for (String[] n : normalizers) {
            if (n[0].equals("replace")) text = text.replace(n[1], n[2]);
            else if (n[0].equals("prepend")) text = n[1] + text;
            else text = java.text.Normalizer.normalize(text, java.text.Normalizer.Form.NFC);
        }
        if (pretokenizer == null) {
            bpe(text, out);
            return;
        }
        Matcher m = pretokenizer.matcher(text);
        int end = 0;
        while (m.find()) { // the matches and the text between them (Split "Isolated")
            if (m.start() > end) piece(text.substring(end, m.start()), out);
            if (m.end() > m.start()) piece(m.group(), out);
            end = m.end();
        }
        if (end < text.length()) piece(text.substring(end), out);
    }

    private void piece(String text, List<Integer> out) {
        if (!byteLevel) {
            bpe(text, out);
            return;
        }
        StringBuilder b = new StringBuilder();
        for (byte x : text.getBytes(StandardCharsets.UTF_8)) b.append(byteToChar[x & 0xff]);
        bpe(b.toString(), out);
    }

    /** Byte-pair merges, lowest rank first (leftmost on ties), as the tokenizers library does. */
    private void bpe(String word, List<Integer> out) {
        List<String> symbols = new ArrayList<>();
        for (int i = 0; i < word.length(); ) {
            int cp = word.codePointAt(i);
            symbols.add(new String(Character.toChars(cp)));
            i += Character.charCount(cp);
        }
        while (symbols.size() > 1) {
            int best = -1, bestRank = Integer.MAX_VALUE;
            for (int i = 0; i + 1 < symbols.size(); i++) {
                Integer r = mergeRank.get(key(symbols.get(i), symbols.get(i + 1)));
                if (r != null && r < bestRank) { bestRank = r; best = i; }
            }
            if (best < 0) break;
            symbols.set(best, symbols.get(best) + symbols.get(best + 1));
            symbols.remove(best + 1);
        }
        for (String s : symbols) {
            Integer id = vocab.get(s);
            if (id != null) { out.add(id); continue; }
            if (!bpeByteFallback) continue; // the library drops what it cannot spell (no unk here)
            for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
                Integer fb = vocab.get(String.format("<0x%02X>", b & 0xff));
                if (fb != null) out.add(fb);
            }
        }
    }

    /** Ids that spell exactly `data` (invalid UTF-8 bytes become byte tokens); lenient skips unspellable bytes. */
    public List<Integer> encodeBytes(byte[] data, boolean lenient) {
        List<Integer> ids = new ArrayList<>();
        int i = 0;
        while (i < data.length) {
            int end = validUtf8End(data, i);
            if (end > i) {
                String text = new String(data, i, end - i, StandardCharsets.UTF_8);
                List<Integer> enc = encode(text);
                if (java.util.Arrays.equals(decodeBytes(enc), java.util.Arrays.copyOfRange(data, i, end))) {
                    ids.addAll(enc);
                } else {
                    for (int j = i; j < end; j++) byteToken(data[j], lenient, ids);
                }
                i = end;
            } else {
                byteToken(data[i], lenient, ids);
                i++;
            }
        }
        return ids;
    }

    private void byteToken(byte b, boolean lenient, List<Integer> ids) {
        int t = byteTokens[b & 0xff];
        if (t >= 0) ids.add(t);
        else if (!lenient) throw new IllegalArgumentException(String.format("tokenizer cannot spell byte 0x%02x", b & 0xff));
    }

    // -- decoding ----------------------------------------------------------------------
    public byte[] decodeBytes(List<Integer> ids) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        for (int id : ids) b.writeBytes(tokenBytes[id]);
        return b.toByteArray();
    }

    public String decode(List<Integer> ids) {
        return new String(decodeBytes(ids), StandardCharsets.UTF_8);
    }

    // -- helpers -----------------------------------------------------------------------
    private static String key(String a, String b) {
        return a.length() + ":" + a + b;
    }

    /** A decoder, normalizer or pre-tokenizer spec as a flat list (a Sequence lists its parts under `key`). */
    private static void flatten(Object spec, String key, List<Map<String, Object>> out) {
        if (spec == null) return;
        Map<String, Object> d = Json.object(spec);
        if ("Sequence".equals(d.get("type"))) {
            for (Object sub : Json.array(d.get(key))) flatten(sub, key, out);
        } else {
            out.add(d);
        }
    }

    private static byte[] byteLevelBytes(String piece, Map<Character, Integer> charToByte) {
        byte[] b = new byte[piece.length()];
        for (int i = 0; i < piece.length(); i++) {
            Integer x = charToByte.get(piece.charAt(i));
            if (x == null) return piece.getBytes(StandardCharsets.UTF_8);
            b[i] = (byte) (int) x;
        }
        return b;
    }

    /** GPT-2's byte -> printable character table (index: byte). */
    private static int[] gpt2Printable() {
        int[] table = new int[256];
        boolean[] printable = new boolean[256];
        for (int b = '!'; b <= '~'; b++) printable[b] = true;
        for (int b = 0xA1; b <= 0xAC; b++) printable[b] = true;
        for (int b = 0xAE; b <= 0xFF; b++) printable[b] = true;
        int n = 0;
        for (int b = 0; b < 256; b++) table[b] = printable[b] ? b : 256 + n++;
        return table;
    }

    /** End of the longest valid UTF-8 run starting at `i` (== i if data[i] starts none). */
    static int validUtf8End(byte[] data, int i) {
        int good = i;
        while (good < data.length) {
            int b = data[good] & 0xff;
            int n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
            if (n == 0 || good + n > data.length) break;
            boolean ok = true;
            for (int k = 1; k < n; k++) if ((data[good + k] & 0xC0) != 0x80) ok = false;
            if (ok && n == 3) {
                int b1 = data[good + 1] & 0xff;
                if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F)) ok = false;
            }
            if (ok && n == 4) {
                int b1 = data[good + 1] & 0xff;
                if ((b == 0xF0 && b1 < 0x90) || (b == 0xF4 && b1 > 0x8F)) ok = false;
            }
            if (!ok) break;
            good += n;
        }
        return good;
    }

    private static String fingerprint(byte[][] tokenBytes, boolean[] special) {
        try {
            MessageDigest d = MessageDigest.getInstance("SHA-256");
            for (int i = 0; i < tokenBytes.length; i++) {
                int n = tokenBytes[i].length;
                d.update(new byte[] {(byte) n, (byte) (n >> 8), (byte) (n >> 16), (byte) (n >> 24)});
                d.update(tokenBytes[i]);
                d.update((byte) (special[i] ? 1 : 0));
            }
            StringBuilder hex = new StringBuilder();
            for (byte b : d.digest()) hex.append(String.format("%02x", b));
            return hex.substring(0, 16);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
