#!/bin/sh
# Run HERE (a Debian machine with `make deps` done), from the project root:
#     sh scripts/gpu/prepare.sh [DEST]        # DEST defaults to .gpu
# Fills DEST with what a GPU machine (no package registry, no LLVM headers)
# lacks to build the whole extension, the LLVM CPU back end included:
# Debian's libllvm19 / libz3-4 / libxxhash0 packages, the LLVM-C headers
# (with the llvm/Config headers they include), xxhash.h and the stand-in
# llvm-config. About 33 MB: keep DEST out of git (.git/info/exclude) and
# carry it to the GPU machine, where scripts/gpu/build.sh uses it.
set -e
DEST=${1:-.gpu}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v llvm-config-19 >/dev/null || {
    echo "gpu/prepare.sh: needs llvm-19-dev here (make deps installs it)" >&2
    exit 1
}
mkdir -p "$DEST/inc"
(cd "$DEST" && apt-get download libllvm19 libz3-4 libxxhash0 >/dev/null 2>&1) \
  || { apt-get update -qq && (cd "$DEST" && apt-get download libllvm19 libz3-4 libxxhash0); }
INC=$(llvm-config-19 --includedir)
rm -rf "$DEST/inc/llvm-c" && cp -rL "$INC/llvm-c" "$DEST/inc/"
for h in $(grep -rh '#include "llvm/' "$DEST/inc/llvm-c" | sed 's/.*"\(.*\)".*/\1/' | sort -u); do
    mkdir -p "$DEST/inc/$(dirname "$h")"
    cp -L "$INC/$h" "$DEST/inc/$h"
done
cp /usr/include/xxhash.h "$DEST/inc/"
cp "$HERE/llvm-config" "$DEST/llvm-config"
chmod +x "$DEST/llvm-config"
du -sh "$DEST"
