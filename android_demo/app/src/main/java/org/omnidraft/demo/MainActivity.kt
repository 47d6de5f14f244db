package org.omnidraft.demo

import android.app.Activity
import android.graphics.Color
import android.os.Bundle
import android.text.SpannableString
import android.text.Spanned
import android.text.style.ForegroundColorSpan
import android.view.ViewGroup.LayoutParams.MATCH_PARENT
import android.view.ViewGroup.LayoutParams.WRAP_CONTENT
import android.widget.Button
import android.widget.EditText
import android.widget.LinearLayout
import android.widget.ScrollView
import android.widget.Switch
import android.widget.TextView
import java.io.ByteArrayOutputStream
import java.io.File
import java.util.concurrent.Executors

/**
 * A chat screen over an OmniDraft bundle pushed to the app's storage (see android_demo/README.md):
 * replies stream as tokens are accepted; the status line shows tokens/s, tokens per target call
 * and acceptance; switches turn speculative decoding (off = the target alone, the baseline),
 * lookup proposals (continuations from the conversation and earlier replies, hybrid with the drafter),
 * online learning (n-gram cache + acceptance head) and adaptive draft length on and off, and colour
 * each token by who proposed it (lookup blue, the drafter green, the target's own token plain).
 */
class MainActivity : Activity() {
    private val worker = Executors.newSingleThreadExecutor()
    private var session: BundleSession? = null
    private lateinit var transcript: TextView
    private lateinit var status: TextView
    private lateinit var input: EditText
    private lateinit var send: Button
    private lateinit var speculative: Switch
    private lateinit var learn: Switch
    private lateinit var autoLen: Switch
    private lateinit var lookup: Switch
    private lateinit var sources: Switch

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val root = LinearLayout(this).apply { orientation = LinearLayout.VERTICAL; setPadding(24, 24, 24, 24) }
        status = TextView(this).apply { text = "loading the bundle..." }
        speculative = Switch(this).apply { text = "speculative decoding"; isChecked = true }
        learn = Switch(this).apply { text = "learn online (n-gram cache, acceptance head, LoRA)"; isChecked = true }
        autoLen = Switch(this).apply { text = "adaptive draft length"; isChecked = true }
        lookup = Switch(this).apply { text = "lookup proposals (context and history)"; isChecked = true }
        sources = Switch(this).apply { text = "colour tokens: lookup blue, drafter green"; isChecked = false }
        transcript = TextView(this).apply { textSize = 16f }
        val scroll = ScrollView(this).apply { addView(transcript) }
        input = EditText(this).apply { hint = "message" }
        send = Button(this).apply { text = "Send"; isEnabled = false; setOnClickListener { onSend() } }
        root.addView(status)
        root.addView(speculative)
        root.addView(learn)
        root.addView(autoLen)
        root.addView(lookup)
        root.addView(sources)
        root.addView(scroll, LinearLayout.LayoutParams(MATCH_PARENT, 0, 1f))
        root.addView(input, LinearLayout.LayoutParams(MATCH_PARENT, WRAP_CONTENT))
        root.addView(send)
        setContentView(root)

        val bundleDir = File(getExternalFilesDir(null), "bundle")
        worker.execute {
            try {
                val s = BundleSession(bundleDir, filesDir)
                session = s
                runOnUiThread {
                    status.text = "ready: ${bundleDir.path}" + if (s.head == null) " (no acceptance head: fixed draft length)" else ""
                    send.isEnabled = true
                }
            } catch (e: BundleSession.BundleError) {
                runOnUiThread { status.text = "cannot use the bundle: ${e.message}" }
            } catch (e: Exception) {
                runOnUiThread { status.text = "cannot load ${bundleDir.path}: ${e.message}" }
            }
        }
    }

    private fun onSend() {
        val s = session ?: return
        val message = input.text.toString().trim()
        if (message.isEmpty()) return
        input.setText("")
        send.isEnabled = false
        transcript.append("\nyou: $message\nmodel: ")
        val spec = speculative.isChecked
        val learning = learn.isChecked
        val auto = autoLen.isChecked
        val useLookup = lookup.isChecked
        val colours = sources.isChecked
        worker.execute {
            val pending = ByteArrayOutputStream() // token bytes not yet a complete UTF-8 character
            val reply = s.reply(message, 128, spec, learning, auto, useLookup) { token, source ->
                pending.write(s.targetTok.tokenBytes[token])
                val bytes = pending.toByteArray()
                val complete = completeUtf8(bytes)
                if (complete > 0) {
                    val piece = String(bytes, 0, complete, Charsets.UTF_8)
                    pending.reset()
                    pending.write(bytes, complete, bytes.size - complete)
                    val colour = if (colours) sourceColour(source) else null
                    runOnUiThread { transcript.append(if (colour == null) piece else coloured(piece, colour)) }
                }
            }
            if (learning) runCatching { s.saveCache() }
            val tps = reply.tokens / maxOf(reply.seconds, 1e-9)
            val perCall = reply.tokens.toDouble() / maxOf(reply.targetCalls, 1)
            val acceptance = if (reply.drafted > 0) reply.accepted.toDouble() / reply.drafted else 0.0
            runOnUiThread {
                status.text = String.format(
                    "%s: %.2f tok/s, %.2f tokens/target call, acceptance %.2f, %d tokens from lookup, n-gram cache %d%s\n%s",
                    if (spec) "speculative" else "target only", tps, perCall, acceptance, reply.lookupAccepted, s.cache.size(),
                    if (s.trainer != null) String.format(", LoRA updates %d (%d rolled back, loss %.3f)", s.updates, s.rollbacks, s.lastLoss) else "",
                    reply.timings
                )
                send.isEnabled = true
            }
        }
    }

    /** How many leading bytes form complete UTF-8 characters. */
    private fun completeUtf8(b: ByteArray): Int {
        var i = 0
        while (i < b.size) {
            val c = b[i].toInt() and 0xff
            val n = when {
                c < 0x80 -> 1
                c >= 0xF0 -> 4
                c >= 0xE0 -> 3
                c >= 0xC0 -> 2
                else -> 1 // a stray continuation byte: let the decoder replace it
            }
            if (i + n > b.size) break
            i += n
        }
        return i
    }

    override fun onDestroy() {
        worker.execute { session?.close() }
        worker.shutdown()
        super.onDestroy()
    }

    private fun sourceColour(source: String): Int? = when (source) {
        "lookup" -> Color.rgb(0, 110, 190)
        "drafter" -> Color.rgb(0, 140, 60)
        else -> null // the target's own correction or bonus token
    }

    private fun coloured(text: String, colour: Int): CharSequence =
        SpannableString(text).apply { setSpan(ForegroundColorSpan(colour), 0, text.length, Spanned.SPAN_EXCLUSIVE_EXCLUSIVE) }
}
