#!/bin/sh
# Run THERE (the GPU machine), from the project root, after carrying DEST
# (made here by scripts/gpu/prepare.sh):
#     sh scripts/gpu/build.sh [DEST] [COMMAND ...]
# Unpacks the carried packages under /opt/llvm19, builds tensorplay._C in
# place (LLVM CPU back end + NVRTC back end; the extension's rpath finds
# libLLVM and libxxhash there), then runs COMMAND if given, e.g.
#     sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu
set -e
DEST=${1:-.gpu}
[ $# -gt 0 ] && shift
D=$(cd "$DEST" && pwd)
R=/opt/llvm19
L=$R/usr/lib/x86_64-linux-gnu
mkdir -p $R
for d in "$D"/*.deb; do dpkg -x "$d" $R; done
[ -e $L/libLLVM-19.so ] || ln -sf libLLVM.so.19.1 $L/libLLVM-19.so
[ -e $L/libxxhash.so ] || ln -sf libxxhash.so.0 $L/libxxhash.so
export LLVM19_ROOT=$R LLVM_CONFIG="$D/llvm-config"
export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
python3 setup.py -q build_ext --inplace -j "$(nproc)"
[ $# -eq 0 ] || exec "$@"
