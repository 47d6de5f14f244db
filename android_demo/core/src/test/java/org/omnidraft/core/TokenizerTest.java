package org.omnidraft.core;

import static org.junit.Assert.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** Both real tokenizers against the Python reference: identity, encode, byte spellings. */
public class TokenizerTest {
    private void check(String role, Tokenizer tok) throws Exception {
        check(role, Json.object(Golden.load("tokenizers.json").get(role)), tok);
    }

    /** One tokenizer against its golden vectors (tokenizers.json per role, families.json per family). */
    static void check(String role, Map<String, Object> g, Tokenizer tok) {
        assertEquals(role + " fingerprint", g.get("fingerprint"), tok.fingerprint);
        assertEquals(((Number) g.get("size")).intValue(), tok.size());
        List<Integer> byteTokens = Golden.ints(g.get("byte_tokens"));
        for (int b = 0; b < 256; b++) assertEquals("byte token " + b, (int) byteTokens.get(b), tok.byteTokens[b]);
        for (Object o : Json.array(g.get("cases"))) {
            Map<String, Object> c = Json.object(o);
            if (c.containsKey("text")) {
                String text = (String) c.get("text");
                assertEquals(role + " encode " + text, Golden.ints(c.get("ids")), tok.encode(text));
                assertEquals(role + " bytes " + text, c.get("bytes_hex"), Golden.hex(tok.decodeBytes(Golden.ints(c.get("ids")))));
                assertEquals(role + " spell " + text, Golden.ints(c.get("spelled")), tok.encodeBytes(text.getBytes(StandardCharsets.UTF_8), true));
            } else {
                byte[] data = Golden.hex((String) c.get("bytes_in_hex"));
                assertEquals(role + " spell bytes " + c.get("bytes_in_hex"), Golden.ints(c.get("spelled")), tok.encodeBytes(data, true));
            }
        }
    }

    @Test
    public void drafterByteLevelBpe() throws Exception {
        check("drafter", Golden.drafter());
    }

    @Test
    public void targetSentencePieceBpe() throws Exception {
        check("target", Golden.target());
    }
}
