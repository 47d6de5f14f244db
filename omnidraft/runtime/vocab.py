"""A tokenizer seen as bytes: every token id spells a byte string.

Cross-vocabulary drafting compares tokens of two tokenizers by the text they
spell. The two families in use spell text differently:
  - byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen): each character of a token
    stands for one byte ("Ġ" is the byte 0x20);
  - SentencePiece-style BPE (Gemma, Llama 2, Mistral): "▁" is a space and
    "<0xE2>" byte-fallback tokens carry single bytes.
`Vocab` reads the tokenizer's own decoder spec to turn every id into its bytes,
so both families compare on one footing, and encodes arbitrary bytes (including
cut UTF-8 sequences) back into ids.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from dataclasses import dataclass, field

import numpy as np

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte <-> printable character table used by byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, (chr(c) for c in chars)))


_BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def _flatten_decoders(spec: dict | None) -> list[dict]:
    if not spec:
        return []
    if spec.get("type") == "Sequence":
        return [d for sub in spec["decoders"] for d in _flatten_decoders(sub)]
    return [spec]


@dataclass
class Vocab:
    """Token ids <-> bytes for one tokenizer (a Hugging Face fast tokenizer)."""

    tokenizer: object
    token_bytes: list[bytes]
    special: np.ndarray  # bool per id: control tokens that never map across vocabularies
    byte_fallback: np.ndarray  # bool per id: "<0xAB>" style single-byte tokens
    byte_tokens: list[int]  # id spelling each single byte 0..255, or -1
    fingerprint: str = field(default="")

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "Vocab":
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        decoders = _flatten_decoders(spec.get("decoder"))
        byte_level = any(d["type"] == "ByteLevel" for d in decoders)
        replacements = [
            (d["pattern"]["String"], d["content"])
            for d in decoders
            if d["type"] == "Replace" and "String" in d.get("pattern", {})
        ]
        for d in decoders:  # older SentencePiece exports use a Metaspace decoder
            if d["type"] == "Metaspace":
                replacements.append((d.get("replacement", "▁"), " "))
        has_byte_fallback = any(d["type"] == "ByteFallback" for d in decoders)

        vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
        size = max(max(vocab.values()) + 1, len(tokenizer))
        added = {a["id"]: a for a in spec.get("added_tokens", [])}
        token_bytes = [b""] * size
        special = np.zeros(size, dtype=bool)
        byte_fallback = np.zeros(size, dtype=bool)
        for piece, idx in vocab.items():
            if idx in added:
                token_bytes[idx] = added[idx]["content"].encode("utf-8")
                special[idx] = bool(added[idx]["special"])
                continue
            if byte_level:
                if all(ch in _BYTE_DECODER for ch in piece):
                    token_bytes[idx] = bytes(_BYTE_DECODER[ch] for ch in piece)
                else:
                    token_bytes[idx] = piece.encode("utf-8")
                continue
            m = _BYTE_FALLBACK.match(piece) if has_byte_fallback else None
            if m:
                token_bytes[idx] = bytes([int(m.group(1), 16)])
                byte_fallback[idx] = True
                continue
            for old, new in replacements:
                piece = piece.replace(old, new)
            token_bytes[idx] = piece.encode("utf-8")
        for idx in tokenizer.all_special_ids:
            if 0 <= idx < size:
                special[idx] = True
        special |= np.array([len(b) == 0 for b in token_bytes])  # ids with no spelling (padding)

        byte_tokens = [-1] * 256
        for idx, b in enumerate(token_bytes):
            if len(b) == 1 and not special[idx] and (byte_tokens[b[0]] < 0 or byte_fallback[idx]):
                byte_tokens[b[0]] = idx
        digest = hashlib.sha256()
        for b, s in zip(token_bytes, special):
            digest.update(len(b).to_bytes(4, "little") + b + bytes([int(s)]))
        return cls(tokenizer, token_bytes, special, byte_fallback, byte_tokens, digest.hexdigest()[:16])

    def padded(self, size: int) -> "Vocab":
        """Cover a model whose logits are wider than its tokenizer (ids with no spelling)."""
        extra = size - len(self.token_bytes)
        if extra <= 0:
            return self
        return Vocab(
            self.tokenizer,
            self.token_bytes + [b""] * extra,
            np.concatenate([self.special, np.ones(extra, dtype=bool)]),
            np.concatenate([self.byte_fallback, np.zeros(extra, dtype=bool)]),
            self.byte_tokens,
            self.fingerprint,
        )

    def __len__(self) -> int:
        return len(self.token_bytes)

    def decode_bytes(self, ids) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids)

    def encode_bytes(self, data: bytes, lenient: bool = False) -> list[int]:
        """Ids that spell exactly `data`; invalid UTF-8 bytes become byte tokens.

        A byte the vocabulary cannot spell at all (byte-level BPE vocabularies may
        lack bytes that never occur in UTF-8, such as 0xFF) raises ValueError, or
        is skipped when `lenient` (the drafter's view of the text may lose it).
        """
        ids: list[int] = []
        for chunk, valid in _utf8_runs(data):
            if valid:
                ids.extend(self._encode_text(chunk.decode("utf-8"), lenient))
            else:
                for b in chunk:
                    if self.byte_tokens[b] >= 0:
                        ids.append(self.byte_tokens[b])
                    elif not lenient:
                        raise ValueError(f"tokenizer cannot spell byte 0x{b:02x}")
        return ids

    def _encode_text(self, text: str, lenient: bool) -> list[int]:
        # split_special_tokens: text that looks like "<eos>" is plain text here.
        ids = self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        if self.decode_bytes(ids) == text.encode("utf-8"):
            return ids
        # The tokenizer dropped or changed something (a byte missing from a byte-level
        # vocabulary, a SentencePiece dummy space): spell that text byte by byte.
        ids = []
        for b in text.encode("utf-8"):
            if self.byte_tokens[b] >= 0:
                ids.append(self.byte_tokens[b])
            elif not lenient:
                raise ValueError(f"tokenizer cannot spell byte 0x{b:02x}")
        return ids


def _utf8_runs(data: bytes):
    """Split bytes into maximal valid UTF-8 runs and single invalid bytes."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:  # the common case: one run
        if data:
            yield data, True
        return
    i, n = 0, len(data)
    while i < n:
        j = i
        decoder = codecs.getincrementaldecoder("utf-8")()
        good_end = i
        while j < n:
            try:
                decoder.decode(data[j : j + 1])
            except UnicodeDecodeError:
                break
            j += 1
            if decoder.getstate()[0] == b"":
                good_end = j
        if good_end > i:
            yield data[i:good_end], True
            i = good_end
        else:
            yield data[i : i + 1], False
            i += 1
