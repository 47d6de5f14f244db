package org.omnidraft.core;

import static org.junit.Assert.assertEquals;

import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The tokenizers of the target families users bring (GPT-2, Llama-3, Qwen2, Phi-3, cl100k) and their bridge from the drafter. */
public class FamiliesTest {
    @Test
    public void everyFamilyMatchesPython() throws Exception {
        Map<String, Object> families = Golden.load("families.json");
        assertEquals(List.of("gpt-2", "llama-3", "qwen2", "phi-3", "cl100k"), List.copyOf(families.keySet()));
        for (Map.Entry<String, Object> e : families.entrySet()) {
            Map<String, Object> f = Json.object(e.getValue());
            Map<String, Object> tok = Json.object(f.get("tokenizer"));
            Tokenizer target = Golden.family(e.getKey());
            TokenizerTest.check(e.getKey(), tok, target);
            BridgeTest.check(Json.object(f.get("bridge")), Json.array(tok.get("cases")), Golden.drafter(), target);
        }
    }
}
