"""A GGUF file's header read defensively, before any library parses it.

gguf's reader (and transformers' loader, which uses it) trusts the counts and lengths a file declares: a
98-byte file declaring an array of 2^40 items makes it allocate without end. This walk reads the header
(the key-value fields and the tensor table, GGUF versions 2 and 3) from a memory map and bounds every
declared count, length and tensor extent by the bytes the file really has, so a truncated or forged file is
one clear error; the file is then safe to hand to the library.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import OmniDraftError

MAGIC = b"GGUF"
# value type -> size in bytes of one item (GGUFValueType); 8 = string, 9 = array: sized as they are read
_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass
class GGUFHeader:
    version: int
    fields: dict  # scalar and string fields by key (arrays are checked and skipped)
    tensors: dict  # name -> (shape, ggml type)

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture", ""))


class _Cursor:
    def __init__(self, data, path: Path):
        self.data, self.at, self.path = data, 0, path

    def fail(self, what: str):
        raise OmniDraftError(f"{self.path} is not a readable GGUF file ({what})")

    def take(self, n: int) -> int:
        """Reserve n bytes from here; their start."""
        if n < 0 or self.at + n > len(self.data):
            self.fail(f"declares {n:,} bytes at offset {self.at:,}, past the end of its {len(self.data):,} bytes")
        start, self.at = self.at, self.at + n
        return start

    def unpack(self, fmt: str):
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt)))[0]

    def count(self, item_size: int, what: str) -> int:
        """A uint64 count of items of at least item_size bytes each, bounded by the bytes left."""
        n = self.unpack("<Q")
        if n * item_size > len(self.data) - self.at:
            self.fail(f"declares {n:,} {what}, more than its {len(self.data) - self.at:,} remaining bytes can hold")
        return n

    def string(self) -> str:
        n = self.count(1, "bytes of text")
        raw = self.data[self.take(n) : self.at]
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"a text field at offset {self.at - n:,} is not UTF-8")

    def value(self, kind: int):
        if kind in _FORMATS:
            return self.unpack(_FORMATS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item = self.unpack("<I")
            if item in _SCALARS:
                n = self.count(_SCALARS[item], "array items")
                self.take(n * _SCALARS[item])
            elif item == _STRING:
                for _ in range(self.count(8, "text items")):
                    self.take(self.count(1, "bytes of text"))
            else:
                self.fail(f"an array of unknown type {item}")
            return None
        self.fail(f"unknown value type {kind}")


def read_header(path: Path) -> GGUFHeader:
    """The header of a GGUF file, every declared size checked against the file's own; one clear error otherwise."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                raise OmniDraftError(f"{path} is not a readable GGUF file (no GGUF signature)")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise OmniDraftError(f"cannot read {path}: {e.strerror or e}") from None
    with data:
        c = _Cursor(data, path)
        c.take(4)
        version = c.unpack("<I")
        if version not in (2, 3):
            c.fail(f"version {version}; versions 2 and 3 are read")
        n_tensors = c.unpack("<Q")
        n_fields = c.count(8 + 4 + 1, "fields")
        if n_tensors * (8 + 4 + 8 + 4 + 8) > len(data):
            c.fail(f"declares {n_tensors:,} tensors in {len(data):,} bytes")
        fields = {}
        for _ in range(n_fields):
            key = c.string()
            fields[key] = c.value(c.unpack("<I"))
        tensors, extents = {}, []
        for _ in range(n_tensors):
            name = c.string()
            dims = c.unpack("<I")
            if not 1 <= dims <= MAX_DIMS:
                c.fail(f"tensor {name!r} has {dims} dimensions")
            shape = tuple(c.unpack("<Q") for _ in range(dims))
            kind, offset = c.unpack("<I"), c.unpack("<Q")
            try:
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            except (ValueError, KeyError):
                c.fail(f"tensor {name!r} has unknown type {kind}")
            elements = 1
            for d in shape:
                elements *= d
            if elements % block:
                c.fail(f"tensor {name!r} of shape {list(shape)} does not fill whole blocks of its type")
            tensors[name] = (shape, kind)
            extents.append((name, offset, elements // block * size))
        alignment = fields.get("general.alignment", 32)
        if not isinstance(alignment, int) or not 1 <= alignment <= 1 << 20:
            c.fail(f"alignment {alignment!r}")
        start = -(-c.at // alignment) * alignment
        for name, offset, nbytes in extents:
            if start + offset + nbytes > len(data):
                c.fail(f"tensor {name!r} lies past the end of the file (truncated?)")
    return GGUFHeader(version, fields, tensors)
