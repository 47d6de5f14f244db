package org.omnidraft.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.List;
import java.util.Map;
import org.junit.Test;

/** bundle.json as Python's export writes it, and damaged copies: the same verdict and field as Python's loader. */
public class BundleManifestTest {
    @Test
    public void readsTheCurrentVersionAsWritten() throws Exception {
        Map<String, Object> g = Golden.load("manifest.json");
        assertEquals(((Number) g.get("version")).intValue(), BundleManifest.VERSION);
        String text = (String) g.get("manifest");
        Map<String, Object> raw = Json.object(Json.parse(text));
        BundleManifest m = BundleManifest.parse(text);
        assertEquals(BundleManifest.VERSION, m.version);
        assertEquals(((Number) raw.get("max_draft_len")).intValue(), m.maxDraftLen);
        assertEquals(raw.get("pair_id"), m.pairId);
        assertEquals(Golden.ints(raw.get("chat_eos_ids")), m.chatEosIds);
        assertEquals(raw.get("ngram_cache"), m.ngramCache);
        Map<String, Object> drafter = Json.object(Json.object(raw.get("models")).get("drafter"));
        assertEquals(Golden.target().fingerprint, m.target.tokenizerFingerprint);
        assertEquals(Golden.drafter().fingerprint, m.drafter.tokenizerFingerprint);
        assertEquals(Golden.target().size(), m.target.vocabSize);
        assertEquals(Json.object(drafter.get("graphs")), m.drafter.graphs);
        assertEquals(((Number) Json.object(drafter.get("acceptance_head")).get("features")).intValue(), m.drafter.acceptanceHeadFeatures);
        assertEquals(0, m.target.acceptanceHeadFeatures);
        assertEquals(List.of("llama"), m.target.executorchOps);
        Map<String, Object> training = Json.object(raw.get("training"));
        assertNotNull(m.training);
        assertTrue(m.training.updateStep);
        assertEquals(((Number) training.get("window")).intValue(), m.training.window);
        assertEquals(((Number) training.get("batch")).intValue(), m.training.batch);
        assertEquals(((Number) training.get("mapped")).intValue(), m.training.mapped);
        assertEquals(TrainingExample.mappedTargets(new VocabBridge(Golden.drafter(), Golden.target())).length, m.training.mapped);
        assertEquals(Json.array(training.get("lora_inputs")).size(), m.training.loraInputs.size());
        assertEquals(Json.object(raw.get("files")).size(), m.fileSizes.size());
    }

    @Test
    public void rejectsWhatPythonRejectsNamingTheSameField() throws Exception {
        Map<String, Object> g = Golden.load("manifest.json");
        List<Object> damaged = Json.array(g.get("damaged"));
        assertTrue(damaged.size() >= 10);
        for (Object d : damaged) {
            String field = (String) Json.object(d).get("field");
            try {
                BundleManifest.parse((String) Json.object(d).get("manifest"));
                fail("accepted a manifest Python rejects (" + field + ")");
            } catch (BundleManifest.Invalid e) {
                assertEquals(field, e.field);
                assertTrue(e.getMessage(), e.getMessage().indexOf('\n') < 0);
            }
        }
        try {
            BundleManifest.parse("{\"format\": \"omnidraft-bundle\", ");
            fail("accepted truncated JSON");
        } catch (BundleManifest.Invalid e) {
            assertEquals("json", e.field);
        }
    }

    @Test
    public void aBundleWithoutTrainingHasNone() throws Exception {
        BundleManifest m = BundleManifest.parse((String) Golden.load("manifest.json").get("without_training"));
        assertNull(m.training);
        assertEquals(1, m.drafter.graphs.size());
    }
}
